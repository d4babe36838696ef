//! Golden tests of the llama-shaped families against Hugging Face transformers: one tiny random
//! checkpoint per family or rope scaling (Llama 3 `llama3`, `linear`, `dynamic` and `yarn`
//! rope; Qwen2 q/k/v biases; Qwen3 q/k norms and an explicit head_dim; Mistral and Phi-3
//! sliding windows, Phi-3's fused projections; Gemma 3 text with its sliding and full layers),
//! saved by transformers' `save_pretrained`, with the logits transformers computed over the
//! whole sequence and step by step over its KV cache. Made once by
//! `tests/fixtures/families/make_golden.py` and committed. Every position is checked on the
//! CPU (fast path and reference kernels) and on every GPU backend of the matrix, with and
//! without the KV cache, at lengths past the sliding windows and the scaled ropes' original
//! contexts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::rc::Rc;

use kernels_core::{Backend, CpuBackend, Tensor};
use kernels_gpu::testing;
use kernels_tests::golden::{assert_close, logits_with_cache, read_golden, rows};
use native_cli::llama::{build, logits, read_dir};

const CASES: &[&str] = &[
    "llama3_rope",
    "llama_linear_rope",
    "llama_dynamic_rope",
    "llama_yarn_rope",
    "qwen2",
    "qwen3",
    "mistral",
    "phi3",
    "gemma3",
];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/families")
        .join(name)
}

struct Golden {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
    cached: Vec<Vec<f32>>,
}

fn golden(name: &str) -> Golden {
    let (v, tokens, logits) = read_golden(&fixture(name).join("golden.json"));
    Golden {
        tokens,
        logits,
        cached: rows(&v, "logits_cached"),
    }
}

fn check_backend(backend: Rc<dyn Backend>, cases: &[&str]) {
    for name in cases {
        let files = read_dir(&fixture(name)).unwrap();
        let model = build(&files, backend.clone()).unwrap();
        let gold = golden(name);
        let all = logits(&model, &gold.tokens, true).unwrap();
        assert_close(&format!("{name} on {}", backend.name()), &all, &gold.logits);
        let cached = logits_with_cache(&model, &gold.tokens);
        assert_close(
            &format!("{name} with KV cache on {}", backend.name()),
            &cached,
            &gold.cached,
        );
    }
}

#[test]
fn cpu_matches_transformers() {
    check_backend(Rc::new(CpuBackend::new()), CASES);
}

#[test]
fn cpu_reference_kernels_match_transformers() {
    check_backend(Rc::new(CpuBackend::reference()), CASES);
}

#[test]
fn every_gpu_backend_matches_transformers() {
    let test = "every_gpu_backend_matches_transformers";
    for gpu in testing::gpu_backends(test) {
        check_backend(gpu.backend.clone(), CASES);
        eprintln!("{test}: ok on {}", gpu.name);
    }
}

#[test]
fn the_fixtures_exercise_what_they_name() {
    // The KV cache of dynamic rope differs from the full forward past max_position_embeddings
    // (each step's keys keep the base of their step, as in transformers): the fixture must
    // show it, or the dynamic case tests nothing past the original context.
    let g = golden("llama_dynamic_rope");
    let diff = g
        .logits
        .iter()
        .flatten()
        .zip(g.cached.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(diff > 1e-2, "dynamic rope: full and cached agree ({diff})");
    // The sliding windows are shorter than the sequences.
    for (name, window) in [("mistral", 4), ("phi3", 5), ("gemma3", 4)] {
        let files = read_dir(&fixture(name)).unwrap();
        let model = build(&files, Rc::new(CpuBackend::new())).unwrap();
        assert!(
            (0..model.config.num_hidden_layers).any(|l| model.config.window(l) == Some(window)),
            "{name}: window"
        );
        assert!(golden(name).tokens.len() > window + 2, "{name}: sequence");
    }
}

/// The error `build` gives for fixture `name` with its config.json edited by `edit`.
fn config_error(name: &str, edit: &dyn Fn(&mut serde_json::Value)) -> String {
    let mut files = read_dir(&fixture(name)).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&files.config).unwrap();
    edit(&mut v);
    files.config = v.to_string();
    build(&files, Rc::new(CpuBackend::new()))
        .err()
        .unwrap()
        .to_string()
}

#[test]
fn unimplemented_config_fields_are_errors_naming_them() {
    use serde_json::json;
    let cases: &[(&str, &str, serde_json::Value)] = &[
        ("llama3_rope", "attention_bias", json!(true)),
        ("llama3_rope", "mlp_bias", json!(true)),
        ("qwen3", "attention_bias", json!(true)),
        ("mistral", "hidden_act", json!("gelu")),
        ("gemma3", "hidden_activation", json!("gelu")),
        ("gemma3", "final_logit_softcapping", json!(30.0)),
        ("gemma3", "attn_logit_softcapping", json!(50.0)),
        ("gemma3", "use_bidirectional_attention", json!(true)),
    ];
    for (name, field, value) in cases {
        let e = config_error(name, &|v| v[*field] = value.clone());
        assert!(e.contains(field), "{name} with {field} = {value}: {e}");
    }
    // Fields inside rope_parameters.
    let rope_cases: &[(&str, &str, serde_json::Value)] = &[
        ("llama3_rope", "rope_type", json!("longrope")),
        ("phi3", "partial_rotary_factor", json!(0.5)),
        ("llama_yarn_rope", "truncate", json!(false)),
        ("llama_yarn_rope", "mscale", json!(0.7)),
    ];
    for (name, field, value) in rope_cases {
        let e = config_error(name, &|v| v["rope_parameters"][*field] = value.clone());
        assert!(e.contains(field), "{name} with rope {field} = {value}: {e}");
    }
    // Another architecture, and a model_type that contradicts the architecture.
    let e = config_error("qwen2", &|v| v["model_type"] = json!("gpt_neox"));
    assert!(e.contains("gpt_neox"), "{e}");
    let e = config_error("qwen2", &|v| v["model_type"] = json!("qwen3"));
    assert!(e.contains("Qwen2ForCausalLM") && e.contains("qwen3"), "{e}");
    // A sliding layer without a window.
    let e = config_error("gemma3", &|v| v["sliding_window"] = json!(null));
    assert!(e.contains("sliding_window"), "{e}");
}

#[test]
fn checkpoint_tensors_the_config_does_not_use_are_errors() {
    let cpu: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    // A bias the family does not have.
    let mut files = read_dir(&fixture("qwen2")).unwrap();
    files.tensors.insert(
        "model.layers.0.self_attn.o_proj.bias".into(),
        Tensor::zeros(&[16]).unwrap(),
    );
    let e = build(&files, cpu.clone()).err().unwrap().to_string();
    assert!(e.contains("model.layers.0.self_attn.o_proj.bias"), "{e}");
    // An lm_head beside tied embeddings.
    let mut files = read_dir(&fixture("gemma3")).unwrap();
    files
        .tensors
        .insert("lm_head.weight".into(), Tensor::zeros(&[37, 16]).unwrap());
    let e = build(&files, cpu.clone()).err().unwrap().to_string();
    assert!(
        e.contains("lm_head.weight") && e.contains("tie_word_embeddings = true"),
        "{e}"
    );
    // Phi-3's fused tensors next to the split ones.
    let mut files = read_dir(&fixture("phi3")).unwrap();
    files.tensors.insert(
        "model.layers.1.self_attn.q_proj.weight".into(),
        Tensor::zeros(&[16, 16]).unwrap(),
    );
    let e = build(&files, cpu).err().unwrap().to_string();
    assert!(e.contains("model.layers.1.self_attn.q_proj.weight"), "{e}");
}
