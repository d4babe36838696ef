//! `kernels eval`: exact-match accuracy of a model (by default the embedded demo model) on
//! held-out three-digit addition problems, generated through kernels-chat's generation path
//! (the prompts encoded by the model's tokenizer, answers stopped at `$`, read from the
//! tokenizer's decode), many problems per batch.

use kernels_gpu::{BackendChoice, select_backend};

use crate::addition::{embedded, held_out_count, tokenizer_of};
use crate::llama::{build, quantize_files, read_dir};
use crate::{CliResult, emit, emit_json};

/// `kernels eval`: prints the exact-match accuracy, as text or (`json`) one object:
/// `{"model", "backend", "seed", "problems", "correct", "accuracy", "wrong": [str]}`.
pub fn run(
    dir: Option<&std::path::Path>,
    n: usize,
    seed: u64,
    backend: Option<&str>,
    quantize: Option<kernels_core::DType>,
    json: bool,
) -> CliResult<()> {
    // Problems are drawn from the held-out set with replacement: more than it holds only
    // repeats them.
    let distinct = held_out_count();
    if n == 0 || n > distinct {
        return Err(crate::fail(format!(
            "--problems {n}: must be between 1 and {distinct}, the number of distinct held-out \
             problems"
        )));
    }
    let chosen = select_backend(BackendChoice::from_arg(backend)?)?;
    let mut files = match dir {
        Some(d) => read_dir(d)?,
        None => embedded()?,
    };
    quantize_files(&mut files, quantize)?;
    let model = build(&files, chosen.backend.clone())?;
    let tok = tokenizer_of(&files)?;
    let (ok, n, wrong) = evaluate_with_progress(&model, &tok, n, seed)?;
    if json {
        return emit_json(&serde_json::json!({
            "model": files.origin,
            "backend": kernels_core::Backend::name(&*chosen.backend),
            "seed": seed,
            "problems": n,
            "correct": ok,
            "accuracy": ok as f64 / n.max(1) as f64,
            "wrong": wrong,
        }));
    }
    emit(&format!(
        "{}: held-out three-digit addition, exact match {ok}/{n} = {:.2}% on {}\n",
        files.origin,
        100.0 * ok as f64 / n.max(1) as f64,
        kernels_core::Backend::name(&*chosen.backend)
    ))?;
    for w in wrong {
        emit(&format!("  wrong: {w}\n"))?;
    }
    Ok(())
}

/// [`crate::addition::evaluate`] (kernels-chat's generation path) with a progress line on
/// stderr at most once a second (a long run says how far it is, and how right so far).
fn evaluate_with_progress(
    model: &kernels_core::models::llama::Llama,
    tok: &kernels_chat::TextTokenizer,
    n: usize,
    seed: u64,
) -> CliResult<(usize, usize, Vec<String>)> {
    let start = std::time::Instant::now();
    let mut last = start;
    let mut progress = |done: usize, correct: usize| {
        let now = std::time::Instant::now();
        if done < n && now.duration_since(last).as_secs_f64() >= 1.0 {
            last = now;
            let rate = done as f64 / now.duration_since(start).as_secs_f64().max(1e-9);
            eprintln!(
                "eval: {done}/{n} problems, {correct} correct so far ({:.0} problems/s, about \
                 {:.0} s left)",
                rate,
                (n - done) as f64 / rate.max(1e-9)
            );
        }
    };
    crate::addition::evaluate(model, tok, n, seed, 256, &mut progress)
}
