//! kernels-core's tokenizer writer (`gguf::tokenizer_write`: a `tokenizer.json` as
//! `tokenizer.ggml.*`) against its reader (`gguf::tokenizer`): a tokenizer written to GGUF and
//! read back encodes every text as the original `tokenizer.json` does, and what it writes is
//! what gguf-py reads (`tests/fixtures/gguf/tokenizers/*/written.gguf.json`, recorded by
//! `make_fixtures.py written`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use kernels_core::gguf::tokenizer::tokenizer_json;
use kernels_core::gguf::tokenizer_write::{HfTokenizer, tokenizer_metadata};
use kernels_core::gguf::{GgufFile, GgufWriter, Value};
use native_cli::tokenizer_json::tokenizer_from_bytes;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gguf")
}

/// Padding ids past the tokenizer's vocabulary (the model's vocab_size is larger).
const PAD: usize = 2;

const TEXTS: &[&str] = &[
    "hello world",
    "Hello world!",
    "the cat sat in the hat, and sang.",
    "  two  spaces ",
    " leading",
    "héllo wörld ☃",
    "café naïve 🙂",
    "cafe\u{301} (not NFC)",
    "I'm 1234567 tokens 2024",
    "<s>hi</s> [fav] x<unk>",
    "<|im_start|>user\nhi<|im_end|><|endoftext|>next",
    "\n\ttabs\n\n",
    "",
    "a",
];

struct Dir {
    json: Vec<u8>,
    config: Option<Vec<u8>>,
}

fn read_dir(name: &str) -> Dir {
    let d = fixtures().join("tokenizers").join(name);
    Dir {
        json: std::fs::read(d.join("tokenizer.json")).unwrap(),
        config: std::fs::read(d.join("tokenizer_config.json")).ok(),
    }
}

fn vocab_len(json: &[u8]) -> usize {
    let v: serde_json::Value = serde_json::from_slice(json).unwrap();
    let mut n = v["model"]["vocab"].as_object().unwrap().len();
    for a in v["added_tokens"].as_array().unwrap() {
        n = n.max(a["id"].as_u64().unwrap() as usize + 1);
    }
    n
}

/// The GGUF bytes of a tokenizer alone.
fn write(json: &[u8], config: Option<&[u8]>, vocab_size: usize) -> Vec<u8> {
    let files = HfTokenizer {
        path: "tokenizer.json",
        tokenizer_json: json,
        tokenizer_config: config,
        chat_template_jinja: None,
    };
    let mut w = GgufWriter::new();
    for (k, v) in tokenizer_metadata(&files, vocab_size).unwrap() {
        w.add_metadata(&k, v).unwrap();
    }
    w.to_bytes().unwrap()
}

/// Reads the GGUF bytes' tokenizer back as a `tokenizer.json` value.
fn read_back(bytes: &[u8]) -> serde_json::Value {
    let g = GgufFile::parse(bytes, "t.gguf").unwrap();
    tokenizer_json(&g).unwrap()
}

/// Every text encodes (with and without special tokens) and decodes the same through the
/// original and through the GGUF metadata.
fn check_same_encodings(name: &str, original: &[u8], back: &serde_json::Value) {
    let a = tokenizer_from_bytes(original).unwrap();
    let b = tokenizer_from_bytes(&serde_json::to_vec(back).unwrap()).unwrap();
    for text in TEXTS {
        for special in [false, true] {
            let x = a.encode(*text, special).unwrap().get_ids().to_vec();
            let y = b.encode(*text, special).unwrap().get_ids().to_vec();
            assert_eq!(x, y, "{name}: {text:?} (add special tokens: {special})");
            assert_eq!(
                a.decode(&x, false).unwrap(),
                b.decode(&y, false).unwrap(),
                "{name}: decode of {text:?}"
            );
        }
    }
}

#[test]
fn written_tokenizers_encode_as_their_tokenizer_json() {
    for (name, model) in [("spm", "llama"), ("qwen2", "gpt2")] {
        let dir = read_dir(name);
        let n = vocab_len(&dir.json) + PAD;
        let bytes = write(&dir.json, dir.config.as_deref(), n);
        let g = GgufFile::parse(&bytes, "t.gguf").unwrap();
        assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), model);
        let tokens = g.get_array_opt("tokenizer.ggml.tokens").unwrap().unwrap();
        assert_eq!(tokens.len(), n, "{name}: padded to the model's vocab_size");
        let types = g
            .get_array_opt("tokenizer.ggml.token_type")
            .unwrap()
            .unwrap();
        assert_eq!(
            tokens[n - 1].as_str(),
            Some(format!("[PAD{}]", n - 1).as_str())
        );
        assert_eq!(types[n - 1].as_i64(), Some(5));
        let back = read_back(&bytes);
        // The merges themselves, in order (short texts rarely tell merge orders apart).
        let original: serde_json::Value = serde_json::from_slice(&dir.json).unwrap();
        let merges = &original["model"]["merges"];
        assert!(merges.as_array().is_some_and(|m| m.len() > 30), "{name}");
        assert_eq!(&back["model"]["merges"], merges, "{name}");
        check_same_encodings(name, &dir.json, &back);
    }
}

#[test]
fn special_ids_flags_and_chat_template_follow_tokenizer_config() {
    let dir = read_dir("spm");
    let bytes = write(&dir.json, dir.config.as_deref(), vocab_len(&dir.json));
    let g = GgufFile::parse(&bytes, "t.gguf").unwrap();
    let id = |k: &str| g.get_usize_opt(k).unwrap();
    assert_eq!(id("tokenizer.ggml.bos_token_id"), Some(1));
    assert_eq!(id("tokenizer.ggml.eos_token_id"), Some(2));
    assert_eq!(id("tokenizer.ggml.unknown_token_id"), Some(0));
    assert_eq!(id("tokenizer.ggml.padding_token_id"), None);
    assert_eq!(
        g.get_bool_opt("tokenizer.ggml.add_bos_token").unwrap(),
        Some(true)
    );
    assert_eq!(
        g.get_bool_opt("tokenizer.ggml.add_eos_token").unwrap(),
        Some(false)
    );
    assert_eq!(
        g.get_bool_opt("tokenizer.ggml.add_space_prefix").unwrap(),
        Some(true)
    );
    assert!(
        g.get_str("tokenizer.chat_template")
            .unwrap()
            .contains("<|im_start|>")
    );
    let types: Vec<i64> = g
        .get_array_opt("tokenizer.ggml.token_type")
        .unwrap()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(&types[..4], &[2, 3, 3, 6]);
    assert_eq!(types.last(), Some(&4), "[fav] is user-defined");

    let dir = read_dir("qwen2");
    let bytes = write(&dir.json, dir.config.as_deref(), vocab_len(&dir.json));
    let g = GgufFile::parse(&bytes, "t.gguf").unwrap();
    assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), "qwen2");
    let id = |k: &str| g.get_usize_opt(k).unwrap();
    assert_eq!(id("tokenizer.ggml.bos_token_id"), None);
    assert_eq!(id("tokenizer.ggml.eos_token_id"), Some(2), "<|im_end|>");
    assert_eq!(
        id("tokenizer.ggml.padding_token_id"),
        Some(0),
        "<|endoftext|>"
    );
    assert_eq!(
        g.get_bool_opt("tokenizer.ggml.add_bos_token").unwrap(),
        Some(false)
    );

    // Without tokenizer_config.json: the post-processor's template names BOS.
    let dir = read_dir("spm");
    let bytes = write(&dir.json, None, vocab_len(&dir.json));
    let g = GgufFile::parse(&bytes, "t.gguf").unwrap();
    assert_eq!(
        g.get_usize_opt("tokenizer.ggml.bos_token_id").unwrap(),
        Some(1)
    );
    assert_eq!(
        g.get_bool_opt("tokenizer.ggml.add_bos_token").unwrap(),
        Some(true)
    );
    assert!(g.get("tokenizer.chat_template").is_none());

    // A tokenizer_config.json that names no BOS: the template's; one naming another: refused.
    let bytes = write(
        &dir.json,
        Some(b"{\"eos_token\": \"</s>\"}"),
        vocab_len(&dir.json),
    );
    let g = GgufFile::parse(&bytes, "t.gguf").unwrap();
    assert_eq!(
        g.get_usize_opt("tokenizer.ggml.bos_token_id").unwrap(),
        Some(1)
    );
    let files = HfTokenizer {
        path: "tokenizer.json",
        tokenizer_json: &dir.json,
        tokenizer_config: Some(b"{\"bos_token\": \"</s>\"}"),
        chat_template_jinja: None,
    };
    let e = tokenizer_metadata(&files, vocab_len(&dir.json))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("adds `<s>` before the text"), "{e}");
}

/// gguf-py's files, read as `tokenizer.json` and written back, read back the same: the writer
/// inverts the reader on the SentencePiece, GPT-2 and Llama 3 (`llama-bpe`) kinds.
#[test]
fn the_reader_s_tokenizer_json_writes_back_to_the_same_tokenizer() {
    for name in [
        "spm_tokenizer.gguf",
        "gpt2_tokenizer.gguf",
        "llama_bpe_tokenizer.gguf",
        "tiny_llama.gguf",
    ] {
        let bytes = std::fs::read(fixtures().join(name)).unwrap();
        let g = GgufFile::parse(&bytes, name).unwrap();
        let spec = tokenizer_json(&g).unwrap();
        let json = serde_json::to_vec(&spec).unwrap();
        let n = g
            .get_array_opt("tokenizer.ggml.tokens")
            .unwrap()
            .unwrap()
            .len();
        let written = write(&json, None, n);
        let again = read_back(&written);
        assert_eq!(spec, again, "{name}");
        let w = GgufFile::parse(&written, "w.gguf").unwrap();
        for key in [
            "tokenizer.ggml.tokens",
            "tokenizer.ggml.token_type",
            "tokenizer.ggml.merges",
        ] {
            assert_eq!(g.get(key), w.get(key), "{name}: {key}");
        }
        check_same_encodings(name, &json, &again);
    }
}

/// Llama 3's post-processor: `Sequence[ByteLevel, TemplateProcessing]` adding BOS.
#[test]
fn a_llama3_style_post_processor_adds_bos() {
    let bytes = std::fs::read(fixtures().join("llama_bpe_tokenizer.gguf")).unwrap();
    let g = GgufFile::parse(&bytes, "llama_bpe_tokenizer.gguf").unwrap();
    let mut spec = tokenizer_json(&g).unwrap();
    let bos = "<|endoftext|>";
    spec["post_processor"] = serde_json::json!({"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": bos, "type_id": 1}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {bos: {"id": bos, "ids": [0], "tokens": [bos]}}}]});
    let json = serde_json::to_vec(&spec).unwrap();
    let config = serde_json::json!({"bos_token": bos, "eos_token": bos}).to_string();
    let n = vocab_len(&json);
    let written = write(&json, Some(config.as_bytes()), n);
    let w = GgufFile::parse(&written, "w.gguf").unwrap();
    assert_eq!(w.get_str("tokenizer.ggml.pre").unwrap(), "llama-bpe");
    assert_eq!(
        w.get_bool_opt("tokenizer.ggml.add_bos_token").unwrap(),
        Some(true)
    );
    assert_eq!(
        w.get_usize_opt("tokenizer.ggml.bos_token_id").unwrap(),
        Some(0)
    );
    check_same_encodings("llama3-style", &json, &read_back(&written));
}

fn unsupported(json: &serde_json::Value) -> String {
    let files = HfTokenizer {
        path: "dir/tokenizer.json",
        tokenizer_json: &serde_json::to_vec(json).unwrap(),
        tokenizer_config: None,
        chat_template_jinja: None,
    };
    let e = tokenizer_metadata(&files, 1000).err().unwrap().to_string();
    assert!(e.contains("dir/tokenizer.json"), "{e}");
    e
}

#[test]
fn tokenizers_the_keys_cannot_express_are_named() {
    let spm: serde_json::Value = serde_json::from_slice(&read_dir("spm").json).unwrap();
    let qwen: serde_json::Value = serde_json::from_slice(&read_dir("qwen2").json).unwrap();

    let mut t = spm.clone();
    t["model"]["type"] = "Unigram".into();
    assert!(unsupported(&t).contains("`Unigram`"));

    let mut t = spm.clone();
    t["normalizer"] = serde_json::Value::Null;
    t["pre_tokenizer"] = serde_json::json!({"type": "Metaspace", "replacement": "▁",
        "prepend_scheme": "first", "split": false});
    assert!(unsupported(&t).contains("Metaspace"));

    // Merges in an order the scores cannot give.
    let mut t = spm.clone();
    let merges = t["model"]["merges"].as_array_mut().unwrap();
    merges.swap(0, 5);
    assert!(unsupported(&t).contains("merge 0"));

    let mut t = qwen.clone();
    t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+".into();
    assert!(unsupported(&t).contains("pre-tokenizer"));

    let mut t = qwen.clone();
    t["added_tokens"][0]["lstrip"] = true.into();
    assert!(unsupported(&t).contains("lstrip"));

    let mut t = qwen.clone();
    t["model"]["ignore_merges"] = true.into();
    assert!(unsupported(&t).contains("ignore_merges"));

    // A token id past the model's vocabulary.
    let dir = read_dir("qwen2");
    let files = HfTokenizer {
        path: "q/tokenizer.json",
        tokenizer_json: &dir.json,
        tokenizer_config: None,
        chat_template_jinja: None,
    };
    let e = tokenizer_metadata(&files, 10).err().unwrap().to_string();
    assert!(e.contains("vocab_size 10"), "{e}");
}

fn field_json(v: &Value) -> serde_json::Value {
    match v {
        Value::String(s) => s.as_str().into(),
        Value::Bool(b) => (*b).into(),
        Value::F32(x) => serde_json::json!(*x as f64),
        Value::Array(_, items) => items.iter().map(field_json).collect(),
        other => other.as_i64().unwrap().into(),
    }
}

/// What the writer gives is byte for byte the file gguf-py read when the fixture was recorded,
/// and its `tokenizer.*` fields are the ones gguf-py read from it (checked there against
/// gguf-py's `SpecialVocab` and the converter's token list). KERNELS_REGENERATE=1 rewrites
/// `written.gguf` (then run `make_fixtures.py written`).
#[test]
fn written_metadata_is_what_gguf_py_read() {
    for name in ["spm", "qwen2"] {
        let dir = read_dir(name);
        let bytes = write(&dir.json, dir.config.as_deref(), vocab_len(&dir.json) + PAD);
        let path = fixtures()
            .join("tokenizers")
            .join(name)
            .join("written.gguf");
        if std::env::var_os("KERNELS_REGENERATE").is_some() {
            std::fs::write(&path, &bytes).unwrap();
            continue;
        }
        assert!(
            std::fs::read(&path).unwrap() == bytes,
            "{name}: the writer's output changed; regenerate (see make_fixtures.py)"
        );
        let recorded: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path.with_extension("gguf.json")).unwrap())
                .unwrap();
        let g = GgufFile::parse(&bytes, "w.gguf").unwrap();
        let ours: serde_json::Map<String, serde_json::Value> = g
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), field_json(v)))
            .collect();
        assert_eq!(serde_json::Value::Object(ours), recorded, "{name}");
    }
}
