//! cross_entropy and mse on wgpu (`shaders/loss.wgsl`): per-row (or per-chunk) partial sums,
//! then one workgroup adds them and scales by 1/N; backward elementwise.

use kernels_core::{DType, Error, Result, Tensor};

use super::common::arg;
use crate::device::{Device, Family, Grid, u32_of};
use crate::params::{CrossEntropyParams, MseChunksParams, MseGradParams, SumScaleParams};
use crate::shapes;

/// Elements per workgroup of the mse partial sums.
const MSE_CHUNK: usize = 4096;

/// Checks logits `[..., c]` against targets `[...]` (and, for host-made targets, the class
/// range); returns `(rows, c)`.
fn ce_plan(
    be: &dyn Device,
    name: &'static str,
    logits: &Tensor,
    targets: &Tensor,
) -> Result<(usize, usize)> {
    let (rows, c) = shapes::cross_entropy(name, logits.shape(), targets.shape())?;
    if let Some(host) = be.host_ints(name, targets)? {
        for &k in host.iter() {
            if k < 0 || k as u64 >= c as u64 {
                return Err(Error::IndexOutOfRange {
                    op: name,
                    tensor: "targets".into(),
                    index: k,
                    bound: c,
                });
            }
        }
    }
    Ok((rows, c))
}

/// `out [] = scale * sum(partials)`, one workgroup.
fn sum_scale(be: &dyn Device, name: &'static str, partials: &Tensor, scale: f32) -> Result<Tensor> {
    let out = be.alloc(name, &[], DType::F32)?;
    let p = SumScaleParams {
        n: u32_of(name, "partials", partials.numel())?,
        scale,
    };
    be.run_kernel(
        name,
        Family::Loss,
        "sum_scale",
        &[],
        p,
        &[partials],
        &[&out],
        Grid::Groups(1),
    )?;
    Ok(out)
}

pub(super) fn cross_entropy_forward(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (x, t) = (arg(args, 0), arg(args, 1));
    let (rows, c) = ce_plan(be, name, x, t)?;
    let partial = be.alloc(name, &[rows], DType::F32)?;
    let p = CrossEntropyParams {
        rows: u32_of(name, "rows", rows)?,
        classes: u32_of(name, "classes", c)?,
        scale: 0.0,
    };
    // Targets sit in the fourth read-only slot (declared i32 in the shader).
    be.run_kernel(
        name,
        Family::Loss,
        "ce_rows",
        &[],
        p,
        &[x, x, x, t],
        &[&partial],
        Grid::Groups(rows),
    )?;
    sum_scale(be, name, &partial, (1.0 / rows as f64) as f32)
}

pub(super) fn cross_entropy_backward(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (x, t, out, g) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let (rows, c) = ce_plan(be, name, x, t)?;
    shapes::same(name, out.shape(), &[])?;
    shapes::same(name, g.shape(), &[])?;
    let gx = be.alloc(name, x.shape(), DType::F32)?;
    let p = CrossEntropyParams {
        rows: u32_of(name, "rows", rows)?,
        classes: u32_of(name, "classes", c)?,
        scale: (1.0 / rows as f64) as f32,
    };
    be.run_kernel(
        name,
        Family::Loss,
        "ce_backward",
        &[],
        p,
        &[x, x, g, t],
        &[&gx],
        Grid::Groups(rows),
    )?;
    Ok(gx)
}

fn mse_check(name: &'static str, a: &Tensor, b: &Tensor) -> Result<usize> {
    shapes::non_empty(name, "a", a.shape())?;
    shapes::non_empty(name, "b", b.shape())?;
    shapes::same(name, a.shape(), b.shape())?;
    Ok(a.numel())
}

pub(super) fn mse_forward(be: &dyn Device, name: &'static str, args: &[&Tensor]) -> Result<Tensor> {
    let (a, b) = (arg(args, 0), arg(args, 1));
    let n = mse_check(name, a, b)?;
    let chunks = n.div_ceil(MSE_CHUNK);
    let partial = be.alloc(name, &[chunks], DType::F32)?;
    let p = MseChunksParams {
        n: u32_of(name, "elements", n)?,
        chunk: MSE_CHUNK as u32,
    };
    be.run_kernel(
        name,
        Family::Loss,
        "mse_chunks",
        &[],
        p,
        &[a, b],
        &[&partial],
        Grid::Groups(chunks),
    )?;
    sum_scale(be, name, &partial, (1.0 / n as f64) as f32)
}

pub(super) fn mse_backward(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (a, b, out, g) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let n = mse_check(name, a, b)?;
    shapes::same(name, out.shape(), &[])?;
    shapes::same(name, g.shape(), &[])?;
    let ga = be.alloc(name, a.shape(), DType::F32)?;
    let gb = be.alloc(name, b.shape(), DType::F32)?;
    let p = MseGradParams {
        n: u32_of(name, "elements", n)?,
        scale: (2.0 / n as f64) as f32,
    };
    be.run_kernel(
        name,
        Family::Loss,
        "mse_backward",
        &[],
        p,
        &[a, b, g],
        &[&ga, &gb],
        Grid::Elems(n),
    )?;
    Ok(vec![ga, gb])
}
