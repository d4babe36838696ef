//! GRU cell (`torch.nn.GRUCell`) and one-layer GRU over a sequence (`torch.nn.GRU`,
//! `batch_first=False`), forward and backward.
//!
//! Gate order in the stacked weights is r, z, n (PyTorch's). With `gi = W_ih x + b_ih` and
//! `gh = W_hh h + b_hh`, each `[batch, 3*hidden]`:
//!
//! ```text
//! r  = sigmoid(gi_r + gh_r)
//! z  = sigmoid(gi_z + gh_z)
//! n  = tanh(gi_n + r * gh_n)        // b_hn sits inside r * (...), as in PyTorch
//! h' = (1 - z) * n + z * h
//! ```
//!
//! Backward recomputes the gates from the inputs rather than trusting the saved outputs, so the
//! gradients depend only on the inputs and are bit-reproducible.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, non_empty, same_shape};
use super::matmul::matmul_slices;
use crate::error::{Error, Result};
use crate::numerics::Real;

/// The matrix product the steps use (`matmul_slices`' signature): the reference's plain loops,
/// or a fast GEMM (`cpu::fast`) with the same gate arithmetic around it.
pub type MatmulFn<T> = fn(&[T], &[T], usize, usize, usize, bool, bool) -> Result<Vec<T>>;

const CELL: &str = "gru_cell";
const SEQ: &str = "gru_sequence";

#[derive(Debug, Clone, Copy)]
struct Dims {
    batch: usize,
    input: usize,
    hidden: usize,
}

/// The four parameter tensors.
#[derive(Debug, Clone, Copy)]
struct Params<'a, T> {
    w_ih: &'a [T],
    w_hh: &'a [T],
    b_ih: &'a [T],
    b_hh: &'a [T],
}

/// Reads and validates `h`, the weights and the biases (args 1..=5) against `x`'s last two dims
/// `[batch, input]`.
fn read_params<'a, T: Real>(
    op: &'static str,
    args: &[View<'a, T>],
    x_shape: &[usize],
) -> Result<(Dims, &'a [T], Params<'a, T>)> {
    let (h_name, h_shape, h) = {
        let name = if op == CELL { "h" } else { "h0" };
        let (s, d) = float_arg(op, args, 1, name)?;
        (name, s, d)
    };
    let &[batch, input] = x_shape
        .get(x_shape.len().saturating_sub(2)..)
        .unwrap_or(&[])
    else {
        return Err(Error::bad_shape(op, "x", x_shape, "needs rank >= 2"));
    };
    let &[h_batch, hidden] = h_shape else {
        return Err(Error::bad_shape(
            op,
            h_name,
            h_shape,
            "needs rank 2 [batch, hidden]",
        ));
    };
    non_empty(op, h_name, h_shape)?;
    if h_batch != batch {
        return Err(Error::mismatch(op, x_shape, h_shape));
    }
    let gates = hidden
        .checked_mul(3)
        .ok_or_else(|| Error::bad_shape(op, h_name, h_shape, "3 * hidden overflows"))?;
    let expect = |i: usize, name: &str, want: &[usize]| -> Result<&'a [T]> {
        let (s, d) = float_arg(op, args, i, name)?;
        if s != want {
            return Err(Error::bad_shape(
                op,
                name,
                s,
                format!("expected {want:?} for input size {input}, hidden size {hidden}"),
            ));
        }
        Ok(d)
    };
    let params = Params {
        w_ih: expect(2, "weight_ih", &[gates, input])?,
        w_hh: expect(3, "weight_hh", &[gates, hidden])?,
        b_ih: expect(4, "bias_ih", &[gates])?,
        b_hh: expect(5, "bias_hh", &[gates])?,
    };
    Ok((
        Dims {
            batch,
            input,
            hidden,
        },
        h,
        params,
    ))
}

fn sigmoid<T: Real>(x: T) -> T {
    // Two branches so exp never overflows.
    if x >= T::ZERO {
        T::ONE / (T::ONE + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::ONE + e)
    }
}

/// Activations of one step, each `[batch, hidden]`.
#[derive(Debug, Clone)]
struct Step<T> {
    r: Vec<T>,
    z: Vec<T>,
    n: Vec<T>,
    /// `W_hn h + b_hn`, needed for the gradient of r.
    hn: Vec<T>,
    h_next: Vec<T>,
}

/// One GRU step: x `[batch, input]`, h `[batch, hidden]`.
fn step<T: Real>(dm: Dims, p: Params<T>, x: &[T], h: &[T], mm: MatmulFn<T>) -> Result<Step<T>> {
    let Dims {
        batch,
        input,
        hidden: hd,
    } = dm;
    // gi = x @ W_ih^T, gh = h @ W_hh^T: [batch, 3*hidden].
    let gi = mm(x, p.w_ih, batch, input, 3 * hd, false, true)?;
    let gh = mm(h, p.w_hh, batch, hd, 3 * hd, false, true)?;
    let len = batch * hd;
    let mut s = Step {
        r: vec![T::ZERO; len],
        z: vec![T::ZERO; len],
        n: vec![T::ZERO; len],
        hn: vec![T::ZERO; len],
        h_next: vec![T::ZERO; len],
    };
    for b in 0..batch {
        let (gi, gh) = (&gi[b * 3 * hd..], &gh[b * 3 * hd..]);
        for j in 0..hd {
            let o = b * hd + j;
            let r = sigmoid(gi[j] + p.b_ih[j] + gh[j] + p.b_hh[j]);
            let z = sigmoid(gi[hd + j] + p.b_ih[hd + j] + gh[hd + j] + p.b_hh[hd + j]);
            let hn = gh[2 * hd + j] + p.b_hh[2 * hd + j];
            let n = (gi[2 * hd + j] + p.b_ih[2 * hd + j] + r * hn).tanh();
            s.r[o] = r;
            s.z[o] = z;
            s.n[o] = n;
            s.hn[o] = hn;
            s.h_next[o] = (T::ONE - z) * n + z * h[o];
        }
    }
    Ok(s)
}

/// Parameter gradients, accumulated over the steps of a sequence.
#[derive(Debug, Clone)]
struct ParamGrads<T> {
    w_ih: Vec<T>,
    w_hh: Vec<T>,
    b_ih: Vec<T>,
    b_hh: Vec<T>,
}

impl<T: Real> ParamGrads<T> {
    fn zeros(dm: Dims) -> Self {
        let g = 3 * dm.hidden;
        ParamGrads {
            w_ih: vec![T::ZERO; g * dm.input],
            w_hh: vec![T::ZERO; g * dm.hidden],
            b_ih: vec![T::ZERO; g],
            b_hh: vec![T::ZERO; g],
        }
    }
}

fn add_to<T: Real>(acc: &mut [T], x: &[T]) {
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += v;
    }
}

/// Backward of one step given `g = dL/dh_next` `[batch, hidden]`: adds the parameter gradients
/// to `pg` and returns `(dL/dx, dL/dh)`.
// One step's operands plus the product to use; a struct for them would only be unpacked here.
#[allow(clippy::too_many_arguments)]
fn step_backward<T: Real>(
    dm: Dims,
    p: Params<T>,
    x: &[T],
    h: &[T],
    s: &Step<T>,
    g: &[T],
    pg: &mut ParamGrads<T>,
    mm: MatmulFn<T>,
) -> Result<(Vec<T>, Vec<T>)> {
    let Dims {
        batch,
        input,
        hidden: hd,
    } = dm;
    // Gradients of the pre-activations gi and gh, [batch, 3*hidden] in gate order r, z, n.
    let mut d_gi = vec![T::ZERO; batch * 3 * hd];
    let mut d_gh = vec![T::ZERO; batch * 3 * hd];
    let mut grad_h = vec![T::ZERO; batch * hd];
    for b in 0..batch {
        for j in 0..hd {
            let o = b * hd + j;
            let (r, z, n) = (s.r[o], s.z[o], s.n[o]);
            let go = g[o];
            // h' = (1 - z) n + z h
            let dn = go * (T::ONE - z);
            let dz = go * (h[o] - n);
            grad_h[o] = go * z;
            // n = tanh(a_n), a_n = gi_n + r * hn
            let da_n = dn * (T::ONE - n * n);
            let dr = da_n * s.hn[o];
            let da_r = dr * r * (T::ONE - r);
            let da_z = dz * z * (T::ONE - z);
            let row = b * 3 * hd;
            d_gi[row + j] = da_r;
            d_gi[row + hd + j] = da_z;
            d_gi[row + 2 * hd + j] = da_n;
            d_gh[row + j] = da_r;
            d_gh[row + hd + j] = da_z;
            d_gh[row + 2 * hd + j] = da_n * r;
        }
    }
    // dx = d_gi @ W_ih, dh += d_gh @ W_hh.
    let grad_x = mm(&d_gi, p.w_ih, batch, 3 * hd, input, false, false)?;
    add_to(
        &mut grad_h,
        &mm(&d_gh, p.w_hh, batch, 3 * hd, hd, false, false)?,
    );
    // dW_ih += d_gi^T @ x, dW_hh += d_gh^T @ h, biases += column sums.
    add_to(
        &mut pg.w_ih,
        &mm(&d_gi, x, 3 * hd, batch, input, true, false)?,
    );
    add_to(&mut pg.w_hh, &mm(&d_gh, h, 3 * hd, batch, hd, true, false)?);
    for b in 0..batch {
        add_to(&mut pg.b_ih, &d_gi[b * 3 * hd..(b + 1) * 3 * hd]);
        add_to(&mut pg.b_hh, &d_gh[b * 3 * hd..(b + 1) * 3 * hd]);
    }
    Ok((grad_x, grad_h))
}

/// The validated inputs of either op.
#[derive(Debug, Clone, Copy)]
struct Inputs<'a, T> {
    dm: Dims,
    /// Number of steps (1 for the cell).
    seq: usize,
    x_shape: &'a [usize],
    x: &'a [T],
    /// `h` for the cell, `h0` for the sequence.
    h: &'a [T],
    p: Params<'a, T>,
}

/// Reads a GRU cell's inputs: x `[batch, input]`, h `[batch, hidden]`, and the parameters.
fn cell_inputs<'a, T: Real>(args: &[View<'a, T>]) -> Result<Inputs<'a, T>> {
    let (x_shape, x) = float_arg(CELL, args, 0, "x")?;
    if x_shape.len() != 2 {
        return Err(Error::bad_shape(
            CELL,
            "x",
            x_shape,
            "needs rank 2 [batch, input]",
        ));
    }
    non_empty(CELL, "x", x_shape)?;
    let (dm, h, p) = read_params(CELL, args, x_shape)?;
    Ok(Inputs {
        dm,
        seq: 1,
        x_shape,
        x,
        h,
        p,
    })
}

/// Forward of `torch.nn.GRUCell`. Args: `x`, `h`, `weight_ih`, `weight_hh`, `bias_ih`,
/// `bias_hh`. Returns `h_next [batch, hidden]`.
pub fn cell_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    cell_forward_with(args, matmul_slices::<T>)
}

/// [`cell_forward`] with the products done by `mm`.
pub fn cell_forward_with<T: Real>(args: &[View<T>], mm: MatmulFn<T>) -> Result<Vec<Owned<T>>> {
    let Inputs { dm, x, h, p, .. } = cell_inputs(args)?;
    let s = step(dm, p, x, h, mm)?;
    Ok(vec![Owned::float(vec![dm.batch, dm.hidden], s.h_next)])
}

/// Backward of the cell. Args: the six inputs, `h_next`, `grad_h_next`. Returns gradients for
/// all six inputs, in input order.
pub fn cell_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    cell_backward_with(args, matmul_slices::<T>)
}

/// [`cell_backward`] with the products done by `mm`.
pub fn cell_backward_with<T: Real>(args: &[View<T>], mm: MatmulFn<T>) -> Result<Vec<Owned<T>>> {
    let Inputs {
        dm,
        x_shape,
        x,
        h,
        p,
        ..
    } = cell_inputs(args)?;
    let hshape = [dm.batch, dm.hidden];
    let (o_shape, _) = float_arg(CELL, args, 6, "h_next")?;
    let (g_shape, g) = float_arg(CELL, args, 7, "grad_h_next")?;
    same_shape(CELL, &hshape, o_shape)?;
    same_shape(CELL, &hshape, g_shape)?;
    let s = step(dm, p, x, h, mm)?;
    let mut pg = ParamGrads::zeros(dm);
    let (gx, gh) = step_backward(dm, p, x, h, &s, g, &mut pg, mm)?;
    Ok(grads_out(dm, x_shape.to_vec(), gx, gh, pg))
}

fn grads_out<T: Real>(
    dm: Dims,
    x_shape: Vec<usize>,
    gx: Vec<T>,
    gh: Vec<T>,
    pg: ParamGrads<T>,
) -> Vec<Owned<T>> {
    let g = 3 * dm.hidden;
    vec![
        Owned::float(x_shape, gx),
        Owned::float(vec![dm.batch, dm.hidden], gh),
        Owned::float(vec![g, dm.input], pg.w_ih),
        Owned::float(vec![g, dm.hidden], pg.w_hh),
        Owned::float(vec![g], pg.b_ih),
        Owned::float(vec![g], pg.b_hh),
    ]
}

/// Reads a sequence's inputs: x `[seq, batch, input]`, h0 `[batch, hidden]`, the parameters.
fn seq_inputs<'a, T: Real>(args: &[View<'a, T>]) -> Result<Inputs<'a, T>> {
    let (x_shape, x) = float_arg(SEQ, args, 0, "x")?;
    let &[seq, _, _] = x_shape else {
        return Err(Error::bad_shape(
            SEQ,
            "x",
            x_shape,
            "needs rank 3 [seq, batch, input]",
        ));
    };
    non_empty(SEQ, "x", x_shape)?;
    let (dm, h, p) = read_params(SEQ, args, x_shape)?;
    Ok(Inputs {
        dm,
        seq,
        x_shape,
        x,
        h,
        p,
    })
}

/// A forward pass over a sequence, kept for backpropagation through time.
#[derive(Debug, Clone)]
struct Trace<T> {
    /// Each step's activations.
    steps: Vec<Step<T>>,
    /// Hidden states `h_0 ..= h_seq` (`seq + 1` of them), each `[batch, hidden]`.
    hs: Vec<Vec<T>>,
}

/// Runs the whole sequence.
fn run_sequence<T: Real>(inp: &Inputs<T>, mm: MatmulFn<T>) -> Result<Trace<T>> {
    let Inputs {
        dm,
        seq,
        x,
        h: h0,
        p,
        ..
    } = *inp;
    let xs = dm.batch * dm.input;
    let mut steps = Vec::with_capacity(seq);
    let mut hs = Vec::with_capacity(seq + 1);
    hs.push(h0.to_vec());
    for t in 0..seq {
        let h = hs.last().map_or(h0, |v| v.as_slice());
        let s = step(dm, p, &x[t * xs..(t + 1) * xs], h, mm)?;
        hs.push(s.h_next.clone());
        steps.push(s);
    }
    Ok(Trace { steps, hs })
}

/// Forward of a one-layer `torch.nn.GRU`. Args: `x [seq, batch, input]`, `h0 [batch, hidden]`,
/// `weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`. Returns `output [seq, batch, hidden]` (every
/// step's hidden state) and `h_n [batch, hidden]` (the last one; 2-D, unlike PyTorch's
/// `[1, batch, hidden]`).
pub fn sequence_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    sequence_forward_with(args, matmul_slices::<T>)
}

/// [`sequence_forward`] with the products done by `mm`.
pub fn sequence_forward_with<T: Real>(args: &[View<T>], mm: MatmulFn<T>) -> Result<Vec<Owned<T>>> {
    let inp = seq_inputs(args)?;
    let (dm, seq) = (inp.dm, inp.seq);
    let Trace { hs, .. } = run_sequence(&inp, mm)?;
    let output: Vec<T> = hs.iter().skip(1).flatten().copied().collect();
    let h_n = hs.last().cloned().unwrap_or_default();
    Ok(vec![
        Owned::float(vec![seq, dm.batch, dm.hidden], output),
        Owned::float(vec![dm.batch, dm.hidden], h_n),
    ])
}

/// Backward through time. Args: the six inputs, `output`, `h_n`, `grad_output`, `grad_h_n`.
/// Returns gradients for all six inputs, in input order. `grad_h_n` joins the last step's
/// hidden-state gradient; parameter gradients are summed from the last step to the first.
pub fn sequence_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    sequence_backward_with(args, matmul_slices::<T>)
}

/// [`sequence_backward`] with the products done by `mm`.
pub fn sequence_backward_with<T: Real>(args: &[View<T>], mm: MatmulFn<T>) -> Result<Vec<Owned<T>>> {
    let inp = seq_inputs(args)?;
    let Inputs {
        dm,
        seq,
        x_shape,
        x,
        p,
        ..
    } = inp;
    let out_shape = [seq, dm.batch, dm.hidden];
    let h_shape = [dm.batch, dm.hidden];
    let (o_shape, _) = float_arg(SEQ, args, 6, "output")?;
    let (hn_shape, _) = float_arg(SEQ, args, 7, "h_n")?;
    let (go_shape, g_out) = float_arg(SEQ, args, 8, "grad_output")?;
    let (ghn_shape, g_hn) = float_arg(SEQ, args, 9, "grad_h_n")?;
    same_shape(SEQ, &out_shape, o_shape)?;
    same_shape(SEQ, &h_shape, hn_shape)?;
    same_shape(SEQ, &out_shape, go_shape)?;
    same_shape(SEQ, &h_shape, ghn_shape)?;

    let Trace { steps, hs } = run_sequence(&inp, mm)?;
    let (xs, hsz) = (dm.batch * dm.input, dm.batch * dm.hidden);
    let mut pg = ParamGrads::zeros(dm);
    let mut grad_x = vec![T::ZERO; x.len()];
    let mut dh = g_hn.to_vec();
    for t in (0..seq).rev() {
        add_to(&mut dh, &g_out[t * hsz..(t + 1) * hsz]);
        let (Some(s), Some(h)) = (steps.get(t), hs.get(t)) else {
            break;
        };
        let x_t = &x[t * xs..(t + 1) * xs];
        let (gx, gh) = step_backward(dm, p, x_t, h, s, &dh, &mut pg, mm)?;
        grad_x[t * xs..(t + 1) * xs].copy_from_slice(&gx);
        dh = gh;
    }
    Ok(grads_out(dm, x_shape.to_vec(), grad_x, dh, pg))
}

mod ensemble;

pub use ensemble::{ensemble_backward_with, ensemble_forward_with};

/// Forward of `gru_ensemble` (see [`ensemble_forward_with`]).
pub fn ensemble_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    ensemble_forward_with(args, matmul_slices::<T>)
}

/// Backward of `gru_ensemble` (see [`ensemble_backward_with`]).
pub fn ensemble_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    ensemble_backward_with(args, matmul_slices::<T>)
}

#[cfg(test)]
mod tests;
