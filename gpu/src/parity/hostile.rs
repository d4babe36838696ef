//! The runner of the hostile cases ([`kernels_core::parity::hostile`]): NaN, infinities and
//! out-of-range values. What passes:
//! - the reference and the backend both answer, and agree as in an ordinary case (NaN and
//!   infinity positions equal, finite values within the budget);
//! - both refuse (the row says why, from both sides);
//! - for an op that [`OpKind::rejects_non_finite`], the reference refuses non-finite input
//!   and a device (which cannot see values without a readback) gives all-NaN outputs.
//!
//! Anything else fails: one side refusing what the other answers, or different answers.

use web_time::Instant;

use kernels_core::{Backend, CpuBackend, Direction, Error, Result, Tensor};

use super::{Case, Row, args_for, compare_results, empty_row, run_on_async};

/// Every float element of every output is NaN.
fn all_nan(outs: &[Tensor]) -> bool {
    outs.iter()
        .all(|t| t.as_f32().is_ok_and(|v| v.iter().all(|x| x.is_nan())))
}

/// One hostile case in `dir` on `backend` against the reference (see the module docs).
pub async fn check_hostile_async(
    case: &Case,
    dir: Direction,
    backend: &dyn Backend,
    reference: &CpuBackend,
) -> Row {
    let mut row = empty_row(case, dir, backend, None);
    let (atol, rtol) = (row.atol, row.rtol);
    let args = match args_for(case, dir, reference) {
        Ok(a) => a,
        Err(e) => {
            row.error = Some(format!("the reference's forward refused the case: {e}"));
            return row;
        }
    };
    let refs: Vec<&Tensor> = args.iter().collect();
    let want = reference.run(&case.op, dir, &refs);
    let t0 = Instant::now();
    let got = run_on_async(backend, &case.op, dir, &refs).await;
    row.time = t0.elapsed();
    let who = backend.name();
    match (want, got) {
        (Err(w), Err(g)) => row.refused = Some(format!("reference: {w}; {who}: {g}")),
        (Err(w @ Error::NonFinite { .. }), Ok(g))
            if case.op.kind().rejects_non_finite() && all_nan(&g) =>
        {
            row.refused = Some(format!("reference: {w}; {who}: all-NaN outputs"));
        }
        (Err(w), Ok(_)) => {
            row.error = Some(format!("the reference refused ({w}); {who} answered"));
        }
        (Ok(_), Err(g)) => {
            row.error = Some(format!("{who} refused ({g}); the reference answered"));
        }
        (Ok(w), Ok(g)) => {
            let names = case.op.spec().result_names(dir);
            match compare_results(case, dir, backend, &names, &g, &w, (atol, rtol)) {
                Ok(outputs) => row.outputs = outputs,
                Err(e) => row.error = Some(e.to_string()),
            }
        }
    }
    row
}

/// The forward row of `case`, and the backward row when the op is differentiable and the
/// reference's forward answers (a backward needs its outputs).
pub async fn hostile_rows(case: &Case, backend: &dyn Backend, reference: &CpuBackend) -> Vec<Row> {
    let mut rows = vec![check_hostile_async(case, Direction::Forward, backend, reference).await];
    let args: Vec<&Tensor> = case.inputs.iter().collect();
    if case.op.spec().differentiable() && reference.run(&case.op, Direction::Forward, &args).is_ok()
    {
        rows.push(check_hostile_async(case, Direction::Backward, backend, reference).await);
    }
    rows
}

/// Every hostile case, both directions, on `backend` (blocking on downloads natively).
pub fn check_all_hostile(cases: &[Case], backend: &dyn Backend) -> Result<Vec<Row>> {
    let reference = CpuBackend::reference();
    let mut rows = Vec::new();
    for case in cases {
        rows.extend(super::block(backend, async {
            Ok(hostile_rows(case, backend, &reference).await)
        })?);
    }
    Ok(rows)
}
