//! One module per `kernels` subcommand: what it does and what it prints. `main.rs` parses the
//! arguments and calls in here; what several commands share lives beside this module.

pub mod bench;
pub mod demo;
pub mod gru;
pub mod info;
pub mod op;
pub mod ops;
pub mod parity;
pub mod train;
