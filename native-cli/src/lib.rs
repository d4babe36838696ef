//! The `kernels` command-line tool, as a library: the binary (`src/main.rs`) parses arguments and
//! calls in here, and the integration tests and other crates reuse the pieces (the parity runner
//! above all).
//!
//! [`commands`] holds one module per subcommand. What several of them share sits beside it:
//! [`llama`] (checkpoints, tokenizer, timed generation, logits), [`addition`] (the demo model's
//! task and the embedded demo model), [`world_model`] (the GRU world model's files and held-out
//! evaluation), [`mod@format`] (durations, the parity table), [`atomic_write`] and [`heap`] (the
//! process's malloc settings).

pub mod addition;
pub mod atomic_write;
pub mod commands;
pub mod format;
pub mod heap;
pub mod limits;
pub mod llama;
pub mod tokenizer_json;
/// The parity runner lives with the backends; re-exported for the CLI's commands.
pub use kernels_gpu::parity;
pub mod world_model;

/// Errors of the CLI: a message naming the op, the tensor and the values.
pub type CliError = Box<dyn std::error::Error + Send + Sync>;
/// Result with a [`CliError`].
pub type CliResult<T> = Result<T, CliError>;

/// A [`CliError`] from a message.
pub fn fail(msg: impl Into<String>) -> CliError {
    msg.into().into()
}

/// Where [`emit`] writes: stdout, or stderr once a command's `--json` has claimed stdout.
static PROGRESS_TO_STDERR: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// From now on [`emit`] writes to stderr: a command printing one JSON document on stdout
/// (`--json`) calls this first, so its progress text does not mix with the document.
pub fn progress_to_stderr() {
    PROGRESS_TO_STDERR.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn write_quietly(out: &mut dyn std::io::Write, s: &str) -> CliResult<()> {
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Prints a command's text to stdout (stderr after [`progress_to_stderr`]). A closed pipe
/// (`kernels ops | head`) ends the output quietly instead of panicking like `print!`.
pub fn emit(s: &str) -> CliResult<()> {
    if PROGRESS_TO_STDERR.load(std::sync::atomic::Ordering::Relaxed) {
        write_quietly(&mut std::io::stderr().lock(), s)
    } else {
        write_quietly(&mut std::io::stdout().lock(), s)
    }
}

/// Prints one JSON document (pretty, with a final newline) to stdout, whatever [`emit`] does.
pub fn emit_json(v: &serde_json::Value) -> CliResult<()> {
    write_quietly(
        &mut std::io::stdout().lock(),
        &format!("{}\n", serde_json::to_string_pretty(v)?),
    )
}

/// Prints one JSON object on ONE line to stdout, whatever [`emit`] does (a stream of them, one
/// per logged training step).
pub fn emit_json_line(v: &serde_json::Value) -> CliResult<()> {
    write_quietly(&mut std::io::stdout().lock(), &format!("{v}\n"))
}
