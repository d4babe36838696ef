//! The matmul hook on CUDA: cuBLAS SGEMM (strided batched, transposes passed to cuBLAS instead
//! of copies), with `linear`'s fused work as elementwise kernels around it: the bias and
//! activation applied in place after the product, and the activation derivative made once for
//! the backward's two products (`activation_grad`).

use kernels_core::op::Activation;
use kernels_core::{DType, Error, Result, Tensor};

use super::CudaBackend;
use super::engine::Gemm;
use crate::device::{Device, Family, Grid, Matmul, MatmulHook, act_code, u32_of};
use crate::params::{ElemsParams, EpilogueParams};

impl MatmulHook for CudaBackend {
    fn matmul(&self, name: &'static str, mm: &Matmul<'_>) -> Result<()> {
        let (a, offset_a, trans_a) = mm.a;
        let (b, offset_b, trans_b) = mm.b;
        let ((m, n, k), (stride_a, stride_b, batch)) = (mm.mnk, mm.steps_batch);
        let (out, fused, be) = (mm.out, mm.fused, self);
        let dev: &dyn Device = be;
        if mm.a_range.is_some() || mm.b_range.is_some() || mm.out_at.is_some() {
            // Only products split over storage bindings ask for these; one CUDA binding holds
            // any tensor (`chunk_elems` is unbounded), so none is ever split here.
            return Err(Error::Backend {
                backend: "cuda".into(),
                why: format!("{name}: a product split over bindings reached cuBLAS"),
            });
        }
        if fused.accumulate
            && (fused.bias.is_some() || fused.act.is_some_and(|a| a != Activation::None))
        {
            return Err(Error::Backend {
                backend: "cuda".into(),
                why: format!(
                    "{name}: a product accumulated into its output with a bias or activation"
                ),
            });
        }
        if fused.a_dact.is_some() {
            // The op layer asks `activation_grad` first and passes the scaled operand.
            return Err(Error::Backend {
                backend: "cuda".into(),
                why: format!("{name}: a fused activation gradient reached cuBLAS"),
            });
        }
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
            accumulate: fused.accumulate,
        };
        be.gemm(name, &g, a, b, out)?;
        if let Some(bias) = fused.bias {
            let total = batch * m * n;
            let p = EpilogueParams {
                n: u32_of(name, "elements", total)?,
                cols: u32_of(name, "elements", n)?,
            };
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

    /// cuBLAS cannot scale an operand as it loads: `g * act'(y)` once, for both products.
    fn activation_grad(
        &self,
        name: &'static str,
        g: &Tensor,
        y: &Tensor,
        act: Activation,
    ) -> Result<Option<Tensor>> {
        let dev: &dyn Device = self;
        let n = g.numel();
        let scaled = dev.alloc(name, g.shape(), DType::F32)?;
        dev.run_kernel(
            name,
            Family::Elementwise,
            "linear_grad_pre",
            &[("DACT", act_code(act))],
            ElemsParams {
                n: u32_of(name, "elements", n)?,
            },
            &[g, y],
            &[&scaled],
            Grid::Elems(n),
        )?;
        Ok(Some(scaled))
    }
}
