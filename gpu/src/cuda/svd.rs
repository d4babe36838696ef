//! The svd_lowrank hooks on CUDA: the small steps on the host with the CPU reference's own
//! helpers (the products with `a` stay cuBLAS SGEMMs in the op layer's skeleton). A product
//! that holds a non-finite value is refused with `NonFinite`, as the reference refuses `a`.

use crate::shapes::{matrix_dims, with_lead};
use kernels_core::cpu::svd::{fix_signs as fix_signs_ref, jacobi_svd, orthonormalize_columns};
use kernels_core::{Backend, Error, Result, Tensor};

use super::CudaBackend;
use crate::device::SvdHook;

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

impl SvdHook for CudaBackend {
    fn svd_max_q(&self) -> usize {
        usize::MAX
    }

    fn svd_orth(&self, op: &'static str, y: &Tensor, rc: (usize, usize)) -> Result<Tensor> {
        let (name, (rows, cols)) = (op, rc);
        let mut v = download_finite(self, name, y)?;
        for m in v.chunks_exact_mut(rows * cols) {
            orthonormalize_columns(m, rows, cols)?;
        }
        self.upload(&Tensor::from_f32(y.shape(), v)?)
    }

    fn svd_small(&self, op: &'static str, b: &Tensor) -> Result<[Tensor; 3]> {
        let (name, lead) = (op, &b.shape()[..b.rank() - 2]);
        let (q, n) = matrix_dims(b.shape());
        let host = download_finite(self, name, b)?;
        let (mut ub, mut s, mut v) = (Vec::new(), Vec::new(), Vec::new());
        for bm in host.chunks_exact(q * n) {
            let (u1, s1, v1) = jacobi_svd(bm, q, n)?;
            ub.extend(u1);
            s.extend(s1);
            v.extend(v1);
        }
        Ok([
            self.upload(&Tensor::from_f32(&with_lead(lead, &[n, q]), v)?)?,
            self.upload(&Tensor::from_f32(&with_lead(lead, &[q]), s)?)?,
            self.upload(&Tensor::from_f32(&with_lead(lead, &[q, q]), ub)?)?,
        ])
    }

    fn svd_fix_signs(&self, op: &'static str, [u, v]: [Tensor; 2]) -> Result<[Tensor; 2]> {
        let name = op;
        let ((m, q), (n, _)) = (matrix_dims(u.shape()), matrix_dims(v.shape()));
        let mut uh = download_finite(self, name, &u)?;
        let mut vh = self.download_blocking(&v)?.as_f32()?.to_vec();
        for (um, vm) in uh.chunks_exact_mut(m * q).zip(vh.chunks_exact_mut(n * q)) {
            fix_signs_ref(um, q, vm);
        }
        Ok([
            self.upload(&Tensor::from_f32(u.shape(), uh)?)?,
            self.upload(&Tensor::from_f32(v.shape(), vh)?)?,
        ])
    }
}
