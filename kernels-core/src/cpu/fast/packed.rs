//! `linear` and `matmul(x, w, trans_b)` forward with a weight of a weight dtype and few rows
//! (decode): each weight row is decoded once into a row buffer and dotted with every row of
//! `x`, so the weight streams from memory in its packed size (4.5 bits a weight for `q4_0`
//! and `q4_k`) instead of being decoded whole into an f32 copy. More rows (prefill) decode the
//! weight and take the f32 GEMM, as the reference does. Within the op's budget of the
//! reference (the summation order of the dot product is the only difference).

use alloc::vec;
use alloc::vec::Vec;

use super::isa::Isa;
use super::vector::common::with_simd;
use super::vector::math;
use crate::cpu::linear;
use crate::error::Result;
use crate::op::{Activation, Direction, Op};
use crate::quant;
use crate::tensor::{DType, Tensor};

/// Most rows of `x` this path takes; more go through the decoded weight and the GEMM.
pub const MAX_ROWS: usize = 8;

/// The fast path of `op` on these inputs, or `None` (then the caller decodes the weight and
/// runs the f32 kernels, which also report any error in the inputs).
pub fn run(op: &Op, dir: Direction, inputs: &[&Tensor]) -> Option<Result<Vec<Tensor>>> {
    if dir != Direction::Forward {
        return None;
    }
    let (activation, x, w, bias) = match (*op, inputs) {
        (Op::Linear { activation }, [x, w, b]) => (activation, *x, *w, Some(*b)),
        (
            Op::Matmul {
                trans_a: false,
                trans_b: true,
            },
            [x, w],
        ) if x.rank() >= 2 && w.rank() == 2 && x.dtype() == DType::F32 => {
            (Activation::None, *x, *w, None)
        }
        // `W @ h^T` with one row of `h` per batch entry (decode's projections): `[batch, n, 1]`
        // is the same memory as the rows `h @ W^T`.
        (
            Op::Matmul {
                trans_a: false,
                trans_b: true,
            },
            [w, h],
        ) if w.rank() == 2 && h.rank() >= 2 && h.shape()[h.rank() - 2] == 1 => {
            let mut shape = h.shape()[..h.rank() - 2].to_vec();
            shape.extend([w.shape()[0], 1]);
            return product_of(Activation::None, h, w, None, Some(shape));
        }
        _ => return None,
    };
    product_of(activation, x, w, bias, None)
}

/// `act(x @ w^T + bias)` for a packed `w`, shaped as linear's output or `out_shape`.
fn product_of(
    activation: Activation,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    out_shape: Option<Vec<usize>>,
) -> Option<Result<Vec<Tensor>>> {
    if !w.dtype().is_weight() || x.dtype() != DType::F32 || !x.is_host() || !w.is_host() {
        return None;
    }
    let (rows, k, n) = match bias {
        Some(b) => linear::check(x.shape(), w.shape(), b.shape()).ok()?,
        None => {
            let (xs, ws) = (x.shape(), w.shape());
            if ws.len() != 2 || xs.is_empty() {
                return None;
            }
            let k = xs[xs.len() - 1];
            if k != ws[1] {
                return None;
            }
            (x.numel() / k.max(1), k, ws[0])
        }
    };
    if rows == 0 || rows > MAX_ROWS || k == 0 || n == 0 {
        return None;
    }
    let xv = x.as_f32().ok()?;
    let bv = match bias {
        Some(b) => Some(b.as_f32().ok()?),
        None => None,
    };
    let packed = w.packed_bytes().ok()?;
    let row_bytes = w.dtype().bytes_for(k)?;
    let out_shape = out_shape.unwrap_or_else(|| linear::out_shape(x.shape(), n));
    Some(product(
        w.dtype(),
        packed,
        row_bytes,
        xv,
        bv,
        activation,
        (rows, k, n),
        &out_shape,
    ))
}

#[allow(clippy::too_many_arguments)]
fn product(
    dtype: DType,
    packed: &[u8],
    row_bytes: usize,
    x: &[f32],
    bias: Option<&[f32]>,
    activation: Activation,
    (rows, k, n): (usize, usize, usize),
    out_shape: &[usize],
) -> Result<Vec<Tensor>> {
    let mut out = vec![0.0f32; rows * n];
    let mut row = vec![0.0f32; k];
    for j in 0..n {
        quant::dequantize_into(dtype, &packed[j * row_bytes..(j + 1) * row_bytes], &mut row)?;
        with_simd!(Isa::selected(), s => {
            for r in 0..rows {
                let acc = math::dot(s, &x[r * k..(r + 1) * k], &row);
                out[r * n + j] = acc;
            }
        });
    }
    for r in 0..rows {
        for j in 0..n {
            let v = out[r * n + j] + bias.map_or(0.0, |b| b[j]);
            out[r * n + j] = linear::act(activation, v);
        }
    }
    Ok(vec![Tensor::from_f32(out_shape, out)?])
}
