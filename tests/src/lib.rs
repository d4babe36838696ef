//! Cross-crate integration tests live in `tests/tests/`. The shared parity harness they use is
//! [`kernels_gpu::parity`]: one test body, run on every backend against the CPU reference.

pub mod charts;
pub mod golden;
