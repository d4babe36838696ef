//! The GRU world model and `nn::Gru` across backends: PyTorch golden fixtures
//! (tests/fixtures/gru) through the library, and ensemble rollout and BPTT parity CPU vs every
//! GPU backend of the matrix (`kernels_gpu::testing`: wgpu, CUDA, the emulated CUDA device).
// Tests may unwrap (see the workspace lints).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::models::world::{WorldConfig, WorldModel, ensemble_stats};
use kernels_core::nn::{Gru, ParamStore};
use kernels_core::{Backend, CpuBackend, Rng, Tensor, io};
use kernels_gpu::testing;

fn host(backend: &dyn Backend, t: &Tensor) -> Vec<f32> {
    pollster::block_on(backend.download(t))
        .unwrap()
        .to_f32_vec()
        .unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn fixture(case: &str, kind: &str) -> BTreeMap<String, Tensor> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/gru")
        .join(format!("{case}.{kind}.safetensors"));
    io::load(&std::fs::read(p).unwrap()).unwrap()
}

/// `nn::Gru` loaded from an `nn.GRU` state_dict reproduces PyTorch's output and h_n.
fn golden_on(backend: Rc<dyn Backend>) {
    for case in ["basic", "no_h0", "tiny", "wide"] {
        let w = fixture(case, "weights");
        let x = fixture(case, "input");
        let want = fixture(case, "expected");
        let [hidden3, input] = w["weight_ih_l0"].shape() else {
            panic!()
        };
        let mut store = ParamStore::new(backend.clone());
        let gru = Gru::new(&mut store, "", *input, hidden3 / 3, &mut Rng::new(0)).unwrap();
        store.load_map(&w).unwrap();
        let g = Graph::inference(backend.clone());
        let p = store.bind(&g).unwrap();
        let xv = g.constant(backend.upload(&x["x"]).unwrap()).unwrap();
        let h0 = x.get("h0").map(|h| {
            let s = h.shape();
            g.constant(backend.upload(&h.reshape(&s[1..]).unwrap()).unwrap())
                .unwrap()
        });
        let (out, h_n) = gru.forward(&g, &p, &xv, h0.as_ref()).unwrap();
        let e_out = max_diff(
            &host(&*backend, out.tensor()),
            want["output"].as_f32().unwrap(),
        );
        let e_hn = max_diff(
            &host(&*backend, h_n.tensor()),
            want["h_n"].as_f32().unwrap(),
        );
        assert!(
            e_out < 1e-5 && e_hn < 1e-5,
            "{case} on {}: {e_out} {e_hn}",
            backend.name()
        );
    }
}

#[test]
fn nn_gru_matches_pytorch_golden_on_the_cpu() {
    golden_on(Rc::new(CpuBackend::new()));
    golden_on(Rc::new(CpuBackend::reference()));
}

#[test]
fn nn_gru_matches_pytorch_golden_on_every_gpu_backend() {
    let test = "nn_gru_matches_pytorch_golden_on_every_gpu_backend";
    for b in testing::gpu_backends(test) {
        golden_on(b.backend);
        eprintln!("{test}: ok on {}", b.name);
    }
}

const SMALL: WorldConfig = WorldConfig {
    features: 9,
    embed: 6,
    hidden: 11,
    members: 3,
};

/// Rollout, ensemble mean and spread, and the BPTT gradients of the loss on `backend`, from
/// the same host weights.
fn world_on(backend: Rc<dyn Backend>, s0: &Tensor, truth: &Tensor) -> Vec<(String, Vec<f32>)> {
    let mut store = ParamStore::new(backend.clone());
    let model = WorldModel::new(&mut store, SMALL, &mut Rng::new(21)).unwrap();
    let g = Graph::new(backend.clone());
    let p = store.bind(&g).unwrap();
    let s0v = g.constant(backend.upload(s0).unwrap()).unwrap();
    let tv = g.constant(backend.upload(truth).unwrap()).unwrap();
    let roll = model.rollout(&g, &p, &s0v, truth.shape()[0]).unwrap();
    let (mean, spread) = ensemble_stats(&g, &roll).unwrap();
    let loss = model.loss(&g, &p, &s0v, &tv).unwrap();
    let grads = g.backward(&loss).unwrap();
    let mut out = vec![
        ("mean".to_string(), host(&*backend, mean.tensor())),
        ("spread".to_string(), host(&*backend, spread.tensor())),
        ("loss".to_string(), host(&*backend, loss.tensor())),
    ];
    for (name, t) in grads.named() {
        out.push((format!("grad {name}"), host(&*backend, t)));
    }
    assert_eq!(out.len(), 3 + store.len());
    out
}

#[test]
fn ensemble_rollout_and_bptt_agree_cpu_vs_every_gpu_backend() {
    let test = "ensemble_rollout_and_bptt_agree_cpu_vs_every_gpu_backend";
    let mut rng = Rng::new(5);
    let s0 = rng.uniform_tensor(&[5, 9], -1.0, 1.0).unwrap();
    let truth = rng.uniform_tensor(&[4, 5, 9], -1.0, 1.0).unwrap();
    let cpu = world_on(Rc::new(CpuBackend::new()), &s0, &truth);
    for gpu in testing::gpu_backends(test) {
        let dev = world_on(gpu.backend.clone(), &s0, &truth);
        assert_eq!(cpu.len(), dev.len());
        for ((name, a), (name_b, b)) in cpu.iter().zip(&dev) {
            assert_eq!(name, name_b);
            let scale = a.iter().fold(0.0f32, |m, x| m.max(x.abs())).max(1e-3);
            let d = max_diff(a, b);
            assert!(
                d <= 1e-4 * scale + 1e-6,
                "{name} on {}: max diff {d} (scale {scale})",
                gpu.name
            );
        }
        eprintln!("{test}: ok on {}", gpu.name);
    }
}

/// `kernels gru bench`'s pipeline (encode, rollout, rank-k SVD, corrections, total) runs on
/// every GPU backend of the matrix, the emulated CUDA device included (what `--backend cuda`
/// times on a real GPU), and reports each stage once per backend.
#[test]
fn gru_bench_times_every_stage_on_every_gpu_backend() {
    use native_cli::commands::gru::bench::{GruBenchOptions, measure_on};
    let test = "gru_bench_times_every_stage_on_every_gpu_backend";
    let o = GruBenchOptions {
        backends: None,
        batch: 4,
        steps: 2,
        rank: 2,
        runs: 1,
        weights: None,
        json: true,
    };
    for gpu in testing::gpu_backends(test) {
        let b = measure_on(&o, vec![gpu.backend.clone()]).unwrap();
        let name = gpu.backend.name();
        let stages: Vec<&str> = b.rows.iter().map(|r| r.stage).collect();
        assert!(
            b.rows.iter().all(|r| r.backend == name),
            "{}: {stages:?}",
            gpu.name
        );
        for stage in ["encode", "rollout", "svd", "corrections", "total"] {
            assert_eq!(
                stages.iter().filter(|s| s.contains(stage)).count(),
                1,
                "{}: stage {stage} in {stages:?}",
                gpu.name
            );
        }
        assert!(
            b.rows.iter().all(|r| r.median > std::time::Duration::ZERO),
            "{}",
            gpu.name
        );
    }
}
