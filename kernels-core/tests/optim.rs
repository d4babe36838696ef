//! Optimizers (AdamW, SGD), training a small MLP, and ParamStore's host round trips and
//! save / load, on the f64 test device (`f64_device`) and the CPU.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

// wasm-pack test runs these in the browser too.
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::collections::BTreeMap;
use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::backend::{Backend, CpuBackend, now_or_never};
use kernels_core::nn::{Gru, LayerNorm, Linear, ParamStore};
use kernels_core::op::LAYER_NORM_EPS;
use kernels_core::optim::{AdamW, Sgd};
use kernels_core::tensor::{Storage, Tensor};
use kernels_core::{Error, Rng};

mod f64_device;
use f64_device::*;

// ---------------------------------------------------------------------------------------------
// Optimizers.

/// One parameter `w` with a gradient `c` (loss = sum(w * c)).
fn grads_for(s: &ParamStore, c: &[f32]) -> kernels_core::autograd::Gradients {
    let g = Graph::new(s.backend().clone());
    let p = s.bind(&g).unwrap();
    let c = constant(&g, &Tensor::from_f32(&[c.len()], c.to_vec()).unwrap());
    let loss = g.sum(&g.mul(p.get("w").unwrap(), &c).unwrap()).unwrap();
    g.backward(&loss).unwrap()
}

fn host(t: &Tensor) -> Vec<f64> {
    match t.storage() {
        Storage::F32(v) => v.iter().map(|&x| x as f64).collect(),
        _ => f64_read(t),
    }
}

#[test]
fn adamw_matches_a_hand_computed_step() {
    let w0 = [0.5f64, -1.0, 2.0];
    let grad = [0.1f64, -3.0, 0.0];
    let (lr, b1, b2, eps, wd) = (0.1f64, 0.9f64, 0.99f64, 1e-8f64, 0.05f64);
    for backend in [
        Rc::new(CpuBackend::new()) as Rc<dyn Backend>,
        Rc::new(F64Backend::default()),
    ] {
        let mut s = ParamStore::new(backend);
        s.register(
            "w",
            Tensor::from_f32(&[3], w0.iter().map(|&x| x as f32).collect()).unwrap(),
        )
        .unwrap();
        let mut opt = AdamW::new(lr as f32)
            .betas(b1 as f32, b2 as f32)
            .eps(eps as f32)
            .weight_decay(wd as f32);
        // By hand, with a constant gradient: the bias-corrected moments are g and g^2 at
        // every step, so each step is w <- w (1 - lr wd) - lr g / (|g| + eps).
        let mut w = w0;
        let (mut m, mut v) = ([0.0f64; 3], [0.0f64; 3]);
        for t in 1..=3u32 {
            let grads = grads_for(&s, &grad.map(|x| x as f32));
            opt.step(&mut s, &grads).unwrap();
            for i in 0..3 {
                m[i] = b1 * m[i] + (1.0 - b1) * grad[i];
                v[i] = b2 * v[i] + (1.0 - b2) * grad[i] * grad[i];
                let mhat = m[i] / (1.0 - b1.powi(t as i32));
                let vhat = v[i] / (1.0 - b2.powi(t as i32));
                w[i] = w[i] * (1.0 - lr * wd) - lr * mhat / (vhat.sqrt() + eps);
            }
            let got = host(s.get("w").unwrap());
            for i in 0..3 {
                assert!(
                    (got[i] - w[i]).abs() < 1e-5,
                    "t={t} i={i}: {got:?} vs {w:?}"
                );
            }
            let (gm, gv) = opt.moments("w").unwrap();
            for i in 0..3 {
                assert!((host(gm)[i] - m[i]).abs() < 1e-6);
                assert!((host(gv)[i] - v[i]).abs() < 1e-6);
            }
        }
        assert_eq!(opt.step, 3);
        // Third step of the first element, written out: 0.5 * 0.995^3 - 0.1 * (1 + 0.995 + 0.995^2) * 0.1/(0.1+1e-8).
        let e0 =
            0.5 * 0.995f64.powi(3) - 0.1 * (0.1 / (0.1 + 1e-8)) * (1.0 + 0.995 + 0.995 * 0.995);
        assert!((host(s.get("w").unwrap())[0] - e0).abs() < 1e-5);
    }
}

#[test]
fn sgd_matches_a_hand_computed_step() {
    let w0 = [1.0f64, -2.0];
    let grad = [0.5f64, 0.25];
    let (lr, mom, wd) = (0.1f64, 0.9f64, 0.1f64);
    for nesterov in [false, true] {
        let mut s = ParamStore::new(Rc::new(CpuBackend::new()));
        s.register("w", Tensor::from_f32(&[2], vec![1.0, -2.0]).unwrap())
            .unwrap();
        let mut opt = Sgd::new(lr as f32)
            .momentum(mom as f32)
            .weight_decay(wd as f32)
            .nesterov(nesterov);
        let mut w = w0;
        let mut buf = [0.0f64; 2];
        for t in 0..3 {
            let grads = grads_for(&s, &[0.5, 0.25]);
            opt.step(&mut s, &grads).unwrap();
            for i in 0..2 {
                let d = grad[i] + wd * w[i];
                buf[i] = if t == 0 { d } else { mom * buf[i] + d };
                let d = if nesterov { d + mom * buf[i] } else { buf[i] };
                w[i] -= lr * d;
            }
            let got = host(s.get("w").unwrap());
            for i in 0..2 {
                assert!(
                    (got[i] - w[i]).abs() < 1e-6,
                    "nesterov={nesterov} t={t}: {got:?} vs {w:?}"
                );
            }
            let b = host(opt.momentum_buffer("w").unwrap());
            for i in 0..2 {
                assert!((b[i] - buf[i]).abs() < 1e-6);
            }
        }
    }
    // First plain step, fully by hand: w = 1 - 0.1 * (0.5 + 0.1 * 1) = 0.94.
    let mut s = ParamStore::new(Rc::new(CpuBackend::new()));
    s.register("w", Tensor::from_f32(&[2], vec![1.0, -2.0]).unwrap())
        .unwrap();
    let grads = grads_for(&s, &[0.5, 0.25]);
    Sgd::new(0.1)
        .weight_decay(0.1)
        .step(&mut s, &grads)
        .unwrap();
    let got = host(s.get("w").unwrap());
    assert!((got[0] - 0.94).abs() < 1e-6 && (got[1] - (-2.0 - 0.1 * (0.25 - 0.2))).abs() < 1e-6);
}

#[test]
fn optimizer_steps_are_all_or_nothing() {
    let cpu: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let mut s = ParamStore::new(cpu.clone());
    s.register("a", Tensor::full(&[3], 1.0).unwrap()).unwrap();
    s.register("w", Tensor::full(&[3], 1.0).unwrap()).unwrap();
    // Gradients named `a` (right shape) and `w` (wrong shape), from another model.
    let mut other = ParamStore::new(cpu.clone());
    other
        .register("a", Tensor::full(&[3], 1.0).unwrap())
        .unwrap();
    other
        .register("w", Tensor::full(&[2], 1.0).unwrap())
        .unwrap();
    let g = Graph::new(cpu);
    let p = other.bind(&g).unwrap();
    let la = g.sum(p.get("a").unwrap()).unwrap();
    let lw = g.sum(p.get("w").unwrap()).unwrap();
    let grads = g.backward(&g.add(&la, &lw).unwrap()).unwrap();
    let mut adam = AdamW::new(0.1);
    assert!(matches!(
        adam.step(&mut s, &grads),
        Err(Error::BadShape { .. })
    ));
    let mut sgd = Sgd::new(0.1).momentum(0.9);
    assert!(matches!(
        sgd.step(&mut s, &grads),
        Err(Error::BadShape { .. })
    ));
    assert_eq!(s.get("a").unwrap().to_f32_vec().unwrap(), vec![1.0; 3]);
    assert_eq!(adam.step, 0);
    assert!(adam.moments("a").is_none() && sgd.momentum_buffer("a").is_none());
}

// ---------------------------------------------------------------------------------------------
// Training a small MLP on a toy problem.

/// Four Gaussian blobs in 2-D, one class each: separable, but not by a single linear layer
/// trained for a few steps from a random init without hidden features.
fn blobs(rng: &mut Rng, n: usize) -> (Tensor, Tensor) {
    let centers = [(2.0f32, 2.0f32), (-2.0, 2.0), (-2.0, -2.0), (2.0, -2.0)];
    let mut x = Vec::with_capacity(n * 2);
    let mut y = Vec::with_capacity(n);
    for i in 0..n {
        let c = i % 4;
        x.push(centers[c].0 + 0.4 * rng.normal());
        x.push(centers[c].1 + 0.4 * rng.normal());
        y.push(c as i64);
    }
    (
        Tensor::from_f32(&[n, 2], x).unwrap(),
        Tensor::from_i64(&[n], y).unwrap(),
    )
}

fn train(
    mut step: impl FnMut(&mut ParamStore, &kernels_core::autograd::Gradients),
) -> (f32, f32, f32) {
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let mut rng = Rng::new(42);
    let mut s = ParamStore::new(backend.clone());
    let l1 = Linear::new(&mut s, "0", 2, 16, true, &mut rng).unwrap();
    let l2 = Linear::new(&mut s, "2", 16, 4, true, &mut rng).unwrap();
    let (x, y) = blobs(&mut rng, 64);
    let mut first = f32::NAN;
    let mut last = f32::NAN;
    for it in 0..150 {
        let g = Graph::new(backend.clone());
        let p = s.bind(&g).unwrap();
        let h = g
            .tanh(&l1.forward(&g, &p, &g.constant(x.clone()).unwrap()).unwrap())
            .unwrap();
        let logits = l2.forward(&g, &p, &h).unwrap();
        let loss = g
            .cross_entropy(&logits, &g.constant(y.clone()).unwrap())
            .unwrap();
        last = loss.tensor().to_scalar().unwrap();
        if it == 0 {
            first = last;
        }
        let grads = g.backward(&loss).unwrap();
        step(&mut s, &grads);
    }
    // Accuracy through argmax in inference mode.
    let g = Graph::inference(backend);
    let p = s.bind(&g).unwrap();
    let h = g
        .tanh(&l1.forward(&g, &p, &g.constant(x).unwrap()).unwrap())
        .unwrap();
    let pred = g.argmax(&l2.forward(&g, &p, &h).unwrap()).unwrap();
    let pred = pred.tensor().to_i64_vec().unwrap();
    let yv = y.to_i64_vec().unwrap();
    let acc = pred.iter().zip(&yv).filter(|(a, b)| a == b).count() as f32 / yv.len() as f32;
    (first, last, acc)
}

#[test]
fn mlp_trains_with_adamw() {
    let mut opt = AdamW::new(0.05);
    let (first, last, acc) = train(|s, g| opt.step(s, g).unwrap());
    eprintln!("AdamW: loss {first} -> {last}, accuracy {acc}");
    assert!(first > 1.0, "initial loss {first}");
    assert!(last < first / 100.0, "AdamW: loss {first} -> {last}");
    assert_eq!(acc, 1.0);
}

#[test]
fn mlp_trains_with_sgd_momentum() {
    let mut opt = Sgd::new(0.1).momentum(0.9);
    let (first, last, acc) = train(|s, g| opt.step(s, g).unwrap());
    eprintln!("SGD: loss {first} -> {last}, accuracy {acc}");
    assert!(last < first / 100.0, "SGD: loss {first} -> {last}");
    assert_eq!(acc, 1.0);
}

// ---------------------------------------------------------------------------------------------
// ParamStore save / load.

#[test]
fn param_store_host_round_trip_through_a_device() {
    // Parameters on the f64 device come back to the host by name, with their values.
    let mut rng = Rng::new(9);
    let mut s = f64_store();
    Linear::new(&mut s, "fc", 3, 2, true, &mut rng).unwrap();
    let host_map: BTreeMap<String, Tensor> = now_or_never(s.to_host()).unwrap().unwrap();
    assert_eq!(
        host_map.keys().map(String::as_str).collect::<Vec<_>>(),
        ["fc.bias", "fc.weight"]
    );
    for (name, t) in s.iter() {
        let h = &host_map[name];
        assert!(h.is_host());
        assert_eq!(h.shape(), t.shape());
        let dv = f64_read(t);
        for (a, b) in h.to_f32_vec().unwrap().iter().zip(&dv) {
            assert_eq!(*a, *b as f32);
        }
    }
    // ... and load back onto the device.
    let mut s2 = f64_store();
    let mut rng2 = Rng::new(10);
    Linear::new(&mut s2, "fc", 3, 2, true, &mut rng2).unwrap();
    s2.load_map(&host_map).unwrap();
    for (name, t) in s2.iter() {
        assert!(!t.is_host());
        assert_eq!(f64_read(t), f64_read(s.get(name).unwrap()));
    }
}

fn model(store: &mut ParamStore, seed: u64) -> (Linear, Gru) {
    let mut rng = Rng::new(seed);
    let lin = Linear::new(store, "head", 6, 3, true, &mut rng).unwrap();
    let gru = Gru::new(store, "rnn", 4, 6, &mut rng).unwrap();
    LayerNorm::new(store, "ln", 6, LAYER_NORM_EPS).unwrap();
    (lin, gru)
}

fn snapshot(s: &ParamStore) -> BTreeMap<String, Vec<f64>> {
    s.iter().map(|(k, t)| (k.clone(), host(t))).collect()
}

#[test]
fn param_store_save_load_round_trip() {
    for backend in [
        Rc::new(CpuBackend::new()) as Rc<dyn Backend>,
        Rc::new(F64Backend::default()),
    ] {
        let mut a = ParamStore::new(backend.clone());
        model(&mut a, 1);
        let bytes = now_or_never(a.save()).unwrap().unwrap();
        // The file holds exactly the PyTorch names.
        let file = kernels_core::io::load(&bytes).unwrap();
        assert_eq!(
            file.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "head.bias",
                "head.weight",
                "ln.bias",
                "ln.weight",
                "rnn.bias_hh_l0",
                "rnn.bias_ih_l0",
                "rnn.weight_hh_l0",
                "rnn.weight_ih_l0"
            ]
        );
        assert_eq!(file["rnn.weight_ih_l0"].shape(), &[18, 4]);
        // A differently initialized model takes the saved values exactly.
        let mut b = ParamStore::new(backend);
        model(&mut b, 2);
        assert_ne!(snapshot(&a), snapshot(&b));
        b.load(&bytes).unwrap();
        assert_eq!(snapshot(&a), snapshot(&b));
    }
}

#[test]
fn param_store_load_errors_leave_the_store_untouched() {
    let cpu: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let mut store = ParamStore::new(cpu.clone());
    model(&mut store, 1);
    let before = snapshot(&store);
    let full = now_or_never(store.to_host()).unwrap().unwrap();
    let mut other = ParamStore::new(cpu.clone());
    model(&mut other, 7);
    let good = now_or_never(other.save()).unwrap().unwrap();

    // A missing parameter.
    let mut m = now_or_never(other.to_host()).unwrap().unwrap();
    m.remove("rnn.bias_hh_l0");
    let e = store
        .load(&kernels_core::io::save(&m).unwrap())
        .unwrap_err();
    assert_eq!(
        e,
        Error::Missing {
            what: "tensor in parameter file".into(),
            name: "rnn.bias_hh_l0".into()
        }
    );
    assert_eq!(snapshot(&store), before);

    // A parameter of the wrong shape (transposed weight).
    let mut m = now_or_never(other.to_host()).unwrap().unwrap();
    m.insert("head.weight".into(), Tensor::zeros(&[6, 3]).unwrap());
    let e = store
        .load(&kernels_core::io::save(&m).unwrap())
        .unwrap_err();
    assert_eq!(
        e,
        Error::ShapeMismatch {
            op: "ParamStore::load",
            lhs: vec![3, 6],
            rhs: vec![6, 3]
        }
    );
    assert_eq!(snapshot(&store), before);

    // A parameter of the wrong dtype.
    let mut m = full.clone();
    m.insert(
        "ln.bias".into(),
        Tensor::from_i32(&[6], vec![0; 6]).unwrap(),
    );
    assert!(matches!(
        store.load(&kernels_core::io::save(&m).unwrap()),
        Err(Error::DTypeMismatch { .. })
    ));
    assert_eq!(snapshot(&store), before);

    // A truncated file.
    assert!(matches!(
        store.load(&good[..good.len() - 5]),
        Err(Error::BadModelFile { .. })
    ));
    assert!(store.load(&[]).is_err());
    assert_eq!(snapshot(&store), before);

    // Extra tensors are ignored; the good file then loads.
    let mut m = now_or_never(other.to_host()).unwrap().unwrap();
    m.insert("unused".into(), Tensor::zeros(&[2]).unwrap());
    store.load(&kernels_core::io::save(&m).unwrap()).unwrap();
    assert_eq!(snapshot(&store), snapshot(&other));
    assert!(!store.contains("unused"));
}
