//! `kernels bench llama --model DIR`: the peers' protocol on a Hugging Face llama directory, so
//! that our figure and a peer's (candle, `../shared/peers/`) come from the same measurement.
//!
//! - **Decode:** a random prompt of `prompt_len` tokens through the KV cache (not timed), then
//!   `new_tokens` greedy steps timed, each one forward of one token, the argmax on the device
//!   and the 4-byte download of the id.
//! - **Prefill:** one forward of `prefill_len` tokens on a fresh cache, the lm_head on the last
//!   position only, its argmax and download, after one untimed warm-up of the same.
//!
//! Each figure is the median of `runs` runs. The counters of the decode steps (wgpu: dispatches,
//! submits, bytes down; CUDA: kernel launches plus SGEMMs, bytes down) are divided by the tokens.

use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use kernels_core::Rng;
use kernels_core::models::llama::{GenerateOptions, Generation, Llama, Sampling};
use kernels_gpu::{BackendChoice, WgpuBackend, select_backend};

use crate::llama::{build_in, quantize_files, read_dir};
use crate::{CliResult, emit, fail};

/// Options of `kernels bench llama`.
#[derive(Debug, Clone)]
pub struct LlamaBenchOptions {
    pub model: PathBuf,
    pub backend: Option<String>,
    /// The CPU threads asked for (`KERNELS_THREADS`); recorded in the report.
    pub threads: Option<usize>,
    pub prompt_len: usize,
    pub new_tokens: usize,
    pub prefill_len: usize,
    pub runs: usize,
    pub json: bool,
    /// `--quantize`: the matrices re-encoded as they load.
    pub quantize: Option<kernels_core::DType>,
    /// `--read-rate`: after the runs, time a plain read of as many bytes as a decode step's
    /// weights with the same threads ([`super::read_rate`]; CPU backend only).
    pub read_rate: bool,
}

/// What one run of the protocol measured.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaBenchReport {
    pub model: String,
    pub backend: String,
    pub threads: Option<usize>,
    pub params: usize,
    pub decode_tok_s: f64,
    pub prefill_tok_s: f64,
    pub dispatches_per_token: Option<f64>,
    pub submits_per_token: Option<f64>,
    pub bytes_down_per_token: Option<f64>,
    /// Host microseconds per decode token from the step's first recorded command until its
    /// submit (or graph launch) returned, the wait for results excluded (`Counters::host_ns`).
    pub host_us_per_token: Option<f64>,
    /// `host_us_per_token` over the dispatches (kernel launches plus GEMMs on CUDA) of a token.
    pub host_us_per_dispatch: Option<f64>,
    /// The median decode token's host time over its dispatches: `host_us_per_dispatch` with
    /// the tokens a busy machine preempted set aside.
    pub host_us_per_dispatch_median: Option<f64>,
    /// The part of `host_us_per_token` spent in the submit call (wgpu: finishing the encoder,
    /// where wgpu-core validates and encodes the pass for the driver, and the queue submit;
    /// `Counters::submit_ns`); the rest is recording the dispatches.
    pub host_us_submit_per_token: Option<f64>,
    /// Bind groups created per decode token (wgpu; 0 once its bind-group cache is warm).
    pub bind_groups_per_token: Option<f64>,
    /// The dtypes of the model's matrices, e.g. `q4_k+q5_0` (`f32` when unquantized).
    pub weights: String,
    /// Bytes of weights one decode step reads: every matrix whole, except an untied embedding
    /// table, of which it reads one row.
    pub weight_bytes_per_token: usize,
    /// The most bytes of storage buffers the device held at once (wgpu's pool counters: in
    /// use or pooled); `None` where the backend keeps no such count (CPU, CUDA).
    pub device_peak_bytes: Option<u64>,
    /// The rate at which decode read its weights: `weight_bytes_per_token` times
    /// `decode_tok_s`, in 10^9 bytes a second.
    pub decode_weight_gb_s: f64,
    /// With `--read-rate`: a plain read loop's rate over a buffer of `weight_bytes_per_token`
    /// bytes with the same threads, the median pass and the fastest ([`super::read_rate`]).
    pub read_gb_s: Option<f64>,
    pub read_gb_s_best: Option<f64>,
}

impl LlamaBenchReport {
    /// `{"model", "backend", "threads", "params", "decode_tok_s", "prefill_tok_s",
    /// "dispatches_per_token", "submits_per_token", "bytes_down_per_token",
    /// "host_us_per_token", "host_us_per_dispatch", "host_us_per_dispatch_median",
    /// "host_us_submit_per_token", "bind_groups_per_token", "weights",
    /// "weight_bytes_per_token", "device_peak_bytes", "decode_weight_gb_s", "read_gb_s",
    /// "read_gb_s_best"}`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "model": self.model,
            "backend": self.backend,
            "threads": self.threads,
            "params": self.params,
            "decode_tok_s": self.decode_tok_s,
            "prefill_tok_s": self.prefill_tok_s,
            "dispatches_per_token": self.dispatches_per_token,
            "submits_per_token": self.submits_per_token,
            "bytes_down_per_token": self.bytes_down_per_token,
            "host_us_per_token": self.host_us_per_token,
            "host_us_per_dispatch": self.host_us_per_dispatch,
            "host_us_per_dispatch_median": self.host_us_per_dispatch_median,
            "host_us_submit_per_token": self.host_us_submit_per_token,
            "bind_groups_per_token": self.bind_groups_per_token,
            "weights": self.weights,
            "weight_bytes_per_token": self.weight_bytes_per_token,
            "device_peak_bytes": self.device_peak_bytes,
            "decode_weight_gb_s": self.decode_weight_gb_s,
            "read_gb_s": self.read_gb_s,
            "read_gb_s_best": self.read_gb_s_best,
        })
    }
}

/// A backend's work counters, when it keeps them.
enum Counting {
    None,
    Wgpu(Rc<WgpuBackend>),
    #[cfg(feature = "cuda")]
    Cuda(Rc<kernels_gpu::CudaBackend>),
}

/// A backend's counters so far (`None`: the backend does not count it).
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    /// Dispatches (wgpu), kernel launches plus GEMMs (CUDA, those of replayed decode steps
    /// included).
    work: u64,
    submits: Option<u64>,
    bytes_down: u64,
    /// `Counters::host_ns`.
    host_ns: Option<u64>,
    /// `Counters::submit_ns` (wgpu only).
    submit_ns: Option<u64>,
    bind_groups: Option<u64>,
}

impl Counting {
    /// The most storage bytes the device has held (wgpu only).
    fn peak_bytes(&self) -> Option<u64> {
        match self {
            Counting::Wgpu(g) => Some(g.counters().peak_storage_bytes),
            _ => None,
        }
    }
    fn snapshot(&self) -> Option<Snapshot> {
        match self {
            Counting::None => None,
            Counting::Wgpu(g) => {
                let c = g.counters();
                Some(Snapshot {
                    work: c.dispatches,
                    submits: Some(c.submits),
                    bytes_down: c.bytes_downloaded,
                    host_ns: Some(c.host_ns),
                    submit_ns: Some(c.submit_ns),
                    bind_groups: Some(c.bind_groups_created),
                })
            }
            #[cfg(feature = "cuda")]
            Counting::Cuda(g) => {
                let c = g.counters();
                Some(Snapshot {
                    work: c.launches + c.gemms + c.replayed_nodes,
                    submits: None,
                    bytes_down: c.bytes_downloaded,
                    // From a step's first launch until its graph launch (or last launch)
                    // returned; for a replayed decode step, from its start until its graph's
                    // relaunch returned.
                    host_ns: Some(c.host_ns),
                    submit_ns: None,
                    bind_groups: None,
                })
            }
        }
    }
}

/// `--read-rate`'s refusal of a backend other than the CPU (`asked`: where it came from).
fn read_rate_needs_cpu(asked: &str) -> crate::CliError {
    fail(format!(
        "bench llama --read-rate: times the CPU's reads, so it needs --backend cpu, not {asked}"
    ))
}

fn open_backend(
    choice: BackendChoice,
) -> CliResult<(Rc<dyn kernels_core::Backend>, Counting, String)> {
    let chosen = select_backend(choice)?;
    let counting = match &chosen.gpu {
        Some(g) => Counting::Wgpu(g.clone()),
        None => Counting::None,
    };
    #[cfg(feature = "cuda")]
    let counting = match &chosen.cuda {
        Some(c) => Counting::Cuda(c.clone()),
        None => counting,
    };
    let name = chosen.backend.name();
    Ok((chosen.backend, counting, name))
}

/// The median of the runs (NaN for none).
fn median_of(mut v: Vec<f64>) -> f64 {
    super::llama::median(&mut v).unwrap_or(f64::NAN)
}

fn greedy(max_new_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens,
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        stop_tokens: vec![],
    }
}

/// The next token of `run`, which must come (stop tokens are off).
fn step(run: &mut Generation<'_>) -> CliResult<u32> {
    pollster::block_on(run.next_token())?
        .ok_or_else(|| fail("bench llama: generation stopped before its token count"))
}

/// One decode measurement.
struct DecodeRun {
    secs_per_token: f64,
    /// The counters before and after the timed steps.
    counters: Option<(Snapshot, Snapshot)>,
    /// Each timed step's host nanoseconds (empty where the backend does not count them).
    token_host_ns: Vec<u64>,
}

fn decode_once(
    model: &Llama,
    prompt: &[u32],
    new_tokens: usize,
    counting: &Counting,
) -> CliResult<DecodeRun> {
    let opts = greedy(new_tokens + 1);
    let mut run = Generation::start(model, prompt, &opts)?;
    step(&mut run)?; // the prompt through the cache: not timed
    let before = counting.snapshot();
    let mut host_ns = Vec::with_capacity(new_tokens);
    let mut last = before.and_then(|s| s.host_ns);
    let start = Instant::now();
    for _ in 0..new_tokens {
        step(&mut run)?;
        // Read after the step's download returned: outside the next step's host time.
        if let Some(prev) = last {
            let now = counting.snapshot().and_then(|s| s.host_ns).unwrap_or(prev);
            host_ns.push(now.saturating_sub(prev));
            last = Some(now);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let counters = before.zip(counting.snapshot());
    Ok(DecodeRun {
        secs_per_token: secs / new_tokens as f64,
        counters,
        token_host_ns: host_ns,
    })
}

/// One prefill measurement: seconds for the whole forward of `prompt` to its first token.
fn prefill_once(model: &Llama, prompt: &[u32]) -> CliResult<f64> {
    let mut run = Generation::start(model, prompt, &greedy(1))?;
    let start = Instant::now();
    step(&mut run)?;
    Ok(start.elapsed().as_secs_f64())
}

/// More runs than this only tighten a median already tight; a run of 10^12 would never end.
pub const MAX_RUNS: usize = 10_000;

fn check_lengths(opts: &LlamaBenchOptions, max_pos: usize) -> CliResult<()> {
    if opts.prompt_len == 0 || opts.new_tokens == 0 || opts.prefill_len == 0 || opts.runs == 0 {
        return Err(fail(format!(
            "bench llama: --prompt-len ({}), --new-tokens ({}), --prefill-len ({}) and --runs ({}) must be at least 1",
            opts.prompt_len, opts.new_tokens, opts.prefill_len, opts.runs
        )));
    }
    if opts.runs > MAX_RUNS {
        return Err(fail(format!(
            "bench llama: --runs {}: at most {MAX_RUNS} (the median is steady long before)",
            opts.runs
        )));
    }
    let decode_positions = opts.prompt_len.saturating_add(opts.new_tokens);
    if decode_positions > max_pos || opts.prefill_len > max_pos {
        return Err(fail(format!(
            "bench llama: --prompt-len + --new-tokens = {decode_positions} and --prefill-len = {} \
             must fit the model's max_position_embeddings = {max_pos}",
            opts.prefill_len
        )));
    }
    Ok(())
}

/// Runs the protocol and returns the report.
pub fn measure(opts: &LlamaBenchOptions) -> CliResult<LlamaBenchReport> {
    // The counts first (the model's context is checked once it is read).
    check_lengths(opts, usize::MAX)?;
    let choice = BackendChoice::from_arg(opts.backend.as_deref())?;
    // --read-rate times the CPU's reads: refused before any device opens where another backend
    // was asked for, and once it is open where auto picked one.
    if opts.read_rate && !matches!(choice, BackendChoice::Cpu | BackendChoice::Auto) {
        let asked = opts.backend.as_deref().map_or_else(
            || {
                let v = std::env::var("KERNELS_BACKEND").unwrap_or_default();
                format!("KERNELS_BACKEND={v}")
            },
            |b| format!("--backend {b}"),
        );
        return Err(read_rate_needs_cpu(&asked));
    }
    let (backend, counting, backend_name) = open_backend(choice)?;
    if opts.read_rate && backend_name != "cpu" {
        return Err(read_rate_needs_cpu(&format!("auto's {backend_name}")));
    }
    let mut files = read_dir(&opts.model)?;
    quantize_files(&mut files, opts.quantize)?;
    let model = build_in(&mut files, backend)?;
    let (weights, weight_bytes_per_token) = weight_traffic(&model);
    let c = &model.config;
    check_lengths(opts, c.max_position_embeddings)?;
    let mut rng = Rng::new(0x6c6c_616d);
    let mut random_ids = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|_| {
                ((rng.uniform() as f64 * c.vocab_size as f64) as usize).min(c.vocab_size - 1) as u32
            })
            .collect()
    };
    let prompt = random_ids(opts.prompt_len);
    let long = random_ids(opts.prefill_len);

    // Warm-up: pipelines, pools and caches on both paths.
    decode_once(&model, &prompt, opts.new_tokens.min(4), &counting)?;
    prefill_once(&model, &long)?;

    let mut decode = Vec::new();
    let mut prefill = Vec::new();
    let mut counters = None;
    let mut token_host_ns = Vec::new();
    for _ in 0..opts.runs {
        let d = decode_once(&model, &prompt, opts.new_tokens, &counting)?;
        decode.push(d.secs_per_token);
        counters = d.counters;
        token_host_ns = d.token_host_ns;
        prefill.push(prefill_once(&model, &long)?);
    }
    let per_token = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / opts.new_tokens as f64;
    let both = |f: fn(&Snapshot) -> Option<u64>| {
        counters.and_then(|(a, b)| f(&a).zip(f(&b)).map(|(x, y)| per_token(x, y)))
    };
    let dispatches = both(|s| Some(s.work));
    let submits = both(|s| s.submits);
    let bytes_down = both(|s| Some(s.bytes_down));
    let host_us_per_token = both(|s| s.host_ns).map(|ns| ns / 1e3);
    let host_us_per_dispatch = host_us_per_token
        .zip(dispatches)
        .filter(|&(_, d)| d > 0.0)
        .map(|(us, d)| us / d);
    let token_us: Vec<f64> = token_host_ns.iter().map(|&ns| ns as f64 / 1e3).collect();
    let host_us_per_dispatch_median = dispatches
        .filter(|&d| d > 0.0 && !token_us.is_empty())
        .map(|d| median_of(token_us) / d);
    let host_us_submit_per_token = both(|s| s.submit_ns).map(|ns| ns / 1e3);
    let decode_tok_s = 1.0 / median_of(decode).max(1e-12);
    // After the runs, so the model's timings are not disturbed; the buffer is freed before
    // the report.
    let read = if opts.read_rate {
        // The products' own count (KERNELS_THREADS, which --threads set, capped as they cap it).
        let threads = kernels_core::cpu::fast::config::threads();
        Some(super::read_rate::measure(weight_bytes_per_token, threads)?)
    } else {
        None
    };
    Ok(LlamaBenchReport {
        model: files.origin.clone(),
        backend: backend_name,
        threads: opts.threads,
        params: model.config.num_parameters(),
        decode_tok_s,
        prefill_tok_s: opts.prefill_len as f64 / median_of(prefill).max(1e-12),
        dispatches_per_token: dispatches,
        submits_per_token: submits,
        bytes_down_per_token: bytes_down,
        host_us_per_token,
        host_us_per_dispatch,
        host_us_per_dispatch_median,
        host_us_submit_per_token,
        bind_groups_per_token: both(|s| s.bind_groups),
        weights,
        weight_bytes_per_token,
        device_peak_bytes: counting.peak_bytes(),
        decode_weight_gb_s: weight_bytes_per_token as f64 * decode_tok_s / 1e9,
        read_gb_s: read.map(|r| r.median_gb_s),
        read_gb_s_best: read.map(|r| r.best_gb_s),
    })
}

/// The matrices' dtypes (`q4_k+q5_0`) and the weight bytes a decode step reads (see
/// [`LlamaBenchReport::weight_bytes_per_token`]).
fn weight_traffic(model: &Llama) -> (String, usize) {
    let c = &model.config;
    let mut formats = std::collections::BTreeSet::new();
    let mut bytes = 0;
    for (name, t) in model.store.iter() {
        if kernels_core::models::llama::is_matrix_weight(name) {
            formats.insert(t.dtype().name());
        }
        let whole = t.byte_len();
        bytes += if name.ends_with("embed_tokens.weight") && !c.tie_word_embeddings {
            whole / c.vocab_size.max(1)
        } else {
            whole
        };
    }
    (formats.into_iter().collect::<Vec<_>>().join("+"), bytes)
}

/// `kernels bench llama`: one JSON object, or a line for people.
pub fn run(opts: &LlamaBenchOptions) -> CliResult<()> {
    let r = measure(opts)?;
    if opts.json {
        return emit(&format!("{}\n", r.json()));
    }
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    let read = r.read_gb_s.zip(r.read_gb_s_best).map_or(String::new(), |(m, b)| {
        format!(
            "; decode read its weights at {:.1} GB/s, a plain read loop over as many bytes at {m:.1} (best pass {b:.1}): {:.0}%",
            r.decode_weight_gb_s,
            100.0 * r.decode_weight_gb_s / m
        )
    });
    emit(&format!(
        "{} on {} ({:.2}M params, {}, {:.1} MB of weights read per token): decode {:.1} tok/s ({} new after a {}-token prompt), \
         prefill {:.1} tok/s ({} tokens); per decode token: {} dispatches, {} submits, {} bytes down, {} bind groups made, host {} µs ({} in the submit; {} µs a dispatch, median token {}); device peak {}{}\n",
        r.model,
        r.backend,
        r.params as f64 / 1e6,
        r.weights,
        r.weight_bytes_per_token as f64 / 1e6,
        r.decode_tok_s,
        opts.new_tokens,
        opts.prompt_len,
        r.prefill_tok_s,
        opts.prefill_len,
        opt(r.dispatches_per_token),
        opt(r.submits_per_token),
        opt(r.bytes_down_per_token),
        opt(r.bind_groups_per_token),
        opt(r.host_us_per_token),
        opt(r.host_us_submit_per_token),
        r.host_us_per_dispatch
            .map_or("-".to_string(), |x| format!("{x:.2}")),
        r.host_us_per_dispatch_median
            .map_or("-".to_string(), |x| format!("{x:.2}")),
        r.device_peak_bytes
            .map_or("-".to_string(), |b| format!("{:.1} MB", b as f64 / 1e6)),
        read,
    ))
}
