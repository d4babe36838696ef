//! The wasm CPU backend's threads: how many the page runs and why, shown in `#threads`.
//!
//! The page has two builds (see `web/README.md`): the default one, single-threaded, and a
//! threaded one (`web/build-threads.sh`: nightly Rust, `+atomics,+bulk-memory`, std rebuilt)
//! in `threads/` beside it, whose wasm memory is a `SharedArrayBuffer`. The loader in
//! `Trunk.toml` (`pattern_script`) picks the threaded one only where the page is cross-origin
//! isolated (`crossOriginIsolated`: served with `Cross-Origin-Opener-Policy: same-origin` and
//! `Cross-Origin-Embedder-Policy: require-corp`), and leaves why it did not in
//! `globalThis.__kernelsThreads.reason`.
//!
//! In the threaded build [`start`] starts `?threads=N` less one web workers (default
//! `navigator.hardwareConcurrency`, at most [`MAX_THREADS`]): each instantiates the page's
//! module on its shared memory and runs kernels-core's pool worker ([`pool_worker`]); once they
//! have registered (or after [`WAIT_MS`]) the pool is sealed with them. The page's main thread
//! is the pool's caller: it spins, never blocks, while the workers finish their ranges.
//!
//! Hook: `#threads[data-threads][data-build][data-isolated]` (`data-build` is `threads` or
//! `single`).

use wasm_bindgen::prelude::*;
use web_sys::Document;

use crate::app::{JsResult, by_id};

/// Threads the page starts at most (the caller included).
pub const MAX_THREADS: usize = 16;

/// How long the page waits for its workers to register (milliseconds).
pub const WAIT_MS: f64 = 20_000.0;

/// What the page runs on: threads, which build, and why.
pub struct Threads {
    pub threads: usize,
    pub isolated: bool,
    pub note: String,
}

/// `?threads=N` as a count in `1..=MAX_THREADS` (anything else: none).
pub fn parse_threads(v: Option<&str>) -> Option<usize> {
    let n: usize = v?.trim().parse().ok()?;
    (1..=MAX_THREADS).contains(&n).then_some(n)
}

/// The loader's record (`globalThis.__kernelsThreads`), field `key` as text.
fn loader_field(key: &str) -> Option<String> {
    let rec =
        js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("__kernelsThreads")).ok()?;
    if rec.is_undefined() || rec.is_null() {
        return None;
    }
    js_sys::Reflect::get(&rec, &JsValue::from_str(key))
        .ok()?
        .as_string()
}

/// Whether the page is cross-origin isolated (`SharedArrayBuffer` may be shared with workers).
fn isolated() -> bool {
    js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("crossOriginIsolated"))
        .ok()
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}

/// Starts the pool's workers where this build can, and shows the outcome in `#threads`.
pub async fn start(doc: &Document, requested: Option<&str>) -> JsResult<Threads> {
    let isolated = isolated();
    let t = start_build(isolated, requested).await?;
    let chip = by_id(doc, "threads")?;
    chip.set_text_content(Some(&t.note));
    chip.set_attribute("data-threads", &t.threads.to_string())?;
    chip.set_attribute("data-isolated", if isolated { "true" } else { "false" })?;
    chip.set_attribute("data-build", BUILD)?;
    Ok(t)
}

#[cfg(not(all(feature = "threads", target_feature = "atomics")))]
const BUILD: &str = "single";

#[cfg(all(feature = "threads", target_feature = "atomics"))]
const BUILD: &str = "threads";

/// The single-threaded build: one thread, and the loader's reason for it.
#[cfg(not(all(feature = "threads", target_feature = "atomics")))]
async fn start_build(isolated: bool, _requested: Option<&str>) -> JsResult<Threads> {
    let why = loader_field("reason").unwrap_or_else(|| {
        if isolated {
            "the page is cross-origin isolated, but the threaded build was not loaded".to_string()
        } else {
            NOT_ISOLATED.to_string()
        }
    });
    Ok(Threads {
        threads: 1,
        isolated,
        note: format!("wasm threads: 1 ({why})"),
    })
}

/// Why a page that is not cross-origin isolated runs one thread.
#[cfg(not(all(feature = "threads", target_feature = "atomics")))]
const NOT_ISOLATED: &str = "the page is not cross-origin isolated: its server sends no \
    Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp, so \
    wasm threads (SharedArrayBuffer) are unavailable";

/// A pool worker's entry: the threaded build's workers (`threads/worker.js`) call it after
/// instantiating the module on the page's memory. It never returns.
#[cfg(all(feature = "threads", target_feature = "atomics"))]
#[wasm_bindgen]
pub fn pool_worker() {
    kernels_core::cpu::fast::pool::run_worker()
}

/// Ranges of products the web workers have run so far (0 in the single-threaded build): the
/// end-to-end test's evidence that the threads take part (`wasmBindings.worker_ranges()`).
#[wasm_bindgen]
pub fn worker_ranges() -> f64 {
    #[cfg(all(feature = "threads", target_feature = "atomics"))]
    return kernels_core::cpu::fast::pool::worker_ranges() as f64;
    #[cfg(not(all(feature = "threads", target_feature = "atomics")))]
    0.0
}

/// The threaded build: `requested` threads (default the browser's hardware concurrency).
#[cfg(all(feature = "threads", target_feature = "atomics"))]
async fn start_build(isolated: bool, requested: Option<&str>) -> JsResult<Threads> {
    use kernels_core::cpu::fast::pool;

    let hardware = web_sys::window()
        .map(|w| w.navigator().hardware_concurrency())
        .filter(|h| h.is_finite() && *h >= 1.0)
        .map_or(1, |h| (h as usize).min(MAX_THREADS));
    let want = parse_threads(requested).unwrap_or(hardware);
    let url = loader_field("worker").ok_or_else(|| {
        crate::app::js_err("the threaded build's loader left no worker URL (__kernelsThreads)")
    })?;
    let opts = web_sys::WorkerOptions::new();
    opts.set_type(web_sys::WorkerType::Module);
    let init = js_sys::Array::of2(&wasm_bindgen::module(), &wasm_bindgen::memory());
    for _ in 1..want {
        let w = web_sys::Worker::new_with_options(&url, &opts)?;
        w.post_message(&init)?;
        // The worker runs for the page's life; its handle must outlive this function.
        std::mem::forget(w);
    }
    let start = js_sys::Date::now();
    while pool::registered_workers() + 1 < want && js_sys::Date::now() - start < WAIT_MS {
        sleep_ms(10).await;
    }
    let threads = pool::seal_workers() + 1;
    let source = if parse_threads(requested).is_some() {
        "?threads="
    } else {
        "navigator.hardwareConcurrency"
    };
    let mut note = format!(
        "wasm threads: {threads} (cross-origin isolated; the threaded build, {want} asked by \
         {source})"
    );
    if threads < want {
        note.push_str(&format!(
            "; only {} of {} workers started within {} s",
            threads - 1,
            want - 1,
            WAIT_MS / 1000.0
        ));
    }
    Ok(Threads {
        threads,
        isolated,
        note,
    })
}

/// Resolves after `ms` milliseconds.
#[cfg(all(feature = "threads", target_feature = "atomics"))]
async fn sleep_ms(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}
