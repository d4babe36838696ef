//! Time per decode token by position on the CPU backend: a random llama (the llama2.c
//! stories15M shape unless a config.json path is given), greedy, one token at a time through
//! `Generation`, timed at every step. Prints the median time per token around positions 32
//! and 400 and their ratio (the KV cache's cost: flat up to attention's own linear reads).
//!
//! `cargo run --release -p kernels-core --example decode_by_position [-- CONFIG.json]`

use std::rc::Rc;
use std::time::Instant;

use kernels_core::backend::now_or_never;
use kernels_core::models::llama::{GenerateOptions, Generation, Llama, LlamaConfig, Sampling};
use kernels_core::{CpuBackend, Rng};

const STORIES15M: &str = r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "vocab_size": 32000, "hidden_size": 288, "intermediate_size": 768, "num_hidden_layers": 6,
  "num_attention_heads": 6, "num_key_value_heads": 6, "max_position_embeddings": 512,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": true,
  "hidden_act": "silu"}"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let text = match std::env::args().nth(1) {
        Some(path) => std::fs::read_to_string(path)?,
        None => STORIES15M.to_string(),
    };
    let config = LlamaConfig::from_json(&text)?;
    let model = Llama::init(config, Rc::new(CpuBackend::new()), &mut Rng::new(1))?;
    let prompt: Vec<u32> = (0..16).map(|i| 100 + i).collect();
    let last = 420;
    let opts = GenerateOptions {
        max_new_tokens: last - prompt.len() + 1,
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        stop_tokens: vec![],
    };
    let mut run = Generation::start(&model, &prompt, &opts)?;
    // times[p]: the step that fed the token at position p (the prefill is p = 0).
    let mut times = Vec::new();
    loop {
        let t0 = Instant::now();
        let next = now_or_never(run.next_token()).ok_or("CPU steps are ready at once")??;
        if next.is_none() {
            break;
        }
        times.push(t0.elapsed().as_secs_f64());
    }
    // Step i >= 1 feeds the token at position prompt.len() + i - 1.
    // The median of the 16 steps around a position: robust to a busy machine.
    let at = |pos: usize| -> f64 {
        let mut w: Vec<f64> = (pos - 8..pos + 8)
            .map(|p| times[p + 1 - prompt.len()])
            .collect();
        w.sort_by(f64::total_cmp);
        (w[7] + w[8]) / 2.0
    };
    let (a, b) = (at(32), at(400));
    println!(
        "decode ms/token: position 32 {:.3}, position 400 {:.3}, ratio {:.3} ({} steps)",
        a * 1e3,
        b * 1e3,
        b / a,
        times.len()
    );
    Ok(())
}
