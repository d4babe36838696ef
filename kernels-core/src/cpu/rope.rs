//! Rotary position embedding over x `[batch, heads, seq, head_dim]`.
//!
//! Position `p = offset + s`; frequency `inv_freq[i]` for `i < head_dim / 2` is
//! `theta^(-2i / head_dim)`, scaled by [`Freqs`] (Hugging Face's `linear`, `llama3` and `yarn`
//! rope types, in f64); angle `p * inv_freq[i]`. Pair `i` is `(i, i + half)` in the Hugging Face
//! `rotate_half` layout, or `(2i, 2i + 1)` when interleaved (the original RoFormer / Meta layout).
//! Each pair is rotated by its angle: `(a, b) -> (a cos - b sin, b cos + a sin)`.
//!
//! Angles and their sines and cosines are computed in f64 whatever `T` is: `p * inv_freq` reaches
//! thousands of radians at long positions, where an f32 angle has already lost the low bits that
//! decide the rotation.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::RopeScaling;

const OP: &str = "rope";

/// The attributes of `rope` that decide its frequencies: the base and the scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Freqs {
    pub theta: f32,
    pub scaling: RopeScaling,
    pub factor: f32,
    pub low: f32,
    pub high: f32,
    pub original_context: usize,
}

impl Freqs {
    /// Unscaled frequencies of base `theta`.
    pub fn plain(theta: f32) -> Freqs {
        Freqs {
            theta,
            scaling: RopeScaling::None,
            factor: 1.0,
            low: 1.0,
            high: 4.0,
            original_context: 0,
        }
    }

    /// A stable text key of these attributes (a device caches its tables by it).
    pub fn key(&self, head_dim: usize) -> alloc::string::String {
        format!(
            "{:08x} {} {:08x} {:08x} {:08x} {} {head_dim}",
            self.theta.to_bits(),
            self.scaling.name(),
            self.factor.to_bits(),
            self.low.to_bits(),
            self.high.to_bits(),
            self.original_context
        )
    }

    pub(crate) fn check(&self) -> Result<()> {
        let bad = |attr: &'static str, value: String, why: &str| Error::BadAttr {
            op: OP,
            attr,
            value,
            why: why.into(),
        };
        let positive = [
            ("theta", self.theta),
            ("factor", self.factor),
            ("low", self.low),
            ("high", self.high),
        ];
        for (attr, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(attr, format!("{v}"), "must be finite and > 0"));
            }
        }
        let scaled_context = matches!(self.scaling, RopeScaling::Llama3 | RopeScaling::Yarn);
        if scaled_context && self.original_context == 0 {
            return Err(bad(
                "original_context",
                "0".into(),
                "llama3 and yarn scaling need the original context length",
            ));
        }
        if self.scaling == RopeScaling::Llama3 && self.high <= self.low {
            return Err(bad(
                "high",
                format!("{}", self.high),
                "llama3 scaling needs high_freq_factor > low_freq_factor",
            ));
        }
        Ok(())
    }

    /// `inv_freq[i]` for `i < head_dim / 2`, in f64, as transformers'
    /// `ROPE_INIT_FUNCTIONS[rope_type]` computes them.
    pub fn inv_freqs(&self, head_dim: usize) -> Vec<f64> {
        let half = head_dim / 2;
        let dim = head_dim as f64;
        let theta = f64::from(self.theta);
        let factor = f64::from(self.factor);
        let base = |i: usize| libm::pow(theta, -((2 * i) as f64) / dim);
        let orig = self.original_context as f64;
        let tau = 2.0 * core::f64::consts::PI;
        match self.scaling {
            RopeScaling::None => (0..half).map(base).collect(),
            RopeScaling::Linear => (0..half).map(|i| base(i) / factor).collect(),
            RopeScaling::Llama3 => {
                let (low, high) = (f64::from(self.low), f64::from(self.high));
                let (low_wavelen, high_wavelen) = (orig / low, orig / high);
                (0..half)
                    .map(|i| {
                        let f = base(i);
                        let wavelen = tau / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (orig / wavelen - low) / (high - low);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
            RopeScaling::Yarn => {
                // The dim at which a frequency turns `rotations` times over the original context.
                let correction = |rotations: f64| {
                    dim * libm::log(orig / (rotations * tau)) / (2.0 * libm::log(theta))
                };
                let lo = libm::floor(correction(f64::from(self.high))).max(0.0);
                let mut hi = libm::ceil(correction(f64::from(self.low))).min(dim - 1.0);
                if lo == hi {
                    hi += 0.001;
                }
                (0..half)
                    .map(|i| {
                        let f = base(i);
                        let ramp = ((i as f64 - lo) / (hi - lo)).clamp(0.0, 1.0);
                        let extrapolate = 1.0 - ramp;
                        f / factor * (1.0 - extrapolate) + f * extrapolate
                    })
                    .collect()
            }
        }
    }
}

/// Validates the attributes and x's shape (every backend's checks); returns `(seq, head_dim)`.
pub fn check(freqs: &Freqs, offset: usize, shape: &[usize]) -> Result<(usize, usize)> {
    freqs.check()?;
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
fn tables<T: Real>(freqs: &Freqs, offset: usize, seq: usize, head_dim: usize) -> (Vec<T>, Vec<T>) {
    let half = head_dim / 2;
    let inv_freq = freqs.inv_freqs(head_dim);
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
pub(crate) fn rotate<T: Real>(
    freqs: &Freqs,
    offset: usize,
    interleaved: bool,
    inverse: bool,
    shape: &[usize],
    x: &[T],
) -> Result<Vec<T>> {
    let (seq, head_dim) = check(freqs, offset, shape)?;
    let half = head_dim / 2;
    let (cos, sin) = tables::<T>(freqs, offset, seq, head_dim);
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
    freqs: &Freqs,
    offset: usize,
    interleaved: bool,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (shape, x) = float_arg(OP, args, 0, "x")?;
    let out = rotate(freqs, offset, interleaved, false, shape, x)?;
    Ok(vec![Owned::float(shape.to_vec(), out)])
}

/// Backward. Args: `x`, `out`, `grad_out`. Returns `[grad_x]`: the rotation is orthogonal, so
/// the gradient is `grad_out` rotated back by the same angles.
pub fn backward<T: Real>(
    freqs: &Freqs,
    offset: usize,
    interleaved: bool,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (shape, _) = float_arg(OP, args, 0, "x")?;
    let (out_shape, _) = float_arg(OP, args, 1, "out")?;
    let (g_shape, g) = float_arg(OP, args, 2, "grad_out")?;
    check(freqs, offset, shape)?;
    same_shape(OP, shape, out_shape)?;
    same_shape(OP, shape, g_shape)?;
    let grad = rotate(freqs, offset, interleaved, true, shape, g)?;
    Ok(vec![Owned::float(shape.to_vec(), grad)])
}

#[cfg(test)]
mod tests;
