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
mod tests {
    // wasm-pack test runs these in the browser too.
    use super::*;
    use crate::cpu::run;
    use crate::cpu::testutil::*;
    use crate::op::{Direction, Op};
    use crate::rng::Rng;
    use alloc::vec::Vec;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn mm(ta: bool, tb: bool) -> Op {
        Op::Matmul {
            trans_a: ta,
            trans_b: tb,
        }
    }

    /// Textbook reference in f64 with explicit transposes, independent of `Gemm`.
    fn naive(
        ta: bool,
        tb: bool,
        a: &(Vec<usize>, Vec<f64>),
        b: &(Vec<usize>, Vec<f64>),
    ) -> Vec<f64> {
        let mat = |s: &[usize], d: &[f64], t: bool, bi: usize| -> Vec<Vec<f64>> {
            let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
            let base = if s.len() == 2 { 0 } else { bi * r * c };
            let m: Vec<Vec<f64>> = (0..r)
                .map(|i| (0..c).map(|j| d[base + i * c + j]).collect())
                .collect();
            if t {
                (0..c).map(|j| (0..r).map(|i| m[i][j]).collect()).collect()
            } else {
                m
            }
        };
        let batch: usize = if a.0.len() > 2 {
            a.0[..a.0.len() - 2].iter().product()
        } else {
            b.0[..b.0.len() - 2].iter().product()
        };
        let mut out = Vec::new();
        for bi in 0..batch {
            let x = mat(&a.0, &a.1, ta, bi);
            let y = mat(&b.0, &b.1, tb, bi);
            for row in &x {
                for j in 0..y[0].len() {
                    out.push(row.iter().zip(&y).map(|(x, yr)| x * yr[j]).sum());
                }
            }
        }
        out
    }

    #[test]
    fn two_by_two_by_hand() {
        // [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]]
        let a = [1.0f32, 2.0, 3.0, 4.0];
        let b = [5.0f32, 6.0, 7.0, 8.0];
        let s = [2usize, 2];
        let out = run(
            &mm(false, false),
            Direction::Forward,
            &[View::float(&s, &a), View::float(&s, &b)],
        )
        .unwrap();
        assert_eq!(out[0].shape, vec![2, 2]);
        assert_eq!(out[0].floats(), &[19.0, 22.0, 43.0, 50.0]);
        // a^T @ b = [[1,3],[2,4]] @ [[5,6],[7,8]] = [[26,30],[38,44]]
        let out = run(
            &mm(true, false),
            Direction::Forward,
            &[View::float(&s, &a), View::float(&s, &b)],
        )
        .unwrap();
        assert_eq!(out[0].floats(), &[26.0, 30.0, 38.0, 44.0]);
        // a @ b^T = [[1,2],[3,4]] @ [[5,7],[6,8]] = [[17,23],[39,53]]
        let out = run(
            &mm(false, true),
            Direction::Forward,
            &[View::float(&s, &a), View::float(&s, &b)],
        )
        .unwrap();
        assert_eq!(out[0].floats(), &[17.0, 23.0, 39.0, 53.0]);
    }

    #[test]
    fn backward_by_hand() {
        // out = a @ b with grad_out = ones: grad_a = ones @ b^T (row sums of b),
        // grad_b = a^T @ ones (column sums of a, repeated).
        let a = [1.0f64, 2.0, 3.0, 4.0];
        let b = [5.0f64, 6.0, 7.0, 8.0];
        let s = [2usize, 2];
        let ones = [1.0f64; 4];
        let out = [19.0f64, 22.0, 43.0, 50.0];
        let g = run(
            &mm(false, false),
            Direction::Backward,
            &[
                View::float(&s, &a),
                View::float(&s, &b),
                View::float(&s, &out),
                View::float(&s, &ones),
            ],
        )
        .unwrap();
        assert_eq!(g[0].floats(), &[11.0, 15.0, 11.0, 15.0]);
        assert_eq!(g[1].floats(), &[4.0, 4.0, 6.0, 6.0]);
    }

    #[test]
    fn awkward_shapes_and_trans_flags_match_naive() {
        let mut rng = Rng::new(7);
        for &(m, k, n) in &[(1, 1, 1), (1, 7, 1), (7, 13, 1), (13, 7, 7), (3, 1, 13)] {
            for ta in [false, true] {
                for tb in [false, true] {
                    for batch in [None, Some(vec![3]), Some(vec![2, 3])] {
                        let lead = batch.clone().unwrap_or_default();
                        let mut sa = lead.clone();
                        sa.extend(if ta { [k, m] } else { [m, k] });
                        let mut sb = lead.clone();
                        sb.extend(if tb { [n, k] } else { [k, n] });
                        let a = (sa.clone(), rand_vec(&mut rng, sa.iter().product()));
                        let b = (sb.clone(), rand_vec(&mut rng, sb.iter().product()));
                        let out = run_as::<f64>(&mm(ta, tb), &[a.clone(), b.clone()]);
                        let mut want_shape = lead.clone();
                        want_shape.extend([m, n]);
                        assert_eq!(out[0].shape, want_shape);
                        assert_close(out[0].floats(), &naive(ta, tb, &a, &b), 1e-12, 1e-12);
                    }
                }
            }
        }
    }

    #[test]
    fn broadcast_shared_2d_operand() {
        let mut rng = Rng::new(11);
        for ta in [false, true] {
            for tb in [false, true] {
                // b shared: a [3, 5, 7] (or [3, 7, 5]), b [7, 2] (or [2, 7]).
                let sa = if ta { vec![3, 7, 5] } else { vec![3, 5, 7] };
                let sb = if tb { vec![2, 7] } else { vec![7, 2] };
                let a = (sa.clone(), rand_vec(&mut rng, 105));
                let b = (sb.clone(), rand_vec(&mut rng, 14));
                let out = run_as::<f64>(&mm(ta, tb), &[a.clone(), b.clone()]);
                assert_eq!(out[0].shape, vec![3, 5, 2]);
                assert_close(out[0].floats(), &naive(ta, tb, &a, &b), 1e-12, 1e-12);
                // a shared: a [5, 7] (or [7, 5]), b [2, 3, 7, 2] (or [2, 3, 2, 7]).
                let sa2 = if ta { vec![7, 5] } else { vec![5, 7] };
                let sb2 = if tb {
                    vec![2, 3, 2, 7]
                } else {
                    vec![2, 3, 7, 2]
                };
                let a2 = (sa2, rand_vec(&mut rng, 35));
                let b2 = (sb2, rand_vec(&mut rng, 84));
                let out = run_as::<f64>(&mm(ta, tb), &[a2.clone(), b2.clone()]);
                assert_eq!(out[0].shape, vec![2, 3, 5, 2]);
                assert_close(out[0].floats(), &naive(ta, tb, &a2, &b2), 1e-12, 1e-12);
            }
        }
    }

    #[test]
    fn shared_operand_grad_is_batch_sum() {
        // grad of a shared b equals the sum of the per-batch grads of b.
        let mut rng = Rng::new(5);
        let a = rand_vec(&mut rng, 3 * 2 * 4);
        let b = rand_vec(&mut rng, 4 * 3);
        let g = rand_vec(&mut rng, 3 * 2 * 3);
        let out = vec![0.0; 18];
        let grads = run(
            &mm(false, false),
            Direction::Backward,
            &[
                View::float(&[3, 2, 4], &a),
                View::float(&[4, 3], &b),
                View::float(&[3, 2, 3], &out),
                View::float(&[3, 2, 3], &g),
            ],
        )
        .unwrap();
        assert_eq!(grads[1].shape, vec![4, 3]);
        let mut want = vec![0.0; 12];
        for bi in 0..3 {
            let gb = run(
                &mm(false, false),
                Direction::Backward,
                &[
                    View::float(&[2, 4], &a[bi * 8..bi * 8 + 8]),
                    View::float(&[4, 3], &b),
                    View::float(&[2, 3], &out[..6]),
                    View::float(&[2, 3], &g[bi * 6..bi * 6 + 6]),
                ],
            )
            .unwrap();
            for (w, x) in want.iter_mut().zip(gb[1].floats()) {
                *w += x;
            }
        }
        assert_close(grads[1].floats(), &want, 1e-12, 1e-12);
    }

    #[test]
    fn backward_matches_finite_differences() {
        let mut rng = Rng::new(3);
        let cases: &[(Vec<usize>, Vec<usize>, bool, bool)] = &[
            (vec![2, 3], vec![3, 4], false, false),
            (vec![3, 2], vec![3, 4], true, false),
            (vec![2, 3], vec![4, 3], false, true),
            (vec![3, 2], vec![4, 3], true, true),
            (vec![1, 1], vec![1, 1], false, false),
            (vec![3, 2, 7], vec![3, 7, 1], false, false),
            (vec![3, 7, 2], vec![3, 1, 7], true, true),
            (vec![2, 2, 5, 3], vec![3, 2], false, false),
            (vec![2, 5, 3], vec![2, 3], false, true),
            (vec![3, 5], vec![2, 3, 3, 4], true, false),
            (vec![5, 3], vec![3, 4, 3], false, true),
        ];
        for (i, (sa, sb, ta, tb)) in cases.iter().enumerate() {
            let a = (sa.clone(), rand_vec(&mut rng, sa.iter().product()));
            let b = (sb.clone(), rand_vec(&mut rng, sb.iter().product()));
            grad_check(&mm(*ta, *tb), &[a, b], 100 + i as u64);
        }
    }

    #[test]
    fn f32_agrees_with_f64() {
        let mut rng = Rng::new(9);
        let a = (vec![3, 13, 64], rand_vec(&mut rng, 3 * 13 * 64));
        let b = (vec![64, 7], rand_vec(&mut rng, 64 * 7));
        let lo = run_as::<f32>(&mm(false, false), &[a.clone(), b.clone()]);
        let hi = run_as::<f64>(&mm(false, false), &[a, b]);
        assert_close(lo[0].floats(), hi[0].floats(), 1e-5, 1e-5);
    }

    #[test]
    fn matmul_slices_matches_op_and_checks_lengths() {
        let mut rng = Rng::new(2);
        // op(a) = a^T: a stored [7, 5], so m = 5, k = 7; b [7, 3].
        let a = rand_vec(&mut rng, 7 * 5);
        let b = rand_vec(&mut rng, 7 * 3);
        let got = matmul_slices(&a, &b, 5, 7, 3, true, false).unwrap();
        let op = run_as::<f64>(
            &mm(true, false),
            &[(vec![7, 5], a.clone()), (vec![7, 3], b.clone())],
        );
        assert_eq!(got.as_slice(), op[0].floats(), "bit-identical to the op");
        assert!(matmul_slices(&a, &b, 5, 7, 4, true, false).is_err());
        assert!(matmul_slices(&a[..34], &b, 5, 7, 3, true, false).is_err());
        assert!(matches!(
            matmul_slices::<f64>(&[], &[], usize::MAX, 0, 2, false, false),
            Err(Error::LimitExceeded { .. })
        ));
        // k = 0 is an empty sum: zeros.
        assert_eq!(
            matmul_slices::<f64>(&[], &[], 2, 0, 3, false, false).unwrap(),
            vec![0.0; 6]
        );
    }

    #[test]
    fn errors_name_shapes() {
        let x = [0.0f32; 12];
        let e = run(
            &mm(false, false),
            Direction::Forward,
            &[View::float(&[3, 4], &x), View::float(&[3, 4], &x)],
        )
        .unwrap_err();
        assert_eq!(e, Error::mismatch("matmul", &[3, 4], &[3, 4]));
        // Fine once b is transposed.
        assert!(
            run(
                &mm(false, true),
                Direction::Forward,
                &[View::float(&[3, 4], &x), View::float(&[3, 4], &x)],
            )
            .is_ok()
        );
        // Batch dims that differ and neither side 2-D.
        let y = [0.0f32; 24];
        let e = run(
            &mm(false, false),
            Direction::Forward,
            &[View::float(&[2, 3, 4], &y), View::float(&[3, 4, 2], &y)],
        )
        .unwrap_err();
        assert_eq!(e, Error::mismatch("matmul", &[2, 3, 4], &[3, 4, 2]));
        // Rank 1.
        let e = run(
            &mm(false, false),
            Direction::Forward,
            &[View::float(&[12], &x), View::float(&[3, 4], &x)],
        )
        .unwrap_err();
        assert!(matches!(e, Error::BadShape { op: "matmul", .. }), "{e:?}");
        // Empty.
        let e = run(
            &mm(false, false),
            Direction::Forward,
            &[View::float(&[0, 4], &[]), View::float(&[4, 2], &x[..8])],
        )
        .unwrap_err();
        assert!(matches!(e, Error::Empty { op: "matmul", .. }), "{e:?}");
        // Backward with a grad_out of the wrong shape.
        let e = run(
            &mm(false, false),
            Direction::Backward,
            &[
                View::float(&[3, 4], &x),
                View::float(&[4, 3], &x),
                View::float(&[3, 3], &x[..9]),
                View::float(&[9], &x[..9]),
            ],
        )
        .unwrap_err();
        assert_eq!(e, Error::mismatch("matmul", &[3, 3], &[9]));
    }
}
