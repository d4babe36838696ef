//! The GPU op layer: each op family's glue (shape checks, parameter packing, backward
//! composition, host steps) written once against [`Device`], for wgpu and CUDA alike, and an
//! exhaustive `match` over the op vocabulary (a new op is a compile error here until handled).

use kernels_core::op::{Activation, Direction, Op};
use kernels_core::{DType, Error, Result, Tensor};

use crate::device::Device;
use crate::params::{AdamwParams, SgdParams};
use crate::shapes;

mod attention;
mod common;
mod elementwise;
mod gru;
mod layout;
mod loss;
mod matmul;
mod optim;
pub(crate) mod quant;
mod rope;
mod rows;
mod split;
mod svd;

use crate::device::{SCALE_CODE, gelu_code, unary_code};
pub(crate) use attention::consts as attention_consts;
pub(crate) use attention::params as attention_params;
use common::arg;
use elementwise::{binary_backward, binary_forward, swiglu, unary};
use layout::{concat, concat_backward, embedding, embedding_backward, transpose, transposed_shape};
use matmul::{linear_backward, linear_forward, matmul_backward};
use optim::optim;
use rows::{argmax, norm_backward, norm_forward, reduce, sample, softmax};

/// [`kernels_core::Backend::run_donated`] on a device: `kv_write` into a donated cache whose
/// buffer no other tensor holds is written in place (one launch over the new rows, and the
/// result is the donated tensor), `rope_kv_write` likewise into its two caches (one launch),
/// and `matmul_add` accumulates its product into such a residual (the product's own launches,
/// nothing more); everything else is [`run`].
pub(crate) fn run_donated(
    be: &dyn Device,
    op: &Op,
    mut donated: Vec<Tensor>,
    rest: &[&Tensor],
) -> Result<Vec<Tensor>> {
    if let (Op::RopeKvWrite { .. }, [qkv], [k, v]) = (op, rest, &mut donated[..]) {
        op.check_signature(Direction::Forward, &[k.dtype(), v.dtype(), qkv.dtype()])?;
        let in_place = k.storage_is_unique() && v.storage_is_unique();
        return rope_kv_write(be, op, Direction::Forward, &[k, v, qkv], in_place);
    }
    let [mut donated] = <[Tensor; 1]>::try_from(donated).map_err(|d| Error::Arity {
        op: op.name(),
        expected: op.kind().donated_inputs(),
        got: d.len(),
    })?;
    if let (Op::KvWrite { pos }, [rows]) = (op, rest)
        && donated.storage_is_unique()
    {
        op.check_signature(Direction::Forward, &[donated.dtype(), rows.dtype()])?;
        layout::kv_write_in_place(be, op.name(), *pos, &donated, rows)?;
        return Ok(vec![donated]);
    }
    if let (Op::MatmulAdd { trans_a, trans_b }, [a, b]) = (op, rest)
        && donated.storage_is_unique()
    {
        op.check_signature(Direction::Forward, &[donated.dtype(), a.dtype(), b.dtype()])?;
        product(be, op.name(), (a, *trans_a), (b, *trans_b), Some(&donated))?;
        return Ok(vec![donated]);
    }
    let mut all: Vec<&Tensor> = Vec::with_capacity(rest.len() + 1);
    all.push(&donated);
    all.extend_from_slice(rest);
    run(be, op, Direction::Forward, &all)
}

/// `matmul` and `linear` forward with a 2-D weight operand too large for one binding, in row
/// blocks of the weight ([`split::product`]); `None` for every other case.
fn split_product(
    be: &dyn Device,
    name: &'static str,
    op: &Op,
    args: &[&Tensor],
    acc: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    match (*op, args) {
        (Op::Matmul { trans_a, trans_b }, [a, b]) => {
            let d = shapes::matmul(name, a.shape(), b.shape(), trans_a, trans_b)?;
            split::product(
                be,
                name,
                (a, trans_a),
                (b, trans_b),
                &d,
                None,
                Activation::None,
                acc,
            )
        }
        (Op::Linear { activation }, [x, w, bias]) => {
            let (rows, in_f, out_f) =
                kernels_core::cpu::linear::check(x.shape(), w.shape(), bias.shape())?;
            let d = kernels_core::cpu::matmul::MatmulShape {
                m: rows,
                k: in_f,
                n: out_f,
                batch: 1,
                a_step: 0,
                b_step: 0,
                out_shape: kernels_core::cpu::linear::out_shape(x.shape(), out_f),
            };
            split::product(
                be,
                name,
                (x, false),
                (w, true),
                &d,
                Some(bias),
                activation,
                acc,
            )
        }
        _ => Ok(None),
    }
}

/// `op(a) @ op(b)` on the path `matmul` forward takes for these operands (decode's packed
/// `matvec`, a weight split over bindings, the packed weight handed to the device's matmul
/// where it takes one, a decoded weight, the tiled matmul), into a fresh tensor or added into
/// `acc`.
fn product(
    be: &dyn Device,
    name: &'static str,
    (a, trans_a): (&Tensor, bool),
    (b, trans_b): (&Tensor, bool),
    acc: Option<&Tensor>,
) -> Result<Tensor> {
    let op = Op::Matmul { trans_a, trans_b };
    let args = [a, b];
    if a.dtype().is_weight() || b.dtype().is_weight() {
        if let Some(out) = quant::matvec(be, name, &op, &args, acc)? {
            return Ok(out);
        }
        if let Some(out) = split_product(be, name, &op, &args, acc)? {
            return Ok(out);
        }
        if be.takes_packed_operands() {
            return matmul::matmul_into(be, name, (a, trans_a), (b, trans_b), acc);
        }
        let (a, b) = (
            quant::dequantize(be, name, a)?,
            quant::dequantize(be, name, b)?,
        );
        return product(be, name, (&a, trans_a), (&b, trans_b), acc);
    }
    // Decode's f32 products, on devices that read W a row per workgroup (`Device::f32_matvec`).
    if let Some(out) = quant::matvec(be, name, &op, &args, acc)? {
        return Ok(out);
    }
    if let Some(out) = split_product(be, name, &op, &args, acc)? {
        return Ok(out);
    }
    matmul::matmul_into(be, name, (a, trans_a), (b, trans_b), acc)
}

/// `matmul_add` out of place: the product, then `residual + product` (in place, the product is
/// added into the donated residual: [`run_donated`]); backward: the residual's gradient is the
/// output's, the operands' are matmul's.
fn matmul_add(
    be: &dyn Device,
    name: &'static str,
    (trans_a, trans_b): (bool, bool),
    dir: Direction,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let residual = common::arg(args, 0);
    match dir {
        Direction::Forward => {
            let p = product(
                be,
                name,
                (arg(args, 1), trans_a),
                (arg(args, 2), trans_b),
                None,
            )?;
            shapes::same(name, residual.shape(), p.shape())?;
            let add = kernels_core::op::BinaryOp::Add;
            Ok(vec![binary_forward(be, name, add, &[residual, &p])?])
        }
        Direction::Backward => {
            let g = arg(args, 4);
            shapes::same(name, residual.shape(), g.shape())?;
            let (a, b) = (arg(args, 1), arg(args, 2));
            let decoded = quant::decoded(be, name, &[a, b])?;
            let mut grads = vec![g.clone()];
            let rest = [&decoded[0], &decoded[1], arg(args, 3), g];
            grads.extend(matmul_backward(be, name, &rest, trans_a, trans_b)?);
            Ok(grads)
        }
    }
}

/// `rope_kv_write` in either direction (`in_place`: forward into the caches themselves).
fn rope_kv_write(
    be: &dyn Device,
    op: &Op,
    dir: Direction,
    args: &[&Tensor],
    in_place: bool,
) -> Result<Vec<Tensor>> {
    let (Op::RopeKvWrite { .. }, Some((freqs, pos, interleaved))) = (op, op.rotation()) else {
        return Err(Error::UnknownOp {
            name: op.name().into(),
        });
    };
    let name = op.name();
    let how = (&freqs, pos, interleaved);
    match dir {
        Direction::Forward => {
            let caches = [arg(args, 0), arg(args, 1)];
            rope::kv_write_forward(be, name, how, caches, arg(args, 2), in_place)
        }
        Direction::Backward => rope::kv_write_backward(be, name, how, args),
    }
}

/// Runs one op (arity, dtypes and shapes checked first).
pub(crate) fn run(
    be: &dyn Device,
    op: &Op,
    dir: Direction,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let dtypes: Vec<DType> = args.iter().map(|t| t.dtype()).collect();
    op.check_signature(dir, &dtypes)?;
    use Direction::{Backward as B, Forward as F};
    let name = op.name();
    // The products take one path whatever their operands (`product`: packed `matvec`, split
    // weights, decoded weights, the tiled matmul), shared by matmul and matmul_add.
    match (*op, dir) {
        (Op::Matmul { trans_a, trans_b }, F) => {
            let (a, b) = ((arg(args, 0), trans_a), (arg(args, 1), trans_b));
            return Ok(vec![product(be, name, a, b, None)?]);
        }
        (Op::MatmulAdd { trans_a, trans_b }, d) => {
            return matmul_add(be, name, (trans_a, trans_b), d, args);
        }
        (Op::MatmulSwiglu, d) => return matmul::swiglu(be, name, d, args),
        _ => {}
    }
    // Weight dtypes: decoded where an op reads them (the signature check let them only into
    // weight slots); `embedding` decodes just the rows its ids pick.
    if dtypes.iter().any(|d| d.is_weight()) {
        if let (Op::Embedding, F) = (*op, dir) {
            return Ok(vec![embedding(be, name, args)?]);
        }
        if dir == F
            && let Some(out) = quant::matvec(be, name, op, args, None)?
        {
            return Ok(vec![out]);
        }
        if dir == F
            && let Some(out) = split_product(be, name, op, args, None)?
        {
            return Ok(vec![out]);
        }
        if let (Op::Linear { activation }, F) = (*op, dir)
            && be.takes_packed_operands()
        {
            return Ok(vec![linear_forward(be, name, activation, args)?]);
        }
        let decoded = quant::decoded(be, name, args)?;
        let refs: Vec<&Tensor> = decoded.iter().collect();
        return run(be, op, dir, &refs);
    }
    if dir == F
        && let Some(out) = quant::matvec(be, name, op, args, None)?
    {
        return Ok(vec![out]);
    }
    if dir == F
        && let Some(out) = split_product(be, name, op, args, None)?
    {
        return Ok(vec![out]);
    }
    match (*op, dir) {
        // Taken above (weight dtypes included), as matmul_add and matmul_swiglu.
        (Op::Matmul { trans_a, trans_b }, F) => {
            let (a, b) = ((arg(args, 0), trans_a), (arg(args, 1), trans_b));
            Ok(vec![product(be, name, a, b, None)?])
        }
        (Op::Matmul { trans_a, trans_b }, B) => matmul_backward(be, name, args, trans_a, trans_b),
        (Op::MatmulAdd { trans_a, trans_b }, d) => {
            matmul_add(be, name, (trans_a, trans_b), d, args)
        }
        (Op::MatmulSwiglu, d) => matmul::swiglu(be, name, d, args),
        (Op::Linear { activation }, F) => Ok(vec![linear_forward(be, name, activation, args)?]),
        (Op::Linear { activation }, B) => linear_backward(be, name, activation, args),
        (Op::Binary(b), F) => Ok(vec![binary_forward(be, name, b, args)?]),
        (Op::Binary(b), B) => binary_backward(be, name, b, args),
        (Op::Scale { factor }, F) => Ok(vec![unary(be, name, SCALE_CODE, factor, args, false)?]),
        (Op::Scale { factor }, B) => Ok(vec![unary(be, name, SCALE_CODE, factor, args, true)?]),
        (Op::Unary(u), d) => Ok(vec![unary(be, name, unary_code(u), 0.0, args, d == B)?]),
        (Op::Gelu { approximate }, d) => Ok(vec![unary(
            be,
            name,
            gelu_code(approximate),
            0.0,
            args,
            d == B,
        )?]),
        (Op::Swiglu, d) => swiglu(be, name, args, d == B),
        (Op::Softmax { causal }, d) => Ok(vec![softmax(be, name, false, causal, args, d == B)?]),
        (Op::LogSoftmax { causal }, d) => Ok(vec![softmax(be, name, true, causal, args, d == B)?]),
        (Op::LayerNorm { eps }, F) => Ok(vec![norm_forward(be, name, false, eps, args)?]),
        (Op::LayerNorm { eps }, B) => norm_backward(be, name, false, eps, args),
        (Op::RmsNorm { eps }, F) => Ok(vec![norm_forward(be, name, true, eps, args)?]),
        (Op::RmsNorm { eps }, B) => norm_backward(be, name, true, eps, args),
        (Op::Embedding, F) => Ok(vec![embedding(be, name, args)?]),
        (Op::Embedding, B) => Ok(vec![embedding_backward(be, name, args)?]),
        (Op::Reduce(r), d) => Ok(vec![reduce(be, name, r, args, d == B)?]),
        (Op::Argmax, F) => Ok(vec![argmax(be, name, arg(args, 0))?]),
        // An f32 `x` (a weight dtype was decoded above): passed through as it is.
        (Op::Dequantize, F) => Ok(vec![arg(args, 0).clone()]),
        (
            Op::Sample {
                temperature,
                top_k,
                top_p,
            },
            F,
        ) => Ok(vec![sample(be, name, temperature, top_k, top_p, args)?]),
        (Op::Transpose, F) => Ok(vec![transpose(be, name, arg(args, 0))?]),
        (Op::Transpose, B) => {
            let (x, g) = (arg(args, 0), arg(args, 2));
            let out_shape = transposed_shape(x.shape());
            shapes::same(name, g.shape(), &out_shape)?;
            Ok(vec![transpose(be, name, g)?])
        }
        (Op::Concat, F) => Ok(vec![concat(be, name, arg(args, 0), arg(args, 1))?]),
        (Op::Concat, B) => concat_backward(be, name, args),
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
        ) => {
            // The CPU's coefficients, rounded once to f32 as the CPU rounds them: replicas on
            // different backends fed one gradient make the same update.
            let c = kernels_core::cpu::optim::adamw_constants(lr, beta1, beta2, weight_decay, step);
            let p = |n| {
                AdamwParams {
                    n,
                    beta1,
                    beta2,
                    eps,
                    decay: c.decay as f32,
                    step_size: c.step_size as f32,
                    bias_correction2_sqrt: c.bias2_sqrt as f32,
                }
                .into()
            };
            optim(be, name, "adamw_step", &p, args, 3)
        }
        (
            Op::SgdStep {
                lr,
                momentum,
                weight_decay,
                nesterov,
            },
            F,
        ) => {
            let p = |n| {
                SgdParams {
                    n,
                    nesterov: u32::from(nesterov),
                    lr,
                    momentum,
                    weight_decay,
                }
                .into()
            };
            optim(be, name, "sgd_step", &p, args, 2)
        }
        (Op::Rope { .. }, dir) => {
            let Some((freqs, offset, interleaved)) = op.rotation() else {
                return Err(Error::UnknownOp { name: name.into() });
            };
            Ok(vec![match dir {
                F => rope::forward(be, name, &freqs, offset, interleaved, false, arg(args, 0))?,
                B => rope::backward(be, name, &freqs, offset, interleaved, args)?,
            }])
        }
        (Op::CrossEntropy, F) => Ok(vec![loss::cross_entropy_forward(be, name, args)?]),
        (Op::CrossEntropy, B) => Ok(vec![loss::cross_entropy_backward(be, name, args)?]),
        (Op::Mse, F) => Ok(vec![loss::mse_forward(be, name, args)?]),
        (Op::Mse, B) => loss::mse_backward(be, name, args),
        (
            Op::Attention {
                causal,
                scale,
                kv_len,
                window,
            },
            F,
        ) => Ok(vec![attention::forward(
            be,
            name,
            (causal, scale, kv_len, window),
            args,
        )?]),
        (
            Op::Attention {
                causal,
                scale,
                kv_len,
                window,
            },
            B,
        ) => attention::backward(be, name, (causal, scale, kv_len, window), args),
        (Op::RopeKvWrite { .. }, d) => rope_kv_write(be, op, d, args, false),
        (Op::KvWrite { pos }, F) => Ok(vec![layout::kv_write(be, name, pos, args)?]),
        (Op::KvWrite { pos }, B) => layout::kv_write_backward(be, name, pos, args),
        (Op::GruCell, F) => Ok(vec![gru::cell_forward(be, name, args)?]),
        (Op::GruCell, B) => gru::backward(be, name, false, args),
        (Op::GruSequence, F) => gru::sequence_forward(be, name, args),
        (Op::GruSequence, B) => gru::backward(be, name, true, args),
        (Op::GruEnsemble, F) => gru::ensemble_forward(be, name, args),
        (Op::GruEnsemble, B) => gru::ensemble_backward(be, name, args),
        (
            Op::SvdLowrank {
                rank,
                power_iters,
                seed,
            },
            F,
        ) => svd::forward(be, name, rank, power_iters, seed, arg(args, 0)),
        // Non-differentiable ops: rejected by `check_args` above.
        (
            Op::Argmax
            | Op::Dequantize
            | Op::Sample { .. }
            | Op::AdamwStep { .. }
            | Op::SgdStep { .. }
            | Op::SvdLowrank { .. },
            B,
        ) => Err(Error::NoBackward { op: name }),
    }
}
