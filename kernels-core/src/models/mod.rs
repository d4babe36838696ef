//! Models written once over [`crate::autograd::Graph`], so they run on any backend.

pub mod llama;
