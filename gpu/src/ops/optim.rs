//! Optimizer steps (`optim` family): AdamW and SGD, one thread per element.

use kernels_core::{DType, Result, Tensor};

use super::common::arg;
use crate::device::{Device, Family, Grid, Params, u32_of};
use crate::shapes;

/// One step of `entry` over the parameter's elements; `params` makes the step's named block for
/// that many elements.
pub(crate) fn optim(
    be: &dyn Device,
    name: &'static str,
    entry: &'static str,
    params: &dyn Fn(u32) -> Params,
    args: &[&Tensor],
    outputs: usize,
) -> Result<Vec<Tensor>> {
    let param = arg(args, 0);
    shapes::non_empty(name, "param", param.shape())?;
    for t in &args[1..] {
        shapes::same(name, param.shape(), t.shape())?;
    }
    let n = param.numel();
    let p = params(u32_of(name, "elements", n)?);
    let outs = (0..outputs)
        .map(|_| be.alloc(name, param.shape(), DType::F32))
        .collect::<Result<Vec<_>>>()?;
    let out_refs: Vec<&Tensor> = outs.iter().collect();
    be.run_kernel(
        name,
        Family::Optim,
        entry,
        &[],
        p,
        args,
        &out_refs,
        Grid::Elems(n),
    )?;
    Ok(outs)
}
