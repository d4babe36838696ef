//! Projections fused at load for inference on a device: each layer's q, k and v weights (and
//! biases) concatenated on rows into one `self_attn.qkv_proj` (Phi-3's name for the same
//! matrix), so a step makes one product for the three and hands its heads to `rope_kv_write`;
//! and its gate and up weights into one `mlp.gate_up_proj` (Phi-3's name again), which
//! `matmul_swiglu` multiplies and gates in one op.
//!
//! A layer is fused only where the result is the same computation: the three weights share one
//! dtype (GGUF files often mix them, e.g. q4_k with q6_k for v), and the model norms neither q
//! nor k per head (Qwen3 and Gemma 3 norm them before the rotation). Rows are independent in
//! every weight dtype (GGML blocks run along a row), so packed weights concatenate as bytes.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::{LlamaConfig, MlpAct};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The name of layer `l`'s fused q/k/v weight (`.weight`) or bias (`.bias`).
pub fn qkv_name(l: usize, what: &str) -> String {
    format!("model.layers.{l}.self_attn.qkv_proj.{what}")
}

/// The name of layer `l`'s fused gate/up weight.
pub fn gate_up_name(l: usize) -> String {
    format!("model.layers.{l}.mlp.gate_up_proj.weight")
}

/// `parts` (each `[rows_i, cols]`, one dtype) concatenated on rows.
fn concat_rows(name: &str, parts: &[&Tensor]) -> Result<Tensor> {
    let Some(first) = parts.first() else {
        return Err(Error::Missing {
            what: "tensor to concatenate".into(),
            name: name.into(),
        });
    };
    let dtype = first.dtype();
    let cols = first.shape().get(1).copied();
    let mut rows = 0;
    for t in parts {
        if t.dtype() != dtype || t.rank() != first.rank() || t.shape().get(1).copied() != cols {
            return Err(Error::BadModelFile {
                path: name.into(),
                why: format!(
                    "cannot concatenate {:?} {} with {:?} {}",
                    first.shape(),
                    dtype.name(),
                    t.shape(),
                    t.dtype().name()
                ),
            });
        }
        rows += t.shape().first().copied().unwrap_or(0);
    }
    let shape: Vec<usize> = match cols {
        Some(c) => alloc::vec![rows, c],
        None => alloc::vec![rows],
    };
    if dtype.is_weight() {
        let mut bytes = Vec::new();
        for t in parts {
            bytes.extend_from_slice(t.packed_bytes()?);
        }
        Tensor::from_raw(&shape, dtype, bytes)
    } else {
        let mut floats = Vec::new();
        for t in parts {
            floats.extend_from_slice(t.as_f32()?);
        }
        Tensor::from_f32(&shape, floats)
    }
}

/// Replaces each eligible layer's q, k and v projections in `params` by one `qkv_proj` (see the
/// module doc); returns how many layers were fused.
pub fn fuse_qkv(c: &LlamaConfig, params: &mut Vec<(String, Tensor)>) -> Result<usize> {
    if c.variant.qk_norm {
        return Ok(0);
    }
    let mut fused = 0;
    for l in 0..c.num_hidden_layers {
        for what in ["weight", "bias"] {
            let names: Vec<String> = ["q", "k", "v"]
                .iter()
                .map(|p| format!("model.layers.{l}.self_attn.{p}_proj.{what}"))
                .collect();
            let found: Vec<usize> = names
                .iter()
                .filter_map(|n| params.iter().position(|(m, _)| m == n))
                .collect();
            if found.len() != 3 {
                continue;
            }
            let dtypes: Vec<_> = found.iter().map(|&i| params[i].1.dtype()).collect();
            if dtypes.iter().any(|d| *d != dtypes[0]) {
                // A bias is only fused with its weight.
                break;
            }
            let parts: Vec<&Tensor> = found.iter().map(|&i| &params[i].1).collect();
            let name = qkv_name(l, what);
            let t = concat_rows(&name, &parts)?;
            params.retain(|(n, _)| !names.contains(n));
            params.push((name, t));
            if what == "weight" {
                fused += 1;
            }
        }
    }
    Ok(fused)
}

/// Replaces each layer's gate and up projections in `params` by one `gate_up_proj` (the gate
/// rows, then the up rows: `matmul_swiglu`'s weight) where the MLP is SwiGLU and the two share a
/// dtype; returns how many layers were fused.
pub fn fuse_gate_up(c: &LlamaConfig, params: &mut Vec<(String, Tensor)>) -> Result<usize> {
    if c.variant.mlp_act != MlpAct::Silu {
        return Ok(0);
    }
    let mut fused = 0;
    for l in 0..c.num_hidden_layers {
        let names = ["gate", "up"].map(|p| format!("model.layers.{l}.mlp.{p}_proj.weight"));
        let found: Vec<usize> = names
            .iter()
            .filter_map(|n| params.iter().position(|(m, _)| m == n))
            .collect();
        let [g, u] = found[..] else {
            continue;
        };
        if params[g].1.dtype() != params[u].1.dtype() {
            continue;
        }
        let name = gate_up_name(l);
        let t = concat_rows(&name, &[&params[g].1, &params[u].1])?;
        params.retain(|(n, _)| !names.contains(n));
        params.push((name, t));
        fused += 1;
    }
    Ok(fused)
}

#[cfg(test)]
mod tests {
    use alloc::collections::BTreeMap;
    use alloc::rc::Rc;
    use alloc::vec;

    use super::*;
    use crate::autograd::Graph;
    use crate::backend::{Backend, CpuBackend, now_or_never};
    use crate::dtype::DType;
    use crate::models::llama::addition::{Size, config};
    use crate::models::llama::{GenerateOptions, KvCache, Llama, generate};
    use crate::rng::Rng;

    fn tensors(c: &LlamaConfig, seed: u64) -> BTreeMap<String, Tensor> {
        let cpu: Rc<dyn Backend> = Rc::new(CpuBackend::new());
        let m = Llama::init(c.clone(), cpu, &mut Rng::new(seed)).unwrap();
        m.store
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect()
    }

    fn gqa() -> LlamaConfig {
        config(Size {
            hidden: 32,
            intermediate: 48,
            layers: 2,
            heads: 4,
            kv_heads: 2,
        })
    }

    /// The fused model (the CPU reference of `rope_kv_write` over one q/k/v product) computes
    /// what the checkpoint's separate projections compute: logits of a whole sequence without
    /// a cache, logits of a prefill and two decode steps through the cache, and greedy tokens.
    #[test]
    fn a_fused_model_computes_what_the_separate_projections_compute() {
        let c = gqa();
        let t = tensors(&c, 7);
        let cpu: Rc<dyn Backend> = Rc::new(CpuBackend::new());
        let plain = Llama::load(c.clone(), &t, cpu.clone(), false).unwrap();
        let fused = Llama::load(c.clone(), &t, cpu.clone(), true).unwrap();
        assert!((0..2).all(|l| fused.fused_qkv(l) && !plain.fused_qkv(l)));
        assert!((0..2).all(|l| fused.store.contains(&gate_up_name(l))));
        assert!(!fused.store.contains("model.layers.1.mlp.up_proj.weight"));
        assert!(
            !fused
                .store
                .contains("model.layers.0.self_attn.q_proj.weight")
        );
        assert_eq!(fused.store.numel(), plain.store.numel());
        let ids = [1i32, 2, 10, 3, 4, 11, 5];
        let logits = |g: &Graph, m: &Llama, ids: &[i32], cache: Option<&mut KvCache>| {
            let p = m.bind(g).unwrap();
            let x = g
                .constant(Tensor::from_i32(&[1, ids.len()], ids.to_vec()).unwrap())
                .unwrap();
            let h = m.forward(g, &p, &x, cache).unwrap();
            m.logits(g, &p, &h).unwrap().tensor().to_f32_vec().unwrap()
        };
        let (gf, gp) = (Graph::inference(cpu.clone()), Graph::inference(cpu.clone()));
        let close = |a: &[f32], b: &[f32], what: &str| {
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                    "{what}: {x} vs {y}"
                );
            }
        };
        close(
            &logits(&gf, &fused, &ids, None),
            &logits(&gp, &plain, &ids, None),
            "no cache",
        );
        let (mut kf, mut kp) = (KvCache::with_capacity(9), KvCache::with_capacity(9));
        close(
            &logits(&gf, &fused, &ids[..5], Some(&mut kf)),
            &logits(&gp, &plain, &ids[..5], Some(&mut kp)),
            "prefill",
        );
        for (i, id) in ids[5..].iter().enumerate() {
            close(
                &logits(&gf, &fused, &[*id], Some(&mut kf)),
                &logits(&gp, &plain, &[*id], Some(&mut kp)),
                &format!("decode step {i}"),
            );
        }
        let opts = GenerateOptions {
            max_new_tokens: 4,
            sampling: Default::default(),
            stop_tokens: vec![],
        };
        let run = |m: &Llama| now_or_never(generate(m, &[1, 2, 10, 3], &opts, &mut |_, _| true));
        let (a, b) = (run(&fused).unwrap().unwrap(), run(&plain).unwrap().unwrap());
        assert_eq!(a.0, b.0);
    }

    /// A layer whose q, k and v differ in dtype stays as it is; so does a model that norms q and
    /// k per head. Biases are fused with their weights.
    #[test]
    fn only_layers_that_compute_the_same_are_fused() {
        let c = gqa();
        let mut params: Vec<(String, Tensor)> = tensors(&c, 1).into_iter().collect();
        // Layer 1's v in f16.
        let v = "model.layers.1.self_attn.v_proj.weight";
        for (n, t) in params.iter_mut() {
            if n == v {
                *t = t.quantize(DType::F16).unwrap();
            }
        }
        let mut with_bias = c.clone();
        with_bias.variant.qkv_bias = true;
        for p in ["q", "k", "v"] {
            let rows = if p == "q" { 32 } else { 16 };
            let name = format!("model.layers.0.self_attn.{p}_proj.bias");
            params.push((name, Tensor::full(&[rows], 0.5).unwrap()));
        }
        assert_eq!(fuse_qkv(&with_bias, &mut params).unwrap(), 1);
        let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&"model.layers.0.self_attn.qkv_proj.weight"));
        assert!(names.contains(&"model.layers.0.self_attn.qkv_proj.bias"));
        assert!(names.contains(&v));
        assert!(!names.contains(&"model.layers.1.self_attn.qkv_proj.weight"));
        let qkv = &params
            .iter()
            .find(|(n, _)| n == "model.layers.0.self_attn.qkv_proj.weight")
            .unwrap()
            .1;
        assert_eq!(qkv.shape(), [64, 32]);
        let mut normed = c.clone();
        normed.variant.qk_norm = true;
        let mut params: Vec<(String, Tensor)> = tensors(&c, 1).into_iter().collect();
        assert_eq!(fuse_qkv(&normed, &mut params).unwrap(), 0);
    }

    /// Gate and up are fused where they share a dtype and the MLP is SwiGLU (Gemma's gelu MLP
    /// keeps them), gate rows first.
    #[test]
    fn gate_and_up_are_fused_where_the_gate_is_silu() {
        let c = gqa();
        let mut params: Vec<(String, Tensor)> = tensors(&c, 2).into_iter().collect();
        let up1 = "model.layers.1.mlp.up_proj.weight";
        for (n, t) in params.iter_mut() {
            if n == up1 {
                *t = t.quantize(DType::F16).unwrap();
            }
        }
        let gate0 = params
            .iter()
            .find(|(n, _)| n == "model.layers.0.mlp.gate_proj.weight")
            .unwrap()
            .1
            .clone();
        let mut gelu = c.clone();
        gelu.variant.mlp_act = MlpAct::GeluTanh;
        assert_eq!(fuse_gate_up(&gelu, &mut params.clone()).unwrap(), 0);
        assert_eq!(fuse_gate_up(&c, &mut params).unwrap(), 1);
        let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&up1) && !names.contains(&gate_up_name(1).as_str()));
        let fused = &params
            .iter()
            .find(|(n, _)| *n == gate_up_name(0))
            .unwrap()
            .1;
        assert_eq!(fused.shape(), [96, 32]);
        let gate_rows = &fused.as_f32().unwrap()[..48 * 32];
        assert_eq!(gate_rows, gate0.as_f32().unwrap());
    }
}
