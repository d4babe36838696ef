//! The binary's argument types below the top-level command (sampling, `train`, `gru`,
//! `bench llama`) and their dispatch, split from `main.rs` to keep each file readable.

use std::path::PathBuf;

use clap::Subcommand;
use kernels_core::models::llama::Sampling;
use native_cli::CliResult;
use native_cli::commands::bench;
use native_cli::commands::gru;
use native_cli::commands::gru::bench::GruBenchOptions;
use native_cli::commands::gru::train::TrainOptions;
use native_cli::world_model::HORIZON;

/// How `generate` and `chat` draw each token.
#[derive(clap::Args, Debug)]
pub(crate) struct SamplingArgs {
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    temperature: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = kernels_core::op::SAMPLE_TOP_K, allow_negative_numbers = true)]
    top_k: usize,
    /// Keep the most likely tokens holding this much probability (1: all).
    #[arg(long, default_value_t = kernels_core::op::SAMPLE_TOP_P, allow_negative_numbers = true)]
    top_p: f32,
    /// Seed of the sampling's random numbers.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    seed: u64,
}

impl SamplingArgs {
    /// The sampling settings, checked in the flags' words (`--top-p 2: ...`) before the
    /// sampler sees them.
    pub(crate) fn get(&self) -> CliResult<Sampling> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(native_cli::fail(format!(
                "--temperature {}: must be a finite number >= 0 (0 is greedy)",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(native_cli::fail(format!(
                "--top-p {}: must be in (0, 1] (1 keeps every token)",
                self.top_p
            )));
        }
        Ok(Sampling {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
        })
    }
}

#[derive(Subcommand, Debug)]
pub(crate) enum TrainCmd {
    /// A llama-architecture model on three-digit addition, with AdamW; writes a Hugging Face
    /// checkpoint (config.json, model.safetensors, tokenizer.json) to --out.
    Transformer {
        /// Directory of the checkpoint: missing or empty, or replaced whole with --force.
        #[arg(long)]
        out: PathBuf,
        /// Training steps (one batch each; the learning rate warms up, then decays).
        #[arg(long, default_value_t = 6000, allow_negative_numbers = true)]
        steps: usize,
        /// Problems per step (split across the --devices replicas).
        #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
        batch: usize,
        /// Peak AdamW learning rate.
        #[arg(long, default_value_t = 3e-3, allow_negative_numbers = true)]
        lr: f32,
        /// Hidden size (a multiple of --heads, with an even size per head).
        #[arg(long, default_value_t = 96, allow_negative_numbers = true)]
        hidden: usize,
        /// Transformer layers.
        #[arg(long, default_value_t = 2, allow_negative_numbers = true)]
        layers: usize,
        /// Attention heads (a multiple of --kv-heads).
        #[arg(long, default_value_t = 4, allow_negative_numbers = true)]
        heads: usize,
        /// Key/value heads (grouped-query attention when fewer than --heads).
        #[arg(long, default_value_t = 2, allow_negative_numbers = true)]
        kv_heads: usize,
        /// Width of the MLP (SwiGLU).
        #[arg(long, default_value_t = 256, allow_negative_numbers = true)]
        intermediate: usize,
        /// Seed of the initialization and the problems drawn.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        seed: u64,
        /// cpu, wgpu or auto (default: $KERNELS_BACKEND, else auto).
        #[arg(long)]
        backend: Option<String>,
        /// Checkpoint every N steps (and at the end).
        #[arg(long, default_value_t = 1000, allow_negative_numbers = true)]
        checkpoint_every: usize,
        /// Held-out problems evaluated at each checkpoint (0: none; at most the 100,107 held out).
        #[arg(long, default_value_t = 500, allow_negative_numbers = true)]
        eval_problems: usize,
        #[command(flatten)]
        dp: DpArgs,
        /// Replace a non-empty --out: the new model is written into a fresh directory beside it
        /// and swapped in, so --out ends up holding that model's files only.
        #[arg(long)]
        force: bool,
    },
}

/// Data-parallel training flags of `train transformer` and `gru train`.
#[derive(clap::Args, Debug)]
pub(crate) struct DpArgs {
    /// Data-parallel replicas, one per entry (cpu, wgpu, cuda, cuda:N, auto), e.g.
    /// cpu,wgpu,wgpu or cuda:0,cuda:1: the global batch is split across them and gradients
    /// averaged through the host. Default: one replica on --backend.
    #[arg(long)]
    pub(crate) devices: Option<String>,
    /// Print ONE JSON object per logged step instead of the progress bar: {"step", "loss",
    /// "tokens_per_s", "devices", "reduce", "reduce_bytes"} ("reduce": host, or none for one
    /// replica).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Subcommand, Debug)]
pub(crate) enum BenchCmd {
    /// The peers' llama protocol on a model directory: a random prompt through the KV cache,
    /// then greedy decode steps timed (argmax and the id's download included); prefill is one
    /// forward of --prefill-len tokens on a fresh cache after a warm-up, lm_head on the last
    /// position. Medians of --runs runs.
    ///
    /// --json prints ONE object: {"model", "backend", "threads", "params", "decode_tok_s",
    /// "prefill_tok_s", "dispatches_per_token", "submits_per_token", "bytes_down_per_token", "weights",
    /// "weight_bytes_per_token", "device_peak_bytes", "decode_weight_gb_s", "read_gb_s",
    /// "read_gb_s_best", ...},
    /// null where a figure does not apply (the CPU keeps no counters; CUDA has no submits;
    /// read_gb_s without --read-rate).
    #[command(verbatim_doc_comment)]
    Llama(BenchLlamaArgs),
}

#[derive(clap::Args, Debug)]
pub(crate) struct BenchLlamaArgs {
    /// Model directory (config.json, model.safetensors or shards, tokenizer.json optional) or
    /// GGUF file.
    #[arg(long)]
    pub(crate) model: PathBuf,
    /// cpu, wgpu, cuda or auto (default: $KERNELS_BACKEND, else auto).
    #[arg(long)]
    backend: Option<String>,
    /// Quantize the model's matrices as they load: q8_0, q4_0 or q4_k (rows that are not
    /// whole blocks fall back, as llama.cpp does; norms stay f32).
    #[arg(long, value_parser = native_cli::llama::parse_quantize)]
    quantize: Option<kernels_core::DType>,
    /// CPU threads (sets KERNELS_THREADS for this run; default: KERNELS_THREADS, else every
    /// core). The report's "threads" is the count the CPU's products use.
    #[arg(long, allow_negative_numbers = true)]
    threads: Option<usize>,
    /// Tokens of the random prompt before the timed decode steps.
    #[arg(long, default_value_t = 32, allow_negative_numbers = true)]
    prompt_len: usize,
    /// Decode steps timed per run.
    #[arg(long, default_value_t = 128, allow_negative_numbers = true)]
    new_tokens: usize,
    /// Tokens of the timed prefill (one forward on a fresh cache).
    #[arg(long, default_value_t = 256, allow_negative_numbers = true)]
    prefill_len: usize,
    /// Runs per figure (the median is reported).
    #[arg(long, default_value_t = 3, allow_negative_numbers = true)]
    runs: usize,
    /// After the runs, time a plain read loop over as many bytes as a decode step's weights,
    /// with the same threads and in huge pages as the weights are (CPU backend only; it needs
    /// that much memory again): what reading the weights alone allows decode on this machine.
    #[arg(long)]
    read_rate: bool,
    /// One JSON object instead of the text (format above).
    #[arg(long)]
    json: bool,
}

pub(crate) fn run_bench_llama(a: BenchLlamaArgs) -> CliResult<()> {
    let threads = match a.threads {
        Some(0) => {
            return Err(native_cli::fail(
                "bench llama: --threads must be at least 1",
            ));
        }
        Some(n) => {
            // SAFETY: set before any kernel, pool or adapter thread exists (only the main
            // thread runs here), so nothing reads the environment concurrently.
            unsafe { std::env::set_var("KERNELS_THREADS", n.to_string()) };
            Some(n)
        }
        // What the CPU's products will use: KERNELS_THREADS, else the machine's parallelism.
        None => Some(kernels_core::cpu::fast::config::threads()),
    };
    // Sized by the flags alone, before the model loads: each token holds at least its id, one
    // key, one value and one activation (16 bytes); the KV cache's own check follows once the
    // model's shape is known.
    let per_token = 16;
    native_cli::limits::check_fits(
        &format!("--prefill-len {}", a.prefill_len),
        "the prefill (at least 16 bytes per token)",
        native_cli::limits::product(&[a.prefill_len as u64, per_token]),
    )?;
    native_cli::limits::check_fits(
        &format!(
            "--prompt-len {} with --new-tokens {}",
            a.prompt_len, a.new_tokens
        ),
        "the decode (at least 16 bytes per token)",
        (a.prompt_len as u64)
            .checked_add(a.new_tokens as u64)
            .and_then(|n| n.checked_mul(per_token)),
    )?;
    bench::llama_model::run(&bench::llama_model::LlamaBenchOptions {
        model: a.model,
        backend: a.backend,
        quantize: a.quantize,
        threads,
        prompt_len: a.prompt_len,
        new_tokens: a.new_tokens,
        prefill_len: a.prefill_len,
        runs: a.runs,
        json: a.json,
        read_rate: a.read_rate,
    })
}

#[derive(Subcommand, Debug)]
pub(crate) enum GruCmd {
    /// Train the world model by backpropagation through time (AdamW) on simulated trajectories
    /// of a damped double pendulum; saves F16 weights (every 100 iterations and at the end),
    /// then reports the held-out error against persistence.
    Train {
        /// Where to write the weights (the shipped ones are
        /// native-cli/models/world/world.safetensors, embedded into the binary when it is built).
        #[arg(long)]
        out: PathBuf,
        /// Continue from these weights.
        #[arg(long)]
        init: Option<PathBuf>,
        /// Training iterations (one batch of windows each).
        #[arg(long, default_value_t = 3000, allow_negative_numbers = true)]
        iters: usize,
        /// Stop (and save) after this many minutes.
        #[arg(long, default_value_t = 12.0, allow_negative_numbers = true)]
        max_minutes: f64,
        /// Windows per iteration (split across the --devices replicas).
        #[arg(long, default_value_t = 32, allow_negative_numbers = true)]
        batch: usize,
        /// Steps rolled out (and backpropagated through) per window.
        #[arg(long, default_value_t = HORIZON, allow_negative_numbers = true)]
        horizon: usize,
        /// Peak AdamW learning rate (cosine decay to a tenth).
        #[arg(long, default_value_t = 2e-3, allow_negative_numbers = true)]
        lr: f32,
        /// Seed of the initialization and the windows drawn.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        seed: u64,
        /// Training trajectories.
        #[arg(long, default_value_t = 512, allow_negative_numbers = true)]
        trajectories: usize,
        /// Observations per trajectory (0.05 s apart).
        #[arg(long, default_value_t = 120, allow_negative_numbers = true)]
        length: usize,
        /// GRU hidden size (fresh models only).
        #[arg(long, default_value_t = 256, allow_negative_numbers = true)]
        hidden: usize,
        /// Ensemble members (fresh models only).
        #[arg(long, default_value_t = 5, allow_negative_numbers = true)]
        members: usize,
        /// cpu, wgpu or auto (default: $KERNELS_BACKEND, else auto).
        #[arg(long)]
        backend: Option<String>,
        #[command(flatten)]
        dp: DpArgs,
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
    /// (median of several runs), with wgpu dispatches per rollout step; CUDA too (cuda).
    ///
    /// --json prints ONE object: {"batch", "steps", "rank", "runs",
    /// "rows": [{"stage", "backend", "median_ms", "dispatches", "submits"}],
    /// "rollout_dispatches", "dispatches_per_step"}; null where a figure does not apply (the
    /// CPU keeps no counters); notes go to stderr.
    #[command(verbatim_doc_comment)]
    Bench {
        /// One JSON object instead of the table (format above).
        #[arg(long)]
        json: bool,
        /// Comma-separated: cpu, wgpu, cuda (default: cpu, plus wgpu when an adapter exists).
        #[arg(long)]
        backend: Option<String>,
        /// Trajectories rolled out together.
        #[arg(long, default_value_t = 32, allow_negative_numbers = true)]
        batch: usize,
        /// Rollout steps.
        #[arg(long, default_value_t = HORIZON, allow_negative_numbers = true)]
        steps: usize,
        /// Rank of the residuals' svd_lowrank.
        #[arg(long, default_value_t = 32, allow_negative_numbers = true)]
        rank: usize,
        /// Runs per figure (the median is reported).
        #[arg(long, default_value_t = 7, allow_negative_numbers = true)]
        runs: usize,
        /// Weights (default: the embedded ones).
        #[arg(long)]
        weights: Option<PathBuf>,
    },
    /// Predict held-out trajectories: per-step error of the ensemble mean against persistence
    /// ("no change"), ensemble spread, and the residuals' rank-k compression.
    ///
    /// --json prints ONE object: {"weights", "backend", "config": {"features", "embed",
    /// "hidden", "members"}, "held_out": {"windows", "model_mse", "persistence_mse",
    /// "steps": [{"step", "model_mse", "persistence_mse", "ratio", "spread"}]},
    /// "compression": {"windows", "rows", "cols", "rank", "ratio", "rel_error", "mse_pred",
    /// "mse_corrected", "singular_values"}}.
    #[command(verbatim_doc_comment)]
    Predict {
        /// One JSON object instead of the text (format above).
        #[arg(long)]
        json: bool,
        /// Weights (default: the embedded ones).
        #[arg(long)]
        weights: Option<PathBuf>,
        /// Steps predicted per held-out window.
        #[arg(long, default_value_t = HORIZON, allow_negative_numbers = true)]
        horizon: usize,
        /// Rank of the residual compression.
        #[arg(long, default_value_t = 32, allow_negative_numbers = true)]
        rank: usize,
        /// cpu, wgpu or auto (default: $KERNELS_BACKEND, else auto).
        #[arg(long)]
        backend: Option<String>,
    },
}

pub(crate) fn run_gru(cmd: GruCmd) -> CliResult<()> {
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
            dp,
        } => gru::train::run(
            backend.as_deref(),
            &TrainOptions {
                devices: dp.devices,
                json: dp.json,
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
        ),
        GruCmd::Run {
            weights,
            input,
            out,
            backend,
        } => gru::run::run(&weights, &input, &out, backend.as_deref()),
        GruCmd::Bench {
            json,
            backend,
            batch,
            steps,
            rank,
            runs,
            weights,
        } => gru::bench::run(&GruBenchOptions {
            backends: backend,
            batch,
            steps,
            rank,
            runs,
            weights,
            json,
        }),
        GruCmd::Predict {
            json,
            weights,
            horizon,
            rank,
            backend,
        } => gru::predict::run(backend.as_deref(), weights.as_deref(), horizon, rank, json),
    }
}
