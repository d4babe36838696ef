//! The chart generator (`tests/src/bin/charts.rs`) on the saved benchmark JSON
//! (`tests/fixtures/bench-json/`): it runs, every SVG it writes is well-formed XML with its
//! caption, and the committed charts are what it makes from those files. Nothing is measured.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use kernels_tests::charts::{self, ChartError, xml::check_well_formed};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kernels-charts-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Parses an SVG and returns its text content, one string.
fn svg_text(path: &Path) -> String {
    let svg = std::fs::read_to_string(path).unwrap();
    let doc = check_well_formed(&svg).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(doc.root, "svg", "{}", path.display());
    assert!(
        doc.elements.iter().any(|e| e == "path" || e == "rect"),
        "{}",
        path.display()
    );
    doc.texts.join("\n")
}

#[test]
fn the_generator_makes_valid_svg_from_the_saved_json_and_the_committed_charts_are_its_output() {
    let input = root().join("tests/fixtures/bench-json");
    let out = fresh_dir("fixtures");
    let run = Command::new(env!("CARGO_BIN_EXE_charts"))
        .arg("--out")
        .arg(&out)
        .arg(&input)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&input)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("meta.json").is_file())
        .collect();
    folders.sort();
    assert!(folders.len() >= 4, "{folders:?}");
    for folder in folders {
        let meta = charts::read_meta(&folder).unwrap();
        let made = out.join(&meta.out);
        let text = svg_text(&made);
        assert!(
            text.contains(&meta.date),
            "{}: no date in the caption",
            made.display()
        );
        assert!(text.contains(&meta.title), "{}: no title", made.display());
        let committed = root().join(&meta.out);
        assert!(
            std::fs::read_to_string(&committed).ok() == std::fs::read_to_string(&made).ok(),
            "{} is not what `cargo run -p kernels-tests --bin charts -- --out . \
             tests/fixtures/bench-json` makes",
            committed.display()
        );
    }
    std::fs::remove_dir_all(&out).unwrap();
}

const META: &str = r#"{"out": "chart.svg", "title": "t", "date": "2000-01-02",
  "machine": "m", "command": "c"}"#;

/// A folder's name, its files (name, content) and texts its chart must show.
type Case = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

#[test]
fn every_input_format_is_read() {
    // The formats of tests/README.md's "Charts", with figures made up for this test only.
    let cases: [Case; 4] = [
        (
            "llama_cpp",
            &[(
                "compare.jsonl",
                "{\"shape\": \"qwen05\", \"type\": \"Q4_K_M\", \"threads\": 1, \"decode_tok_s\": \
                 {\"ours\": 11.5, \"llama.cpp\": 23.5, \"ratio\": 0.49}, \"prefill_tok_s\": \
                 {\"ours\": 70.0, \"llama.cpp\": 140.0, \"ratio\": 0.5}}\n\
                 {\"worst_decode_ratio\": 0.49, \"worst_prefill_ratio\": 0.5}\n",
            )],
            &["llama.cpp", "ours", "Q4_K_M", "1 thread", "23.5", "140"],
        ),
        (
            "bench_llama",
            &[
                (
                    "a.json",
                    "{\"model\": \"m\", \"backend\": \"wgpu\", \"threads\": null, \
                     \"decode_tok_s\": 40.0, \"prefill_tok_s\": 1000.0, \"weights\": \"q8_0\"}",
                ),
                (
                    "b.json",
                    "{\"peer\": \"candle 0.11.1\", \"threads\": 2, \"decode_tok_s\": 30.0, \"prefill_tok_s\": 900.0, \"params\": 1}",
                ),
            ],
            &["ours (wgpu)", "candle 0.11.1", "q8_0", "2 threads", "1,000"],
        ),
        (
            "bench",
            &[(
                "bench.json",
                "[{\"bench\": \"matmul\", \"backend\": \"cpu\", \"size\": \"128x128x128\", \"gflops\": 50.0},\
                 {\"bench\": \"matmul\", \"backend\": \"cpu\", \"size\": \"256x256x256\", \"gflops\": 80.0},\
                 {\"bench\": \"softmax\", \"backend\": \"cpu\", \"size\": \"1024x1024\", \"gflops\": null},\
                 {\"bench\": \"matmul\", \"backend\": \"wgpu\", \"size\": \"256x256x256\", \"gflops\": null, \"error\": \"x\"}]",
            )],
            &["cpu", "128", "256", "GFLOPS"],
        ),
        (
            "positions",
            &[
                (
                    "p1.json",
                    "{\"model\": \"m\", \"backend\": \"cpu\", \"positions\": [16, 17], \"ms_per_token\": [2.0, 3.0]}",
                ),
                (
                    "p2.json",
                    "{\"model\": \"m\", \"backend\": \"cpu\", \"positions\": [16, 17], \"ms_per_token\": [4.0, 5.0]}",
                ),
            ],
            &["m (cpu)", "ms per token", "position"],
        ),
    ];
    for (name, files, wanted) in cases {
        let dir = fresh_dir(name);
        std::fs::write(dir.join("meta.json"), META).unwrap();
        for (file, content) in files {
            std::fs::write(dir.join(file), content).unwrap();
        }
        let written = charts::make_all(&dir, &dir).unwrap();
        assert_eq!(written, vec![dir.join("chart.svg")], "{name}");
        let text = svg_text(&written[0]);
        for w in wanted {
            assert!(text.contains(w), "{name}: {w:?} not in the chart:\n{text}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn medians_and_ranges_are_the_runs() {
    let rates: Vec<charts::TokRate> = [100.0, 300.0, 200.0]
        .iter()
        .map(|&d| charts::TokRate {
            engine: "ours".into(),
            format: "f32".into(),
            threads: Some(1),
            decode_tok_s: d,
            prefill_tok_s: d * 10.0,
        })
        .collect();
    let panels = charts::rate_panels(&rates);
    let bar = &panels[0].groups[0].bars[0];
    assert_eq!(
        (bar.median, bar.lo, bar.hi, bar.runs),
        (200.0, 100.0, 300.0, 3)
    );
    assert_eq!(panels[1].groups[0].bars[0].median, 2000.0);
}

#[test]
fn bad_inputs_are_errors_naming_the_file() {
    let dir = fresh_dir("bad");
    std::fs::write(dir.join("meta.json"), META).unwrap();
    std::fs::write(dir.join("x.json"), "{\"unknown\": 1}").unwrap();
    let e = charts::make_all(&dir, &dir).unwrap_err();
    assert!(
        matches!(&e, ChartError::Format { path, .. } if path.ends_with("x.json")),
        "{e}"
    );

    std::fs::write(
        dir.join("x.json"),
        "{\"peer\": \"p\", \"decode_tok_s\": \"fast\"}",
    )
    .unwrap();
    let e = charts::make_all(&dir, &dir).unwrap_err();
    assert!(e.to_string().contains("decode_tok_s"), "{e}");

    std::fs::write(dir.join("x.json"), "not json\n").unwrap();
    assert!(matches!(
        charts::make_all(&dir, &dir),
        Err(ChartError::Json { .. })
    ));

    // Two kinds of figures in one folder.
    std::fs::write(
        dir.join("x.json"),
        "{\"peer\": \"p\", \"threads\": 1, \"decode_tok_s\": 1.0, \"prefill_tok_s\": 2.0}",
    )
    .unwrap();
    std::fs::write(dir.join("y.json"), "[{\"bench\": \"matmul\", \"backend\": \"cpu\", \"size\": \"128x128x128\", \"gflops\": 1.0}]").unwrap();
    assert!(matches!(
        charts::make_all(&dir, &dir),
        Err(ChartError::Folder { .. })
    ));

    // The binary says so and fails.
    let run = Command::new(env!("CARGO_BIN_EXE_charts"))
        .arg("--out")
        .arg(&dir)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("one folder makes one chart"));
    std::fs::remove_dir_all(&dir).unwrap();
}
