//! `matmul_swiglu` on the fast GEMM: the reference's arithmetic ([`crate::cpu::matmul_swiglu`])
//! with its products made by [`Gemm`].

use alloc::vec::Vec;

use super::gemm::{Gemm, Kernel, MatRef};
use super::zeros;
use crate::cpu::matmul_swiglu;
use crate::cpu::{Owned, View};
use crate::error::Result;

pub(super) fn forward(kernel: Kernel, args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
    matmul_swiglu::forward_with(args, &|x, w, in_f| product_rows(kernel, x, w, in_f))
}

pub(super) fn backward(kernel: Kernel, args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
    matmul_swiglu::backward_with(
        args,
        &|x, w, in_f| product_rows(kernel, x, w, in_f),
        &|dy, w, x, in_f| product_grads(kernel, dy, w, x, in_f),
    )
}

/// `x [rows, in] @ w^T` for `w [cols, in]` on the GEMM (`matmul_swiglu`'s product).
fn product_rows(kernel: Kernel, x: &[f32], w: &[f32], in_f: usize) -> Result<Vec<f32>> {
    let (rows, cols) = (x.len() / in_f.max(1), w.len() / in_f.max(1));
    let mut out = zeros(rows * cols)?;
    Gemm::new(kernel).run(
        MatRef::new(x, rows, in_f, false)?,
        MatRef::new(w, in_f, cols, true)?,
        &mut out,
        cols,
    )?;
    Ok(out)
}

/// `(dy @ w, dy^T @ x)` on the GEMM for `dy [rows, cols]`, `w [cols, in]`, `x [rows, in]`.
fn product_grads(
    kernel: Kernel,
    dy: &[f32],
    w: &[f32],
    x: &[f32],
    in_f: usize,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let (rows, cols) = (x.len() / in_f.max(1), w.len() / in_f.max(1));
    let mut gx = zeros(x.len())?;
    let mut gw = zeros(w.len())?;
    let mut gemm = Gemm::new(kernel);
    let dym = MatRef::new(dy, rows, cols, false)?;
    gemm.run(dym, MatRef::new(w, cols, in_f, false)?, &mut gx, in_f)?;
    gemm.run(dym.t(), MatRef::new(x, rows, in_f, false)?, &mut gw, in_f)?;
    Ok((gx, gw))
}
