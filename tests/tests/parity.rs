//! Cross-backend parity: every parity case, forward and backward, on each available backend
//! against the CPU reference, under each op's published budget. The GPU backends of the matrix
//! (`kernels_gpu::testing`: wgpu, a CUDA device, the emulated CUDA device) join here on a second
//! seed (gpu/tests/parity.rs runs wgpu's full suite on seed 7).
// Tests may unwrap (see the workspace lints).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_core::backend::LocalBoxFuture;
use kernels_core::parity::{all_cases, cases};
use kernels_core::{Backend, CpuBackend, DeviceId, Direction, Op, OpKind, Result, Tensor};
use kernels_gpu::parity::{Row, assert_parity, check_all, failures};
use kernels_gpu::testing;

fn parity_rows(backend: &dyn Backend, seed: u64, large: bool) -> Vec<Row> {
    check_all(&all_cases(seed, large).unwrap(), backend)
}

#[test]
fn fast_cpu_matches_the_reference_within_budget() {
    // f32 activations: the ops' f32 budgets. The default integer products with a quantized
    // weight are checked per format and kernel family under their own budget
    // (kernels-core's cpu::fast::qdot tests, QUANTIZED_ACTIVATION_BUDGETS).
    let exact = CpuBackend::new().with_exact_activations(true);
    let n = assert_parity(&exact, &all_cases(0, false).unwrap()).unwrap_or_else(|e| panic!("{e}"));
    assert!(n > 0);
}

#[test]
fn a_second_seed_passes_too() {
    let exact = CpuBackend::new().with_exact_activations(true);
    assert_parity(&exact, &all_cases(12345, false).unwrap()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn every_gpu_backend_passes_a_second_seed() {
    let test = "every_gpu_backend_passes_a_second_seed";
    let cases = all_cases(12345, false).unwrap();
    for gpu in testing::gpu_backends(test) {
        let n = assert_parity(&*gpu.backend, &cases).unwrap_or_else(|e| panic!("{e}"));
        assert!(n > 0);
        eprintln!("{test}: ok on {} ({n} checks)", gpu.name);
    }
}

#[test]
fn every_op_has_parity_cases_in_every_direction() {
    let rows = parity_rows(&CpuBackend::new(), 0, false);
    for k in OpKind::ALL {
        assert!(!cases(*k, 0).unwrap().is_empty(), "{k} has no parity case");
        let has = |d: Direction| rows.iter().any(|r| r.kind == k.name() && r.dir == d);
        assert!(has(Direction::Forward), "{k}: no forward parity row");
        assert_eq!(
            has(Direction::Backward),
            k.spec().differentiable(),
            "{k}: backward rows must exist exactly when the op is differentiable"
        );
    }
}

#[test]
fn the_reference_is_bit_reproducible() {
    let r = CpuBackend::reference();
    for case in all_cases(3, false).unwrap() {
        let args: Vec<&Tensor> = case.inputs.iter().collect();
        let a = r.run(&case.op, Direction::Forward, &args).unwrap();
        let b = r.run(&case.op, Direction::Forward, &args).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert!(x.bit_eq(y), "{} {}", case.op, case.shape_label());
        }
    }
}

/// The CPU backend with every float result nudged: the harness must catch it.
struct Nudged(CpuBackend);

impl Backend for Nudged {
    fn name(&self) -> String {
        "nudged-cpu".into()
    }
    fn device(&self) -> DeviceId {
        self.0.device()
    }
    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        self.0.upload(t)
    }
    fn download<'a>(&'a self, t: &'a Tensor) -> LocalBoxFuture<'a, Result<Tensor>> {
        self.0.download(t)
    }
    fn run(&self, op: &Op, dir: Direction, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        self.0
            .run(op, dir, inputs)?
            .into_iter()
            .map(|t| match t.as_f32() {
                Ok(v) => {
                    let v: Vec<f32> = v.iter().map(|x| x + 1e-2 * (1.0 + x.abs())).collect();
                    Tensor::from_f32(t.shape(), v)
                }
                Err(_) => Ok(t),
            })
            .collect()
    }
}

#[test]
fn the_harness_catches_a_backend_outside_budget() {
    let rows = parity_rows(&Nudged(CpuBackend::new()), 0, false);
    let bad = failures(&rows);
    // Every row with a float result fails; only argmax and sample (integer outputs) may pass.
    let int_output = |kind: &str| kind == "argmax" || kind == "sample";
    for r in &rows {
        if !int_output(r.kind) {
            assert!(!r.pass(), "nudge not caught: {} {}", r.op, r.dir.name());
        }
    }
    let int_rows = rows.iter().filter(|r| int_output(r.kind)).count();
    assert!(bad.len() >= rows.len() - int_rows);
    assert!(assert_parity(&Nudged(CpuBackend::new()), &all_cases(0, false).unwrap()).is_err());
}

/// Non-finite input gives what the CPU reference (and PyTorch) gives, on the fast CPU paths and
/// every GPU backend of the matrix: relu keeps NaN, a row's max is NaN at its first NaN (argmax
/// points there), infinities order as numbers. Exact: these ops select values.
#[test]
fn relu_max_and_argmax_agree_with_the_reference_on_nan_and_inf() {
    nan_and_inf_agree(&CpuBackend::new());
    for b in testing::gpu_backends("relu_max_and_argmax_agree_with_the_reference_on_nan_and_inf") {
        nan_and_inf_agree(b.backend.as_ref());
    }
}

fn nan_and_inf_agree(be: &dyn Backend) {
    use kernels_core::op::{ReduceOp, UnaryOp};
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    // 6 rows of 300 (more than one thread's stride): NaN first, middle, last; +inf; all -inf;
    // NaN beside +inf.
    let n = 300;
    let mut v = kernels_core::Rng::new(9).uniform_vec(6 * n, -1.0, 1.0);
    v[0] = nan;
    v[n + 150] = nan;
    v[2 * n + n - 1] = nan;
    v[3 * n + 7] = inf;
    for x in &mut v[4 * n..5 * n] {
        *x = -inf;
    }
    v[5 * n + 3] = inf;
    v[5 * n + 200] = nan;
    let x = Tensor::from_f32(&[6, n], v).unwrap();
    let dev = be.upload(&x).unwrap();
    for op in [
        Op::Unary(UnaryOp::Relu),
        Op::Reduce(ReduceOp::Max),
        Op::Argmax,
    ] {
        let got = be.run(&op, Direction::Forward, &[&dev]).unwrap();
        let got = pollster::block_on(be.download(&got[0])).unwrap();
        let want = &CpuBackend::reference()
            .run(&op, Direction::Forward, &[&x])
            .unwrap()[0];
        let who = be.name();
        if op == Op::Argmax {
            assert_eq!(
                got.to_i64_vec().unwrap(),
                want.to_i64_vec().unwrap(),
                "{op} on {who}"
            );
            continue;
        }
        let (g, w) = (got.as_f32().unwrap(), want.as_f32().unwrap());
        assert_eq!(g.len(), w.len());
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a.is_nan() && b.is_nan()) || a == b,
                "{op} at {i}: {who} {a}, reference {b}"
            );
        }
    }
}
