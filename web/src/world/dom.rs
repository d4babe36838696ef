//! The GRU section's browser glue: controls, the canvas, the timings table.
//!
//! The model is loaded once per backend and kept. A change of the inputs while a run is in
//! progress marks the section dirty; the run loop then goes again with the latest inputs, so
//! the plot always ends on what the visitor last asked for and runs never overlap.
//!
//! Hooks: `#gru-demo[data-state]` (`idle`, `running`, `done`, `error`) and `[data-runs]`,
//! `#gru-plot[data-points][data-finite][data-backend]`, `#gru-rollout-ms[data-backend][data-ms]`
//! (the selected backend), `#gru-times tr[data-backend][data-ms]` (every backend that ran),
//! `#gru-compression[data-rank][data-ratio][data-error]`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use kernels_core::models::world::WorldModel;
use kernels_core::models::world::sim::Lift;
use kernels_core::nn::ParamStore;
use kernels_core::{Backend, CpuBackend};
use kernels_gpu::WgpuBackend;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::spawn_local;
use web_sys::{CanvasRenderingContext2d, Document, HtmlInputElement};

use super::{
    Panel, Prediction, STEP_SECONDS, Series, Settings, agreement, compression_text, fmt_ms,
    points_drawn, predict, tick_decimals, ticks,
};
use crate::app::{
    Active, App, JsResult, blank_canvas, by_id, describe, draw_frame, handle_loss, js_err,
    next_tick, report_error, set_text,
};

const INPUTS: [&str; 6] = [
    "gru-theta1",
    "gru-theta2",
    "gru-omega1",
    "gru-omega2",
    "gru-steps",
    "gru-rank",
];

type Loaded = (WorldModel, ParamStore);

#[derive(Default)]
struct Section {
    /// The weights file, once the page has fetched it ([`set_weights`]).
    weights: RefCell<Option<Rc<Vec<u8>>>>,
    cpu: RefCell<Option<Rc<Loaded>>>,
    /// The model on the WebGPU device it was uploaded to.
    gpu: RefCell<Option<(Rc<WgpuBackend>, Rc<Loaded>)>>,
    running: Cell<bool>,
    dirty: Cell<bool>,
    /// Finished runs (`#gru-demo[data-runs]`: automation waits for it to move).
    runs: Cell<usize>,
    lift: Lift,
}

thread_local! {
    static SECTION: Rc<Section> = Rc::new(Section::default());
}

fn section() -> Rc<Section> {
    SECTION.with(Rc::clone)
}

/// Hands the section the weights file the page fetched (`models/world/world.safetensors`).
pub(crate) fn set_weights(bytes: Vec<u8>) {
    *section().weights.borrow_mut() = Some(Rc::new(bytes));
}

fn weights(s: &Section) -> JsResult<Rc<Vec<u8>>> {
    s.weights
        .borrow()
        .clone()
        .ok_or_else(|| js_err("the world model's weights are not loaded (yet)"))
}

/// Wires the inputs: any change re-runs the section.
pub(crate) fn wire(app: &Rc<App>) -> JsResult<()> {
    let settings = Settings::default();
    let [a, b, c, d] = settings.state;
    let values = [
        format!("{a}"),
        format!("{b}"),
        format!("{c}"),
        format!("{d}"),
        settings.steps.to_string(),
        settings.rank.to_string(),
    ];
    for (id, v) in INPUTS.iter().zip(values) {
        let input: HtmlInputElement = by_id(&app.doc, id)?.dyn_into()?;
        input.set_value(&v);
        let app = app.clone();
        let cb = Closure::<dyn Fn()>::new(move || {
            let app = app.clone();
            spawn_local(async move { run(&app).await });
        });
        input.add_event_listener_with_callback("change", cb.as_ref().unchecked_ref())?;
        cb.forget();
    }
    set_state(&app.doc, "idle");
    Ok(())
}

fn set_state(doc: &Document, state: &str) {
    if let Ok(e) = by_id(doc, "gru-demo") {
        let _ = e.set_attribute("data-state", state);
    }
}

fn read_settings(doc: &Document) -> Result<Settings, String> {
    let mut fields: [String; 6] = Default::default();
    for (slot, id) in fields.iter_mut().zip(INPUTS) {
        *slot = by_id(doc, id)
            .ok()
            .and_then(|e| e.dyn_into::<HtmlInputElement>().ok())
            .map(|i| i.value())
            .ok_or_else(|| format!("#{id} is missing"))?;
    }
    Settings::parse(fields.each_ref().map(String::as_str))
}

/// Runs the section until the inputs stop changing. Returns when the last run is drawn.
pub(crate) async fn run(app: &Rc<App>) {
    let s = section();
    if s.running.get() {
        s.dirty.set(true);
        return;
    }
    s.running.set(true);
    set_state(&app.doc, "running");
    let ok = loop {
        s.dirty.set(false);
        let ok = match run_once(app, &s).await {
            Ok(()) => true,
            Err(e) => {
                set_text(&app.doc, "gru-status", &format!("error: {}", describe(&e)));
                report_error(&format!("GRU world model: {}", describe(&e)));
                false
            }
        };
        if !s.dirty.get() {
            break ok;
        }
    };
    s.running.set(false);
    s.runs.set(s.runs.get() + 1);
    if let Ok(e) = by_id(&app.doc, "gru-demo") {
        let _ = e.set_attribute("data-runs", &s.runs.get().to_string());
    }
    set_state(&app.doc, if ok { "done" } else { "error" });
}

async fn load_cpu(s: &Section) -> JsResult<Rc<Loaded>> {
    if let Some(l) = s.cpu.borrow().clone() {
        return Ok(l);
    }
    let w = weights(s)?;
    let l = Rc::new(WorldModel::load(Rc::new(CpuBackend::new()), &w).map_err(js_err)?);
    *s.cpu.borrow_mut() = Some(l.clone());
    Ok(l)
}

/// The model on `gpu`, uploaded (and run once, so shader compilation is not timed) on first use.
async fn load_gpu(s: &Section, gpu: &Rc<WgpuBackend>, settings: &Settings) -> JsResult<Rc<Loaded>> {
    if let Some((dev, l)) = s.gpu.borrow().as_ref()
        && Rc::ptr_eq(dev, gpu)
    {
        return Ok(l.clone());
    }
    let backend: Rc<dyn Backend> = gpu.clone();
    let w = weights(s)?;
    let l = Rc::new(WorldModel::load(backend, &w).map_err(js_err)?);
    predict(&l.0, &l.1, settings, &s.lift)
        .await
        .map_err(js_err)?;
    *s.gpu.borrow_mut() = Some((gpu.clone(), l.clone()));
    Ok(l)
}

async fn run_once(app: &Rc<App>, s: &Section) -> JsResult<()> {
    let doc = &app.doc;
    let settings = read_settings(doc).map_err(js_err)?;
    let selected = app.active.get();
    let gpu = app.gpu.borrow().clone();
    let mut runs: Vec<(Active, Prediction)> = Vec::new();
    // The selected backend first: its prediction is the one plotted.
    let order: Vec<Active> = match (selected, gpu.is_some()) {
        (Active::WebGpu, true) => vec![Active::WebGpu, Active::Cpu],
        (_, true) => vec![Active::Cpu, Active::WebGpu],
        (_, false) => vec![Active::Cpu],
    };
    for which in order {
        set_text(
            doc,
            "gru-status",
            &format!("rolling out {} steps on {}...", settings.steps, which.id()),
        );
        next_tick().await;
        let result = match (which, &gpu) {
            (Active::WebGpu, Some(g)) => match load_gpu(s, g, &settings).await {
                Ok(l) => predict(&l.0, &l.1, &settings, &s.lift)
                    .await
                    .map_err(js_err),
                Err(e) => Err(e),
            },
            _ => match load_cpu(s).await {
                Ok(l) => predict(&l.0, &l.1, &settings, &s.lift)
                    .await
                    .map_err(js_err),
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(p) => runs.push((which, p)),
            Err(e) if which != selected => {
                // The other backend only adds a timing: the section still shows the selected one.
                let why = describe(&e);
                report_error(&format!("GRU rollout on {}: {why}", which.id()));
                if let (Active::WebGpu, Some(g)) = (which, &gpu)
                    && why.contains("device lost")
                {
                    s.gpu.borrow_mut().take();
                    handle_loss(app, g, &why).await;
                }
            }
            Err(e) => {
                if let (Active::WebGpu, Some(g)) = (which, &gpu) {
                    s.gpu.borrow_mut().take();
                    let why = describe(&e);
                    if why.contains("device lost") {
                        handle_loss(app, g, &why).await;
                    }
                }
                return Err(e);
            }
        }
    }
    let (_, shown) = runs.first().ok_or_else(|| js_err("no backend ran"))?;
    draw(doc, shown, &settings)?;
    show_times(doc, &runs)?;
    let c = &shown.compression;
    let e = by_id(doc, "gru-compression")?;
    e.set_attribute("data-rank", &c.rank.to_string())?;
    e.set_attribute("data-ratio", &format!("{:.4}", c.ratio))?;
    e.set_attribute("data-error", &format!("{:.6}", c.rel_error))?;
    e.set_text_content(Some(&compression_text(c)));
    let fit: Vec<String> = shown
        .series
        .iter()
        .map(|s| format!("{} RMSE {:.3}", s.name, s.rmse()))
        .collect();
    set_text(
        doc,
        "gru-status",
        &format!(
            "{} steps ({:.2} s) on {}: {}",
            settings.steps,
            settings.steps as f64 * STEP_SECONDS,
            shown.backend,
            fit.join(", ")
        ),
    );
    Ok(())
}

fn show_times(doc: &Document, runs: &[(Active, Prediction)]) -> JsResult<()> {
    let ms = |p: &Prediction| p.rollout.as_secs_f64() * 1e3;
    if let Some((which, p)) = runs.first() {
        let e = by_id(doc, "gru-rollout-ms")?;
        e.set_attribute("data-backend", which.id())?;
        e.set_attribute("data-ms", &format!("{:.3}", ms(p)))?;
        e.set_text_content(Some(&format!("{} on {}", fmt_ms(p.rollout), which.id())));
    }
    let tbody = by_id(doc, "gru-times")?;
    tbody.set_inner_html("");
    for (which, p) in runs {
        let tr = doc.create_element("tr")?;
        tr.set_attribute("data-backend", which.id())?;
        tr.set_attribute("data-ms", &format!("{:.3}", ms(p)))?;
        for text in [which.id().to_string(), p.backend.clone(), fmt_ms(p.rollout)] {
            let td = doc.create_element("td")?;
            td.set_text_content(Some(&text));
            tr.append_child(&td)?;
        }
        tbody.append_child(&tr)?;
    }
    let note = match runs {
        [(wa, a), (wb, b), ..] => format!(
            "{} and {} agree to {:.1e} (max abs over every member's features).",
            wa.id(),
            wb.id(),
            agreement(a, b)
        ),
        _ => "Ran on the CPU only: no WebGPU device in use (see the notice above).".to_string(),
    };
    set_text(doc, "gru-agreement", &note);
    Ok(())
}

const TRUTH: &str = "#222";
const MEAN: &str = "#d62728";
const BAND: &str = "rgba(214, 39, 40, 0.2)";

fn draw(doc: &Document, p: &Prediction, settings: &Settings) -> JsResult<()> {
    let (canvas, ctx) = blank_canvas(doc, "gru-plot")?;
    let (w, h) = (f64::from(canvas.width()), f64::from(canvas.height()));
    let (left, right, top, gap, bottom) = (64.0, 16.0, 28.0, 36.0, 44.0);
    let ph = (h - top - gap - bottom) / 2.0;
    let mut points = 0;
    for (i, s) in p.series.iter().enumerate() {
        let panel = Panel::fit(s, left, top + i as f64 * (ph + gap), w - left - right, ph);
        draw_panel(&ctx, &panel, s, i + 1 == p.series.len())?;
        points += points_drawn(s);
    }
    ctx.set_fill_style_str("#222");
    ctx.set_font("13px system-ui, sans-serif");
    ctx.set_text_align("left");
    ctx.fill_text(
        &format!(
            "truth (black) vs ensemble mean (red) ± std (band), {} steps on {}",
            settings.steps, p.backend
        ),
        left,
        18.0,
    )?;
    let finite = p.series.iter().all(Series::all_finite);
    canvas.set_attribute("data-points", &points.to_string())?;
    canvas.set_attribute("data-finite", if finite { "true" } else { "false" })?;
    canvas.set_attribute("data-backend", &p.backend)?;
    Ok(())
}

fn draw_panel(
    ctx: &CanvasRenderingContext2d,
    panel: &Panel,
    s: &Series,
    x_axis: bool,
) -> JsResult<()> {
    let Panel { x, y, w, h, .. } = *panel;
    draw_frame(ctx, panel)?;
    // y label, rotated.
    ctx.save();
    ctx.translate(16.0, y + h / 2.0)?;
    ctx.rotate(-std::f64::consts::FRAC_PI_2)?;
    ctx.set_text_align("center");
    ctx.set_font("12px system-ui, sans-serif");
    ctx.fill_text(s.name, 0.0, 0.0)?;
    ctx.restore();
    // x ticks in seconds.
    ctx.set_text_align("center");
    let seconds = panel.steps as f64 * STEP_SECONDS;
    let xs = ticks(0.0, seconds, 6);
    let digits = tick_decimals(&xs);
    for t in xs {
        let step = (t / STEP_SECONDS).round() as usize;
        ctx.fill_text(&format!("{t:.digits$}"), panel.px(step), y + h + 14.0)?;
    }
    if x_axis {
        ctx.set_font("12px system-ui, sans-serif");
        ctx.fill_text("time (s)", x + w / 2.0, y + h + 32.0)?;
    }
    // Band: mean + std forwards, mean - std backwards.
    let n = s.mean.len();
    ctx.set_fill_style_str(BAND);
    ctx.begin_path();
    for t in 0..n {
        let v = s.mean[t] + s.std[t];
        if t == 0 {
            ctx.move_to(panel.px(t), panel.py(v));
        } else {
            ctx.line_to(panel.px(t), panel.py(v));
        }
    }
    for t in (0..n).rev() {
        ctx.line_to(panel.px(t), panel.py(s.mean[t] - s.std[t]));
    }
    ctx.close_path();
    ctx.fill();
    for (values, color, dash) in [(&s.truth, TRUTH, false), (&s.mean, MEAN, true)] {
        ctx.set_stroke_style_str(color);
        ctx.set_line_width(2.0);
        let pattern = if dash {
            js_sys::Array::of2(&JsValue::from(6), &JsValue::from(4))
        } else {
            js_sys::Array::new()
        };
        ctx.set_line_dash(&pattern)?;
        ctx.begin_path();
        for (t, v) in values.iter().enumerate() {
            if t == 0 {
                ctx.move_to(panel.px(t), panel.py(*v));
            } else {
                ctx.line_to(panel.px(t), panel.py(*v));
            }
        }
        ctx.stroke();
    }
    ctx.set_line_dash(&js_sys::Array::new())?;
    Ok(())
}
