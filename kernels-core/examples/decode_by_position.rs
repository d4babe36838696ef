//! Time per decode token by position on the CPU backend: a random llama (the llama2.c
//! stories15M shape unless a config.json path is given), greedy, one token at a time through
//! `Generation`, timed at every step. Prints the median time per token around positions 32
//! and 400 and their ratio (the KV cache's cost: flat up to attention's own linear reads).
//!
//! Then the cache's own work per decode step alone (every layer's keys and values stored and
//! attention over them, minimum of many repetitions): the in-place cache (`kv_write` into a
//! donated buffer, attention reading `kv_len` keys) against the concat cache it replaced (the
//! whole cache copied at every step).
//!
//! `cargo run --release -p kernels-core --example decode_by_position [-- CONFIG.json] [--json FILE]`
//!
//! `--json FILE` also writes every step's time as `{"model", "backend", "prompt_len",
//! "positions": [...], "ms_per_token": [...]}`, which `tests/src/bin/charts.rs` draws.

use std::rc::Rc;
use std::time::Instant;

use kernels_core::autograd::{Graph, Var};
use kernels_core::backend::{Backend, now_or_never};
use kernels_core::models::llama::{GenerateOptions, Generation, Llama, LlamaConfig, Sampling};
use kernels_core::{CpuBackend, Rng};

const STORIES15M: &str = r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "vocab_size": 32000, "hidden_size": 288, "intermediate_size": 768, "num_hidden_layers": 6,
  "num_attention_heads": 6, "num_key_value_heads": 6, "max_position_embeddings": 512,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": true,
  "hidden_act": "silu"}"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut config_path, mut json_path) = (None, None);
    while let Some(a) = args.next() {
        if a == "--json" {
            json_path = Some(args.next().ok_or("--json needs a file")?);
        } else {
            config_path = Some(a);
        }
    }
    let text = match &config_path {
        Some(path) => std::fs::read_to_string(path)?,
        None => STORIES15M.to_string(),
    };
    let config = LlamaConfig::from_json(&text)?;
    cache_step_only(&config)?;
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
    if let Some(path) = json_path {
        // Step i >= 1 fed the token at position prompt.len() + i - 1.
        let (mut positions, mut ms) = (Vec::new(), Vec::new());
        for (i, t) in times.iter().enumerate().skip(1) {
            positions.push((prompt.len() + i - 1).to_string());
            ms.push(format!("{:.4}", t * 1e3));
        }
        let model = config_path
            .as_deref()
            .unwrap_or("stories15M shape, random f32");
        std::fs::write(
            path,
            format!(
                "{{\"model\":{model:?},\"backend\":\"cpu\",\"prompt_len\":{},\"positions\":[{}],\"ms_per_token\":[{}]}}\n",
                prompt.len(),
                positions.join(","),
                ms.join(",")
            ),
        )?;
    }
    Ok(())
}

/// Seconds for one decode step's cache work at position `pos` (all layers, keys and values,
/// then attention over the `pos + 1` keys): the minimum over repetitions.
fn cache_step_only(c: &LlamaConfig) -> Result<(), Box<dyn std::error::Error>> {
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let g = Graph::inference(backend.clone());
    let mut rng = Rng::new(2);
    let (hq, hkv, d, cap) = (
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.max_position_embeddings,
    );
    let mut var = |shape: &[usize]| -> Result<Var, kernels_core::Error> {
        g.constant(backend.upload(&rng.normal_tensor(shape, 0.0, 1.0)?)?)
    };
    let q = var(&[1, hq, 1, d])?;
    let new = var(&[1, hkv, 1, d])?;
    let best = |f: &mut dyn FnMut() -> Result<(), kernels_core::Error>| {
        let mut best = f64::INFINITY;
        for _ in 0..200 {
            let t0 = Instant::now();
            f()?;
            best = best.min(t0.elapsed().as_secs_f64());
        }
        Ok::<f64, kernels_core::Error>(best)
    };
    for pos in [32usize, 400] {
        // In place: the preallocated caches, moved through kv_write at every step.
        let mut caches: Vec<Option<Var>> = (0..2 * c.num_hidden_layers)
            .map(|_| var(&[1, hkv, cap, d]).map(Some))
            .collect::<Result<_, _>>()?;
        let in_place = best(&mut || {
            for pair in caches.chunks_mut(2) {
                let mut kv = Vec::new();
                for slot in pair.iter_mut() {
                    let cache = slot.take().ok_or(kernels_core::Error::Autograd {
                        why: "cache taken".into(),
                    })?;
                    let out = g.kv_write(cache, &new, pos)?;
                    *slot = Some(out.clone());
                    kv.push(out);
                }
                g.attention_prefix(&q, &kv[0], &kv[1], true, pos + 1)?;
            }
            Ok(())
        })?;
        // The concat cache: `[hkv, pos * d]` grown by one position (a copy of all of it).
        let old = var(&[hkv, pos * d])?;
        let flat = g.reshape(&new, &[hkv, d])?;
        let concat = best(&mut || {
            for _ in 0..c.num_hidden_layers {
                let k = g.concat(&old, &flat)?;
                let v = g.concat(&old, &flat)?;
                let k = g.reshape(&k, &[1, hkv, pos + 1, d])?;
                let v = g.reshape(&v, &[1, hkv, pos + 1, d])?;
                g.attention(&q, &k, &v, true, None)?;
            }
            Ok(())
        })?;
        println!(
            "cache work per decode step at position {pos}: in place {:.1} us, concat {:.1} us",
            in_place * 1e6,
            concat * 1e6
        );
    }
    Ok(())
}
