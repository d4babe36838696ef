//! `DataParallel`: N replicas on a global batch against one device on the same batch, on the
//! CPU (2 and 3 replicas, uneven splits), on 2 and 3 wgpu devices opened on one adapter
//! (lavapipe in CI), and on a CPU + wgpu mix. Replicas hold bit-identical parameters after every
//! step (of one backend kind anywhere; CPU and wgpu on lavapipe); against one device the budget
//! of `BUDGET_*` holds (kernels-core/README.md's "Data-parallel training" says where it comes from).
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::models::llama::{Llama, LlamaConfig};
use kernels_core::optim::AdamW;
use kernels_core::parallel::{DataParallel, ReducePath, shards};
use kernels_core::{Backend, CpuBackend, Rng, Tensor};

/// Loss: relative difference from one device (summation order of `batch x positions` terms).
const BUDGET_LOSS_RTOL: f32 = 1e-5;
/// Parameters after `STEPS` AdamW steps at `LR`: absolute difference from one device.
const BUDGET_PARAM_ATOL: f32 = 1e-5;
const STEPS: usize = 3;
const LR: f32 = 1e-2;
const SEQ: usize = 6;
const VOCAB: usize = 11;

fn config() -> LlamaConfig {
    LlamaConfig {
        hidden_size: 16,
        intermediate_size: 24,
        num_hidden_layers: 1,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        vocab_size: VOCAB,
        rms_norm_eps: 1e-5,
        rope_theta: 10000.0,
        max_position_embeddings: SEQ,
        tie_word_embeddings: true,
        head_dim: 8,
        bos_token_id: None,
        eos_token_ids: vec![0],
        variant: Default::default(),
    }
}

/// The global batch of step `step`: ids and next-token targets `[batch, SEQ]`.
fn batch(step: usize, rows: usize) -> (Vec<i32>, Vec<i32>) {
    let mut rng = Rng::new(100 + step as u64);
    let ids: Vec<i32> = (0..rows * SEQ)
        .map(|_| rng.below(VOCAB as u64) as i32)
        .collect();
    let targets: Vec<i32> = (0..rows * SEQ)
        .map(|_| rng.below(VOCAB as u64) as i32)
        .collect();
    (ids, targets)
}

/// The positions the loss reads (the last half, as the addition task reads the answer).
fn positions() -> Vec<usize> {
    (SEQ / 2..SEQ).collect()
}

fn model(backend: Rc<dyn Backend>, seed: u64) -> Llama {
    Llama::init(config(), backend, &mut Rng::new(seed)).unwrap()
}

type Params = BTreeMap<String, Tensor>;

/// Plain training on one backend: the losses and the final parameters.
fn one_device(backend: Rc<dyn Backend>, rows: usize) -> (Vec<f32>, Params) {
    let mut m = model(backend.clone(), 7);
    let mut opt = AdamW::new(LR);
    let mut losses = Vec::new();
    for step in 0..STEPS {
        let (ids, targets) = batch(step, rows);
        let g = Graph::new(backend.clone());
        let p = m.bind(&g).unwrap();
        let ids = g
            .constant(
                backend
                    .upload(&Tensor::from_i32(&[rows, SEQ], ids).unwrap())
                    .unwrap(),
            )
            .unwrap();
        let loss = m.loss(&g, &p, &ids, &targets, &positions()).unwrap();
        let grads = g.backward(&loss).unwrap();
        opt.step(&mut m.store, &grads).unwrap();
        losses.push(
            pollster::block_on(backend.download(loss.tensor()))
                .unwrap()
                .to_scalar()
                .unwrap(),
        );
    }
    (losses, pollster::block_on(m.store.to_host()).unwrap())
}

struct DpRun {
    losses: Vec<f32>,
    /// Each replica's final parameters.
    params: Vec<Params>,
    reduce_bytes: Vec<u64>,
    path: ReducePath,
    numel: usize,
}

/// Data-parallel training of the same model (replica 0 seeded as [`one_device`]; the others
/// seeded differently, so the start's copy of replica 0's parameters is tested too).
fn data_parallel(backends: &[Rc<dyn Backend>], rows: usize) -> DpRun {
    let replicas: Vec<Llama> = backends
        .iter()
        .enumerate()
        .map(|(i, b)| model(b.clone(), if i == 0 { 7 } else { 1000 + i as u64 }))
        .collect();
    let numel = replicas[0].store.numel();
    let mut dp = pollster::block_on(DataParallel::new(replicas, AdamW::new(LR))).unwrap();
    let (mut losses, mut reduce_bytes) = (Vec::new(), Vec::new());
    let mut path = ReducePath::None;
    for step in 0..STEPS {
        let (ids, targets) = batch(step, rows);
        let report = pollster::block_on(dp.step(rows, |_, m, g, p, r| {
            let ids = Tensor::from_i32(&[r.len(), SEQ], ids[r.start * SEQ..r.end * SEQ].to_vec())?;
            let ids = g.constant(g.backend().upload(&ids)?)?;
            m.loss(
                g,
                p,
                &ids,
                &targets[r.start * SEQ..r.end * SEQ],
                &positions(),
            )
        }))
        .unwrap();
        assert_eq!(
            report.shard_rows,
            shards(rows, backends.len())
                .iter()
                .map(|r| r.len())
                .collect::<Vec<_>>()
        );
        losses.push(pollster::block_on(report.loss()).unwrap());
        reduce_bytes.push(report.reduce_bytes());
        path = report.path;
    }
    DpRun {
        losses,
        params: pollster::block_on(dp.params_host()).unwrap(),
        reduce_bytes,
        path,
        numel,
    }
}

fn max_diff(a: &Params, b: &Params) -> f32 {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    a.iter()
        .flat_map(|(k, t)| {
            let (x, y) = (t.as_f32().unwrap(), b[k].as_f32().unwrap());
            x.iter()
                .zip(y)
                .map(|(x, y)| (x - y).abs())
                .collect::<Vec<_>>()
        })
        .fold(0.0, f32::max)
}

fn bit_identical(a: &Params, b: &Params) -> bool {
    a.len() == b.len() && a.iter().all(|(k, t)| b.get(k).is_some_and(|u| t.bit_eq(u)))
}

/// Checks `run` against `want` (one device) within the budget; returns the largest parameter
/// difference found.
fn check_against(label: &str, run: &DpRun, want: &(Vec<f32>, Params), rows: usize) -> f32 {
    for (step, (got, w)) in run.losses.iter().zip(&want.0).enumerate() {
        assert!(
            (got - w).abs() <= BUDGET_LOSS_RTOL * w.abs().max(1.0),
            "{label}: step {step}: loss {got} vs one device {w}"
        );
    }
    let worst = run
        .params
        .iter()
        .map(|p| max_diff(p, &want.1))
        .fold(0.0, f32::max);
    assert!(
        worst <= BUDGET_PARAM_ATOL,
        "{label}: parameters differ from one device's by {worst:e}"
    );
    // Bytes: every replica with rows downloads its gradient, every replica uploads the sum.
    let n = run.params.len();
    let with_rows = shards(rows, n).iter().filter(|r| !r.is_empty()).count();
    let want_bytes = if n > 1 {
        4 * run.numel as u64 * (with_rows + n) as u64
    } else {
        0
    };
    assert!(
        run.reduce_bytes.iter().all(|&b| b == want_bytes),
        "{label}: {:?}",
        run.reduce_bytes
    );
    eprintln!(
        "{label}: losses {:?} (one device {:?}), largest parameter difference {worst:e}",
        run.losses, want.0
    );
    worst
}

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

#[test]
fn cpu_replicas_train_as_one_device_and_stay_bit_identical() {
    for rows in [7, 2] {
        let want = one_device(cpu(), rows);
        for n in [2, 3] {
            let run = data_parallel(&vec![cpu(); n], rows);
            assert_eq!(run.path, ReducePath::Host);
            check_against(&format!("cpu x{n}, batch {rows}"), &run, &want, rows);
            for (i, p) in run.params.iter().enumerate().skip(1) {
                assert!(
                    bit_identical(&run.params[0], p),
                    "cpu x{n}: replica {i} is not bit-identical to replica 0"
                );
            }
        }
    }
}

#[test]
fn one_replica_is_plain_training_bit_for_bit() {
    let want = one_device(cpu(), 5);
    let run = data_parallel(&[cpu()], 5);
    assert_eq!(run.path, ReducePath::None);
    assert_eq!(run.losses, want.0);
    assert!(bit_identical(&run.params[0], &want.1));
    assert!(run.reduce_bytes.iter().all(|&b| b == 0));
}

#[test]
fn a_failing_shard_changes_no_replica() {
    let replicas = vec![model(cpu(), 7), model(cpu(), 7)];
    let mut dp = pollster::block_on(DataParallel::new(replicas, AdamW::new(LR))).unwrap();
    let before = pollster::block_on(dp.params_host()).unwrap();
    // Replica 1's loss is not a scalar.
    let r = pollster::block_on(dp.step(4, |i, m, g, p, r| {
        let (ids, targets) = batch(0, r.len());
        let ids = g.constant(
            g.backend()
                .upload(&Tensor::from_i32(&[r.len(), SEQ], ids)?)?,
        )?;
        let l = m.loss(g, p, &ids, &targets, &positions())?;
        if i == 1 {
            Ok(p.get("model.norm.weight")?.clone())
        } else {
            Ok(l)
        }
    }));
    assert!(r.is_err());
    let after = pollster::block_on(dp.params_host()).unwrap();
    for (b, a) in before.iter().zip(&after) {
        assert!(bit_identical(a, b));
    }
    assert_eq!(dp.optimizer().unwrap().step, 0);
    // An empty batch is refused.
    assert!(pollster::block_on(dp.step(0, |_, _, _, _, _| unreachable!())).is_err());
}

/// `n` wgpu devices opened on the adapter, or `None` after a skip line (a failure under CI);
/// with whether the adapter is a software renderer (lavapipe).
fn wgpu_devices(test: &str, n: usize) -> Option<(Vec<Rc<dyn Backend>>, bool)> {
    let mut software = false;
    let devs = (0..n)
        .map(|_| {
            kernels_gpu::testing::wgpu(test).map(|b| {
                software = kernels_gpu::adapters::is_software(b.adapter_info());
                Rc::new(b) as Rc<dyn Backend>
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some((devs, software))
}

#[test]
fn wgpu_devices_train_as_one_device_and_stay_bit_identical() {
    let Some((devs, _)) = wgpu_devices("data_parallel wgpu", 3) else {
        return;
    };
    // Three devices of their own: tensors of one are refused by the others.
    let ids: Vec<_> = devs.iter().map(|d| d.device()).collect();
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    let rows = 5;
    let want = one_device(devs[0].clone(), rows);
    for n in [2, 3] {
        let run = data_parallel(&devs[..n], rows);
        assert_eq!(run.path, ReducePath::Host);
        check_against(&format!("wgpu x{n}"), &run, &want, rows);
        for (i, p) in run.params.iter().enumerate().skip(1) {
            assert!(
                bit_identical(&run.params[0], p),
                "wgpu x{n}: replica {i} is not bit-identical to replica 0"
            );
        }
    }
}

#[test]
fn a_cpu_and_wgpu_mix_trains_as_one_device() {
    let Some((devs, software)) = wgpu_devices("data_parallel mix", 2) else {
        return;
    };
    let rows = 5;
    let want = one_device(cpu(), rows);
    let mix = [cpu(), devs[0].clone(), devs[1].clone()];
    let run = data_parallel(&mix, rows);
    check_against("cpu,wgpu,wgpu", &run, &want, rows);
    // The two wgpu replicas run one kernel: bit-identical.
    assert!(bit_identical(&run.params[1], &run.params[2]));
    // The CPU's and the WGSL adamw_step take the same coefficients and do the same f32
    // operations in the same order: on lavapipe (no contraction into FMA) the replicas are
    // bit-identical; a hardware GPU's compiler may fuse, so there only the budget is asserted.
    let across = max_diff(&run.params[0], &run.params[1]);
    eprintln!(
        "cpu,wgpu,wgpu: cpu vs wgpu replica: {across:e} (software adapter: {software}; \
         bit-identical: {})",
        bit_identical(&run.params[0], &run.params[1])
    );
    if software {
        assert!(bit_identical(&run.params[0], &run.params[1]));
    }
    assert!(across <= BUDGET_PARAM_ATOL, "{across:e}");
}
