//! `kernels chat`: an interactive chat with an instruct model in the terminal, and the one
//! reply of `kernels generate --chat`. The model's own chat template (kernels-chat's
//! [`ChatTemplate`], rendered as transformers' `apply_chat_template` renders it) turns the
//! conversation into the prompt; each reply streams to stdout and ends at the template's
//! end-of-turn tokens.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use kernels_chat::{ChatTemplate, Message, generation_config_eos};
use kernels_core::models::llama::{Llama, Sampling};
use kernels_gpu::{BackendChoice, select_backend};
use tokenizers::Tokenizer;

use crate::llama::{
    GenStats, ModelFiles, TokenStream, build, encode, generate_ids_until, read_dir,
};
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

/// A model's chat setup: its template and the ids that end an assistant's turn.
#[derive(Debug)]
pub struct ChatSetup {
    pub template: ChatTemplate,
    /// Sorted: the config's and generation_config.json's `eos_token_id`, the template's
    /// `eos_token`, and the end-of-turn markers the vocabulary has.
    pub end_of_turn: Vec<u32>,
}

impl ChatSetup {
    /// From the directory's `tokenizer_config.json` / `chat_template.jinja` and
    /// `generation_config.json`; no template is an error saying so.
    pub fn new(files: &ModelFiles, model: &Llama, tok: &Tokenizer) -> CliResult<ChatSetup> {
        let f = &files.chat_files;
        let template = ChatTemplate::from_files(
            &files.origin,
            f.tokenizer_config.as_deref(),
            f.chat_template.as_deref(),
        )?;
        let mut eos = model.config.eos_token_ids.clone();
        if let Some(text) = &f.generation_config {
            let path = format!("{}/generation_config.json", files.origin);
            eos.extend(generation_config_eos(&path, text)?);
        }
        let end_of_turn = template.end_of_turn_ids(&eos, &|t| tok.token_to_id(t));
        if end_of_turn.is_empty() {
            return Err(fail(format!(
                "{}: nothing ends an assistant's turn (no eos_token_id, no eos_token, none of {:?} \
                 in the vocabulary)",
                files.origin,
                kernels_chat::END_OF_TURN_TOKENS
            )));
        }
        Ok(ChatSetup {
            template,
            end_of_turn,
        })
    }

    /// The end-of-turn ids with their texts, for the status line.
    pub fn describe_end_of_turn(&self, tok: &Tokenizer) -> String {
        let named: Vec<String> = self
            .end_of_turn
            .iter()
            .map(|&id| match tok.id_to_token(id) {
                Some(t) => format!("{id} {t}"),
                None => id.to_string(),
            })
            .collect();
        named.join(", ")
    }
}

/// One reply, as it went.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The tokenizer's decode of the reply's ids (the end-of-turn token left out): what was
    /// streamed.
    pub text: String,
    /// The reply's ids, the end-of-turn token included when it came.
    pub ids: Vec<u32>,
    /// An end-of-turn token ended it (else the token limit or the context did).
    pub ended_turn: bool,
    pub stats: GenStats,
}

/// Renders `messages` with the generation prompt, generates the assistant's reply and streams
/// it to stdout as it is decoded.
pub fn reply(
    model: &Llama,
    tok: &Tokenizer,
    setup: &ChatSetup,
    messages: &[Message],
    max_tokens: Option<usize>,
    sampling: Sampling,
    show_prompt: bool,
) -> CliResult<Reply> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let prompt_text = setup.template.render(messages, true, now)?;
    if show_prompt {
        eprintln!("[prompt]\n{prompt_text}\n[/prompt]");
    }
    // The template writes the special tokens itself (bos included), as transformers encodes it.
    let prompt = encode(tok, &prompt_text)?;
    let limit = model.config.max_position_embeddings;
    if prompt.len() >= limit {
        return Err(fail(format!(
            "the conversation is {} tokens, and the model's context (max_position_embeddings) \
             is {limit}: no room for a reply",
            prompt.len()
        )));
    }
    let room = limit - prompt.len();
    let max_tokens = max_tokens.unwrap_or(DEFAULT_REPLY_TOKENS).min(room);
    let mut stream = TokenStream::new(tok);
    let mut stream_err = None;
    let stop = &setup.end_of_turn;
    let (ids, stats) = generate_ids_until(
        model,
        &prompt,
        max_tokens,
        sampling,
        stop.clone(),
        &mut |id| {
            if stop.contains(&id) || stream_err.is_some() {
                return;
            }
            match stream.push(id) {
                Ok(piece) => {
                    if let Err(e) = emit(&piece) {
                        stream_err = Some(e);
                    }
                }
                Err(e) => stream_err = Some(e),
            }
        },
    )?;
    if let Some(e) = stream_err {
        return Err(e);
    }
    emit(&stream.finish()?)?;
    let ended_turn = ids.last().is_some_and(|id| stop.contains(id));
    Ok(Reply {
        text: stream.shown().to_string(),
        ids,
        ended_turn,
        stats,
    })
}

/// Why a reply ended, for stderr.
pub fn ending(r: &Reply) -> &'static str {
    if r.ended_turn {
        "end of turn"
    } else {
        "token limit or context reached"
    }
}

/// `kernels chat`: reads user lines from stdin until EOF, answering each in turn.
pub fn run(args: &ChatArgs) -> CliResult<()> {
    let s = args.sampling;
    kernels_core::cpu::sample::check_attrs(s.temperature, s.top_k, s.top_p)
        .map_err(|e| fail(format!("chat: {e}")))?;
    let chosen = select_backend(BackendChoice::from_arg(args.backend.as_deref())?)?;
    let files = read_dir(&args.model)?;
    let tok = files
        .tokenizer
        .as_ref()
        .ok_or_else(|| fail(format!("{}: no tokenizer.json", files.origin)))?;
    let model = build(&files, chosen.backend.clone())?;
    let setup = ChatSetup::new(&files, &model, tok)?;
    eprintln!(
        "{} on {} ({}); a reply ends at: {}",
        files.origin,
        chosen.backend.name(),
        chosen.reason,
        setup.describe_end_of_turn(tok)
    );
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("type a message and press Enter; end with Ctrl-D");
    }
    let mut messages: Vec<Message> = args
        .system
        .iter()
        .map(|s| Message::new("system", s))
        .collect();
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
        messages.push(Message::new("user", line));
        let r = reply(
            &model,
            tok,
            &setup,
            &messages,
            args.max_tokens,
            args.sampling,
            args.show_prompt,
        )?;
        emit("\n")?;
        eprintln!("[{}; {}]", ending(&r), r.stats.line());
        messages.push(Message::new("assistant", &r.text));
    }
    Ok(())
}
