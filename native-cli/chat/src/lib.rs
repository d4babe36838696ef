//! Chat with a Hugging Face model directory, shared by the `kernels` CLI and the web page:
//! the model's own chat template rendered as transformers renders it ([`ChatTemplate`]), the
//! tokens that end an assistant's turn, and generated text streamed so that it is exactly the
//! tokenizer's decode of the generated ids ([`TextStream`]).
//!
//! Nothing here knows a tokenizer library: decoding and vocabulary look-ups are passed in, so
//! the CLI (the `tokenizers` crate with its C-free regex engine) and the page (its wasm build)
//! use the same code.

mod json;
pub mod stream;
pub mod template;
mod time;

pub use stream::TextStream;
pub use template::{ChatTemplate, END_OF_TURN_TOKENS, Message, generation_config_eos};

/// What goes wrong reading or rendering a chat template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatError {
    /// Neither `tokenizer_config.json`'s `chat_template` nor `chat_template.jinja`.
    NoTemplate { origin: String },
    /// A file is not what it should be.
    BadFile { path: String, why: String },
    /// The template does not compile, or refuses the conversation (its `raise_exception`).
    Template { origin: String, why: String },
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
        }
    }
}

impl std::error::Error for ChatError {}
