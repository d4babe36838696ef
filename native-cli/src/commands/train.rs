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
    /// Replace a non-empty `--out` directory (the new model is written beside it and swapped
    /// in, so the directory ends up holding that model only).
    pub force: bool,
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

/// Writes `config.json`, `model.safetensors` and `tokenizer.json` as the whole of `dir`: into a
/// fresh directory beside it, swapped in by renames ([`crate::atomic_write::write_dir_atomically`]),
/// so `dir` never mixes two models. Parameters holding NaN or infinity are refused, so a
/// diverged run never replaces a good checkpoint.
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
    let weights = pollster::block_on(model.store.save())?;
    let config = model.config.to_json();
    let tokenizer = addition::tokenizer_json();
    crate::atomic_write::write_dir_atomically(
        dir,
        &[
            ("model.safetensors", &weights),
            ("config.json", config.as_bytes()),
            ("tokenizer.json", tokenizer.as_bytes()),
        ],
    )
    .map_err(|e| {
        fail(format!(
            "--out {}: cannot write the checkpoint: {e}",
            dir.display()
        ))
    })
}

/// `--out` must be a directory that is missing or empty, unless `--force`; anything but a
/// directory is refused. Checked before training, so a bad `--out` costs nothing.
pub fn check_out(out: &Path, force: bool) -> CliResult<()> {
    let meta = match std::fs::metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(fail(format!("--out {}: {e}", out.display()))),
        Ok(m) => m,
    };
    if !meta.is_dir() {
        return Err(fail(format!(
            "--out {}: exists and is not a directory; give a directory for the model's files",
            out.display()
        )));
    }
    let mut names: Vec<String> = std::fs::read_dir(out)
        .map_err(|e| fail(format!("--out {}: {e}", out.display())))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    if names.is_empty() || force {
        return Ok(());
    }
    names.sort();
    let shown = names.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    let more = if names.len() > 5 { ", ..." } else { "" };
    Err(fail(format!(
        "--out {}: the directory is not empty (it holds {shown}{more}); pass --force to replace \
         its contents with the new model, or give another directory",
        out.display()
    )))
}

/// The size flags checked before anything is built: each at least 1, the heads dividing as a
/// llama needs (named by flag, not by config field), at least one row per replica, and the
/// memory a step needs (parameters, gradients and AdamW's moments per replica, plus the
/// activations of the batch) available.
pub fn check_sizes(args: &TrainArgs, replicas: usize) -> CliResult<LlamaConfig> {
    use crate::limits::{check_fits, positive, product, sum};
    for (flag, v) in [
        ("--steps", args.steps),
        ("--batch", args.batch),
        ("--hidden", args.hidden),
        ("--layers", args.layers),
        ("--heads", args.heads),
        ("--kv-heads", args.kv_heads),
        ("--intermediate", args.intermediate),
    ] {
        positive(flag, v)?;
    }
    // Held-out problems are drawn with replacement: more than the set holds only repeats them,
    // and 10^12 of them would run for days at each checkpoint.
    let distinct = crate::addition::held_out_count();
    if args.eval_problems > distinct {
        return Err(fail(format!(
            "--eval-problems {}: must be at most {distinct}, the number of distinct held-out \
             problems (0: no evaluation)",
            args.eval_problems
        )));
    }
    if !args.lr.is_finite() || args.lr <= 0.0 {
        return Err(fail(format!(
            "--lr must be a finite number > 0, got {}",
            args.lr
        )));
    }
    if !args.hidden.is_multiple_of(args.heads) {
        return Err(fail(format!(
            "--hidden {} is not a multiple of --heads {}",
            args.hidden, args.heads
        )));
    }
    let head_dim = args.hidden / args.heads;
    if !head_dim.is_multiple_of(2) {
        return Err(fail(format!(
            "--hidden {} / --heads {} = {head_dim} per head: must be even (rotary embeddings \
             rotate pairs)",
            args.hidden, args.heads
        )));
    }
    if !args.heads.is_multiple_of(args.kv_heads) {
        return Err(fail(format!(
            "--heads {} is not a multiple of --kv-heads {}",
            args.heads, args.kv_heads
        )));
    }
    if args.batch < replicas {
        return Err(fail(format!(
            "--batch {}: smaller than the {replicas} replicas of --devices (each needs a row)",
            args.batch
        )));
    }
    let cfg = config(args);
    let shape = format!(
        "--hidden {}, --layers {}, --intermediate {}",
        args.hidden, args.layers, args.intermediate
    );
    let params = cfg.checked_num_parameters().ok().map(|n| n as u64);
    // Weights, gradients and AdamW's two moments, f32, on every replica.
    let param_bytes = params.and_then(|n| product(&[n, 16, replicas as u64]));
    check_fits(
        &shape,
        "the model's parameters with their gradients and AdamW moments",
        param_bytes,
    )?;
    // Per token and layer, what a step keeps for the backward: the q/k/v/o and norm
    // activations, the MLP's, and each head's attention row; then the logits.
    let (b, seq, h, i) = (
        args.batch as u64,
        addition::SEQ as u64,
        args.hidden as u64,
        args.intermediate as u64,
    );
    let per_layer = sum(&[
        h.checked_mul(10),
        i.checked_mul(4),
        (args.heads as u64).checked_mul(seq * 2),
    ]);
    let activations = sum(&[
        per_layer.and_then(|p| product(&[p, args.layers as u64, b, seq, 4])),
        product(&[b, seq, addition::VOCAB.len() as u64, 4 * 3]),
    ]);
    check_fits(
        &format!("--batch {} (with {shape})", args.batch),
        "one training step's activations and the model's state",
        sum(&[activations, param_bytes]),
    )?;
    Ok(cfg)
}

/// Runs `kernels train transformer`.
pub fn run(args: &TrainArgs) -> CliResult<()> {
    train(args).map(drop)
}

/// Trains and checkpoints; returns the final held-out accuracy when evaluated.
pub fn train(args: &TrainArgs) -> CliResult<Option<f64>> {
    check_out(&args.out, args.force)?;
    let chosen = replica_backends(args.devices.as_deref(), args.backend.as_deref())?;
    // Sizes, the heads' shapes and the lr (NaN or infinity would train a model of NaN) before
    // any work.
    let cfg = check_sizes(args, chosen.len())?;
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
                let tok = addition::tokenizer()?;
                let (ok, n, _) =
                    addition::evaluate(model, &tok, args.eval_problems, 1, 256, &mut |_, _| {})?;
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
