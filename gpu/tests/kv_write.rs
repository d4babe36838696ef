//! The ops that take donated inputs, on wgpu: kv_write's cache is written in place when the
//! buffer is unique, copied when shared, bit for bit the CPU reference (NaN and infinities
//! included); rope_kv_write's two caches likewise, within the op's budget; matmul_add's residual
//! receives the product in place, within the op's budget.

// Native adapters (pollster, lavapipe); the browser's suite is web_parity.rs.
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_gpu::testing;

#[test]
fn wgpu_writes_a_donated_cache_in_place() {
    let Some(be) = testing::wgpu("wgpu_writes_a_donated_cache_in_place") else {
        return;
    };
    assert!(testing::check_kv_write_donation("wgpu", &be) > 0);
}

#[test]
fn wgpu_writes_rope_kv_write_into_its_donated_caches() {
    let Some(be) = testing::wgpu("wgpu_writes_rope_kv_write_into_its_donated_caches") else {
        return;
    };
    assert!(testing::check_rope_kv_write_donation("wgpu", &be) > 0);
}

#[test]
fn wgpu_accumulates_matmul_add_into_a_donated_residual() {
    let test = "wgpu_accumulates_matmul_add_into_a_donated_residual";
    let Some(be) = testing::wgpu(test) else {
        return;
    };
    assert!(testing::check_matmul_add_donation("wgpu", &be) > 0);
    // Decode's per-output matvec and the workgroup one, whichever the adapter defaults to.
    let other = kernels_gpu::WgpuBackend::with_options(kernels_gpu::WgpuOptions {
        per_output_matvec: Some(!be.uses_per_output_matvec()),
        ..Default::default()
    })
    .unwrap();
    assert!(testing::check_matmul_add_donation("wgpu (other matvec)", &other) > 0);
}
