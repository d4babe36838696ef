//! The CUDA backend on a real NVIDIA device: the shared parity harness over every op, forward
//! and backward, and a training-stability run. Without a device (CI has no NVIDIA GPU) each
//! test prints that it is skipped and why (no driver, no NVRTC, no cuBLAS, no device) and
//! passes; the kernels themselves still run, on an emulated device (the host C++ compiler builds
//! them, the CPU runs the grids), in the unit tests of `src/cuda/emulator.rs`.

#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::nn::{Linear, ParamStore};
use kernels_core::op::Direction;
use kernels_core::optim::AdamW;
use kernels_core::{Backend, CpuBackend, OpKind, Rng, Tensor, parity};
use kernels_gpu::parity::{check_all, failures};
use kernels_gpu::testing;

#[test]
fn cuda_matches_the_cpu_reference_on_every_op() {
    let Some(be) = testing::cuda("cuda_matches_the_cpu_reference_on_every_op") else {
        return;
    };
    let mut cases = Vec::new();
    for kind in OpKind::ALL {
        cases.extend(parity::cases(*kind, 7).unwrap());
    }
    let rows = check_all(&cases, &be);
    for r in &rows {
        println!(
            "{} {} {}: abs {:.2e} rel {:.2e} {}",
            r.op,
            r.dir.name(),
            r.shape,
            r.max_abs_err(),
            r.max_rel_err(),
            if r.pass() { "ok" } else { "FAIL" }
        );
    }
    let ran = |k: &OpKind, d: Direction| {
        rows.iter()
            .any(|r| r.kind == k.name() && r.dir == d && r.error.is_none())
    };
    let missing: Vec<String> = OpKind::ALL
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
        .collect();
    assert!(
        missing.is_empty(),
        "ops that did not run on cuda: {missing:?}"
    );
    let bad = failures(&rows);
    assert!(
        bad.is_empty(),
        "{} failures:\n{}",
        bad.len(),
        bad.join("\n")
    );
    println!("counters: {:?}", be.counters());
}

/// A small MLP (16 -> 32 -> 4, cross-entropy, AdamW) trained for 300 steps on CUDA: the loss
/// and parameters stay finite, the loss drops, a step downloads only the loss, and the first
/// steps agree with the CPU reference from the same init.
#[test]
fn cuda_training_is_stable_and_agrees_with_the_cpu() {
    let Some(be) = testing::cuda("cuda_training_is_stable_and_agrees_with_the_cpu") else {
        return;
    };
    let be = Rc::new(be);
    let train = |backend: Rc<dyn Backend>, steps: usize| -> (Vec<f32>, Vec<Vec<f32>>) {
        let mut rng = Rng::new(11);
        let mut store = ParamStore::new(backend.clone());
        let fc1 = Linear::new(&mut store, "fc1", 16, 32, true, &mut rng).unwrap();
        let fc2 = Linear::new(&mut store, "fc2", 32, 4, true, &mut rng).unwrap();
        let data: Vec<(Tensor, Tensor)> = (0..4)
            .map(|_| {
                let x = rng.normal_tensor(&[8, 16], 0.0, 1.0).unwrap();
                let y: Vec<i32> = (0..8).map(|_| rng.below(4) as i32).collect();
                (
                    backend.upload(&x).unwrap(),
                    backend.upload(&Tensor::from_i32(&[8], y).unwrap()).unwrap(),
                )
            })
            .collect();
        let mut opt = AdamW::new(1e-2);
        let mut losses = Vec::new();
        for i in 0..steps {
            let g = Graph::new(backend.clone());
            let p = store.bind(&g).unwrap();
            let (x, y) = &data[i % 4];
            let x = g.constant(x.clone()).unwrap();
            let y = g.constant(y.clone()).unwrap();
            let h = g.relu(&fc1.forward(&g, &p, &x).unwrap()).unwrap();
            let loss = g
                .cross_entropy(&fc2.forward(&g, &p, &h).unwrap(), &y)
                .unwrap();
            let grads = g.backward(&loss).unwrap();
            opt.step(&mut store, &grads).unwrap();
            let l = kernels_gpu::parity::download(&*backend, loss.tensor()).unwrap();
            losses.push(l.as_f32().unwrap()[0]);
        }
        let params = store
            .iter()
            .map(|(_, t)| {
                kernels_gpu::parity::download(&*backend, t)
                    .unwrap()
                    .to_f32_vec()
                    .unwrap()
            })
            .collect();
        (losses, params)
    };
    let before = be.counters();
    let (losses, params) = train(be.clone(), 300);
    let after = be.counters();
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
    assert!(params.iter().flatten().all(|x| x.is_finite()));
    let first = losses[..4].iter().sum::<f32>() / 4.0;
    let last = losses[296..].iter().sum::<f32>() / 4.0;
    assert!(last < 0.1 * first, "loss {first} -> {last}");
    let params_bytes: u64 = params.iter().map(|p| 4 * p.len() as u64).sum();
    assert_eq!(
        after.bytes_downloaded - before.bytes_downloaded,
        300 * 4 + params_bytes,
        "a step downloads only its loss"
    );
    let (cpu_losses, _) = train(Rc::new(CpuBackend::reference()), 20);
    for (i, (g, c)) in losses.iter().zip(&cpu_losses).enumerate() {
        assert!(
            (g - c).abs() <= 1e-4 + 1e-3 * c.abs(),
            "step {i}: {g} vs {c}"
        );
    }
    println!("cuda stability: loss {first:.4} -> {last:.6}; {:?}", after);
}

/// CUDA graphs on the device: a llama's prefill and decode tokens give the same logits and
/// tokens with graphs (each token one captured, updated and launched graph) as launch by
/// launch, every launch ran inside a graph, and the decode shape was instantiated once.
#[test]
fn cuda_graphs_decode_as_launches_do() {
    use kernels_core::models::llama::addition::{Size, config};
    use kernels_core::models::llama::{KvCache, Llama};
    let Some(first) = testing::cuda("cuda_graphs_decode_as_launches_do") else {
        return;
    };
    let run = |be: Rc<kernels_gpu::cuda::CudaBackend>| {
        let mut c = config(Size {
            hidden: 64,
            intermediate: 128,
            layers: 3,
            heads: 4,
            kv_heads: 2,
        });
        c.max_position_embeddings = 64;
        let dynbe: Rc<dyn Backend> = be.clone();
        let model = Llama::init(c, dynbe.clone(), &mut Rng::new(29)).unwrap();
        let g = Graph::inference(dynbe.clone());
        let p = model.bind(&g).unwrap();
        let mut cache = KvCache::with_capacity(24);
        let ids = Tensor::from_i32(&[1, 4], vec![1, 4, 2, 7]).unwrap();
        let mut input = g.constant(dynbe.upload(&ids).unwrap()).unwrap();
        let mut out = Vec::new();
        for _ in 0..12 {
            let h = model.forward(&g, &p, &input, Some(&mut cache)).unwrap();
            let last = model.last_positions(&g, &h).unwrap();
            let l = model.logits(&g, &p, &last).unwrap();
            let next = g.argmax(&l).unwrap();
            let logits = pollster::block_on(dynbe.download(l.tensor())).unwrap();
            out.push(logits.to_f32_vec().unwrap());
            input = g.reshape(&next, &[1, 1]).unwrap();
        }
        (out, be.counters())
    };
    let plain = Rc::new(first.with_graphs(false));
    let graphed = Rc::new(
        kernels_gpu::cuda::CudaBackend::new()
            .unwrap()
            .with_graphs(true),
    );
    let (a, ca) = run(plain);
    let (b, cb) = run(graphed);
    for (step, (x, y)) in a.iter().zip(&b).enumerate() {
        let same = x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(
            same,
            "step {step}: logits differ between graphs and launches"
        );
    }
    println!("without graphs {ca:?}\nwith graphs {cb:?}");
    assert_eq!(ca.graph_launches, 0);
    assert_eq!(cb.graph_nodes, cb.launches + cb.gemms, "{cb:?}");
    assert_eq!(cb.graph_launches, 12, "{cb:?}");
    assert!(
        cb.graph_instantiations <= 2,
        "prefill and decode shapes: {cb:?}"
    );
}

/// Decode steps replayed on the device (`Decoder::decode` over `Backend::replay_step`): the
/// graph captured at the first decode token is relaunched with the position and the fed ids in
/// device memory; greedy ids and every token's logits are bit-identical to graphs updated each
/// token and to graphs off, across a truncated cache and a second prompt, and the steady tokens
/// were relaunches (no launch recorded).
#[test]
fn cuda_replayed_decode_matches_graphs_off() {
    use kernels_core::models::llama::addition::{Size, config};
    use kernels_core::models::llama::{Decoder, Llama, Sampling};
    let Some(first) = testing::cuda("cuda_replayed_decode_matches_graphs_off") else {
        return;
    };
    let run = |be: Rc<kernels_gpu::cuda::CudaBackend>| {
        let mut c = config(Size {
            hidden: 64,
            intermediate: 128,
            layers: 3,
            heads: 4,
            kv_heads: 2,
        });
        c.max_position_embeddings = 64;
        let dynbe: Rc<dyn Backend> = be.clone();
        let model = Llama::init(c, dynbe, &mut Rng::new(29)).unwrap();
        let greedy = Sampling {
            temperature: 0.0,
            ..Sampling::default()
        };
        let mut d = Decoder::new(&model, greedy, 40).unwrap();
        let (mut ids, mut logits) = (Vec::new(), Vec::new());
        for (turn, prompt) in [&[1u32, 4, 2, 7, 3, 9][..], &[8, 2, 12]]
            .into_iter()
            .enumerate()
        {
            if turn == 1 {
                d.truncate(2);
            }
            pollster::block_on(d.prefill(prompt)).unwrap();
            for _ in 0..10 {
                let (id, l) = pollster::block_on(d.decode_logits()).unwrap();
                ids.push(id);
                logits.push(l.to_f32_vec().unwrap());
            }
        }
        (ids, logits, be.counters())
    };
    let new = || kernels_gpu::cuda::CudaBackend::new().unwrap();
    let (a, la, ca) = run(Rc::new(first.with_graphs(false)));
    let (b, lb, cb) = run(Rc::new(new().with_graphs(true).with_replay(false)));
    let (r, lr, cr) = run(Rc::new(new().with_graphs(true).with_replay(true)));
    println!("graphs off {ca:?}\ngraphs updated {cb:?}\nreplayed {cr:?}");
    assert_eq!(a, b, "greedy ids: graphs off, graphs updated");
    assert_eq!(a, r, "greedy ids: graphs off, replayed");
    let bits = |x: &[Vec<f32>]| -> Vec<Vec<u32>> {
        x.iter()
            .map(|v| v.iter().map(|f| f.to_bits()).collect())
            .collect()
    };
    assert_eq!(bits(&la), bits(&lb), "logits: graphs off, graphs updated");
    assert_eq!(bits(&la), bits(&lr), "logits: graphs off, replayed");
    assert_eq!(cb.replays, 0, "{cb:?}");
    assert_eq!(cr.replay_refusals, 0, "{cr:?}");
    assert_eq!(cr.replays, 2 * 10 - 2, "{cr:?}");
}
