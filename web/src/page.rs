//! The browser glue: picks the backend, renders the panels, runs work without blocking. What
//! the sections (`world::dom`, `llm::dom`) share with it is in [`crate::app`]; this file uses
//! the sections, never the other way round.
//!
//! Long work runs case by case and yields to the event loop between cases (`next_tick`), with
//! progress in `#status`; every device read is awaited. A failed op is a failed row; a lost
//! device is reported in `#errors`, recovered once, and otherwise the page falls back to CPU.

use std::rc::Rc;

use kernels_core::{Backend, CpuBackend, Tensor};
use kernels_gpu::bench::{BenchCase, matmul_cases, median, rowwise_cases, time_case_async};
use kernels_gpu::parity::{SMALL_CASE_ELEMS, check_both_async, small_cases};
use kernels_gpu::{WgpuBackend, WgpuOptions};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::spawn_local;
use web_sys::{Document, Element, HtmlSelectElement};

use crate::app::{
    Active, App, JsResult, by_id, describe, document, handle_loss, js_err, next_tick, on,
    report_error, save_download, set_body_state, set_text, show_backend,
};
use crate::report::{
    BenchResult, PARITY_SEED, ParityLine, bench_chart_svg, fmt_time, missing_ops, parity_json,
    summary,
};

/// Bench sizes for the page: small enough for software WebGPU and single-threaded wasm.
const BENCH_MATMUL: [usize; 3] = [64, 128, 256];
const BENCH_ROWS: (usize, usize) = (256, 1024);
const BENCH_RUNS: usize = 5;

#[wasm_bindgen(start)]
pub fn start() {
    spawn_local(async {
        if let Err(e) = run().await {
            report_error(&format!("the page failed to start: {}", describe(&e)));
            set_body_state("error");
        }
    });
}

/// `navigator.gpu` is there: the browser has WebGPU (it may still give no adapter).
fn has_navigator_gpu() -> bool {
    web_sys::window()
        .map(|w| w.navigator())
        .and_then(|n| js_sys::Reflect::get(&n, &JsValue::from_str("gpu")).ok())
        .is_some_and(|g| !g.is_undefined() && !g.is_null())
}

async fn run() -> JsResult<()> {
    let doc = document()?;
    let window = web_sys::window().ok_or_else(|| js_err("no window"))?;
    let params = web_sys::UrlSearchParams::new_with_str(&window.location().search()?)?;
    let forced = params.get("backend");
    let autorun = params.get("autorun");

    let app = Rc::new(App::new(doc.clone()));

    set_text(&doc, "status", "starting the wasm threads...");
    if let Err(e) = crate::threads::start(&doc, params.get("threads").as_deref()).await {
        report_error(&format!("the wasm threads did not start: {}", describe(&e)));
    }

    set_text(&doc, "status", "looking for a WebGPU adapter...");
    let notice = match forced.as_deref() {
        Some("cpu") => "CPU backend: forced by ?backend=cpu.".to_string(),
        _ if !has_navigator_gpu() => {
            "CPU backend: this browser has no navigator.gpu (WebGPU is off or unsupported)."
                .to_string()
        }
        _ => match WgpuBackend::new_async(WgpuOptions::default()).await {
            Ok(gpu) => {
                render_adapter(&doc, &gpu);
                *app.gpu.borrow_mut() = Some(Rc::new(gpu));
                app.active.set(Active::WebGpu);
                String::new()
            }
            Err(e) => format!("CPU backend: WebGPU gave no adapter or device ({e})."),
        },
    };
    if let Some(b) = forced.as_deref()
        && b != "cpu"
        && b != "webgpu"
    {
        report_error(&format!(
            "?backend={b} is not a backend; expected webgpu or cpu"
        ));
    }
    if forced.as_deref() == Some("webgpu") && app.active.get() != Active::WebGpu {
        report_error(&format!("?backend=webgpu was requested, but {notice}"));
    }
    set_text(&doc, "notice", &notice);
    show_backend(&app);
    wire(&app)?;
    if let Some(q) = params.get("quantize") {
        crate::llm::dom::set_quantize(&doc, &q);
    }
    set_text(&doc, "status", "loading the models' weights...");
    match crate::assets::fetch_models(&doc).await {
        Ok((demo, world)) => {
            crate::llm::dom::use_demo(&app, &demo);
            crate::world::dom::set_weights(world);
        }
        Err(e) => {
            let msg = format!("the models' weights did not load: {}", describe(&e));
            set_text(&doc, "load-status", &msg);
            report_error(&msg);
        }
    }
    set_text(&doc, "status", "ready");
    set_body_state("ready");

    match autorun.as_deref() {
        None => {}
        Some(what) => {
            if matches!(what, "parity" | "all") {
                run_parity(&app).await;
            }
            if matches!(what, "bench" | "all") {
                run_bench(&app).await;
            }
            if matches!(what, "gru" | "all") {
                crate::world::dom::run(&app).await;
            }
            if matches!(what, "llm" | "all") {
                crate::llm::dom::run(&app, params.get("prompt").as_deref()).await;
            }
            // Not part of `all`: a whole training run is long.
            // Not part of `all`: a whole training run is long.
            if what == "train" {
                crate::train::dom::autorun(&app, &params).await;
            }
            if !matches!(what, "parity" | "bench" | "gru" | "llm" | "train" | "all") {
                report_error(&format!(
                    "?autorun={what} is not a panel; expected parity, bench, gru, llm, train or \
                     all"
                ));
            }
            set_body_state("done");
        }
    }
    Ok(())
}

/// The adapter as a short card (`#adapter-card`), the device name in the header, and its
/// features and limits, one per line, in the `#adapter` disclosure.
fn render_adapter(doc: &Document, gpu: &WgpuBackend) {
    let info = gpu.adapter_info();
    let name = if info.name.is_empty() {
        "not disclosed by the browser".to_string()
    } else {
        info.name.clone()
    };
    let or_unknown = |s: &str| {
        if s.is_empty() {
            "not disclosed".to_string()
        } else {
            s.to_string()
        }
    };
    let rows = [
        ("adapter", name.clone()),
        ("API", kernels_gpu::adapters::backend_label(info.backend)),
        ("type", format!("{:?}", info.device_type)),
        (
            "vendor / device",
            format!("{:#06x} / {:#06x}", info.vendor, info.device),
        ),
        (
            "driver",
            or_unknown(format!("{} {}", info.driver, info.driver_info).trim()),
        ),
        (
            "subgroups",
            if gpu.uses_subgroups() {
                "in use"
            } else {
                "not used"
            }
            .to_string(),
        ),
        (
            "f16 reads",
            if gpu.uses_shader_f16() {
                "native (shader-f16)"
            } else {
                "integer decoding (no shader-f16)"
            }
            .to_string(),
        ),
        (
            "packed decode products",
            if gpu.uses_per_output_matvec() {
                "one thread per output (software adapter: no barriers)"
            } else {
                "one workgroup per output"
            }
            .to_string(),
        ),
    ];
    if let Ok(card) = by_id(doc, "adapter-card") {
        card.set_inner_html("");
        for (k, v) in rows {
            if let (Ok(dt), Ok(dd)) = (doc.create_element("dt"), doc.create_element("dd")) {
                dt.set_text_content(Some(k));
                dd.set_text_content(Some(&v));
                let _ = card.append_child(&dt);
                let _ = card.append_child(&dd);
            }
        }
    }
    if !info.name.is_empty() {
        set_text(doc, "device-name", &format!("on {}", info.name));
    }
    let features = kernels_gpu::adapters::feature_names(gpu.adapter_features());
    let mut text = format!(
        "features ({}):\n  {}\n\nlimits in use:\n",
        features.len(),
        if features.is_empty() {
            "none".to_string()
        } else {
            features.join("\n  ")
        }
    );
    for (k, v) in kernels_gpu::adapters::limit_list(gpu.limits()) {
        text.push_str(&format!("  {k}: {v}\n"));
    }
    set_text(doc, "adapter", &text);
}

fn wire(app: &Rc<App>) -> JsResult<()> {
    on(app, "run-parity", "click", |app| {
        spawn_local(async move { run_parity(&app).await })
    })?;
    on(app, "run-bench", "click", |app| {
        spawn_local(async move { run_bench(&app).await })
    })?;
    on(app, "export-parity", "click", |app| {
        if let Err(e) = export_parity(&app) {
            report_error(&format!("export failed: {}", describe(&e)));
        }
    })?;
    on(app, "backend-picker", "change", |app| {
        let want = by_id(&app.doc, "backend-picker")
            .ok()
            .and_then(|e| e.dyn_into::<HtmlSelectElement>().ok())
            .map(|s| s.value());
        match want.as_deref() {
            Some("webgpu") if app.gpu.borrow().is_some() => app.active.set(Active::WebGpu),
            Some("webgpu") => {
                report_error("WebGPU is not available here (see the notice); staying on CPU")
            }
            _ => app.active.set(Active::Cpu),
        }
        show_backend(&app);
    })?;
    crate::world::dom::wire(app)?;
    crate::llm::dom::wire(app)?;
    crate::train::dom::wire(app)?;
    Ok(())
}

/// Marks the app busy for the duration of a job; a second job waits for none (it is refused).
fn begin(app: &App, what: &str) -> bool {
    if app.busy.get() {
        report_error(&format!("{what}: another run is in progress"));
        return false;
    }
    app.busy.set(true);
    set_body_state("running");
    true
}

fn end(app: &App, status: &str) {
    app.busy.set(false);
    set_text(&app.doc, "status", status);
    set_body_state("ready");
}

/// The active device backend, or None on the CPU.
fn active_gpu(app: &App) -> Option<Rc<WgpuBackend>> {
    match app.active.get() {
        Active::WebGpu => app.gpu.borrow().clone(),
        Active::Cpu => None,
    }
}

async fn run_parity(app: &Rc<App>) {
    if !begin(app, "parity") {
        return;
    }
    let doc = &app.doc;
    let cases = match small_cases(PARITY_SEED, SMALL_CASE_ELEMS) {
        Ok(c) => c,
        Err(e) => {
            report_error(&format!("parity cases: {e}"));
            end(app, "parity: no cases");
            return;
        }
    };
    let tbody = by_id(doc, "parity-rows");
    if let Ok(t) = &tbody {
        t.set_inner_html("");
    }
    app.parity.borrow_mut().clear();
    let cpu = crate::report::parity_cpu();
    let reference = CpuBackend::reference();
    for (i, case) in cases.iter().enumerate() {
        set_text(
            doc,
            "status",
            &format!(
                "parity: {} of {} cases ({})",
                i + 1,
                cases.len(),
                case.op.name()
            ),
        );
        let cpu_rows = check_both_async(case, &cpu, &reference).await;
        let gpu = active_gpu(app);
        let gpu_rows = match &gpu {
            Some(g) => Some(check_both_async(case, g.as_ref(), &reference).await),
            None => None,
        };
        let lost = gpu_rows.as_ref().and_then(|rows| {
            rows.iter()
                .filter_map(|r| r.error.clone())
                .find(|e| e.contains("device lost"))
        });
        let lines = ParityLine::pair(cpu_rows, gpu_rows);
        for l in &lines {
            if let Ok(t) = &tbody
                && let Err(e) = append_parity_row(doc, t, l)
            {
                report_error(&format!("parity row: {}", describe(&e)));
            }
        }
        app.parity.borrow_mut().extend(lines);
        update_summary(app);
        if let (Some(g), Some(why)) = (&gpu, lost) {
            handle_loss(app, g, &why).await;
        }
        next_tick().await;
    }
    let missing = missing_ops(&app.parity.borrow());
    if !missing.is_empty() {
        report_error(&format!("ops that did not run: {}", missing.join(", ")));
    }
    let s = summary(&app.parity.borrow());
    end(
        app,
        &format!("parity: {} passed, {} failed", s.passed, s.failed),
    );
}

fn update_summary(app: &App) {
    let s = summary(&app.parity.borrow());
    if let Ok(e) = by_id(&app.doc, "parity-summary") {
        let _ = e.set_attribute("data-passed", &s.passed.to_string());
        let _ = e.set_attribute("data-failed", &s.failed.to_string());
        e.set_text_content(Some(&format!("{} passed, {} failed", s.passed, s.failed)));
    }
}

fn cell(doc: &Document, tr: &Element, text: &str) -> JsResult<()> {
    let td = doc.create_element("td")?;
    td.set_text_content(Some(text));
    tr.append_child(&td)?;
    Ok(())
}

fn append_parity_row(doc: &Document, tbody: &Element, l: &ParityLine) -> JsResult<()> {
    let tr = doc.create_element("tr")?;
    tr.set_attribute("data-op", l.kind())?;
    tr.set_attribute("data-dir", l.dir().name())?;
    tr.set_attribute("data-pass", if l.pass() { "true" } else { "false" })?;
    tr.set_attribute("class", if l.pass() { "pass" } else { "fail" })?;
    cell(doc, &tr, l.op())?;
    cell(doc, &tr, l.dir().name())?;
    cell(doc, &tr, &l.cpu.shape)?;
    cell(
        doc,
        &tr,
        &format!(
            "{:.1e} + {:.1e}·|ref| (K={})",
            l.cpu.atol, l.cpu.rtol, l.cpu.k
        ),
    )?;
    for r in std::iter::once(Some(&l.cpu)).chain(std::iter::once(l.gpu.as_ref())) {
        match r {
            Some(r) if r.error.is_none() => {
                cell(doc, &tr, &format!("{:.2e}", r.max_abs_err()))?;
                cell(doc, &tr, &format!("{:.2e}", r.max_rel_err()))?;
                cell(doc, &tr, &fmt_time(r.time))?;
            }
            Some(_) => {
                for _ in 0..3 {
                    cell(doc, &tr, "error")?;
                }
            }
            None => {
                for _ in 0..3 {
                    cell(doc, &tr, "-")?;
                }
            }
        }
    }
    cell(
        doc,
        &tr,
        &match l.failure() {
            None => "pass".to_string(),
            Some(why) => format!("FAIL: {why}"),
        },
    )?;
    tbody.append_child(&tr)?;
    Ok(())
}

fn export_parity(app: &App) -> JsResult<()> {
    let adapter = app
        .gpu
        .borrow()
        .as_ref()
        .map(|g| g.adapter_info().name.clone())
        .unwrap_or_default();
    let json = parity_json(&app.parity.borrow(), app.active.get().id(), &adapter);
    let text = serde_json::to_string_pretty(&json).map_err(js_err)?;
    let parts = js_sys::Array::of1(&JsValue::from_str(&text));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type("application/json");
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts)?;
    save_download(&app.doc, &blob, "parity.json")
}

/// Times one case on one backend: the median of [`BENCH_RUNS`] runs.
async fn bench_one(
    backend: &dyn Backend,
    fence: Option<&Tensor>,
    case: &BenchCase,
) -> Result<std::time::Duration, String> {
    time_case_async(backend, fence, case, BENCH_RUNS)
        .await
        .map(|s| median(&s))
        .map_err(|e| e.to_string())
}

async fn run_bench(app: &Rc<App>) {
    if !begin(app, "bench") {
        return;
    }
    let doc = &app.doc;
    let mut rng = kernels_core::Rng::new(0x6265_6e63);
    let cases = matmul_cases(&BENCH_MATMUL, &mut rng).and_then(|mut c| {
        c.extend(rowwise_cases(BENCH_ROWS.0, BENCH_ROWS.1, &mut rng)?);
        Ok(c)
    });
    let cases = match cases {
        Ok(c) => c,
        Err(e) => {
            report_error(&format!("bench cases: {e}"));
            end(app, "bench: no cases");
            return;
        }
    };
    let tbody = by_id(doc, "bench-rows");
    if let Ok(t) = &tbody {
        t.set_inner_html("");
    }
    let mut results: Vec<BenchResult> = Vec::new();
    let cpu = CpuBackend::new();
    for (i, case) in cases.iter().enumerate() {
        set_text(
            doc,
            "status",
            &format!(
                "bench: {} of {} ({} {})",
                i + 1,
                cases.len(),
                case.bench,
                case.size
            ),
        );
        let mut mine = vec![BenchResult::new(
            case.bench,
            &case.size,
            "cpu",
            &case.work,
            bench_one(&cpu, None, case).await,
        )];
        next_tick().await;
        if let Some(gpu) = active_gpu(app) {
            let timed = match Tensor::zeros(&[1]).and_then(|t| gpu.upload(&t)) {
                Ok(fence) => bench_one(gpu.as_ref(), Some(&fence), case).await,
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = &timed
                && e.contains("device lost")
            {
                handle_loss(app, &gpu, e).await;
            }
            mine.push(BenchResult::new(
                case.bench, &case.size, "webgpu", &case.work, timed,
            ));
        }
        for r in &mine {
            if let Ok(t) = &tbody
                && let Err(e) = append_bench_row(doc, t, r)
            {
                report_error(&format!("bench row: {}", describe(&e)));
            }
            if let Some(e) = &r.error {
                report_error(&format!(
                    "bench {} {} on {}: {e}",
                    r.bench, r.size, r.backend
                ));
            }
        }
        results.extend(mine);
        if let Ok(chart) = by_id(doc, "bench-chart") {
            chart.set_inner_html(&bench_chart_svg(&results));
        }
        next_tick().await;
    }
    end(app, "bench: done");
}

fn append_bench_row(doc: &Document, tbody: &Element, r: &BenchResult) -> JsResult<()> {
    let tr = doc.create_element("tr")?;
    tr.set_attribute("data-bench", &r.bench)?;
    tr.set_attribute("data-backend", &r.backend)?;
    cell(doc, &tr, &r.bench)?;
    cell(doc, &tr, &r.size)?;
    cell(doc, &tr, &r.backend)?;
    cell(
        doc,
        &tr,
        &r.median.map(fmt_time).unwrap_or_else(|| "-".into()),
    )?;
    cell(
        doc,
        &tr,
        &match (r.rate, &r.error) {
            (Some(v), _) => format!("{v:.2} {}", r.unit),
            (None, Some(e)) => format!("error: {e}"),
            (None, None) => "-".into(),
        },
    )?;
    tbody.append_child(&tr)?;
    Ok(())
}
