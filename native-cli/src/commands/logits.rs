//! `kernels logits --json`: the logits of a token sequence, to compare with another
//! implementation.

use std::path::PathBuf;

use kernels_gpu::{BackendChoice, select_backend};

use crate::llama::{build_in, logits, quantize_files, read_dir};
use crate::{CliResult, addition, emit, fail};

/// Options of `kernels logits`.
#[derive(Debug, Clone)]
pub struct LogitsArgs {
    pub model: Option<PathBuf>,
    pub tokens: Vec<u32>,
    pub all_positions: bool,
    pub backend: Option<String>,
    /// `--quantize`: the matrices re-encoded as they load.
    pub quantize: Option<kernels_core::DType>,
}

/// `kernels logits --json`.
pub fn run(args: &LogitsArgs) -> CliResult<()> {
    let chosen = select_backend(BackendChoice::from_arg(args.backend.as_deref())?)?;
    let mut files = match &args.model {
        Some(dir) => read_dir(dir)?,
        None => addition::embedded()?,
    };
    quantize_files(&mut files, args.quantize)?;
    let model = build_in(&mut files, chosen.backend.clone())?;
    let rows = logits(&model, &args.tokens, args.all_positions)?;
    // JSON has no NaN or infinity: serde writes them as null. Say so rather than let a null
    // pass for a number.
    let non_finite = rows.iter().flatten().filter(|x| !x.is_finite()).count();
    if non_finite > 0 {
        eprintln!(
            "note: {non_finite} logits are NaN or infinite; JSON has no such numbers, so they are written as null"
        );
    }
    let n = args.tokens.len();
    let positions: Vec<usize> = if args.all_positions {
        (0..n).collect()
    } else {
        vec![n - 1]
    };
    let doc = serde_json::json!({
        "model": files.origin,
        "backend": chosen.backend.name(),
        "tokens": args.tokens,
        "vocab_size": model.config.vocab_size,
        "positions": positions,
        "logits": rows,
    });
    emit(&format!("{doc}\n"))
}

/// Parses `1,2,3`.
pub fn parse_tokens(s: &str) -> CliResult<Vec<u32>> {
    s.split(',')
        .enumerate()
        .map(|(i, p)| {
            if p.trim().is_empty() {
                return Err(fail(format!(
                    "--tokens `{s}`: entry {} is empty (expected ids like 1,2,3)",
                    i + 1
                )));
            }
            p.trim()
                .parse::<u32>()
                .map_err(|_| fail(format!("--tokens: `{p}` is not a token id")))
        })
        .collect()
}
