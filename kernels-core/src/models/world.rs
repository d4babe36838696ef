//! A compact RSSM-style world model: it learns the dynamics of a simulated system ([`sim`], a
//! damped double pendulum seen through 64 features) and predicts it several steps ahead, with an
//! ensemble for uncertainty. Written once over [`Graph`], so it runs (and trains) unchanged on
//! every backend.
//!
//! ```text
//! s0 [B, F]  --encoder: Linear F -> E, ReLU-->  z [B, E]
//! all members e of M together, their parameters stacked on a leading member axis:
//!   h0     = tanh(init(z))                         [M, B, H]    the initial hidden states
//!   x      = z repeated over members and steps     [M, N, B, E] the GRUs' input at every step
//!   out    = GRU(x, h0)                            [M, N, B, H] one gru_ensemble op: all N steps
//!   pred   = s0 + readout(out)                     [M, N, B, F] the state features at t = 1..N
//! ensemble mean and spread (std over the members) per step and feature
//! ```
//!
//! Why this shape:
//! - The GRU's input is the encoded initial state at every step, known before the rollout
//!   starts: the input projections of all steps and members are then one batched matmul up
//!   front (inside `gru_ensemble`), and each step costs only the recurrent product of all
//!   members (one batched matmul) and the gate kernel of all members: 2 dispatches per step of
//!   the whole ensemble on wgpu (2 launches on CUDA), whatever the number of members
//!   ([`ensemble`]). The model is an open-loop decoder: it does not feed its own predictions
//!   back, so errors do not compound through re-encoding, and the whole rollout stays on the
//!   device. `z` at every step keeps the initial condition in view while `h` carries the
//!   evolving state.
//! - The readout predicts the change from `s0`: a zero readout is the persistence baseline
//!   ("no change"), which the model must beat.
//! - Members differ by initialization only and train on the same batches (a deep ensemble);
//!   their disagreement is the uncertainty estimate. The store keeps each member's tensors
//!   (the names below); the rollout stacks them ([`WorldModel::stack`], differentiable, or
//!   [`WorldModel::stacked_weights`] once for inference). [`WorldModel::rollout_per_member`]
//!   is the same rollout member by member (one `gru_sequence` each), the reference the stacked
//!   one is tested against.
//!
//! Residual compression ([`residual_svd`], [`apply_correction`], [`compress_residuals`]): the
//! residuals `pred - truth`, as a `[N * B, F]` matrix, are compressed by `svd_lowrank` to rank k
//! (`u [N*B, k]`, `s [k]`, `v [F, k]`: `k (N*B + F + 1)` numbers instead of `N*B*F`). The
//! prediction plus the decoded residual is the correction: `pred - u diag(s) v^T`, whose error
//! against the truth is the compression's reconstruction error. In other words the world model
//! is the predictor of a codec for trajectories, and the low-rank residual is what one stores
//! or sends to recover the truth to that error.
//!
//! Parameter names (PyTorch style, `state_dict`-like): `encoder.{weight,bias}`,
//! `members.{e}.init.{weight,bias}`, `members.{e}.gru.{weight_ih_l0,weight_hh_l0,bias_ih_l0,
//! bias_hh_l0}`, `members.{e}.readout.{weight,bias}`.

pub mod ensemble;
pub mod sim;

pub use ensemble::{Ensemble, EnsembleWeights};

use alloc::format;
use alloc::rc::Rc;
use alloc::vec::Vec;

use crate::autograd::{Graph, Var};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::nn::{Gru, Linear, ParamStore, Params};
use crate::op::{Activation, Op, SVD_POWER_ITERS};
use crate::optim::AdamW;
use crate::rng::Rng;
use crate::tensor::Tensor;

/// Sizes of a [`WorldModel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorldConfig {
    /// State features per step (the encoder's input and the readout's output).
    pub features: usize,
    /// Encoded state width (the GRU's input).
    pub embed: usize,
    /// GRU hidden size.
    pub hidden: usize,
    /// Ensemble members.
    pub members: usize,
}

impl WorldConfig {
    /// The shipped model: 64 features, encoder 64 -> 128, 5 GRUs of hidden 256.
    pub const DEFAULT: WorldConfig = WorldConfig {
        features: sim::FEATURES,
        embed: 128,
        hidden: 256,
        members: 5,
    };
}

impl Default for WorldConfig {
    fn default() -> Self {
        WorldConfig::DEFAULT
    }
}

/// One ensemble member: the initial-state head, the GRU and the readout.
#[derive(Debug, Clone)]
pub struct Member {
    pub init: Linear,
    pub gru: Gru,
    pub readout: Linear,
}

/// The world model. Its parameters live in a [`ParamStore`]; see the module docs.
#[derive(Debug, Clone)]
pub struct WorldModel {
    pub config: WorldConfig,
    pub encoder: Linear,
    pub members: Vec<Member>,
}

/// A rollout: every member's predictions, stacked `[members, steps, batch, features]`.
#[derive(Debug, Clone)]
pub struct Rollout {
    pub stacked: Var,
}

impl Rollout {
    /// The number of members.
    pub fn members(&self) -> usize {
        self.stacked.shape().first().copied().unwrap_or(0)
    }
    /// Every member's predictions `[steps, batch, features]` on the host, in one download.
    pub async fn download_members(&self, backend: &dyn Backend) -> Result<Vec<Tensor>> {
        let all = backend.download(self.stacked.tensor()).await?;
        let shape = all.shape().get(1..).unwrap_or(&[]).to_vec();
        let v = all.as_f32()?;
        let per = v.len() / self.members().max(1);
        v.chunks_exact(per.max(1))
            .map(|m| Tensor::from_f32(&shape, m.to_vec()))
            .collect()
    }
}

impl WorldModel {
    /// Registers every parameter in `store` with PyTorch's default initialization.
    pub fn new(store: &mut ParamStore, config: WorldConfig, rng: &mut Rng) -> Result<WorldModel> {
        let WorldConfig {
            features,
            embed,
            hidden,
            members,
        } = config;
        if members == 0 {
            return Err(Error::Empty {
                op: "WorldModel",
                tensor: "members".into(),
            });
        }
        let encoder = Linear::new(store, "encoder", features, embed, true, rng)?;
        let members = (0..members)
            .map(|e| {
                let prefix = format!("members.{e}");
                Ok(Member {
                    init: Linear::new(store, &format!("{prefix}.init"), embed, hidden, true, rng)?,
                    gru: Gru::new(store, &format!("{prefix}.gru"), embed, hidden, rng)?,
                    readout: Linear::new(
                        store,
                        &format!("{prefix}.readout"),
                        hidden,
                        features,
                        true,
                        rng,
                    )?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(WorldModel {
            config,
            encoder,
            members,
        })
    }

    /// Loads a model from a safetensors file's bytes onto `backend`, its sizes read off the
    /// tensors' shapes ([`WorldConfig::infer`]). Errors name the missing or misshapen tensor.
    pub fn load(backend: Rc<dyn Backend>, bytes: &[u8]) -> Result<(WorldModel, ParamStore)> {
        let host = crate::io::load(bytes)?;
        let config = WorldConfig::infer(&host)?;
        let mut store = ParamStore::new(backend);
        // The initialization is overwritten by the file: its seed does not matter.
        let model = WorldModel::new(&mut store, config, &mut Rng::new(0))?;
        store.load_map(&host)?;
        Ok((model, store))
    }

    fn check_state(&self, what: &str, shape: &[usize]) -> Result<usize> {
        match shape {
            [b, f] if *f == self.config.features && *b > 0 => Ok(*b),
            _ => Err(Error::bad_shape(
                "WorldModel",
                what,
                shape,
                format!("expected [batch, {}]", self.config.features),
            )),
        }
    }

    /// State encoder: s `[batch, features]` -> `relu(s W^T + b)` `[batch, embed]`.
    pub fn encode(&self, g: &Graph, p: &Params, s: &Var) -> Result<Var> {
        self.check_state("s0", s.shape())?;
        self.encoder.forward_act(g, p, s, Activation::Relu)
    }

    /// Rolls every member `steps` steps ahead from the encoded state `z` of `s0`, all members
    /// together ([`WorldModel::stack`] then [`WorldModel::rollout_ensemble`]). Predictions are
    /// for t = 1..=steps.
    pub fn rollout_from(
        &self,
        g: &Graph,
        p: &Params,
        s0: &Var,
        z: &Var,
        steps: usize,
    ) -> Result<Rollout> {
        self.check_state("s0", s0.shape())?;
        let e = self.stack(g, p)?;
        self.rollout_ensemble(g, &e, s0, z, steps)
    }

    /// The rollout member by member (one `gru_sequence` per member, each `[steps, batch,
    /// features]`): the reference [`WorldModel::rollout_from`] is tested against.
    pub fn rollout_per_member(
        &self,
        g: &Graph,
        p: &Params,
        s0: &Var,
        steps: usize,
    ) -> Result<Vec<Var>> {
        let z = self.encode(g, p, s0)?;
        let batch = self.check_state("s0", s0.shape())?;
        let WorldConfig {
            features,
            embed,
            hidden,
            ..
        } = self.config;
        if steps == 0 {
            return Err(Error::Empty {
                op: "WorldModel::rollout",
                tensor: "steps".into(),
            });
        }
        // z at every step: a broadcast add onto zeros (the add's backward sums the steps).
        let zeros = g.constant(g.backend().zeros(&[steps, batch, embed])?)?;
        let x = g.add(&zeros, &z)?;
        self.members
            .iter()
            .map(|m| {
                let h0 = m.init.forward_act(g, p, &z, Activation::Tanh)?;
                let (out, _h_n) = m.gru.forward(g, p, &x, Some(&h0))?;
                let flat = g.reshape(&out, &[steps * batch, hidden])?;
                let delta = m.readout.forward(g, p, &flat)?;
                let delta = g.reshape(&delta, &[steps, batch, features])?;
                g.add(&delta, s0)
            })
            .collect()
    }

    /// [`WorldModel::encode`] then [`WorldModel::rollout_from`].
    pub fn rollout(&self, g: &Graph, p: &Params, s0: &Var, steps: usize) -> Result<Rollout> {
        let z = self.encode(g, p, s0)?;
        self.rollout_from(g, p, s0, &z, steps)
    }

    /// Training loss: the mean over members of each member's MSE against `truth`
    /// `[steps, batch, features]` (each member learns on its own, as in a deep ensemble).
    pub fn loss(&self, g: &Graph, p: &Params, s0: &Var, truth: &Var) -> Result<Var> {
        let steps = match truth.shape() {
            [n, b, f] if [*b, *f] == s0.shape() => *n,
            s => {
                return Err(Error::mismatch("WorldModel::loss", s0.shape(), s));
            }
        };
        let roll = self.rollout(g, p, s0, steps)?;
        // Every member has as many predictions: the mean of the members' MSEs is the MSE of
        // the stacked predictions against the truth repeated per member.
        let zeros = g.constant(g.backend().zeros(roll.stacked.shape())?)?;
        let truth = g.add(&zeros, truth)?;
        g.mse(&roll.stacked, &truth)
    }

    /// One BPTT step with AdamW: forward, backward through the whole rollout, update. Returns
    /// the loss (a device scalar; reading it is the caller's choice).
    pub fn train_step(
        &self,
        store: &mut ParamStore,
        opt: &mut AdamW,
        s0: &Tensor,
        truth: &Tensor,
    ) -> Result<Tensor> {
        let backend = store.backend().clone();
        let g = Graph::new(backend.clone());
        let p = store.bind(&g)?;
        let s0 = g.constant(backend.upload(s0)?)?;
        let truth = g.constant(backend.upload(truth)?)?;
        let loss = self.loss(&g, &p, &s0, &truth)?;
        let grads = g.backward(&loss)?;
        opt.step(store, &grads)?;
        Ok(loss.tensor().clone())
    }
}

/// Ensemble mean and spread (population std over the members), each `[steps, batch, features]`.
pub fn ensemble_stats(g: &Graph, roll: &Rollout) -> Result<(Var, Var)> {
    let shape = roll.stacked.shape().to_vec();
    let (members, per) = match shape.split_first() {
        Some((&m, rest)) if m > 0 && !rest.is_empty() => (m, rest.to_vec()),
        _ => {
            return Err(Error::Empty {
                op: "ensemble_stats",
                tensor: "members".into(),
            });
        }
    };
    let n: usize = per.iter().product();
    // The mean over the leading axis: [M, n] -> [n, M] -> mean over the last dim.
    let over_members = |v: &Var| -> Result<Var> {
        let flat = g.reshape(v, &[members, n])?;
        let m = g.mean(&g.transpose(&flat)?)?;
        g.reshape(&m, &per)
    };
    let mean = over_members(&roll.stacked)?;
    let d = g.sub(&roll.stacked, &mean)?;
    let var = over_members(&g.mul(&d, &d)?)?;
    let spread = g.sqrt(&var)?;
    Ok((mean, spread))
}

/// The rank-k factors of the residual matrix `pred - truth` (`[N, B, F]` each, viewed as
/// `[N * B, F]`): `(u [N*B, rank], s [rank], v [F, rank])`; a rank above `min(N*B, F)` is an error.
pub fn residual_svd(
    g: &Graph,
    pred: &Var,
    truth: &Var,
    rank: usize,
    seed: u64,
) -> Result<(Var, Var, Var)> {
    if pred.shape() != truth.shape() {
        return Err(Error::mismatch("residual_svd", pred.shape(), truth.shape()));
    }
    let (rows, cols) = matrix_dims("residual_svd", pred.shape())?;
    let r = g.sub(pred, truth)?;
    let r = g.reshape(&r, &[rows, cols])?;
    let op = Op::SvdLowrank {
        rank,
        power_iters: SVD_POWER_ITERS,
        seed,
    };
    let mut outs = g.apply(&op, &[&r])?.into_iter();
    match (outs.next(), outs.next(), outs.next()) {
        (Some(u), Some(s), Some(v)) => Ok((u, s, v)),
        _ => Err(Error::Autograd {
            why: "svd_lowrank: expected three outputs".into(),
        }),
    }
}

/// `[..., F]` as `(prod(...), F)`.
fn matrix_dims(op: &'static str, shape: &[usize]) -> Result<(usize, usize)> {
    match shape.split_last() {
        Some((&cols, lead)) if !lead.is_empty() => Ok((lead.iter().product(), cols)),
        _ => Err(Error::bad_shape(op, "pred", shape, "needs rank >= 2")),
    }
}

/// The correction: `pred - u diag(s) v^T`, shaped like `pred`.
pub fn apply_correction(g: &Graph, pred: &Var, u: &Var, s: &Var, v: &Var) -> Result<Var> {
    let (rows, cols) = matrix_dims("apply_correction", pred.shape())?;
    let us = g.mul(u, s)?;
    let decoded = g.matmul_t(&us, v, false, true)?;
    if decoded.shape() != [rows, cols] {
        return Err(Error::mismatch(
            "apply_correction",
            &[rows, cols],
            decoded.shape(),
        ));
    }
    let decoded = g.reshape(&decoded, pred.shape())?;
    g.sub(pred, &decoded)
}

/// Figures of a residual compression.
#[derive(Debug, Clone, PartialEq)]
pub struct CompressionReport {
    /// The residual matrix is `[rows, cols]`.
    pub rows: usize,
    pub cols: usize,
    /// Rank kept.
    pub rank: usize,
    /// `rows * cols / (rank * (rows + cols + 1))`.
    pub ratio: f64,
    /// `||R - R_k||_F / ||R||_F`.
    pub rel_error: f64,
    /// MSE of the predictions, and of the corrected predictions, against the truth.
    pub mse_pred: f64,
    pub mse_corrected: f64,
    /// The leading singular values of the residual.
    pub singular_values: Vec<f32>,
}

/// Compresses the residuals of `pred` against `truth` (both `[N, B, F]`) to rank `rank`,
/// applies the correction and reads back the figures. Returns the corrected predictions (on
/// the device) with the report.
pub async fn compress_residuals(
    g: &Graph,
    pred: &Var,
    truth: &Var,
    rank: usize,
    seed: u64,
) -> Result<(Var, CompressionReport)> {
    let (rows, cols) = matrix_dims("compress_residuals", pred.shape())?;
    let (u, s, v) = residual_svd(g, pred, truth, rank, seed)?;
    let corrected = apply_correction(g, pred, &u, &s, &v)?;
    let mse_pred = g.mse(pred, truth)?;
    let mse_corrected = g.mse(&corrected, truth)?;
    let backend = g.backend();
    let read = |t: Tensor| async move { backend.download(&t).await?.to_scalar() };
    let mse_pred = f64::from(read(mse_pred.tensor().clone()).await?);
    let mse_corrected = f64::from(read(mse_corrected.tensor().clone()).await?);
    let singular_values = backend.download(s.tensor()).await?.to_f32_vec()?;
    let q = singular_values.len();
    let ratio = (rows * cols) as f64 / (q * (rows + cols + 1)).max(1) as f64;
    let rel_error = if mse_pred > 0.0 {
        libm::sqrt(mse_corrected / mse_pred)
    } else {
        0.0
    };
    Ok((
        corrected,
        CompressionReport {
            rows,
            cols,
            rank: q,
            ratio,
            rel_error,
            mse_pred,
            mse_corrected,
            singular_values,
        },
    ))
}

/// Training or evaluation windows cut from trajectories `[count, len, features]` (flattened).
#[derive(Debug, Clone)]
pub struct Windows<'a> {
    data: &'a [f32],
    count: usize,
    len: usize,
    features: usize,
}

impl<'a> Windows<'a> {
    pub fn new(data: &'a [f32], count: usize, len: usize, features: usize) -> Result<Windows<'a>> {
        if count.checked_mul(len).and_then(|n| n.checked_mul(features)) != Some(data.len()) {
            return Err(Error::bad_shape(
                "Windows",
                "data",
                &[data.len()],
                format!("expected [{count}, {len}, {features}] flattened"),
            ));
        }
        Ok(Windows {
            data,
            count,
            len,
            features,
        })
    }

    /// The features of trajectory `traj` at time `t`.
    fn at(&self, traj: usize, t: usize) -> &[f32] {
        let start = (traj * self.len + t) * self.features;
        self.data.get(start..start + self.features).unwrap_or(&[])
    }

    /// `(s0 [batch, F], truth [steps, batch, F])` for windows starting at `(traj, t0)`.
    pub fn gather(&self, starts: &[(usize, usize)], steps: usize) -> Result<(Tensor, Tensor)> {
        let f = self.features;
        let batch = starts.len();
        let mut s0 = Vec::with_capacity(batch * f);
        let mut truth = alloc::vec![0.0f32; steps * batch * f];
        for (b, &(traj, t0)) in starts.iter().enumerate() {
            if traj >= self.count || t0 + steps >= self.len {
                return Err(Error::IndexOutOfRange {
                    op: "Windows::gather",
                    tensor: format!("window ({traj}, {t0}) of {steps} steps"),
                    index: t0 as i64,
                    bound: self.len.saturating_sub(steps),
                });
            }
            s0.extend_from_slice(self.at(traj, t0));
            for t in 0..steps {
                let dst = (t * batch + b) * f;
                truth[dst..dst + f].copy_from_slice(self.at(traj, t0 + 1 + t));
            }
        }
        Ok((
            Tensor::from_f32(&[batch, f], s0)?,
            Tensor::from_f32(&[steps, batch, f], truth)?,
        ))
    }

    /// `batch` random windows of `steps` steps.
    pub fn sample(&self, rng: &mut Rng, batch: usize, steps: usize) -> Result<(Tensor, Tensor)> {
        if self.len <= steps {
            return Err(Error::bad_shape(
                "Windows::sample",
                "trajectory length",
                &[self.len],
                format!("needs more than {steps} observations"),
            ));
        }
        let starts: Vec<(usize, usize)> = (0..batch)
            .map(|_| {
                (
                    rng.below(self.count as u64) as usize,
                    rng.below((self.len - steps) as u64) as usize,
                )
            })
            .collect();
        self.gather(&starts, steps)
    }

    /// Every `stride`-th window of every trajectory (a deterministic evaluation set).
    pub fn grid(&self, steps: usize, stride: usize) -> Vec<(usize, usize)> {
        let stride = stride.max(1);
        (0..self.count)
            .flat_map(|c| {
                (0..self.len.saturating_sub(steps))
                    .step_by(stride)
                    .map(move |t| (c, t))
            })
            .collect()
    }
}

/// Rows `rows` of a batch `(s0 [B, F], truth [steps, B, F])`: one replica's shard of a
/// data-parallel step ([`crate::parallel`]).
pub fn batch_rows(
    s0: &Tensor,
    truth: &Tensor,
    rows: core::ops::Range<usize>,
) -> Result<(Tensor, Tensor)> {
    let (&[b, f], &[steps, tb, tf]) = (s0.shape(), truth.shape()) else {
        return Err(Error::mismatch("batch_rows", s0.shape(), truth.shape()));
    };
    if (tb, tf) != (b, f) {
        return Err(Error::mismatch("batch_rows", s0.shape(), truth.shape()));
    }
    if rows.start > rows.end || rows.end > b {
        return Err(Error::IndexOutOfRange {
            op: "batch_rows",
            tensor: format!("rows {rows:?}"),
            index: rows.end as i64,
            bound: b + 1,
        });
    }
    let n = rows.len();
    let (sv, tv) = (s0.as_f32()?, truth.as_f32()?);
    let s = sv[rows.start * f..rows.end * f].to_vec();
    let mut t = Vec::with_capacity(steps * n * f);
    for k in 0..steps {
        t.extend_from_slice(&tv[(k * b + rows.start) * f..(k * b + rows.end) * f]);
    }
    Ok((
        Tensor::from_f32(&[n, f], s)?,
        Tensor::from_f32(&[steps, n, f], t)?,
    ))
}

/// Per-step mean squared errors `[steps]` of `pred` against `truth` (host, `[steps, B, F]`).
pub fn per_step_mse(pred: &Tensor, truth: &Tensor) -> Result<Vec<f64>> {
    if pred.shape() != truth.shape() || pred.rank() != 3 {
        return Err(Error::mismatch("per_step_mse", pred.shape(), truth.shape()));
    }
    let steps = pred.shape()[0];
    let per = pred.numel() / steps.max(1);
    let (p, t) = (pred.as_f32()?, truth.as_f32()?);
    Ok(p.chunks_exact(per)
        .zip(t.chunks_exact(per))
        .map(|(a, b)| {
            a.iter()
                .zip(b)
                .map(|(x, y)| f64::from(x - y) * f64::from(x - y))
                .sum::<f64>()
                / per as f64
        })
        .collect())
}

/// Per-step MSE of the persistence baseline (predict `s0` at every step).
pub fn persistence_mse(s0: &Tensor, truth: &Tensor) -> Result<Vec<f64>> {
    let (s, t) = (s0.as_f32()?, truth.as_f32()?);
    let per = s.len();
    if truth.rank() != 3 || truth.numel() != truth.shape()[0] * per {
        return Err(Error::mismatch(
            "persistence_mse",
            s0.shape(),
            truth.shape(),
        ));
    }
    Ok(t.chunks_exact(per)
        .map(|step| {
            step.iter()
                .zip(s)
                .map(|(y, x)| f64::from(y - x) * f64::from(y - x))
                .sum::<f64>()
                / per as f64
        })
        .collect())
}

/// Held-out evaluation of a rollout, per step.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub windows: usize,
    /// MSE of the ensemble mean, per step.
    pub model_mse: Vec<f64>,
    /// MSE of persistence ("no change"), per step.
    pub persistence_mse: Vec<f64>,
    /// Mean ensemble spread (std over members), per step.
    pub spread: Vec<f64>,
}

impl Evaluation {
    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }
    /// Model MSE averaged over the steps.
    pub fn model(&self) -> f64 {
        Evaluation::mean(&self.model_mse)
    }
    /// Persistence MSE averaged over the steps.
    pub fn persistence(&self) -> f64 {
        Evaluation::mean(&self.persistence_mse)
    }
}

/// Evaluates the model on `starts` (windows of `steps` steps), `batch` windows per rollout.
pub async fn evaluate(
    model: &WorldModel,
    store: &ParamStore,
    windows: &Windows<'_>,
    starts: &[(usize, usize)],
    steps: usize,
    batch: usize,
) -> Result<Evaluation> {
    let backend: &dyn Backend = &**store.backend();
    let mut model_sum = alloc::vec![0.0f64; steps];
    let mut pers_sum = alloc::vec![0.0f64; steps];
    let mut spread_sum = alloc::vec![0.0f64; steps];
    let mut n = 0usize;
    let stacked = model.stacked_weights(store)?;
    for chunk in starts.chunks(batch.max(1)) {
        let (s0, truth) = windows.gather(chunk, steps)?;
        let g = Graph::inference(store.backend().clone());
        let p = store.bind(&g)?;
        let e = stacked.bind(&g)?;
        let s0_dev = g.constant(backend.upload(&s0)?)?;
        let z = model.encode(&g, &p, &s0_dev)?;
        let roll = model.rollout_ensemble(&g, &e, &s0_dev, &z, steps)?;
        let (mean, spread) = ensemble_stats(&g, &roll)?;
        let mean = backend.download(mean.tensor()).await?;
        let spread = backend.download(spread.tensor()).await?;
        let w = chunk.len() as f64;
        for (acc, v) in model_sum.iter_mut().zip(per_step_mse(&mean, &truth)?) {
            *acc += v * w;
        }
        for (acc, v) in pers_sum.iter_mut().zip(persistence_mse(&s0, &truth)?) {
            *acc += v * w;
        }
        let per = spread.numel() / steps;
        for (acc, step) in spread_sum
            .iter_mut()
            .zip(spread.as_f32()?.chunks_exact(per))
        {
            *acc += step.iter().map(|&x| f64::from(x)).sum::<f64>() / per as f64 * w;
        }
        n += chunk.len();
    }
    let div = |v: Vec<f64>| v.into_iter().map(|x| x / n.max(1) as f64).collect();
    Ok(Evaluation {
        windows: n,
        model_mse: div(model_sum),
        persistence_mse: div(pers_sum),
        spread: div(spread_sum),
    })
}

#[cfg(test)]
mod tests;

impl WorldConfig {
    /// The sizes of the model whose parameters are `params` (a loaded weights file), read off
    /// the shapes of `encoder.weight` `[embed, features]` and `members.0.init.weight`
    /// `[hidden, embed]`, and the number of `members.{e}` present.
    pub fn infer(
        params: &alloc::collections::BTreeMap<alloc::string::String, Tensor>,
    ) -> Result<WorldConfig> {
        let shape = |name: &str| -> Result<&[usize]> {
            params
                .get(name)
                .map(Tensor::shape)
                .ok_or_else(|| Error::Missing {
                    what: "world model tensor".into(),
                    name: name.into(),
                })
        };
        let (embed, features) = match shape("encoder.weight")? {
            &[e, f] => (e, f),
            s => {
                return Err(Error::bad_shape(
                    "WorldConfig::infer",
                    "encoder.weight",
                    s,
                    "needs rank 2",
                ));
            }
        };
        let hidden = match shape("members.0.init.weight")? {
            &[h, _] => h,
            s => {
                return Err(Error::bad_shape(
                    "WorldConfig::infer",
                    "members.0.init.weight",
                    s,
                    "needs rank 2",
                ));
            }
        };
        let members = (0..)
            .take_while(|e| params.contains_key(&format!("members.{e}.init.weight")))
            .count();
        Ok(WorldConfig {
            features,
            embed,
            hidden,
            members,
        })
    }
}
