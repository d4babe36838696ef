//! The Hugging Face model-directory readers on arbitrary files: `config.json`
//! (`LlamaConfig::from_json`, then `Llama::from_tensors`, which checks the config against the
//! tensors before allocating anything), `model.safetensors.index.json` and the shards it names.
//! Never a panic or an abort (a config asking for 10^9 layers must not allocate them).
//!
//! Input: `u16 LE` length + config.json, `u16 LE` length + index.json (length 0: no index, the
//! rest is `model.safetensors`), then the shard bytes.
#![no_main]

use std::collections::BTreeMap;
use std::rc::Rc;

use kernels_core::CpuBackend;
use kernels_core::models::hf;
use kernels_core::models::llama::{Llama, LlamaConfig};
use libfuzzer_sys::fuzz_target;

fn split(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = u16::from_le_bytes([*data.first()?, *data.get(1)?]) as usize;
    let rest = data.get(2..)?;
    Some((rest.get(..n)?, rest.get(n..)?))
}

fuzz_target!(|data: &[u8]| {
    let Some((config, rest)) = split(data) else {
        return;
    };
    let Some((index, shard)) = split(rest) else {
        return;
    };
    // The config alone, as `kernels generate` reads it.
    if let Ok(text) = std::str::from_utf8(config) {
        let _ = LlamaConfig::from_json(text);
    }
    let mut files = BTreeMap::new();
    files.insert("config.json".to_string(), config.to_vec());
    if index.is_empty() {
        files.insert("model.safetensors".to_string(), shard.to_vec());
    } else {
        files.insert("model.safetensors.index.json".to_string(), index.to_vec());
        files.insert(
            "model-00001-of-00001.safetensors".to_string(),
            shard.to_vec(),
        );
    }
    let Ok(ckpt) = hf::load_checkpoint_from_map("fuzz", &files) else {
        return;
    };
    let Ok(cfg) = LlamaConfig::from_json(&ckpt.config) else {
        return;
    };
    let _ = Llama::from_tensors(cfg, &ckpt.tensors, Rc::new(CpuBackend::new()));
});
