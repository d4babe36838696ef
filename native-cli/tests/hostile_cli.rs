//! Hostile invocations of the `kernels` binary, as a table: each runs under an address-space
//! limit (`ulimit -v`, so a size that slipped past the checks aborts in the allocator instead of
//! exhausting the machine) and a time limit, and must exit 1 with an error that names the flag,
//! file or field the user gave and the bad value: no abort, no hang, nothing written.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The address space each run may take: enough for the binary and a small model, far less than
/// any of the sizes below asks for.
const ADDRESS_SPACE_KB: u64 = 3_000_000;
/// A run taking longer than this is a hang.
const TIME_LIMIT: Duration = Duration::from_secs(120);

/// Runs `kernels args` under the limits in `cwd`: (exit code, stderr). `None` exit code: killed
/// by a signal (an abort).
fn run_limited(cwd: &Path, args: &[String]) -> (Option<i32>, String) {
    let (code, _, err) = run_limited_with(cwd, args, None);
    (code, err)
}

/// [`run_limited`] with `stdin` (else none), also returning stdout: (exit code, stdout,
/// stderr).
fn run_limited_with(
    cwd: &Path,
    args: &[String],
    stdin: Option<&str>,
) -> (Option<i32>, String, String) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_kernels"))
        .args(args)
        .current_dir(cwd)
        .env_remove("KERNELS_BACKEND")
        .env("RUST_BACKTRACE", "0")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    // Both pipes drained on threads, so a full pipe never stalls the child.
    let drain = |p: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = p {
                p.read_to_string(&mut text).expect("read output");
            }
            text
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = out.join().expect("stdout");
            let err = err.join().expect("stderr");
            return (status.code(), out, err);
        }
        if start.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("kernels {args:?} hung for more than {TIME_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A copy of the demo model with config.json's `field` set to `value`.
fn adder_with(dir: &Path, name: &str, field: &str, value: serde_json::Value) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/adder");
    let out = dir.join(name);
    std::fs::create_dir_all(&out).unwrap();
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(src.join(f), out.join(f)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    config[field] = value;
    std::fs::write(out.join("config.json"), config.to_string()).unwrap();
    out
}

struct Case {
    /// What the user typed after `kernels` (`{dir}` is the scratch directory).
    args: &'static str,
    /// What the error must say (each, verbatim).
    says: &'static [&'static str],
    /// What it must not say (the code's words, a path the user did not give).
    not: &'static [&'static str],
}

const CASES: &[Case] = &[
    // Sizes from flags, checked before allocating.
    Case {
        args: "train transformer --out {dir}/t --backend cpu --steps 1 --batch 100000000",
        says: &["--batch 100000000", "bytes"],
        not: &[],
    },
    Case {
        args: "train transformer --out {dir}/t --backend cpu --steps 1 --hidden 1000000",
        says: &["--hidden 1000000", "bytes"],
        not: &[],
    },
    Case {
        args: "train transformer --out {dir}/t --backend cpu --steps 1 --layers 1000000000",
        says: &["--layers 1000000000", "bytes"],
        not: &[],
    },
    Case {
        args: "gru train --out {dir}/g.safetensors --backend cpu --iters 1 --batch 1000000000",
        says: &["--batch 1000000000", "bytes"],
        not: &[],
    },
    Case {
        args: "gru train --out {dir}/g.safetensors --backend cpu --iters 1 --hidden 100000000",
        says: &["--hidden 100000000", "bytes"],
        not: &[],
    },
    Case {
        args: "gru train --out {dir}/g.safetensors --backend cpu --iters 1 --members 100000000",
        says: &["--members 100000000", "bytes"],
        not: &[],
    },
    Case {
        args: "eval --backend cpu --problems 1000000000000",
        says: &["--problems 1000000000000"],
        not: &[],
    },
    Case {
        args: "bench llama --model {dir}/long --backend cpu --prefill-len 1000000000000",
        says: &["--prefill-len 1000000000000", "bytes"],
        not: &[],
    },
    // Errors in the user's words.
    Case {
        args: "gru train --out {dir}/g.safetensors --backend cpu --iters 1 --hidden 0",
        says: &["--hidden 0"],
        not: &["Linear", "out_features"],
    },
    Case {
        args: "train transformer --out {dir}/t --backend cpu --steps 1 --devices cpu,cpu \
               --batch 1",
        says: &["--batch 1", "--devices"],
        not: &["DataParallel"],
    },
    Case {
        args: "generate --backend cpu --prompt 1+1= --top-p 2",
        says: &["--top-p 2"],
        not: &["sample:", "attribute"],
    },
    Case {
        args: "train transformer --out {dir}/t --backend cpu --steps 1 --hidden 15 --heads 3 \
               --kv-heads 1",
        says: &["--hidden 15", "--heads 3"],
        not: &["config.json", "head_dim ="],
    },
    Case {
        args: "train transformer --out {dir}/t --backend cpu --steps 1 --heads 3",
        says: &["--heads 3", "--kv-heads 2"],
        not: &["config.json", "num_attention_heads"],
    },
    // A negative number is the flag's value, refused in the flag's words.
    Case {
        args: "generate --backend cpu --prompt 1+1= --temperature -1",
        says: &["--temperature -1"],
        not: &["unexpected argument", "sample:"],
    },
    Case {
        args: "train transformer --out {dir}/t --backend cpu --steps 1 --lr -1",
        says: &["--lr", "-1"],
        not: &["unexpected argument"],
    },
    Case {
        args: "train transformer --out {dir}/t --backend cpu --steps 1 --eval-problems \
               1000000000000",
        says: &["--eval-problems 1000000000000", "100107"],
        not: &[],
    },
    Case {
        args: "gru train --out {dir}/g.safetensors --backend cpu --iters 1 --max-minutes -1",
        says: &["--max-minutes -1"],
        not: &[],
    },
    // The world model's flags: sizes, ranges and a device named as weights.
    Case {
        args: "gru predict --backend cpu --horizon 1000000000000",
        says: &["--horizon 1000000000000", "119"],
        not: &[],
    },
    Case {
        args: "gru predict --backend cpu --horizon 0",
        says: &["--horizon 0"],
        not: &["WorldModel", "rollout", "steps"],
    },
    Case {
        args: "gru predict --backend cpu --rank 1000000000",
        says: &["--rank 1000000000", "64"],
        not: &["svd_lowrank", "attribute"],
    },
    Case {
        args: "gru bench --backend cpu --runs 1 --steps 1000000000000",
        says: &["--steps 1000000000000", "bytes"],
        not: &[],
    },
    Case {
        args: "gru bench --backend cpu --runs 1000000000000",
        says: &["--runs 1000000000000"],
        not: &[],
    },
    Case {
        args: "bench llama --model {dir}/long --backend cpu --runs 1000000000000",
        says: &["--runs 1000000000000"],
        not: &[],
    },
    Case {
        args: "gru bench --backend cpu --runs 0",
        says: &["--runs 0"],
        not: &[],
    },
    Case {
        args: "gru predict --backend cpu --weights /dev/zero",
        says: &["/dev/zero", "character device"],
        not: &["out of memory"],
    },
    Case {
        args: "logits --backend cpu --tokens 1,99",
        says: &["--tokens", "99", "vocab_size = 13"],
        not: &["logits:"],
    },
    Case {
        args: "generate --model {dir}/nope.gguf --backend cpu --prompt hi",
        says: &["--model", "nope.gguf", "no such file"],
        not: &["config.json"],
    },
    Case {
        args: "train transformer --out {dir}/a-file --backend cpu --steps 1",
        says: &["--out", "a-file", "not a directory"],
        not: &["os error 17"],
    },
    // Nothing mixed: a model directory is not overwritten without --force.
    Case {
        args: "train transformer --out {dir}/full --backend cpu --steps 1",
        says: &["--out", "full", "not empty", "--force"],
        not: &[],
    },
    // No hangs: a FIFO named as a model is refused by name.
    Case {
        args: "generate --model {dir}/fifo.gguf --backend cpu --prompt hi",
        says: &["fifo.gguf", "FIFO"],
        not: &[],
    },
    Case {
        args: "generate --model {dir}/shard-fifo --backend cpu --prompt hi",
        says: &["model-00001-of-00002.safetensors", "FIFO"],
        not: &[],
    },
    // A GGUF's tensors are named as the file names them.
    Case {
        args: "generate --model {dir}/short.gguf --backend cpu --prompt 1+1=",
        says: &["blk.0.attn_q.weight"],
        not: &["model.layers.", "self_attn"],
    },
    Case {
        args: "quantize --model {dir}/long --to q8_0 --out {dir}/long.gguf --no-tokenizer",
        says: &["max_position_embeddings = 1000000000000", "u32"],
        not: &[],
    },
];

#[test]
fn hostile_invocations_get_a_clean_error_in_the_users_words() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    adder_with(
        dir,
        "long",
        "max_position_embeddings",
        serde_json::json!(1_000_000_000_000u64),
    );
    std::fs::write(dir.join("a-file"), b"not a directory").unwrap();
    std::fs::create_dir(dir.join("full")).unwrap();
    std::fs::write(dir.join("full/generation_config.json"), b"{}").unwrap();
    let fifo = dir.join("fifo.gguf");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    // A sharded checkpoint whose first shard is a FIFO.
    let sharded = adder_with(dir, "shard-fifo", "hidden_size", serde_json::json!(48));
    std::fs::remove_file(sharded.join("model.safetensors")).unwrap();
    std::fs::write(
        sharded.join("model.safetensors.index.json"),
        serde_json::json!({"weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "model.norm.weight": "model-00002-of-00002.safetensors",
        }})
        .to_string(),
    )
    .unwrap();
    let shard = sharded.join("model-00001-of-00002.safetensors");
    assert!(
        Command::new("mkfifo")
            .arg(&shard)
            .status()
            .expect("mkfifo")
            .success()
    );
    std::fs::write(sharded.join("model-00002-of-00002.safetensors"), b"").unwrap();
    // The demo model as GGUF, less its first layer's q projection.
    let adder = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/adder");
    let config = kernels_core::models::llama::LlamaConfig::from_json(
        &std::fs::read_to_string(adder.join("config.json")).unwrap(),
    )
    .unwrap();
    let mut tensors =
        kernels_core::io::load(&std::fs::read(adder.join("model.safetensors")).unwrap()).unwrap();
    tensors.remove("model.layers.0.self_attn.q_proj.weight");
    let gguf = kernels_core::gguf::llama::llama_to_gguf(&config, &tensors).unwrap();
    std::fs::write(dir.join("short.gguf"), gguf.to_bytes().unwrap()).unwrap();

    let mut failures = Vec::new();
    for case in CASES {
        let line = case.args.replace("{dir}", &dir.display().to_string());
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        let (code, err) = run_limited(dir, &args);
        let mut wrong = Vec::new();
        if code != Some(1) {
            wrong.push(format!("exit {code:?}, want 1"));
        }
        // Notes may come first; the last line is the error.
        if !err
            .trim_end()
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("error: "))
        {
            wrong.push("stderr does not end with an `error: ` line".into());
        }
        for s in case.says {
            if !err.contains(s) {
                wrong.push(format!("does not say {s:?}"));
            }
        }
        for s in case.not {
            if err.contains(s) {
                wrong.push(format!("says {s:?}"));
            }
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "kernels {line}\n  {}\n  stderr: {err}",
                wrong.join("; ")
            ));
        }
    }
    // A negative count is a bad value of its flag (clap's usage error, exit 2), not an
    // unknown argument.
    for (args, flag) in [
        (
            "generate --backend cpu --prompt 1+1= --max-tokens -1",
            "--max-tokens",
        ),
        ("eval --backend cpu --problems -5", "--problems"),
    ] {
        let args: Vec<String> = args.split_whitespace().map(String::from).collect();
        let (code, err) = run_limited(dir, &args);
        if code != Some(2) || !err.contains(flag) || !err.contains("'-") {
            failures.push(format!("kernels {args:?}: exit {code:?}, stderr: {err}"));
        }
    }
    // Nothing was written by the refused runs.
    assert_eq!(
        std::fs::read(dir.join("a-file")).unwrap(),
        b"not a directory"
    );
    let full: Vec<_> = std::fs::read_dir(dir.join("full")).unwrap().collect();
    assert_eq!(full.len(), 1, "the non-empty --out was touched");
    for name in ["t", "g.safetensors", "long.gguf"] {
        assert!(!dir.join(name).exists(), "{name} was written");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--force` replaces a model directory whole: the old model's other files go, the new
/// checkpoint is complete, and nothing is left beside it.
#[test]
fn train_force_replaces_the_directory_whole() {
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("model");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("generation_config.json"), b"{}").unwrap();
    std::fs::write(out.join("config.json"), b"old").unwrap();
    let args: Vec<String> = [
        "train",
        "transformer",
        "--out",
        &out.display().to_string(),
        "--backend",
        "cpu",
        "--steps",
        "1",
        "--batch",
        "2",
        "--hidden",
        "8",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--layers",
        "1",
        "--intermediate",
        "8",
        "--eval-problems",
        "0",
        "--force",
    ]
    .map(String::from)
    .to_vec();
    let (code, err) = run_limited(scratch.path(), &args);
    assert_eq!(code, Some(0), "{err}");
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["config.json", "model.safetensors", "tokenizer.json"]
    );
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["hidden_size"], 8);
    // Only the model directory is left in its parent: no staging or old directories.
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 1);
}

/// `--max-tokens` beyond what the memory holds is capped, with a note naming the flag, its
/// value, the cap and the bytes, and the run completes: `generate` on a config whose context is
/// 10^12 positions (a 768 TB cache), and `chat` on a model whose 4096-position chat cache
/// (4 GB: 32768-wide heads) is more than the address-space limit lets it take.
#[test]
fn max_tokens_beyond_memory_is_capped_with_a_note() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let long = adder_with(
        dir,
        "long",
        "max_position_embeddings",
        serde_json::json!(1_000_000_000_000u64),
    );
    let args: Vec<String> = [
        "generate",
        "--model",
        long.to_str().unwrap(),
        "--backend",
        "cpu",
        "--prompt",
        "123+456=",
        "--max-tokens",
        "1000000000000",
    ]
    .map(String::from)
    .to_vec();
    let (code, out, err) = run_limited_with(dir, &args, None);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "123+456=9750$\n", "{err}");
    let note = err
        .lines()
        .find(|l| l.contains("KV cache"))
        .unwrap_or_else(|| panic!("no memory note: {err}"));
    for s in [
        "note: --max-tokens 1000000000000",
        "768000000000000 bytes",
        "ulimit -v",
        "generation stops after at most",
    ] {
        assert!(note.contains(s), "{s:?} not in {note}");
    }

    // chat --max-tokens 10^12 on the same config (with a template that writes the messages'
    // text): the chat's cache is its 4096 positions, said in a note, and the reply ends at `$`.
    std::fs::write(
        long.join("tokenizer_config.json"),
        r#"{"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}"#,
    )
    .unwrap();
    let args: Vec<String> = [
        "chat",
        "--model",
        long.to_str().unwrap(),
        "--backend",
        "cpu",
        "--max-tokens",
        "1000000000000",
    ]
    .map(String::from)
    .to_vec();
    let (code, out, err) = run_limited_with(dir, &args, Some("123+456=\n"));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "9750\n", "{err}");
    assert!(
        err.contains("note: --max-tokens 1000000000000 is more than the chat's context (4096"),
        "{err}"
    );

    // A chat model with 32768-wide heads: 1 MB of cache per position.
    let chat = dir.join("wide");
    std::fs::create_dir(&chat).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut config: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures.join("families/qwen2/config.json")).unwrap(),
    )
    .unwrap();
    config["head_dim"] = 32768.into();
    config["num_hidden_layers"] = 4.into();
    config["layer_types"] = serde_json::json!(vec!["full_attention"; 4]);
    config["max_position_embeddings"] = 8192.into();
    let parsed = kernels_core::models::llama::LlamaConfig::from_json(&config.to_string()).unwrap();
    let mut rng = kernels_core::Rng::new(7);
    let tensors: std::collections::BTreeMap<String, kernels_core::Tensor> = parsed
        .checkpoint_shapes_iter()
        .map(|(name, shape)| (name, rng.normal_tensor(&shape, 0.0, 0.02).unwrap()))
        .collect();
    std::fs::write(
        chat.join("model.safetensors"),
        kernels_core::io::save(&tensors).unwrap(),
    )
    .unwrap();
    std::fs::write(chat.join("config.json"), config.to_string()).unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixtures.join("chat/qwen2_chat").join(f), chat.join(f)).unwrap();
    }
    let args: Vec<String> = [
        "chat",
        "--model",
        chat.to_str().unwrap(),
        "--backend",
        "cpu",
        "--max-tokens",
        "3",
    ]
    .map(String::from)
    .to_vec();
    let (code, _, err) = run_limited_with(dir, &args, Some("hello\nagain\n"));
    assert_eq!(code, Some(0), "{err}");
    let note = err
        .lines()
        .find(|l| l.contains("KV cache"))
        .unwrap_or_else(|| panic!("no memory note: {err}"));
    for s in [
        "note: --max-tokens 3",
        "4096 positions",
        "bytes",
        "the chat's context is capped at",
    ] {
        assert!(note.contains(s), "{s:?} not in {note}");
    }
    // Both lines were answered.
    assert_eq!(
        err.matches("prompt tokens from the cache").count(),
        2,
        "{err}"
    );
}
