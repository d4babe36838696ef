//! Hostile input on every backend: each op on NaN, +inf and -inf and on out-of-range values
//! (`kernels_core::parity::hostile`), forward and backward, against the CPU reference. The fast
//! CPU paths and every GPU backend of the matrix (`kernels_gpu::testing`: wgpu on lavapipe in
//! CI, the emulated CUDA device with `--features cuda-emulator`) must give the reference's NaN
//! and infinity positions, and refuse what it refuses.
// Tests may unwrap (see the workspace lints).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_core::backend::LocalBoxFuture;
use kernels_core::parity::hostile::all_cases;
use kernels_core::{Backend, CpuBackend, DeviceId, Direction, Op, OpKind, Result, Tensor};
use kernels_gpu::parity::{Row, check_all_hostile, failures};
use kernels_gpu::testing;

fn rows(backend: &dyn Backend) -> Vec<Row> {
    check_all_hostile(&all_cases(5).unwrap(), backend).unwrap()
}

fn assert_agrees(backend: &dyn Backend) -> usize {
    let rows = rows(backend);
    let bad = failures(&rows);
    assert!(
        bad.is_empty(),
        "{} of {} hostile checks on {} failed:\n  {}",
        bad.len(),
        rows.len(),
        backend.name(),
        bad.join("\n  ")
    );
    // Every op ran forward (and backward when differentiable) on some hostile case.
    for k in OpKind::ALL {
        assert!(
            rows.iter()
                .any(|r| r.kind == k.name() && r.dir == Direction::Forward),
            "{k}: no hostile forward row"
        );
        if k.spec().differentiable() {
            assert!(
                rows.iter()
                    .any(|r| r.kind == k.name() && r.dir == Direction::Backward),
                "{k}: no hostile backward row"
            );
        }
    }
    rows.len()
}

#[test]
fn fast_cpu_agrees_with_the_reference_on_hostile_input() {
    assert!(assert_agrees(&CpuBackend::new()) > 0);
}

#[test]
fn every_gpu_backend_agrees_with_the_reference_on_hostile_input() {
    let test = "every_gpu_backend_agrees_with_the_reference_on_hostile_input";
    for gpu in testing::gpu_backends(test) {
        let n = assert_agrees(&*gpu.backend);
        eprintln!("{test}: ok on {} ({n} checks)", gpu.name);
    }
    // wgpu's integer f16 decoding too, where the default path reads f16 natively.
    if let Some(f32_path) = testing::wgpu_without_shader_f16(test) {
        let n = assert_agrees(&f32_path);
        eprintln!("{test}: ok on wgpu without shader-f16 ({n} checks)");
    }
}

/// `sample` with a uniform outside `[0, 1)` (1.5, NaN, -0.5) is refused on every backend, as the
/// reference refuses it (wgpu and CUDA accepted it: issue 15, defect 4).
#[test]
fn sample_refuses_uniforms_outside_0_1_on_every_backend() {
    let op = Op::Sample {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
    };
    let logits = Tensor::from_f32(&[2, 5], vec![0.5; 10]).unwrap();
    let mut backends: Vec<(String, std::rc::Rc<dyn Backend>)> =
        vec![("cpu".into(), std::rc::Rc::new(CpuBackend::new()))];
    for gpu in testing::gpu_backends("sample_refuses_uniforms_outside_0_1_on_every_backend") {
        backends.push((gpu.name.clone(), gpu.backend));
    }
    for (name, be) in &backends {
        let l = be.upload(&logits).unwrap();
        let ok = Tensor::from_f32(&[2], vec![0.25, 0.999]).unwrap();
        assert!(
            be.run(&op, Direction::Forward, &[&l, &be.upload(&ok).unwrap()])
                .is_ok()
        );
        for bad in [1.5, f32::NAN, -0.5, 1.0] {
            let u = Tensor::from_f32(&[2], vec![0.5, bad]).unwrap();
            let e = be
                .run(&op, Direction::Forward, &[&l, &be.upload(&u).unwrap()])
                .expect_err(&format!("{name} accepted uniform {bad}"));
            let msg = e.to_string();
            assert!(
                msg.contains("sample") && msg.contains("uniform[1]"),
                "{name}: {msg}"
            );
        }
    }
}

/// A backend that answers what the reference refuses (it clamps sample's uniforms into range)
/// and turns NaN into 0 (as wgpu's relu did): the harness must catch both.
struct Lenient(CpuBackend);

impl Backend for Lenient {
    fn name(&self) -> String {
        "lenient-cpu".into()
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
        let clean = |t: &Tensor| -> Result<Tensor> {
            let v: Vec<f32> = t.as_f32()?.iter().map(|x| x.clamp(0.0, 0.5)).collect();
            Tensor::from_f32(t.shape(), v)
        };
        if let (Op::Sample { .. }, [logits, u]) = (op, inputs) {
            return self.0.run(op, dir, &[logits, &clean(u)?]);
        }
        self.0
            .run(op, dir, inputs)?
            .into_iter()
            .map(|t| match t.as_f32() {
                Ok(v) => {
                    let v: Vec<f32> = v
                        .iter()
                        .map(|x| if x.is_nan() { 0.0 } else { *x })
                        .collect();
                    Tensor::from_f32(t.shape(), v)
                }
                Err(_) => Ok(t),
            })
            .collect()
    }
}

#[test]
fn the_harness_catches_a_lenient_backend() {
    let rows = rows(&Lenient(CpuBackend::new()));
    let failed = |kind: &str| rows.iter().filter(|r| r.kind == kind && !r.pass()).count();
    // Uniforms 1.5, 1.0, -0.5, NaN and +-inf: answered where the reference refuses.
    assert!(failed("sample") >= 5, "{:?}", failures(&rows));
    assert!(
        failures(&rows)
            .iter()
            .any(|f| f.contains("uniform[0] = 1.5") && f.contains("lenient-cpu answered")),
        "{:?}",
        failures(&rows)
    );
    assert!(failed("relu") > 0);
    assert!(failed("add") > 0);
}
