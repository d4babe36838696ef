//! The demo models on a microcontroller, checked against the host.
//!
//! The same kernels-core code (built with `default-features = false`, no `std`) runs the
//! workload ([`workload`]) twice:
//!
//! - in the firmware (`src/bin/firmware.rs`), on a Cortex-M4F, the `mps2-an386` board that
//!   `qemu-system-arm` emulates, which prints a [`report::Report`] over semihosting;
//! - on the host CPU backend (`src/bin/compare.rs`, `embedded-compare`), which reads that
//!   report, computes the same workload and checks the two against each other ([`compare`]):
//!   the same greedy tokens, the same initial state bit for bit, the logits and the rollout
//!   within the published budgets ([`LOGITS_BUDGET`], [`ROLLOUT_BUDGET`]).
//!
//! `tests/embedded.sh` builds the firmware, runs it under QEMU and calls the comparison; CI runs
//! it.
//!
//! The workload:
//! - the demo llama (`native-cli/models/adder`, embedded weights): greedy answers to
//!   [`workload::PROBLEMS`] and the logits of every position of [`workload::LOGITS_PROMPT`];
//! - the GRU world model's ensemble member 0 (the real trained weights of one member; the build
//!   script cuts it out of `native-cli/models/world/world.safetensors`): a
//!   [`workload::ROLLOUT_STEPS`]-step rollout from the first state of held-out trajectory 0.

#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod compare;
pub mod report;
pub mod workload;

use kernels_core::numerics::Budget;

/// Logits of the target against the host: the llama golden tests' budget against PyTorch
/// (`|d| <= 2e-4 + 2e-4 |ref|`), since the two sides sum in different orders (the host's
/// fast AVX2/AVX-512 paths, the target's portable ones).
pub const LOGITS_BUDGET: Budget = Budget::fixed(2e-4, 2e-4);

/// Rollout of the target against the host: the world model's cross-backend budget
/// (`|d| <= 1e-5 + 1e-4 |ref|`).
pub const ROLLOUT_BUDGET: Budget = Budget::fixed(1e-5, 1e-4);

/// The demo llama's `config.json`.
pub const ADDER_CONFIG: &str = include_str!("../../../native-cli/models/adder/config.json");
/// The demo llama's weights (f32 safetensors).
pub const ADDER_WEIGHTS: &[u8] =
    include_bytes!("../../../native-cli/models/adder/model.safetensors");
/// The world model's encoder and ensemble member 0 (F16 safetensors, written by build.rs).
pub const WORLD_MEMBER: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/world_member0.safetensors"));
