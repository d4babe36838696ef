//! The attention forward hook on wgpu (`shaders/attention.wgsl`; the backward's kernels are
//! launched by the shared op layer): a fused online-softmax forward (one workgroup
//! per batch, query head and block of query rows; K/V tiles through workgroup memory), a decode
//! path for one query row over a KV cache (one workgroup per batch and kv head, serving every
//! query head of the GQA group, keys split across the threads), and a
//! two-kernel backward that recomputes the probabilities (dq plus row statistics, then dk/dv
//! per key over the query heads sharing its kv head).

use kernels_core::{DType, Result, Tensor};

use super::WgpuBackend;
use crate::device::{AttentionArgs, AttentionHook, Device, Family, Grid};
use crate::ops::{attention_consts, attention_params as params};

/// Query rows per forward workgroup (`BQ` in the shader).
const BQ: usize = 16;
/// Largest head dim the kernels hold in registers (`DMAX` in the shader).
const DMAX: usize = 128;
/// Largest GQA group (query heads per kv head) the decode kernel serves (`GMAX` in the shader);
/// larger groups take the general kernel.
const DECODE_GROUP_MAX: usize = 8;

impl AttentionHook for WgpuBackend {
    fn attention_head_dim_max(&self) -> usize {
        DMAX
    }
    fn attention_forward(&self, name: &'static str, at: &AttentionArgs<'_>) -> Result<Tensor> {
        forward(self, name, at)
    }
}

fn forward(be: &dyn Device, name: &'static str, at: &AttentionArgs<'_>) -> Result<Tensor> {
    let (dm, scale, [q, k, v]) = (at.dims, at.scale, at.qkv);
    let group = dm.hq / dm.hkv;
    if dm.s == 1 && group <= DECODE_GROUP_MAX {
        // One query row over a cache (causal or not, it sees every key but those before a
        // sliding window).
        let items = dm.batch * dm.hkv;
        let p = params(name, dm, items, scale)?;
        let out = be.alloc(name, &[dm.batch, dm.hq, 1, dm.dv], DType::F32)?;
        be.run_kernel(
            name,
            Family::Attention,
            "attn_decode",
            &attention_consts(name, dm, at.causal)?,
            p,
            &[q, k, v],
            &[&out],
            Grid::Groups(items),
        )?;
        return Ok(out);
    }
    let blocks = dm.s.div_ceil(BQ);
    let items = dm.batch * dm.hq * blocks;
    let p = params(name, dm, items, scale)?;
    let out = be.alloc(name, &[dm.batch, dm.hq, dm.s, dm.dv], DType::F32)?;
    let consts = attention_consts(name, dm, at.causal)?;
    be.run_kernel(
        name,
        Family::Attention,
        "attn_forward",
        &consts,
        p,
        &[q, k, v],
        &[&out],
        Grid::Groups(items),
    )?;
    Ok(out)
}
