//! The guides' charts, drawn from the benchmarks' own JSON output (`tests/README.md`, "Charts").
//!
//! An input folder holds one chart's inputs: a `meta.json` (`{"out", "title", "date",
//! "machine", "command", "note"}`; `out` is the SVG's path relative to the output root) and any
//! number of `*.json` / `*.jsonl` files, each recognized by its fields:
//!
//! - `kernels bench llama --json`: one object with `decode_tok_s`, `prefill_tok_s`, `backend`;
//! - `peer-candle` (../shared/peers/candle-llama): one line with `peer`, `decode_tok_s`;
//! - transformers.js's `run.py --json`: a list of results, each with `peer` and `runs`;
//! - llama.cpp's `compare.py`: lines with `decode_tok_s: {"ours", "llama.cpp", "ratio"}`;
//! - `kernels bench --json`: a list of rows with `bench`, `size`, `gflops`;
//! - `decode_by_position --json`: an object with `positions` and `ms_per_token`.
//!
//! Tokens/s inputs make a bar chart (decode and prefill, per format and thread count, each
//! engine's median with its range over the files); `kernels bench` rows make GFLOPS by matrix
//! size per backend; positions make time per token by position. Several kinds in one folder are
//! an error: one folder, one chart.

mod svg;
pub mod xml;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

pub use svg::{Bar, Group, Panel, Series};

/// Why a chart could not be made.
#[derive(Debug)]
pub enum ChartError {
    /// A file or folder could not be read or written.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file is not JSON (or a line of a `.jsonl` file is not).
    Json { path: PathBuf, message: String },
    /// A JSON document none of the known formats matches, or a field of the wrong type.
    Format { path: PathBuf, what: String },
    /// A folder's `meta.json` is missing a field, or its inputs do not make one chart.
    Folder { dir: PathBuf, what: String },
}

impl fmt::Display for ChartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChartError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ChartError::Json { path, message } => {
                write!(f, "{}: not JSON: {message}", path.display())
            }
            ChartError::Format { path, what } => write!(f, "{}: {what}", path.display()),
            ChartError::Folder { dir, what } => write!(f, "{}: {what}", dir.display()),
        }
    }
}

impl std::error::Error for ChartError {}

/// One measurement of a llama's decode and prefill speed.
#[derive(Debug, Clone, PartialEq)]
pub struct TokRate {
    /// Who ran it: `ours (cpu)`, `candle 0.11.1`, `llama.cpp`...
    pub engine: String,
    /// The weights' format: `f32`, `q4_k+q5_0`, `Q4_K_M`...
    pub format: String,
    /// Threads, when the source says.
    pub threads: Option<u64>,
    pub decode_tok_s: f64,
    pub prefill_tok_s: f64,
}

/// One matmul timing of `kernels bench`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gflops {
    pub backend: String,
    /// n of an n x n x n product.
    pub n: u64,
    pub gflops: f64,
}

/// Decode time per token by position (one run).
#[derive(Debug, Clone, PartialEq)]
pub struct ByPosition {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// What one input file holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Rates(Vec<TokRate>),
    Gflops(Vec<Gflops>),
    Positions(ByPosition),
}

/// The caption and destination of a folder's chart.
#[derive(Debug, Clone)]
pub struct Meta {
    pub out: PathBuf,
    pub title: String,
    pub date: String,
    pub machine: String,
    pub command: String,
    pub note: Option<String>,
}

fn format_err(path: &Path, what: impl Into<String>) -> ChartError {
    ChartError::Format {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

fn num(v: &Value, key: &str, path: &Path) -> Result<f64, ChartError> {
    v.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| format_err(path, format!("`{key}` is missing or not a number")))
}

fn text(v: &Value, key: &str, path: &Path) -> Result<String, ChartError> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format_err(path, format!("`{key}` is missing or not a string")))
}

/// Parses the JSON documents of one file (one, or one per line for `.jsonl` and for files
/// whose lines are separate documents, as the peers print them).
pub fn parse_documents(path: &Path, content: &str) -> Result<Vec<Value>, ChartError> {
    if let Ok(v) = serde_json::from_str::<Value>(content) {
        return Ok(vec![v]);
    }
    content
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str::<Value>(l).map_err(|e| ChartError::Json {
                path: path.to_path_buf(),
                message: e.to_string(),
            })
        })
        .collect()
}

/// Recognizes one JSON document (see the module's documentation); `None` for documents that
/// carry no figure (compare.py's summary line).
pub fn classify(path: &Path, v: &Value) -> Result<Option<Input>, ChartError> {
    if let Some(list) = v.as_array() {
        let first = list
            .first()
            .ok_or_else(|| format_err(path, "an empty list"))?;
        if first.get("bench").is_some() {
            return gflops_rows(path, list).map(|g| Some(Input::Gflops(g)));
        }
        if first.get("peer").is_some() && first.get("runs").is_some() {
            let mut rates = Vec::new();
            for r in list {
                rates.extend(transformers_js(path, r)?);
            }
            return Ok(Some(Input::Rates(rates)));
        }
        return Err(format_err(
            path,
            "a list of neither `kernels bench` rows nor run.py results",
        ));
    }
    if v.get("worst_decode_ratio").is_some() {
        return Ok(None);
    }
    if let Some(d) = v.get("decode_tok_s").filter(|d| d.is_object()) {
        // llama.cpp's compare.py: both engines in one line.
        let p = v
            .get("prefill_tok_s")
            .ok_or_else(|| format_err(path, "`prefill_tok_s` is missing"))?;
        let format = text(v, "type", path)?;
        let threads = v.get("threads").and_then(Value::as_u64);
        let mut rates = Vec::new();
        for engine in ["ours", "llama.cpp"] {
            rates.push(TokRate {
                engine: engine.to_string(),
                format: format.clone(),
                threads,
                decode_tok_s: num(d, engine, path)?,
                prefill_tok_s: num(p, engine, path)?,
            });
        }
        return Ok(Some(Input::Rates(rates)));
    }
    if v.get("peer").is_some() && v.get("runs").is_some() {
        return transformers_js(path, v).map(|r| Some(Input::Rates(r)));
    }
    if v.get("peer").is_some() {
        return Ok(Some(Input::Rates(vec![TokRate {
            engine: text(v, "peer", path)?,
            // candle's peer loads the checkpoint's own f32 weights.
            format: "f32".to_string(),
            threads: v.get("threads").and_then(Value::as_u64),
            decode_tok_s: num(v, "decode_tok_s", path)?,
            prefill_tok_s: num(v, "prefill_tok_s", path)?,
        }])));
    }
    if v.get("decode_tok_s").is_some() && v.get("backend").is_some() {
        return Ok(Some(Input::Rates(vec![TokRate {
            engine: format!("ours ({})", text(v, "backend", path)?),
            format: v
                .get("weights")
                .and_then(Value::as_str)
                .unwrap_or("f32")
                .to_string(),
            threads: v.get("threads").and_then(Value::as_u64),
            decode_tok_s: num(v, "decode_tok_s", path)?,
            prefill_tok_s: num(v, "prefill_tok_s", path)?,
        }])));
    }
    if let (Some(pos), Some(ms)) = (v.get("positions"), v.get("ms_per_token")) {
        let (Some(pos), Some(ms)) = (pos.as_array(), ms.as_array()) else {
            return Err(format_err(
                path,
                "`positions` and `ms_per_token` must be lists",
            ));
        };
        if pos.len() != ms.len() || pos.is_empty() {
            return Err(format_err(
                path,
                "`positions` and `ms_per_token` differ in length",
            ));
        }
        let mut points = Vec::with_capacity(pos.len());
        for (p, m) in pos.iter().zip(ms) {
            match (p.as_f64(), m.as_f64()) {
                (Some(p), Some(m)) => points.push((p, m)),
                _ => return Err(format_err(path, "a position or time is not a number")),
            }
        }
        let label = format!(
            "{} ({})",
            v.get("model").and_then(Value::as_str).unwrap_or("llama"),
            v.get("backend").and_then(Value::as_str).unwrap_or("cpu")
        );
        return Ok(Some(Input::Positions(ByPosition { label, points })));
    }
    Err(format_err(
        path,
        "no known benchmark format (see tests/README.md, \"Charts\")",
    ))
}

fn transformers_js(path: &Path, r: &Value) -> Result<Vec<TokRate>, ChartError> {
    let engine = text(r, "peer", path)?;
    let threads = r
        .get("threads_effective")
        .or_else(|| r.get("threads_requested"))
        .and_then(Value::as_u64);
    let format = match r.get("dtype").and_then(Value::as_str) {
        Some("fp32") | None => "f32".to_string(),
        Some(other) => other.to_string(),
    };
    let runs = r
        .get("runs")
        .and_then(Value::as_array)
        .ok_or_else(|| format_err(path, "`runs` is not a list"))?;
    runs.iter()
        .map(|run| {
            Ok(TokRate {
                engine: engine.clone(),
                format: format.clone(),
                threads,
                decode_tok_s: num(run, "decode_tok_s", path)?,
                prefill_tok_s: num(run, "prefill_tok_s", path)?,
            })
        })
        .collect()
}

fn gflops_rows(path: &Path, list: &[Value]) -> Result<Vec<Gflops>, ChartError> {
    let mut out = Vec::new();
    for row in list {
        if row.get("bench").and_then(Value::as_str) != Some("matmul") {
            continue;
        }
        let Some(g) = row.get("gflops").and_then(Value::as_f64) else {
            continue; // a failed row ("error") has no figure
        };
        let size = text(row, "size", path)?;
        // "1024^3", "1024x1024x1024" or "1024".
        let n = size
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| format_err(path, format!("matmul size {size:?} has no n")))?;
        out.push(Gflops {
            backend: text(row, "backend", path)?,
            n,
            gflops: g,
        });
    }
    Ok(out)
}

/// Reads a folder's `meta.json`.
pub fn read_meta(dir: &Path) -> Result<Meta, ChartError> {
    let path = dir.join("meta.json");
    let content = std::fs::read_to_string(&path).map_err(|source| ChartError::Io {
        path: path.clone(),
        source,
    })?;
    let v: Value = serde_json::from_str(&content).map_err(|e| ChartError::Json {
        path: path.clone(),
        message: e.to_string(),
    })?;
    Ok(Meta {
        out: PathBuf::from(text(&v, "out", &path)?),
        title: text(&v, "title", &path)?,
        date: text(&v, "date", &path)?,
        machine: text(&v, "machine", &path)?,
        command: text(&v, "command", &path)?,
        note: v.get("note").and_then(Value::as_str).map(str::to_string),
    })
}

/// Median, minimum and maximum of a non-empty list.
fn spread(values: &mut [f64]) -> Option<(f64, f64, f64)> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let (first, last) = (*values.first()?, *values.last()?);
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    Some((median, first, last))
}

/// The bar chart of tokens/s: a panel for decode and one for prefill, a group per (format,
/// threads), a bar per engine (median of the files, whisker from the least to the most).
pub fn rate_panels(rates: &[TokRate]) -> Vec<Panel> {
    let mut panels = Vec::new();
    for (title, pick) in [
        (
            "decode tok/s",
            (|r: &TokRate| r.decode_tok_s) as fn(&TokRate) -> f64,
        ),
        ("prefill tok/s", |r: &TokRate| r.prefill_tok_s),
    ] {
        let mut groups: BTreeMap<(String, Option<u64>), BTreeMap<String, Vec<f64>>> =
            BTreeMap::new();
        for r in rates {
            groups
                .entry((r.format.clone(), r.threads))
                .or_default()
                .entry(r.engine.clone())
                .or_default()
                .push(pick(r));
        }
        let groups = groups
            .into_iter()
            .map(|((format, threads), engines)| Group {
                label: match threads {
                    Some(t) => format!("{format}, {t} thread{}", if t == 1 { "" } else { "s" }),
                    None => format,
                },
                bars: engines
                    .into_iter()
                    .filter_map(|(series, mut v)| {
                        let runs = v.len();
                        spread(&mut v).map(|(median, lo, hi)| Bar {
                            series,
                            median,
                            lo,
                            hi,
                            runs,
                        })
                    })
                    .collect(),
            })
            .collect();
        panels.push(Panel {
            title: title.to_string(),
            groups,
        });
    }
    panels
}

/// GFLOPS by n per backend: one series per backend, the median and range at each n.
pub fn gflops_series(rows: &[Gflops]) -> Vec<Series> {
    let mut by: BTreeMap<String, BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for r in rows {
        by.entry(r.backend.clone())
            .or_default()
            .entry(r.n)
            .or_default()
            .push(r.gflops);
    }
    by.into_iter()
        .map(|(name, sizes)| Series {
            name,
            points: sizes
                .into_iter()
                .filter_map(|(n, mut v)| spread(&mut v).map(|(m, lo, hi)| (n as f64, m, lo, hi)))
                .collect(),
        })
        .collect()
}

/// Time per token by position: one series per label, the median and range over its runs at
/// each position.
pub fn position_series(runs: &[ByPosition]) -> Vec<Series> {
    let mut by: BTreeMap<String, BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for run in runs {
        let at = by.entry(run.label.clone()).or_default();
        for &(x, y) in &run.points {
            at.entry(x.to_bits()).or_default().push(y);
        }
    }
    by.into_iter()
        .map(|(name, at)| {
            let mut points: Vec<(f64, f64, f64, f64)> = at
                .into_iter()
                .filter_map(|(x, mut v)| {
                    spread(&mut v).map(|(m, lo, hi)| (f64::from_bits(x), m, lo, hi))
                })
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { name, points }
        })
        .collect()
}

/// Reads every input of one folder.
pub fn read_inputs(dir: &Path) -> Result<Vec<Input>, ChartError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| ChartError::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let ext = p.extension().and_then(|e| e.to_str());
            matches!(ext, Some("json" | "jsonl"))
                && p.file_name().and_then(|n| n.to_str()) != Some("meta.json")
        })
        .collect();
    files.sort();
    let mut inputs = Vec::new();
    for path in files {
        let content = std::fs::read_to_string(&path).map_err(|source| ChartError::Io {
            path: path.clone(),
            source,
        })?;
        for doc in parse_documents(&path, &content)? {
            if let Some(input) = classify(&path, &doc)? {
                inputs.push(input);
            }
        }
    }
    Ok(inputs)
}

/// Makes one folder's chart: returns the SVG's path under `out_root`.
pub fn make_chart(dir: &Path, out_root: &Path) -> Result<PathBuf, ChartError> {
    let meta = read_meta(dir)?;
    let folder_err = |what: &str| ChartError::Folder {
        dir: dir.to_path_buf(),
        what: what.into(),
    };
    let inputs = read_inputs(dir)?;
    let (mut rates, mut gflops, mut positions) = (Vec::new(), Vec::new(), Vec::new());
    for input in inputs {
        match input {
            Input::Rates(r) => rates.extend(r),
            Input::Gflops(g) => gflops.extend(g),
            Input::Positions(p) => positions.push(p),
        }
    }
    let kinds = [!rates.is_empty(), !gflops.is_empty(), !positions.is_empty()];
    let svg = match kinds {
        [true, false, false] => svg::bar_chart(&meta, &rate_panels(&rates)),
        [false, true, false] => svg::line_chart(
            &meta,
            &gflops_series(&gflops),
            "n (n x n x n)",
            "GFLOPS",
            true,
        ),
        [false, false, true] => svg::line_chart(
            &meta,
            &position_series(&positions),
            "position",
            "ms per token",
            false,
        ),
        [false, false, false] => return Err(folder_err("holds no benchmark figures")),
        _ => {
            return Err(folder_err(
                "mixes kinds of figures: one folder makes one chart",
            ));
        }
    };
    let out = out_root.join(&meta.out);
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|source| ChartError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(&out, svg).map_err(|source| ChartError::Io {
        path: out.clone(),
        source,
    })?;
    Ok(out)
}

/// Makes the chart of every folder under `input` that has a `meta.json` (and of `input` itself
/// when it has one), in path order.
pub fn make_all(input: &Path, out_root: &Path) -> Result<Vec<PathBuf>, ChartError> {
    let mut dirs = Vec::new();
    if input.join("meta.json").is_file() {
        dirs.push(input.to_path_buf());
    }
    let entries = std::fs::read_dir(input).map_err(|source| ChartError::Io {
        path: input.to_path_buf(),
        source,
    })?;
    for e in entries {
        let e = e.map_err(|source| ChartError::Io {
            path: input.to_path_buf(),
            source,
        })?;
        if e.path().join("meta.json").is_file() {
            dirs.push(e.path());
        }
    }
    dirs.sort();
    if dirs.is_empty() {
        return Err(ChartError::Folder {
            dir: input.to_path_buf(),
            what: "no folder with a meta.json".into(),
        });
    }
    dirs.iter().map(|d| make_chart(d, out_root)).collect()
}
