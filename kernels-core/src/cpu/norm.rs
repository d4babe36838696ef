//! LayerNorm and RMSNorm over the last dim, forward and backward.
//!
//! Row statistics are computed in f64 with two passes (mean, then the mean of squared deviations),
//! so a row like `[10000, 10001, 10002]` normalizes as accurately in f32 as `[0, 1, 2]`: no
//! `E[x^2] - E[x]^2` cancellation. The variance is the biased one, as `F.layer_norm`.
//! The backward recomputes the statistics from `x` rather than saving them, so the backward
//! argument list stays `inputs ++ outputs ++ grad_outputs`.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, min_rank, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::Op;

/// Checks `eps` (finite, >= 0), x `[..., n]` (non-empty) and each parameter `[n]`; returns `n`.
pub(crate) fn validate(
    name: &'static str,
    eps: f32,
    sx: &[usize],
    params: &[(&str, &[usize])],
) -> Result<usize> {
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::BadAttr {
            op: name,
            attr: "eps",
            value: format!("{eps}"),
            why: "must be finite and >= 0".into(),
        });
    }
    min_rank(name, "x", sx, 1)?;
    non_empty(name, "x", sx)?;
    let n = sx.last().copied().unwrap_or(1);
    for (_, shape) in params {
        if *shape != [n] {
            return Err(Error::mismatch(name, shape, &[n]));
        }
    }
    Ok(n)
}

/// `(mean, 1 / sqrt(var + eps))` of one row, biased variance, two passes in f64.
fn mean_rstd<T: Real>(row: &[T], eps: f64) -> (f64, f64) {
    let n = row.len() as f64;
    let mean = row.iter().map(|v| v.to_f64()).sum::<f64>() / n;
    let var = row
        .iter()
        .map(|v| {
            let d = v.to_f64() - mean;
            d * d
        })
        .sum::<f64>()
        / n;
    (mean, 1.0 / Real::sqrt(var + eps))
}

/// `1 / sqrt(mean(x^2) + eps)` of one row, in f64.
fn inv_rms<T: Real>(row: &[T], eps: f64) -> f64 {
    let ms = row
        .iter()
        .map(|v| {
            let v = v.to_f64();
            v * v
        })
        .sum::<f64>()
        / row.len() as f64;
    1.0 / Real::sqrt(ms + eps)
}

/// `out = (x - mean) / sqrt(var + eps) * weight + bias`; x `[..., n]`, weight and bias `[n]`.
pub fn layer_norm_forward<T: Real>(eps: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::LayerNorm { eps }.name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (sw, w) = float_arg(name, args, 1, "weight")?;
    let (sb, b) = float_arg(name, args, 2, "bias")?;
    let n = validate(name, eps, sx, &[("weight", sw), ("bias", sb)])?;
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(n) {
        let (mean, rstd) = mean_rstd(row, eps as f64);
        for ((&v, &w), &b) in row.iter().zip(w).zip(b) {
            let xhat = (v.to_f64() - mean) * rstd;
            out.push(T::from_f64(xhat * w.to_f64() + b.to_f64()));
        }
    }
    Ok(vec![Owned::float(sx.to_vec(), out)])
}

/// `[grad_x, grad_weight, grad_bias]`; args `(x, weight, bias, out, grad_out)`.
///
/// With `xhat = (x - mean) * rstd` and `h = dy * weight`:
/// `dx = rstd * (h - mean(h) - xhat * mean(h * xhat))`, `dweight = sum_rows dy * xhat`,
/// `dbias = sum_rows dy`.
pub fn layer_norm_backward<T: Real>(eps: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::LayerNorm { eps }.name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (sw, w) = float_arg(name, args, 1, "weight")?;
    let (sb, _) = float_arg(name, args, 2, "bias")?;
    let (so, _) = float_arg(name, args, 3, "out")?;
    let (sg, dy) = float_arg(name, args, 4, "grad_out")?;
    let n = validate(name, eps, sx, &[("weight", sw), ("bias", sb)])?;
    same_shape(name, so, sx)?;
    same_shape(name, sg, sx)?;
    let nf = n as f64;
    let mut dx = Vec::with_capacity(x.len());
    let mut dw = vec![0.0f64; n];
    let mut db = vec![0.0f64; n];
    let mut xhat = vec![0.0f64; n];
    let mut h = vec![0.0f64; n];
    for (row, dyr) in x.chunks_exact(n).zip(dy.chunks_exact(n)) {
        let (mean, rstd) = mean_rstd(row, eps as f64);
        let (mut mean_h, mut mean_hx) = (0.0, 0.0);
        let cols = row
            .iter()
            .zip(dyr)
            .zip(w)
            .zip(xhat.iter_mut())
            .zip(h.iter_mut());
        for ((((&v, &d), &w), xh), hh) in cols {
            *xh = (v.to_f64() - mean) * rstd;
            *hh = d.to_f64() * w.to_f64();
            mean_h += *hh;
            mean_hx += *hh * *xh;
        }
        mean_h /= nf;
        mean_hx /= nf;
        let cols = dyr
            .iter()
            .zip(&xhat)
            .zip(&h)
            .zip(dw.iter_mut())
            .zip(db.iter_mut());
        for ((((&d, &xh), &hh), dw), db) in cols {
            dx.push(T::from_f64(rstd * (hh - mean_h - xh * mean_hx)));
            *dw += d.to_f64() * xh;
            *db += d.to_f64();
        }
    }
    Ok(vec![
        Owned::float(sx.to_vec(), dx),
        Owned::float(sw.to_vec(), dw.into_iter().map(T::from_f64).collect()),
        Owned::float(sb.to_vec(), db.into_iter().map(T::from_f64).collect()),
    ])
}

/// `out = x / sqrt(mean(x^2) + eps) * weight`; x `[..., n]`, weight `[n]`.
pub fn rms_norm_forward<T: Real>(eps: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::RmsNorm { eps }.name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (sw, w) = float_arg(name, args, 1, "weight")?;
    let n = validate(name, eps, sx, &[("weight", sw)])?;
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(n) {
        let r = inv_rms(row, eps as f64);
        for (&v, &w) in row.iter().zip(w) {
            out.push(T::from_f64(v.to_f64() * r * w.to_f64()));
        }
    }
    Ok(vec![Owned::float(sx.to_vec(), out)])
}

/// `[grad_x, grad_weight]`; args `(x, weight, out, grad_out)`.
///
/// With `r = 1 / sqrt(mean(x^2) + eps)` and `h = dy * weight`:
/// `dx = r * (h - x * r^2 * mean(h * x))`, `dweight = sum_rows dy * x * r`.
pub fn rms_norm_backward<T: Real>(eps: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::RmsNorm { eps }.name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (sw, w) = float_arg(name, args, 1, "weight")?;
    let (so, _) = float_arg(name, args, 2, "out")?;
    let (sg, dy) = float_arg(name, args, 3, "grad_out")?;
    let n = validate(name, eps, sx, &[("weight", sw)])?;
    same_shape(name, so, sx)?;
    same_shape(name, sg, sx)?;
    let nf = n as f64;
    let mut dx = Vec::with_capacity(x.len());
    let mut dw = vec![0.0f64; n];
    for (row, dyr) in x.chunks_exact(n).zip(dy.chunks_exact(n)) {
        let r = inv_rms(row, eps as f64);
        let mean_hx = row
            .iter()
            .zip(dyr)
            .zip(w)
            .map(|((&v, &d), &w)| d.to_f64() * w.to_f64() * v.to_f64())
            .sum::<f64>()
            / nf;
        for (((&v, &d), &w), dw) in row.iter().zip(dyr).zip(w).zip(dw.iter_mut()) {
            let (v, d) = (v.to_f64(), d.to_f64());
            let h = d * w.to_f64();
            dx.push(T::from_f64(r * (h - v * r * r * mean_hx)));
            *dw += d * v * r;
        }
    }
    Ok(vec![
        Owned::float(sx.to_vec(), dx),
        Owned::float(sw.to_vec(), dw.into_iter().map(T::from_f64).collect()),
    ])
}

#[cfg(test)]
mod tests;
