//! # kernels-core
//!
//! The `no_std` (+ `alloc`) heart of the library: one op vocabulary ([`op`]), one CPU reference
//! kernel per op, forward and backward ([`cpu`]), the backend trait every device implements
//! ([`backend`]), reverse-mode autograd whose backward rules are themselves ops ([`autograd`]),
//! `nn` layers, optimizers, and safetensors I/O.
//!
//! The CPU reference is the specification: plain loops, shapes in comments, `libm` for math,
//! deterministic order. Every kernel is generic over [`Real`] so the same code runs in `f32`
//! (the reference dtype) and in `f64` (for finite-difference gradient checks).
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod autograd;
pub mod backend;
pub mod cpu;
mod dtype;
pub mod error;
pub mod gradcheck;
pub mod io;
pub mod models;
pub mod nn;
pub mod numerics;
pub mod op;
pub mod optim;
pub mod parity;
pub mod rng;
pub mod tensor;

pub use backend::{Backend, CpuBackend, DeviceId};
pub use error::{Error, Result};
pub use numerics::Real;
pub use op::{Direction, Op, OpKind};
pub use rng::Rng;
pub use tensor::{DType, Tensor};
