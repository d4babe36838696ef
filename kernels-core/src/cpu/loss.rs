//! Losses: cross-entropy over class logits and mean squared error, forward and backward.
//! Both reduce to a rank-0 scalar (shape `[]`, one element) by the mean, as PyTorch's default
//! `reduction="mean"`; sums accumulate in f64.
//!
//! Cross-entropy takes logits `[..., c]` and integer targets of the leading shape (`[n, c]` with
//! `[n]`, or `[c]` with a rank-0 target). Each row uses a max-subtracted log-sum-exp, so large
//! logits do not overflow. A target outside `0..c` is an [`Error::IndexOutOfRange`]; there is
//! no `ignore_index` (PyTorch's `-100` is reported as out of range, not skipped).

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, int_arg, min_rank, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::Op;

/// Checks logits `[..., c]` and targets `[...]`; returns `(c, targets as class indices)`.
fn ce_plan(
    name: &'static str,
    sl: &[usize],
    st: &[usize],
    targets: &[i64],
) -> Result<(usize, Vec<usize>)> {
    min_rank(name, "logits", sl, 1)?;
    non_empty(name, "logits", sl)?;
    let (c, lead) = match sl.split_last() {
        Some((&c, lead)) => (c, lead),
        None => return Err(Error::bad_shape(name, "logits", sl, "needs rank >= 1")),
    };
    if st != lead {
        return Err(Error::mismatch(name, st, lead));
    }
    let classes = targets
        .iter()
        .map(|&k| match usize::try_from(k) {
            Ok(i) if i < c => Ok(i),
            _ => Err(Error::IndexOutOfRange {
                op: name,
                tensor: "targets".into(),
                index: k,
                bound: c,
            }),
        })
        .collect::<Result<Vec<usize>>>()?;
    Ok((c, classes))
}

/// `(max, sum(exp(x - max)))` of a non-empty row; the sum in f64.
fn max_sumexp<T: Real>(row: &[T]) -> (T, f64) {
    let m = row.iter().fold(T::NEG_INFINITY, |m, &v| m.max_nan(v));
    (m, row.iter().map(|&v| (v - m).exp().to_f64()).sum())
}

/// `out = mean_rows(logsumexp(logits) - logits[target])`; logits `[..., c]`, targets `[...]`,
/// out `[]`.
pub fn cross_entropy_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::CrossEntropy.name();
    let (sl, x) = float_arg(name, args, 0, "logits")?;
    let (st, targets) = int_arg(name, args, 1, "targets")?;
    let (c, classes) = ce_plan(name, sl, st, &targets)?;
    let mut total = 0.0f64;
    for (row, &k) in x.chunks_exact(c).zip(&classes) {
        let (m, sum) = max_sumexp(row);
        // -log softmax(x)_k = ln sum exp(x - m) - (x_k - m).
        let xk = row.get(k).copied().unwrap_or(m);
        total += Real::ln(sum) - (xk - m).to_f64();
    }
    let loss = total / classes.len() as f64;
    Ok(vec![Owned::float(vec![], vec![T::from_f64(loss)])])
}

/// `[grad_logits] = (softmax(logits) - onehot(targets)) * grad_out / rows`; args
/// `(logits, targets, out, grad_out)`, `out` and `grad_out` of shape `[]`.
pub fn cross_entropy_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::CrossEntropy.name();
    let (sl, x) = float_arg(name, args, 0, "logits")?;
    let (st, targets) = int_arg(name, args, 1, "targets")?;
    let (so, _) = float_arg(name, args, 2, "out")?;
    let (sg, g) = float_arg(name, args, 3, "grad_out")?;
    let (c, classes) = ce_plan(name, sl, st, &targets)?;
    same_shape(name, so, &[])?;
    same_shape(name, sg, &[])?;
    let scale = g.first().map_or(0.0, |v| v.to_f64()) / classes.len() as f64;
    let mut grad = Vec::with_capacity(x.len());
    for (row, &k) in x.chunks_exact(c).zip(&classes) {
        let (m, sum) = max_sumexp(row);
        for (j, &v) in row.iter().enumerate() {
            let p = (v - m).exp().to_f64() / sum;
            let onehot = if j == k { 1.0 } else { 0.0 };
            grad.push(T::from_f64((p - onehot) * scale));
        }
    }
    Ok(vec![Owned::float(sl.to_vec(), grad)])
}

/// Checks a and b: same shape, non-empty.
fn mse_check(name: &'static str, sa: &[usize], sb: &[usize]) -> Result<()> {
    non_empty(name, "a", sa)?;
    non_empty(name, "b", sb)?;
    same_shape(name, sa, sb)
}

/// `out = mean((a - b)^2)`; a and b any (equal) shape, out `[]`.
pub fn mse_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Mse.name();
    let (sa, a) = float_arg(name, args, 0, "a")?;
    let (sb, b) = float_arg(name, args, 1, "b")?;
    mse_check(name, sa, sb)?;
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = x.to_f64() - y.to_f64();
            d * d
        })
        .sum();
    let loss = sum / a.len() as f64;
    Ok(vec![Owned::float(vec![], vec![T::from_f64(loss)])])
}

/// `[grad_a, grad_b]` with `grad_a = 2 (a - b) grad_out / N = -grad_b`; args
/// `(a, b, out, grad_out)`.
pub fn mse_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Mse.name();
    let (sa, a) = float_arg(name, args, 0, "a")?;
    let (sb, b) = float_arg(name, args, 1, "b")?;
    let (so, _) = float_arg(name, args, 2, "out")?;
    let (sg, g) = float_arg(name, args, 3, "grad_out")?;
    mse_check(name, sa, sb)?;
    same_shape(name, so, &[])?;
    same_shape(name, sg, &[])?;
    let scale = 2.0 * g.first().map_or(0.0, |v| v.to_f64()) / a.len() as f64;
    let (ga, gb): (Vec<T>, Vec<T>) = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = (x.to_f64() - y.to_f64()) * scale;
            (T::from_f64(d), T::from_f64(-d))
        })
        .unzip();
    Ok(vec![
        Owned::float(sa.to_vec(), ga),
        Owned::float(sb.to_vec(), gb),
    ])
}

#[cfg(test)]
mod tests;
