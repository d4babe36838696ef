//! `kernels gru bench`: latency of the world-model pipeline at batch 32, the CPU against wgpu in
//! one run: state encode, a 10-step rollout of the 5-member ensemble (with its mean and spread),
//! rank-32 `svd_lowrank` of the residual matrix, the corrections, and the whole pipeline; the
//! median of several runs with inputs and weights resident. wgpu rows add the dispatches of one
//! run and, for the rollout, the dispatches each extra step adds.
//!
//! Each timed stage ends with a 4-byte read of a resident scalar, which submits the recorded
//! work and waits for the device (the read itself is in the time, as in `kernels bench`).

use std::rc::Rc;
use std::time::Duration;

use kernels_core::autograd::{Graph, Var};
use kernels_core::models::world::{
    WorldConfig, apply_correction, ensemble_stats, residual_svd, sim,
};
use kernels_core::{Backend, CpuBackend, Tensor};
use kernels_gpu::bench::{median, time_runs};
use kernels_gpu::{BackendChoice, Counters, WgpuBackend, require_wgpu, select_backend};

use crate::format::fmt_duration;
use crate::world_model::load_world_or_embedded;
use crate::{CliResult, emit, emit_json, fail};

/// Options of `kernels gru bench`.
#[derive(Debug, Clone)]
pub struct GruBenchOptions {
    pub backends: Option<String>,
    pub batch: usize,
    pub steps: usize,
    pub rank: usize,
    pub runs: usize,
    /// Weights to time; the embedded ones when absent.
    pub weights: Option<std::path::PathBuf>,
    /// One JSON object instead of the table ([`json`]).
    pub json: bool,
}

/// One stage on one backend.
#[derive(Debug, Clone)]
pub struct StageRow {
    pub stage: &'static str,
    pub backend: String,
    pub median: Duration,
    pub counters: Option<Counters>,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct GruBench {
    pub rows: Vec<StageRow>,
    /// wgpu: dispatches of the ensemble rollout per extra step, and for the whole rollout.
    pub dispatches_per_step: Option<f64>,
    pub rollout_dispatches: Option<u64>,
    pub notes: Vec<String>,
}

struct Target {
    backend: Rc<dyn Backend>,
    gpu: Option<Rc<WgpuBackend>>,
    fence: Option<Tensor>,
}

impl Target {
    /// A backend without wgpu's counters (CUDA), synchronised through a download.
    fn other(backend: Rc<dyn Backend>) -> CliResult<Target> {
        let fence = Some(backend.upload(&Tensor::scalar(0.0))?);
        Ok(Target {
            backend,
            gpu: None,
            fence,
        })
    }
    fn sync(&self) -> kernels_core::Result<()> {
        if let Some(f) = &self.fence {
            self.backend.flush()?;
            pollster::block_on(self.backend.download(f))?;
        }
        Ok(())
    }
    fn counters(&self) -> Option<Counters> {
        self.gpu.as_ref().map(|g| g.counters())
    }
}

fn targets(spec: Option<&str>, notes: &mut Vec<String>) -> CliResult<Vec<Target>> {
    let names: Vec<String> = match spec {
        Some(s) => s.split(',').map(|x| x.trim().to_string()).collect(),
        None => vec!["cpu".into(), "wgpu?".into()],
    };
    let mut out = Vec::new();
    for n in names {
        match n.as_str() {
            "cpu" => out.push(Target {
                backend: Rc::new(CpuBackend::new()),
                gpu: None,
                fence: None,
            }),
            "wgpu" | "wgpu?" => {
                let g = if n == "wgpu?" {
                    match WgpuBackend::new() {
                        Ok(g) => Rc::new(g),
                        Err(e) => {
                            notes.push(format!("wgpu skipped: {e}"));
                            continue;
                        }
                    }
                } else {
                    require_wgpu()?
                };
                if kernels_gpu::adapters::is_software(g.adapter_info()) {
                    notes.push(format!(
                        "{} is a software adapter: its timings say nothing about GPU speed",
                        g.name()
                    ));
                }
                let fence = Some(g.upload(&Tensor::scalar(0.0))?);
                out.push(Target {
                    backend: g.clone(),
                    gpu: Some(g),
                    fence,
                });
            }
            "cuda" => {
                let chosen = select_backend(BackendChoice::Cuda)?;
                out.push(Target::other(chosen.backend)?);
            }
            other => {
                return Err(fail(format!(
                    "gru bench: unknown backend `{other}` (cpu, wgpu, cuda)"
                )));
            }
        }
    }
    Ok(out)
}

/// Runs `kernels gru bench`: [`measure`], then prints the [`table`], or with `o.json` the
/// [`json`] object (notes to stderr).
pub fn run(o: &GruBenchOptions) -> CliResult<()> {
    check_options(o)?;
    let b = measure(o)?;
    if o.json {
        for n in &b.notes {
            eprintln!("note: {n}");
        }
        emit_json(&json(&b, o))
    } else {
        emit(&table(&b, o))
    }
}

/// More runs than this only tighten a median already tight; a run of 10^12 would never end.
pub const MAX_RUNS: usize = 10_000;

/// The flags checked before anything is allocated or run: counts at least 1, `--runs` at most
/// [`MAX_RUNS`], and the trajectories' and rollout's memory (at least `--batch` x (`--steps` +
/// 1) observations of the simulated features, twice: data and windows) available.
pub fn check_options(o: &GruBenchOptions) -> CliResult<()> {
    use crate::limits::{check_fits, positive, product};
    for (flag, v) in [
        ("--batch", o.batch),
        ("--steps", o.steps),
        ("--rank", o.rank),
        ("--runs", o.runs),
    ] {
        positive(flag, v)?;
    }
    if o.runs > MAX_RUNS {
        return Err(fail(format!(
            "--runs {}: at most {MAX_RUNS} (the median is steady long before)",
            o.runs
        )));
    }
    let bytes = product(&[
        o.batch as u64,
        (o.steps as u64).saturating_add(1),
        sim::FEATURES as u64,
        4,
        2,
    ]);
    check_fits(
        &format!("--batch {} with --steps {}", o.batch, o.steps),
        "the simulated trajectories (at least 8 bytes per feature and step)",
        bytes,
    )
}

/// Errors unless the ensemble rollout's states (`--batch` x `--steps` x members x (hidden +
/// features), f32, at least) fit in memory, naming the flags.
fn check_rollout_fits(o: &GruBenchOptions, c: &WorldConfig) -> CliResult<()> {
    let bytes = crate::limits::product(&[
        o.batch as u64,
        o.steps as u64,
        c.members as u64,
        c.hidden.saturating_add(c.features) as u64,
        4,
    ]);
    crate::limits::check_fits(
        &format!("--batch {} with --steps {}", o.batch, o.steps),
        &format!(
            "the rollout of {} members of hidden size {} (at least)",
            c.members, c.hidden
        ),
        bytes,
    )
}

/// `kernels gru bench --json`: `{"batch", "steps", "rank", "runs", "rows": [{"stage",
/// "backend", "median_ms", "dispatches", "submits"}], "rollout_dispatches",
/// "dispatches_per_step"}`, null where a figure does not apply.
pub fn json(b: &GruBench, o: &GruBenchOptions) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = b
        .rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "stage": r.stage,
                "backend": r.backend,
                "median_ms": r.median.as_secs_f64() * 1e3,
                "dispatches": r.counters.map(|c| c.dispatches),
                "submits": r.counters.map(|c| c.submits),
            })
        })
        .collect();
    serde_json::json!({
        "batch": o.batch,
        "steps": o.steps,
        "rank": o.rank,
        "runs": o.runs,
        "rows": rows,
        "rollout_dispatches": b.rollout_dispatches,
        "dispatches_per_step": b.dispatches_per_step,
    })
}

/// Runs the benchmark.
pub fn measure(o: &GruBenchOptions) -> CliResult<GruBench> {
    let mut notes = Vec::new();
    let targets = targets(o.backends.as_deref(), &mut notes)?;
    measure_targets(o, targets, notes)
}

/// [`measure`] on backends the caller opened (`o.backends` is not read): a test's emulated
/// CUDA device, for one.
pub fn measure_on(o: &GruBenchOptions, backends: Vec<Rc<dyn Backend>>) -> CliResult<GruBench> {
    check_options(o)?;
    let targets = backends
        .into_iter()
        .map(Target::other)
        .collect::<CliResult<Vec<_>>>()?;
    measure_targets(o, targets, Vec::new())
}

fn measure_targets(
    o: &GruBenchOptions,
    targets: Vec<Target>,
    notes: Vec<String>,
) -> CliResult<GruBench> {
    let weights = o.weights.as_deref();
    let data = sim::trajectories(7, o.batch, o.steps + 1)?;
    let windows =
        kernels_core::models::world::Windows::new(&data, o.batch, o.steps + 1, sim::FEATURES)?;
    let starts: Vec<(usize, usize)> = (0..o.batch).map(|b| (b, 0)).collect();
    let (s0_host, truth_host) = windows.gather(&starts, o.steps)?;
    let mut rows = Vec::new();
    let mut per_step = None;
    let mut rollout_dispatches = None;
    for t in targets {
        let (model, store, _) = load_world_or_embedded(t.backend.clone(), weights)?;
        check_rollout_fits(o, &model.config)?;
        let g = Graph::inference(t.backend.clone());
        let p = store.bind(&g)?;
        let s0 = g.constant(t.backend.upload(&s0_host)?)?;
        let truth = g.constant(t.backend.upload(&truth_host)?)?;
        let z = model.encode(&g, &p, &s0)?;
        // The members' weights stacked once, as a loaded model's inference does.
        let e = model.stacked_weights(&store)?.bind(&g)?;
        let rollout = |steps: usize| -> kernels_core::Result<Var> {
            let roll = model.rollout_ensemble(&g, &e, &s0, &z, steps)?;
            Ok(ensemble_stats(&g, &roll)?.0)
        };
        let mean = rollout(o.steps)?;
        crate::world_model::check_rank(o.rank, mean.shape())?;
        let (u, s, v) = residual_svd(&g, &mean, &truth, o.rank, 0)?;
        let name = t.backend.name();
        let mut stage = |stage: &'static str,
                         f: &mut dyn FnMut() -> kernels_core::Result<()>|
         -> kernels_core::Result<()> {
            let times = time_runs(o.runs, || {
                f()?;
                t.sync()
            })?;
            let before = t.counters();
            f()?;
            t.sync()?;
            let counters = before.and_then(|b| t.counters().map(|a| a.since(&b)));
            rows.push(StageRow {
                stage,
                backend: name.clone(),
                median: median(&times),
                counters,
            });
            Ok(())
        };
        stage("state encode", &mut || model.encode(&g, &p, &s0).map(drop))?;
        stage("ensemble rollout", &mut || rollout(o.steps).map(drop))?;
        stage("svd_lowrank residual", &mut || {
            residual_svd(&g, &mean, &truth, o.rank, 0).map(drop)
        })?;
        stage("corrections", &mut || {
            apply_correction(&g, &mean, &u, &s, &v).map(drop)
        })?;
        stage("total", &mut || {
            let z = model.encode(&g, &p, &s0)?;
            let roll = model.rollout_ensemble(&g, &e, &s0, &z, o.steps)?;
            let (mean, _) = ensemble_stats(&g, &roll)?;
            let (u, s, v) = residual_svd(&g, &mean, &truth, o.rank, 0)?;
            apply_correction(&g, &mean, &u, &s, &v).map(drop)
        })?;
        if let Some(gpu) = &t.gpu {
            let count = |steps: usize| -> kernels_core::Result<u64> {
                t.sync()?;
                let b = gpu.counters();
                rollout(steps)?;
                t.sync()?;
                Ok(gpu.counters().since(&b).dispatches)
            };
            let (one, n) = (count(1)?, count(o.steps)?);
            rollout_dispatches = Some(n);
            if o.steps > 1 {
                per_step = Some((n - one) as f64 / (o.steps - 1) as f64);
            }
        }
    }
    Ok(GruBench {
        rows,
        dispatches_per_step: per_step,
        rollout_dispatches,
        notes,
    })
}

/// The stages as rows, one column per backend (median), plus wgpu dispatches.
pub fn table(b: &GruBench, o: &GruBenchOptions) -> String {
    let mut backends: Vec<&str> = Vec::new();
    for r in &b.rows {
        if !backends.contains(&r.backend.as_str()) {
            backends.push(&r.backend);
        }
    }
    let mut s = format!(
        "world-model pipeline, batch {}, {} steps, {} members, rank {} (median of {} runs)\n",
        o.batch,
        o.steps,
        WorldConfig::DEFAULT.members,
        o.rank,
        o.runs
    );
    let stages: Vec<&str> = {
        let mut v: Vec<&str> = Vec::new();
        for r in &b.rows {
            if !v.contains(&r.stage) {
                v.push(r.stage);
            }
        }
        v
    };
    s += &format!("{:<22}", "stage");
    for be in &backends {
        s += &format!("  {:>14}", short(be));
    }
    s += "  dispatches (wgpu)\n";
    for st in stages {
        s += &format!("{st:<22}");
        let mut disp = String::new();
        for be in &backends {
            let r = b.rows.iter().find(|r| r.stage == st && r.backend == *be);
            s += &format!("  {:>14}", r.map_or("-".into(), |r| fmt_duration(r.median)));
            if let Some(c) = r.and_then(|r| r.counters) {
                disp = c.dispatches.to_string();
            }
        }
        s += &format!("  {disp}\n");
    }
    if let (Some(d), Some(n)) = (b.dispatches_per_step, b.rollout_dispatches) {
        s += &format!(
            "wgpu rollout: {n} dispatches for {} steps; each further step adds {d:.1} for \
             all {} members together (one batched matmul h W_hh^T over the members and one \
             fused gate kernel; the input projections of all steps and members are one \
             batched matmul up front)\n",
            o.steps,
            WorldConfig::DEFAULT.members
        );
    }
    for n in &b.notes {
        s += &format!("note: {n}\n");
    }
    s
}

fn short(name: &str) -> String {
    if name.starts_with("wgpu") {
        "wgpu".into()
    } else {
        name.into()
    }
}
