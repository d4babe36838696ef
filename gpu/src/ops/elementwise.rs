//! Elementwise ops (`elementwise` family): unary ops, scale and gelu, binary ops with suffix
//! broadcasting, and the row sums their backward needs; tensors above one binding are split into
//! chunks.

use kernels_core::op::BinaryOp;
use kernels_core::{DType, Error, Result, Tensor};

use super::common::{arg, elem_chunks};
use crate::device::{Device, ElemRange, Family, Grid, bop_code, u32_of};
use crate::params::{BinaryParams, ElemsParams, GluParams, SumRowsParams, UnaryParams};
use crate::shapes;

/// Unary ops, scale and gelu, forward and backward: one thread per element, chunked over
/// tensors above the storage binding limit.
pub(crate) fn unary(
    be: &dyn Device,
    name: &'static str,
    code: u32,
    factor: f32,
    args: &[&Tensor],
    backward: bool,
) -> Result<Tensor> {
    let x = arg(args, 0);
    shapes::non_empty(name, "x", x.shape())?;
    let n = x.numel();
    u32_of(name, "elements", n)?;
    let consts = [("OP", code)];
    let out = be.alloc(name, x.shape(), DType::F32)?;
    if backward {
        let (y, g) = (arg(args, 1), arg(args, 2));
        shapes::same(name, x.shape(), y.shape())?;
        shapes::same(name, x.shape(), g.shape())?;
    }
    for (start, len) in elem_chunks(be, n) {
        let r = Some((start, len));
        let p = UnaryParams {
            n: u32_of(name, "elements", len)?,
            factor,
        };
        if backward {
            let (y, g) = (arg(args, 1), arg(args, 2));
            be.run_ranges(
                name,
                Family::Elementwise,
                "unary_backward",
                &consts,
                p,
                &[(x, r), (y, r), (g, r)],
                &[(&out, r)],
                Grid::Elems(len),
            )?;
        } else {
            be.run_ranges(
                name,
                Family::Elementwise,
                "unary_forward",
                &consts,
                p,
                &[(x, r)],
                &[(&out, r)],
                Grid::Elems(len),
            )?;
        }
    }
    Ok(out)
}

/// swiglu, `silu(gate) * up`, forward and backward: one thread per element, chunked over
/// tensors above the storage binding limit.
pub(crate) fn swiglu(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
    backward: bool,
) -> Result<Vec<Tensor>> {
    let (gate, up) = (arg(args, 0), arg(args, 1));
    shapes::non_empty(name, "gate", gate.shape())?;
    shapes::same(name, gate.shape(), up.shape())?;
    let grad = if backward {
        let (out, grad) = (arg(args, 2), arg(args, 3));
        shapes::same(name, gate.shape(), out.shape())?;
        shapes::same(name, gate.shape(), grad.shape())?;
        Some(grad)
    } else {
        None
    };
    let outs = (0..if backward { 2 } else { 1 })
        .map(|_| be.alloc(name, gate.shape(), DType::F32))
        .collect::<Result<Vec<_>>>()?;
    for (start, len) in elem_chunks(be, gate.numel()) {
        let r = Some((start, len));
        let p = ElemsParams {
            n: u32_of(name, "elements", len)?,
        };
        let mut ins = vec![(gate, r), (up, r)];
        ins.extend(grad.map(|g| (g, r)));
        let out_binds: Vec<_> = outs.iter().map(|t| (t, r)).collect();
        let entry = if backward {
            "swiglu_backward"
        } else {
            "swiglu_forward"
        };
        let grid = Grid::Elems(len);
        be.run_ranges(
            name,
            Family::Elementwise,
            entry,
            &[],
            p,
            &ins,
            &out_binds,
            grid,
        )?;
    }
    Ok(outs)
}

/// `matmul_swiglu`'s gate over its product `y [rows, 2 half]`: forward `[rows, half]`
/// (`grad` `None`), or backward `dy [rows, 2 half]` from `grad [rows, half]`. One thread per
/// output of the forward; `y` must fit one storage binding (its rows are not split).
pub(crate) fn glu(
    be: &dyn Device,
    name: &'static str,
    y: &Tensor,
    half: usize,
    grad: Option<&Tensor>,
) -> Result<Tensor> {
    let (&[rows, cols], true) = (y.shape(), half > 0) else {
        return Err(Error::bad_shape(
            name,
            "product",
            y.shape(),
            "needs [rows, 2 * half]",
        ));
    };
    if cols != 2 * half {
        return Err(Error::mismatch(name, y.shape(), &[rows, 2 * half]));
    }
    if y.numel() > be.chunk_elems() {
        return Err(Error::LimitExceeded {
            what: format!("{name}: elements of the gate and up product in one storage binding"),
            value: y.numel() as u64,
            limit: be.chunk_elems() as u64,
        });
    }
    let n = rows * half;
    let p = GluParams {
        n: u32_of(name, "elements", n)?,
        half: u32_of(name, "elements", half)?,
    };
    let (entry, out, ins) = match grad {
        Some(g) => {
            shapes::same(name, g.shape(), &[rows, half])?;
            let dy = be.alloc(name, y.shape(), DType::F32)?;
            ("glu_backward", dy, vec![(y, None), (g, None)])
        }
        None => (
            "glu_forward",
            be.alloc(name, &[rows, half], DType::F32)?,
            vec![(y, None)],
        ),
    };
    be.run_ranges(
        name,
        Family::Elementwise,
        entry,
        &[],
        p,
        &ins,
        &[(&out, None)],
        Grid::Elems(n),
    )?;
    Ok(out)
}

/// Binds `b` for the chunk `(start, len)` of `a`: the same chunk when `b` has `a`'s size,
/// else whole (it repeats every `nb`, and the kernel is told where the chunk starts).
pub(crate) fn b_chunk(
    name: &'static str,
    n: usize,
    nb: usize,
    (start, len): (usize, usize),
) -> Result<(ElemRange, BinaryParams)> {
    if nb == n {
        let l = u32_of(name, "elements", len)?;
        let p = BinaryParams {
            n: l,
            nb: l,
            start: 0,
        };
        Ok((Some((start, len)), p))
    } else {
        let p = BinaryParams {
            n: u32_of(name, "elements", len)?,
            nb: u32_of(name, "elements", nb)?,
            start: u32_of(name, "elements", start)?,
        };
        Ok((None, p))
    }
}

pub(crate) fn binary_forward(
    be: &dyn Device,
    name: &'static str,
    b: BinaryOp,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (a, bt) = (arg(args, 0), arg(args, 1));
    let (n, nb) = shapes::broadcast_suffix(name, a.shape(), bt.shape())?;
    let out = be.alloc(name, a.shape(), DType::F32)?;
    for chunk in elem_chunks(be, n) {
        let r = Some(chunk);
        let (rb, p) = b_chunk(name, n, nb, chunk)?;
        be.run_ranges(
            name,
            Family::Elementwise,
            "binary_forward",
            &[("BOP", bop_code(b))],
            p,
            &[(a, r), (bt, rb)],
            &[(&out, r)],
            Grid::Elems(chunk.1),
        )?;
    }
    Ok(out)
}

pub(crate) fn binary_backward(
    be: &dyn Device,
    name: &'static str,
    b: BinaryOp,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (a, bt, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    let (n, nb) = shapes::broadcast_suffix(name, a.shape(), bt.shape())?;
    shapes::same(name, a.shape(), g.shape())?;
    let consts = [("BOP", bop_code(b))];
    let ga = be.alloc(name, a.shape(), DType::F32)?;
    for chunk in elem_chunks(be, n) {
        let r = Some(chunk);
        let (rb, p) = b_chunk(name, n, nb, chunk)?;
        be.run_ranges(
            name,
            Family::Elementwise,
            "binary_backward_a",
            &consts,
            p,
            &[(a, r), (bt, rb), (g, r)],
            &[(&ga, r)],
            Grid::Elems(chunk.1),
        )?;
    }
    let gb = be.alloc(name, bt.shape(), DType::F32)?;
    if nb == n {
        // No broadcast: grad_b is elementwise too, and chunks like grad_a.
        for chunk in elem_chunks(be, n) {
            let r = Some(chunk);
            let l = u32_of(name, "elements", chunk.1)?;
            be.run_ranges(
                name,
                Family::Elementwise,
                "binary_backward_b",
                &consts,
                BinaryParams {
                    n: l,
                    nb: l,
                    start: 0,
                },
                &[(a, r), (bt, r), (g, r)],
                &[(&gb, r)],
                Grid::Elems(chunk.1),
            )?;
        }
    } else {
        // A sum over the broadcast rows: needs `a` and `grad_out` whole.
        let p = BinaryParams {
            n: u32_of(name, "elements", n)?,
            nb: u32_of(name, "elements", nb)?,
            start: 0,
        };
        be.run_kernel(
            name,
            Family::Elementwise,
            "binary_backward_b",
            &consts,
            p,
            &[a, bt, g],
            &[&gb],
            Grid::Elems(nb),
        )?;
    }
    Ok(vec![ga, gb])
}

/// Sums `x` viewed as `[rows, cols]` over rows into a tensor of `shape` (`cols` elements).
pub(crate) fn sum_rows(
    be: &dyn Device,
    name: &'static str,
    x: &Tensor,
    shape: &[usize],
) -> Result<Tensor> {
    let cols: usize = shape.iter().product();
    let p = SumRowsParams {
        n: u32_of(name, "elements", x.numel())?,
        cols: u32_of(name, "elements", cols)?,
    };
    let out = be.alloc(name, shape, DType::F32)?;
    be.run_kernel(
        name,
        Family::Elementwise,
        "sum_rows",
        &[],
        p,
        &[x],
        &[&out],
        Grid::Elems(cols),
    )?;
    Ok(out)
}
