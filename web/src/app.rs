//! What the page and its sections share (wasm32 only): the backend state ([`App`], [`Active`]),
//! DOM helpers (canvas and chart frames, downloads, listeners), error reporting, yielding to the
//! event loop, and what a lost device does.
//!
//! `page` uses the sections (`world::dom`, `llm::dom`, `train::dom`) and they use this module;
//! nothing here uses any of them.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use kernels_gpu::WgpuBackend;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    Blob, CanvasRenderingContext2d, Document, Element, HtmlAnchorElement, HtmlCanvasElement,
    HtmlSelectElement,
};

use crate::report::ParityLine;
use crate::world::{Panel, tick_decimals, ticks};

/// The backend work runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Active {
    WebGpu,
    Cpu,
}

impl Active {
    /// `webgpu` or `cpu`: the text of `#backend` and the picker's value.
    pub(crate) fn id(self) -> &'static str {
        match self {
            Active::WebGpu => "webgpu",
            Active::Cpu => "cpu",
        }
    }
}

/// The page's state: the document, the WebGPU backend when there is one, the backend in use;
/// and, for the page's own panels, whether a run is in progress and the last parity lines.
pub(crate) struct App {
    pub(crate) doc: Document,
    pub(crate) gpu: RefCell<Option<Rc<WgpuBackend>>>,
    pub(crate) active: Cell<Active>,
    pub(crate) busy: Cell<bool>,
    pub(crate) parity: RefCell<Vec<ParityLine>>,
}

impl App {
    /// On the CPU, idle, with no WebGPU backend yet.
    pub(crate) fn new(doc: Document) -> Self {
        App {
            doc,
            gpu: RefCell::new(None),
            active: Cell::new(Active::Cpu),
            busy: Cell::new(false),
            parity: RefCell::new(Vec::new()),
        }
    }
}

pub(crate) type JsResult<T> = Result<T, JsValue>;

/// A JS error value carrying `e`'s message.
pub(crate) fn js_err(e: impl std::fmt::Display) -> JsValue {
    JsValue::from_str(&e.to_string())
}

/// A JS error value as text.
pub(crate) fn describe(e: &JsValue) -> String {
    e.as_string().unwrap_or_else(|| format!("{e:?}"))
}

pub(crate) fn document() -> JsResult<Document> {
    web_sys::window()
        .and_then(|w| w.document())
        .ok_or_else(|| js_err("no document"))
}

/// The element `#id`, or an error naming it.
pub(crate) fn by_id(doc: &Document, id: &str) -> JsResult<Element> {
    doc.get_element_by_id(id)
        .ok_or_else(|| js_err(format!("#{id} is missing from index.html")))
}

/// Sets the text of `#id` when it exists.
pub(crate) fn set_text(doc: &Document, id: &str, text: &str) {
    if let Some(e) = doc.get_element_by_id(id) {
        e.set_text_content(Some(text));
    }
}

/// The body's `data-state` (`ready`, `running`, `done`, `error`): the automation hook.
pub(crate) fn set_body_state(state: &str) {
    if let Some(b) = document().ok().and_then(|d| d.body()) {
        let _ = b.set_attribute("data-state", state);
    }
}

/// Appends a message to `#errors` (and the console): the page keeps working.
pub(crate) fn report_error(msg: &str) {
    web_sys::console::error_1(&JsValue::from_str(msg));
    if let Ok(doc) = document()
        && let Ok(list) = by_id(&doc, "errors")
        && let Ok(li) = doc.create_element("li")
    {
        li.set_text_content(Some(msg));
        let _ = list.append_child(&li);
    }
}

/// Lets the browser paint and handle input before the next piece of work.
pub(crate) async fn next_tick() {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback(&resolve);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// Shows the backend in use in `#backend` and the `#backend-picker`.
pub(crate) fn show_backend(app: &App) {
    let id = app.active.get().id();
    set_text(&app.doc, "backend", id);
    if let Ok(sel) = by_id(&app.doc, "backend-picker")
        && let Ok(sel) = sel.dyn_into::<HtmlSelectElement>()
    {
        sel.set_value(id);
    }
}

/// After a device loss: one recovery attempt, else the CPU from now on.
pub(crate) async fn handle_loss(app: &App, gpu: &WgpuBackend, why: &str) {
    report_error(&format!("WebGPU device lost ({why}); recovering"));
    if let Err(e) = gpu.recover_async().await {
        report_error(&format!(
            "WebGPU recovery failed ({e}); switching to the CPU"
        ));
        app.gpu.borrow_mut().take();
        app.active.set(Active::Cpu);
        set_text(
            &app.doc,
            "notice",
            "CPU backend: the WebGPU device was lost and could not be recovered.",
        );
        show_backend(app);
    }
}

/// Calls `f` on every `event` of `#id`, for the page's lifetime.
pub(crate) fn on(
    app: &Rc<App>,
    id: &str,
    event: &str,
    f: impl Fn(Rc<App>) + 'static,
) -> JsResult<()> {
    let el = by_id(&app.doc, id)?;
    let app = app.clone();
    let cb = Closure::<dyn Fn()>::new(move || f(app.clone()));
    el.add_event_listener_with_callback(event, cb.as_ref().unchecked_ref())?;
    // The page lives as long as its listeners.
    cb.forget();
    Ok(())
}

/// Offers `blob` to the visitor as a download named `filename`.
pub(crate) fn save_download(doc: &Document, blob: &Blob, filename: &str) -> JsResult<()> {
    let url = web_sys::Url::create_object_url_with_blob(blob)?;
    let a: HtmlAnchorElement = doc.create_element("a")?.dyn_into()?;
    a.set_href(&url);
    a.set_download(filename);
    a.click();
    web_sys::Url::revoke_object_url(&url)?;
    Ok(())
}

/// The canvas `#id` and its 2d context, painted white.
pub(crate) fn blank_canvas(
    doc: &Document,
    id: &str,
) -> JsResult<(HtmlCanvasElement, CanvasRenderingContext2d)> {
    let canvas: HtmlCanvasElement = by_id(doc, id)?.dyn_into()?;
    let ctx: CanvasRenderingContext2d = canvas
        .get_context("2d")?
        .ok_or_else(|| js_err("no 2d context"))?
        .dyn_into()?;
    ctx.set_fill_style_str("white");
    ctx.fill_rect(
        0.0,
        0.0,
        f64::from(canvas.width()),
        f64::from(canvas.height()),
    );
    Ok((canvas, ctx))
}

/// A panel's frame, its value ticks on the left and their grid lines.
pub(crate) fn draw_frame(ctx: &CanvasRenderingContext2d, panel: &Panel) -> JsResult<()> {
    let Panel { x, y, w, h, .. } = *panel;
    ctx.set_stroke_style_str("#999");
    ctx.set_line_width(1.0);
    ctx.stroke_rect(x, y, w, h);
    ctx.set_font("11px system-ui, sans-serif");
    ctx.set_fill_style_str("#444");
    ctx.set_text_align("right");
    let ys = ticks(panel.lo, panel.hi, 4);
    let digits = tick_decimals(&ys);
    for v in ys {
        let py = panel.py(v);
        ctx.fill_text(&format!("{v:.digits$}"), x - 6.0, py + 4.0)?;
        ctx.set_stroke_style_str("#eee");
        ctx.begin_path();
        ctx.move_to(x, py);
        ctx.line_to(x + w, py);
        ctx.stroke();
    }
    Ok(())
}
