//! Remakes the guides' charts from the benchmarks' saved JSON (`tests/README.md`, "Charts"):
//!
//! `cargo run -p kernels-tests --bin charts -- --out . tests/fixtures/bench-json`
//!
//! Every folder under the input with a `meta.json` becomes one SVG at its `out` path under
//! `--out` (default: the current directory).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut out = PathBuf::from(".");
    let mut inputs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => match args.next() {
                Some(v) => out = PathBuf::from(v),
                None => return usage("--out needs a folder"),
            },
            "-h" | "--help" => {
                println!("usage: charts [--out ROOT] INPUT_DIR...");
                return ExitCode::SUCCESS;
            }
            s if s.starts_with('-') => return usage(&format!("unknown option {s}")),
            s => inputs.push(PathBuf::from(s)),
        }
    }
    if inputs.is_empty() {
        return usage("no input folder");
    }
    for input in inputs {
        match kernels_tests::charts::make_all(&input, &out) {
            Ok(written) => {
                for w in written {
                    println!("wrote {}", w.display());
                }
            }
            Err(e) => {
                eprintln!("charts: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

fn usage(message: &str) -> ExitCode {
    eprintln!("charts: {message}\nusage: charts [--out ROOT] INPUT_DIR...");
    ExitCode::from(2)
}
