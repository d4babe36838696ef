//! The `kernels` command-line tool, as a library: the binary (`src/main.rs`) parses arguments and
//! calls in here, and the integration tests and other crates reuse the pieces (the parity runner
//! above all).

pub mod backends;
pub mod bench;
pub mod demo;
pub mod info;
pub mod ops;
pub mod parity;
pub mod parity_cmd;
pub mod run_op;

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

/// An op with its attributes, floats printed as the f32 they are (`scale(factor=0.37)`, not
/// `0.3700000047683716`). The attributes parse back to the same op.
pub fn op_label(op: &kernels_core::Op) -> String {
    use kernels_core::op::AttrValue;
    let attrs: Vec<String> = op
        .attrs()
        .iter()
        .map(|(k, v)| match v {
            AttrValue::Float(x) => format!("{k}={}", *x as f32),
            other => format!("{k}={other}"),
        })
        .collect();
    if attrs.is_empty() {
        op.name().to_string()
    } else {
        format!("{}({})", op.name(), attrs.join(", "))
    }
}

/// Like [`op_label`], but only the attributes that differ from their defaults (required ones are
/// always shown): `matmul`, `matmul(trans_b=true)`, `adamw_step(lr=0.01, step=3)`.
pub fn op_label_short(op: &kernels_core::Op) -> String {
    use kernels_core::op::{AttrDefault, AttrValue};
    let spec = op.spec();
    let same = |a: &AttrValue, b: &AttrValue| match (a, b) {
        // Attributes are f32; defaults are declared as f64.
        (AttrValue::Float(x), AttrValue::Float(y)) => (*x as f32) == (*y as f32),
        _ => a == b,
    };
    let attrs: Vec<String> =
        op.attrs()
            .iter()
            .filter(|(k, v)| {
                !spec.attrs.iter().any(|a| {
                    a.name == *k && matches!(&a.default, AttrDefault::Value(d) if same(d, v))
                })
            })
            .map(|(k, v)| match v {
                AttrValue::Float(x) => format!("{k}={}", *x as f32),
                other => format!("{k}={other}"),
            })
            .collect();
    if attrs.is_empty() {
        op.name().to_string()
    } else {
        format!("{}({})", op.name(), attrs.join(", "))
    }
}

/// The attributes of `op` as `name=value` strings for `kernels op --attr`.
pub fn attr_args(op: &kernels_core::Op) -> Vec<String> {
    use kernels_core::op::AttrValue;
    op.attrs()
        .iter()
        .map(|(k, v)| match v {
            AttrValue::Float(x) => format!("{k}={}", *x as f32),
            other => format!("{k}={other}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_core::{Op, OpKind};

    #[test]
    fn attr_args_round_trip_for_every_parity_case() {
        for case in kernels_core::parity::all_cases(0, false).unwrap() {
            let args = attr_args(&case.op);
            let op = run_op::parse_op(case.op.kind(), &args).unwrap();
            assert_eq!(op, case.op, "{}", op_label(&case.op));
        }
        let s = Op::from_attrs(OpKind::Scale, &[("factor", "0.37")]).unwrap();
        assert_eq!(op_label(&s), "scale(factor=0.37)");
        assert_eq!(op_label_short(&s), "scale(factor=0.37)");
        let m = Op::from_attrs(OpKind::Matmul, &[("trans_b", "true")]).unwrap();
        assert_eq!(op_label_short(&m), "matmul(trans_b=true)");
        let ln = Op::default_for(OpKind::LayerNorm).unwrap();
        assert_eq!(op_label_short(&ln), "layer_norm");
    }
}
