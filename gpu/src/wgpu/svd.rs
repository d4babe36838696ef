//! The svd_lowrank hooks on wgpu (`shaders/svd.wgsl`): the tall-skinny orthonormalizations, the
//! `q x n` Jacobi SVD and the sign fix on the device, one workgroup per matrix, following the
//! CPU reference step for step (the op layer's svd_lowrank holds the skeleton), so the op needs no readback and runs in
//! the browser too.
//!
//! Differences from the reference, both documented in the op table: `a` is not pre-scaled by a
//! power of two (the scale is exact and cancels; it only guards f32 squared norms against
//! overflow for entries near 1e19), and a non-finite `a`, which the reference refuses with
//! `NonFinite`, gives NaN outputs, because refusing would need a readback (the CLI checks its
//! inputs on the host first, so `kernels op` still refuses it).

use kernels_core::{DType, Result, Tensor};

use super::WgpuBackend;
use crate::device::{Device, Family, Grid, Params, SvdHook, u32_of};

/// Largest `q = min(rank, m, n)` the device Jacobi step keeps per-vector state for
/// (`MAX_Q` in the shader).
pub const MAX_Q: usize = 256;

/// The last two dims of a tensor of the op (rank >= 2 by construction).
fn mat(t: &Tensor) -> (usize, usize) {
    let s = t.shape();
    (s[s.len() - 2], s[s.len() - 1])
}

fn with(lead: &[usize], tail: &[usize]) -> Vec<usize> {
    lead.iter().chain(tail).copied().collect()
}

impl SvdHook for WgpuBackend {
    fn svd_max_q(&self) -> usize {
        MAX_Q
    }

    /// In place: `y` is a fresh tensor of the op.
    fn svd_orth(
        &self,
        name: &'static str,
        y: &Tensor,
        (rows, cols): (usize, usize),
    ) -> Result<Tensor> {
        let be: &dyn Device = self;
        let batch = y.numel() / (rows * cols).max(1);
        let p = Params::u(&[
            u32_of(name, "batch", batch)?,
            u32_of(name, "rows", rows)?,
            u32_of(name, "cols", cols)?,
        ]);
        be.run_kernel(
            name,
            Family::Svd,
            "orth_columns",
            &[],
            p,
            &[],
            &[y],
            Grid::Groups(batch),
        )?;
        Ok(y.clone())
    }

    fn svd_small(&self, name: &'static str, b: &Tensor, lead: &[usize]) -> Result<[Tensor; 3]> {
        let be: &dyn Device = self;
        let (q, n) = mat(b);
        let batch: usize = lead.iter().product();
        let v = be.alloc(name, &with(lead, &[n, q]), DType::F32)?;
        let s = be.alloc(name, &with(lead, &[q]), DType::F32)?;
        let ub = be.alloc(name, &with(lead, &[q, q]), DType::F32)?;
        let p = Params::u(&[
            u32_of(name, "batch", batch)?,
            u32_of(name, "q", q)?,
            u32_of(name, "n", n)?,
        ]);
        let outs = [&v, &s, &ub];
        be.run_kernel(
            name,
            Family::Svd,
            "jacobi",
            &[],
            p,
            &[b],
            &outs,
            Grid::Groups(batch),
        )?;
        Ok([v, s, ub])
    }

    fn svd_fix_signs(
        &self,
        name: &'static str,
        [u, v]: [Tensor; 2],
        lead: &[usize],
    ) -> Result<[Tensor; 2]> {
        let be: &dyn Device = self;
        let ((m, q), (n, _)) = (mat(&u), mat(&v));
        let columns = lead.iter().product::<usize>() * q;
        let p = Params::u(&[
            u32_of(name, "batch * q", columns)?,
            u32_of(name, "m", m)?,
            u32_of(name, "n", n)?,
            u32_of(name, "q", q)?,
        ]);
        let outs = [&u, &v];
        be.run_kernel(
            name,
            Family::Svd,
            "fix_signs",
            &[],
            p,
            &[],
            &outs,
            Grid::Groups(columns),
        )?;
        Ok([u, v])
    }
}
