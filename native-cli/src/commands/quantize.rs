//! `kernels quantize --model DIR --to q4_k --out FILE.gguf`: a Hugging Face checkpoint (f32,
//! f16 or bf16; or a GGUF file) with its matrices quantized as it loads, written as a GGUF v3
//! file that the `gguf` package and llama.cpp's tools read back. The file is written whole or
//! not at all (a temporary beside it, then a rename).

use std::path::Path;

use kernels_core::DType;
use kernels_core::gguf::llama::llama_to_gguf;
use kernels_core::models::llama::LlamaConfig;

use crate::atomic_write::write_atomically;
use crate::llama::{quantize_files, read_dir};
use crate::{CliResult, emit, fail};

/// `kernels quantize`.
pub fn run(model: &Path, to: DType, out: &Path) -> CliResult<()> {
    let mut files = read_dir(model)?;
    let config = match &files.parsed_config {
        Some(c) => c.clone(),
        None => LlamaConfig::from_json(&files.config)
            .map_err(|e| fail(format!("{}: {e}", files.origin)))?,
    };
    // The checkpoint must be one the loader accepts (names, shapes, no stray tensors) before
    // anything is written.
    config
        .validate()
        .map_err(|e| fail(format!("{}: {e}", files.origin)))?;
    quantize_files(&mut files, Some(to))?;
    let writer = llama_to_gguf(&config, &files.tensors)
        .map_err(|e| fail(format!("{}: {e}", files.origin)))?;
    let bytes = writer
        .to_bytes()
        .map_err(|e| fail(format!("{}: {e}", out.display())))?;
    write_atomically(out, &bytes).map_err(|e| fail(format!("{}: {e}", out.display())))?;
    emit(&format!(
        "wrote {} ({:.1} MB, {} tensors; the tokenizer is not written: tokenizer.ggml.* from a tokenizer.json is not implemented yet)\n",
        out.display(),
        bytes.len() as f64 / 1e6,
        files.tensors.len()
    ))
}
