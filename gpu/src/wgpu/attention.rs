//! The attention hooks on wgpu (`shaders/attention.wgsl`): a fused online-softmax forward (one workgroup
//! per batch, query head and block of query rows; K/V tiles through workgroup memory), a decode
//! path for one query row over a KV cache (one workgroup per batch and kv head, serving every
//! query head of the GQA group, keys split across the threads), and a
//! two-kernel backward that recomputes the probabilities (dq plus row statistics, then dk/dv
//! per key over the query heads sharing its kv head).

use kernels_core::{DType, Error, Result, Tensor};

use crate::device::{Device, Family, Grid, Params, u32_of};

use super::WgpuBackend;
use kernels_core::cpu::attention::Dims;

/// Query rows per forward workgroup (`BQ` in the shader).
const BQ: usize = 16;
/// Largest head dim the kernels hold in registers (`DMAX` in the shader).
const DMAX: usize = 128;
/// Largest GQA group (query heads per kv head) the decode kernel serves (`GMAX` in the shader);
/// larger groups take the general kernel.
const DECODE_GROUP_MAX: usize = 8;

/// The kernels' own register limit on the head dims.
fn check_registers(name: &'static str, dm: &Dims) -> Result<()> {
    for (what, x) in [("head_dim", dm.d), ("head_dim_v", dm.dv)] {
        if x > DMAX {
            return Err(Error::LimitExceeded {
                what: format!("{name}: {what} held in registers by the wgpu kernel"),
                value: x as u64,
                limit: DMAX as u64,
            });
        }
    }
    Ok(())
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
    dm: &Dims,
    causal: bool,
    scale: f32,
    [q, k, v]: [&Tensor; 3],
) -> Result<Tensor> {
    let be: &dyn Device = be;
    check_registers(name, dm)?;
    let group = dm.hq / dm.hkv;
    if dm.s == 1 && group <= DECODE_GROUP_MAX {
        // One query row over a cache (causal or not, it sees every key).
        let items = dm.batch * dm.hkv;
        let p = params(name, dm, items, 0, scale)?;
        let out = be.alloc(name, &[dm.batch, dm.hq, 1, dm.dv], DType::F32)?;
        be.run_kernel(
            name,
            Family::Attention,
            "attn_decode",
            &[],
            p,
            &[q, k, v],
            &[&out],
            Grid::Groups(items),
        )?;
        return Ok(out);
    }
    let blocks = dm.s.div_ceil(BQ);
    let items = dm.batch * dm.hq * blocks;
    let p = params(name, dm, items, blocks, scale)?;
    let out = be.alloc(name, &[dm.batch, dm.hq, dm.s, dm.dv], DType::F32)?;
    let consts = [("CAUSAL", u32::from(causal))];
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

pub(super) fn backward(
    be: &WgpuBackend,
    name: &'static str,
    dm: &Dims,
    causal: bool,
    scale: f32,
    [q, k, v, g]: [&Tensor; 4],
) -> Result<Vec<Tensor>> {
    let be: &dyn Device = be;
    check_registers(name, dm)?;
    let consts = [("CAUSAL", u32::from(causal))];
    let rows = dm.batch * dm.hq * dm.s;
    let gq = be.alloc(name, q.shape(), DType::F32)?;
    let stats = be.alloc(name, &[rows, 4], DType::F32)?;
    // The stats buffer sits in the third read-write slot in both kernels. attn_dq writes no
    // second output, but its slot needs a buffer other than gq: WebGPU rejects a dispatch that
    // binds one buffer to two writable bindings (native wgpu lets it through).
    let unused = be.alloc(name, &[1], DType::F32)?;
    be.run_kernel(
        name,
        Family::Attention,
        "attn_dq",
        &consts,
        params(name, dm, rows, 0, scale)?,
        &[q, k, v, g],
        &[&gq, &unused, &stats],
        Grid::Groups(rows),
    )?;
    let gk = be.alloc(name, k.shape(), DType::F32)?;
    let gv = be.alloc(name, v.shape(), DType::F32)?;
    let keys = dm.batch * dm.hkv * dm.t;
    be.run_kernel(
        name,
        Family::Attention,
        "attn_dkv",
        &consts,
        params(name, dm, keys, 0, scale)?,
        &[q, k, v, g],
        &[&gk, &gv, &stats],
        Grid::Groups(keys),
    )?;
    Ok(vec![gq, gk, gv])
}
