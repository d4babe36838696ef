//! Data parallelism: one model replicated on several backends, one global batch split across
//! them, gradients all-reduced by averaging, then one AdamW step per replica.
//!
//! Written against `dyn Backend` like everything else: the replicas may be CPU backends,
//! several wgpu devices opened on one adapter, CUDA devices, or any mix. Nothing here needs
//! threads: the replicas run one after the other on the calling thread (a device backend
//! records and submits its work; the host waits only on the downloads).
//!
//! One step ([`DataParallel::step`]):
//!
//! 1. The global batch of `B` rows is cut into contiguous shards, one per replica, in replica
//!    order; the first `B % N` replicas take one row more ([`shards`]). A replica whose shard is
//!    empty (`B < N`) computes nothing that step.
//! 2. Each replica computes the mean loss of its shard (the caller's closure) and its gradient.
//! 3. **All-reduce through the host** ([`ReducePath::Host`]): each replica's gradients are
//!    downloaded, weighted by the replica's share of the batch (`b_i / B`, so the weighted sum
//!    of the shard means is the mean over the whole batch, and uneven splits give the
//!    single-device gradient), and summed in f32 in a fixed order, replica 0 first, so the
//!    result does not depend on timing and is the same on every run. The one reduced gradient
//!    is uploaded to every replica. Only gradients move: parameters never leave their device
//!    after [`DataParallel::new`] copied replica 0's to the others.
//! 4. One optimizer step per replica on its own backend, from the same reduced gradient.
//!
//! With a single replica there is nothing to reduce: its gradient goes straight to its
//! optimizer ([`ReducePath::None`]), exactly as plain training.
//!
//! **What stays equal.** Every replica starts from the same parameters and optimizer state and
//! receives the same reduced gradient bits, so replicas whose backends run the same `adamw_step`
//! kernel (several CPU backends; several wgpu devices on one adapter) hold bit-identical
//! parameters after every step. Backends of different kinds run different kernels; every one
//! takes its coefficients from [`crate::cpu::optim::adamw_constants`] and does the same f32
//! operations in the same order, so a CPU + wgpu mix stays bit-identical where the shader
//! compiler does not contract a multiply and an add into an FMA (lavapipe: tested); elsewhere
//! the replicas agree within `adamw_step`'s budget per step, and [`DataParallel::divergence`]
//! measures by how much. Against one device on the same global batch, the reduced gradient
//! differs only by summation order (the shards' partial sums, then their weighted sum), so
//! losses and parameters agree within the budget that order implies (see kernels-core/README.md,
//! "Data-parallel training").

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use crate::autograd::{Gradients, Graph, Var};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::models::llama::Llama;
use crate::nn::{ParamStore, Params};
use crate::optim::AdamW;
use crate::tensor::Tensor;

/// A model that keeps its parameters in one [`ParamStore`]: what [`DataParallel`] replicates.
pub trait Replica {
    /// The parameters.
    fn store(&self) -> &ParamStore;
    /// The parameters, for the optimizer.
    fn store_mut(&mut self) -> &mut ParamStore;
}

impl Replica for ParamStore {
    fn store(&self) -> &ParamStore {
        self
    }
    fn store_mut(&mut self) -> &mut ParamStore {
        self
    }
}

impl Replica for Llama {
    fn store(&self) -> &ParamStore {
        &self.store
    }
    fn store_mut(&mut self) -> &mut ParamStore {
        &mut self.store
    }
}

/// How the gradients were all-reduced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReducePath {
    /// One replica: nothing to reduce.
    None,
    /// Downloaded, summed on the host in replica order, uploaded.
    Host,
}

impl ReducePath {
    /// `none` or `host`.
    pub fn name(self) -> &'static str {
        match self {
            ReducePath::None => "none",
            ReducePath::Host => "host",
        }
    }
}

/// What one [`DataParallel::step`] did. The losses stay on their devices until asked for
/// ([`StepReport::loss`]), so a single replica's step waits on nothing, as plain training.
pub struct StepReport {
    /// Each replica's mean loss over its shard, on its device (`None` for an empty shard).
    losses: Vec<Option<(Rc<dyn Backend>, Tensor)>>,
    /// Rows of the global batch each replica took.
    pub shard_rows: Vec<usize>,
    /// Gradient bytes downloaded into the reduction (4 per parameter per replica with a shard).
    pub bytes_down: u64,
    /// Reduced-gradient bytes uploaded (4 per parameter per replica).
    pub bytes_up: u64,
    pub path: ReducePath,
}

impl core::fmt::Debug for StepReport {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StepReport")
            .field("shard_rows", &self.shard_rows)
            .field("bytes_down", &self.bytes_down)
            .field("bytes_up", &self.bytes_up)
            .field("path", &self.path)
            .finish()
    }
}

impl StepReport {
    /// Bytes the all-reduce moved this step, down and up.
    pub fn reduce_bytes(&self) -> u64 {
        self.bytes_down + self.bytes_up
    }

    /// Each replica's mean loss over its shard (`None` for an empty shard), downloaded.
    pub async fn replica_losses(&self) -> Result<Vec<Option<f32>>> {
        let mut out = Vec::with_capacity(self.losses.len());
        for l in &self.losses {
            out.push(match l {
                Some((backend, t)) => Some(backend.download(t).await?.to_scalar()?),
                None => None,
            });
        }
        Ok(out)
    }

    /// The mean loss over the global batch: the shards' mean losses weighted by their shares
    /// of the batch, summed in replica order (in f64, rounded once).
    pub async fn loss(&self) -> Result<f32> {
        let batch: usize = self.shard_rows.iter().sum();
        let mut total = 0.0f64;
        for (l, &rows) in self.replica_losses().await?.iter().zip(&self.shard_rows) {
            if let Some(l) = l {
                total += f64::from(*l) * rows as f64 / batch.max(1) as f64;
            }
        }
        Ok(total as f32)
    }
}

/// The shards of a global batch of `batch` rows over `n` replicas: contiguous ranges in replica
/// order, the first `batch % n` one row longer. Empty for `n == 0`.
pub fn shards(batch: usize, n: usize) -> Vec<Range<usize>> {
    if n == 0 {
        return Vec::new();
    }
    let (base, extra) = (batch / n, batch % n);
    let mut start = 0;
    (0..n)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}

fn err(why: String) -> Error {
    Error::Autograd {
        why: format!("DataParallel: {why}"),
    }
}

/// N replicas of one model, trained data-parallel. See the module docs.
pub struct DataParallel<M> {
    replicas: Vec<M>,
    opts: Vec<AdamW>,
    /// An optimizer step failed part-way: the replicas no longer agree, and no step may run.
    broken: bool,
}

impl<M> core::fmt::Debug for DataParallel<M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DataParallel")
            .field("replicas", &self.replicas.len())
            .field("broken", &self.broken)
            .finish()
    }
}

impl<M: Replica> DataParallel<M> {
    /// Replicates `replicas[0]`'s parameters onto the others (the only time parameters move
    /// between devices) and gives each replica its own copy of `opt`. Every replica must hold
    /// the same parameter names and shapes; `opt` must not have stepped yet.
    pub async fn new(mut replicas: Vec<M>, opt: AdamW) -> Result<Self> {
        let first = replicas.first().ok_or_else(|| Error::Empty {
            op: "DataParallel::new",
            tensor: "replicas".into(),
        })?;
        if opt.step != 0 {
            return Err(err(format!(
                "the optimizer has already taken {} steps; give a fresh one",
                opt.step
            )));
        }
        let host = first.store().to_host().await?;
        for (i, r) in replicas.iter_mut().enumerate().skip(1) {
            let store = r.store_mut();
            let names: Vec<&String> = store.names().collect();
            if names.len() != host.len() || names.iter().any(|n| !host.contains_key(*n)) {
                return Err(err(format!(
                    "replica {i} has other parameters than replica 0 ({} vs {})",
                    names.len(),
                    host.len()
                )));
            }
            store.load_map(&host)?;
        }
        let opts = vec![opt; replicas.len()];
        Ok(DataParallel {
            replicas,
            opts,
            broken: false,
        })
    }

    /// Number of replicas.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }
    /// Never true ([`DataParallel::new`] refuses no replicas); for clippy's `len` rule.
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }
    /// The replicas, in order.
    pub fn replicas(&self) -> &[M] {
        &self.replicas
    }
    /// Each replica's backend name, in order.
    pub fn device_names(&self) -> Vec<String> {
        self.replicas
            .iter()
            .map(|r| r.store().backend().name())
            .collect()
    }
    /// The path [`DataParallel::step`] reduces through.
    pub fn path(&self) -> ReducePath {
        if self.replicas.len() > 1 {
            ReducePath::Host
        } else {
            ReducePath::None
        }
    }
    /// Sets every replica's learning rate (schedules).
    pub fn set_lr(&mut self, lr: f32) {
        for o in &mut self.opts {
            o.lr = lr;
        }
    }
    /// Replica 0's optimizer (every replica's holds the same settings and step count).
    pub fn optimizer(&self) -> Option<&AdamW> {
        self.opts.first()
    }

    /// One data-parallel step over a global batch of `batch` rows. `loss(i, replica, graph,
    /// params, rows)` must return replica `i`'s MEAN loss (a scalar) over `rows` of the global
    /// batch, computed in `graph` (on the replica's backend) from `params`. See the module docs.
    ///
    /// An error before the optimizer steps leaves every replica as it was; one during them
    /// leaves the replicas out of step, and every later step refuses to run.
    pub async fn step<F>(&mut self, batch: usize, mut loss: F) -> Result<StepReport>
    where
        F: FnMut(usize, &M, &Graph, &Params, Range<usize>) -> Result<Var>,
    {
        if self.broken {
            return Err(err(
                "an earlier optimizer step failed part-way; the replicas disagree".into(),
            ));
        }
        if batch == 0 {
            return Err(Error::Empty {
                op: "DataParallel::step",
                tensor: "batch".into(),
            });
        }
        let n = self.replicas.len();
        let parts = shards(batch, n);
        let path = self.path();
        let mut losses: Vec<Option<(Rc<dyn Backend>, Tensor)>> = vec![None; n];
        let mut reduced: BTreeMap<String, (Vec<usize>, Vec<f32>)> = BTreeMap::new();
        let mut single: Option<Gradients> = None;
        let mut bytes_down = 0u64;
        for (i, (r, rows)) in self.replicas.iter().zip(&parts).enumerate() {
            if rows.is_empty() {
                continue;
            }
            let backend = r.store().backend().clone();
            let g = Graph::new(backend.clone());
            let p = r.store().bind(&g)?;
            let l = loss(i, r, &g, &p, rows.clone())?;
            if l.tensor().numel() != 1 {
                return Err(Error::bad_shape(
                    "DataParallel::step",
                    "loss",
                    l.shape(),
                    "the loss closure must return a scalar",
                ));
            }
            let grads = g.backward(&l)?;
            let share = rows.len() as f32 / batch as f32;
            losses[i] = Some((backend.clone(), l.tensor().clone()));
            if path == ReducePath::None {
                single = Some(grads);
                continue;
            }
            for (name, gt) in grads.named() {
                let host = backend.download(gt).await?;
                let gv = host.as_f32()?;
                bytes_down += 4 * gv.len() as u64;
                let (_, acc) = reduced
                    .entry(name.clone())
                    .or_insert_with(|| (host.shape().to_vec(), vec![0.0; gv.len()]));
                if acc.len() != gv.len() {
                    return Err(err(format!(
                        "replica {i}'s gradient of `{name}` has {} elements, the others' {}",
                        gv.len(),
                        acc.len()
                    )));
                }
                for (a, &x) in acc.iter_mut().zip(gv) {
                    *a += share * x;
                }
            }
        }
        // Upload everything before any replica steps, so an upload error changes nothing.
        let mut per_replica: Vec<Gradients> = Vec::with_capacity(n);
        let mut bytes_up = 0u64;
        match single {
            Some(g) => per_replica.push(g),
            None => {
                let host: Vec<(&String, Tensor)> = reduced
                    .iter()
                    .map(|(name, (shape, v))| Ok((name, Tensor::from_f32(shape, v.clone())?)))
                    .collect::<Result<_>>()?;
                for r in &self.replicas {
                    let backend: Rc<dyn Backend> = r.store().backend().clone();
                    let mut named = BTreeMap::new();
                    for (name, t) in &host {
                        named.insert((*name).clone(), backend.upload(t)?);
                        bytes_up += 4 * t.numel() as u64;
                    }
                    per_replica.push(Gradients::from_named(backend, named));
                }
            }
        }
        for ((r, opt), grads) in self
            .replicas
            .iter_mut()
            .zip(&mut self.opts)
            .zip(&per_replica)
        {
            if let Err(e) = opt.step(r.store_mut(), grads) {
                self.broken = true;
                return Err(e);
            }
        }
        Ok(StepReport {
            losses,
            shard_rows: parts.iter().map(|r| r.len()).collect(),
            bytes_down,
            bytes_up,
            path,
        })
    }

    /// Every replica's parameters on the host, in replica order.
    pub async fn params_host(&self) -> Result<Vec<BTreeMap<String, Tensor>>> {
        let mut out = Vec::with_capacity(self.replicas.len());
        for r in &self.replicas {
            out.push(r.store().to_host().await?);
        }
        Ok(out)
    }

    /// The largest absolute difference between any replica's parameters and replica 0's
    /// (0.0 exactly when all are bit-identical, up to the sign of zero).
    pub async fn divergence(&self) -> Result<f32> {
        let all = self.params_host().await?;
        let Some((first, rest)) = all.split_first() else {
            return Ok(0.0);
        };
        let mut worst = 0.0f32;
        for other in rest {
            for (name, t) in first {
                let o = other.get(name).ok_or_else(|| Error::Missing {
                    what: "parameter of a replica".into(),
                    name: name.clone(),
                })?;
                for (a, b) in t.as_f32()?.iter().zip(o.as_f32()?) {
                    let d = (a - b).abs();
                    // NaN anywhere is the worst divergence there is.
                    if d.is_nan() || d > worst {
                        worst = if d.is_nan() { f32::INFINITY } else { d };
                    }
                }
            }
        }
        Ok(worst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn shards_cover_the_batch_in_order_longest_first() {
        assert_eq!(shards(7, 3), vec![0..3, 3..5, 5..7]);
        assert_eq!(shards(6, 3), vec![0..2, 2..4, 4..6]);
        assert_eq!(shards(2, 3), vec![0..1, 1..2, 2..2]);
        assert_eq!(shards(5, 1), vec![0..5]);
        assert!(shards(5, 0).is_empty());
        for b in 0..20 {
            for n in 1..6 {
                let s = shards(b, n);
                assert_eq!(s.len(), n);
                assert_eq!(s.iter().map(|r| r.len()).sum::<usize>(), b);
                assert!(s.windows(2).all(|w| w[0].end == w[1].start));
                assert!(s.windows(2).all(|w| w[0].len() >= w[1].len()));
            }
        }
    }

    #[test]
    fn no_replicas_and_a_stepped_optimizer_are_refused() {
        let none: Vec<ParamStore> = Vec::new();
        let r = crate::backend::now_or_never(DataParallel::new(none, AdamW::new(1e-3)));
        assert!(matches!(r, Some(Err(Error::Empty { .. }))));
        let cpu: Rc<dyn Backend> = Rc::new(crate::CpuBackend::new());
        let mut opt = AdamW::new(1e-3);
        opt.step = 1;
        let r = crate::backend::now_or_never(DataParallel::new(vec![ParamStore::new(cpu)], opt));
        assert!(matches!(r, Some(Err(Error::Autograd { .. }))));
    }
}
