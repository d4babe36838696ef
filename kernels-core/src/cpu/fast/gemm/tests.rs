// wasm-pack test runs these in the browser too.
use alloc::vec;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use super::*;
use crate::cpu::fast::kernels::Portable;
#[cfg(target_arch = "x86_64")]
use crate::cpu::fast::kernels::{Avx2Fma, Avx512};
use crate::numerics::compare;
use crate::op::OpKind;
use crate::rng::Rng;

/// Every kernel this machine can run. On an AVX2 + FMA machine with `std` the AVX2 kernel
/// must be among them (see `avx2_detected_where_supported`).
fn kernels() -> Vec<Kernel> {
    Kernel::available()
}

/// `op(A) . op(B)` by the textbook triple loop in f64, from the raw row-major storage (the
/// oracle of the skinny path's tests too).
pub(crate) fn naive(
    ta: bool,
    tb: bool,
    a: &[f32],
    b: &[f32],
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                let x = if ta { a[p * m + i] } else { a[i * k + p] };
                let y = if tb { b[j * k + p] } else { b[p * n + j] };
                s += x as f64 * y as f64;
            }
            c[i * n + j] = s as f32;
        }
    }
    c
}

fn check(kernel: Kernel, ta: bool, tb: bool, m: usize, k: usize, n: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let a = rng.uniform_vec(m * k, -1.0, 1.0);
    let b = rng.uniform_vec(k * n, -1.0, 1.0);
    let mut c = vec![0.0f32; m * n];
    let mut g = Gemm::new(kernel);
    let am = MatRef::new(&a, m, k, ta).unwrap();
    let bm = MatRef::new(&b, k, n, tb).unwrap();
    g.run(am, bm, &mut c, n).unwrap();
    let want = naive(ta, tb, &a, &b, m, k, n);
    let (atol, rtol) = OpKind::Matmul.spec().budget.at(k);
    let cmp = compare(&c, &want, atol, rtol);
    assert!(
        cmp.pass,
        "{} ta={ta} tb={tb} m={m} k={k} n={n}: {cmp:?}",
        kernel.name()
    );
}

fn shapes<K: MicroKernel>() -> Vec<(usize, usize, usize)> {
    let (mr, nr, mc, kc, nc) = (K::MR, K::NR, K::MC, K::KC, K::NC);
    vec![
        (1, 1, 1),
        (1, 7, 13),
        (13, 1, 7),
        (7, 13, 1),
        (31, 67, 13),
        (mr - 1, 31, nr - 1),
        (mr, 67, nr),
        (mr + 1, 13, nr + 1),
        (67, kc - 1, 31),
        (31, kc, 67),
        (13, kc + 1, 7),
        (7, 2 * kc + 1, 13),
        (mc - 1, 7, 2 * nr + 1),
        (mc, 13, nr),
        (mc + 1, 13, nr - 1),
        (2 * mc + 1, 3, 5),
        (5, 3, nc - 1),
        (3, 5, nc + 1),
        (mc + 1, kc + 1, nr + 1),
    ]
}

fn check_all(kernel: Kernel, shapes: &[(usize, usize, usize)]) {
    for (s, &(m, k, n)) in shapes.iter().enumerate() {
        for (t, (ta, tb)) in [(false, false), (true, false), (false, true), (true, true)]
            .into_iter()
            .enumerate()
        {
            check(kernel, ta, tb, m, k, n, (s * 4 + t) as u64);
        }
    }
}

#[test]
fn portable_matches_triple_loop() {
    check_all(Kernel::Portable(Portable), &shapes::<Portable>());
    // The other kernels' tile edges too, so each kernel sees every awkward size.
    #[cfg(target_arch = "x86_64")]
    check_all(Kernel::Portable(Portable), &shapes::<Avx2Fma>());
    #[cfg(target_arch = "x86_64")]
    check_all(Kernel::Portable(Portable), &shapes::<Avx512>());
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_matches_triple_loop() {
    let Some(k) = Avx2Fma::detect() else {
        std::eprintln!("skipped: this CPU lacks AVX2 + FMA");
        return;
    };
    check_all(Kernel::Avx2Fma(k), &shapes::<Avx2Fma>());
    check_all(Kernel::Avx2Fma(k), &shapes::<Portable>());
}

#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_matches_triple_loop() {
    let Some(k) = Avx512::detect() else {
        std::eprintln!("skipped: this CPU lacks AVX-512F");
        return;
    };
    check_all(Kernel::Avx512(k), &shapes::<Avx512>());
    check_all(Kernel::Avx512(k), &shapes::<Avx2Fma>());
    check_all(Kernel::Avx512(k), &shapes::<Portable>());
}

#[test]
fn threaded_blocked_gemm_matches_triple_loop() {
    // Over the threading threshold (with the `threads` feature), with row counts that do not
    // split evenly into tiles.
    for kernel in kernels() {
        for threads in [2, 3] {
            for (ta, tb) in [(false, false), (true, true), (false, true)] {
                let (m, k, n) = (301, 167, 181);
                let mut rng = Rng::new(m as u64);
                let a = rng.uniform_vec(m * k, -1.0, 1.0);
                let b = rng.uniform_vec(k * n, -1.0, 1.0);
                let mut c = vec![0.0f32; m * n];
                let mut g = Gemm::new(kernel).with_threads(threads);
                let am = MatRef::new(&a, m, k, ta).unwrap();
                let bm = MatRef::new(&b, k, n, tb).unwrap();
                g.run(am, bm, &mut c, n).unwrap();
                let want = naive(ta, tb, &a, &b, m, k, n);
                let (atol, rtol) = OpKind::Matmul.spec().budget.at(k);
                let cmp = compare(&c, &want, atol, rtol);
                assert!(cmp.pass, "{} threads={threads}: {cmp:?}", kernel.name());
            }
        }
    }
}

#[cfg(all(target_arch = "x86_64", feature = "std"))]
#[test]
fn avx2_detected_where_supported() {
    let cpu = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
    assert_eq!(Avx2Fma::detect().is_some(), cpu);
    if cpu && !std::is_x86_feature_detected!("avx512f") {
        assert_eq!(Kernel::fastest().name(), "avx2-fma");
    }
}

#[test]
fn accumulates_into_strided_output() {
    // C has row stride 11 > n = 7 and starts non-zero: only the 5 x 7 window changes, by
    // exactly A . B.
    let (m, k, n, ldc) = (5, 9, 7, 11);
    for kernel in kernels() {
        let mut rng = Rng::new(7);
        let a = rng.uniform_vec(m * k, -1.0, 1.0);
        let b = rng.uniform_vec(k * n, -1.0, 1.0);
        let c0 = rng.uniform_vec(m * ldc, -1.0, 1.0);
        let mut c = c0.clone();
        let mut g = Gemm::new(kernel);
        let am = MatRef::new(&a, m, k, false).unwrap();
        let bm = MatRef::new(&b, k, n, false).unwrap();
        g.run(am, bm, &mut c[..(m - 1) * ldc + n], ldc).unwrap();
        let ab = naive(false, false, &a, &b, m, k, n);
        for i in 0..m {
            for j in 0..ldc {
                let want = if j < n {
                    c0[i * ldc + j] + ab[i * n + j]
                } else {
                    c0[i * ldc + j]
                };
                let got = c[i * ldc + j];
                assert!((got - want).abs() <= 1e-5, "{} ({i},{j})", kernel.name());
            }
        }
    }
}

#[test]
fn reused_buffers_give_the_same_answer() {
    // A large product then a small one through one `Gemm`: the second must only see its own
    // packed values in the (larger, stale) buffers.
    for kernel in kernels() {
        let mut g = Gemm::new(kernel);
        let big = vec![1.0f32; 300 * 300];
        let mut c = vec![0.0f32; 300 * 300];
        let bm = MatRef::new(&big, 300, 300, false).unwrap();
        g.run(bm, bm, &mut c, 300).unwrap();
        assert!(c.iter().all(|&x| x == 300.0));
        let a = [1.0f32, 2.0, 3.0]; // [1 x 3]
        let b = [4.0f32, 5.0, 6.0]; // [3 x 1]
        let mut c = [0.5f32];
        let am = MatRef::new(&a, 1, 3, false).unwrap();
        let bm = MatRef::new(&b, 3, 1, false).unwrap();
        g.run(am, bm, &mut c, 1).unwrap();
        assert_eq!(c, [0.5 + 32.0], "{}", kernel.name());
    }
}

#[test]
fn rejects_inconsistent_operands() {
    let x = [0.0f32; 6];
    assert!(matches!(
        MatRef::new(&x, 3, 4, false),
        Err(Error::BadShape { .. })
    ));
    let a = MatRef::new(&x, 2, 3, false).unwrap();
    let mut c = [0.0f32; 4];
    let mut g = Gemm::new(Kernel::best());
    assert!(matches!(
        g.run(a, a, &mut c, 2),
        Err(Error::ShapeMismatch { .. })
    ));
    // [2 x 3] . [3 x 2] needs 4 output values at stride 2.
    assert!(matches!(
        g.run(a, a.t(), &mut c[..3], 2),
        Err(Error::BadShape { .. })
    ));
    assert!(matches!(
        g.run(a, a.t(), &mut c, 1),
        Err(Error::BadShape { .. })
    ));
    g.run(a, a.t(), &mut c, 2).unwrap();
}

/// `B` packed once ([`PackedB`]) gives the bits of packing it in the loop nest, on every kernel,
/// for shapes across the `KC` and `NC` blocks, a transposed `B` (prefill's `x^T`) included.
#[test]
fn a_prepacked_b_gives_the_bits_of_run_blocked() {
    let mut rng = Rng::new(0x9AC8);
    for kernel in kernels() {
        for &(m, k, n, tb) in &[
            (1, 1, 1, false),
            (5, 3, 7, true),
            (37, 600, 300, true),
            (70, 2100, 40, true),
            (24, 257, 1030, false),
        ] {
            let a = rng.uniform_vec(m * k, -1.0, 1.0);
            let b = rng.uniform_vec(k * n, -1.0, 1.0);
            let am = MatRef::new(&a, m, k, false).unwrap();
            let bm = if tb {
                MatRef::new(&b, n, k, false).unwrap().t()
            } else {
                MatRef::new(&b, k, n, false).unwrap()
            };
            let mut want = vec![0.5f32; m * n];
            Gemm::new(kernel)
                .with_threads(1)
                .run_blocked(am, bm, &mut want, n)
                .unwrap();
            let packed = PackedB::new(kernel, bm).unwrap();
            let mut got = vec![0.5f32; m * n];
            let mut gemm = Gemm::new(kernel).with_threads(1);
            gemm.run_blocked_packed(am, &packed, &mut got, n).unwrap();
            let same = want
                .iter()
                .zip(&got)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{kernel:?} m {m} k {k} n {n}");
            // Another A against the same packing.
            let a2 = rng.uniform_vec(m * k, -1.0, 1.0);
            let am2 = MatRef::new(&a2, m, k, false).unwrap();
            let mut want2 = vec![0.0f32; m * n];
            Gemm::new(kernel)
                .with_threads(1)
                .run_blocked(am2, bm, &mut want2, n)
                .unwrap();
            let mut got2 = vec![0.0f32; m * n];
            gemm.run_blocked_packed(am2, &packed, &mut got2, n).unwrap();
            assert!(
                want2
                    .iter()
                    .zip(&got2)
                    .all(|(x, y)| x.to_bits() == y.to_bits())
            );
        }
        // A packing for another kernel or depth is refused.
        let b = rng.uniform_vec(6, -1.0, 1.0);
        let packed = PackedB::new(kernel, MatRef::new(&b, 3, 2, false).unwrap()).unwrap();
        let a = rng.uniform_vec(8, -1.0, 1.0);
        let mut c = vec![0.0f32; 8];
        let wrong = MatRef::new(&a, 2, 4, false).unwrap();
        assert!(
            Gemm::new(kernel)
                .run_blocked_packed(wrong, &packed, &mut c, 2)
                .is_err()
        );
    }
}
