//! Edge cases of the fused kernels beyond the shared parity cases: attention with several query
//! blocks, rows that see no key (s > t, causal) and dv != d; rope at large positions.

// Native adapters (pollster, lavapipe); the browser's suite is web_parity.rs.
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_gpu::testing;

use kernels_core::numerics::compare;
use kernels_core::op::{Direction, Op, ROPE_THETA};
use kernels_core::rng::Rng;
use kernels_core::{Backend, CpuBackend, Tensor};

fn rand(seed: u64, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape, Rng::new(seed).uniform_vec(n, -1.0, 1.0)).unwrap()
}

fn check(
    gpu: &kernels_gpu::WgpuBackend,
    op: Op,
    dir: Direction,
    args: &[Tensor],
    atol: f64,
    rtol: f64,
) {
    let dev: Vec<Tensor> = args.iter().map(|t| gpu.upload(t).unwrap()).collect();
    let refs: Vec<&Tensor> = dev.iter().collect();
    let got = gpu.run(&op, dir, &refs).unwrap();
    let host: Vec<&Tensor> = args.iter().collect();
    let want = CpuBackend::reference().run(&op, dir, &host).unwrap();
    for (g, w) in got.iter().zip(&want) {
        let g = gpu.download_blocking(g).unwrap();
        let gv: Vec<f64> = g.as_f32().unwrap().iter().map(|&v| f64::from(v)).collect();
        let wv: Vec<f64> = w.as_f32().unwrap().iter().map(|&v| f64::from(v)).collect();
        let c = compare(&gv, &wv, atol, rtol);
        assert!(c.pass, "{op} {}: {c:?}", dir.name());
    }
}

#[test]
fn attention_blocks_masked_rows_and_value_width() {
    let Some(gpu) = testing::wgpu("attention_blocks_masked_rows_and_value_width") else {
        return;
    };
    let op = Op::Attention {
        causal: true,
        scale: None,
        kv_len: 0,
        window: 0,
    };
    // 37 query rows (three blocks of 16) over 29 keys: the first 8 rows see no key.
    let (q, k, v) = (
        rand(1, &[1, 4, 37, 8]),
        rand(2, &[1, 2, 29, 8]),
        rand(3, &[1, 2, 29, 12]),
    );
    let out = {
        let dev = [
            gpu.upload(&q).unwrap(),
            gpu.upload(&k).unwrap(),
            gpu.upload(&v).unwrap(),
        ];
        let o = gpu
            .run(&op, Direction::Forward, &[&dev[0], &dev[1], &dev[2]])
            .unwrap();
        gpu.download_blocking(&o[0]).unwrap()
    };
    let o = out.as_f32().unwrap();
    assert!(
        o[..8 * 12].iter().all(|&x| x == 0.0),
        "rows that see no key give 0"
    );
    assert!(o[8 * 12..9 * 12].iter().any(|&x| x != 0.0));
    check(
        &gpu,
        op,
        Direction::Forward,
        &[q.clone(), k.clone(), v.clone()],
        2e-5,
        2e-5,
    );
    let g = rand(4, &[1, 4, 37, 12]);
    check(
        &gpu,
        op,
        Direction::Backward,
        &[q, k, v, out, g],
        4e-5,
        4e-5,
    );
}

#[test]
fn rope_stays_accurate_at_large_positions() {
    let Some(gpu) = testing::wgpu("rope_stays_accurate_at_large_positions") else {
        return;
    };
    for interleaved in [false, true] {
        let op = Op::rope(ROPE_THETA, 1_000_003, interleaved);
        // The rope budget: atol 1e-6, rtol 1e-5.
        check(
            &gpu,
            op,
            Direction::Forward,
            &[rand(5, &[1, 2, 3, 64])],
            1e-6,
            1e-5,
        );
    }
}

/// A decode step (one query row over a KV cache) takes the decode kernel: one dispatch, one
/// workgroup per kv head, and the answer of the general kernel within the budget.
#[test]
fn decode_step_uses_the_decode_kernel() {
    let Some(gpu) = testing::wgpu("decode_step_uses_the_decode_kernel") else {
        return;
    };
    let op = Op::Attention {
        causal: true,
        scale: None,
        kv_len: 0,
        window: 0,
    };
    let (q, k, v) = (
        rand(1, &[1, 4, 1, 32]),
        rand(2, &[1, 1, 200, 32]),
        rand(3, &[1, 1, 200, 32]),
    );
    let before = gpu.counters();
    check(&gpu, op, Direction::Forward, &[q, k, v], 1e-5, 1e-5);
    let d = gpu.counters().since(&before);
    assert_eq!(d.dispatches, 1, "{d:?}");
    let built = gpu.pipelines_built();
    assert!(
        built.iter().any(|p| p == "attention/attn_decode"),
        "{built:?}"
    );
    assert!(
        !built.iter().any(|p| p == "attention/attn_forward"),
        "{built:?}"
    );
}
