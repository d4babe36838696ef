//! `--devices` of `kernels train transformer` and `kernels gru train`: data-parallel runs print
//! the same losses as one device on the same seed and global batch, within the README's budget
//! (`--json`: one object per logged step). The wgpu runs need an adapter (lavapipe in CI).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::{kernels, stderr};

use kernels_gpu::testing::require_wgpu_adapter;

/// Replicas of one kind against one device of that kind: summation order only.
const SAME_KIND_RTOL: f64 = 1e-5;
/// wgpu replicas against the CPU: the kernels' own rounding (each op within its parity budget)
/// on top of the summation order.
const ACROSS_KINDS_RTOL: f64 = 1e-4;

/// The `--json` lines of a run: (step, loss, devices, reduce, reduce_bytes).
fn steps(o: &std::process::Output) -> Vec<(u64, f64, usize, String, u64)> {
    assert!(o.status.success(), "{}", stderr(o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert!(v["tokens_per_s"].as_f64().unwrap() > 0.0, "{l}");
            (
                v["step"].as_u64().unwrap(),
                v["loss"].as_f64().unwrap(),
                v["devices"].as_array().unwrap().len(),
                v["reduce"].as_str().unwrap().to_string(),
                v["reduce_bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn transformer(devices: &str, out: &str) -> std::process::Output {
    kernels(&[
        "train",
        "transformer",
        "--out",
        out,
        "--steps",
        "12",
        "--batch",
        "5",
        "--hidden",
        "16",
        "--layers",
        "1",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--intermediate",
        "24",
        "--eval-problems",
        "0",
        "--devices",
        devices,
        "--json",
    ])
}

fn same_losses(
    label: &str,
    a: &[(u64, f64, usize, String, u64)],
    b: &[(u64, f64, usize, String, u64)],
    rtol: f64,
) {
    assert_eq!(a.len(), b.len(), "{label}");
    assert!(!a.is_empty(), "{label}: no steps logged");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.0, y.0, "{label}");
        assert!(
            (x.1 - y.1).abs() <= rtol * y.1.abs().max(1.0),
            "{label}: step {}: loss {} vs {}",
            x.0,
            x.1,
            y.1
        );
    }
    eprintln!(
        "{label}: {:?} vs {:?}",
        a.iter().map(|s| s.1).collect::<Vec<_>>(),
        b.iter().map(|s| s.1).collect::<Vec<_>>()
    );
}

#[test]
fn transformer_replicas_print_the_losses_of_one_device() {
    let tmp = tempfile::tempdir().unwrap();
    let out = |n: &str| tmp.path().join(n).display().to_string();
    let one = steps(&transformer("cpu", &out("one")));
    // Steps 0 and 10, and the last (11).
    assert_eq!(one.iter().map(|s| s.0).collect::<Vec<_>>(), [0, 10, 11]);
    assert!(one.iter().all(|s| s.2 == 1 && s.3 == "none" && s.4 == 0));
    let three = steps(&transformer("cpu,cpu,cpu", &out("three")));
    assert!(three.iter().all(|s| s.2 == 3 && s.3 == "host" && s.4 > 0));
    same_losses("cpu x3 vs cpu", &three, &one, SAME_KIND_RTOL);
    // A bad list is refused, naming the entry.
    let bad = transformer("cpu,tpu", &out("bad"));
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("tpu"), "{}", stderr(&bad));

    if !require_wgpu_adapter("transformer --devices wgpu,wgpu") {
        return;
    }
    let two = steps(&transformer("wgpu,wgpu", &out("two")));
    assert!(two.iter().all(|s| s.2 == 2 && s.3 == "host"));
    // Both replicas' gradients down, the reduced gradient up to both: 4 x 4 bytes a parameter.
    assert_eq!(two[0].4, three[0].4 / 6 * 4);
    same_losses("wgpu x2 vs cpu", &two, &one, ACROSS_KINDS_RTOL);
    // Replicas of one kind: bit-identical, and the run says so.
    let o = transformer("wgpu,wgpu", &out("two-again"));
    assert!(
        stderr(&o).contains("largest parameter difference from replica 0: 0e0"),
        "{}",
        stderr(&o)
    );
    // A mix: the run reports how far the replicas drifted apart (on lavapipe: not at all, as
    // tests/tests/data_parallel.rs asserts).
    let mix = transformer("cpu,wgpu", &out("mix"));
    let mix_steps = steps(&mix);
    same_losses("cpu,wgpu vs cpu", &mix_steps, &one, ACROSS_KINDS_RTOL);
    let line = stderr(&mix)
        .lines()
        .find(|l| l.contains("largest parameter difference"))
        .map(str::to_string);
    eprintln!("cpu,wgpu: {line:?}");
    let diff: f64 = line.unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(diff <= 1e-5, "{diff}");
}

fn gru(devices: &str, out: &str) -> std::process::Output {
    kernels(&[
        "gru",
        "train",
        "--out",
        out,
        "--iters",
        "3",
        "--batch",
        "5",
        "--horizon",
        "3",
        "--trajectories",
        "6",
        "--length",
        "20",
        "--hidden",
        "8",
        "--members",
        "2",
        "--devices",
        devices,
        "--json",
    ])
}

#[test]
fn gru_replicas_print_the_losses_of_one_device() {
    let tmp = tempfile::tempdir().unwrap();
    let out = |n: &str| tmp.path().join(n).display().to_string();
    let one = steps(&gru("cpu", &out("one.safetensors")));
    assert_eq!(one.iter().map(|s| s.0).collect::<Vec<_>>(), [0, 2]);
    let two = steps(&gru("cpu,cpu", &out("two.safetensors")));
    assert!(two.iter().all(|s| s.2 == 2 && s.3 == "host" && s.4 > 0));
    same_losses("gru cpu x2 vs cpu", &two, &one, SAME_KIND_RTOL);
}
