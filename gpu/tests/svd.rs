//! svd_lowrank on wgpu beyond the shared parity cases: batches, rank deficiency, zero and
//! non-finite input, the rank limit, and that the op moves nothing to the host.

// Native adapters (pollster, lavapipe); the browser's suite is web_parity.rs.
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_gpu::testing;

use kernels_core::op::{Direction, Op};
use kernels_core::parity::Case;
use kernels_core::{Backend, CpuBackend, Error, Rng, Tensor};
use kernels_gpu::parity::{check, download};

fn svd(rank: usize, power_iters: usize, seed: u64) -> Op {
    Op::SvdLowrank {
        rank,
        power_iters,
        seed,
    }
}

/// `batch` matrices `[m, n]` of exact rank `r` (products of Gaussian factors).
fn low_rank(seed: u64, batch: usize, m: usize, n: usize, r: usize) -> Tensor {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(batch * m * n);
    for _ in 0..batch {
        let a: Vec<f32> = (0..m * r).map(|_| rng.normal()).collect();
        let b: Vec<f32> = (0..r * n).map(|_| rng.normal()).collect();
        for i in 0..m {
            for j in 0..n {
                out.push((0..r).map(|k| a[i * r + k] * b[k * n + j]).sum());
            }
        }
    }
    Tensor::from_f32(&[batch, m, n], out).unwrap()
}

fn assert_matches_reference(op: Op, a: Tensor) {
    let gpu = testing::wgpu(&format!("svd {op}"));
    let Some(gpu) = gpu else { return };
    let case = Case {
        op,
        inputs: vec![a],
        large: false,
    };
    let row = check(&case, Direction::Forward, &gpu, &CpuBackend::reference());
    assert!(row.pass(), "{} {}: {:?}", row.op, row.shape, row.failure());
}

/// Max |x^T x - I| over the columns of each `[rows, q]` matrix of `x`.
fn orthonormality_err(x: &[f32], rows: usize, q: usize) -> f32 {
    let mut worst = 0.0f32;
    for mat in x.chunks_exact(rows * q) {
        for a in 0..q {
            for b in 0..q {
                let d: f32 = (0..rows).map(|i| mat[i * q + a] * mat[i * q + b]).sum();
                let want = if a == b { 1.0 } else { 0.0 };
                worst = worst.max((d - want).abs());
            }
        }
    }
    worst
}

#[test]
fn batched_input_matches_the_reference() {
    assert_matches_reference(svd(6, 1, 3), low_rank(11, 3, 40, 29, 6));
}

#[test]
fn rank_deficient_input_completes_orthonormal_factors() {
    // Rank 2 but 5 asked: three singular values are ~0 and their vectors must still complete
    // an orthonormal set (the Gram-Schmidt replacement path of the device kernels). Those three
    // pairs are any basis of the null space (rounding picks one), so only the leading two are
    // compared with the reference.
    let a = low_rank(5, 1, 23, 17, 2);
    let Some(gpu) = testing::wgpu("rank_deficient_input_completes_orthonormal_factors") else {
        return;
    };
    let want = CpuBackend::reference()
        .run(&svd(5, 2, 1), Direction::Forward, &[&a])
        .unwrap();
    let (want_u, want_v) = (want[0].to_f32_vec().unwrap(), want[2].to_f32_vec().unwrap());
    let a_dev = gpu.upload(&a).unwrap();
    let out = gpu
        .run(&svd(5, 2, 1), Direction::Forward, &[&a_dev])
        .unwrap();
    let u = download(&gpu, &out[0]).unwrap().to_f32_vec().unwrap();
    let s = download(&gpu, &out[1]).unwrap().to_f32_vec().unwrap();
    let v = download(&gpu, &out[2]).unwrap().to_f32_vec().unwrap();
    assert!(orthonormality_err(&u, 23, 5) < 1e-5, "u not orthonormal");
    assert!(orthonormality_err(&v, 17, 5) < 1e-5, "v not orthonormal");
    assert!(s[0] > 1.0 && s[1] > 1e-2 * s[0], "{s:?}");
    assert!(s[2..].iter().all(|&x| x < 1e-4 * s[0]), "{s:?}");
    let want_s = want[1].to_f32_vec().unwrap();
    for j in 0..2 {
        assert!(
            (s[j] - want_s[j]).abs() < 1e-4 * want_s[0],
            "{s:?} vs {want_s:?}"
        );
        for (got, want, rows) in [(&u, &want_u, 23), (&v, &want_v, 17)] {
            for i in 0..rows {
                let (g, w) = (got[i * 5 + j], want[i * 5 + j]);
                assert!((g - w).abs() < 1e-4, "column {j} row {i}: {g} vs {w}");
            }
        }
    }
}

#[test]
fn zero_input_gives_zero_values_and_orthonormal_vectors() {
    let a = Tensor::from_f32(&[9, 7], vec![0.0; 63]).unwrap();
    assert_matches_reference(svd(3, 1, 0), a.clone());
    let Some(gpu) = testing::wgpu("zero_input_gives_zero_values_and_orthonormal_vectors") else {
        return;
    };
    let out = gpu
        .run(
            &svd(3, 1, 0),
            Direction::Forward,
            &[&gpu.upload(&a).unwrap()],
        )
        .unwrap();
    let u = download(&gpu, &out[0]).unwrap().to_f32_vec().unwrap();
    let s = download(&gpu, &out[1]).unwrap().to_f32_vec().unwrap();
    assert_eq!(s, vec![0.0; 3]);
    assert!(orthonormality_err(&u, 9, 3) < 1e-6);
}

#[test]
fn runs_without_reading_anything_back() {
    let Some(gpu) = testing::wgpu("runs_without_reading_anything_back") else {
        return;
    };
    let a = gpu.upload(&low_rank(2, 2, 31, 12, 4)).unwrap();
    let before = gpu.counters();
    let out = gpu.run(&svd(4, 2, 9), Direction::Forward, &[&a]).unwrap();
    gpu.flush().unwrap();
    let d = gpu.counters().since(&before);
    assert_eq!(d.bytes_downloaded, 0, "{d:?}");
    // omega [12, 4] is the only upload.
    assert_eq!(d.bytes_uploaded, 12 * 4 * 4, "{d:?}");
    assert_eq!(out[1].shape(), &[2, 4]);
}

#[test]
fn non_finite_input_gives_nan_outputs() {
    let Some(gpu) = testing::wgpu("non_finite_input_gives_nan_outputs") else {
        return;
    };
    let mut v = low_rank(4, 1, 10, 8, 3).to_f32_vec().unwrap();
    v[17] = f32::NAN;
    let a = gpu.upload(&Tensor::from_f32(&[10, 8], v).unwrap()).unwrap();
    let out = gpu.run(&svd(3, 1, 0), Direction::Forward, &[&a]).unwrap();
    let s = download(&gpu, &out[1]).unwrap().to_f32_vec().unwrap();
    let vv = download(&gpu, &out[2]).unwrap().to_f32_vec().unwrap();
    assert!(s.iter().all(|x| x.is_nan()), "{s:?}");
    assert!(vv.iter().all(|x| x.is_nan()));
}

#[test]
fn rank_above_the_device_limit_is_a_clear_error() {
    let Some(gpu) = testing::wgpu("rank_above_the_device_limit_is_a_clear_error") else {
        return;
    };
    let n = kernels_gpu::SVD_MAX_Q + 1;
    let a = gpu.zeros(&[n, n]).unwrap();
    let e = gpu
        .run(&svd(n, 0, 0), Direction::Forward, &[&a])
        .unwrap_err();
    assert!(matches!(e, Error::LimitExceeded { .. }), "{e}");
    assert!(e.to_string().contains("svd_lowrank"), "{e}");
}
