//! The parity cases of the weight dtypes: `dequantize` of each, and `matmul`, `linear`,
//! `matmul_swiglu` and `embedding` with a weight of each (decode shapes of one row, prefill
//! shapes, rows of one block and of several). Their reference is "dequantize, then the f32
//! kernel".

use alloc::vec;
use alloc::vec::Vec;

use super::generate::{Dist, Gen};
use super::{Case, case};
use crate::error::Result;
use crate::op::{Activation, Op, OpKind};
use crate::tensor::DType;

/// Columns for a row of `dtype`: `blocks` blocks (32-element formats) or super-blocks (K-quants,
/// 256), and odd column counts for f16 and bf16.
fn cols(dtype: DType, blocks: usize) -> usize {
    match dtype.block_elems() {
        1 => 16 * blocks + 1,
        b => b * blocks,
    }
}

/// The extra cases of `kind` (empty for ops that take no weight).
pub(super) fn cases(kind: OpKind, g: &mut Gen) -> Result<Vec<Case>> {
    let mut v = Vec::new();
    match kind {
        OpKind::Dequantize => {
            v.push(case(Op::Dequantize, vec![g.f(&[3, 5], Dist::Normal)?]));
            for dtype in DType::WEIGHT {
                v.push(case(
                    Op::Dequantize,
                    vec![g.weight(&[3, cols(dtype, 2)], dtype)?],
                ));
                v.push(case(
                    Op::Dequantize,
                    vec![g.weight(&[cols(dtype, 1)], dtype)?],
                ));
            }
        }
        OpKind::Linear => {
            for (i, dtype) in DType::WEIGHT.into_iter().enumerate() {
                let k = cols(dtype, 2);
                // Decode (one row), a prime number of rows with a batch, and out = 1.
                for (lead, out) in [(&[1usize][..], 17usize), (&[2, 7][..], 33), (&[5][..], 1)] {
                    let mut xs = lead.to_vec();
                    xs.push(k);
                    let activation = Activation::ALL[i % Activation::ALL.len()];
                    v.push(case(
                        Op::Linear { activation },
                        vec![
                            g.f(&xs, Dist::Normal)?,
                            g.weight(&[out, k], dtype)?,
                            g.f(&[out], Dist::AwayFromZero)?,
                        ],
                    ));
                }
            }
        }
        OpKind::MatmulSwiglu => {
            // Decode (one row, and a batch of rows) and a prefill of more rows than decode's
            // products take. The gate multiplies one half's rounding error by the other half (and
            // the backward, dy's by the weight), while the budget is relative to the result: the
            // weights are drawn about 0.1 in size, so that the pre-activations are of a model's
            // size (a few units) rather than the tens to hundreds of `Gen::weight`'s.
            for dtype in DType::WEIGHT {
                let k = cols(dtype, 2);
                for (lead, n) in [(&[1usize][..], 9usize), (&[2, 1][..], 4), (&[11][..], 5)] {
                    let mut xs = lead.to_vec();
                    xs.push(k);
                    v.push(case(
                        Op::MatmulSwiglu,
                        vec![
                            g.f(&xs, Dist::Normal)?,
                            g.weight_of_size(&[2 * n, k], dtype, 0.1)?,
                        ],
                    ));
                }
            }
        }
        OpKind::Matmul => {
            for dtype in DType::WEIGHT {
                let k = cols(dtype, 1);
                // `x @ w^T` (the linear orientation: blocks along k) and `x @ w` (blocks along n).
                v.push(case(
                    Op::Matmul {
                        trans_a: false,
                        trans_b: true,
                    },
                    vec![g.f(&[3, k], Dist::Normal)?, g.weight(&[9, k], dtype)?],
                ));
                v.push(case(
                    Op::Matmul {
                        trans_a: false,
                        trans_b: false,
                    },
                    vec![g.f(&[2, 5], Dist::Normal)?, g.weight(&[5, k], dtype)?],
                ));
                // The llama's decode forms: `W @ h^T` with one row of `h` per batch entry (the
                // weight as `a`) and `a^T @ W^T` with `a [batch, k, 1]`.
                v.push(case(
                    Op::Matmul {
                        trans_a: false,
                        trans_b: true,
                    },
                    vec![g.weight(&[9, k], dtype)?, g.f(&[2, 1, k], Dist::Normal)?],
                ));
                v.push(case(
                    Op::Matmul {
                        trans_a: true,
                        trans_b: true,
                    },
                    vec![g.f(&[2, k, 1], Dist::Normal)?, g.weight(&[9, k], dtype)?],
                ));
            }
        }
        OpKind::Embedding => {
            for dtype in DType::WEIGHT {
                v.push(case(
                    Op::Embedding,
                    vec![
                        g.ids_i32(&[2, 3], 11)?,
                        g.weight(&[11, cols(dtype, 2)], dtype)?,
                    ],
                ));
            }
        }
        OpKind::MatmulAdd => {
            // The residual forms of a quantized llama: `down_proj` rows and decode's o_proj.
            for dtype in DType::WEIGHT {
                let k = cols(dtype, 1);
                v.push(case(
                    Op::MatmulAdd {
                        trans_a: false,
                        trans_b: true,
                    },
                    vec![
                        g.f(&[3, 9], Dist::Normal)?,
                        g.f(&[3, k], Dist::Normal)?,
                        g.weight(&[9, k], dtype)?,
                    ],
                ));
                v.push(case(
                    Op::MatmulAdd {
                        trans_a: true,
                        trans_b: true,
                    },
                    vec![
                        g.f(&[2, 1, 9], Dist::Normal)?,
                        g.f(&[2, k, 1], Dist::Normal)?,
                        g.weight(&[9, k], dtype)?,
                    ],
                ));
            }
        }
        _ => {}
    }
    Ok(v)
}
