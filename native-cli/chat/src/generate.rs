//! The text-generation loop the CLI's `generate`, `chat` and the web page share: a prompt's
//! ids fed to a [`Decoder`] (kernels-core's model-level step: prefill, decode, sampling on the
//! device), one token at a time, until a stop condition, with the text streamed so that what is
//! shown is exactly the tokenizer's decode of the ids.
//!
//! [`Completion`] is driven one step at a time ([`Completion::step`]), so that a page can yield
//! to its event loop between tokens; [`Completion::run`] is that in a loop with a callback.

use kernels_core::models::llama::{Decoder, Llama, greedy_batch};

use crate::ChatError;
use crate::stream::TextStream;
use crate::tokenizer::TextTokenizer;

/// When a generation stops, and what its text holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopWhen {
    /// New tokens at most (capped by the room the context leaves).
    pub max_new_tokens: usize,
    /// Ids that end generation (the model's EOS ids, a chat's end-of-turn tokens).
    pub stop_ids: Vec<u32>,
    /// Texts that end generation once the continuation's text holds one (transformers'
    /// `stop_strings`; the token that completes one is the last).
    pub stop_strings: Vec<String>,
    /// Whether a stop id's text is streamed: yes for `generate` (its text is the decode of
    /// every id, as transformers' `decode(generate(...))`), no for a chat reply (the end of a
    /// turn is not part of it).
    pub show_stop_id: bool,
}

/// Why a generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// A stop id came (it is the last of the new ids).
    StopId(u32),
    /// The continuation's text came to hold this stop string.
    StopString(String),
    /// `max_new_tokens` were generated.
    MaxTokens,
    /// The model's context is full.
    Context,
}

impl Stop {
    /// For messages: why it stopped.
    pub fn describe(&self) -> String {
        match self {
            Stop::StopId(id) => format!("end token {id}"),
            Stop::StopString(s) => format!("stop string {s:?}"),
            Stop::MaxTokens => "token limit".into(),
            Stop::Context => "the model's context is full".into(),
        }
    }
}

/// One step of a generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The token generated.
    pub id: u32,
    /// The text now settled (often empty; see [`TextStream`]).
    pub piece: String,
    /// Tokens this step fed to the model: the prefill's, then 1.
    pub fed: usize,
}

/// A generation in progress over a [`Decoder`] whose cache already holds the positions before
/// `feed` (none for a plain prompt; a chat's earlier turns).
pub struct Completion<'a> {
    decoder: &'a mut Decoder,
    tokenizer: TextTokenizer,
    /// Ids still to prefill (the first step feeds them).
    feed: Vec<u32>,
    when: StopWhen,
    stream: TextStream,
    /// Ids of the continuation (stop id included when one came).
    new_ids: Vec<u32>,
    /// The continuation's text, for the stop strings.
    new_text: String,
    stopped: Option<Stop>,
    max_new: usize,
}

impl<'a> Completion<'a> {
    /// A generation after `feed` (ids not yet in `decoder`'s cache; at least one). `shown`
    /// ids open the streamed text (a prompt whose decode is printed before its continuation;
    /// empty for a chat reply): the returned string is its settled part, to print first.
    /// `max_new_tokens` is capped by the room the context leaves.
    pub fn start(
        decoder: &'a mut Decoder,
        tokenizer: &TextTokenizer,
        feed: Vec<u32>,
        shown: &[u32],
        when: StopWhen,
    ) -> Result<(Completion<'a>, String), ChatError> {
        if feed.is_empty() {
            return Err(ChatError::Empty);
        }
        let total = decoder.cached().saturating_add(feed.len());
        let context = decoder.context();
        if total > context {
            return Err(ChatError::TooLong {
                tokens: total,
                context,
            });
        }
        // The last new token is never fed back, so the context holds `context - total + 1`.
        let max_new = when.max_new_tokens.min(context - total + 1);
        let mut decode = |ids: &[u32]| tokenizer.decode(ids);
        let (stream, head) = TextStream::with_prefix(shown, &mut decode)?;
        Ok((
            Completion {
                decoder,
                tokenizer: tokenizer.clone(),
                feed,
                when,
                stream,
                new_ids: Vec::new(),
                new_text: String::new(),
                stopped: None,
                max_new,
            },
            head,
        ))
    }

    /// The new tokens this generation may make (`max_new_tokens` capped by the context).
    pub fn max_new(&self) -> usize {
        self.max_new
    }

    /// Generates one token; `None` once stopped ([`Completion::stopped`] says why).
    pub async fn step(&mut self) -> Result<Option<Step>, ChatError> {
        if self.stopped.is_some() {
            return Ok(None);
        }
        if self.new_ids.len() >= self.max_new {
            self.stopped = Some(if self.max_new < self.when.max_new_tokens {
                Stop::Context
            } else {
                Stop::MaxTokens
            });
            return Ok(None);
        }
        let (id, fed) = if self.new_ids.is_empty() {
            let feed = core::mem::take(&mut self.feed);
            (self.decoder.prefill(&feed).await?, feed.len())
        } else {
            (self.decoder.decode().await?, 1)
        };
        self.new_ids.push(id);
        let stop_id = self.when.stop_ids.contains(&id);
        let tok = &self.tokenizer;
        let mut decode = |ids: &[u32]| tok.decode(ids);
        let piece = if stop_id && !self.when.show_stop_id {
            String::new()
        } else {
            self.stream.push(id, &mut decode)?
        };
        if stop_id {
            self.stopped = Some(Stop::StopId(id));
        } else if !self.when.stop_strings.is_empty() {
            // The continuation's own text (the prompt's may hold a stop string already).
            self.new_text = self.tokenizer.decode(&self.new_ids)?;
            if let Some(s) =
                (self.when.stop_strings.iter()).find(|s| self.new_text.contains(s.as_str()))
            {
                self.stopped = Some(Stop::StopString(s.clone()));
            }
        }
        Ok(Some(Step { id, piece, fed }))
    }

    /// Generates until a stop condition, calling `on_step` with each step.
    pub async fn run(
        &mut self,
        on_step: &mut dyn FnMut(&Step) -> Result<(), ChatError>,
    ) -> Result<(), ChatError> {
        while let Some(step) = self.step().await? {
            on_step(&step)?;
        }
        Ok(())
    }

    /// The rest of the streamed text (call once stopped, or to end early). When the tokenizer
    /// rewrote text already shown (no tokenizer this project knows does), the second value is
    /// the full decode, for the caller to show instead.
    pub fn finish(&mut self) -> Result<(String, Option<String>), ChatError> {
        let tok = &self.tokenizer;
        let mut decode = |ids: &[u32]| tok.decode(ids);
        let rest = self.stream.finish(&mut decode)?;
        let full = if self.stream.rewritten() {
            Some(tok.decode(self.stream.ids())?)
        } else {
            None
        };
        Ok((rest, full))
    }

    /// The generated ids (the stop id included when one came).
    pub fn new_ids(&self) -> &[u32] {
        &self.new_ids
    }

    /// What has been streamed so far.
    pub fn shown(&self) -> &str {
        self.stream.shown()
    }

    /// Why it stopped, once it has.
    pub fn stopped(&self) -> Option<&Stop> {
        self.stopped.as_ref()
    }
}

/// One completion of [`complete_batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReply {
    /// The new ids, up to the one that stopped it (a stop id included).
    pub ids: Vec<u32>,
    /// Their decode (a stop id's text per [`StopWhen::show_stop_id`]), as [`Completion`]
    /// streams it.
    pub text: String,
    /// Why it ended.
    pub stop: Stop,
}

/// Greedy completions of many prompts of one length at once, for evaluations (`kernels eval`'s
/// problems): one batched prefill and decode over the model (kernels-core's `greedy_batch`),
/// then each row cut where [`Completion`] would stop it: at a stop id, at a stop string, after
/// `max_new_tokens` (capped by the room the context leaves). Rows that stop early cost the
/// batch's steps all the same.
pub async fn complete_batch(
    model: &Llama,
    tokenizer: &TextTokenizer,
    prompts: &[Vec<u32>],
    when: &StopWhen,
) -> Result<Vec<BatchReply>, ChatError> {
    let Some(first) = prompts.first() else {
        return Ok(Vec::new());
    };
    if first.is_empty() {
        return Err(ChatError::Empty);
    }
    let context = model.config.max_positions();
    if first.len() > context {
        return Err(ChatError::TooLong {
            tokens: first.len(),
            context,
        });
    }
    let max_new = when.max_new_tokens.min(context - first.len() + 1);
    let rows = greedy_batch(model, prompts, max_new).await?;
    rows.into_iter()
        .map(|row| {
            let mut ids = Vec::new();
            let mut stop = None;
            for id in row {
                ids.push(id);
                if when.stop_ids.contains(&id) {
                    stop = Some(Stop::StopId(id));
                    break;
                }
                if !when.stop_strings.is_empty() {
                    let text = tokenizer.decode(&ids)?;
                    if let Some(s) = when.stop_strings.iter().find(|s| text.contains(s.as_str())) {
                        stop = Some(Stop::StopString(s.clone()));
                        break;
                    }
                }
            }
            let stop = stop.unwrap_or(if max_new < when.max_new_tokens {
                Stop::Context
            } else {
                Stop::MaxTokens
            });
            let shown = match stop {
                Stop::StopId(_) if !when.show_stop_id => &ids[..ids.len() - 1],
                _ => &ids[..],
            };
            let text = tokenizer.decode(shown)?;
            Ok(BatchReply { ids, text, stop })
        })
        .collect()
}

/// The ids of a plain prompt as transformers' `tokenizer(text)` gives them (the tokenizer's
/// special tokens added), refusing an empty result.
pub fn prompt_ids(tokenizer: &TextTokenizer, text: &str) -> Result<Vec<u32>, ChatError> {
    let ids = tokenizer.encode_prompt(text)?;
    if ids.is_empty() {
        return Err(ChatError::Empty);
    }
    Ok(ids)
}
