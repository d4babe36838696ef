//! The attention hooks on CUDA (`kernels/attention.cu`): one block per query row for the forward
//! and dq (plus row statistics), one block per key for dk/dv over the query heads sharing its kv
//! head.

use kernels_core::cpu::attention::Dims;
use kernels_core::{DType, Result, Tensor};

use super::CudaBackend;
use crate::device::{Device, Family, Grid, Params, u32_of};

fn params(name: &'static str, dm: &Dims, causal: bool, scale: f32) -> Result<Params> {
    Ok(Params::u(&[
        u32_of(name, "seq_q", dm.s)?,
        u32_of(name, "seq_kv", dm.t)?,
        u32_of(name, "head_dim", dm.d)?,
        u32_of(name, "head_dim_v", dm.dv)?,
        u32_of(name, "heads_q", dm.hq)?,
        u32_of(name, "group", dm.hq / dm.hkv)?,
        u32::from(causal),
    ])
    .with_f(&[scale]))
}

pub(super) fn forward(
    be: &CudaBackend,
    name: &'static str,
    dm: &Dims,
    causal: bool,
    scale: f32,
    [q, k, v]: [&Tensor; 3],
) -> Result<Tensor> {
    let dev: &dyn Device = be;
    let rows = dm.batch * dm.hq * dm.s;
    let out = dev.alloc(name, &[dm.batch, dm.hq, dm.s, dm.dv], DType::F32)?;
    dev.run_kernel(
        name,
        Family::Attention,
        "attn_forward",
        &[],
        params(name, dm, causal, scale)?,
        &[q, k, v],
        &[&out],
        Grid::Groups(rows),
    )?;
    Ok(out)
}

pub(super) fn backward(
    be: &CudaBackend,
    name: &'static str,
    dm: &Dims,
    causal: bool,
    scale: f32,
    [q, k, v, g]: [&Tensor; 4],
) -> Result<Vec<Tensor>> {
    let dev: &dyn Device = be;
    let p = params(name, dm, causal, scale)?;
    let rows = dm.batch * dm.hq * dm.s;
    let gq = dev.alloc(name, q.shape(), DType::F32)?;
    let stats = dev.alloc(name, &[rows, 4], DType::F32)?;
    dev.run_kernel(
        name,
        Family::Attention,
        "attn_dq",
        &[],
        p,
        &[q, k, v, g],
        &[&gq, &gq, &stats],
        Grid::Groups(rows),
    )?;
    let gk = dev.alloc(name, k.shape(), DType::F32)?;
    let gv = dev.alloc(name, v.shape(), DType::F32)?;
    let keys = dm.batch * dm.hkv * dm.t;
    dev.run_kernel(
        name,
        Family::Attention,
        "attn_dkv",
        &[],
        p,
        &[q, k, v, g],
        &[&gk, &gv, &stats],
        Grid::Groups(keys),
    )?;
    Ok(vec![gq, gk, gv])
}
