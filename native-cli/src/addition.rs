//! The demo model's task, three-digit addition: the problems, their encoding, the held-out
//! split, batches, training steps and evaluation live in
//! [`kernels_core::models::llama::addition`] (the web page's Train section uses them too); this
//! module adds what only the CLI has: the embedded demo model and a blocking evaluation.

pub use kernels_core::models::llama::addition::*;

use crate::CliResult;
use crate::llama::{self, ModelFiles};

/// Where the demo model lives in the repository.
pub const MODEL_DIR: &str = "models/adder";

/// The shipped demo model, embedded in the binary.
pub fn embedded() -> CliResult<ModelFiles> {
    llama::from_bytes(
        "embedded demo model (native-cli/models/adder)",
        include_str!("../models/adder/config.json"),
        include_bytes!("../models/adder/model.safetensors"),
        Some(include_bytes!("../models/adder/tokenizer.json")),
    )
}

/// Exact-match accuracy of greedy answers on `n` held-out problems drawn with `seed`:
/// `(correct, n, a few wrong examples)` ([`kernels_core::models::llama::addition::evaluate`],
/// waited on).
pub fn evaluate(
    model: &kernels_core::models::llama::Llama,
    n: usize,
    seed: u64,
    batch: usize,
) -> CliResult<(usize, usize, Vec<String>)> {
    Ok(pollster::block_on(
        kernels_core::models::llama::addition::evaluate(model, n, seed, batch),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_tokenizer_is_the_tasks() {
        let shipped: serde_json::Value =
            serde_json::from_slice(include_bytes!("../models/adder/tokenizer.json")).unwrap();
        let made: serde_json::Value = serde_json::from_str(&tokenizer_json()).unwrap();
        assert_eq!(shipped, made);
    }
}
