//! `kernels gru train`: trains the world model by backpropagation through time with AdamW on
//! simulated trajectories, with a progress bar; saves the weights as it goes. `--devices`
//! trains data-parallel replicas ([`kernels_core::parallel::DataParallel`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kernels_core::models::world::{Windows, WorldConfig, WorldModel, batch_rows, sim};
use kernels_core::nn::ParamStore;
use kernels_core::optim::AdamW;
use kernels_core::parallel::DataParallel;
use kernels_core::{Backend, Rng};
use kernels_gpu::Selected;

use crate::commands::train::{replica_backends, step_json};
use crate::world_model::{TRAIN_SEED, eval_table, held_out, load_world, save_f16};
use crate::{CliResult, emit, emit_json_line, fail, progress_to_stderr};

/// Options of `kernels gru train`.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub out: PathBuf,
    /// Continue from these weights instead of a fresh initialization.
    pub init: Option<PathBuf>,
    pub iters: usize,
    /// Stop early (saving) after this many minutes.
    pub max_minutes: f64,
    pub batch: usize,
    pub horizon: usize,
    pub lr: f32,
    pub seed: u64,
    /// Training trajectories x observations.
    pub trajectories: usize,
    pub length: usize,
    pub hidden: usize,
    pub members: usize,
    /// Data-parallel replicas, e.g. `cpu,wgpu` (`None`: one, on `--backend`).
    pub devices: Option<String>,
    /// One JSON object per logged iteration on stdout; the rest goes to stderr.
    pub json: bool,
}

/// The model and its parameters on `backend`: loaded from `--init`, else fresh from the seed.
fn replica(
    backend: std::rc::Rc<dyn Backend>,
    o: &TrainOptions,
) -> CliResult<(WorldModel, ParamStore)> {
    Ok(match &o.init {
        Some(p) => load_world(backend, p)?,
        None => {
            let config = WorldConfig {
                hidden: o.hidden,
                members: o.members,
                ..WorldConfig::DEFAULT
            };
            let mut store = ParamStore::new(backend);
            let model = WorldModel::new(&mut store, config, &mut Rng::new(o.seed))?;
            (model, store)
        }
    })
}

/// `kernels gru train`: BPTT with AdamW on simulated trajectories, on one replica per entry of
/// `chosen`; saves every 100 iterations and at the end, then evaluates on the held-out set.
pub fn train(chosen: &[Selected], o: &TrainOptions) -> CliResult<()> {
    if o.json {
        progress_to_stderr();
    }
    let data = sim::trajectories(TRAIN_SEED, o.trajectories, o.length)?;
    let windows = Windows::new(&data, o.trajectories, o.length, sim::FEATURES)?;
    let mut model = None;
    let mut stores = Vec::with_capacity(chosen.len());
    for c in chosen {
        let (m, s) = replica(c.backend.clone(), o)?;
        model.get_or_insert(m);
        stores.push(s);
    }
    let model = model.ok_or_else(|| fail("gru train: no device"))?;
    let numel = stores.first().map_or(0, ParamStore::numel);
    let mut dp = pollster::block_on(DataParallel::new(
        stores,
        AdamW::new(o.lr).weight_decay(1e-4),
    ))?;
    let devices: Vec<String> = chosen.iter().map(|c| c.backend.name()).collect();
    let reasons: Vec<&str> = chosen.iter().map(|c| c.reason.as_str()).collect();
    emit(&format!(
        "training the world model on {} ({}; all-reduce: {}): {:?}, {numel} parameters; {} \
         trajectories x {} observations of the damped double pendulum; batch {}, horizon {}, \
         AdamW lr {}\n",
        devices.join(" + "),
        reasons.join("; "),
        dp.path().name(),
        model.config,
        o.trajectories,
        o.length,
        o.batch,
        o.horizon,
        o.lr
    ))?;
    let mut rng = Rng::new(o.seed ^ 0x9e37_79b9);
    let bar = if o.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(o.iters as u64)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta}) {msg}",
        )?
        .progress_chars("=> "),
    );
    let start = Instant::now();
    let limit = Duration::from_secs_f64(o.max_minutes.max(0.0) * 60.0);
    let mut smoothed: Option<f64> = None;
    let mut done = 0;
    for it in 0..o.iters {
        // Cosine decay to a tenth of the peak rate.
        let frac = it as f32 / o.iters.max(1) as f32;
        let lr = o.lr * (0.1 + 0.9 * 0.5 * (1.0 + (std::f32::consts::PI * frac).cos()));
        dp.set_lr(lr);
        let (s0, truth) = windows.sample(&mut rng, o.batch, o.horizon)?;
        let report = pollster::block_on(dp.step(o.batch, |_, _, g, p, rows| {
            let (s0, truth) = batch_rows(&s0, &truth, rows)?;
            let s0 = g.constant(g.backend().upload(&s0)?)?;
            let truth = g.constant(g.backend().upload(&truth)?)?;
            model.loss(g, p, &s0, &truth)
        }))?;
        done = it + 1;
        if it % 10 == 0 || done == o.iters {
            let l = f64::from(pollster::block_on(report.loss())?);
            if !l.is_finite() {
                bar.abandon();
                return Err(fail(format!(
                    "training diverged at iteration {it}: loss {l}"
                )));
            }
            let s = smoothed.map_or(l, |s| 0.8 * s + 0.2 * l);
            smoothed = Some(s);
            bar.set_message(format!("loss {s:.5} lr {lr:.1e}"));
            if o.json {
                // Window steps predicted (and backpropagated) per second.
                let rate =
                    (done * o.batch * o.horizon) as f64 / start.elapsed().as_secs_f64().max(1e-9);
                let path = dp.path().name();
                emit_json_line(&step_json(
                    it,
                    l as f32,
                    rate,
                    &devices,
                    path,
                    report.reduce_bytes(),
                ))?;
            }
        }
        let store = &dp.replicas()[0];
        if done % 100 == 0 {
            save_f16(store, &o.out)?;
        }
        bar.inc(1);
        if start.elapsed() > limit {
            bar.println(format!("time limit reached after {done} iterations"));
            break;
        }
    }
    bar.finish();
    if dp.len() > 1 {
        emit(&format!(
            "replicas' largest parameter difference from replica 0: {:e}\n",
            pollster::block_on(dp.divergence())?
        ))?;
    }
    let store = &dp.replicas()[0];
    save_f16(store, &o.out)?;
    emit(&format!(
        "{done} iterations in {:.1} s; weights written to {}\n",
        start.elapsed().as_secs_f64(),
        o.out.display()
    ))?;
    let eval = held_out(&model, store, o.horizon)?;
    emit(&eval_table(&eval))?;
    Ok(())
}

/// Runs `kernels gru train` on the replicas `--devices` names, else on the one backend
/// `--backend` (else `KERNELS_BACKEND`) selects.
pub fn run(backend: Option<&str>, o: &TrainOptions) -> CliResult<()> {
    let chosen = replica_backends(o.devices.as_deref(), backend)?;
    check_sizes(o, chosen.len())?;
    train(&chosen, o)
}

/// The flags checked before anything is built, in their own words: sizes at least 1, a row per
/// replica, and the memory of the model's state (weights, gradients, AdamW's moments on each
/// replica) and of one iteration's activations available.
pub fn check_sizes(o: &TrainOptions, replicas: usize) -> CliResult<()> {
    use crate::limits::{check_fits, positive, product, sum};
    for (flag, v) in [
        ("--iters", o.iters),
        ("--batch", o.batch),
        ("--horizon", o.horizon),
        ("--trajectories", o.trajectories),
        ("--length", o.length),
        ("--hidden", o.hidden),
        ("--members", o.members),
    ] {
        positive(flag, v)?;
    }
    if !(o.lr.is_finite() && o.lr > 0.0) {
        return Err(fail(format!(
            "--lr must be a finite number > 0, got {}",
            o.lr
        )));
    }
    // A time limit at or below zero would stop after the first iteration; NaN never would.
    if !(o.max_minutes.is_finite() && o.max_minutes > 0.0) {
        return Err(fail(format!(
            "--max-minutes {}: must be a number of minutes > 0",
            o.max_minutes
        )));
    }
    if o.batch < replicas {
        return Err(fail(format!(
            "--batch {}: smaller than the {replicas} replicas of --devices (each needs a row)",
            o.batch
        )));
    }
    let (f, e) = (
        WorldConfig::DEFAULT.features as u64,
        WorldConfig::DEFAULT.embed as u64,
    );
    let (h, m) = (o.hidden as u64, o.members as u64);
    // A fresh model's parameters (--init's are checked as they load): the encoder, then per
    // member its init layer, GRU and readout.
    let per_member = sum(&[
        product(&[e, h]),
        h.checked_mul(4),
        h.checked_add(e).and_then(|n| product(&[3, h, n])),
        h.checked_mul(3),
        product(&[h, f]),
        Some(f),
    ]);
    let params = sum(&[
        product(&[f, e]),
        Some(e),
        per_member.and_then(|p| p.checked_mul(m)),
    ]);
    let state = params.and_then(|p| product(&[p, 16, replicas as u64]));
    if o.init.is_none() {
        check_fits(
            &format!("--hidden {}, --members {}", o.hidden, o.members),
            "the model's parameters with their gradients and AdamW moments",
            state,
        )?;
    }
    // Per window step and member, the GRU's gates and states kept for the backward, the
    // encoded input and the prediction.
    let per_step = sum(&[h.checked_mul(8), Some(e), f.checked_mul(2)]);
    let activations = per_step.and_then(|p| product(&[p, o.batch as u64, o.horizon as u64, m, 4]));
    check_fits(
        &format!(
            "--batch {} (with --horizon {}, --hidden {}, --members {})",
            o.batch, o.horizon, o.hidden, o.members
        ),
        "one iteration's activations and the model's state",
        sum(&[activations, if o.init.is_none() { state } else { Some(0) }]),
    )?;
    Ok(())
}
