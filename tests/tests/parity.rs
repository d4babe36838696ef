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
    let n = assert_parity(&CpuBackend::new(), &all_cases(0, false).unwrap())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(n > 0);
}

#[test]
fn a_second_seed_passes_too() {
    assert_parity(&CpuBackend::new(), &all_cases(12345, false).unwrap())
        .unwrap_or_else(|e| panic!("{e}"));
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
