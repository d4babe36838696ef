//! Models written once over [`crate::autograd::Graph`] and `dyn Backend`: they run unchanged on
//! every device.

pub mod hf;
pub mod llama;
pub mod world;
