//! GPU backends for kernels-core, and backend selection (`KERNELS_BACKEND`).
//!
//! The wgpu backend lands with its own issue; until then selection knows only the CPU, and an
//! explicit request for a GPU backend is a clear error rather than a silent fallback.

pub mod select;

pub use select::{BackendChoice, Selected, select_backend};
