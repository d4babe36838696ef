//! GPU backends for kernels-core, and backend selection (`KERNELS_BACKEND`).
//!
//! [`WgpuBackend`] runs the op vocabulary on wgpu (WebGPU in the browser; Vulkan, Metal or DX12
//! natively): tensors stay in pooled device buffers, ops are recorded into one command encoder
//! and submitted in batches, and counters report dispatches, submits and bytes moved. WGSL lives
//! in `src/wgpu/shaders/<family>.wgsl`, one file per op family, specialized with override constants.
//!
//! With the `cuda` feature, `CudaBackend` runs the same vocabulary through cudarc: cuBLAS
//! SGEMM for matmul, CUDA C (`src/cuda/kernels/<family>.cu`, compiled at run time by NVRTC)
//! for the rest; the driver is loaded at run time, so the crate builds without CUDA.
//!
//! Pick a backend the way the CLI does with [`select_backend`] (`KERNELS_BACKEND=cpu|wgpu|cuda|
//! auto`), or build one directly with [`WgpuBackend::new`]; either is an
//! `Rc<dyn kernels_core::Backend>` that every model and `Graph` of kernels-core runs on
//! unchanged. The examples (`cargo run -p native-cli --example check_op`, `train_mlp`,
//! `world_rollout`) start from there.
//!
//! [`parity`] is the shared harness that checks any backend against the CPU reference;
//! [`testing`] gives tests the GPU backends available here (the backend matrix) and the CI rule
//! for a missing one.

pub mod adapters;
pub mod bench;
pub mod contract;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(all(test, not(feature = "cuda")))]
#[path = "cuda/kernels.rs"]
mod cuda_kernels;
mod device;
mod host_time;
mod ops;
pub mod params;
pub mod parity;
pub mod select;
pub mod shapes;
pub mod testing;
pub mod wgpu;

pub use self::wgpu::SVD_MAX_Q;
pub use self::wgpu::{Counters, GpuBuffer, WgpuBackend, WgpuOptions};
#[cfg(feature = "cuda")]
pub use cuda::{CudaBackend, CudaCounters};
pub use device::Family;
pub use select::{
    BackendChoice, Selected, cuda_status, require_wgpu, select_backend, select_devices,
};
