//! A model's own chat template, rendered as transformers' `apply_chat_template` renders it.
//!
//! The template is Jinja, in `tokenizer_config.json`'s `chat_template` (a string, or a list of
//! named templates of which `default` is used) or in `chat_template.jinja` beside it (which
//! transformers 5 writes, and which wins). It is rendered with `minijinja` set up as
//! transformers sets up Jinja2: `trim_blocks` and `lstrip_blocks`, loop controls, Python's
//! string, list and dict methods (`minijinja-contrib`'s `pycompat`: `.strip()`, `.split()`,
//! `.items()`...), transformers' `tojson` (Python's `json.dumps`, not minijinja's HTML-safe
//! one), the globals `raise_exception(msg)` and `strftime_now(format)`, and the
//! variables `messages`, `add_generation_prompt`, `tools` and `documents` (none) and the special
//! tokens of `tokenizer_config.json` (`bos_token`, `eos_token`, `unk_token`, `pad_token`).

use std::collections::BTreeSet;

use minijinja::value::Value;
use minijinja::{Environment, ErrorKind};
use serde_json::Value as Json;

use crate::ChatError;
use crate::time::strftime;

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Token texts that end an assistant's turn in the common templates (ChatML, Llama 3, Gemma,
/// Phi-3, and end-of-text markers): those present in a model's vocabulary stop a reply.
pub const END_OF_TURN_TOKENS: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
];

/// The template of a model directory, compiled.
pub struct ChatTemplate {
    origin: String,
    env: Environment<'static>,
    /// Special tokens by variable name (`bos_token`...), as `tokenizer_config.json` gives them.
    special: Vec<(&'static str, String)>,
}

impl core::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .field("special", &self.special)
            .finish_non_exhaustive()
    }
}

const TEMPLATE_NAME: &str = "chat_template";

/// The work one render may do, in minijinja's fuel (about one unit per instruction). The
/// templates of Qwen2.5, Llama 3.2 and Gemma 3 spend about a hundred units per message, so this
/// is room for conversations of tens of thousands of messages, and a template that loops for
/// ever (nested `range(100000)` loops) ends in well under a second with an error naming it.
pub const TEMPLATE_FUEL: u64 = 5_000_000;
const SPECIAL_TOKENS: [&str; 4] = ["bos_token", "eos_token", "unk_token", "pad_token"];

impl ChatTemplate {
    /// From a model directory's `tokenizer_config.json` and `chat_template.jinja`, either of
    /// which may be absent; `origin` names the directory in errors. No template anywhere is
    /// [`ChatError::NoTemplate`].
    pub fn from_files(
        origin: &str,
        tokenizer_config: Option<&str>,
        chat_template_jinja: Option<&str>,
    ) -> Result<ChatTemplate, ChatError> {
        let config_path = format!("{origin}/tokenizer_config.json");
        let bad = |why: String| ChatError::BadFile {
            path: config_path.clone(),
            why,
        };
        let config: Option<Json> = tokenizer_config
            .map(|text| serde_json::from_str(text).map_err(|e| bad(e.to_string())))
            .transpose()?;
        if let Some(c) = &config
            && !c.is_object()
        {
            return Err(bad("not a JSON object".into()));
        }
        let source = match (
            chat_template_jinja,
            config.as_ref().map(|c| &c["chat_template"]),
        ) {
            (Some(jinja), _) => jinja.to_string(),
            (None, Some(Json::String(s))) => s.clone(),
            (None, Some(Json::Array(named))) => named_default(named).map_err(bad)?,
            (None, Some(Json::Null) | None) => {
                return Err(ChatError::NoTemplate {
                    origin: origin.into(),
                });
            }
            (None, Some(other)) => {
                return Err(bad(format!(
                    "`chat_template` is neither a string nor a list of templates: {other}"
                )));
            }
        };
        let mut special = Vec::new();
        if let Some(c) = &config {
            for name in SPECIAL_TOKENS {
                match &c[name] {
                    Json::Null => {}
                    Json::String(s) => special.push((name, s.clone())),
                    // An AddedToken, as older transformers wrote them.
                    Json::Object(o) => match o.get("content") {
                        Some(Json::String(s)) => special.push((name, s.clone())),
                        _ => return Err(bad(format!("`{name}` has no string `content`"))),
                    },
                    other => return Err(bad(format!("`{name}` is not a string: {other}"))),
                }
            }
        }
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| template_error(origin, &e))?;
        env.set_syntax(syntax);
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", crate::json::tojson);
        env.add_function("raise_exception", |msg: String| -> Result<Value, _> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|e| template_error(origin, &e))?;
        Ok(ChatTemplate {
            origin: origin.into(),
            env,
            special,
        })
    }

    /// The prompt for `messages`, ending with the assistant's header when
    /// `add_generation_prompt`. `now` (seconds since 1970, UTC) is what the template's
    /// `strftime_now` formats (Llama 3 puts the date in its system turn).
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        now: i64,
    ) -> Result<String, ChatError> {
        let messages: Value = messages
            .iter()
            .map(|m| {
                Value::from_pairs([
                    ("role", Value::from(m.role.as_str())),
                    ("content", Value::from(m.content.as_str())),
                ])
            })
            .collect();
        let mut vars = vec![
            ("messages", messages),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("tools", Value::from(())),
            ("documents", Value::from(())),
            (
                "strftime_now",
                Value::from_function(move |format: String| strftime(now, &format)),
            ),
        ];
        for (name, text) in &self.special {
            vars.push((name, Value::from(text.as_str())));
        }
        self.env
            .get_template(TEMPLATE_NAME)
            .and_then(|t| t.render(Value::from_pairs(vars)))
            .map_err(|e| template_error(&self.origin, &e))
    }

    /// A special token's text from `tokenizer_config.json` (`"eos_token"`...).
    pub fn special_token(&self, name: &str) -> Option<&str> {
        self.special
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t.as_str())
    }

    /// The ids that end an assistant's turn: `eos_ids` (the model config's and
    /// `generation_config.json`'s `eos_token_id`), the template's `eos_token`, and every
    /// [`END_OF_TURN_TOKENS`] text the vocabulary has (`token_id` looks a text up).
    pub fn end_of_turn_ids(
        &self,
        eos_ids: &[u32],
        token_id: &dyn Fn(&str) -> Option<u32>,
    ) -> Vec<u32> {
        let mut ids: BTreeSet<u32> = eos_ids.iter().copied().collect();
        let texts = self.special_token("eos_token").into_iter();
        ids.extend(
            texts
                .chain(END_OF_TURN_TOKENS.iter().copied())
                .filter_map(token_id),
        );
        ids.into_iter().collect()
    }
}

/// The `default` template of a list of `{"name", "template"}`.
fn named_default(named: &[Json]) -> Result<String, String> {
    let mut names = Vec::new();
    for t in named {
        let name = t["name"].as_str().unwrap_or("");
        if name == "default"
            && let Some(s) = t["template"].as_str()
        {
            return Ok(s.to_string());
        }
        names.push(name.to_string());
    }
    Err(format!(
        "`chat_template` lists templates {names:?} but none named `default`"
    ))
}

fn template_error(origin: &str, e: &minijinja::Error) -> ChatError {
    // The template's own `raise_exception` message is the detail; name the line when known.
    if e.kind() == ErrorKind::OutOfFuel {
        return ChatError::Template {
            origin: origin.into(),
            why: format!(
                "rendering did more work than the limit of {TEMPLATE_FUEL} steps (a loop that \
                 does not end?)"
            ),
        };
    }
    let mut why = match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    };
    if let Some(line) = e.line() {
        why.push_str(&format!(" (template line {line})"));
    }
    ChatError::Template {
        origin: origin.into(),
        why,
    }
}

/// `eos_token_id` of a `generation_config.json` (a number or a list; absent: none).
pub fn generation_config_eos(path: &str, text: &str) -> Result<Vec<u32>, ChatError> {
    let bad = |why: String| ChatError::BadFile {
        path: path.into(),
        why,
    };
    let v: Json = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let one = |x: &Json| {
        x.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| bad(format!("`eos_token_id` holds {x}, not a token id")))
    };
    match &v["eos_token_id"] {
        Json::Null => Ok(Vec::new()),
        Json::Array(list) => list.iter().map(one).collect(),
        x => Ok(vec![one(x)?]),
    }
}

/// `stop_strings` of a `generation_config.json` (a string or a list; absent: none), which
/// transformers' `generate` stops at.
pub fn generation_config_stop_strings(path: &str, text: &str) -> Result<Vec<String>, ChatError> {
    let bad = |why: String| ChatError::BadFile {
        path: path.into(),
        why,
    };
    let v: Json = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let one = |x: &Json| {
        x.as_str()
            .filter(|s| !s.is_empty())
            .map(String::from)
            .ok_or_else(|| bad(format!("`stop_strings` holds {x}, not a non-empty string")))
    };
    match &v["stop_strings"] {
        Json::Null => Ok(Vec::new()),
        Json::Array(list) => list.iter().map(one).collect(),
        x => Ok(vec![one(x)?]),
    }
}
