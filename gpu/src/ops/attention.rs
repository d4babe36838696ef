//! attention: the reference's geometry checks, the scale, the kernels' head-dim limit and the
//! two-kernel backward (dq plus row statistics, then dk/dv per key over the query heads sharing
//! its kv head, both recomputing the probabilities), written once; the forward's kernel geometry
//! differs between the backends and is the device's hook.

use kernels_core::cpu::attention::{Dims, scale_value};
use kernels_core::{DType, Error, Result, Tensor};

use super::common::arg;
use crate::device::{AttentionArgs, Device, Family, Grid, u32_of};
use crate::params::AttentionParams;
use crate::shapes;

/// The attention family's parameters: the geometry (keys in memory and keys read), the work
/// items and the scale.
pub(crate) fn params(
    name: &'static str,
    dm: &Dims,
    items: usize,
    scale: f32,
) -> Result<AttentionParams> {
    Ok(AttentionParams {
        seq_q: u32_of(name, "seq_q", dm.s)?,
        seq_kv: u32_of(name, "seq_kv", dm.t)?,
        head_dim: u32_of(name, "head_dim", dm.d)?,
        head_dim_v: u32_of(name, "head_dim_v", dm.dv)?,
        heads_q: u32_of(name, "heads_q", dm.hq)?,
        group: u32_of(name, "group", dm.hq / dm.hkv)?,
        items: u32_of(name, "work items", items)?,
        kv_len: u32_of(name, "kv_len", dm.kv_len)?,
        scale,
    })
}

/// The kernels' constants: the causal mask and the sliding window (0: none), `p.c[0]` and
/// `p.c[1]` on CUDA.
pub(crate) fn consts(
    name: &'static str,
    dm: &Dims,
    causal: bool,
) -> Result<[(&'static str, u32); 2]> {
    Ok([
        ("CAUSAL", u32::from(causal)),
        ("WINDOW", u32_of(name, "window", dm.window)?),
    ])
}

/// The reference's geometry checks, then the kernels' own register limit on the head dims.
fn dims(
    be: &dyn Device,
    name: &'static str,
    (causal, kv_len, window): (bool, usize, usize),
    [q, k, v]: [&Tensor; 3],
) -> Result<Dims> {
    let dm = Dims::new(q.shape(), k.shape(), v.shape())?
        .with_kv_len(kv_len)?
        .with_window(window, causal)?;
    let max = be.attention_head_dim_max();
    for (what, x) in [("head_dim", dm.d), ("head_dim_v", dm.dv)] {
        if x > max {
            return Err(Error::LimitExceeded {
                what: format!("{name}: {what} held in registers by the kernel"),
                value: x as u64,
                limit: max as u64,
            });
        }
    }
    Ok(dm)
}

pub(super) fn forward(
    be: &dyn Device,
    name: &'static str,
    (causal, scale, kv_len, window): (bool, Option<f32>, usize, usize),
    args: &[&Tensor],
) -> Result<Tensor> {
    let (q, k, v) = (arg(args, 0), arg(args, 1), arg(args, 2));
    let dm = dims(be, name, (causal, kv_len, window), [q, k, v])?;
    let scale = scale_value::<f32>(scale, dm.d)?;
    be.attention_forward(
        name,
        &AttentionArgs {
            dims: &dm,
            causal,
            scale,
            qkv: [q, k, v],
        },
    )
}

pub(super) fn backward(
    be: &dyn Device,
    name: &'static str,
    (causal, scale, kv_len, window): (bool, Option<f32>, usize, usize),
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (q, k, v, out, g) = (
        arg(args, 0),
        arg(args, 1),
        arg(args, 2),
        arg(args, 3),
        arg(args, 4),
    );
    let dm = dims(be, name, (causal, kv_len, window), [q, k, v])?;
    let out_shape = [dm.batch, dm.hq, dm.s, dm.dv];
    shapes::same(name, &out_shape, out.shape())?;
    shapes::same(name, &out_shape, g.shape())?;
    let scale = scale_value::<f32>(scale, dm.d)?;
    let consts = consts(name, &dm, causal)?;
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
        params(name, &dm, rows, scale)?,
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
        params(name, &dm, keys, scale)?,
        &[q, k, v, g],
        &[&gk, &gv, &stats],
        Grid::Groups(keys),
    )?;
    Ok(vec![gq, gk, gv])
}
