//! `kernels gru run` against PyTorch-made golden fixtures (tests/fixtures/gru, made by
//! make_golden.py there), on the CPU and on wgpu, and its refusals: mismatched shapes are a
//! clear error and nothing is written.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

mod common;
use common::{kernels, stderr};

use kernels_core::{Tensor, io};
use kernels_gpu::testing::require_wgpu_adapter;

const CASES: [&str; 4] = ["basic", "no_h0", "tiny", "wide"];

fn fixture(case: &str, kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gru")
        .join(format!("{case}.{kind}.safetensors"))
}

fn load(p: &Path) -> std::collections::BTreeMap<String, Tensor> {
    io::load(&std::fs::read(p).unwrap()).unwrap()
}

fn run_case(case: &str, backend: &str, dir: &Path) {
    let out = dir.join(format!("{case}.{backend}.out.safetensors"));
    let o = kernels(&[
        "gru",
        "run",
        "--weights",
        fixture(case, "weights").to_str().unwrap(),
        "--input",
        fixture(case, "input").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--backend",
        backend,
    ]);
    assert!(o.status.success(), "{case} on {backend}: {}", stderr(&o));
    let got = load(&out);
    let want = load(&fixture(case, "expected"));
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        ["h_n", "output"],
        "{case}: exactly output and h_n"
    );
    for (name, w) in &want {
        let g = &got[name];
        assert_eq!(g.shape(), w.shape(), "{case} {name}");
        let (g, w) = (g.as_f32().unwrap(), w.as_f32().unwrap());
        let worst = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        // PyTorch computed in f64: one f32 pass through a few steps stays within 1e-5.
        assert!(
            worst < 1e-5,
            "{case} {name} on {backend}: max error {worst}"
        );
    }
}

#[test]
fn gru_run_matches_pytorch_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    for case in CASES {
        run_case(case, "cpu", dir.path());
    }
}

#[test]
fn gru_run_matches_pytorch_on_wgpu() {
    if !require_wgpu_adapter("gru_run_matches_pytorch_on_wgpu") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for case in CASES {
        run_case(case, "wgpu", dir.path());
    }
}

#[test]
fn mismatched_shapes_are_clear_errors_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let w = load(&fixture("basic", "weights"));
    let x = load(&fixture("basic", "input"));
    let write = |name: &str, map: &std::collections::BTreeMap<String, Tensor>| {
        let p = dir.path().join(name);
        std::fs::write(&p, io::save(map).unwrap()).unwrap();
        p
    };
    let out = dir.path().join("y.safetensors");
    std::fs::write(&out, b"keep me").unwrap();
    let run = |wp: &Path, xp: &Path| {
        kernels(&[
            "gru",
            "run",
            "--weights",
            wp.to_str().unwrap(),
            "--input",
            xp.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--backend",
            "cpu",
        ])
    };
    let good_w = write("w.safetensors", &w);
    let mut cases: Vec<(PathBuf, PathBuf, &str)> = Vec::new();
    // x with the wrong input size.
    let mut bad = x.clone();
    bad.insert("x".into(), Tensor::zeros(&[4, 3, 6]).unwrap());
    cases.push((
        good_w.clone(),
        write("x1.safetensors", &bad),
        "`x` has shape [4, 3, 6]",
    ));
    // h0 without the layer dim.
    let mut bad = x.clone();
    bad.insert("h0".into(), Tensor::zeros(&[3, 7]).unwrap());
    cases.push((
        good_w.clone(),
        write("x2.safetensors", &bad),
        "`h0` has shape [3, 7]",
    ));
    // h0 for another batch.
    let mut bad = x.clone();
    bad.insert("h0".into(), Tensor::zeros(&[1, 2, 7]).unwrap());
    cases.push((
        good_w.clone(),
        write("x3.safetensors", &bad),
        "expected [1, 3, 7]",
    ));
    // weight_hh of another hidden size.
    let mut bad = w.clone();
    bad.insert("weight_hh_l0".into(), Tensor::zeros(&[21, 6]).unwrap());
    let good_x = write("x.safetensors", &x);
    cases.push((
        write("w1.safetensors", &bad),
        good_x.clone(),
        "`weight_hh_l0` has shape [21, 6]",
    ));
    // A bias missing.
    let mut bad = w.clone();
    bad.remove("bias_hh_l0");
    cases.push((
        write("w2.safetensors", &bad),
        good_x.clone(),
        "no tensor `bias_hh_l0`",
    ));
    // A second layer.
    let mut bad = w.clone();
    bad.insert("weight_ih_l1".into(), Tensor::zeros(&[21, 7]).unwrap());
    cases.push((
        write("w3.safetensors", &bad),
        good_x.clone(),
        "weight_ih_l1",
    ));
    // Not a safetensors file.
    cases.push((good_w.clone(), out.clone(), "not a valid safetensors file"));
    for (wp, xp, says) in cases {
        let o = run(&wp, &xp);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains(says), "expected `{says}` in: {e}");
        assert_eq!(
            std::fs::read(&out).unwrap(),
            b"keep me",
            "output touched: {e}"
        );
    }
    // And the good pair replaces it.
    let o = run(&good_w, &good_x);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(load(&out).contains_key("h_n"));
}

/// The world model's weights are embedded in the binary: `gru predict` and `gru bench` need no
/// path into the source checkout the binary was built from, and `gru train` writes only where
/// `--out` says.
#[test]
fn world_model_commands_use_the_embedded_weights_and_train_needs_out() {
    let o = kernels(&[
        "gru",
        "predict",
        "--horizon",
        "2",
        "--rank",
        "2",
        "--backend",
        "cpu",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains("world model the embedded weights on cpu"), "{s}");
    assert!(!s.contains(env!("CARGO_MANIFEST_DIR")), "{s}");
    let o = kernels(&["gru", "train", "--iters", "1"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--out"), "{}", stderr(&o));
}

/// `gru predict --json` and `gru bench --json`: the documented objects, with figures from a
/// real run (the predict figures equal the text's).
#[test]
fn world_model_reports_as_json() {
    let args = [
        "gru",
        "predict",
        "--horizon",
        "2",
        "--rank",
        "2",
        "--backend",
        "cpu",
    ];
    let text = kernels(&args);
    assert!(text.status.success(), "{}", stderr(&text));
    let o = kernels(&[&args[..], &["--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["weights"], "the embedded weights");
    assert_eq!(v["backend"], "cpu");
    assert_eq!(v["config"]["members"], 5);
    let steps = v["held_out"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    let m1 = steps[0]["model_mse"].as_f64().unwrap();
    let p1 = steps[0]["persistence_mse"].as_f64().unwrap();
    assert!(m1 > 0.0 && m1 < p1, "{v}");
    // The text's first row prints the same model MSE (3 significant digits).
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(t.contains(&format!("{m1:.3e}")), "{m1:.3e} not in {t}");
    assert_eq!(v["compression"]["rank"], 2);
    assert_eq!(
        v["compression"]["singular_values"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let o = kernels(&[
        "gru",
        "bench",
        "--backend",
        "cpu",
        "--batch",
        "2",
        "--steps",
        "2",
        "--rank",
        "2",
        "--runs",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["batch"].as_u64(), v["steps"].as_u64()),
        (Some(2), Some(2))
    );
    let rows = v["rows"].as_array().unwrap();
    let stages: Vec<&str> = rows.iter().map(|r| r["stage"].as_str().unwrap()).collect();
    assert_eq!(
        stages,
        [
            "state encode",
            "ensemble rollout",
            "svd_lowrank residual",
            "corrections",
            "total"
        ]
    );
    for r in rows {
        assert_eq!(r["backend"], "cpu");
        assert!(r["median_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["dispatches"].is_null() && r["submits"].is_null(), "{r}");
    }
    assert!(v["rollout_dispatches"].is_null());

    // A weights file that is not there is an error, not a silent fallback.
    let o = kernels(&[
        "gru",
        "bench",
        "--backend",
        "cpu",
        "--weights",
        "/nonexistent/w.safetensors",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("/nonexistent/w.safetensors"),
        "{}",
        stderr(&o)
    );
}
