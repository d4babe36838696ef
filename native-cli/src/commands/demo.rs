//! `kernels demo`: the embedded llama demo model (three-digit addition) on each available
//! backend, the GRU world model, then every parity case of every op, forward and backward,
//! against the CPU reference, as a table with totals.

pub mod world;

use std::rc::Rc;
use std::time::{Duration, Instant};

use kernels_core::parity::all_cases;
use kernels_core::{Backend, CpuBackend, DeviceId};
use kernels_gpu::{BackendChoice, select_backend};

use crate::format::{fmt_duration, table};
use crate::parity::check_all;
use crate::{CliResult, addition, emit, fail, llama};

/// Options of `kernels demo`.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Seed of the parity inputs.
    pub seed: u64,
    /// Also run the cases above 65,535 workgroups.
    pub large: bool,
    /// Where the world model's plot (SVG) is written.
    pub plot: std::path::PathBuf,
    /// Print the summary as one JSON object on stdout, the progress on stderr.
    pub json: bool,
    /// Print every parity check's row, not only the failing ones.
    pub verbose: bool,
}

/// The backends the demo runs: the CPU with its fast paths, and the GPU `KERNELS_BACKEND`
/// selects (when it is not the CPU). Each with the reason it is there. A software adapter
/// (lavapipe) loses `auto` to the CPU for speed, but the demo is a parity check, so under
/// `auto` it runs there too.
pub fn backends() -> CliResult<Vec<(Rc<dyn Backend>, String)>> {
    let mut v: Vec<(Rc<dyn Backend>, String)> =
        vec![(Rc::new(CpuBackend::new()), "CPU with its fast paths".into())];
    let choice = BackendChoice::from_env()?;
    let selected = select_backend(choice)?;
    if selected.backend.device() != DeviceId::CPU {
        v.push((selected.backend, selected.reason));
    } else {
        v[0].1 = format!("CPU with its fast paths; {}", selected.reason);
        if choice == BackendChoice::Auto
            && let Ok(g) = kernels_gpu::require_wgpu()
        {
            let why = format!(
                "software adapter {}, checked for parity (its speed says nothing about a GPU's)",
                g.adapter_info().name
            );
            v.push((g, why));
        }
    }
    Ok(v)
}

/// Runs the demo, printing as it goes. Fails when any check fails.
pub fn run(opts: DemoOptions) -> CliResult<()> {
    if opts.json {
        crate::progress_to_stderr();
    }
    let cases = all_cases(opts.seed, opts.large)?;
    let backends = backends()?;
    emit(&format!(
        "kernels demo: the llama addition model, the GRU world model, then {} parity cases of {} \
         ops (forward and backward) against the CPU reference, seed {}\n\n",
        cases.len(),
        kernels_core::OpKind::ALL.len(),
        opts.seed
    ))?;
    let mut llama = Vec::new();
    for (backend, reason) in &backends {
        let (ok, n) = model_demo(backend.clone(), reason, opts.seed, opts.verbose)?;
        llama.push(serde_json::json!({
            "backend": backend.name(),
            "reason": reason,
            "held_out_correct": ok,
            "held_out_problems": n,
        }));
    }
    let world = world::run(&backends, &opts.plot)?;
    let mut totals: Vec<(String, usize, usize, Duration)> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut s = format!(
        "parity against the CPU reference ({} cases):\n",
        cases.len()
    );
    for (backend, reason) in &backends {
        let t0 = Instant::now();
        let rows = check_all(&cases, super::parity::parity_backend(backend).as_ref());
        let wall = t0.elapsed();
        if opts.verbose {
            emit(&format!("backend {}: {reason}\n", backend.name()))?;
            emit(&table(&rows, false))?;
            emit("\n")?;
        }
        let passed = rows.iter().filter(|r| r.pass()).count();
        let failed: Vec<_> = rows.iter().filter(|r| !r.pass()).cloned().collect();
        for r in &failed {
            failures.push(format!(
                "{} {} {} {}: {}",
                r.backend,
                r.op,
                r.dir.name(),
                r.shape,
                r.failure().unwrap_or_default()
            ));
        }
        s.push_str(&summary_line(&backend.name(), &rows, cases.len(), wall));
        if !failed.is_empty() && !opts.verbose {
            s.push_str(&table(&failed[..failed.len().min(MAX_FAILED_ROWS)], true));
            if failed.len() > MAX_FAILED_ROWS {
                s.push_str(&format!(
                    "  ... and {} more failing rows (kernels parity --backend {} lists every row)\n",
                    failed.len() - MAX_FAILED_ROWS,
                    backend.name()
                ));
            }
        }
        totals.push((backend.name(), passed, rows.len(), wall));
    }
    if opts.json {
        emit(&s)?;
        crate::emit_json(&serde_json::json!({
            "seed": opts.seed,
            "llama": llama,
            "world": world
                .iter()
                .map(|w| serde_json::json!({
                    "backend": w.backend,
                    "mse": w.mse,
                    "persistence_mse": w.persistence_mse,
                }))
                .collect::<Vec<_>>(),
            "parity": totals
                .iter()
                .map(|(name, passed, total, wall)| serde_json::json!({
                    "backend": name,
                    "passed": passed,
                    "checks": total,
                    "seconds": wall.as_secs_f64(),
                }))
                .collect::<Vec<_>>(),
            "failures": failures,
            "passed": failures.is_empty(),
        }))?;
        s.clear();
    }
    if failures.is_empty() {
        s.push_str("all checks passed\n");
        s.push_str(NEXT);
        emit(&s)
    } else {
        if opts.verbose {
            s.push_str("\nfailures:\n");
            for f in &failures {
                s.push_str(&format!("  {f}\n"));
            }
        }
        s.push_str(NEXT);
        emit(&s)?;
        Err(fail(format!(
            "demo: {} of {} checks failed",
            failures.len(),
            totals.iter().map(|t| t.2).sum::<usize>()
        )))
    }
}

/// Failing rows shown per backend without --verbose.
const MAX_FAILED_ROWS: usize = 5;

/// What to try after the demo.
pub const NEXT: &str = "\nnext:\n  \
    kernels generate --prompt 123+456=         the demo model answering one problem\n  \
    kernels demo --verbose                     every parity check, one row each\n  \
    kernels parity --backend cpu               the parity table of one backend\n  \
    kernels bench --quick                      the ops' speed on each backend\n  \
    kernels train transformer --out my-adder   train an adder of your own\n";

/// One backend's parity in a line: checks within budget, failures, wall time and the slowest
/// check (op and direction).
pub fn summary_line(
    backend: &str,
    rows: &[crate::parity::Row],
    cases: usize,
    wall: Duration,
) -> String {
    let passed = rows.iter().filter(|r| r.pass()).count();
    let slowest = rows
        .iter()
        .max_by_key(|r| r.time)
        .map(|r| {
            format!(
                "; slowest: {} {} ({})",
                r.kind,
                r.dir.name(),
                fmt_duration(r.time)
            )
        })
        .unwrap_or_default();
    format!(
        "  {backend}: {passed}/{} checks within budget ({cases} cases, forward and backward), {} \
         failed, {}{slowest}\n",
        rows.len(),
        rows.len() - passed,
        fmt_duration(wall)
    )
}

/// The embedded llama (three-digit addition) on one backend: a few problems streamed token by
/// token, then the held-out accuracy `(correct, problems)`.
fn model_demo(
    backend: Rc<dyn Backend>,
    reason: &str,
    seed: u64,
    verbose: bool,
) -> CliResult<(usize, usize)> {
    let files = addition::embedded()?;
    let model = llama::build(&files, backend.clone())?;
    let tok = addition::tokenizer_of(&files)?;
    let why = if verbose {
        format!(" ({reason})")
    } else {
        String::new()
    };
    emit(&format!(
        "llama demo model ({} parameters, {} layers) on {}{why}: three-digit addition, answers \
         least-significant digit first\n",
        model.config.num_parameters(),
        model.config.num_hidden_layers,
        backend.name()
    ))?;
    let mut rng = kernels_core::Rng::new(seed);
    for _ in 0..3 {
        let (a, b) = addition::draw(&mut rng, true);
        let prompt = addition::prompt(a, b);
        emit(&format!("  {prompt}"))?;
        // Through kernels-chat's generation path, streamed as `generate` streams.
        let prompt_ids = kernels_chat::prompt_ids(&tok, &prompt)?;
        let mut decoder = kernels_chat::Decoder::new(&model, Default::default(), 0)?;
        let when = kernels_chat::StopWhen {
            max_new_tokens: addition::ANSWER_LEN,
            stop_ids: model.config.eos_token_ids.clone(),
            stop_strings: Vec::new(),
            show_stop_id: true,
        };
        let n = prompt_ids.len();
        let (mut run, _) =
            kernels_chat::Completion::start(&mut decoder, &tok, prompt_ids, &[], when)?;
        let mut timer = crate::commands::generate::StepTimer::start(n);
        let mut out_err = None;
        pollster::block_on(run.run(&mut crate::commands::generate::printing(
            &mut timer,
            &mut out_err,
        )))?;
        if let Some(e) = out_err {
            return Err(e);
        }
        emit(&run.finish()?.0)?;
        let text = run.shown().to_string();
        let stats = timer.stats(run.new_ids().len());
        let verdict = match addition::read_answer(&text) {
            Some(v) if v == a + b => format!("reads {v}: correct"),
            _ => format!("wrong (want {})", addition::answer(a, b)),
        };
        emit(&format!("   {verdict}; {}\n", stats.line()))?;
    }
    // Software GPUs (lavapipe) take about a second per ten problems: fewer there.
    let problems = if backend.device() == DeviceId::CPU {
        500
    } else {
        50
    };
    let (ok, n, _) = addition::evaluate(&model, &tok, problems, seed + 1, 250, &mut |_, _| {})?;
    emit(&format!(
        "  held-out exact match: {ok}/{n} = {:.1}%\n\n",
        100.0 * ok as f64 / n as f64
    ))?;
    Ok((ok, n))
}
