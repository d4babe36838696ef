//! Tensors above the storage binding limit: the elementwise family binds them in chunks (same
//! results as one binding), every other op returns `LimitExceeded` naming the op, the size and
//! the limit. The limit is capped artificially low so small tensors exercise it.

// Native adapters (pollster, lavapipe); the browser's suite is web_parity.rs.
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_gpu::testing;

use kernels_core::op::{BinaryOp, Direction, GeluApprox, Op, UnaryOp};
use kernels_core::rng::Rng;
use kernels_core::{Backend, Error, Tensor};
use kernels_gpu::{WgpuBackend, WgpuOptions};

const CAP: u64 = 1024;

fn rand(seed: u64, shape: &[usize], lo: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape, Rng::new(seed).uniform_vec(n, lo, 2.0)).unwrap()
}

fn run(gpu: &WgpuBackend, op: &Op, dir: Direction, args: &[Tensor]) -> Vec<Vec<f32>> {
    let dev: Vec<Tensor> = args.iter().map(|t| gpu.upload(t).unwrap()).collect();
    let refs: Vec<&Tensor> = dev.iter().collect();
    gpu.run(op, dir, &refs)
        .unwrap_or_else(|e| panic!("{op} {}: {e}", dir.name()))
        .iter()
        .map(|t| gpu.download_blocking(t).unwrap().as_f32().unwrap().to_vec())
        .collect()
}

#[test]
fn elementwise_ops_chunk_over_the_binding_limit() {
    let Some(whole) = testing::wgpu("elementwise_ops_chunk_over_the_binding_limit") else {
        return;
    };
    let capped = WgpuBackend::with_options(WgpuOptions {
        max_storage_binding_cap: Some(CAP),
        ..Default::default()
    })
    .unwrap();
    let limit = capped.limits().max_storage_buffer_binding_size;
    assert!((4..=CAP).contains(&limit), "cap applied: {limit}");
    // 1,037 elements (prime-ish, several chunks and a ragged last one).
    let shape = [61, 17];
    let n: usize = shape.iter().product();
    assert!((n as u64) * 4 > 3 * limit, "at least four chunks");
    let x = rand(1, &shape, 0.1);
    let y = rand(2, &shape, 0.1);
    let bias = rand(3, &[17], 0.1);
    let g = rand(4, &shape, -1.0);

    let mut checked = 0;
    let mut same = |op: Op, dir: Direction, args: &[Tensor]| {
        let a = run(&whole, &op, dir, args);
        let b = run(&capped, &op, dir, args);
        assert_eq!(
            a,
            b,
            "{op} {}: chunked differs from one binding",
            dir.name()
        );
        checked += 1;
    };
    for u in [UnaryOp::Exp, UnaryOp::Log, UnaryOp::Tanh, UnaryOp::Silu] {
        let op = Op::Unary(u);
        same(op, Direction::Forward, std::slice::from_ref(&x));
        let out = Tensor::from_f32(
            &shape,
            run(&whole, &op, Direction::Forward, std::slice::from_ref(&x)).remove(0),
        )
        .unwrap();
        same(op, Direction::Backward, &[x.clone(), out, g.clone()]);
    }
    same(
        Op::Scale { factor: -2.5 },
        Direction::Forward,
        std::slice::from_ref(&x),
    );
    same(
        Op::Scale { factor: -2.5 },
        Direction::Backward,
        &[x.clone(), x.clone(), g.clone()],
    );
    for approximate in [GeluApprox::None, GeluApprox::Tanh] {
        let op = Op::Gelu { approximate };
        same(op, Direction::Forward, std::slice::from_ref(&x));
        same(op, Direction::Backward, &[x.clone(), x.clone(), g.clone()]);
    }
    for b in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
        let op = Op::Binary(b);
        // Same shapes (b chunked with a) and a broadcast bias (b bound whole, offset passed).
        same(op, Direction::Forward, &[x.clone(), y.clone()]);
        same(op, Direction::Forward, &[x.clone(), bias.clone()]);
        same(
            op,
            Direction::Backward,
            &[x.clone(), y.clone(), x.clone(), g.clone()],
        );
    }
    assert_eq!(checked, 4 * 2 + 2 + 2 * 2 + 4 * 3);
    // The chunked runs really split: more dispatches than ops.
    assert!(capped.counters().dispatches > whole.counters().dispatches);

    // Broadcast backward sums over rows: needs `a` whole, so it is a clear error.
    let dev: Vec<Tensor> = [x.clone(), bias.clone(), x.clone(), g.clone()]
        .iter()
        .map(|t| capped.upload(t).unwrap())
        .collect();
    let refs: Vec<&Tensor> = dev.iter().collect();
    match capped.run(&Op::Binary(BinaryOp::Mul), Direction::Backward, &refs) {
        Err(Error::LimitExceeded {
            what,
            value,
            limit: l,
        }) => {
            assert!(what.contains("mul"), "{what}");
            assert_eq!(value, (n as u64) * 4);
            assert_eq!(l, limit);
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

#[test]
fn other_ops_name_the_op_size_and_limit() {
    let Some(_) = testing::wgpu("other_ops_name_the_op_size_and_limit") else {
        return;
    };
    let capped = WgpuBackend::with_options(WgpuOptions {
        max_storage_binding_cap: Some(CAP),
        ..Default::default()
    })
    .unwrap();
    let limit = capped.limits().max_storage_buffer_binding_size;
    let x = capped.upload(&rand(1, &[40, 40], 0.1)).unwrap();
    let w = capped.upload(&rand(2, &[40], 0.1)).unwrap();
    let cases: Vec<(Op, Vec<&Tensor>)> = vec![
        (Op::Softmax { causal: false }, vec![&x]),
        (Op::RmsNorm { eps: 1e-5 }, vec![&x, &w]),
        (
            Op::Matmul {
                trans_a: false,
                trans_b: false,
            },
            vec![&x, &x],
        ),
        (Op::Transpose, vec![&x]),
    ];
    for (op, args) in cases {
        match capped.run(&op, Direction::Forward, &args) {
            Err(Error::LimitExceeded {
                what,
                value,
                limit: l,
            }) => {
                assert!(what.starts_with(op.name()), "{what}");
                assert_eq!(value, 40 * 40 * 4, "{what}");
                assert_eq!(l, limit);
            }
            other => panic!("{op}: expected LimitExceeded, got {other:?}"),
        }
    }
    // Small tensors still run on the capped backend.
    let s = capped.upload(&rand(3, &[4, 8], 0.1)).unwrap();
    let y = capped
        .run(&Op::Softmax { causal: false }, Direction::Forward, &[&s])
        .unwrap();
    let y = capped.download_blocking(&y[0]).unwrap();
    let row: f32 = y.as_f32().unwrap()[..8].iter().sum();
    assert!((row - 1.0).abs() < 1e-5);
}
