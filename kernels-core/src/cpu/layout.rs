//! Data movement: transpose of the last two dims and concatenation on the last dim, forward and
//! backward. Pure copies, so every backend must match these bit for bit.

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, min_rank, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::Op;

/// `[..., m, n]` with its batch count and the two swapped dims; needs rank >= 2 and no zero dim.
fn matrices(name: &'static str, tensor: &str, s: &[usize]) -> Result<(usize, usize, usize)> {
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

fn swapped(s: &[usize]) -> Vec<usize> {
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

#[cfg(test)]
mod tests;
