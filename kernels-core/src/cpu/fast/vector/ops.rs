//! Element-wise activations, softmax, rms_norm, layer_norm and rope on the vector kernels. Each function
//! validates its arguments with the reference's helpers, in the reference's order.

use alloc::vec;
use alloc::vec::Vec;

use super::common::{Act, filled, with_simd, zeroed};
use super::math;
use super::rope_tables;
use crate::cpu::fast::isa::Isa;
use crate::cpu::fast::pool;
use crate::cpu::{Owned, View, float_arg, non_empty, norm, rope as rope_ref, same_shape, softmax};
use crate::error::Result;
use crate::op::{Op, UnaryOp};

/// Values per range where an element-wise op or a norm splits over the pool: a prefill's
/// activations split, a decode step's row stays on the caller. A multiple of every vector
/// width, so each value falls in the same lane of the same vector as on one thread: the same
/// bits.
const POOL_GRAIN: usize = 1 << 14;

/// `exp`, `sigmoid` or `silu` of `x`, any shape.
pub(super) fn unary(isa: Isa, u: UnaryOp, act: Act, args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
    let name = Op::Unary(u).name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    non_empty(name, "x", sx)?;
    let mut out = zeroed(x.len(), name)?;
    pool::for_slices(&mut out, 1, POOL_GRAIN, &|r, out| {
        let x = &x[r];
        with_simd!(isa, s => match act {
            Act::Exp => math::map(s, x, out, |v| math::exp(s, v)),
            Act::Sigmoid => math::map(s, x, out, |v| math::sigmoid(s, v)),
            Act::Silu => math::map(s, x, out, |v| s.mul(v, math::sigmoid(s, v))),
        });
        Ok(())
    })?;
    Ok(vec![Owned::float(sx.to_vec(), out)])
}

/// `silu(gate) * up`, computed as the reference does: `(gate * sigmoid(gate)) * up`.
pub(super) fn swiglu(isa: Isa, args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
    let name = Op::Swiglu.name();
    let (sg, gate) = float_arg(name, args, 0, "gate")?;
    let (su, up) = float_arg(name, args, 1, "up")?;
    non_empty(name, "gate", sg)?;
    same_shape(name, sg, su)?;
    let mut out = zeroed(gate.len(), name)?;
    pool::for_slices(&mut out, 1, POOL_GRAIN, &|r, out| {
        let (gate, up) = (&gate[r.clone()], &up[r]);
        with_simd!(isa, s => math::map2(s, gate, up, out, |g, u| {
            s.mul(s.mul(g, math::sigmoid(s, g)), u)
        }));
        Ok(())
    })?;
    Ok(vec![Owned::float(sg.to_vec(), out)])
}

/// Softmax or log-softmax over the last dim, causal or not (masking as the reference).
///
/// Per row: the maximum, then `e = exp(x - max)` stored and summed in f32, then `e / sum`
/// (softmax) or `(x - max) - ln(sum)` (log-softmax). NaN, or an infinity, anywhere in a row
/// makes the sum NaN and so the whole row, as in the reference.
pub(super) fn softmax(
    isa: Isa,
    log: bool,
    causal: bool,
    args: &[View<f32>],
) -> Result<Vec<Owned<f32>>> {
    let name = softmax::op_name(log, causal);
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (sq, t) = softmax::geometry(name, causal, sx)?;
    let masked = if log { f32::NEG_INFINITY } else { 0.0 };
    let mut out = filled(x.len(), masked, name)?;
    with_simd!(isa, s => {
        let rows = x.chunks_exact(t).zip(out.chunks_exact_mut(t));
        for (r, (row, orow)) in rows.enumerate() {
            let n = softmax::visible(causal, r % sq, sq, t);
            if n == 0 {
                continue;
            }
            let (row, orow) = (&row[..n], &mut orow[..n]);
            let m = math::max(s, row);
            let sum = math::exp_sum(s, row, m, orow);
            if log {
                let (mv, lse) = (s.splat(m), s.splat(libm::log(f64::from(sum)) as f32));
                math::map(s, row, orow, |v| s.sub(s.sub(v, mv), lse));
            } else {
                math::scale_in_place(s, orow, 1.0 / sum);
            }
        }
    });
    Ok(vec![Owned::float(sx.to_vec(), out)])
}

/// Below this f32 sum of squares (or when it is not finite) a row is normalized by the
/// reference's f64 arithmetic instead: squares of tiny values lose bits as subnormals, and
/// `1 / rms` might not fit in f32.
const SUM_SQ_MIN: f32 = 8.673_617e-19; // 2^-60

/// `x / sqrt(mean(x^2) + eps) * weight` over the last dim.
pub(super) fn rms_norm(isa: Isa, eps: f32, args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
    let name = Op::RmsNorm { eps }.name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (sw, w) = float_arg(name, args, 1, "weight")?;
    let n = norm::validate(name, eps, sx, &[("weight", sw)])?;
    let mut out = zeroed(x.len(), name)?;
    let (nf, eps) = (n as f64, f64::from(eps));
    // Whole rows per range; each row's arithmetic is its own.
    pool::for_slices(&mut out, n, (POOL_GRAIN / n.max(1)).max(1), &|rows, out| {
        let x = &x[rows.start * n..rows.end * n];
        with_simd!(isa, s => {
            for (row, orow) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
                let ss = math::sum_sq(s, row);
                if ss.is_finite() && ss >= SUM_SQ_MIN {
                    let r = s.splat((1.0 / libm::sqrt(f64::from(ss) / nf + eps)) as f32);
                    math::map2(s, row, w, orow, |v, wv| s.mul(s.mul(v, r), wv));
                } else {
                    exact_rms_row(row, w, eps, orow);
                }
            }
        });
        Ok(())
    })?;
    Ok(vec![Owned::float(sx.to_vec(), out)])
}

/// One row of rms_norm in f64, as the reference computes it.
fn exact_rms_row(row: &[f32], w: &[f32], eps: f64, out: &mut [f32]) {
    let ms = row
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        / row.len() as f64;
    let r = 1.0 / libm::sqrt(ms + eps);
    for ((o, &v), &wv) in out.iter_mut().zip(row).zip(w) {
        *o = (f64::from(v) * r * f64::from(wv)) as f32;
    }
}

/// `(x - mean) / sqrt(var + eps) * weight + bias` over the last dim (biased variance).
///
/// In f32: the mean, then the sums of `d = x - mean` and `d^2` in one pass (the first corrects
/// the mean's rounding), then the output. A row whose mean is large against its spread
/// (`mean^2 > 64 var`: f32 deviations would lose digits the reference keeps), or that is not
/// finite, or whose spread is tiny, is computed by the reference's f64 arithmetic instead.
pub(super) fn layer_norm(isa: Isa, eps: f32, args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
    let name = Op::LayerNorm { eps }.name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (sw, w) = float_arg(name, args, 1, "weight")?;
    let (sb, b) = float_arg(name, args, 2, "bias")?;
    let n = norm::validate(name, eps, sx, &[("weight", sw), ("bias", sb)])?;
    let mut out = zeroed(x.len(), name)?;
    let (nf, eps) = (n as f64, f64::from(eps));
    with_simd!(isa, s => {
        for (row, orow) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
            let m = math::sum(s, row) / n as f32;
            let (d1, d2) = math::dev_sums(s, row, m);
            let (md, ms) = (f64::from(d1) / nf, f64::from(d2) / nf);
            let var = ms - md * md;
            let mean = f64::from(m) + md;
            let ok = d2.is_finite() && d2 >= SUM_SQ_MIN && mean * mean <= 64.0 * var;
            if !(ok && m.is_finite()) {
                exact_layer_norm_row(row, w, b, eps, orow);
                continue;
            }
            let rstd = s.splat((1.0 / libm::sqrt(var + eps)) as f32);
            let shift = s.splat(mean as f32);
            math::map3(s, row, w, b, orow, |v, wv, bv| {
                s.mul_add(s.mul(s.sub(v, shift), rstd), wv, bv)
            });
        }
    });
    Ok(vec![Owned::float(sx.to_vec(), out)])
}

/// One row of layer_norm in f64, as the reference computes it.
fn exact_layer_norm_row(row: &[f32], w: &[f32], b: &[f32], eps: f64, out: &mut [f32]) {
    let n = row.len() as f64;
    let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = row
        .iter()
        .map(|&v| (f64::from(v) - mean) * (f64::from(v) - mean))
        .sum::<f64>()
        / n;
    let rstd = 1.0 / libm::sqrt(var + eps);
    for (((o, &v), &wv), &bv) in out.iter_mut().zip(row).zip(w).zip(b) {
        *o = ((f64::from(v) - mean) * rstd * f64::from(wv) + f64::from(bv)) as f32;
    }
}

/// Rope over x `[batch, heads, seq, head_dim]`: the reference's rotation `(a c - b s, b c + a s)`
/// with the same roundings (no fused multiply-add), so only the tables can differ.
pub(super) fn rope(
    isa: Isa,
    freqs: &rope_ref::Freqs,
    offset: usize,
    interleaved: bool,
    args: &[View<f32>],
) -> Result<Vec<Owned<f32>>> {
    const OP: &str = "rope";
    let (shape, x) = float_arg(OP, args, 0, "x")?;
    let (seq, head_dim) = rope_ref::check(freqs, offset, shape)?;
    let half = head_dim / 2;
    let mut out = zeroed(x.len(), OP)?;
    rope_tables::with_tables(freqs, offset, seq, head_dim, |cos, sin| {
        with_simd!(isa, s => {
            let rows = x.chunks_exact(head_dim).zip(out.chunks_exact_mut(head_dim));
            for (row, (xr, or)) in rows.enumerate() {
                let p = (row % seq) * half;
                let (c, sn) = (&cos[p..p + half], &sin[p..p + half]);
                if interleaved {
                    for (i, (o, xp)) in or.chunks_exact_mut(2).zip(xr.chunks_exact(2)).enumerate() {
                        let (a, b) = (xp[0], xp[1]);
                        o[0] = a * c[i] - b * sn[i];
                        o[1] = b * c[i] + a * sn[i];
                    }
                    continue;
                }
                let (a, b) = xr.split_at(half);
                let (oa, ob) = or.split_at_mut(half);
                for i in (0..half).step_by(s_lanes(s)) {
                    let (av, bv) = (s.load(&a[i..], 0.0), s.load(&b[i..], 0.0));
                    let (cv, sv) = (s.load(&c[i..], 0.0), s.load(&sn[i..], 0.0));
                    s.store(s.sub(s.mul(av, cv), s.mul(bv, sv)), &mut oa[i..]);
                    s.store(s.add(s.mul(bv, cv), s.mul(av, sv)), &mut ob[i..]);
                }
            }
        });
        Ok(())
    })?;
    Ok(vec![Owned::float(shape.to_vec(), out)])
}

/// The lane count of a token's vectors.
#[inline(always)]
fn s_lanes<S: super::simd::Simd>(_: S) -> usize {
    S::LANES
}
