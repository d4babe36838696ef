//! End-to-end tests of the `kernels` binary: `kernels op` round-trips for every op and direction
//! (bit-exact against calling the CPU backend directly), bad input of every kind (non-zero exit,
//! a message naming the op and the tensor, no OUT written and an existing OUT untouched),
//! `ops --json`, `info` and `demo`.
// Tests may unwrap (see the workspace lints).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{kernels, stderr};

use kernels_core::parity::{Case, all_cases, grad_outputs};
use kernels_core::{Backend, CpuBackend, Direction, OpKind, Tensor, io};
use native_cli::commands::op::attr_args;
use native_cli::parity::GRAD_SEED;

fn save(path: &Path, tensors: &[(&str, Tensor)]) {
    let map: BTreeMap<String, Tensor> = tensors
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    std::fs::write(path, io::save(&map).expect("encode")).expect("write IN");
}

fn f32s(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_f32(shape, v).unwrap()
}

fn ramp(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    f32s(shape, (0..n).map(|i| 0.25 + i as f32 * 0.5).collect())
}

/// The IN tensors for `case` in `dir`, and what the CPU backend returns for them.
fn expected(case: &Case, dir: Direction) -> (Vec<(String, Tensor)>, Vec<Tensor>) {
    let cpu = CpuBackend::new();
    let spec = case.op.spec();
    let inputs: Vec<&Tensor> = case.inputs.iter().collect();
    let mut file: Vec<(String, Tensor)> = spec
        .inputs
        .iter()
        .zip(&case.inputs)
        .map(|(s, t)| (s.name.to_string(), t.clone()))
        .collect();
    let outs = cpu.run(&case.op, Direction::Forward, &inputs).unwrap();
    match dir {
        Direction::Forward => (file, outs),
        Direction::Backward => {
            let grads = grad_outputs(&outs, GRAD_SEED).unwrap();
            for (o, g) in spec.outputs.iter().zip(&grads) {
                file.push((format!("grad_{o}"), g.clone()));
            }
            let mut args = inputs.clone();
            args.extend(outs.iter());
            args.extend(grads.iter());
            let res = cpu.run(&case.op, Direction::Backward, &args).unwrap();
            (file, res)
        }
    }
}

#[test]
fn op_round_trips_every_op_and_direction_bit_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let inp = dir.path().join("in.safetensors");
    let out = dir.path().join("out.safetensors");
    let mut covered: Vec<(OpKind, Direction)> = Vec::new();
    for case in all_cases(0, false).unwrap() {
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
            let (file, want) = expected(&case, d);
            let named: Vec<(&str, Tensor)> =
                file.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
            save(&inp, &named);
            let _ = std::fs::remove_file(&out);
            let mut args: Vec<String> = vec![
                "op".into(),
                case.op.name().into(),
                "--in".into(),
                inp.display().to_string(),
                "--out".into(),
                out.display().to_string(),
                "--backend".into(),
                "cpu".into(),
            ];
            for a in attr_args(&case.op) {
                args.push("--attr".into());
                args.push(a);
            }
            if d == Direction::Backward {
                args.push("--backward".into());
            }
            let argv: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
            let o = kernels(&argv);
            let label = format!("{} {} {}", case.op, d.name(), case.shape_label());
            assert!(o.status.success(), "{label}: {}", stderr(&o));
            let got = io::load(&std::fs::read(&out).unwrap()).unwrap();
            let names = spec.result_names(d);
            assert_eq!(
                got.keys().cloned().collect::<Vec<_>>(),
                {
                    let mut n = names.clone();
                    n.sort();
                    n
                },
                "{label}"
            );
            for (n, w) in names.iter().zip(&want) {
                let g = &got[n];
                assert_eq!(g.shape(), w.shape(), "{label}: {n}");
                assert!(g.bit_eq(w), "{label}: {n} differs from CpuBackend");
            }
            covered.push((case.op.kind(), d));
        }
    }
    for k in OpKind::ALL {
        assert!(covered.contains(&(*k, Direction::Forward)), "{k} forward");
        if k.spec().differentiable() {
            assert!(covered.contains(&(*k, Direction::Backward)), "{k} backward");
        }
    }
}

/// One bad invocation: IN's tensors and the arguments after `op`.
struct Bad {
    what: &'static str,
    tensors: Vec<(&'static str, Tensor)>,
    args: Vec<&'static str>,
    /// Substrings the error message must contain (op, tensor, values).
    needles: Vec<&'static str>,
}

fn bad_cases() -> Vec<Bad> {
    let m23 = ramp(&[2, 3]);
    let m34 = ramp(&[3, 4]);
    vec![
        Bad {
            what: "unknown op",
            tensors: vec![("a", m23.clone())],
            args: vec!["conv2d"],
            needles: vec!["conv2d", "unknown op"],
        },
        Bad {
            what: "unknown attr",
            tensors: vec![("a", m23.clone()), ("b", m34.clone())],
            args: vec!["matmul", "--attr", "bogus=1"],
            needles: vec!["matmul", "bogus"],
        },
        Bad {
            what: "attr without value",
            tensors: vec![("a", m23.clone()), ("b", m34.clone())],
            args: vec!["matmul", "--attr", "trans_b"],
            needles: vec!["matmul", "trans_b"],
        },
        Bad {
            what: "bad attr value",
            tensors: vec![
                ("x", m23.clone()),
                ("weight", ramp(&[3])),
                ("bias", ramp(&[3])),
            ],
            args: vec!["layer_norm", "--attr", "eps=-1"],
            needles: vec!["layer_norm", "eps", "-1"],
        },
        Bad {
            what: "missing required attr",
            tensors: vec![("x", m23.clone())],
            args: vec!["scale"],
            needles: vec!["scale", "factor"],
        },
        Bad {
            what: "missing tensor",
            tensors: vec![("a", m23.clone())],
            args: vec!["matmul"],
            needles: vec!["matmul", "`b`"],
        },
        Bad {
            what: "extra tensor",
            tensors: vec![("a", m23.clone()), ("b", m34.clone()), ("c", m34.clone())],
            args: vec!["matmul"],
            needles: vec!["matmul", "`c`"],
        },
        Bad {
            what: "int where a float belongs",
            tensors: vec![
                ("a", Tensor::from_i32(&[2, 3], vec![1; 6]).unwrap()),
                ("b", m34.clone()),
            ],
            args: vec!["matmul"],
            needles: vec!["matmul", "`a`", "I32", "f32"],
        },
        Bad {
            what: "float ids",
            tensors: vec![("ids", f32s(&[2], vec![0.0, 1.0])), ("weight", m34.clone())],
            args: vec!["embedding"],
            needles: vec!["embedding", "`ids`", "i32 or i64"],
        },
        Bad {
            what: "mismatched shapes",
            tensors: vec![("a", m23.clone()), ("b", ramp(&[4, 5]))],
            args: vec!["matmul"],
            needles: vec!["matmul", "a[2, 3]", "b[4, 5]"],
        },
        Bad {
            what: "id out of range",
            tensors: vec![
                ("ids", Tensor::from_i64(&[2], vec![0, 99]).unwrap()),
                ("weight", m34.clone()),
            ],
            args: vec!["embedding"],
            needles: vec!["embedding", "ids", "99"],
        },
        Bad {
            what: "NaN into svd_lowrank",
            tensors: vec![(
                "a",
                f32s(
                    &[3, 3],
                    vec![1.0, 2.0, 3.0, 4.0, f32::NAN, 6.0, 7.0, 8.0, 9.0],
                ),
            )],
            args: vec!["svd_lowrank", "--attr", "rank=2"],
            needles: vec!["svd_lowrank", "`a`", "NaN", "index 4"],
        },
        Bad {
            what: "infinity into svd_lowrank",
            tensors: vec![("a", f32s(&[2, 2], vec![1.0, f32::INFINITY, 3.0, 4.0]))],
            args: vec!["svd_lowrank", "--attr", "rank=1"],
            needles: vec!["svd_lowrank", "`a`", "inf"],
        },
        Bad {
            what: "svd_lowrank rank above min(m, n) (was clamped in silence)",
            tensors: vec![("a", m23.clone())],
            args: vec!["svd_lowrank", "--attr", "rank=4611686018427387904"],
            needles: vec!["svd_lowrank", "rank", "4611686018427387904", "[1, 2]"],
        },
        Bad {
            what: "svd_lowrank power_iters above 64 (was clamped in silence)",
            tensors: vec![("a", m23.clone())],
            args: vec![
                "svd_lowrank",
                "--attr",
                "rank=1",
                "--attr",
                "power_iters=1000000000",
            ],
            needles: vec!["svd_lowrank", "power_iters", "1000000000", "64"],
        },
        Bad {
            what: "empty tensor",
            tensors: vec![("x", f32s(&[0, 3], vec![]))],
            args: vec!["exp"],
            needles: vec!["exp", "`x`", "empty", "[0, 3]"],
        },
        Bad {
            what: "backward without grad",
            tensors: vec![("a", m23.clone()), ("b", m23.clone())],
            args: vec!["mul", "--backward"],
            needles: vec!["mul", "`grad_out`"],
        },
        Bad {
            what: "grad of the wrong shape",
            tensors: vec![
                ("a", m23.clone()),
                ("b", m23.clone()),
                ("grad_out", ramp(&[3, 2])),
            ],
            args: vec!["mul", "--backward"],
            needles: vec!["mul", "grad_out", "[3, 2]", "[2, 3]"],
        },
        Bad {
            what: "backward of a non-differentiable op",
            tensors: vec![("x", m23.clone()), ("grad_out", m23.clone())],
            args: vec!["argmax", "--backward"],
            needles: vec!["argmax", "backward"],
        },
        Bad {
            what: "unknown backend",
            tensors: vec![("x", m23.clone())],
            args: vec!["exp", "--backend", "tpu"],
            needles: vec!["tpu"],
        },
    ]
}

fn run_bad(dir: &Path, inp: &Path, out: &Path, b: &Bad) -> Output {
    let mut args = vec!["op", b.args[0], "--in"];
    let inp_s = inp.display().to_string();
    let out_s = out.display().to_string();
    args.push(&inp_s);
    args.push("--out");
    args.push(&out_s);
    args.extend(&b.args[1..]);
    let o = kernels(&args);
    assert!(!o.status.success(), "{}: succeeded", b.what);
    let msg = stderr(&o);
    for n in &b.needles {
        assert!(msg.contains(n), "{}: message lacks {n:?}: {msg}", b.what);
    }
    // Nothing but IN (and a pre-existing OUT) in the directory: no temporary files left.
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.retain(|p| p != inp && p != out);
    assert!(names.is_empty(), "{}: stray files {names:?}", b.what);
    o
}

#[test]
fn bad_input_fails_with_a_clear_message_and_writes_nothing() {
    for b in bad_cases() {
        let dir = tempfile::tempdir().unwrap();
        let inp = dir.path().join("in.safetensors");
        let out = dir.path().join("out.safetensors");
        save(&inp, &b.tensors);
        run_bad(dir.path(), &inp, &out, &b);
        assert!(!out.exists(), "{}: OUT was written", b.what);

        // An existing OUT is left exactly as it was.
        std::fs::write(&out, b"precious").unwrap();
        run_bad(dir.path(), &inp, &out, &b);
        assert_eq!(std::fs::read(&out).unwrap(), b"precious", "{}", b.what);
    }
}

#[test]
fn unreadable_or_malformed_in_fails_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let missing = dir.path().join("missing.safetensors");
    let m = missing.display().to_string();
    let o = kernels(&["op", "exp", "--in", &m, "--out", &out.display().to_string()]);
    assert!(!o.status.success());
    let msg = stderr(&o);
    assert!(
        msg.contains("exp") && msg.contains("missing.safetensors"),
        "{msg}"
    );
    assert!(!out.exists());

    for junk in [
        &b""[..],
        &b"\x08\x00\x00\x00\x00\x00\x00\x00{\"x\":1}"[..],
        &b"\xff\xff\xff\xff\xff\xff\xff\xffgarbage"[..],
    ] {
        let inp = dir.path().join("junk.safetensors");
        std::fs::write(&inp, junk).unwrap();
        std::fs::write(&out, b"precious").unwrap();
        let o = kernels(&[
            "op",
            "exp",
            "--in",
            &inp.display().to_string(),
            "--out",
            &out.display().to_string(),
        ]);
        assert!(!o.status.success(), "{junk:?}");
        let msg = stderr(&o);
        assert!(
            msg.contains("exp") && msg.contains("junk.safetensors"),
            "{msg}"
        );
        assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    }
}

#[test]
fn out_in_a_missing_directory_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let inp = dir.path().join("in.safetensors");
    save(&inp, &[("x", ramp(&[3]))]);
    let out = dir.path().join("no-such-dir").join("out.safetensors");
    let o = kernels(&[
        "op",
        "exp",
        "--in",
        &inp.display().to_string(),
        "--out",
        &out.display().to_string(),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("exp"), "{}", stderr(&o));
    assert!(!out.exists());
}

#[test]
fn a_successful_run_replaces_an_existing_out() {
    let dir = tempfile::tempdir().unwrap();
    let inp = dir.path().join("in.safetensors");
    let out = dir.path().join("out.safetensors");
    save(&inp, &[("x", f32s(&[3], vec![-1.0, 0.5, 2.0]))]);
    std::fs::write(&out, b"old").unwrap();
    let o = kernels(&[
        "op",
        "relu",
        "--in",
        &inp.display().to_string(),
        "--out",
        &out.display().to_string(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = io::load(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(got["out"].as_f32().unwrap(), &[0.0, 0.5, 2.0]);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn ops_json_lists_every_op() {
    let o = kernels(&["ops", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v.as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|o| o["name"].as_str().unwrap()).collect();
    let want: Vec<&str> = OpKind::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(names, want);
    for (o, k) in list.iter().zip(OpKind::ALL) {
        let spec = k.spec();
        for key in ["inputs", "attrs", "outputs", "grad_inputs"] {
            assert!(o[key].is_array(), "{k}: {key}");
        }
        let grads: Vec<&str> = o["grad_inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_str().unwrap())
            .collect();
        assert_eq!(grads, spec.grad_inputs, "{k}");
        for a in o["attrs"].as_array().unwrap() {
            assert!(a["name"].is_string() && a["type"].is_string(), "{k}: {a}");
            assert!(a.get("default").is_some(), "{k}: {a}");
        }
        let b = &o["budget"];
        assert!(b["atol"].is_number() && b["rtol"].is_number() && b["grows_with_k"].is_boolean());
        assert_eq!(b["backward"].is_object(), spec.differentiable(), "{k}");
    }
}

#[test]
fn ops_text_and_markdown_list_every_op() {
    for flag in [None, Some("--markdown")] {
        let mut args = vec!["ops"];
        args.extend(flag);
        let o = kernels(&args);
        assert!(o.status.success());
        let s = String::from_utf8(o.stdout).unwrap();
        for k in OpKind::ALL {
            assert!(s.contains(k.name()), "{flag:?}: {k}");
        }
    }
}

#[test]
fn info_names_the_backend_and_why() {
    let o = kernels(&["info"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = String::from_utf8(o.stdout).unwrap();
    assert!(s.contains("backend:") && s.contains("cpu"), "{s}");
}

#[test]
fn info_json_has_the_documented_keys() {
    let o = kernels(&["info", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in [
        "version",
        "build",
        "arch",
        "os",
        "ops",
        "cpu_features",
        "kernels_backend",
        "wgpu_backend",
        "adapters",
        "cuda",
        "backend",
        "reason",
        "device_limits",
        "adapter_features",
    ] {
        assert!(v.get(k).is_some(), "no {k} in {v}");
    }
    assert_eq!(v["ops"], OpKind::ALL.len());
    // The same backend as the text says.
    let text = String::from_utf8(kernels(&["info"]).stdout).unwrap();
    let backend = v["backend"].as_str().unwrap();
    assert!(
        text.contains(&format!("backend:         {backend} (")),
        "{text}"
    );
    for a in v["adapters"].as_array().unwrap() {
        assert!(a["name"].is_string() && a["software"].is_boolean(), "{a}");
    }
    if backend == "cpu" {
        assert!(v["device_limits"].is_null(), "{v}");
    } else {
        assert!(
            v["device_limits"]["max_buffer_size"].as_u64().unwrap() > 0,
            "{v}"
        );
    }
}

/// `kernels demo --json`: the progress on stderr, the summary object on stdout.
#[test]
fn demo_passes() {
    let o = kernels(&["demo", "--json"]);
    let progress = stderr(&o);
    assert!(o.status.success(), "{progress}");
    assert!(progress.contains("all checks passed"), "{progress}");
    assert!(
        progress.contains("llama demo model") && progress.contains("held-out exact match"),
        "{progress}"
    );
    // A screen: the two models, one parity line per backend, the next commands.
    let lines = progress.lines().count();
    assert!(lines <= 40, "{lines} lines:\n{progress}");
    assert!(progress.contains("next:\n  kernels "), "{progress}");
    // The header's case count is the totals'.
    let cases = progress
        .split(" parity cases of ")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .unwrap_or_default()
        .to_string();
    assert!(
        !cases.is_empty() && progress.contains(&format!("({cases} cases, forward and backward)")),
        "{progress}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    assert_eq!(v["passed"], true);
    assert_eq!(v["failures"].as_array().unwrap().len(), 0);
    let parity = v["parity"].as_array().unwrap();
    assert!(!parity.is_empty());
    for p in parity {
        assert_eq!(p["passed"], p["checks"], "{p}");
        assert!(p["checks"].as_u64().unwrap() > 100, "{p}");
        assert!(
            p["checks"].as_u64().unwrap() >= OpKind::ALL.len() as u64,
            "{p}"
        );
    }
    let llama = v["llama"].as_array().unwrap();
    assert_eq!(llama.len(), parity.len());
    for l in llama {
        let (ok, n) = (
            l["held_out_correct"].as_u64().unwrap(),
            l["held_out_problems"].as_u64().unwrap(),
        );
        assert!(n > 0 && ok * 100 >= n * 90, "{l}");
    }
    for w in v["world"].as_array().unwrap() {
        assert!(
            w["mse"].as_f64().unwrap() < w["persistence_mse"].as_f64().unwrap(),
            "{w}"
        );
    }
}

/// The README's "Use it as a library" code is `native-cli/examples/check_op.rs`, which CI runs.
#[test]
fn readme_library_code_is_the_check_op_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let example = std::fs::read_to_string(root.join("native-cli/examples/check_op.rs")).unwrap();
    let code: String = example
        .lines()
        .filter(|l| !l.starts_with("//!"))
        .skip_while(|l| l.is_empty())
        .flat_map(|l| [l, "\n"])
        .collect();
    assert!(
        readme.contains(&format!("```rust\n{code}```")),
        "README's library example differs from native-cli/examples/check_op.rs: paste the file"
    );
}

#[test]
fn readme_tables_are_the_generated_ones() {
    // The op and budget tables live in kernels-core's guide.
    let readme = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels-core/README.md"),
    )
    .unwrap();
    let md = native_cli::commands::ops::markdown();
    let (ops, budgets) = md.split_at(md.find("\n| op | forward budget").unwrap() + 1);
    let between = |begin: &str, end: &str| {
        let i = readme.find(begin).unwrap() + begin.len();
        let j = readme.find(end).unwrap();
        readme[i..j].trim().to_string()
    };
    assert_eq!(
        between("<!-- ops:begin -->", "<!-- ops:end -->"),
        ops.trim(),
        "kernels-core/README.md op table is stale: paste `kernels ops --markdown`"
    );
    assert_eq!(
        between("<!-- budgets:begin -->", "<!-- budgets:end -->"),
        budgets.trim(),
        "kernels-core/README.md budget table is stale: paste `kernels ops --markdown`"
    );
}
