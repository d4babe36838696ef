//! The parity runner: one parity case, in one direction, on one backend, compared output by
//! output against the CPU reference under the op's published budget.
//!
//! `kernels demo` and `kernels parity`, the cross-backend parity tests in `tests/` and the gpu
//! crate's parity suite all run cases through here, so "within budget" means the same thing
//! everywhere: one test body, every backend.
//!
//! Backward runs take `inputs ++ outputs ++ grad_outputs`. The forward outputs fed to both sides
//! come from the reference, so a forward discrepancy cannot hide in (or masquerade as) a backward
//! one; the grad outputs are seeded ([`kernels_core::parity::grad_outputs`]).

use std::future::Future;
use std::time::Duration;

// `std::time::Instant` panics on wasm32-unknown-unknown; web-time is std's natively and
// `performance.now()` in the browser.
use web_time::Instant;

use kernels_core::backend::now_or_never;
use kernels_core::numerics::{Budget, Comparison, compare};
use kernels_core::parity::{Case, cases, grad_outputs};
use kernels_core::{Backend, CpuBackend, DType, Direction, Error, OpKind, Result, Tensor};

/// Seed of the grad outputs of backward runs.
pub const GRAD_SEED: u64 = 0x006B_6572_6E65_6C73;

/// One output of one case, in one direction, on one backend.
#[derive(Debug, Clone)]
pub struct OutputCheck {
    /// The output's name (`out`, `grad_a`...).
    pub name: String,
    /// Max error, violations and pass.
    pub comparison: Comparison,
}

/// One case in one direction on one backend.
#[derive(Debug, Clone)]
pub struct Row {
    /// The op with its attributes, e.g. `matmul(trans_b=true)` (non-default attributes only, [`kernels_core::Op::short_label`]).
    pub op: String,
    /// The bare op name, e.g. `matmul`.
    pub kind: &'static str,
    pub dir: Direction,
    /// Inputs with shapes, e.g. `a[7,13] b[13,5]`.
    pub shape: String,
    /// The backend's name.
    pub backend: String,
    /// Reduced length that scales the budget.
    pub k: usize,
    /// Budget at `k`: `(atol, rtol)`.
    pub atol: f64,
    pub rtol: f64,
    /// One entry per result (empty when the run failed).
    pub outputs: Vec<OutputCheck>,
    /// Why the backend or the reference could not run the case.
    pub error: Option<String>,
    /// Hostile cases ([`check_all_hostile`]): the reference refused the case and so did the backend
    /// (or, for an op that rejects non-finite input, the device gave all-NaN outputs): why.
    pub refused: Option<String>,
    /// Wall time of the backend's run, uploads and downloads included.
    pub time: Duration,
}

impl Row {
    /// Ran, and every output is within budget.
    pub fn pass(&self) -> bool {
        self.error.is_none()
            && (self.refused.is_some()
                || (!self.outputs.is_empty() && self.outputs.iter().all(|o| o.comparison.pass)))
    }
    /// Largest absolute error over the outputs (infinite when NaN/Inf positions differ).
    pub fn max_abs_err(&self) -> f64 {
        self.outputs
            .iter()
            .map(|o| o.comparison.max_abs_err)
            .fold(0.0, f64::max)
    }
    /// Largest relative error over the outputs (`|got - ref| / |ref|`, nonzero references).
    pub fn max_rel_err(&self) -> f64 {
        self.outputs
            .iter()
            .map(|o| o.comparison.max_rel_err)
            .fold(0.0, f64::max)
    }
    /// A one-line description of what failed, if anything.
    pub fn failure(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(e.clone());
        }
        if self.refused.is_some() {
            return None;
        }
        if self.outputs.is_empty() {
            return Some("no outputs".into());
        }
        let bad: Vec<String> = self
            .outputs
            .iter()
            .filter(|o| !o.comparison.pass)
            .map(|o| {
                format!(
                    "{}: {} element(s) outside atol {:.1e} + rtol {:.1e}, max abs err {:.3e} (worst at flat index {:?})",
                    o.name,
                    o.comparison.violations,
                    self.atol,
                    self.rtol,
                    o.comparison.max_abs_err,
                    o.comparison.worst_index
                )
            })
            .collect();
        if bad.is_empty() {
            None
        } else {
            Some(bad.join("; "))
        }
    }
}

/// Blocks on a future of a backend: ready at once for the CPU; driven by `pollster` natively.
/// In the browser nothing may block: a device future that is not ready is an error there, and
/// callers use the `_async` functions instead.
fn block<T>(
    #[cfg_attr(not(target_arch = "wasm32"), allow(unused_variables))] backend: &dyn Backend,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    let mut fut = std::pin::pin!(fut);
    if let Some(r) = now_or_never(fut.as_mut()) {
        return r;
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        pollster::block_on(fut)
    }
    #[cfg(target_arch = "wasm32")]
    {
        Err(Error::Backend {
            backend: backend.name(),
            why: "a device download cannot block in the browser; use the async parity functions"
                .into(),
        })
    }
}

/// Blocks on a backend download (see `block`).
pub fn download(backend: &dyn Backend, t: &Tensor) -> Result<Tensor> {
    block(backend, backend.download(t))
}

/// Uploads `args`, runs `op` in `dir` on `backend`, downloads the results.
pub fn run_on(
    backend: &dyn Backend,
    op: &kernels_core::Op,
    dir: Direction,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    block(backend, run_on_async(backend, op, dir, args))
}

/// [`run_on`], awaiting the downloads (the browser's way).
pub async fn run_on_async(
    backend: &dyn Backend,
    op: &kernels_core::Op,
    dir: Direction,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let dev: Vec<Tensor> = args
        .iter()
        .map(|t| backend.upload(t))
        .collect::<Result<_>>()?;
    let refs: Vec<&Tensor> = dev.iter().collect();
    let outs = backend.run(op, dir, &refs)?;
    backend.flush()?;
    let mut host = Vec::with_capacity(outs.len());
    for t in &outs {
        host.push(backend.download(t).await?);
    }
    Ok(host)
}

/// The arguments of `case` in `dir`: the inputs, plus (backward) the reference's forward outputs
/// and seeded grad outputs.
pub fn args_for(case: &Case, dir: Direction, reference: &CpuBackend) -> Result<Vec<Tensor>> {
    let mut args = case.inputs.clone();
    if dir == Direction::Backward {
        let refs: Vec<&Tensor> = case.inputs.iter().collect();
        let outs = reference.run(&case.op, Direction::Forward, &refs)?;
        let grads = grad_outputs(&outs, GRAD_SEED)?;
        args.extend(outs);
        args.extend(grads);
    }
    Ok(args)
}

/// Compares two host tensors of the same dtype; integers must be equal.
pub fn compare_tensors(
    got: &Tensor,
    reference: &Tensor,
    atol: f64,
    rtol: f64,
) -> Result<Comparison> {
    let shape_ok = got.shape() == reference.shape() && got.dtype() == reference.dtype();
    let mut c = match reference.dtype() {
        DType::F32 => compare(got.as_f32()?, reference.as_f32()?, atol, rtol),
        // Packed weights (uploads read back): byte for byte.
        DType::F16
        | DType::BF16
        | DType::Q8_0
        | DType::Q4_0
        | DType::Q4_1
        | DType::Q5_0
        | DType::Q4_K
        | DType::Q6_K => {
            let same = got.packed_bytes().ok() == reference.packed_bytes().ok();
            compare(&[f64::from(u8::from(same))], &[1.0], 0.0, 0.0)
        }
        DType::I32 | DType::I64 => {
            let g: Vec<f64> = got.to_i64_vec()?.iter().map(|&x| x as f64).collect();
            let r: Vec<f64> = reference.to_i64_vec()?.iter().map(|&x| x as f64).collect();
            compare(&g, &r, 0.0, 0.0)
        }
    };
    if !shape_ok {
        c.pass = false;
        c.violations = c.violations.max(1);
    }
    Ok(c)
}

/// Runs `case` in `dir` on `backend` and on the reference, and compares every result.
/// Failures to run are reported in the row, not as an `Err`.
pub fn check(case: &Case, dir: Direction, backend: &dyn Backend, reference: &CpuBackend) -> Row {
    check_under(case, dir, backend, reference, None)
}

/// [`check`] under `budget` instead of the op's published budget where one is given: for a
/// backend mode that publishes its own (CUDA's half products).
pub fn check_under(
    case: &Case,
    dir: Direction,
    backend: &dyn Backend,
    reference: &CpuBackend,
    budget: Option<Budget>,
) -> Row {
    let mut fut = std::pin::pin!(check_async_under(case, dir, backend, reference, budget));
    if let Some(row) = now_or_never(fut.as_mut()) {
        return row;
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        pollster::block_on(fut)
    }
    #[cfg(target_arch = "wasm32")]
    {
        let mut row = empty_row(case, dir, backend, budget);
        row.error = Some("a device download cannot block in the browser; use check_async".into());
        row
    }
}

/// The row of `case` in `dir` before it runs: labels and budget, no outputs.
fn empty_row(case: &Case, dir: Direction, backend: &dyn Backend, budget: Option<Budget>) -> Row {
    let spec = case.op.spec();
    let shapes: Vec<&[usize]> = case.inputs.iter().map(|t| t.shape()).collect();
    let k = case.op.reduced_len(&shapes);
    let budget = budget.unwrap_or(match dir {
        Direction::Forward => spec.budget,
        Direction::Backward => spec.budget_backward,
    });
    let (atol, rtol) = budget.at(k);
    Row {
        op: case.op.short_label(),
        kind: case.op.name(),
        dir,
        shape: case.shape_label(),
        backend: backend.name(),
        k,
        atol,
        rtol,
        outputs: Vec::new(),
        error: None,
        refused: None,
        time: Duration::ZERO,
    }
}

/// [`check`], awaiting the backend's downloads (the browser's way).
pub async fn check_async(
    case: &Case,
    dir: Direction,
    backend: &dyn Backend,
    reference: &CpuBackend,
) -> Row {
    check_async_under(case, dir, backend, reference, None).await
}

/// [`check_under`], awaiting the backend's downloads.
pub async fn check_async_under(
    case: &Case,
    dir: Direction,
    backend: &dyn Backend,
    reference: &CpuBackend,
    budget: Option<Budget>,
) -> Row {
    let mut row = empty_row(case, dir, backend, budget);
    let (atol, rtol) = (row.atol, row.rtol);
    let names = case.op.spec().result_names(dir);
    let result = async {
        let args = args_for(case, dir, reference)?;
        let refs: Vec<&Tensor> = args.iter().collect();
        let want = reference
            .run(&case.op, dir, &refs)
            .map_err(|e| Error::Backend {
                backend: reference.name(),
                why: e.to_string(),
            })?;
        let t0 = Instant::now();
        let got = run_on_async(backend, &case.op, dir, &refs).await?;
        let time = t0.elapsed();
        compare_results(case, dir, backend, &names, &got, &want, (atol, rtol))
            .map(|outputs| (outputs, time))
    }
    .await;
    match result {
        Ok((outputs, time)) => {
            row.outputs = outputs;
            row.time = time;
        }
        Err(e) => row.error = Some(e.to_string()),
    }
    row
}

/// Each result of `got` against the same result of `want`, named by `names`.
fn compare_results(
    case: &Case,
    dir: Direction,
    backend: &dyn Backend,
    names: &[String],
    got: &[Tensor],
    want: &[Tensor],
    (atol, rtol): (f64, f64),
) -> Result<Vec<OutputCheck>> {
    if got.len() != want.len() {
        return Err(Error::Backend {
            backend: backend.name(),
            why: format!(
                "{} {}: returned {} results, the reference {}",
                case.op.name(),
                dir.name(),
                got.len(),
                want.len()
            ),
        });
    }
    got.iter()
        .zip(want)
        .enumerate()
        .map(|(i, (g, w))| {
            Ok(OutputCheck {
                name: names.get(i).cloned().unwrap_or_else(|| format!("#{i}")),
                comparison: compare_tensors(g, w, atol, rtol)?,
            })
        })
        .collect()
}

/// Both directions of `case` (backward only for differentiable ops).
pub fn check_both(case: &Case, backend: &dyn Backend, reference: &CpuBackend) -> Vec<Row> {
    let mut rows = vec![check(case, Direction::Forward, backend, reference)];
    if case.op.spec().differentiable() {
        rows.push(check(case, Direction::Backward, backend, reference));
    }
    rows
}

/// [`check_both`], awaiting the backend's downloads.
pub async fn check_both_async(
    case: &Case,
    backend: &dyn Backend,
    reference: &CpuBackend,
) -> Vec<Row> {
    let mut rows = vec![check_async(case, Direction::Forward, backend, reference).await];
    if case.op.spec().differentiable() {
        rows.push(check_async(case, Direction::Backward, backend, reference).await);
    }
    rows
}

/// Every case, both directions, on `backend`.
pub fn check_all(cases: &[Case], backend: &dyn Backend) -> Vec<Row> {
    let reference = CpuBackend::reference();
    cases
        .iter()
        .flat_map(|c| check_both(c, backend, &reference))
        .collect()
}

/// Input elements per case in [`small_cases`]: software WebGPU (SwiftShader in headless
/// Chromium) pays tens of microseconds per dispatch and compiles every pipeline on first use,
/// so the browser runs the cases up to this size.
pub const SMALL_CASE_ELEMS: usize = 4096;

/// The browser's selection of the shared parity cases: for every op in [`OpKind::ALL`], each of
/// its cases with at most `max_elems` input elements, or its smallest case when none is that
/// small; never the > 65,535-workgroup cases. Every op keeps at least one case.
pub fn small_cases(seed: u64, max_elems: usize) -> Result<Vec<Case>> {
    let mut out = Vec::new();
    for kind in OpKind::ALL {
        let all: Vec<Case> = cases(*kind, seed)?
            .into_iter()
            .filter(|c| !c.large)
            .collect();
        let small: Vec<Case> = all
            .iter()
            .filter(|c| c.numel() <= max_elems)
            .cloned()
            .collect();
        if small.is_empty() {
            out.extend(all.into_iter().min_by_key(Case::numel));
        } else {
            out.extend(small);
        }
    }
    Ok(out)
}

/// The ops of `kinds` (and directions) with no row that ran without error: forward always,
/// backward when the op is differentiable. Empty when coverage is complete.
pub fn missing(rows: &[Row], kinds: &[OpKind]) -> Vec<String> {
    let ran = |k: &OpKind, d: Direction| {
        rows.iter()
            .any(|r| r.kind == k.name() && r.dir == d && r.error.is_none())
    };
    kinds
        .iter()
        .flat_map(|k| {
            let mut m = Vec::new();
            if !ran(k, Direction::Forward) {
                m.push(format!("{k} forward"));
            }
            if k.spec().differentiable() && !ran(k, Direction::Backward) {
                m.push(format!("{k} backward"));
            }
            m
        })
        .collect()
}

/// The failures among `rows`, one line each: backend, op, direction, shapes and what went wrong.
pub fn failures(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter_map(|r| {
            r.failure()
                .map(|why| format!("{} {} {} {}: {why}", r.backend, r.op, r.dir.name(), r.shape))
        })
        .collect()
}

/// Every case within budget on `backend`: the number of checks, or an `Err` listing each one that
/// is not.
pub fn assert_parity(backend: &dyn Backend, cases: &[Case]) -> std::result::Result<usize, String> {
    let rows = check_all(cases, backend);
    let bad = failures(&rows);
    if bad.is_empty() {
        Ok(rows.len())
    } else {
        Err(format!(
            "{} of {} parity checks on {} failed:\n  {}",
            bad.len(),
            rows.len(),
            backend.name(),
            bad.join("\n  ")
        ))
    }
}

mod hostile;
pub use hostile::{check_all_hostile, check_hostile_async, hostile_rows};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_cases_keep_every_op_and_stay_small() {
        let small = small_cases(3, SMALL_CASE_ELEMS).unwrap();
        for kind in OpKind::ALL {
            let mine: Vec<&Case> = small.iter().filter(|c| c.op.kind() == *kind).collect();
            assert!(!mine.is_empty(), "{kind} has no small case");
            let smallest = cases(*kind, 3)
                .unwrap()
                .iter()
                .map(Case::numel)
                .min()
                .unwrap();
            for c in mine {
                assert!(!c.large);
                assert!(
                    c.numel() <= SMALL_CASE_ELEMS.max(smallest),
                    "{kind}: {}",
                    c.numel()
                );
            }
        }
        assert!(small.len() < all_case_count(3));
    }

    fn all_case_count(seed: u64) -> usize {
        kernels_core::parity::all_cases(seed, true).unwrap().len()
    }

    #[test]
    fn integer_results_must_match_exactly() {
        let a = Tensor::from_i32(&[3], vec![1, 2, 3]).unwrap();
        let b = Tensor::from_i32(&[3], vec![1, 2, 4]).unwrap();
        assert!(compare_tensors(&a, &a, 1.0, 1.0).unwrap().pass);
        assert!(!compare_tensors(&a, &b, 1.0, 1.0).unwrap().pass);
    }

    #[test]
    fn shape_or_dtype_differences_fail() {
        let a = Tensor::from_f32(&[2, 3], vec![0.0; 6]).unwrap();
        let b = Tensor::from_f32(&[3, 2], vec![0.0; 6]).unwrap();
        assert!(!compare_tensors(&a, &b, 1.0, 1.0).unwrap().pass);
        let c = Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0]).unwrap();
        let d = Tensor::from_f32(&[3], vec![1.0, 2.0, 3.5]).unwrap();
        let cmp = compare_tensors(&c, &d, 0.0, 0.1).unwrap();
        assert!(!cmp.pass);
        assert_eq!(cmp.worst_index, Some(2));
    }

    #[test]
    fn a_failing_run_is_a_failing_row() {
        // An input of the wrong dtype makes the reference itself fail: the row records the error.
        let case = Case {
            op: kernels_core::Op::Reduce(kernels_core::op::ReduceOp::Sum),
            inputs: vec![Tensor::from_i32(&[2], vec![1, 2]).unwrap()],
            large: false,
        };
        let row = check(
            &case,
            Direction::Forward,
            &CpuBackend::new(),
            &CpuBackend::reference(),
        );
        assert!(!row.pass());
        assert!(
            row.failure().unwrap().contains("sum"),
            "{:?}",
            row.failure()
        );
    }
}
