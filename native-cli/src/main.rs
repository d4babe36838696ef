//! `kernels`: list ops, run one op on safetensors files, check every op against the CPU
//! reference, report the build and backend. Errors go to stderr with a non-zero exit.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use native_cli::bench::{self, BenchOptions};
use native_cli::demo::{self, DemoOptions};
use native_cli::parity_cmd::{self, ParityOptions};
use native_cli::run_op::{self, OpRequest};
use native_cli::{CliResult, emit, info, ops};

#[derive(Parser, Debug)]
#[command(
    name = "kernels",
    version,
    about = "Tensor kernels with trusted numerics, from a terminal"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Build, CPU features, and the backend `KERNELS_BACKEND` selects, with the reason.
    Info,
    /// Every op: inputs, attributes with defaults, outputs, gradients, error budgets.
    Ops {
        /// A JSON list of {"name","inputs","attrs","outputs","grad_inputs","budget","doc"}.
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// The op table and the budget table in Markdown (as in the README).
        #[arg(long)]
        markdown: bool,
    },
    /// Run one op on the tensors of a safetensors file; write the results to another.
    ///
    /// IN holds the op's inputs by name (see `kernels ops`); with --backward also `grad_<output>`
    /// for each output, and OUT receives `grad_<input>` for each differentiable input. Nothing is
    /// written unless the op succeeds.
    Op {
        /// The op's name, e.g. `matmul`.
        name: String,
        /// Input safetensors file.
        #[arg(long = "in", value_name = "IN.safetensors")]
        input: PathBuf,
        /// Output safetensors file (replaced atomically on success).
        #[arg(long, value_name = "OUT.safetensors")]
        out: PathBuf,
        /// An attribute, e.g. `--attr trans_b=true`; repeatable.
        #[arg(long = "attr", value_name = "NAME=VALUE")]
        attrs: Vec<String>,
        /// Run the backward instead of the forward.
        #[arg(long)]
        backward: bool,
        /// cpu, wgpu, cuda or auto (default: $KERNELS_BACKEND, else auto).
        #[arg(long)]
        backend: Option<String>,
    },
    /// Every op, forward and backward, on the available backends against the CPU reference.
    Demo {
        /// Seed of the random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Include the cases above 65,535 workgroups (slow on software GPUs).
        #[arg(long)]
        large: bool,
    },
    /// Every parity case, forward and backward, on one backend against the CPU reference.
    ///
    /// Per op and direction: input shapes, max abs error, max relative error, the budget
    /// (atol + rtol * |ref| at the case's reduced length k) and pass. Ops the backend does not
    /// support are failed rows carrying the error. Exits non-zero if any check fails.
    ///
    /// --json prints ONE JSON document:
    /// {"backend": str, "reason": str, "reference": "cpu-reference", "seed": n,
    ///  "rows": [{"op", "dir", "shape", "max_abs_err", "max_rel_err",
    ///            "budget": {"atol", "rtol", "k"}, "pass", "error"}, ...],
    ///  "passed": n, "failed": n,
    ///  "counters": {"dispatches", "submits", "bytes_uploaded", "bytes_downloaded",
    ///               "buffers_created", "buffers_reused", "pool_bytes"} | null (CPU)}.
    /// Errors are null when the run failed or NaN/Inf positions differ; "error" is null on pass.
    #[command(verbatim_doc_comment)]
    Parity {
        /// cpu, wgpu or auto (default: $KERNELS_BACKEND, else auto).
        #[arg(long)]
        backend: Option<String>,
        /// One JSON document instead of the table (format above).
        #[arg(long)]
        json: bool,
        /// Seed of the random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Include the cases above 65,535 workgroups (slow on software GPUs).
        #[arg(long)]
        large: bool,
    },
    /// Benchmarks on every backend in one run: matmul 128..1024 (GFLOPS), softmax, layer_norm,
    /// rms_norm on 4096 x 4096 (GB/s), causal attention prefill, and the tiled WGSL matmul
    /// against a naive one-thread-per-output one at 256 and 512.
    ///
    /// Median wall time of several runs with inputs resident; wgpu rows add the counters of one
    /// run (dispatches, submits, bytes up/down; each run ends with a 4-byte read that submits and
    /// waits), the least bytes the op must move and the bytes its dispatches touch (each bound
    /// tensor once per dispatch). CPU rows use the fast paths of kernels-core. A last row per
    /// backend is one training step of a small MLP (forward, backward, AdamW): its dispatches
    /// and submits per step.
    /// Software adapters (lavapipe, SwiftShader) are flagged: their timings say nothing about
    /// GPU speed.
    ///
    /// --json prints a JSON list: [{"bench", "backend", "size", "median_ms", "gflops", "gbps",
    /// "runs", "dispatches", "submits", "bytes_uploaded", "bytes_downloaded", "min_bytes",
    /// "bytes_touched", "peak_fraction", "error"}, ...], null where a figure does not apply;
    /// notes go to stderr.
    #[command(verbatim_doc_comment)]
    Bench {
        /// Comma-separated: cpu, wgpu (default: cpu, plus wgpu when an adapter exists).
        #[arg(long)]
        backend: Option<String>,
        /// A JSON list instead of the table (format above).
        #[arg(long)]
        json: bool,
        /// Smaller sizes (norms on 1024 x 1024, matmul up to 512) and 3 runs.
        #[arg(long)]
        quick: bool,
        /// Peak GFLOPS per backend for the "peak" column, e.g. `cpu=100,wgpu=20000` (the CPU's
        /// is estimated from /proc/cpuinfo when not given; wgpu cannot report a GPU's peak).
        #[arg(long)]
        peak_gflops: Option<String>,
    },
}

fn run(cli: Cli) -> CliResult<()> {
    match cli.cmd {
        Cmd::Info => emit(&info::report()?)?,
        Cmd::Ops { json, markdown } => {
            if json {
                emit(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&ops::all_json())?
                ))?;
            } else if markdown {
                emit(&ops::markdown())?;
            } else {
                emit(&ops::text())?;
            }
        }
        Cmd::Op {
            name,
            input,
            out,
            attrs,
            backward,
            backend,
        } => {
            let req = OpRequest {
                name,
                input,
                output: out,
                attrs,
                backward,
                backend,
            };
            let rep = run_op::run(&req)?;
            let written: Vec<String> = rep
                .written
                .iter()
                .map(|(n, s, d)| format!("{n}{s:?} ({})", d.name()))
                .collect();
            emit(&format!(
                "{} {} on {}: wrote {} to {}\n",
                rep.op,
                rep.dir.name(),
                rep.backend,
                written.join(", "),
                req.output.display()
            ))?;
        }
        Cmd::Demo { seed, large } => demo::run(DemoOptions { seed, large })?,
        Cmd::Bench {
            backend,
            json,
            quick,
            peak_gflops,
        } => bench::run(&BenchOptions {
            backends: backend,
            json,
            quick,
            peak_gflops,
        })?,
        Cmd::Parity {
            backend,
            json,
            seed,
            large,
        } => parity_cmd::run(&ParityOptions {
            backend,
            json,
            seed,
            large,
        })?,
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
