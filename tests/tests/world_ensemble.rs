//! The world model's ensemble rollout on wgpu (lavapipe in CI) and every GPU backend of the
//! matrix: a step of the whole ensemble is at most 2 dispatches on wgpu and 2 launches on CUDA
//! (the counters do not depend on the hardware), and the stacked rollout equals the per-member
//! one (one `gru_sequence` per member).
// Tests may unwrap (see the workspace lints).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::models::world::{EnsembleWeights, WorldConfig, WorldModel};
use kernels_core::nn::ParamStore;
use kernels_core::{Backend, Rng, Tensor};
use kernels_gpu::testing;

const CONFIG: WorldConfig = WorldConfig {
    features: 9,
    embed: 6,
    hidden: 11,
    members: 5,
};

fn s0() -> Tensor {
    Rng::new(3)
        .uniform_tensor(&[4, CONFIG.features], -1.0, 1.0)
        .unwrap()
}

/// One inference rollout of `steps` steps from weights stacked once, read back.
fn rollout(
    backend: &Rc<dyn Backend>,
    model: &WorldModel,
    store: &ParamStore,
    stacked: &EnsembleWeights,
    steps: usize,
) -> Vec<Tensor> {
    let g = Graph::inference(backend.clone());
    let p = store.bind(&g).unwrap();
    let e = stacked.bind(&g).unwrap();
    let s0 = g.constant(backend.upload(&s0()).unwrap()).unwrap();
    let z = model.encode(&g, &p, &s0).unwrap();
    let roll = model.rollout_ensemble(&g, &e, &s0, &z, steps).unwrap();
    pollster::block_on(roll.download_members(&**backend)).unwrap()
}

/// The same rollout member by member (the reference).
fn per_member(
    backend: &Rc<dyn Backend>,
    model: &WorldModel,
    store: &ParamStore,
    steps: usize,
) -> Vec<Vec<f32>> {
    let g = Graph::inference(backend.clone());
    let p = store.bind(&g).unwrap();
    let s0 = g.constant(backend.upload(&s0()).unwrap()).unwrap();
    model
        .rollout_per_member(&g, &p, &s0, steps)
        .unwrap()
        .iter()
        .map(|m| {
            pollster::block_on(backend.download(m.tensor()))
                .unwrap()
                .to_f32_vec()
                .unwrap()
        })
        .collect()
}

fn assert_same(what: &str, got: &[Tensor], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len(), "{what}: members");
    for (e, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f32_vec().unwrap();
        assert_eq!(g.len(), w.len());
        let d = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(d <= 1e-5, "{what}: member {e} differs by {d}");
    }
}

#[test]
fn ensemble_rollout_step_is_at_most_two_dispatches_on_wgpu() {
    let test = "ensemble_rollout_step_is_at_most_two_dispatches_on_wgpu";
    let Some(gpu) = testing::wgpu(test) else {
        return;
    };
    let gpu = Rc::new(gpu);
    let backend: Rc<dyn Backend> = gpu.clone();
    let mut store = ParamStore::new(backend.clone());
    let model = WorldModel::new(&mut store, CONFIG, &mut Rng::new(21)).unwrap();
    let stacked = model.stacked_weights(&store).unwrap();
    // Warm up (tables, pipelines), then two horizons: the difference is per step.
    rollout(&backend, &model, &store, &stacked, 2);
    let count = |steps: usize| {
        let before = gpu.counters().dispatches;
        let out = rollout(&backend, &model, &store, &stacked, steps);
        (gpu.counters().dispatches - before, out)
    };
    let (short, _) = count(4);
    let (long, got) = count(12);
    let per_step = (long - short) as f64 / 8.0;
    eprintln!(
        "{test}: {short} dispatches for 4 steps, {long} for 12: {per_step} per step of {} members",
        CONFIG.members
    );
    assert!(per_step <= 2.0, "{per_step} dispatches per ensemble step");
    assert_same(test, &got, &per_member(&backend, &model, &store, 12));
}

/// Every GPU backend of the matrix (the emulated CUDA device with `--features cuda-emulator`):
/// the stacked rollout is the per-member one, and on CUDA a step is 2 launches (one SGEMM and
/// one gate kernel).
#[test]
fn ensemble_rollout_equals_the_per_member_rollout_on_every_gpu_backend() {
    let test = "ensemble_rollout_equals_the_per_member_rollout_on_every_gpu_backend";
    for b in testing::gpu_backends(test) {
        let backend = b.backend.clone();
        let mut store = ParamStore::new(backend.clone());
        let model = WorldModel::new(&mut store, CONFIG, &mut Rng::new(21)).unwrap();
        let stacked = model.stacked_weights(&store).unwrap();
        let got = rollout(&backend, &model, &store, &stacked, 6);
        assert_same(&b.name, &got, &per_member(&backend, &model, &store, 6));
        eprintln!("{test}: ok on {}", b.name);
    }
    #[cfg(feature = "cuda-emulator")]
    if let Some(cuda) = testing::cuda_emulated(test) {
        let cuda = Rc::new(cuda);
        let backend: Rc<dyn Backend> = cuda.clone();
        let mut store = ParamStore::new(backend.clone());
        let model = WorldModel::new(&mut store, CONFIG, &mut Rng::new(21)).unwrap();
        let stacked = model.stacked_weights(&store).unwrap();
        rollout(&backend, &model, &store, &stacked, 2);
        let count = |steps: usize| {
            let before = cuda.counters();
            rollout(&backend, &model, &store, &stacked, steps);
            let after = cuda.counters();
            (after.launches - before.launches) + (after.gemms - before.gemms)
        };
        let per_step = (count(12) - count(4)) as f64 / 8.0;
        eprintln!("{test}: {per_step} CUDA launches (kernels + SGEMMs) per ensemble step");
        assert!(per_step <= 2.0, "{per_step} launches per ensemble step");
    }
}
