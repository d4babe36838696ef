//! Chat with a Hugging Face model directory, shared by the `kernels` CLI and the web page:
//! the model's own chat template rendered as transformers renders it ([`ChatTemplate`]), the
//! tokens that end an assistant's turn, and generated text streamed so that it is exactly the
//! tokenizer's decode of the generated ids ([`TextStream`]).
//!
//! It is also the one text-generation path of the CLI (`generate`, `chat`, `eval`) and the page: a
//! prompt encoded as transformers' `tokenizer(text)` encodes it ([`TextTokenizer`]), a chat as
//! `apply_chat_template` encodes it, the decode loop with its stop conditions and streaming
//! ([`Completion`], over kernels-core's model-level [`Decoder`]; [`complete_batch`] for an
//! evaluation's many prompts at once), and a chat whose KV cache survives between turns
//! ([`ChatSession`]).
//!
//! The tokenizer is the `tokenizers` crate: natively with its C-free regex engine, on the page
//! its wasm build.

pub mod generate;
mod json;
pub mod session;
pub mod stream;
pub mod template;
mod time;
pub mod tokenizer;

pub use generate::{BatchReply, Completion, Step, Stop, StopWhen, complete_batch, prompt_ids};
pub use kernels_core::models::llama::Decoder;
pub use session::{CHAT_CONTEXT, ChatSession, ChatSetup, ChatTurn, TurnReport};
pub use stream::TextStream;
pub use template::{
    ChatTemplate, END_OF_TURN_TOKENS, Message, TEMPLATE_FUEL, generation_config_eos,
    generation_config_stop_strings,
};
pub use tokenizer::TextTokenizer;

/// What goes wrong reading or rendering a chat template.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatError {
    /// Neither `tokenizer_config.json`'s `chat_template` nor `chat_template.jinja`.
    NoTemplate { origin: String },
    /// A file is not what it should be.
    BadFile { path: String, why: String },
    /// The template does not compile, or refuses the conversation (its `raise_exception`).
    Template { origin: String, why: String },
    /// The tokenizer refused a text or an id.
    Tokenizer { why: String },
    /// The prompt has no tokens.
    Empty,
    /// More tokens than the model's context holds.
    TooLong { tokens: usize, context: usize },
    /// The model failed (a device error, a bad id).
    Model(kernels_core::Error),
}

impl From<kernels_core::Error> for ChatError {
    fn from(e: kernels_core::Error) -> ChatError {
        ChatError::Model(e)
    }
}

impl core::fmt::Display for ChatError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ChatError::NoTemplate { origin } => write!(
                f,
                "{origin}: no chat template (neither `chat_template` in tokenizer_config.json \
                 nor chat_template.jinja); this looks like a base model, not an instruct one"
            ),
            ChatError::BadFile { path, why } => write!(f, "{path}: {why}"),
            ChatError::Template { origin, why } => write!(f, "{origin}: chat template: {why}"),
            ChatError::Tokenizer { why } => write!(f, "tokenizer: {why}"),
            ChatError::Empty => write!(f, "the prompt is empty: it has no tokens"),
            ChatError::TooLong { tokens, context } => write!(
                f,
                "{tokens} tokens, and the model's context (max_position_embeddings) holds {context}"
            ),
            ChatError::Model(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ChatError {}
