//! End-to-end tests of the `kernels` commands that talk to the GPU: `parity`, `info`,
//! `op --backend wgpu` and `bench`. Without an adapter the GPU parts say why and return; with
//! `CI=true` they fail instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::process::{Command, Output};

mod common;
use common::{kernels, stderr};

use kernels_core::parity::{Case, all_cases};
use kernels_core::{CpuBackend, Direction, OpKind, Tensor, io};
use kernels_gpu::testing::require_wgpu_adapter;
use native_cli::commands::op::attr_args;
use native_cli::parity::{args_for, compare_tensors};

/// Parity rows the cases make: forward always, backward for differentiable ops.
fn expected_rows(seed: u64) -> usize {
    all_cases(seed, false)
        .unwrap()
        .iter()
        .map(|c| 1 + usize::from(c.op.spec().differentiable()))
        .sum()
}

fn parse_json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            stderr(o)
        )
    })
}

/// Every row has the documented keys with the documented types; a failed row says why.
fn check_rows(doc: &serde_json::Value) -> (usize, usize) {
    let rows = doc["rows"].as_array().expect("rows");
    let mut failed = 0;
    for r in rows {
        for k in ["op", "dir", "shape"] {
            assert!(r[k].is_string(), "{k} in {r}");
        }
        assert!(["forward", "backward"].contains(&r["dir"].as_str().unwrap()));
        for k in ["max_abs_err", "max_rel_err"] {
            assert!(r[k].is_number() || r[k].is_null(), "{k} in {r}");
        }
        assert!(r["budget"]["atol"].is_number() && r["budget"]["rtol"].is_number());
        let pass = r["pass"].as_bool().expect("pass");
        if pass {
            assert!(r["error"].is_null() && r["max_abs_err"].is_number(), "{r}");
        } else {
            failed += 1;
            assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{r}");
        }
    }
    assert_eq!(doc["failed"].as_u64().unwrap() as usize, failed);
    (rows.len(), failed)
}

#[test]
fn parity_on_the_cpu_passes_and_prints_the_documented_json() {
    let o = kernels(&["parity", "--backend", "cpu", "--json", "--seed", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc = parse_json(&o);
    let (n, failed) = check_rows(&doc);
    assert_eq!(n, expected_rows(3));
    assert_eq!(failed, 0);
    assert_eq!(doc["seed"], 3);
    assert!(doc["counters"].is_null(), "the CPU has no counters");
    // Every op appears, in both directions where it has a backward.
    let rows = doc["rows"].as_array().unwrap();
    for k in OpKind::ALL {
        let has = |d: &str| {
            rows.iter().any(|r| {
                r["dir"] == d
                    && r["op"]
                        .as_str()
                        .unwrap()
                        .split('(')
                        .next()
                        .is_some_and(|n| n == k.name())
            })
        };
        assert!(has("forward"), "{k}");
        if k.spec().differentiable() {
            assert!(has("backward"), "{k}");
        }
    }
    let text = kernels(&["parity", "--backend", "cpu"]);
    assert!(text.status.success(), "{}", stderr(&text));
    let s = String::from_utf8_lossy(&text.stdout);
    assert!(
        s.contains("max abs err") && s.contains("checks within budget"),
        "{s}"
    );
}

#[test]
fn parity_rejects_an_unknown_backend() {
    let o = kernels(&["parity", "--backend", "tpu"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("tpu"), "{}", stderr(&o));
}

#[test]
fn parity_on_wgpu_reports_every_case_and_the_counters() {
    if !require_wgpu_adapter("parity_on_wgpu_reports_every_case_and_the_counters") {
        return;
    }
    let o = kernels(&["parity", "--backend", "wgpu", "--json"]);
    let doc = parse_json(&o);
    let (n, failed) = check_rows(&doc);
    assert_eq!(n, expected_rows(0), "unsupported ops are rows too");
    // The exit status is exactly "did everything pass".
    assert_eq!(o.status.success(), failed == 0, "{}", stderr(&o));
    if failed > 0 {
        assert!(stderr(&o).contains("checks failed"), "{}", stderr(&o));
    }
    assert!(doc["backend"].as_str().unwrap().starts_with("wgpu"));
    let c = &doc["counters"];
    for k in [
        "dispatches",
        "submits",
        "bytes_uploaded",
        "bytes_downloaded",
        "buffers_created",
        "buffers_reused",
        "pool_bytes",
    ] {
        assert!(c[k].is_u64(), "{k} in {c}");
    }
    assert!(c["dispatches"].as_u64().unwrap() > 0);
    assert!(c["bytes_downloaded"].as_u64().unwrap() > 0);
}

#[test]
fn info_lists_adapters_limits_and_features() {
    let o = Command::new(env!("CARGO_BIN_EXE_kernels"))
        .arg("info")
        .env("KERNELS_BACKEND", "auto")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let s = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        s.contains("wgpu adapters:") && s.contains("backend:"),
        "{s}"
    );
    if !require_wgpu_adapter("info_lists_adapters_limits_and_features") {
        assert!(s.contains("using the CPU"), "{s}");
        return;
    }
    // auto takes a hardware adapter, or says why a software one (lavapipe) lost to the CPU.
    assert!(
        s.contains("auto: found a GPU adapter")
            || (s.contains("software renderer") && s.contains("using the CPU")),
        "{s}"
    );
    // The device's limits and features are listed when wgpu is the backend.
    let o = Command::new(env!("CARGO_BIN_EXE_kernels"))
        .arg("info")
        .env("KERNELS_BACKEND", "wgpu")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let s = String::from_utf8_lossy(&o.stdout).into_owned();
    for needle in [
        "[0] ",
        "device type",
        "driver",
        "max_storage_buffer_binding_size",
        "max_compute_workgroups_per_dimension",
        "max_compute_invocations_per_workgroup",
        "shader-f16",
        "subgroup",
    ] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
    assert!(s.contains("requested wgpu"), "{s}");
    let cpu = Command::new(env!("CARGO_BIN_EXE_kernels"))
        .arg("info")
        .env("KERNELS_BACKEND", "cpu")
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&cpu.stdout);
    assert!(s.contains("backend:         cpu (requested cpu)"), "{s}");
}

/// The IN tensors of `case` in `dir` by name, as `kernels op` expects them: the inputs and,
/// backward, `grad_<output>` (the command recomputes the forward outputs itself). `args` is
/// `inputs ++ outputs ++ grad_outputs`.
fn op_file(case: &Case, dir: Direction, args: &[Tensor]) -> BTreeMap<String, Tensor> {
    let spec = case.op.spec();
    let n_in = spec.inputs.len();
    let mut file: BTreeMap<String, Tensor> = spec
        .inputs
        .iter()
        .map(|s| s.name.to_string())
        .zip(args[..n_in].iter().cloned())
        .collect();
    if dir == Direction::Backward {
        let grads = &args[n_in + spec.outputs.len()..];
        for (o, g) in spec.outputs.iter().zip(grads) {
            file.insert(format!("grad_{o}"), g.clone());
        }
    }
    file
}

#[test]
fn op_on_wgpu_matches_the_cpu_within_budget() {
    if !require_wgpu_adapter("op_on_wgpu_matches_the_cpu_within_budget") {
        return;
    }
    let reference = CpuBackend::reference();
    let dir = tempfile::tempdir().unwrap();
    let inp = dir.path().join("in.safetensors");
    let out = dir.path().join("out.safetensors");
    let kinds = [
        OpKind::Matmul,
        OpKind::Softmax,
        OpKind::LayerNorm,
        OpKind::Gelu,
        OpKind::Add,
        OpKind::Sum,
        OpKind::AdamwStep,
    ];
    let mut ran = 0;
    for case in all_cases(1, false).unwrap() {
        if !kinds.contains(&case.op.kind()) {
            continue;
        }
        // Weight dtypes stay in the parity suite: safetensors has no GGML block types, and the
        // op command widens f16 / bf16 inputs to f32 (another summation path than packed).
        if case.inputs.iter().any(|t| t.dtype().is_weight()) {
            continue;
        }
        let spec = case.op.spec();
        let mut dirs = vec![Direction::Forward];
        if spec.differentiable() {
            dirs.push(Direction::Backward);
        }
        for d in dirs {
            let label = format!("{} {} {}", case.op, d.name(), case.shape_label());
            let args = args_for(&case, d, &reference).unwrap();
            let refs: Vec<&Tensor> = args.iter().collect();
            let want = kernels_core::Backend::run(&reference, &case.op, d, &refs).unwrap();
            std::fs::write(&inp, io::save(&op_file(&case, d, &args)).unwrap()).unwrap();
            let _ = std::fs::remove_file(&out);
            let mut argv: Vec<String> = [
                "op",
                case.op.name(),
                "--in",
                inp.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--backend",
                "wgpu",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            for a in attr_args(&case.op) {
                argv.push("--attr".into());
                argv.push(a);
            }
            if d == Direction::Backward {
                argv.push("--backward".into());
            }
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let o = kernels(&argv);
            assert!(o.status.success(), "{label}: {}", stderr(&o));
            let stdout = String::from_utf8_lossy(&o.stdout);
            assert!(stdout.contains("on wgpu"), "{label}: {stdout}");
            let got = io::load(&std::fs::read(&out).unwrap()).unwrap();
            let shapes: Vec<&[usize]> = case.inputs.iter().map(|t| t.shape()).collect();
            let k = case.op.reduced_len(&shapes);
            let budget = match d {
                Direction::Forward => spec.budget,
                Direction::Backward => spec.budget_backward,
            };
            let (atol, rtol) = budget.at(k);
            for (n, w) in spec.result_names(d).iter().zip(&want) {
                let g = got
                    .get(n)
                    .unwrap_or_else(|| panic!("{label}: no {n} in OUT"));
                let c = compare_tensors(g, w, atol, rtol).unwrap();
                assert!(c.pass, "{label}: {n}: {c:?}");
            }
            ran += 1;
        }
    }
    assert!(ran >= 12, "only {ran} round trips");
}

/// `kernels bench --quick --json`: the documented JSON shape (not the timings).
#[test]
fn bench_quick_json_has_the_documented_shape() {
    let gpu = require_wgpu_adapter("bench_quick_json_has_the_documented_shape");
    let o = kernels(&["bench", "--quick", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc = parse_json(&o);
    let rows = doc.as_array().expect("a JSON list");
    let num_or_null = |v: &serde_json::Value| v.is_number() || v.is_null();
    for r in rows {
        for k in ["bench", "backend", "size"] {
            assert!(r[k].is_string(), "{k} in {r}");
        }
        for k in ["median_ms", "gflops", "gbps"] {
            assert!(num_or_null(&r[k]), "{k} in {r}");
        }
        if r["error"].is_null() {
            assert!(r["median_ms"].as_f64().is_some_and(|m| m > 0.0), "{r}");
            // Exactly one of the throughput figures applies.
            let figures = ["gflops", "gbps", "tokens_per_s"]
                .iter()
                .filter(|k| !r[**k].is_null())
                .count();
            assert_eq!(figures, 1, "{r}");
        } else {
            assert!(r["median_ms"].is_null() && r["gflops"].is_null(), "{r}");
        }
    }
    let has = |bench: &str, backend: &str, size: &str| {
        rows.iter().any(|r| {
            r["bench"] == bench
                && r["backend"].as_str().unwrap().starts_with(backend)
                && r["size"].as_str().unwrap().starts_with(size)
        })
    };
    let mut backends = vec!["cpu"];
    if gpu {
        backends.push("wgpu");
    }
    for be in &backends {
        for n in ["128x", "256x", "512x"] {
            assert!(has("matmul", be, n), "matmul {n} on {be}");
        }
        for b in ["softmax", "layer_norm", "rms_norm"] {
            assert!(has(b, be, "1024x1024"), "{b} on {be}");
        }
        assert!(has("attention_prefill", be, "b1"), "attention on {be}");
        assert!(has("mlp_train_step", be, "64-256-10"), "mlp step on {be}");
    }
    // CPU rows never carry counters; matmul rows on the CPU ran (the fast path).
    for r in rows.iter().filter(|r| r["backend"] == "cpu") {
        assert!(r["dispatches"].is_null(), "{r}");
        if r["bench"] == "matmul" {
            assert!(r["gflops"].as_f64().is_some_and(|g| g > 0.0), "{r}");
        }
    }
    if gpu {
        assert!(has("matmul_naive", "wgpu", "256x"));
        assert!(has("matmul_naive", "wgpu", "512x"));
        for r in rows
            .iter()
            .filter(|r| r["backend"].as_str().unwrap().starts_with("wgpu") && r["error"].is_null())
        {
            assert!(r["dispatches"].as_u64().is_some_and(|d| d >= 1), "{r}");
            assert_eq!(r["submits"], 1, "{r}");
            // Each dispatch touches its bound tensors at least once: never below the minimum.
            if let (Some(t), Some(m)) = (r["bytes_touched"].as_u64(), r["min_bytes"].as_u64()) {
                assert!(t >= m, "{r}");
            }
        }
        // A llama decode step samples on the device: only the 4-byte token id comes back.
        for r in rows.iter().filter(|r| {
            r["bench"].as_str().unwrap().ends_with("_decode")
                && r["backend"].as_str().unwrap().starts_with("wgpu")
        }) {
            assert_eq!(r["bytes_downloaded"], 4, "{r}");
            assert!(r["tokens_per_s"].as_f64().is_some_and(|t| t > 0.0), "{r}");
        }
        // A training step of the MLP is one submit, with bias and relu fused into the matmuls.
        let step = rows
            .iter()
            .find(|r| {
                r["bench"] == "mlp_train_step" && r["backend"].as_str().unwrap().starts_with("wgpu")
            })
            .unwrap();
        assert_eq!(step["dispatches"], 15, "{step}");
        assert!(
            stderr(&o).contains("--quick"),
            "the smaller sizes are said: {}",
            stderr(&o)
        );
    }
    let bad = kernels(&["bench", "--backend", "tpu", "--quick"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("tpu"));
}

/// Without XDG_RUNTIME_DIR (ssh, containers), Mesa's drivers complain on every wgpu start; the
/// tool gives itself a private runtime directory first, so nothing is printed.
#[cfg(target_os = "linux")]
#[test]
fn no_mesa_runtime_dir_noise_without_xdg_runtime_dir() {
    let o = Command::new(env!("CARGO_BIN_EXE_kernels"))
        .arg("info")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(!e.contains("XDG_RUNTIME_DIR"), "{e}");
}
