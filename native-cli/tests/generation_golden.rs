//! `kernels generate` prints what transformers' greedy `generate` gives for the same checkpoint:
//! `tokenizer.decode(prompt_ids + new_ids)`, character for character, the prompt's BOS and the
//! edge between prompt and continuation included. Two cases (see
//! `tests/fixtures/generation/make_generation_golden.py`, which wrote golden.json with
//! transformers): a word-level tokenizer.json whose post-processor adds `<s>` (as Llama 3's adds
//! `<|begin_of_text|>`), and a GGUF with `tokenizer.ggml.add_bos_token = true`, which
//! transformers read from the GGUF itself.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};

use common::{kernels, stderr};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// Runs `kernels` with `input` on its stdin.
fn kernels_stdin(args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_kernels"))
        .args(args)
        .env_remove("KERNELS_BACKEND")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn golden() -> Value {
    let text = std::fs::read_to_string(fixtures().join("generation/golden.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn check(case: &str, model: &Path) {
    let cases = golden();
    let cases = cases[case].as_array().unwrap();
    assert!(!cases.is_empty());
    for c in cases {
        let prompt = c["prompt"].as_str().unwrap();
        let new = c["new_ids"].as_array().unwrap().len().to_string();
        let o = kernels(&[
            "generate",
            "--model",
            model.to_str().unwrap(),
            "--prompt",
            prompt,
            "--max-tokens",
            &new,
            "--backend",
            "cpu",
        ]);
        assert!(o.status.success(), "{case} {prompt:?}: {}", stderr(&o));
        let want = c["text"].as_str().unwrap();
        assert_eq!(
            String::from_utf8(o.stdout.clone()).unwrap(),
            format!("{want}\n"),
            "{case} {prompt:?}"
        );
        // The prompt's ids, BOS included, as transformers' tokenizer(prompt) gave them.
        let prompt_ids = c["prompt_ids"].as_array().unwrap().len();
        assert!(
            stderr(&o).contains(&format!(", {prompt_ids} prompt tokens")),
            "{case}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn generate_prints_transformers_greedy_text_with_a_post_processor_bos() {
    check(
        "bos_wordlevel",
        &fixtures().join("generation/bos_wordlevel"),
    );
}

#[test]
fn generate_prints_transformers_greedy_text_for_a_gguf_that_adds_bos() {
    check("tiny_llama_gguf", &fixtures().join("gguf/tiny_llama.gguf"));
}

#[test]
fn the_prompt_comes_from_a_file_or_stdin_and_errors_name_the_file() {
    let cases = golden();
    let c = &cases["bos_wordlevel"][0];
    let model = fixtures().join("generation/bos_wordlevel");
    let model = model.to_str().unwrap();
    let want = format!("{}\n", c["text"].as_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prompt.txt");
    std::fs::write(&file, c["prompt"].as_str().unwrap()).unwrap();
    let args = [
        "generate",
        "--model",
        model,
        "--max-tokens",
        "12",
        "--backend",
        "cpu",
    ];
    let o = kernels(&[&args[..], &["--prompt-file", file.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8(o.stdout.clone()).unwrap(), want);
    let o = kernels_stdin(
        &[&args[..], &["--prompt", "-"]].concat(),
        c["prompt"].as_str().unwrap(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8(o.stdout.clone()).unwrap(), want);
    let missing = dir.path().join("nope.txt");
    let o = kernels(&[&args[..], &["--prompt-file", missing.to_str().unwrap()]].concat());
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--prompt-file") && stderr(&o).contains("nope.txt"),
        "{}",
        stderr(&o)
    );
    std::fs::write(&file, b"\xff\xfe").unwrap();
    let o = kernels(&[&args[..], &["--prompt-file", file.to_str().unwrap()]].concat());
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not UTF-8"), "{}", stderr(&o));
}

/// A prompt with characters outside the tokenizer's vocabulary is generated from as
/// `tokenizer(text)` encodes it (the unknown token in their place), with a note saying so; a
/// prompt inside it gets none.
#[test]
fn a_prompt_outside_the_vocabulary_gets_a_note() {
    let o = kernels(&[
        "generate",
        "--backend",
        "cpu",
        "--prompt",
        "12a+b4=",
        "--max-tokens",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The demo tokenizer's unknown token is `$` (id 12).
    assert!(
        stderr(&o).contains("note: --prompt: 2 piece(s)") && stderr(&o).contains("\"$\" (id 12)"),
        "{}",
        stderr(&o)
    );
    assert!(
        String::from_utf8(o.stdout.clone())
            .unwrap()
            .starts_with("12$+$4="),
        "{:?}",
        o.stdout
    );
    let o = kernels(&[
        "generate",
        "--backend",
        "cpu",
        "--prompt",
        "12$+4=",
        "--max-tokens",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("vocabulary"), "{}", stderr(&o));
}
