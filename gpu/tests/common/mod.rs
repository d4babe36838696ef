//! Shared by the GPU tests: find an adapter or explain why not (and fail in CI).

#![allow(dead_code)]

use kernels_gpu::WgpuBackend;

pub fn backend() -> Option<WgpuBackend> {
    match WgpuBackend::new() {
        Ok(b) => Some(b),
        Err(e) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true but no wgpu adapter: {e}");
            }
            eprintln!(
                "skipping GPU test: no wgpu adapter ({e}); set WGPU_BACKEND=vulkan with mesa-vulkan-drivers installed"
            );
            None
        }
    }
}
