//! Streamed text and chat end to end: the text `generate` and `chat` stream is exactly the
//! tokenizer's decode of the ids (byte-level BPE with characters split over tokens,
//! SentencePiece, Metaspace, WordLevel), and `kernels chat` renders its turns with the model's
//! template and stops at the end-of-turn token. Fixtures: `tests/fixtures/chat/`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::rc::Rc;

use common::{kernels, stderr};
use kernels_chat::{TextStream, TextTokenizer};
use kernels_core::CpuBackend;
use kernels_core::models::llama::{GenerateOptions, Sampling, generate};
use native_cli::llama::{build, read_dir};
use tokenizers::Tokenizer;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn tokenizer(name: &str) -> Tokenizer {
    Tokenizer::from_file(fixtures().join(format!("chat/tokenizers/{name}.json"))).unwrap()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn decode(tok: &Tokenizer, ids: &[u32]) -> Result<String, tokenizers::Error> {
    tok.decode(ids, false)
}

/// Streams `ids` through a [`TextStream`]: the pieces, then the rest at the end.
fn stream(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    let mut s = TextStream::new();
    let mut d = |ids: &[u32]| decode(tok, ids);
    let mut pieces: Vec<String> = ids.iter().map(|&id| s.push(id, &mut d).unwrap()).collect();
    pieces.push(s.finish(&mut d).unwrap());
    pieces
}

#[test]
fn streamed_text_is_the_tokenizers_decode() {
    let cases: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("chat/tokenizers/decode.json")).unwrap(),
    )
    .unwrap();
    let mut naive_wrong = Vec::new();
    for case in &cases {
        let name = case["tokenizer"].as_str().unwrap();
        let tok = tokenizer(name);
        let ids: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let full = decode(&tok, &ids).unwrap();
        // The Rust tokenizer decodes as the Python one did.
        assert_eq!(full, case["decode"].as_str().unwrap(), "{name} {ids:?}");
        let pieces = stream(&tok, &ids);
        assert_eq!(pieces.concat(), full, "{name} {ids:?}: {pieces:?}");
        if !full.contains('\u{FFFD}') {
            assert!(
                pieces.iter().all(|p| !p.contains('\u{FFFD}')),
                "{name}: {pieces:?}"
            );
        }
        // Decoding token by token, the old way, is wrong on these.
        let naive: String = ids.iter().map(|&id| decode(&tok, &[id]).unwrap()).collect();
        if naive != full {
            naive_wrong.push(name);
        }
    }
    for name in [
        "byte_level",
        "sentencepiece_llama",
        "metaspace",
        "word_level",
    ] {
        assert!(naive_wrong.contains(&name), "{name}: {naive_wrong:?}");
    }
    // The byte-level case really splits characters: a prefix of it decodes to U+FFFD.
    let tok = tokenizer("byte_level");
    let ids = tok.encode("café 😀", false).unwrap().get_ids().to_vec();
    assert!(
        (1..ids.len()).any(|n| decode(&tok, &ids[..n]).unwrap().ends_with('\u{FFFD}')),
        "{ids:?}"
    );
}

/// A model directory: the random qwen2 checkpoint of the family fixtures (vocab 37) with
/// `files` from `tests/fixtures/chat/` and its context widened to `context` positions.
fn model_dir(files: &[(&str, &str)], context: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let qwen2 = fixtures().join("families/qwen2");
    std::fs::copy(
        qwen2.join("model.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .unwrap();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(qwen2.join("config.json")).unwrap()).unwrap();
    config["max_position_embeddings"] = context.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    for (name, from) in files {
        std::fs::copy(fixtures().join("chat").join(from), dir.path().join(name)).unwrap();
    }
    dir
}

#[test]
fn generate_streams_the_decode_of_its_ids() {
    let dir = model_dir(&[("tokenizer.json", "tokenizers/byte_level.json")], 64);
    let path = dir.path().to_str().unwrap();
    let o = kernels(&[
        "generate",
        "--model",
        path,
        "--prompt",
        "café",
        "--max-tokens",
        "40",
        "--backend",
        "cpu",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The same greedy ids through the library, decoded whole.
    let files = read_dir(dir.path()).unwrap();
    let tok = files.tokenizer.as_ref().unwrap();
    let model = build(&files, Rc::new(CpuBackend::new())).unwrap();
    let prompt = TextTokenizer::new(tok.clone())
        .encode_prompt("café")
        .unwrap();
    // kernels-core's id-level loop, an independent reference for kernels-chat's.
    let opts = GenerateOptions {
        max_new_tokens: 40,
        sampling: Sampling::default(),
        stop_tokens: model.config.eos_token_ids.clone(),
    };
    let (ids, _) = pollster::block_on(generate(&model, &prompt, &opts, &mut |_, _| true)).unwrap();
    assert_eq!(ids.len(), 40);
    // What is printed is the decode of the prompt's ids and the new ones together.
    let all: Vec<u32> = prompt.iter().chain(&ids).copied().collect();
    let want = decode(tok, &all).unwrap();
    assert_eq!(stdout(&o), format!("{want}\n"));
    // The random model emits lone bytes of multi-byte characters: the case this is about.
    assert!(
        (1..ids.len()).any(|n| decode(tok, &ids[..n]).unwrap().ends_with('\u{FFFD}')),
        "{ids:?} {want:?}"
    );
}

fn chat(dir: &Path, input: &str, extra: &[&str]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kernels"))
        .args(["chat", "--model", dir.to_str().unwrap(), "--backend", "cpu"])
        .args(extra)
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

const CHAT_FILES: [(&str, &str); 2] = [
    ("tokenizer.json", "qwen2_chat/tokenizer.json"),
    ("tokenizer_config.json", "qwen2_chat/tokenizer_config.json"),
];

#[test]
fn chat_renders_the_conversation_and_stops_at_the_end_of_turn() {
    let dir = model_dir(&CHAT_FILES, 256);
    let o = chat(
        dir.path(),
        "hello there\n\nwhat now?\n",
        &["--max-tokens", "10", "--show-prompt"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("a reply ends at: 1 <|endoftext|>, 13 <|im_end|>"),
        "{err}"
    );
    // One reply per user line (the empty line is skipped).
    let out = stdout(&o);
    let replies: Vec<&str> = out.lines().collect();
    assert_eq!(replies.len(), 2, "{out:?}");
    let prompts: Vec<&str> = err
        .split("[prompt]\n")
        .skip(1)
        .map(|p| p.split("\n[/prompt]").next().unwrap())
        .collect();
    let first = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful \
                 assistant.<|im_end|>\n<|im_start|>user\nhello there<|im_end|>\n\
                 <|im_start|>assistant\n";
    assert_eq!(prompts[0], first);
    // The second turn carries the first reply, closed by the template's end of turn.
    let second = format!(
        "{first}{}<|im_end|>\n<|im_start|>user\nwhat now?<|im_end|>\n<|im_start|>assistant\n",
        replies[0]
    );
    assert_eq!(prompts[1], second);
    // The first reply ended at <|im_end|> (left out of the text), the second at --max-tokens.
    let endings: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with('[') && l.contains(';'))
        .collect();
    assert_eq!(endings.len(), 2, "{err}");
    assert!(endings[0].starts_with("[end token 13;"), "{err}");
    assert!(endings[1].starts_with("[token limit;"), "{err}");
    // The second turn reused the first turn's cache: only its own tokens were prefilled.
    assert!(
        endings[0].contains("; 0 of ") && !endings[1].contains("; 0 of "),
        "{err}"
    );
    assert!(endings[1].contains("decode 9 tokens"), "{err}");
    assert!(
        !replies[0].is_empty() && !out.contains("<|im_end|>"),
        "{out:?}"
    );

    // `generate --chat` gives the first turn's reply.
    let g = kernels(&[
        "generate",
        "--chat",
        "--model",
        dir.path().to_str().unwrap(),
        "--prompt",
        "hello there",
        "--max-tokens",
        "10",
        "--backend",
        "cpu",
    ]);
    assert!(g.status.success(), "{}", stderr(&g));
    assert_eq!(stdout(&g), format!("{}\n", replies[0]));
    assert!(stderr(&g).contains("[end token 13;"), "{}", stderr(&g));
    // A system message replaces the template's default one.
    let s = chat(
        dir.path(),
        "hi\n",
        &[
            "--max-tokens",
            "2",
            "--show-prompt",
            "--system",
            "be brief.",
        ],
    );
    assert!(s.status.success(), "{}", stderr(&s));
    assert!(
        stderr(&s)
            .contains("[prompt]\n<|im_start|>system\nbe brief.<|im_end|>\n<|im_start|>user\nhi"),
        "{}",
        stderr(&s)
    );
}

#[test]
fn chat_without_a_template_or_room_says_so() {
    let dir = model_dir(&[("tokenizer.json", "qwen2_chat/tokenizer.json")], 256);
    let o = chat(dir.path(), "hello\n", &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no chat template"), "{}", stderr(&o));
    let g = kernels(&[
        "generate",
        "--chat",
        "--model",
        dir.path().to_str().unwrap(),
        "--prompt",
        "hi",
        "--backend",
        "cpu",
    ]);
    assert!(!g.status.success());
    assert!(stderr(&g).contains("no chat template"), "{}", stderr(&g));
    // The default system prompt alone is longer than a 64-position context: each message is
    // refused on stderr, and the chat goes on reading.
    let small = model_dir(&CHAT_FILES, 64);
    let o = chat(small.path(), "hello\nagain\n", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stderr(&o)
            .matches("does not fit the model's context")
            .count(),
        2,
        "{}",
        stderr(&o)
    );
    let bad = kernels(&["generate", "--prompt", "1", "--system", "x"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("--chat"), "{}", stderr(&bad));
}
