//! `kernels generate`: text from a llama checkpoint (or the embedded demo model), streamed to
//! stdout as it is decoded (the pieces add up to the tokenizer's decode of the generated ids),
//! with the prefill and decode rates on stderr. With `--chat`, the prompt is one user message
//! through the model's chat template (see `commands::chat`).

use std::io::Write;
use std::path::PathBuf;

use kernels_core::models::llama::Sampling;
use kernels_gpu::{BackendChoice, select_backend};

use kernels_chat::Message;

use crate::commands::chat::{ChatSetup, ending, reply};
use crate::llama::{TokenStream, build, encode, generate_ids, quantize_files, read_dir};
use crate::{CliResult, addition, emit, fail};

/// New tokens when `--max-tokens` is not given (fewer when the context leaves fewer).
pub const DEFAULT_MAX_TOKENS: usize = 64;

/// Options of `kernels generate`.
#[derive(Debug, Clone)]
pub struct GenerateArgs {
    pub model: Option<PathBuf>,
    pub prompt: String,
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

/// `kernels generate`: streams the completion to stdout, the timings to stderr.
pub fn run(args: &GenerateArgs) -> CliResult<()> {
    // Bad sampling arguments are refused before anything is loaded or echoed.
    let s = args.sampling;
    kernels_core::cpu::sample::check_attrs(s.temperature, s.top_k, s.top_p)
        .map_err(|e| fail(format!("generate: {e}")))?;
    let chosen = select_backend(BackendChoice::from_arg(args.backend.as_deref())?)?;
    let mut files = match &args.model {
        Some(dir) => read_dir(dir)?,
        None => addition::embedded()?,
    };
    quantize_files(&mut files, args.quantize)?;
    let model = build(&files, chosen.backend.clone())?;
    let tok = files.tokenizer.as_ref().ok_or_else(|| {
        fail(format!(
            "{}: no tokenizer.json (use `kernels logits --tokens` for raw ids)",
            files.origin
        ))
    })?;
    if args.chat {
        let setup = ChatSetup::new(&files, &model, tok)?;
        let mut messages: Vec<Message> = args
            .system
            .iter()
            .map(|s| Message::new("system", s))
            .collect();
        messages.push(Message::new("user", &args.prompt));
        eprintln!(
            "{} on {} ({}); a reply ends at: {}",
            files.origin,
            chosen.backend.name(),
            chosen.reason,
            setup.describe_end_of_turn(tok)
        );
        let r = reply(
            &model,
            tok,
            &setup,
            &messages,
            args.max_tokens,
            args.sampling,
            false,
        )?;
        emit("\n")?;
        eprintln!("[{}; {}]", ending(&r), r.stats.line());
        return Ok(());
    }
    if args.system.is_some() {
        return Err(fail("generate: --system needs --chat"));
    }
    let prompt = encode(tok, &args.prompt)?;
    eprintln!(
        "{} on {} ({}), {} prompt tokens",
        files.origin,
        chosen.backend.name(),
        chosen.reason,
        prompt.len()
    );
    let room = model
        .config
        .max_position_embeddings
        .saturating_sub(prompt.len());
    let max_tokens = match args.max_tokens {
        None => DEFAULT_MAX_TOKENS.min(room),
        Some(n) if n > room => {
            eprintln!(
                "note: --max-tokens {n} is more than the model's max_position_embeddings = {} \
                 leaves after a {}-token prompt; generation stops after at most {room} tokens",
                model.config.max_position_embeddings,
                prompt.len()
            );
            n
        }
        Some(n) => n,
    };
    emit(&args.prompt)?;
    // The completion's text as the tokenizer decodes all of it: a character split over tokens
    // appears once complete, and decoders that join tokens (spaces, byte-level) join them.
    let mut stream = TokenStream::new(tok);
    let mut stream_err = None;
    let (_, stats) = generate_ids(&model, &prompt, max_tokens, args.sampling, &mut |id| {
        if stream_err.is_some() {
            return;
        }
        match stream.push(id).and_then(|piece| emit(&piece)) {
            Ok(()) => {}
            Err(e) => stream_err = Some(e),
        }
    })?;
    if let Some(e) = stream_err {
        return Err(e);
    }
    emit(&stream.finish()?)?;
    emit("\n")?;
    let _ = std::io::stdout().flush();
    eprintln!("{}", stats.line());
    Ok(())
}
