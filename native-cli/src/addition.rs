//! The demo model's task: three-digit addition, generated and checked by this code.
//!
//! A problem `a + b` with `a, b < 1000` is the prompt `aaa+bbb=` (zero-padded) and the answer
//! the four digits of the sum least-significant first, then `$`: `123+456=` -> `9750$`. Writing
//! the sum backwards lets a small causal model carry as it goes, like pencil-and-paper addition.
//! One problem in [`HELD_OUT_EVERY`] (by a hash of `(a, b)`) is never trained on: evaluation
//! draws from those.

use kernels_core::Rng;

use crate::llama::{self, ModelFiles};
use crate::{CliResult, fail};

/// The characters, in id order.
pub const VOCAB: [char; 13] = [
    '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '+', '=', '$',
];
/// Id of `$`, the end of an answer (the model's `eos_token_id`).
pub const END: u32 = 12;
/// Prompt length: `aaa+bbb=`.
pub const PROMPT_LEN: usize = 8;
/// Answer length: four digits and `$`.
pub const ANSWER_LEN: usize = 5;
/// One problem in this many is held out.
pub const HELD_OUT_EVERY: u64 = 10;

/// Where the demo model lives in the repository.
pub const MODEL_DIR: &str = "models/adder";

/// Id of a character of [`VOCAB`].
pub fn id_of(c: char) -> Option<u32> {
    VOCAB.iter().position(|&v| v == c).map(|i| i as u32)
}

/// `aaa+bbb=`.
pub fn prompt(a: u32, b: u32) -> String {
    format!("{a:03}+{b:03}=")
}

/// The sum's four digits least-significant first, then `$`.
pub fn answer(a: u32, b: u32) -> String {
    let s: String = format!("{:04}", a + b).chars().rev().collect();
    format!("{s}$")
}

/// Reads an answer back as a number (`None` unless four digits then `$`).
pub fn read_answer(text: &str) -> Option<u32> {
    let digits: String = text.strip_suffix('$')?.chars().rev().collect();
    if digits.len() != 4 {
        return None;
    }
    digits.parse().ok()
}

/// Ids of a string of [`VOCAB`] characters.
pub fn ids(text: &str) -> CliResult<Vec<u32>> {
    text.chars()
        .map(|c| id_of(c).ok_or_else(|| fail(format!("`{c}` is not in the addition vocabulary"))))
        .collect()
}

/// Whether `(a, b)` is held out from training.
pub fn held_out(a: u32, b: u32) -> bool {
    let mut x = (u64::from(a) << 32 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    x.wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 40 < (1 << 24) / HELD_OUT_EVERY
}

/// A random problem from the training (`held = false`) or the held-out set.
pub fn draw(rng: &mut Rng, held: bool) -> (u32, u32) {
    loop {
        let a = rng.below(1000) as u32;
        let b = rng.below(1000) as u32;
        if held_out(a, b) == held {
            return (a, b);
        }
    }
}

/// The tokenizer: one token per character (a WordLevel model over single characters, fused
/// back on decode), as `tokenizer.json` for the `tokenizers` crate and Hugging Face.
pub fn tokenizer_json() -> String {
    let vocab: serde_json::Map<String, serde_json::Value> = VOCAB
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), serde_json::Value::from(i)))
        .collect();
    let v = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {
            "type": "Split",
            "pattern": {"Regex": "."},
            "behavior": "Isolated",
            "invert": false
        },
        "post_processor": null,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "$"}
    });
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

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
/// `(correct, n, a few wrong examples)`.
pub fn evaluate(
    model: &kernels_core::models::llama::Llama,
    n: usize,
    seed: u64,
    batch: usize,
) -> CliResult<(usize, usize, Vec<String>)> {
    let mut rng = Rng::new(seed);
    let problems: Vec<(u32, u32)> = (0..n).map(|_| draw(&mut rng, true)).collect();
    let mut correct = 0;
    let mut wrong = Vec::new();
    for chunk in problems.chunks(batch.max(1)) {
        let prompts = chunk
            .iter()
            .map(|&(a, b)| ids(&prompt(a, b)))
            .collect::<CliResult<Vec<_>>>()?;
        let outs = pollster::block_on(kernels_core::models::llama::greedy_batch(
            model, &prompts, ANSWER_LEN,
        ))?;
        for (&(a, b), out) in chunk.iter().zip(outs) {
            let text: String = out
                .iter()
                .map(|&i| VOCAB.get(i as usize).copied().unwrap_or('?'))
                .collect();
            if read_answer(&text) == Some(a + b) {
                correct += 1;
            } else if wrong.len() < 5 {
                wrong.push(format!("{}{text} (want {})", prompt(a, b), answer(a, b)));
            }
        }
    }
    Ok((correct, n, wrong))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_round_trip_and_hold_out_a_tenth() {
        assert_eq!(prompt(7, 45), "007+045=");
        assert_eq!(answer(123, 456), "9750$");
        assert_eq!(answer(999, 999), "8991$");
        assert_eq!(read_answer("9750$"), Some(579));
        assert_eq!(read_answer("975$"), None);
        assert_eq!(ids("12+=$").unwrap(), vec![1, 2, 10, 11, 12]);
        let held = (0..1000u32)
            .flat_map(|a| (0..1000u32).map(move |b| (a, b)))
            .filter(|&(a, b)| held_out(a, b))
            .count();
        assert!((90_000..110_000).contains(&held), "{held}");
        let mut rng = Rng::new(3);
        for _ in 0..100 {
            let (a, b) = draw(&mut rng, false);
            assert!(!held_out(a, b));
        }
    }
}
