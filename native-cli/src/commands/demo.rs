//! `kernels demo`: the embedded llama demo model (three-digit addition) on each available
//! backend, the GRU world model, then every parity case of every op, forward and backward,
//! against the CPU reference, as a table with totals.

use std::rc::Rc;
use std::time::{Duration, Instant};

use kernels_core::parity::all_cases;
use kernels_core::{Backend, CpuBackend, DeviceId};
use kernels_gpu::{BackendChoice, select_backend};

pub mod world;

use crate::parity::{Row, check_all};
use crate::{CliResult, emit, fail};

/// Options of `kernels demo`.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Seed of the parity inputs.
    pub seed: u64,
    /// Also run the cases above 65,535 workgroups.
    pub large: bool,
    /// Where the world model's plot (SVG) is written.
    pub plot: std::path::PathBuf,
}

/// The backends the demo runs: the CPU with its fast paths, and the GPU `KERNELS_BACKEND`
/// selects (when it is not the CPU). Each with the reason it is there.
pub fn backends() -> CliResult<Vec<(Rc<dyn Backend>, String)>> {
    let mut v: Vec<(Rc<dyn Backend>, String)> =
        vec![(Rc::new(CpuBackend::new()), "CPU with its fast paths".into())];
    let selected = select_backend(BackendChoice::from_env()?)?;
    if selected.backend.device() != DeviceId::CPU {
        v.push((selected.backend, selected.reason));
    } else {
        v[0].1 = format!("CPU with its fast paths; {}", selected.reason);
    }
    Ok(v)
}

/// `12.3 us`, `4.56 ms`, `1.23 s`.
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1e-3 {
        format!("{:.1} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

fn fmt_err(e: f64) -> String {
    if e == 0.0 {
        "0".into()
    } else if e.is_infinite() {
        "inf (NaN/Inf)".into()
    } else {
        format!("{e:.2e}")
    }
}

fn fmt_budget(r: &Row) -> String {
    if r.atol == 0.0 && r.rtol == 0.0 {
        "exact".into()
    } else {
        let num = |x: f64| {
            if x == 0.0 {
                "0".to_string()
            } else {
                format!("{x:.1e}")
            }
        };
        format!("{} + {}|ref|", num(r.atol), num(r.rtol))
    }
}

/// Renders rows as an aligned table.
pub fn table(rows: &[Row], with_backend: bool) -> String {
    let mut cells: Vec<Vec<String>> = vec![
        [
            "backend",
            "op",
            "dir",
            "shape",
            "max abs err",
            "budget",
            "pass",
            "time",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    ];
    for r in rows {
        cells.push(vec![
            r.backend.clone(),
            r.op.clone(),
            r.dir.name().to_string(),
            r.shape.clone(),
            if r.error.is_some() {
                "error".into()
            } else {
                fmt_err(r.max_abs_err())
            },
            fmt_budget(r),
            if r.pass() { "ok" } else { "FAIL" }.into(),
            fmt_duration(r.time),
        ]);
    }
    let skip = usize::from(!with_backend);
    let ncol = 8;
    let widths: Vec<usize> = (0..ncol)
        .map(|c| {
            cells
                .iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::new();
    for (i, row) in cells.iter().enumerate() {
        let line: Vec<String> = (skip..ncol)
            .map(|c| format!("{:<w$}", row[c], w = widths[c]))
            .collect();
        s.push_str(line.join("  ").trim_end());
        s.push('\n');
        if i == 0 {
            let rule: Vec<String> = (skip..ncol).map(|c| "-".repeat(widths[c])).collect();
            s.push_str(&rule.join("  "));
            s.push('\n');
        }
    }
    s
}

/// Runs the demo, printing as it goes. Fails when any check fails.
pub fn run(opts: DemoOptions) -> CliResult<()> {
    let cases = all_cases(opts.seed, opts.large)?;
    let backends = backends()?;
    emit(&format!(
        "kernels demo: the llama addition model, the GRU world model, then {} parity cases of {} \
         ops, forward and backward, against the CPU reference (seed {})\n\n",
        cases.len(),
        kernels_core::OpKind::ALL.len(),
        opts.seed
    ))?;
    for (backend, reason) in &backends {
        model_demo(backend.clone(), reason, opts.seed)?;
    }
    world::run(&backends, &opts.plot)?;
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
/// token, then the held-out accuracy.
fn model_demo(backend: Rc<dyn Backend>, reason: &str, seed: u64) -> CliResult<()> {
    use crate::addition;
    use crate::llama;
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
        let (ids, stats) = llama::generate_ids(
            &model,
            &addition::ids(&prompt)?,
            addition::ANSWER_LEN,
            kernels_core::models::llama::Sampling::default(),
            &mut |id| {
                let c = addition::VOCAB.get(id as usize).copied().unwrap_or('?');
                let _ = emit(&c.to_string());
            },
        )?;
        let text: String = ids
            .iter()
            .map(|&i| addition::VOCAB.get(i as usize).copied().unwrap_or('?'))
            .collect();
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
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(fmt_duration(Duration::from_micros(12)), "12.0 us");
        assert_eq!(fmt_duration(Duration::from_micros(4560)), "4.56 ms");
        assert_eq!(fmt_duration(Duration::from_millis(1230)), "1.23 s");
    }
}
