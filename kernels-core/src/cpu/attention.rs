//! Scaled dot-product attention with grouped-query heads (`F.scaled_dot_product_attention` with
//! `enable_gqa=True`).
//!
//! q `[b, hq, s, d]`, k `[b, hkv, t, d]`, v `[b, hkv, t, dv]` -> out `[b, hq, s, dv]`. Query head
//! `h` reads kv head `h / (hq / hkv)`. `scale` defaults to `1/sqrt(d)`.
//!
//! Causal masking is bottom-right aligned: query `i` sees keys `j <= i + (t - s)`, so a decode step
//! with a KV cache (`s = 1`) sees every key, and `s = t` is the usual lower triangle. A query row
//! that sees no key (only possible when `s > t`) outputs zeros and passes no gradient, rather than
//! the NaN a naive softmax over an empty set would give.
//!
//! `kv_len` (0: all `t`) reads only the first `kv_len` keys and values of each head, as if k and
//! v were `k[:, :, :kv_len]`: a preallocated KV cache of capacity `t` holding `kv_len` positions.
//! Causal alignment uses `kv_len`, and the ignored keys get zero gradient.
//!
//! `window` > 0 (causal only) is sliding-window attention as Mistral and Gemma use it: query `i`
//! sees keys `j` with `i + (t - s) - window < j <= i + (t - s)`, its last `window` keys
//! including its own position (transformers' `sliding_window_overlay`).

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;

const OP: &str = "attention";

/// Validated attention geometry, shared by every backend: q `[batch, hq, s, d]`, k
/// `[batch, hkv, t, d]`, v `[batch, hkv, t, dv]`, `hq` a multiple of `hkv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub batch: usize,
    pub hq: usize,
    pub hkv: usize,
    pub s: usize,
    pub t: usize,
    pub d: usize,
    pub dv: usize,
    /// Valid keys of the `t` (the first `kv_len` positions); `t` unless narrowed by
    /// [`Dims::with_kv_len`].
    pub kv_len: usize,
    /// Keys a query sees at most, counting back from its own position (0: no window); set by
    /// [`Dims::with_window`].
    pub window: usize,
}

impl Dims {
    /// Checks the shapes of q, k and v (errors name the op `attention` and the shapes).
    pub fn new(q: &[usize], k: &[usize], v: &[usize]) -> Result<Dims> {
        let rank4 = |name: &str, shape: &[usize], layout: &str| -> Result<[usize; 4]> {
            match *shape {
                [a, b, c, d] => {
                    non_empty(OP, name, shape)?;
                    Ok([a, b, c, d])
                }
                _ => Err(Error::bad_shape(
                    OP,
                    name,
                    shape,
                    format!("needs rank 4 {layout}"),
                )),
            }
        };
        let [batch, hq, s, d] = rank4("q", q, "[batch, heads_q, seq_q, head_dim]")?;
        let [kb, hkv, t, kd] = rank4("k", k, "[batch, heads_kv, seq_kv, head_dim]")?;
        let [vb, vh, vt, dv] = rank4("v", v, "[batch, heads_kv, seq_kv, head_dim_v]")?;
        if kb != batch || kd != d {
            return Err(Error::mismatch(OP, q, k));
        }
        if vb != kb || vh != hkv || vt != t {
            return Err(Error::mismatch(OP, k, v));
        }
        if hq % hkv != 0 {
            return Err(Error::bad_shape(
                OP,
                "q",
                q,
                format!("query heads {hq} are not a multiple of key/value heads {hkv}"),
            ));
        }
        Ok(Dims {
            batch,
            hq,
            hkv,
            s,
            t,
            d,
            dv,
            kv_len: t,
            window: 0,
        })
    }

    /// The geometry with the `kv_len` attribute applied: 0 keeps every key; otherwise at most
    /// `t` (an error naming the attribute and the key count).
    pub fn with_kv_len(mut self, kv_len: usize) -> Result<Dims> {
        if kv_len > self.t {
            return Err(Error::BadAttr {
                op: OP,
                attr: "kv_len",
                value: format!("{kv_len}"),
                why: format!("more than the {} keys of k and v", self.t),
            });
        }
        if kv_len > 0 {
            self.kv_len = kv_len;
        }
        Ok(self)
    }

    /// The geometry with the `window` attribute applied: 0 keeps every key; otherwise the
    /// attention must be causal (a window counts back from the query's own position).
    pub fn with_window(mut self, window: usize, causal: bool) -> Result<Dims> {
        if window > 0 && !causal {
            return Err(Error::BadAttr {
                op: OP,
                attr: "window",
                value: format!("{window}"),
                why: "a sliding window needs causal = true".into(),
            });
        }
        self.window = window;
        Ok(self)
    }

    /// The keys query row `i` may see: `lo..hi`.
    pub(crate) fn keys(&self, causal: bool, i: usize) -> (usize, usize) {
        let t = self.kv_len;
        if !causal {
            return (0, t);
        }
        // Keys j <= i + t - s, i.e. j < i + 1 + t - s, clamped to [0, t].
        let hi = (i + 1 + t).saturating_sub(self.s).min(t);
        let lo = if self.window == 0 {
            0
        } else {
            hi.saturating_sub(self.window)
        };
        (lo, hi)
    }

    pub(crate) fn out_shape(&self) -> Vec<usize> {
        vec![self.batch, self.hq, self.s, self.dv]
    }
}

/// The softmax scale: the `scale` attribute when given (finite), else `1/sqrt(d)` computed in f64.
pub fn scale_value<T: Real>(scale: Option<f32>, d: usize) -> Result<T> {
    match scale {
        Some(f) if f.is_finite() => Ok(T::from_f32(f)),
        Some(f) => Err(Error::BadAttr {
            op: OP,
            attr: "scale",
            value: format!("{f}"),
            why: "must be finite".into(),
        }),
        None => Ok(T::from_f64(1.0 / libm::sqrt(d as f64))),
    }
}

/// Softmax probabilities of one query row over its `n` visible keys, written into `p[..n]`:
/// `p_j = exp(x_j - max) / sum`, with `x_j = scale * q_i . k_j`.
fn row_probs<T: Real>(qi: &[T], k_head: &[T], d: usize, scale: T, p: &mut [T]) {
    let mut max = T::NEG_INFINITY;
    for (j, pj) in p.iter_mut().enumerate() {
        let kj = &k_head[j * d..(j + 1) * d];
        let mut acc = T::ZERO;
        for (&a, &b) in qi.iter().zip(kj) {
            acc += a * b;
        }
        *pj = acc * scale;
        max = max.max_nan(*pj);
    }
    let mut sum = T::ZERO;
    for pj in p.iter_mut() {
        *pj = (*pj - max).exp();
        sum += *pj;
    }
    for pj in p.iter_mut() {
        *pj /= sum;
    }
}

/// Forward. Args: `q`, `k`, `v`. Returns `out [b, hq, s, dv]`.
pub fn forward<T: Real>(
    causal: bool,
    scale: Option<f32>,
    kv_len: usize,
    window: usize,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (q_shape, q) = float_arg(OP, args, 0, "q")?;
    let (k_shape, k) = float_arg(OP, args, 1, "k")?;
    let (v_shape, v) = float_arg(OP, args, 2, "v")?;
    let dm = Dims::new(q_shape, k_shape, v_shape)?
        .with_kv_len(kv_len)?
        .with_window(window, causal)?;
    let scale = scale_value::<T>(scale, dm.d)?;
    let Dims {
        batch,
        hq,
        hkv,
        s,
        t,
        d,
        dv,
        ..
    } = dm;
    let group = hq / hkv;
    let mut out = vec![T::ZERO; batch * hq * s * dv];
    let mut p = vec![T::ZERO; t];
    for b in 0..batch {
        for h in 0..hq {
            let kvh = b * hkv + h / group;
            let k_head = &k[kvh * t * d..(kvh + 1) * t * d];
            let v_head = &v[kvh * t * dv..(kvh + 1) * t * dv];
            for i in 0..s {
                let row = (b * hq + h) * s + i;
                let (lo, hi) = dm.keys(causal, i);
                let n = hi - lo;
                let qi = &q[row * d..(row + 1) * d];
                let oi = &mut out[row * dv..(row + 1) * dv];
                row_probs(qi, &k_head[lo * d..], d, scale, &mut p[..n]);
                for (e, o) in oi.iter_mut().enumerate() {
                    let mut acc = T::ZERO;
                    for (j, &pj) in p[..n].iter().enumerate() {
                        acc += pj * v_head[(lo + j) * dv + e];
                    }
                    *o = acc;
                }
            }
        }
    }
    Ok(vec![Owned::float(dm.out_shape(), out)])
}

/// Backward. Args: `q`, `k`, `v`, `out`, `grad_out`. Returns `[grad_q, grad_k, grad_v]`.
///
/// The probabilities are recomputed from q and k (not read from `out`), so the gradient depends
/// only on the inputs. With `P` the probabilities and `G` the output gradient of one row:
/// `dP = G . v`, `dS = P * (dP - P . dP)`, `dq = scale * dS @ k`, `dk += scale * dS^T q`,
/// `dv += P^T G`. Kv gradients are summed over the query heads sharing them in head order.
pub fn backward<T: Real>(
    causal: bool,
    scale: Option<f32>,
    kv_len: usize,
    window: usize,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (q_shape, q) = float_arg(OP, args, 0, "q")?;
    let (k_shape, k) = float_arg(OP, args, 1, "k")?;
    let (v_shape, v) = float_arg(OP, args, 2, "v")?;
    let (o_shape, _) = float_arg(OP, args, 3, "out")?;
    let (g_shape, g) = float_arg(OP, args, 4, "grad_out")?;
    let dm = Dims::new(q_shape, k_shape, v_shape)?
        .with_kv_len(kv_len)?
        .with_window(window, causal)?;
    same_shape(OP, &dm.out_shape(), o_shape)?;
    same_shape(OP, &dm.out_shape(), g_shape)?;
    let scale = scale_value::<T>(scale, dm.d)?;
    let Dims {
        batch,
        hq,
        hkv,
        s,
        t,
        d,
        dv,
        ..
    } = dm;
    let group = hq / hkv;
    let mut gq = vec![T::ZERO; q.len()];
    let mut gk = vec![T::ZERO; k.len()];
    let mut gv = vec![T::ZERO; v.len()];
    let mut p = vec![T::ZERO; t];
    let mut dp = vec![T::ZERO; t];
    for b in 0..batch {
        for h in 0..hq {
            let kvh = b * hkv + h / group;
            let (k0, v0) = (kvh * t * d, kvh * t * dv);
            for i in 0..s {
                let row = (b * hq + h) * s + i;
                let (lo, hi) = dm.keys(causal, i);
                let n = hi - lo;
                // The first visible key's K and V offsets.
                let (k0, v0) = (k0 + lo * d, v0 + lo * dv);
                let qi = &q[row * d..(row + 1) * d];
                let gi = &g[row * dv..(row + 1) * dv];
                row_probs(qi, &k[k0..k0 + n * d], d, scale, &mut p[..n]);
                // dP_j = G . v_j, and dv_j += P_j G.
                let mut p_dot_dp = T::ZERO;
                for j in 0..n {
                    let vj = &v[v0 + j * dv..v0 + (j + 1) * dv];
                    let mut acc = T::ZERO;
                    for (&a, &b) in gi.iter().zip(vj) {
                        acc += a * b;
                    }
                    dp[j] = acc;
                    p_dot_dp += p[j] * acc;
                    for (gve, &ge) in gv[v0 + j * dv..v0 + (j + 1) * dv].iter_mut().zip(gi) {
                        *gve += p[j] * ge;
                    }
                }
                // dS_j = P_j (dP_j - P . dP); scores were scale * q . k.
                let gqi = &mut gq[row * d..(row + 1) * d];
                for j in 0..n {
                    let ds = p[j] * (dp[j] - p_dot_dp) * scale;
                    let kj = &k[k0 + j * d..k0 + (j + 1) * d];
                    for (gqe, &ke) in gqi.iter_mut().zip(kj) {
                        *gqe += ds * ke;
                    }
                    for (gke, &qe) in gk[k0 + j * d..k0 + (j + 1) * d].iter_mut().zip(qi) {
                        *gke += ds * qe;
                    }
                }
            }
        }
    }
    Ok(vec![
        Owned::float(q_shape.to_vec(), gq),
        Owned::float(k_shape.to_vec(), gk),
        Owned::float(v_shape.to_vec(), gv),
    ])
}

#[cfg(test)]
mod tests;
