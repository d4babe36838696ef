//! `kernels eval`: exact-match accuracy of a model (by default the embedded demo model) on
//! held-out three-digit addition problems, generated through kernels-chat's generation path
//! (the prompts encoded by the model's tokenizer, answers stopped at `$`, read from the
//! tokenizer's decode), many problems per batch.

use std::time::Instant;

use kernels_gpu::{BackendChoice, select_backend};

use crate::addition::{embedded, held_out_count, tokenizer_of};
use crate::llama::{build_in, quantize_files, read_dir};
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
    let model = build_in(&mut files, chosen.backend.clone())?;
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
    let mut lines = Progress::new(n, Instant::now());
    let mut progress = |done: usize, correct: usize| {
        if let Some(line) = lines.line(Instant::now(), done, correct) {
            eprintln!("{line}");
        }
    };
    crate::addition::evaluate(model, tok, n, seed, 256, &mut progress)
}

/// `eval`'s progress lines on stderr: how far, how right so far, the rate and the time left; at
/// most one a second, none for the last batch.
struct Progress {
    n: usize,
    start: Instant,
    last: Instant,
}

impl Progress {
    fn new(n: usize, start: Instant) -> Progress {
        Progress {
            n,
            start,
            last: start,
        }
    }

    /// The line to print after a batch that brought the run to `done` problems, `correct` of
    /// them right, at `now`; `None` within a second of the last one, or when all are done.
    fn line(&mut self, now: Instant, done: usize, correct: usize) -> Option<String> {
        let n = self.n;
        if done >= n || now.duration_since(self.last).as_secs_f64() < 1.0 {
            return None;
        }
        self.last = now;
        let rate = done as f64 / now.duration_since(self.start).as_secs_f64().max(1e-9);
        Some(format!(
            "eval: {done}/{n} problems, {correct} correct so far ({rate:.0} problems/s, about \
             {:.0} s left)",
            (n - done) as f64 / rate.max(1e-9)
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_long_run_says_how_far_it_is_once_a_second() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut p = Progress::new(100_000_000, t0);
        assert_eq!(p.line(at(500), 256, 250), None);
        assert_eq!(
            p.line(at(2000), 512, 500).as_deref(),
            Some(
                "eval: 512/100000000 problems, 500 correct so far (256 problems/s, about 390623 s left)"
            )
        );
        assert_eq!(p.line(at(2900), 768, 750), None);
        assert!(p.line(at(3000), 1024, 1000).is_some());
        // The last batch prints nothing: the result follows.
        assert_eq!(p.line(at(9000), 100_000_000, 99), None);
    }
}
