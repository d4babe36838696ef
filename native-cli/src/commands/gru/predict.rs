//! `kernels gru predict`: the world model on held-out trajectories: per-step error of the
//! ensemble mean against persistence, ensemble spread, and the residuals' rank-k compression.

use std::path::Path;
use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::models::world::{
    self, Windows, WorldModel, compress_residuals, ensemble_stats, sim,
};
use kernels_core::nn::ParamStore;
use kernels_core::{Backend, Tensor};
use kernels_gpu::{BackendChoice, select_backend};

use crate::world_model::{HELD_OUT, HELD_OUT_SEED, eval_table, held_out, load_world_or_embedded};
use crate::{CliResult, emit, emit_json};

/// `kernels gru predict`: the held-out evaluation and one batch's residual compression, as text.
pub fn predict(
    backend: Rc<dyn Backend>,
    weights: Option<&Path>,
    horizon: usize,
    rank: usize,
) -> CliResult<String> {
    let (model, store, origin) = load_world_or_embedded(backend.clone(), weights)?;
    let mut s = format!(
        "world model {} on {}: {:?}\n",
        origin,
        backend.name(),
        model.config
    );
    let eval = held_out(&model, &store, horizon)?;
    s += &eval_table(&eval);
    let c = compression_on_held_out(&model, &store, horizon, 32, rank)?;
    s += &format!(
        "residuals of {} windows ({} x {}): rank-{} svd_lowrank keeps {:.2}x fewer numbers; \
         reconstruction error {:.3} (relative Frobenius); MSE {:.3e} -> {:.3e} after correction; \
         leading singular values {:?}\n",
        32,
        c.rows,
        c.cols,
        c.rank,
        c.ratio,
        c.rel_error,
        c.mse_pred,
        c.mse_corrected,
        c.singular_values
            .iter()
            .take(5)
            .map(|v| format!("{v:.3}"))
            .collect::<Vec<_>>()
    );
    Ok(s)
}

/// Held-out windows for the figures and the plot: the first `batch` windows of the grid.
fn held_out_batch(horizon: usize, batch: usize) -> CliResult<(Tensor, Tensor)> {
    let (count, len) = HELD_OUT;
    let data = sim::trajectories(HELD_OUT_SEED, count, len)?;
    let windows = Windows::new(&data, count, len, sim::FEATURES)?;
    let starts: Vec<(usize, usize)> = (0..batch).map(|b| (b % count, 7 * (b / count))).collect();
    Ok(windows.gather(&starts, horizon)?)
}

/// Rank-`rank` compression of the ensemble mean's residuals on `batch` held-out windows.
pub fn compression_on_held_out(
    model: &WorldModel,
    store: &ParamStore,
    horizon: usize,
    batch: usize,
    rank: usize,
) -> CliResult<world::CompressionReport> {
    let (s0, truth) = held_out_batch(horizon, batch)?;
    let backend = store.backend().clone();
    let g = Graph::inference(backend.clone());
    let p = store.bind(&g)?;
    let s0 = g.constant(backend.upload(&s0)?)?;
    let truth = g.constant(backend.upload(&truth)?)?;
    let roll = model.rollout(&g, &p, &s0, horizon)?;
    let (mean, _) = ensemble_stats(&g, &roll)?;
    crate::world_model::check_rank(rank, mean.shape())?;
    let (_, rep) = pollster::block_on(compress_residuals(&g, &mean, &truth, rank, 0))?;
    Ok(rep)
}

/// `kernels gru predict --json`: the same figures as [`predict`], as one object (the format is
/// in `kernels gru predict --help`).
pub fn predict_json(
    backend: Rc<dyn Backend>,
    weights: Option<&Path>,
    horizon: usize,
    rank: usize,
) -> CliResult<serde_json::Value> {
    let (model, store, origin) = load_world_or_embedded(backend.clone(), weights)?;
    let eval = held_out(&model, &store, horizon)?;
    let steps: Vec<serde_json::Value> = eval
        .model_mse
        .iter()
        .zip(&eval.persistence_mse)
        .zip(&eval.spread)
        .enumerate()
        .map(|(t, ((m, p), sp))| {
            serde_json::json!({
                "step": t + 1,
                "model_mse": m,
                "persistence_mse": p,
                "ratio": m / p,
                "spread": sp,
            })
        })
        .collect();
    let windows = 32;
    let c = compression_on_held_out(&model, &store, horizon, windows, rank)?;
    let config = model.config;
    Ok(serde_json::json!({
        "weights": origin,
        "backend": backend.name(),
        "config": {
            "features": config.features,
            "embed": config.embed,
            "hidden": config.hidden,
            "members": config.members,
        },
        "held_out": {
            "windows": eval.windows,
            "model_mse": eval.model(),
            "persistence_mse": eval.persistence(),
            "steps": steps,
        },
        "compression": {
            "windows": windows,
            "rows": c.rows,
            "cols": c.cols,
            "rank": c.rank,
            "ratio": c.ratio,
            "rel_error": c.rel_error,
            "mse_pred": c.mse_pred,
            "mse_corrected": c.mse_corrected,
            "singular_values": c.singular_values,
        },
    }))
}

/// Runs `kernels gru predict` on the backend `--backend` (else `KERNELS_BACKEND`) selects; as
/// text, or one JSON object with `json`.
pub fn run(
    backend: Option<&str>,
    weights: Option<&Path>,
    horizon: usize,
    rank: usize,
    json: bool,
) -> CliResult<()> {
    crate::world_model::check_horizon(horizon)?;
    if rank == 0 {
        return Err(crate::fail("--rank 0: must be at least 1"));
    }
    let chosen = select_backend(BackendChoice::from_arg(backend)?)?;
    if json {
        emit_json(&predict_json(chosen.backend, weights, horizon, rank)?)
    } else {
        emit(&predict(chosen.backend, weights, horizon, rank)?)
    }
}
