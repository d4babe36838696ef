//! `kernels gru train`: trains the world model by backpropagation through time with AdamW on
//! simulated trajectories, with a progress bar; saves the weights as it goes.

use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use kernels_core::models::world::{Windows, WorldConfig, WorldModel, sim};
use kernels_core::nn::ParamStore;
use kernels_core::optim::AdamW;
use kernels_core::{Backend, Rng};
use kernels_gpu::{BackendChoice, select_backend};

use crate::world_model::{TRAIN_SEED, eval_table, held_out, load_world, save_f16};
use crate::{CliResult, emit, fail};

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
}

/// `kernels gru train`: BPTT with AdamW on simulated trajectories; saves every 100 iterations
/// and at the end, then evaluates on the held-out set.
pub fn train(backend: Rc<dyn Backend>, reason: &str, o: &TrainOptions) -> CliResult<()> {
    let data = sim::trajectories(TRAIN_SEED, o.trajectories, o.length)?;
    let windows = Windows::new(&data, o.trajectories, o.length, sim::FEATURES)?;
    let (model, mut store) = match &o.init {
        Some(p) => load_world(backend.clone(), p)?,
        None => {
            let config = WorldConfig {
                hidden: o.hidden,
                members: o.members,
                ..WorldConfig::DEFAULT
            };
            let mut store = ParamStore::new(backend.clone());
            let model = WorldModel::new(&mut store, config, &mut Rng::new(o.seed))?;
            (model, store)
        }
    };
    emit(&format!(
        "training the world model on {} ({reason}): {:?}, {} parameters; {} trajectories x {} \
         observations of the damped double pendulum; batch {}, horizon {}, AdamW lr {}\n",
        backend.name(),
        model.config,
        store.numel(),
        o.trajectories,
        o.length,
        o.batch,
        o.horizon,
        o.lr
    ))?;
    let mut opt = AdamW::new(o.lr).weight_decay(1e-4);
    let mut rng = Rng::new(o.seed ^ 0x9e37_79b9);
    let bar = indicatif::ProgressBar::new(o.iters as u64);
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
        opt.lr = o.lr * (0.1 + 0.9 * 0.5 * (1.0 + (std::f32::consts::PI * frac).cos()));
        let (s0, truth) = windows.sample(&mut rng, o.batch, o.horizon)?;
        let loss = model.train_step(&mut store, &mut opt, &s0, &truth)?;
        done = it + 1;
        if it % 10 == 0 || done == o.iters {
            let l = f64::from(pollster::block_on(backend.download(&loss))?.to_scalar()?);
            if !l.is_finite() {
                bar.abandon();
                return Err(fail(format!(
                    "training diverged at iteration {it}: loss {l}"
                )));
            }
            let s = smoothed.map_or(l, |s| 0.8 * s + 0.2 * l);
            smoothed = Some(s);
            bar.set_message(format!("loss {s:.5} lr {:.1e}", opt.lr));
        }
        if done % 100 == 0 {
            save_f16(&store, &o.out)?;
        }
        bar.inc(1);
        if start.elapsed() > limit {
            bar.println(format!("time limit reached after {done} iterations"));
            break;
        }
    }
    bar.finish();
    save_f16(&store, &o.out)?;
    emit(&format!(
        "{done} iterations in {:.1} s; weights written to {}\n",
        start.elapsed().as_secs_f64(),
        o.out.display()
    ))?;
    let eval = held_out(&model, &store, o.horizon)?;
    emit(&eval_table(&eval))?;
    Ok(())
}

/// Runs `kernels gru train` on the backend `--backend` (else `KERNELS_BACKEND`) selects.
pub fn run(backend: Option<&str>, o: &TrainOptions) -> CliResult<()> {
    let chosen = select_backend(BackendChoice::from_arg(backend)?)?;
    train(chosen.backend, &chosen.reason, o)
}
