//! The demo model's task, three-digit addition: the problems, their encoding, the held-out
//! split, batches, training steps and evaluation live in
//! [`kernels_core::models::llama::addition`] (the web page's Train section uses them too); this
//! module adds what only the CLI has: the embedded demo model, and the evaluation through
//! kernels-chat's generation path (the one `generate`, `chat` and the page use).

pub use kernels_core::models::llama::addition::*;

use kernels_chat::{StopWhen, TextTokenizer};

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

/// The task's tokenizer (one token per character; what `train transformer` writes as
/// `tokenizer.json`), for kernels-chat's generation path.
pub fn tokenizer() -> CliResult<TextTokenizer> {
    crate::tokenizer_json::tokenizer_from_bytes(tokenizer_json().as_bytes())
        .map(TextTokenizer::new)
        .map_err(|e| crate::fail(format!("the addition task's tokenizer: {e}")))
}

/// The tokenizer a model evaluates with: its directory's `tokenizer.json`, else the task's.
pub fn tokenizer_of(files: &ModelFiles) -> CliResult<TextTokenizer> {
    match &files.tokenizer {
        Some(t) => Ok(TextTokenizer::new(t.clone())),
        None => tokenizer(),
    }
}

/// Exact-match accuracy of greedy answers on `n` held-out problems drawn with `seed`, `batch`
/// problems at a time: `(correct, n, a few wrong examples)`. Through kernels-chat's generation
/// path ([`kernels_chat::complete_batch`]): each prompt encoded as `tokenizer(text)` encodes
/// it, the answer generated until `$` (the task's end, and the model's EOS) or
/// [`ANSWER_LEN`] tokens, and read from the tokenizer's decode. `progress(done, correct)` is
/// called after each batch; the problems are drawn batch by batch, so `n` costs time, not
/// memory.
pub fn evaluate(
    model: &kernels_core::models::llama::Llama,
    tok: &TextTokenizer,
    n: usize,
    seed: u64,
    batch: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> CliResult<(usize, usize, Vec<String>)> {
    let mut stop_ids = model.config.eos_token_ids.clone();
    if !stop_ids.contains(&END) {
        stop_ids.push(END);
    }
    let when = StopWhen {
        max_new_tokens: ANSWER_LEN,
        stop_ids,
        stop_strings: Vec::new(),
        show_stop_id: true,
    };
    let mut rng = kernels_core::Rng::new(seed);
    let batch = batch.max(1);
    let (mut done, mut correct, mut wrong) = (0, 0, Vec::new());
    while done < n {
        let chunk: Vec<(u32, u32)> = (0..batch.min(n - done))
            .map(|_| draw(&mut rng, true))
            .collect();
        let prompts = chunk
            .iter()
            .map(|&(a, b)| {
                kernels_chat::prompt_ids(tok, &prompt(a, b))
                    .map_err(|e| crate::fail(format!("eval: the prompt {}: {e}", prompt(a, b))))
            })
            .collect::<CliResult<Vec<_>>>()?;
        let replies =
            pollster::block_on(kernels_chat::complete_batch(model, tok, &prompts, &when))?;
        for (&(a, b), reply) in chunk.iter().zip(&replies) {
            if read_answer(&reply.text) == Some(a + b) {
                correct += 1;
            } else if wrong.len() < 5 {
                wrong.push(format!(
                    "{}{} (want {})",
                    prompt(a, b),
                    reply.text,
                    answer(a, b)
                ));
            }
        }
        done += chunk.len();
        progress(done, correct);
    }
    Ok((correct, n, wrong))
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

    /// The task's prompts encode through the tokenizer as the task's own ids, with nothing
    /// added, and answers decode back to their characters.
    #[test]
    fn the_tokenizer_encodes_prompts_as_the_task_does() {
        let tok = tokenizer().unwrap();
        let p = prompt(123, 456);
        assert_eq!(
            kernels_chat::prompt_ids(&tok, &p).unwrap(),
            ids(&p).unwrap()
        );
        let a = answer(123, 456);
        assert_eq!(tok.decode(&ids(&a).unwrap()).unwrap(), a);
    }

    /// The evaluation through kernels-chat gives the accuracy of kernels-core's own batched
    /// loop on the same problems (the demo model, and its q4_0 form that gets some wrong), with
    /// progress after each batch.
    #[test]
    fn the_evaluation_through_the_generation_path_agrees_with_the_task_loop() {
        for q in [None, Some(kernels_core::DType::Q4_0)] {
            let mut files = embedded().unwrap();
            llama::quantize_files(&mut files, q).unwrap();
            let cpu = std::rc::Rc::new(kernels_core::CpuBackend::new());
            let model = llama::build(&files, cpu).unwrap();
            let tok = tokenizer_of(&files).unwrap();
            let mut seen = Vec::new();
            let (ok, n, wrong) =
                evaluate(&model, &tok, 1000, 1, 256, &mut |d, c| seen.push((d, c))).unwrap();
            let (want, _, want_wrong) = pollster::block_on(
                kernels_core::models::llama::addition::evaluate(&model, 1000, 1, 256),
            )
            .unwrap();
            assert_eq!(
                (ok, n, wrong.len()),
                (want, 1000, want_wrong.len()),
                "{q:?}"
            );
            assert_eq!(seen.len(), 4);
            assert_eq!(seen.last(), Some(&(1000, ok)));
            if q.is_some() {
                assert!(ok < 1000 && !wrong.is_empty(), "{ok}");
            }
        }
    }
}
