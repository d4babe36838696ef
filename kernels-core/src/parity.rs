//! Parity cases: for every op, seeded random inputs of awkward shapes, drawn from the op's valid
//! domain (positive inputs for log and sqrt, divisors away from zero, relu inputs away from its
//! kink, in-range ids and targets).
//!
//! One list serves every check: backend parity against the CPU reference, the gradient checks,
//! `kernels demo` and `kernels parity`. [`cases`] covers every [`OpKind`] through an exhaustive
//! `match`, so a new op does not compile until it has cases.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::error::Result;
use crate::op::{
    ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, ADAMW_WEIGHT_DECAY, Activation, BinaryOp, GeluApprox,
    LAYER_NORM_EPS, Op, OpKind, RMS_NORM_EPS, ROPE_THETA, ReduceOp, RopeScaling, SGD_WEIGHT_DECAY,
    SVD_POWER_ITERS, UnaryOp,
};
use crate::rng::Rng;
use crate::tensor::Tensor;

mod cache;
mod generate;
pub mod hostile;
mod weights;

use generate::{Dist, Gen};

/// One op applied to one set of inputs.
#[derive(Debug, Clone)]
pub struct Case {
    /// The op with its attributes.
    pub op: Op,
    /// Inputs, in the op's input order.
    pub inputs: Vec<Tensor>,
    /// Above 65,535 workgroups of 256 invocations: slow on software adapters.
    pub large: bool,
}

impl Case {
    /// `name[shape] ...` of the inputs, e.g. `a[7,13] b[13]`.
    pub fn shape_label(&self) -> String {
        let spec = self.op.spec();
        let mut s = String::new();
        for (i, (t, inp)) in self.inputs.iter().zip(spec.inputs).enumerate() {
            if i > 0 {
                s.push(' ');
            }
            let dims: Vec<String> = t.shape().iter().map(|d| format!("{d}")).collect();
            s.push_str(&format!("{}[{}]", inp.name, dims.join(",")));
            if t.dtype().is_weight() {
                s.push_str(&format!(":{}", t.dtype()));
            }
        }
        s
    }

    /// Total number of input elements.
    pub fn numel(&self) -> usize {
        self.inputs.iter().map(|t| t.numel()).sum()
    }
}

/// Elements of the large elementwise case: more than 65,535 workgroups of 256.
pub const LARGE_ELEMS: usize = 65_535 * 256 + 257;

fn case(op: Op, inputs: Vec<Tensor>) -> Case {
    Case {
        op,
        inputs,
        large: false,
    }
}

/// Every parity case of one op, deterministic for `seed`. Shapes include 1, primes, the common
/// 16/64 tile sizes +/- 1, batches, and (for `add`) one case above 65,535 workgroups.
pub fn cases(kind: OpKind, seed: u64) -> Result<Vec<Case>> {
    let mut g = Gen {
        rng: Rng::new(seed ^ ((kind as u64 + 1) * 0x9E37_79B9)),
    };
    use Dist::*;
    use OpKind as K;
    let binary = |g: &mut Gen, b: BinaryOp| -> Result<Vec<Case>> {
        let db = if b == BinaryOp::Div {
            AwayFromZero
        } else {
            Normal
        };
        let mut v = Vec::new();
        for (sa, sb) in [
            (vec![1usize], vec![1usize]),
            (vec![7, 13], vec![7, 13]),
            (vec![3, 5, 17], vec![17]),
            (vec![2, 3, 65], vec![3, 65]),
        ] {
            v.push(case(Op::Binary(b), vec![g.f(&sa, Normal)?, g.f(&sb, db)?]));
        }
        Ok(v)
    };
    let unary = |g: &mut Gen, u: UnaryOp| -> Result<Vec<Case>> {
        let d = match u {
            UnaryOp::Log | UnaryOp::Sqrt => Positive,
            UnaryOp::Relu => AwayFromZero,
            UnaryOp::Exp => Uniform(-5.0, 5.0),
            UnaryOp::Neg | UnaryOp::Sigmoid | UnaryOp::Tanh | UnaryOp::Silu => Uniform(-4.0, 4.0),
        };
        let mut v = Vec::new();
        for s in [vec![1usize], vec![7, 13], vec![3, 5, 257]] {
            v.push(case(Op::Unary(u), vec![g.f(&s, d)?]));
        }
        Ok(v)
    };
    let reduce = |g: &mut Gen, op: Op| -> Result<Vec<Case>> {
        let mut v = Vec::new();
        for s in [vec![1usize], vec![7, 13], vec![3, 5, 17], vec![2, 257]] {
            v.push(case(op, vec![g.f(&s, Normal)?]));
        }
        Ok(v)
    };
    let softmax = |g: &mut Gen, log: bool| -> Result<Vec<Case>> {
        let mk = |causal: bool| {
            if log {
                Op::LogSoftmax { causal }
            } else {
                Op::Softmax { causal }
            }
        };
        Ok(vec![
            case(mk(false), vec![g.f(&[1, 1], Normal)?]),
            case(mk(false), vec![g.f(&[7, 13], Normal)?]),
            case(mk(false), vec![g.f(&[2, 257], Normal)?]),
            case(mk(true), vec![g.f(&[2, 7, 7], Normal)?]),
            case(mk(true), vec![g.f(&[3, 9], Normal)?]),
        ])
    };
    let mut all = match kind {
        K::Dequantize => Vec::new(),
        K::Linear => {
            // Every activation; rows of 1, primes, tile size +/- 1 in each of rows, in, out; a
            // batched x; relu's kink avoided by biases away from zero (its parity is exact at
            // the kink anyway, but the gradient checks share these cases).
            let mut v = Vec::new();
            for (i, (lead, inf, outf)) in [
                (&[1usize][..], 1usize, 1usize),
                (&[7][..], 13, 5),
                (&[2, 3][..], 17, 11),
                (&[65][..], 63, 64),
                (&[63][..], 65, 33),
            ]
            .into_iter()
            .enumerate()
            {
                let activation = Activation::ALL[i % Activation::ALL.len()];
                let mut xs = lead.to_vec();
                xs.push(inf);
                v.push(case(
                    Op::Linear { activation },
                    vec![
                        g.f(&xs, Normal)?,
                        g.f(&[outf, inf], Uniform(-0.5, 0.5))?,
                        g.f(&[outf], AwayFromZero)?,
                    ],
                ));
            }
            for activation in [Activation::Relu, Activation::Sigmoid] {
                v.push(case(
                    Op::Linear { activation },
                    vec![
                        g.f(&[3, 9], Normal)?,
                        g.f(&[4, 9], Normal)?,
                        g.f(&[4], AwayFromZero)?,
                    ],
                ));
            }
            v
        }
        K::Matmul => {
            let mut v = Vec::new();
            for (m, k, n) in [
                (1, 1, 1),
                (7, 13, 5),
                (17, 15, 16),
                (33, 64, 31),
                (65, 63, 1),
                (3, 129, 70),
            ] {
                v.push(case(
                    Op::Matmul {
                        trans_a: false,
                        trans_b: false,
                    },
                    vec![g.f(&[m, k], Normal)?, g.f(&[k, n], Normal)?],
                ));
            }
            v.push(case(
                Op::Matmul {
                    trans_a: true,
                    trans_b: false,
                },
                vec![g.f(&[13, 7], Normal)?, g.f(&[13, 5], Normal)?],
            ));
            v.push(case(
                Op::Matmul {
                    trans_a: false,
                    trans_b: true,
                },
                vec![g.f(&[7, 13], Normal)?, g.f(&[5, 13], Normal)?],
            ));
            v.push(case(
                Op::Matmul {
                    trans_a: true,
                    trans_b: true,
                },
                vec![g.f(&[13, 7], Normal)?, g.f(&[5, 13], Normal)?],
            ));
            v.push(case(
                Op::Matmul {
                    trans_a: false,
                    trans_b: false,
                },
                vec![g.f(&[3, 5, 7], Normal)?, g.f(&[3, 7, 4], Normal)?],
            ));
            v.push(case(
                Op::Matmul {
                    trans_a: false,
                    trans_b: true,
                },
                vec![g.f(&[2, 5, 7], Normal)?, g.f(&[3, 7], Normal)?],
            ));
            v
        }
        K::MatmulAdd => {
            // Each transpose form, a batched product with a shared 2-D operand, and the
            // llama's residual forms: o_proj as `a^T @ W^T` with `a [batch, k, 1]` (decode) and
            // `down_proj` as `x @ W^T` over `[batch, seq, k]`.
            let mut v = Vec::new();
            for (ta, tb, a, b, out) in [
                (false, false, &[1, 1][..], &[1, 1][..], &[1, 1][..]),
                (false, false, &[17, 15], &[15, 16], &[17, 16]),
                (true, false, &[13, 7], &[13, 5], &[7, 5]),
                (false, true, &[2, 5, 7], &[3, 7], &[2, 5, 3]),
                (true, true, &[2, 65, 1], &[33, 65], &[2, 1, 33]),
                (false, true, &[2, 3, 64], &[70, 64], &[2, 3, 70]),
            ] {
                v.push(case(
                    Op::MatmulAdd {
                        trans_a: ta,
                        trans_b: tb,
                    },
                    vec![g.f(out, Normal)?, g.f(a, Normal)?, g.f(b, Normal)?],
                ));
            }
            v
        }
        K::Add => {
            let mut v = binary(&mut g, BinaryOp::Add)?;
            v.push(Case {
                op: Op::Binary(BinaryOp::Add),
                inputs: vec![
                    g.f(&[LARGE_ELEMS], Uniform(-2.0, 2.0))?,
                    g.f(&[LARGE_ELEMS], Uniform(-2.0, 2.0))?,
                ],
                large: true,
            });
            v
        }
        K::Sub => binary(&mut g, BinaryOp::Sub)?,
        K::Mul => binary(&mut g, BinaryOp::Mul)?,
        K::Div => binary(&mut g, BinaryOp::Div)?,
        K::Scale => vec![
            case(Op::Scale { factor: 0.37 }, vec![g.f(&[1], Normal)?]),
            case(Op::Scale { factor: -2.5 }, vec![g.f(&[7, 13], Normal)?]),
        ],
        K::Neg => unary(&mut g, UnaryOp::Neg)?,
        K::Exp => unary(&mut g, UnaryOp::Exp)?,
        K::Log => unary(&mut g, UnaryOp::Log)?,
        K::Sqrt => unary(&mut g, UnaryOp::Sqrt)?,
        K::Relu => unary(&mut g, UnaryOp::Relu)?,
        K::Sigmoid => unary(&mut g, UnaryOp::Sigmoid)?,
        K::Tanh => unary(&mut g, UnaryOp::Tanh)?,
        K::Silu => unary(&mut g, UnaryOp::Silu)?,
        K::Gelu => vec![
            case(
                Op::Gelu {
                    approximate: GeluApprox::None,
                },
                vec![g.f(&[1], Uniform(-4.0, 4.0))?],
            ),
            case(
                Op::Gelu {
                    approximate: GeluApprox::None,
                },
                vec![g.f(&[7, 13], Uniform(-4.0, 4.0))?],
            ),
            case(
                Op::Gelu {
                    approximate: GeluApprox::Tanh,
                },
                vec![g.f(&[3, 5, 17], Uniform(-4.0, 4.0))?],
            ),
        ],
        K::MatmulSwiglu => {
            // Rows of 1 (decode), primes, tile size +/- 1 in rows, in and 2 n; a batched x; one
            // output (a weight of two rows).
            let mut v = Vec::new();
            for (lead, inf, n) in [
                (&[1usize][..], 1usize, 1usize),
                (&[1][..], 13, 5),
                (&[7][..], 13, 5),
                (&[2, 3][..], 17, 11),
                (&[65][..], 63, 32),
                (&[3][..], 129, 33),
            ] {
                let mut xs = lead.to_vec();
                xs.push(inf);
                v.push(case(
                    Op::MatmulSwiglu,
                    vec![g.f(&xs, Normal)?, g.f(&[2 * n, inf], Uniform(-0.5, 0.5))?],
                ));
            }
            v
        }
        K::Swiglu => {
            // One element, a prime-sized row, and rows larger than a workgroup.
            let mut v = Vec::new();
            for s in [vec![1usize], vec![7, 13], vec![3, 5, 257]] {
                let gate = g.f(&s, Uniform(-4.0, 4.0))?;
                v.push(case(Op::Swiglu, vec![gate, g.f(&s, Normal)?]));
            }
            v
        }
        K::Softmax => softmax(&mut g, false)?,
        K::LogSoftmax => softmax(&mut g, true)?,
        K::LayerNorm => {
            let mut v = Vec::new();
            for s in [vec![1usize, 1], vec![7, 13], vec![3, 5, 65]] {
                let d = *s.last().unwrap_or(&1);
                v.push(case(
                    Op::LayerNorm {
                        eps: LAYER_NORM_EPS,
                    },
                    vec![g.f(&s, Normal)?, g.f(&[d], Normal)?, g.f(&[d], Normal)?],
                ));
            }
            v
        }
        K::RmsNorm => {
            let mut v = Vec::new();
            for s in [vec![1usize, 1], vec![7, 13], vec![3, 5, 65]] {
                let d = *s.last().unwrap_or(&1);
                v.push(case(
                    Op::RmsNorm { eps: RMS_NORM_EPS },
                    vec![g.f(&s, Normal)?, g.f(&[d], Normal)?],
                ));
            }
            v
        }
        K::Rope => vec![
            case(
                Op::rope(ROPE_THETA, 0, false),
                vec![g.f(&[1, 1, 1, 2], Normal)?],
            ),
            case(
                Op::rope(ROPE_THETA, 0, false),
                vec![g.f(&[2, 3, 7, 8], Normal)?],
            ),
            case(
                Op::rope(500000.0, 5, false),
                vec![g.f(&[1, 2, 5, 16], Normal)?],
            ),
            case(
                Op::rope(ROPE_THETA, 3, true),
                vec![g.f(&[2, 1, 7, 6], Normal)?],
            ),
            // Scaled frequencies (the table changes, the kernel does not).
            case(
                Op::Rope {
                    theta: ROPE_THETA,
                    offset: 9,
                    interleaved: false,
                    scaling: RopeScaling::Linear,
                    factor: 4.0,
                    low: 1.0,
                    high: 4.0,
                    original_context: 0,
                },
                vec![g.f(&[1, 2, 5, 8], Normal)?],
            ),
            case(
                Op::Rope {
                    theta: ROPE_THETA,
                    offset: 30,
                    interleaved: false,
                    scaling: RopeScaling::Llama3,
                    factor: 8.0,
                    low: 1.0,
                    high: 4.0,
                    original_context: 16,
                },
                vec![g.f(&[1, 2, 5, 32], Normal)?],
            ),
            case(
                Op::Rope {
                    theta: ROPE_THETA,
                    offset: 30,
                    interleaved: true,
                    scaling: RopeScaling::Yarn,
                    factor: 4.0,
                    low: 1.0,
                    high: 32.0,
                    original_context: 16,
                },
                vec![g.f(&[1, 1, 5, 32], Normal)?],
            ),
        ],
        K::Embedding => vec![
            case(
                Op::Embedding,
                vec![g.ids_i64(&[7], 13)?, g.f(&[13, 5], Normal)?],
            ),
            case(
                Op::Embedding,
                vec![g.ids_i32(&[2, 3], 1)?, g.f(&[1, 4], Normal)?],
            ),
            case(
                Op::Embedding,
                vec![g.ids_i32(&[3, 17], 11)?, g.f(&[11, 65], Normal)?],
            ),
        ],
        K::Sum => reduce(&mut g, Op::Reduce(ReduceOp::Sum))?,
        K::Mean => reduce(&mut g, Op::Reduce(ReduceOp::Mean))?,
        K::Max => reduce(&mut g, Op::Reduce(ReduceOp::Max))?,
        K::Argmax => reduce(&mut g, Op::Argmax)?,
        K::Sample => {
            let mut v = Vec::new();
            // (rows, vocab, temperature, top_k, top_p): greedy, plain, top-k with ties at
            // the boundary (coarse logits), top-p, both, and a vocabulary wider than a workgroup.
            for (rows, vocab, temperature, top_k, top_p, coarse) in [
                (1, 1, 1.0, 0, 1.0, false),
                (3, 7, 0.0, 0, 1.0, false),
                (4, 13, 1.0, 0, 1.0, false),
                (5, 17, 0.7, 3, 1.0, true),
                (3, 33, 1.3, 0, 0.8, false),
                (2, 300, 0.9, 40, 0.9, true),
                (2, 1000, 1.0, 5, 0.5, false),
            ] {
                let mut logits = g.f(&[rows, vocab], Normal)?;
                if coarse {
                    // Few distinct values: exercises ties in top-k and top-p.
                    let r: Vec<f32> = logits
                        .to_f32_vec()?
                        .iter()
                        .map(|x| libm::roundf(x * 2.0) / 2.0)
                        .collect();
                    logits = Tensor::from_f32(&[rows, vocab], r)?;
                }
                v.push(case(
                    Op::Sample {
                        temperature,
                        top_k,
                        top_p,
                    },
                    vec![logits, g.f(&[rows], Uniform(0.0, 1.0))?],
                ));
            }
            v
        }
        K::Transpose => vec![
            case(Op::Transpose, vec![g.f(&[1, 1], Normal)?]),
            case(Op::Transpose, vec![g.f(&[7, 13], Normal)?]),
            case(Op::Transpose, vec![g.f(&[2, 3, 17, 5], Normal)?]),
        ],
        K::Concat => vec![
            case(
                Op::Concat,
                vec![g.f(&[1, 1], Normal)?, g.f(&[1, 2], Normal)?],
            ),
            case(
                Op::Concat,
                vec![g.f(&[7, 13], Normal)?, g.f(&[7, 5], Normal)?],
            ),
            case(
                Op::Concat,
                vec![g.f(&[2, 3, 5], Normal)?, g.f(&[2, 3, 1], Normal)?],
            ),
        ],
        K::KvWrite => cache::kv_write(&mut g)?,
        K::RopeKvWrite => cache::rope_kv_write(&mut g)?,
        K::Attention => vec![
            // A preallocated KV cache read to kv_len: a GQA decode step across key chunks
            // with batch > 1, a causal prefill of a prefix, a non-causal prefix, and a group
            // above the decode kernel's (the general path).
            //
            // Sliding windows: a GQA prefill over three blocks of query rows, a decode step
            // whose window starts inside the second key chunk, a prefill continuing a cache, a
            // window wider than the sequence.
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 0,
                    window: 4,
                },
                vec![
                    g.f(&[1, 4, 37, 8], Normal)?,
                    g.f(&[1, 2, 37, 8], Normal)?,
                    g.f(&[1, 2, 37, 8], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 173,
                    window: 50,
                },
                vec![
                    g.f(&[2, 6, 1, 16], Normal)?,
                    g.f(&[2, 2, 300, 16], Normal)?,
                    g.f(&[2, 2, 300, 16], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: true,
                    scale: Some(0.3),
                    kv_len: 12,
                    window: 3,
                },
                vec![
                    g.f(&[1, 2, 5, 8], Normal)?,
                    g.f(&[1, 1, 20, 8], Normal)?,
                    g.f(&[1, 1, 20, 6], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 0,
                    window: 100,
                },
                vec![
                    g.f(&[1, 2, 6, 8], Normal)?,
                    g.f(&[1, 2, 6, 8], Normal)?,
                    g.f(&[1, 2, 6, 8], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 173,
                    window: 0,
                },
                vec![
                    g.f(&[2, 6, 1, 16], Normal)?,
                    g.f(&[2, 2, 300, 16], Normal)?,
                    g.f(&[2, 2, 300, 16], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 9,
                    window: 0,
                },
                vec![
                    g.f(&[2, 4, 5, 8], Normal)?,
                    g.f(&[2, 2, 20, 8], Normal)?,
                    g.f(&[2, 2, 20, 8], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: false,
                    scale: None,
                    kv_len: 4,
                    window: 0,
                },
                vec![
                    g.f(&[1, 2, 3, 8], Normal)?,
                    g.f(&[1, 1, 11, 8], Normal)?,
                    g.f(&[1, 1, 11, 6], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 33,
                    window: 0,
                },
                vec![
                    g.f(&[1, 12, 1, 8], Normal)?,
                    g.f(&[1, 1, 40, 8], Normal)?,
                    g.f(&[1, 1, 40, 8], Normal)?,
                ],
            ),
            // Decode steps: one query row over caches spanning several key chunks of the
            // device decode kernels (128 keys), GQA groups of 4 and of 1, a value dim unlike
            // the key dim, and a group above the decode kernel's 8 (the general path).
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 0,
                    window: 0,
                },
                vec![
                    g.f(&[2, 8, 1, 16], Normal)?,
                    g.f(&[2, 2, 301, 16], Normal)?,
                    g.f(&[2, 2, 301, 16], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: false,
                    scale: Some(0.2),
                    kv_len: 0,
                    window: 0,
                },
                vec![
                    g.f(&[1, 3, 1, 7], Normal)?,
                    g.f(&[1, 3, 129, 7], Normal)?,
                    g.f(&[1, 3, 129, 5], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 0,
                    window: 0,
                },
                vec![
                    g.f(&[1, 12, 1, 8], Normal)?,
                    g.f(&[1, 1, 40, 8], Normal)?,
                    g.f(&[1, 1, 40, 8], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 0,
                    window: 0,
                },
                vec![
                    g.f(&[1, 1, 1, 4], Normal)?,
                    g.f(&[1, 1, 1, 4], Normal)?,
                    g.f(&[1, 1, 1, 4], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 0,
                    window: 0,
                },
                vec![
                    g.f(&[2, 4, 7, 8], Normal)?,
                    g.f(&[2, 2, 7, 8], Normal)?,
                    g.f(&[2, 2, 7, 8], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 0,
                    window: 0,
                },
                vec![
                    g.f(&[1, 2, 1, 8], Normal)?,
                    g.f(&[1, 2, 9, 8], Normal)?,
                    g.f(&[1, 2, 9, 8], Normal)?,
                ],
            ),
            case(
                Op::Attention {
                    causal: false,
                    scale: Some(0.3),
                    kv_len: 0,
                    window: 0,
                },
                vec![
                    g.f(&[1, 2, 5, 16], Normal)?,
                    g.f(&[1, 1, 13, 16], Normal)?,
                    g.f(&[1, 1, 13, 16], Normal)?,
                ],
            ),
        ],
        K::GruCell => {
            let mut v = Vec::new();
            for (b, i, h) in [(1usize, 1usize, 1usize), (3, 5, 7)] {
                v.push(case(
                    Op::GruCell,
                    vec![
                        g.f(&[b, i], Normal)?,
                        g.f(&[b, h], Normal)?,
                        g.f(&[3 * h, i], Uniform(-0.5, 0.5))?,
                        g.f(&[3 * h, h], Uniform(-0.5, 0.5))?,
                        g.f(&[3 * h], Uniform(-0.5, 0.5))?,
                        g.f(&[3 * h], Uniform(-0.5, 0.5))?,
                    ],
                ));
            }
            v
        }
        K::GruSequence => {
            let mut v = Vec::new();
            for (s, b, i, h) in [(1usize, 1usize, 2usize, 3usize), (4, 3, 5, 7)] {
                v.push(case(
                    Op::GruSequence,
                    vec![
                        g.f(&[s, b, i], Normal)?,
                        g.f(&[b, h], Normal)?,
                        g.f(&[3 * h, i], Uniform(-0.5, 0.5))?,
                        g.f(&[3 * h, h], Uniform(-0.5, 0.5))?,
                        g.f(&[3 * h], Uniform(-0.5, 0.5))?,
                        g.f(&[3 * h], Uniform(-0.5, 0.5))?,
                    ],
                ));
            }
            v
        }
        K::GruEnsemble => {
            let mut v = Vec::new();
            // One member of one step; three members of odd sizes; members * batch * hidden
            // just above a workgroup (258 threads).
            for (m, s, b, i, h) in [
                (1usize, 1usize, 1usize, 2usize, 3usize),
                (3, 4, 3, 5, 7),
                (2, 2, 3, 2, 43),
            ] {
                v.push(case(
                    Op::GruEnsemble,
                    vec![
                        g.f(&[m, s, b, i], Normal)?,
                        g.f(&[m, b, h], Normal)?,
                        g.f(&[m, 3 * h, i], Uniform(-0.5, 0.5))?,
                        g.f(&[m, 3 * h, h], Uniform(-0.5, 0.5))?,
                        g.f(&[m, 3 * h], Uniform(-0.5, 0.5))?,
                        g.f(&[m, 3 * h], Uniform(-0.5, 0.5))?,
                    ],
                ));
            }
            v
        }
        K::CrossEntropy => vec![
            case(
                Op::CrossEntropy,
                vec![g.f(&[1, 1], Normal)?, g.ids_i64(&[1], 1)?],
            ),
            case(
                Op::CrossEntropy,
                vec![g.f(&[7, 13], Normal)?, g.ids_i64(&[7], 13)?],
            ),
            case(
                Op::CrossEntropy,
                vec![g.f(&[3, 257], Normal)?, g.ids_i32(&[3], 257)?],
            ),
        ],
        K::Mse => vec![
            case(Op::Mse, vec![g.f(&[1], Normal)?, g.f(&[1], Normal)?]),
            case(
                Op::Mse,
                vec![g.f(&[7, 13], Normal)?, g.f(&[7, 13], Normal)?],
            ),
        ],
        K::SvdLowrank => vec![
            case(
                Op::SvdLowrank {
                    rank: 3,
                    power_iters: SVD_POWER_ITERS,
                    seed: 0,
                },
                vec![g.low_rank(20, 13, 3)?],
            ),
            case(
                Op::SvdLowrank {
                    rank: 5,
                    power_iters: SVD_POWER_ITERS,
                    seed: 7,
                },
                vec![g.decaying(33, 17)?],
            ),
        ],
        K::AdamwStep => vec![case(
            Op::AdamwStep {
                lr: 1e-2,
                beta1: ADAMW_BETA1,
                beta2: ADAMW_BETA2,
                eps: ADAMW_EPS,
                weight_decay: ADAMW_WEIGHT_DECAY,
                step: 3,
            },
            vec![
                g.f(&[7, 13], Normal)?,
                g.f(&[7, 13], Normal)?,
                g.f(&[7, 13], Normal)?,
                g.f(&[7, 13], Uniform(0.0, 1.0))?,
            ],
        )],
        K::SgdStep => vec![
            case(
                Op::SgdStep {
                    lr: 0.1,
                    momentum: 0.9,
                    weight_decay: SGD_WEIGHT_DECAY,
                    nesterov: false,
                },
                vec![
                    g.f(&[7, 13], Normal)?,
                    g.f(&[7, 13], Normal)?,
                    g.f(&[7, 13], Normal)?,
                ],
            ),
            case(
                Op::SgdStep {
                    lr: 0.05,
                    momentum: 0.9,
                    weight_decay: 1e-2,
                    nesterov: true,
                },
                vec![g.f(&[1], Normal)?, g.f(&[1], Normal)?, g.f(&[1], Normal)?],
            ),
            // Momentum 0: the buffer passes through unchanged (torch keeps none).
            case(
                Op::SgdStep {
                    lr: 0.1,
                    momentum: 0.0,
                    weight_decay: 1e-2,
                    nesterov: false,
                },
                vec![
                    g.f(&[3, 5], Normal)?,
                    g.f(&[3, 5], Normal)?,
                    g.f(&[3, 5], Normal)?,
                ],
            ),
        ],
    };
    all.extend(weights::cases(kind, &mut g)?);
    Ok(all)
}

/// Every case of every op (in [`OpKind::ALL`] order). `include_large` adds the > 65,535
/// workgroup cases.
pub fn all_cases(seed: u64, include_large: bool) -> Result<Vec<Case>> {
    let mut v = Vec::new();
    for k in OpKind::ALL {
        v.extend(
            cases(*k, seed)?
                .into_iter()
                .filter(|c| include_large || !c.large),
        );
    }
    Ok(v)
}

/// Seeded grad-output tensors for a backward run of `case` (one per output, shaped like the
/// forward outputs).
pub fn grad_outputs(outputs: &[Tensor], seed: u64) -> Result<Vec<Tensor>> {
    let mut rng = Rng::new(seed ^ 0xD1B5_4A32_D192_ED03);
    outputs
        .iter()
        .map(|o| rng.normal_tensor(o.shape(), 0.0, 1.0))
        .collect()
}

#[cfg(test)]
mod tests;
