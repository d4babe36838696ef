//! Data movement (`layout` family): transpose, concat, kv_write and embedding lookups.

use kernels_core::{DType, Error, Result, Tensor};

use super::common::arg;
use crate::device::{Device, Family, Grid, u32_of, weight_code};
use crate::params::{
    ConcatParams, DequantizeParams, EmbeddingGradParams, EmbeddingParams, KvWriteParams,
    TransposeParams,
};
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

/// kv_write's block for `n` threads (the reference's shape and position checks first).
fn kv_params(
    name: &'static str,
    pos: usize,
    cache: &Tensor,
    rows: &Tensor,
    per_cache: bool,
) -> Result<(KvWriteParams, usize)> {
    let k = kernels_core::cpu::layout::KvDims::new(pos, cache.shape(), rows.shape())?;
    let n = if per_cache {
        cache.numel()
    } else {
        rows.numel()
    };
    let p = KvWriteParams {
        n: u32_of(name, "elements", n)?,
        cap: u32_of(name, "cap", k.cap)?,
        rows: u32_of(name, "rows", k.s)?,
        width: u32_of(name, "width", k.d)?,
        pos: u32_of(name, "pos", k.pos)?,
    };
    Ok((p, n))
}

/// kv_write out of place: a new tensor holding the cache with the rows replaced (one launch over
/// the cache's elements).
pub(crate) fn kv_write(
    be: &dyn Device,
    name: &'static str,
    pos: usize,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (cache, rows) = (arg(args, 0), arg(args, 1));
    let (p, n) = kv_params(name, pos, cache, rows, true)?;
    let out = be.alloc(name, cache.shape(), DType::F32)?;
    be.run_kernel(
        name,
        Family::Layout,
        "kv_write_copy",
        &[],
        p,
        &[cache, rows],
        &[&out],
        Grid::Elems(n),
    )?;
    Ok(out)
}

/// kv_write into `cache` itself (donated and uniquely held: see `ops::run_donated`): one launch
/// over the new rows' elements; the rest of the cache is not touched.
pub(crate) fn kv_write_in_place(
    be: &dyn Device,
    name: &'static str,
    pos: usize,
    cache: &Tensor,
    rows: &Tensor,
) -> Result<()> {
    let (p, n) = kv_params(name, pos, cache, rows, false)?;
    be.run_kernel(
        name,
        Family::Layout,
        "kv_write",
        &[],
        p,
        &[rows],
        &[cache],
        Grid::Elems(n),
    )
}

/// `[grad_cache, grad_rows]`: grad_out with the written rows zeroed, and those rows (one
/// launch over grad_out).
pub(crate) fn kv_write_backward(
    be: &dyn Device,
    name: &'static str,
    pos: usize,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (cache, rows, out, g) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let (p, n) = kv_params(name, pos, cache, rows, true)?;
    shapes::same(name, cache.shape(), out.shape())?;
    shapes::same(name, cache.shape(), g.shape())?;
    let gc = be.alloc(name, cache.shape(), DType::F32)?;
    let gr = be.alloc(name, rows.shape(), DType::F32)?;
    be.run_kernel(
        name,
        Family::Layout,
        "kv_write_backward",
        &[],
        p,
        &[g],
        &[&gc, &gr],
        Grid::Elems(n),
    )?;
    Ok(vec![gc, gr])
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
    let (n32, dim, vocab) = (
        u32_of(name, "elements", n)?,
        u32_of(name, "dim", d)?,
        u32_of(name, "vocab", vocab)?,
    );
    // A table larger than one binding is read in row blocks, one launch each writing the
    // outputs whose ids fall in its block.
    for ((first, rows), range) in super::split::table_blocks(be, name, w)? {
        let (first, rows) = (u32_of(name, "vocab", first)?, u32_of(name, "vocab", rows)?);
        let t = (w, range);
        let i = (ids, None);
        // A packed table (a weight dtype) is decoded by the quant family, only the rows the
        // ids pick: ids in the second read-only slot, the table in the third and fourth (the
        // quant family's layout). The f32 table's kernel takes ids in the fourth slot.
        let (family, entry, p, inputs): (_, _, crate::device::Params, [_; 4]) =
            if w.dtype().is_weight() {
                let p = DequantizeParams {
                    n: n32,
                    dtype: weight_code(w.dtype()),
                    dim,
                    vocab,
                    first,
                    rows,
                };
                (Family::Quant, "dequantize_rows", p.into(), [t, i, t, t])
            } else {
                let p = EmbeddingParams {
                    n: n32,
                    dim,
                    vocab,
                    first,
                    rows,
                };
                (Family::Layout, "embedding", p.into(), [t, t, t, i])
            };
        be.run_ranges(
            name,
            family,
            entry,
            &[],
            p,
            &inputs,
            &[(&out, None)],
            Grid::Elems(n),
        )?;
    }
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
