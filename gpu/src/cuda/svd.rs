//! The svd_lowrank hooks on CUDA: the small steps on the host with the CPU reference's own
//! helpers (the products with `a` stay cuBLAS SGEMMs in the op layer's skeleton). A product
//! that holds a non-finite value is refused with `NonFinite`, as the reference refuses `a`.

use kernels_core::cpu::svd::{fix_signs as fix_signs_ref, jacobi_svd, orthonormalize_columns};
use kernels_core::{Backend, Error, Result, Tensor};

use super::CudaBackend;

/// Downloads a product with `a`, refusing non-finite values.
fn download_finite(be: &CudaBackend, name: &'static str, t: &Tensor) -> Result<Vec<f32>> {
    let v = be.download_blocking(t)?.as_f32()?.to_vec();
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

fn with(lead: &[usize], tail: &[usize]) -> Vec<usize> {
    lead.iter().chain(tail).copied().collect()
}

pub(super) fn orth(
    be: &CudaBackend,
    name: &'static str,
    y: &Tensor,
    _batch: usize,
    (rows, cols): (usize, usize),
) -> Result<Tensor> {
    let mut v = download_finite(be, name, y)?;
    for mat in v.chunks_exact_mut(rows * cols) {
        orthonormalize_columns(mat, rows, cols)?;
    }
    be.upload(&Tensor::from_f32(y.shape(), v)?)
}

pub(super) fn small(
    be: &CudaBackend,
    name: &'static str,
    b: &Tensor,
    lead: &[usize],
    q: usize,
    n: usize,
) -> Result<[Tensor; 3]> {
    let b = download_finite(be, name, b)?;
    let (mut ub, mut s, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for bm in b.chunks_exact(q * n) {
        let (u1, s1, v1) = jacobi_svd(bm, q, n)?;
        ub.extend(u1);
        s.extend(s1);
        v.extend(v1);
    }
    Ok([
        be.upload(&Tensor::from_f32(&with(lead, &[n, q]), v)?)?,
        be.upload(&Tensor::from_f32(&with(lead, &[q]), s)?)?,
        be.upload(&Tensor::from_f32(&with(lead, &[q, q]), ub)?)?,
    ])
}

pub(super) fn fix_signs(
    be: &CudaBackend,
    name: &'static str,
    u: Tensor,
    v: Tensor,
    lead: &[usize],
    (m, n, q): (usize, usize, usize),
) -> Result<[Tensor; 2]> {
    let mut u = download_finite(be, name, &u)?;
    let mut v = be.download_blocking(&v)?.as_f32()?.to_vec();
    for (um, vm) in u.chunks_exact_mut(m * q).zip(v.chunks_exact_mut(n * q)) {
        fix_signs_ref(um, q, vm);
    }
    Ok([
        be.upload(&Tensor::from_f32(&with(lead, &[m, q]), u)?)?,
        be.upload(&Tensor::from_f32(&with(lead, &[n, q]), v)?)?,
    ])
}
