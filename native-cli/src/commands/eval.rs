//! `kernels eval`: exact-match accuracy of a model (by default the embedded demo model) on
//! held-out three-digit addition problems.

use kernels_gpu::{BackendChoice, select_backend};

use crate::addition::{embedded, evaluate};
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
    let chosen = select_backend(BackendChoice::from_arg(backend)?)?;
    let mut files = match dir {
        Some(d) => read_dir(d)?,
        None => embedded()?,
    };
    quantize_files(&mut files, quantize)?;
    let model = build(&files, chosen.backend.clone())?;
    let (ok, n, wrong) = evaluate(&model, n, seed, 256)?;
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
