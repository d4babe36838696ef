//! Matrix multiply: `op(a) @ op(b)`, where `op(x)` is `x` or `x` with its last two dims swapped.
//!
//! Batched over leading dims: either both operands carry the same leading dims, or one operand
//! is 2-D and shared across the other's whole batch (its gradient is then summed over the batch).
//! Plain triple loops, `k` innermost and ascending, accumulated in `T`: this is the
//! specification the fast paths and the GPU kernels are measured against.

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, min_rank, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::tensor::numel;

const OP: &str = "matmul";

/// One 2-D product `out[m, n] = op(a)[m, k] @ op(b)[k, n]` over row-major slices.
///
/// `a` is stored `[m, k]`, or `[k, m]` when `trans_a`; `b` is stored `[k, n]`, or `[n, k]` when
/// `trans_b`. Callers validate the slice lengths (see [`matmul_slices`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gemm {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub trans_a: bool,
    pub trans_b: bool,
}

impl Gemm {
    fn lengths_ok<T>(&self, a: &[T], b: &[T], out: &[T]) -> bool {
        let (m, k, n) = (self.m, self.k, self.n);
        m.checked_mul(k) == Some(a.len())
            && k.checked_mul(n) == Some(b.len())
            && m.checked_mul(n) == Some(out.len())
    }

    /// Overwrites `out` with the product. Lengths must already be checked.
    pub(crate) fn run_into<T: Real>(&self, a: &[T], b: &[T], out: &mut [T]) {
        debug_assert!(self.lengths_ok(a, b, out));
        let Gemm {
            m,
            k,
            n,
            trans_a,
            trans_b,
        } = *self;
        for i in 0..m {
            for j in 0..n {
                let mut acc = T::ZERO;
                for p in 0..k {
                    let x = if trans_a { a[p * m + i] } else { a[i * k + p] };
                    let y = if trans_b { b[j * k + p] } else { b[p * n + j] };
                    acc += x * y;
                }
                out[i * n + j] = acc;
            }
        }
    }

    /// Adds the product to `out` (used to sum a shared operand's gradient over a batch).
    fn add_into<T: Real>(&self, a: &[T], b: &[T], out: &mut [T], scratch: &mut [T]) {
        self.run_into(a, b, scratch);
        for (o, s) in out.iter_mut().zip(scratch.iter()) {
            *o += *s;
        }
    }
}

/// A plain 2-D row-major product `op(a)[m, k] @ op(b)[k, n] -> [m, n]`, for kernels built on
/// matmul (attention, GRU, SVD).
///
/// `a` holds `m * k` elements stored `[m, k]` (or `[k, m]` when `trans_a`); `b` holds `k * n`
/// elements stored `[k, n]` (or `[n, k]` when `trans_b`). Same loop order as the `matmul` op, so
/// results are bit-identical to it.
pub fn matmul_slices<T: Real>(
    a: &[T],
    b: &[T],
    m: usize,
    k: usize,
    n: usize,
    trans_a: bool,
    trans_b: bool,
) -> Result<Vec<T>> {
    let g = Gemm {
        m,
        k,
        n,
        trans_a,
        trans_b,
    };
    let a_shape = if trans_a { [k, m] } else { [m, k] };
    let b_shape = if trans_b { [n, k] } else { [k, n] };
    if m.checked_mul(k) != Some(a.len()) {
        return Err(Error::bad_shape(
            OP,
            "a",
            &a_shape,
            alloc::format!("slice holds {} elements", a.len()),
        ));
    }
    if k.checked_mul(n) != Some(b.len()) {
        return Err(Error::bad_shape(
            OP,
            "b",
            &b_shape,
            alloc::format!("slice holds {} elements", b.len()),
        ));
    }
    // Only reachable with k = 0, where m and n are not bounded by the slice lengths.
    let len = m.checked_mul(n).ok_or_else(|| Error::LimitExceeded {
        what: alloc::format!("matmul output elements ({m} x {n})"),
        value: (m as u128 * n as u128).min(u64::MAX as u128) as u64,
        limit: usize::MAX as u64,
    })?;
    let mut out = vec![T::ZERO; len];
    g.run_into(a, b, &mut out);
    Ok(out)
}

/// Which operands carry a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Batching {
    /// Both operands carry the same leading dims (or both are 2-D).
    Both,
    /// `a` is 2-D and shared across `b`'s batch.
    SharedA,
    /// `b` is 2-D and shared across `a`'s batch.
    SharedB,
}

/// The validated geometry of one matmul call, shared by every backend: `batch` products of
/// `op(a)[m, k] @ op(b)[k, n]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatmulShape {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// Product of the leading (batch) dims of the output.
    pub batch: usize,
    /// Elements between consecutive batch entries of `a` (0: a 2-D `a` shared by the batch).
    pub a_step: usize,
    /// Elements between consecutive batch entries of `b` (0: a 2-D `b` shared by the batch).
    pub b_step: usize,
    /// `[batch dims..., m, n]`.
    pub out_shape: Vec<usize>,
}

impl MatmulShape {
    /// Checks `op(a) @ op(b)` for shapes `a`, `b`: ranks >= 2, no empty operand, equal inner
    /// dims, leading dims equal or one operand 2-D. Errors name `op` and both shapes.
    pub fn new(
        op: &'static str,
        trans_a: bool,
        trans_b: bool,
        a: &[usize],
        b: &[usize],
    ) -> Result<Self> {
        min_rank(op, "a", a, 2)?;
        min_rank(op, "b", b, 2)?;
        non_empty(op, "a", a)?;
        non_empty(op, "b", b)?;
        let (lead_a, mat_a) = a.split_at(a.len() - 2);
        let (lead_b, mat_b) = b.split_at(b.len() - 2);
        // op(a) is [m, k], op(b) is [k2, n].
        let (m, k) = if trans_a {
            (mat_a[1], mat_a[0])
        } else {
            (mat_a[0], mat_a[1])
        };
        let (k2, n) = if trans_b {
            (mat_b[1], mat_b[0])
        } else {
            (mat_b[0], mat_b[1])
        };
        if k != k2 {
            return Err(Error::mismatch(op, a, b));
        }
        let lead = if lead_a == lead_b || lead_b.is_empty() {
            lead_a
        } else if lead_a.is_empty() {
            lead_b
        } else {
            return Err(Error::mismatch(op, a, b));
        };
        let mut out_shape = lead.to_vec();
        out_shape.extend([m, n]);
        // m <= numel(a) and n <= numel(b), so this needs billions of elements in each input;
        // a clear error beats an overflowing length.
        if numel(&out_shape).is_none() {
            let value = out_shape
                .iter()
                .fold(1u128, |acc, &d| acc.saturating_mul(d as u128));
            return Err(Error::LimitExceeded {
                what: alloc::format!("{op} output {out_shape:?} element count"),
                value: value.min(u64::MAX as u128) as u64,
                limit: usize::MAX as u64,
            });
        }
        Ok(MatmulShape {
            m,
            k,
            n,
            // Element counts were checked against the data, so these products cannot overflow.
            batch: lead.iter().product(),
            a_step: if lead_a.is_empty() { 0 } else { m * k },
            b_step: if lead_b.is_empty() { 0 } else { k * n },
            out_shape,
        })
    }
}

/// The reference's view of a [`MatmulShape`]: the 2-D product and how the batch is laid out.
#[derive(Debug, Clone)]
struct Plan {
    gemm: Gemm,
    batching: Batching,
    batch: usize,
    out_shape: Vec<usize>,
}

impl Plan {
    fn new(trans_a: bool, trans_b: bool, a: &[usize], b: &[usize]) -> Result<Plan> {
        let sh = MatmulShape::new(OP, trans_a, trans_b, a, b)?;
        let batching = match (sh.a_step, sh.b_step) {
            (0, s) if s != 0 => Batching::SharedA,
            (s, 0) if s != 0 => Batching::SharedB,
            _ => Batching::Both,
        };
        Ok(Plan {
            gemm: Gemm {
                m: sh.m,
                k: sh.k,
                n: sh.n,
                trans_a,
                trans_b,
            },
            batching,
            batch: sh.batch,
            out_shape: sh.out_shape,
        })
    }

    /// Elements per batch entry of `a`, `b` and `out`, with 0 standing for "shared".
    fn strides(&self) -> (usize, usize, usize) {
        let Gemm { m, k, n, .. } = self.gemm;
        match self.batching {
            Batching::Both => (m * k, k * n, m * n),
            Batching::SharedA => (0, k * n, m * n),
            Batching::SharedB => (m * k, 0, m * n),
        }
    }
}

/// Forward. Args: `a [..., m, k]`, `b [..., k, n]` (before the trans flags).
/// Returns `out [batch..., m, n]`.
pub fn forward<T: Real>(trans_a: bool, trans_b: bool, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let (a_shape, a) = float_arg(OP, args, 0, "a")?;
    let (b_shape, b) = float_arg(OP, args, 1, "b")?;
    let plan = Plan::new(trans_a, trans_b, a_shape, b_shape)?;
    let (sa, sb, so) = plan.strides();
    let Gemm { m, k, n, .. } = plan.gemm;
    let mut out = vec![T::ZERO; plan.batch * so];
    for bi in 0..plan.batch {
        plan.gemm.run_into(
            &a[bi * sa..bi * sa + m * k],
            &b[bi * sb..bi * sb + k * n],
            &mut out[bi * so..(bi + 1) * so],
        );
    }
    Ok(vec![Owned::float(plan.out_shape, out)])
}

/// Backward. Args: `a`, `b`, `out`, `grad_out`. Returns `[grad_a, grad_b]` in the shapes of `a`
/// and `b` (a shared 2-D operand's gradient is summed over the batch, in batch order).
pub fn backward<T: Real>(trans_a: bool, trans_b: bool, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let (a_shape, a) = float_arg(OP, args, 0, "a")?;
    let (b_shape, b) = float_arg(OP, args, 1, "b")?;
    let (out_shape, _) = float_arg(OP, args, 2, "out")?;
    let (g_shape, g) = float_arg(OP, args, 3, "grad_out")?;
    let plan = Plan::new(trans_a, trans_b, a_shape, b_shape)?;
    same_shape(OP, &plan.out_shape, out_shape)?;
    same_shape(OP, &plan.out_shape, g_shape)?;
    let Gemm { m, k, n, .. } = plan.gemm;

    // With out = op(a) @ op(b) and G = grad_out [m, n]:
    //   d op(a) = G @ op(b)^T   [m, k]      d op(b) = op(a)^T @ G   [k, n]
    // and a transposed operand's gradient is stored transposed back, so every case is one
    // Gemm over the stored layouts, with no explicit transposes.
    let grad_a_gemm = if trans_a {
        // a stored [k, m]: grad = op(b) @ G^T.
        Gemm {
            m: k,
            k: n,
            n: m,
            trans_a: trans_b,
            trans_b: true,
        }
    } else {
        // a stored [m, k]: grad = G @ op(b)^T.
        Gemm {
            m,
            k: n,
            n: k,
            trans_a: false,
            trans_b: !trans_b,
        }
    };
    let grad_b_gemm = if trans_b {
        // b stored [n, k]: grad = G^T @ op(a).
        Gemm {
            m: n,
            k: m,
            n: k,
            trans_a: true,
            trans_b: trans_a,
        }
    } else {
        // b stored [k, n]: grad = op(a)^T @ G.
        Gemm {
            m: k,
            k: m,
            n,
            trans_a: !trans_a,
            trans_b: false,
        }
    };

    let (sa, sb, so) = plan.strides();
    let mut grad_a = vec![T::ZERO; a.len()];
    let mut grad_b = vec![T::ZERO; b.len()];
    let mut scratch_a = vec![T::ZERO; m * k];
    let mut scratch_b = vec![T::ZERO; k * n];
    for bi in 0..plan.batch {
        let a_i = &a[bi * sa..bi * sa + m * k];
        let b_i = &b[bi * sb..bi * sb + k * n];
        let g_i = &g[bi * so..(bi + 1) * so];
        let ga_i = &mut grad_a[bi * sa..bi * sa + m * k];
        if trans_a {
            grad_a_gemm.add_into(b_i, g_i, ga_i, &mut scratch_a);
        } else {
            grad_a_gemm.add_into(g_i, b_i, ga_i, &mut scratch_a);
        }
        let gb_i = &mut grad_b[bi * sb..bi * sb + k * n];
        if trans_b {
            grad_b_gemm.add_into(g_i, a_i, gb_i, &mut scratch_b);
        } else {
            grad_b_gemm.add_into(a_i, g_i, gb_i, &mut scratch_b);
        }
    }
    Ok(vec![
        Owned::float(a_shape.to_vec(), grad_a),
        Owned::float(b_shape.to_vec(), grad_b),
    ])
}

#[cfg(test)]
mod tests;

const ADD_OP: &str = "matmul_add";

/// `matmul_add` forward: `residual + op(a) @ op(b)`, the product made by `product` (matmul's
/// forward on `[a, b]`: this reference's, or a fast path's). Args: `residual`, `a`, `b`.
pub fn add_forward_with<T: Real>(
    args: &[View<T>],
    product: impl FnOnce(&[View<T>]) -> Result<Vec<Owned<T>>>,
) -> Result<Vec<Owned<T>>> {
    let (r_shape, r) = float_arg(ADD_OP, args, 0, "residual")?;
    let mut outs = product(args.get(1..).unwrap_or(&[]))?;
    let Some(out) = outs.first_mut() else {
        return Err(Error::Arity {
            op: ADD_OP,
            expected: 1,
            got: 0,
        });
    };
    same_shape(ADD_OP, &out.shape, r_shape)?;
    if let super::OwnedData::Float(v) = &mut out.data {
        for (o, x) in v.iter_mut().zip(r) {
            *o = *x + *o;
        }
    }
    Ok(outs)
}

/// `matmul_add` backward. Args: `residual`, `a`, `b`, `out`, `grad_out`. Returns
/// `[grad_residual, grad_a, grad_b]`: the residual's is `grad_out` itself, the operands' are
/// matmul's (made by `product_grad` from `[a, b, out, grad_out]`).
pub fn add_backward_with<T: Real>(
    args: &[View<T>],
    product_grad: impl FnOnce(&[View<T>]) -> Result<Vec<Owned<T>>>,
) -> Result<Vec<Owned<T>>> {
    let (r_shape, _) = float_arg(ADD_OP, args, 0, "residual")?;
    let (g_shape, g) = float_arg(ADD_OP, args, 4, "grad_out")?;
    same_shape(ADD_OP, r_shape, g_shape)?;
    let mut grads = vec![Owned::float(g_shape.to_vec(), g.to_vec())];
    grads.extend(product_grad(args.get(1..).unwrap_or(&[]))?);
    Ok(grads)
}
