//! What the page shows, as data: parity lines (the CPU and WebGPU, each against the CPU
//! reference), their summary and JSON export, benchmark results and their chart.
//!
//! The page's parity panel runs the harness's small selection of the shared parity cases
//! ([`kernels_gpu::parity::small_cases`], [`PARITY_SEED`]): the op list comes from
//! [`OpKind::ALL`] and the cases, never from a list of its own.

use std::fmt::Write as _;
use std::time::Duration;

use kernels_core::{Direction, OpKind};
use kernels_gpu::parity::Row;

/// A form field read as a whole number in `[lo, hi]`, or why not, naming the field.
pub fn whole_number(text: &str, name: &str, lo: usize, hi: usize) -> Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .ok()
        .filter(|v| (lo..=hi).contains(v))
        .ok_or_else(|| format!("{name}: `{text}` is not a whole number in [{lo}, {hi}]"))
}

/// Seed of the page's parity inputs.
pub const PARITY_SEED: u64 = 7;

/// The CPU backend the parity panel checks: its fast paths with f32 activations, so every op is
/// held to its own budget (products with a quantized weight otherwise take 8-bit activations,
/// held to their own budget by kernels-core's qdot tests).
pub fn parity_cpu() -> kernels_core::CpuBackend {
    kernels_core::CpuBackend::new().with_exact_activations(true)
}

/// One case in one direction: the CPU's run and (when WebGPU is in use) the device's, each
/// compared with the reference under the op's budget.
#[derive(Debug, Clone)]
pub struct ParityLine {
    pub cpu: Row,
    pub gpu: Option<Row>,
}

impl ParityLine {
    /// Pairs the rows of one case (same order: forward, then backward if differentiable).
    pub fn pair(cpu: Vec<Row>, gpu: Option<Vec<Row>>) -> Vec<ParityLine> {
        match gpu {
            Some(g) => cpu
                .into_iter()
                .zip(g)
                .map(|(c, g)| ParityLine {
                    cpu: c,
                    gpu: Some(g),
                })
                .collect(),
            None => cpu
                .into_iter()
                .map(|c| ParityLine { cpu: c, gpu: None })
                .collect(),
        }
    }
    pub fn op(&self) -> &str {
        &self.cpu.op
    }
    pub fn kind(&self) -> &'static str {
        self.cpu.kind
    }
    pub fn dir(&self) -> Direction {
        self.cpu.dir
    }
    /// Every backend that ran is within budget.
    pub fn pass(&self) -> bool {
        self.cpu.pass() && self.gpu.as_ref().is_none_or(Row::pass)
    }
    /// What failed, naming the backend.
    pub fn failure(&self) -> Option<String> {
        let mut why = Vec::new();
        for r in std::iter::once(&self.cpu).chain(self.gpu.as_ref()) {
            if let Some(f) = r.failure() {
                why.push(format!("{}: {f}", r.backend));
            }
        }
        if why.is_empty() {
            None
        } else {
            Some(why.join("; "))
        }
    }
}

/// Passed and failed lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
}

pub fn summary(lines: &[ParityLine]) -> Summary {
    let passed = lines.iter().filter(|l| l.pass()).count();
    Summary {
        passed,
        failed: lines.len() - passed,
    }
}

/// `op direction` of every op in [`OpKind::ALL`] that has no line that ran without error
/// (forward, and backward for differentiable ops) on every backend in use.
pub fn missing_ops(lines: &[ParityLine]) -> Vec<String> {
    let ran = |k: &OpKind, d: Direction| {
        lines.iter().any(|l| {
            l.kind() == k.name()
                && l.dir() == d
                && l.cpu.error.is_none()
                && l.gpu.as_ref().is_none_or(|g| g.error.is_none())
        })
    };
    OpKind::ALL
        .iter()
        .flat_map(|k| {
            let mut m = Vec::new();
            if !ran(k, Direction::Forward) {
                m.push(format!("{k} forward"));
            }
            if k.spec().differentiable() && !ran(k, Direction::Backward) {
                m.push(format!("{k} backward"));
            }
            m
        })
        .collect()
}

/// `1.23 ms`, `456 us`.
pub fn fmt_time(t: Duration) -> String {
    let us = t.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} us")
    }
}

fn row_json(r: &Row) -> serde_json::Value {
    serde_json::json!({
        "backend": r.backend,
        "pass": r.pass(),
        "max_abs_err": finite_or_null(r.max_abs_err()),
        "max_rel_err": finite_or_null(r.max_rel_err()),
        "time_ms": r.time.as_secs_f64() * 1e3,
        "error": r.failure(),
    })
}

/// JSON has no Inf: an infinite error (NaN/Inf positions differ) is null, with `pass` false.
fn finite_or_null(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// The parity results as JSON: `{"backend", "adapter", "summary", "rows": [{op, kind, dir,
/// shape, k, atol, rtol, pass, cpu: {...}, webgpu: {...} | null}]}`.
pub fn parity_json(lines: &[ParityLine], backend: &str, adapter: &str) -> serde_json::Value {
    let s = summary(lines);
    serde_json::json!({
        "backend": backend,
        "adapter": adapter,
        "seed": PARITY_SEED,
        "summary": {"passed": s.passed, "failed": s.failed},
        "rows": lines.iter().map(|l| serde_json::json!({
            "op": l.op(),
            "kind": l.kind(),
            "dir": l.dir().name(),
            "shape": l.cpu.shape,
            "k": l.cpu.k,
            "atol": l.cpu.atol,
            "rtol": l.cpu.rtol,
            "pass": l.pass(),
            "cpu": row_json(&l.cpu),
            "webgpu": l.gpu.as_ref().map(row_json),
        })).collect::<Vec<_>>(),
    })
}

/// One benchmark on one backend, as the page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchResult {
    pub bench: String,
    pub size: String,
    /// `cpu` or `webgpu`.
    pub backend: String,
    pub median: Option<Duration>,
    /// In `unit`; None when the run failed.
    pub rate: Option<f64>,
    /// `GFLOPS` (compute-bound benchmarks) or `GB/s` (memory-bound ones).
    pub unit: &'static str,
    pub error: Option<String>,
}

impl BenchResult {
    /// The result of timing `work` at `median` (or of a failure).
    pub fn new(
        bench: &str,
        size: &str,
        backend: &str,
        work: &kernels_gpu::bench::Work,
        median: Result<Duration, String>,
    ) -> Self {
        let unit = if work.flops.is_some() {
            "GFLOPS"
        } else {
            "GB/s"
        };
        let (median, rate, error) = match median {
            Ok(m) => {
                let (gflops, gbps) = work.rates(m);
                (Some(m), gflops.or(gbps), None)
            }
            Err(e) => (None, None, Some(e)),
        };
        BenchResult {
            bench: bench.into(),
            size: size.into(),
            backend: backend.into(),
            median,
            rate,
            unit,
            error,
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Horizontal bar charts as SVG, one per unit (GFLOPS, GB/s), one bar per benchmark, size and
/// backend, each chart scaled to its largest value. Failed runs are listed without a bar.
pub fn bench_chart_svg(results: &[BenchResult]) -> String {
    const W: f64 = 640.0;
    const LABEL: f64 = 230.0;
    const BAR: f64 = 16.0;
    const GAP: f64 = 4.0;
    let mut body = String::new();
    let mut y = 0.0;
    for unit in ["GFLOPS", "GB/s"] {
        let rows: Vec<&BenchResult> = results.iter().filter(|r| r.unit == unit).collect();
        if rows.is_empty() {
            continue;
        }
        let max = rows
            .iter()
            .filter_map(|r| r.rate)
            .fold(0.0, f64::max)
            .max(1e-9);
        y += 18.0;
        let _ = write!(
            body,
            r#"<text x="0" y="{y}" font-weight="bold">{unit}</text>"#
        );
        y += GAP;
        for r in rows {
            let label = escape(&format!("{} {} {}", r.bench, r.size, r.backend));
            let _ = write!(
                body,
                r#"<text x="0" y="{}" font-size="12">{label}</text>"#,
                y + BAR - 4.0
            );
            match r.rate {
                Some(v) => {
                    let w = ((W - LABEL - 80.0) * v / max).max(1.0);
                    let class = if r.backend == "cpu" { "cpu" } else { "webgpu" };
                    let _ = write!(
                        body,
                        r#"<rect class="bar {class}" x="{LABEL}" y="{y}" width="{w:.1}" height="{BAR}"/><text x="{:.1}" y="{}" font-size="12">{v:.2}</text>"#,
                        LABEL + w + 4.0,
                        y + BAR - 4.0
                    );
                }
                None => {
                    let _ = write!(
                        body,
                        r#"<text class="failed" x="{LABEL}" y="{}" font-size="12">failed</text>"#,
                        y + BAR - 4.0
                    );
                }
            }
            y += BAR + GAP;
        }
    }
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{:.0}" role="img" aria-label="benchmark chart">{body}</svg>"#,
        y + GAP
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kernels_core::CpuBackend;
    use kernels_gpu::parity::{SMALL_CASE_ELEMS, check_both, small_cases};

    fn lines_for(kinds: &[OpKind]) -> Vec<ParityLine> {
        let reference = CpuBackend::reference();
        small_cases(PARITY_SEED, SMALL_CASE_ELEMS)
            .unwrap()
            .iter()
            .filter(|c| kinds.contains(&c.op.kind()))
            .flat_map(|c| {
                let cpu = check_both(c, &parity_cpu(), &reference);
                let gpu = check_both(c, &reference, &reference);
                ParityLine::pair(cpu, Some(gpu))
            })
            .collect()
    }

    #[test]
    fn lines_pair_directions_and_count_passes() {
        let lines = lines_for(&[OpKind::Matmul, OpKind::Argmax]);
        assert!(lines.iter().any(|l| l.dir() == Direction::Backward));
        for l in &lines {
            let g = l.gpu.as_ref().unwrap();
            assert_eq!(
                (l.op(), l.dir(), &l.cpu.shape),
                (g.op.as_str(), g.dir, &g.shape)
            );
        }
        let s = summary(&lines);
        assert_eq!(
            s,
            Summary {
                passed: lines.len(),
                failed: 0
            }
        );
        let missing = missing_ops(&lines);
        assert!(missing.contains(&"add forward".to_string()), "{missing:?}");
        // "matmul_add forward" is missing (not among the kinds run); matmul and argmax are not.
        let op_of = |m: &String| m.split(' ').next().unwrap_or_default().to_string();
        assert!(
            !missing
                .iter()
                .any(|m| op_of(m) == "matmul" || op_of(m) == "argmax"),
            "{missing:?}"
        );
    }

    #[test]
    fn a_failing_backend_fails_the_line_and_is_named() {
        let mut lines = lines_for(&[OpKind::Sum]);
        let g = lines[0].gpu.as_mut().unwrap();
        g.error = Some("device lost: test".into());
        g.backend = "webgpu-test".into();
        assert!(!lines[0].pass());
        assert!(
            lines[0]
                .failure()
                .unwrap()
                .starts_with("webgpu-test: device lost")
        );
        assert_eq!(summary(&lines).failed, 1);
        // A line that did not run on every backend does not count as coverage.
        if lines
            .iter()
            .filter(|l| l.dir() == Direction::Forward)
            .count()
            == 1
        {
            assert!(missing_ops(&lines).contains(&"sum forward".to_string()));
        }
    }

    #[test]
    fn json_export_has_every_line_and_the_summary() {
        let lines = lines_for(&[OpKind::Softmax]);
        let v = parity_json(&lines, "webgpu", "test adapter");
        assert_eq!(v["rows"].as_array().unwrap().len(), lines.len());
        assert_eq!(v["summary"]["passed"], lines.len());
        assert_eq!(v["rows"][0]["kind"], "softmax");
        assert!(v["rows"][0]["cpu"]["max_abs_err"].is_number());
        let cpu_only = ParityLine::pair(lines.iter().map(|l| l.cpu.clone()).collect(), None);
        assert!(parity_json(&cpu_only, "cpu", "")["rows"][0]["webgpu"].is_null());
    }

    #[test]
    fn chart_has_a_bar_per_result_and_marks_failures() {
        use kernels_gpu::bench::Work;
        let compute = Work {
            flops: Some(2e9),
            min_bytes: 0,
        };
        let memory = Work {
            flops: None,
            min_bytes: 1_000_000_000,
        };
        let ms = |m| Ok(Duration::from_millis(m));
        let r = |bench, backend, work, t| BenchResult::new(bench, "8x8", backend, work, t);
        let results = [
            r("matmul", "cpu", &compute, ms(1000)),
            r("matmul", "webgpu", &compute, ms(500)),
            r("softmax", "cpu", &memory, ms(1000)),
            r("rms_norm", "webgpu", &memory, Err("boom".into())),
        ];
        assert_eq!(results[1].rate, Some(4.0));
        assert_eq!((results[2].rate, results[2].unit), (Some(1.0), "GB/s"));
        let svg = bench_chart_svg(&results);
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(svg.contains("GFLOPS") && svg.contains("GB/s"));
        assert!(svg.contains(">failed<"));
        assert!(svg.contains("rms_norm 8x8 webgpu"));
        assert!(bench_chart_svg(&[]).starts_with("<svg"));
    }

    #[test]
    fn times_read_well() {
        assert_eq!(fmt_time(Duration::from_micros(456)), "456 us");
        assert_eq!(fmt_time(Duration::from_micros(1234)), "1.23 ms");
    }
}
