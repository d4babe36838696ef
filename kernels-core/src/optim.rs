//! Optimizers: `torch.optim.SGD` (momentum, weight decay, Nesterov) and `torch.optim.AdamW`.
//!
//! Each update is ONE fused op per parameter ([`Op::SgdStep`], [`Op::AdamwStep`]) on the
//! parameter store's backend, so training on the GPU moves nothing to the host. State (momentum
//! buffers; first and second moments) is kept per parameter name on the same device.
//!
//! A step is all-or-nothing: every new value is computed first and committed only when all
//! updates succeeded, so an error (a gradient of the wrong shape, a lost device) leaves the
//! parameters and the optimizer state as they were.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::autograd::Gradients;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::nn::ParamStore;
use crate::op::{
    ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, ADAMW_WEIGHT_DECAY, Direction, Op, SGD_MOMENTUM,
    SGD_NESTEROV, SGD_WEIGHT_DECAY,
};
use crate::tensor::Tensor;

fn check_grad(op: &'static str, name: &str, p: &Tensor, g: &Tensor) -> Result<()> {
    if p.shape() != g.shape() {
        return Err(Error::BadShape {
            op,
            tensor: format!("grad of {name}"),
            shape: g.shape().to_vec(),
            why: format!("parameter has shape {:?}", p.shape()),
        });
    }
    if g.device() != p.device() {
        return Err(Error::DeviceMismatch {
            op,
            expected: p.device().0,
            got: g.device().0,
        });
    }
    Ok(())
}

fn run_n<const N: usize>(backend: &dyn Backend, op: &Op, args: &[&Tensor]) -> Result<[Tensor; N]> {
    let outs = backend.run(op, Direction::Forward, args)?;
    let got = outs.len();
    outs.try_into().map_err(|_| Error::Autograd {
        why: format!("{}: expected {N} outputs, got {got}", op.name()),
    })
}

/// Stochastic gradient descent with momentum, as `torch.optim.SGD` (no dampening).
#[derive(Debug, Clone)]
pub struct Sgd {
    pub lr: f32,
    pub momentum: f32,
    pub weight_decay: f32,
    pub nesterov: bool,
    momentum_bufs: BTreeMap<String, Tensor>,
}

impl Sgd {
    /// Plain SGD (no momentum, no weight decay): `sgd_step`'s defaults.
    pub fn new(lr: f32) -> Sgd {
        Sgd {
            lr,
            momentum: SGD_MOMENTUM,
            weight_decay: SGD_WEIGHT_DECAY,
            nesterov: SGD_NESTEROV,
            momentum_bufs: BTreeMap::new(),
        }
    }
    /// Sets the momentum factor.
    pub fn momentum(mut self, momentum: f32) -> Sgd {
        self.momentum = momentum;
        self
    }
    /// Sets the L2 weight decay (added to the gradient, as in PyTorch's SGD).
    pub fn weight_decay(mut self, weight_decay: f32) -> Sgd {
        self.weight_decay = weight_decay;
        self
    }
    /// Uses Nesterov momentum.
    pub fn nesterov(mut self, nesterov: bool) -> Sgd {
        self.nesterov = nesterov;
        self
    }

    /// The momentum buffer of parameter `name`, once a step has made one.
    pub fn momentum_buffer(&self, name: &str) -> Option<&Tensor> {
        self.momentum_bufs.get(name)
    }

    /// Updates every parameter of `store` that has a gradient by name in `grads` (parameters
    /// without one are left alone, as PyTorch skips `grad is None`).
    pub fn step(&mut self, store: &mut ParamStore, grads: &Gradients) -> Result<()> {
        let backend = store.backend().clone();
        let op = Op::SgdStep {
            lr: self.lr,
            momentum: self.momentum,
            weight_decay: self.weight_decay,
            nesterov: self.nesterov,
        };
        let mut updates = Vec::new();
        for (name, p) in store.iter() {
            let Some(g) = grads.get_named(name) else {
                continue;
            };
            check_grad("sgd_step", name, p, g)?;
            let buf = match self.momentum_bufs.get(name) {
                Some(b) => b.clone(),
                None => backend.zeros(p.shape())?,
            };
            let [p_new, buf_new] = run_n::<2>(&*backend, &op, &[p, g, &buf])?;
            updates.push((name.clone(), p_new, buf_new));
        }
        for (name, p_new, buf_new) in updates {
            store.set(&name, p_new)?;
            self.momentum_bufs.insert(name, buf_new);
        }
        Ok(())
    }
}

/// AdamW (decoupled weight decay), as `torch.optim.AdamW`.
#[derive(Debug, Clone)]
pub struct AdamW {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// Steps taken so far (the next step is `step + 1`; bias correction counts from 1).
    pub step: u64,
    moments: BTreeMap<String, (Tensor, Tensor)>,
}

impl AdamW {
    /// `adamw_step`'s defaults, which are PyTorch's: betas (0.9, 0.999), eps 1e-8,
    /// weight_decay 0.01.
    pub fn new(lr: f32) -> AdamW {
        AdamW {
            lr,
            beta1: ADAMW_BETA1,
            beta2: ADAMW_BETA2,
            eps: ADAMW_EPS,
            weight_decay: ADAMW_WEIGHT_DECAY,
            step: 0,
            moments: BTreeMap::new(),
        }
    }
    /// Sets `(beta1, beta2)`.
    pub fn betas(mut self, beta1: f32, beta2: f32) -> AdamW {
        self.beta1 = beta1;
        self.beta2 = beta2;
        self
    }
    /// Sets eps.
    pub fn eps(mut self, eps: f32) -> AdamW {
        self.eps = eps;
        self
    }
    /// Sets the decoupled weight decay.
    pub fn weight_decay(mut self, weight_decay: f32) -> AdamW {
        self.weight_decay = weight_decay;
        self
    }

    /// The moments `(m, v)` of parameter `name`, once a step has made them.
    pub fn moments(&self, name: &str) -> Option<(&Tensor, &Tensor)> {
        self.moments.get(name).map(|(m, v)| (m, v))
    }

    /// One step over every parameter of `store` with a gradient by name in `grads`.
    pub fn step(&mut self, store: &mut ParamStore, grads: &Gradients) -> Result<()> {
        let backend = store.backend().clone();
        let step = self.step + 1;
        let op = Op::AdamwStep {
            lr: self.lr,
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.weight_decay,
            step,
        };
        let mut updates = Vec::new();
        for (name, p) in store.iter() {
            let Some(g) = grads.get_named(name) else {
                continue;
            };
            check_grad("adamw_step", name, p, g)?;
            let (m, v) = match self.moments.get(name) {
                Some((m, v)) => (m.clone(), v.clone()),
                None => (backend.zeros(p.shape())?, backend.zeros(p.shape())?),
            };
            let [p_new, m_new, v_new] = run_n::<3>(&*backend, &op, &[p, g, &m, &v])?;
            updates.push((name.clone(), p_new, m_new, v_new));
        }
        for (name, p_new, m_new, v_new) in updates {
            store.set(&name, p_new)?;
            self.moments.insert(name, (m_new, v_new));
        }
        self.step = step;
        Ok(())
    }
}
