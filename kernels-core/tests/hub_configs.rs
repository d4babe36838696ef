//! The `config.json` files of the small models people run, as the Hugging Face Hub holds them
//! (written by transformers 4.x: `rope_theta` and `rope_scaling` rather than 5.x's
//! `rope_parameters`), copied into `tests/fixtures/hub_configs/`: each one loads, as the family
//! it is, with the sizes and rotary scaling it declares. The families' numerics are checked
//! against transformers by the golden tests (`tests/tests/families_golden.rs`); this checks that
//! the real checkpoints' configs reach them, SmolLM2 and TinyLlama (plain llama) included.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_core::models::llama::{LlamaConfig, MlpAct, RopeKind};

/// The fixture's text, embedded (these tests also run on wasm32 in the browser, with no files).
macro_rules! load {
    ($name:literal) => {
        LlamaConfig::from_json(include_str!(concat!(
            "fixtures/hub_configs/",
            $name,
            ".json"
        )))
        .unwrap_or_else(|e| panic!("{}: {e}", $name))
    };
}

#[test]
fn plain_llama_checkpoints_load_as_llama() {
    let c = load!("smollm2-135m-instruct");
    assert_eq!(c.variant.model_type, "llama");
    assert_eq!((c.hidden_size, c.num_hidden_layers), (576, 30));
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (9, 3, 64)
    );
    assert_eq!(c.rope_theta, 100000.0);
    assert!(c.tie_word_embeddings);
    assert_eq!(c.variant.rope, RopeKind::Default);
    assert!(!c.variant.qkv_bias && !c.variant.qk_norm && c.variant.sliding_window.is_none());

    let c = load!("tinyllama-1.1b-chat");
    assert_eq!(c.variant.model_type, "llama");
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (32, 4, 64)
    );
    assert!(!c.tie_word_embeddings);
    assert_eq!(c.eos_token_ids, [2]);
}

#[test]
fn llama_3_2_loads_with_llama3_rope_scaling() {
    let c = load!("llama-3.2-1b");
    assert_eq!(c.rope_theta, 500000.0);
    assert_eq!(
        c.variant.rope,
        RopeKind::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
        }
    );
    assert_eq!((c.num_key_value_heads, c.head_dim), (8, 64));
}

#[test]
fn qwen_checkpoints_load_with_their_biases_and_norms() {
    let c = load!("qwen2.5-0.5b-instruct");
    assert_eq!(c.variant.model_type, "qwen2");
    assert!(c.variant.qkv_bias && !c.variant.qk_norm);
    // `use_sliding_window: false`: every layer attends to the whole context.
    assert!(c.variant.sliding_window.is_none(), "{:?}", c.variant);
    assert_eq!(c.rms_norm_eps, 1e-6);

    let c = load!("qwen3-0.6b");
    assert_eq!(c.variant.model_type, "qwen3");
    assert!(c.variant.qk_norm && !c.variant.qkv_bias);
    // The explicit head_dim, not hidden / heads (1024 / 16 = 64).
    assert_eq!(c.head_dim, 128);
}

#[test]
fn sliding_window_families_load_with_their_window() {
    let c = load!("mistral-7b-v0.1");
    assert_eq!(c.variant.model_type, "mistral");
    assert_eq!(c.variant.sliding_window, Some(4096));

    let c = load!("phi-3-mini-4k-instruct");
    assert_eq!(c.variant.model_type, "phi3");
    assert!(c.variant.fused_projections);
    assert_eq!(c.variant.sliding_window, Some(2047));
}

#[test]
fn gemma_3_loads_with_its_layer_types_and_local_rope() {
    let c = load!("gemma-3-270m");
    let v = &c.variant;
    assert_eq!(v.model_type, "gemma3_text");
    assert!(v.norm_plus_one && v.sandwich_norms && v.scale_embeddings && v.qk_norm);
    assert_eq!(v.mlp_act, MlpAct::GeluTanh);
    assert_eq!(v.query_pre_attn_scalar, Some(256.0));
    assert_eq!(v.sliding_window, Some(512));
    let full: Vec<usize> = (0..c.num_hidden_layers)
        .filter(|&l| !v.sliding_layers[l])
        .collect();
    assert_eq!(full, [5, 11, 17]);
    assert_eq!(c.rope_theta, 1_000_000.0);
    assert_eq!(v.local_rope.map(|r| r.theta), Some(10000.0));
    assert_eq!(c.head_dim, 256);
}
