//! Weight dtypes on a device: `dequantize` (the packed tensor decoded to f32 by the quant
//! family's kernel), the embedding lookup of a packed table (only the picked rows decoded),
//! and [`decoded`], which every other op that takes a weight runs on: the packed operands
//! decoded into f32 temporaries for the op's f32 kernels, as the CPU reference does. The
//! weights themselves stay packed on the device.

use kernels_core::{DType, Result, Tensor};

use super::common::arg;
use super::layout::{check_ids, embedding_dims};
use crate::device::{Device, Family, Grid, u32_of, weight_code};
use crate::params::DequantizeParams;
use crate::shapes;

/// `x` decoded to f32 (an f32 `x` is returned as it is: a view of the same buffer).
pub(crate) fn dequantize(be: &dyn Device, name: &'static str, x: &Tensor) -> Result<Tensor> {
    if !x.dtype().is_weight() {
        return Ok(x.clone());
    }
    let out = be.alloc(name, x.shape(), DType::F32)?;
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    let p = DequantizeParams {
        n: u32_of(name, "elements", n)?,
        dtype: weight_code(x.dtype()),
        dim: 0,
        vocab: 0,
    };
    // The packed tensor goes to the third read-only slot (declared u32 in the shader).
    be.run_kernel(
        name,
        Family::Quant,
        "dequantize",
        &[],
        p,
        &[x, x, x, x],
        &[&out],
        Grid::Elems(n),
    )?;
    Ok(out)
}

/// `embedding(ids, weight)` with a packed `weight`: only the rows the ids pick are decoded.
pub(crate) fn embedding(be: &dyn Device, name: &'static str, args: &[&Tensor]) -> Result<Tensor> {
    let (ids, w) = (arg(args, 0), arg(args, 1));
    shapes::non_empty(name, "weight", w.shape())?;
    let (vocab, d, out_shape) = embedding_dims(name, ids, w)?;
    check_ids(be, name, ids, vocab)?;
    let out = be.alloc(name, &out_shape, DType::F32)?;
    let n = out.numel();
    let p = DequantizeParams {
        n: u32_of(name, "elements", n)?,
        dtype: weight_code(w.dtype()),
        dim: u32_of(name, "dim", d)?,
        vocab: u32_of(name, "vocab", vocab)?,
    };
    be.run_kernel(
        name,
        Family::Quant,
        "dequantize_rows",
        &[],
        p,
        &[w, w, w, ids],
        &[&out],
        Grid::Elems(n),
    )?;
    Ok(out)
}

/// `args` with every packed tensor decoded to an f32 temporary.
pub(crate) fn decoded(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    args.iter().map(|t| dequantize(be, name, t)).collect()
}
