//! The matmul hook on CUDA: cuBLAS SGEMM (strided batched, transposes passed to cuBLAS instead
//! of copies), or with half products on, a 16-bit GEMM for a weight operand (the other rounded
//! to its format by `to_half`, a packed one decoded to f16), with `linear`'s fused work as
//! elementwise kernels around it: the bias and activation applied in place after the product,
//! and the activation derivative made once for the backward's two products
//! (`activation_grad`).

use kernels_core::op::Activation;
use kernels_core::{DType, Error, Result, Tensor};

use super::CudaBackend;
use super::engine::{Gemm, GemmInputs};
use crate::device::{Device, Family, Grid, Matmul, MatmulHook, act_code, u32_of, weight_code};
use crate::params::{ElemsParams, EpilogueParams, ToHalfParams};

/// The 16-bit format a product with these operand dtypes runs in under half products, as the
/// operands' dtype and the GEMM's inputs: `None` for two f32 operands (SGEMM); bf16 when every
/// weight operand is bf16, else f16.
pub(crate) fn half_format(a: DType, b: DType) -> Option<(DType, GemmInputs)> {
    let weights = || [a, b].into_iter().filter(|d| d.is_weight());
    if weights().next().is_none() {
        None
    } else if weights().all(|d| d == DType::BF16) {
        Some((DType::BF16, GemmInputs::BF16))
    } else {
        Some((DType::F16, GemmInputs::F16))
    }
}

impl CudaBackend {
    /// `t` in the 16-bit `dtype` (f16 or bf16): as it is when it already is, else rounded
    /// (f32) or decoded and rounded (other weight dtypes) by `to_half` into a fresh tensor.
    pub(crate) fn half_operand(
        &self,
        name: &'static str,
        t: &Tensor,
        dtype: DType,
    ) -> Result<Tensor> {
        if t.dtype() == dtype {
            return Ok(t.clone());
        }
        let dev: &dyn Device = self;
        let out = dev.alloc(name, t.shape(), dtype)?;
        let n = t.numel();
        let p = ToHalfParams {
            n: u32_of(name, "elements", n)?,
            source: weight_code(t.dtype()),
            bf16: u32::from(dtype == DType::BF16),
        };
        // f32 is read from the first slot, a packed tensor from the third (as `dequantize`).
        dev.run_kernel(
            name,
            Family::Quant,
            "to_half",
            &[],
            p,
            &[t, t, t],
            &[&out],
            Grid::Elems(n.div_ceil(2)),
        )?;
        Ok(out)
    }
}

impl MatmulHook for CudaBackend {
    fn takes_packed_operands(&self) -> bool {
        self.half_products
    }

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
        let (half_a, half_b);
        let (a, b, inputs) = match half_format(a.dtype(), b.dtype()) {
            None => (a, b, GemmInputs::F32),
            Some(_) if !be.half_products => {
                return Err(Error::Backend {
                    backend: "cuda".into(),
                    why: format!(
                        "{name}: a {} x {} product reached cuBLAS without half products",
                        a.dtype(),
                        b.dtype()
                    ),
                });
            }
            Some((dtype, inputs)) => {
                half_a = be.half_operand(name, a, dtype)?;
                half_b = be.half_operand(name, b, dtype)?;
                (&half_a, &half_b, inputs)
            }
        };
        let g = Gemm {
            inputs,
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
