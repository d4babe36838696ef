//! [`LlamaConfig`]: the fields of Hugging Face's `config.json` the architecture uses, their
//! checks (checked arithmetic, so a hostile file is an error, never an abort), the JSON
//! transformers writes, and the checkpoint's tensor names and shapes.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::op::{RMS_NORM_EPS, ROPE_THETA};

/// Mirrors Hugging Face `LlamaConfig` (the fields the architecture uses).
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub vocab_size: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    /// `hidden_size / num_attention_heads` unless the config says otherwise.
    pub head_dim: usize,
    pub bos_token_id: Option<u32>,
    /// Tokens that end generation (HF allows one id or a list).
    pub eos_token_ids: Vec<u32>,
}

fn bad_config(why: String) -> Error {
    Error::BadModelFile {
        path: "config.json".into(),
        why,
    }
}

fn get_usize(obj: &Map<String, Value>, key: &str, default: Option<usize>) -> Result<usize> {
    match obj.get(key) {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| bad_config(format!("`{key}` must be a non-negative integer, got {n}"))),
        Some(Value::Null) | None => default.ok_or_else(|| bad_config(format!("missing `{key}`"))),
        Some(other) => Err(bad_config(format!(
            "`{key}` must be an integer, got {other}"
        ))),
    }
}

fn get_f32(obj: &Map<String, Value>, key: &str, default: f32) -> Result<f32> {
    match obj.get(key) {
        Some(Value::Number(n)) => n
            .as_f64()
            .map(|v| v as f32)
            .filter(|v| v.is_finite())
            .ok_or_else(|| bad_config(format!("`{key}` must be a finite number, got {n}"))),
        Some(Value::Null) | None => Ok(default),
        Some(other) => Err(bad_config(format!("`{key}` must be a number, got {other}"))),
    }
}

fn get_ids(obj: &Map<String, Value>, key: &str) -> Result<Vec<u32>> {
    let as_id = |v: &Value| {
        v.as_u64()
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| bad_config(format!("`{key}` must hold token ids, got {v}")))
    };
    match obj.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(as_id).collect(),
        Some(v) => Ok(vec![as_id(v)?]),
    }
}

impl LlamaConfig {
    /// Parses a Hugging Face `config.json`. A model that is not llama (by `model_type` or
    /// `architectures`) or uses a feature this implementation lacks (rope scaling, biases, an
    /// activation other than SiLU) is refused by name.
    pub fn from_json(text: &str) -> Result<LlamaConfig> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| bad_config(format!("not valid JSON: {e}")))?;
        let Value::Object(obj) = v else {
            return Err(bad_config("expected a JSON object".into()));
        };
        if let Some(t) = obj.get("model_type").and_then(Value::as_str)
            && t != "llama"
        {
            return Err(bad_config(format!(
                "unsupported architecture: model_type `{t}` (only `llama` is implemented)"
            )));
        }
        if let Some(Value::Array(archs)) = obj.get("architectures") {
            for a in archs {
                let name = a.as_str().unwrap_or("");
                if name != "LlamaForCausalLM" {
                    return Err(bad_config(format!(
                        "unsupported architecture `{a}` (only LlamaForCausalLM is implemented)"
                    )));
                }
            }
        }
        if let Some(act) = obj.get("hidden_act").and_then(Value::as_str)
            && act != "silu"
        {
            return Err(bad_config(format!(
                "unsupported hidden_act `{act}` (llama uses silu)"
            )));
        }
        for flag in ["attention_bias", "mlp_bias"] {
            if obj.get(flag).and_then(Value::as_bool) == Some(true) {
                return Err(bad_config(format!("unsupported: `{flag}` is true")));
            }
        }
        if let Some(rs) = obj.get("rope_scaling")
            && !rs.is_null()
        {
            return Err(bad_config(format!("unsupported: rope_scaling {rs}")));
        }
        // transformers >= 5 writes `rope_parameters: {rope_theta, rope_type}` instead of
        // `rope_theta`.
        let mut rope_theta = get_f32(&obj, "rope_theta", ROPE_THETA)?;
        if let Some(Value::Object(rp)) = obj.get("rope_parameters") {
            if let Some(t) = rp.get("rope_type").and_then(Value::as_str)
                && t != "default"
            {
                return Err(bad_config(format!(
                    "unsupported: rope_parameters.rope_type `{t}` (only `default`)"
                )));
            }
            rope_theta = get_f32(rp, "rope_theta", rope_theta)?;
        }
        let hidden_size = get_usize(&obj, "hidden_size", None)?;
        let num_attention_heads = get_usize(&obj, "num_attention_heads", None)?;
        let head_dim_default = hidden_size.checked_div(num_attention_heads).unwrap_or(0);
        let cfg = LlamaConfig {
            hidden_size,
            intermediate_size: get_usize(&obj, "intermediate_size", None)?,
            num_hidden_layers: get_usize(&obj, "num_hidden_layers", None)?,
            num_attention_heads,
            num_key_value_heads: get_usize(&obj, "num_key_value_heads", Some(num_attention_heads))?,
            vocab_size: get_usize(&obj, "vocab_size", None)?,
            rms_norm_eps: get_f32(&obj, "rms_norm_eps", RMS_NORM_EPS)?,
            rope_theta,
            max_position_embeddings: get_usize(&obj, "max_position_embeddings", Some(2048))?,
            tie_word_embeddings: obj
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            head_dim: get_usize(&obj, "head_dim", Some(head_dim_default))?,
            bos_token_id: get_ids(&obj, "bos_token_id")?.first().copied(),
            eos_token_ids: get_ids(&obj, "eos_token_id")?,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the sizes fit together (heads divide, head_dim even, nothing empty).
    pub fn validate(&self) -> Result<()> {
        let sizes = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("vocab_size", self.vocab_size),
            ("head_dim", self.head_dim),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        for (name, v) in sizes {
            if v == 0 {
                return Err(bad_config(format!("`{name}` must be > 0")));
            }
        }
        if !self
            .num_attention_heads
            .is_multiple_of(self.num_key_value_heads)
        {
            return Err(bad_config(format!(
                "num_attention_heads = {} is not a multiple of num_key_value_heads = {}",
                self.num_attention_heads, self.num_key_value_heads
            )));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(bad_config(format!(
                "head_dim = {} must be even for rotary embeddings",
                self.head_dim
            )));
        }
        if !(self.rms_norm_eps > 0.0 && self.rope_theta > 0.0) {
            return Err(bad_config(format!(
                "rms_norm_eps = {} and rope_theta = {} must be > 0",
                self.rms_norm_eps, self.rope_theta
            )));
        }
        self.checked_num_parameters()?;
        Ok(())
    }

    /// How many tensors a checkpoint of this config holds: nine per layer, the embedding, the
    /// final norm, and `lm_head` when untied. Checked, and cheap: a loader compares it with
    /// what a file holds before listing the names (`num_hidden_layers = 10^9` must not allocate
    /// gigabytes of names first).
    pub fn tensor_count(&self) -> Result<usize> {
        self.num_hidden_layers
            .checked_mul(9)
            .and_then(|n| n.checked_add(if self.tie_word_embeddings { 2 } else { 3 }))
            .ok_or_else(|| {
                bad_config(format!(
                    "num_hidden_layers = {} overflows the tensor count",
                    self.num_hidden_layers
                ))
            })
    }

    /// [`LlamaConfig::num_parameters`] with checked arithmetic: an error naming the fields when
    /// a product overflows (`num_attention_heads * head_dim`, say).
    pub fn checked_num_parameters(&self) -> Result<usize> {
        let over = |what: &str| {
            bad_config(format!(
                "{what} overflows (hidden_size = {}, intermediate_size = {}, num_hidden_layers = {}, \
                 num_attention_heads = {}, num_key_value_heads = {}, head_dim = {}, vocab_size = {})",
                self.hidden_size,
                self.intermediate_size,
                self.num_hidden_layers,
                self.num_attention_heads,
                self.num_key_value_heads,
                self.head_dim,
                self.vocab_size
            ))
        };
        let mul = |a: usize, b: usize, what: &str| a.checked_mul(b).ok_or_else(|| over(what));
        let (h, i, v) = (self.hidden_size, self.intermediate_size, self.vocab_size);
        let q = mul(
            self.num_attention_heads,
            self.head_dim,
            "num_attention_heads * head_dim",
        )?;
        let kv = mul(
            self.num_key_value_heads,
            self.head_dim,
            "num_key_value_heads * head_dim",
        )?;
        let per_layer = [
            mul(q, h, "q_proj")?,
            mul(kv, h, "k_proj")?,
            mul(kv, h, "v_proj")?,
            mul(h, q, "o_proj")?,
            mul(mul(i, h, "gate_proj")?, 3, "the MLP")?,
            mul(h, 2, "the layer norms")?,
        ]
        .into_iter()
        .try_fold(0usize, |a, b| a.checked_add(b))
        .ok_or_else(|| over("a layer's parameter count"))?;
        let embed = mul(v, h, "embed_tokens")?;
        let head = if self.tie_word_embeddings { 0 } else { embed };
        mul(
            per_layer,
            self.num_hidden_layers,
            "the layers' parameter count",
        )?
        .checked_add(embed)
        .and_then(|n| n.checked_add(head))
        .and_then(|n| n.checked_add(h))
        .ok_or_else(|| over("the parameter count"))
    }

    /// The config as Hugging Face writes it (`transformers` loads it as a `LlamaConfig`).
    pub fn to_json(&self) -> String {
        let eos: Value = match self.eos_token_ids.as_slice() {
            [] => Value::Null,
            [one] => Value::from(*one),
            many => Value::from(many.to_vec()),
        };
        let v = serde_json::json!({
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_act": "silu",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": false,
            "mlp_bias": false,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "torch_dtype": "float32",
        });
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }

    /// Every tensor of a checkpoint: Hugging Face name and shape, in load order.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        self.tensor_shapes_iter().collect()
    }

    /// [`LlamaConfig::tensor_shapes`] made one at a time (a loader can stop at the first name
    /// a file lacks without listing a hostile config's billions).
    pub fn tensor_shapes_iter(&self) -> impl Iterator<Item = (String, Vec<usize>)> + '_ {
        let (h, i, v) = (self.hidden_size, self.intermediate_size, self.vocab_size);
        let q = self.num_attention_heads.saturating_mul(self.head_dim);
        let kv = self.num_key_value_heads.saturating_mul(self.head_dim);
        let layer = move |l: usize| {
            let p = format!("model.layers.{l}");
            [
                (format!("{p}.input_layernorm.weight"), vec![h]),
                (format!("{p}.self_attn.q_proj.weight"), vec![q, h]),
                (format!("{p}.self_attn.k_proj.weight"), vec![kv, h]),
                (format!("{p}.self_attn.v_proj.weight"), vec![kv, h]),
                (format!("{p}.self_attn.o_proj.weight"), vec![h, q]),
                (format!("{p}.post_attention_layernorm.weight"), vec![h]),
                (format!("{p}.mlp.gate_proj.weight"), vec![i, h]),
                (format!("{p}.mlp.up_proj.weight"), vec![i, h]),
                (format!("{p}.mlp.down_proj.weight"), vec![h, i]),
            ]
        };
        let head = (!self.tie_word_embeddings).then(|| ("lm_head.weight".to_string(), vec![v, h]));
        core::iter::once(("model.embed_tokens.weight".to_string(), vec![v, h]))
            .chain((0..self.num_hidden_layers).flat_map(layer))
            .chain(core::iter::once(("model.norm.weight".to_string(), vec![h])))
            .chain(head)
    }

    /// Number of scalar parameters.
    pub fn num_parameters(&self) -> usize {
        self.tensor_shapes()
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum()
    }
}
