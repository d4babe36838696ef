//! Softmax and log-softmax over the last dim, with an optional causal mask, forward and backward.
//!
//! Each row subtracts its maximum before `exp`, so no finite input overflows; the row sum
//! accumulates in f64, so the f32 result is within a couple of roundings of the exact one.
//!
//! Causal: x is `[..., s, t]` (queries by keys); key `j` of query row `i` is masked when
//! `j > i + (t - s)`, i.e. the last query sees every key (the KV-cache convention, as
//! `F.scaled_dot_product_attention(is_causal=True)` aligned to the bottom right). Masked entries
//! give softmax 0 and log-softmax `-inf` and receive zero gradient. When `t < s` the first
//! `s - t` rows see no key at all: they are all zeros (softmax) or all `-inf` (log-softmax), with
//! zero gradient, rather than the NaN a `-inf`-masked PyTorch softmax would produce.
//!
//! NaN in a row makes the whole (visible part of the) row NaN, as in PyTorch.

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, min_rank, non_empty, same_shape};
use crate::error::Result;
use crate::numerics::Real;
use crate::op::Op;

pub(crate) fn op_name(log: bool, causal: bool) -> &'static str {
    if log {
        Op::LogSoftmax { causal }.name()
    } else {
        Op::Softmax { causal }.name()
    }
}

/// Validates x and returns `(s, t)`: query rows per matrix and the row length. Without the
/// causal mask `s` is 1 (every row sees every key).
pub(crate) fn geometry(name: &'static str, causal: bool, sx: &[usize]) -> Result<(usize, usize)> {
    min_rank(name, "x", sx, if causal { 2 } else { 1 })?;
    non_empty(name, "x", sx)?;
    let t = sx.last().copied().unwrap_or(1);
    let s = if causal {
        sx.get(sx.len().wrapping_sub(2)).copied().unwrap_or(1)
    } else {
        1
    };
    Ok((s, t))
}

/// Number of keys query row `i` sees: keys `0..visible` (the rest are masked).
pub(crate) fn visible(causal: bool, i: usize, s: usize, t: usize) -> usize {
    if causal {
        // j <= i + t - s  <=>  j < i + t + 1 - s, in unsigned arithmetic.
        (i + t + 1).saturating_sub(s).min(t)
    } else {
        t
    }
}

/// `out = softmax(x)` or `log_softmax(x)` over the last dim; x `[..., t]` (`[..., s, t]` causal).
pub fn forward<T: Real>(log: bool, causal: bool, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = op_name(log, causal);
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (s, t) = geometry(name, causal, sx)?;
    let masked = if log { T::NEG_INFINITY } else { T::ZERO };
    let mut out = vec![masked; x.len()];
    for (r, (row, orow)) in x.chunks_exact(t).zip(out.chunks_exact_mut(t)).enumerate() {
        let n = visible(causal, r % s, s, t);
        let (row, orow) = (&row[..n], &mut orow[..n]);
        if n == 0 {
            continue;
        }
        let m = row.iter().fold(T::NEG_INFINITY, |m, &v| m.max_nan(v));
        let sum: f64 = row.iter().map(|&v| (v - m).exp().to_f64()).sum();
        if log {
            let lse = Real::ln(sum);
            for (o, &v) in orow.iter_mut().zip(row) {
                *o = T::from_f64((v - m).to_f64() - lse);
            }
        } else {
            for (o, &v) in orow.iter_mut().zip(row) {
                *o = T::from_f64((v - m).exp().to_f64() / sum);
            }
        }
    }
    Ok(vec![Owned::float(sx.to_vec(), out)])
}

/// `grad_x`; args `(x, out, grad_out)`, all `[..., t]`.
///
/// softmax: `g = y * (dy - sum(dy * y))`; log-softmax: `g = dy - softmax * sum(dy)`, the sums over
/// the visible keys only (masked outputs are constants, so their `dy` reaches nothing).
pub fn backward<T: Real>(log: bool, causal: bool, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = op_name(log, causal);
    let (sx, _) = float_arg(name, args, 0, "x")?;
    let (so, y) = float_arg(name, args, 1, "out")?;
    let (sg, dy) = float_arg(name, args, 2, "grad_out")?;
    let (s, t) = geometry(name, causal, sx)?;
    same_shape(name, so, sx)?;
    same_shape(name, sg, sx)?;
    let mut grad = vec![T::ZERO; y.len()];
    let rows = y.chunks_exact(t).zip(dy.chunks_exact(t));
    for (r, ((yr, dyr), gr)) in rows.zip(grad.chunks_exact_mut(t)).enumerate() {
        let n = visible(causal, r % s, s, t);
        let (yr, dyr, gr) = (&yr[..n], &dyr[..n], &mut gr[..n]);
        if log {
            let sum: f64 = dyr.iter().map(|&d| d.to_f64()).sum();
            for ((g, &yv), &d) in gr.iter_mut().zip(yr).zip(dyr) {
                *g = T::from_f64(d.to_f64() - yv.exp().to_f64() * sum);
            }
        } else {
            let dot: f64 = yr
                .iter()
                .zip(dyr)
                .map(|(&a, &b)| a.to_f64() * b.to_f64())
                .sum();
            for ((g, &yv), &d) in gr.iter_mut().zip(yr).zip(dyr) {
                *g = T::from_f64(yv.to_f64() * (d.to_f64() - dot));
            }
        }
    }
    Ok(vec![Owned::float(sx.to_vec(), grad)])
}

#[cfg(test)]
mod tests;
