//! Vectorized forward paths for the non-GEMM ops of a transformer layer: `exp`, `sigmoid`,
//! `silu`, `swiglu`, `softmax` / `log_softmax`, `rms_norm`, `layer_norm`, `rope` and `attention`
//! (decode and prefill, grouped-query heads).
//!
//! Each kernel is written once over the `simd::Simd` vocabulary and compiled for AVX-512F,
//! AVX2 + FMA, wasm `simd128` and plain Rust; [`Isa::selected`] picks one at run time (`std`)
//! and `KERNELS_CPU_KERNEL=portable|avx2|avx512` caps it. Arguments are validated with the
//! reference's own checks, in the reference's order, so errors are identical; results stay
//! within each op's published budget of the reference (see the tests). Backward passes stay on
//! the reference.

mod attention;
pub(crate) mod common;
pub(crate) mod math;
mod ops;
mod rope_tables;
pub(crate) mod simd;
#[cfg(test)]
mod tests;

use alloc::vec::Vec;

use self::common::{Act, with_simd};

use super::isa::Isa;
use crate::cpu::{Owned, View, rope as rope_ref};
use crate::error::Result;
use crate::op::{Direction, Op, UnaryOp};

/// [`forward_with`] on the selected instruction set.
pub fn forward(op: &Op, args: &[View<f32>]) -> Option<Result<Vec<Owned<f32>>>> {
    forward_with(Isa::selected(), op, args)
}

/// The forward of `op` on `isa` (or the portable path when the CPU lacks it), or `None` when
/// `op` has no vector path here. Checks arity, dtypes and shapes as the reference does first.
pub fn forward_with(isa: Isa, op: &Op, args: &[View<f32>]) -> Option<Result<Vec<Owned<f32>>>> {
    let checked = || crate::cpu::check_args(op, Direction::Forward, args);
    let r = match *op {
        Op::Unary(u) => {
            let act = match u {
                UnaryOp::Exp => Act::Exp,
                UnaryOp::Sigmoid => Act::Sigmoid,
                UnaryOp::Silu => Act::Silu,
                UnaryOp::Neg | UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Relu | UnaryOp::Tanh => {
                    return None;
                }
            };
            checked().and_then(|()| ops::unary(isa, u, act, args))
        }
        Op::Swiglu => checked().and_then(|()| ops::swiglu(isa, args)),
        Op::Softmax { causal } => checked().and_then(|()| ops::softmax(isa, false, causal, args)),
        Op::LogSoftmax { causal } => checked().and_then(|()| ops::softmax(isa, true, causal, args)),
        Op::RmsNorm { eps } => checked().and_then(|()| ops::rms_norm(isa, eps, args)),
        Op::LayerNorm { eps } => checked().and_then(|()| ops::layer_norm(isa, eps, args)),
        Op::Rope {
            theta,
            offset,
            interleaved,
            scaling,
            factor,
            low,
            high,
            original_context,
        } => {
            let freqs = rope_ref::Freqs {
                theta,
                scaling,
                factor,
                low,
                high,
                original_context,
            };
            checked().and_then(|()| ops::rope(isa, &freqs, offset, interleaved, args))
        }
        Op::Attention {
            causal,
            scale,
            kv_len,
            window,
        } => checked().and_then(|()| attention::forward(isa, causal, scale, kv_len, window, args)),
        _ => return None,
    };
    Some(r)
}

/// `exp` on `x` with the vector kernel of `isa` (for benchmarks and tests).
pub fn exp_slice(isa: Isa, x: &[f32], out: &mut [f32]) {
    with_simd!(isa, s => math::map(s, x, out, |v| math::exp(s, v)));
}
