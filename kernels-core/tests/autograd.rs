//! Autograd, nn layers and optimizers, end to end.
//!
//! Whole-graph gradient checks run on an **f64 test backend**: a `Backend` whose device buffers
//! hold f64 and whose `run` is the reference `cpu::run::<f64>`. The graph code is the very code
//! that runs on a GPU (device tensors, `backend.zeros`, the `add` op for accumulation), while
//! f64 makes central differences with eps = 1e-6 trustworthy (rtol 1e-3, as the op-level
//! gradient checks). An f32 graph would need a large eps and loose tolerances that could hide
//! a wrong backward.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may unwrap

// wasm-pack test runs these in the browser too.
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::any::Any;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use kernels_core::autograd::{Graph, Var};
use kernels_core::backend::{Backend, CpuBackend, LocalBoxFuture, now_or_never};
use kernels_core::cpu::{self, Data, OwnedData, View};
use kernels_core::nn::{Gru, LayerNorm, Linear, ParamStore};
use kernels_core::op::{Direction, LAYER_NORM_EPS, Op, RMS_NORM_EPS, ROPE_THETA};
use kernels_core::optim::{AdamW, Sgd};
use kernels_core::tensor::{DType, DeviceBuffer, DeviceId, Storage, Tensor};
use kernels_core::{Error, Result, Rng};

// ---------------------------------------------------------------------------------------------
// An f64 "device".

const F64_DEVICE: DeviceId = DeviceId(64);

#[derive(Debug)]
enum Buf {
    F(Vec<f64>),
    I(Vec<i32>),
}

#[derive(Debug)]
struct F64Buf(Buf);

impl DeviceBuffer for F64Buf {
    fn device(&self) -> DeviceId {
        F64_DEVICE
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn buf(t: &Tensor) -> Result<&Buf> {
    let b = t.device_buffer().ok_or(Error::DeviceMismatch {
        op: "f64 backend",
        expected: F64_DEVICE.0,
        got: 0,
    })?;
    let b = b
        .as_any()
        .downcast_ref::<F64Buf>()
        .ok_or(Error::DeviceMismatch {
            op: "f64 backend",
            expected: F64_DEVICE.0,
            got: b.device().0,
        })?;
    Ok(&b.0)
}

fn f64_tensor(shape: &[usize], v: Vec<f64>) -> Tensor {
    assert_eq!(shape.iter().product::<usize>(), v.len());
    Tensor::from_device(shape, DType::F32, Arc::new(F64Buf(Buf::F(v))))
}

fn f64_read(t: &Tensor) -> Vec<f64> {
    match buf(t).unwrap() {
        Buf::F(v) => v.clone(),
        Buf::I(_) => panic!("integer tensor"),
    }
}

/// The reference kernels in f64 on device tensors, counting backward runs.
#[derive(Default)]
struct F64Backend {
    backward_runs: Cell<usize>,
}

impl Backend for F64Backend {
    fn name(&self) -> String {
        "f64-test".into()
    }
    fn device(&self) -> DeviceId {
        F64_DEVICE
    }
    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        let b = match t.storage() {
            Storage::F32(v) => Buf::F(v.iter().map(|&x| x as f64).collect()),
            Storage::I32(v) => Buf::I(v.to_vec()),
            Storage::I64(v) => Buf::I(v.iter().map(|&x| x as i32).collect()),
            Storage::Packed(_) => {
                return Err(Error::UnsupportedOnBackend {
                    op: "upload",
                    backend: "f64-test".into(),
                });
            }
            Storage::Device(_) => return Err(Error::NotOnHost { op: "upload" }),
        };
        Ok(Tensor::from_device(
            t.shape(),
            t.dtype(),
            Arc::new(F64Buf(b)),
        ))
    }
    fn download<'a>(&'a self, t: &'a Tensor) -> LocalBoxFuture<'a, Result<Tensor>> {
        let r = buf(t).and_then(|b| match b {
            Buf::F(v) => Tensor::from_f32(t.shape(), v.iter().map(|&x| x as f32).collect()),
            Buf::I(v) => match t.dtype() {
                DType::I64 => Tensor::from_i64(t.shape(), v.iter().map(|&x| x as i64).collect()),
                _ => Tensor::from_i32(t.shape(), v.clone()),
            },
        });
        Box::pin(std::future::ready(r))
    }
    fn run(&self, op: &Op, dir: Direction, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        if dir == Direction::Backward {
            self.backward_runs.set(self.backward_runs.get() + 1);
        }
        let views = inputs
            .iter()
            .map(|t| {
                Ok(View {
                    shape: t.shape(),
                    data: match buf(t)? {
                        Buf::F(v) => Data::Float(v.as_slice()),
                        Buf::I(v) => Data::I32(v.as_slice()),
                    },
                })
            })
            .collect::<Result<Vec<View<f64>>>>()?;
        let outs = cpu::run::<f64>(op, dir, &views)?;
        Ok(outs
            .into_iter()
            .map(|o| match o.data {
                OwnedData::Float(v) => {
                    Tensor::from_device(&o.shape, DType::F32, Arc::new(F64Buf(Buf::F(v))))
                }
                OwnedData::I32(v) => {
                    Tensor::from_device(&o.shape, DType::I32, Arc::new(F64Buf(Buf::I(v))))
                }
            })
            .collect())
    }
}

// ---------------------------------------------------------------------------------------------
// Whole-graph finite differences.

/// Checks `g.backward(loss)` for every parameter of `store` against central differences of the
/// whole graph `f` (evaluated in inference mode), on the f64 backend. Returns how many elements
/// were checked.
fn check_graph(
    store: &ParamStore,
    f: &dyn Fn(&Graph, &kernels_core::nn::Params) -> Result<Var>,
) -> usize {
    let backend = store.backend().clone();
    let g = Graph::new(backend.clone());
    let p = store.bind(&g).unwrap();
    let loss = f(&g, &p).unwrap();
    let grads = g.backward(&loss).unwrap();
    let eps = 1e-6;
    let mut rng = Rng::new(11);
    let mut checked = 0;
    for (name, t) in store.iter() {
        let base = f64_read(t);
        let analytic = match grads.get_named(name) {
            Some(a) => f64_read(a),
            None => vec![0.0; base.len()],
        };
        assert_eq!(analytic.len(), base.len(), "{name}");
        let picks: Vec<usize> = if base.len() <= 40 {
            (0..base.len()).collect()
        } else {
            (0..40)
                .map(|_| rng.below(base.len() as u64) as usize)
                .collect()
        };
        for e in picks {
            let eval = |x: f64| {
                let mut s = store.clone();
                let mut v = base.clone();
                v[e] = x;
                s.set(name, f64_tensor(t.shape(), v)).unwrap();
                let gi = Graph::inference(backend.clone());
                let pi = s.bind(&gi).unwrap();
                f64_read(f(&gi, &pi).unwrap().tensor())[0]
            };
            let numeric = (eval(base[e] + eps) - eval(base[e] - eps)) / (2.0 * eps);
            let a = analytic[e];
            assert!(
                (a - numeric).abs() <= 1e-6 + 1e-3 * numeric.abs(),
                "{name}[{e}]: analytic {a} vs numeric {numeric}"
            );
            checked += 1;
        }
    }
    checked
}

fn f64_store() -> ParamStore {
    ParamStore::new(Rc::new(F64Backend::default()))
}

fn constant(g: &Graph, t: &Tensor) -> Var {
    g.constant(g.backend().upload(t).unwrap()).unwrap()
}

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
