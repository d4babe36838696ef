//! The matmul hook on CUDA: cuBLAS SGEMM (strided batched, transposes passed to cuBLAS instead
//! of copies), with `linear`'s fused work as elementwise kernels around it: the activation
//! derivative applied to `a` into a scratch copy before the product, the bias and activation
//! applied in place after it.

use kernels_core::{DType, Result};

use super::CudaBackend;
use super::engine::Gemm;
use crate::device::{Device, Family, Grid, Matmul, MatmulHook, Params, act_code, u32_of};

impl MatmulHook for CudaBackend {
    fn matmul(&self, name: &'static str, mm: &Matmul<'_>) -> Result<()> {
        let (a, offset_a, trans_a) = mm.a;
        let (b, offset_b, trans_b) = mm.b;
        let ((m, n, k), (stride_a, stride_b, batch)) = (mm.mnk, mm.steps_batch);
        let (out, fused, be) = (mm.out, mm.fused, self);
        let dev: &dyn Device = be;
        // g' = g * act'(y), laid out like `a`.
        let scaled;
        let a = match fused.a_dact {
            Some((gy, act)) => {
                let n_a = a.numel();
                scaled = be.alloc(name, a.shape(), DType::F32)?;
                dev.run_kernel(
                    name,
                    Family::Elementwise,
                    "linear_grad_pre",
                    &[("DACT", act_code(act))],
                    Params::u(&[u32_of(name, "elements", n_a)?]),
                    &[a, gy],
                    &[&scaled],
                    Grid::Elems(n_a),
                )?;
                &scaled
            }
            None => a,
        };
        let g = Gemm {
            m,
            n,
            k,
            trans_a,
            trans_b,
            batch,
            stride_a,
            stride_b,
            offset_a,
            offset_b,
            offset_c: 0,
        };
        be.gemm(name, &g, a, b, out)?;
        if let Some(bias) = fused.bias {
            let total = batch * m * n;
            let p = Params::u(&[
                u32_of(name, "elements", total)?,
                u32_of(name, "elements", n)?,
            ]);
            dev.run_kernel(
                name,
                Family::Elementwise,
                "linear_epilogue",
                &[("ACT", fused.act.map_or(0, act_code))],
                p,
                &[bias],
                &[out],
                Grid::Elems(total),
            )?;
        }
        Ok(())
    }
}
