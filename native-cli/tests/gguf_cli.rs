//! `--model FILE.gguf` end to end on the CPU: `logits`, `generate`, `eval` and `bench llama` read
//! `tests/fixtures/gguf/tiny_llama.gguf` (the `gqa_tied` checkpoint as llama.cpp's converter
//! writes it) and `logits` gives exactly what the safetensors directory gives.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{kernels, stderr};

fn fixture(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(rel)
        .display()
        .to_string()
}

fn logits_json(model: &str) -> serde_json::Value {
    logits_json_with(model, &[])
}

/// `kernels logits --json` of the fixed tokens on the CPU, with `extra` arguments.
fn logits_json_with(model: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "logits",
        "--model",
        model,
        "--tokens",
        "1,5,9,30,2,17",
        "--all-positions",
        "--backend",
        "cpu",
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = kernels(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn logits_of_the_gguf_file_equal_the_safetensors_ones() {
    let gguf = logits_json(&fixture("gguf/tiny_llama.gguf"));
    let st = logits_json(&fixture("llama/gqa_tied"));
    assert_eq!(gguf["vocab_size"], 37);
    assert_eq!(gguf["logits"], st["logits"]);
}

#[test]
fn generate_eval_and_bench_read_the_gguf_file() {
    let model = fixture("gguf/tiny_llama.gguf");
    let o = kernels(&[
        "generate",
        "--model",
        &model,
        "--prompt",
        "the hat",
        "--max-tokens",
        "5",
        "--backend",
        "cpu",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with("the hat"), "{text}");
    assert!(stderr(&o).contains("prefill"), "{}", stderr(&o));
    let o = kernels(&[
        "bench",
        "llama",
        "--model",
        &model,
        "--backend",
        "cpu",
        "--threads",
        "1",
        "--prompt-len",
        "4",
        "--new-tokens",
        "3",
        "--prefill-len",
        "8",
        "--runs",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["decode_tok_s"].as_f64().is_some_and(|x| x > 0.0), "{r}");
}

/// The embedded demo model (addition), written as GGUF by kernels-core's writer as llama.cpp's
/// converter would write it, keeps its held-out accuracy through `eval --model FILE.gguf`.
#[test]
fn the_demo_model_as_gguf_still_adds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/adder");
    let files = native_cli::llama::read_dir(&dir).unwrap();
    let config = kernels_core::models::llama::LlamaConfig::from_json(&files.config).unwrap();
    let bytes = kernels_core::gguf::llama::llama_to_gguf(&config, &files.tensors)
        .unwrap()
        .to_bytes()
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("adder.gguf");
    std::fs::write(&path, bytes).unwrap();
    // KERNELS_KEEP_GGUF=FILE keeps a copy (to read it with gguf-py's GGUFReader by hand).
    if let Some(keep) = std::env::var_os("KERNELS_KEEP_GGUF") {
        std::fs::copy(&path, keep).unwrap();
    }
    let p = path.display().to_string();
    let o = kernels(&[
        "eval",
        "--model",
        &p,
        "--problems",
        "40",
        "--backend",
        "cpu",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["correct"], 40, "{r}");
}

#[test]
fn a_bad_gguf_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    std::fs::write(&path, b"GGUF\x01\0\0\0").unwrap();
    let p = path.display().to_string();
    let o = kernels(&["logits", "--model", &p, "--tokens", "1", "--backend", "cpu"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("bad.gguf") && e.contains("version 1"), "{e}");
}

/// `kernels quantize` writes what `--quantize` does in memory: the written file's logits are the
/// quantized-on-load directory's, bit for bit; a bad `--to` is refused before anything is
/// written.
#[test]
fn quantize_writes_the_model_that_quantize_on_load_runs() {
    let dir = std::env::temp_dir().join(format!("kernels-quantize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("q8.gguf").display().to_string();
    let src = fixture("llama/gqa_tied");
    let o = kernels(&["quantize", "--model", &src, "--to", "q8_0", "--out", &out]);
    assert!(o.status.success(), "{}", stderr(&o));
    let written = logits_json_with(&out, &[])["logits"].clone();
    let on_load = logits_json_with(&src, &["--quantize", "q8_0"])["logits"].clone();
    assert_eq!(written, on_load);
    let f32_logits = logits_json(&src)["logits"].clone();
    assert_ne!(written, f32_logits, "q8_0 changed nothing?");
    let bad = dir.join("bad.gguf");
    let o = kernels(&[
        "quantize",
        "--model",
        &src,
        "--to",
        "q3_k",
        "--out",
        &bad.display().to_string(),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("q3_k"), "{}", stderr(&o));
    assert!(!bad.exists());
    std::fs::remove_dir_all(&dir).ok();
}
