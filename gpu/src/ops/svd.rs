//! svd_lowrank: the randomized range finder of the CPU reference, step for step on the same
//! `omega` (same seed, same RNG order), written once: the products with `a` (`a @ omega`,
//! `a^T Q`, `a Q`, `Q^T a`) and `Q @ u_b` are matmuls (batched, `omega` shared across the
//! batch); the small steps -- the tall-skinny orthonormalizations, the `q x n` Jacobi SVD and the
//! sign fix -- are the device's hooks (on the device on wgpu, so it runs in the browser with no
//! readback; on the host with the reference's own helpers on CUDA).

use kernels_core::{Error, Result, Tensor};

use super::matmul::matmul;
use crate::device::Device;

pub(super) fn forward(
    be: &dyn Device,
    name: &'static str,
    rank: usize,
    power_iters: usize,
    seed: u64,
    a: &Tensor,
) -> Result<Vec<Tensor>> {
    let shape = a.shape();
    let (m, n, q) = kernels_core::cpu::svd::check_attrs(rank, power_iters, shape)?;
    if q > be.svd_max_q() {
        return Err(Error::LimitExceeded {
            what: format!("{name}: rank on the GPU for a {shape:?} input"),
            value: q as u64,
            limit: be.svd_max_q() as u64,
        });
    }
    let omega = be.upload_host(&Tensor::from_f32(
        &[n, q],
        kernels_core::cpu::svd::gaussian_omega::<f32>(seed, n, q),
    )?)?;
    // Q [..., m, q] spans (approximately) the dominant range of a.
    let y = matmul(be, name, a, &omega, false, false)?;
    let mut qm = be.svd_orth(name, &y, (m, q))?;
    for _ in 0..power_iters {
        let z = matmul(be, name, a, &qm, true, false)?; // a^T Q [.., n, q]
        let z = be.svd_orth(name, &z, (n, q))?;
        let y = matmul(be, name, a, &z, false, false)?; // a Z [.., m, q]
        qm = be.svd_orth(name, &y, (m, q))?;
    }
    let b = matmul(be, name, &qm, a, true, false)?; // Q^T a [.., q, n]
    let [v, s, ub] = be.svd_small(name, &b)?;
    let u = matmul(be, name, &qm, &ub, false, false)?; // [.., m, q]
    let [u, v] = be.svd_fix_signs(name, [u, v])?;
    Ok(vec![u, s, v])
}
