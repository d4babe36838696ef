//! Data movement: transpose of the last two dims, concatenation on the last dim and `kv_write`
//! (rows written into a KV cache), forward and backward. Pure copies, so every backend must match
//! these bit for bit.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, min_rank, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::Op;

/// `[..., m, n]` with its batch count and the two swapped dims; needs rank >= 2 and no zero dim.
pub(crate) fn matrices(
    name: &'static str,
    tensor: &str,
    s: &[usize],
) -> Result<(usize, usize, usize)> {
    min_rank(name, tensor, s, 2)?;
    non_empty(name, tensor, s)?;
    match s {
        [lead @ .., m, n] => Ok((lead.iter().product(), *m, *n)),
        _ => Err(Error::bad_shape(name, tensor, s, "needs rank >= 2")),
    }
}

/// x `[..., m, n]` -> `[..., n, m]`.
fn transpose<T: Real>(x: &[T], m: usize, n: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(x.len());
    for mat in x.chunks_exact(m * n) {
        for j in 0..n {
            out.extend(mat.iter().skip(j).step_by(n));
        }
    }
    out
}

/// `s` with its last two dims swapped (as it is when rank < 2).
pub(crate) fn swapped(s: &[usize]) -> Vec<usize> {
    let mut t = s.to_vec();
    let r = t.len();
    if r >= 2 {
        t.swap(r - 2, r - 1);
    }
    t
}

/// `out[..., j, i] = x[..., i, j]`; x `[..., m, n]`, out `[..., n, m]`.
pub fn transpose_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Transpose.name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (_, m, n) = matrices(name, "x", sx)?;
    Ok(vec![Owned::float(swapped(sx), transpose(x, m, n))])
}

/// `grad_x` is `grad_out` `[..., n, m]` transposed back; args `(x, out, grad_out)`.
pub fn transpose_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Transpose.name();
    let (sx, _) = float_arg(name, args, 0, "x")?;
    let (so, _) = float_arg(name, args, 1, "out")?;
    let (sg, g) = float_arg(name, args, 2, "grad_out")?;
    let (_, m, n) = matrices(name, "x", sx)?;
    let st = swapped(sx);
    same_shape(name, so, &st)?;
    same_shape(name, sg, &st)?;
    Ok(vec![Owned::float(sx.to_vec(), transpose(g, n, m))])
}

/// Checks a `[..., p]` and b `[..., q]` (same rank >= 1, equal leading dims, non-empty) and
/// returns `(p, q)`.
fn concat_dims(name: &'static str, sa: &[usize], sb: &[usize]) -> Result<(usize, usize)> {
    min_rank(name, "a", sa, 1)?;
    min_rank(name, "b", sb, 1)?;
    non_empty(name, "a", sa)?;
    non_empty(name, "b", sb)?;
    match (sa.split_last(), sb.split_last()) {
        (Some((&p, la)), Some((&q, lb))) if la == lb => Ok((p, q)),
        _ => Err(Error::mismatch(name, sa, sb)),
    }
}

/// `out = cat([a, b], -1)`; a `[..., p]`, b `[..., q]`, out `[..., p + q]`.
pub fn concat_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Concat.name();
    let (sa, a) = float_arg(name, args, 0, "a")?;
    let (sb, b) = float_arg(name, args, 1, "b")?;
    let (p, q) = concat_dims(name, sa, sb)?;
    let mut out = Vec::with_capacity(a.len() + b.len());
    for (ra, rb) in a.chunks_exact(p).zip(b.chunks_exact(q)) {
        out.extend_from_slice(ra);
        out.extend_from_slice(rb);
    }
    let mut shape = sa.to_vec();
    if let Some(last) = shape.last_mut() {
        *last = p + q;
    }
    Ok(vec![Owned::float(shape, out)])
}

/// `[grad_a, grad_b]`: `grad_out` `[..., p + q]` split back; args `(a, b, out, grad_out)`.
pub fn concat_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Concat.name();
    let (sa, a) = float_arg(name, args, 0, "a")?;
    let (sb, b) = float_arg(name, args, 1, "b")?;
    let (so, _) = float_arg(name, args, 2, "out")?;
    let (sg, g) = float_arg(name, args, 3, "grad_out")?;
    let (p, q) = concat_dims(name, sa, sb)?;
    let mut shape = sa.to_vec();
    if let Some(last) = shape.last_mut() {
        *last = p + q;
    }
    same_shape(name, so, &shape)?;
    same_shape(name, sg, &shape)?;
    let mut ga = Vec::with_capacity(a.len());
    let mut gb = Vec::with_capacity(b.len());
    for row in g.chunks_exact(p + q) {
        let (x, y) = row.split_at(p);
        ga.extend_from_slice(x);
        gb.extend_from_slice(y);
    }
    Ok(vec![
        Owned::float(sa.to_vec(), ga),
        Owned::float(sb.to_vec(), gb),
    ])
}

/// `kv_write`'s geometry: cache `[.., cap, d]` and rows `[.., s, d]` of equal leading dims
/// (rank >= 2, non-empty), `pos + s <= cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvDims {
    /// Product of the leading dims (batch times heads for a KV cache).
    pub heads: usize,
    pub cap: usize,
    pub s: usize,
    pub d: usize,
    pub pos: usize,
}

impl KvDims {
    /// Checks the shapes and the position (errors name `kv_write`, the tensor and the values).
    pub fn new(pos: usize, cache: &[usize], rows: &[usize]) -> Result<KvDims> {
        let name = "kv_write";
        let (heads, cap, d) = matrices(name, "cache", cache)?;
        let (_, s, rd) = matrices(name, "rows", rows)?;
        if rows.len() != cache.len()
            || rows[..rows.len() - 2] != cache[..cache.len() - 2]
            || rd != d
        {
            return Err(Error::mismatch(name, cache, rows));
        }
        if pos.checked_add(s).is_none_or(|end| end > cap) {
            return Err(Error::BadAttr {
                op: name,
                attr: "pos",
                value: format!("{pos}"),
                why: format!("pos + {s} new rows exceeds the cache's {cap} positions"),
            });
        }
        Ok(KvDims {
            heads,
            cap,
            s,
            d,
            pos,
        })
    }
}

/// Overwrites positions `pos..pos + s` of every head of `cache` with `rows`, in place: the whole
/// of `kv_write` once the cache is the output's storage. `cache` holds `heads * cap * d` and
/// `rows` `heads * s * d` elements.
pub fn kv_write_into<T: Copy>(k: &KvDims, cache: &mut [T], rows: &[T]) {
    let (row_len, head_len) = (k.s * k.d, k.cap * k.d);
    for (dst, src) in cache
        .chunks_exact_mut(head_len)
        .zip(rows.chunks_exact(row_len))
    {
        dst[k.pos * k.d..k.pos * k.d + row_len].copy_from_slice(src);
    }
}

/// `out = cache` with `out[.., pos..pos + s, :] = rows`: a copy of the cache, then the rows
/// overwritten (the specification; backends may write into a donated cache instead).
pub fn kv_write_forward<T: Real>(pos: usize, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = "kv_write";
    let (sc, cache) = float_arg(name, args, 0, "cache")?;
    let (sr, rows) = float_arg(name, args, 1, "rows")?;
    let k = KvDims::new(pos, sc, sr)?;
    let mut out = cache.to_vec();
    kv_write_into(&k, &mut out, rows);
    Ok(vec![Owned::float(sc.to_vec(), out)])
}

/// `[grad_cache, grad_rows]`: `grad_out` with the written rows zeroed, and those rows; args
/// `(cache, rows, out, grad_out)`.
pub fn kv_write_backward<T: Real>(pos: usize, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = "kv_write";
    let (sc, _) = float_arg(name, args, 0, "cache")?;
    let (sr, _) = float_arg(name, args, 1, "rows")?;
    let (so, _) = float_arg(name, args, 2, "out")?;
    let (sg, g) = float_arg(name, args, 3, "grad_out")?;
    let k = KvDims::new(pos, sc, sr)?;
    same_shape(name, so, sc)?;
    same_shape(name, sg, sc)?;
    let (lo, hi) = (k.pos * k.d, (k.pos + k.s) * k.d);
    let mut gc = g.to_vec();
    let mut gr = Vec::with_capacity(k.heads * k.s * k.d);
    for head in gc.chunks_exact_mut(k.cap * k.d) {
        gr.extend_from_slice(&head[lo..hi]);
        head[lo..hi].fill(T::ZERO);
    }
    Ok(vec![
        Owned::float(sc.to_vec(), gc),
        Owned::float(sr.to_vec(), gr),
    ])
}

#[cfg(test)]
mod tests;

/// `dequantize` of an f32 tensor: the elements unchanged. (The CPU backend decodes a weight
/// dtype before it reaches the kernels, as for every op that takes a weight: see
/// [`crate::quant`].)
pub fn dequantize_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let (sx, x) = float_arg(Op::Dequantize.name(), args, 0, "x")?;
    Ok(vec![Owned::float(sx.to_vec(), x.to_vec())])
}
