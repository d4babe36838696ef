//! `linear`: `act(x @ weight^T + bias)`, torch's `F.linear` followed by an activation, as one op
//! so a device backend can run it as one matmul with the bias and activation in its epilogue
//! (and the backward as products that apply the activation's derivative while loading).
//!
//! The activations are the ones whose derivative is a function of the output (`none`, `relu`,
//! `tanh`, `sigmoid`), so the backward needs no pre-activation: it takes the usual
//! `inputs ++ outputs ++ grad_outputs` and forms `g' = g * act'(out)`, then
//! `grad_x = g' @ weight`, `grad_weight = g'^T @ x` (summed over every leading dim of x) and
//! `grad_bias = sum of g' over rows`.

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, min_rank, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::Activation;

const OP: &str = "linear";

/// Checks `x [..., in]`, `weight [out, in]`, `bias [out]`; returns `(rows, in, out)`.
pub fn check(x: &[usize], weight: &[usize], bias: &[usize]) -> Result<(usize, usize, usize)> {
    let (rows, in_f, out_f) = check_x_weight(OP, x, weight)?;
    if bias != [out_f] {
        return Err(Error::mismatch(OP, weight, bias));
    }
    Ok((rows, in_f, out_f))
}

/// The checks of `op`'s `x [..., in]` and `weight [out, in]` (x @ weight^T), shared by
/// `linear` and `matmul_swiglu`; returns `(rows, in, out)`.
pub fn check_x_weight(
    op: &'static str,
    x: &[usize],
    weight: &[usize],
) -> Result<(usize, usize, usize)> {
    min_rank(op, "x", x, 1)?;
    non_empty(op, "x", x)?;
    if weight.len() != 2 {
        return Err(Error::bad_shape(
            op,
            "weight",
            weight,
            "must be [out_features, in_features]",
        ));
    }
    non_empty(op, "weight", weight)?;
    let (out_f, in_f) = (weight[0], weight[1]);
    let (lead, last) = x.split_at(x.len() - 1);
    if last[0] != in_f {
        return Err(Error::mismatch(op, x, weight));
    }
    Ok((lead.iter().product(), in_f, out_f))
}

/// The shape of the output: `x`'s with the last dim replaced by `out`.
pub fn out_shape(x: &[usize], out_f: usize) -> Vec<usize> {
    let mut s = x.to_vec();
    if let Some(last) = s.last_mut() {
        *last = out_f;
    }
    s
}

/// The activation of a pre-activation value.
pub fn act<T: Real>(a: Activation, v: T) -> T {
    match a {
        Activation::None => v,
        Activation::Relu => {
            if v > T::ZERO {
                v
            } else {
                T::ZERO
            }
        }
        Activation::Tanh => v.tanh(),
        Activation::Sigmoid => T::ONE / (T::ONE + (-v).exp()),
    }
}

/// The activation's derivative, written in terms of its output `y`.
pub fn act_grad<T: Real>(a: Activation, y: T) -> T {
    match a {
        Activation::None => T::ONE,
        Activation::Relu => {
            if y > T::ZERO {
                T::ONE
            } else {
                T::ZERO
            }
        }
        Activation::Tanh => T::ONE - y * y,
        Activation::Sigmoid => y * (T::ONE - y),
    }
}

/// x `[..., in]`, weight `[out, in]`, bias `[out]` -> out `[..., out]`.
pub fn forward<T: Real>(a: Activation, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let (xs, x) = float_arg(OP, args, 0, "x")?;
    let (ws, w) = float_arg(OP, args, 1, "weight")?;
    let (bs, b) = float_arg(OP, args, 2, "bias")?;
    let (rows, in_f, out_f) = check(xs, ws, bs)?;
    let mut out = vec![T::ZERO; rows * out_f];
    for (xr, or) in x.chunks_exact(in_f).zip(out.chunks_exact_mut(out_f)) {
        for ((o, wr), &bj) in or.iter_mut().zip(w.chunks_exact(in_f)).zip(b) {
            let mut acc = T::ZERO;
            for (&xv, &wv) in xr.iter().zip(wr) {
                acc += xv * wv;
            }
            *o = act(a, acc + bj);
        }
    }
    Ok(vec![Owned::float(out_shape(xs, out_f), out)])
}

/// Args `x, weight, bias, out, grad_out` -> `grad_x, grad_weight, grad_bias`.
pub fn backward<T: Real>(a: Activation, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let (xs, x) = float_arg(OP, args, 0, "x")?;
    let (ws, w) = float_arg(OP, args, 1, "weight")?;
    let (bs, _) = float_arg(OP, args, 2, "bias")?;
    let (ys, y) = float_arg(OP, args, 3, "out")?;
    let (gs, g) = float_arg(OP, args, 4, "grad_out")?;
    let (_, in_f, out_f) = check(xs, ws, bs)?;
    let want = out_shape(xs, out_f);
    same_shape(OP, &want, ys)?;
    same_shape(OP, &want, gs)?;
    // g' [rows, out] = g * act'(out)
    let gp: Vec<T> = g
        .iter()
        .zip(y)
        .map(|(&gv, &yv)| gv * act_grad(a, yv))
        .collect();
    let mut gx = vec![T::ZERO; x.len()];
    let mut gw = vec![T::ZERO; w.len()];
    let mut gb = vec![T::ZERO; out_f];
    for ((gr, xr), gxr) in gp
        .chunks_exact(out_f)
        .zip(x.chunks_exact(in_f))
        .zip(gx.chunks_exact_mut(in_f))
    {
        for (j, (&gv, wr)) in gr.iter().zip(w.chunks_exact(in_f)).enumerate() {
            gb[j] += gv;
            // grad_x row += g'_j * weight[j]; grad_weight[j] += g'_j * x row
            for ((gxv, &wv), (gwv, &xv)) in gxr
                .iter_mut()
                .zip(wr)
                .zip(gw[j * in_f..(j + 1) * in_f].iter_mut().zip(xr))
            {
                *gxv += gv * wv;
                *gwv += gv * xv;
            }
        }
    }
    Ok(vec![
        Owned::float(xs.to_vec(), gx),
        Owned::float(ws.to_vec(), gw),
        Owned::float(bs.to_vec(), gb),
    ])
}

#[cfg(test)]
mod tests;
