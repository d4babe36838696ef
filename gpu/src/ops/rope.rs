//! rope on wgpu (`shaders/rope.wgsl`). The host gives each frequency as a 64-bit fixed-point
//! fraction of a turn (computed in f64 by the reference's [`Freqs::inv_freqs`], scaling
//! included, uploaded once per set of frequency attributes and head_dim, and cached); the
//! shader reduces `position * frequency` modulo a turn exactly in integer arithmetic, so
//! accuracy does not decay with the position. See the shader for the details.

use kernels_core::cpu::rope::Freqs;
use kernels_core::{DType, Error, Result, Tensor};

use super::common::arg;
use crate::device::{Device, Family, Grid, u32_of};
use crate::params::RopeParams;
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
