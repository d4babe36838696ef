//! Training on the GPU for a long time: 1,000 AdamW steps of a small MLP (16 -> 32 -> 4, batch 8,
//! cross-entropy) built from kernels-core's nn, autograd and optim, running on `WgpuBackend`.
//!
//! After warm-up the pool serves every buffer (the buffers-created counter stops growing), the
//! loss and the parameters stay finite, the loss drops, and a training step is ONE submit that
//! downloads only the loss. The same MLP from the same init trains the same on the CPU.

// Native adapters (pollster, lavapipe); the browser's suite is web_parity.rs.
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_gpu::testing;

use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::backend::now_or_never;
use kernels_core::nn::{Linear, ParamStore};
use kernels_core::op::Activation;
use kernels_core::optim::AdamW;
use kernels_core::{Backend, CpuBackend, Rng, Tensor};

const IN: usize = 16;
const HIDDEN: usize = 32;
const CLASSES: usize = 4;
const BATCH: usize = 8;
/// Batches of the fixed training set, cycled through.
const BATCHES: usize = 4;

fn read(backend: &dyn Backend, t: &Tensor) -> Tensor {
    match now_or_never(backend.download(t)) {
        Some(r) => r.unwrap(),
        None => pollster::block_on(backend.download(t)).unwrap(),
    }
}

struct Mlp {
    store: ParamStore,
    fc1: Linear,
    fc2: Linear,
    opt: AdamW,
    /// Device-resident inputs `[BATCH, IN]` and class targets `[BATCH]` (i32).
    data: Vec<(Tensor, Tensor)>,
}

impl Mlp {
    /// The same parameters and data for any backend: everything is drawn on the host from `seed`.
    fn new(backend: Rc<dyn Backend>, seed: u64) -> Mlp {
        let mut rng = Rng::new(seed);
        let mut store = ParamStore::new(backend.clone());
        let fc1 = Linear::new(&mut store, "fc1", IN, HIDDEN, true, &mut rng).unwrap();
        let fc2 = Linear::new(&mut store, "fc2", HIDDEN, CLASSES, true, &mut rng).unwrap();
        let data = (0..BATCHES)
            .map(|_| {
                let x = rng.normal_tensor(&[BATCH, IN], 0.0, 1.0).unwrap();
                let targets: Vec<i32> = (0..BATCH)
                    .map(|_| rng.below(CLASSES as u64) as i32)
                    .collect();
                let y = Tensor::from_i32(&[BATCH], targets).unwrap();
                (backend.upload(&x).unwrap(), backend.upload(&y).unwrap())
            })
            .collect();
        Mlp {
            store,
            fc1,
            fc2,
            opt: AdamW::new(1e-2),
            data,
        }
    }

    /// One step (forward, backward, AdamW) on batch `i`; returns the loss, read back.
    fn step(&mut self, i: usize) -> f32 {
        let backend = self.store.backend().clone();
        let g = Graph::new(backend.clone());
        let p = self.store.bind(&g).unwrap();
        let (x, y) = &self.data[i % BATCHES];
        let x = g.constant(x.clone()).unwrap();
        let y = g.constant(y.clone()).unwrap();
        let h = self.fc1.forward_act(&g, &p, &x, Activation::Relu).unwrap();
        let logits = self.fc2.forward(&g, &p, &h).unwrap();
        let loss = g.cross_entropy(&logits, &y).unwrap();
        let grads = g.backward(&loss).unwrap();
        self.opt.step(&mut self.store, &grads).unwrap();
        read(&*backend, loss.tensor()).as_f32().unwrap()[0]
    }

    fn params_on_host(&self) -> Vec<(String, Vec<f32>)> {
        let backend = self.store.backend().clone();
        self.store
            .iter()
            .map(|(n, t)| (n.clone(), read(&*backend, t).to_f32_vec().unwrap()))
            .collect()
    }
}

#[test]
fn a_thousand_training_steps_reuse_buffers_stay_finite_and_submit_once_per_step() {
    let Some(gpu) = testing::wgpu(
        "a_thousand_training_steps_reuse_buffers_stay_finite_and_submit_once_per_step",
    ) else {
        return;
    };
    let gpu = Rc::new(gpu);
    let mut mlp = Mlp::new(gpu.clone(), 11);
    let mut losses = Vec::new();
    let mut at_step_50 = None;
    let mut per_step = Vec::new();
    for i in 0..1000 {
        let before = gpu.counters();
        let loss = mlp.step(i);
        let after = gpu.counters();
        assert!(loss.is_finite(), "step {i}: loss {loss}");
        losses.push(loss);
        per_step.push((
            after.dispatches - before.dispatches,
            after.submits - before.submits,
            after.bytes_downloaded - before.bytes_downloaded,
            after.buffers_created - before.buffers_created,
        ));
        if i == 49 {
            at_step_50 = Some(after);
        }
    }
    let end = gpu.counters();
    let warm = at_step_50.unwrap();
    // Steady state: the pool serves every buffer from step 50 on.
    assert_eq!(
        end.buffers_created, warm.buffers_created,
        "buffers created kept growing after warm-up: {} at step 50, {} at step 1000",
        warm.buffers_created, end.buffers_created
    );
    // One submit per step (recorded, flushed once, the loss read once), 4 bytes downloaded.
    for (i, &(d, s, down, _)) in per_step.iter().enumerate() {
        assert_eq!(s, 1, "step {i}: {s} submits ({d} dispatches)");
        assert_eq!(
            down, 4,
            "step {i}: downloaded {down} bytes, only the loss was read"
        );
    }
    let dispatches = per_step[999].0;
    assert!(
        per_step[50..].iter().all(|s| s.0 == dispatches),
        "dispatches per step vary after warm-up"
    );
    // Elementwise work fused into its neighbours: each linear layer is one dispatch forward
    // (bias and relu in the matmul epilogue) and three backward (grad x, grad weight, grad
    // bias, relu's derivative applied while loading); cross_entropy two forward (per-row
    // losses, then their deterministic mean: WGSL has no device-scope fence for a one-pass
    // grid reduction) and one backward; one AdamW update per parameter:
    // 2 + 2 + 1 + 2 * 3 + 4 = 15 (21 before linear fused the bias add and relu).
    assert_eq!(dispatches, 15, "dispatches per training step");
    for (name, v) in mlp.params_on_host() {
        assert!(
            v.iter().all(|x| x.is_finite()),
            "{name} has non-finite values"
        );
    }
    let first = losses[..BATCHES].iter().sum::<f32>() / BATCHES as f32;
    let last = losses[1000 - BATCHES..].iter().sum::<f32>() / BATCHES as f32;
    assert!(
        last < 0.1 * first,
        "loss did not drop: {first} over the first {BATCHES} steps, {last} over the last"
    );
    println!(
        "stability on {}: 1000 steps, loss {first:.4} -> {last:.6}; per step {dispatches} dispatches, \
         1 submit, 4 bytes downloaded; buffers created {} (all before step 50), reused {}, pool {} B",
        gpu.name(),
        end.buffers_created,
        end.buffers_reused,
        end.pool_bytes
    );
}

#[test]
fn cpu_and_wgpu_train_the_same_from_the_same_init() {
    let Some(gpu) = testing::wgpu("cpu_and_wgpu_train_the_same_from_the_same_init") else {
        return;
    };
    let mut on_gpu = Mlp::new(Rc::new(gpu), 5);
    let mut on_cpu = Mlp::new(Rc::new(CpuBackend::reference()), 5);
    let mut worst = 0.0f32;
    for i in 0..20 {
        let (lg, lc) = (on_gpu.step(i), on_cpu.step(i));
        let err = (lg - lc).abs();
        worst = worst.max(err);
        assert!(
            err <= 1e-4 + 1e-3 * lc.abs(),
            "step {i}: loss {lg} on wgpu, {lc} on the CPU"
        );
    }
    // The parameters after 20 steps agree too.
    for ((n, g), (_, c)) in on_gpu.params_on_host().iter().zip(on_cpu.params_on_host()) {
        let max = g
            .iter()
            .zip(&c)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(max < 1e-3, "{n}: max abs difference {max} after 20 steps");
    }
    println!("cpu vs wgpu over 20 steps: max loss difference {worst:.3e}");
}

/// The memory counters: an upload adds its size class to `storage_bytes` (and the peak); a
/// dropped tensor's buffer stays the backend's, free in the pool, until `trim_pool` frees it.
#[test]
fn storage_bytes_follow_buffers_created_and_freed() {
    let Some(gpu) = testing::wgpu("storage_bytes_follow_buffers_created_and_freed") else {
        return;
    };
    gpu.trim_pool();
    let start = gpu.counters();
    assert!(start.peak_storage_bytes >= start.storage_bytes);
    // 1,000,000 f32s: a 4 MB tensor in the 4 MiB size class.
    let t = gpu
        .upload(&Tensor::from_f32(&[1000, 1000], vec![0.5; 1_000_000]).unwrap())
        .unwrap();
    let held = gpu.counters();
    assert_eq!(held.storage_bytes - start.storage_bytes, 4 << 20);
    assert!(held.peak_storage_bytes >= held.storage_bytes);
    drop(t);
    let pooled = gpu.counters();
    assert_eq!(pooled.storage_bytes, held.storage_bytes);
    assert_eq!(pooled.pool_bytes - start.pool_bytes, 4 << 20);
    gpu.trim_pool();
    let trimmed = gpu.counters();
    assert_eq!(trimmed.storage_bytes, start.storage_bytes);
    assert_eq!(trimmed.pool_bytes, 0);
    assert_eq!(trimmed.peak_storage_bytes, held.peak_storage_bytes);
}
