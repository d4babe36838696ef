//! Generate text with a llama-family model from a Hugging Face directory (`config.json`,
//! `model.safetensors` or its shards, `tokenizer.json`), greedily, on the CPU.
//!
//! `cargo run --release -p native-cli --example generate -- [MODEL_DIR] [PROMPT]`
//!
//! Without arguments it runs the demo model shipped in `native-cli/models/adder` (a small llama
//! trained on three-digit addition, which writes the sum's digits least significant first).

use std::path::PathBuf;
use std::rc::Rc;

use kernels_core::CpuBackend;
use kernels_core::backend::now_or_never;
use kernels_core::models::llama::{GenerateOptions, Sampling, generate};
use native_cli::llama::{build, read_dir};

fn main() -> native_cli::CliResult<()> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/adder"),
        PathBuf::from,
    );
    let prompt = args.next().unwrap_or_else(|| "123+456=".into());

    let files = read_dir(&dir)?;
    let tokenizer = files
        .tokenizer
        .as_ref()
        .ok_or("the model directory has no tokenizer.json")?;
    let model = build(&files, Rc::new(CpuBackend::new()))?;

    let ids = tokenizer.encode(prompt.as_str(), false)?.get_ids().to_vec();
    let opts = GenerateOptions {
        max_new_tokens: 32,
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        stop_tokens: model.config.eos_token_ids.clone(),
    };
    // On the CPU every step is ready at once; on wgpu use `pollster::block_on` instead.
    let (new_ids, reason) = now_or_never(generate(&model, &ids, &opts, &mut |_, _| true))
        .ok_or("a CPU generation step was not ready at once")??;
    println!("{prompt}{}", tokenizer.decode(&new_ids, false)?);
    println!("({} new tokens, stopped by {reason:?})", new_ids.len());
    Ok(())
}
