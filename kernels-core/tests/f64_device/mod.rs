//! The f64 test "device" the whole-graph gradient checks run on (`autograd.rs`, `optim.rs`):
//! a `Backend` whose device buffers hold f64 and whose `run` is the reference
//! `cpu::run::<f64>`, and the helpers around it.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use kernels_core::autograd::{Graph, Var};
use kernels_core::backend::{Backend, LocalBoxFuture};
use kernels_core::cpu::{self, Data, OwnedData, View};
use kernels_core::nn::ParamStore;
use kernels_core::op::{Direction, Op};
use kernels_core::tensor::{DType, DeviceBuffer, DeviceId, Storage, Tensor};
use kernels_core::{Error, Result, Rng};
use std::any::Any;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// An f64 "device".

pub const F64_DEVICE: DeviceId = DeviceId(64);

#[derive(Debug)]
pub enum Buf {
    F(Vec<f64>),
    I(Vec<i32>),
}

#[derive(Debug)]
pub struct F64Buf(pub Buf);

impl DeviceBuffer for F64Buf {
    fn device(&self) -> DeviceId {
        F64_DEVICE
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

pub fn buf(t: &Tensor) -> Result<&Buf> {
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

pub fn f64_tensor(shape: &[usize], v: Vec<f64>) -> Tensor {
    assert_eq!(shape.iter().product::<usize>(), v.len());
    Tensor::from_device(shape, DType::F32, Arc::new(F64Buf(Buf::F(v))))
}

pub fn f64_read(t: &Tensor) -> Vec<f64> {
    match buf(t).unwrap() {
        Buf::F(v) => v.clone(),
        Buf::I(_) => panic!("integer tensor"),
    }
}

/// The reference kernels in f64 on device tensors, counting backward runs.
#[derive(Default)]
pub struct F64Backend {
    pub backward_runs: Cell<usize>,
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
pub fn check_graph(
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

pub fn f64_store() -> ParamStore {
    ParamStore::new(Rc::new(F64Backend::default()))
}

pub fn constant(g: &Graph, t: &Tensor) -> Var {
    g.constant(g.backend().upload(t).unwrap()).unwrap()
}
