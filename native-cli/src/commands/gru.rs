//! `kernels gru ...`: the GRU world model (`train`, `predict`, `bench`) and a plain one-layer
//! GRU with PyTorch `nn.GRU` weights run on safetensors files (`run`). What the subcommands
//! share (the weights, the held-out data and its error table) is [`crate::world_model`].

pub mod bench;
pub mod predict;
pub mod run;
pub mod train;
