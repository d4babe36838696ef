//! gru_cell and gru_sequence (`gru` family plus the matmul hook). Everything
//! stays on the device:
//!
//! - forward: the input projections of all steps in one matmul (`x [seq*batch, input] @
//!   W_ih^T`), then per step one matmul (`h @ W_hh^T`) and one fused gate kernel;
//! - backward (BPTT): the forward is recomputed with a trace of the gates, then per step (last
//!   to first) one gate-gradient kernel and one matmul (`d_gh @ W_hh`, the hidden-state
//!   gradient carried to the step before); the weight, bias and input gradients of all steps
//!   are then a handful of whole-sequence matmuls and column sums.

use kernels_core::op::BinaryOp;
use kernels_core::{DType, Error, Result, Tensor};

use super::common::arg;
use super::elementwise::{binary_forward, sum_rows};
use super::layout::concat;
use super::matmul::matmul_at;
use crate::device::{Device, Family, Grid, u32_of};
use crate::params::{GruBackwardParams, GruForwardParams};
use crate::shapes;

use crate::shapes::GruDims as Dims;

fn dims(name: &'static str, sequence: bool, args: &[&Tensor]) -> Result<Dims> {
    let shapes: Vec<&[usize]> = args.iter().take(6).map(|t| t.shape()).collect();
    crate::shapes::gru(name, sequence, &shapes)
}

/// The recomputable forward: `output [seq, batch, hidden]`, `h_n` and (when asked) the gate
/// trace `[seq, batch, 4*hidden]`.
struct Forward {
    output: Tensor,
    h_n: Tensor,
    trace: Option<Tensor>,
}

fn run_forward(
    be: &dyn Device,
    name: &'static str,
    dm: Dims,
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
    // All steps' input projections at once: [seq*batch, input] @ W_ih^T.
    let gi = be.alloc(name, &[rows, 3 * hd], DType::F32)?;
    matmul_at(
        be,
        name,
        (x, 0, false),
        (w_ih, 0, true),
        &gi,
        (rows, 3 * hd, input),
    )?;
    let biases = concat(be, name, arg(args, 4), arg(args, 5))?;
    let output = be.alloc(name, &[seq, batch, hd], DType::F32)?;
    let trace = if want_trace {
        Some(be.alloc(name, &[seq, batch, 4 * hd], DType::F32)?)
    } else {
        None
    };
    // Always bound (a cell's is ignored); written when asked.
    let h_n = be.alloc(name, &[batch, hd], DType::F32)?;
    let gh = be.alloc(name, &[batch, 3 * hd], DType::F32)?;
    let bh = batch * hd;
    let flags = u32::from(want_h_n) | (u32::from(want_trace) << 1);
    for t in 0..seq {
        // h_prev is h0, or the previous step's row block of the output.
        let (h_prev, off) = if t == 0 {
            (h0, 0)
        } else {
            (&output, (t - 1) * bh)
        };
        matmul_at(
            be,
            name,
            (h_prev, off, false),
            (w_hh, 0, true),
            &gh,
            (batch, 3 * hd, hd),
        )?;
        let p = GruForwardParams {
            batch_hidden: u32_of(name, "batch * hidden", bh)?,
            hidden: u32_of(name, "hidden", hd)?,
            step: u32_of(name, "step", t)?,
            batch: u32_of(name, "batch", batch)?,
            flags,
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
            Grid::Elems(bh),
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
    let f = run_forward(be, name, dm, args, false, false)?;
    f.output.reshape(&[dm.batch, dm.hidden])
}

pub(super) fn sequence_forward(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let dm = dims(name, true, args)?;
    let f = run_forward(be, name, dm, args, true, false)?;
    Ok(vec![f.output, f.h_n])
}

/// Backward of either op. Args: the six inputs, the outputs (`h_next`, or `output` and `h_n`),
/// then their gradients. Returns gradients for the six inputs.
pub(super) fn backward(
    be: &dyn Device,
    name: &'static str,
    sequence: bool,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let dm = dims(name, sequence, args)?;
    let Dims {
        seq,
        batch,
        input,
        hidden: hd,
    } = dm;
    let h_shape = [batch, hd];
    let (g_out, g_hn) = if sequence {
        let out_shape = [seq, batch, hd];
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
    let (x, h0, w_ih, w_hh) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let f = run_forward(be, name, dm, args, false, true)?;
    let trace = f
        .trace
        .ok_or_else(|| Error::bad_shape(name, "trace", &[], "not produced"))?;
    let output = f.output;
    let rows = seq * batch;
    let bh = batch * hd;
    let d_gi = be.alloc(name, &[rows, 3 * hd], DType::F32)?;
    let d_gh = be.alloc(name, &[rows, 3 * hd], DType::F32)?;
    let dh = be.alloc(name, &h_shape, DType::F32)?;
    let mm = be.alloc(name, &h_shape, DType::F32)?;
    for t in (0..seq).rev() {
        let (h_prev, off) = if t == 0 {
            (h0, 0)
        } else {
            (&output, (t - 1) * bh)
        };
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
            h_offset: u32_of(name, "offset", off)?,
            batch: u32_of(name, "batch", batch)?,
            mode,
        };
        be.run_kernel(
            name,
            Family::Gru,
            "gate_backward",
            &[],
            p,
            &[&trace, h_prev, g_out, extra],
            &[&d_gi, &d_gh, &dh],
            Grid::Elems(bh),
        )?;
        // The hidden-state gradient through W_hh, for step t - 1 (or h0).
        matmul_at(
            be,
            name,
            (&d_gh, t * batch * 3 * hd, false),
            (w_hh, 0, false),
            &mm,
            (batch, hd, 3 * hd),
        )?;
    }
    let grad_h0 = binary_forward(be, name, BinaryOp::Add, &[&dh, &mm])?;
    // Whole-sequence products: dx = d_gi @ W_ih, dW_ih = d_gi^T @ x, dW_hh = d_gh^T @ h_prev.
    let grad_x = be.alloc(name, x.shape(), DType::F32)?;
    matmul_at(
        be,
        name,
        (&d_gi, 0, false),
        (w_ih, 0, false),
        &grad_x,
        (rows, input, 3 * hd),
    )?;
    let grad_w_ih = be.alloc(name, w_ih.shape(), DType::F32)?;
    matmul_at(
        be,
        name,
        (&d_gi, 0, true),
        (x, 0, false),
        &grad_w_ih,
        (3 * hd, input, rows),
    )?;
    let first = be.alloc(name, w_hh.shape(), DType::F32)?;
    matmul_at(
        be,
        name,
        (&d_gh, 0, true),
        (h0, 0, false),
        &first,
        (3 * hd, hd, batch),
    )?;
    let grad_w_hh = if seq > 1 {
        // Steps 1.. read h_prev from output[0..seq-1].
        let rest = be.alloc(name, w_hh.shape(), DType::F32)?;
        matmul_at(
            be,
            name,
            (&d_gh, batch * 3 * hd, true),
            (&output, 0, false),
            &rest,
            (3 * hd, hd, (seq - 1) * batch),
        )?;
        binary_forward(be, name, BinaryOp::Add, &[&first, &rest])?
    } else {
        first
    };
    let grad_b_ih = sum_rows(be, name, &d_gi, &[3 * hd])?;
    let grad_b_hh = sum_rows(be, name, &d_gh, &[3 * hd])?;
    Ok(vec![
        grad_x, grad_h0, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh,
    ])
}
