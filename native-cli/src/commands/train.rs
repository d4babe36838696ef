//! `kernels train transformer`: trains a llama-architecture model on the addition task with
//! kernels-core's autograd and AdamW, on any backend, and writes Hugging Face checkpoints
//! (`config.json`, `model.safetensors`, `tokenizer.json`) that `kernels generate` and
//! `transformers` both load.
//!
//! `--devices cpu,wgpu,wgpu` trains data-parallel ([`kernels_core::parallel::DataParallel`]):
//! one replica per entry, the global batch split across them, gradients averaged through the
//! host; without it, one replica on `--backend`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use kernels_core::Rng;
use kernels_core::models::llama::train::lr_at;
use kernels_core::models::llama::{Llama, LlamaConfig};
use kernels_core::op::ADAMW_WEIGHT_DECAY;
use kernels_core::optim::AdamW;
use kernels_core::parallel::DataParallel;
use kernels_gpu::{BackendChoice, Selected, select_backend, select_devices};

use crate::addition;
use crate::{CliResult, emit_json_line, fail};

/// Options of `kernels train transformer`.
#[derive(Debug, Clone)]
pub struct TrainArgs {
    pub out: PathBuf,
    pub steps: usize,
    pub batch: usize,
    pub lr: f32,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub intermediate: usize,
    pub seed: u64,
    pub backend: Option<String>,
    /// Write a checkpoint every this many steps (and at the end).
    pub checkpoint_every: usize,
    /// Held-out problems evaluated at each checkpoint (0: none).
    pub eval_problems: usize,
    /// Data-parallel replicas, e.g. `cpu,wgpu,wgpu` (`None`: one, on `backend`).
    pub devices: Option<String>,
    /// One JSON object per logged step on stdout instead of the progress bar.
    pub json: bool,
}

/// The replicas' backends: `--devices` when given, else the one `--backend` selects.
pub fn replica_backends(devices: Option<&str>, backend: Option<&str>) -> CliResult<Vec<Selected>> {
    Ok(match devices {
        Some(list) => select_devices(list)?,
        None => vec![select_backend(BackendChoice::from_arg(backend)?)?],
    })
}

/// The `--json` object of one logged step.
pub fn step_json(
    step: usize,
    loss: f32,
    tokens_per_s: f64,
    devices: &[String],
    path: &str,
    reduce_bytes: u64,
) -> serde_json::Value {
    serde_json::json!({
        "step": step,
        "loss": loss,
        "tokens_per_s": tokens_per_s,
        "devices": devices,
        "reduce": path,
        "reduce_bytes": reduce_bytes,
    })
}

/// The llama config of the addition model.
pub fn config(args: &TrainArgs) -> LlamaConfig {
    addition::config(addition::Size {
        hidden: args.hidden,
        intermediate: args.intermediate,
        layers: args.layers,
        heads: args.heads,
        kv_heads: args.kv_heads,
    })
}

/// Writes a file through a temporary beside it, so a failed run leaves the old one whole (and
/// never replaces a device, FIFO or symlink: see [`crate::atomic_write`]).
fn write_atomic(path: &Path, bytes: &[u8]) -> CliResult<()> {
    crate::atomic_write::write_atomically(path, bytes)
        .map_err(|e| crate::fail(format!("cannot write {}: {e}", path.display())))
}

/// Writes `config.json`, `model.safetensors` and `tokenizer.json` into `dir`. Parameters holding
/// NaN or infinity are refused, so a diverged run never replaces a good checkpoint.
pub fn save_checkpoint(model: &Llama, dir: &Path) -> CliResult<()> {
    let host = pollster::block_on(model.store.to_host())?;
    for (name, t) in &host {
        if let Some(bad) = t.to_f32_vec()?.into_iter().find(|x| !x.is_finite()) {
            return Err(fail(format!(
                "train: parameter `{name}` holds {bad}; not writing a checkpoint to {}",
                dir.display()
            )));
        }
    }
    std::fs::create_dir_all(dir)?;
    let weights = pollster::block_on(model.store.save())?;
    write_atomic(&dir.join("model.safetensors"), &weights)?;
    write_atomic(&dir.join("config.json"), model.config.to_json().as_bytes())?;
    write_atomic(
        &dir.join("tokenizer.json"),
        addition::tokenizer_json().as_bytes(),
    )?;
    Ok(())
}

/// Runs `kernels train transformer`.
pub fn run(args: &TrainArgs) -> CliResult<()> {
    train(args).map(drop)
}

/// Trains and checkpoints; returns the final held-out accuracy when evaluated.
pub fn train(args: &TrainArgs) -> CliResult<Option<f64>> {
    if args.steps == 0 || args.batch == 0 {
        return Err(fail("train: --steps and --batch must be > 0"));
    }
    // The same rule as the adamw_step op, before any work: NaN or infinity would train a model
    // of NaN.
    if !(args.lr.is_finite() && args.lr > 0.0) {
        return Err(fail(format!(
            "train: --lr must be a finite number > 0, got {}",
            args.lr
        )));
    }
    let chosen = replica_backends(args.devices.as_deref(), args.backend.as_deref())?;
    let cfg = config(args);
    let mut rng = Rng::new(args.seed);
    // Replica 0 is initialized as a single-device run would be (the batches follow from the
    // same stream); DataParallel copies its parameters to the others.
    let mut replicas = Vec::with_capacity(chosen.len());
    for (i, c) in chosen.iter().enumerate() {
        let mut other = Rng::new(args.seed);
        let r = if i == 0 { &mut rng } else { &mut other };
        replicas.push(Llama::init(cfg.clone(), c.backend.clone(), r)?);
    }
    let opt = AdamW::new(args.lr).weight_decay(ADAMW_WEIGHT_DECAY);
    let mut dp = pollster::block_on(DataParallel::new(replicas, opt))?;
    let devices: Vec<String> = chosen.iter().map(|c| c.backend.name()).collect();
    eprintln!(
        "training a {}-parameter llama ({} layers, hidden {}, {} heads / {} kv heads) on {} \
         ({}; all-reduce: {})",
        dp.replicas()[0].config.num_parameters(),
        args.layers,
        args.hidden,
        args.heads,
        args.kv_heads,
        devices.join(" + "),
        chosen
            .iter()
            .map(|c| c.reason.as_str())
            .collect::<Vec<_>>()
            .join("; "),
        dp.path().name()
    );
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(args.steps as u64)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} steps  {msg}  [{elapsed_precise} < {eta_precise}]",
        )
        .map_err(|e| fail(format!("progress bar: {e}")))?,
    );
    let start = Instant::now();
    let mut tokens = 0usize;
    let mut accuracy = None;
    for step in 0..args.steps {
        dp.set_lr(lr_at(step, args.steps, args.lr));
        let report = pollster::block_on(addition::train_step(&mut dp, &mut rng, args.batch))?;
        tokens += args.batch * addition::SEQ;
        bar.inc(1);
        let last = step + 1 == args.steps;
        let checkpoint =
            last || (args.checkpoint_every > 0 && (step + 1) % args.checkpoint_every == 0);
        if step % 10 == 0 || checkpoint {
            let l = pollster::block_on(report.loss())?;
            let rate = tokens as f64 / start.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!("loss {l:.4}  {rate:.0} tok/s"));
            if args.json {
                let path = dp.path().name();
                emit_json_line(&step_json(
                    step,
                    l,
                    rate,
                    &devices,
                    path,
                    report.reduce_bytes(),
                ))?;
            }
            if !l.is_finite() {
                bar.abandon();
                return Err(fail(format!(
                    "train: the loss became {l} at step {}; stopped (lower --lr?); the last good \
                     checkpoint, if any, is kept in {}",
                    step + 1,
                    args.out.display()
                )));
            }
        }
        if checkpoint {
            let model = &dp.replicas()[0];
            save_checkpoint(model, &args.out)?;
            if args.eval_problems > 0 {
                let (ok, n, _) = addition::evaluate(model, args.eval_problems, 1, 256)?;
                let acc = ok as f64 / n as f64;
                bar.suspend(|| {
                    eprintln!(
                        "step {}: held-out exact match {ok}/{n} = {:.1}%, checkpoint in {}",
                        step + 1,
                        100.0 * acc,
                        args.out.display()
                    )
                });
                accuracy = Some(acc);
            }
        }
    }
    bar.finish();
    if dp.len() > 1 {
        eprintln!(
            "replicas' largest parameter difference from replica 0: {:e}",
            pollster::block_on(dp.divergence())?
        );
    }
    eprintln!(
        "{} steps in {:.1} s; wrote {}",
        args.steps,
        start.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(accuracy)
}
