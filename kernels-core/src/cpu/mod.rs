//! CPU reference kernels, forward and backward, one file per op family.
//!
//! Every kernel is generic over [`Real`], reads borrowed [`View`]s and returns [`Owned`]
//! results, so the same code runs on `f32` tensors (the reference) and on `f64` buffers (the
//! finite-difference gradient checks). [`run`] is the single entry point: it checks arity and
//! dtypes against the op's spec, then dispatches with an exhaustive `match`.
//!
//! A fast f32 path for matmul lives in [`fast`], beside the reference and tested against it.

use alloc::format;
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::{Direction, Op};
use crate::tensor::numel;

mod args;
pub mod attention;
pub mod elementwise;
pub mod embedding;
pub mod fast;
pub mod gru;
pub mod layout;
pub mod linear;
pub mod loss;
pub mod matmul;
pub mod matmul_swiglu;
pub mod norm;
pub mod optim;
pub mod reduce;
pub mod rope;
pub mod rope_kv_write;
pub mod sample;
pub mod softmax;
pub mod svd;
#[cfg(test)]
pub(crate) mod testutil;

pub use args::{
    Data, Owned, OwnedData, View, float_arg, int_arg, min_rank, non_empty, rows_last, same_shape,
};

fn check_args<T: Real>(op: &Op, dir: Direction, args: &[View<T>]) -> Result<()> {
    op.check_dtypes(dir, args.iter().map(View::dtype))?;
    for (i, arg) in args.iter().enumerate() {
        if numel(arg.shape) != Some(arg.len()) {
            return Err(Error::bad_shape(
                op.name(),
                &op.kind().arg_name(dir, i).unwrap_or_default(),
                arg.shape,
                format!("shape does not match {} elements", arg.len()),
            ));
        }
    }
    Ok(())
}

/// Runs one op in one direction with the reference kernels.
///
/// Forward: `args` are the op's inputs. Backward: `inputs ++ outputs ++ grad_outputs`; returns
/// one gradient per differentiable input (see [`crate::op`]).
pub fn run<T: Real>(op: &Op, dir: Direction, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    check_args(op, dir, args)?;
    use Direction::{Backward as B, Forward as F};
    match (*op, dir) {
        (Op::Matmul { trans_a, trans_b }, F) => matmul::forward(trans_a, trans_b, args),
        (Op::Matmul { trans_a, trans_b }, B) => matmul::backward(trans_a, trans_b, args),
        (Op::MatmulAdd { trans_a, trans_b }, F) => {
            matmul::add_forward_with(args, |p| matmul::forward(trans_a, trans_b, p))
        }
        (Op::MatmulAdd { trans_a, trans_b }, B) => {
            matmul::add_backward_with(args, |p| matmul::backward(trans_a, trans_b, p))
        }
        (Op::MatmulSwiglu, F) => matmul_swiglu::forward(args),
        (Op::MatmulSwiglu, B) => matmul_swiglu::backward(args),
        (Op::Linear { activation }, F) => linear::forward(activation, args),
        (Op::Linear { activation }, B) => linear::backward(activation, args),
        (Op::Binary(b), F) => elementwise::binary_forward(b, args),
        (Op::Binary(b), B) => elementwise::binary_backward(b, args),
        (Op::Scale { factor }, F) => elementwise::scale_forward(factor, args),
        (Op::Scale { factor }, B) => elementwise::scale_backward(factor, args),
        (Op::Unary(u), F) => elementwise::unary_forward(u, args),
        (Op::Unary(u), B) => elementwise::unary_backward(u, args),
        (Op::Gelu { approximate }, F) => elementwise::gelu_forward(approximate, args),
        (Op::Gelu { approximate }, B) => elementwise::gelu_backward(approximate, args),
        (Op::Swiglu, F) => elementwise::swiglu_forward(args),
        (Op::Swiglu, B) => elementwise::swiglu_backward(args),
        (Op::Softmax { causal }, F) => softmax::forward(false, causal, args),
        (Op::Softmax { causal }, B) => softmax::backward(false, causal, args),
        (Op::LogSoftmax { causal }, F) => softmax::forward(true, causal, args),
        (Op::LogSoftmax { causal }, B) => softmax::backward(true, causal, args),
        (Op::LayerNorm { eps }, F) => norm::layer_norm_forward(eps, args),
        (Op::LayerNorm { eps }, B) => norm::layer_norm_backward(eps, args),
        (Op::RmsNorm { eps }, F) => norm::rms_norm_forward(eps, args),
        (Op::RmsNorm { eps }, B) => norm::rms_norm_backward(eps, args),
        (Op::Rope { .. } | Op::RopeKvWrite { .. }, dir) => {
            let Some((freqs, first, interleaved)) = op.rotation() else {
                return Err(Error::UnknownOp {
                    name: op.name().into(),
                });
            };
            match (op, dir) {
                (Op::Rope { .. }, F) => rope::forward(&freqs, first, interleaved, args),
                (Op::Rope { .. }, B) => rope::backward(&freqs, first, interleaved, args),
                (_, F) => rope_kv_write::forward(&freqs, first, interleaved, args),
                (_, B) => rope_kv_write::backward(&freqs, first, interleaved, args),
            }
        }
        (Op::Embedding, F) => embedding::forward(args),
        (Op::Embedding, B) => embedding::backward(args),
        (Op::Reduce(r), F) => reduce::forward(r, args),
        (Op::Reduce(r), B) => reduce::backward(r, args),
        (Op::Argmax, F) => reduce::argmax(args),
        (Op::Dequantize, F) => layout::dequantize_forward(args),
        (
            Op::Sample {
                temperature,
                top_k,
                top_p,
            },
            F,
        ) => sample::forward(temperature, top_k, top_p, args),
        (Op::Transpose, F) => layout::transpose_forward(args),
        (Op::Transpose, B) => layout::transpose_backward(args),
        (Op::Concat, F) => layout::concat_forward(args),
        (Op::Concat, B) => layout::concat_backward(args),
        (Op::KvWrite { pos }, F) => layout::kv_write_forward(pos, args),
        (Op::KvWrite { pos }, B) => layout::kv_write_backward(pos, args),
        (
            Op::Attention {
                causal,
                scale,
                kv_len,
                window,
            },
            F,
        ) => attention::forward(causal, scale, kv_len, window, args),
        (
            Op::Attention {
                causal,
                scale,
                kv_len,
                window,
            },
            B,
        ) => attention::backward(causal, scale, kv_len, window, args),
        (Op::GruCell, F) => gru::cell_forward(args),
        (Op::GruCell, B) => gru::cell_backward(args),
        (Op::GruSequence, F) => gru::sequence_forward(args),
        (Op::GruSequence, B) => gru::sequence_backward(args),
        (Op::GruEnsemble, F) => gru::ensemble_forward(args),
        (Op::GruEnsemble, B) => gru::ensemble_backward(args),
        (Op::CrossEntropy, F) => loss::cross_entropy_forward(args),
        (Op::CrossEntropy, B) => loss::cross_entropy_backward(args),
        (Op::Mse, F) => loss::mse_forward(args),
        (Op::Mse, B) => loss::mse_backward(args),
        (
            Op::SvdLowrank {
                rank,
                power_iters,
                seed,
            },
            F,
        ) => svd::svd_lowrank(rank, power_iters, seed, args),
        (
            Op::AdamwStep {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
                step,
            },
            F,
        ) => optim::adamw_step(lr, beta1, beta2, eps, weight_decay, step, args),
        (
            Op::SgdStep {
                lr,
                momentum,
                weight_decay,
                nesterov,
            },
            F,
        ) => optim::sgd_step(lr, momentum, weight_decay, nesterov, args),
        // Non-differentiable ops: rejected by `check_args` above.
        (
            Op::Argmax
            | Op::Dequantize
            | Op::Sample { .. }
            | Op::SvdLowrank { .. }
            | Op::AdamwStep { .. }
            | Op::SgdStep { .. },
            B,
        ) => Err(Error::NoBackward { op: op.name() }),
    }
}
