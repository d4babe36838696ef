//! svd_lowrank on wgpu, entirely on the device (no readback, so it runs in the browser too):
//! the products with `a` (`a @ omega`, `a^T Q`, `a Q`, `Q^T a`) and `Q @ u_b` on the matmul
//! kernel (batched, `omega` shared across the batch), and the small steps -- the tall-skinny
//! orthonormalizations, the `q x n` Jacobi SVD and the sign fix -- in `shaders/svd.wgsl`, one
//! workgroup per matrix, following the CPU reference step for step on the same `omega` (same
//! seed, same RNG order), so the result matches it within its budget.
//!
//! Differences from the reference, both documented in the op table: `a` is not pre-scaled by a
//! power of two (the scale is exact and cancels; it only guards f32 squared norms against
//! overflow for entries near 1e19), and a non-finite `a`, which the reference refuses with
//! `NonFinite`, gives NaN outputs, because refusing would need a readback (the CLI checks its
//! inputs on the host first, so `kernels op` still refuses it).

use kernels_core::{DType, Error, Result, Tensor};

use super::{matmul, u32_of};
use crate::shapes;
use crate::wgpu_backend::{Family, Params, WgpuBackend};

/// Largest `q = min(rank, m, n)` the device Jacobi step keeps per-vector state for
/// (`MAX_Q` in the shader).
pub const MAX_Q: usize = 256;

fn upload(be: &WgpuBackend, shape: &[usize], v: Vec<f32>) -> Result<Tensor> {
    use kernels_core::Backend;
    be.upload(&Tensor::from_f32(shape, v)?)
}

fn with(lead: &[usize], tail: &[usize]) -> Vec<usize> {
    lead.iter().chain(tail).copied().collect()
}

/// Orthonormalizes the columns of each matrix of `y [batch.., rows, cols]` in place. `y` must be
/// a fresh tensor of this op (nobody else holds it).
fn orth(be: &WgpuBackend, name: &'static str, y: &Tensor, batch: usize) -> Result<()> {
    let shape = y.shape();
    let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let p = Params::u(&[
        u32_of(name, "batch", batch)?,
        u32_of(name, "rows", rows)?,
        u32_of(name, "cols", cols)?,
    ]);
    be.launch(
        name,
        Family::Svd,
        "orth_columns",
        &[],
        p,
        &[],
        &[y],
        be.grid_1d(batch as u64)?,
    )
}

pub(super) fn forward(
    be: &WgpuBackend,
    name: &'static str,
    rank: usize,
    power_iters: usize,
    seed: u64,
    a: &Tensor,
) -> Result<Vec<Tensor>> {
    let shape = a.shape();
    shapes::min_rank(name, "a", shape, 2)?;
    shapes::non_empty(name, "a", shape)?;
    if rank == 0 {
        return Err(Error::BadAttr {
            op: name,
            attr: "rank",
            value: "0".into(),
            why: "must be >= 1".into(),
        });
    }
    let (lead, mn) = shape.split_at(shape.len() - 2);
    let (m, n) = (mn[0], mn[1]);
    let q = rank.min(m).min(n);
    if q > MAX_Q {
        return Err(Error::LimitExceeded {
            what: format!("{name}: rank min(rank, m, n) on the GPU for a {shape:?} input"),
            value: q as u64,
            limit: MAX_Q as u64,
        });
    }
    let batch: usize = lead.iter().product();
    let omega = upload(
        be,
        &[n, q],
        kernels_core::cpu::svd::gaussian_omega::<f32>(seed, n, q),
    )?;
    // Q [..., m, q] spans (approximately) the dominant range of a.
    let mut qm = matmul(be, name, a, &omega, false, false)?;
    orth(be, name, &qm, batch)?;
    for _ in 0..power_iters {
        let z = matmul(be, name, a, &qm, true, false)?; // a^T Q [.., n, q]
        orth(be, name, &z, batch)?;
        qm = matmul(be, name, a, &z, false, false)?; // a Z [.., m, q]
        orth(be, name, &qm, batch)?;
    }
    let b = matmul(be, name, &qm, a, true, false)?; // Q^T a [.., q, n]
    let v = be.alloc(name, &with(lead, &[n, q]), DType::F32)?;
    let s = be.alloc(name, &with(lead, &[q]), DType::F32)?;
    let ub = be.alloc(name, &with(lead, &[q, q]), DType::F32)?;
    let p = Params::u(&[
        u32_of(name, "batch", batch)?,
        u32_of(name, "q", q)?,
        u32_of(name, "n", n)?,
    ]);
    be.launch(
        name,
        Family::Svd,
        "jacobi",
        &[],
        p,
        &[&b],
        &[&v, &s, &ub],
        be.grid_1d(batch as u64)?,
    )?;
    let u = matmul(be, name, &qm, &ub, false, false)?; // [.., m, q]
    let columns = batch * q;
    let p = Params::u(&[
        u32_of(name, "batch * q", columns)?,
        u32_of(name, "m", m)?,
        u32_of(name, "n", n)?,
        u32_of(name, "q", q)?,
    ]);
    be.launch(
        name,
        Family::Svd,
        "fix_signs",
        &[],
        p,
        &[],
        &[&u, &v],
        be.grid_1d(columns as u64)?,
    )?;
    Ok(vec![u, s, v])
}
