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
    // The GGUF's add_bos_token: the prompt gets its BOS, and what is printed is the decode of
    // all the ids, as transformers' `tokenizer.decode(generate(...))`.
    assert!(text.starts_with("<s> the hat"), "{text}");
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
    // gqa_tied has no tokenizer.json: the weights are written, with a note.
    let said = String::from_utf8_lossy(&o.stdout).to_string() + &stderr(&o);
    assert!(said.contains("no tokenizer.json"), "{said}");
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

/// A checkpoint directory with a tokenizer: gqa_tied's weights and the 37-token SentencePiece
/// tokenizer of tiny_llama.gguf as a `tokenizer.json` (what kernels-core's reader makes of it),
/// with a `tokenizer_config.json`.
fn dir_with_tokenizer(dir: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/llama/gqa_tied");
    for f in ["config.json", "model.safetensors", "generation_config.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let bytes = std::fs::read(fixture("gguf/tiny_llama.gguf")).unwrap();
    let g = kernels_core::gguf::GgufFile::parse(&bytes, "tiny_llama.gguf").unwrap();
    let spec = kernels_core::gguf::tokenizer::tokenizer_json(&g).unwrap();
    std::fs::write(
        dir.join("tokenizer.json"),
        serde_json::to_vec(&spec).unwrap(),
    )
    .unwrap();
    let config = serde_json::json!({"bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": true,
        "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"});
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
}

/// `kernels quantize` writes the tokenizer: the file alone (no tokenizer.json beside it) runs
/// `generate`, which gives the text the directory gives quantized on load; a tokenizer the
/// GGUF keys cannot express is refused by name and nothing is written.
#[test]
fn quantize_writes_the_tokenizer_and_the_file_alone_generates() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("ckpt");
    std::fs::create_dir_all(&src).unwrap();
    dir_with_tokenizer(&src);
    let out_dir = tmp.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("q8.gguf").display().to_string();
    let s = src.display().to_string();
    let o = kernels(&["quantize", "--model", &s, "--to", "q8_0", "--out", &out]);
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout).to_string() + &stderr(&o);
    assert!(!said.contains("tokenizer"), "{said}");
    let generate = |model: &str, extra: &[&str]| {
        let mut args = vec![
            "generate",
            "--model",
            model,
            "--prompt",
            "the hat is in the",
            "--max-tokens",
            "6",
            "--backend",
            "cpu",
        ];
        args.extend_from_slice(extra);
        let o = kernels(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let from_file = generate(&out, &[]);
    assert!(
        from_file.starts_with("<s> the hat is in the"),
        "{from_file}"
    );
    assert_eq!(from_file, generate(&s, &["--quantize", "q8_0"]));
    let g = std::fs::read(&out).unwrap();
    let g = kernels_core::gguf::GgufFile::parse(&g, "q8.gguf").unwrap();
    assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), "llama");
    assert_eq!(
        g.get_str("tokenizer.chat_template").unwrap(),
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    );

    // Quantizing the written file again keeps its tokenizer.
    let again = out_dir.join("again.gguf").display().to_string();
    let o = kernels(&["quantize", "--model", &out, "--to", "q8_0", "--out", &again]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(generate(&again, &[]), from_file);

    // The demo model's WordLevel tokenizer has no GGUF form.
    let adder = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/adder");
    let bad = out_dir.join("adder.gguf");
    let o = kernels(&[
        "quantize",
        "--model",
        &adder.display().to_string(),
        "--to",
        "q8_0",
        "--out",
        &bad.display().to_string(),
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("tokenizer.json") && e.contains("`WordLevel`"),
        "{e}"
    );
    assert!(e.contains("--no-tokenizer"), "{e}");
    assert!(!bad.exists());
    let o = kernels(&[
        "quantize",
        "--model",
        &adder.display().to_string(),
        "--to",
        "q8_0",
        "--out",
        &bad.display().to_string(),
        "--no-tokenizer",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout).to_string() + &stderr(&o);
    assert!(said.contains("no tokenizer (--no-tokenizer)"), "{said}");
    let g = std::fs::read(&bad).unwrap();
    let g = kernels_core::gguf::GgufFile::parse(&g, "adder.gguf").unwrap();
    assert!(g.get("tokenizer.ggml.model").is_none());
}
