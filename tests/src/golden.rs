//! What the golden tests against transformers share (`tests/tests/llama_golden.rs`,
//! `tests/tests/families_golden.rs`): the logit comparison and the KV-cache walk.

#![allow(clippy::unwrap_used, clippy::panic)]

use kernels_core::Tensor;
use kernels_core::autograd::Graph;
use kernels_core::models::llama::{KvCache, Llama};

/// f32 against PyTorch's f32 over two small layers: rounding differs in sums of 32..56 terms.
pub const ATOL: f32 = 2e-4;
pub const RTOL: f32 = 2e-4;

/// Checks every logit against transformers' within `ATOL + RTOL |want|`; returns the largest
/// absolute error.
pub fn assert_close(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: positions");
    let mut worst = 0.0f32;
    for (p, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: vocab at {p}");
        for (v, (a, b)) in g.iter().zip(w).enumerate() {
            let err = (a - b).abs();
            worst = worst.max(err);
            assert!(
                err <= ATOL + RTOL * b.abs(),
                "{what}: position {p}, token {v}: got {a}, transformers {b}"
            );
        }
    }
    eprintln!("{what}: max abs error {worst:.2e}");
    worst
}

/// Logits of every position: a 3-token prefill, then one token at a time over the KV cache
/// (the split the fixture scripts used for the cached logits).
pub fn logits_with_cache(model: &Llama, tokens: &[u32]) -> Vec<Vec<f32>> {
    let backend = model.store.backend().clone();
    let g = Graph::inference(backend.clone());
    let p = model.bind(&g).unwrap();
    let mut cache = KvCache::new();
    let mut rows = Vec::new();
    let mut start = 0;
    for end in std::iter::once(3).chain(4..=tokens.len()) {
        let ids: Vec<i32> = tokens[start..end].iter().map(|&t| t as i32).collect();
        let n = ids.len();
        let ids = g
            .constant(
                backend
                    .upload(&Tensor::from_i32(&[1, n], ids).unwrap())
                    .unwrap(),
            )
            .unwrap();
        let h = model.forward(&g, &p, &ids, Some(&mut cache)).unwrap();
        let l = model.logits(&g, &p, &h).unwrap();
        let host = pollster::block_on(backend.download(l.tensor())).unwrap();
        rows.extend(
            host.to_f32_vec()
                .unwrap()
                .chunks(model.config.vocab_size)
                .map(<[f32]>::to_vec),
        );
        start = end;
    }
    assert_eq!(cache.len(), tokens.len());
    rows
}

/// A `golden.json` (written by the fixtures' `make_golden.py` scripts): the JSON, its
/// `tokens`, and the rows of its `logits`.
pub fn read_golden(path: &std::path::Path) -> (serde_json::Value, Vec<u32>, Vec<Vec<f32>>) {
    let text = std::fs::read_to_string(path).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tokens = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let logits = rows(&v, "logits");
    (v, tokens, logits)
}

/// The rows of logits under `key` of a golden JSON.
pub fn rows(v: &serde_json::Value, key: &str) -> Vec<Vec<f32>> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}
