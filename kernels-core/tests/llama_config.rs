//! Hostile llama configs: sizes are checked, with checked arithmetic, against what the files
//! hold before anything is allocated for them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::rc::Rc;

use kernels_core::models::llama::{Llama, LlamaConfig};
use kernels_core::{CpuBackend, Rng, Tensor};

fn tiny() -> LlamaConfig {
    LlamaConfig {
        hidden_size: 8,
        intermediate_size: 12,
        num_hidden_layers: 1,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        vocab_size: 11,
        rms_norm_eps: 1e-5,
        rope_theta: 10000.0,
        max_position_embeddings: 16,
        tie_word_embeddings: true,
        head_dim: 4,
        bos_token_id: None,
        eos_token_ids: vec![],
        variant: Default::default(),
    }
}

fn tiny_checkpoint() -> BTreeMap<String, Tensor> {
    let be = Rc::new(CpuBackend::new());
    let m = Llama::init(tiny(), be, &mut Rng::new(1)).unwrap();
    kernels_core::backend::now_or_never(m.store.to_host())
        .unwrap()
        .unwrap()
}

#[test]
fn a_billion_layers_is_an_error_before_any_allocation() {
    let mut c = tiny();
    c.num_hidden_layers = 1_000_000_000;
    let e = Llama::from_tensors(c, &tiny_checkpoint(), Rc::new(CpuBackend::new()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("num_hidden_layers = 1000000000") && e.contains("holds 11"),
        "{e}"
    );
}

#[test]
fn overflowing_sizes_are_errors_naming_the_fields() {
    let mut c = tiny();
    // 2^62 + 4 on 64-bit targets: times head_dim 4 overflows.
    c.num_attention_heads = usize::MAX / 4 + 4;
    c.num_key_value_heads = 1;
    let e = c.validate().unwrap_err().to_string();
    assert!(
        e.contains("num_attention_heads * head_dim") && e.contains("overflows"),
        "{e}"
    );
    let mut c = tiny();
    c.num_hidden_layers = usize::MAX / 2;
    assert!(c.validate().unwrap_err().to_string().contains("overflows"));
    assert!(c.tensor_count().is_err());
    // The tiny config is fine and counts what tensor_shapes lists.
    let c = tiny();
    assert_eq!(c.checked_num_parameters().unwrap(), c.num_parameters());
    assert_eq!(c.tensor_count().unwrap(), c.tensor_shapes().len());
    let mut untied = tiny();
    untied.tie_word_embeddings = false;
    assert_eq!(untied.tensor_count().unwrap(), untied.tensor_shapes().len());
    assert_eq!(
        untied.checked_num_parameters().unwrap(),
        untied.num_parameters()
    );
}

#[test]
fn every_variant_counts_what_it_lists() {
    use kernels_core::models::llama::Variant;
    let variants = [
        Variant {
            qkv_bias: true,
            ..Variant::default()
        },
        Variant {
            qk_norm: true,
            norm_plus_one: true,
            sandwich_norms: true,
            ..Variant::default()
        },
        Variant {
            fused_projections: true,
            ..Variant::default()
        },
    ];
    for variant in variants {
        let c = LlamaConfig {
            variant: variant.clone(),
            ..tiny()
        };
        assert_eq!(
            c.tensor_count().unwrap(),
            c.checkpoint_shapes_iter().count(),
            "{variant:?}"
        );
        assert_eq!(
            c.checked_num_parameters().unwrap(),
            c.num_parameters(),
            "{variant:?}"
        );
    }
}

// 10^12 positions do not fit a 32-bit usize (the wasm32 build of this test).
#[cfg(target_pointer_width = "64")]
#[test]
fn a_kv_cache_too_large_is_an_error_naming_the_positions_not_an_abort() {
    use kernels_core::Error;
    use kernels_core::models::llama::kv_cache_bytes;
    let mut c = tiny();
    // 16 positions x 1 layer x 1 kv head x head_dim 4, keys and values in f32.
    assert_eq!(kv_cache_bytes(&c, 1, 16).unwrap(), 16 * 4 * 2 * 4);
    c.max_position_embeddings = 1_000_000_000_000;
    c.num_hidden_layers = 32;
    match kv_cache_bytes(&c, 1, 1_000_000_000_000) {
        Err(Error::OutOfMemory { what, bytes }) => {
            assert_eq!(bytes, 1_000_000_000_000 * 32 * 4 * 2 * 4);
            assert!(what.contains("1000000000000 positions"), "{what}");
            assert!(what.contains("max_position_embeddings"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    // A product past u64 is a limit, not a wrapped size.
    assert!(matches!(
        kv_cache_bytes(&c, usize::MAX, usize::MAX),
        Err(Error::LimitExceeded { .. })
    ));
}
