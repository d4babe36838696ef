//! `kernels bench` rows for llama generation: prefill and decode tokens/s of the embedded demo
//! model and of a random ~15M-parameter llama, CPU against wgpu, with the wgpu counters of one
//! decode step (dispatches, submits, bytes moved).
//!
//! A run is one `generate` call: prefill is the time from the call to the first streamed token
//! (forward over the prompt, sampling, the id's download), decode the time per token after it.

use std::time::Instant;

use kernels_core::models::llama::{self, GenerateOptions, Llama, LlamaConfig, Sampling};
use kernels_core::{Backend, Rng};
use kernels_gpu::Counters;

use crate::commands::bench::report::BenchRow;
use crate::{CliResult, addition};

/// A random llama of about 15M parameters (8 layers, hidden 384, GQA 6/2, vocab 8192, tied).
pub fn random_15m() -> LlamaConfig {
    LlamaConfig {
        hidden_size: 384,
        intermediate_size: 1024,
        num_hidden_layers: 8,
        num_attention_heads: 6,
        num_key_value_heads: 2,
        vocab_size: 8192,
        rms_norm_eps: 1e-5,
        rope_theta: kernels_core::op::ROPE_THETA,
        max_position_embeddings: 1024,
        tie_word_embeddings: true,
        head_dim: 64,
        bos_token_id: None,
        eos_token_ids: vec![],
        variant: Default::default(),
    }
}

/// Timings and counters of generation runs on one model.
struct Measured {
    prefill_s: Vec<f64>,
    decode_s_per_token: Vec<f64>,
    step: Option<Counters>,
    prefill: Option<Counters>,
}

fn measure(
    model: &Llama,
    gpu: Option<&kernels_gpu::WgpuBackend>,
    prompt: &[u32],
    new_tokens: usize,
    runs: usize,
) -> CliResult<Measured> {
    let opts = GenerateOptions {
        max_new_tokens: new_tokens,
        sampling: Sampling::default(),
        stop_tokens: vec![],
    };
    let mut m = Measured {
        prefill_s: vec![],
        decode_s_per_token: vec![],
        step: None,
        prefill: None,
    };
    // One untimed run builds the pipelines.
    for run in 0..=runs {
        let before = gpu.map(|g| g.counters());
        let start = Instant::now();
        let mut marks: Vec<(Instant, Option<Counters>)> = Vec::new();
        pollster::block_on(llama::generate(model, prompt, &opts, &mut |_, _| {
            marks.push((Instant::now(), gpu.map(|g| g.counters())));
            true
        }))?;
        if run == 0 {
            continue;
        }
        let (Some(first), Some(last)) = (marks.first(), marks.last()) else {
            continue;
        };
        m.prefill_s.push((first.0 - start).as_secs_f64());
        if marks.len() > 1 {
            m.decode_s_per_token
                .push((last.0 - first.0).as_secs_f64() / (marks.len() - 1) as f64);
        }
        if let [.., (_, Some(a)), (_, Some(b))] = marks.as_slice() {
            m.step = Some(b.since(a));
        }
        if let (Some(b), Some((_, Some(f)))) = (before, marks.first()) {
            m.prefill = Some(f.since(&b));
        }
    }
    Ok(m)
}

pub(super) fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The llama rows for one backend.
pub fn rows(
    backend: std::rc::Rc<dyn Backend>,
    gpu: Option<&kernels_gpu::WgpuBackend>,
    quick: bool,
    runs: usize,
) -> Vec<BenchRow> {
    let mut out = Vec::new();
    let mut rng = Rng::new(0x11a3a);
    // Software adapters take seconds per 15M-parameter token: --quick keeps it to one short run.
    let (prompt_len, new_tokens, runs) = if quick { (8, 4, 1) } else { (128, 32, runs) };
    let models: Vec<(&str, CliResult<Llama>, Vec<u32>, usize)> = vec![
        (
            "llama_demo",
            addition::embedded().and_then(|f| crate::llama::build(&f, backend.clone())),
            addition::ids(&addition::prompt(123, 456)).unwrap_or_default(),
            addition::ANSWER_LEN,
        ),
        (
            "llama_15m",
            Llama::init(random_15m(), backend.clone(), &mut rng).map_err(Into::into),
            (0..prompt_len).map(|i| (i * 37 % 8192) as u32).collect(),
            new_tokens,
        ),
    ];
    for (name, model, prompt, n) in models {
        let mut base = BenchRow {
            backend: backend.name(),
            runs,
            ..Default::default()
        };
        let r = model.and_then(|m| {
            let label = format!(
                "{:.2}M params, prompt {}, {} new",
                m.config.num_parameters() as f64 / 1e6,
                prompt.len(),
                n
            );
            measure(&m, gpu, &prompt, n, runs).map(|x| (x, label))
        });
        match r {
            Ok((mut m, label)) => {
                let pre = median(&mut m.prefill_s);
                let dec = median(&mut m.decode_s_per_token);
                out.push(BenchRow {
                    bench: format!("{name}_prefill"),
                    size: label.clone(),
                    median_ms: pre.map(|s| s * 1e3),
                    tokens_per_s: pre.map(|s| prompt.len() as f64 / s.max(1e-12)),
                    counters: m.prefill,
                    ..base.clone()
                });
                out.push(BenchRow {
                    bench: format!("{name}_decode"),
                    size: label,
                    median_ms: dec.map(|s| s * 1e3),
                    tokens_per_s: dec.map(|s| 1.0 / s.max(1e-12)),
                    counters: m.step,
                    ..base.clone()
                });
            }
            Err(e) => {
                base.bench = name.into();
                base.error = Some(e.to_string());
                out.push(base);
            }
        }
    }
    out
}
