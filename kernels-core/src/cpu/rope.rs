//! Rotary position embedding over x `[batch, heads, seq, head_dim]`.
//!
//! Position `p = offset + s`; frequency `inv_freq[i] = theta^(-2i / head_dim)` for
//! `i < head_dim / 2`; angle `p * inv_freq[i]`. Pair `i` is `(i, i + half)` in the Hugging Face
//! `rotate_half` layout, or `(2i, 2i + 1)` when interleaved (the original RoFormer / Meta layout).
//! Each pair is rotated by its angle: `(a, b) -> (a cos - b sin, b cos + a sin)`.
//!
//! Angles and their sines and cosines are computed in f64 whatever `T` is: `p * inv_freq` reaches
//! thousands of radians at long positions, where an f32 angle has already lost the low bits that
//! decide the rotation.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;

const OP: &str = "rope";

/// Validates the attributes and x's shape (every backend's checks); returns `(seq, head_dim)`.
pub fn check(theta: f32, offset: usize, shape: &[usize]) -> Result<(usize, usize)> {
    if !(theta.is_finite() && theta > 0.0) {
        return Err(Error::BadAttr {
            op: OP,
            attr: "theta",
            value: format!("{theta}"),
            why: "must be finite and > 0".into(),
        });
    }
    let &[_, _, seq, head_dim] = shape else {
        return Err(Error::bad_shape(
            OP,
            "x",
            shape,
            "needs rank 4 [batch, heads, seq, head_dim]",
        ));
    };
    non_empty(OP, "x", shape)?;
    if head_dim % 2 != 0 {
        return Err(Error::bad_shape(OP, "x", shape, "head_dim must be even"));
    }
    // Positions must be exact in f64 (they are integers below 2^53).
    let last = offset.checked_add(seq - 1);
    if last.is_none_or(|p| p as u64 > 1u64 << 53) {
        return Err(Error::BadAttr {
            op: OP,
            attr: "offset",
            value: format!("{offset}"),
            why: format!("position offset + seq - 1 (seq = {seq}) exceeds 2^53"),
        });
    }
    Ok((seq, head_dim))
}

/// `(cos, sin)` tables `[seq, head_dim / 2]`, computed in f64 and rounded once to `T`.
fn tables<T: Real>(theta: f32, offset: usize, seq: usize, head_dim: usize) -> (Vec<T>, Vec<T>) {
    let half = head_dim / 2;
    let theta = theta as f64;
    let inv_freq: Vec<f64> = (0..half)
        .map(|i| libm::pow(theta, -((2 * i) as f64) / head_dim as f64))
        .collect();
    let mut cos = Vec::with_capacity(seq * half);
    let mut sin = Vec::with_capacity(seq * half);
    for s in 0..seq {
        let p = (offset + s) as f64;
        for &f in &inv_freq {
            let angle = p * f;
            cos.push(T::from_f64(libm::cos(angle)));
            sin.push(T::from_f64(libm::sin(angle)));
        }
    }
    (cos, sin)
}

/// Rotates every pair of `x` `[batch, heads, seq, head_dim]` by `+angle` (`inverse == false`) or
/// `-angle` (`inverse == true`, the transpose of the rotation, which is the backward).
fn rotate<T: Real>(
    theta: f32,
    offset: usize,
    interleaved: bool,
    inverse: bool,
    shape: &[usize],
    x: &[T],
) -> Result<Vec<T>> {
    let (seq, head_dim) = check(theta, offset, shape)?;
    let half = head_dim / 2;
    let (cos, sin) = tables::<T>(theta, offset, seq, head_dim);
    let mut out = vec![T::ZERO; x.len()];
    // One row is one (batch, head, position) vector of head_dim elements.
    for (row, (xr, or)) in x
        .chunks_exact(head_dim)
        .zip(out.chunks_exact_mut(head_dim))
        .enumerate()
    {
        let s = row % seq;
        for i in 0..half {
            let c = cos[s * half + i];
            let sn = if inverse {
                -sin[s * half + i]
            } else {
                sin[s * half + i]
            };
            let (ia, ib) = if interleaved {
                (2 * i, 2 * i + 1)
            } else {
                (i, i + half)
            };
            let (a, b) = (xr[ia], xr[ib]);
            or[ia] = a * c - b * sn;
            or[ib] = b * c + a * sn;
        }
    }
    Ok(out)
}

/// Forward. Args: `x [batch, heads, seq, head_dim]`. Returns `out`, same shape.
pub fn forward<T: Real>(
    theta: f32,
    offset: usize,
    interleaved: bool,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (shape, x) = float_arg(OP, args, 0, "x")?;
    let out = rotate(theta, offset, interleaved, false, shape, x)?;
    Ok(vec![Owned::float(shape.to_vec(), out)])
}

/// Backward. Args: `x`, `out`, `grad_out`. Returns `[grad_x]`: the rotation is orthogonal, so
/// the gradient is `grad_out` rotated back by the same angles.
pub fn backward<T: Real>(
    theta: f32,
    offset: usize,
    interleaved: bool,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (shape, _) = float_arg(OP, args, 0, "x")?;
    let (out_shape, _) = float_arg(OP, args, 1, "out")?;
    let (g_shape, g) = float_arg(OP, args, 2, "grad_out")?;
    check(theta, offset, shape)?;
    same_shape(OP, shape, out_shape)?;
    same_shape(OP, shape, g_shape)?;
    let grad = rotate(theta, offset, interleaved, true, shape, g)?;
    Ok(vec![Owned::float(shape.to_vec(), grad)])
}

#[cfg(test)]
mod tests;
