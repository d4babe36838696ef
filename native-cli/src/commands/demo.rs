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
         ops, forward and backward, against the CPU reference (seed {})\n\n",
        cases.len(),
        kernels_core::OpKind::ALL.len(),
        opts.seed
    ))?;
    let mut llama = Vec::new();
    for (backend, reason) in &backends {
        let (ok, n) = model_demo(backend.clone(), reason, opts.seed)?;
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
    for (backend, reason) in &backends {
        emit(&format!("backend {}: {reason}\n", backend.name()))?;
        let t0 = Instant::now();
        let rows = check_all(&cases, backend.as_ref());
        let wall = t0.elapsed();
        emit(&table(&rows, false))?;
        let passed = rows.iter().filter(|r| r.pass()).count();
        for r in rows.iter().filter(|r| !r.pass()) {
            failures.push(format!(
                "{} {} {} {}: {}",
                r.backend,
                r.op,
                r.dir.name(),
                r.shape,
                r.failure().unwrap_or_default()
            ));
        }
        emit("\n")?;
        totals.push((backend.name(), passed, rows.len(), wall));
    }
    let mut s = String::from("totals:\n");
    for (name, passed, total, wall) in &totals {
        s.push_str(&format!(
            "  {name}: {passed}/{total} checks within budget ({} failed), {}\n",
            total - passed,
            fmt_duration(*wall)
        ));
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
        emit(&s)
    } else {
        s.push_str("\nfailures:\n");
        for f in &failures {
            s.push_str(&format!("  {f}\n"));
        }
        emit(&s)?;
        Err(fail(format!(
            "demo: {} of {} checks failed",
            failures.len(),
            totals.iter().map(|t| t.2).sum::<usize>()
        )))
    }
}

/// The embedded llama (three-digit addition) on one backend: a few problems streamed token by
/// token, then the held-out accuracy `(correct, problems)`.
fn model_demo(backend: Rc<dyn Backend>, reason: &str, seed: u64) -> CliResult<(usize, usize)> {
    let files = addition::embedded()?;
    let model = llama::build(&files, backend.clone())?;
    emit(&format!(
        "llama demo model ({} parameters, {} layers) on {} ({reason}): three-digit addition, the sum written least-significant digit first\n",
        model.config.num_parameters(),
        model.config.num_hidden_layers,
        backend.name()
    ))?;
    let mut rng = kernels_core::Rng::new(seed);
    for _ in 0..3 {
        let (a, b) = addition::draw(&mut rng, true);
        let prompt = addition::prompt(a, b);
        emit(&format!("  {prompt}"))?;
        // The demo's tokenizer is one character per id: streamed the way `generate` streams.
        let mut decode = |ids: &[u32]| -> CliResult<String> { Ok(addition::text(ids)) };
        let mut stream = kernels_chat::TextStream::new();
        let (_, stats) = llama::generate_ids(
            &model,
            &addition::ids(&prompt)?,
            addition::ANSWER_LEN,
            kernels_core::models::llama::Sampling::default(),
            &mut |id| {
                if let Ok(piece) = stream.push(id, &mut decode) {
                    let _ = emit(&piece);
                }
            },
        )?;
        emit(&stream.finish(&mut decode)?)?;
        let text = stream.shown().to_string();
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
    let (ok, n, _) = addition::evaluate(&model, problems, seed + 1, 250)?;
    emit(&format!(
        "  held-out exact match: {ok}/{n} = {:.1}%\n\n",
        100.0 * ok as f64 / n as f64
    ))?;
    Ok((ok, n))
}
