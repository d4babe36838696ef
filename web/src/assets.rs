//! The models' weights as static files beside the page (copied into `dist/models/` by trunk,
//! see `index.html`), fetched from the same origin with a progress bar and left to the
//! browser's HTTP cache: the wasm carries code only, and a second visit reads the weights from
//! the cache. The page still needs nothing beyond the static server it came from.

use js_sys::{Reflect, Uint8Array};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{Document, ReadableStreamDefaultReader, Response};

use crate::app::{JsResult, by_id, js_err, set_text};

/// The demo llama's weights (`native-cli/models/adder/model.safetensors`).
pub(crate) const DEMO_WEIGHTS_URL: &str = "models/adder/model.safetensors";
/// The GRU world model's weights (`native-cli/models/world/world.safetensors`).
pub(crate) const WORLD_WEIGHTS_URL: &str = "models/world/world.safetensors";

/// Fetches `url` whole, calling `progress(bytes so far, total if the server says)` as chunks
/// arrive. Fails with the URL and the HTTP status on anything but 200.
pub(crate) async fn fetch_bytes(
    url: &str,
    progress: &dyn Fn(u64, Option<u64>),
) -> JsResult<Vec<u8>> {
    let window = web_sys::window().ok_or_else(|| js_err("no window"))?;
    let response: Response = JsFuture::from(window.fetch_with_str(url))
        .await
        .map_err(|e| js_err(format!("fetching {url}: {}", crate::app::describe(&e))))?
        .dyn_into()?;
    if !response.ok() {
        return Err(js_err(format!(
            "fetching {url}: HTTP {} {}",
            response.status(),
            response.status_text()
        )));
    }
    let total = response
        .headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|v| v.parse::<u64>().ok());
    let Some(body) = response.body() else {
        let buf = JsFuture::from(response.array_buffer()?).await?;
        let bytes = Uint8Array::new(&buf).to_vec();
        progress(bytes.len() as u64, total);
        return Ok(bytes);
    };
    let reader: ReadableStreamDefaultReader = body.get_reader().dyn_into()?;
    let mut bytes = Vec::with_capacity(total.unwrap_or(0).min(1 << 30) as usize);
    loop {
        let chunk = JsFuture::from(reader.read()).await?;
        if Reflect::get(&chunk, &JsValue::from_str("done"))?.is_truthy() {
            break;
        }
        let value: Uint8Array = Reflect::get(&chunk, &JsValue::from_str("value"))?.dyn_into()?;
        bytes.extend_from_slice(&value.to_vec());
        progress(bytes.len() as u64, total);
    }
    Ok(bytes)
}

/// Both models' weights, fetched one after the other with `#load-progress` and `#load-status`
/// showing the bytes; `#load` is hidden when they are in.
pub(crate) async fn fetch_models(doc: &Document) -> JsResult<(Vec<u8>, Vec<u8>)> {
    let files = [
        ("the transformer's weights", DEMO_WEIGHTS_URL),
        ("the world model's weights", WORLD_WEIGHTS_URL),
    ];
    let mut out = Vec::new();
    for (what, url) in files {
        let bar = by_id(doc, "load-progress")?;
        let show = |got: u64, total: Option<u64>| {
            let mb = |b: u64| b as f64 / 1e6;
            let text = match total {
                Some(t) => {
                    let _ =
                        bar.set_attribute("value", &format!("{}", got as f64 / t.max(1) as f64));
                    format!("loading {what}: {:.1} of {:.1} MB", mb(got), mb(t))
                }
                None => format!("loading {what}: {:.1} MB", mb(got)),
            };
            set_text(doc, "load-status", &text);
        };
        show(0, None);
        out.push(fetch_bytes(url, &show).await?);
    }
    if let Ok(load) = by_id(doc, "load") {
        let _ = load.set_attribute("hidden", "");
    }
    let world = out.pop().unwrap_or_default();
    let demo = out.pop().unwrap_or_default();
    Ok((demo, world))
}
