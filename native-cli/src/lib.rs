//! The `kernels` command-line tool, as a library: the binary (`src/main.rs`) parses arguments and
//! calls in here, and the integration tests and other crates reuse the pieces (the parity runner
//! above all).
//!
//! [`commands`] holds one module per subcommand. What several of them share sits beside it:
//! [`llama`] (checkpoints, tokenizer, timed generation, logits), [`addition`] (the demo model's
//! task and the embedded demo model), [`world_model`] (the GRU world model's files and held-out
//! evaluation), [`format`] (durations, the parity table) and [`atomic_write`].

pub mod addition;
pub mod atomic_write;
pub mod commands;
pub mod format;
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

/// Prints to stdout. A closed pipe (`kernels ops | head`) ends the output quietly instead of
/// panicking like `print!`.
pub fn emit(s: &str) -> CliResult<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e.into()),
    }
}
