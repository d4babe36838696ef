//! The GRU world model's files and held-out evaluation, shared by `kernels gru ...` and the
//! demo: where the shipped weights live, the seeds and sizes of the simulated data, loading
//! and saving weights, and the held-out error table.
//!
//! The model, its simulator and its training step live in kernels-core
//! (`kernels_core::models::world`).

use std::path::Path;
use std::rc::Rc;

use kernels_core::Backend;
use kernels_core::models::world::{self, Evaluation, Windows, WorldModel, sim};
use kernels_core::nn::ParamStore;

use crate::atomic_write::write_atomically;
use crate::{CliResult, fail};

/// The shipped weights, embedded in the binary (committed as
/// `native-cli/models/world/world.safetensors`; `kernels gru train --out` writes new ones), so
/// a binary copied anywhere runs the world model without the source checkout.
pub const EMBEDDED_WEIGHTS: &[u8] = include_bytes!("../models/world/world.safetensors");

/// Loads the weights at `path`, or the embedded ones when `None`; with a label for messages.
pub fn load_world_or_embedded(
    backend: Rc<dyn Backend>,
    path: Option<&Path>,
) -> CliResult<(WorldModel, ParamStore, String)> {
    match path {
        Some(p) => load_world(backend, p).map(|(m, s)| (m, s, p.display().to_string())),
        None => {
            let (m, s) = WorldModel::load(backend, EMBEDDED_WEIGHTS)
                .map_err(|e| fail(format!("the embedded world-model weights: {e}")))?;
            Ok((m, s, "the embedded weights".into()))
        }
    }
}

/// Seeds of the simulated data: training and held-out trajectories never share initial states.
pub const TRAIN_SEED: u64 = 1;
pub const HELD_OUT_SEED: u64 = 2;
/// Held-out set: trajectories x observations.
pub const HELD_OUT: (usize, usize) = (64, 120);
/// Steps predicted ahead.
pub const HORIZON: usize = 10;

/// Loads a world model from a safetensors file onto `backend` (sizes inferred from the shapes).
pub fn load_world(backend: Rc<dyn Backend>, path: &Path) -> CliResult<(WorldModel, ParamStore)> {
    // A FIFO or a device (`/dev/zero`) is refused by name instead of read for ever.
    let bytes = crate::limits::read_regular(path)
        .map_err(|e| fail(format!("cannot read weights {}: {e}", path.display())))?;
    WorldModel::load(backend, &bytes).map_err(|e| fail(format!("weights {}: {e}", path.display())))
}

/// Errors unless `--rank` fits the residual matrix of a rollout whose ensemble mean has shape
/// `mean` (rows: every dimension but the last): between 1 and its smaller side.
pub fn check_rank(rank: usize, mean: &[usize]) -> CliResult<()> {
    let (cols, lead) = mean.split_last().unwrap_or((&0, &[]));
    let rows: usize = lead.iter().product();
    let max = rows.min(*cols);
    if rank == 0 || rank > max {
        return Err(fail(format!(
            "--rank {rank}: must be between 1 and {max}, the smaller side of the {rows} x {cols} \
             residual matrix"
        )));
    }
    Ok(())
}

/// Errors unless `--horizon` lies between 1 and the steps a held-out trajectory has after its
/// first.
pub fn check_horizon(horizon: usize) -> CliResult<()> {
    let max = HELD_OUT.1 - 1;
    if horizon == 0 || horizon > max {
        return Err(fail(format!(
            "--horizon {horizon}: must be between 1 and {max} (the held-out trajectories have \
             {} observations)",
            HELD_OUT.1
        )));
    }
    Ok(())
}

/// Saves `store` as F16 safetensors, atomically (the weights are small and F16 halves them; the
/// loader widens them back to f32).
pub fn save_f16(store: &ParamStore, path: &Path) -> CliResult<()> {
    let host = pollster::block_on(store.to_host())?;
    let mut bufs: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, t) in &host {
        let bytes: Vec<u8> = t
            .as_f32()?
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        bufs.push((name.clone(), t.shape().to_vec(), bytes));
    }
    let views = bufs
        .iter()
        .map(|(n, s, b)| {
            Ok((
                n.as_str(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F16, s.clone(), b)?,
            ))
        })
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    let bytes = safetensors::serialize(views, None)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    write_atomically(path, &bytes)
        .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    Ok(())
}

/// Evaluates on the held-out trajectories (every 4th window of each).
pub fn held_out(model: &WorldModel, store: &ParamStore, horizon: usize) -> CliResult<Evaluation> {
    let (count, len) = HELD_OUT;
    let data = sim::trajectories(HELD_OUT_SEED, count, len)?;
    let windows = Windows::new(&data, count, len, sim::FEATURES)?;
    let starts = windows.grid(horizon, 4);
    Ok(pollster::block_on(world::evaluate(
        model, store, &windows, &starts, horizon, 64,
    ))?)
}

/// Per-step model and persistence MSE, their ratio, and the ensemble spread.
pub fn eval_table(e: &Evaluation) -> String {
    let mut s = format!(
        "held-out: {} windows of the damped double pendulum (seed {HELD_OUT_SEED}), MSE per feature\n\
         step  model (ensemble mean)  persistence  model/persistence  ensemble spread\n",
        e.windows
    );
    for (t, ((m, p), sp)) in e
        .model_mse
        .iter()
        .zip(&e.persistence_mse)
        .zip(&e.spread)
        .enumerate()
    {
        s += &format!(
            "{:>4}  {m:>21.3e}  {p:>11.3e}  {:>17.3}  {sp:>15.3e}\n",
            t + 1,
            m / p
        );
    }
    s += &format!(
        "mean  {:>21.3e}  {:>11.3e}  {:>17.3}\n",
        e.model(),
        e.persistence(),
        e.model() / e.persistence()
    );
    s
}
