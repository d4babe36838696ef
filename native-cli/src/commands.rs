//! One module per `kernels` subcommand: what it does and what it prints. `main.rs` parses the
//! arguments and calls in here; what several commands share lives beside this module (see the
//! crate docs).

pub mod bench;
pub mod chat;
pub mod demo;
pub mod eval;
pub mod generate;
pub mod gru;
pub mod info;
pub mod logits;
pub mod op;
pub mod ops;
pub mod parity;
pub mod quantize;
pub mod train;
