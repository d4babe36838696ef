//! Hostile parity cases: every op on inputs holding NaN, +inf and -inf, and on out-of-range
//! values (ids and targets past the vocabulary, uniforms outside `[0, 1)`, positions past a
//! cache, ranks past a matrix).
//!
//! The CPU reference defines the answer, as for the ordinary cases: a backend must give the same
//! NaN and infinity positions (and the finite values within the op's budget), and must refuse
//! what the reference refuses. The one documented exception: an op that
//! [`OpKind::rejects_non_finite`] is refused on the CPU, while a device, which cannot see values
//! without a readback, gives all-NaN outputs instead.
//!
//! The cases derive from the ordinary ones ([`super::cases`]): the two smallest of each op, with
//! each float input poisoned in turn (the same value at its first, middle and last element), and
//! one case mixing NaN, +inf and -inf in the first input; then each op's out-of-range values, in
//! an exhaustive `match` so a new op has to decide what it has.

use alloc::vec;
use alloc::vec::Vec;

use super::{Case, case, cases as ordinary};
use crate::error::Result;
use crate::op::{InputKind, Op, OpKind};
use crate::tensor::Tensor;

/// Ordinary cases per op that are poisoned (the smallest with at least 4 input elements).
const BASES_PER_OP: usize = 2;

/// `t` with `value` at each of `at` (indices past the end are skipped).
fn poisoned(t: &Tensor, at: &[usize], value: f32) -> Result<Tensor> {
    let mut v = t.to_f32_vec()?;
    for &i in at {
        if let Some(x) = v.get_mut(i) {
            *x = value;
        }
    }
    Tensor::from_f32(t.shape(), v)
}

/// `t`, of a weight dtype, with `value` at elements `0`, `n / 2` and `n - 1` (f16, bf16), or
/// as the f16 scale of its first and last blocks (GGML blocks).
fn packed_poisoned(t: &Tensor, value: f32) -> Result<Tensor> {
    use crate::DType;
    let mut b = t.packed_bytes()?.to_vec();
    let dtype = t.dtype();
    let (bits, at): (u16, Vec<usize>) = match dtype {
        DType::BF16 => (half::bf16::from_f32(value).to_bits(), {
            let n = t.numel();
            vec![0, n / 2, n.saturating_sub(1)]
        }),
        _ => {
            let scale_at = if dtype == DType::Q6_K { 208 } else { 0 };
            let per = if dtype == DType::F16 {
                1
            } else {
                dtype.block_bytes() / 2
            };
            let n = b.len() / 2;
            let at = if dtype == DType::F16 {
                vec![0, n / 2, n.saturating_sub(1)]
            } else {
                let blocks = b.len() / dtype.block_bytes();
                vec![scale_at / 2, (blocks - 1) * per + scale_at / 2]
            };
            (half::f16::from_f32(value).to_bits(), at)
        }
    };
    for i in at {
        if let Some(w) = b.get_mut(2 * i..2 * i + 2) {
            w.copy_from_slice(&bits.to_le_bytes());
        }
    }
    Tensor::from_raw(t.shape(), dtype, b)
}

/// `t` (integer) with element 0 set to `value`, in `t`'s dtype.
fn int_poisoned(t: &Tensor, value: i64) -> Result<Tensor> {
    let mut v = t.to_i64_vec()?;
    if let Some(x) = v.first_mut() {
        *x = value;
    }
    match t.dtype() {
        crate::DType::I32 => Tensor::from_i32(t.shape(), v.iter().map(|&x| x as i32).collect()),
        _ => Tensor::from_i64(t.shape(), v),
    }
}

/// The ordinary cases the hostile ones start from: the [`BASES_PER_OP`] smallest with at least
/// 4 input elements (the smallest when none has), never the large ones.
fn bases(kind: OpKind, seed: u64) -> Result<Vec<Case>> {
    let mut all: Vec<Case> = ordinary(kind, seed)?
        .into_iter()
        .filter(|c| !c.large)
        .collect();
    all.sort_by_key(Case::numel);
    let big_enough: Vec<Case> = all.iter().filter(|c| c.numel() >= 4).cloned().collect();
    Ok(if big_enough.is_empty() {
        all.into_iter().take(1).collect()
    } else {
        big_enough.into_iter().take(BASES_PER_OP).collect()
    })
}

/// Each float input of `base` poisoned in turn with NaN, +inf and -inf, and one case mixing the
/// three in the first float input.
fn non_finite(base: &Case) -> Result<Vec<Case>> {
    let spec = base.op.spec();
    let mut v = Vec::new();
    let mut first_float = None;
    for (i, input) in spec.inputs.iter().enumerate() {
        if input.kind == InputKind::Int {
            continue;
        }
        if base.inputs[i].dtype().is_weight() {
            // Non-finite values, and f16 subnormals (the smallest, and one with a full
            // mantissa): a decoder that flushes them (native f16 on some devices) shows here.
            for value in [
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                5.960_464_5e-8,
                -6.097_555e-5,
            ] {
                let mut inputs = base.inputs.clone();
                inputs[i] = packed_poisoned(&inputs[i], value)?;
                v.push(case(base.op, inputs));
            }
            continue;
        }
        first_float.get_or_insert(i);
        let n = base.inputs[i].numel();
        for value in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut inputs = base.inputs.clone();
            inputs[i] = poisoned(&inputs[i], &[0, n / 2, n.saturating_sub(1)], value)?;
            v.push(case(base.op, inputs));
        }
    }
    if let Some(i) = first_float {
        let n = base.inputs[i].numel();
        let mut inputs = base.inputs.clone();
        inputs[i] = poisoned(&inputs[i], &[n / 3], f32::INFINITY)?;
        inputs[i] = poisoned(&inputs[i], &[2 * n / 3], f32::NEG_INFINITY)?;
        inputs[i] = poisoned(&inputs[i], &[n - 1], f32::NAN)?;
        v.push(case(base.op, inputs));
    }
    Ok(v)
}

/// Out-of-range values and attributes of `base`'s op: the reference refuses most of them, and
/// so must every backend.
fn out_of_range(base: &Case) -> Result<Vec<Case>> {
    let with_input = |i: usize, t: Tensor| {
        let mut inputs = base.inputs.clone();
        inputs[i] = t;
        case(base.op, inputs)
    };
    let with_op = |op: Op| case(op, base.inputs.clone());
    let shape = |i: usize| base.inputs[i].shape().to_vec();
    Ok(match base.op {
        Op::Embedding => {
            let vocab = shape(1)[0] as i64;
            vec![
                with_input(0, int_poisoned(&base.inputs[0], vocab)?),
                with_input(0, int_poisoned(&base.inputs[0], -1)?),
            ]
        }
        Op::CrossEntropy => {
            let classes = *shape(0).last().unwrap_or(&1) as i64;
            vec![
                with_input(1, int_poisoned(&base.inputs[1], classes)?),
                with_input(1, int_poisoned(&base.inputs[1], -1)?),
            ]
        }
        Op::Sample {
            temperature,
            top_k,
            top_p,
        } => {
            let mut v = Vec::new();
            for u in [1.5, 1.0, -0.5, f32::NAN, f32::INFINITY] {
                v.push(with_input(1, poisoned(&base.inputs[1], &[0], u)?));
            }
            v.push(with_op(Op::Sample {
                temperature: f32::NAN,
                top_k,
                top_p,
            }));
            v.push(with_op(Op::Sample {
                temperature,
                top_k,
                top_p: f32::NAN,
            }));
            v
        }
        Op::KvWrite { .. } => {
            let cap = shape(0)[shape(0).len() - 2];
            vec![
                with_op(Op::KvWrite { pos: cap }),
                with_op(Op::KvWrite { pos: usize::MAX }),
            ]
        }
        Op::RopeKvWrite { theta, .. } => {
            let cap = shape(0)[2];
            vec![
                with_op(Op::rope_kv_write(theta, cap, false)),
                with_op(Op::rope_kv_write(theta, usize::MAX, false)),
            ]
        }
        Op::Attention { causal, scale, .. } => {
            let keys = shape(1)[shape(1).len() - 2];
            vec![
                with_op(Op::Attention {
                    causal,
                    scale,
                    kv_len: keys + 1,
                    window: 0,
                }),
                with_op(Op::Attention {
                    causal,
                    scale: Some(f32::NAN),
                    kv_len: 0,
                    window: 0,
                }),
                // A sliding window needs causal attention.
                with_op(Op::Attention {
                    causal: false,
                    scale,
                    kv_len: 0,
                    window: 2,
                }),
            ]
        }
        Op::SvdLowrank { seed, .. } => vec![
            with_op(Op::SvdLowrank {
                rank: 1 << 30,
                power_iters: 1,
                seed,
            }),
            with_op(Op::SvdLowrank {
                rank: 1,
                power_iters: 1_000_000_000,
                seed,
            }),
        ],
        Op::Scale { .. } => vec![
            with_op(Op::Scale { factor: f32::NAN }),
            with_op(Op::Scale {
                factor: f32::INFINITY,
            }),
        ],
        Op::AdamwStep {
            beta1,
            beta2,
            eps,
            weight_decay,
            step,
            ..
        } => vec![with_op(Op::AdamwStep {
            lr: f32::NAN,
            beta1,
            beta2,
            eps,
            weight_decay,
            step,
        })],
        Op::SgdStep {
            momentum,
            weight_decay,
            nesterov,
            ..
        } => vec![with_op(Op::SgdStep {
            lr: f32::INFINITY,
            momentum,
            weight_decay,
            nesterov,
        })],
        Op::Matmul { .. }
        | Op::MatmulAdd { .. }
        | Op::MatmulSwiglu
        | Op::Linear { .. }
        | Op::Binary(_)
        | Op::Unary(_)
        | Op::Gelu { .. }
        | Op::Swiglu
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Rope { .. }
        | Op::Reduce(_)
        | Op::Argmax
        | Op::Dequantize
        | Op::Transpose
        | Op::Concat
        | Op::GruCell
        | Op::GruSequence
        | Op::GruEnsemble
        // No integer inputs and no attribute a value can push out of range (or one the
        // attribute parser already bounds): the non-finite cases are their hostile inputs.
        | Op::Mse => Vec::new(),
    })
}

/// Every hostile case of one op, deterministic for `seed`.
pub fn cases(kind: OpKind, seed: u64) -> Result<Vec<Case>> {
    let mut v = Vec::new();
    let bases = bases(kind, seed)?;
    for base in &bases {
        v.extend(non_finite(base)?);
    }
    if let Some(base) = bases.first() {
        v.extend(out_of_range(base)?);
    }
    Ok(v)
}

/// Every hostile case of every op (in [`OpKind::ALL`] order).
pub fn all_cases(seed: u64) -> Result<Vec<Case>> {
    let mut v = Vec::new();
    for k in OpKind::ALL {
        v.extend(cases(*k, seed)?);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    // wasm-pack test runs these in the browser too.
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn every_op_has_nan_and_infinity_cases() {
        for k in OpKind::ALL {
            let cs = cases(*k, 1).unwrap();
            let has = |pred: fn(f32) -> bool| {
                cs.iter().any(|c| {
                    c.inputs
                        .iter()
                        .any(|t| t.as_f32().is_ok_and(|v| v.iter().any(|&x| pred(x))))
                })
            };
            assert!(has(f32::is_nan), "{k}: no NaN case");
            assert!(has(|x| x == f32::INFINITY), "{k}: no +inf case");
            assert!(has(|x| x == f32::NEG_INFINITY), "{k}: no -inf case");
            for c in &cs {
                assert_eq!(c.op.kind(), *k);
                assert!(!c.large);
            }
        }
    }

    #[test]
    fn out_of_range_values_are_refused_by_the_reference() {
        use crate::backend::{Backend, CpuBackend};
        use crate::op::Direction;
        let reference = CpuBackend::reference();
        let refused = |k: OpKind| {
            cases(k, 0)
                .unwrap()
                .iter()
                .filter(|c| {
                    let args: Vec<&Tensor> = c.inputs.iter().collect();
                    reference.run(&c.op, Direction::Forward, &args).is_err()
                })
                .count()
        };
        // ids and targets past the vocabulary and below 0; uniforms 1.5, 1, -0.5, NaN, inf and
        // NaN temperature and top_p (7), and the poisoned uniforms of both base cases (2 x 3);
        // kv positions past the cache; svd's rank and iterations.
        assert_eq!(refused(OpKind::Embedding), 2);
        assert_eq!(refused(OpKind::CrossEntropy), 2);
        assert_eq!(refused(OpKind::Sample), 7 + 2 * 3);
        assert_eq!(refused(OpKind::KvWrite), 2);
        assert_eq!(refused(OpKind::RopeKvWrite), 2);
        assert!(refused(OpKind::SvdLowrank) >= 2);
    }
}
