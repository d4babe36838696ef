//! The transformer section's browser glue: prompt, streamed output, tokens/s, the file picker.
//!
//! Generation runs one token per step ([`Generation::next_token`]): each step awaits the device
//! read of its sampled token, appends the token to `#llm-output`, and yields to the event loop,
//! so the page stays responsive. Decode tokens/s counts the steps' own time, not the yields.
//!
//! Streamed text goes through kernels-chat's `TextStream`: what `#llm-output` shows is the
//! tokenizer's decode of the generated ids.
//!
//! An instruct model (a directory with a chat template) is a chat: the prompt box is the user's
//! message, the conversation so far goes through the model's template (the CLI's code), the
//! reply ends at the template's end-of-turn tokens and joins the transcript `#llm-chat`;
//! `#llm-reset` starts a new conversation.
//!
//! Hooks: `#transformer-demo[data-state]` (`idle`, `loading`, `running`, `done`, `error`) and
//! `[data-mode]` (`complete` or `chat`), `#llm-output` (the generated text, without the prompt;
//! in a chat, the last reply), `#llm-chat` (one `p[data-role]` per turn, `user` or
//! `assistant`), `#llm-backend` (`webgpu` or `cpu`: the backend the run used),
//! `#llm-tps[data-prefill][data-decode]` (tokens/s), `#llm-model`.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use kernels_chat::{Message, TextStream};
use kernels_core::models::llama::{GenerateOptions, Generation, Llama, Sampling};
use kernels_core::{Backend, CpuBackend};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{JsFuture, spawn_local};
use web_sys::{Document, File, HtmlInputElement};
use web_time::Instant;

use super::{DEMO_PROMPT, Source, dir_name, fmt_rate, rate, stop_text, wanted};
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
    /// The chat so far (instruct models).
    conversation: RefCell<Vec<Message>>,
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
/// (`models/adder/model.safetensors`); its config and tokenizer are embedded.
pub(crate) fn use_demo(app: &App, weights: &[u8]) {
    match Source::demo(weights) {
        Ok(src) => {
            use_source(&app.doc, &section(), src);
            set_state(&app.doc, "idle");
        }
        Err(e) => fail(&app.doc, &format!("the demo model: {e}")),
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
    s.conversation.borrow_mut().clear();
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
    let src = Source::from_files(&origin, &bytes).map_err(js_err)?;
    let s = section();
    use_source(&app.doc, &s, src);
    set_text(&app.doc, "llm-status", "directory loaded; press Generate");
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
    let gpu = app.gpu.borrow().clone();
    let backend: Rc<dyn Backend> = match (which, gpu) {
        (Active::WebGpu, Some(g)) => g,
        _ => Rc::new(CpuBackend::new()),
    };
    let m = Rc::new(
        Llama::from_tensors(src.config.clone(), &src.checkpoint.tensors, backend)
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
    // A chat renders the conversation with the new message through the model's template.
    let (prompt, stop_tokens) = match &src.chat {
        Some(chat) => {
            let mut messages = s.conversation.borrow().clone();
            messages.push(Message::new("user", &text));
            let now = (js_sys::Date::now() / 1000.0) as i64;
            let ids = chat
                .prompt(&src.tokenizer, &messages, now)
                .map_err(js_err)?;
            (ids, chat.end_of_turn.clone())
        }
        None => (
            src.tokenizer.encode(&text).map_err(js_err)?,
            src.config.eos_token_ids.clone(),
        ),
    };
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
    let opts = GenerateOptions {
        max_new_tokens: max_tokens,
        sampling: Sampling::default(),
        stop_tokens: stop_tokens.clone(),
    };
    let mut run = Generation::start(&model, &prompt, &opts).map_err(js_err)?;
    let mut stream = TextStream::new();
    let mut detokenize = |ids: &[u32]| src.tokenizer.decode(ids);
    let chat = src.chat.is_some();
    let output = by_id(doc, "llm-output")?;
    let mut prefill = 0.0;
    let mut decode = 0.0;
    loop {
        let t = Instant::now();
        let Some(id) = run.next_token().await.map_err(js_err)? else {
            break;
        };
        let secs = t.elapsed().as_secs_f64();
        if run.tokens().len() == 1 {
            prefill = secs;
        } else {
            decode += secs;
        }
        // A chat's end-of-turn token ends the reply and is not part of it.
        if !(chat && stop_tokens.contains(&id)) {
            let piece = stream.push(id, &mut detokenize).map_err(js_err)?;
            if !piece.is_empty() {
                output.set_text_content(Some(stream.shown()));
            }
        }
        next_tick().await;
    }
    stream.finish(&mut detokenize).map_err(js_err)?;
    output.set_text_content(Some(stream.shown()));
    if chat {
        show_turn(doc, "user", &text)?;
        show_turn(doc, "assistant", stream.shown())?;
        let mut conversation = s.conversation.borrow_mut();
        conversation.push(Message::new("user", &text));
        conversation.push(Message::new("assistant", stream.shown()));
        input(doc, "llm-prompt")?.set_value("");
    }
    let n = run.tokens().len();
    let p = rate(prompt.len(), prefill);
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
        prompt.len(),
        fmt_rate(d),
        n.saturating_sub(1)
    )));
    set_text(
        doc,
        "llm-status",
        &format!("done: {n} tokens, {}", stop_text(run.stopped())),
    );
    Ok(())
}
