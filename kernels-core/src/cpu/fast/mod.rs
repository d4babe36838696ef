//! Fast f32 CPU paths beside the reference, tested against it.
//!
//! matmul and linear (the same GEMM with a bias-and-activation epilogue) have one: a
//! cache-blocked GEMM ([`gemm`]) with register-blocked micro-kernels ([`kernels`]): AVX-512 or
//! AVX2 + FMA intrinsics on x86_64 (detected at run time with `std`; `KERNELS_CPU_KERNEL`
//! forces one, see [`config`]), `simd128` on wasm, and auto-vectorized plain Rust everywhere
//! else. Products with few rows or columns (decode's matrix-vector products) stream the large
//! operand without packing it (`skinny`). With the `threads` feature large products are split
//! over the persistent thread pool of `KERNELS_THREADS` threads ([`pool`]); without it (and in
//! `no_std`, and on wasm) one thread.
//! `gru_cell` and `gru_sequence` reuse the reference's gate arithmetic with their products on
//! that GEMM ([`matmul_slices`]).
//!
//! Shapes follow the reference ([`super::matmul`]): `a [..., m, k]` (or `[..., k, m]` with
//! `trans_a`), `b [..., k, n]` (or `[..., n, k]` with `trans_b`), rank >= 2, batched over
//! leading dims that are equal, or with one operand 2-D and shared by every batch entry.

mod buffers;
pub mod config;
pub mod decoded_b;
mod gated;
pub mod gemm;
pub mod half_dot;
pub mod isa;
pub mod kernel_family;
pub mod kernels;
mod matref;
pub mod packed;
pub mod pool;
pub mod qdot;
mod skinny;
mod transpose;
mod transposed;
pub mod vector;

use alloc::vec;
use alloc::vec::Vec;

use self::gemm::{Epilogue, Gemm, Kernel, MatRef};
use super::args::{Owned, View, float_arg, same_shape};
use super::linear;
use crate::error::{Error, Result};
use crate::op::{Activation, Direction, Op};

const NAME: &str = "matmul";

/// Runs `op` on a fast path if one exists for it; `None` means "use the reference".
///
/// Called before the reference dispatcher's own checks, so arity, dtypes and shapes are
/// validated here, with the same errors as the reference.
pub fn run(op: &Op, dir: Direction, args: &[View<f32>]) -> Option<Result<Vec<Owned<f32>>>> {
    if dir == Direction::Forward
        && let Some(r) = vector::forward(op, args)
    {
        return Some(r);
    }
    let kernel = Kernel::best();
    match (*op, dir) {
        (Op::Matmul { trans_a, trans_b }, Direction::Forward) => {
            Some(forward(kernel, trans_a, trans_b, args))
        }
        (Op::Matmul { trans_a, trans_b }, Direction::Backward) => {
            Some(backward(kernel, trans_a, trans_b, args))
        }
        (Op::GruCell, Direction::Forward) => {
            Some(super::gru::cell_forward_with(args, matmul_slices))
        }
        (Op::GruCell, Direction::Backward) => {
            Some(super::gru::cell_backward_with(args, matmul_slices))
        }
        (Op::GruSequence, Direction::Forward) => {
            Some(super::gru::sequence_forward_with(args, matmul_slices))
        }
        (Op::GruSequence, Direction::Backward) => {
            Some(super::gru::sequence_backward_with(args, matmul_slices))
        }
        (Op::GruEnsemble, Direction::Forward) => {
            Some(super::gru::ensemble_forward_with(args, matmul_slices))
        }
        (Op::GruEnsemble, Direction::Backward) => {
            Some(super::gru::ensemble_backward_with(args, matmul_slices))
        }
        (Op::MatmulAdd { trans_a, trans_b }, Direction::Forward) => {
            Some(super::matmul::add_forward_with(args, |p| {
                forward(kernel, trans_a, trans_b, p)
            }))
        }
        (Op::MatmulAdd { trans_a, trans_b }, Direction::Backward) => {
            Some(super::matmul::add_backward_with(args, |p| {
                backward(kernel, trans_a, trans_b, p)
            }))
        }
        (Op::Transpose, Direction::Forward) => {
            Some(super::check_args(op, dir, args).and_then(|()| transpose::forward(args)))
        }
        (Op::MatmulSwiglu, Direction::Forward) => Some(gated::forward(kernel, args)),
        (Op::MatmulSwiglu, Direction::Backward) => Some(gated::backward(kernel, args)),
        (Op::Linear { activation }, Direction::Forward) => {
            Some(linear_forward(kernel, activation, args))
        }
        (Op::Linear { activation }, Direction::Backward) => {
            Some(linear_backward(kernel, activation, args))
        }
        (
            Op::Binary(_)
            | Op::Scale { .. }
            | Op::Unary(_)
            | Op::Gelu { .. }
            | Op::Swiglu
            | Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
            | Op::Rope { .. }
            | Op::Embedding
            | Op::Reduce(_)
            | Op::Argmax
            | Op::Dequantize
            | Op::Sample { .. }
            | Op::Transpose
            | Op::Concat
            | Op::KvWrite { .. }
            | Op::RopeKvWrite { .. }
            | Op::Attention { .. }
            | Op::CrossEntropy
            | Op::Mse
            | Op::SvdLowrank { .. }
            | Op::AdamwStep { .. }
            | Op::SgdStep { .. },
            _,
        ) => None,
    }
}

/// `op(a) [m, k] . op(b) [k, n]` on the fast GEMM, with the reference `matmul_slices`'
/// signature and layout (`a` stored `[k, m]` when `trans_a`, `b` stored `[n, k]` when
/// `trans_b`).
pub fn matmul_slices(
    a: &[f32],
    b: &[f32],
    m: usize,
    k: usize,
    n: usize,
    trans_a: bool,
    trans_b: bool,
) -> Result<Vec<f32>> {
    if m.checked_mul(k) != Some(a.len()) || k.checked_mul(n) != Some(b.len()) {
        return Err(Error::mismatch(NAME, &[m, k], &[k, n]));
    }
    let mut out = zeros(m * n)?;
    let mut g = Gemm::new(Kernel::best());
    g.run(
        MatRef::new(a, m, k, trans_a)?,
        MatRef::new(b, k, n, trans_b)?,
        &mut out,
        n,
    )?;
    Ok(out)
}

/// The fast path shares the reference's validated geometry (same checks, same errors).
use super::matmul::MatmulShape as Plan;

impl Plan {
    /// `a [batch, m, k]` times a shared `b` is one `[batch * m, k] . op(b)` product: fold the
    /// batch into `m` so the kernel sees one tall matrix (and, backward, sums `grad_b` over the
    /// batch inside the reduction) instead of many short ones.
    fn fold(mut self, ta: bool) -> Plan {
        if !ta && self.b_step == 0 && self.a_step != 0 {
            self.m *= self.batch;
            self.batch = 1;
            self.a_step = 0;
        }
        self
    }

    fn out_len(&self) -> usize {
        self.batch * self.m * self.n
    }
}

fn arity(args: &[View<f32>], expected: usize) -> Result<()> {
    if args.len() != expected {
        return Err(Error::Arity {
            op: NAME,
            expected,
            got: args.len(),
        });
    }
    Ok(())
}

/// A zeroed output buffer; an allocation failure is an error, not an abort.
fn zeros(len: usize) -> Result<Vec<f32>> {
    buffers::zeroed(len, NAME)
}

/// Batch entry `i` of an operand: `len` values from `i * step` (`step` 0: a shared operand).
fn entry(x: &[f32], i: usize, step: usize, len: usize) -> &[f32] {
    x.get(i * step..)
        .unwrap_or_default()
        .get(..len)
        .unwrap_or_default()
}

fn entry_mut(x: &mut [f32], i: usize, step: usize, len: usize) -> &mut [f32] {
    let x = x.get_mut(i * step..).unwrap_or_default();
    let len = len.min(x.len());
    &mut x[..len]
}

fn forward(kernel: Kernel, ta: bool, tb: bool, args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
    arity(args, 2)?;
    let (a_shape, a) = float_arg(NAME, args, 0, "a")?;
    let (b_shape, b) = float_arg(NAME, args, 1, "b")?;
    let full = Plan::new(NAME, ta, tb, a_shape, b_shape)?;
    let p = full.clone().fold(ta);
    let (m, k, n) = (p.m, p.k, p.n);
    let mut out = zeros(p.out_len())?;
    let mut g = Gemm::new(kernel);
    for i in 0..p.batch {
        // out[i] [m, n] = op(a[i]) [m, k] . op(b[i]) [k, n]
        let ai = MatRef::new(entry(a, i, p.a_step, m * k), m, k, ta)?;
        let bi = MatRef::new(entry(b, i, p.b_step, k * n), k, n, tb)?;
        g.run(ai, bi, entry_mut(&mut out, i, m * n, m * n), n)?;
    }
    Ok(vec![Owned::float(full.out_shape, out)])
}

/// `grad_op(A) = G . op(B)^T` and `grad_op(B) = op(A)^T . G`, written into the storage layout
/// of `a` and `b` by transposing the product when the operand was stored transposed. A shared
/// 2-D operand's gradient accumulates over the batch in place.
fn backward(kernel: Kernel, ta: bool, tb: bool, args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
    arity(args, 4)?;
    let (a_shape, a) = float_arg(NAME, args, 0, "a")?;
    let (b_shape, b) = float_arg(NAME, args, 1, "b")?;
    let (out_shape, _) = float_arg(NAME, args, 2, "out")?;
    let (g_shape, g) = float_arg(NAME, args, 3, "grad_out")?;
    let full = Plan::new(NAME, ta, tb, a_shape, b_shape)?;
    same_shape(NAME, &full.out_shape, out_shape)?;
    same_shape(NAME, &full.out_shape, g_shape)?;
    let p = full.fold(ta);
    let (m, k, n) = (p.m, p.k, p.n);
    let mut grad_a = zeros(a.len())?;
    let mut grad_b = zeros(b.len())?;
    let mut gemm = Gemm::new(kernel);
    for i in 0..p.batch {
        let ai = MatRef::new(entry(a, i, p.a_step, m * k), m, k, ta)?;
        let bi = MatRef::new(entry(b, i, p.b_step, k * n), k, n, tb)?;
        let gi = MatRef::new(entry(g, i, m * n, m * n), m, n, false)?;
        let da = entry_mut(&mut grad_a, i, p.a_step, m * k);
        if ta {
            // a stored [k, m]: grad_a = (G . op(B)^T)^T = op(B) [k, n] . G^T [n, m]
            gemm.run(bi, gi.t(), da, m)?;
        } else {
            // grad_a [m, k] = G [m, n] . op(B)^T [n, k]
            gemm.run(gi, bi.t(), da, k)?;
        }
        let db = entry_mut(&mut grad_b, i, p.b_step, k * n);
        if tb {
            // b stored [n, k]: grad_b = (op(A)^T . G)^T = G^T [n, m] . op(A) [m, k]
            gemm.run(gi.t(), ai, db, k)?;
        } else {
            // grad_b [k, n] = op(A)^T [k, m] . G [m, n]
            gemm.run(ai.t(), gi, db, n)?;
        }
    }
    Ok(vec![
        Owned::float(a_shape.to_vec(), grad_a),
        Owned::float(b_shape.to_vec(), grad_b),
    ])
}

const LINEAR: &str = "linear";

/// `linear` forward: the GEMM `x [rows, in] . weight^T [in, out]`, then bias and activation in
/// one pass over the output.
fn linear_forward(kernel: Kernel, a: Activation, args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
    let (xs, x) = float_arg(LINEAR, args, 0, "x")?;
    let (ws, w) = float_arg(LINEAR, args, 1, "weight")?;
    let (bs, b) = float_arg(LINEAR, args, 2, "bias")?;
    let (rows, in_f, out_f) = linear::check(xs, ws, bs)?;
    let mut out = zeros(rows * out_f)?;
    let epi = Epilogue {
        bias: Some(b),
        act: a,
    };
    Gemm::new(kernel).run_with(
        MatRef::new(x, rows, in_f, false)?,
        MatRef::new(w, in_f, out_f, true)?,
        &mut out,
        out_f,
        &epi,
    )?;
    Ok(vec![Owned::float(linear::out_shape(xs, out_f), out)])
}

/// `linear` backward: `g' = g * act'(out)`, then `grad_x = g' . weight`, `grad_weight = g'^T .
/// x` as GEMMs and `grad_bias` as column sums of `g'`.
fn linear_backward(kernel: Kernel, a: Activation, args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
    let (xs, x) = float_arg(LINEAR, args, 0, "x")?;
    let (ws, w) = float_arg(LINEAR, args, 1, "weight")?;
    let (bs, _) = float_arg(LINEAR, args, 2, "bias")?;
    let (ys, y) = float_arg(LINEAR, args, 3, "out")?;
    let (gs, g) = float_arg(LINEAR, args, 4, "grad_out")?;
    let (rows, in_f, out_f) = linear::check(xs, ws, bs)?;
    let want = linear::out_shape(xs, out_f);
    same_shape(LINEAR, &want, ys)?;
    same_shape(LINEAR, &want, gs)?;
    let mut gp = zeros(rows * out_f)?;
    let mut gb = zeros(out_f)?;
    for ((gpr, gr), yr) in gp
        .chunks_exact_mut(out_f)
        .zip(g.chunks_exact(out_f))
        .zip(y.chunks_exact(out_f))
    {
        for (((o, &gv), &yv), acc) in gpr.iter_mut().zip(gr).zip(yr).zip(gb.iter_mut()) {
            *o = gv * linear::act_grad(a, yv);
            *acc += *o;
        }
    }
    let mut gx = zeros(x.len())?;
    let mut gw = zeros(w.len())?;
    let mut gemm = Gemm::new(kernel);
    let gpm = MatRef::new(&gp, rows, out_f, false)?;
    gemm.run(gpm, MatRef::new(w, out_f, in_f, false)?, &mut gx, in_f)?;
    gemm.run(gpm.t(), MatRef::new(x, rows, in_f, false)?, &mut gw, in_f)?;
    Ok(vec![
        Owned::float(xs.to_vec(), gx),
        Owned::float(ws.to_vec(), gw),
        Owned::float(bs.to_vec(), gb),
    ])
}

#[cfg(test)]
mod tests {
    // wasm-pack test runs these in the browser too.
    use alloc::vec;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::numerics::compare;
    use crate::op::OpKind;
    use crate::rng::Rng;

    /// `op(A) . op(B)` per batch entry by the triple loop in f64 (b_shared / a_shared: that
    /// operand is one matrix for every entry).
    #[allow(clippy::too_many_arguments)]
    fn naive(
        ta: bool,
        tb: bool,
        a: &[f32],
        b: &[f32],
        batch: usize,
        (a_shared, b_shared): (bool, bool),
        (m, k, n): (usize, usize, usize),
    ) -> Vec<f64> {
        let mut c = vec![0.0f64; batch * m * n];
        for e in 0..batch {
            let ao = if a_shared { 0 } else { e * m * k };
            let bo = if b_shared { 0 } else { e * k * n };
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0.0f64;
                    for p in 0..k {
                        let x = if ta {
                            a[ao + p * m + i]
                        } else {
                            a[ao + i * k + p]
                        };
                        let y = if tb {
                            b[bo + j * k + p]
                        } else {
                            b[bo + p * n + j]
                        };
                        s += x as f64 * y as f64;
                    }
                    c[e * m * n + i * n + j] = s;
                }
            }
        }
        c
    }

    fn shape(lead: &[usize], r: usize, c: usize, t: bool) -> Vec<usize> {
        let mut s = lead.to_vec();
        s.extend(if t { [c, r] } else { [r, c] });
        s
    }

    fn run_fast(op: Op, dir: Direction, args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
        run(&op, dir, args).expect("matmul has a fast path")
    }

    fn assert_close(what: &str, got: &[f32], want: &[f64], k: usize, bwd: bool) {
        let spec = OpKind::Matmul.spec();
        let budget = if bwd {
            spec.budget_backward
        } else {
            spec.budget
        };
        let (atol, rtol) = budget.at(k);
        let want: Vec<f32> = want.iter().map(|&x| x as f32).collect();
        let c = compare(got, &want, atol, rtol);
        assert!(c.pass, "{what}: {c:?}");
    }

    /// Forward and backward of one configuration against the triple loop. The backward
    /// reference uses the same loop: grad_a[i, p] = sum_j G[i, j] op(B)[p, j], etc.
    fn check(ta: bool, tb: bool, a_lead: &[usize], b_lead: &[usize], mkn: (usize, usize, usize)) {
        let (m, k, n) = mkn;
        let what = alloc::format!("ta={ta} tb={tb} a_lead={a_lead:?} b_lead={b_lead:?} {mkn:?}");
        let a_shape = shape(a_lead, m, k, ta);
        let b_shape = shape(b_lead, k, n, tb);
        let lead = if a_lead.is_empty() { b_lead } else { a_lead };
        let batch: usize = lead.iter().product();
        let shared = (a_lead.is_empty(), b_lead.is_empty());
        let mut rng = Rng::new((m * 1000 + k * 10 + n) as u64);
        let a = rng.uniform_vec(a_shape.iter().product(), -1.0, 1.0);
        let b = rng.uniform_vec(b_shape.iter().product(), -1.0, 1.0);
        let op = Op::Matmul {
            trans_a: ta,
            trans_b: tb,
        };
        let args = [View::float(&a_shape, &a), View::float(&b_shape, &b)];
        let out = run_fast(op, Direction::Forward, &args).unwrap();
        let want = naive(ta, tb, &a, &b, batch, shared, mkn);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].shape, shape(lead, m, n, false), "{what}");
        assert_close(&what, out[0].floats(), &want, k, false);

        let g = rng.uniform_vec(batch * m * n, -1.0, 1.0);
        let out_shape = out[0].shape.clone();
        let bargs = [args[0], args[1], out[0].view(), View::float(&out_shape, &g)];
        let grads = run_fast(op, Direction::Backward, &bargs).unwrap();
        assert_eq!(grads.len(), 2);
        assert_eq!(grads[0].shape, a_shape);
        assert_eq!(grads[1].shape, b_shape);
        // grad of stored a: for ta=false, grad_a = G . op(B)^T, i.e. a matmul of G [m, n]
        // with op(B) [k, n] transposed; stored-transposed a gets the transpose of that.
        let mut want_ga = vec![0.0f64; a.len()];
        let mut want_gb = vec![0.0f64; b.len()];
        for e in 0..batch {
            let ao = if shared.0 { 0 } else { e * m * k };
            let bo = if shared.1 { 0 } else { e * k * n };
            for i in 0..m {
                for j in 0..n {
                    let gij = g[e * m * n + i * n + j] as f64;
                    for p in 0..k {
                        let ia = if ta { ao + p * m + i } else { ao + i * k + p };
                        let ib = if tb { bo + j * k + p } else { bo + p * n + j };
                        want_ga[ia] += gij * b[ib] as f64;
                        want_gb[ib] += gij * a[ia] as f64;
                    }
                }
            }
        }
        // Reduced lengths: n for grad_a, m (times the batch for a shared b) for grad_b.
        let kb = if shared.1 { m * batch } else { m };
        let ka = if shared.0 { n * batch } else { n };
        assert_close(
            &alloc::format!("{what} grad_a"),
            grads[0].floats(),
            &want_ga,
            ka,
            true,
        );
        assert_close(
            &alloc::format!("{what} grad_b"),
            grads[1].floats(),
            &want_gb,
            kb,
            true,
        );
    }

    const TRANS: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

    #[test]
    fn forward_and_backward_match_triple_loop_2d() {
        for (ta, tb) in TRANS {
            for mkn in [
                (1, 1, 1),
                (7, 13, 31),
                (13, 67, 7),
                (67, 31, 13),
                (5, 1, 17),
                (145, 257, 17),
                (6, 255, 16),
            ] {
                check(ta, tb, &[], &[], mkn);
            }
        }
    }

    #[test]
    fn forward_and_backward_match_triple_loop_batched() {
        for (ta, tb) in TRANS {
            for mkn in [(1, 1, 1), (7, 13, 5), (13, 7, 31)] {
                check(ta, tb, &[3], &[3], mkn);
                check(ta, tb, &[2, 3], &[2, 3], mkn);
                // One operand 2-D and shared.
                check(ta, tb, &[2, 3], &[], mkn);
                check(ta, tb, &[], &[2, 3], mkn);
                check(ta, tb, &[1], &[], mkn);
            }
        }
    }

    #[test]
    fn hand_checked_values() {
        // [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[19, 22], [43, 50]]
        let (a, b) = ([1.0f32, 2.0, 3.0, 4.0], [5.0f32, 6.0, 7.0, 8.0]);
        let s = [2, 2];
        let op = |trans_a, trans_b| Op::Matmul { trans_a, trans_b };
        let args = [View::float(&s, &a), View::float(&s, &b)];
        let out = run_fast(op(false, false), Direction::Forward, &args).unwrap();
        assert_eq!(out[0].floats(), &[19.0, 22.0, 43.0, 50.0]);
        // a^T @ b = [[1, 3], [2, 4]] @ [[5, 6], [7, 8]] = [[26, 30], [38, 44]]
        let out = run_fast(op(true, false), Direction::Forward, &args).unwrap();
        assert_eq!(out[0].floats(), &[26.0, 30.0, 38.0, 44.0]);
        // a @ b^T = [[1, 2], [3, 4]] @ [[5, 7], [6, 8]] = [[17, 23], [39, 53]]
        let out = run_fast(op(false, true), Direction::Forward, &args).unwrap();
        assert_eq!(out[0].floats(), &[17.0, 23.0, 39.0, 53.0]);
        // Backward with G = ones: grad_a = G @ b^T = row sums of b per row: [[11, 15], [11, 15]];
        // grad_b = a^T @ G = column sums of a: [[4, 4], [6, 6]].
        let ones = [1.0f32; 4];
        let bargs = [args[0], args[1], out[0].view(), View::float(&s, &ones)];
        let g = run_fast(op(false, false), Direction::Backward, &bargs).unwrap();
        assert_eq!(g[0].floats(), &[11.0, 15.0, 11.0, 15.0]);
        assert_eq!(g[1].floats(), &[4.0, 4.0, 6.0, 6.0]);
    }

    /// The reference's geometry for `Op::Matmul` (reduced length of out, grad_a, grad_b).
    fn reduced_lengths(op: Op, a: &[usize], b: &[usize]) -> (usize, usize, usize) {
        let Op::Matmul { trans_a, trans_b } = op else {
            unreachable!()
        };
        let p = Plan::new(NAME, trans_a, trans_b, a, b).unwrap();
        let shared = |x: &[usize]| if x.len() == 2 { p.batch } else { 1 };
        (p.k, p.n * shared(a), p.m * shared(b))
    }

    #[test]
    fn agrees_with_the_reference_on_parity_cases() {
        use crate::backend::{Backend, CpuBackend};
        use crate::parity;
        // f32 activations: the parity cases hold the op to its own budget; the default 8-bit
        // activations of quantized weights' products are held to theirs by qdot's tests.
        let fast = CpuBackend::new().with_exact_activations(true);
        let reference = CpuBackend::reference();
        let spec = OpKind::Matmul.spec();
        let mut extra = Vec::new();
        // Sizes around the AVX2 kernel's tiles too (the parity list is for every backend).
        let mut rng = Rng::new(3);
        for (a, b, ta, tb) in [
            (vec![145, 257], vec![257, 17], false, false),
            (vec![2, 31, 6], vec![2, 16, 31], true, true),
            (vec![7, 67], vec![3, 33, 67], false, true),
        ] {
            let op = Op::Matmul {
                trans_a: ta,
                trans_b: tb,
            };
            let inputs = vec![
                rng.normal_tensor(&a, 0.0, 1.0).unwrap(),
                rng.normal_tensor(&b, 0.0, 1.0).unwrap(),
            ];
            extra.push((op, inputs));
        }
        let cases = parity::cases(OpKind::Matmul, 11).unwrap();
        let all = cases.into_iter().map(|c| (c.op, c.inputs)).chain(extra);
        for (seed, (op, inputs)) in all.enumerate() {
            let label = alloc::format!("{op:?} {:?} {:?}", inputs[0].shape(), inputs[1].shape());
            let (k, ka, kb) = reduced_lengths(op, inputs[0].shape(), inputs[1].shape());
            let ins: Vec<&crate::Tensor> = inputs.iter().collect();
            let got = fast.run(&op, Direction::Forward, &ins).unwrap();
            let want = reference.run(&op, Direction::Forward, &ins).unwrap();
            assert_eq!(got[0].shape(), want[0].shape(), "{label}");
            let (atol, rtol) = spec.budget.at(k);
            let c = compare(
                got[0].as_f32().unwrap(),
                want[0].as_f32().unwrap(),
                atol,
                rtol,
            );
            assert!(c.pass, "{label} forward: {c:?}");

            let g = parity::grad_outputs(&want, seed as u64).unwrap();
            let bins = [ins[0], ins[1], &want[0], &g[0]];
            let got = fast.run(&op, Direction::Backward, &bins).unwrap();
            let want = reference.run(&op, Direction::Backward, &bins).unwrap();
            for (i, red) in [(0, ka), (1, kb)] {
                assert_eq!(got[i].shape(), want[i].shape(), "{label}");
                let (atol, rtol) = spec.budget_backward.at(red);
                let c = compare(
                    got[i].as_f32().unwrap(),
                    want[i].as_f32().unwrap(),
                    atol,
                    rtol,
                );
                assert!(c.pass, "{label} grad {i}: {c:?}");
            }
        }
    }

    #[test]
    fn linear_agrees_with_the_reference() {
        use crate::backend::{Backend, CpuBackend};
        use crate::op::Activation;
        let (fast, reference) = (CpuBackend::new(), CpuBackend::reference());
        let spec = OpKind::Linear.spec();
        let mut rng = Rng::new(5);
        for (i, (xs, out_f)) in [
            (vec![1usize, 1], 1usize),
            (vec![145, 257], 17),
            (vec![2, 7, 67], 33),
        ]
        .into_iter()
        .enumerate()
        {
            for activation in Activation::ALL {
                let op = Op::Linear { activation };
                let in_f = xs[xs.len() - 1];
                let inputs = [
                    rng.normal_tensor(&xs, 0.0, 1.0).unwrap(),
                    rng.normal_tensor(&[out_f, in_f], 0.0, 0.1).unwrap(),
                    rng.normal_tensor(&[out_f], 0.0, 1.0).unwrap(),
                ];
                let ins: Vec<&crate::Tensor> = inputs.iter().collect();
                let k = op.reduced_len(&[&xs, &[out_f, in_f], &[out_f]]);
                let got = fast.run(&op, Direction::Forward, &ins).unwrap();
                let want = reference.run(&op, Direction::Forward, &ins).unwrap();
                let (atol, rtol) = spec.budget.at(k);
                let c = compare(
                    got[0].as_f32().unwrap(),
                    want[0].as_f32().unwrap(),
                    atol,
                    rtol,
                );
                assert!(c.pass, "{op:?} {xs:?} forward: {c:?}");
                let g = crate::parity::grad_outputs(&want, i as u64).unwrap();
                let bins = [ins[0], ins[1], ins[2], &want[0], &g[0]];
                let got = fast.run(&op, Direction::Backward, &bins).unwrap();
                let want = reference.run(&op, Direction::Backward, &bins).unwrap();
                let (atol, rtol) = spec.budget_backward.at(k);
                for (gi, wi) in got.iter().zip(&want) {
                    assert_eq!(gi.shape(), wi.shape());
                    let c = compare(gi.as_f32().unwrap(), wi.as_f32().unwrap(), atol, rtol);
                    assert!(c.pass, "{op:?} {xs:?} backward: {c:?}");
                }
            }
        }
    }

    #[test]
    fn errors_are_the_references_errors() {
        let shapes: [(&[usize], &[usize]); 9] = [
            (&[2, 3], &[4, 5]),
            (&[3], &[3, 5]),
            (&[2, 3], &[3]),
            (&[0, 3], &[3, 5]),
            (&[2, 3], &[3, 0]),
            (&[2, 0], &[0, 3]),
            (&[2, 2, 3], &[3, 3, 5]),
            (&[2, 2, 3], &[1, 2, 3, 5]),
            (&[1, 2, 3], &[2, 3, 5]),
        ];
        for (ta, tb) in TRANS {
            let op = Op::Matmul {
                trans_a: ta,
                trans_b: tb,
            };
            for (sa, sb) in shapes {
                let a = vec![1.0f32; sa.iter().product()];
                let b = vec![1.0f32; sb.iter().product()];
                let args = [View::float(sa, &a), View::float(sb, &b)];
                let want = super::super::run(&op, Direction::Forward, &args);
                assert!(want.is_err(), "{sa:?} {sb:?} should be rejected");
                assert_eq!(
                    run_fast(op, Direction::Forward, &args),
                    want,
                    "{sa:?} {sb:?}"
                );
            }
            // Backward: grad_out and out of the wrong shape.
            let (a, b) = ([1.0f32; 6], [1.0f32; 6]);
            let sa: &[usize] = if ta { &[3, 2] } else { &[2, 3] };
            let sb: &[usize] = if tb { &[2, 3] } else { &[3, 2] };
            let (good, bad) = ([1.0f32; 4], [1.0f32; 6]);
            for (so, sg) in [([2, 2], [3, 2]), ([2, 3], [2, 2])] {
                let o = if so == [2, 2] { &good[..] } else { &bad[..] };
                let g = if sg == [2, 2] { &good[..] } else { &bad[..] };
                let args = [
                    View::float(sa, &a),
                    View::float(sb, &b),
                    View::float(&so, o),
                    View::float(&sg, g),
                ];
                let want = super::super::run(&op, Direction::Backward, &args);
                assert!(want.is_err());
                assert_eq!(run_fast(op, Direction::Backward, &args), want);
            }
        }
    }

    #[test]
    fn other_ops_fall_back_to_the_reference() {
        let x = [1.0f32];
        let args = [View::float(&[1], &x)];
        assert!(run(&Op::Concat, Direction::Forward, &args).is_none());
        assert!(run(&Op::Transpose, Direction::Backward, &args).is_none());
        assert!(run(&Op::Mse, Direction::Backward, &args).is_none());
        assert!(run(&Op::Argmax, Direction::Forward, &args).is_none());
    }

    #[test]
    fn shape_errors() {
        let op = Op::Matmul {
            trans_a: false,
            trans_b: false,
        };
        let fwd = |sa: &[usize], sb: &[usize]| {
            let a = vec![1.0f32; sa.iter().product()];
            let b = vec![1.0f32; sb.iter().product()];
            run_fast(
                op,
                Direction::Forward,
                &[View::float(sa, &a), View::float(sb, &b)],
            )
        };
        assert!(matches!(
            fwd(&[2, 3], &[4, 5]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(fwd(&[3], &[3, 5]), Err(Error::BadShape { .. })));
        assert!(matches!(fwd(&[2, 3], &[3]), Err(Error::BadShape { .. })));
        assert!(matches!(fwd(&[0, 3], &[3, 5]), Err(Error::Empty { .. })));
        assert!(matches!(fwd(&[2, 3], &[3, 0]), Err(Error::Empty { .. })));
        // Leading dims must be equal unless one side is 2-D.
        assert!(matches!(
            fwd(&[2, 2, 3], &[3, 3, 5]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            fwd(&[2, 2, 3], &[1, 2, 3, 5]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert_eq!(fwd(&[4, 2, 3], &[3, 5]).unwrap()[0].shape, vec![4, 2, 5]);
        assert_eq!(fwd(&[2, 3], &[4, 3, 5]).unwrap()[0].shape, vec![4, 2, 5]);
        // Inner mismatch under transposes: a^T is [3, 2], so b must have 2 rows.
        let t = Op::Matmul {
            trans_a: true,
            trans_b: false,
        };
        let (a, b) = ([0.0f32; 6], [0.0f32; 15]);
        let args = [View::float(&[2, 3], &a), View::float(&[3, 5], &b)];
        assert_eq!(
            run_fast(t, Direction::Forward, &args),
            Err(Error::mismatch(NAME, &[2, 3], &[3, 5]))
        );
    }

    #[test]
    fn argument_errors() {
        let op = Op::Matmul {
            trans_a: false,
            trans_b: false,
        };
        let x = [1.0f32; 4];
        let s = [2, 2];
        let v = View::float(&s, &x);
        assert!(matches!(
            run_fast(op, Direction::Forward, &[v]),
            Err(Error::Arity {
                expected: 2,
                got: 1,
                ..
            })
        ));
        assert!(matches!(
            run_fast(op, Direction::Backward, &[v, v, v]),
            Err(Error::Arity {
                expected: 4,
                got: 3,
                ..
            })
        ));
        let ints = [1i32; 4];
        let iv = View {
            shape: &s,
            data: super::super::Data::I32(&ints),
        };
        assert!(matches!(
            run_fast(op, Direction::Forward, &[v, iv]),
            Err(Error::DTypeMismatch { .. })
        ));
        // Data that does not fill the shape.
        let short = View::float(&[3, 2], &x);
        assert!(matches!(
            run_fast(op, Direction::Forward, &[v, short]),
            Err(Error::BadShape { .. })
        ));
        // grad_out must have the output's shape.
        let g = [1.0f32; 6];
        let bad_g = View::float(&[3, 2], &g);
        assert!(matches!(
            run_fast(op, Direction::Backward, &[v, v, v, bad_g]),
            Err(Error::ShapeMismatch { .. })
        ));
    }

    /// gru_sequence, gru_cell and gru_ensemble (one member) on the fast GEMM against the
    /// reference (plain loops), forward and backward, within the op's budgets, on awkward sizes
    /// (primes, hidden 1, seq 1).
    #[test]
    fn gru_matches_the_reference() {
        let mut rng = Rng::new(17);
        for &(seq, batch, input, hidden) in &[(1, 1, 1, 1), (3, 5, 7, 11), (4, 2, 13, 17)] {
            let gates = 3 * hidden;
            let shapes: [Vec<usize>; 6] = [
                vec![seq, batch, input],
                vec![batch, hidden],
                vec![gates, input],
                vec![gates, hidden],
                vec![gates],
                vec![gates],
            ];
            let data: Vec<Vec<f32>> = shapes
                .iter()
                .map(|s| rng.uniform_vec(s.iter().product(), -1.0, 1.0))
                .collect();
            let args: Vec<View<f32>> = shapes
                .iter()
                .zip(&data)
                .map(|(s, d)| View::float(s, d))
                .collect();
            // The ensemble of one member: the same tensors with a leading member axis.
            let members: Vec<Vec<usize>> =
                shapes.iter().map(|s| [&[1usize][..], s].concat()).collect();
            for kind in [OpKind::GruSequence, OpKind::GruCell, OpKind::GruEnsemble] {
                let op = Op::default_for(kind).unwrap();
                let args: Vec<View<f32>> = match kind {
                    OpKind::GruCell => {
                        let mut a = args.clone();
                        a[0] = View::float(&shapes[0][1..], &data[0][..batch * input]);
                        a
                    }
                    OpKind::GruEnsemble => members
                        .iter()
                        .zip(&data)
                        .map(|(s, d)| View::float(s, d))
                        .collect(),
                    _ => args.clone(),
                };
                let spec = kind.spec();
                let k = input + hidden;
                let fast = run(&op, Direction::Forward, &args).unwrap().unwrap();
                let reference = crate::cpu::run(&op, Direction::Forward, &args).unwrap();
                let (atol, rtol) = spec.budget.at(k);
                for (f, r) in fast.iter().zip(&reference) {
                    let c = compare(f.floats(), r.floats(), atol, rtol);
                    assert!(
                        c.pass,
                        "{kind:?} forward {seq},{batch},{input},{hidden}: {c:?}"
                    );
                }
                let grads: Vec<Vec<f32>> = reference
                    .iter()
                    .map(|o| rng.uniform_vec(o.floats().len(), -1.0, 1.0))
                    .collect();
                let mut bargs = args.clone();
                bargs.extend(reference.iter().map(|o| o.view()));
                bargs.extend(
                    reference
                        .iter()
                        .zip(&grads)
                        .map(|(o, g)| View::float(&o.shape, g)),
                );
                let fast = run(&op, Direction::Backward, &bargs).unwrap().unwrap();
                let want = crate::cpu::run(&op, Direction::Backward, &bargs).unwrap();
                assert_eq!(fast.len(), 6);
                let (atol, rtol) = spec.budget_backward.at(k * seq);
                for (f, r) in fast.iter().zip(&want) {
                    assert_eq!(f.shape, r.shape);
                    let c = compare(f.floats(), r.floats(), atol, rtol);
                    assert!(
                        c.pass,
                        "{kind:?} backward {seq},{batch},{input},{hidden}: {c:?}"
                    );
                }
            }
        }
    }
}
