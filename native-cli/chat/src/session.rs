//! A chat whose KV cache survives between turns: [`ChatSession`].
//!
//! Each turn renders the whole conversation through the model's template and encodes it as
//! `apply_chat_template` does, compares the ids with those whose keys and values the cache
//! holds, and prefills from the first that differs: turn n feeds only its own tokens (the
//! end of the previous reply's turn marker and the new message) when the template renders
//! earlier turns as they were generated, and recomputes from the first changed token when it
//! does not (a template that drops earlier reasoning, a reply re-encoded otherwise).
//!
//! A conversation that outgrows the context loses its oldest turns (a user message and the
//! replies after it; the system message stays), which the [`TurnReport`] says, and is
//! recomputed from the first changed token; a message too long for the context even alone is
//! an error for that turn only, and the session goes on.

use std::rc::Rc;

use kernels_core::models::llama::Decoder;

use crate::ChatError;
use crate::generate::{Completion, Step, Stop, StopWhen};
use crate::template::{ChatTemplate, END_OF_TURN_TOKENS, Message};
use crate::template::{generation_config_eos, generation_config_stop_strings};
use crate::tokenizer::TextTokenizer;

/// A model's chat setup: its template, the ids that end an assistant's turn and the stop
/// strings of its `generation_config.json`.
#[derive(Debug)]
pub struct ChatSetup {
    pub template: ChatTemplate,
    /// Sorted: the config's and generation_config.json's `eos_token_id`, the template's
    /// `eos_token`, and the end-of-turn markers the vocabulary has.
    pub end_of_turn: Vec<u32>,
    pub stop_strings: Vec<String>,
}

impl ChatSetup {
    /// From a model directory's `tokenizer_config.json` / `chat_template.jinja` and
    /// `generation_config.json` (each possibly absent), the config's `eos_token_id` and the
    /// tokenizer; `origin` names the directory in errors. No template, or nothing that ends a
    /// turn, is an error saying so.
    pub fn new(
        origin: &str,
        tokenizer_config: Option<&str>,
        chat_template: Option<&str>,
        generation_config: Option<&str>,
        config_eos: &[u32],
        tokenizer: &TextTokenizer,
    ) -> Result<ChatSetup, ChatError> {
        let template = ChatTemplate::from_files(origin, tokenizer_config, chat_template)?;
        let mut eos = config_eos.to_vec();
        let mut stop_strings = Vec::new();
        if let Some(text) = generation_config {
            let path = format!("{origin}/generation_config.json");
            eos.extend(generation_config_eos(&path, text)?);
            stop_strings = generation_config_stop_strings(&path, text)?;
        }
        let end_of_turn = template.end_of_turn_ids(&eos, &|t| tokenizer.token_to_id(t));
        if end_of_turn.is_empty() {
            return Err(ChatError::BadFile {
                path: origin.into(),
                why: format!(
                    "nothing ends an assistant's turn (no eos_token_id, no eos_token, none of \
                     {END_OF_TURN_TOKENS:?} in the vocabulary)"
                ),
            });
        }
        Ok(ChatSetup {
            template,
            end_of_turn,
            stop_strings,
        })
    }

    /// The end-of-turn ids with their texts, for a status line.
    pub fn describe_end_of_turn(&self, tokenizer: &TextTokenizer) -> String {
        let named: Vec<String> = (self.end_of_turn.iter())
            .map(|&id| match tokenizer.id_to_token(id) {
                Some(t) => format!("{id} {t}"),
                None => id.to_string(),
            })
            .collect();
        named.join(", ")
    }
}

/// The KV cache positions a chat allocates when the model allows more (llama.cpp's default
/// context): the cache cannot grow, and a model's full context can need tens of gigabytes.
pub const CHAT_CONTEXT: usize = 4096;

/// A conversation with a model, its KV cache kept between turns.
pub struct ChatSession {
    decoder: Decoder,
    tokenizer: TextTokenizer,
    setup: Rc<ChatSetup>,
    messages: Vec<Message>,
    /// The ids whose keys and values the decoder's cache holds, in order (its first
    /// `cached.len()` positions; the decoder may hold more after a turn that failed).
    cached: Vec<u32>,
}

/// What a turn's start did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnReport {
    /// The rendered conversation's ids.
    pub prompt_tokens: usize,
    /// Of those, already in the cache.
    pub reused: usize,
    /// Of those, to prefill (`prompt_tokens - reused`).
    pub prefill: usize,
    /// Oldest messages dropped to fit the context (0: none).
    pub dropped_messages: usize,
}

/// How a turn went.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The reply's text: the tokenizer's decode of its ids, the end-of-turn token left out
    /// (what was streamed).
    pub text: String,
    /// The reply's ids, the end-of-turn token included when it came.
    pub ids: Vec<u32>,
    pub stop: Stop,
    /// The full decode when the tokenizer rewrote text already streamed (see
    /// [`Completion::finish`]).
    pub rewritten: Option<String>,
}

impl ChatSession {
    /// A conversation over `decoder` (whose cache it owns from now on), opened by `system`.
    pub fn new(
        mut decoder: Decoder,
        tokenizer: TextTokenizer,
        setup: Rc<ChatSetup>,
        system: Option<&str>,
    ) -> ChatSession {
        decoder.truncate(0);
        ChatSession {
            decoder,
            tokenizer,
            setup,
            messages: system
                .map(|s| Message::new("system", s))
                .into_iter()
                .collect(),
            cached: Vec::new(),
        }
    }

    /// The conversation so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The ids in the cache.
    pub fn cached(&self) -> &[u32] {
        &self.cached
    }

    pub fn setup(&self) -> &ChatSetup {
        &self.setup
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// The model's context in tokens.
    pub fn context(&self) -> usize {
        self.decoder.context()
    }

    /// Starts the assistant's reply to `user` (at most `max_new_tokens`; `now`, seconds since
    /// 1970, is what the template's `strftime_now` formats). The conversation drops its oldest
    /// turns while it leaves less room than `min(max_new_tokens, context / 2)`. The message
    /// and the reply join the conversation when [`ChatTurn::finish`] is called; an error
    /// leaves the conversation as it was.
    pub fn turn(
        &mut self,
        user: &str,
        max_new_tokens: usize,
        now: i64,
    ) -> Result<(ChatTurn<'_>, TurnReport), ChatError> {
        let context = self.decoder.context();
        let want_room = max_new_tokens.min(context / 2).max(1);
        let mut candidate = self.messages.clone();
        candidate.push(Message::new("user", user));
        let mut dropped = 0;
        let ids = loop {
            let text = self.setup.template.render(&candidate, true, now)?;
            let ids = self.tokenizer.encode_rendered(&text)?;
            if ids.len().saturating_add(want_room) <= context {
                break ids;
            }
            match drop_oldest_turn(&mut candidate) {
                0 if ids.len() < context => break ids,
                0 => {
                    return Err(ChatError::TooLong {
                        tokens: ids.len(),
                        context,
                    });
                }
                n => dropped += n,
            }
        };
        if ids.is_empty() {
            return Err(ChatError::Empty);
        }
        // Reuse the cache up to the first id that differs; at least one id is fed, for the
        // logits of the next token.
        let same = self
            .cached
            .iter()
            .zip(&ids)
            .take_while(|(a, b)| a == b)
            .count();
        let reused = same.min(ids.len() - 1);
        self.decoder.truncate(reused);
        self.cached.truncate(reused);
        let report = TurnReport {
            prompt_tokens: ids.len(),
            reused,
            prefill: ids.len() - reused,
            dropped_messages: dropped,
        };
        let when = StopWhen {
            max_new_tokens,
            stop_ids: self.setup.end_of_turn.clone(),
            stop_strings: self.setup.stop_strings.clone(),
            show_stop_id: false,
        };
        let feed = ids[reused..].to_vec();
        let (completion, _) =
            Completion::start(&mut self.decoder, &self.tokenizer, feed, &[], when)?;
        Ok((
            ChatTurn {
                completion,
                prompt: ids,
                candidate,
                messages: &mut self.messages,
                cached: &mut self.cached,
            },
            report,
        ))
    }
}

/// Removes the oldest turn after the system message: a user message and what follows it up
/// to the next user message (never the last message, the one being answered). Returns how
/// many messages went.
fn drop_oldest_turn(messages: &mut Vec<Message>) -> usize {
    let first = messages.iter().position(|m| m.role != "system");
    let Some(first) = first else { return 0 };
    let last = messages.len() - 1;
    let mut end = first + 1;
    while end < last && messages[end].role != "user" {
        end += 1;
    }
    if end > last || first >= last {
        return 0;
    }
    messages.drain(first..end);
    end - first
}

/// A reply in progress; [`ChatTurn::finish`] adds it to the conversation.
pub struct ChatTurn<'a> {
    completion: Completion<'a>,
    prompt: Vec<u32>,
    candidate: Vec<Message>,
    messages: &'a mut Vec<Message>,
    cached: &'a mut Vec<u32>,
}

impl ChatTurn<'_> {
    /// Generates one token of the reply; `None` once it has ended.
    pub async fn step(&mut self) -> Result<Option<Step>, ChatError> {
        self.completion.step().await
    }

    /// Generates the rest of the reply, calling `on_step` with each step.
    pub async fn run(
        &mut self,
        on_step: &mut dyn FnMut(&Step) -> Result<(), ChatError>,
    ) -> Result<(), ChatError> {
        self.completion.run(on_step).await
    }

    /// The reply's text streamed so far.
    pub fn shown(&self) -> &str {
        self.completion.shown()
    }

    /// The reply's new tokens at most.
    pub fn max_new(&self) -> usize {
        self.completion.max_new()
    }

    /// Ends the reply (early, if it has not stopped): returns the rest of its text to show
    /// and the reply, which joins the conversation with its message.
    pub fn finish(mut self) -> Result<(String, Reply), ChatError> {
        let (rest, rewritten) = self.completion.finish()?;
        let ids = self.completion.new_ids().to_vec();
        let stop = self
            .completion
            .stopped()
            .cloned()
            .unwrap_or(Stop::MaxTokens);
        let text = self.completion.shown().to_string();
        // The cache holds the prompt and every new id but the last (sampled, never fed).
        let mut cached = self.prompt;
        cached.extend(ids.iter().take(ids.len().saturating_sub(1)));
        *self.cached = cached;
        self.candidate.push(Message::new("assistant", &text));
        *self.messages = self.candidate;
        Ok((
            rest,
            Reply {
                text,
                ids,
                stop,
                rewritten,
            },
        ))
    }
}
