// wasm-pack test runs these in the browser too.
use alloc::vec;
use alloc::vec::Vec;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use super::super::gemm::{Epilogue, Gemm, Kernel};
use super::*;
use crate::numerics::compare;
use crate::op::{Activation, OpKind};
use crate::rng::Rng;

/// `op(A) . op(B)` in f64: the GEMM tests' oracle.
fn naive(ta: bool, tb: bool, a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<f32> {
    super::super::gemm::tests::naive(ta, tb, a, b, m, k, n)
}

const TRANS: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

/// Runs `C = A . B` through [`Gemm`] (which must take this path) and checks it.
fn check(
    kernel: Kernel,
    threads: usize,
    ta: bool,
    tb: bool,
    mkn: (usize, usize, usize),
    seed: u64,
) {
    let (m, k, n) = mkn;
    let mut rng = Rng::new(seed);
    let a = rng.uniform_vec(m * k, -1.0, 1.0);
    let b = rng.uniform_vec(k * n, -1.0, 1.0);
    let am = MatRef::new(&a, m, k, ta).unwrap();
    let bm = MatRef::new(&b, k, n, tb).unwrap();
    assert!(
        applies(am, bm),
        "{mkn:?} ta={ta} tb={tb} should take the small path"
    );
    let mut c = vec![0.0f32; m * n];
    let mut g = Gemm::new(kernel).with_threads(threads);
    g.run(am, bm, &mut c, n).unwrap();
    let want = naive(ta, tb, &a, &b, mkn);
    let (atol, rtol) = OpKind::Matmul.spec().budget.at(k);
    let cmp = compare(&c, &want, atol, rtol);
    assert!(
        cmp.pass,
        "{} threads={threads} ta={ta} tb={tb} {mkn:?}: {cmp:?}",
        kernel.name()
    );
}

/// Sizes around every kernel's lane widths (4, 8, 16) and block widths (16, 32, 64 columns).
const KS: [usize; 9] = [1, 3, 4, 8, 15, 16, 17, 33, 100];
const NS: [usize; 10] = [1, 2, 5, 7, 9, 16, 17, 33, 65, 100];
const MS: [usize; 7] = [1, 2, 3, 4, 5, 7, 8];

#[test]
fn every_kernel_matches_triple_loop() {
    let mut seed = 0;
    for kernel in Kernel::available() {
        for &m in &MS {
            for &k in &KS {
                for &n in &NS {
                    for (ta, tb) in TRANS {
                        seed += 1;
                        // Few rows, and (transposed problem) few columns.
                        check(kernel, 1, ta, tb, (m, k, n.max(m)), seed);
                        check(kernel, 1, ta, tb, (n.max(m), k, m), seed);
                    }
                }
            }
        }
    }
}

#[test]
fn large_products_match_with_threads() {
    // Large enough to be split over threads (with the `threads` feature): over 2^21
    // multiply-adds, the lm_head-like shape with a prime column count.
    for kernel in Kernel::available() {
        for threads in [1, 2, 3] {
            for (ta, tb) in TRANS {
                check(kernel, threads, ta, tb, (1, 300, 7001), 9);
                check(kernel, threads, ta, tb, (3, 257, 2800), 10);
                check(kernel, threads, ta, tb, (7000, 300, 2), 11);
            }
        }
    }
}

#[test]
fn empty_products_leave_c_alone() {
    for kernel in Kernel::available() {
        let mut g = Gemm::new(kernel);
        // k = 0: C += nothing.
        let mut c = vec![1.5f32; 3];
        let a = MatRef::new(&[], 1, 0, false).unwrap();
        let b = MatRef::new(&[], 0, 3, true).unwrap();
        g.run(a, b, &mut c, 3).unwrap();
        assert_eq!(c, [1.5; 3]);
        // m = 0 or n = 0: nothing to write.
        let a = MatRef::new(&[], 0, 4, false).unwrap();
        let b4 = [1.0f32; 4];
        let b = MatRef::new(&b4, 4, 1, false).unwrap();
        g.run(a, b, &mut [], 1).unwrap();
    }
}

#[test]
fn nan_and_inf_propagate() {
    let k = 37;
    for kernel in Kernel::available() {
        // Few rows, and few columns (the transposed problem).
        for (m, n) in [(2, 29), (29, 2)] {
            for (ta, tb) in TRANS {
                let mut rng = Rng::new(4);
                let mut a = rng.uniform_vec(m * k, 0.5, 1.0);
                let mut b = rng.uniform_vec(k * n, -1.0, 1.0);
                // A(0, 20) = inf: row 0 is +-inf (or NaN) wherever B(20, j) != 0.
                a[if ta { 20 * m } else { 20 }] = f32::INFINITY;
                // B(5, n - 1) = NaN: the last column is NaN; B(36, 0) = -inf: column 0 is -inf
                // in row 1 (A > 0 there).
                let at = |p: usize, j: usize| if tb { j * k + p } else { p * n + j };
                b[at(5, n - 1)] = f32::NAN;
                b[at(36, 0)] = f32::NEG_INFINITY;
                let am = MatRef::new(&a, m, k, ta).unwrap();
                let bm = MatRef::new(&b, k, n, tb).unwrap();
                assert!(applies(am, bm));
                let mut c = vec![0.0f32; m * n];
                Gemm::new(kernel).run(am, bm, &mut c, n).unwrap();
                let want = naive(ta, tb, &a, &b, (m, k, n));
                assert!(want[n - 1].is_nan() && want[2 * n - 1].is_nan());
                assert!(want[n] == f32::NEG_INFINITY);
                let (atol, rtol) = OpKind::Matmul.spec().budget.at(k);
                let cmp = compare(&c, &want, atol, rtol);
                assert!(
                    cmp.pass,
                    "{} {m}x{n} ta={ta} tb={tb}: {cmp:?}",
                    kernel.name()
                );
            }
        }
    }
}

#[test]
fn accumulates_and_applies_the_epilogue_at_a_stride() {
    // C has row stride n + 4 > n, or n itself (so a one-column C of many rows has stride 1, as
    // a `linear` with one output does: its bias once went to the first row only), and starts
    // non-zero; the epilogue sees C + A . B + bias.
    for kernel in Kernel::available() {
        for ((m, n), pad) in [(1, 7), (3, 9), (2, 300), (9, 3), (11, 1), (30, 1), (9, 2)]
            .into_iter()
            .flat_map(|mn| [(mn, 4), (mn, 0)])
        {
            let k = 19;
            let ldc = n + pad;
            let mut rng = Rng::new((m * n) as u64);
            let a = rng.uniform_vec(m * k, -1.0, 1.0);
            let b = rng.uniform_vec(k * n, -1.0, 1.0);
            let bias = rng.uniform_vec(n, -1.0, 1.0);
            let c0 = rng.uniform_vec(m * ldc, -1.0, 1.0);
            let ab = naive(false, true, &a, &b, (m, k, n));
            let no_bias = vec![0.0; n];
            let epilogues = Activation::ALL
                .into_iter()
                .flat_map(|act| [(act, true), (act, false)]);
            for (act, with_bias) in epilogues {
                let mut c = c0.clone();
                let am = MatRef::new(&a, m, k, false).unwrap();
                let bm = MatRef::new(&b, k, n, true).unwrap();
                let epi = Epilogue {
                    bias: with_bias.then_some(&bias[..]),
                    act,
                };
                let bias = if with_bias { &bias } else { &no_bias };
                let end = (m - 1) * ldc + n;
                Gemm::new(kernel)
                    .run_with(am, bm, &mut c[..end], ldc, &epi)
                    .unwrap();
                for i in 0..m {
                    for j in 0..ldc {
                        let x = c0[i * ldc + j];
                        let want = if j < n {
                            crate::cpu::linear::act(act, x + ab[i * n + j] + bias[j])
                        } else {
                            x
                        };
                        let got = c[i * ldc + j];
                        assert!(
                            (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                            "{} {act:?} {m}x{n} ({i},{j}): {got} vs {want}",
                            kernel.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn short_bias_is_an_error() {
    let a = [1.0f32; 6];
    let am = MatRef::new(&a, 1, 6, false).unwrap();
    let bm = MatRef::new(&a, 6, 1, true).unwrap();
    let epi = Epilogue {
        bias: Some(&[]),
        act: Activation::None,
    };
    let mut c = [0.0f32];
    assert!(matches!(
        Gemm::new(Kernel::best()).run_with(am, bm, &mut c, 1, &epi),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn batched_decode_products_match_the_reference() {
    use crate::cpu::View;
    use crate::op::{Direction, Op};
    // The llama's decode shapes, batched: W [out, in] . h^T with one column per entry, x [b, 1,
    // in] . W^T, and (a^T)^T . W^T with a stored [b, in, 1]; plus a batched B on both sides.
    let cases: [(&[usize], &[usize], bool, bool); 5] = [
        (&[29, 37], &[3, 1, 37], false, true),
        (&[3, 1, 37], &[29, 37], false, true),
        (&[3, 37, 1], &[29, 37], true, true),
        (&[3, 2, 37], &[3, 37, 29], false, false),
        (&[3, 37, 5], &[3, 31, 37], true, true),
    ];
    let mut rng = Rng::new(21);
    for (sa, sb, ta, tb) in cases {
        let a = rng.uniform_vec(sa.iter().product(), -1.0, 1.0);
        let b = rng.uniform_vec(sb.iter().product(), -1.0, 1.0);
        let op = Op::Matmul {
            trans_a: ta,
            trans_b: tb,
        };
        let args = [View::float(sa, &a), View::float(sb, &b)];
        let got = super::super::run(&op, Direction::Forward, &args)
            .unwrap()
            .unwrap();
        let want = crate::cpu::run(&op, Direction::Forward, &args).unwrap();
        assert_eq!(got[0].shape, want[0].shape);
        let (atol, rtol) = OpKind::Matmul.spec().budget.at(37);
        let cmp = compare(got[0].floats(), want[0].floats(), atol, rtol);
        assert!(cmp.pass, "{sa:?} {sb:?}: {cmp:?}");
    }
}

#[test]
fn forced_families_are_the_kernels_named() {
    use super::super::config::Forced;
    assert_eq!(
        Kernel::of(Forced::Portable).map(|k| k.name()),
        Some("portable")
    );
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    {
        let avx512 = std::is_x86_feature_detected!("avx512f");
        assert_eq!(Kernel::of(Forced::Avx512).is_some(), avx512);
        if avx512 {
            assert_eq!(Kernel::fastest().name(), "avx512");
        }
    }
}
