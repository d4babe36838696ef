//! `kernels generate`, `logits`, `train transformer` and `eval` end to end on the CPU.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{kernels, stderr};

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn golden_dir() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/llama/gqa_tied")
        .display()
        .to_string()
}

#[test]
fn generate_streams_the_demo_answer_and_reports_rates() {
    let o = kernels(&["generate", "--prompt", "123+456=", "--backend", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // 579 written least-significant digit first, then the end mark.
    assert_eq!(stdout(&o).trim(), "123+456=9750$");
    let e = stderr(&o);
    assert!(e.contains("prefill 8 tokens") && e.contains("tok/s"), "{e}");
    // Sampling flags parse and a seed reproduces.
    let args = [
        "generate",
        "--prompt",
        "5",
        "--temperature",
        "2",
        "--top-k",
        "5",
        "--top-p",
        "0.9",
        "--seed",
        "4",
        "--max-tokens",
        "8",
        "--backend",
        "cpu",
    ];
    let a = kernels(&args);
    let b = kernels(&args);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(stdout(&a), stdout(&b));
    // Errors name the problem.
    let bad = kernels(&[
        "generate",
        "--prompt",
        "1",
        "--top-p",
        "0",
        "--backend",
        "cpu",
    ]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("--top-p 0"), "{}", stderr(&bad));
    let long = "1".repeat(14);
    let bad = kernels(&["generate", "--prompt", &long, "--backend", "cpu"]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("max_position_embeddings"),
        "{}",
        stderr(&bad)
    );
    let bad = kernels(&["generate", "--model", "/nonexistent", "--prompt", "1"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("/nonexistent"), "{}", stderr(&bad));
}

#[test]
fn logits_json_matches_the_golden_reference() {
    let dir = golden_dir();
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(&dir).join("golden.json")).unwrap(),
    )
    .unwrap();
    let tokens: Vec<String> = golden["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.to_string())
        .collect();
    let tokens = tokens.join(",");
    for all in [false, true] {
        let mut args = vec![
            "logits",
            "--model",
            &dir,
            "--tokens",
            &tokens,
            "--backend",
            "cpu",
            "--json",
        ];
        if all {
            args.push("--all-positions");
        }
        let o = kernels(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let rows = v["logits"].as_array().unwrap();
        let want = golden["logits"].as_array().unwrap();
        assert_eq!(rows.len(), if all { want.len() } else { 1 });
        let offset = want.len() - rows.len();
        for (i, row) in rows.iter().enumerate() {
            for (g, w) in row
                .as_array()
                .unwrap()
                .iter()
                .zip(want[offset + i].as_array().unwrap())
            {
                let (g, w) = (g.as_f64().unwrap(), w.as_f64().unwrap());
                assert!((g - w).abs() < 1e-3, "{g} vs {w}");
            }
        }
        assert_eq!(v["vocab_size"], 37);
    }
    let bad = kernels(&["logits", "--model", &dir, "--tokens", "1,x", "--json"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("`x`"), "{}", stderr(&bad));
}

/// `kernels train transformer` of a tiny model (hidden 16, 2 heads / 1 kv head, batch 4) on
/// the CPU into `out`, with `extra` flags.
fn tiny_train<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "train",
        "transformer",
        "--out",
        out,
        "--batch",
        "4",
        "--hidden",
        "16",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--intermediate",
        "24",
        "--backend",
        "cpu",
    ];
    v.extend_from_slice(extra);
    v
}

#[test]
fn train_writes_a_checkpoint_that_generate_and_eval_load() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("tiny");
    let out_s = out.display().to_string();
    let o = kernels(&tiny_train(
        &out_s,
        &["--steps", "3", "--eval-problems", "4"],
    ));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("held-out exact match"),
        "{}",
        stderr(&o)
    );
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["architectures"][0], "LlamaForCausalLM");
    assert_eq!(cfg["hidden_size"], 16);
    let g = kernels(&[
        "generate",
        "--model",
        &out_s,
        "--prompt",
        "1+2=",
        "--max-tokens",
        "3",
        "--backend",
        "cpu",
    ]);
    assert!(g.status.success(), "{}", stderr(&g));
    assert!(stdout(&g).starts_with("1+2="), "{}", stdout(&g));
    let e = kernels(&[
        "eval",
        "--model",
        &out_s,
        "--problems",
        "8",
        "--backend",
        "cpu",
    ]);
    assert!(e.status.success(), "{}", stderr(&e));
    assert!(stdout(&e).contains("exact match"), "{}", stdout(&e));
}

#[test]
fn eval_reports_the_demo_accuracy() {
    let o = kernels(&["eval", "--problems", "200", "--backend", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stdout(&o);
    let pct: f64 = s
        .split(" = ")
        .nth(1)
        .and_then(|t| t.split('%').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no percentage in {s}"));
    assert!(pct >= 95.0, "{s}");

    // --json: the same evaluation as one object.
    let o = kernels(&["eval", "--problems", "200", "--backend", "cpu", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["problems"], 200);
    assert_eq!(v["seed"], 1);
    assert_eq!(v["backend"], "cpu");
    let correct = v["correct"].as_u64().unwrap();
    assert!((correct as f64 - pct * 2.0).abs() < 0.6, "{v} vs {pct}%");
    assert!((v["accuracy"].as_f64().unwrap() - correct as f64 / 200.0).abs() < 1e-12);
    assert!(v["wrong"].as_array().unwrap().len() <= 5);
    assert!(v["model"].as_str().unwrap().contains("embedded demo model"));
}

/// `kernels bench llama --json`: one object with the documented keys, rates from a real run,
/// the CPU's counters null, and the lengths checked against the model.
#[test]
fn bench_llama_prints_the_protocol_object() {
    let dir = golden_dir();
    let args = [
        "bench",
        "llama",
        "--model",
        &dir,
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
    ];
    let o = kernels(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let keys = [
        "model",
        "backend",
        "threads",
        "params",
        "decode_tok_s",
        "prefill_tok_s",
        "dispatches_per_token",
        "submits_per_token",
        "bytes_down_per_token",
        "host_us_per_token",
        "host_us_per_dispatch",
        "host_us_per_dispatch_median",
        "host_us_submit_per_token",
        "bind_groups_per_token",
        "weights",
        "weight_bytes_per_token",
        "device_peak_bytes",
        "decode_weight_gb_s",
        "read_gb_s",
        "read_gb_s_best",
    ];
    assert_eq!(r.as_object().unwrap().len(), keys.len(), "{r}");
    for k in keys {
        assert!(r.get(k).is_some(), "{k} missing in {r}");
    }
    assert_eq!(r["backend"], "cpu");
    assert_eq!(r["threads"], 1);
    // vocab 37 x hidden 32 (tied) + 2 layers of q, k, v, o, gate, up, down and two norms + norm.
    let (h, i, kv, v) = (32, 56, 2 * 8, 37);
    let layer = h * h + 2 * h * kv + h * h + 3 * h * i + 2 * h;
    assert_eq!(r["params"], v * h + 2 * layer + h, "{r}");
    for k in ["decode_tok_s", "prefill_tok_s"] {
        assert!(
            r[k].as_f64().is_some_and(|x| x > 0.0 && x.is_finite()),
            "{k} in {r}"
        );
    }
    for k in [
        "dispatches_per_token",
        "submits_per_token",
        "bytes_down_per_token",
        "host_us_per_token",
        "host_us_per_dispatch",
        "host_us_per_dispatch_median",
        "host_us_submit_per_token",
        "bind_groups_per_token",
        "device_peak_bytes",
        "read_gb_s",
        "read_gb_s_best",
    ] {
        assert!(r[k].is_null(), "{k} in {r}");
    }
    // Decode's weight traffic is its weight bytes times its rate.
    let (wb, tok) = (
        r["weight_bytes_per_token"].as_f64().unwrap(),
        r["decode_tok_s"].as_f64().unwrap(),
    );
    let gb_s = r["decode_weight_gb_s"].as_f64().unwrap();
    assert!(
        (gb_s - wb * tok / 1e9).abs() <= 1e-9 * gb_s.abs().max(1.0),
        "{r}"
    );
    // --read-rate adds a plain read loop's rate over as many bytes, fastest pass first.
    let mut with_rate = args.to_vec();
    with_rate.push("--read-rate");
    let o = kernels(&with_rate);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let (median, best) = (
        r["read_gb_s"].as_f64().unwrap(),
        r["read_gb_s_best"].as_f64().unwrap(),
    );
    assert!(median.is_finite() && median > 0.0 && best >= median, "{r}");
    // The CPU named in any spelling the backend parser takes is the CPU.
    let mut upper = with_rate.clone();
    upper[5] = "CPU";
    let o = kernels(&upper);
    assert!(o.status.success(), "{}", stderr(&o));
    // It times the CPU's reads: another backend is refused, naming both flags.
    let mut on_gpu = with_rate.clone();
    on_gpu[5] = "wgpu";
    let o = kernels(&on_gpu);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("--read-rate") && e.contains("--backend wgpu"),
        "{e}"
    );
    // Lengths past max_position_embeddings (64) are refused, naming the flags.
    let mut long = args;
    long[13] = "100";
    let o = kernels(&long);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("--prefill-len") && e.contains("64"), "{e}");
}

/// `train transformer --lr NaN` (or inf) is refused before any work and writes nothing; a run
/// whose loss diverges stops with an error and keeps its last good checkpoint.
#[test]
fn train_refuses_non_finite_rates_and_stops_on_a_diverged_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let out_s = out.display().to_string();
    let args = |lr: &'static str| {
        tiny_train(
            &out_s,
            &[
                "--steps",
                "4",
                "--eval-problems",
                "0",
                "--checkpoint-every",
                "1",
                "--lr",
                lr,
            ],
        )
    };
    for lr in ["NaN", "inf", "0"] {
        let o = kernels(&args(lr));
        assert!(!o.status.success(), "--lr {lr} was accepted");
        assert!(
            stderr(&o).contains("--lr must be a finite number > 0"),
            "{}",
            stderr(&o)
        );
        assert!(!out.exists(), "--lr {lr} wrote {}", out.display());
    }
    let o = kernels(&args("1e30"));
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("the loss became") && e.contains("last good"),
        "{e}"
    );
    // The checkpoint written before the divergence is whole and finite.
    let bytes = std::fs::read(out.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for (name, view) in st.tensors() {
        assert!(
            view.data()
                .chunks_exact(4)
                .all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite()),
            "{name} in the kept checkpoint is not finite"
        );
    }
}

/// Values are not corrected in silence: an empty `--tokens` entry is an error, a `--max-tokens`
/// past the context gets a note, and bad sampling arguments are refused before the prompt is
/// echoed.
#[test]
fn generate_and_logits_say_what_they_will_not_do() {
    let o = kernels(&["logits", "--tokens", "1,,2,", "--backend", "cpu"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("entry 2 is empty"), "{}", stderr(&o));
    let o = kernels(&[
        "generate",
        "--prompt",
        "123+456=",
        "--max-tokens",
        "1000000000",
        "--backend",
        "cpu",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("note: --max-tokens 1000000000") && stderr(&o).contains("at most 5"),
        "{}",
        stderr(&o)
    );
    // The default says nothing.
    let o = kernels(&["generate", "--prompt", "123+456=", "--backend", "cpu"]);
    assert!(!stderr(&o).contains("note:"), "{}", stderr(&o));
    let o = kernels(&[
        "generate",
        "--prompt",
        "123+456=",
        "--top-p",
        "7",
        "--backend",
        "cpu",
    ]);
    assert!(!o.status.success());
    assert!(
        stdout(&o).is_empty(),
        "echoed before the check: {}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("--top-p 7"), "{}", stderr(&o));
}
