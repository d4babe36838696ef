//! rope and rope_kv_write on a device (`shaders/rope.wgsl`, `kernels/rope.cu`). The host gives each frequency as a 64-bit fixed-point
//! fraction of a turn (computed in f64 by the reference's [`Freqs::inv_freqs`], scaling
//! included, uploaded once per set of frequency attributes and head_dim, and cached); the
//! shader reduces `position * frequency` modulo a turn exactly in integer arithmetic, so
//! accuracy does not decay with the position. See the shader for the details.

use kernels_core::cpu::rope::Freqs;
use kernels_core::cpu::rope_kv_write::QkvDims;
use kernels_core::{DType, Error, Result, Tensor};

use super::common::arg;
use crate::device::{Device, Family, Grid, SCALE_CODE, u32_of};
use crate::params::{RopeKvWriteParams, RopeParams};
use crate::shapes;

/// `[half, 2]` words `(high, low)` of `frac(inv_freq_i / 2pi) * 2^64`, bit-cast to i32.
fn turn_table(freqs: &Freqs, head_dim: usize) -> Result<Tensor> {
    let half = head_dim / 2;
    let mut words = Vec::with_capacity(2 * half);
    for inv_freq in freqs.inv_freqs(head_dim) {
        let turns = inv_freq / std::f64::consts::TAU;
        let frac = turns - turns.floor();
        // frac < 1, so the product is below 2^64 (the cast saturates on rounding up).
        let fixed = (frac * 18_446_744_073_709_551_616.0) as u64;
        words.push((fixed >> 32) as u32 as i32);
        words.push(fixed as u32 as i32);
    }
    Tensor::from_i32(&[half, 2], words)
}

/// Checks attributes and shape; returns `(rows, seq, half)`.
fn check(
    name: &'static str,
    freqs: &Freqs,
    offset: usize,
    shape: &[usize],
) -> Result<(usize, usize, usize)> {
    // The reference's checks, then the device's own position limit.
    let (seq, head_dim) = kernels_core::cpu::rope::check(freqs, offset, shape)?;
    let rows: usize = shape.iter().product::<usize>() / head_dim;
    // Positions are u32 on the device.
    let last = offset.checked_add(seq - 1);
    if last.is_none_or(|p| p > u32::MAX as usize) {
        return Err(Error::LimitExceeded {
            what: format!("{name}: position offset + seq - 1 (offset {offset}, seq {seq})"),
            value: last.map_or(u64::MAX, |p| p as u64),
            limit: u64::from(u32::MAX),
        });
    }
    Ok((rows, seq, head_dim / 2))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn forward(
    be: &dyn Device,
    name: &'static str,
    freqs: &Freqs,
    offset: usize,
    interleaved: bool,
    inverse: bool,
    x: &Tensor,
) -> Result<Tensor> {
    let (rows, seq, half) = check(name, freqs, offset, x.shape())?;
    let table = be.table(format!("rope {}", freqs.key(2 * half)), &|| {
        turn_table(freqs, 2 * half)
    })?;
    let pairs = rows * half;
    let p = RopeParams {
        pairs: u32_of(name, "pairs", pairs)?,
        seq: u32_of(name, "seq", seq)?,
        half: u32_of(name, "half", half)?,
        offset: u32_of(name, "offset", offset)?,
    };
    let consts = [
        ("INTERLEAVED", u32::from(interleaved)),
        ("INVERSE", u32::from(inverse)),
    ];
    let out = be.alloc(name, x.shape(), DType::F32)?;
    be.run_kernel(
        name,
        Family::Rope,
        "rope",
        &consts,
        p,
        &[x, x, x, &table],
        &[&out],
        Grid::Elems(pairs),
    )?;
    Ok(out)
}

pub(super) fn backward(
    be: &dyn Device,
    name: &'static str,
    freqs: &Freqs,
    offset: usize,
    interleaved: bool,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (x, out, g) = (arg(args, 0), arg(args, 1), arg(args, 2));
    check(name, freqs, offset, x.shape())?;
    shapes::same(name, x.shape(), out.shape())?;
    shapes::same(name, x.shape(), g.shape())?;
    forward(be, name, freqs, offset, interleaved, true, g)
}

/// `rope_kv_write`'s launch block and grid over the pairs of `qkv` (the reference's checks
/// first, then the device's position limit).
fn kv_params(
    name: &'static str,
    freqs: &Freqs,
    pos: usize,
    k_cache: &Tensor,
    v_cache: &Tensor,
    qkv: &Tensor,
) -> Result<(QkvDims, RopeKvWriteParams, usize)> {
    let d = QkvDims::new(freqs, pos, k_cache.shape(), v_cache.shape(), qkv.shape())?;
    check(name, freqs, pos, &d.q_shape())?;
    let half = d.d / 2;
    let pairs = qkv.numel() / 2;
    let p = RopeKvWriteParams {
        pairs: u32_of(name, "pairs", pairs)?,
        seq: u32_of(name, "seq", d.s)?,
        half: u32_of(name, "half", half)?,
        offset: u32_of(name, "pos", pos)?,
        q_heads: u32_of(name, "q_heads", d.q_heads)?,
        kv_heads: u32_of(name, "kv_heads", d.kv_heads)?,
        cap: u32_of(name, "cap", d.cap)?,
    };
    // Indices into the caches and qkv are u32 on the device.
    u32_of(name, "cache elements", k_cache.numel())?;
    u32_of(name, "qkv elements", qkv.numel())?;
    Ok((d, p, pairs))
}

/// `rope_kv_write` forward: the rows written into `caches` themselves when `in_place` (both
/// donated and uniquely held: see `ops::run_donated`), else into copies; returns `[k_cache,
/// v_cache, q]`. One launch over the pairs of `qkv` (plus a copy of each cache out of place).
pub(super) fn kv_write_forward(
    be: &dyn Device,
    name: &'static str,
    (freqs, pos, interleaved): (&Freqs, usize, bool),
    caches: [&Tensor; 2],
    qkv: &Tensor,
    in_place: bool,
) -> Result<Vec<Tensor>> {
    let [k_cache, v_cache] = caches;
    let (d, p, pairs) = kv_params(name, freqs, pos, k_cache, v_cache, qkv)?;
    let (k_out, v_out) = if in_place {
        (k_cache.clone(), v_cache.clone())
    } else {
        // Copies (scaled by 1: every value, NaN and infinities included, as it is).
        let copy = |t: &Tensor| super::unary(be, name, SCALE_CODE, 1.0, &[t], false);
        (copy(k_cache)?, copy(v_cache)?)
    };
    let q = be.alloc(name, &d.q_shape(), DType::F32)?;
    let table = be.table(format!("rope {}", freqs.key(d.d)), &|| {
        turn_table(freqs, d.d)
    })?;
    be.run_kernel(
        name,
        Family::Rope,
        "rope_kv_write",
        &[("INTERLEAVED", u32::from(interleaved))],
        p,
        &[qkv, qkv, qkv, &table],
        &[&k_out, &v_out, &q],
        Grid::Elems(pairs),
    )?;
    Ok(vec![k_out, v_out, q])
}

/// `rope_kv_write` backward from `(k_cache, v_cache, qkv, k_out, v_out, q, grad_k_out,
/// grad_v_out, grad_q)`: each cache's gradient and its written rows (`kv_write`'s backward),
/// then grad_qkv from those rows and grad_q (one launch): three launches.
pub(super) fn kv_write_backward(
    be: &dyn Device,
    name: &'static str,
    (freqs, pos, interleaved): (&Freqs, usize, bool),
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (k_cache, v_cache, qkv) = (arg(args, 0), arg(args, 1), arg(args, 2));
    let (d, p, pairs) = kv_params(name, freqs, pos, k_cache, v_cache, qkv)?;
    let cache_shape = d.cache_shape();
    for (i, want) in [3, 4, 6, 7].into_iter().zip([cache_shape; 4]) {
        shapes::same(name, arg(args, i).shape(), &want)?;
    }
    shapes::same(name, arg(args, 5).shape(), &d.q_shape())?;
    shapes::same(name, arg(args, 8).shape(), &d.q_shape())?;
    // kv_write's backward on each cache, with rows [b, kv_heads, seq, d].
    let rows = Tensor::zeros(&[d.batch, d.kv_heads, d.s, d.d])?;
    let split = |cache: &Tensor, out: &Tensor, g: &Tensor| {
        super::layout::kv_write_backward(be, name, pos, &[cache, &rows, out, g])
    };
    let gk = split(k_cache, arg(args, 3), arg(args, 6))?;
    let gv = split(v_cache, arg(args, 4), arg(args, 7))?;
    let (Some(gk_cache), Some(gk_rows), Some(gv_cache), Some(gv_rows)) =
        (gk.first(), gk.get(1), gv.first(), gv.get(1))
    else {
        return Err(Error::Arity {
            op: name,
            expected: 2,
            got: gk.len().min(gv.len()),
        });
    };
    let gqkv = be.alloc(name, qkv.shape(), DType::F32)?;
    let table = be.table(format!("rope {}", freqs.key(d.d)), &|| {
        turn_table(freqs, d.d)
    })?;
    be.run_kernel(
        name,
        Family::Rope,
        "rope_kv_write_backward",
        &[("INTERLEAVED", u32::from(interleaved))],
        p,
        &[arg(args, 8), gk_rows, gv_rows, &table],
        &[&gqkv],
        Grid::Elems(pairs),
    )?;
    Ok(vec![gk_cache.clone(), gv_cache.clone(), gqkv])
}
