//! The ensemble computed together: the members' parameters stacked along a leading member axis
//! and one `gru_ensemble` op for the recurrence, so a rollout step of the whole ensemble is one
//! batched product and one gate kernel (2 dispatches on wgpu, 2 launches on CUDA) whatever
//! the number of members. The initial-state heads and the readouts are batched products over
//! the same axis, once per rollout.
//!
//! The parameter store keeps one tensor per member (`members.{e}....`, the checkpoint format);
//! [`WorldModel::stack`] stacks them in the graph (concatenations, so training's gradients flow
//! back to every member's tensors) and [`EnsembleWeights`] keeps the stacked tensors of a
//! loaded model for inference, stacked once.

use alloc::vec::Vec;

use super::{Member, Rollout, WorldConfig, WorldModel};
use crate::autograd::{Graph, Var};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::nn::{ParamStore, Params};
use crate::tensor::Tensor;

/// The members' parameters stacked along a leading member axis, as graph values.
#[derive(Debug, Clone)]
pub struct Ensemble {
    /// `[members, hidden, embed]` and `[members, 1, hidden]`.
    pub init_weight: Var,
    pub init_bias: Var,
    /// `[members, 3*hidden, embed]`, `[members, 3*hidden, hidden]`, `[members, 3*hidden]` twice.
    pub weight_ih: Var,
    pub weight_hh: Var,
    pub bias_ih: Var,
    pub bias_hh: Var,
    /// `[members, features, hidden]` and `[members, 1, features]`.
    pub readout_weight: Var,
    pub readout_bias: Var,
}

/// The stacked parameters as tensors (see [`Ensemble`] for the shapes): stacked once from a
/// [`ParamStore`], bound as constants to every inference graph after that.
#[derive(Debug, Clone)]
pub struct EnsembleWeights {
    tensors: [Tensor; 8],
}

impl EnsembleWeights {
    /// The stacked values as constants of `g`.
    pub fn bind(&self, g: &Graph) -> Result<Ensemble> {
        let [a, b, c, d, e, f, h, i] = &self.tensors;
        Ok(Ensemble {
            init_weight: g.constant(a.clone())?,
            init_bias: g.constant(b.clone())?,
            weight_ih: g.constant(c.clone())?,
            weight_hh: g.constant(d.clone())?,
            bias_ih: g.constant(e.clone())?,
            bias_hh: g.constant(f.clone())?,
            readout_weight: g.constant(h.clone())?,
            readout_bias: g.constant(i.clone())?,
        })
    }
}

/// `vars` (one shape) stacked along a new leading axis: each flattened to a row, the rows
/// concatenated, the result reshaped. Differentiable (reshape and concat are).
fn stack(g: &Graph, vars: &[&Var], shape: &[usize]) -> Result<Var> {
    let mut stacked: Option<Var> = None;
    for v in vars {
        let row = g.reshape(v, &[1, v.tensor().numel()])?;
        stacked = Some(match stacked {
            Some(s) => g.concat(&s, &row)?,
            None => row,
        });
    }
    let stacked = stacked.ok_or_else(|| Error::Empty {
        op: "WorldModel::stack",
        tensor: "members".into(),
    })?;
    let mut full = alloc::vec![vars.len()];
    full.extend_from_slice(shape);
    g.reshape(&stacked, &full)
}

/// Which of a member's parameters (`None`: a bias the layer lacks).
type Pick = for<'a> fn(&'a Member) -> Option<&'a str>;

/// Every member's parameter `pick`, bound in `p`.
fn gather<'p>(members: &[Member], p: &'p Params, pick: Pick) -> Result<Vec<&'p Var>> {
    members
        .iter()
        .map(|m| {
            let name = pick(m).ok_or_else(|| Error::Missing {
                what: "world model bias".into(),
                name: "members.{e}.*.bias".into(),
            })?;
            p.get(name)
        })
        .collect()
}

impl WorldModel {
    /// The members' parameters bound in `p`, stacked along a leading member axis (in the graph:
    /// a recording graph carries the gradients back to each member's tensors).
    pub fn stack(&self, g: &Graph, p: &Params) -> Result<Ensemble> {
        let WorldConfig {
            features,
            embed,
            hidden,
            ..
        } = self.config;
        let each = |pick: Pick| gather(&self.members, p, pick);
        let h3 = 3 * hidden;
        Ok(Ensemble {
            init_weight: stack(g, &each(|m| Some(&m.init.weight))?, &[hidden, embed])?,
            init_bias: stack(g, &each(|m| m.init.bias.as_deref())?, &[1, hidden])?,
            weight_ih: stack(g, &each(|m| Some(&m.gru.weight_ih))?, &[h3, embed])?,
            weight_hh: stack(g, &each(|m| Some(&m.gru.weight_hh))?, &[h3, hidden])?,
            bias_ih: stack(g, &each(|m| Some(&m.gru.bias_ih))?, &[h3])?,
            bias_hh: stack(g, &each(|m| Some(&m.gru.bias_hh))?, &[h3])?,
            readout_weight: stack(g, &each(|m| Some(&m.readout.weight))?, &[features, hidden])?,
            readout_bias: stack(g, &each(|m| m.readout.bias.as_deref())?, &[1, features])?,
        })
    }

    /// The stacked parameters of `store`, computed once (on its backend) for inference.
    pub fn stacked_weights(&self, store: &ParamStore) -> Result<EnsembleWeights> {
        let g = Graph::inference(store.backend().clone());
        let p = store.bind(&g)?;
        let e = self.stack(&g, &p)?;
        let t = |v: &Var| v.tensor().clone();
        Ok(EnsembleWeights {
            tensors: [
                t(&e.init_weight),
                t(&e.init_bias),
                t(&e.weight_ih),
                t(&e.weight_hh),
                t(&e.bias_ih),
                t(&e.bias_hh),
                t(&e.readout_weight),
                t(&e.readout_bias),
            ],
        })
    }

    /// Rolls every member `steps` steps ahead from `s0` `[batch, features]` and its encoding
    /// `z` `[batch, embed]`, all members together: `h0 = tanh(z W_init[m]^T + b_init[m])`, one
    /// `gru_ensemble` over the steps (x = z at every step), `pred = s0 + readout[m](out)`.
    pub fn rollout_ensemble(
        &self,
        g: &Graph,
        e: &Ensemble,
        s0: &Var,
        z: &Var,
        steps: usize,
    ) -> Result<Rollout> {
        let batch = self.check_state("s0", s0.shape())?;
        let WorldConfig {
            features,
            embed,
            hidden,
            members,
        } = self.config;
        if z.shape() != [batch, embed] {
            return Err(Error::mismatch(
                "WorldModel::rollout",
                &[batch, embed],
                z.shape(),
            ));
        }
        if steps == 0 {
            return Err(Error::Empty {
                op: "WorldModel::rollout",
                tensor: "steps".into(),
            });
        }
        let backend: &dyn Backend = &**g.backend();
        // z per member, and z per member at every step: broadcast adds onto zeros (the adds'
        // backward sums over the copies).
        let zm = g.constant(backend.zeros(&[members, batch, embed])?)?;
        let zm = g.add(&zm, z)?;
        let x = g.constant(backend.zeros(&[members, steps, batch, embed])?)?;
        let x = g.add(&x, z)?;
        // A member's bias `[1, n]` over its `rows` rows: ones `[rows, 1]` times it (the
        // elementwise ops broadcast trailing dims only).
        let rows_of = |bias: &Var, rows: usize| -> Result<Var> {
            let ones = g.constant(backend.upload(&Tensor::full(&[members, rows, 1], 1.0)?)?)?;
            g.matmul(&ones, bias)
        };
        let h0 = g.matmul_t(&zm, &e.init_weight, false, true)?;
        let h0 = g.tanh(&g.add(&h0, &rows_of(&e.init_bias, batch)?)?)?;
        let (out, _h_n) =
            g.gru_ensemble(&x, &h0, &e.weight_ih, &e.weight_hh, &e.bias_ih, &e.bias_hh)?;
        let flat = g.reshape(&out, &[members, steps * batch, hidden])?;
        let delta = g.matmul_t(&flat, &e.readout_weight, false, true)?;
        let delta = g.add(&delta, &rows_of(&e.readout_bias, steps * batch)?)?;
        let delta = g.reshape(&delta, &[members, steps, batch, features])?;
        Ok(Rollout {
            stacked: g.add(&delta, s0)?,
        })
    }
}
