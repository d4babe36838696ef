//! The transformer section: a llama checkpoint (the embedded demo model, or a Hugging Face
//! directory the visitor picks), its tokenizer, and the throughput figures. Plain data, tested
//! natively; the browser glue is `llm::dom` (wasm32 only).
//!
//! Checkpoints load through kernels-core's `models::hf`, the loader the CLI uses, and
//! `tokenizer.json` through the `tokenizers` crate, as in the CLI (built for wasm32 with its
//! `unstable_wasm` feature: the pure-Rust regex engine, no C), so any Hugging Face tokenizer
//! works in the page too.
//!
//! A directory with a chat template (`tokenizer_config.json`'s `chat_template`, or
//! `chat_template.jinja`) is an instruct model: the section chats with it ([`PageChat`]),
//! through kernels-chat's template code, the CLI's (`kernels chat`). Streamed text goes through
//! kernels-chat's `TextStream` in both modes, so it is the tokenizer's decode of the ids.
//!
//! Quantize on load: the section's weights choice (as stored, q8_0, q4_0, q4_k) re-encodes a
//! checkpoint's matrices as it loads ([`Source::quantize`], kernels-core's
//! `quantize_checkpoint`, what the CLI's `--quantize` runs). A GGUF file keeps its own types.

#[cfg(target_arch = "wasm32")]
pub(crate) mod dom;

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use kernels_chat::{ChatSetup, TextTokenizer};
use kernels_core::models::hf::{self, Checkpoint};
use kernels_core::models::llama::{
    LlamaConfig, QUANTIZE_CHOICES, QuantizeSummary, quantize_checkpoint,
};
use kernels_core::{DType, Error, Result, SharedBytes};

// The loader the `kernels` tool uses (one implementation; see the file).
#[path = "../../native-cli/src/tokenizer_json.rs"]
mod tokenizer_json;

/// The demo model's prompt when the page opens: `aaa+bbb=`, answered least-significant digit
/// first (`9750$`).
pub const DEMO_PROMPT: &str = "123+456=";
pub const DEMO_ORIGIN: &str = "demo model (native-cli/models/adder)";
const DEMO_CONFIG: &str = include_str!("../../native-cli/models/adder/config.json");
const DEMO_TOKENIZER: &[u8] = include_bytes!("../../native-cli/models/adder/tokenizer.json");

/// A checkpoint the page can run: the config parsed (so an unsupported architecture is
/// refused before any upload), the tensors on the host, the tokenizer.
#[derive(Debug, Clone)]
pub struct Source {
    pub origin: String,
    pub config: LlamaConfig,
    pub checkpoint: Checkpoint,
    pub tokenizer: PageTokenizer,
    /// The chat template and end-of-turn ids of an instruct model (None: plain completion).
    pub chat: Option<Rc<ChatSetup>>,
    /// Loaded from a GGUF file: its tensors keep the file's types.
    pub gguf: bool,
    /// The format its matrices were quantized to on load ([`Source::quantize`]).
    pub quantized: Option<DType>,
}

/// The weights choice by name: `stored` (or empty) keeps the checkpoint's types, `q8_0`, `q4_0`
/// or `q4_k` quantizes its matrices on load (kernels-core's `QUANTIZE_CHOICES`, the CLI's
/// `--quantize`).
pub fn parse_quantize(name: &str) -> Result<Option<DType>> {
    if matches!(name, "" | "stored") {
        return Ok(None);
    }
    DType::from_name(name)
        .filter(|d| QUANTIZE_CHOICES.contains(d))
        .map(Some)
        .ok_or_else(|| Error::BadAttr {
            op: "quantize",
            attr: "weights",
            value: name.into(),
            why: "expected stored, q8_0, q4_0 or q4_k".into(),
        })
}

pub(crate) fn chat_error(e: kernels_chat::ChatError) -> Error {
    use kernels_chat::ChatError as C;
    let path = match &e {
        C::Model(inner) => return inner.clone(),
        C::BadFile { path, .. } => path.clone(),
        C::NoTemplate { origin } | C::Template { origin, .. } => origin.clone(),
        C::Tokenizer { .. } => "tokenizer.json".into(),
        C::Empty | C::TooLong { .. } => "prompt".into(),
    };
    Error::BadModelFile {
        path,
        why: e.to_string(),
    }
}

/// A Hugging Face tokenizer with the page's error type.
#[derive(Clone)]
pub struct PageTokenizer(TextTokenizer);

impl std::fmt::Debug for PageTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageTokenizer({:?})", self.0)
    }
}

impl PageTokenizer {
    /// From the bytes of `tokenizer.json`; `origin` names the directory in errors.
    pub fn from_json(origin: &str, bytes: &[u8]) -> Result<PageTokenizer> {
        tokenizer_json::tokenizer_from_bytes(bytes)
            .map(|t| PageTokenizer(TextTokenizer::new(t)))
            .map_err(|why| Error::BadModelFile {
                path: format!("{origin}/tokenizer.json"),
                why,
            })
    }

    /// A prompt's ids as transformers' `tokenizer(text)` gives them (the tokenizer's special
    /// tokens added: kernels-chat's generation path, the CLI's).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        kernels_chat::prompt_ids(&self.0, text).map_err(chat_error)
    }

    /// The tokenizer kernels-chat's generation path takes.
    pub fn text(&self) -> &TextTokenizer {
        &self.0
    }

    /// The id of a token's text, when the vocabulary has it.
    pub fn token_to_id(&self, text: &str) -> Option<u32> {
        self.0.token_to_id(text)
    }

    /// Ids to text, special tokens included (the demo's end mark `$` is part of its answer).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.0.decode(ids).map_err(chat_error)
    }
}

impl Source {
    /// The demo model from its weights (`model.safetensors`, which the page fetches as a static
    /// file); its config and tokenizer are small and embedded.
    pub fn demo(weights: &[u8]) -> Result<Source> {
        Source::from_files(DEMO_ORIGIN, &demo_files(weights))
    }

    /// From a directory's files by name (the ones [`wanted`] picked). A directory holding a
    /// `.gguf` file loads that ([`Source::from_gguf`]).
    pub fn from_files(origin: &str, files: &BTreeMap<String, Vec<u8>>) -> Result<Source> {
        if let Some(name) = gguf_name(origin, files)? {
            let owner: SharedBytes = Arc::new(files.get(&name).cloned().unwrap_or_default());
            return Source::from_gguf(origin, &name, &owner, files);
        }
        let checkpoint = hf::load_checkpoint_from_map(origin, files)?;
        let config = LlamaConfig::from_json(&checkpoint.config)?;
        let tokenizer = checkpoint
            .tokenizer_json
            .as_deref()
            .ok_or_else(|| Error::Missing {
                what: "file in the model directory".into(),
                name: format!("{origin}/tokenizer.json"),
            })
            .and_then(|b| PageTokenizer::from_json(origin, b))?;
        let chat = page_chat(origin, files, &config, &tokenizer)?.map(Rc::new);
        Ok(Source {
            origin: origin.into(),
            config,
            checkpoint,
            tokenizer,
            chat,
            gguf: false,
            quantized: None,
        })
    }

    /// Quantize on load: the matrices re-encoded as `to` by kernels-core's
    /// `quantize_checkpoint` (rows that are not whole blocks fall back as the CLI's
    /// `--quantize` does). `None` and a GGUF file (which keeps its own types) change nothing
    /// and give `None`.
    pub fn quantize(&mut self, to: Option<DType>) -> Result<Option<QuantizeSummary>> {
        let Some(to) = to.filter(|_| !self.gguf) else {
            return Ok(None);
        };
        let summary = quantize_checkpoint(&mut self.checkpoint.tensors, to)?;
        self.quantized = Some(to);
        Ok(Some(summary))
    }

    /// Bytes of every tensor as loaded (what goes to the device).
    pub fn weight_bytes(&self) -> usize {
        self.checkpoint.tensors.values().map(|t| t.byte_len()).sum()
    }

    /// `weights 0.12 MB, q4_k on load: matrices 13 q5_0, 2 q4_k`: the bytes, the choice (or
    /// `as stored`, or `GGUF`), and the matrices' dtypes by count.
    pub fn weights_text(&self) -> String {
        let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
        for t in self.checkpoint.tensors.values().filter(|t| t.rank() == 2) {
            *by_type.entry(t.dtype().name()).or_default() += 1;
        }
        let mut counts: Vec<(&str, usize)> = by_type.into_iter().collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let types: Vec<String> = counts.iter().map(|(d, n)| format!("{n} {d}")).collect();
        let how = match (self.gguf, self.quantized) {
            (true, _) => "GGUF, its own types (the weights choice does not apply)".to_string(),
            (false, Some(d)) => format!("{d} on load"),
            (false, None) => "as stored".to_string(),
        };
        let mb = self.weight_bytes() as f64 / 1e6;
        let digits = if mb < 10.0 { 2 } else { 1 };
        format!(
            "weights {mb:.digits$} MB, {how}: matrices {}",
            types.join(", ")
        )
    }

    /// The weights choice in effect, for `data-quantize`: `stored`, `gguf` or the format.
    pub fn quantize_id(&self) -> &'static str {
        match (self.gguf, self.quantized) {
            (true, _) => "gguf",
            (false, Some(d)) => d.name(),
            (false, None) => "stored",
        }
    }
}

/// The one `.gguf` file among `files`, if any; two are an error.
fn gguf_name(origin: &str, files: &BTreeMap<String, Vec<u8>>) -> Result<Option<String>> {
    let mut gguf = files.keys().filter(|n| n.ends_with(".gguf"));
    match (gguf.next(), gguf.next()) {
        (Some(name), Some(other)) => Err(Error::BadModelFile {
            path: origin.into(),
            why: format!("holds two GGUF files, `{name}` and `{other}`: pick one"),
        }),
        (name, _) => Ok(name.cloned()),
    }
}

impl Source {
    /// [`Source::from_files`], taking the files: a GGUF file's bytes become the buffer its
    /// packed tensors share (no copy of the weights in the tab's memory).
    pub fn from_owned_files(origin: &str, mut files: BTreeMap<String, Vec<u8>>) -> Result<Source> {
        if let Some(name) = gguf_name(origin, &files)? {
            let owner: SharedBytes = Arc::new(files.remove(&name).unwrap_or_default());
            return Source::from_gguf(origin, &name, &owner, &files);
        }
        Source::from_files(origin, &files)
    }

    /// From a GGUF file `name` of the picked directory (kernels-core's `gguf`, as the CLI reads
    /// `--model FILE.gguf`): config from its metadata, tensors, the tokenizer from
    /// `tokenizer.ggml.*`, and the chat template from `tokenizer.chat_template` unless the
    /// directory has its own.
    pub fn from_gguf(
        origin: &str,
        name: &str,
        owner: &SharedBytes,
        files: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Source> {
        let path = format!("{origin}/{name}");
        let bytes: &[u8] = (**owner).as_ref();
        let parsed = kernels_core::gguf::GgufFile::parse(bytes, &path)?;
        // The packed tensors share `owner`'s bytes.
        let model = kernels_core::gguf::llama::load_llama_in(&parsed, Some(owner))?;
        // The file's tokenizer; else the directory's tokenizer.json (`kernels quantize` does not
        // write tokenizer.ggml.* yet).
        let tokenizer = match (model.tokenizer_json.as_deref(), files.get("tokenizer.json")) {
            (Some(b), _) => tokenizer_json::tokenizer_from_bytes(b)
                .map(|t| PageTokenizer(TextTokenizer::new(t)))
                .map_err(|why| Error::BadModelFile {
                    path: path.clone(),
                    why: format!("tokenizer.ggml.*: {why}"),
                })?,
            (None, Some(b)) => PageTokenizer::from_json(origin, b)?,
            (None, None) => {
                return Err(Error::Missing {
                    what: "tokenizer (tokenizer.ggml.* metadata, or tokenizer.json beside it)"
                        .into(),
                    name: path.clone(),
                });
            }
        };
        // The directory's small text files, and the file's template when it has none.
        let mut text_files: BTreeMap<String, Vec<u8>> = files
            .iter()
            .filter(|(n, _)| !n.ends_with(".gguf") && !n.ends_with(".safetensors"))
            .map(|(n, b)| (n.clone(), b.clone()))
            .collect();
        if let Some(t) = &model.chat_template
            && !text_files.contains_key("tokenizer_config.json")
        {
            text_files
                .entry("chat_template.jinja".into())
                .or_insert_with(|| t.clone().into_bytes());
        }
        let chat = page_chat(origin, &text_files, &model.config, &tokenizer)?.map(Rc::new);
        Ok(Source {
            origin: origin.into(),
            config: model.config.clone(),
            checkpoint: Checkpoint {
                config: model.config.to_json(),
                tensors: model.tensors,
                tokenizer_json: model.tokenizer_json,
            },
            tokenizer,
            chat,
            gguf: true,
            quantized: None,
        })
    }
}

/// The chat setup when the directory has a chat template; a template that is there but broken
/// is an error.
fn page_chat(
    origin: &str,
    files: &BTreeMap<String, Vec<u8>>,
    config: &LlamaConfig,
    tok: &PageTokenizer,
) -> Result<Option<ChatSetup>> {
    let text = |name: &str| -> Result<Option<&str>> {
        files
            .get(name)
            .map(|b| {
                std::str::from_utf8(b).map_err(|_| Error::BadModelFile {
                    path: format!("{origin}/{name}"),
                    why: "not UTF-8".into(),
                })
            })
            .transpose()
    };
    match ChatSetup::new(
        origin,
        text("tokenizer_config.json")?,
        text("chat_template.jinja")?,
        text("generation_config.json")?,
        &config.eos_token_ids,
        tok.text(),
    ) {
        Ok(setup) => Ok(Some(setup)),
        Err(kernels_chat::ChatError::NoTemplate { .. }) => Ok(None),
        Err(e) => Err(chat_error(e)),
    }
}

fn demo_files(weights: &[u8]) -> BTreeMap<String, Vec<u8>> {
    [
        ("config.json", DEMO_CONFIG.as_bytes()),
        ("model.safetensors", weights),
        ("tokenizer.json", DEMO_TOKENIZER),
    ]
    .into_iter()
    .map(|(n, b)| (n.to_string(), b.to_vec()))
    .collect()
}

/// Files of a picked directory worth reading (its top level only: `path` is the file's path
/// under the picked directory's parent, as `webkitRelativePath` gives it). Other files, however
/// large, are never read.
pub fn wanted(path: &str) -> Option<&str> {
    let mut parts = path.split('/');
    let name = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) | (Some(_), Some(name), None) => name,
        _ => return None,
    };
    let known = matches!(
        name,
        "config.json"
            | "tokenizer.json"
            | "model.safetensors.index.json"
            | "tokenizer_config.json"
            | "chat_template.jinja"
            | "generation_config.json"
    );
    (known || name.ends_with(".safetensors") || name.ends_with(".gguf")).then_some(name)
}

/// The picked directory's name, for messages.
pub fn dir_name(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

/// Why a generation ended, for the status line.
pub fn stop_text(reason: Option<&kernels_chat::Stop>) -> &'static str {
    use kernels_chat::Stop;
    match reason {
        Some(Stop::StopId(_)) => "stopped at the end token",
        Some(Stop::StopString(_)) => "stopped at a stop string",
        Some(Stop::MaxTokens) => "reached max tokens",
        Some(Stop::Context) => "the model's context is full",
        None => "stopped",
    }
}

/// The continuation in the full text `decode(prompt_ids + new_ids)`: what follows the prompt's
/// own decode, or the whole text when the decoder joined them otherwise.
pub fn continuation<'a>(full: &'a str, prompt_text: &str) -> &'a str {
    full.strip_prefix(prompt_text).unwrap_or(full)
}

/// Tokens per second, `None` when nothing was timed.
pub fn rate(tokens: usize, seconds: f64) -> Option<f64> {
    (tokens > 0 && seconds > 0.0).then(|| tokens as f64 / seconds)
}

/// `123.4 tok/s`, three decimals below 1 (`0.021 tok/s`: a large model on a software
/// adapter), or `-`.
pub fn fmt_rate(r: Option<f64>) -> String {
    match r {
        None => "-".into(),
        Some(r) if r < 1.0 => format!("{r:.3} tok/s"),
        Some(r) => format!("{r:.1} tok/s"),
    }
}

#[cfg(test)]
mod tests {
    /// The demo model's weights, which the page fetches.
    const DEMO_WEIGHTS: &[u8] = include_bytes!("../../native-cli/models/adder/model.safetensors");

    use std::rc::Rc;

    use kernels_chat::{ChatSession, Decoder, Message, Stop};
    use kernels_core::backend::now_or_never;
    use kernels_core::models::llama::{GenerateOptions, Llama, generate};
    use kernels_core::{CpuBackend, Rng};

    use super::*;

    fn answer(a: u32, b: u32) -> String {
        let digits: String = format!("{:04}", a + b).chars().rev().collect();
        format!("{digits}$")
    }

    #[test]
    fn demo_model_answers_sums_through_the_page_tokenizer() {
        let s = Source::demo(DEMO_WEIGHTS).unwrap();
        let model = Llama::from_tensors(
            s.config.clone(),
            &s.checkpoint.tensors,
            Rc::new(CpuBackend::new()),
        )
        .unwrap();
        let opts = GenerateOptions {
            max_new_tokens: 16,
            sampling: Default::default(),
            stop_tokens: s.config.eos_token_ids.clone(),
        };
        let mut rng = Rng::new(3);
        let mut right = 0;
        let problems: Vec<(u32, u32)> = (0..8)
            .map(|_| (rng.below(1000) as u32, rng.below(1000) as u32))
            .chain([(123, 456)])
            .collect();
        for &(a, b) in &problems {
            let prompt = s.tokenizer.encode(&format!("{a:03}+{b:03}=")).unwrap();
            let (ids, _) = now_or_never(generate(&model, &prompt, &opts, &mut |_, _| true))
                .unwrap()
                .unwrap();
            let text = s.tokenizer.decode(&ids).unwrap();
            right += usize::from(text == answer(a, b));
        }
        // The demo model is not perfect on every sum; it is on most (and on the page's prompt).
        assert!(right >= problems.len() - 2, "{right}/{}", problems.len());
        let prompt = s.tokenizer.encode(DEMO_PROMPT).unwrap();
        let (ids, _) = now_or_never(generate(&model, &prompt, &opts, &mut |_, _| true))
            .unwrap()
            .unwrap();
        assert_eq!(s.tokenizer.decode(&ids).unwrap(), answer(123, 456));
    }

    #[test]
    fn picked_directories_report_what_is_wrong() {
        let mut no_tok = demo_files(DEMO_WEIGHTS);
        no_tok.remove("tokenizer.json");
        let e = Source::from_files("mine", &no_tok).unwrap_err();
        assert!(e.to_string().contains("mine/tokenizer.json"), "{e}");
        let mut gpt2 = demo_files(DEMO_WEIGHTS);
        let config = DEMO_CONFIG.replace("\"llama\"", "\"gpt2\"");
        gpt2.insert("config.json".into(), config.into_bytes());
        let e = Source::from_files("mine", &gpt2).unwrap_err();
        assert!(e.to_string().contains("gpt2"), "{e}");
        let mut no_weights = demo_files(DEMO_WEIGHTS);
        no_weights.remove("model.safetensors");
        assert!(Source::from_files("mine", &no_weights).is_err());
        assert_eq!(
            Source::from_files("mine", &demo_files(DEMO_WEIGHTS))
                .unwrap()
                .origin,
            "mine"
        );
    }

    /// A directory holding the GGUF fixture (the `gqa_tied` checkpoint as llama.cpp writes
    /// it) loads the same weights as the safetensors form, with its SentencePiece tokenizer.
    #[test]
    fn a_picked_gguf_file_loads() {
        let gguf = include_bytes!("../../tests/fixtures/gguf/tiny_llama.gguf");
        let files: BTreeMap<String, Vec<u8>> = [("tiny.gguf".to_string(), gguf.to_vec())]
            .into_iter()
            .collect();
        let s = Source::from_files("mine", &files).unwrap();
        assert_eq!((s.config.vocab_size, s.config.hidden_size), (37, 32));
        assert!(s.chat.is_none());
        let st = include_bytes!("../../tests/fixtures/llama/gqa_tied/model.safetensors");
        let want = kernels_core::io::load_named(st, "model.safetensors").unwrap();
        for (name, t) in &want {
            assert_eq!(
                s.checkpoint.tensors[name].to_f32_vec().unwrap(),
                t.to_f32_vec().unwrap(),
                "{name}"
            );
        }
        // The GGUF's add_bos_token: the prompt gets its BOS, as transformers gives it.
        let ids = s.tokenizer.encode("the hat").unwrap();
        assert_eq!(ids.first(), Some(&1));
        assert_eq!(s.tokenizer.decode(&ids).unwrap(), "<s> the hat");
        assert_eq!(wanted("dir/tiny.gguf"), Some("tiny.gguf"));
        let mut two = files.clone();
        two.insert("b.gguf".into(), gguf.to_vec());
        let e = Source::from_files("mine", &two).unwrap_err();
        assert!(e.to_string().contains("two GGUF files"), "{e}");
        let cut: BTreeMap<String, Vec<u8>> = [("t.gguf".to_string(), gguf[..100].to_vec())]
            .into_iter()
            .collect();
        let e = Source::from_files("mine", &cut).unwrap_err();
        assert!(e.to_string().contains("mine/t.gguf"), "{e}");
    }

    /// The weights choice: the demo model quantized on load by kernels-core's
    /// `quantize_checkpoint` (its 96-wide rows fall back from q4_k to q5_0, as the CLI's
    /// `--quantize q4_k` does), still answering `123+456=` as `kernels generate --quantize q4_k`
    /// does (`9750$`); a GGUF file keeps its types.
    #[test]
    fn the_weights_choice_quantizes_on_load() {
        assert_eq!(parse_quantize("stored").unwrap(), None);
        assert_eq!(parse_quantize("q4_k").unwrap(), Some(DType::Q4_K));
        assert_eq!(parse_quantize("q8_0").unwrap(), Some(DType::Q8_0));
        let e = parse_quantize("q2_k").unwrap_err();
        assert!(e.to_string().contains("q2_k"), "{e}");
        let stored = Source::demo(DEMO_WEIGHTS).unwrap();
        assert_eq!(stored.quantize_id(), "stored");
        assert!(
            stored.weights_text().contains("as stored"),
            "{}",
            stored.weights_text()
        );
        for (to, want) in [(DType::Q8_0, "9750$"), (DType::Q4_K, "9750$")] {
            let mut s = Source::demo(DEMO_WEIGHTS).unwrap();
            let summary = s.quantize(Some(to)).unwrap().unwrap();
            assert_eq!(s.quantize_id(), to.name());
            assert!(
                s.weight_bytes() < stored.weight_bytes() / 3,
                "{}",
                s.weights_text()
            );
            assert_eq!(summary.bytes_after, s.weight_bytes());
            let text = s.weights_text();
            assert!(text.contains(&format!("{to} on load")), "{text}");
            if to == DType::Q4_K {
                assert!(text.contains("q5_0") && text.contains("q4_k"), "{text}");
            }
            let model = Llama::from_tensors(
                s.config.clone(),
                &s.checkpoint.tensors,
                Rc::new(CpuBackend::new()),
            )
            .unwrap();
            let opts = GenerateOptions {
                max_new_tokens: 16,
                sampling: Default::default(),
                stop_tokens: s.config.eos_token_ids.clone(),
            };
            let prompt = s.tokenizer.encode(DEMO_PROMPT).unwrap();
            let (ids, _) = now_or_never(generate(&model, &prompt, &opts, &mut |_, _| true))
                .unwrap()
                .unwrap();
            assert_eq!(s.tokenizer.decode(&ids).unwrap(), want, "{to}");
        }
        let gguf = include_bytes!("../../tests/fixtures/gguf/tiny_llama_q8_0.gguf");
        let files: BTreeMap<String, Vec<u8>> = [("t.gguf".to_string(), gguf.to_vec())]
            .into_iter()
            .collect();
        let mut g = Source::from_files("mine", &files).unwrap();
        let before = g.weight_bytes();
        assert_eq!(g.quantize(Some(DType::Q4_K)).unwrap(), None);
        assert_eq!((g.quantize_id(), g.weight_bytes()), ("gguf", before));
        assert!(g.weights_text().contains("GGUF"), "{}", g.weights_text());
    }

    /// A GGUF file without tokenizer metadata (what `kernels quantize` writes) takes the
    /// directory's tokenizer.json; with neither, the error says what is missing.
    #[test]
    fn a_gguf_without_a_tokenizer_takes_the_directory_s() {
        let demo = Source::demo(DEMO_WEIGHTS).unwrap();
        let bytes =
            kernels_core::gguf::llama::llama_to_gguf(&demo.config, &demo.checkpoint.tensors)
                .unwrap()
                .to_bytes()
                .unwrap();
        let mut files: BTreeMap<String, Vec<u8>> =
            [("model.gguf".to_string(), bytes)].into_iter().collect();
        let e = Source::from_files("mine", &files).unwrap_err();
        assert!(e.to_string().contains("tokenizer.json"), "{e}");
        files.insert("tokenizer.json".into(), DEMO_TOKENIZER.to_vec());
        let s = Source::from_files("mine", &files).unwrap();
        assert!(s.gguf);
        assert_eq!(
            s.tokenizer.encode(DEMO_PROMPT).unwrap(),
            demo.tokenizer.encode(DEMO_PROMPT).unwrap()
        );
    }

    /// The qwen2 family checkpoint (vocabulary 37, context widened) with the chat fixture's
    /// ChatML tokenizer and Qwen2.5 template: `kernels chat`'s test model.
    fn chat_files() -> BTreeMap<String, Vec<u8>> {
        let config = include_str!("../../tests/fixtures/families/qwen2/config.json").replace(
            "\"max_position_embeddings\": 64",
            "\"max_position_embeddings\": 256",
        );
        assert!(config.contains("256"), "{config}");
        [
            ("config.json", config.into_bytes()),
            (
                "model.safetensors",
                include_bytes!("../../tests/fixtures/families/qwen2/model.safetensors").to_vec(),
            ),
            (
                "tokenizer.json",
                include_bytes!("../../tests/fixtures/chat/qwen2_chat/tokenizer.json").to_vec(),
            ),
            (
                "tokenizer_config.json",
                include_bytes!("../../tests/fixtures/chat/qwen2_chat/tokenizer_config.json")
                    .to_vec(),
            ),
        ]
        .into_iter()
        .map(|(n, b)| (n.to_string(), b))
        .collect()
    }

    #[test]
    fn instruct_directories_chat_through_their_template() {
        assert!(Source::demo(DEMO_WEIGHTS).unwrap().chat.is_none());
        let s = Source::from_files("qwen2_chat", &chat_files()).unwrap();
        let chat = s.chat.clone().unwrap();
        // <|endoftext|> and <|im_end|>, as `kernels chat` finds them.
        assert_eq!(chat.end_of_turn, vec![1, 13]);
        // The page's chat mode is kernels-chat's ChatSession, as `kernels chat`.
        let messages = [Message::new("user", "hello there")];
        let prompt_text = chat.template.render(&messages, true, 0).unwrap();
        let prompt = s.tokenizer.text().encode_rendered(&prompt_text).unwrap();
        assert_eq!(
            s.tokenizer.decode(&prompt).unwrap(),
            "<|im_start|>system\nyou are qwen, created by alibaba cloud. you are a helpful \
             assistant.<|im_end|>\n<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n"
        );
        let model = Llama::from_tensors(
            s.config.clone(),
            &s.checkpoint.tensors,
            Rc::new(CpuBackend::new()),
        )
        .unwrap();
        let decoder = Decoder::new(&model, Default::default(), 0).unwrap();
        let mut session = ChatSession::new(decoder, s.tokenizer.text().clone(), chat.clone(), None);
        let mut turn = |text: &str| {
            let (mut t, report) = session.turn(text, 10, 0).unwrap();
            let mut pieces = String::new();
            while let Some(step) = now_or_never(t.step()).unwrap().unwrap() {
                pieces.push_str(&step.piece);
            }
            let (rest, reply) = t.finish().unwrap();
            pieces.push_str(&rest);
            (report, reply, pieces)
        };
        let (r1, reply, text) = turn("hello there");
        assert_eq!(r1.prompt_tokens, prompt.len());
        // The CLI's test sees this reply end its turn too.
        assert_eq!(reply.stop, Stop::StopId(13), "{:?}", reply.ids);
        let ids = &reply.ids[..reply.ids.len() - 1];
        assert_eq!(text, s.tokenizer.decode(ids).unwrap());
        assert!(!text.is_empty());
        // The second turn reuses the first's cache: prompt and reply, all but the end token.
        let (r2, _, _) = turn("what now?");
        assert_eq!(r2.reused, r1.prompt_tokens + reply.ids.len() - 1, "{r2:?}");
        assert!(r2.prefill < r1.prompt_tokens / 2, "{r2:?}");
        // The conversation outgrows the context (256 positions): the oldest messages go, the
        // chat goes on, and the template's opening is still reused from the cache.
        let long = "tell me more about the hat and the cat, ".repeat(3);
        let mut dropped = None;
        for _ in 0..20 {
            let (r, reply, text) = turn(&long);
            assert!(r.prompt_tokens + reply.ids.len() <= 257, "{r:?}");
            assert_eq!(text, reply.text);
            if r.dropped_messages > 0 {
                dropped = Some(r);
                break;
            }
        }
        let r = dropped.expect("the conversation never outgrew the context");
        assert!(r.reused > 0 && r.prefill < r.prompt_tokens, "{r:?}");
        let (after, _, _) = turn("and now?");
        assert!(after.reused > 0, "{after:?}");

        let mut broken = chat_files();
        broken.insert(
            "tokenizer_config.json".into(),
            br#"{"chat_template": "{% if %}"}"#.to_vec(),
        );
        let e = Source::from_files("mine", &broken).unwrap_err();
        assert!(e.to_string().contains("chat template"), "{e}");
        let mut base = chat_files();
        base.remove("tokenizer_config.json");
        assert!(Source::from_files("mine", &base).unwrap().chat.is_none());
    }

    #[test]
    fn only_top_level_model_files_are_read() {
        assert_eq!(
            wanted("m/tokenizer_config.json"),
            Some("tokenizer_config.json")
        );
        assert_eq!(wanted("m/chat_template.jinja"), Some("chat_template.jinja"));
        assert_eq!(wanted("m/config.json"), Some("config.json"));
        assert_eq!(
            wanted("m/model-00001-of-00002.safetensors"),
            Some("model-00001-of-00002.safetensors")
        );
        assert_eq!(wanted("tokenizer.json"), Some("tokenizer.json"));
        assert_eq!(wanted("m/sub/config.json"), None);
        assert_eq!(wanted("m/pytorch_model.bin"), None);
        assert_eq!(dir_name("m/config.json"), "m");
    }

    #[test]
    fn rates_need_tokens_and_time() {
        assert_eq!(rate(8, 0.5), Some(16.0));
        assert_eq!(rate(0, 0.5), None);
        assert_eq!(rate(3, 0.0), None);
        assert_eq!(fmt_rate(Some(16.0)), "16.0 tok/s");
        assert_eq!(fmt_rate(Some(0.0214)), "0.021 tok/s");
        assert_eq!(fmt_rate(None), "-");
    }
}
