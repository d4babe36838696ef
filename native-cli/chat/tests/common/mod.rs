//! What the chat crate's tests share: the fixtures directory and the random qwen2 checkpoint of
//! the family fixtures, with the ChatML tokenizer beside it.

#![allow(clippy::unwrap_used, dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kernels_chat::TextTokenizer;
use kernels_core::models::hf;
use kernels_core::models::llama::LlamaConfig;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// The qwen2 family fixture (vocab 37) with `max_position_embeddings = context`: its config and
/// its checkpoint, for `Llama::for_inference` on the test's backend.
pub fn qwen2(context: usize) -> (LlamaConfig, hf::Checkpoint) {
    let dir = fixtures().join("families/qwen2");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    config["max_position_embeddings"] = context.into();
    let mut files = BTreeMap::new();
    files.insert("config.json".to_string(), config.to_string().into_bytes());
    files.insert(
        "model.safetensors".to_string(),
        std::fs::read(dir.join("model.safetensors")).unwrap(),
    );
    let checkpoint = hf::load_checkpoint_from_map("qwen2", &files).unwrap();
    let config = LlamaConfig::from_json(&checkpoint.config).unwrap();
    (config, checkpoint)
}

/// The ChatML tokenizer of `chat/qwen2_chat`.
pub fn qwen2_chat_tokenizer() -> TextTokenizer {
    TextTokenizer::new(
        tokenizers::Tokenizer::from_file(fixtures().join("chat/qwen2_chat/tokenizer.json"))
            .unwrap(),
    )
}
