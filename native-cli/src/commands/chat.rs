//! `kernels chat`: an interactive chat with an instruct model in the terminal, and the one
//! reply of `kernels generate --chat`, through kernels-chat's [`ChatSession`]: the model's own
//! chat template (rendered as transformers' `apply_chat_template` renders it, encoded without a
//! second BOS) turns the conversation into ids; the KV cache survives between turns, so each
//! turn prefills only the ids after the first that differs from the cached ones; each reply
//! streams to stdout and ends at the template's end-of-turn tokens. A conversation that
//! outgrows the context loses its oldest turns (the system message stays), said on stderr; a
//! line too long for the context alone is refused on stderr, and the chat goes on.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::rc::Rc;

use kernels_chat::{ChatError, ChatSession, ChatSetup, Decoder, TextTokenizer};
use kernels_core::models::llama::{Llama, Sampling};
use kernels_gpu::{BackendChoice, select_backend};

use crate::commands::generate::{StepTimer, printing};
use crate::llama::{GenStats, ModelFiles, build, read_dir};
use crate::{CliResult, emit, fail};

/// New tokens per reply when `--max-tokens` is not given (fewer when the context leaves
/// fewer).
pub const DEFAULT_REPLY_TOKENS: usize = 512;

/// Options of `kernels chat`.
#[derive(Debug, Clone)]
pub struct ChatArgs {
    pub model: PathBuf,
    /// A system message opening the conversation.
    pub system: Option<String>,
    /// Per reply; None: [`DEFAULT_REPLY_TOKENS`] or what the context leaves.
    pub max_tokens: Option<usize>,
    pub sampling: Sampling,
    pub backend: Option<String>,
    /// Print each rendered prompt to stderr.
    pub show_prompt: bool,
}

/// The model's tokenizer, or an error saying there is none.
pub fn text_tokenizer(files: &ModelFiles) -> CliResult<TextTokenizer> {
    files
        .tokenizer
        .clone()
        .map(TextTokenizer::new)
        .ok_or_else(|| {
            fail(format!(
                "{}: no tokenizer.json (use `kernels logits --tokens` for raw ids)",
                files.origin
            ))
        })
}

/// The model's chat setup from its files (kernels-chat's [`ChatSetup`]).
pub fn chat_setup(files: &ModelFiles, model: &Llama, tok: &TextTokenizer) -> CliResult<ChatSetup> {
    let f = &files.chat_files;
    Ok(ChatSetup::new(
        &files.origin,
        f.tokenizer_config.as_deref(),
        f.chat_template.as_deref(),
        f.generation_config.as_deref(),
        &model.config.eos_token_ids,
        tok,
    )?)
}

/// The decoder of a chat: a KV cache of [`kernels_chat::CHAT_CONTEXT`] positions (at most the
/// model's context), fewer when the memory holds fewer ([`crate::limits::kv_fit_model`]), with
/// a note naming `--max-tokens` (`max_tokens`: its value), the positions and the bytes; a
/// reply stops at the room the conversation leaves in them.
pub fn chat_decoder(
    model: &Llama,
    sampling: Sampling,
    max_tokens: Option<usize>,
) -> CliResult<Decoder> {
    let context = kernels_chat::CHAT_CONTEXT.min(model.config.max_positions());
    let fit = crate::limits::kv_fit_model(&model.config, context)?;
    let flag = max_tokens.map_or_else(
        || format!("--max-tokens (not given: {DEFAULT_REPLY_TOKENS})"),
        |n| format!("--max-tokens {n}"),
    );
    if fit.positions == 0 {
        return Err(fail(format!(
            "chat: {}; not even one position fits",
            fit.describe(context)
        )));
    }
    if fit.capped(context) {
        eprintln!(
            "note: {flag}: {}; the chat's context is capped at {} positions, and a reply stops \
             at the room the conversation leaves in them",
            fit.describe(context),
            fit.positions
        );
    } else if let Some(n) = max_tokens.filter(|&n| n >= context) {
        eprintln!(
            "note: --max-tokens {n} is more than the chat's context ({context} positions) \
             holds; a reply stops at the room the conversation leaves in it"
        );
    }
    Ok(Decoder::new(model, sampling, fit.positions)?)
}

/// Answers `user`: the reply streams to stdout. Returns why it ended and its timings.
pub fn answer(
    session: &mut ChatSession,
    user: &str,
    max_tokens: usize,
    show_prompt: bool,
) -> CliResult<(String, GenStats)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if show_prompt {
        let mut messages = session.messages().to_vec();
        messages.push(kernels_chat::Message::new("user", user));
        let text = session.setup().template.render(&messages, true, now)?;
        eprintln!("[prompt]\n{text}\n[/prompt]");
    }
    let (mut turn, report) = session.turn(user, max_tokens, now)?;
    if report.dropped_messages > 0 {
        eprintln!(
            "note: the conversation outgrew the model's context: dropped its {} oldest \
             message(s) (the system message stays); recomputing from the first changed token",
            report.dropped_messages
        );
    }
    let mut timer = StepTimer::start(report.prefill);
    let mut out_err = None;
    pollster::block_on(turn.run(&mut printing(&mut timer, &mut out_err)))?;
    if let Some(e) = out_err {
        return Err(e);
    }
    let (rest, reply) = turn.finish()?;
    emit(&rest)?;
    if let Some(full) = &reply.rewritten {
        eprintln!("\nnote: the tokenizer rewrote text already shown; its decode is {full:?}");
    }
    let why = format!(
        "{}; {} of {} prompt tokens from the cache",
        reply.stop.describe(),
        report.reused,
        report.prompt_tokens
    );
    Ok((why, timer.stats(reply.ids.len())))
}

/// `kernels chat`: reads user lines from stdin until EOF, answering each in turn.
pub fn run(args: &ChatArgs) -> CliResult<()> {
    let s = args.sampling;
    kernels_core::cpu::sample::check_attrs(s.temperature, s.top_k, s.top_p)
        .map_err(|e| fail(format!("chat: {e}")))?;
    let chosen = select_backend(BackendChoice::from_arg(args.backend.as_deref())?)?;
    let files = read_dir(&args.model)?;
    let tok = text_tokenizer(&files)?;
    let model = build(&files, chosen.backend.clone())?;
    let setup = chat_setup(&files, &model, &tok)?;
    eprintln!(
        "{} on {} ({}); a reply ends at: {}",
        files.origin,
        chosen.backend.name(),
        chosen.reason,
        setup.describe_end_of_turn(&tok)
    );
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("type a message and press Enter; end with Ctrl-D");
    }
    let decoder = chat_decoder(&model, args.sampling, args.max_tokens)?;
    let mut session = ChatSession::new(decoder, tok, Rc::new(setup), args.system.as_deref());
    let max = args.max_tokens.unwrap_or(DEFAULT_REPLY_TOKENS);
    let mut lines = std::io::stdin().lock().lines();
    loop {
        if interactive {
            eprint!("> ");
            let _ = std::io::stderr().flush();
        }
        let Some(line) = lines.next() else { break };
        let line = line.map_err(|e| fail(format!("chat: reading stdin: {e}")))?;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        match answer(&mut session, line, max, args.show_prompt) {
            Ok((why, stats)) => {
                emit("\n")?;
                eprintln!("[{why}; {}]", stats.line());
            }
            // A message the context cannot hold is refused; the chat goes on.
            Err(e) if is_too_long(&e) => {
                eprintln!("chat: this message does not fit the model's context: {e}; skipped");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn is_too_long(e: &crate::CliError) -> bool {
    matches!(
        e.downcast_ref::<ChatError>(),
        Some(ChatError::TooLong { .. } | ChatError::Empty)
    )
}
