//! A Hugging Face tokenizer (`tokenizer.json`, with `tokenizer_config.json` when present) as
//! GGUF `tokenizer.ggml.*` metadata, the keys llama.cpp's `convert_hf_to_gguf.py` writes; the
//! inverse of [`super::tokenizer::tokenizer_json`]: reading the keys back gives a tokenizer that
//! encodes every text as the `tokenizer.json` does. A `tokenizer.json` that the keys cannot
//! express that way is an error naming the file and what is unsupported.
//!
//! - **SentencePiece-style BPE** (`byte_fallback: true`; Llama 1/2, Mistral, TinyLlama): model
//!   `llama`, `pre` `default`, the tokens (`▁` and `<0xNN>` as they are), `scores`, `token_type`
//!   and `add_space_prefix` (from the `Prepend("▁")` normalizer), no merges (llama.cpp derives
//!   them from the scores). llama.cpp's converter writes every score as -1000 for a checkpoint
//!   without `tokenizer.model`, which loses the merge order; here a token's score is minus the
//!   rank of the first merge that makes it (0 for control, unknown, user-defined and byte tokens,
//!   below every merge for the other tokens, -10000 for padding), so llama.cpp's SentencePiece
//!   algorithm and the reader's merges rank pairs as the merges do. The merges must be exactly
//!   those SentencePiece's vocabulary implies for these scores (every split of a token into two
//!   tokens, as Hugging Face's converter writes them), which is checked.
//! - **Byte-level BPE** (GPT-2, Llama 3, Qwen2): model `gpt2`, the tokens, `token_type` and the
//!   merges as `"left right"` strings; `pre` from the pre-tokenizer: `gpt-2` for GPT-2's
//!   `ByteLevel` with its regex, `llama-bpe` for Llama 3's split regex (with `ignore_merges`),
//!   `qwen2` for Qwen2's (NFC normalizer allowed); another regex is refused by name (llama.cpp
//!   identifies the pre-tokenizer by a hash of encodings instead).
//!
//! Token types (llama.cpp's): tokens in `added_tokens` are control (3) when `special` or when
//! they look special as llama.cpp's converter checks (`<|...|>`, `<pad>`, ...), the unknown token
//! (2) when it is the model's `unk_token`, else user-defined (4); other tokens are normal (1), or
//! byte (6) for `<0xNN>` in the SentencePiece kind. Ids missing below the model's vocabulary size
//! are `[PAD<id>]` tokens of type unused (5), as the converter pads.
//!
//! Special token ids, as gguf-py's `SpecialVocab` finds them: `tokenizer_config.json`'s
//! `bos_token`, `eos_token`, `unk_token` and `pad_token` (a string or `{"content": ...}`) looked
//! up in `added_tokens`; where it names no BOS or EOS (or there is no `tokenizer_config.json`),
//! the tokens the post-processor's template adds before and after the text. A template adding
//! another token than the BOS or EOS named is refused. `add_bos_token` / `add_eos_token`: `tokenizer_config.json`'s, else whether the
//! post-processor's template adds them; always written (false when nothing adds them: the reader
//! and llama.cpp default to adding BOS for `llama`). `tokenizer.chat_template`:
//! `tokenizer_config.json`'s `chat_template` when it is a string (or the `default` entry of a
//! list), else `chat_template.jinja`'s text.
//!
//! Added tokens are matched in the raw text, as llama.cpp matches them: one with
//! `"normalized": true` in a SentencePiece-style `tokenizer.json` is matched by the `tokenizers`
//! crate after the normalizer instead, so a text holding such a token literally can encode
//! differently there (texts without it encode the same). Added tokens with `lstrip`, `rstrip`
//! or `single_word` are refused.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use serde_json::Value as Json;

use super::tokenizer::{PRE_LLAMA3, PRE_QWEN2, sentencepiece_merges};
use super::types::ValueType;
use super::value::Value;
use super::write::GgufWriter;
use crate::error::{Error, Result};

/// llama.cpp's `llama_token_type`.
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;
const BYTE: i32 = 6;

/// The score of padding tokens (the converter's).
const PAD_SCORE: f32 = -10000.0;

/// A checkpoint's tokenizer files.
#[derive(Debug, Clone, Copy)]
pub struct HfTokenizer<'a> {
    /// The `tokenizer.json`'s path, for messages.
    pub path: &'a str,
    /// The bytes of `tokenizer.json`.
    pub tokenizer_json: &'a [u8],
    /// The bytes of `tokenizer_config.json`, when present.
    pub tokenizer_config: Option<&'a [u8]>,
    /// The text of `chat_template.jinja`, when present.
    pub chat_template_jinja: Option<&'a str>,
}

/// One added token of `tokenizer.json`.
struct Added {
    id: usize,
    content: String,
    special: bool,
}

/// What the post-processor adds around a single sequence: the tokens before and after it.
#[derive(Default)]
struct Template {
    first: Option<String>,
    last: Option<String>,
}

struct Ctx<'a> {
    path: &'a str,
}

impl Ctx<'_> {
    fn bad(&self, why: String) -> Error {
        Error::BadModelFile {
            path: self.path.to_string(),
            why,
        }
    }

    fn unsupported(&self, what: String) -> Error {
        self.bad(format!(
            "{what}: not supported as GGUF `tokenizer.ggml.*` (supported: SentencePiece-style \
             BPE with byte fallback, as llama.cpp's `llama`, and byte-level BPE with the GPT-2, \
             Llama 3 or Qwen2 pre-tokenizer, as llama.cpp's `gpt2`)"
        ))
    }
}

fn str_of<'j>(j: &'j Json, key: &str) -> Option<&'j str> {
    j.get(key).and_then(Json::as_str)
}

fn bool_of(j: &Json, key: &str) -> Option<bool> {
    j.get(key).and_then(Json::as_bool)
}

/// Null, absent or an empty string.
fn unset(j: &Json, key: &str) -> bool {
    match j.get(key) {
        None | Some(Json::Null) => true,
        Some(Json::String(s)) => s.is_empty(),
        _ => false,
    }
}

/// llama.cpp's `does_token_look_special`.
fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<｜") && t.ends_with("｜>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

/// `<0xNN>`.
fn is_byte_token(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 6 && t.starts_with("<0x") && t.ends_with('>') && {
        let hex = |c: u8| c.is_ascii_hexdigit();
        hex(b[3]) && hex(b[4])
    }
}

/// The merges of a BPE model, as pairs (`["a", "b"]` or the older `"a b"`).
fn merges_of(ctx: &Ctx<'_>, model: &Json) -> Result<Vec<(String, String)>> {
    let Some(merges) = model.get("merges") else {
        return Ok(Vec::new());
    };
    let merges = merges
        .as_array()
        .ok_or_else(|| ctx.bad("`model.merges` is not an array".into()))?;
    merges
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let pair = match m {
                Json::String(s) => {
                    let mut parts = s.split(' ');
                    match (parts.next(), parts.next(), parts.next()) {
                        (Some(l), Some(r), None) => Some((l.to_string(), r.to_string())),
                        _ => None,
                    }
                }
                Json::Array(a) => match a.as_slice() {
                    [Json::String(l), Json::String(r)] => Some((l.clone(), r.clone())),
                    _ => None,
                },
                _ => None,
            };
            pair.ok_or_else(|| ctx.bad(format!("`model.merges`[{i}] is not a pair of tokens")))
        })
        .collect()
}

/// The post-processor's single-sequence template; an error for processors that do more than
/// add tokens around the text.
fn template_of(ctx: &Ctx<'_>, post: &Json) -> Result<Template> {
    let mut t = Template::default();
    let processors: Vec<&Json> = match post.get("processors").and_then(Json::as_array) {
        Some(list) => list.iter().collect(),
        None if post.is_null() => Vec::new(),
        None => vec![post],
    };
    for p in processors {
        match str_of(p, "type") {
            Some("ByteLevel") => {}
            Some("TemplateProcessing") => {
                let single = p
                    .get("single")
                    .and_then(Json::as_array)
                    .ok_or_else(|| ctx.bad("`post_processor.single` is missing".into()))?;
                let special = |j: &Json| -> Option<String> {
                    j.get("SpecialToken")
                        .and_then(|s| str_of(s, "id"))
                        .map(String::from)
                };
                let is_a = |j: &Json| {
                    j.get("Sequence").and_then(|s| str_of(s, "id")) == Some("A")
                        && j.get("Sequence")
                            .and_then(|s| s.get("type_id"))
                            .and_then(Json::as_u64)
                            .unwrap_or(0)
                            == 0
                };
                let pieces: Vec<Option<String>> = single.iter().map(special).collect();
                let seq: Vec<usize> = (0..single.len()).filter(|&i| is_a(&single[i])).collect();
                let ok = seq.len() == 1
                    && seq[0] <= 1
                    && single.len() - seq[0] <= 2
                    && pieces
                        .iter()
                        .enumerate()
                        .all(|(i, s)| i == seq[0] || s.is_some());
                if !ok {
                    return Err(ctx.unsupported(
                        "a `TemplateProcessing` post-processor other than \
                         [special token] A [special token]"
                            .into(),
                    ));
                }
                t.first = if seq[0] == 1 { pieces[0].clone() } else { None };
                t.last = if seq[0] + 1 < single.len() {
                    pieces[seq[0] + 1].clone()
                } else {
                    None
                };
            }
            other => {
                return Err(
                    ctx.unsupported(format!("post-processor `{}`", other.unwrap_or("(no type)")))
                );
            }
        }
    }
    Ok(t)
}

/// The SentencePiece kind's `add_space_prefix` from its normalizer; an error for any other
/// normalizer or a pre-tokenizer.
fn spm_space_prefix(ctx: &Ctx<'_>, j: &Json) -> Result<bool> {
    let is_replace = |n: &Json| {
        str_of(n, "type") == Some("Replace")
            && n.get("pattern").and_then(|p| str_of(p, "String")) == Some(" ")
            && str_of(n, "content") == Some("▁")
    };
    let is_prepend =
        |n: &Json| str_of(n, "type") == Some("Prepend") && str_of(n, "prepend") == Some("▁");
    if let Some(pre) = j.get("pre_tokenizer").filter(|p| !p.is_null()) {
        return Err(ctx.unsupported(format!(
            "a SentencePiece-style tokenizer with the pre-tokenizer `{}` (llama.cpp's `llama` \
             tokenizer prepends `▁` as the Prepend and Replace normalizers do; Metaspace \
             differs on leading spaces and after special tokens)",
            str_of(pre, "type").unwrap_or("?")
        )));
    }
    let n = j.get("normalizer").unwrap_or(&Json::Null);
    if is_replace(n) {
        return Ok(false);
    }
    if str_of(n, "type") == Some("Sequence")
        && let Some(list) = n.get("normalizers").and_then(Json::as_array)
    {
        match list.as_slice() {
            [p, r] if is_prepend(p) && is_replace(r) => return Ok(true),
            [r] if is_replace(r) => return Ok(false),
            _ => {}
        }
    }
    Err(ctx.unsupported(format!(
        "a SentencePiece-style tokenizer with the normalizer {n} (supported: \
         Prepend(\"▁\") then Replace(\" \", \"▁\"), or the Replace alone)"
    )))
}

/// The byte-level kind's `tokenizer.ggml.pre`, checked against the normalizer and
/// `ignore_merges`.
fn gpt2_pre(ctx: &Ctx<'_>, j: &Json, ignore_merges: bool) -> Result<&'static str> {
    let byte_level = |p: &Json, regex: bool| {
        str_of(p, "type") == Some("ByteLevel")
            && !bool_of(p, "add_prefix_space").unwrap_or(true)
            && bool_of(p, "use_regex").unwrap_or(true) == regex
    };
    let pre = j.get("pre_tokenizer").unwrap_or(&Json::Null);
    let name = if byte_level(pre, true) {
        Some("gpt-2")
    } else if str_of(pre, "type") == Some("Sequence") {
        match pre
            .get("pretokenizers")
            .and_then(Json::as_array)
            .map(Vec::as_slice)
        {
            Some([split, bl])
                if str_of(split, "type") == Some("Split")
                    && str_of(split, "behavior") == Some("Isolated")
                    && !bool_of(split, "invert").unwrap_or(false)
                    && byte_level(bl, false) =>
            {
                match split.get("pattern").and_then(|p| str_of(p, "Regex")) {
                    Some(r) if r == PRE_LLAMA3 => Some("llama-bpe"),
                    Some(r) if r == PRE_QWEN2 => Some("qwen2"),
                    _ => None,
                }
            }
            _ => None,
        }
    } else {
        None
    };
    let Some(name) = name else {
        return Err(ctx.unsupported(format!(
            "the byte-level pre-tokenizer {pre} (llama.cpp names: gpt-2 for ByteLevel with its \
             regex, llama-bpe and qwen2 for a Split of Llama 3's or Qwen2's regex before \
             ByteLevel)"
        )));
    };
    if ignore_merges != (name == "llama-bpe") {
        return Err(ctx.unsupported(format!(
            "`model.ignore_merges` = {ignore_merges} with the `{name}` pre-tokenizer"
        )));
    }
    let n = j.get("normalizer").unwrap_or(&Json::Null);
    let nfc = str_of(n, "type") == Some("NFC");
    if !(n.is_null() || (nfc && name == "qwen2")) {
        return Err(ctx.unsupported(format!(
            "the normalizer {n} with the `{name}` pre-tokenizer (only Qwen2's NFC)"
        )));
    }
    Ok(name)
}

/// The `tokenizer.ggml.*` metadata of a checkpoint's tokenizer for a model of `vocab_size`
/// tokens, in the order llama.cpp's converter writes them (see the module docs).
pub fn tokenizer_metadata(
    files: &HfTokenizer<'_>,
    vocab_size: usize,
) -> Result<Vec<(String, Value)>> {
    let ctx = Ctx { path: files.path };
    let j: Json = serde_json::from_slice(files.tokenizer_json)
        .map_err(|e| ctx.bad(format!("not JSON: {e}")))?;
    let config: Json = match files.tokenizer_config {
        None => Json::Null,
        Some(b) => serde_json::from_slice(b)
            .map_err(|e| ctx.bad(format!("its tokenizer_config.json is not JSON: {e}")))?,
    };
    let model = j
        .get("model")
        .filter(|m| m.is_object())
        .ok_or_else(|| ctx.bad("no `model` object".into()))?;
    let kind = str_of(model, "type").unwrap_or(if model.get("merges").is_some() {
        "BPE"
    } else {
        "?"
    });
    if kind != "BPE" {
        return Err(ctx.unsupported(format!("the tokenizer model `{kind}`")));
    }
    for key in ["continuing_subword_prefix", "end_of_word_suffix", "dropout"] {
        if !unset(model, key) {
            return Err(ctx.unsupported(format!("a BPE model with `{key}`")));
        }
    }
    let spm = bool_of(model, "byte_fallback").unwrap_or(false);
    let ignore_merges = bool_of(model, "ignore_merges").unwrap_or(false);

    // The vocabulary: the model's, then the added tokens.
    let mut tokens: Vec<Option<String>> = Vec::new();
    let put = |tokens: &mut Vec<Option<String>>, id: u64, t: &str| -> Result<()> {
        let id = usize::try_from(id)
            .ok()
            .filter(|&i| i < vocab_size)
            .ok_or_else(|| {
                ctx.bad(format!(
                    "token `{t}` has id {id}, past the model's vocab_size {vocab_size}"
                ))
            })?;
        if tokens.len() <= id {
            tokens.resize(id + 1, None);
        }
        match &tokens[id] {
            Some(old) if old != t => Err(ctx.bad(format!(
                "id {id} is both `{old}` and `{t}` (vocabulary and added_tokens)"
            ))),
            _ => {
                tokens[id] = Some(t.to_string());
                Ok(())
            }
        }
    };
    let vocab = model
        .get("vocab")
        .and_then(Json::as_object)
        .ok_or_else(|| ctx.bad("`model.vocab` is not an object".into()))?;
    for (t, id) in vocab {
        let id = id
            .as_u64()
            .ok_or_else(|| ctx.bad(format!("`model.vocab`[`{t}`] is not an id")))?;
        put(&mut tokens, id, t)?;
    }
    let mut added: Vec<Added> = Vec::new();
    if let Some(list) = j.get("added_tokens").and_then(Json::as_array) {
        for a in list {
            let (Some(id), Some(content)) =
                (a.get("id").and_then(Json::as_u64), str_of(a, "content"))
            else {
                return Err(ctx.bad(format!("added token {a} has no id or content")));
            };
            for flag in ["lstrip", "rstrip", "single_word"] {
                if bool_of(a, flag).unwrap_or(false) {
                    return Err(
                        ctx.unsupported(format!("the added token `{content}` with `{flag}`"))
                    );
                }
            }
            put(&mut tokens, id, content)?;
            added.push(Added {
                id: id as usize,
                content: content.to_string(),
                special: bool_of(a, "special").unwrap_or(false),
            });
        }
    }
    let unused: Vec<bool> = (0..vocab_size)
        .map(|i| tokens.get(i).is_none_or(Option::is_none))
        .collect();
    let tokens: Vec<String> = (0..vocab_size)
        .map(|i| {
            tokens
                .get(i)
                .cloned()
                .flatten()
                .unwrap_or_else(|| format!("[PAD{i}]"))
        })
        .collect();
    let added_at: BTreeMap<usize, &Added> = added.iter().map(|a| (a.id, a)).collect();
    let unk_token = str_of(model, "unk_token");

    // Token types.
    let types: Vec<i32> = (0..vocab_size)
        .map(|i| {
            if unused[i] {
                return UNUSED;
            }
            let t = tokens[i].as_str();
            match added_at.get(&i) {
                Some(_) if spm && Some(t) == unk_token => UNKNOWN,
                Some(a) if a.special || looks_special(t) => CONTROL,
                Some(_) => USER_DEFINED,
                None if spm && is_byte_token(t) => BYTE,
                None => NORMAL,
            }
        })
        .collect();

    // Special tokens and what the post-processor adds.
    let template = template_of(&ctx, j.get("post_processor").unwrap_or(&Json::Null))?;
    let config_token = |typ: &str| -> Option<String> {
        let e = config.get(format!("{typ}_token"))?;
        e.as_str()
            .or_else(|| str_of(e, "content"))
            .map(String::from)
    };
    // `SpecialVocab` takes them from the template only without a tokenizer_config.json; here
    // also when it does not name them (else the template's tokens could not be written).
    let bos = config_token("bos").or_else(|| template.first.clone());
    let eos = config_token("eos").or_else(|| template.last.clone());
    for (what, t) in [("before", &template.first), ("after", &template.last)] {
        let want = if what == "before" { &bos } else { &eos };
        if let Some(t) = t
            && want.as_ref() != Some(t)
        {
            return Err(ctx.unsupported(format!(
                "a post-processor that adds `{t}` {what} the text, which is not the {} token \
                 ({})",
                if what == "before" { "BOS" } else { "EOS" },
                want.as_deref().unwrap_or("none")
            )));
        }
    }
    let add_flag = |typ: &str, from_template: bool| {
        config
            .get(format!("add_{typ}_token"))
            .and_then(Json::as_bool)
            .unwrap_or(from_template)
    };
    let add_bos = add_flag("bos", template.first.is_some());
    let add_eos = add_flag("eos", template.last.is_some());
    let id_of = |t: &Option<String>| -> Option<u32> {
        t.as_deref()
            .and_then(|t| added.iter().find(|a| a.content == t).map(|a| a.id))
            .and_then(|i| u32::try_from(i).ok())
    };
    let bos_id = id_of(&bos);
    let eos_id = id_of(&eos);
    let unk_id = id_of(&config_token("unk")).or_else(|| {
        unk_token
            .and_then(|u| tokens.iter().position(|t| t == u))
            .and_then(|i| u32::try_from(i).ok())
    });
    let pad_id = id_of(&config_token("pad"));
    if add_bos && bos_id.is_none() {
        return Err(ctx.unsupported("adding a BOS token that is not among the added tokens".into()));
    }
    if add_eos && eos_id.is_none() {
        return Err(
            ctx.unsupported("adding an EOS token that is not among the added tokens".into())
        );
    }

    let merges = merges_of(&ctx, model)?;
    let strings = |v: Vec<String>| {
        Value::Array(
            ValueType::String,
            v.into_iter().map(Value::String).collect(),
        )
    };
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut push = |k: &str, v: Value| out.push((k.to_string(), v));
    if spm {
        if ignore_merges {
            return Err(
                ctx.unsupported("a SentencePiece-style BPE model with `ignore_merges`".into())
            );
        }
        let space_prefix = spm_space_prefix(&ctx, &j)?;
        let scores = spm_scores(&ctx, &tokens, &types, &merges)?;
        push("tokenizer.ggml.model", Value::from("llama"));
        push("tokenizer.ggml.pre", Value::from("default"));
        push("tokenizer.ggml.tokens", strings(tokens));
        push(
            "tokenizer.ggml.scores",
            Value::Array(ValueType::F32, scores.into_iter().map(Value::F32).collect()),
        );
        push(
            "tokenizer.ggml.token_type",
            Value::Array(ValueType::I32, types.into_iter().map(Value::I32).collect()),
        );
        push("tokenizer.ggml.add_space_prefix", Value::Bool(space_prefix));
    } else {
        let pre = gpt2_pre(&ctx, &j, ignore_merges)?;
        let merges: Vec<String> = merges
            .into_iter()
            .enumerate()
            .map(|(i, (l, r))| {
                if l.is_empty() || r.is_empty() || l.contains(' ') || r.contains(' ') {
                    Err(ctx.unsupported(format!(
                        "the merge {i} (`{l}`, `{r}`) of an empty token or one with a space"
                    )))
                } else {
                    Ok(format!("{l} {r}"))
                }
            })
            .collect::<Result<_>>()?;
        push("tokenizer.ggml.model", Value::from("gpt2"));
        push("tokenizer.ggml.pre", Value::from(pre));
        push("tokenizer.ggml.tokens", strings(tokens));
        push(
            "tokenizer.ggml.token_type",
            Value::Array(ValueType::I32, types.into_iter().map(Value::I32).collect()),
        );
        push("tokenizer.ggml.merges", strings(merges));
    }
    for (key, id) in [
        ("tokenizer.ggml.bos_token_id", bos_id),
        ("tokenizer.ggml.eos_token_id", eos_id),
        ("tokenizer.ggml.unknown_token_id", unk_id),
        ("tokenizer.ggml.padding_token_id", pad_id),
    ] {
        if let Some(id) = id {
            push(key, Value::U32(id));
        }
    }
    push("tokenizer.ggml.add_bos_token", Value::Bool(add_bos));
    push("tokenizer.ggml.add_eos_token", Value::Bool(add_eos));
    let template = match config.get("chat_template") {
        Some(Json::String(s)) => Some(s.clone()),
        Some(Json::Array(list)) => list
            .iter()
            .find(|e| str_of(e, "name") == Some("default"))
            .and_then(|e| str_of(e, "template"))
            .map(String::from),
        _ => None,
    }
    .or_else(|| files.chat_template_jinja.map(String::from));
    if let Some(t) = template {
        push("tokenizer.chat_template", Value::String(t));
    }
    Ok(out)
}

/// The SentencePiece kind's scores (see the module docs), checked to give back the merges.
fn spm_scores(
    ctx: &Ctx<'_>,
    tokens: &[String],
    types: &[i32],
    merges: &[(String, String)],
) -> Result<Vec<f32>> {
    // Ids as the reader's merges name them: the first of duplicate tokens.
    let first: BTreeMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let first_id = |t: &str| first.get(t).copied();
    let mut rank: BTreeMap<&str, usize> = BTreeMap::new();
    let mut pairs: Vec<(usize, usize)> = Vec::with_capacity(merges.len());
    for (k, (l, r)) in merges.iter().enumerate() {
        let (Some(li), Some(ri)) = (first_id(l), first_id(r)) else {
            return Err(ctx.bad(format!(
                "merge {k} (`{l}`, `{r}`) is of tokens not in the vocabulary"
            )));
        };
        pairs.push((li, ri));
        let merged = format!("{l}{r}");
        let Some(m) = first_id(&merged) else {
            return Err(ctx.bad(format!(
                "merge {k} (`{l}`, `{r}`) makes `{merged}`, not in the vocabulary"
            )));
        };
        rank.entry(tokens.get(m).map_or("", String::as_str))
            .or_insert(k);
    }
    let below = -(merges.len() as f32) - 1.0;
    let scores: Vec<f32> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| match types.get(i).copied().unwrap_or(NORMAL) {
            UNUSED => PAD_SCORE,
            NORMAL => rank.get(t.as_str()).map_or(below, |&k| -(k as f32)),
            _ => 0.0,
        })
        .collect();
    let names: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let derived = sentencepiece_merges(&names, Some(&scores));
    if derived != pairs {
        let at = derived
            .iter()
            .zip(&pairs)
            .position(|(a, b)| a != b)
            .unwrap_or(derived.len().min(pairs.len()));
        let show = |p: Option<&(usize, usize)>| match p {
            Some(&(l, r)) => format!(
                "(`{}`, `{}`)",
                names.get(l).copied().unwrap_or(""),
                names.get(r).copied().unwrap_or("")
            ),
            None => "nothing".into(),
        };
        return Err(ctx.unsupported(format!(
            "SentencePiece-style merges that are not those its vocabulary implies (every split \
             of a token into two tokens, ranked by the token): merge {at} is {} where the \
             vocabulary gives {} ({} merges, {} implied)",
            show(pairs.get(at)),
            show(derived.get(at)),
            pairs.len(),
            derived.len()
        )));
    }
    Ok(scores)
}

/// Adds [`tokenizer_metadata`] to a writer, replacing keys it already has (the
/// `bos_token_id` / `eos_token_id` that [`super::llama::llama_to_gguf`] takes from
/// `config.json`, which gguf-py's `SpecialVocab` also reads only when the tokenizer files do
/// not name the token).
pub fn add_tokenizer(w: &mut GgufWriter, files: &HfTokenizer<'_>, vocab_size: usize) -> Result<()> {
    for (k, v) in tokenizer_metadata(files, vocab_size)? {
        w.set_metadata(&k, v)?;
    }
    Ok(())
}
