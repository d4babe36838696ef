//! `kernels`: list ops, run one op on safetensors files, check every op against the CPU
//! reference, report the build and backend. Errors go to stderr with a non-zero exit.
//!
//! This file is the command line (clap) and its dispatch; each subcommand is a module of
//! `native_cli::commands`.

mod args;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use args::{BenchCmd, GruCmd, SamplingArgs, TrainCmd, run_bench_llama, run_gru};
use clap::{Parser, Subcommand};
use native_cli::CliResult;
use native_cli::commands::bench::BenchOptions;
use native_cli::commands::chat::ChatArgs;
use native_cli::commands::demo::DemoOptions;
use native_cli::commands::generate::GenerateArgs;
use native_cli::commands::logits::{LogitsArgs, parse_tokens};
use native_cli::commands::op::OpRequest;
use native_cli::commands::parity::ParityOptions;
use native_cli::commands::train::TrainArgs;
use native_cli::commands::{
    bench, chat, demo, eval, generate, info, logits, op, ops, parity, train,
};

#[derive(Parser, Debug)]
#[command(
    name = "kernels",
    version,
    about = "Tensor kernels with trusted numerics, from a terminal"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// On an error, also print the library's own error beneath the message (op and function
    /// names, as a bug report needs them).
    #[arg(long, global = true)]
    verbose: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Build, CPU features, and the backend `KERNELS_BACKEND` selects, with the reason.
    ///
    /// --json prints ONE object: {"version", "build", "arch", "os", "ops", "cpu_features",
    /// "kernels_backend", "wgpu_backend", "adapters": [{"name", "backend", "device_type",
    /// "driver", "software"}], "cuda", "backend", "reason", "device_limits", "adapter_features"};
    /// the last two are null when the CPU is chosen.
    #[command(verbatim_doc_comment)]
    Info {
        /// One JSON object instead of the text (format above).
        #[arg(long)]
        json: bool,
    },
    /// Every op: inputs, attributes with defaults, outputs, gradients, error budgets.
    Ops {
        /// A JSON list of {"name","inputs","attrs","outputs","grad_inputs","budget","doc"}.
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// The op table and the budget table in Markdown (as in kernels-core/README.md).
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
    /// The demo model and the world model on each backend, then every op, forward and
    /// backward, against the CPU reference: one summary line per backend (the failing rows when
    /// any; every row with --verbose) and the commands to try next.
    ///
    /// --json prints the summary as ONE object on stdout (the progress goes to stderr):
    /// {"seed", "llama": [{"backend", "reason", "held_out_correct", "held_out_problems"}],
    ///  "world": [{"backend", "mse", "persistence_mse"}],
    ///  "parity": [{"backend", "passed", "checks", "seconds"}], "failures": [str],
    ///  "passed": bool}; the exit status is non-zero when a check fails, as without --json.
    #[command(verbatim_doc_comment)]
    Demo {
        /// The summary as one JSON object (format above).
        #[arg(long)]
        json: bool,
        /// Seed of the random inputs.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        seed: u64,
        /// Include the cases above 65,535 workgroups (slow on software GPUs).
        #[arg(long)]
        large: bool,
        /// Where to write the world model's plot (SVG); the temp dir by default, so runs leave no
        /// stray files.
        #[arg(long, default_value_os_t = std::env::temp_dir().join("kernels-world-model.svg"))]
        plot: PathBuf,
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
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
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
    ///
    /// `kernels bench llama --model DIR` runs the peers' protocol on a model directory instead.
    #[command(verbatim_doc_comment, args_conflicts_with_subcommands = true)]
    Bench {
        #[command(subcommand)]
        cmd: Option<BenchCmd>,
        /// Comma-separated: cpu, wgpu, cuda (default: cpu, plus wgpu when an adapter exists).
        #[arg(long)]
        backend: Option<String>,
        /// A JSON list instead of the table (format above).
        #[arg(long)]
        json: bool,
        /// Smaller sizes (norms on 1024 x 1024, matmul up to 512) and 3 runs.
        #[arg(long)]
        quick: bool,
        /// The largest square matmul, doubling from 128 (default 1024; 512 with --quick).
        #[arg(long, allow_negative_numbers = true)]
        matmul_max: Option<usize>,
        /// Peak GFLOPS per backend for the "peak" column, e.g. `cpu=100,wgpu=20000` (the CPU's
        /// is estimated from /proc/cpuinfo when not given; wgpu cannot report a GPU's peak).
        #[arg(long)]
        peak_gflops: Option<String>,
    },
    /// The GRU world model (train, predict, bench) and a one-layer PyTorch-compatible GRU (run).
    Gru {
        #[command(subcommand)]
        cmd: GruCmd,
    },
    /// Generate text with a llama model from a Hugging Face directory (config.json,
    /// model.safetensors or its shards, tokenizer.json) or a .gguf file; tokens stream to stdout, prefill and
    /// decode tokens/s go to stderr. Without --model: the embedded demo model (addition).
    /// The streamed text is exactly the tokenizer's decode of the generated ids.
    Generate {
        /// Model directory or GGUF file (default: the embedded demo model).
        #[arg(long)]
        model: Option<PathBuf>,
        /// The text to continue (with --chat: the user's message); `-` reads it from stdin.
        #[arg(
            long,
            required_unless_present = "prompt_file",
            conflicts_with = "prompt_file"
        )]
        prompt: Option<String>,
        /// Read the prompt from this file (UTF-8), for prompts longer than a command line holds.
        #[arg(long)]
        prompt_file: Option<PathBuf>,
        /// New tokens at most (default: 64, or what the model's context leaves; a larger
        /// value than the context leaves gets a note; with --chat: 512).
        #[arg(long, allow_negative_numbers = true)]
        max_tokens: Option<usize>,
        /// The prompt is one user message through the model's chat template
        /// (tokenizer_config.json or chat_template.jinja); only the reply is printed, and it
        /// ends at the template's end-of-turn tokens.
        #[arg(long)]
        chat: bool,
        /// With --chat: a system message before the user's.
        #[arg(long, requires = "chat")]
        system: Option<String>,
        #[command(flatten)]
        sampling: SamplingArgs,
        /// cpu, wgpu or auto (default: $KERNELS_BACKEND, else auto).
        #[arg(long)]
        backend: Option<String>,
        /// Quantize the model's matrices as they load: q8_0, q4_0 or q4_k (rows that are not
        /// whole blocks fall back, as llama.cpp does; norms stay f32).
        #[arg(long, value_parser = native_cli::llama::parse_quantize)]
        quantize: Option<kernels_core::DType>,
    },
    /// Chat with an instruct model from a Hugging Face directory in the terminal: each line
    /// read from stdin is a user message; the conversation so far goes through the model's own
    /// chat template (tokenizer_config.json's chat_template, or chat_template.jinja) and the
    /// reply streams to stdout, one reply per line read, ending at the template's end-of-turn
    /// tokens (eos_token_id of config.json and generation_config.json, the template's
    /// eos_token, and <|im_end|>, <|eot_id|>, <end_of_turn>, <|end|>... when in the
    /// vocabulary). Ends at end of input (Ctrl-D). Per reply, stderr says why it ended and the
    /// tokens/s. A directory without a chat template is refused.
    Chat {
        /// Model directory or GGUF file.
        #[arg(long)]
        model: PathBuf,
        /// A system message opening the conversation.
        #[arg(long)]
        system: Option<String>,
        /// New tokens per reply at most (default: 512, or what the model's context leaves).
        #[arg(long, allow_negative_numbers = true)]
        max_tokens: Option<usize>,
        #[command(flatten)]
        sampling: SamplingArgs,
        /// cpu, wgpu or auto (default: $KERNELS_BACKEND, else auto).
        #[arg(long)]
        backend: Option<String>,
        /// Also print each rendered prompt to stderr, between `[prompt]` and `[/prompt]` lines
        /// (to see what the template made of the conversation).
        #[arg(long)]
        show_prompt: bool,
    },
    /// The logits of a token sequence as JSON, to compare with another implementation:
    /// {"model", "backend", "tokens", "vocab_size", "positions", "logits": [[...], ...]}.
    Logits {
        /// Model directory or GGUF file (default: the embedded demo model).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Comma-separated token ids, e.g. 1,2,3.
        #[arg(long)]
        tokens: String,
        /// Every position's logits, not only the last.
        #[arg(long)]
        all_positions: bool,
        /// cpu, wgpu or auto (default: $KERNELS_BACKEND, else auto).
        #[arg(long)]
        backend: Option<String>,
        /// Quantize the model's matrices as they load: q8_0, q4_0 or q4_k (rows that are not
        /// whole blocks fall back, as llama.cpp does; norms stay f32).
        #[arg(long, value_parser = native_cli::llama::parse_quantize)]
        quantize: Option<kernels_core::DType>,
        /// JSON output (the only format; accepted for symmetry with the other commands).
        #[arg(long)]
        json: bool,
    },
    /// Quantize a llama checkpoint (a Hugging Face directory in f32, f16 or bf16, or a GGUF
    /// file) and write it as GGUF v3: its matrices in --to (rows that are not whole blocks
    /// fall back as llama.cpp does: q4_k to q5_0), norms in f32, and the tokenizer as
    /// llama.cpp's converter writes it (tokenizer.json and tokenizer_config.json as
    /// tokenizer.ggml.*: SentencePiece-style BPE as `llama`, byte-level BPE as `gpt2`; a
    /// tokenizer it cannot express is refused by name, see --no-tokenizer; without a
    /// tokenizer.json only the weights and config are written, with a note).
    Quantize {
        /// Model directory or .gguf file.
        #[arg(long)]
        model: PathBuf,
        /// q8_0, q4_0 or q4_k (or f16, bf16, q4_1, q5_0).
        #[arg(long, value_parser = native_cli::llama::parse_quantize)]
        to: kernels_core::DType,
        /// The GGUF file to write.
        #[arg(long)]
        out: PathBuf,
        /// Write the weights and config only, not the tokenizer (for a tokenizer.json that
        /// has no GGUF form, such as the WordLevel ones of random benchmark checkpoints).
        #[arg(long)]
        no_tokenizer: bool,
    },
    /// Train a model.
    Train {
        #[command(subcommand)]
        what: TrainCmd,
    },
    /// Exact-match accuracy of a model on held-out addition problems (default: the embedded
    /// demo model).
    ///
    /// --json prints ONE object: {"model", "backend", "seed", "problems", "correct",
    /// "accuracy", "wrong": [str]} (at most 5 wrong answers, as in the text).
    #[command(verbatim_doc_comment)]
    Eval {
        /// One JSON object instead of the text (format above).
        #[arg(long)]
        json: bool,
        /// Model directory or GGUF file (default: the embedded demo model).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Held-out problems to answer (at most the held-out set's size).
        #[arg(long, default_value_t = 1000, allow_negative_numbers = true)]
        problems: usize,
        /// Seed of the problems drawn.
        #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
        seed: u64,
        /// cpu, wgpu or auto (default: $KERNELS_BACKEND, else auto).
        #[arg(long)]
        backend: Option<String>,
        /// Quantize the model's matrices as they load: q8_0, q4_0 or q4_k (rows that are not
        /// whole blocks fall back, as llama.cpp does; norms stay f32).
        #[arg(long, value_parser = native_cli::llama::parse_quantize)]
        quantize: Option<kernels_core::DType>,
    },
}

/// The `--model` a command was given, if any.
fn model_flag(cmd: &Cmd) -> Option<&Path> {
    match cmd {
        Cmd::Generate { model, .. } | Cmd::Logits { model, .. } | Cmd::Eval { model, .. } => {
            model.as_deref()
        }
        Cmd::Chat { model, .. } | Cmd::Quantize { model, .. } => Some(model),
        Cmd::Bench {
            cmd: Some(BenchCmd::Llama(a)),
            ..
        } => Some(&a.model),
        _ => None,
    }
}

/// `--model` must name something that exists: a directory, or a regular file (a `.gguf`);
/// said in the flag's words before any loader looks inside it (a missing `nope.gguf` is not a
/// model directory missing its `config.json`, and a FIFO would block the reader forever).
fn check_model_flag(model: &Path) -> CliResult<()> {
    let shown = model.display();
    match std::fs::metadata(model) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(native_cli::fail(format!(
            "--model {shown}: no such file or directory (give a model directory or a .gguf file)"
        ))),
        Err(e) => Err(native_cli::fail(format!("--model {shown}: {e}"))),
        Ok(m) if m.is_dir() => check_model_dir(model),
        Ok(m) => native_cli::limits::regular_file(model, &m)
            .map_err(|e| native_cli::fail(format!("--model {e}"))),
    }
}

/// The files a model directory's loaders open (config, weights, the shards its index lists,
/// tokenizer and chat files) must be regular files where they exist: a FIFO, device or socket
/// among them is refused by name before anything is opened.
fn check_model_dir(dir: &Path) -> CliResult<()> {
    const FILES: [&str; 7] = [
        "config.json",
        "model.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
    ];
    let check = |path: &Path| -> CliResult<()> {
        match std::fs::metadata(path) {
            Ok(m) => native_cli::limits::regular_file(path, &m)
                .map_err(|e| native_cli::fail(format!("--model {}: {e}", dir.display()))),
            Err(_) => Ok(()),
        }
    };
    for name in FILES {
        check(&dir.join(name))?;
    }
    let index = dir.join("model.safetensors.index.json");
    let Ok(bytes) = native_cli::limits::read_regular(&index) else {
        return Ok(());
    };
    // The loader reports a malformed index; here only the shards it names matter.
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Ok(());
    };
    if let Some(map) = json.get("weight_map").and_then(|m| m.as_object()) {
        let shards: std::collections::BTreeSet<&str> =
            map.values().filter_map(|v| v.as_str()).collect();
        for shard in shards {
            check(&dir.join(shard))?;
        }
    }
    Ok(())
}

fn run(cli: Cli) -> CliResult<()> {
    if let Some(model) = model_flag(&cli.cmd) {
        check_model_flag(model)?;
    }
    let verbose = cli.verbose;
    match cli.cmd {
        Cmd::Info { json } => info::run(json),
        Cmd::Ops { json, markdown } => ops::run(json, markdown),
        Cmd::Op {
            name,
            input,
            out,
            attrs,
            backward,
            backend,
        } => op::run(&OpRequest {
            name,
            input,
            output: out,
            attrs,
            backward,
            backend,
        }),
        Cmd::Demo {
            json,
            seed,
            large,
            plot,
        } => demo::run(DemoOptions {
            seed,
            large,
            plot,
            json,
            verbose,
        }),
        Cmd::Parity {
            backend,
            json,
            seed,
            large,
        } => parity::run(&ParityOptions {
            backend,
            json,
            seed,
            large,
        }),
        Cmd::Bench {
            cmd: Some(BenchCmd::Llama(a)),
            ..
        } => run_bench_llama(a),
        Cmd::Bench {
            cmd: None,
            backend,
            json,
            quick,
            matmul_max,
            peak_gflops,
        } => bench::run(&BenchOptions {
            backends: backend,
            json,
            quick,
            matmul_max,
            peak_gflops,
        }),
        Cmd::Gru { cmd } => run_gru(cmd),
        Cmd::Quantize {
            model,
            to,
            out,
            no_tokenizer,
        } => native_cli::commands::quantize::run(&model, to, &out, !no_tokenizer),
        Cmd::Generate {
            model,
            prompt,
            prompt_file,
            max_tokens,
            chat,
            system,
            sampling,
            backend,
            quantize,
        } => generate::run(&GenerateArgs {
            model,
            prompt: generate::PromptSource::from_args(prompt, prompt_file),
            max_tokens,
            sampling: sampling.get()?,
            backend,
            chat,
            system,
            quantize,
        }),
        Cmd::Chat {
            model,
            system,
            max_tokens,
            sampling,
            backend,
            show_prompt,
        } => chat::run(&ChatArgs {
            model,
            system,
            max_tokens,
            sampling: sampling.get()?,
            backend,
            show_prompt,
        }),
        Cmd::Logits {
            model,
            tokens,
            all_positions,
            backend,
            quantize,
            json: _,
        } => logits::run(&LogitsArgs {
            model,
            tokens: parse_tokens(&tokens)?,
            all_positions,
            backend,
            quantize,
        }),
        Cmd::Train {
            what:
                TrainCmd::Transformer {
                    out,
                    steps,
                    batch,
                    lr,
                    hidden,
                    layers,
                    heads,
                    kv_heads,
                    intermediate,
                    seed,
                    backend,
                    checkpoint_every,
                    eval_problems,
                    dp,
                    force,
                },
        } => train::run(&TrainArgs {
            out,
            steps,
            batch,
            lr,
            hidden,
            layers,
            heads,
            kv_heads,
            intermediate,
            seed,
            backend,
            checkpoint_every,
            eval_problems,
            devices: dp.devices,
            json: dp.json,
            force,
        }),
        Cmd::Eval {
            json,
            model,
            problems,
            seed,
            backend,
            quantize,
        } => eval::run(
            model.as_deref(),
            problems,
            seed,
            backend.as_deref(),
            quantize,
            json,
        ),
    }
}

/// Mesa's Vulkan drivers print `error: XDG_RUNTIME_DIR is invalid or not set` on every wgpu
/// start when the variable is unset (ssh sessions, containers, CI): give the process a private
/// runtime directory first, as `tests/ci.sh` does, so a user's first `kernels demo` is quiet.
#[cfg(target_os = "linux")]
fn ensure_runtime_dir() {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let set = std::env::var_os("XDG_RUNTIME_DIR")
        .is_some_and(|d| !d.is_empty() && std::path::Path::new(&d).is_dir());
    if set {
        return;
    }
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("kernels-runtime-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    // Only a directory of ours that nobody else can enter.
    let ours = std::fs::symlink_metadata(&dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.permissions().mode() & 0o077 == 0);
    if ours {
        // SAFETY: the first thing main does, before any other thread exists.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
    }
}

/// The process's allocator: mimalloc, not the system's (`native_cli::heap` says why).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    native_cli::heap::init_huge_pages();
    #[cfg(target_os = "linux")]
    ensure_runtime_dir();
    let cli = Cli::parse();
    let verbose = cli.verbose;
    let gguf = model_flag(&cli.cmd).is_some_and(|m| {
        m.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = e.to_string();
            if gguf {
                eprintln!("error: {}", gguf_words(&msg));
            } else {
                eprintln!("error: {msg}");
            }
            if verbose {
                eprintln!("  detail: {e:?}");
                let mut source = e.source();
                while let Some(s) = source {
                    eprintln!("  caused by: {s}");
                    source = s.source();
                }
            }
            ExitCode::FAILURE
        }
    }
}

/// An error about a GGUF file in the file's own words: the loader works on Hugging Face names
/// (tensors, config fields), which a GGUF's user never sees; each backquoted tensor name becomes
/// its llama.cpp name (`model.layers.0.self_attn.q_proj.weight` -> `blk.0.attn_q.weight`), and
/// config.json's fields the `<arch>.*` keys they come from.
fn gguf_words(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut parts = msg.split('`');
    if let Some(first) = parts.next() {
        out.push_str(first);
    }
    for (i, part) in parts.enumerate() {
        out.push('`');
        // Odd parts (0-based i even) are inside backquotes.
        match (i % 2 == 0)
            .then(|| kernels_core::gguf::llama::gguf_tensor_name(part))
            .flatten()
        {
            Some(g) => out.push_str(&g),
            None => out.push_str(part),
        }
    }
    const FIELDS: [(&str, &str); 7] = [
        ("bad model file config.json: ", "bad GGUF metadata: "),
        ("num_hidden_layers", "block_count"),
        ("num_key_value_heads", "attention.head_count_kv"),
        ("num_attention_heads", "attention.head_count"),
        ("intermediate_size", "feed_forward_length"),
        ("max_position_embeddings", "context_length"),
        ("hidden_size", "embedding_length"),
    ];
    for (hf, gguf) in FIELDS {
        out = out.replace(hf, gguf);
    }
    out
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// The flags and positionals of `cmd` and its subcommands that have no help text, as
    /// `kernels train transformer --out`.
    fn without_help(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for a in cmd.get_arguments() {
            let id = a.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            if a.get_help().is_none() && a.get_long_help().is_none() {
                let name = a.get_long().map_or(id.to_string(), |l| format!("--{l}"));
                out.push(format!("{path} {name}"));
            }
        }
        for sub in cmd.get_subcommands() {
            without_help(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_flag_of_every_subcommand_has_help() {
        let cmd = Cli::command();
        let mut missing = Vec::new();
        without_help(&cmd, "kernels", &mut missing);
        assert!(
            missing.is_empty(),
            "flags without help text:\n{}",
            missing.join("\n")
        );
        // The walk reaches the nested subcommands (so an empty list means something).
        let train = cmd
            .find_subcommand("train")
            .and_then(|t| t.find_subcommand("transformer"));
        assert!(train.is_some_and(|t| t.get_arguments().count() > 10));
    }

    #[test]
    fn gguf_errors_name_the_files_tensors() {
        let hf = "bad model file config.json: the config needs 20 tensors (num_hidden_layers = \
                  2); the first missing is `model.layers.0.self_attn.q_proj.weight`";
        assert_eq!(
            super::gguf_words(hf),
            "bad GGUF metadata: the config needs 20 tensors (block_count = 2); the first \
             missing is `blk.0.attn_q.weight`"
        );
        assert_eq!(super::gguf_words("a `b` c"), "a `b` c");
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
