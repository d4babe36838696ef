//! The Train section's browser glue: the controls, the loss chart, the figures, the parity
//! strip, the zip download and the hand-over to the transformer section.
//!
//! One training step per event-loop turn: each step awaits its loss (a device read on WebGPU),
//! the page redraws, and the loop yields ([`next_tick`]) before the next, so the page stays
//! responsive; pause takes effect between steps. Steps/s and tokens/s count the steps' own time
//! (the backend's step until its loss is read), not the yields, the CPU parity steps or the
//! evaluations. Download and "use these weights" asked for during a run are served between two
//! steps.
//!
//! Hooks: `#train[data-state]` (`idle`, `running`, `paused`, `done`, `error`), `[data-step]`,
//! `[data-loss]`, `[data-first-loss]`, `[data-backend]` (`webgpu` or `cpu`), `[data-start]`
//! (`scratch`, `small` or `finetune`);
//! `#train-parity[data-max-diff][data-max-rel][data-steps][data-within]` (`data-within`: every
//! parity step within `train::PARITY_ATOL` + `train::PARITY_RTOL` |loss|; empty until a parity
//! step ran; on the CPU backend there is nothing to compare, and
//! `[data-skipped]` says why); `#train-eval[data-accuracy][data-step]` (the last held-out
//! exact match, 0..1); `#train-rate[data-steps-per-s][data-tokens-per-s]`;
//! `#train-chart[data-points]`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use kernels_core::{Backend, CpuBackend};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::spawn_local;
use web_sys::{Document, HtmlInputElement, HtmlSelectElement};

use super::{
    Init, PARITY_ATOL, PARITY_RTOL, Settings, Start, Trainer, loss_range, parity_within, zip_files,
};
use crate::app::{
    Active, App, JsResult, blank_canvas, by_id, describe, draw_frame, handle_loss, js_err,
    next_tick, on, report_error, save_download, set_text,
};
use crate::world::{Panel, ticks};

const INPUTS: [&str; 6] = [
    "train-steps",
    "train-batch",
    "train-lr",
    "train-eval-every",
    "train-eval-problems",
    "train-parity-steps",
];

/// What a click asked of a running loop, served between two steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    Download,
    UseWeights,
}

#[derive(Default)]
struct Section {
    /// The run; a running loop (or a download) holds it out of the slot meanwhile.
    trainer: RefCell<Option<Trainer>>,
    running: Cell<bool>,
    pause: Cell<bool>,
    requests: RefCell<Vec<Request>>,
    /// Stop once the held-out accuracy reaches this (`?until=0.9`).
    until: Cell<Option<f64>>,
    /// The backend the run trains on.
    backend: Cell<Option<Active>>,
}

thread_local! {
    static SECTION: Rc<Section> = Rc::new(Section::default());
}

fn section() -> Rc<Section> {
    SECTION.with(Rc::clone)
}

fn attr(doc: &Document, id: &str, name: &str, value: &str) {
    if let Ok(e) = by_id(doc, id) {
        let _ = e.set_attribute(name, value);
    }
}

fn set_state(doc: &Document, state: &str) {
    attr(doc, "train", "data-state", state);
}

fn input(doc: &Document, id: &str) -> JsResult<HtmlInputElement> {
    Ok(by_id(doc, id)?.dyn_into()?)
}

fn start_choice(doc: &Document) -> Start {
    by_id(doc, "train-start")
        .ok()
        .and_then(|e| e.dyn_into::<HtmlSelectElement>().ok())
        .and_then(|s| Start::from_id(&s.value()))
        .unwrap_or(Start::Scratch)
}

/// Picks where the weights start (`scratch`, `small` or `finetune`, from `?start=`), with its
/// default learning rate.
fn choose_start(app: &App, id: &str) {
    let Some(start) = Start::from_id(id) else {
        report_error(&format!(
            "?start={id} is not a start; expected scratch, small or finetune"
        ));
        return;
    };
    if let Ok(sel) =
        by_id(&app.doc, "train-start").and_then(|e| Ok(e.dyn_into::<HtmlSelectElement>()?))
    {
        sel.set_value(start.id());
    }
    if let Ok(i) = input(&app.doc, "train-lr") {
        i.set_value(&start.default_lr().to_string());
    }
}

/// Sets the inputs to the defaults and wires the buttons.
pub(crate) fn wire(app: &Rc<App>) -> JsResult<()> {
    let d = Settings::default();
    let values = [
        d.steps.to_string(),
        d.batch.to_string(),
        d.lr.to_string(),
        d.eval_every.to_string(),
        d.eval_problems.to_string(),
        d.parity_steps.to_string(),
    ];
    for (id, v) in INPUTS.iter().zip(values) {
        input(&app.doc, id)?.set_value(&v);
    }
    on(app, "train-start", "change", |app| {
        if let Ok(i) = input(&app.doc, "train-lr") {
            i.set_value(&start_choice(&app.doc).default_lr().to_string());
        }
    })?;
    on(app, "train-run", "click", |app| {
        // A run started by hand goes to its last step (`?until=` is for automation).
        section().until.set(None);
        spawn_local(async move { run(&app).await })
    })?;
    on(app, "train-pause", "click", |app| {
        let s = section();
        if s.running.get() {
            s.pause.set(true);
        } else if s.trainer.borrow().is_some() {
            spawn_local(async move { resume(&app).await });
        }
    })?;
    on(app, "train-reset", "click", |app| {
        let s = section();
        if s.running.get() {
            report_error("train: pause the run before resetting it");
            return;
        }
        s.trainer.borrow_mut().take();
        clear(&app.doc);
    })?;
    on(app, "train-download", "click", |app| {
        request(&app, Request::Download)
    })?;
    on(app, "train-use", "click", |app| {
        request(&app, Request::UseWeights)
    })?;
    clear(&app.doc);
    Ok(())
}

/// Back to no run: figures emptied, chart blank.
fn clear(doc: &Document) {
    for (name, value) in [
        ("data-step", "0"),
        ("data-loss", ""),
        ("data-first-loss", ""),
    ] {
        attr(doc, "train", name, value);
    }
    for name in [
        "data-max-diff",
        "data-max-rel",
        "data-steps",
        "data-skipped",
    ] {
        attr(doc, "train-parity", name, "");
    }
    attr(doc, "train-eval", "data-accuracy", "");
    attr(doc, "train-eval", "data-step", "");
    attr(doc, "train-rate", "data-steps-per-s", "");
    attr(doc, "train-rate", "data-tokens-per-s", "");
    set_text(doc, "train-parity", "not run");
    set_text(doc, "train-eval", "not run");
    set_text(doc, "train-rate", "not run");
    set_text(doc, "train-status", "press Train");
    set_text(doc, "train-pause", "Pause");
    let _ = draw(doc, &[]);
    set_state(doc, "idle");
}

fn request(app: &Rc<App>, what: Request) {
    let s = section();
    if s.running.get() {
        s.requests.borrow_mut().push(what);
        return;
    }
    let Some(t) = s.trainer.borrow_mut().take() else {
        report_error("train: nothing trained yet");
        return;
    };
    s.running.set(true);
    let app = app.clone();
    spawn_local(async move {
        if let Err(e) = serve(&app, &t, what).await {
            report_error(&format!("train: {}", describe(&e)));
        }
        *s.trainer.borrow_mut() = Some(t);
        s.running.set(false);
    });
}

async fn serve(app: &App, t: &Trainer, what: Request) -> JsResult<()> {
    let step = t.step();
    let files = t.files().await.map_err(js_err)?;
    match what {
        Request::Download => {
            let zip = zip_files("adder-trained", &files).map_err(js_err)?;
            let parts = js_sys::Array::of1(&js_sys::Uint8Array::from(zip.as_slice()));
            let opts = web_sys::BlobPropertyBag::new();
            opts.set_type("application/zip");
            let blob = web_sys::Blob::new_with_u8_array_sequence_and_options(&parts, &opts)?;
            save_download(&app.doc, &blob, "adder-trained.zip")?;
            attr(
                &app.doc,
                "train-download",
                "data-bytes",
                &zip.len().to_string(),
            );
        }
        Request::UseWeights => {
            let origin = format!("trained in this tab ({step} steps)");
            let src = crate::llm::Source::from_files(&origin, &files).map_err(js_err)?;
            crate::llm::dom::use_trained(app, src);
            set_text(
                &app.doc,
                "train-status",
                &format!("the transformer section now runs the model of step {step}"),
            );
        }
    }
    Ok(())
}

fn read_settings(doc: &Document, seed: u64) -> Result<Settings, String> {
    let mut fields: [String; 6] = Default::default();
    for (slot, id) in fields.iter_mut().zip(INPUTS) {
        *slot = input(doc, id)
            .map(|i| i.value())
            .map_err(|_| format!("#{id} is missing"))?;
    }
    Settings::parse(fields.each_ref().map(String::as_str), seed)
}

/// `?autorun=train`: the inputs from the query where given (`steps`, `batch`, `lr`,
/// `eval_every`, `eval_problems`, `parity_steps`, `start=scratch|small|finetune`), and `until=A`
/// stops the run once the held-out accuracy reaches `A`; then a run, returning when it stops.
pub(crate) async fn autorun(app: &Rc<App>, params: &web_sys::UrlSearchParams) {
    if let Some(start) = params.get("start") {
        choose_start(app, &start);
    }
    for (param, id) in [
        "steps",
        "batch",
        "lr",
        "eval_every",
        "eval_problems",
        "parity_steps",
    ]
    .into_iter()
    .zip(INPUTS)
    {
        if let (Some(v), Ok(i)) = (params.get(param), input(&app.doc, id)) {
            i.set_value(&v);
        }
    }
    let until = params.get("until");
    let s = section();
    match until.as_deref().map(str::parse::<f64>) {
        Some(Ok(u)) if u.is_finite() => s.until.set(Some(u)),
        Some(_) => report_error("?until= is not a number; training to the last step"),
        None => {}
    }
    run(app).await;
}

/// Starts a new run from the inputs and trains until done or paused. Returns when the loop
/// stops.
pub(crate) async fn run(app: &Rc<App>) {
    let s = section();
    if s.running.get() {
        report_error("train: a run is in progress");
        return;
    }
    s.running.set(true);
    let result = start(app, &s).await;
    s.running.set(false);
    match result {
        Ok(()) => train_loop(app, &s).await,
        Err(e) => fail(app, &s, e).await,
    }
}

/// Resumes a paused run.
pub(crate) async fn resume(app: &Rc<App>) {
    let s = section();
    if !s.running.get() {
        train_loop(app, &s).await;
    }
}

async fn start(app: &App, s: &Section) -> JsResult<()> {
    let doc = &app.doc;
    clear(doc);
    let settings = read_settings(doc, 0).map_err(js_err)?;
    let which = app.active.get();
    let gpu = app.gpu.borrow().clone();
    let backend: Rc<dyn Backend> = match (which, gpu) {
        (Active::WebGpu, Some(g)) => g,
        _ => Rc::new(CpuBackend::new()),
    };
    let on_gpu = which == Active::WebGpu;
    let start = start_choice(doc);
    set_state(doc, "running");
    attr(doc, "train", "data-backend", which.id());
    attr(doc, "train", "data-start", start.id());
    set_text(doc, "train-status", "setting up the model...");
    next_tick().await;
    let src = crate::llm::dom::current_source();
    let init = match (start.size(), &src) {
        (Some(size), _) => Init::Scratch(size),
        (None, Some(src)) => Init::Weights(&src.config, &src.checkpoint.tensors),
        (None, None) => return Err(js_err("the transformer section has no model loaded yet")),
    };
    let trainer = Trainer::new(settings, init, backend, on_gpu)
        .await
        .map_err(js_err)?;
    if !on_gpu {
        let why = match app.gpu.borrow().is_some() {
            true => "the CPU backend is selected in the header".to_string(),
            false => by_id(doc, "notice")
                .ok()
                .and_then(|n| n.text_content())
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "no WebGPU device".into()),
        };
        attr(
            doc,
            "train-parity",
            "data-skipped",
            "training runs on the CPU",
        );
        set_text(
            doc,
            "train-parity",
            &format!("no parity strip: training itself runs on the wasm CPU backend ({why})"),
        );
    }
    let params = trainer.model().map_or(0, |m| m.config.num_parameters());
    set_text(
        doc,
        "train-model",
        &format!(
            "{} llama, {params} parameters, on {}",
            if start.size().is_some() {
                "a new"
            } else {
                "the loaded"
            },
            which.id()
        ),
    );
    s.backend.set(Some(which));
    *s.trainer.borrow_mut() = Some(trainer);
    Ok(())
}

/// Trains one step per event-loop turn until done, paused or failed.
async fn train_loop(app: &Rc<App>, s: &Section) {
    let Some(mut t) = s.trainer.borrow_mut().take() else {
        return;
    };
    if t.done() {
        *s.trainer.borrow_mut() = Some(t);
        return;
    }
    s.running.set(true);
    s.pause.set(false);
    set_state(&app.doc, "running");
    set_text(&app.doc, "train-pause", "Pause");
    let result = loop {
        match one_step(app, s, &mut t).await {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
        let pending: Vec<Request> = s.requests.borrow_mut().drain(..).collect();
        for what in pending {
            if let Err(e) = serve(app, &t, what).await {
                report_error(&format!("train: {}", describe(&e)));
            }
        }
        if s.pause.get() {
            break Ok(());
        }
        next_tick().await;
    };
    let step = t.step();
    let over = t.done() || reached(s, &t);
    let summary = format!(
        "done: {step} steps, last loss {:.4}{}",
        t.losses.last().copied().unwrap_or(f32::NAN),
        t.evals.last().map_or(String::new(), |(_, a)| format!(
            ", held-out exact match {:.1}%",
            100.0 * a
        ))
    );
    let lost = matches!(&result, Err(e) if describe(e).contains("device lost"));
    if !lost {
        *s.trainer.borrow_mut() = Some(t);
    }
    s.running.set(false);
    match result {
        Ok(()) if over => {
            set_text(&app.doc, "train-status", &summary);
            set_state(&app.doc, "done")
        }
        Ok(()) => {
            set_text(&app.doc, "train-pause", "Resume");
            set_text(&app.doc, "train-status", &format!("paused at step {step}"));
            set_state(&app.doc, "paused");
        }
        Err(e) => fail(app, s, e).await,
    }
}

fn reached(s: &Section, t: &Trainer) -> bool {
    matches!((s.until.get(), t.evals.last()), (Some(goal), Some(&(_, acc))) if acc >= goal)
}

/// One step, its figures, and the evaluation when due; `false` when the run is over.
async fn one_step(app: &App, s: &Section, tr: &mut Trainer) -> JsResult<bool> {
    let doc = &app.doc;
    if tr.done() || reached(s, tr) {
        return Ok(false);
    }
    let f = tr.train_step().await.map_err(js_err)?;
    if !f.loss.is_finite() {
        return Err(js_err(format!(
            "the loss became {} at step {} (lower the learning rate?)",
            f.loss, f.step
        )));
    }
    attr(doc, "train", "data-step", &f.step.to_string());
    attr(doc, "train", "data-loss", &format!("{:.6}", f.loss));
    if f.step == 1 {
        attr(doc, "train", "data-first-loss", &format!("{:.6}", f.loss));
    }
    if let Some((steps_s, tokens_s)) = tr.rates() {
        attr(
            doc,
            "train-rate",
            "data-steps-per-s",
            &format!("{steps_s:.3}"),
        );
        attr(
            doc,
            "train-rate",
            "data-tokens-per-s",
            &format!("{tokens_s:.1}"),
        );
        set_text(
            doc,
            "train-rate",
            &format!("{steps_s:.2} steps/s, {tokens_s:.0} tokens/s"),
        );
    }
    if let Some((d, r)) = tr.parity_diff() {
        let n = tr.parity.len();
        let within = parity_within(&tr.parity);
        attr(doc, "train-parity", "data-max-diff", &format!("{d:e}"));
        attr(doc, "train-parity", "data-max-rel", &format!("{r:e}"));
        attr(doc, "train-parity", "data-steps", &n.to_string());
        attr(
            doc,
            "train-parity",
            "data-within",
            if within { "true" } else { "false" },
        );
        set_text(
            doc,
            "train-parity",
            &format!(
                "first {n} steps also on the wasm CPU backend (same weights, same batches): \
                 largest loss difference {d:.2e} ({r:.2e} relative), {} the budget \
                 |difference| <= {PARITY_ATOL:e} + {PARITY_RTOL:e} |loss|",
                if within { "within" } else { "OUTSIDE" }
            ),
        );
    }
    set_text(
        doc,
        "train-status",
        &format!(
            "step {} of {}: loss {:.4}",
            f.step, tr.settings.steps, f.loss
        ),
    );
    draw(doc, &tr.losses)?;
    if tr.eval_due() {
        set_text(
            doc,
            "train-status",
            &format!("step {}: evaluating...", f.step),
        );
        let acc = tr.evaluate().await.map_err(js_err)?;
        attr(doc, "train-eval", "data-accuracy", &format!("{acc:.4}"));
        attr(doc, "train-eval", "data-step", &f.step.to_string());
        let history: Vec<String> = tr
            .evals
            .iter()
            .rev()
            .take(6)
            .rev()
            .map(|(s, a)| format!("{s}: {:.1}%", 100.0 * a))
            .collect();
        set_text(
            doc,
            "train-eval",
            &format!(
                "{:.1}% of {} held-out problems (by step: {})",
                100.0 * acc,
                tr.settings.eval_problems,
                history.join(", ")
            ),
        );
    }
    Ok(true)
}

async fn fail(app: &App, s: &Section, e: JsValue) {
    let why = describe(&e);
    if s.backend.get() == Some(Active::WebGpu) && why.contains("device lost") {
        s.trainer.borrow_mut().take();
        let gpu = app.gpu.borrow().clone();
        if let Some(g) = gpu {
            handle_loss(app, &g, &why).await;
        }
    }
    set_text(&app.doc, "train-status", &format!("error: {why}"));
    report_error(&format!("train: {why}"));
    set_state(&app.doc, "error");
}

/// The loss curve over the steps so far.
fn draw(doc: &Document, losses: &[f32]) -> JsResult<()> {
    let (canvas, ctx) = blank_canvas(doc, "train-chart")?;
    let (w, h) = (f64::from(canvas.width()), f64::from(canvas.height()));
    let (lo, hi) = loss_range(losses);
    let panel = Panel {
        x: 56.0,
        y: 24.0,
        w: w - 56.0 - 16.0,
        h: h - 24.0 - 40.0,
        lo,
        hi,
        steps: losses.len().saturating_sub(1).max(1),
    };
    draw_frame(&ctx, &panel)?;
    ctx.set_text_align("center");
    for t in ticks(0.0, panel.steps as f64, 6) {
        let px = panel.px(t.round() as usize);
        ctx.fill_text(
            &format!("{}", t.round() as usize + 1),
            px,
            panel.y + panel.h + 14.0,
        )?;
    }
    ctx.set_font("12px system-ui, sans-serif");
    ctx.fill_text("step", panel.x + panel.w / 2.0, panel.y + panel.h + 32.0)?;
    ctx.set_text_align("left");
    ctx.fill_text(
        "training loss (cross-entropy of the answer's characters)",
        panel.x,
        16.0,
    )?;
    ctx.set_stroke_style_str("#2f5fb3");
    ctx.set_line_width(1.5);
    ctx.begin_path();
    let mut points = 0;
    for (i, l) in losses.iter().enumerate() {
        if !l.is_finite() {
            continue;
        }
        let (px, py) = (panel.px(i), panel.py(f64::from(*l)));
        if points == 0 {
            ctx.move_to(px, py);
        } else {
            ctx.line_to(px, py);
        }
        points += 1;
    }
    ctx.stroke();
    canvas.set_attribute("data-points", &points.to_string())?;
    Ok(())
}
