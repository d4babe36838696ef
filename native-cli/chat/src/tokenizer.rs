//! A Hugging Face tokenizer as the generation path uses it: a prompt encoded as transformers'
//! `tokenizer(text)` encodes it (the post-processor's special tokens added: a Llama 3
//! tokenizer's `<|begin_of_text|>`, a GGUF's BOS when `tokenizer.ggml.add_bos_token` is true,
//! which kernels-core writes into the tokenizer's post-processor), a rendered chat as
//! `apply_chat_template` encodes it (nothing added: the template wrote the special tokens), and
//! ids decoded with the special tokens kept, as `tokenizer.decode(ids)`.

use std::rc::Rc;

use crate::ChatError;

/// A `tokenizers` tokenizer, shared cheaply (the CLI and the page hand clones to generations).
#[derive(Clone)]
pub struct TextTokenizer(Rc<tokenizers::Tokenizer>);

impl core::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "TextTokenizer({} tokens)", self.0.get_vocab_size(true))
    }
}

fn tokenizer_error(e: &tokenizers::Error) -> ChatError {
    ChatError::Tokenizer { why: e.to_string() }
}

impl TextTokenizer {
    pub fn new(tokenizer: tokenizers::Tokenizer) -> TextTokenizer {
        TextTokenizer(Rc::new(tokenizer))
    }

    /// The `tokenizers` tokenizer itself.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.0
    }

    /// A prompt's ids as transformers' `tokenizer(text)` gives them: the post-processor's
    /// special tokens (BOS, EOS) added.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>, ChatError> {
        self.encode(text, true)
    }

    /// A rendered chat template's ids as `apply_chat_template` gives them: nothing added (the
    /// template wrote the BOS itself; adding one would make two).
    pub fn encode_rendered(&self, text: &str) -> Result<Vec<u32>, ChatError> {
        self.encode(text, false)
    }

    fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>, ChatError> {
        self.0
            .encode(text, special)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| tokenizer_error(&e))
    }

    /// Ids to text with the special tokens kept: transformers' `tokenizer.decode(ids)`.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ChatError> {
        self.0.decode(ids, false).map_err(|e| tokenizer_error(&e))
    }

    /// The id of the tokenizer model's unknown token (what text outside its vocabulary becomes),
    /// when it has one (a BPE's optional `unk_token`, a WordPiece's or WordLevel's; a
    /// Unigram's is not public in `tokenizers`).
    pub fn unk_id(&self) -> Option<u32> {
        use tokenizers::models::ModelWrapper;
        let text = match self.0.get_model() {
            ModelWrapper::BPE(m) => m.unk_token.clone(),
            ModelWrapper::WordPiece(m) => Some(m.unk_token.clone()),
            ModelWrapper::WordLevel(m) => Some(m.unk_token.clone()),
            ModelWrapper::Unigram(_) => None,
        };
        text.and_then(|t| self.0.token_to_id(&t))
    }

    /// The id of a token's text, when the vocabulary has it.
    pub fn token_to_id(&self, text: &str) -> Option<u32> {
        self.0.token_to_id(text)
    }

    /// The text of an id, when the vocabulary has it.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.0.id_to_token(id)
    }
}
