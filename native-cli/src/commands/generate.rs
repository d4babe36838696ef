//! `kernels generate`: text from a llama checkpoint (or the embedded demo model) through
//! kernels-chat's generation path: the prompt encoded as transformers' `tokenizer(text)`
//! encodes it (the tokenizer's BOS added when its post-processor, or a GGUF's
//! `add_bos_token`, says so), then the prompt and its continuation streamed to stdout so that
//! what is printed is exactly `tokenizer.decode(prompt_ids + new_ids)`, with the prefill and
//! decode rates on stderr. With `--chat`, the prompt is one user message through the model's
//! chat template (see `commands::chat`).

use std::io::Read;
use std::path::PathBuf;

use kernels_chat::{Completion, Decoder, StopWhen, prompt_ids};
use kernels_core::models::llama::Sampling;
use kernels_gpu::{BackendChoice, select_backend};

use crate::commands::chat::{chat_setup, text_tokenizer};
use crate::llama::{GenStats, build_in, quantize_files, read_dir};
use crate::{CliResult, addition, emit, fail};

/// New tokens when `--max-tokens` is not given (fewer when the context leaves fewer).
pub const DEFAULT_MAX_TOKENS: usize = 64;

/// Where the prompt comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptSource {
    /// `--prompt TEXT`.
    Text(String),
    /// `--prompt -`: standard input.
    Stdin,
    /// `--prompt-file FILE`.
    File(PathBuf),
}

impl PromptSource {
    /// From `--prompt` and `--prompt-file` (clap makes them exclusive and one required).
    pub fn from_args(prompt: Option<String>, file: Option<PathBuf>) -> PromptSource {
        match (prompt, file) {
            (_, Some(f)) => PromptSource::File(f),
            (Some(p), None) if p == "-" => PromptSource::Stdin,
            (Some(p), None) => PromptSource::Text(p),
            (None, None) => PromptSource::Text(String::new()),
        }
    }

    /// The prompt's text; errors name the file (or stdin).
    pub fn read(&self) -> CliResult<String> {
        match self {
            PromptSource::Text(t) => Ok(t.clone()),
            PromptSource::Stdin => {
                let mut bytes = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut bytes)
                    .map_err(|e| fail(format!("--prompt -: reading stdin: {e}")))?;
                String::from_utf8(bytes)
                    .map_err(|e| fail(format!("--prompt -: stdin is not UTF-8 text ({e})")))
            }
            PromptSource::File(path) => {
                let shown = path.display();
                let meta = std::fs::metadata(path)
                    .map_err(|e| fail(format!("--prompt-file {shown}: {e}")))?;
                if !meta.is_file() {
                    return Err(fail(format!("--prompt-file {shown}: not a regular file")));
                }
                let bytes =
                    std::fs::read(path).map_err(|e| fail(format!("--prompt-file {shown}: {e}")))?;
                String::from_utf8(bytes)
                    .map_err(|e| fail(format!("--prompt-file {shown}: not UTF-8 text ({e})")))
            }
        }
    }
}

/// Options of `kernels generate`.
#[derive(Debug, Clone)]
pub struct GenerateArgs {
    pub model: Option<PathBuf>,
    pub prompt: PromptSource,
    /// None: 64, or what the context leaves after the prompt.
    pub max_tokens: Option<usize>,
    pub sampling: Sampling,
    pub backend: Option<String>,
    /// `--prompt` is one user message through the model's chat template.
    pub chat: bool,
    /// With `chat`: a system message before it.
    pub system: Option<String>,
    /// `--quantize`: the matrices re-encoded as they load.
    pub quantize: Option<kernels_core::DType>,
}

/// `kernels generate`: streams the prompt and its completion to stdout, the timings to stderr.
pub fn run(args: &GenerateArgs) -> CliResult<()> {
    // Bad sampling arguments are refused before anything is loaded or echoed.
    let s = args.sampling;
    kernels_core::cpu::sample::check_attrs(s.temperature, s.top_k, s.top_p)
        .map_err(|e| fail(format!("generate: {e}")))?;
    if args.system.is_some() && !args.chat {
        return Err(fail("generate: --system needs --chat"));
    }
    let prompt_text = args.prompt.read()?;
    let chosen = select_backend(BackendChoice::from_arg(args.backend.as_deref())?)?;
    let mut files = match &args.model {
        Some(dir) => read_dir(dir)?,
        None => addition::embedded()?,
    };
    quantize_files(&mut files, args.quantize)?;
    let model = build_in(&mut files, chosen.backend.clone())?;
    let tok = text_tokenizer(&files)?;
    if args.chat {
        let setup = chat_setup(&files, &model, &tok)?;
        eprintln!(
            "{} on {} ({}); a reply ends at: {}",
            files.origin,
            chosen.backend.name(),
            chosen.reason,
            setup.describe_end_of_turn(&tok)
        );
        let max = args
            .max_tokens
            .unwrap_or(crate::commands::chat::DEFAULT_REPLY_TOKENS);
        let decoder = crate::commands::chat::chat_decoder(&model, args.sampling, args.max_tokens)?;
        let mut session = kernels_chat::ChatSession::new(
            decoder,
            tok,
            std::rc::Rc::new(setup),
            args.system.as_deref(),
        );
        let r = crate::commands::chat::answer(&mut session, &prompt_text, max, false)?;
        emit("\n")?;
        eprintln!("[{}; {}]", r.0, r.1.line());
        return Ok(());
    }
    let prompt =
        prompt_ids(&tok, &prompt_text).map_err(|e| fail(format!("generate: --prompt: {e}")))?;
    unknown_note(&tok, &prompt_text, &prompt);
    let context = model.config.max_positions();
    if prompt.len() >= context {
        return Err(fail(format!(
            "generate: the prompt is {} tokens, and the model's context (max_position_embeddings) \
             is {context}: no room to generate",
            prompt.len()
        )));
    }
    eprintln!(
        "{} on {} ({}), {} prompt tokens",
        files.origin,
        chosen.backend.name(),
        chosen.reason,
        prompt.len()
    );
    let room = context - prompt.len();
    let max_tokens = match args.max_tokens {
        None => DEFAULT_MAX_TOKENS.min(room),
        Some(n) if n > room => {
            eprintln!(
                "note: --max-tokens {n} is more than the model's context ({context} tokens) \
                 leaves after a {}-token prompt; generation stops after at most {room} tokens",
                prompt.len()
            );
            room
        }
        Some(n) => n,
    };
    let max_tokens = memory_cap(&model.config, prompt.len(), max_tokens, args.max_tokens)?;
    let mut decoder = Decoder::new(&model, args.sampling, prompt.len() + max_tokens)?;
    let mut stop_ids = model.config.eos_token_ids.clone();
    let mut stop_strings = Vec::new();
    if let Some(text) = &files.chat_files.generation_config {
        let path = format!("{}/generation_config.json", files.origin);
        stop_ids.extend(kernels_chat::generation_config_eos(&path, text)?);
        stop_strings = kernels_chat::generation_config_stop_strings(&path, text)?;
    }
    let when = StopWhen {
        max_new_tokens: max_tokens,
        stop_ids,
        stop_strings,
        show_stop_id: true,
    };
    let (mut run, head) = Completion::start(&mut decoder, &tok, prompt.clone(), &prompt, when)?;
    // What is printed is the decode of the prompt's ids and the new ones, edge included.
    emit(&head)?;
    let mut timer = StepTimer::start(prompt.len());
    let mut out_err = None;
    pollster::block_on(run.run(&mut printing(&mut timer, &mut out_err)))?;
    if let Some(e) = out_err {
        return Err(e);
    }
    let (rest, rewritten) = run.finish()?;
    emit(&rest)?;
    emit("\n")?;
    if let Some(full) = rewritten {
        eprintln!("note: the tokenizer rewrote text already shown; its decode is {full:?}");
    }
    let why = run.stopped().map_or("stopped".into(), |s| s.describe());
    eprintln!("[{why}; {}]", timer.stats(run.new_ids().len()).line());
    Ok(())
}

/// A note on stderr when the prompt holds the tokenizer's unknown token where the text did not
/// (its pieces outside the vocabulary became it: the model sees something else than typed).
fn unknown_note(tok: &kernels_chat::TextTokenizer, text: &str, ids: &[u32]) {
    let Some(unk) = tok.unk_id() else { return };
    let name = tok.id_to_token(unk).unwrap_or_default();
    let typed = if name.is_empty() {
        0
    } else {
        text.matches(name.as_str()).count()
    };
    let got = ids.iter().filter(|&&i| i == unk).count();
    if got > typed {
        eprintln!(
            "note: --prompt: {} piece(s) of it are not in the tokenizer's vocabulary and became \
             its unknown token {name:?} (id {unk})",
            got - typed
        );
    }
}

/// `max_tokens` (after the context's cap) capped by the KV cache the memory holds
/// ([`crate::limits::kv_fit_model`]) for a prompt of `prompt` tokens, with a note naming
/// `--max-tokens` (`given`: its value; `None`: the default), the cap and the bytes; a memory
/// that cannot hold the prompt's cache is an error.
pub fn memory_cap(
    config: &kernels_core::models::llama::LlamaConfig,
    prompt: usize,
    max_tokens: usize,
    given: Option<usize>,
) -> CliResult<usize> {
    let wanted = prompt.saturating_add(max_tokens);
    let fit = crate::limits::kv_fit_model(config, wanted)?;
    if !fit.capped(wanted) {
        return Ok(max_tokens);
    }
    let flag = match given {
        Some(n) => format!("--max-tokens {n}"),
        None => format!("--max-tokens (not given: {max_tokens})"),
    };
    if fit.positions <= prompt {
        return Err(fail(format!(
            "generate: {flag} after a {prompt}-token prompt: {}; the prompt alone does not fit",
            fit.describe(wanted)
        )));
    }
    let cap = fit.positions - prompt;
    eprintln!(
        "note: {flag}: {}; generation stops after at most {cap} tokens",
        fit.describe(wanted)
    );
    Ok(cap)
}

/// The step callback of `generate` and `chat`: times each step and prints its settled text.
/// A failed write is kept in `out_err` (the first one) for the caller to return once the run
/// ends.
pub(crate) fn printing<'a>(
    timer: &'a mut StepTimer,
    out_err: &'a mut Option<crate::CliError>,
) -> impl FnMut(&kernels_chat::Step) -> Result<(), kernels_chat::ChatError> + 'a {
    move |step| {
        timer.step(step.fed);
        if out_err.is_none()
            && let Err(e) = emit(&step.piece)
        {
            *out_err = Some(e);
        }
        Ok(())
    }
}

/// Times a generation's steps: the first (the prefill) apart from the rest.
#[derive(Debug, Clone, Copy)]
pub struct StepTimer {
    start: std::time::Instant,
    first: Option<std::time::Instant>,
    prompt_tokens: usize,
}

impl StepTimer {
    pub fn start(prompt_tokens: usize) -> StepTimer {
        StepTimer {
            start: std::time::Instant::now(),
            first: None,
            prompt_tokens,
        }
    }

    /// After a step that fed `fed` tokens.
    pub fn step(&mut self, fed: usize) {
        if self.first.is_none() {
            self.first = Some(std::time::Instant::now());
            self.prompt_tokens = fed;
        }
    }

    /// The timings of `new_tokens` generated.
    pub fn stats(&self, new_tokens: usize) -> GenStats {
        let end = std::time::Instant::now();
        let first = self.first.unwrap_or(end);
        GenStats {
            prompt_tokens: self.prompt_tokens,
            new_tokens,
            prefill: first - self.start,
            decode: end - first,
        }
    }
}
