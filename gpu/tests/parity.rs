//! Every implemented op, forward and backward, on wgpu against the CPU reference, on the shared
//! seeded parity cases (awkward shapes, tile sizes +/- 1, one case above 65,535 workgroups),
//! within each op's published budget.

// Native adapters (pollster, lavapipe); the browser's suite is web_parity.rs.
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_gpu::testing;

use kernels_core::op::Direction;
use kernels_core::{Backend, DType, Error, OpKind, Tensor, parity};
use kernels_gpu::parity::{check_all, failures};

#[test]
fn wgpu_matches_the_cpu_reference() {
    let Some(gpu) = testing::wgpu("wgpu_matches_the_cpu_reference") else {
        return;
    };
    // Lavapipe has subgroups: the default run takes the subgroup path there.
    if gpu.adapter_info().name.contains("llvmpipe") {
        assert!(gpu.uses_subgroups(), "lavapipe reports subgroups");
    }
    // Lavapipe has shader-f16: the default run takes the native-f16 path there (SwiftShader
    // in the browser suite has not: the f32 path).
    if gpu.adapter_info().name.contains("llvmpipe") {
        assert!(gpu.uses_shader_f16(), "lavapipe reports shader-f16");
    }
    suite(&gpu, OpKind::ALL);
    let built = gpu.pipelines_built();
    let sg = built.iter().filter(|p| p.contains("+subgroup")).count();
    assert_eq!(sg > 0, gpu.uses_subgroups(), "{built:?}");
    let f16 = built.iter().filter(|p| p.ends_with("+f16")).count();
    assert_eq!(f16 > 0, gpu.uses_shader_f16(), "{built:?}");
}

/// The weight-dtype ops again with shader-f16 turned off, so the integer f16 decoding (the
/// path of adapters without shader-f16) is tested on adapters that have it too.
#[test]
fn weight_dtypes_match_without_shader_f16() {
    let Some(_) = testing::wgpu("weight_dtypes_match_without_shader_f16") else {
        return;
    };
    let gpu = kernels_gpu::WgpuBackend::with_options(kernels_gpu::WgpuOptions {
        shader_f16: false,
        ..Default::default()
    })
    .unwrap();
    assert!(!gpu.uses_shader_f16());
    suite(
        &gpu,
        &[
            OpKind::Dequantize,
            OpKind::Matmul,
            OpKind::Linear,
            OpKind::MatmulSwiglu,
            OpKind::Embedding,
        ],
    );
    let built = gpu.pipelines_built();
    assert!(
        built.iter().any(|p| p.starts_with("quant/matvec")),
        "{built:?}"
    );
    assert!(!built.iter().any(|p| p.ends_with("+f16")), "{built:?}");
}

/// The packed products on both `matvec` kernels: the streaming one (`matvec_stream`, several
/// weight rows per workgroup: GPUs) and one invocation per output (`matvec_each`, software
/// adapters), whichever the adapter defaults to.
#[test]
fn weight_dtypes_match_on_both_matvec_kernels() {
    let Some(_) = testing::wgpu("weight_dtypes_match_on_both_matvec_kernels") else {
        return;
    };
    for each in [false, true] {
        let gpu = kernels_gpu::WgpuBackend::with_options(kernels_gpu::WgpuOptions {
            per_output_matvec: Some(each),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(gpu.uses_per_output_matvec(), each);
        let products = [
            OpKind::Matmul,
            OpKind::Linear,
            OpKind::MatmulAdd,
            OpKind::MatmulSwiglu,
        ];
        suite(&gpu, &products);
        let built = gpu.pipelines_built();
        let ran = |entry: &str| built.iter().any(|p| p.split('+').next() == Some(entry));
        assert_eq!(ran("quant/matvec_each"), each, "{built:?}");
        assert_eq!(ran("quant/matvec_stream"), !each, "{built:?}");
        matvec_nan_and_inf(&gpu);
    }
}

/// The row-reduction ops again with subgroups turned off, so the workgroup-memory fallback is
/// tested on adapters that have subgroups too.
#[test]
fn row_reductions_match_without_subgroups() {
    let Some(_) = testing::wgpu("row_reductions_match_without_subgroups") else {
        return;
    };
    let gpu = kernels_gpu::WgpuBackend::with_options(kernels_gpu::WgpuOptions {
        subgroups: false,
        ..Default::default()
    })
    .unwrap();
    assert!(!gpu.uses_subgroups());
    suite(
        &gpu,
        &[
            OpKind::Softmax,
            OpKind::LogSoftmax,
            OpKind::LayerNorm,
            OpKind::RmsNorm,
            OpKind::Sum,
            OpKind::Mean,
            OpKind::Max,
            OpKind::Sample,
            // Decode's gated product sums two rows per workgroup.
            OpKind::MatmulSwiglu,
        ],
    );
    let built = gpu.pipelines_built();
    assert!(
        built.iter().any(|p| p == "softmax/softmax_forward"),
        "{built:?}"
    );
    assert!(!built.iter().any(|p| p.ends_with("+subgroup")), "{built:?}");
}

/// The shared harness ([`kernels_gpu::parity`]) on every case of `kinds`, the > 65,535-workgroup
/// ones included; every op must have run forward and, if differentiable, backward.
fn suite(gpu: &kernels_gpu::WgpuBackend, kinds: &[OpKind]) {
    let mut cases = Vec::new();
    for kind in kinds {
        cases.extend(parity::cases(*kind, 7).unwrap());
    }
    let rows = check_all(&cases, gpu);
    for r in &rows {
        println!(
            "{} {} {}: abs {:.2e} rel {:.2e} (atol {:.1e} rtol {:.1e}) {}",
            r.op,
            r.dir.name(),
            r.shape,
            r.max_abs_err(),
            r.max_rel_err(),
            r.atol,
            r.rtol,
            if r.pass() { "ok" } else { "FAIL" }
        );
    }
    println!("counters: {:?}", gpu.counters());
    // Coverage: every op ran on wgpu forward and, if differentiable, backward.
    let missing = kernels_gpu::parity::missing(&rows, kinds);
    assert!(
        missing.is_empty(),
        "ops without a wgpu parity case run: {missing:?}"
    );
    let bad = failures(&rows);
    assert!(
        bad.is_empty(),
        "{} failures:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Hand-checked values, independent of the CPU reference.
#[test]
fn hand_checked_values() {
    use kernels_core::op::{BinaryOp, Op, ReduceOp, UnaryOp};
    let Some(gpu) = testing::wgpu("hand_checked_values") else {
        return;
    };
    let run = |op: Op, dir: Direction, xs: &[Tensor]| -> Vec<Tensor> {
        let dev: Vec<Tensor> = xs.iter().map(|t| gpu.upload(t).unwrap()).collect();
        let refs: Vec<&Tensor> = dev.iter().collect();
        gpu.run(&op, dir, &refs)
            .unwrap()
            .iter()
            .map(|t| gpu.download_blocking(t).unwrap())
            .collect()
    };
    let a = Tensor::from_f32(&[2, 3], vec![1., 2., 3., 4., 5., 6.]).unwrap();
    let b = Tensor::from_f32(&[3], vec![10., 20., 30.]).unwrap();
    let out = run(
        Op::Binary(BinaryOp::Add),
        Direction::Forward,
        &[a.clone(), b.clone()],
    );
    assert_eq!(out[0].as_f32().unwrap(), &[11., 22., 33., 14., 25., 36.]);
    // grad_b of mul sums g * a over the broadcast rows.
    let g = Tensor::full(&[2, 3], 1.0).unwrap();
    let y = Tensor::zeros(&[2, 3]).unwrap();
    let out = run(
        Op::Binary(BinaryOp::Mul),
        Direction::Backward,
        &[a.clone(), b.clone(), y, g],
    );
    assert_eq!(out[0].as_f32().unwrap(), &[10., 20., 30., 10., 20., 30.]);
    assert_eq!(out[1].as_f32().unwrap(), &[5., 7., 9.]);
    let x = Tensor::from_f32(&[4], vec![-1., 0., 2., -3.]).unwrap();
    let out = run(
        Op::Unary(UnaryOp::Relu),
        Direction::Forward,
        std::slice::from_ref(&x),
    );
    assert_eq!(out[0].as_f32().unwrap(), &[0., 0., 2., 0.]);
    // [2,3] @ [3,2]
    let m = Tensor::from_f32(&[3, 2], vec![1., 0., 0., 1., 1., 1.]).unwrap();
    let out = run(
        Op::Matmul {
            trans_a: false,
            trans_b: false,
        },
        Direction::Forward,
        &[a.clone(), m],
    );
    assert_eq!(out[0].as_f32().unwrap(), &[4., 5., 10., 11.]);
    // a^T @ a with trans_a: [3,2] @ [2,3]
    let out = run(
        Op::Matmul {
            trans_a: true,
            trans_b: false,
        },
        Direction::Forward,
        &[a.clone(), a.clone()],
    );
    assert_eq!(
        out[0].as_f32().unwrap(),
        &[17., 22., 27., 22., 29., 36., 27., 36., 45.]
    );
    let out = run(
        Op::Reduce(ReduceOp::Sum),
        Direction::Forward,
        std::slice::from_ref(&a),
    );
    assert_eq!(out[0].as_f32().unwrap(), &[6., 15.]);
    let t = Tensor::from_f32(&[2, 3], vec![1., 7., 7., 9., 2., 9.]).unwrap();
    let out = run(Op::Argmax, Direction::Forward, &[t]);
    assert_eq!(out[0].to_i64_vec().unwrap(), vec![1, 0]);
    assert_eq!(out[0].dtype(), DType::I32);
    let out = run(Op::Transpose, Direction::Forward, std::slice::from_ref(&a));
    assert_eq!(out[0].as_f32().unwrap(), &[1., 4., 2., 5., 3., 6.]);
    let out = run(
        Op::Concat,
        Direction::Forward,
        &[
            a.clone(),
            Tensor::from_f32(&[2, 1], vec![-1., -2.]).unwrap(),
        ],
    );
    assert_eq!(
        out[0].as_f32().unwrap(),
        &[1., 2., 3., -1., 4., 5., 6., -2.]
    );
    let out = run(
        Op::Softmax { causal: true },
        Direction::Forward,
        &[Tensor::zeros(&[2, 2]).unwrap()],
    );
    assert_eq!(out[0].as_f32().unwrap(), &[1., 0., 0.5, 0.5]);
    let ids = Tensor::from_i32(&[3], vec![2, 0, 2]).unwrap();
    let out = run(
        Op::Embedding,
        Direction::Forward,
        &[ids.clone(), a.reshape(&[3, 2]).unwrap()],
    );
    assert_eq!(out[0].as_f32().unwrap(), &[5., 6., 1., 2., 5., 6.]);
    let bad = Tensor::from_i32(&[1], vec![3]).unwrap();
    let dev = [
        gpu.upload(&bad).unwrap(),
        gpu.upload(&a.reshape(&[3, 2]).unwrap()).unwrap(),
    ];
    assert!(matches!(
        gpu.run(&Op::Embedding, Direction::Forward, &[&dev[0], &dev[1]]),
        Err(Error::IndexOutOfRange { .. })
    ));
    // Shape errors name the op, as on the CPU.
    let dev = [
        gpu.upload(&a).unwrap(),
        gpu.upload(&Tensor::zeros(&[2]).unwrap()).unwrap(),
    ];
    assert!(matches!(
        gpu.run(
            &Op::Binary(BinaryOp::Add),
            Direction::Forward,
            &[&dev[0], &dev[1]]
        ),
        Err(Error::ShapeMismatch { op: "add", .. })
    ));
    // Host tensors are refused rather than silently copied.
    assert!(matches!(
        gpu.run(&Op::Unary(UnaryOp::Neg), Direction::Forward, &[&a]),
        Err(Error::DeviceMismatch { .. })
    ));
}

/// Decode's three forms of a product with a packed weight (`x @ W^T`, the llama's `W @ h^T`
/// with one row per batch entry, and `a^T @ W^T` with `a [.., k, 1]`) read the packed rows in
/// `matvec`, never a decoded copy of the weight.
#[test]
fn decode_forms_of_packed_products_take_matvec() {
    use kernels_core::op::Op;
    let Some(gpu) = testing::wgpu("decode_forms_of_packed_products_take_matvec") else {
        return;
    };
    let rng = |shape: &[usize], seed: u64| {
        let n = shape.iter().product();
        Tensor::from_f32(shape, kernels_core::Rng::new(seed).normal_vec(n, 0.0, 1.0)).unwrap()
    };
    let w = rng(&[9, 64], 1).quantize(DType::Q4_0).unwrap();
    let cases: Vec<(bool, Vec<Tensor>)> = vec![
        (false, vec![rng(&[2, 64], 2), w.clone()]),
        (false, vec![w.clone(), rng(&[2, 1, 64], 3)]),
        (true, vec![rng(&[2, 64, 1], 4), w.clone()]),
    ];
    for (trans_a, args) in cases {
        let op = Op::Matmul {
            trans_a,
            trans_b: true,
        };
        let refs: Vec<&Tensor> = args.iter().collect();
        let want = kernels_core::CpuBackend::reference()
            .run(&op, Direction::Forward, &refs)
            .unwrap();
        let dev: Vec<Tensor> = args.iter().map(|t| gpu.upload(t).unwrap()).collect();
        let dev_refs: Vec<&Tensor> = dev.iter().collect();
        let got = gpu.run(&op, Direction::Forward, &dev_refs).unwrap();
        let got = gpu.download_blocking(&got[0]).unwrap();
        assert_eq!(got.shape(), want[0].shape());
        let c = kernels_core::numerics::compare(
            got.as_f32().unwrap(),
            want[0].as_f32().unwrap(),
            1e-5,
            1e-5,
        );
        assert!(c.pass, "{op}: {c:?}");
    }
    let built = gpu.pipelines_built();
    assert!(
        built.iter().any(|p| p.starts_with("quant/matvec")),
        "{built:?}"
    );
    assert!(
        !built.iter().any(|p| p.starts_with("quant/dequantize")),
        "{built:?}"
    );
}

/// Decode's `matvec` sums 8 elements per block before the scale multiplies; where a scale or an
/// activation is infinite or NaN it must still give the reference's NaN and infinity positions
/// (the reference decodes each weight, then multiplies).
#[test]
fn matvec_keeps_the_references_nan_and_inf() {
    let Some(gpu) = testing::wgpu("matvec_keeps_the_references_nan_and_inf") else {
        return;
    };
    matvec_nan_and_inf(&gpu);
}

fn matvec_nan_and_inf(gpu: &kernels_gpu::WgpuBackend) {
    use kernels_core::op::Op;
    let normal = |shape: &[usize], seed: u64| {
        let n = shape.iter().product();
        Tensor::from_f32(shape, kernels_core::Rng::new(seed).normal_vec(n, 0.0, 1.0)).unwrap()
    };
    let op = Op::Matmul {
        trans_a: false,
        trans_b: true,
    };
    let inf = 0x7c00u16.to_le_bytes(); // f16 +inf
    // Every weight dtype with an f16 scale (or f16 values) to make infinite: all but bf16.
    for dtype in DType::WEIGHT.into_iter().filter(|&d| d != DType::BF16) {
        let w = if dtype == DType::Q6_K {
            // No Q6_K quantizer: random quants and scales, a small f16 super-scale.
            let mut b: Vec<u8> = (0..5 * 210)
                .map(|i| (kernels_core::Rng::new(i as u64).next_u64() % 251) as u8)
                .collect();
            for blk in b.chunks_mut(210) {
                blk[208..210].copy_from_slice(&0x211fu16.to_le_bytes());
            }
            Tensor::from_raw(&[5, 256], dtype, b).unwrap()
        } else {
            normal(&[5, 256], 1).quantize(dtype).unwrap()
        };
        // Row 1's first block scale infinite (f16: element 300, in row 1).
        let mut bytes = w.packed_bytes().unwrap().to_vec();
        let row = bytes.len() / 5;
        let at = row + if dtype == DType::Q6_K { 208 } else { 0 };
        bytes[at..at + 2].copy_from_slice(&inf);
        let w_inf = Tensor::from_raw(&[5, 256], dtype, bytes).unwrap();
        let x = normal(&[2, 256], 2);
        let mut xv = x.as_f32().unwrap().to_vec();
        xv[3] = f32::INFINITY;
        xv[256 + 17] = f32::NAN;
        let x_bad = Tensor::from_f32(&[2, 256], xv).unwrap();
        for (what, a, b) in [("inf scale", &x, &w_inf), ("inf/NaN x", &x_bad, &w)] {
            let want = kernels_core::CpuBackend::reference()
                .run(&op, Direction::Forward, &[a, b])
                .unwrap();
            let (da, db) = (gpu.upload(a).unwrap(), gpu.upload(b).unwrap());
            let got = gpu.run(&op, Direction::Forward, &[&da, &db]).unwrap();
            let got = gpu.download_blocking(&got[0]).unwrap();
            let c = kernels_core::numerics::compare(
                got.as_f32().unwrap(),
                want[0].as_f32().unwrap(),
                1e-4,
                1e-4,
            );
            assert!(
                c.pass,
                "{dtype:?} {what}: {c:?}\n got {:?}\nwant {:?}",
                got.as_f32().unwrap(),
                want[0].as_f32().unwrap()
            );
        }
    }
}
