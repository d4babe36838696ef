//! Row ops (one workgroup / block per row): reductions, argmax, sampling, softmax, layer and
//! RMS norms.

use kernels_core::op::ReduceOp;
use kernels_core::{DType, Result, Tensor};

use super::common::arg;
use crate::device::{Device, Family, Grid, reduce_code, u32_of};
use crate::params::{NormParams, RowsParams, SampleParams, SoftmaxParams};
use crate::shapes;

pub(crate) fn reduce(
    be: &dyn Device,
    name: &'static str,
    r: ReduceOp,
    args: &[&Tensor],
    backward: bool,
) -> Result<Tensor> {
    let x = arg(args, 0);
    shapes::min_rank(name, "x", x.shape(), 1)?;
    shapes::non_empty(name, "x", x.shape())?;
    let (rows, n) = shapes::rows_last(x.shape());
    let out_shape = &x.shape()[..x.rank() - 1];
    let p = RowsParams {
        rows: u32_of(name, "rows", rows)?,
        cols: u32_of(name, "row length", n)?,
    };
    let consts = [("OP", reduce_code(r))];
    if backward {
        let g = arg(args, 2);
        shapes::same(name, g.shape(), out_shape)?;
        let gx = be.alloc(name, x.shape(), DType::F32)?;
        be.run_kernel(
            name,
            Family::Reduce,
            "reduce_backward",
            &consts,
            p,
            &[x, x, g],
            &[&gx],
            Grid::Groups(rows),
        )?;
        return Ok(gx);
    }
    let out = be.alloc(name, out_shape, DType::F32)?;
    be.run_kernel(
        name,
        Family::Reduce,
        "reduce_forward",
        &consts,
        p,
        &[x],
        &[&out],
        Grid::Groups(rows),
    )?;
    Ok(out)
}

pub(crate) fn argmax(be: &dyn Device, name: &'static str, x: &Tensor) -> Result<Tensor> {
    shapes::min_rank(name, "x", x.shape(), 1)?;
    shapes::non_empty(name, "x", x.shape())?;
    let (rows, n) = shapes::rows_last(x.shape());
    let out = be.alloc(name, &x.shape()[..x.rank() - 1], DType::I32)?;
    let p = RowsParams {
        rows: u32_of(name, "rows", rows)?,
        cols: u32_of(name, "row length", n)?,
    };
    // The i32 output sits in the second read-write slot; the first gets a scratch buffer.
    let scratch = be.alloc(name, &[1], DType::F32)?;
    be.run_kernel(
        name,
        Family::Reduce,
        "argmax",
        &[],
        p,
        &[x],
        &[&scratch, &out],
        Grid::Groups(rows),
    )?;
    Ok(out)
}

/// Next-token sampling, one workgroup per row (see kernels-core's `cpu::sample`). Uniforms
/// uploaded from the host are range-checked as the reference checks them, from the host copy
/// kept at upload; uniforms made on the device are not (that would need a readback).
pub(crate) fn sample(
    be: &dyn Device,
    name: &'static str,
    temperature: f32,
    top_k: usize,
    top_p: f32,
    args: &[&Tensor],
) -> Result<Tensor> {
    kernels_core::cpu::sample::check_attrs(temperature, top_k, top_p)?;
    let (logits, uniform) = (arg(args, 0), arg(args, 1));
    let (rows, n) = kernels_core::cpu::sample::check_shapes(logits.shape(), uniform.shape())?;
    if let Some(host) = be.host_floats(name, uniform)? {
        for (r, &u) in host.iter().enumerate() {
            kernels_core::cpu::sample::check_uniform(r, u, uniform.shape())?;
        }
    }
    let out = be.alloc(name, &[rows], DType::I32)?;
    let p = SampleParams {
        rows: u32_of(name, "rows", rows)?,
        cols: u32_of(name, "row length", n)?,
        top_k: u32_of(name, "top_k", top_k)?,
        temperature,
        top_p,
    };
    let scratch = be.alloc(name, &[1], DType::F32)?;
    be.run_kernel(
        name,
        Family::Reduce,
        "sample",
        &[],
        p,
        &[logits, uniform],
        &[&scratch, &out],
        Grid::Groups(rows),
    )?;
    Ok(out)
}

pub(crate) fn softmax(
    be: &dyn Device,
    name: &'static str,
    log: bool,
    causal: bool,
    args: &[&Tensor],
    backward: bool,
) -> Result<Tensor> {
    let x = arg(args, 0);
    shapes::min_rank(name, "x", x.shape(), 1)?;
    shapes::non_empty(name, "x", x.shape())?;
    let (rows, t) = shapes::rows_last(x.shape());
    let s = if x.rank() >= 2 {
        x.shape()[x.rank() - 2]
    } else {
        1
    };
    let p = SoftmaxParams {
        rows: u32_of(name, "rows", rows)?,
        cols: u32_of(name, "row length", t)?,
        seq: u32_of(name, "rows", s)?,
    };
    let consts = [("LOG", u32::from(log)), ("CAUSAL", u32::from(causal))];
    let out = be.alloc(name, x.shape(), DType::F32)?;
    if backward {
        let (y, g) = (arg(args, 1), arg(args, 2));
        shapes::same(name, x.shape(), y.shape())?;
        shapes::same(name, x.shape(), g.shape())?;
        be.run_kernel(
            name,
            Family::Softmax,
            "softmax_backward",
            &consts,
            p,
            &[x, y, g],
            &[&out],
            Grid::Groups(rows),
        )?;
    } else {
        be.run_kernel(
            name,
            Family::Softmax,
            "softmax_forward",
            &consts,
            p,
            &[x],
            &[&out],
            Grid::Groups(rows),
        )?;
    }
    Ok(out)
}

pub(crate) fn norm_forward(
    be: &dyn Device,
    name: &'static str,
    rms: bool,
    eps: f32,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (x, w) = (arg(args, 0), arg(args, 1));
    let (rows, n) = if rms {
        shapes::norm(name, x.shape(), &[("weight", w.shape())])?
    } else {
        shapes::norm(
            name,
            x.shape(),
            &[("weight", w.shape()), ("bias", arg(args, 2).shape())],
        )?
    };
    let p = NormParams {
        rows: u32_of(name, "rows", rows)?,
        cols: u32_of(name, "row length", n)?,
        eps,
    };
    let out = be.alloc(name, x.shape(), DType::F32)?;
    let ins: Vec<&Tensor> = if rms {
        vec![x, w]
    } else {
        vec![x, w, arg(args, 2)]
    };
    be.run_kernel(
        name,
        Family::Norm,
        "norm_forward",
        &[("RMS", u32::from(rms))],
        p,
        &ins,
        &[&out],
        Grid::Groups(rows),
    )?;
    Ok(out)
}

pub(crate) fn norm_backward(
    be: &dyn Device,
    name: &'static str,
    rms: bool,
    eps: f32,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (x, w) = (arg(args, 0), arg(args, 1));
    let g = if rms { arg(args, 3) } else { arg(args, 4) };
    let (rows, n) = if rms {
        shapes::norm(name, x.shape(), &[("weight", w.shape())])?
    } else {
        shapes::norm(
            name,
            x.shape(),
            &[("weight", w.shape()), ("bias", arg(args, 2).shape())],
        )?
    };
    shapes::same(name, g.shape(), x.shape())?;
    let p = NormParams {
        rows: u32_of(name, "rows", rows)?,
        cols: u32_of(name, "row length", n)?,
        eps,
    };
    let consts = [("RMS", u32::from(rms))];
    let gx = be.alloc(name, x.shape(), DType::F32)?;
    let stats = be.alloc(name, &[rows, 2], DType::F32)?;
    be.run_kernel(
        name,
        Family::Norm,
        "norm_backward_rows",
        &consts,
        p,
        &[x, w, g],
        &[&gx, &stats],
        Grid::Groups(rows),
    )?;
    let gw = be.alloc(name, &[n], DType::F32)?;
    let mut outs = vec![gx];
    if rms {
        be.run_kernel(
            name,
            Family::Norm,
            "norm_backward_cols",
            &consts,
            p,
            &[x, g, &stats],
            &[&gw],
            Grid::Elems(n),
        )?;
        outs.push(gw);
    } else {
        let gb = be.alloc(name, &[n], DType::F32)?;
        be.run_kernel(
            name,
            Family::Norm,
            "norm_backward_cols",
            &consts,
            p,
            &[x, g, &stats],
            &[&gw, &gb],
            Grid::Elems(n),
        )?;
        outs.push(gw);
        outs.push(gb);
    }
    Ok(outs)
}
