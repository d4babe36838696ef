//! Test support: the backend matrix every GPU and model test runs over, and the rule for a
//! backend that is not there, kept in one place.
//!
//! - [`gpu_backends`] yields every GPU backend available here, each as a [`TestBackend`]: wgpu
//!   when an adapter answers; with the `cuda` feature a CUDA device when `CudaBackend::new`
//!   succeeds; with the `cuda-emulator` feature the emulated CUDA device
//!   (`CudaBackend::emulated`: the CUDA C built by the host C++ compiler, run on the CPU).
//! - [`wgpu()`] is for tests that need wgpu itself (its counters, limits, adapter), and
//!   [`require_wgpu_adapter`] for tests that only need to know an adapter exists (the CLI tests
//!   spawn the binary).
//! - The rule ([`missing`]): outside CI a missing backend is a skip line on stderr saying why;
//!   under `CI=true` a missing wgpu adapter, or a missing C++ compiler for the emulated CUDA
//!   device, fails the test. A CUDA device is never required: CI has no NVIDIA GPU.
//!
//! ```ignore
//! for b in kernels_gpu::testing::gpu_backends("my_test") {
//!     // ... run the test on b.backend (an Rc<dyn Backend>), name failures with b.name ...
//!     eprintln!("my_test: ok on {}", b.name);
//! }
//! ```

#[cfg(not(target_arch = "wasm32"))]
use std::rc::Rc;

#[cfg(not(target_arch = "wasm32"))]
use kernels_core::Backend;

#[cfg(feature = "cuda")]
use crate::CudaBackend;
#[cfg(not(target_arch = "wasm32"))]
use crate::WgpuBackend;

/// Whether this is CI (`CI=true`), where a backend the CI machine has must not be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Whether CI must have a thing, so that missing it there is a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// CI has it (tests/ci.sh installs Mesa lavapipe and g++): missing it under `CI=true` fails.
    InCi,
    /// Never required (a CUDA device: CI has no NVIDIA GPU): always a skip.
    Optional,
}

/// What a test does about a backend that is not there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// Go on without it; the line says what was skipped and why.
    Skip(String),
    /// Fail the test with this message.
    Fail(String),
}

/// The rule, as a pure function: `test` found no `what` (a noun without its article: `wgpu
/// adapter`, `CUDA device`) because of `why`. Under CI
/// (`ci`) a thing CI must have ([`Need::InCi`]) is a failure; everything else is a skip.
pub fn missing(test: &str, what: &str, why: &str, need: Need, ci: bool) -> Missing {
    match (need, ci) {
        (Need::InCi, true) => Missing::Fail(format!(
            "{test}: CI=true but no {what} ({why}); CI must run this test on it, so this is a failure"
        )),
        (Need::Optional, true) => Missing::Skip(format!(
            "{test}: skipped, no {what}: {why} (not required in CI: CI has none)"
        )),
        (_, false) => Missing::Skip(format!("{test}: skipped, no {what}: {why}")),
    }
}

/// Acts on [`missing`]'s verdict: prints a skip line, or fails the test.
// Test support: failing the calling test under CI is the point of the rule.
#[allow(clippy::panic)]
pub fn report(verdict: Missing) {
    match verdict {
        Missing::Skip(line) => eprintln!("{line}"),
        Missing::Fail(message) => panic!("{message}"),
    }
}

/// Which GPU backend a [`TestBackend`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// wgpu on whatever adapter answers (Mesa lavapipe in CI).
    Wgpu,
    /// A real CUDA device (`cuda` feature).
    Cuda,
    /// The CUDA backend on the emulated device (`cuda-emulator` feature): slow, for small
    /// problems.
    CudaEmulated,
}

impl Kind {
    /// `wgpu`, `cuda` or `cuda-emulated`.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Wgpu => "wgpu",
            Kind::Cuda => "cuda",
            Kind::CudaEmulated => "cuda-emulated",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// One GPU backend of the matrix.
#[cfg(not(target_arch = "wasm32"))]
pub struct TestBackend {
    pub kind: Kind,
    /// `<kind>: <backend name>`, e.g. `wgpu: wgpu (llvmpipe ..., Vulkan)`: for messages.
    pub name: String,
    pub backend: Rc<dyn Backend>,
}

#[cfg(not(target_arch = "wasm32"))]
impl TestBackend {
    fn new(kind: Kind, backend: Rc<dyn Backend>) -> Self {
        TestBackend {
            kind,
            name: format!("{kind}: {}", backend.name()),
            backend,
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl std::fmt::Debug for TestBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TestBackend({})", self.name)
    }
}

/// Every GPU backend available for `test` (see the module docs); a skip line for each one
/// missing, or a failure under `CI=true` when CI must have it. Prints one line naming the
/// backends the test runs on.
#[cfg(not(target_arch = "wasm32"))]
pub fn gpu_backends(test: &str) -> Vec<TestBackend> {
    let mut all = Vec::new();
    if let Some(b) = wgpu(test) {
        all.push(TestBackend::new(Kind::Wgpu, Rc::new(b)));
    }
    #[cfg(feature = "cuda")]
    if let Some(b) = cuda(test) {
        all.push(TestBackend::new(Kind::Cuda, Rc::new(b)));
    }
    #[cfg(feature = "cuda-emulator")]
    if let Some(b) = cuda_emulated(test) {
        all.push(TestBackend::new(Kind::CudaEmulated, Rc::new(b)));
    }
    let names: Vec<&str> = all.iter().map(|b| b.name.as_str()).collect();
    eprintln!(
        "{test}: GPU backends: {}",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join("; ")
        }
    );
    all
}

/// wgpu for a test that needs it specifically, or `None` after a skip line; under `CI=true` no
/// adapter is a failure.
#[cfg(not(target_arch = "wasm32"))]
pub fn wgpu(test: &str) -> Option<WgpuBackend> {
    match WgpuBackend::new() {
        Ok(b) => Some(b),
        Err(e) => {
            report(missing(
                test,
                "wgpu adapter",
                &format!(
                    "{e}; set WGPU_BACKEND=vulkan with mesa-vulkan-drivers (lavapipe) installed"
                ),
                Need::InCi,
                in_ci(),
            ));
            None
        }
    }
}

/// wgpu with `shader_f16: false` (f16 values decoded with integer arithmetic), for tests that
/// run both f16 paths: `None` when the adapter has no shader-f16 (the default backend already
/// is that path) or no adapter answers (after [`wgpu()`]'s skip line).
#[cfg(not(target_arch = "wasm32"))]
pub fn wgpu_without_shader_f16(test: &str) -> Option<WgpuBackend> {
    let default = wgpu(test)?;
    if !default.uses_shader_f16() {
        eprintln!("{test}: the adapter has no shader-f16: its only path is the f32 one");
        return None;
    }
    drop(default);
    match WgpuBackend::with_options(crate::WgpuOptions {
        shader_f16: false,
        ..Default::default()
    }) {
        Ok(b) => Some(b),
        Err(e) => {
            report(missing(
                test,
                "wgpu adapter without shader-f16",
                &e.to_string(),
                Need::InCi,
                in_ci(),
            ));
            None
        }
    }
}

/// Whether a wgpu adapter answers, for tests that hand the GPU to another process (the CLI).
/// `false` after a skip line; under `CI=true` no adapter is a failure.
#[cfg(not(target_arch = "wasm32"))]
pub fn require_wgpu_adapter(test: &str) -> bool {
    wgpu(test).is_some()
}

/// A real CUDA device, or `None` after a skip line saying why (never required: CI has no
/// NVIDIA GPU).
#[cfg(feature = "cuda")]
pub fn cuda(test: &str) -> Option<CudaBackend> {
    match CudaBackend::new() {
        Ok(b) => Some(b),
        Err(e) => {
            report(missing(
                test,
                "CUDA device",
                &e.to_string(),
                Need::Optional,
                in_ci(),
            ));
            None
        }
    }
}

/// The emulated CUDA device (`CudaBackend::emulated`), or `None` after a skip line when
/// there is no host C++ compiler; under `CI=true` no compiler is a failure (tests/ci.sh
/// installs g++). Kernels that do not build for the host always fail the test.
#[cfg(feature = "cuda-emulator")]
// Test support: a CUDA kernel that does not build must fail the calling test.
#[allow(clippy::panic)]
pub fn cuda_emulated(test: &str) -> Option<CudaBackend> {
    if let Err(why) = crate::cuda::kernels::host::find_compiler() {
        report(missing(
            test,
            "C++ compiler for the emulated CUDA device",
            &why,
            Need::InCi,
            in_ci(),
        ));
        return None;
    }
    match CudaBackend::emulated() {
        Ok(b) => Some(b),
        Err(e) => panic!("{test}: the emulated CUDA device does not start: {e}"),
    }
}

/// Every parity case of `kind` (seed `seed`) as `(op, inputs)`.
#[cfg(not(target_arch = "wasm32"))]
#[allow(clippy::unwrap_used)]
fn parity_inputs(
    kind: kernels_core::op::OpKind,
    seed: u64,
) -> Vec<(kernels_core::op::Op, Vec<kernels_core::Tensor>)> {
    kernels_core::parity::cases(kind, seed)
        .unwrap()
        .into_iter()
        .map(|c| (c.op, c.inputs))
        .collect()
}

/// The device buffer `t` lives in, to tell an in-place result from a copy.
#[cfg(not(target_arch = "wasm32"))]
fn buffer_id(t: &kernels_core::Tensor) -> Option<*const ()> {
    t.device_buffer()
        .map(|b| std::sync::Arc::as_ptr(b) as *const ())
}

/// Checks `kv_write` with a donated cache on `be` against the CPU reference, bit for bit, on
/// every parity case plus one with NaN and infinities in the cache and the rows: a cache whose
/// buffer nothing else holds is written in place (the result shares its storage), and one that
/// is shared (a clone kept) is copied, leaving the clone's contents unchanged. Returns the
/// number of cases checked; panics naming the case otherwise.
#[cfg(not(target_arch = "wasm32"))]
// Test support: a mismatch must fail the calling test.
#[allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
pub fn check_kv_write_donation(label: &str, be: &dyn Backend) -> usize {
    use kernels_core::op::{Direction, Op, OpKind};
    use kernels_core::{CpuBackend, Tensor};
    let mut cases = parity_inputs(OpKind::KvWrite, 3);
    let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0];
    let cache: Vec<f32> = (0..2 * 3 * 5 * 7)
        .map(|i| special[i % 4] + i as f32)
        .collect();
    let rows: Vec<f32> = (0..2 * 3 * 2 * 7).map(|i| special[(i + 1) % 4]).collect();
    cases.push((
        Op::KvWrite { pos: 3 },
        vec![
            Tensor::from_f32(&[2, 3, 5, 7], cache).unwrap(),
            Tensor::from_f32(&[2, 3, 2, 7], rows).unwrap(),
        ],
    ));
    let cpu = CpuBackend::reference();
    let down = |t: &Tensor| pollster::block_on(be.download(t)).unwrap();
    for (i, (op, inputs)) in cases.iter().enumerate() {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let want = cpu.run(op, Direction::Forward, &refs).unwrap().remove(0);
        let rows = be.upload(&inputs[1]).unwrap();
        // Unique: written in place.
        let cache = be.upload(&inputs[0]).unwrap();
        let before = buffer_id(&cache);
        let got = be.run_donated(op, vec![cache], &[&rows]).unwrap().remove(0);
        assert_eq!(
            before,
            buffer_id(&got),
            "{label}: case {i} ({op}): not written in place"
        );
        assert!(
            down(&got).bit_eq(&want),
            "{label}: case {i} ({op}) in place"
        );
        // Shared: copied, and the clone keeps the old contents.
        let cache = be.upload(&inputs[0]).unwrap();
        let kept = cache.clone();
        let got = be.run_donated(op, vec![cache], &[&rows]).unwrap().remove(0);
        assert!(down(&got).bit_eq(&want), "{label}: case {i} ({op}) copied");
        assert!(
            down(&kept).bit_eq(&inputs[0]),
            "{label}: case {i} ({op}): a shared cache was written"
        );
    }
    // Errors name the op and the position.
    let (op, inputs) = &cases[0];
    let Op::KvWrite { pos } = *op else {
        unreachable!()
    };
    let cap = inputs[0].shape()[inputs[0].rank() - 2];
    let bad = Op::KvWrite { pos: cap + pos };
    let e = be
        .run_donated(
            &bad,
            vec![be.upload(&inputs[0]).unwrap()],
            &[&be.upload(&inputs[1]).unwrap()],
        )
        .unwrap_err();
    assert!(e.to_string().contains("kv_write"), "{label}: {e}");
    cases.len()
}

/// Checks `rope_kv_write` with donated caches on `be` against the CPU reference, within the
/// op's budget, on every parity case plus one with NaN and infinities in the caches and in
/// `qkv`: caches whose buffers nothing else holds are written in place (the outputs share
/// their storage), and when one is shared (a clone kept) both are copied, leaving the clone's
/// contents unchanged. A position past the cache is an error naming the op. Returns the number
/// of cases checked; panics naming the case otherwise.
#[cfg(not(target_arch = "wasm32"))]
// Test support: a mismatch must fail the calling test.
#[allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
pub fn check_rope_kv_write_donation(label: &str, be: &dyn Backend) -> usize {
    use kernels_core::op::{Direction, Op, OpKind};
    use kernels_core::{CpuBackend, Tensor, numerics};
    let mut cases = parity_inputs(OpKind::RopeKvWrite, 3);
    let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0];
    let cache = |shift: usize| -> Tensor {
        let v = (0..2 * 2 * 5 * 6)
            .map(|i| special[(i + shift) % 4] + i as f32)
            .collect();
        Tensor::from_f32(&[2, 2, 5, 6], v).unwrap()
    };
    let qkv: Vec<f32> = (0..2 * 6 * 2 * 6)
        .map(|i| {
            if i % 7 == 0 {
                special[i % 4]
            } else {
                i as f32 * 0.125 - 4.0
            }
        })
        .collect();
    cases.push((
        Op::rope_kv_write(10000.0, 3, false),
        vec![
            cache(0),
            cache(1),
            Tensor::from_f32(&[2, 6, 2, 6], qkv).unwrap(),
        ],
    ));
    let cpu = CpuBackend::reference();
    let down = |t: &Tensor| pollster::block_on(be.download(t)).unwrap();
    for (i, (op, inputs)) in cases.iter().enumerate() {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let want = cpu.run(op, Direction::Forward, &refs).unwrap();
        let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape()).collect();
        let (atol, rtol) = op.spec().budget.at(op.reduced_len(&shapes));
        let within = |got: &[Tensor], how: &str| {
            assert_eq!(got.len(), 3, "{label}: case {i} ({op}) {how}: outputs");
            for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.shape(),
                    w.shape(),
                    "{label}: case {i} ({op}) {how}: output {j}"
                );
                let c = numerics::compare(
                    &down(g).to_f32_vec().unwrap(),
                    &w.to_f32_vec().unwrap(),
                    atol,
                    rtol,
                );
                assert!(c.pass, "{label}: case {i} ({op}) {how}: output {j}: {c:?}");
            }
        };
        let qkv = be.upload(&inputs[2]).unwrap();
        // Unique: written in place.
        let (k, v) = (
            be.upload(&inputs[0]).unwrap(),
            be.upload(&inputs[1]).unwrap(),
        );
        let before = [buffer_id(&k), buffer_id(&v)];
        let got = be.run_donated(op, vec![k, v], &[&qkv]).unwrap();
        assert_eq!(
            before,
            [buffer_id(&got[0]), buffer_id(&got[1])],
            "{label}: case {i} ({op}): not written in place"
        );
        within(&got, "in place");
        // One shared: copied, and the clone keeps the old contents.
        let (k, v) = (
            be.upload(&inputs[0]).unwrap(),
            be.upload(&inputs[1]).unwrap(),
        );
        let kept = v.clone();
        let got = be.run_donated(op, vec![k, v], &[&qkv]).unwrap();
        within(&got, "copied");
        assert!(
            down(&kept).bit_eq(&inputs[1]),
            "{label}: case {i} ({op}): a shared cache was written"
        );
    }
    // Errors name the op and the position.
    let (_, inputs) = &cases[0];
    let cap = inputs[0].shape()[2];
    let e = be
        .run_donated(
            &Op::rope_kv_write(10000.0, cap, false),
            vec![
                be.upload(&inputs[0]).unwrap(),
                be.upload(&inputs[1]).unwrap(),
            ],
            &[&be.upload(&inputs[2]).unwrap()],
        )
        .unwrap_err();
    assert!(e.to_string().contains("rope_kv_write"), "{label}: {e}");
    cases.len()
}

/// Checks `matmul_add` with a donated residual on `be` against the CPU reference, within the
/// op's budget, on every parity case (f32 and every weight dtype, each transpose form, the
/// llama's decode forms) plus one with NaN and infinities in the residual: a residual whose
/// storage nothing else holds receives the product in place (the result shares its buffer), one
/// that is shared (a clone kept) is left unchanged; a residual of the wrong shape is an error
/// naming the op. Returns the number of cases checked; panics naming the case otherwise.
#[cfg(not(target_arch = "wasm32"))]
// Test support: a mismatch must fail the calling test.
#[allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
pub fn check_matmul_add_donation(label: &str, be: &dyn Backend) -> usize {
    use kernels_core::op::{Direction, Op, OpKind};
    use kernels_core::{CpuBackend, Tensor, numerics};
    let mut cases = parity_inputs(OpKind::MatmulAdd, 5);
    let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0];
    let residual: Vec<f32> = (0..2 * 3).map(|i| special[i % 4] + i as f32).collect();
    cases.push((
        Op::MatmulAdd {
            trans_a: false,
            trans_b: true,
        },
        vec![
            Tensor::from_f32(&[2, 3], residual).unwrap(),
            Tensor::from_f32(&[2, 5], (0..10).map(|i| i as f32 * 0.25).collect()).unwrap(),
            Tensor::from_f32(&[3, 5], (0..15).map(|i| 1.0 - i as f32 * 0.125).collect()).unwrap(),
        ],
    ));
    let cpu = CpuBackend::reference();
    let down = |t: &Tensor| pollster::block_on(be.download(t)).unwrap();
    for (i, (op, inputs)) in cases.iter().enumerate() {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let want = cpu.run(op, Direction::Forward, &refs).unwrap().remove(0);
        let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape()).collect();
        let (atol, rtol) = op.spec().budget.at(op.reduced_len(&shapes));
        let within = |got: &Tensor, how: &str| {
            let c = numerics::compare(
                &got.to_f32_vec().unwrap(),
                &want.to_f32_vec().unwrap(),
                atol,
                rtol,
            );
            assert!(
                c.pass,
                "{label}: case {i} ({op}, {:?}) {how}: {c:?}",
                inputs[2].dtype()
            );
        };
        let (a, b) = (
            be.upload(&inputs[1]).unwrap(),
            be.upload(&inputs[2]).unwrap(),
        );
        // Unique: the product lands in the residual's own buffer.
        let residual = be.upload(&inputs[0]).unwrap();
        let before = buffer_id(&residual);
        let got = be
            .run_donated(op, vec![residual], &[&a, &b])
            .unwrap()
            .remove(0);
        assert_eq!(
            before,
            buffer_id(&got),
            "{label}: case {i} ({op}): not accumulated in place"
        );
        within(&down(&got), "in place");
        // Shared: a new tensor, and the clone keeps the residual.
        let residual = be.upload(&inputs[0]).unwrap();
        let kept = residual.clone();
        let got = be
            .run_donated(op, vec![residual], &[&a, &b])
            .unwrap()
            .remove(0);
        within(&down(&got), "copied");
        assert!(
            down(&kept).bit_eq(&inputs[0]),
            "{label}: case {i} ({op}): a shared residual was written"
        );
    }
    // A residual that is not the product's shape: an error naming the op, before any launch.
    let (op, inputs) = &cases[1];
    let wrong = Tensor::zeros(&[inputs[0].numel() + 1]).unwrap();
    let e = be
        .run_donated(
            op,
            vec![be.upload(&wrong).unwrap()],
            &[
                &be.upload(&inputs[1]).unwrap(),
                &be.upload(&inputs[2]).unwrap(),
            ],
        )
        .unwrap_err();
    assert!(e.to_string().contains("matmul_add"), "{label}: {e}");
    cases.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_ci_a_backend_ci_has_is_a_failure() {
        let m = missing("t", "wgpu adapter", "none found", Need::InCi, true);
        let Missing::Fail(msg) = m else {
            panic!("CI=true must fail, got {m:?}")
        };
        assert!(msg.starts_with("t: CI=true but no wgpu adapter"), "{msg}");
        assert!(msg.contains("none found"), "the failure says why: {msg}");
    }

    #[test]
    fn outside_ci_a_missing_backend_is_a_skip_saying_why() {
        for need in [Need::InCi, Need::Optional] {
            let m = missing("t", "wgpu adapter", "none found", need, false);
            let Missing::Skip(line) = m else {
                panic!("outside CI a missing backend is a skip, got {m:?}")
            };
            assert!(line.starts_with("t: skipped, no wgpu adapter"), "{line}");
            assert!(line.contains("none found"), "the skip says why: {line}");
        }
    }

    #[test]
    fn a_cuda_device_is_never_required_even_in_ci() {
        let m = missing("t", "CUDA device", "no driver", Need::Optional, true);
        let Missing::Skip(line) = m else {
            panic!("an optional backend is a skip in CI, got {m:?}")
        };
        assert!(
            line.contains("no driver") && line.contains("not required in CI"),
            "{line}"
        );
    }

    #[test]
    fn report_skips_or_fails() {
        report(Missing::Skip("t: skipped, no x: y".into()));
        let failed = std::panic::catch_unwind(|| report(Missing::Fail("t: no x".into())));
        let payload = failed.expect_err("a failure verdict panics");
        assert_eq!(
            payload.downcast_ref::<String>().map(String::as_str),
            Some("t: no x")
        );
    }

    #[test]
    fn only_ci_true_is_ci() {
        // Reads the real environment: whatever it is, in_ci() agrees with CI == "true".
        assert_eq!(in_ci(), std::env::var("CI").as_deref() == Ok("true"));
    }
}
