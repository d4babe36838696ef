//! Embedding lookup (`F.embedding`) and its backward, a scatter-add into the table's gradient.
//!
//! Every id is checked against the vocabulary before it is used: an id outside `0..vocab` is an
//! [`Error::IndexOutOfRange`] naming `ids`, the id and the bound (PyTorch raises too; a GPU
//! would read garbage). The backward walks the ids in flat order and accumulates in f64, so
//! repeated ids sum deterministically, whatever a device's atomics do.

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, int_arg, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::Op;

/// Checks ids (non-empty, any shape) and weight `[vocab, dim]` (non-empty); returns
/// `(vocab, dim, out shape = ids.shape ++ [dim], ids as row indices)`.
fn lookup_plan(
    name: &'static str,
    sids: &[usize],
    ids: &[i64],
    sw: &[usize],
) -> Result<(usize, Vec<usize>, Vec<usize>)> {
    let (vocab, dim) = match sw {
        [v, d] => (*v, *d),
        _ => {
            return Err(Error::bad_shape(
                name,
                "weight",
                sw,
                "needs rank 2 [vocab, dim]",
            ));
        }
    };
    non_empty(name, "ids", sids)?;
    non_empty(name, "weight", sw)?;
    let rows = ids
        .iter()
        .map(|&id| match usize::try_from(id) {
            Ok(r) if r < vocab => Ok(r),
            _ => Err(Error::IndexOutOfRange {
                op: name,
                tensor: "ids".into(),
                index: id,
                bound: vocab,
            }),
        })
        .collect::<Result<Vec<usize>>>()?;
    let mut shape = sids.to_vec();
    shape.push(dim);
    Ok((dim, shape, rows))
}

/// `out[..., :] = weight[ids[...], :]`; ids any shape (i32 or i64), weight `[vocab, dim]`,
/// out `ids.shape ++ [dim]`.
pub fn forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Embedding.name();
    let (sids, ids) = int_arg(name, args, 0, "ids")?;
    let (sw, w) = float_arg(name, args, 1, "weight")?;
    let (dim, shape, rows) = lookup_plan(name, sids, &ids, sw)?;
    let mut out = Vec::with_capacity(rows.len() * dim);
    for r in rows {
        // In range: r < vocab was checked and w holds vocab * dim elements.
        if let Some(row) = w.get(r * dim..(r + 1) * dim) {
            out.extend_from_slice(row);
        }
    }
    Ok(vec![Owned::float(shape, out)])
}

/// `[grad_weight]` `[vocab, dim]`: row `v` sums `grad_out` over every position whose id is `v`;
/// args `(ids, weight, out, grad_out)`.
pub fn backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Embedding.name();
    let (sids, ids) = int_arg(name, args, 0, "ids")?;
    let (sw, w) = float_arg(name, args, 1, "weight")?;
    let (so, _) = float_arg(name, args, 2, "out")?;
    let (sg, g) = float_arg(name, args, 3, "grad_out")?;
    let (dim, shape, rows) = lookup_plan(name, sids, &ids, sw)?;
    same_shape(name, so, &shape)?;
    same_shape(name, sg, &shape)?;
    let mut grad = vec![0.0f64; w.len()];
    for (r, grow) in rows.into_iter().zip(g.chunks_exact(dim)) {
        if let Some(acc) = grad.get_mut(r * dim..(r + 1) * dim) {
            for (a, &v) in acc.iter_mut().zip(grow) {
                *a += v.to_f64();
            }
        }
    }
    Ok(vec![Owned::float(
        sw.to_vec(),
        grad.into_iter().map(T::from_f64).collect(),
    )])
}

#[cfg(test)]
mod tests;
