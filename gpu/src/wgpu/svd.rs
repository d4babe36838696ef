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

use crate::shapes::{matrix_dims, with_lead};
use kernels_core::{DType, Result, Tensor};

use super::WgpuBackend;
use crate::device::{Device, Family, Grid, SvdHook, u32_of};
use crate::params::{FixSignsParams, JacobiParams, OrthParams};

impl SvdHook for WgpuBackend {
    fn svd_max_q(&self) -> usize {
        super::SVD_MAX_Q
    }

    /// In place: `y` is a fresh tensor of the op.
    fn svd_orth(&self, op: &'static str, y: &Tensor, rc: (usize, usize)) -> Result<Tensor> {
        let (name, (rows, cols)) = (op, rc);
        let be: &dyn Device = self;
        let batch = y.numel() / (rows * cols).max(1);
        let p = OrthParams {
            batch: u32_of(name, "batch", batch)?,
            rows: u32_of(name, "rows", rows)?,
            cols: u32_of(name, "cols", cols)?,
        };
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

    fn svd_small(&self, op: &'static str, b: &Tensor) -> Result<[Tensor; 3]> {
        let (name, lead) = (op, &b.shape()[..b.rank() - 2]);
        let be: &dyn Device = self;
        let (q, n) = matrix_dims(b.shape());
        let batch: usize = lead.iter().product();
        let v = be.alloc(name, &with_lead(lead, &[n, q]), DType::F32)?;
        let s = be.alloc(name, &with_lead(lead, &[q]), DType::F32)?;
        let ub = be.alloc(name, &with_lead(lead, &[q, q]), DType::F32)?;
        let p = JacobiParams {
            batch: u32_of(name, "batch", batch)?,
            q: u32_of(name, "q", q)?,
            n: u32_of(name, "n", n)?,
        };
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

    fn svd_fix_signs(&self, op: &'static str, [u, v]: [Tensor; 2]) -> Result<[Tensor; 2]> {
        let (name, lead) = (op, &u.shape()[..u.rank() - 2]);
        let be: &dyn Device = self;
        let ((m, q), (n, _)) = (matrix_dims(u.shape()), matrix_dims(v.shape()));
        let columns = lead.iter().product::<usize>() * q;
        let p = FixSignsParams {
            columns: u32_of(name, "batch * q", columns)?,
            m: u32_of(name, "m", m)?,
            n: u32_of(name, "n", n)?,
            q: u32_of(name, "q", q)?,
        };
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
