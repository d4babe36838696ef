//! A GGUF file's tokenizer (`tokenizer.ggml.*`) as a Hugging Face `tokenizer.json`
//! ([`tokenizer_json`]), which the CLI and the page load with the `tokenizers` crate like any
//! other.
//!
//! - `llama` (SentencePiece): a BPE model with byte fallback, whose merges are derived from the
//!   vocabulary and the scores the way Hugging Face's `SentencePieceExtractor` does (every split
//!   of a token into two tokens is a merge, ranked by the token's score), spaces as `▁`, a `▁`
//!   prepended unless `tokenizer.ggml.add_space_prefix` is false, `<0xNN>` byte tokens, BOS added
//!   unless `tokenizer.ggml.add_bos_token` is false.
//! - `gpt2` (byte-level BPE): the vocabulary and `tokenizer.ggml.merges`, with the
//!   pre-tokenizer `tokenizer.ggml.pre` names (`default`/`gpt-2`, `llama-bpe`/`llama3`,
//!   `qwen2`, which also normalizes to NFC as Qwen2's `tokenizer.json` does).
//!
//! [`super::tokenizer_write`] is the inverse: a `tokenizer.json` as these keys.
//!
//! Control and user-defined tokens (`tokenizer.ggml.token_type` 3 and 4) become added tokens, so
//! they are matched whole in text.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use serde_json::{Map, Value as Json, json};

use super::GgufFile;
use super::value::Value;
use crate::error::Result;

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
const TOKEN_UNKNOWN: i64 = 2;
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

/// GPT-2's default split, used by the `ByteLevel` pre-tokenizer itself.
pub(super) const PRE_LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
pub(super) const PRE_QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The vocabulary and what comes with it, checked against each other.
struct Vocab<'f> {
    tokens: Vec<&'f str>,
    scores: Option<Vec<f32>>,
    types: Option<Vec<i64>>,
}

fn vocab<'f>(file: &'f GgufFile<'_>) -> Result<Vocab<'f>> {
    let key = "tokenizer.ggml.tokens";
    let tokens = file
        .get_array_opt(key)?
        .ok_or_else(|| file.bad(format!("metadata `{key}` is missing")))?;
    let tokens: Vec<&str> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.as_str()
                .ok_or_else(|| file.bad(format!("`{key}`[{i}] is not a string")))
        })
        .collect::<Result<_>>()?;
    let same_len = |k: &str, n: usize| {
        if n == tokens.len() {
            Ok(())
        } else {
            Err(file.bad(format!("`{k}` has {n} entries, `{key}` {}", tokens.len())))
        }
    };
    let scores = match file.get_array_opt("tokenizer.ggml.scores")? {
        None => None,
        Some(s) => {
            same_len("tokenizer.ggml.scores", s.len())?;
            Some(
                s.iter()
                    .map(|v| v.as_f64().map(|x| x as f32))
                    .collect::<Option<Vec<f32>>>()
                    .ok_or_else(|| file.bad("`tokenizer.ggml.scores` must hold numbers".into()))?,
            )
        }
    };
    let types = match file.get_array_opt("tokenizer.ggml.token_type")? {
        None => None,
        Some(t) => {
            same_len("tokenizer.ggml.token_type", t.len())?;
            Some(
                t.iter()
                    .map(Value::as_i64)
                    .collect::<Option<Vec<i64>>>()
                    .ok_or_else(|| {
                        file.bad("`tokenizer.ggml.token_type` must hold integers".into())
                    })?,
            )
        }
    };
    Ok(Vocab {
        tokens,
        scores,
        types,
    })
}

impl Vocab<'_> {
    fn vocab_json(&self) -> Json {
        let mut map = Map::new();
        for (id, t) in self.tokens.iter().enumerate() {
            // The first of duplicate tokens wins (as in llama.cpp's token_to_id).
            if !map.contains_key(*t) {
                map.insert(String::from(*t), Json::from(id));
            }
        }
        Json::Object(map)
    }

    fn token_type(&self, id: usize) -> i64 {
        self.types
            .as_ref()
            .and_then(|t| t.get(id).copied())
            .unwrap_or(1)
    }

    /// Control, unknown and user-defined tokens, matched whole in text.
    fn added_tokens(&self) -> Json {
        let added: Vec<Json> = self
            .tokens
            .iter()
            .enumerate()
            .filter_map(|(id, t)| {
                let ty = self.token_type(id);
                let special = ty == TOKEN_CONTROL || ty == TOKEN_UNKNOWN;
                (special || ty == TOKEN_USER_DEFINED).then(|| {
                    json!({"id": id, "content": t, "single_word": false, "lstrip": false,
                           "rstrip": false, "normalized": false, "special": special})
                })
            })
            .collect();
        Json::Array(added)
    }

    fn token(&self, id: Option<u32>) -> Option<(u32, &str)> {
        let id = id?;
        self.tokens.get(id as usize).map(|t| (id, *t))
    }

    /// SentencePiece's merges as token pairs ([`sentencepiece_merges`]).
    fn sentencepiece_merges(&self) -> Json {
        let names = |i: usize| self.tokens.get(i).copied().unwrap_or("");
        Json::Array(
            sentencepiece_merges(&self.tokens, self.scores.as_deref())
                .into_iter()
                .map(|(l, r)| json!([names(l), names(r)]))
                .collect(),
        )
    }
}

/// SentencePiece's merges (as Hugging Face's `SentencePieceExtractor` derives them): every split
/// of a token into two tokens, ranked by the token's score (descending; by id when there are no
/// scores), ties in id order; the splits of one token in order of (left id, right id). Pairs of
/// ids, the first id of duplicate tokens. The writer ([`super::tokenizer_write`]) checks that a
/// `tokenizer.json`'s merges are exactly these for the scores it writes.
pub(super) fn sentencepiece_merges(tokens: &[&str], scores: Option<&[f32]>) -> Vec<(usize, usize)> {
    let ids: BTreeMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| (*t, i))
        .collect();
    let score = |id: usize| match scores {
        Some(s) => s.get(id).copied().unwrap_or(f32::NEG_INFINITY),
        None => -(id as f32),
    };
    let mut merges: Vec<(f32, usize, usize)> = Vec::new();
    for (id, token) in tokens.iter().enumerate() {
        let mut local: Vec<(usize, usize)> = token
            .char_indices()
            .skip(1)
            .filter_map(|(at, _)| {
                let (l, r) = token.split_at(at);
                Some((*ids.get(l)?, *ids.get(r)?))
            })
            .collect();
        local.sort_unstable();
        merges.extend(local.into_iter().map(|(l, r)| (score(id), l, r)));
    }
    // Stable: equal scores keep the order above.
    merges.sort_by(|a, b| b.0.total_cmp(&a.0));
    merges.into_iter().map(|(_, l, r)| (l, r)).collect()
}

/// `TemplateProcessing` adding BOS (and EOS) when the file asks for them, `Null` when it adds
/// neither.
fn post_processor(bos: Option<(u32, &str)>, eos: Option<(u32, &str)>) -> Json {
    if bos.is_none() && eos.is_none() {
        return Json::Null;
    }
    let special_token = |t: Option<(u32, &str)>, type_id: u32| {
        t.map(|(_, s)| json!({"SpecialToken": {"id": s, "type_id": type_id}}))
    };
    let sequence = |name: &str, type_id: u32| json!({"Sequence": {"id": name, "type_id": type_id}});
    let single: Vec<Json> = [
        special_token(bos, 0),
        Some(sequence("A", 0)),
        special_token(eos, 0),
    ]
    .into_iter()
    .flatten()
    .collect();
    let pair: Vec<Json> = [
        special_token(bos, 0),
        Some(sequence("A", 0)),
        special_token(eos, 0),
        special_token(bos, 1),
        Some(sequence("B", 1)),
        special_token(eos, 1),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut special = Map::new();
    for (id, s) in [bos, eos].into_iter().flatten() {
        special.insert(s.into(), json!({"id": s, "ids": [id], "tokens": [s]}));
    }
    json!({"type": "TemplateProcessing", "single": single, "pair": pair,
           "special_tokens": special})
}

/// The file's tokenizer as a Hugging Face `tokenizer.json` value (see the module docs); an
/// error naming the key for a tokenizer model other than `llama` and `gpt2`, a pre-tokenizer
/// not listed, or arrays of the wrong type or length.
pub fn tokenizer_json(file: &GgufFile<'_>) -> Result<Json> {
    let model = file.get_str("tokenizer.ggml.model")?;
    let v = vocab(file)?;
    let id = |k: &str| -> Result<Option<u32>> {
        Ok(file.get_usize_opt(k)?.and_then(|i| u32::try_from(i).ok()))
    };
    let flag =
        |k: &str, default: bool| -> Result<bool> { Ok(file.get_bool_opt(k)?.unwrap_or(default)) };
    let spm = model == "llama";
    let add_bos = flag("tokenizer.ggml.add_bos_token", spm)?;
    let add_eos = flag("tokenizer.ggml.add_eos_token", false)?;
    let bos = v
        .token(id("tokenizer.ggml.bos_token_id")?)
        .filter(|_| add_bos);
    let eos = v
        .token(id("tokenizer.ggml.eos_token_id")?)
        .filter(|_| add_eos);
    let added = v.added_tokens();
    let post = post_processor(bos, eos);
    match model {
        "llama" => {
            let unk = v
                .token(id("tokenizer.ggml.unknown_token_id")?.or(Some(0)))
                .map(|(_, t)| t);
            let prefix = flag("tokenizer.ggml.add_space_prefix", true)?;
            let replace = json!({"type": "Replace", "pattern": {"String": " "}, "content": "▁"});
            let normalizer = if prefix {
                json!({"type": "Sequence", "normalizers": [
                    {"type": "Prepend", "prepend": "▁"}, replace]})
            } else {
                replace
            };
            let mut decoders = alloc::vec![
                json!({"type": "Replace", "pattern": {"String": "▁"}, "content": " "}),
                json!({"type": "ByteFallback"}),
                json!({"type": "Fuse"}),
            ];
            if prefix {
                decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
            }
            Ok(json!({
                "version": "1.0", "truncation": null, "padding": null,
                "added_tokens": added,
                "normalizer": normalizer,
                "pre_tokenizer": null,
                "post_processor": post,
                "decoder": {"type": "Sequence", "decoders": decoders},
                "model": {"type": "BPE", "dropout": null, "unk_token": unk,
                          "continuing_subword_prefix": null, "end_of_word_suffix": null,
                          "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                          "vocab": v.vocab_json(), "merges": v.sentencepiece_merges()},
            }))
        }
        "gpt2" => {
            let key = "tokenizer.ggml.merges";
            let merges = file
                .get_array_opt(key)?
                .ok_or_else(|| file.bad(format!("metadata `{key}` is missing")))?;
            let merges: Vec<Json> = merges
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    // llama.cpp splits at the first space after the first byte (a merge of
                    // " " itself with another token keeps its leading space).
                    let pair = m
                        .as_str()
                        .and_then(|s| {
                            let at = s.bytes().skip(1).position(|b| b == b' ')? + 1;
                            Some((s.get(..at)?, s.get(at + 1..)?))
                        })
                        .ok_or_else(|| {
                            file.bad(format!(
                                "`{key}`[{i}] is not two tokens separated by a space"
                            ))
                        })?;
                    Ok(json!([pair.0, pair.1]))
                })
                .collect::<Result<_>>()?;
            let pre = match file.get("tokenizer.ggml.pre") {
                None => "default",
                Some(_) => file.get_str("tokenizer.ggml.pre")?,
            };
            let byte_level = |regex: bool| {
                json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                       "use_regex": regex})
            };
            let split = |pattern: &str| {
                json!({"type": "Sequence", "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
                     "invert": false},
                    byte_level(false)]})
            };
            // Qwen2's tokenizer.json normalizes to NFC first (llama.cpp does not).
            let (pre_tokenizer, ignore_merges, normalizer) = match pre {
                "default" | "gpt-2" => (byte_level(true), false, Json::Null),
                "llama-bpe" | "llama3" => (split(PRE_LLAMA3), true, Json::Null),
                "qwen2" => (split(PRE_QWEN2), false, json!({"type": "NFC"})),
                other => {
                    return Err(file.bad(format!(
                        "`tokenizer.ggml.pre` = `{other}` not supported (supported: default, \
                         gpt-2, llama-bpe, llama3, qwen2)"
                    )));
                }
            };
            let post = if post.is_null() {
                json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
                       "use_regex": true})
            } else {
                post
            };
            Ok(json!({
                "version": "1.0", "truncation": null, "padding": null,
                "added_tokens": added,
                "normalizer": normalizer,
                "pre_tokenizer": pre_tokenizer,
                "post_processor": post,
                "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                            "use_regex": true},
                "model": {"type": "BPE", "dropout": null, "unk_token": null,
                          "continuing_subword_prefix": null, "end_of_word_suffix": null,
                          "fuse_unk": false, "byte_fallback": false,
                          "ignore_merges": ignore_merges,
                          "vocab": v.vocab_json(), "merges": merges},
            }))
        }
        other => Err(file.bad(format!(
            "`tokenizer.ggml.model` = `{other}` not supported (supported: llama, gpt2)"
        ))),
    }
}
