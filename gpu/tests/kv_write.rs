//! kv_write with a donated cache on wgpu: written in place when the buffer is unique, copied
//! when shared, bit for bit the CPU reference (NaN and infinities included).

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
