//! The transformer section's browser glue: prompt, streamed output, tokens/s, the file picker.
//!
//! Generation is kernels-chat's, the CLI's: the prompt encoded with the tokenizer's special
//! tokens, one token per step ([`Completion::step`]): each step awaits the device read of its
//! sampled token, shows the text, and yields to the event loop, so the page stays responsive.
//! Decode tokens/s counts the steps' own time, not the yields. What `#llm-output` shows is the
//! continuation in the tokenizer's decode of the prompt's ids and the generated ones.
//!
//! An instruct model (a directory with a chat template) is a chat ([`ChatSession`], as
//! `kernels chat`): the prompt box is the user's message, the conversation so far goes through
//! the model's template, the KV cache is kept between turns (a turn prefills only its own
//! tokens), a conversation past the context drops its oldest turns (said in `#llm-status`), the
//! reply ends at the template's end-of-turn tokens and joins the transcript `#llm-chat`;
//! `#llm-reset` starts a new conversation.
//!
//! Hooks: `#transformer-demo[data-state]` (`idle`, `loading`, `running`, `done`, `error`) and
//! `[data-mode]` (`complete` or `chat`), `#llm-output` (the generated text, without the prompt;
//! in a chat, the last reply), `#llm-chat` (one `p[data-role]` per turn, `user` or
//! `assistant`), `#llm-backend` (`webgpu` or `cpu`: the backend the run used),
//! `#llm-tps[data-prefill][data-decode]` (tokens/s), `#llm-model`.
//!
//! Weights: `#llm-quantize` (`stored`, `q8_0`, `q4_0`, `q4_k`; `?quantize=q4_k` sets it before
//! the demo model loads) quantizes a checkpoint as it loads: the demo model again at once, a
//! picked directory when it is read; a GGUF file keeps its types.
//! `#llm-weights[data-bytes][data-quantize][data-load-ms]` shows the loaded model's weight
//! bytes and types (`data-quantize`: `stored`, `gguf` or the format; `data-load-ms`: reading,
//! parsing and quantizing a picked directory). After a run, `#llm-memory[data-device-bytes]
//! [data-device-peak][data-wasm-bytes][data-upload-ms]`: the WebGPU backend's storage buffers
//! now and at most (its pool counters), the wasm memory's size, and the time the model took
//! to reach the backend (upload, and on WebGPU the warm-up run).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use kernels_chat::{ChatSession, Completion, Decoder, Step, StopWhen};
use kernels_core::models::llama::{GenerateOptions, Generation, Llama, Sampling};
use kernels_core::{Backend, CpuBackend, DType};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{JsFuture, spawn_local};
use web_sys::{Document, File, HtmlInputElement, HtmlSelectElement};
use web_time::Instant;

use super::{
    DEMO_PROMPT, Source, continuation, dir_name, fmt_rate, parse_quantize, rate, stop_text, wanted,
};
use crate::app::{
    Active, App, JsResult, by_id, describe, handle_loss, js_err, next_tick, report_error, set_text,
};

#[derive(Default)]
struct Section {
    source: RefCell<Option<Rc<Source>>>,
    /// The source's model on a backend: `(backend, source generation, model)`.
    model: RefCell<Option<(Active, usize, Rc<Llama>)>>,
    /// Bumped when a new directory is picked, so the model is rebuilt.
    generation: Cell<usize>,
    running: Cell<bool>,
    /// The chat so far (instruct models), with the model it runs on: `(backend, source
    /// generation, session)`; taken out while a turn runs.
    chat: RefCell<Option<(Active, usize, ChatSession)>>,
    /// The demo model's weights file, to load it again when the weights choice changes.
    demo_weights: RefCell<Option<Rc<Vec<u8>>>>,
}

thread_local! {
    static SECTION: Rc<Section> = Rc::new(Section::default());
}

fn section() -> Rc<Section> {
    SECTION.with(Rc::clone)
}

fn set_state(doc: &Document, state: &str) {
    if let Ok(e) = by_id(doc, "transformer-demo") {
        let _ = e.set_attribute("data-state", state);
    }
}

fn input(doc: &Document, id: &str) -> JsResult<HtmlInputElement> {
    Ok(by_id(doc, id)?.dyn_into()?)
}

/// Wires the controls; the demo model comes when the page has fetched it ([`use_demo`]).
pub(crate) fn wire(app: &Rc<App>) -> JsResult<()> {
    input(&app.doc, "llm-prompt")?.set_value(DEMO_PROMPT);
    let run_app = app.clone();
    let on_run = Closure::<dyn Fn()>::new(move || {
        let app = run_app.clone();
        spawn_local(async move { run(&app, None).await });
    });
    by_id(&app.doc, "llm-run")?
        .add_event_listener_with_callback("click", on_run.as_ref().unchecked_ref())?;
    on_run.forget();
    let pick_app = app.clone();
    let on_pick = Closure::<dyn Fn()>::new(move || {
        let app = pick_app.clone();
        spawn_local(async move {
            if let Err(e) = pick(&app).await {
                fail(
                    &app.doc,
                    &format!("loading the directory: {}", describe(&e)),
                );
            }
        });
    });
    by_id(&app.doc, "llm-dir")?
        .add_event_listener_with_callback("change", on_pick.as_ref().unchecked_ref())?;
    on_pick.forget();
    let quantize_doc = app.doc.clone();
    let on_quantize = Closure::<dyn Fn()>::new(move || quantize_changed(&quantize_doc));
    by_id(&app.doc, "llm-quantize")?
        .add_event_listener_with_callback("change", on_quantize.as_ref().unchecked_ref())?;
    on_quantize.forget();
    let reset_doc = app.doc.clone();
    let on_reset = Closure::<dyn Fn()>::new(move || {
        let s = section();
        if !s.running.get() {
            new_conversation(&reset_doc, &s);
        }
    });
    by_id(&app.doc, "llm-reset")?
        .add_event_listener_with_callback("click", on_reset.as_ref().unchecked_ref())?;
    on_reset.forget();
    Ok(())
}

/// Makes the demo model the section's model, from the weights file the page fetched
/// (`models/adder/model.safetensors`); its config and tokenizer are embedded. The weights
/// choice applies.
pub(crate) fn use_demo(app: &App, weights: &[u8]) {
    let s = section();
    *s.demo_weights.borrow_mut() = Some(Rc::new(weights.to_vec()));
    load_demo(&app.doc, &s);
}

fn load_demo(doc: &Document, s: &Section) {
    let Some(weights) = s.demo_weights.borrow().clone() else {
        return;
    };
    let loaded = chosen_quantize(doc).and_then(|q| {
        let mut src = Source::demo(&weights).map_err(js_err)?;
        src.quantize(q).map_err(js_err)?;
        Ok(src)
    });
    match loaded {
        Ok(src) => {
            use_source(doc, s, src);
            set_state(doc, "idle");
        }
        Err(e) => fail(doc, &format!("the demo model: {}", describe(&e))),
    }
}

/// `?quantize=q4_k` (or `stored`, `q8_0`, `q4_0`): the weights choice, set before the demo
/// model loads. A name that is not one is an error on the page.
pub(crate) fn set_quantize(doc: &Document, name: &str) {
    let set = parse_quantize(name)
        .map_err(js_err)
        .and_then(|_| Ok(by_id(doc, "llm-quantize")?.dyn_into::<HtmlSelectElement>()?))
        .map(|select| select.set_value(if name.is_empty() { "stored" } else { name }));
    if let Err(e) = set {
        report_error(&format!("?quantize={name}: {}", describe(&e)));
    }
}

/// The weights choice: `None` keeps the checkpoint's types.
fn chosen_quantize(doc: &Document) -> JsResult<Option<DType>> {
    let select: HtmlSelectElement = by_id(doc, "llm-quantize")?.dyn_into()?;
    parse_quantize(&select.value()).map_err(js_err)
}

/// The weights choice changed: the demo model loads again with it; another model keeps its
/// weights until a directory is picked (its files are not kept).
fn quantize_changed(doc: &Document) {
    let s = section();
    if s.running.get() {
        report_error(
            "transformer: a generation is in progress; the weights choice applies to the next model loaded",
        );
        return;
    }
    let origin = s.source.borrow().as_ref().map(|src| src.origin.clone());
    match origin.as_deref() {
        Some(super::DEMO_ORIGIN) => {
            load_demo(doc, &s);
            set_text(
                doc,
                "llm-status",
                "demo model loaded with the new weights choice",
            );
        }
        _ => set_text(
            doc,
            "llm-status",
            "the weights choice applies to the next directory picked (pick it again)",
        ),
    }
}

/// The section's model as loaded (the Train section fine-tunes it).
pub(crate) fn current_source() -> Option<Rc<Source>> {
    section().source.borrow().clone()
}

/// Makes a model trained in the tab the section's model (the Train section's "use these
/// weights"); refused while a generation runs.
pub(crate) fn use_trained(app: &App, src: Source) {
    let s = section();
    if s.running.get() {
        report_error("transformer: a generation is in progress; use the weights after it");
        return;
    }
    use_source(&app.doc, &s, src);
    set_text(
        &app.doc,
        "llm-status",
        "model trained in the Train section loaded; press Generate",
    );
    set_state(&app.doc, "idle");
}

fn fail(doc: &Document, msg: &str) {
    set_text(doc, "llm-status", &format!("error: {msg}"));
    report_error(&format!("transformer: {msg}"));
    set_state(doc, "error");
}

fn use_source(doc: &Document, s: &Section, src: Source) {
    let c = &src.config;
    set_text(
        doc,
        "llm-model",
        &format!(
            "{}: {} layers, hidden {}, {} heads, vocabulary {}, context {} tokens",
            src.origin,
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.vocab_size,
            c.max_position_embeddings
        ),
    );
    set_text(doc, "llm-weights", &src.weights_text());
    if let Ok(e) = by_id(doc, "llm-weights") {
        let _ = e.set_attribute("data-bytes", &src.weight_bytes().to_string());
        let _ = e.set_attribute("data-quantize", src.quantize_id());
    }
    let chat = src.chat.is_some();
    if let Ok(e) = by_id(doc, "transformer-demo") {
        let _ = e.set_attribute("data-mode", if chat { "chat" } else { "complete" });
    }
    set_text(doc, "llm-run", if chat { "Send" } else { "Generate" });
    set_text(
        doc,
        "llm-prompt-label",
        if chat { "Message" } else { "Prompt" },
    );
    *s.source.borrow_mut() = Some(Rc::new(src));
    s.generation.set(s.generation.get() + 1);
    s.model.borrow_mut().take();
    new_conversation(doc, s);
}

/// Forgets the chat so far.
fn new_conversation(doc: &Document, s: &Section) {
    s.chat.borrow_mut().take();
    set_text(doc, "llm-chat", "");
    set_text(doc, "llm-output", "");
}

/// Adds a turn to the transcript `#llm-chat`.
fn show_turn(doc: &Document, role: &str, text: &str) -> JsResult<()> {
    let p = doc.create_element("p")?;
    p.set_attribute("data-role", role)?;
    p.set_text_content(Some(&format!("{role}: {text}")));
    by_id(doc, "llm-chat")?.append_child(&p)?;
    Ok(())
}

/// Reads the picked directory's model files (nothing else) and makes it the section's model.
async fn pick(app: &Rc<App>) -> JsResult<()> {
    let files = input(&app.doc, "llm-dir")?
        .files()
        .ok_or_else(|| js_err("no files picked"))?;
    let t0 = Instant::now();
    set_state(&app.doc, "loading");
    let quantize = chosen_quantize(&app.doc)?;
    let mut bytes = BTreeMap::new();
    let mut origin = String::from("picked directory");
    for i in 0..files.length() {
        let Some(file) = files.item(i) else { continue };
        let path = relative_path(&file);
        origin = dir_name(&path).to_string();
        let Some(name) = wanted(&path) else { continue };
        set_text(&app.doc, "llm-status", &format!("reading {path}..."));
        let buf = JsFuture::from(file.array_buffer()).await?;
        bytes.insert(name.to_string(), js_sys::Uint8Array::new(&buf).to_vec());
    }
    set_text(&app.doc, "llm-status", "parsing the model...");
    next_tick().await;
    // Taken by value: a GGUF file's bytes are shared by its packed tensors, not copied.
    let mut src = Source::from_owned_files(&origin, bytes).map_err(js_err)?;
    if quantize.is_some() && !src.gguf {
        set_text(&app.doc, "llm-status", "quantizing...");
        next_tick().await;
    }
    src.quantize(quantize).map_err(js_err)?;
    let s = section();
    use_source(&app.doc, &s, src);
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    by_id(&app.doc, "llm-weights")?.set_attribute("data-load-ms", &format!("{ms:.0}"))?;
    set_text(
        &app.doc,
        "llm-status",
        &format!("directory loaded in {:.1} s; press Generate", ms / 1e3),
    );
    set_state(&app.doc, "idle");
    Ok(())
}

fn relative_path(file: &File) -> String {
    js_sys::Reflect::get(file, &JsValue::from_str("webkitRelativePath"))
        .ok()
        .and_then(|v| v.as_string())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| file.name())
}

/// Generates from the prompt box (or `prompt`, which is also put there) on the selected
/// backend.
pub(crate) async fn run(app: &Rc<App>, prompt: Option<&str>) {
    let s = section();
    if s.running.get() {
        report_error("transformer: a generation is in progress");
        return;
    }
    s.running.set(true);
    if let (Some(p), Ok(i)) = (prompt, input(&app.doc, "llm-prompt")) {
        i.set_value(p);
    }
    let result = run_once(app, &s).await;
    s.running.set(false);
    match result {
        Ok(()) => set_state(&app.doc, "done"),
        Err(e) => {
            let why = describe(&e);
            if app.active.get() == Active::WebGpu {
                s.model.borrow_mut().take();
                let gpu = app.gpu.borrow().clone();
                if let Some(g) = gpu
                    && why.contains("device lost")
                {
                    handle_loss(app, &g, &why).await;
                }
            }
            fail(&app.doc, &why);
        }
    }
}

/// The model on the selected backend, built (and, on WebGPU, run once so shader compilation
/// is not in the timings) when the backend or the source changed.
async fn model(app: &App, s: &Section, src: &Source) -> JsResult<(Active, Rc<Llama>)> {
    let which = app.active.get();
    if let Some((b, g, m)) = s.model.borrow().as_ref()
        && *b == which
        && *g == s.generation.get()
    {
        return Ok((which, m.clone()));
    }
    let t0 = Instant::now();
    let gpu = app.gpu.borrow().clone();
    let backend: Rc<dyn Backend> = match (which, gpu) {
        (Active::WebGpu, Some(g)) => g,
        _ => Rc::new(CpuBackend::new()),
    };
    let m = Rc::new(
        Llama::for_inference(src.config.clone(), &src.checkpoint.tensors, backend)
            .map_err(js_err)?,
    );
    if which == Active::WebGpu {
        let opts = GenerateOptions {
            max_new_tokens: 2,
            sampling: Sampling::default(),
            stop_tokens: Vec::new(),
        };
        let mut warm = Generation::start(&m, &[0], &opts).map_err(js_err)?;
        while warm.next_token().await.map_err(js_err)?.is_some() {}
    }
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    by_id(&app.doc, "llm-memory")?.set_attribute("data-upload-ms", &format!("{ms:.0}"))?;
    *s.model.borrow_mut() = Some((which, s.generation.get(), m.clone()));
    Ok((which, m))
}

async fn run_once(app: &App, s: &Section) -> JsResult<()> {
    let doc = &app.doc;
    let src = s
        .source
        .borrow()
        .clone()
        .ok_or_else(|| js_err("no model loaded"))?;
    let text = input(doc, "llm-prompt")?.value();
    let max_tokens: usize = input(doc, "llm-max")?
        .value()
        .trim()
        .parse()
        .map_err(|_| js_err("max tokens: not a whole number"))?;
    set_state(doc, "loading");
    set_text(doc, "llm-output", "");
    set_text(doc, "llm-status", "uploading the model...");
    next_tick().await;
    let (which, model) = model(app, s, &src).await?;
    let badge = by_id(doc, "llm-backend")?;
    badge.set_text_content(Some(which.id()));
    badge.set_attribute("data-backend", which.id())?;
    set_state(doc, "running");
    set_text(doc, "llm-status", "generating...");
    let output = by_id(doc, "llm-output")?;
    let mut timing = Timing::default();
    let (n, why, note) = match &src.chat {
        // A chat: the session (and its KV cache) of this model, or a new one.
        Some(setup) => {
            let key = (which, s.generation.get());
            let kept = s.chat.borrow_mut().take();
            let mut session = match kept {
                Some((b, g, session)) if (b, g) == key => session,
                _ => {
                    let decoder =
                        Decoder::new(&model, Sampling::default(), kernels_chat::CHAT_CONTEXT)
                            .map_err(js_err)?;
                    ChatSession::new(decoder, src.tokenizer.text().clone(), setup.clone(), None)
                }
            };
            let now = (js_sys::Date::now() / 1000.0) as i64;
            let started = session.turn(&text, max_tokens, now);
            let (mut turn, report) = match started {
                Ok(t) => t,
                Err(e) => {
                    *s.chat.borrow_mut() = Some((key.0, key.1, session));
                    return Err(js_err(e));
                }
            };
            timing.prompt_tokens = report.prefill;
            loop {
                let t = Instant::now();
                let Some(step) = turn.step().await.map_err(js_err)? else {
                    break;
                };
                timing.add(&step, t.elapsed().as_secs_f64());
                if !step.piece.is_empty() {
                    output.set_text_content(Some(turn.shown()));
                }
                next_tick().await;
            }
            let (_, reply) = turn.finish().map_err(js_err)?;
            output.set_text_content(Some(&reply.text));
            show_turn(doc, "user", &text)?;
            show_turn(doc, "assistant", &reply.text)?;
            input(doc, "llm-prompt")?.set_value("");
            let note = if report.dropped_messages > 0 {
                format!(
                    "; the conversation outgrew the context: its {} oldest messages were dropped",
                    report.dropped_messages
                )
            } else {
                format!(
                    "; {} of {} prompt tokens from the cache",
                    report.reused, report.prompt_tokens
                )
            };
            *s.chat.borrow_mut() = Some((key.0, key.1, session));
            (reply.ids.len(), stop_text(Some(&reply.stop)), note)
        }
        None => {
            let tok = src.tokenizer.text();
            let prompt = src.tokenizer.encode(&text).map_err(js_err)?;
            let prompt_text = src.tokenizer.decode(&prompt).map_err(js_err)?;
            let capacity = prompt.len().saturating_add(max_tokens);
            let mut decoder =
                Decoder::new(&model, Sampling::default(), capacity).map_err(js_err)?;
            let when = StopWhen {
                max_new_tokens: max_tokens,
                stop_ids: src.config.eos_token_ids.clone(),
                stop_strings: Vec::new(),
                show_stop_id: true,
            };
            let (mut run, _) = Completion::start(&mut decoder, tok, prompt.clone(), &prompt, when)
                .map_err(js_err)?;
            timing.prompt_tokens = prompt.len();
            loop {
                let t = Instant::now();
                let Some(step) = run.step().await.map_err(js_err)? else {
                    break;
                };
                timing.add(&step, t.elapsed().as_secs_f64());
                if !step.piece.is_empty() {
                    output.set_text_content(Some(continuation(run.shown(), &prompt_text)));
                }
                next_tick().await;
            }
            run.finish().map_err(js_err)?;
            output.set_text_content(Some(continuation(run.shown(), &prompt_text)));
            (run.new_ids().len(), stop_text(run.stopped()), String::new())
        }
    };
    let (prefill, decode) = (timing.prefill, timing.decode);
    let prompt_tokens = timing.prompt_tokens;
    let p = rate(prompt_tokens, prefill);
    let d = rate(n.saturating_sub(1), decode);
    let tps = by_id(doc, "llm-tps")?;
    tps.set_attribute(
        "data-prefill",
        &p.map_or(String::new(), |r| format!("{r:.3}")),
    )?;
    tps.set_attribute(
        "data-decode",
        &d.map_or(String::new(), |r| format!("{r:.3}")),
    )?;
    tps.set_text_content(Some(&format!(
        "prefill {} ({} prompt tokens), decode {} ({} tokens)",
        fmt_rate(p),
        prompt_tokens,
        fmt_rate(d),
        n.saturating_sub(1)
    )));
    set_text(doc, "llm-status", &format!("done: {n} tokens, {why}{note}"));
    show_memory(app, which)?;
    Ok(())
}

/// The steps' own time: the first (the prefill) apart from the rest.
#[derive(Default)]
struct Timing {
    prompt_tokens: usize,
    steps: usize,
    prefill: f64,
    decode: f64,
}

impl Timing {
    fn add(&mut self, _step: &Step, secs: f64) {
        if self.steps == 0 {
            self.prefill = secs;
        } else {
            self.decode += secs;
        }
        self.steps += 1;
    }
}

/// `#llm-memory`: the WebGPU backend's storage buffers (in use or pooled) now and at most, and
/// the wasm memory's size.
fn show_memory(app: &App, which: Active) -> JsResult<()> {
    let e = by_id(&app.doc, "llm-memory")?;
    // An ArrayBuffer, or a SharedArrayBuffer in the threaded build: both have `byteLength`.
    let buffer = wasm_bindgen::memory()
        .dyn_into::<js_sys::WebAssembly::Memory>()?
        .buffer();
    let wasm = js_sys::Reflect::get(&buffer, &JsValue::from_str("byteLength"))?
        .as_f64()
        .unwrap_or(0.0);
    e.set_attribute("data-wasm-bytes", &wasm.to_string())?;
    let mut text = format!("wasm memory {:.1} MB", wasm / 1e6);
    let gpu = app.gpu.borrow().clone();
    if let (Active::WebGpu, Some(g)) = (which, gpu) {
        let c = g.counters();
        e.set_attribute("data-device-bytes", &c.storage_bytes.to_string())?;
        e.set_attribute("data-device-peak", &c.peak_storage_bytes.to_string())?;
        text = format!(
            "WebGPU buffers {:.1} MB (peak {:.1} MB), {text}",
            c.storage_bytes as f64 / 1e6,
            c.peak_storage_bytes as f64 / 1e6
        );
    }
    e.set_text_content(Some(&format!("· {text}")));
    Ok(())
}
