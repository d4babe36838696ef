//! The demo model's task: three-digit addition, generated and checked by this code, shared by
//! the `kernels` CLI (`train transformer`, `eval`, `demo`) and the web page's Train section.
//!
//! A problem `a + b` with `a, b < 1000` is the prompt `aaa+bbb=` (zero-padded) and the answer
//! the four digits of the sum least-significant first, then `$`: `123+456=` -> `9750$`. Writing
//! the sum backwards lets a small causal model carry as it goes, like pencil-and-paper addition.
//! One problem in [`HELD_OUT_EVERY`] (by a hash of `(a, b)`) is never trained on: evaluation
//! draws from those.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::op::ROPE_THETA;
use crate::parallel::{DataParallel, StepReport};
use crate::rng::Rng;

use super::train::{self, Batch};
use super::{Llama, LlamaConfig, greedy_batch};

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
/// Tokens per training row: a problem and its answer, less the last (next-token targets).
pub const SEQ: usize = PROMPT_LEN + ANSWER_LEN - 1;
/// One problem in this many is held out.
pub const HELD_OUT_EVERY: u64 = 10;

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
pub fn ids(text: &str) -> Result<Vec<u32>> {
    text.chars()
        .map(|c| {
            id_of(c).ok_or_else(|| Error::Missing {
                what: "character in the addition vocabulary".into(),
                name: c.to_string(),
            })
        })
        .collect()
}

/// Ids back to text (`?` for an id outside [`VOCAB`]).
pub fn text(ids: &[u32]) -> String {
    ids.iter()
        .map(|&i| VOCAB.get(i as usize).copied().unwrap_or('?'))
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

/// The size of a llama for the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
}

/// The llama config of an addition model of `size`: the task's vocabulary and context, tied
/// embeddings, `$` as the end token.
pub fn config(size: Size) -> LlamaConfig {
    LlamaConfig {
        hidden_size: size.hidden,
        intermediate_size: size.intermediate,
        num_hidden_layers: size.layers,
        num_attention_heads: size.heads,
        num_key_value_heads: size.kv_heads,
        vocab_size: VOCAB.len(),
        rms_norm_eps: 1e-5,
        rope_theta: ROPE_THETA,
        max_position_embeddings: PROMPT_LEN + ANSWER_LEN,
        tie_word_embeddings: true,
        head_dim: size.hidden.checked_div(size.heads).unwrap_or(0),
        bos_token_id: None,
        eos_token_ids: alloc::vec![END],
        variant: Default::default(),
    }
}

/// Whether a model can train on the task: its vocabulary must be [`VOCAB`]'s size and its
/// context hold a problem and its answer.
pub fn check_fits(config: &LlamaConfig) -> Result<()> {
    if config.vocab_size != VOCAB.len() || config.max_positions() < PROMPT_LEN + ANSWER_LEN {
        return Err(Error::BadModelFile {
            path: "config.json".into(),
            why: format!(
                "the addition task needs a vocabulary of {} tokens and {} positions; this model \
                 has {} tokens and {} positions",
                VOCAB.len(),
                PROMPT_LEN + ANSWER_LEN,
                config.vocab_size,
                config.max_positions()
            ),
        });
    }
    Ok(())
}

/// A training batch of `n` problems drawn from `rng`: each row a problem and its answer, the
/// loss on the answer's characters.
pub fn batch(rng: &mut Rng, n: usize) -> Result<Batch> {
    let mut ids = Vec::with_capacity(n * SEQ);
    let mut targets = Vec::with_capacity(n * SEQ);
    for _ in 0..n {
        let (a, b) = draw(rng, false);
        let seq = self::ids(&format!("{}{}", prompt(a, b), answer(a, b)))?;
        ids.extend(seq[..seq.len() - 1].iter().map(|&t| t as i32));
        targets.extend(seq[1..].iter().map(|&t| t as i32));
    }
    Ok(Batch {
        rows: n,
        seq: SEQ,
        ids,
        targets,
        // Logits at these positions predict the answer's characters.
        positions: (PROMPT_LEN - 1..SEQ).collect(),
    })
}

/// One training step of `dp` on `n` problems drawn from `rng`.
pub async fn train_step(
    dp: &mut DataParallel<Llama>,
    rng: &mut Rng,
    n: usize,
) -> Result<StepReport> {
    let b = batch(rng, n)?;
    train::step(dp, &b).await
}

/// Exact-match accuracy of greedy answers on `n` held-out problems drawn with `seed`, `batch`
/// problems at a time: `(correct, n, a few wrong examples)`.
pub async fn evaluate(
    model: &Llama,
    n: usize,
    seed: u64,
    batch: usize,
) -> Result<(usize, usize, Vec<String>)> {
    evaluate_with_progress(model, n, seed, batch, &mut |_, _| {}).await
}

/// How many distinct problems are held out (about a tenth of the million `(a, b)` pairs).
pub fn held_out_count() -> usize {
    (0..1000u32)
        .map(|a| (0..1000u32).filter(|&b| held_out(a, b)).count())
        .sum()
}

/// [`evaluate`], calling `progress(done, correct)` after each batch. The problems are drawn
/// batch by batch, so `n` costs time, not memory.
pub async fn evaluate_with_progress(
    model: &Llama,
    n: usize,
    seed: u64,
    batch: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(usize, usize, Vec<String>)> {
    let mut rng = Rng::new(seed);
    let batch = batch.max(1);
    let mut correct = 0;
    let mut wrong = Vec::new();
    let mut done = 0;
    while done < n {
        let chunk: Vec<(u32, u32)> = (0..batch.min(n - done))
            .map(|_| draw(&mut rng, true))
            .collect();
        let prompts = chunk
            .iter()
            .map(|&(a, b)| ids(&prompt(a, b)))
            .collect::<Result<Vec<_>>>()?;
        let outs = greedy_batch(model, &prompts, ANSWER_LEN).await?;
        for (&(a, b), out) in chunk.iter().zip(outs) {
            let got = text(&out);
            if read_answer(&got) == Some(a + b) {
                correct += 1;
            } else if wrong.len() < 5 {
                wrong.push(format!("{}{got} (want {})", prompt(a, b), answer(a, b)));
            }
        }
        done += chunk.len();
        progress(done, correct);
    }
    Ok((correct, n, wrong))
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

#[cfg(test)]
mod tests {
    use alloc::rc::Rc;

    use super::*;
    use crate::backend::CpuBackend;
    use crate::backend::now_or_never;
    use crate::optim::AdamW;

    #[test]
    fn problems_round_trip_and_hold_out_a_tenth() {
        assert_eq!(prompt(7, 45), "007+045=");
        assert_eq!(answer(123, 456), "9750$");
        assert_eq!(answer(999, 999), "8991$");
        assert_eq!(read_answer("9750$"), Some(579));
        assert_eq!(read_answer("975$"), None);
        assert_eq!(ids("12+=$").unwrap(), alloc::vec![1, 2, 10, 11, 12]);
        assert_eq!(text(&[1, 2, 10, 11, 12, 99]), "12+=$?");
        assert!(ids("1x").is_err());
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

    #[test]
    fn batches_are_shifted_problems_with_the_answer_scored() {
        let b = batch(&mut Rng::new(1), 3).unwrap();
        assert_eq!((b.rows, b.seq), (3, SEQ));
        assert_eq!(b.ids.len(), 3 * SEQ);
        assert_eq!(b.ids[1..SEQ], b.targets[..SEQ - 1]);
        assert_eq!(b.positions, alloc::vec![7, 8, 9, 10, 11]);
        // The row's last target is the end mark.
        assert_eq!(b.targets[SEQ - 1], END as i32);
        // The same seed draws the same batch.
        assert_eq!(batch(&mut Rng::new(1), 3).unwrap(), b);
    }

    #[test]
    fn a_tiny_model_trains_and_evaluates() {
        let size = Size {
            hidden: 16,
            intermediate: 32,
            layers: 1,
            heads: 2,
            kv_heads: 1,
        };
        let cfg = config(size);
        check_fits(&cfg).unwrap();
        let mut small = cfg.clone();
        small.vocab_size = 50;
        assert!(check_fits(&small).is_err());
        let mut rng = Rng::new(0);
        let model = Llama::init(cfg, Rc::new(CpuBackend::new()), &mut rng).unwrap();
        let mut dp = now_or_never(DataParallel::new(alloc::vec![model], AdamW::new(1e-2)))
            .unwrap()
            .unwrap();
        let mut losses = Vec::new();
        for _ in 0..8 {
            let r = now_or_never(train_step(&mut dp, &mut rng, 8))
                .unwrap()
                .unwrap();
            losses.push(now_or_never(r.loss()).unwrap().unwrap());
        }
        assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
        assert!(losses[7] < losses[0], "{losses:?}");
        let (ok, n, wrong) = now_or_never(evaluate(&dp.replicas()[0], 6, 1, 4))
            .unwrap()
            .unwrap();
        assert_eq!(n, 6);
        assert!(ok <= n && wrong.len() <= 5);
    }

    #[test]
    fn the_tokenizer_lists_every_character() {
        let t = tokenizer_json();
        for c in VOCAB {
            assert!(t.contains(&format!("\"{c}\"")), "{c}");
        }
    }
}
