//! attention on wgpu (`shaders/attention.wgsl`): a fused online-softmax forward (one workgroup
//! per batch, query head and block of query rows; K/V tiles through workgroup memory), a decode
//! path for one query row over a KV cache (one workgroup per batch and kv head, serving every
//! query head of the GQA group, keys split across the threads), and a
//! two-kernel backward that recomputes the probabilities (dq plus row statistics, then dk/dv
//! per key over the query heads sharing its kv head).

use kernels_core::{DType, Error, Result, Tensor};

use super::{arg, u32_of};
use crate::shapes;
use crate::wgpu_backend::{Family, Params, WgpuBackend};
use kernels_core::cpu::attention::{Dims, scale_value};

/// Query rows per forward workgroup (`BQ` in the shader).
const BQ: usize = 16;
/// Largest head dim the kernels hold in registers (`DMAX` in the shader).
const DMAX: usize = 128;
/// Largest GQA group (query heads per kv head) the decode kernel serves (`GMAX` in the shader);
/// larger groups take the general kernel.
const DECODE_GROUP_MAX: usize = 8;

fn dims(name: &'static str, q: &[usize], k: &[usize], v: &[usize]) -> Result<Dims> {
    // The reference's geometry checks, then the kernel's own register limit.
    let dm = Dims::new(q, k, v)?;
    let Dims { d, dv, .. } = dm;
    for (what, x) in [("head_dim", d), ("head_dim_v", dv)] {
        if x > DMAX {
            return Err(Error::LimitExceeded {
                what: format!("{name}: {what} held in registers by the wgpu kernel"),
                value: x as u64,
                limit: DMAX as u64,
            });
        }
    }
    Ok(dm)
}

fn params(
    name: &'static str,
    dm: &Dims,
    items: usize,
    blocks: usize,
    scale: f32,
) -> Result<Params> {
    Ok(Params::u(&[
        u32_of(name, "seq_q", dm.s)?,
        u32_of(name, "seq_kv", dm.t)?,
        u32_of(name, "head_dim", dm.d)?,
        u32_of(name, "head_dim_v", dm.dv)?,
        u32_of(name, "heads_q", dm.hq)?,
        u32_of(name, "group", dm.hq / dm.hkv)?,
        u32_of(name, "work items", items)?,
        u32_of(name, "blocks", blocks)?,
    ])
    .with_f(&[scale]))
}

pub(super) fn forward(
    be: &WgpuBackend,
    name: &'static str,
    causal: bool,
    scale: Option<f32>,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (q, k, v) = (arg(args, 0), arg(args, 1), arg(args, 2));
    let dm = dims(name, q.shape(), k.shape(), v.shape())?;
    let scale = scale_value::<f32>(scale, dm.d)?;
    let group = dm.hq / dm.hkv;
    if dm.s == 1 && group <= DECODE_GROUP_MAX {
        // One query row over a cache (causal or not, it sees every key).
        let items = dm.batch * dm.hkv;
        let p = params(name, &dm, items, 0, scale)?;
        let out = be.alloc(name, &[dm.batch, dm.hq, 1, dm.dv], DType::F32)?;
        be.launch(
            name,
            Family::Attention,
            "attn_decode",
            &[],
            p,
            &[q, k, v],
            &[&out],
            be.grid_1d(items as u64)?,
        )?;
        return Ok(out);
    }
    let blocks = dm.s.div_ceil(BQ);
    let items = dm.batch * dm.hq * blocks;
    let p = params(name, &dm, items, blocks, scale)?;
    let out = be.alloc(name, &[dm.batch, dm.hq, dm.s, dm.dv], DType::F32)?;
    let consts = [("CAUSAL", if causal { 1.0 } else { 0.0 })];
    be.launch(
        name,
        Family::Attention,
        "attn_forward",
        &consts,
        p,
        &[q, k, v],
        &[&out],
        be.grid_1d(items as u64)?,
    )?;
    Ok(out)
}

pub(super) fn backward(
    be: &WgpuBackend,
    name: &'static str,
    causal: bool,
    scale: Option<f32>,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (q, k, v, out, g) = (
        arg(args, 0),
        arg(args, 1),
        arg(args, 2),
        arg(args, 3),
        arg(args, 4),
    );
    let dm = dims(name, q.shape(), k.shape(), v.shape())?;
    let out_shape = [dm.batch, dm.hq, dm.s, dm.dv];
    shapes::same(name, &out_shape, out.shape())?;
    shapes::same(name, &out_shape, g.shape())?;
    let scale = scale_value::<f32>(scale, dm.d)?;
    let consts = [("CAUSAL", if causal { 1.0 } else { 0.0 })];
    let rows = dm.batch * dm.hq * dm.s;
    let gq = be.alloc(name, q.shape(), DType::F32)?;
    let stats = be.alloc(name, &[rows, 4], DType::F32)?;
    // The stats buffer sits in the third read-write slot in both kernels. attn_dq writes no
    // second output, but its slot needs a buffer other than gq: WebGPU rejects a dispatch that
    // binds one buffer to two writable bindings (native wgpu lets it through).
    let unused = be.alloc(name, &[1], DType::F32)?;
    be.launch(
        name,
        Family::Attention,
        "attn_dq",
        &consts,
        params(name, &dm, rows, 0, scale)?,
        &[q, k, v, g],
        &[&gq, &unused, &stats],
        be.grid_1d(rows as u64)?,
    )?;
    let gk = be.alloc(name, k.shape(), DType::F32)?;
    let gv = be.alloc(name, v.shape(), DType::F32)?;
    let keys = dm.batch * dm.hkv * dm.t;
    be.launch(
        name,
        Family::Attention,
        "attn_dkv",
        &consts,
        params(name, &dm, keys, 0, scale)?,
        &[q, k, v, g],
        &[&gk, &gv, &stats],
        be.grid_1d(keys as u64)?,
    )?;
    Ok(vec![gq, gk, gv])
}
