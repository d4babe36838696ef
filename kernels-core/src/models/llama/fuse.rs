//! Projections fused at load for inference on a device: each layer's q, k and v weights (and
//! biases) concatenated on rows into one `self_attn.qkv_proj` (Phi-3's name for the same
//! matrix), so a step makes one product for the three and hands its heads to `rope_kv_write`.
//!
//! A layer is fused only where the result is the same computation: the three weights share one
//! dtype (GGUF files often mix them, e.g. q4_k with q6_k for v), and the model norms neither q
//! nor k per head (Qwen3 and Gemma 3 norm them before the rotation). Rows are independent in
//! every weight dtype (GGML blocks run along a row), so packed weights concatenate as bytes.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::LlamaConfig;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The name of layer `l`'s fused q/k/v weight (`.weight`) or bias (`.bias`).
pub fn qkv_name(l: usize, what: &str) -> String {
    format!("model.layers.{l}.self_attn.qkv_proj.{what}")
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
