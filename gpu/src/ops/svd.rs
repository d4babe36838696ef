//! svd_lowrank on wgpu: the products with `a` (`a @ omega`, `a^T Q`, `a Q`, `Q^T a`) and
//! `Q @ u_b` run on the device with the matmul kernel (batched, `omega` shared across the
//! batch); the tall-skinny orthonormalizations, the small `q x n` SVD and the sign fix run on
//! the host with the CPU reference's own helpers, on the same `omega` (same seed, same RNG
//! order), so the result matches the reference within its budget.
//!
//! The host steps need blocking readbacks, so this op is native-only for now (in the browser it
//! returns `UnsupportedOnBackend`). Unlike the CPU reference, `a` is not pre-scaled by a power
//! of two (the scale is exact and cancels, it only guards against f32 overflow of squared
//! norms); non-finite products are reported as `NonFinite`.

use kernels_core::cpu::svd::{fix_signs, gaussian_omega, jacobi_svd, orthonormalize_columns};
use kernels_core::{Error, Result, Tensor};

use super::matmul;
use crate::shapes;
use crate::wgpu_backend::WgpuBackend;

#[cfg(target_arch = "wasm32")]
fn download(be: &WgpuBackend, name: &'static str, _t: &Tensor) -> Result<Vec<f32>> {
    use kernels_core::Backend;
    Err(Error::UnsupportedOnBackend {
        op: name,
        backend: be.name(),
    })
}

#[cfg(not(target_arch = "wasm32"))]
fn download(be: &WgpuBackend, name: &'static str, t: &Tensor) -> Result<Vec<f32>> {
    let host = be.download_blocking(t)?;
    let v = host.as_f32()?.to_vec();
    if let Some((index, &value)) = v.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(Error::NonFinite {
            op: name,
            tensor: "a (a product with a)".into(),
            index,
            value: f64::from(value),
        });
    }
    Ok(v)
}

fn upload(be: &WgpuBackend, shape: &[usize], v: Vec<f32>) -> Result<Tensor> {
    use kernels_core::Backend;
    be.upload(&Tensor::from_f32(shape, v)?)
}

fn with(lead: &[usize], tail: &[usize]) -> Vec<usize> {
    lead.iter().chain(tail).copied().collect()
}

/// Downloads `y [..., rows, cols]`, orthonormalizes the columns of each matrix, uploads.
fn orth(
    be: &WgpuBackend,
    name: &'static str,
    y: &Tensor,
    rows: usize,
    cols: usize,
) -> Result<Tensor> {
    let mut v = download(be, name, y)?;
    for mat in v.chunks_exact_mut(rows * cols) {
        orthonormalize_columns(mat, rows, cols)?;
    }
    upload(be, y.shape(), v)
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
    let omega = upload(be, &[n, q], gaussian_omega::<f32>(seed, n, q))?;
    // Q [..., m, q] spans (approximately) the dominant range of a.
    let mut qm = orth(be, name, &matmul(be, name, a, &omega, false, false)?, m, q)?;
    for _ in 0..power_iters {
        let z = orth(be, name, &matmul(be, name, a, &qm, true, false)?, n, q)?; // a^T Q
        qm = orth(be, name, &matmul(be, name, a, &z, false, false)?, m, q)?; // a Z
    }
    let b = download(be, name, &matmul(be, name, &qm, a, true, false)?)?; // Q^T a [.., q, n]
    let (mut ub, mut s, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for bm in b.chunks_exact(q * n) {
        let (u1, s1, v1) = jacobi_svd(bm, q, n)?;
        ub.extend(u1);
        s.extend(s1);
        v.extend(v1);
    }
    let ub = upload(be, &with(lead, &[q, q]), ub)?;
    let mut u = download(be, name, &matmul(be, name, &qm, &ub, false, false)?)?; // [.., m, q]
    for (um, vm) in u.chunks_exact_mut(m * q).zip(v.chunks_exact_mut(n * q)) {
        fix_signs(um, q, vm);
    }
    Ok(vec![
        upload(be, &with(lead, &[m, q]), u)?,
        upload(be, &with(lead, &[q]), s)?,
        upload(be, &with(lead, &[n, q]), v)?,
    ])
}
