//! The Train section: a small llama trained live in the tab on the addition task (the demo
//! model's), from scratch or from the transformer section's model, with a parity strip that
//! runs the first steps on the wasm CPU backend too. Plain data, tested natively; the browser
//! glue is `train::dom` (wasm32 only).
//!
//! The task, its batches, the training step and the held-out evaluation are kernels-core's
//! ([`kernels_core::models::llama::addition`], [`kernels_core::models::llama::train`]), the
//! ones `kernels train transformer` runs: the same seed and settings give the same batches.

#[cfg(target_arch = "wasm32")]
pub(crate) mod dom;

use std::collections::BTreeMap;
use std::rc::Rc;

use kernels_core::models::llama::addition::{self, SEQ, Size};
use kernels_core::models::llama::train::lr_at;
use kernels_core::models::llama::{Llama, LlamaConfig};
use kernels_core::op::ADAMW_WEIGHT_DECAY;
use kernels_core::optim::AdamW;
use kernels_core::parallel::DataParallel;
use kernels_core::{Backend, CpuBackend, Result, Rng, Tensor};
use web_time::Instant;

use crate::report::whole_number;
use crate::zip::{self, ZipError};

/// The model trained from scratch by default: the demo model's architecture
/// (`native-cli/models/adder`, 204,480 parameters: 2 layers, hidden 96, 4 query heads sharing 2
/// key/value heads, intermediate 256).
pub const DEMO_SIZE: Size = Size {
    hidden: 96,
    intermediate: 256,
    layers: 2,
    heads: 4,
    kv_heads: 2,
};

/// A smaller one (hidden 64, intermediate 128: 74,880 parameters), for quick runs on slow
/// devices (the e2e test's on SwiftShader); it learns the carries far more slowly.
pub const SMALL_SIZE: Size = Size {
    hidden: 64,
    intermediate: 128,
    ..DEMO_SIZE
};

/// The seed the held-out problems are drawn with (the CLI's).
pub const EVAL_SEED: u64 = 1;
/// The most held-out problems one evaluation answers.
pub const MAX_EVAL_PROBLEMS: usize = 10_000;

/// Where the weights start (the section's select).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// [`DEMO_SIZE`], initialized from the seed.
    Scratch,
    /// [`SMALL_SIZE`], initialized from the seed.
    Small,
    /// The transformer section's model (fine-tuning).
    Loaded,
}

impl Start {
    pub fn id(self) -> &'static str {
        match self {
            Start::Scratch => "scratch",
            Start::Small => "small",
            Start::Loaded => "finetune",
        }
    }
    pub fn from_id(id: &str) -> Option<Start> {
        [Start::Scratch, Start::Small, Start::Loaded]
            .into_iter()
            .find(|s| s.id() == id)
    }
    /// The size of a model from scratch (`None`: fine-tuning).
    pub fn size(self) -> Option<Size> {
        match self {
            Start::Scratch => Some(DEMO_SIZE),
            Start::Small => Some(SMALL_SIZE),
            Start::Loaded => None,
        }
    }
    /// The default peak learning rate: lower when fine-tuning a trained model.
    pub fn default_lr(self) -> f32 {
        match self {
            Start::Scratch | Start::Small => 3e-3,
            Start::Loaded => 1e-4,
        }
    }
}

/// The weights a run starts from.
#[derive(Debug, Clone, Copy)]
pub enum Init<'a> {
    /// A new model of this size, initialized from the seed.
    Scratch(Size),
    /// These weights (fine-tuning; the config must fit the task).
    Weights(&'a LlamaConfig, &'a BTreeMap<String, Tensor>),
}

/// What the visitor sets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Steps of the run (the learning-rate schedule spans them).
    pub steps: usize,
    pub batch: usize,
    /// Peak learning rate (warmup, then cosine decay to a tenth).
    pub lr: f32,
    /// Held-out accuracy every this many steps (and at the end).
    pub eval_every: usize,
    /// Held-out problems per evaluation (one batch).
    pub eval_problems: usize,
    /// Steps also run on the wasm CPU backend for the parity strip (0: none).
    pub parity_steps: usize,
    pub seed: u64,
}

impl Default for Settings {
    fn default() -> Self {
        // The demo model's recipe (`kernels train transformer`'s defaults).
        Settings {
            steps: 6000,
            batch: 64,
            lr: Start::Scratch.default_lr(),
            eval_every: 100,
            eval_problems: 200,
            parity_steps: 20,
            seed: 0,
        }
    }
}

pub const MAX_STEPS: usize = 100_000;
pub const MAX_BATCH: usize = 512;

impl Settings {
    /// Parses steps, batch, learning rate, evaluation interval, held-out problems and parity
    /// steps, saying which one is wrong and why.
    pub fn parse(fields: [&str; 6], seed: u64) -> std::result::Result<Settings, String> {
        let lr: f32 = fields[2]
            .trim()
            .parse()
            .map_err(|_| format!("learning rate: `{}` is not a number", fields[2]))?;
        if !(lr.is_finite() && lr > 0.0 && lr <= 1.0) {
            return Err(format!("learning rate: {lr} is not in (0, 1]"));
        }
        Ok(Settings {
            steps: whole_number(fields[0], "steps", 1, MAX_STEPS)?,
            batch: whole_number(fields[1], "batch", 1, MAX_BATCH)?,
            lr,
            eval_every: whole_number(fields[3], "evaluate every", 1, MAX_STEPS)?,
            eval_problems: whole_number(fields[4], "held-out problems", 1, MAX_EVAL_PROBLEMS)?,
            parity_steps: whole_number(fields[5], "parity steps", 0, MAX_STEPS)?,
            seed,
        })
    }
}

/// One step's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepFigures {
    pub step: usize,
    pub loss: f32,
    /// The wasm CPU backend's loss on the same batch from the same weights (parity steps).
    pub cpu_loss: Option<f32>,
}

/// A training run: the model on its backend, optionally its shadow on the CPU for the first
/// [`Settings::parity_steps`] steps, and what the run has measured.
pub struct Trainer {
    pub settings: Settings,
    dp: DataParallel<Llama>,
    rng: Rng,
    /// The same model on the CPU and its batch stream, while parity steps remain.
    shadow: Option<(DataParallel<Llama>, Rng)>,
    pub losses: Vec<f32>,
    /// `(step, loss on the backend, loss on the CPU)` for each parity step.
    pub parity: Vec<(usize, f32, f32)>,
    /// `(steps done, held-out exact match)`.
    pub evals: Vec<(usize, f64)>,
    /// Seconds spent in the backend's steps (each until its loss was read), not yields or the
    /// CPU shadow's steps.
    pub seconds: f64,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("settings", &self.settings)
            .field("step", &self.step())
            .finish()
    }
}

fn optimizer(lr: f32) -> AdamW {
    AdamW::new(lr).weight_decay(ADAMW_WEIGHT_DECAY)
}

impl Trainer {
    /// A run on `backend` from `init`. With `shadow`, the first
    /// `parity_steps` steps run on a CPU copy too.
    pub async fn new(
        settings: Settings,
        init: Init<'_>,
        backend: Rc<dyn Backend>,
        shadow: bool,
    ) -> Result<Trainer> {
        let mut rng = Rng::new(settings.seed);
        // The weights on the host first: the backend's model and the CPU shadow start from the
        // same bits without a download.
        let (config, host) = match init {
            Init::Weights(config, tensors) => {
                addition::check_fits(config)?;
                // Training updates f32 parameters: weights loaded in a weight dtype (f16,
                // bf16, GGML blocks) are decoded first.
                let decoded = tensors
                    .iter()
                    .map(|(n, t)| Ok((n.clone(), t.dequantize()?)))
                    .collect::<Result<_>>()?;
                (config.clone(), decoded)
            }
            Init::Scratch(size) => {
                let init =
                    Llama::init(addition::config(size), Rc::new(CpuBackend::new()), &mut rng)?;
                (init.config.clone(), init.store.to_host().await?)
            }
        };
        let model = Llama::from_tensors(config.clone(), &host, backend)?;
        let shadow = if shadow && settings.parity_steps > 0 {
            let cpu = Llama::from_tensors(config, &host, Rc::new(CpuBackend::new()))?;
            let dp = DataParallel::new(vec![cpu], optimizer(settings.lr)).await?;
            Some((dp, rng.clone()))
        } else {
            None
        };
        Ok(Trainer {
            settings,
            dp: DataParallel::new(vec![model], optimizer(settings.lr)).await?,
            rng,
            shadow,
            losses: Vec::new(),
            parity: Vec::new(),
            evals: Vec::new(),
            seconds: 0.0,
        })
    }

    /// Steps done.
    pub fn step(&self) -> usize {
        self.losses.len()
    }

    pub fn done(&self) -> bool {
        self.step() >= self.settings.steps
    }

    /// The model being trained.
    pub fn model(&self) -> Option<&Llama> {
        self.dp.replicas().first()
    }

    /// One step on the backend (awaiting its loss), then the same on the CPU shadow while
    /// parity steps remain.
    pub async fn train_step(&mut self) -> Result<StepFigures> {
        let step = self.step();
        let lr = lr_at(step, self.settings.steps, self.settings.lr);
        let t = Instant::now();
        self.dp.set_lr(lr);
        let report = addition::train_step(&mut self.dp, &mut self.rng, self.settings.batch).await?;
        let loss = report.loss().await?;
        self.seconds += t.elapsed().as_secs_f64();
        self.losses.push(loss);
        let mut cpu_loss = None;
        if let Some((dp, rng)) = self.shadow.as_mut() {
            dp.set_lr(lr);
            let r = addition::train_step(dp, rng, self.settings.batch).await?;
            let l = r.loss().await?;
            self.parity.push((step, loss, l));
            cpu_loss = Some(l);
        }
        if self.parity.len() >= self.settings.parity_steps {
            self.shadow = None;
        }
        Ok(StepFigures {
            step: step + 1,
            loss,
            cpu_loss,
        })
    }

    /// Whether the held-out accuracy is due after the last step.
    pub fn eval_due(&self) -> bool {
        let s = self.step();
        s > 0 && (s.is_multiple_of(self.settings.eval_every) || self.done())
    }

    /// Held-out exact match on [`Settings::eval_problems`] problems, recorded at the current
    /// step.
    pub async fn evaluate(&mut self) -> Result<f64> {
        let model = self
            .dp
            .replicas()
            .first()
            .ok_or_else(|| kernels_core::Error::Empty {
                op: "train",
                tensor: "replicas".into(),
            })?;
        let n = self.settings.eval_problems;
        let (ok, n, _) = addition::evaluate(model, n, EVAL_SEED, n).await?;
        let acc = ok as f64 / n.max(1) as f64;
        self.evals.push((self.step(), acc));
        Ok(acc)
    }

    /// The largest `|loss - cpu loss|` over the parity steps, and the largest relative one.
    pub fn parity_diff(&self) -> Option<(f32, f32)> {
        parity_diff(&self.parity)
    }

    /// Steps and training tokens per second of the backend's own step time.
    pub fn rates(&self) -> Option<(f64, f64)> {
        (self.seconds > 0.0 && self.step() > 0).then(|| {
            let s = self.step() as f64 / self.seconds;
            (s, s * (self.settings.batch * SEQ) as f64)
        })
    }

    /// The trained model as a Hugging Face directory's files: `config.json`,
    /// `model.safetensors`, `tokenizer.json`.
    pub async fn files(&self) -> Result<BTreeMap<String, Vec<u8>>> {
        let model = self.model().ok_or_else(|| kernels_core::Error::Empty {
            op: "train",
            tensor: "replicas".into(),
        })?;
        Ok([
            ("config.json", model.config.to_json().into_bytes()),
            ("model.safetensors", model.store.save().await?),
            ("tokenizer.json", addition::tokenizer_json().into_bytes()),
        ]
        .into_iter()
        .map(|(n, b)| (n.to_string(), b))
        .collect())
    }
}

/// The parity strip's budget: each parity step's losses on the backend and on the wasm CPU
/// agree to `|loss - cpu| <= PARITY_ATOL + PARITY_RTOL * |cpu|`. The relative part is the CLI's
/// budget for wgpu replicas against one CPU (`native-cli/tests/devices_cli.rs`,
/// kernels-core/README.md "Data-parallel training"): same starting bits, same batches, so only
/// the kernels' own rounding, compounded through the AdamW steps. The absolute floor is for a
/// trained model's loss near zero (fine-tuning), where each token's `logsumexp(logits) - logit`
/// is rounded at the logits' magnitude (an f32 ulp of a logit of 10 is 1e-6), not the loss's.
pub const PARITY_ATOL: f32 = 1e-5;
pub const PARITY_RTOL: f32 = 1e-4;

/// Whether every `(step, loss, cpu loss)` row is within the parity budget (NaN never is).
pub fn parity_within(rows: &[(usize, f32, f32)]) -> bool {
    rows.iter()
        .all(|&(_, a, b)| (a - b).abs() <= PARITY_ATOL + PARITY_RTOL * b.abs())
}

/// The largest absolute and relative loss differences of `(step, loss, cpu loss)` rows.
pub fn parity_diff(rows: &[(usize, f32, f32)]) -> Option<(f32, f32)> {
    rows.iter().fold(None, |acc, &(_, a, b)| {
        let d = (a - b).abs();
        let r = d / b.abs().max(f32::MIN_POSITIVE);
        let (d, r) = if d.is_nan() {
            (f32::INFINITY, f32::INFINITY)
        } else {
            (d, r)
        };
        let (md, mr) = acc.unwrap_or((0.0, 0.0));
        Some((md.max(d), mr.max(r)))
    })
}

/// The files as one zip under the folder `dir`.
pub fn zip_files(
    dir: &str,
    files: &BTreeMap<String, Vec<u8>>,
) -> std::result::Result<Vec<u8>, ZipError> {
    let names: Vec<String> = files.keys().map(|n| format!("{dir}/{n}")).collect();
    let entries: Vec<(&str, &[u8])> = names
        .iter()
        .zip(files.values())
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    zip::stored(&entries)
}

/// The loss chart's value range: the losses' span with 8% headroom (a flat run still gets a
/// visible range), for [`crate::world::Panel`].
pub fn loss_range(losses: &[f32]) -> (f64, f64) {
    let finite = losses
        .iter()
        .filter(|l| l.is_finite())
        .map(|&l| f64::from(l));
    let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let span = (hi - lo).max(0.05);
    ((lo - 0.08 * span).max(0.0), hi + 0.08 * span)
}

#[cfg(test)]
mod tests {
    use kernels_core::backend::now_or_never;

    use super::*;

    fn settings(steps: usize) -> Settings {
        Settings {
            steps,
            batch: 8,
            lr: 1e-2,
            eval_every: 3,
            eval_problems: 6,
            parity_steps: 2,
            seed: 5,
        }
    }

    #[test]
    fn settings_parse_and_name_bad_fields() {
        let s = Settings::parse(["50", "16", "0.001", "10", "40", "5"], 3).unwrap();
        assert_eq!(
            (s.steps, s.batch, s.eval_every, s.parity_steps, s.seed),
            (50, 16, 10, 5, 3)
        );
        assert!((s.lr - 1e-3).abs() < 1e-9);
        let bad = |i: usize, v: &str| {
            let mut f = ["50", "16", "0.001", "10", "40", "5"];
            f[i] = v;
            Settings::parse(f, 0).unwrap_err()
        };
        assert!(bad(0, "0").starts_with("steps"));
        assert!(bad(1, "x").starts_with("batch"));
        assert!(bad(2, "NaN").starts_with("learning rate"));
        assert!(bad(2, "-1").starts_with("learning rate"));
        assert!(bad(3, "0").starts_with("evaluate"));
        assert!(bad(4, "0").starts_with("held-out"));
        assert_eq!(Start::from_id("finetune"), Some(Start::Loaded));
        assert_eq!(Start::from_id(Start::Scratch.id()), Some(Start::Scratch));
    }

    #[test]
    fn a_run_trains_evaluates_and_saves_a_loadable_directory() {
        let cpu: Rc<dyn Backend> = Rc::new(CpuBackend::new());
        let mut t = now_or_never(Trainer::new(
            settings(4),
            Init::Scratch(SMALL_SIZE),
            cpu.clone(),
            true,
        ))
        .unwrap()
        .unwrap();
        let mut evals = 0;
        while !t.done() {
            let f = now_or_never(t.train_step()).unwrap().unwrap();
            assert!(f.loss.is_finite());
            assert_eq!(f.cpu_loss.is_some(), f.step <= 2);
            if t.eval_due() {
                now_or_never(t.evaluate()).unwrap().unwrap();
                evals += 1;
            }
        }
        // Step 3 (every 3) and the end.
        assert_eq!(evals, 2);
        assert_eq!(t.parity.len(), 2);
        // CPU against CPU: the same bits.
        assert_eq!(t.parity_diff(), Some((0.0, 0.0)));
        assert!(t.losses[3] < t.losses[0], "{:?}", t.losses);
        assert!(t.rates().is_some());
        let files = now_or_never(t.files()).unwrap().unwrap();
        // The directory loads as the transformer section's model, and fine-tunes.
        let src = crate::llm::Source::from_files("trained", &files).unwrap();
        assert_eq!(src.config.hidden_size, SMALL_SIZE.hidden);
        let mut again = now_or_never(Trainer::new(
            settings(1),
            Init::Weights(&src.config, &src.checkpoint.tensors),
            cpu,
            false,
        ))
        .unwrap()
        .unwrap();
        now_or_never(again.train_step()).unwrap().unwrap();
        assert!(again.parity.is_empty());
        let zip = zip_files("adder-trained", &files).unwrap();
        assert!(zip.len() > files["model.safetensors"].len());
    }

    #[test]
    fn scratch_runs_repeat_and_models_off_the_task_are_refused() {
        let cpu: Rc<dyn Backend> = Rc::new(CpuBackend::new());
        let run = || {
            let mut t = now_or_never(Trainer::new(
                settings(2),
                Init::Scratch(SMALL_SIZE),
                cpu.clone(),
                false,
            ))
            .unwrap()
            .unwrap();
            now_or_never(t.train_step()).unwrap().unwrap();
            now_or_never(t.train_step()).unwrap().unwrap();
            t.losses
        };
        assert_eq!(run(), run());
        let mut cfg = addition::config(SMALL_SIZE);
        cfg.vocab_size = 32;
        let e = now_or_never(Trainer::new(
            settings(2),
            Init::Weights(&cfg, &BTreeMap::new()),
            cpu,
            false,
        ))
        .unwrap()
        .unwrap_err();
        assert!(e.to_string().contains("vocabulary"), "{e}");
    }

    #[test]
    fn parity_and_chart_ranges() {
        assert_eq!(parity_diff(&[]), None);
        let (d, r) = parity_diff(&[(0, 2.0, 2.0), (1, 1.0, 1.001)]).unwrap();
        assert!((d - 0.001).abs() < 1e-6 && (r - 0.001).abs() < 1e-5);
        assert_eq!(parity_diff(&[(0, f32::NAN, 1.0)]).unwrap().0, f32::INFINITY);
        assert!(parity_within(&[(0, 2.0, 2.0001), (1, 3e-4, 3.05e-4)]));
        assert!(!parity_within(&[(0, 2.0, 2.001)]));
        assert!(!parity_within(&[(0, f32::NAN, 1.0)]));
        let (lo, hi) = loss_range(&[2.5, 1.0, f32::NAN]);
        assert!(lo < 1.0 && hi > 2.5);
        assert_eq!(loss_range(&[]), (0.0, 1.0));
    }
}
