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
//!
//! ## Where to start
//!
//! - [`Tensor`]: a shape and host or device storage (f32, i32, i64).
//! - [`Backend`]: a device that uploads, downloads and runs one op; [`CpuBackend`] here, wgpu
//!   and CUDA in the `kernels-gpu` crate. Everything above it is written against
//!   `Rc<dyn Backend>`.
//! - The op table: [`OpKind::ALL`] lists every op; [`Op`] is one op with its attributes, and
//!   [`Op::spec`] gives its inputs, outputs, gradients and error budget ([`numerics::Budget`]).
//!   `kernels ops --markdown` prints the table `kernels-core/README.md` shows.
//! - [`autograd::Graph`]: records ops on [`autograd::Var`]s and differentiates them
//!   ([`autograd::Graph::backward`]); [`nn`] layers keep their parameters in an
//!   [`nn::ParamStore`], and [`optim`] steps them; [`parallel::DataParallel`] trains replicas
//!   on several backends from one global batch.
//! - Models, written once over `Graph`: [`models::llama::Llama`] (Hugging Face llama
//!   checkpoints, KV cache, generation) and [`models::world::WorldModel`] (the GRU world model).
//! - [`io`]: safetensors in and out; [`gguf`]: GGUF files (llama.cpp's format) in and out.
//!
//! One op on your data, checked against the reference within its published budget:
//!
//! ```
//! use kernels_core::numerics::compare;
//! use kernels_core::op::{Direction, Op, OpKind};
//! use kernels_core::{Backend, CpuBackend, Tensor};
//!
//! let x = Tensor::from_f32(&[2, 3], vec![1.0, 2.0, 3.0, -1e4, 0.0, 1e4])?;
//! let op = Op::default_for(OpKind::Softmax)?;
//! let want = CpuBackend::reference().run(&op, Direction::Forward, &[&x])?;
//! let got = CpuBackend::new().run(&op, Direction::Forward, &[&x])?;
//! let (atol, rtol) = op.spec().budget.at(op.reduced_len(&[x.shape()]));
//! assert!(compare(got[0].as_f32()?, want[0].as_f32()?, atol, rtol).pass);
//! # Ok::<(), kernels_core::Error>(())
//! ```
//!
//! A training step, with gradients from the graph:
//!
//! ```
//! use std::rc::Rc;
//! use kernels_core::autograd::Graph;
//! use kernels_core::nn::{Linear, ParamStore};
//! use kernels_core::optim::AdamW;
//! use kernels_core::{Backend, CpuBackend, Rng, Tensor};
//!
//! let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
//! let mut rng = Rng::new(0);
//! let mut store = ParamStore::new(backend.clone());
//! let layer = Linear::new(&mut store, "fc", 4, 3, true, &mut rng)?;
//! let x = rng.normal_tensor(&[8, 4], 0.0, 1.0)?;
//! let y = Tensor::from_i32(&[8], vec![0, 1, 2, 0, 1, 2, 0, 1])?;
//!
//! let g = Graph::new(backend.clone());
//! let p = store.bind(&g)?;
//! let logits = layer.forward(&g, &p, &g.constant(x)?)?;
//! let loss = g.cross_entropy(&logits, &g.constant(y)?)?;
//! let grads = g.backward(&loss)?;
//! AdamW::new(1e-3).step(&mut store, &grads)?;
//! # Ok::<(), kernels_core::Error>(())
//! ```
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
pub mod gguf;
pub mod gradcheck;
pub mod io;
pub mod models;
pub mod nn;
pub mod numerics;
pub mod op;
pub mod optim;
pub mod packed;
pub mod parallel;
pub mod parity;
pub mod quant;
pub mod rng;
pub mod tensor;

pub use backend::{Backend, CpuBackend, DeviceId};
pub use error::{Error, Result};
pub use numerics::Real;
pub use op::{Direction, Op, OpKind};
pub use packed::SharedBytes;
pub use rng::Rng;
pub use tensor::{DType, Tensor};
