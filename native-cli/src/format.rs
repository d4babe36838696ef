//! Text shared by the commands' reports: durations in a readable unit and the parity table
//! (`kernels demo`, `kernels parity`, the benchmarks).

use std::time::Duration;

use crate::parity::Row;

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
