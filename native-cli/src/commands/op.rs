//! `kernels op`: run one op on tensors read from a safetensors file, write the results to another.
//!
//! Everything is checked before anything is written: the op and its attributes, the set of tensor
//! names (missing and extra both fail), dtypes, empty tensors, non-finite values where the op
//! forbids them, and finally the kernel's own shape checks. Results go to a temporary file beside
//! `OUT` that is renamed over it only once complete, so a failure never leaves a partial `OUT`
//! and never touches an existing one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kernels_core::op::InputKind;
use kernels_core::{DType, Direction, Error, Op, OpKind, Tensor, io};
use kernels_gpu::{BackendChoice, select_backend};

use crate::atomic_write::write_atomically;
use crate::parity::run_on;
use crate::{CliResult, emit, fail};

/// What `kernels op` was asked to do.
#[derive(Debug, Clone)]
pub struct OpRequest {
    pub name: String,
    pub input: PathBuf,
    pub output: PathBuf,
    /// `name=value` strings.
    pub attrs: Vec<String>,
    pub backward: bool,
    /// `cpu`, `wgpu`, `cuda` or `auto`; `None` reads `KERNELS_BACKEND`.
    pub backend: Option<String>,
}

/// What `kernels op` did.
#[derive(Debug, Clone)]
pub struct OpReport {
    pub op: Op,
    pub dir: Direction,
    pub backend: String,
    /// `(name, shape, dtype)` of each written tensor.
    pub written: Vec<(String, Vec<usize>, DType)>,
}

/// Splits `name=value` attribute strings and builds the op ([`Op::from_attr_args`], which the
/// fuzz target `attr_args` exercises). Duplicates are an error.
pub fn parse_op(kind: OpKind, attrs: &[String]) -> CliResult<Op> {
    Ok(Op::from_attr_args(kind, attrs)?)
}

/// The attributes of `op` as `name=value` strings for `kernels op --attr` (what [`parse_op`]
/// reads back).
pub fn attr_args(op: &Op) -> Vec<String> {
    op.attrs().iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// `a[2,3] (f32), b[3] (f32)`: names, shapes and dtypes, for messages.
pub fn describe(names: &[String], tensors: &[&Tensor]) -> String {
    names
        .iter()
        .zip(tensors)
        .map(|(n, t)| format!("{n}{:?} ({})", t.shape(), t.dtype().name()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_tensor(
    op: &'static str,
    name: &str,
    t: &Tensor,
    kind: InputKind,
    finite: bool,
) -> CliResult<()> {
    if !kind.accepts(t.dtype()) {
        return Err(Error::DTypeMismatch {
            op,
            tensor: name.into(),
            expected: kind.expected(),
            got: t.dtype(),
        }
        .into());
    }
    if t.numel() == 0 {
        return Err(fail(format!(
            "{op}: tensor `{name}` is empty (shape {:?})",
            t.shape()
        )));
    }
    let bad = if finite && t.dtype() == DType::F32 {
        t.as_f32()?.iter().enumerate().find(|(_, v)| !v.is_finite())
    } else {
        None
    };
    if let Some((i, v)) = bad {
        return Err(Error::NonFinite {
            op,
            tensor: name.into(),
            index: i,
            value: *v as f64,
        }
        .into());
    }
    Ok(())
}

/// Reads the tensors of `path`, which must be exactly `expected`.
fn read_inputs(
    op: &'static str,
    path: &Path,
    expected: &[String],
) -> CliResult<BTreeMap<String, Tensor>> {
    let bytes = std::fs::read(path)
        .map_err(|e| fail(format!("{op}: cannot read --in {}: {e}", path.display())))?;
    let map = io::load(&bytes).map_err(|e| {
        fail(format!(
            "{op}: --in {} is not a valid safetensors file: {e}",
            path.display()
        ))
    })?;
    let missing: Vec<&str> = expected
        .iter()
        .filter(|n| !map.contains_key(n.as_str()))
        .map(|n| n.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(fail(format!(
            "{op}: --in {} has no tensor named {} (expected exactly: {})",
            path.display(),
            quote_list(&missing),
            expected.join(", ")
        )));
    }
    let extra: Vec<&str> = map
        .keys()
        .filter(|k| !expected.contains(k))
        .map(|k| k.as_str())
        .collect();
    if !extra.is_empty() {
        return Err(fail(format!(
            "{op}: --in {} holds unexpected tensor {} (expected exactly: {})",
            path.display(),
            quote_list(&extra),
            expected.join(", ")
        )));
    }
    Ok(map)
}

fn quote_list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `kernels op` and prints what it wrote.
pub fn run(req: &OpRequest) -> CliResult<()> {
    let rep = apply(req)?;
    let written: Vec<String> = rep
        .written
        .iter()
        .map(|(n, s, d)| format!("{n}{s:?} ({})", d.name()))
        .collect();
    emit(&format!(
        "{} {} on {}: wrote {} to {}\n",
        rep.op,
        rep.dir.name(),
        rep.backend,
        written.join(", "),
        req.output.display()
    ))
}

/// Does what `kernels op` does (see the module docs) and says what was written.
pub fn apply(req: &OpRequest) -> CliResult<OpReport> {
    let kind = OpKind::from_name(&req.name)?;
    let name = kind.name();
    let op = parse_op(kind, &req.attrs)?;
    let spec = kind.spec();
    let dir = if req.backward {
        Direction::Backward
    } else {
        Direction::Forward
    };
    if dir == Direction::Backward && !spec.differentiable() {
        return Err(Error::NoBackward { op: name }.into());
    }

    // The file holds the inputs and, for the backward, one grad per output.
    let input_names: Vec<String> = spec.inputs.iter().map(|i| i.name.to_string()).collect();
    let grad_names: Vec<String> = match dir {
        Direction::Forward => Vec::new(),
        Direction::Backward => spec.outputs.iter().map(|o| format!("grad_{o}")).collect(),
    };
    let mut expected = input_names.clone();
    expected.extend(grad_names.iter().cloned());
    let mut map = read_inputs(name, &req.input, &expected)?;

    let finite = kind.rejects_non_finite();
    let mut inputs: Vec<Tensor> = Vec::new();
    for s in spec.inputs {
        let t = map
            .remove(s.name)
            .ok_or_else(|| fail(format!("{name}: no tensor `{}`", s.name)))?;
        check_tensor(name, s.name, &t, s.kind, finite)?;
        inputs.push(t);
    }
    let mut grads: Vec<Tensor> = Vec::new();
    for g in &grad_names {
        let t = map
            .remove(g)
            .ok_or_else(|| fail(format!("{name}: no tensor `{g}`")))?;
        check_tensor(name, g, &t, InputKind::Float, false)?;
        grads.push(t);
    }

    let selected = select_backend(BackendChoice::from_arg(req.backend.as_deref())?)?;
    let backend = selected.backend.as_ref();

    let in_refs: Vec<&Tensor> = inputs.iter().collect();
    let outputs = run_on(backend, &op, Direction::Forward, &in_refs).map_err(|e| {
        fail(format!(
            "{name} forward failed on {}: {e}",
            describe(&input_names, &in_refs)
        ))
    })?;
    let results = match dir {
        Direction::Forward => outputs,
        Direction::Backward => {
            for ((g, gname), (o, oname)) in grads
                .iter()
                .zip(&grad_names)
                .zip(outputs.iter().zip(spec.outputs))
            {
                if g.shape() != o.shape() {
                    return Err(Error::bad_shape(
                        name,
                        gname,
                        g.shape(),
                        format!("expected {:?}, the shape of output `{oname}`", o.shape()),
                    )
                    .into());
                }
            }
            let mut args: Vec<&Tensor> = in_refs.clone();
            args.extend(outputs.iter());
            args.extend(grads.iter());
            let mut arg_names = input_names.clone();
            arg_names.extend(spec.outputs.iter().map(|o| o.to_string()));
            arg_names.extend(grad_names.iter().cloned());
            run_on(backend, &op, Direction::Backward, &args).map_err(|e| {
                fail(format!(
                    "{name} backward failed on {}: {e}",
                    describe(&arg_names, &args)
                ))
            })?
        }
    };

    let result_names = spec.result_names(dir);
    if results.len() != result_names.len() {
        return Err(fail(format!(
            "{name} {}: backend {} returned {} results, expected {} ({})",
            dir.name(),
            backend.name(),
            results.len(),
            result_names.len(),
            result_names.join(", ")
        )));
    }
    let written = result_names
        .iter()
        .zip(&results)
        .map(|(n, t)| (n.clone(), t.shape().to_vec(), t.dtype()))
        .collect();
    let out_map: BTreeMap<String, Tensor> = result_names.into_iter().zip(results).collect();
    let bytes =
        io::save(&out_map).map_err(|e| fail(format!("{name}: cannot encode the results: {e}")))?;
    write_atomically(&req.output, &bytes).map_err(|e| {
        fail(format!(
            "{name}: cannot write --out {}: {e}",
            req.output.display()
        ))
    })?;
    Ok(OpReport {
        op,
        dir,
        backend: backend.name(),
        written,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attrs_parse_and_reject_bad_syntax() {
        let op = parse_op(OpKind::Matmul, &["trans_b=true".into()]).unwrap();
        assert_eq!(
            op,
            Op::Matmul {
                trans_a: false,
                trans_b: true
            }
        );
        let e = parse_op(OpKind::Matmul, &["trans_b".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("matmul") && e.contains("trans_b"), "{e}");
        let e = parse_op(
            OpKind::Matmul,
            &["trans_b=true".into(), "trans_b=false".into()],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("more than once"), "{e}");
        let e = parse_op(OpKind::Matmul, &["bogus=1".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("matmul") && e.contains("bogus"), "{e}");
    }

    #[test]
    fn tensor_checks_name_the_op_and_tensor() {
        let nan = Tensor::from_f32(&[2], vec![1.0, f32::NAN]).unwrap();
        let e = check_tensor("svd_lowrank", "a", &nan, InputKind::Float, true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("svd_lowrank") && e.contains("`a`") && e.contains("NaN"),
            "{e}"
        );
        assert!(check_tensor("exp", "x", &nan, InputKind::Float, false).is_ok());
        let empty = Tensor::from_f32(&[0, 3], vec![]).unwrap();
        let e = check_tensor("exp", "x", &empty, InputKind::Float, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("exp") && e.contains("`x`") && e.contains("empty"),
            "{e}"
        );
        let ids = Tensor::from_f32(&[2], vec![0.0, 1.0]).unwrap();
        let e = check_tensor("embedding", "ids", &ids, InputKind::Int, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("embedding") && e.contains("ids") && e.contains("i32 or i64"),
            "{e}"
        );
    }

    #[test]
    fn attr_args_round_trip_for_every_parity_case() {
        for case in kernels_core::parity::all_cases(0, false).unwrap() {
            let args = attr_args(&case.op);
            let op = parse_op(case.op.kind(), &args).unwrap();
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
