//! Data movement (`layout` family): transpose, concat and embedding lookups.

use kernels_core::{DType, Error, Result, Tensor};

use super::common::arg;
use crate::device::{Device, Family, Grid, u32_of};
use crate::params::{ConcatParams, EmbeddingGradParams, EmbeddingParams, TransposeParams};
use crate::shapes;

pub(crate) fn transposed_shape(s: &[usize]) -> Vec<usize> {
    let mut out = s.to_vec();
    let r = out.len();
    if r >= 2 {
        out.swap(r - 1, r - 2);
    }
    out
}

pub(crate) fn transpose(be: &dyn Device, name: &'static str, x: &Tensor) -> Result<Tensor> {
    shapes::min_rank(name, "x", x.shape(), 2)?;
    shapes::non_empty(name, "x", x.shape())?;
    let r = x.rank();
    let (rr, cc) = (x.shape()[r - 2], x.shape()[r - 1]);
    let n = x.numel();
    let out = be.alloc(name, &transposed_shape(x.shape()), DType::F32)?;
    let p = TransposeParams {
        n: u32_of(name, "elements", n)?,
        rows: u32_of(name, "rows", rr)?,
        cols: u32_of(name, "cols", cc)?,
    };
    be.run_kernel(
        name,
        Family::Layout,
        "transpose",
        &[],
        p,
        &[x],
        &[&out],
        Grid::Elems(n),
    )?;
    Ok(out)
}

pub(crate) fn concat(
    be: &dyn Device,
    name: &'static str,
    a: &Tensor,
    b: &Tensor,
) -> Result<Tensor> {
    let (_, m, k, out_shape) = shapes::concat(name, a.shape(), b.shape())?;
    let out = be.alloc(name, &out_shape, DType::F32)?;
    let n = out.numel();
    let p = ConcatParams {
        n: u32_of(name, "elements", n)?,
        width_a: u32_of(name, "width", m)?,
        width_b: u32_of(name, "width", k)?,
    };
    be.run_kernel(
        name,
        Family::Layout,
        "concat",
        &[],
        p,
        &[a, b],
        &[&out],
        Grid::Elems(n),
    )?;
    Ok(out)
}

pub(crate) fn concat_backward(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (a, b, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    let (_, m, k, out_shape) = shapes::concat(name, a.shape(), b.shape())?;
    shapes::same(name, g.shape(), &out_shape)?;
    let ga = be.alloc(name, a.shape(), DType::F32)?;
    let gb = be.alloc(name, b.shape(), DType::F32)?;
    let n = g.numel();
    let p = ConcatParams {
        n: u32_of(name, "elements", n)?,
        width_a: u32_of(name, "width", m)?,
        width_b: u32_of(name, "width", k)?,
    };
    be.run_kernel(
        name,
        Family::Layout,
        "concat_backward",
        &[],
        p,
        &[g],
        &[&ga, &gb],
        Grid::Elems(n),
    )?;
    Ok(vec![ga, gb])
}

/// Checks embedding ids against the vocabulary from the host copy kept at upload (ids made
/// on the device are clamped by the kernel instead: out-of-range rows read as zeros).
pub(crate) fn check_ids(
    be: &dyn Device,
    name: &'static str,
    ids: &Tensor,
    vocab: usize,
) -> Result<()> {
    if let Some(host) = be.host_ints(name, ids)? {
        for &id in host.iter() {
            if id < 0 || id as u64 >= vocab as u64 {
                return Err(Error::IndexOutOfRange {
                    op: name,
                    tensor: "ids".into(),
                    index: id,
                    bound: vocab,
                });
            }
        }
    }
    Ok(())
}

/// `(vocab, dim, out_shape)` of an embedding lookup: `weight [vocab, dim]`, ids not empty.
fn embedding_dims(
    name: &'static str,
    ids: &Tensor,
    w: &Tensor,
) -> Result<(usize, usize, Vec<usize>)> {
    if w.rank() != 2 {
        return Err(Error::bad_shape(
            name,
            "weight",
            w.shape(),
            "expected [vocab, dim]",
        ));
    }
    shapes::non_empty(name, "ids", ids.shape())?;
    let (vocab, d) = (w.shape()[0], w.shape()[1]);
    let mut out_shape = ids.shape().to_vec();
    out_shape.push(d);
    Ok((vocab, d, out_shape))
}

pub(crate) fn embedding(be: &dyn Device, name: &'static str, args: &[&Tensor]) -> Result<Tensor> {
    let (ids, w) = (arg(args, 0), arg(args, 1));
    shapes::non_empty(name, "weight", w.shape())?;
    let (vocab, d, out_shape) = embedding_dims(name, ids, w)?;
    check_ids(be, name, ids, vocab)?;
    let out = be.alloc(name, &out_shape, DType::F32)?;
    let n = out.numel();
    let p = EmbeddingParams {
        n: u32_of(name, "elements", n)?,
        dim: u32_of(name, "dim", d)?,
        vocab: u32_of(name, "vocab", vocab)?,
    };
    // ids go to the fourth read-only slot (declared i32 in the shader).
    be.run_kernel(
        name,
        Family::Layout,
        "embedding",
        &[],
        p,
        &[w, w, w, ids],
        &[&out],
        Grid::Elems(n),
    )?;
    Ok(out)
}

pub(crate) fn embedding_backward(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (ids, w, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    let (vocab, d, out_shape) = embedding_dims(name, ids, w)?;
    shapes::same(name, g.shape(), &out_shape)?;
    check_ids(be, name, ids, vocab)?;
    let gw = be.alloc(name, w.shape(), DType::F32)?;
    let n = gw.numel();
    let p = EmbeddingGradParams {
        n: u32_of(name, "elements", n)?,
        dim: u32_of(name, "dim", d)?,
        tokens: u32_of(name, "tokens", ids.numel())?,
    };
    be.run_kernel(
        name,
        Family::Layout,
        "embedding_backward",
        &[],
        p,
        &[g, g, g, ids],
        &[&gw],
        Grid::Elems(n),
    )?;
    Ok(gw)
}
