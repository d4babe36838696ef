//! gru_cell, gru_sequence and gru_ensemble (`gru` family plus the matmul hook), written once
//! for `members` GRUs computed together (1 for the cell and the sequence; `gru_ensemble`'s
//! inputs carry a leading member axis). Everything stays on the device:
//!
//! - forward: the input projections of all steps and members in one batched matmul
//!   (`x[m] [seq*batch, input] @ W_ih[m]^T`), then per step one batched matmul
//!   (`h[m] @ W_hh[m]^T`, all members) and one fused gate kernel (all members): a step of the
//!   whole ensemble is 2 launches;
//! - backward (BPTT): the forward is recomputed with a trace of the gates, then per step (last
//!   to first) one gate-gradient kernel and one batched matmul (`d_gh @ W_hh`, the
//!   hidden-state gradient carried to the step before); the weight, bias and input gradients
//!   of all steps are then a handful of whole-sequence batched matmuls and column sums.

use kernels_core::op::BinaryOp;
use kernels_core::{DType, Error, Result, Tensor};

use super::common::arg;
use super::elementwise::{binary_forward, sum_rows};
use super::layout::concat;
use crate::device::{Device, Family, Fused, Grid, Matmul, u32_of};
use crate::params::{GruBackwardParams, GruForwardParams};
use crate::shapes;

use crate::shapes::GruDims as Dims;

fn dims(name: &'static str, sequence: bool, args: &[&Tensor]) -> Result<Dims> {
    let shapes: Vec<&[usize]> = args.iter().take(6).map(|t| t.shape()).collect();
    crate::shapes::gru(name, sequence, &shapes)
}

/// A batched operand: tensor, element offset of member 0's matrix, step between members,
/// transposed.
type Batched<'t> = (&'t Tensor, usize, usize, bool);

/// `out[m] [rows, cols] = op(a[m]) @ op(b[m])` for `members` products, one launch.
fn bmm(
    be: &dyn Device,
    name: &'static str,
    (a, off_a, step_a, trans_a): Batched<'_>,
    (b, off_b, step_b, trans_b): Batched<'_>,
    out: &Tensor,
    (m, n, k): (usize, usize, usize),
    members: usize,
) -> Result<()> {
    let fits = |t: &Tensor, off: usize, step: usize, len: usize| {
        step.checked_mul(members - 1)
            .and_then(|s| s.checked_add(off))
            .and_then(|s| s.checked_add(len))
            .is_some_and(|e| e <= t.numel())
    };
    if members == 0
        || !fits(a, off_a, step_a, m * k)
        || !fits(b, off_b, step_b, k * n)
        || out.numel() != members * m * n
    {
        return Err(Error::bad_shape(
            name,
            "matmul operand",
            a.shape(),
            format!("{members} x [{m}, {k}] @ [{k}, {n}] at offsets {off_a}, {off_b} does not fit"),
        ));
    }
    be.matmul(
        name,
        &Matmul {
            a: (a, off_a, trans_a),
            b: (b, off_b, trans_b),
            out,
            mnk: (m, n, k),
            steps_batch: (step_a, step_b, members),
            fused: Fused::default(),
            a_range: None,
            b_range: None,
            out_at: None,
        },
    )
}

/// The recomputable forward: `output [members, seq, batch, hidden]`, `h_n [members, batch,
/// hidden]` and (when asked) the gate trace `[members, seq, batch, 4*hidden]`.
struct Forward {
    output: Tensor,
    h_n: Tensor,
    trace: Option<Tensor>,
}

fn run_forward(
    be: &dyn Device,
    name: &'static str,
    (members, dm): (usize, Dims),
    args: &[&Tensor],
    want_h_n: bool,
    want_trace: bool,
) -> Result<Forward> {
    let (x, h0, w_ih, w_hh) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let Dims {
        seq,
        batch,
        input,
        hidden: hd,
    } = dm;
    let rows = seq * batch;
    let bh = batch * hd;
    u32_of(
        name,
        "members * seq * batch * 4 * hidden",
        members * rows * 4 * hd,
    )?;
    // All steps' input projections at once: x[m] [seq*batch, input] @ W_ih[m]^T.
    let gi = be.alloc(name, &[members, rows, 3 * hd], DType::F32)?;
    bmm(
        be,
        name,
        (x, 0, rows * input, false),
        (w_ih, 0, 3 * hd * input, true),
        &gi,
        (rows, 3 * hd, input),
        members,
    )?;
    let biases = concat(be, name, arg(args, 4), arg(args, 5))?;
    let output = be.alloc(name, &[members, seq, batch, hd], DType::F32)?;
    let trace = if want_trace {
        Some(be.alloc(name, &[members, seq, batch, 4 * hd], DType::F32)?)
    } else {
        None
    };
    // Always bound (a cell's is ignored); written when asked.
    let h_n = be.alloc(name, &[members, batch, hd], DType::F32)?;
    let gh = be.alloc(name, &[members, batch, 3 * hd], DType::F32)?;
    let flags = u32::from(want_h_n) | (u32::from(want_trace) << 1);
    for t in 0..seq {
        // h_prev is h0, or the previous step's row block of each member's output.
        let h_prev = if t == 0 {
            (h0, 0, bh, false)
        } else {
            (&output, (t - 1) * bh, seq * bh, false)
        };
        bmm(
            be,
            name,
            h_prev,
            (w_hh, 0, 3 * hd * hd, true),
            &gh,
            (batch, 3 * hd, hd),
            members,
        )?;
        let p = GruForwardParams {
            batch_hidden: u32_of(name, "batch * hidden", bh)?,
            hidden: u32_of(name, "hidden", hd)?,
            step: u32_of(name, "step", t)?,
            batch: u32_of(name, "batch", batch)?,
            flags,
            seq: u32_of(name, "seq", seq)?,
            members: u32_of(name, "members", members)?,
        };
        let mut outs = vec![&output, &h_n];
        if let Some(tr) = trace.as_ref() {
            outs.push(tr);
        }
        be.run_kernel(
            name,
            Family::Gru,
            "gate_forward",
            &[],
            p,
            &[&gi, &gh, h0, &biases],
            &outs,
            Grid::Elems(members * bh),
        )?;
    }
    Ok(Forward { output, h_n, trace })
}

pub(super) fn cell_forward(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Tensor> {
    let dm = dims(name, false, args)?;
    let f = run_forward(be, name, (1, dm), args, false, false)?;
    f.output.reshape(&[dm.batch, dm.hidden])
}

pub(super) fn sequence_forward(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let dm = dims(name, true, args)?;
    let f = run_forward(be, name, (1, dm), args, true, false)?;
    Ok(vec![
        f.output.reshape(&[dm.seq, dm.batch, dm.hidden])?,
        f.h_n.reshape(&[dm.batch, dm.hidden])?,
    ])
}

fn ensemble_dims(name: &'static str, args: &[&Tensor]) -> Result<(usize, Dims)> {
    let shapes: Vec<&[usize]> = args.iter().take(6).map(|t| t.shape()).collect();
    shapes::gru_ensemble(name, &shapes)
}

pub(super) fn ensemble_forward(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let md = ensemble_dims(name, args)?;
    let f = run_forward(be, name, md, args, true, false)?;
    Ok(vec![f.output, f.h_n])
}

/// Backward of gru_cell (`sequence` false) or gru_sequence. Args: the six inputs, the outputs
/// (`h_next`, or `output` and `h_n`), then their gradients. Returns gradients for the six
/// inputs.
pub(super) fn backward(
    be: &dyn Device,
    name: &'static str,
    sequence: bool,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let dm = dims(name, sequence, args)?;
    let h_shape = [dm.batch, dm.hidden];
    let (g_out, g_hn) = if sequence {
        let out_shape = [dm.seq, dm.batch, dm.hidden];
        shapes::same(name, &out_shape, arg(args, 6).shape())?;
        shapes::same(name, &h_shape, arg(args, 7).shape())?;
        shapes::same(name, &out_shape, arg(args, 8).shape())?;
        shapes::same(name, &h_shape, arg(args, 9).shape())?;
        (arg(args, 8), Some(arg(args, 9)))
    } else {
        shapes::same(name, &h_shape, arg(args, 6).shape())?;
        shapes::same(name, &h_shape, arg(args, 7).shape())?;
        (arg(args, 7), None)
    };
    run_backward(be, name, (1, dm), args, g_out, g_hn)
}

/// Backward of gru_ensemble. Args: the six inputs, `output`, `h_n`, `grad_output`,
/// `grad_h_n`.
pub(super) fn ensemble_backward(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (members, dm) = ensemble_dims(name, args)?;
    let out_shape = [members, dm.seq, dm.batch, dm.hidden];
    let h_shape = [members, dm.batch, dm.hidden];
    shapes::same(name, &out_shape, arg(args, 6).shape())?;
    shapes::same(name, &h_shape, arg(args, 7).shape())?;
    shapes::same(name, &out_shape, arg(args, 8).shape())?;
    shapes::same(name, &h_shape, arg(args, 9).shape())?;
    run_backward(
        be,
        name,
        (members, dm),
        args,
        arg(args, 8),
        Some(arg(args, 9)),
    )
}

/// Column sums of each member's `[rows, cols]` block of `x`: `[cols]` for one member, else
/// `[members, cols]` (a batched product with a row of ones).
fn member_col_sums(
    be: &dyn Device,
    name: &'static str,
    x: &Tensor,
    (members, rows, cols): (usize, usize, usize),
    shape: &[usize],
) -> Result<Tensor> {
    if members == 1 {
        return sum_rows(be, name, x, shape);
    }
    let ones = be.table(format!("ones {rows}"), &|| Tensor::full(&[rows], 1.0))?;
    let out = be.alloc(name, shape, DType::F32)?;
    bmm(
        be,
        name,
        (&ones, 0, 0, false),
        (x, 0, rows * cols, false),
        &out,
        (1, cols, rows),
        members,
    )?;
    Ok(out)
}

fn run_backward(
    be: &dyn Device,
    name: &'static str,
    (members, dm): (usize, Dims),
    args: &[&Tensor],
    g_out: &Tensor,
    g_hn: Option<&Tensor>,
) -> Result<Vec<Tensor>> {
    let Dims {
        seq,
        batch,
        input,
        hidden: hd,
    } = dm;
    let (x, h0, w_ih, w_hh) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let f = run_forward(be, name, (members, dm), args, false, true)?;
    let trace = f
        .trace
        .ok_or_else(|| Error::bad_shape(name, "trace", &[], "not produced"))?;
    let output = f.output;
    let rows = seq * batch;
    let bh = batch * hd;
    let h_shape = [members, batch, hd];
    let d_gi = be.alloc(name, &[members, rows, 3 * hd], DType::F32)?;
    let d_gh = be.alloc(name, &[members, rows, 3 * hd], DType::F32)?;
    let dh = be.alloc(name, &h_shape, DType::F32)?;
    let mm = be.alloc(name, &h_shape, DType::F32)?;
    let member_rows = rows * 3 * hd;
    for t in (0..seq).rev() {
        let h_prev = if t == 0 { h0 } else { &output };
        // mode 0: the cell's gradient only; 1: the last step also gets grad_h_n; 2: the
        // gradient carried from step t + 1 (z * grad in dh, d_gh @ W_hh in mm).
        let (mode, extra) = match (t + 1 == seq, g_hn) {
            (true, Some(g)) => (1, g),
            (true, None) => (0, g_out),
            (false, _) => (2, &mm),
        };
        let p = GruBackwardParams {
            batch_hidden: u32_of(name, "batch * hidden", bh)?,
            hidden: u32_of(name, "hidden", hd)?,
            step: u32_of(name, "step", t)?,
            seq: u32_of(name, "seq", seq)?,
            batch: u32_of(name, "batch", batch)?,
            mode,
            members: u32_of(name, "members", members)?,
        };
        be.run_kernel(
            name,
            Family::Gru,
            "gate_backward",
            &[],
            p,
            &[&trace, h_prev, g_out, extra],
            &[&d_gi, &d_gh, &dh],
            Grid::Elems(members * bh),
        )?;
        // The hidden-state gradient through W_hh, for step t - 1 (or h0).
        bmm(
            be,
            name,
            (&d_gh, t * batch * 3 * hd, member_rows, false),
            (w_hh, 0, 3 * hd * hd, false),
            &mm,
            (batch, hd, 3 * hd),
            members,
        )?;
    }
    let grad_h0 = binary_forward(be, name, BinaryOp::Add, &[&dh, &mm])?.reshape(h0.shape())?;
    // Whole-sequence products: dx = d_gi @ W_ih, dW_ih = d_gi^T @ x, dW_hh = d_gh^T @ h_prev.
    let grad_x = be.alloc(name, x.shape(), DType::F32)?;
    bmm(
        be,
        name,
        (&d_gi, 0, member_rows, false),
        (w_ih, 0, 3 * hd * input, false),
        &grad_x,
        (rows, input, 3 * hd),
        members,
    )?;
    let grad_w_ih = be.alloc(name, w_ih.shape(), DType::F32)?;
    bmm(
        be,
        name,
        (&d_gi, 0, member_rows, true),
        (x, 0, rows * input, false),
        &grad_w_ih,
        (3 * hd, input, rows),
        members,
    )?;
    let first = be.alloc(name, w_hh.shape(), DType::F32)?;
    bmm(
        be,
        name,
        (&d_gh, 0, member_rows, true),
        (h0, 0, bh, false),
        &first,
        (3 * hd, hd, batch),
        members,
    )?;
    let grad_w_hh = if seq > 1 {
        // Steps 1.. read h_prev from output[m][0..seq-1].
        let rest = be.alloc(name, w_hh.shape(), DType::F32)?;
        bmm(
            be,
            name,
            (&d_gh, batch * 3 * hd, member_rows, true),
            (&output, 0, seq * bh, false),
            &rest,
            (3 * hd, hd, (seq - 1) * batch),
            members,
        )?;
        binary_forward(be, name, BinaryOp::Add, &[&first, &rest])?
    } else {
        first
    };
    let b_shape = arg(args, 4).shape();
    let grad_b_ih = member_col_sums(be, name, &d_gi, (members, rows, 3 * hd), b_shape)?;
    let grad_b_hh = member_col_sums(be, name, &d_gh, (members, rows, 3 * hd), b_shape)?;
    Ok(vec![
        grad_x, grad_h0, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh,
    ])
}
