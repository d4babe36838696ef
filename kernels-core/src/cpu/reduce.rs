//! Reductions over the last dim (`sum`, `mean`, `max`) with their backward, and `argmax`.
//!
//! The output drops the last dim: `[..., n] -> [...]`, so a rank-1 input gives a rank-0 scalar
//! (shape `[]`, one element). An empty input is an [`Error::Empty`]: a max or mean of nothing has
//! no value, and an empty sum is not worth a special case on every backend.
//!
//! Sums accumulate in f64 and round once, so the f32 reference is the correctly rounded sum in
//! all but contrived cases; device kernels are compared to it under a budget growing with `n`.
//!
//! `max` and `argmax` agree with each other and with PyTorch: the FIRST maximum wins ties (and
//! receives the whole gradient), and a row holding NaN has max NaN at the first NaN.

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, OwnedData, View, float_arg, min_rank, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::{Op, ReduceOp};

/// Validates x `[..., n]` and returns `(leading shape, n)`.
fn split<'a>(name: &'static str, sx: &'a [usize]) -> Result<(&'a [usize], usize)> {
    min_rank(name, "x", sx, 1)?;
    non_empty(name, "x", sx)?;
    match sx.split_last() {
        Some((&n, lead)) => Ok((lead, n)),
        None => Err(Error::bad_shape(name, "x", sx, "needs rank >= 1")),
    }
}

/// Index of the first maximum of a non-empty row; the first NaN if there is one.
fn first_argmax<T: Real>(row: &[T]) -> usize {
    let mut best = 0;
    let mut best_v = T::NEG_INFINITY;
    for (i, &v) in row.iter().enumerate() {
        if v.is_nan() {
            return i;
        }
        // Strictly greater keeps the first of equal values; `i == 0` seeds an all -inf row.
        if i == 0 || v > best_v {
            best = i;
            best_v = v;
        }
    }
    best
}

/// `out[...] = reduce(x[..., :])`; x `[..., n]`, out `[...]`.
pub fn forward<T: Real>(op: ReduceOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Reduce(op).name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (lead, n) = split(name, sx)?;
    let out = x
        .chunks_exact(n)
        .map(|row| match op {
            ReduceOp::Sum => T::from_f64(row.iter().map(|v| v.to_f64()).sum()),
            ReduceOp::Mean => T::from_f64(row.iter().map(|v| v.to_f64()).sum::<f64>() / n as f64),
            ReduceOp::Max => row
                .get(first_argmax(row))
                .copied()
                .unwrap_or(T::NEG_INFINITY),
        })
        .collect();
    Ok(vec![Owned::float(lead.to_vec(), out)])
}

/// `grad_x`; args `(x, out, grad_out)`. Sum broadcasts `grad_out` over the row, mean also divides
/// by `n`, max sends it to the first maximum only.
pub fn backward<T: Real>(op: ReduceOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Reduce(op).name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (so, _) = float_arg(name, args, 1, "out")?;
    let (sg, g) = float_arg(name, args, 2, "grad_out")?;
    let (lead, n) = split(name, sx)?;
    same_shape(name, so, lead)?;
    same_shape(name, sg, lead)?;
    let mut grad = vec![T::ZERO; x.len()];
    let inv_n = T::from_f64(1.0 / n as f64);
    for ((row, grow), &dy) in x.chunks_exact(n).zip(grad.chunks_exact_mut(n)).zip(g) {
        match op {
            ReduceOp::Sum => grow.fill(dy),
            ReduceOp::Mean => grow.fill(dy * inv_n),
            ReduceOp::Max => {
                if let Some(slot) = grow.get_mut(first_argmax(row)) {
                    *slot = dy;
                }
            }
        }
    }
    Ok(vec![Owned::float(sx.to_vec(), grad)])
}

/// Index of the first maximum over the last dim, as i32; x `[..., n]`, out `[...]`.
pub fn argmax<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Argmax.name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (lead, n) = split(name, sx)?;
    // Every index must fit the i32 output.
    let limit = i32::MAX as u64 + 1;
    if n as u64 > limit {
        return Err(Error::LimitExceeded {
            what: "argmax: length of the reduced (last) dim".into(),
            value: n as u64,
            limit,
        });
    }
    let out = x
        .chunks_exact(n)
        .map(|row| first_argmax(row) as i32)
        .collect();
    Ok(vec![Owned {
        shape: lead.to_vec(),
        data: OwnedData::I32(out),
    }])
}

#[cfg(test)]
mod tests;
