//! matmul, linear and matmul_swiglu: shape checks, the fused epilogues and the backward composition, over the
//! device's matmul hook (tiled WGSL on wgpu, cuBLAS on CUDA).

use kernels_core::op::{Activation, Direction, Op};
use kernels_core::{DType, Error, Result, Tensor};

use super::common::arg;
use super::elementwise::{glu, sum_rows};
use crate::device::{Device, Family, Fused, Grid, Matmul, act_code, u32_of};
use crate::params::SumRowsParams;
use crate::shapes;

pub(crate) fn matmul(
    be: &dyn Device,
    name: &'static str,
    a: &Tensor,
    b: &Tensor,
    trans_a: bool,
    trans_b: bool,
) -> Result<Tensor> {
    matmul_into(be, name, (a, trans_a), (b, trans_b), None)
}

/// The output of a product of `shape`: a fresh tensor, or `acc` when the product is added into
/// it (`matmul_add` on its donated residual), which must have that shape.
pub(crate) fn product_out(
    be: &dyn Device,
    name: &'static str,
    shape: &[usize],
    acc: Option<&Tensor>,
) -> Result<Tensor> {
    match acc {
        Some(t) if t.shape() == shape && t.dtype() == DType::F32 => Ok(t.clone()),
        Some(t) => Err(Error::mismatch(name, shape, t.shape())),
        None => be.alloc(name, shape, DType::F32),
    }
}

/// `op(a) @ op(b)` into a fresh tensor, or added into `acc`.
pub(crate) fn matmul_into(
    be: &dyn Device,
    name: &'static str,
    (a, trans_a): (&Tensor, bool),
    (b, trans_b): (&Tensor, bool),
    acc: Option<&Tensor>,
) -> Result<Tensor> {
    let d = shapes::matmul(name, a.shape(), b.shape(), trans_a, trans_b)?;
    let out = product_out(be, name, &d.out_shape, acc)?;
    be.matmul(
        name,
        &Matmul {
            a: (a, 0, trans_a),
            b: (b, 0, trans_b),
            out: &out,
            mnk: (d.m, d.n, d.k),
            steps_batch: (d.a_step, d.b_step, d.batch),
            fused: Fused {
                accumulate: acc.is_some(),
                ..Fused::default()
            },
            a_range: None,
            b_range: None,
            out_at: None,
        },
    )?;
    Ok(out)
}

/// `linear` forward: one matmul `x [rows, in] @ weight^T` with the bias and activation in its
/// epilogue.
pub(crate) fn linear_forward(
    be: &dyn Device,
    name: &'static str,
    activation: Activation,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (x, w, b) = (arg(args, 0), arg(args, 1), arg(args, 2));
    let (rows, in_f, out_f) = kernels_core::cpu::linear::check(x.shape(), w.shape(), b.shape())?;
    let out = be.alloc(
        name,
        &kernels_core::cpu::linear::out_shape(x.shape(), out_f),
        DType::F32,
    )?;
    be.matmul(
        name,
        &Matmul {
            a: (x, 0, false),
            b: (w, 0, true),
            out: &out,
            mnk: (rows, out_f, in_f),
            steps_batch: (0, 0, 1),
            fused: Fused {
                bias: Some(b),
                act: Some(activation),
                a_dact: None,
                accumulate: false,
            },
            a_range: None,
            b_range: None,
            out_at: None,
        },
    )?;
    Ok(out)
}

/// `linear` backward in three dispatches, `g' = g * act'(out)` applied while loading and never
/// stored: `grad_x = g' @ weight`, `grad_weight = g'^T @ x`, `grad_bias` = column sums of `g'`.
pub(crate) fn linear_backward(
    be: &dyn Device,
    name: &'static str,
    activation: Activation,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (x, w, b) = (arg(args, 0), arg(args, 1), arg(args, 2));
    let (y, g) = (arg(args, 3), arg(args, 4));
    let (rows, in_f, out_f) = kernels_core::cpu::linear::check(x.shape(), w.shape(), b.shape())?;
    let want = kernels_core::cpu::linear::out_shape(x.shape(), out_f);
    shapes::same(name, y.shape(), &want)?;
    shapes::same(name, g.shape(), &want)?;
    let a_dact = match activation {
        Activation::None => None,
        Activation::Relu | Activation::Tanh | Activation::Sigmoid => Some((y, activation)),
    };
    // g' = g * act'(y): fused into each product's loads where the device can, else made once.
    let pre = match a_dact {
        Some((y, act)) => be.activation_grad(name, g, y, act)?,
        None => None,
    };
    let (g, a_dact) = match &pre {
        Some(scaled) => (scaled, None),
        None => (g, a_dact),
    };
    let fused = Fused {
        bias: None,
        act: None,
        a_dact,
        accumulate: false,
    };
    let gx = be.alloc(name, x.shape(), DType::F32)?;
    be.matmul(
        name,
        &Matmul {
            a: (g, 0, false),
            b: (w, 0, false),
            out: &gx,
            mnk: (rows, in_f, out_f),
            steps_batch: (0, 0, 1),
            fused,
            a_range: None,
            b_range: None,
            out_at: None,
        },
    )?;
    let gw = be.alloc(name, w.shape(), DType::F32)?;
    be.matmul(
        name,
        &Matmul {
            a: (g, 0, true),
            b: (x, 0, false),
            out: &gw,
            mnk: (out_f, in_f, rows),
            steps_batch: (0, 0, 1),
            fused,
            a_range: None,
            b_range: None,
            out_at: None,
        },
    )?;
    let gb = be.alloc(name, b.shape(), DType::F32)?;
    let p = SumRowsParams {
        n: u32_of(name, "elements", g.numel())?,
        cols: u32_of(name, "elements", out_f)?,
    };
    be.run_kernel(
        name,
        Family::Elementwise,
        "sum_rows",
        &[("DACT", a_dact.map_or(0, |(_, d)| act_code(d)))],
        p,
        &[g, y],
        &[&gb],
        Grid::Elems(out_f),
    )?;
    Ok(vec![gx, gw, gb])
}

/// The gradient of a matmul operand: `mm(x, y, tx, ty)`, summed over the batch when the operand
/// was a shared 2-D matrix.
#[allow(clippy::too_many_arguments)]
pub(crate) fn grad_operand(
    be: &dyn Device,
    name: &'static str,
    x: &Tensor,
    y: &Tensor,
    tx: bool,
    ty: bool,
    target: &[usize],
) -> Result<Tensor> {
    let full = matmul(be, name, x, y, tx, ty)?;
    if full.shape() == target {
        return Ok(full);
    }
    sum_rows(be, name, &full, target)
}

pub(crate) fn matmul_backward(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
    ta: bool,
    tb: bool,
) -> Result<Vec<Tensor>> {
    let (a, b, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    let d = shapes::matmul(name, a.shape(), b.shape(), ta, tb)?;
    shapes::same(name, g.shape(), &d.out_shape)?;
    // Gradients of C = op(A) op(B) expressed as matmuls with transpose flags, so no transposed
    // copy is ever materialized.
    let (ga, gb) = match (ta, tb) {
        (false, false) => (
            grad_operand(be, name, g, b, false, true, a.shape())?,
            grad_operand(be, name, a, g, true, false, b.shape())?,
        ),
        (true, false) => (
            grad_operand(be, name, b, g, false, true, a.shape())?,
            grad_operand(be, name, a, g, false, false, b.shape())?,
        ),
        (false, true) => (
            grad_operand(be, name, g, b, false, false, a.shape())?,
            grad_operand(be, name, g, a, true, false, b.shape())?,
        ),
        (true, true) => (
            grad_operand(be, name, b, g, true, true, a.shape())?,
            grad_operand(be, name, g, a, true, true, b.shape())?,
        ),
    };
    Ok(vec![ga, gb])
}

/// `matmul_swiglu` in either direction.
pub(crate) fn swiglu(
    be: &dyn Device,
    name: &'static str,
    dir: Direction,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    match dir {
        Direction::Forward => Ok(vec![swiglu_forward(be, name, args)?]),
        Direction::Backward => swiglu_backward(be, name, args),
    }
}

/// `matmul_swiglu` forward: decode's rows as one gated `matvec` launch where the device takes
/// it ([`super::quant::matvec`]), else the product `y = x @ weight^T` (any of the products'
/// paths) and the gate over its halves: two launches. A `y` larger than one binding is made as
/// its two halves ([`super::split::gate_up_halves`]) and gated by `swiglu`. (The backward binds
/// `y` whole.)
fn swiglu_forward(be: &dyn Device, name: &'static str, args: &[&Tensor]) -> Result<Tensor> {
    let (x, w) = (arg(args, 0), arg(args, 1));
    let (rows, in_f, half) = kernels_core::cpu::matmul_swiglu::check(x.shape(), w.shape())?;
    if let Some(out) = super::quant::matvec(be, name, &Op::MatmulSwiglu, args, None)? {
        return Ok(out);
    }
    let x2 = x.reshape(&[rows, in_f])?;
    let shape = kernels_core::cpu::matmul_swiglu::out_shape(x.shape(), half);
    if rows.saturating_mul(2 * half) > be.chunk_elems() {
        // The product is larger than one binding: its halves apart, then swiglu (which binds
        // its tensors in chunks).
        let [gate, up] = super::split::gate_up_halves(be, name, &x2, w, half)?;
        let out = super::elementwise::swiglu(be, name, &[&gate, &up], false)?;
        let Some(out) = out.into_iter().next() else {
            return Err(kernels_core::Error::Arity {
                op: name,
                expected: 1,
                got: 0,
            });
        };
        return out.reshape(&shape);
    }
    let y = super::product(be, name, (&x2, false), (w, true), None)?;
    glu(be, name, &y, half, None)?.reshape(&shape)
}

/// `matmul_swiglu` backward: `y` made again, `dy` (swiglu's rules over its halves), then
/// `grad_x = dy @ weight` and `grad_weight = dy^T @ x`.
fn swiglu_backward(be: &dyn Device, name: &'static str, args: &[&Tensor]) -> Result<Vec<Tensor>> {
    let (x, w, out, g) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let (rows, in_f, half) = kernels_core::cpu::matmul_swiglu::check(x.shape(), w.shape())?;
    let want = kernels_core::cpu::matmul_swiglu::out_shape(x.shape(), half);
    shapes::same(name, out.shape(), &want)?;
    shapes::same(name, g.shape(), &want)?;
    let x2 = x.reshape(&[rows, in_f])?;
    let y = super::product(be, name, (&x2, false), (w, true), None)?;
    let dy = glu(be, name, &y, half, Some(&g.reshape(&[rows, half])?))?;
    let wd = super::quant::dequantize(be, name, w)?;
    let gx = matmul(be, name, &dy, &wd, false, false)?;
    let gw = matmul(be, name, &dy, &x2, true, false)?;
    Ok(vec![gx.reshape(x.shape())?, gw])
}
