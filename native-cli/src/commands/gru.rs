//! The arguments of `kernels gru ...` and their dispatch to [`crate::world_model`].

pub mod bench;

use std::path::PathBuf;

use clap::Subcommand;
use kernels_gpu::{BackendChoice, select_backend};

use crate::world_model::{self as gru, TrainOptions};
use crate::{CliResult, emit};
use bench::GruBenchOptions;

#[derive(Subcommand, Debug)]
pub enum GruCmd {
    /// Train the world model by backpropagation through time (AdamW) on simulated trajectories
    /// of a damped double pendulum; saves F16 weights (every 100 iterations and at the end),
    /// then reports the held-out error against persistence.
    Train {
        /// Where to write the weights.
        #[arg(long, default_value_os_t = gru::default_weights())]
        out: PathBuf,
        /// Continue from these weights.
        #[arg(long)]
        init: Option<PathBuf>,
        #[arg(long, default_value_t = 3000)]
        iters: usize,
        /// Stop (and save) after this many minutes.
        #[arg(long, default_value_t = 12.0)]
        max_minutes: f64,
        #[arg(long, default_value_t = 32)]
        batch: usize,
        /// Steps rolled out (and backpropagated through) per window.
        #[arg(long, default_value_t = gru::HORIZON)]
        horizon: usize,
        #[arg(long, default_value_t = 2e-3)]
        lr: f32,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Training trajectories.
        #[arg(long, default_value_t = 512)]
        trajectories: usize,
        /// Observations per trajectory (0.05 s apart).
        #[arg(long, default_value_t = 120)]
        length: usize,
        /// GRU hidden size (fresh models only).
        #[arg(long, default_value_t = 256)]
        hidden: usize,
        /// Ensemble members (fresh models only).
        #[arg(long, default_value_t = 5)]
        members: usize,
        /// cpu, wgpu or auto (default: $KERNELS_BACKEND, else auto).
        #[arg(long)]
        backend: Option<String>,
    },
    /// Run a one-layer GRU whose weights carry PyTorch `nn.GRU` state_dict names on a
    /// safetensors input; writes `output` [seq, batch, hidden] and `h_n` [1, batch, hidden] as
    /// PyTorch returns them. Nothing is written unless every shape checks out and the run
    /// succeeds.
    Run {
        /// weight_ih_l0 [3H, I], weight_hh_l0 [3H, H], bias_ih_l0 [3H], bias_hh_l0 [3H].
        #[arg(long, value_name = "W.safetensors")]
        weights: PathBuf,
        /// x [seq, batch, I] and optionally h0 [1, batch, H] (zeros when absent).
        #[arg(long, value_name = "X.safetensors")]
        input: PathBuf,
        /// Output file (replaced atomically on success).
        #[arg(long, value_name = "Y.safetensors")]
        out: PathBuf,
        /// cpu, wgpu, cuda or auto (default: $KERNELS_BACKEND, else auto).
        #[arg(long)]
        backend: Option<String>,
    },
    /// Latency of the world-model pipeline, CPU against wgpu in one run: state encode, the
    /// ensemble rollout, rank-k svd_lowrank of the residuals, corrections and the total
    /// (median of several runs), with wgpu dispatches per rollout step.
    Bench {
        /// Comma-separated: cpu, wgpu (default: cpu, plus wgpu when an adapter exists).
        #[arg(long)]
        backend: Option<String>,
        #[arg(long, default_value_t = 32)]
        batch: usize,
        #[arg(long, default_value_t = gru::HORIZON)]
        steps: usize,
        #[arg(long, default_value_t = 32)]
        rank: usize,
        #[arg(long, default_value_t = 7)]
        runs: usize,
        #[arg(long, default_value_os_t = gru::default_weights())]
        weights: PathBuf,
    },
    /// Predict held-out trajectories: per-step error of the ensemble mean against persistence
    /// ("no change"), ensemble spread, and the residuals' rank-k compression.
    Predict {
        #[arg(long, default_value_os_t = gru::default_weights())]
        weights: PathBuf,
        #[arg(long, default_value_t = gru::HORIZON)]
        horizon: usize,
        /// Rank of the residual compression.
        #[arg(long, default_value_t = 32)]
        rank: usize,
        #[arg(long)]
        backend: Option<String>,
    },
}

pub fn run(cmd: GruCmd) -> CliResult<()> {
    match cmd {
        GruCmd::Train {
            out,
            init,
            iters,
            max_minutes,
            batch,
            horizon,
            lr,
            seed,
            trajectories,
            length,
            hidden,
            members,
            backend,
        } => {
            let chosen = select_backend(BackendChoice::from_arg(backend.as_deref())?)?;
            gru::train(
                chosen.backend,
                &chosen.reason,
                &TrainOptions {
                    out,
                    init,
                    iters,
                    max_minutes,
                    batch,
                    horizon,
                    lr,
                    seed,
                    trajectories,
                    length,
                    hidden,
                    members,
                },
            )
        }
        GruCmd::Run {
            weights,
            input,
            out,
            backend,
        } => emit(&gru::run_files(&weights, &input, &out, backend.as_deref())?),
        GruCmd::Bench {
            backend,
            batch,
            steps,
            rank,
            runs,
            weights,
        } => {
            let o = GruBenchOptions {
                backends: backend,
                batch,
                steps,
                rank,
                runs,
                weights: Some(weights),
            };
            let b = bench::measure(&o)?;
            emit(&bench::table(&b, &o))
        }
        GruCmd::Predict {
            weights,
            horizon,
            rank,
            backend,
        } => {
            let chosen = select_backend(BackendChoice::from_arg(backend.as_deref())?)?;
            let rep = gru::predict(chosen.backend, &weights, horizon, rank)?;
            emit(&rep)
        }
    }
}
