//! The rows of `kernels bench` and how they are shown: the aligned table, the JSON objects and
//! the tiled-against-naive matmul lines.

use std::time::Duration;

use kernels_gpu::Counters;

use crate::format::fmt_duration;

/// One benchmark on one backend.
#[derive(Debug, Clone, Default)]
pub struct BenchRow {
    pub bench: String,
    pub backend: String,
    pub size: String,
    pub median_ms: Option<f64>,
    pub gflops: Option<f64>,
    pub gbps: Option<f64>,
    pub runs: usize,
    /// Counters of one timed run (wgpu only).
    pub counters: Option<Counters>,
    /// Least bytes the op must move (read inputs once, write outputs once).
    pub min_bytes: Option<u64>,
    /// GFLOPS over the backend's known peak.
    pub peak_fraction: Option<f64>,
    /// Tokens per second (llama prefill and decode rows).
    pub tokens_per_s: Option<f64>,
    pub error: Option<String>,
}

impl BenchRow {
    /// `{"bench","backend","size","median_ms","gflops","gbps"}` plus `runs`, `dispatches`,
    /// `submits`, `bytes_uploaded`, `bytes_downloaded`, `min_bytes`, `bytes_touched`, `host_us`
    /// (host time recording and submitting, `Counters::host_ns`), `host_us_per_dispatch`,
    /// `bind_groups_created`, `peak_fraction`, `tokens_per_s` and `error` (null where a figure
    /// does not apply).
    pub fn json(&self) -> serde_json::Value {
        let c = self.counters.as_ref();
        serde_json::json!({
            "bench": self.bench,
            "backend": self.backend,
            "size": self.size,
            "median_ms": self.median_ms,
            "gflops": self.gflops,
            "gbps": self.gbps,
            "runs": self.runs,
            "dispatches": c.map(|c| c.dispatches),
            "submits": c.map(|c| c.submits),
            "bytes_uploaded": c.map(|c| c.bytes_uploaded),
            "bytes_downloaded": c.map(|c| c.bytes_downloaded),
            "min_bytes": self.min_bytes,
            "bytes_touched": c.map(|c| c.bytes_touched),
            "host_us": c.map(|c| c.host_ns as f64 / 1e3),
            "host_us_per_dispatch": c.and_then(host_us_per_dispatch),
            "bind_groups_created": c.map(|c| c.bind_groups_created),
            "peak_fraction": self.peak_fraction,
            "tokens_per_s": self.tokens_per_s,
            "error": self.error,
        })
    }
}

/// Host microseconds per dispatch of a run's counters (none without dispatches).
fn host_us_per_dispatch(c: &Counters) -> Option<f64> {
    (c.dispatches > 0).then(|| c.host_ns as f64 / 1e3 / c.dispatches as f64)
}

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) => format!("{x:.prec$}"),
        None => "-".into(),
    }
}

/// The rows as an aligned table.
pub fn table(rows: &[BenchRow]) -> String {
    let mut cells: Vec<Vec<String>> = vec![
        [
            "bench",
            "backend",
            "size",
            "median",
            "GFLOPS",
            "peak",
            "GB/s",
            "tok/s",
            "disp",
            "submits",
            "up B",
            "down B",
            "min B",
            "touched B",
            "host µs",
            "µs/disp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    ];
    for r in rows {
        let c = r.counters.as_ref();
        let cnt = |f: fn(&Counters) -> u64| c.map(|c| f(c).to_string()).unwrap_or("-".into());
        cells.push(vec![
            r.bench.clone(),
            r.backend.clone(),
            r.size.clone(),
            match (r.median_ms, &r.error) {
                (Some(ms), _) => fmt_duration(Duration::from_secs_f64(ms / 1e3)),
                (None, Some(_)) => "error".into(),
                (None, None) => "-".into(),
            },
            fmt_opt(r.gflops, 2),
            r.peak_fraction
                .map(|f| format!("{:.0}%", 100.0 * f))
                .unwrap_or("-".into()),
            fmt_opt(r.gbps, 2),
            fmt_opt(r.tokens_per_s, 1),
            cnt(|c| c.dispatches),
            cnt(|c| c.submits),
            cnt(|c| c.bytes_uploaded),
            cnt(|c| c.bytes_downloaded),
            r.min_bytes.map(|b| b.to_string()).unwrap_or("-".into()),
            match (c, r.min_bytes) {
                (Some(c), Some(m)) if m > 0 => format!(
                    "{} ({:.2}x)",
                    c.bytes_touched,
                    c.bytes_touched as f64 / m as f64
                ),
                (Some(c), _) => c.bytes_touched.to_string(),
                (None, _) => "-".into(),
            },
            fmt_opt(c.map(|c| c.host_ns as f64 / 1e3), 1),
            fmt_opt(c.and_then(host_us_per_dispatch), 2),
        ]);
    }
    let ncol = cells[0].len();
    let widths: Vec<usize> = (0..ncol)
        .map(|i| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::new();
    for (i, row) in cells.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        s.push_str(line.join("  ").trim_end());
        s.push('\n');
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            s.push_str(&rule.join("  "));
            s.push('\n');
        }
    }
    s
}

/// `tiled vs naive at 256: 3.1x` lines for the sizes both ran.
pub fn tiled_vs_naive(rows: &[BenchRow]) -> Vec<String> {
    rows.iter()
        .filter(|r| r.bench == "matmul_naive")
        .filter_map(|nv| {
            let tiled = rows.iter().find(|r| {
                r.bench == "matmul" && r.size == nv.size && r.backend.starts_with("wgpu")
            })?;
            let (t, n) = (tiled.median_ms?, nv.median_ms?);
            Some(format!(
                "tiled vs naive WGSL matmul at {}: {:.2} ms vs {:.2} ms, {:.1}x",
                nv.size,
                t,
                n,
                n / t
            ))
        })
        .collect()
}
