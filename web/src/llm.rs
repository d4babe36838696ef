//! The transformer section: a llama checkpoint (the embedded demo model, or a Hugging Face
//! directory the visitor picks), its tokenizer, and the throughput figures. Plain data, tested
//! natively; the browser glue is `llm::dom` (wasm32 only).
//!
//! Checkpoints load through kernels-core's `models::hf`, the loader the CLI uses, and
//! `tokenizer.json` through the `tokenizers` crate, as in the CLI (built for wasm32 with its
//! `unstable_wasm` feature: the pure-Rust regex engine, no C), so any Hugging Face tokenizer
//! works in the page too.

#[cfg(target_arch = "wasm32")]
pub(crate) mod dom;

use std::collections::BTreeMap;

use kernels_core::models::hf::{self, Checkpoint};
use kernels_core::models::llama::{LlamaConfig, StopReason};
use kernels_core::{Error, Result};

// The loader the `kernels` tool uses (one implementation; see the file).
#[path = "../../native-cli/src/tokenizer_json.rs"]
mod tokenizer_json;

/// The demo model's prompt when the page opens: `aaa+bbb=`, answered least-significant digit
/// first (`9750$`).
pub const DEMO_PROMPT: &str = "123+456=";
pub const DEMO_ORIGIN: &str = "demo model (native-cli/models/adder, embedded)";
const DEMO_CONFIG: &str = include_str!("../../native-cli/models/adder/config.json");
const DEMO_WEIGHTS: &[u8] = include_bytes!("../../native-cli/models/adder/model.safetensors");
const DEMO_TOKENIZER: &[u8] = include_bytes!("../../native-cli/models/adder/tokenizer.json");

/// A checkpoint the page can run: the config parsed (so an unsupported architecture is
/// refused before any upload), the tensors on the host, the tokenizer.
#[derive(Debug, Clone)]
pub struct Source {
    pub origin: String,
    pub config: LlamaConfig,
    pub checkpoint: Checkpoint,
    pub tokenizer: PageTokenizer,
}

/// A Hugging Face tokenizer with the page's error type.
#[derive(Clone)]
pub struct PageTokenizer(tokenizers::Tokenizer);

impl std::fmt::Debug for PageTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageTokenizer({} tokens)", self.0.get_vocab_size(true))
    }
}

impl PageTokenizer {
    /// From the bytes of `tokenizer.json`; `origin` names the directory in errors.
    pub fn from_json(origin: &str, bytes: &[u8]) -> Result<PageTokenizer> {
        tokenizer_json::tokenizer_from_bytes(bytes)
            .map(PageTokenizer)
            .map_err(|why| Error::BadModelFile {
                path: format!("{origin}/tokenizer.json"),
                why,
            })
    }

    /// Text to ids (no special tokens added: the prompt is the model's input as typed).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.0
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Backend {
                backend: "tokenizers".into(),
                why: e.to_string(),
            })
    }

    /// Ids to text, special tokens included (the demo's end mark `$` is part of its answer).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.0.decode(ids, false).map_err(|e| Error::Backend {
            backend: "tokenizers".into(),
            why: e.to_string(),
        })
    }
}

impl Source {
    pub fn demo() -> Result<Source> {
        Source::from_files(DEMO_ORIGIN, &demo_files())
    }

    /// From a directory's files by name (the ones [`wanted`] picked).
    pub fn from_files(origin: &str, files: &BTreeMap<String, Vec<u8>>) -> Result<Source> {
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
        Ok(Source {
            origin: origin.into(),
            config,
            checkpoint,
            tokenizer,
        })
    }
}

fn demo_files() -> BTreeMap<String, Vec<u8>> {
    [
        ("config.json", DEMO_CONFIG.as_bytes()),
        ("model.safetensors", DEMO_WEIGHTS),
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
        "config.json" | "tokenizer.json" | "model.safetensors.index.json"
    );
    (known || name.ends_with(".safetensors")).then_some(name)
}

/// The picked directory's name, for messages.
pub fn dir_name(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

/// Why a generation ended, for the status line.
pub fn stop_text(reason: Option<StopReason>) -> &'static str {
    match reason {
        Some(StopReason::StopToken) => "stopped at the end token",
        Some(StopReason::MaxTokens) => "reached max tokens",
        Some(StopReason::MaxPositions) => "the model's context is full",
        Some(StopReason::Callback) | None => "stopped",
    }
}

/// Tokens per second, `None` when nothing was timed.
pub fn rate(tokens: usize, seconds: f64) -> Option<f64> {
    (tokens > 0 && seconds > 0.0).then(|| tokens as f64 / seconds)
}

/// `123.4 tok/s`, or `-`.
pub fn fmt_rate(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{r:.1} tok/s"))
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

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
        let s = Source::demo().unwrap();
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
        let mut no_tok = demo_files();
        no_tok.remove("tokenizer.json");
        let e = Source::from_files("mine", &no_tok).unwrap_err();
        assert!(e.to_string().contains("mine/tokenizer.json"), "{e}");
        let mut gpt2 = demo_files();
        let config = DEMO_CONFIG.replace("\"llama\"", "\"gpt2\"");
        gpt2.insert("config.json".into(), config.into_bytes());
        let e = Source::from_files("mine", &gpt2).unwrap_err();
        assert!(e.to_string().contains("gpt2"), "{e}");
        let mut no_weights = demo_files();
        no_weights.remove("model.safetensors");
        assert!(Source::from_files("mine", &no_weights).is_err());
        assert_eq!(
            Source::from_files("mine", &demo_files()).unwrap().origin,
            "mine"
        );
    }

    #[test]
    fn only_top_level_model_files_are_read() {
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
        assert_eq!(fmt_rate(None), "-");
    }
}
