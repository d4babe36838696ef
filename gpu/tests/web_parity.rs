//! The parity suite on the browser's WebGPU (SwiftShader in headless Chromium): every op,
//! forward and backward, against the CPU reference compiled to wasm, through the same harness
//! as the native suite (`kernels_gpu::parity`, awaiting every download).
//!
//! Run with `wasm-pack test --headless --chrome gpu` (the Chrome flags are in
//! `gpu/webdriver.json`). Software WebGPU is slow per dispatch, so this runs the harness's small
//! selection ([`kernels_gpu::parity::small_cases`]): every op keeps at least one case.
//! There is no adapter-less skip here: this suite exists to run on WebGPU, so no adapter fails.

#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_core::{CpuBackend, OpKind, parity::Case};
use kernels_gpu::parity::{Row, SMALL_CASE_ELEMS, check_both_async, failures, small_cases};
use kernels_gpu::{WgpuBackend, WgpuOptions};
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

async fn backend(options: WgpuOptions) -> WgpuBackend {
    match WgpuBackend::new_async(options).await {
        Ok(b) => b,
        Err(e) => panic!(
            "no WebGPU device in this browser ({e}); Chromium needs --enable-unsafe-webgpu \
             (see gpu/webdriver.json)"
        ),
    }
}

async fn run(gpu: &WgpuBackend, cases: &[Case]) -> Vec<Row> {
    let reference = CpuBackend::reference();
    let mut rows = Vec::new();
    for c in cases {
        rows.extend(check_both_async(c, gpu, &reference).await);
    }
    for r in &rows {
        console_log!(
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
    rows
}

/// Every op in `kinds` ran forward and, if differentiable, backward, and nothing failed.
fn assert_all_pass(rows: &[Row], kinds: &[OpKind]) {
    let missing = kernels_gpu::parity::missing(rows, kinds);
    assert!(
        missing.is_empty(),
        "ops that did not run on WebGPU: {missing:?}"
    );
    let bad = failures(rows);
    assert!(
        bad.is_empty(),
        "{} failures:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[wasm_bindgen_test]
async fn webgpu_matches_the_cpu_reference() {
    let gpu = backend(WgpuOptions::default()).await;
    console_log!(
        "adapter: {:?}, subgroups: {}",
        gpu.adapter_info(),
        gpu.uses_subgroups()
    );
    let cases = small_cases(7, SMALL_CASE_ELEMS).unwrap();
    let rows = run(&gpu, &cases).await;
    console_log!("{} checks, counters: {:?}", rows.len(), gpu.counters());
    assert_all_pass(&rows, OpKind::ALL);
}

/// The row reductions with subgroups off: the workgroup-memory fallback on the browser too.
#[wasm_bindgen_test]
async fn row_reductions_match_without_subgroups() {
    let gpu = backend(WgpuOptions {
        subgroups: false,
        ..Default::default()
    })
    .await;
    assert!(!gpu.uses_subgroups());
    let kinds = [
        OpKind::Softmax,
        OpKind::LogSoftmax,
        OpKind::LayerNorm,
        OpKind::RmsNorm,
        OpKind::Sum,
        OpKind::Mean,
        OpKind::Max,
    ];
    let cases: Vec<Case> = small_cases(11, SMALL_CASE_ELEMS)
        .unwrap()
        .into_iter()
        .filter(|c| kinds.contains(&c.op.kind()))
        .collect();
    let rows = run(&gpu, &cases).await;
    assert_all_pass(&rows, &kinds);
}

/// Decode's streaming matvec (`matvec_stream`, the GPU path; SwiftShader defaults to
/// `matvec_each`) on the browser, in the adapter's reduction variant: a packed, a half and an
/// f32 weight, 3 x rows, out features not a multiple of the rows per workgroup, the gated
/// product, NaN in x.
#[wasm_bindgen_test]
async fn streaming_matvec_matches_the_cpu_reference() {
    use kernels_core::op::{Direction, Op};
    use kernels_core::{Backend, DType, Rng, Tensor};
    let gpu = backend(WgpuOptions {
        per_output_matvec: Some(false),
        ..Default::default()
    })
    .await;
    let normal = |shape: &[usize], seed: u64, std: f32| {
        let n = shape.iter().product();
        Tensor::from_f32(shape, Rng::new(seed).normal_vec(n, 0.0, std)).unwrap()
    };
    let matmul = Op::Matmul {
        trans_a: false,
        trans_b: true,
    };
    let k = 96;
    let mut x = normal(&[3, k], 1, 0.1);
    for (i, dtype) in [DType::Q4_K, DType::Q8_0, DType::F16, DType::F32]
        .into_iter()
        .enumerate()
    {
        let k = if dtype == DType::Q4_K { 256 } else { k };
        if x.shape()[1] != k {
            x = normal(&[3, k], 2, 0.06);
        }
        let w = normal(&[11, k], 10 + i as u64, 1.0);
        let w = if dtype == DType::F32 {
            w
        } else {
            w.quantize(dtype).unwrap()
        };
        let mut xv = x.as_f32().unwrap().to_vec();
        xv[k + 5] = f32::NAN;
        let x_nan = Tensor::from_f32(&[3, k], xv).unwrap();
        let wg = normal(&[22, k], 20 + i as u64, 1.0);
        let wg = if dtype == DType::F32 {
            wg
        } else {
            wg.quantize(dtype).unwrap()
        };
        for (op, args) in [
            (matmul, [&x, &w]),
            (matmul, [&x_nan, &w]),
            (Op::MatmulSwiglu, [&x, &wg]),
        ] {
            let want = CpuBackend::reference()
                .run(&op, Direction::Forward, &args)
                .unwrap();
            let a = gpu.upload(args[0]).unwrap();
            let b = gpu.upload(args[1]).unwrap();
            let got = gpu.run(&op, Direction::Forward, &[&a, &b]).unwrap();
            let got = gpu.download(&got[0]).await.unwrap();
            let (g, w) = (got.as_f32().unwrap(), want[0].as_f32().unwrap());
            let c = kernels_core::numerics::compare(g, w, 1e-4, 1e-4);
            assert!(c.pass, "{op} {dtype:?}: {c:?}\n got {g:?}\nwant {w:?}");
        }
    }
    let built = gpu.pipelines_built();
    console_log!("subgroups: {}, pipelines: {built:?}", gpu.uses_subgroups());
    assert!(
        built.iter().any(|p| p.starts_with("quant/matvec_stream")),
        "{built:?}"
    );
}
