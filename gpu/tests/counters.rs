//! A GPU forward pass moves no tensor to the host except what the caller reads, submits in
//! batches, and reuses pooled buffers.

// Native adapters (pollster, lavapipe); the browser's suite is web_parity.rs.
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_gpu::testing;

use kernels_core::op::{BinaryOp, Direction, Op, UnaryOp};
use kernels_core::{Backend, Rng, Tensor};

#[test]
fn forward_pass_downloads_only_what_is_read() {
    let Some(gpu) = testing::wgpu("forward_pass_downloads_only_what_is_read") else {
        return;
    };
    let mut rng = Rng::new(3);
    let x = rng.normal_tensor(&[7, 13], 0.0, 1.0).unwrap();
    let w = rng.normal_tensor(&[13, 5], 0.0, 1.0).unwrap();
    let bias = rng.normal_tensor(&[5], 0.0, 1.0).unwrap();
    let before = gpu.counters();
    let (xd, wd, bd) = (
        gpu.upload(&x).unwrap(),
        gpu.upload(&w).unwrap(),
        gpu.upload(&bias).unwrap(),
    );
    let up = gpu.counters();
    assert_eq!(
        up.bytes_uploaded - before.bytes_uploaded,
        ((7 * 13 + 13 * 5 + 5) * 4) as u64
    );
    let h = gpu
        .run(
            &Op::Matmul {
                trans_a: false,
                trans_b: false,
            },
            Direction::Forward,
            &[&xd, &wd],
        )
        .unwrap();
    let h = gpu
        .run(
            &Op::Binary(BinaryOp::Add),
            Direction::Forward,
            &[&h[0], &bd],
        )
        .unwrap();
    let h = gpu
        .run(&Op::Unary(UnaryOp::Relu), Direction::Forward, &[&h[0]])
        .unwrap();
    let y = gpu
        .run(&Op::Softmax { causal: false }, Direction::Forward, &[&h[0]])
        .unwrap();
    let mid = gpu.counters();
    assert_eq!(mid.dispatches - up.dispatches, 4);
    assert_eq!(
        mid.submits, up.submits,
        "nothing is submitted before a read"
    );
    assert_eq!(mid.bytes_downloaded, before.bytes_downloaded);
    let out = gpu.download_blocking(&y[0]).unwrap();
    let after = gpu.counters();
    assert_eq!(
        after.bytes_downloaded - mid.bytes_downloaded,
        (7 * 5 * 4) as u64
    );
    assert_eq!(
        after.submits - mid.submits,
        1,
        "one submit for the whole pass"
    );
    for row in out.as_f32().unwrap().chunks(5) {
        let s: f32 = row.iter().sum();
        assert!((s - 1.0).abs() < 1e-5, "softmax row sums to {s}");
    }

    // Dropped intermediates return to the pool; the same pass again creates no buffers.
    drop((h, y));
    let created = gpu.counters().buffers_created;
    for _ in 0..3 {
        let h = gpu
            .run(
                &Op::Matmul {
                    trans_a: false,
                    trans_b: false,
                },
                Direction::Forward,
                &[&xd, &wd],
            )
            .unwrap();
        let h = gpu
            .run(
                &Op::Binary(BinaryOp::Add),
                Direction::Forward,
                &[&h[0], &bd],
            )
            .unwrap();
        let _ = gpu.download_blocking(&h[0]).unwrap();
    }
    let end = gpu.counters();
    assert_eq!(end.buffers_created, created, "warm pool: no new buffers");
    assert!(end.buffers_reused > 0);
}

#[test]
fn batches_flush_after_the_dispatch_limit() {
    let Some(_) = testing::wgpu("batches_flush_after_the_dispatch_limit") else {
        return;
    };
    let gpu = kernels_gpu::WgpuBackend::with_options(kernels_gpu::WgpuOptions {
        max_batch_dispatches: 4,
        ..Default::default()
    })
    .unwrap();
    let x = gpu.upload(&Tensor::full(&[10], 1.0).unwrap()).unwrap();
    let mut t = x;
    for _ in 0..10 {
        t = gpu
            .run(&Op::Scale { factor: 2.0 }, Direction::Forward, &[&t])
            .unwrap()
            .remove(0);
    }
    assert_eq!(
        gpu.counters().submits,
        2,
        "10 dispatches with a limit of 4 submit twice before a read"
    );
    let out = gpu.download_blocking(&t).unwrap();
    assert!(out.as_f32().unwrap().iter().all(|&v| v == 1024.0));
    assert_eq!(gpu.counters().submits, 3);
    assert_ne!(gpu.device().0, 0);
}

#[test]
fn pool_is_capped_and_evicts_least_recently_freed() {
    let Some(_) = testing::wgpu("pool_is_capped_and_evicts_least_recently_freed") else {
        return;
    };
    // 4 KiB cap: a 1 KiB and a 2 KiB tensor fit; freeing a third (2 KiB) evicts the oldest.
    let gpu = kernels_gpu::WgpuBackend::with_options(kernels_gpu::WgpuOptions {
        max_pool_bytes: 4096,
        ..Default::default()
    })
    .unwrap();
    let t = |n: usize| gpu.upload(&Tensor::full(&[n], 1.0).unwrap()).unwrap();
    let (a, b, c) = (t(256), t(512), t(512)); // classes 1 KiB, 2 KiB, 2 KiB
    let e = t(512);
    assert_eq!(gpu.counters().pool_bytes, 0);
    drop(a);
    drop(b);
    let c1 = gpu.counters();
    assert_eq!(c1.pool_bytes, 1024 + 2048);
    assert_eq!(c1.buffers_evicted, 0);
    drop(c);
    let c2 = gpu.counters();
    assert_eq!(c2.buffers_evicted, 1, "5 KiB > 4 KiB: one eviction");
    assert_eq!(
        c2.pool_bytes,
        2048 + 2048,
        "the 1 KiB buffer, freed first, went"
    );
    assert!(c2.pool_bytes <= 4096);
    // A buffer larger than the whole cap is never kept.
    drop(t(2048)); // 8 KiB
    let c3 = gpu.counters();
    assert_eq!(c3.pool_bytes, 4096);
    assert_eq!(c3.buffers_evicted, 2);
    // The survivors are reused: a 2 KiB op output needs no new buffer.
    let created = gpu.counters().buffers_created;
    let _d = gpu
        .run(&Op::Scale { factor: 2.0 }, Direction::Forward, &[&e])
        .unwrap();
    assert_eq!(gpu.counters().buffers_created, created);
    assert_eq!(gpu.counters().pool_bytes, 2048);
}

#[test]
fn default_pool_cap_is_256_mib() {
    assert_eq!(
        kernels_gpu::WgpuOptions::default().max_pool_bytes,
        256 << 20
    );
}

#[test]
fn zeros_are_made_on_the_device_without_an_upload() {
    let Some(gpu) = testing::wgpu("zeros_are_made_on_the_device_without_an_upload") else {
        return;
    };
    // Leave a freed buffer of the same size class with non-zero contents in the pool, so the
    // zeros below must really be cleared, not just freshly allocated.
    let junk = gpu.upload(&Tensor::full(&[7, 13], 3.5).unwrap()).unwrap();
    drop(junk);
    let before = gpu.counters();
    let z = gpu.zeros(&[7, 13]).unwrap();
    let after = gpu.counters();
    assert_eq!(
        after.bytes_uploaded, before.bytes_uploaded,
        "zeros uploaded data"
    );
    let host = gpu.download_blocking(&z).unwrap();
    assert_eq!(host.shape(), &[7, 13]);
    assert!(host.as_f32().unwrap().iter().all(|&v| v == 0.0));
    // A cleared buffer also feeds later kernels correctly.
    let one = gpu.upload(&Tensor::full(&[7, 13], 1.0).unwrap()).unwrap();
    let z2 = gpu.zeros(&[7, 13]).unwrap();
    let sum = gpu
        .run(&Op::Binary(BinaryOp::Add), Direction::Forward, &[&one, &z2])
        .unwrap();
    let host = gpu.download_blocking(&sum[0]).unwrap();
    assert!(host.as_f32().unwrap().iter().all(|&v| v == 1.0));
}
