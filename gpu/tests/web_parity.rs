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
