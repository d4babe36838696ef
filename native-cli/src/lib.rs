//! The `kernels` command-line tool, as a library: the binary (`src/main.rs`) parses arguments and
//! calls in here, and the integration tests and other crates reuse the pieces (the parity runner
//! above all).

pub mod addition;
pub mod commands;
pub mod world_model;
/// The parity runner lives with the backends; re-exported for the CLI's commands.
pub use kernels_gpu::parity;
pub mod llama;

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

/// The attributes of `op` as `name=value` strings for `kernels op --attr`.
pub fn attr_args(op: &kernels_core::Op) -> Vec<String> {
    op.attrs().iter().map(|(k, v)| format!("{k}={v}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_core::{Op, OpKind};

    #[test]
    fn attr_args_round_trip_for_every_parity_case() {
        for case in kernels_core::parity::all_cases(0, false).unwrap() {
            let args = attr_args(&case.op);
            let op = commands::op::parse_op(case.op.kind(), &args).unwrap();
            assert_eq!(op, case.op, "{}", case.op);
        }
        let s = Op::from_attrs(OpKind::Scale, &[("factor", "0.37")]).unwrap();
        assert_eq!(s.to_string(), "scale(factor=0.37)");
        assert_eq!(s.short_label(), "scale(factor=0.37)");
        let m = Op::from_attrs(OpKind::Matmul, &[("trans_b", "true")]).unwrap();
        assert_eq!(m.short_label(), "matmul(trans_b=true)");
        let ln = Op::default_for(OpKind::LayerNorm).unwrap();
        assert_eq!(ln.short_label(), "layer_norm");
    }
}
