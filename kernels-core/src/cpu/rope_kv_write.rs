//! `rope_kv_write`: the step between the attention block's one fused q/k/v product and
//! attention. `qkv [b, hq + 2 hkv, s, d]` holds the heads of q, then of k, then of v; q and k are
//! rotated as [`super::rope`] rotates them (positions `pos..pos + s`), the rotated k and the v
//! are written into the caches `[b, hkv, cap, d]` as [`super::layout`]'s `kv_write` writes them,
//! and the outputs are `[k_out, v_out, q]`.
//!
//! The reference is that composition, spelled out: split the heads, rotate, copy each cache and
//! overwrite its rows. [`write_into`] is the same with the caches written in place (a backend's
//! donated caches).

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, non_empty, same_shape};
use super::rope::{Freqs, rotate};
use crate::error::{Error, Result};
use crate::numerics::Real;

const OP: &str = "rope_kv_write";

/// The geometry of one `rope_kv_write`: caches `[batch, kv_heads, cap, d]`, `qkv [batch,
/// q_heads + 2 kv_heads, s, d]`, rows written at `pos..pos + s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QkvDims {
    pub batch: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub s: usize,
    pub d: usize,
    pub cap: usize,
    pub pos: usize,
}

impl QkvDims {
    /// Checks the shapes, the position and the rotation's attributes (errors name
    /// `rope_kv_write`, the tensor and the values).
    pub fn new(
        freqs: &Freqs,
        pos: usize,
        k_cache: &[usize],
        v_cache: &[usize],
        qkv: &[usize],
    ) -> Result<QkvDims> {
        freqs.check()?;
        let &[batch, kv_heads, cap, d] = k_cache else {
            return Err(Error::bad_shape(
                OP,
                "k_cache",
                k_cache,
                "needs rank 4 [batch, kv_heads, cap, head_dim]",
            ));
        };
        same_shape(OP, k_cache, v_cache)?;
        let &[qb, heads, s, qd] = qkv else {
            return Err(Error::bad_shape(
                OP,
                "qkv",
                qkv,
                "needs rank 4 [batch, q_heads + 2 kv_heads, seq, head_dim]",
            ));
        };
        non_empty(OP, "k_cache", k_cache)?;
        non_empty(OP, "qkv", qkv)?;
        if qb != batch || qd != d || heads <= 2 * kv_heads {
            return Err(Error::bad_shape(
                OP,
                "qkv",
                qkv,
                format!(
                    "needs [{batch}, q_heads + 2 * {kv_heads} with q_heads >= 1, seq, {d}] for \
                     caches {k_cache:?}"
                ),
            ));
        }
        if d % 2 != 0 {
            return Err(Error::bad_shape(OP, "qkv", qkv, "head_dim must be even"));
        }
        // As rope: positions must be exact in f64.
        if pos
            .checked_add(s)
            .is_none_or(|end| end > cap || end as u64 > 1u64 << 53)
        {
            return Err(Error::BadAttr {
                op: OP,
                attr: "pos",
                value: format!("{pos}"),
                why: format!("pos + {s} new rows exceeds the cache's {cap} positions"),
            });
        }
        Ok(QkvDims {
            batch,
            q_heads: heads - 2 * kv_heads,
            kv_heads,
            s,
            d,
            cap,
            pos,
        })
    }

    /// Shape of the rotated q output.
    pub fn q_shape(&self) -> [usize; 4] {
        [self.batch, self.q_heads, self.s, self.d]
    }

    /// Shape of one cache.
    pub fn cache_shape(&self) -> [usize; 4] {
        [self.batch, self.kv_heads, self.cap, self.d]
    }

    /// Elements of one head's rows in `qkv`.
    fn head_len(&self) -> usize {
        self.s * self.d
    }

    /// The heads `first..first + n` of every batch entry of `qkv`, as `[batch, n, s, d]`.
    fn heads<T: Copy>(&self, qkv: &[T], first: usize, n: usize) -> Vec<T> {
        let per_batch = (self.q_heads + 2 * self.kv_heads) * self.head_len();
        let mut out = Vec::with_capacity(self.batch * n * self.head_len());
        for b in qkv.chunks_exact(per_batch) {
            out.extend_from_slice(&b[first * self.head_len()..(first + n) * self.head_len()]);
        }
        out
    }

    /// Writes `rows [batch, kv_heads, s, d]` into `cache` at `pos..`.
    fn write_rows<T: Copy>(&self, cache: &mut [T], rows: &[T]) {
        let (row_len, head_len) = (self.head_len(), self.cap * self.d);
        let at = self.pos * self.d;
        for (dst, src) in cache
            .chunks_exact_mut(head_len)
            .zip(rows.chunks_exact(row_len))
        {
            dst[at..at + row_len].copy_from_slice(src);
        }
    }
}

/// Rotates q and k of `qkv`, writes k and v into `k_cache` and `v_cache` (each `batch * kv_heads
/// * cap * d` elements) in place, and returns the rotated q.
pub fn write_into<T: Real>(
    dims: &QkvDims,
    freqs: &Freqs,
    interleaved: bool,
    k_cache: &mut [T],
    v_cache: &mut [T],
    qkv: &[T],
) -> Result<Vec<T>> {
    let (hq, hkv, pos) = (dims.q_heads, dims.kv_heads, dims.pos);
    let rows_shape = |h: usize| [dims.batch, h, dims.s, dims.d];
    let q = rotate(
        freqs,
        pos,
        interleaved,
        false,
        &rows_shape(hq),
        &dims.heads(qkv, 0, hq),
    )?;
    let k = rotate(
        freqs,
        pos,
        interleaved,
        false,
        &rows_shape(hkv),
        &dims.heads(qkv, hq, hkv),
    )?;
    dims.write_rows(k_cache, &k);
    dims.write_rows(v_cache, &dims.heads(qkv, hq + hkv, hkv));
    Ok(q)
}

/// Forward. Args: `k_cache, v_cache, qkv`. Returns `[k_out, v_out, q]`: copies of the caches
/// with the rows written, and the rotated q.
pub fn forward<T: Real>(
    freqs: &Freqs,
    pos: usize,
    interleaved: bool,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (sk, k_cache) = float_arg(OP, args, 0, "k_cache")?;
    let (sv, v_cache) = float_arg(OP, args, 1, "v_cache")?;
    let (sq, qkv) = float_arg(OP, args, 2, "qkv")?;
    let dims = QkvDims::new(freqs, pos, sk, sv, sq)?;
    let (mut k_out, mut v_out) = (k_cache.to_vec(), v_cache.to_vec());
    let q = write_into(&dims, freqs, interleaved, &mut k_out, &mut v_out, qkv)?;
    Ok(vec![
        Owned::float(sk.to_vec(), k_out),
        Owned::float(sv.to_vec(), v_out),
        Owned::float(dims.q_shape().to_vec(), q),
    ])
}

/// Backward. Args: `k_cache, v_cache, qkv, k_out, v_out, q, grad_k_out, grad_v_out, grad_q`.
/// Returns `[grad_k_cache, grad_v_cache, grad_qkv]`: each cache's gradient is its output's with
/// the written rows zeroed; those rows (k's rotated back) and grad_q rotated back are the
/// heads of grad_qkv.
pub fn backward<T: Real>(
    freqs: &Freqs,
    pos: usize,
    interleaved: bool,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (sk, _) = float_arg(OP, args, 0, "k_cache")?;
    let (sv, _) = float_arg(OP, args, 1, "v_cache")?;
    let (sq, _) = float_arg(OP, args, 2, "qkv")?;
    let dims = QkvDims::new(freqs, pos, sk, sv, sq)?;
    for (i, (name, want)) in [
        ("k_out", dims.cache_shape()),
        ("v_out", dims.cache_shape()),
        ("q", dims.q_shape()),
        ("grad_k_out", dims.cache_shape()),
        ("grad_v_out", dims.cache_shape()),
        ("grad_q", dims.q_shape()),
    ]
    .into_iter()
    .enumerate()
    {
        let (shape, _) = float_arg(OP, args, 3 + i, name)?;
        same_shape(OP, shape, &want)?;
    }
    let (_, gk) = float_arg(OP, args, 6, "grad_k_out")?;
    let (_, gv) = float_arg(OP, args, 7, "grad_v_out")?;
    let (_, gq) = float_arg(OP, args, 8, "grad_q")?;
    // Each cache's gradient without the written rows, and those rows.
    let (lo, hi) = (dims.pos * dims.d, (dims.pos + dims.s) * dims.d);
    let split = |g: &[T]| {
        let mut cache = g.to_vec();
        let mut rows = Vec::with_capacity(dims.batch * dims.kv_heads * dims.head_len());
        for head in cache.chunks_exact_mut(dims.cap * dims.d) {
            rows.extend_from_slice(&head[lo..hi]);
            head[lo..hi].fill(T::ZERO);
        }
        (cache, rows)
    };
    let (gk_cache, gk_rows) = split(gk);
    let (gv_cache, gv_rows) = split(gv);
    let back = |rows: &[T], heads: usize| {
        let shape = [dims.batch, heads, dims.s, dims.d];
        rotate(freqs, pos, interleaved, true, &shape, rows)
    };
    let gq = back(gq, dims.q_heads)?;
    let gk = back(&gk_rows, dims.kv_heads)?;
    // grad_qkv: per batch entry, q's heads, then k's, then v's.
    let mut gqkv = Vec::with_capacity(sq.iter().product());
    let (q_len, kv_len) = (
        dims.q_heads * dims.head_len(),
        dims.kv_heads * dims.head_len(),
    );
    for b in 0..dims.batch {
        gqkv.extend_from_slice(&gq[b * q_len..(b + 1) * q_len]);
        gqkv.extend_from_slice(&gk[b * kv_len..(b + 1) * kv_len]);
        gqkv.extend_from_slice(&gv_rows[b * kv_len..(b + 1) * kv_len]);
    }
    Ok(vec![
        Owned::float(sk.to_vec(), gk_cache),
        Owned::float(sv.to_vec(), gv_cache),
        Owned::float(sq.to_vec(), gqkv),
    ])
}

#[cfg(test)]
mod tests;
