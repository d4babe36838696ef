//! matmul takes vec4 loads when both operands' contiguous dims are multiples of 4 and the
//! scalar path otherwise; both agree with the CPU reference, for every transpose combination.

// Native adapters (pollster, lavapipe); the browser's suite is web_parity.rs.
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_gpu::testing;

use kernels_core::numerics::compare;
use kernels_core::op::{Direction, Op};
use kernels_core::rng::Rng;
use kernels_core::{Backend, CpuBackend, Tensor};

fn rand(seed: u64, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape, Rng::new(seed).uniform_vec(n, -1.0, 1.0)).unwrap()
}

fn check(gpu: &kernels_gpu::WgpuBackend, a: &[usize], b: &[usize], ta: bool, tb: bool) {
    let op = Op::Matmul {
        trans_a: ta,
        trans_b: tb,
    };
    let (x, y) = (rand(1, a), rand(2, b));
    let want = CpuBackend::reference()
        .run(&op, Direction::Forward, &[&x, &y])
        .unwrap();
    let (xd, yd) = (gpu.upload(&x).unwrap(), gpu.upload(&y).unwrap());
    let got = gpu.run(&op, Direction::Forward, &[&xd, &yd]).unwrap();
    let got = gpu.download_blocking(&got[0]).unwrap();
    let g: Vec<f64> = got
        .as_f32()
        .unwrap()
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    let w: Vec<f64> = want[0]
        .as_f32()
        .unwrap()
        .iter()
        .map(|&v| f64::from(v))
        .collect();
    let c = compare(&g, &w, 1e-5, 1e-5);
    assert!(c.pass, "{a:?} x {b:?} ta {ta} tb {tb}: {c:?}");
    // Backward goes through the same kernels with other flags.
    let gout = rand(3, want[0].shape());
    let args = [x.clone(), y.clone(), want[0].clone(), gout];
    let refs: Vec<&Tensor> = args.iter().collect();
    let want_b = CpuBackend::reference()
        .run(&op, Direction::Backward, &refs)
        .unwrap();
    let dev: Vec<Tensor> = args.iter().map(|t| gpu.upload(t).unwrap()).collect();
    let drefs: Vec<&Tensor> = dev.iter().collect();
    let got_b = gpu.run(&op, Direction::Backward, &drefs).unwrap();
    for (gb, wb) in got_b.iter().zip(&want_b) {
        let gb = gpu.download_blocking(gb).unwrap();
        let g: Vec<f64> = gb.as_f32().unwrap().iter().map(|&v| f64::from(v)).collect();
        let w: Vec<f64> = wb.as_f32().unwrap().iter().map(|&v| f64::from(v)).collect();
        let c = compare(&g, &w, 1e-5, 1e-5);
        assert!(c.pass, "backward {a:?} x {b:?} ta {ta} tb {tb}: {c:?}");
    }
}

fn dims(m: usize, k: usize, n: usize, ta: bool, tb: bool) -> (Vec<usize>, Vec<usize>) {
    let a = if ta { vec![k, m] } else { vec![m, k] };
    let b = if tb { vec![n, k] } else { vec![k, n] };
    (a, b)
}

#[test]
fn aligned_shapes_use_vec4_loads_and_match() {
    let Some(gpu) = testing::wgpu("aligned_shapes_use_vec4_loads_and_match") else {
        return;
    };
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        // Multiples of 4 on every dim, across tile edges (64 +/- 4, K not a multiple of 16).
        for (m, k, n) in [(4, 4, 4), (68, 20, 60), (8, 132, 12)] {
            let (a, b) = dims(m, k, n, ta, tb);
            check(&gpu, &a, &b, ta, tb);
        }
        // Batched, with a shared 2-D right operand.
        let (a, b) = dims(12, 8, 16, ta, tb);
        let mut a3 = vec![3];
        a3.extend(a);
        check(&gpu, &a3, &b, ta, tb);
    }
    let built = gpu.pipelines_built();
    assert!(built.iter().any(|p| p == "matmul/matmul_vec4"), "{built:?}");
}

#[test]
fn unaligned_shapes_keep_the_scalar_path_and_match() {
    let Some(gpu) = testing::wgpu("unaligned_shapes_keep_the_scalar_path_and_match") else {
        return;
    };
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        for (m, k, n) in [(1, 1, 1), (7, 13, 5), (65, 17, 63)] {
            let (a, b) = dims(m, k, n, ta, tb);
            check(&gpu, &a, &b, ta, tb);
        }
    }
    let built = gpu.pipelines_built();
    assert!(built.iter().any(|p| p == "matmul/matmul"), "{built:?}");
    assert!(
        !built.iter().any(|p| p == "matmul/matmul_vec4"),
        "{built:?}"
    );
}

/// Products with at most 8 rows (decode steps) take `matmul_rows`: one thread per output column.
#[test]
fn few_rows_use_the_row_kernel_and_match() {
    let Some(gpu) = testing::wgpu("few_rows_use_the_row_kernel_and_match") else {
        return;
    };
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        for (m, k, n) in [(1, 129, 70), (3, 17, 130), (8, 64, 65)] {
            let (a, b) = dims(m, k, n, ta, tb);
            check(&gpu, &a, &b, ta, tb);
        }
        // Batched, with a shared 2-D right operand.
        let (a, b) = dims(2, 33, 7, ta, tb);
        let mut a3 = vec![3];
        a3.extend(a);
        check(&gpu, &a3, &b, ta, tb);
    }
    let built = gpu.pipelines_built();
    assert!(built.iter().any(|p| p == "matmul/matmul_rows"), "{built:?}");
}

/// Aligned products of at least 64 tiles of 128x128 take `matmul_wide` (8x8 outputs per
/// thread): edges past the tiles, every transpose, a batch with a shared right operand.
#[test]
fn large_aligned_products_use_the_wide_kernel_and_match() {
    let Some(gpu) = testing::wgpu("large_aligned_products_use_the_wide_kernel_and_match") else {
        return;
    };
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let (a, b) = dims(1028, 20, 1036, ta, tb);
        check(&gpu, &a, &b, ta, tb);
    }
    let (a, b) = dims(1024, 8, 1032, false, true);
    let mut a3 = vec![2];
    a3.extend(a);
    check(&gpu, &a3, &b, false, true);
    let built = gpu.pipelines_built();
    assert!(built.iter().any(|p| p == "matmul/matmul_wide"), "{built:?}");
}
