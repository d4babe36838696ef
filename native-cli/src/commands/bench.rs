//! `kernels bench`: matmul (GFLOPS), softmax / layer_norm / rms_norm (GB/s) and causal attention
//! prefill on every requested backend in one run, the median of several runs, with the wgpu
//! counters per op (dispatches, submits, bytes moved), and the tiled WGSL matmul against a naive
//! one-thread-per-output one on the same adapter.
//!
//! Timing: inputs are uploaded once; a timed run is the op plus, on wgpu, a 4-byte read of a
//! resident scalar that submits the recorded work and waits for the device. That read is the
//! one submit and the 4 downloaded bytes every wgpu row shows. CPU rows use
//! `CpuBackend::new()` (the fast paths of kernels-core).

pub mod llama;
pub mod llama_model;
pub mod read_rate;
pub mod report;

use std::rc::Rc;
use std::time::Duration;

use kernels_core::op::{Direction, Op};
use kernels_core::{Backend, CpuBackend, Rng, Tensor};
use kernels_gpu::adapters::is_software;
use kernels_gpu::bench::{
    BenchCase, NaiveMatmul, Work, attention_case, matmul_cases, median, rowwise_cases, time_runs,
};
use kernels_gpu::{BackendChoice, Counters, WgpuBackend, require_wgpu, select_backend};

use crate::parity::download;
use crate::{CliResult, emit, emit_json, fail};
use report::{BenchRow, table, tiled_vs_naive};

/// Options of `kernels bench`.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Comma-separated backends (`cpu`, `wgpu`); None: the CPU and wgpu when an adapter exists.
    pub backends: Option<String>,
    pub json: bool,
    /// Smaller sizes and fewer runs (for software adapters and smoke tests).
    pub quick: bool,
    /// The largest square matmul (doubling from 128); None: 1024, or 512 with `quick`.
    pub matmul_max: Option<usize>,
    /// Peak GFLOPS per backend (`cpu=96,wgpu=5000`), for GFLOPS as a fraction of peak; the
    /// CPU's is estimated from its clock and vector unit when not given.
    pub peak_gflops: Option<String>,
}

/// A backend under test, with the wgpu backend again for its counters.
struct Target {
    backend: Rc<dyn Backend>,
    gpu: Option<Rc<WgpuBackend>>,
    /// A resident scalar whose read waits for the device.
    fence: Option<Tensor>,
}

impl Target {
    fn sync(&self) -> kernels_core::Result<()> {
        if let Some(f) = &self.fence {
            download(self.backend.as_ref(), f)?;
        }
        Ok(())
    }
}

/// The sizes a run uses.
struct Sizes {
    matmul: Vec<usize>,
    naive: Vec<usize>,
    rows: usize,
    cols: usize,
    /// Attention prefill: batch, heads, sequence, head dim.
    attn: [usize; 4],
    runs: usize,
}

fn sizes(quick: bool, matmul_max: Option<usize>) -> CliResult<Sizes> {
    let mut sz = default_sizes(quick);
    if let Some(max) = matmul_max {
        if !(128..=16384).contains(&max) {
            return Err(fail(format!(
                "bench: --matmul-max {max} is outside 128..=16384"
            )));
        }
        sz.matmul = std::iter::successors(Some(128usize), |n| Some(n * 2))
            .take_while(|&n| n <= max)
            .collect();
    }
    Ok(sz)
}

fn default_sizes(quick: bool) -> Sizes {
    if quick {
        Sizes {
            matmul: vec![128, 256, 512],
            naive: vec![256, 512],
            rows: 1024,
            cols: 1024,
            attn: [1, 4, 128, 64],
            runs: 3,
        }
    } else {
        Sizes {
            matmul: vec![128, 256, 512, 1024],
            naive: vec![256, 512],
            rows: 4096,
            cols: 4096,
            attn: [1, 8, 512, 64],
            runs: 5,
        }
    }
}

fn targets(spec: Option<&str>) -> CliResult<(Vec<Target>, Vec<String>)> {
    let mut notes = Vec::new();
    let names: Vec<String> = match spec {
        Some(s) => s
            .split(',')
            .map(|x| x.trim().to_ascii_lowercase())
            .filter(|x| !x.is_empty())
            .collect(),
        None => vec!["cpu".into(), "auto-wgpu".into()],
    };
    let mut out = Vec::new();
    for n in names {
        match n.as_str() {
            "cpu" => out.push(Target {
                backend: Rc::new(CpuBackend::new()),
                gpu: None,
                fence: None,
            }),
            "cuda" => {
                let be = select_backend(BackendChoice::Cuda)?.backend;
                let fence = be.upload(&Tensor::zeros(&[1])?)?;
                out.push(Target {
                    backend: be,
                    gpu: None,
                    fence: Some(fence),
                });
            }
            "wgpu" | "gpu" | "auto-wgpu" => {
                let g = if n == "auto-wgpu" {
                    match WgpuBackend::new() {
                        Ok(g) => Rc::new(g),
                        Err(e) => {
                            notes.push(format!("no wgpu rows: {e}"));
                            continue;
                        }
                    }
                } else {
                    require_wgpu()?
                };
                let fence = g.upload(&Tensor::zeros(&[1])?)?;
                if is_software(g.adapter_info()) {
                    notes.push(format!(
                        "{} is a software adapter: its timings say nothing about GPU speed; \
                             the counters, the bytes moved and tiled vs naive carry over",
                        g.adapter_info().name
                    ));
                }
                out.push(Target {
                    backend: g.clone(),
                    gpu: Some(g),
                    fence: Some(fence),
                });
            }
            other => {
                return Err(fail(format!(
                    "bench: unknown backend `{other}`; expected a comma-separated list of cpu, wgpu, cuda"
                )));
            }
        }
    }
    if out.is_empty() {
        return Err(fail("bench: no backend to run"));
    }
    Ok((out, notes))
}

/// Times `op` on `args` (host tensors, uploaded once) on `t`.
fn bench_op(
    t: &Target,
    bench: &str,
    size: String,
    op: &Op,
    args: &[&Tensor],
    runs: usize,
    work: Work,
) -> BenchRow {
    let mut row = BenchRow {
        bench: bench.into(),
        backend: t.backend.name(),
        size,
        runs,
        min_bytes: Some(work.min_bytes),
        ..Default::default()
    };
    let result = (|| -> kernels_core::Result<(Duration, Option<Counters>)> {
        let dev: Vec<Tensor> = args
            .iter()
            .map(|a| t.backend.upload(a))
            .collect::<kernels_core::Result<_>>()?;
        let refs: Vec<&Tensor> = dev.iter().collect();
        let mut once = || -> kernels_core::Result<()> {
            let outs = t.backend.run(op, Direction::Forward, &refs)?;
            t.sync()?;
            drop(outs);
            Ok(())
        };
        let samples = time_runs(runs, &mut once)?;
        let counters = match &t.gpu {
            Some(g) => {
                let before = g.counters();
                once()?;
                Some(g.counters().since(&before))
            }
            None => None,
        };
        Ok((median(&samples), counters))
    })();
    match result {
        Ok((m, c)) => {
            row.median_ms = Some(m.as_secs_f64() * 1e3);
            (row.gflops, row.gbps) = work.rates(m);
            row.counters = c;
        }
        Err(e) => row.error = Some(e.to_string()),
    }
    row
}

fn naive_rows(sz: &Sizes, rng: &mut Rng) -> Vec<BenchRow> {
    let naive = match NaiveMatmul::new() {
        Ok(n) => n,
        Err(e) => {
            return vec![BenchRow {
                bench: "matmul_naive".into(),
                backend: "wgpu".into(),
                error: Some(e.to_string()),
                ..Default::default()
            }];
        }
    };
    sz.naive
        .iter()
        .map(|&n| {
            let mut row = BenchRow {
                bench: "matmul_naive".into(),
                backend: format!("wgpu ({}, naive WGSL)", naive.adapter_name()),
                size: format!("{n}x{n}x{n}"),
                runs: sz.runs,
                min_bytes: Some((3 * n * n * 4) as u64),
                counters: Some(Counters {
                    dispatches: 1,
                    submits: 1,
                    bytes_touched: (3 * n * n * 4) as u64,
                    ..Default::default()
                }),
                ..Default::default()
            };
            let a = rng.uniform_vec(n * n, -1.0, 1.0);
            let b = rng.uniform_vec(n * n, -1.0, 1.0);
            let r = naive
                .problem(&a, &b, n, n, n)
                .and_then(|p| time_runs(sz.runs, || naive.run(&p)));
            match r {
                Ok(samples) => {
                    let s = median(&samples).as_secs_f64().max(1e-12);
                    row.median_ms = Some(s * 1e3);
                    row.gflops = Some(2.0 * (n as f64).powi(3) / s / 1e9);
                }
                Err(e) => {
                    row.error = Some(e.to_string());
                    row.counters = None;
                }
            }
            row
        })
        .collect()
}

/// Every benchmark on every target.
pub fn measure(opts: &BenchOptions) -> CliResult<(Vec<BenchRow>, Vec<String>)> {
    let sz = sizes(opts.quick, opts.matmul_max)?;
    let (targets, mut notes) = targets(opts.backends.as_deref())?;
    if opts.quick {
        notes.push(format!(
            "--quick: matmul up to {}, norms on {} x {} instead of 4096 x 4096, attention S = {}, median of {} runs",
            sz.matmul.last().copied().unwrap_or(0),
            sz.rows,
            sz.cols,
            sz.attn[2],
            sz.runs
        ));
    }
    let mut rng = Rng::new(0x6265_6e63);
    let mut rows = Vec::new();
    let run_cases = |cases: &[BenchCase], rows: &mut Vec<BenchRow>| {
        for c in cases {
            let args: Vec<&Tensor> = c.inputs.iter().collect();
            for t in &targets {
                rows.push(bench_op(
                    t,
                    c.bench,
                    c.size.clone(),
                    &c.op,
                    &args,
                    sz.runs,
                    c.work,
                ));
            }
        }
    };
    run_cases(&matmul_cases(&sz.matmul, &mut rng)?, &mut rows);
    if targets.iter().any(|t| t.gpu.is_some()) {
        rows.extend(naive_rows(&sz, &mut rng));
    }
    run_cases(&rowwise_cases(sz.rows, sz.cols, &mut rng)?, &mut rows);
    run_cases(&[attention_case(sz.attn, &mut rng)?], &mut rows);
    for t in &targets {
        rows.push(mlp_step_row(t, &mut rng, sz.runs)?);
    }
    for t in &targets {
        rows.extend(llama::rows(
            t.backend.clone(),
            t.gpu.as_deref(),
            opts.quick,
            sz.runs,
        ));
    }
    let peaks = peaks(opts.peak_gflops.as_deref(), &mut notes)?;
    for r in &mut rows {
        let key = ["cpu", "cuda"]
            .into_iter()
            .find(|k| r.backend.to_ascii_lowercase().starts_with(k))
            .unwrap_or("wgpu");
        if let (Some(g), Some(p)) = (r.gflops, peaks.get(key)) {
            r.peak_fraction = Some(g / p);
        }
    }
    Ok((rows, notes))
}

/// Peak GFLOPS per backend: given ones, and for the CPU an estimate (one core: clock x FLOPs
/// per cycle of its widest FMA path) when not given. GPU peaks are not discoverable through
/// wgpu, so they come only from `--peak-gflops`.
fn peaks(
    spec: Option<&str>,
    notes: &mut Vec<String>,
) -> CliResult<std::collections::BTreeMap<String, f64>> {
    let mut out = std::collections::BTreeMap::new();
    for part in spec
        .unwrap_or_default()
        .split(',')
        .filter(|p| !p.trim().is_empty())
    {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| fail(format!("--peak-gflops: `{part}` is not BACKEND=GFLOPS")))?;
        let v: f64 = v
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v > 0.0)
            .ok_or_else(|| fail(format!("--peak-gflops: `{v}` is not a positive number")))?;
        out.insert(k.trim().to_ascii_lowercase(), v);
    }
    if !out.contains_key("cpu")
        && let Some((ghz, per_cycle)) = cpu_peak()
    {
        let p = ghz * per_cycle;
        notes.push(format!(
            "cpu peak estimated at {p:.0} GFLOPS (one core: {ghz:.2} GHz x {per_cycle:.0} FLOPs/cycle); \
             set --peak-gflops cpu=X to override"
        ));
        out.insert("cpu".into(), p);
    }
    Ok(out)
}

/// `(GHz, f32 FLOPs per cycle)` of one core, when both can be found: the clock from
/// /proc/cpuinfo, the FLOPs from the vector unit the fast matmul uses (AVX2 + FMA: two 8-wide
/// FMA pipes).
fn cpu_peak() -> Option<(f64, f64)> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mhz: f64 = info
        .lines()
        .find(|l| l.starts_with("cpu MHz"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()?;
    #[cfg(target_arch = "x86_64")]
    let per_cycle = if std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
    {
        32.0
    } else {
        8.0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let per_cycle = 8.0;
    Some((mhz / 1e3, per_cycle))
}

/// One training step of a small MLP (64 -> 256 relu -> 10, batch 64, cross-entropy, AdamW):
/// the dispatches and submits a step costs, and its time.
fn mlp_step_row(t: &Target, rng: &mut Rng, runs: usize) -> CliResult<BenchRow> {
    use kernels_core::autograd::Graph;
    use kernels_core::nn::{Linear, ParamStore};
    use kernels_core::op::Activation;
    use kernels_core::optim::AdamW;
    let (batch, inp, hidden, classes) = (64, 64, 256, 10);
    let mut store = ParamStore::new(t.backend.clone());
    let fc1 = Linear::new(&mut store, "fc1", inp, hidden, true, rng)?;
    let fc2 = Linear::new(&mut store, "fc2", hidden, classes, true, rng)?;
    let mut opt = AdamW::new(1e-3);
    let x = t
        .backend
        .upload(&rng.normal_tensor(&[batch, inp], 0.0, 1.0)?)?;
    let ids: Vec<i32> = (0..batch).map(|i| (i % classes) as i32).collect();
    let y = t.backend.upload(&Tensor::from_i32(&[batch], ids)?)?;
    let flops = 6.0 * (batch * (inp * hidden + hidden * classes)) as f64;
    let mut row = BenchRow {
        bench: "mlp_train_step".into(),
        backend: t.backend.name(),
        size: format!("{inp}-{hidden}-{classes} b{batch}"),
        runs,
        ..Default::default()
    };
    let mut step = || -> kernels_core::Result<()> {
        let g = Graph::new(t.backend.clone());
        let p = store.bind(&g)?;
        let xv = g.constant(x.clone())?;
        let h = fc1.forward_act(&g, &p, &xv, Activation::Relu)?;
        let logits = fc2.forward(&g, &p, &h)?;
        let loss = g.cross_entropy(&logits, &g.constant(y.clone())?)?;
        let grads = g.backward(&loss)?;
        opt.step(&mut store, &grads)?;
        t.sync()
    };
    // Warm-up (pipelines, pool), then the timed runs, then one counted step.
    step()?;
    let samples = time_runs(runs, &mut step)?;
    if let Some(g) = &t.gpu {
        let before = g.counters();
        step()?;
        row.counters = Some(g.counters().since(&before));
    }
    let s = median(&samples).as_secs_f64().max(1e-12);
    row.median_ms = Some(s * 1e3);
    row.gflops = Some(flops / s / 1e9);
    Ok(row)
}

/// Runs `kernels bench`.
pub fn run(opts: &BenchOptions) -> CliResult<()> {
    let (rows, notes) = measure(opts)?;
    if opts.json {
        for n in &notes {
            eprintln!("note: {n}");
        }
        let list: Vec<serde_json::Value> = rows.iter().map(BenchRow::json).collect();
        emit_json(&serde_json::Value::from(list))?;
    } else {
        let mut s = String::from("kernels bench: median wall time per op (inputs resident)\n");
        for n in &notes {
            s.push_str(&format!("note: {n}\n"));
        }
        s.push('\n');
        s.push_str(&table(&rows));
        s.push('\n');
        for l in tiled_vs_naive(&rows) {
            s.push_str(&l);
            s.push('\n');
        }
        s.push_str(
            "wgpu rows: each run is the op plus a 4-byte read that submits and waits (1 submit, 4 B down)\n",
        );
        s.push_str(
            "llama rows: prefill = prompt to first token; decode = per token after it, counters of one decode step\n",
        );
        for r in rows.iter().filter(|r| r.error.is_some()) {
            s.push_str(&format!(
                "{} on {}: {}\n",
                r.bench,
                r.backend,
                r.error.as_deref().unwrap_or_default()
            ));
        }
        emit(&s)?;
    }
    Ok(())
}
