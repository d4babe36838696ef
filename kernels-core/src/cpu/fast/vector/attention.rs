//! Scaled dot-product attention with grouped-query heads on the vector kernels: a decode step
//! (one query row over a KV cache) and prefill (every row, causal or not) share one row loop.
//!
//! Per query row: the scores `scale * q . k_j` over the visible keys (a vector dot product per
//! key, four keys interleaved), their maximum, `p_j = exp(score_j - max)` with the vector `exp`, the sum, and
//! `out = sum_j (p_j / sum) v_j` accumulated row by row (each `v_j` is contiguous). A row that
//! sees no key is zeros, as in the reference; NaN in q or a visible k makes the row NaN, NaN in
//! v its column.

use alloc::vec;
use alloc::vec::Vec;

use super::common::{filled, with_simd};
use super::math;
use super::simd::Simd;
use crate::cpu::attention::{Dims, scale_value};
use crate::cpu::fast::isa::Isa;
use crate::cpu::fast::pool;
use crate::cpu::{Owned, View, float_arg};
use crate::error::Result;

const OP: &str = "attention";

/// Forward. Args `q [b, hq, s, d]`, `k [b, hkv, t, d]`, `v [b, hkv, t, dv]`; returns
/// `out [b, hq, s, dv]`.
pub(super) fn forward(
    isa: Isa,
    causal: bool,
    scale: Option<f32>,
    kv_len: usize,
    window: usize,
    args: &[View<f32>],
) -> Result<Vec<Owned<f32>>> {
    let (q_shape, q) = float_arg(OP, args, 0, "q")?;
    let (k_shape, k) = float_arg(OP, args, 1, "k")?;
    let (v_shape, v) = float_arg(OP, args, 2, "v")?;
    // `kv_len` narrows the visible keys (a preallocated cache); heads stay `t` apart.
    // `window` narrows them further to each query's last `window` keys.
    let dm = Dims::new(q_shape, k_shape, v_shape)?
        .with_kv_len(kv_len)?
        .with_window(window, causal)?;
    let scale = scale_value::<f32>(scale, dm.d)?;
    let Dims {
        batch,
        hq,
        hkv,
        s: sq,
        t,
        d,
        dv,
        ..
    } = dm;
    let group = hq / hkv;
    let mut out = filled(batch * hq * sq * dv, 0.0, OP)?;
    // Heads split over the pool when there is enough work (prefill); each row's arithmetic is
    // the same on any thread, so the bits do not depend on the thread count.
    let per_head = sq.saturating_mul(t).saturating_mul(d + dv).max(1);
    let grain = (1usize << 18).div_ceil(per_head);
    let head_len = (sq * dv).max(1);
    pool::for_slices(&mut out, head_len, grain, &|heads, part| {
        let mut p = filled(t, 0.0, OP)?;
        with_simd!(isa, s => {
            for (bh, out_head) in heads.zip(part.chunks_exact_mut(head_len)) {
                let (b, h) = (bh / hq, bh % hq);
                let kvh = b * hkv + h / group;
                let k_head = &k[kvh * t * d..(kvh + 1) * t * d];
                let v_head = &v[kvh * t * dv..(kvh + 1) * t * dv];
                for i in 0..sq {
                    let row = (b * hq + h) * sq + i;
                    let (lo, hi) = dm.keys(causal, i);
                    let qi = &q[row * d..(row + 1) * d];
                    let oi = &mut out_head[i * dv..(i + 1) * dv];
                    let (kw, vw) = (&k_head[lo * d..], &v_head[lo * dv..]);
                    attend_row(s, qi, kw, vw, scale, &mut p[..hi - lo], oi);
                }
            }
        });
        Ok(())
    })?;
    Ok(vec![Owned::float(dm.out_shape(), out)])
}

/// One query row over the first `p.len()` keys: `out = softmax(scale * K q) . V`. `out` is
/// zeroed on entry; `p` is scratch.
#[inline(always)]
fn attend_row<S: Simd>(
    s: S,
    qi: &[f32],
    k_head: &[f32],
    v_head: &[f32],
    scale: f32,
    p: &mut [f32],
    out: &mut [f32],
) {
    let (d, dv) = (qi.len(), out.len());
    if p.is_empty() || d == 0 || dv == 0 {
        return;
    }
    // Four keys at a time (the same arithmetic per key as one at a time).
    let mut keys = k_head.chunks_exact(d);
    let mut quads = p.chunks_exact_mut(4);
    for pq in &mut quads {
        let (Some(k0), Some(k1), Some(k2), Some(k3)) =
            (keys.next(), keys.next(), keys.next(), keys.next())
        else {
            return;
        };
        for (pj, dj) in pq.iter_mut().zip(math::dot4(s, qi, [k0, k1, k2, k3])) {
            *pj = dj * scale;
        }
    }
    for (pj, kj) in quads.into_remainder().iter_mut().zip(keys) {
        *pj = math::dot(s, qi, kj) * scale;
    }
    let m = math::max(s, p);
    let sum = math::exp_sum_in_place(s, p, m);
    math::scale_in_place(s, p, 1.0 / sum);
    math::weighted_rows(s, p, v_head, out);
}
