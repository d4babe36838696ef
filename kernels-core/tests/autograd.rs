//! Autograd and nn layers, end to end (optimizers, training and ParamStore: `optim.rs`).
//!
//! Whole-graph gradient checks run on an **f64 test backend** (`f64_device`): a `Backend` whose
//! device buffers hold f64 and whose `run` is the reference `cpu::run::<f64>`. The graph code is
//! the very code that runs on a GPU (device tensors, `backend.zeros`, the `add` op for
//! accumulation), while f64 makes central differences with eps = 1e-6 trustworthy (rtol 1e-3, as
//! the op-level gradient checks). An f32 graph would need a large eps and loose tolerances that
//! could hide a wrong backward.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

// wasm-pack test runs these in the browser too.
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::rc::Rc;

use kernels_core::autograd::{Graph, Var};
use kernels_core::backend::{Backend, CpuBackend};
use kernels_core::nn::{Gru, LayerNorm, Linear, ParamStore};
use kernels_core::op::{LAYER_NORM_EPS, RMS_NORM_EPS, ROPE_THETA};
use kernels_core::tensor::Tensor;
use kernels_core::{Error, Result, Rng};

mod f64_device;
use f64_device::*;

#[test]
fn mlp_with_cross_entropy_matches_finite_differences() {
    let mut rng = Rng::new(1);
    let mut s = f64_store();
    let l1 = Linear::new(&mut s, "fc1", 7, 13, true, &mut rng).unwrap();
    let l2 = Linear::new(&mut s, "fc2", 13, 3, true, &mut rng).unwrap();
    let x = rng.normal_tensor(&[5, 1, 7], 0.0, 1.0).unwrap();
    let targets = Tensor::from_i64(&[5], vec![0, 2, 1, 2, 0]).unwrap();
    let f = |g: &Graph, p: &kernels_core::nn::Params| {
        let x = g.reshape(&constant(g, &x), &[5, 7])?;
        let h = g.relu(&l1.forward(g, p, &x)?)?;
        let logits = l2.forward(g, p, &h)?;
        g.cross_entropy(&logits, &constant(g, &targets))
    };
    let n = check_graph(&s, &f);
    assert_eq!(n, 40 + 13 + 39 + 3);
}

#[test]
fn gru_linear_mse_matches_finite_differences() {
    let mut rng = Rng::new(2);
    let mut s = f64_store();
    let gru = Gru::new(&mut s, "rnn", 5, 6, &mut rng).unwrap();
    let head = Linear::new(&mut s, "head", 6, 2, true, &mut rng).unwrap();
    let x = rng.normal_tensor(&[4, 3, 5], 0.0, 1.0).unwrap();
    let y = rng.normal_tensor(&[4, 3, 2], 0.0, 1.0).unwrap();
    let hy = rng.normal_tensor(&[3, 6], 0.0, 1.0).unwrap();
    // h_n unused: the op's backward gets zeros for it.
    let only_output = |g: &Graph, p: &kernels_core::nn::Params| {
        let (out, _h_n) = gru.forward(g, p, &constant(g, &x), None)?;
        g.mse(&head.forward(g, p, &out)?, &constant(g, &y))
    };
    assert!(check_graph(&s, &only_output) > 50);
    // Both outputs used.
    let both = |g: &Graph, p: &kernels_core::nn::Params| {
        let (out, h_n) = gru.forward(g, p, &constant(g, &x), None)?;
        let a = g.mse(&head.forward(g, p, &out)?, &constant(g, &y))?;
        let b = g.mse(&h_n, &constant(g, &hy))?;
        g.add(&a, &b)
    };
    assert!(check_graph(&s, &both) > 50);
}

#[test]
fn attention_with_shared_inputs_matches_finite_differences() {
    let mut rng = Rng::new(3);
    let mut s = f64_store();
    s.register("x", rng.normal_tensor(&[1, 2, 5, 4], 0.0, 1.0).unwrap())
        .unwrap();
    s.register("q", rng.normal_tensor(&[1, 4, 3, 4], 0.0, 1.0).unwrap())
        .unwrap();
    LayerNorm::new(&mut s, "ln", 4, LAYER_NORM_EPS).unwrap();
    let target = rng.normal_tensor(&[1, 2, 5, 4], 0.0, 1.0).unwrap();
    let target_q = rng.normal_tensor(&[1, 4, 3, 4], 0.0, 1.0).unwrap();
    // Self-attention with the same var as q, k and v, then a residual use of it again; plus
    // grouped-query attention whose shared kv var is also used twice.
    let f = |g: &Graph, p: &kernels_core::nn::Params| {
        let x = p.get("x")?;
        let a = g.attention(x, x, x, true, None)?;
        let r = g.add(&a, x)?;
        let n = g.layer_norm(&r, p.get("ln.weight")?, p.get("ln.bias")?, LAYER_NORM_EPS)?;
        let l1 = g.mse(&n, &constant(g, &target))?;
        let kv = g.rope(x, ROPE_THETA, 2, false)?;
        let b = g.attention(p.get("q")?, &kv, &kv, false, Some(0.7))?;
        let l2 = g.mse(&b, &constant(g, &target_q))?;
        g.add(&l1, &l2)
    };
    assert!(check_graph(&s, &f) > 60);
}

#[test]
fn value_used_several_times_accumulates_with_add() {
    // y = sum(x * x + x) -> dy/dx = 2x + 1, by hand.
    let b: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let g = Graph::new(b);
    let x = g
        .param(Tensor::from_f32(&[3], vec![1.0, -2.0, 0.5]).unwrap())
        .unwrap();
    let y = g.sum(&g.add(&g.mul(&x, &x).unwrap(), &x).unwrap()).unwrap();
    assert!((y.tensor().to_scalar().unwrap() - (1.0 + 1.0 + 4.0 - 2.0 + 0.25 + 0.5)).abs() < 1e-6);
    let grads = g.backward(&y).unwrap();
    assert_eq!(
        grads.get(&x).unwrap().to_f32_vec().unwrap(),
        vec![3.0, -3.0, 2.0]
    );
    // backward_with: a seed gradient of 2 doubles everything.
    let grads2 = g
        .backward_with(&y, Tensor::full(y.shape(), 2.0).unwrap())
        .unwrap();
    assert_eq!(
        grads2.get(&x).unwrap().to_f32_vec().unwrap(),
        vec![6.0, -6.0, 4.0]
    );
}

#[test]
fn reshape_backward_restores_the_shape() {
    let b: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let g = Graph::new(b);
    let x = g
        .param(Tensor::from_f32(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap())
        .unwrap();
    let r = g.reshape(&x, &[6]).unwrap();
    assert_eq!(r.shape(), &[6]);
    let y = g.sum(&g.scale(&r, 3.0).unwrap()).unwrap();
    let gx = g.backward(&y).unwrap();
    let gx = gx.get(&x).unwrap();
    assert_eq!(gx.shape(), &[2, 3]);
    assert_eq!(gx.to_f32_vec().unwrap(), vec![3.0; 6]);
    assert!(matches!(
        g.reshape(&x, &[4]),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn backward_runs_only_on_paths_from_params_to_the_loss() {
    let backend = Rc::new(F64Backend::default());
    let g = Graph::new(backend.clone());
    let p = g
        .param(f64_tensor(&[2, 3], vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6]))
        .unwrap();
    let c = g
        .constant(f64_tensor(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
        .unwrap();
    let cc = g.mul(&c, &c).unwrap(); // constants only: not recorded
    assert!(!cc.requires_grad());
    let pc = g.mul(&p, &cc).unwrap(); // on the path
    let _side = g.exp(&p).unwrap(); // recorded, but does not lead to the loss
    let loss = g.sum(&g.sum(&pc).unwrap()).unwrap();
    assert_eq!(g.tape_len(), 4);
    let grads = g.backward(&loss).unwrap();
    assert_eq!(backend.backward_runs.get(), 3); // sum, sum, mul; not exp
    assert_eq!(f64_read(grads.get(&p).unwrap()), f64_read(cc.tensor()));
    assert!(grads.get(&c).is_none());
    assert_eq!(grads.len(), 1);
    // argmax has no gradient: its output does not require one.
    let am = g.argmax(&p).unwrap();
    assert!(!am.requires_grad());
    // A loss that does not depend on any parameter: no gradients, no backward runs.
    let closs = g.sum(&g.sum(&cc).unwrap()).unwrap();
    assert!(g.backward(&closs).unwrap().is_empty());
    assert_eq!(backend.backward_runs.get(), 3);
    // A loss with more than one element needs a seed.
    assert!(matches!(g.backward(&pc), Err(Error::Autograd { .. })));
}

#[test]
fn inference_mode_records_nothing() {
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let mut rng = Rng::new(5);
    let mut s = ParamStore::new(backend.clone());
    let lin = Linear::new(&mut s, "fc", 4, 3, true, &mut rng).unwrap();
    let x = rng.normal_tensor(&[2, 4], 0.0, 1.0).unwrap();

    let gi = Graph::inference(backend.clone());
    let pi = s.bind(&gi).unwrap();
    let yi = lin
        .forward(&gi, &pi, &gi.constant(x.clone()).unwrap())
        .unwrap();
    let li = gi.sum(&gi.sum(&yi).unwrap()).unwrap();
    assert_eq!(gi.tape_len(), 0);
    assert!(!gi.is_recording());
    assert!(pi.iter().all(|(_, v)| !v.requires_grad()));
    assert!(matches!(gi.backward(&li), Err(Error::Autograd { .. })));

    let g = Graph::new(backend);
    let p = s.bind(&g).unwrap();
    let y = lin.forward(&g, &p, &g.constant(x).unwrap()).unwrap();
    let l = g.sum(&g.sum(&y).unwrap()).unwrap();
    assert_eq!(g.tape_len(), 3); // linear, sum, sum
    assert!(y.tensor().bit_eq(yi.tensor()));
    assert!(l.tensor().bit_eq(li.tensor()));
}

#[test]
fn mixing_devices_is_an_error() {
    // A CPU graph refuses a tensor on the (fake) f64 device, and vice versa.
    let cpu: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let g = Graph::new(cpu.clone());
    let dev = f64_tensor(&[2], vec![1.0, 2.0]);
    let e = g.param(dev.clone()).unwrap_err();
    assert_eq!(
        e,
        Error::DeviceMismatch {
            op: "param",
            expected: 0,
            got: 64
        }
    );
    assert!(matches!(g.constant(dev), Err(Error::DeviceMismatch { .. })));
    let gf = Graph::new(Rc::new(F64Backend::default()));
    assert!(matches!(
        gf.constant(Tensor::zeros(&[2]).unwrap()),
        Err(Error::DeviceMismatch { op: "constant", .. })
    ));
    // A seed gradient from the wrong device.
    let x = gf.param(f64_tensor(&[1], vec![1.0])).unwrap();
    let y = gf.exp(&x).unwrap();
    assert!(matches!(
        gf.backward_with(&y, Tensor::full(&[1], 1.0).unwrap()),
        Err(Error::DeviceMismatch { .. })
    ));
    // A store on one device refuses tensors of another.
    let mut s = ParamStore::new(cpu.clone());
    assert!(matches!(
        s.insert("w", f64_tensor(&[1], vec![0.0])),
        Err(Error::DeviceMismatch { .. })
    ));
    // A var from another graph is refused too (it would index the wrong tape).
    let g2 = Graph::new(cpu);
    let v = g2.param(Tensor::zeros(&[2]).unwrap()).unwrap();
    assert!(matches!(g.neg(&v), Err(Error::Autograd { .. })));
}

/// Loss of a small linear regression `mean((x w^T + b - y)^2)` over rows `rows` of the data.
fn regression_loss(
    g: &Graph,
    s: &ParamStore,
    lin: &Linear,
    x: &[f32],
    y: &[f32],
    rows: std::ops::Range<usize>,
) -> Var {
    let n = rows.len();
    let xs = Tensor::from_f32(&[n, 3], x[rows.start * 3..rows.end * 3].to_vec()).unwrap();
    let ys = Tensor::from_f32(&[n, 2], y[rows.start * 2..rows.end * 2].to_vec()).unwrap();
    let p = s.bind(g).unwrap();
    let out = lin.forward(g, &p, &constant(g, &xs)).unwrap();
    g.mse(&out, &constant(g, &ys)).unwrap()
}

#[test]
fn gradients_accumulate_across_micro_batches() {
    let mut rng = Rng::new(8);
    let mut s = f64_store();
    let lin = Linear::new(&mut s, "fc", 3, 2, true, &mut rng).unwrap();
    let x = rng.normal_vec(8 * 3, 0.0, 1.0);
    let y = rng.normal_vec(8 * 2, 0.0, 1.0);
    let backend = s.backend().clone();

    let g = Graph::new(backend.clone());
    let full = g
        .backward(&regression_loss(&g, &s, &lin, &x, &y, 0..8))
        .unwrap();

    // Two halves on two graphs; mse means over each half, so the mean of the two is the full.
    let mut acc = kernels_core::autograd::Gradients::new(backend.clone());
    for r in [0..4, 4..8] {
        let g = Graph::new(backend.clone());
        acc.accumulate(
            &g.backward(&regression_loss(&g, &s, &lin, &x, &y, r))
                .unwrap(),
        )
        .unwrap();
    }
    acc.scale(0.5).unwrap();
    assert_eq!(acc.named().len(), 2);
    for (name, gf) in full.named() {
        let a = f64_read(acc.get_named(name).unwrap());
        let f = f64_read(gf);
        for (a, f) in a.iter().zip(&f) {
            assert!((a - f).abs() < 1e-12, "{name}: {a} vs {f}");
        }
    }
    // Accumulating a pass that touched different parameters keeps both.
    let mut s2 = f64_store();
    s2.register("other", Tensor::full(&[1], 1.0).unwrap())
        .unwrap();
    let g2 = Graph::new(backend.clone());
    let p2 = s2.bind(&g2).unwrap();
    let l2 = g2.sum(&g2.exp(p2.get("other").unwrap()).unwrap()).unwrap();
    acc.accumulate(&g2.backward(&l2).unwrap()).unwrap();
    assert_eq!(acc.named().len(), 3);
    // Gradients from another device are refused.
    let cpu_grads = kernels_core::autograd::Gradients::new(Rc::new(CpuBackend::new()));
    assert!(matches!(
        acc.accumulate(&cpu_grads),
        Err(Error::DeviceMismatch { .. })
    ));
}

fn dot_loss(g: &Graph, v: &Var, seed: u64) -> Result<Var> {
    let n = v.tensor().numel();
    let flat = g.reshape(v, &[1, n])?;
    let w = Rng::new(seed).normal_tensor(&[n, 1], 0.0, 1.0)?;
    g.matmul(&flat, &constant(g, &w))
}

#[test]
fn gru_attention_rope_layer_norm_gelu_composite_matches_finite_differences() {
    let mut rng = Rng::new(2);
    let mut s = f64_store();
    let gru = Gru::new(&mut s, "rnn", 5, 6, &mut rng).unwrap();
    let head = Linear::new(&mut s, "head", 6, 2, true, &mut rng).unwrap();
    s.register("x", rng.normal_tensor(&[1, 2, 5, 4], 0.0, 1.0).unwrap())
        .unwrap();
    LayerNorm::new(&mut s, "ln", 4, LAYER_NORM_EPS).unwrap();
    let x = rng.normal_tensor(&[4, 3, 5], 0.0, 1.0).unwrap();
    let f = |g: &Graph, p: &kernels_core::nn::Params| {
        let (out, _h_n) = gru.forward(g, p, &constant(g, &x), None)?;
        let o = head.forward(g, p, &out)?;
        let l1 = dot_loss(g, &o, 1)?;
        let xa = p.get("x")?;
        let a = g.attention(xa, xa, xa, true, None)?;
        let r = g.add(&a, xa)?;
        let n = g.layer_norm(&r, p.get("ln.weight")?, p.get("ln.bias")?, LAYER_NORM_EPS)?;
        let kv = g.rope(xa, ROPE_THETA, 2, false)?;
        let b = g.attention(xa, &kv, &kv, false, Some(0.7))?;
        let l2 = dot_loss(g, &n, 2)?;
        let l3 = dot_loss(g, &g.gelu(&b)?, 3)?;
        g.add(&g.add(&l1, &l2)?, &l3)
    };
    assert!(check_graph(&s, &f) > 60);
}

#[test]
fn embedding_rms_norm_and_the_remaining_ops_match_finite_differences() {
    use kernels_core::nn::{Embedding, RmsNorm};
    let mut rng = Rng::new(4);
    let mut s = f64_store();
    let emb = Embedding::new(&mut s, "tok", 11, 4, &mut rng).unwrap();
    let norm = RmsNorm::new(&mut s, "norm", 4, RMS_NORM_EPS).unwrap();
    s.register("w", rng.normal_tensor(&[8], 0.0, 1.0).unwrap())
        .unwrap();
    // Token 3 appears twice: its embedding row gets two contributions.
    let ids = Tensor::from_i32(&[2, 5], vec![3, 1, 4, 1, 5, 9, 2, 6, 3, 10]).unwrap();
    let f = |g: &Graph, p: &kernels_core::nn::Params| {
        let e = emb.forward(g, p, &constant(g, &ids))?; // [2, 5, 4]
        let n = norm.forward(g, p, &e)?;
        let scores = g.matmul_t(&n, &n, false, true)?; // [2, 5, 5], n used twice
        let attn = g.softmax(&scores, true)?;
        let a = g.matmul(&attn, &n)?; // [2, 5, 4]
        let c = g.concat(&a, &g.silu(&n)?)?; // [2, 5, 8]
        let c = g.mul(&c, p.get("w")?)?; // broadcast [8]
        let t = g.transpose(&g.tanh(&c)?)?; // [2, 8, 5]
        let m = g.max(&t)?; // [2, 8]
        let me = g.mean(&g.sigmoid(&t)?)?; // [2, 8]
        let d = g.div(&m, &g.sqrt(&g.exp(&me)?)?)?;
        let l = g.sub(&d, &g.log(&g.add(&me, &me)?)?)?;
        let ls = g.log_softmax(&g.neg(&g.scale(&l, 0.5)?)?, false)?;
        g.sum(&g.sum(&ls)?)
    };
    assert!(check_graph(&s, &f) > 40);
}
