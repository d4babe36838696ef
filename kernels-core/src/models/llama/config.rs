//! [`LlamaConfig`]: the fields of Hugging Face's `config.json` the architecture uses, their
//! checks (checked arithmetic, so a hostile file is an error, never an abort), the JSON
//! transformers writes, and the checkpoint's tensor names and shapes.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::op::{Op, RopeScaling};

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
    /// What the family does differently from plain llama ([`Variant::default`]: nothing).
    pub variant: Variant,
}

/// The MLP's gate activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MlpAct {
    /// `silu(gate) * up` (llama, Qwen, Mistral, Phi-3).
    #[default]
    Silu,
    /// `gelu_tanh(gate) * up` (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

/// Hugging Face's `rope_parameters.rope_type` and its fields.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum RopeKind {
    #[default]
    Default,
    /// Frequencies divided by `factor`.
    Linear { factor: f32 },
    /// NTK-aware: past `max_position_embeddings` the base grows with the sequence length.
    Dynamic { factor: f32 },
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position_embeddings: usize,
    },
    /// Its attention factor scales cos and sin, so the attention scores by its square.
    Yarn {
        factor: f32,
        beta_fast: f32,
        beta_slow: f32,
        original_max_position_embeddings: usize,
        attention_factor: f32,
    },
}

/// One set of rotary parameters: a base and a scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeParams {
    pub theta: f32,
    pub kind: RopeKind,
}

impl RopeParams {
    /// The `rope` op for positions `offset..offset + seq` of a sequence `total` long
    /// (`dynamic` scaling reads it), `head_dim` wide, `max_positions` the model's
    /// `max_position_embeddings`.
    pub fn op(&self, offset: usize, total: usize, head_dim: usize, max_positions: usize) -> Op {
        let plain = |theta: f32| Op::rope(theta, offset, false);
        match self.kind {
            RopeKind::Default => plain(self.theta),
            RopeKind::Dynamic { factor } => {
                // transformers' _compute_dynamic_ntk_parameters with seq_len = total.
                let seq = total.max(max_positions) as f64;
                let (f, d) = (f64::from(factor), head_dim as f64);
                let grow = f * seq / max_positions as f64 - (f - 1.0);
                let theta = f64::from(self.theta) * libm::pow(grow, d / (d - 2.0));
                plain(theta as f32)
            }
            RopeKind::Linear { factor } => Op::Rope {
                theta: self.theta,
                offset,
                interleaved: false,
                scaling: RopeScaling::Linear,
                factor,
                low: 1.0,
                high: 4.0,
                original_context: 0,
            },
            RopeKind::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => Op::Rope {
                theta: self.theta,
                offset,
                interleaved: false,
                scaling: RopeScaling::Llama3,
                factor,
                low: low_freq_factor,
                high: high_freq_factor,
                original_context: original_max_position_embeddings,
            },
            RopeKind::Yarn {
                factor,
                beta_fast,
                beta_slow,
                original_max_position_embeddings,
                ..
            } => Op::Rope {
                theta: self.theta,
                offset,
                interleaved: false,
                scaling: RopeScaling::Yarn,
                factor,
                low: beta_slow,
                high: beta_fast,
                original_context: original_max_position_embeddings,
            },
        }
    }

    /// What the rotation multiplies q . k by (yarn's attention factor, squared); 1 otherwise.
    pub fn score_factor(&self) -> f32 {
        match self.kind {
            RopeKind::Yarn {
                attention_factor, ..
            } => attention_factor * attention_factor,
            _ => 1.0,
        }
    }
}

/// The differences between the llama-shaped families, as data: the decoder reads these and
/// nothing else about the family.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    /// `model_type`, as the config names it (for messages and `to_json`).
    pub model_type: String,
    /// Rotary scaling of every layer (of the full-attention layers when `local_rope` is set).
    pub rope: RopeKind,
    /// Gemma 3: the sliding layers' own rotary parameters.
    pub local_rope: Option<RopeParams>,
    /// Qwen2: biases on q, k and v.
    pub qkv_bias: bool,
    /// Qwen3, Gemma 3: RMSNorm of each query and key head (`q_norm`, `k_norm`, `[head_dim]`).
    pub qk_norm: bool,
    /// Phi-3: the checkpoint holds `qkv_proj` and `gate_up_proj`, split at load.
    pub fused_projections: bool,
    /// Gemma: RMSNorm scales by `1 + weight` (folded into the weights at load).
    pub norm_plus_one: bool,
    /// Gemma 3: four norms per layer (the attention and MLP outputs are normed too).
    pub sandwich_norms: bool,
    /// Gemma: embeddings scaled by `sqrt(hidden_size)`.
    pub scale_embeddings: bool,
    pub mlp_act: MlpAct,
    /// Gemma 3: scores scaled by `query_pre_attn_scalar^-0.5` instead of `head_dim^-0.5`.
    pub query_pre_attn_scalar: Option<f32>,
    /// Sliding-window attention: each query sees its last `sliding_window` keys...
    pub sliding_window: Option<usize>,
    /// ... in the layers marked here (`layer_types` = `sliding_attention`); empty: every layer.
    pub sliding_layers: Vec<bool>,
}

impl Default for Variant {
    fn default() -> Self {
        Variant {
            model_type: "llama".into(),
            rope: RopeKind::Default,
            local_rope: None,
            qkv_bias: false,
            qk_norm: false,
            fused_projections: false,
            norm_plus_one: false,
            sandwich_norms: false,
            scale_embeddings: false,
            mlp_act: MlpAct::Silu,
            query_pre_attn_scalar: None,
            sliding_window: None,
            sliding_layers: Vec::new(),
        }
    }
}

impl LlamaConfig {
    /// The sliding window of layer `l`, if it has one.
    pub fn window(&self, l: usize) -> Option<usize> {
        let v = &self.variant;
        let w = v.sliding_window?;
        (v.sliding_layers.is_empty() || v.sliding_layers.get(l) == Some(&true)).then_some(w)
    }

    /// The rotary parameters of layer `l` (Gemma 3's sliding layers have their own).
    pub fn rope(&self, l: usize) -> RopeParams {
        match (self.variant.local_rope, self.window(l)) {
            (Some(local), Some(_)) => local,
            _ => RopeParams {
                theta: self.rope_theta,
                kind: self.variant.rope,
            },
        }
    }

    /// The softmax scale of the attention scores (`None`: the op's `1/sqrt(head_dim)`).
    pub fn attention_scale(&self, l: usize) -> Option<f32> {
        let f = self.rope(l).score_factor();
        let base = match self.variant.query_pre_attn_scalar {
            Some(q) => 1.0 / libm::sqrtf(q),
            None if f == 1.0 => return None,
            None => (1.0 / libm::sqrt(self.head_dim as f64)) as f32,
        };
        Some(base * f)
    }

    /// Positions a sequence may hold: `max_position_embeddings`, or, with `dynamic` rope
    /// scaling (which exists to go past it), `factor` times that.
    pub fn max_positions(&self) -> usize {
        match self.variant.rope {
            RopeKind::Dynamic { factor } if factor > 1.0 => {
                (self.max_position_embeddings as f64 * f64::from(factor)) as usize
            }
            _ => self.max_position_embeddings,
        }
    }
}

pub(super) fn bad_config(why: String) -> Error {
    Error::BadModelFile {
        path: "config.json".into(),
        why,
    }
}

impl LlamaConfig {
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
        let v = &self.variant;
        if !v.sliding_layers.is_empty() && v.sliding_layers.len() != self.num_hidden_layers {
            return Err(bad_config(format!(
                "layer_types lists {} layers, num_hidden_layers = {}",
                v.sliding_layers.len(),
                self.num_hidden_layers
            )));
        }
        if let Some(local) = v.local_rope
            && (local.theta.is_nan() || local.theta <= 0.0)
        {
            return Err(bad_config(format!(
                "the sliding layers' rope_theta = {} must be > 0",
                local.theta
            )));
        }
        if matches!(v.rope, RopeKind::Dynamic { .. }) && self.head_dim <= 2 {
            return Err(bad_config(format!(
                "dynamic rope scaling needs head_dim > 2, got {}",
                self.head_dim
            )));
        }
        self.checked_num_parameters()?;
        Ok(())
    }

    /// Tensors per layer in a checkpoint: nine, plus the q/k/v biases, the q/k norms and
    /// Gemma's two extra norms, less two for Phi-3's fused projections.
    fn tensors_per_layer(&self) -> usize {
        let v = &self.variant;
        9 + if v.qkv_bias { 3 } else { 0 }
            + if v.qk_norm { 2 } else { 0 }
            + if v.sandwich_norms { 2 } else { 0 }
            - if v.fused_projections { 3 } else { 0 }
    }

    /// How many tensors a checkpoint of this config holds: those of each layer, the
    /// embedding, the final norm, and `lm_head` when untied. Checked, and cheap: a loader
    /// compares it with what a file holds before listing the names (`num_hidden_layers = 10^9`
    /// must not allocate gigabytes of names first).
    pub fn tensor_count(&self) -> Result<usize> {
        self.num_hidden_layers
            .checked_mul(self.tensors_per_layer())
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
        let var = &self.variant;
        let norms = if var.sandwich_norms { 4 } else { 2 };
        let qk_norms = if var.qk_norm { 2 } else { 0 };
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
            mul(h, norms, "the layer norms")?,
            mul(self.head_dim, qk_norms, "the q/k norms")?,
            if var.qkv_bias {
                q.checked_add(kv)
                    .and_then(|n| n.checked_add(kv))
                    .ok_or_else(|| over("the biases"))?
            } else {
                0
            },
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

    /// Every parameter of the model: Hugging Face name and shape, in load order. The same as
    /// the checkpoint's tensors ([`LlamaConfig::checkpoint_shapes_iter`]) except for Phi-3,
    /// whose fused `qkv_proj` and `gate_up_proj` are split into these at load.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        self.tensor_shapes_iter().collect()
    }

    /// [`LlamaConfig::tensor_shapes`] made one at a time (a loader can stop at the first name
    /// a file lacks without listing a hostile config's billions).
    pub fn tensor_shapes_iter(&self) -> impl Iterator<Item = (String, Vec<usize>)> + '_ {
        self.shapes_iter(false)
    }

    /// The tensors a checkpoint of this config holds, by Hugging Face name, in load order.
    pub fn checkpoint_shapes_iter(&self) -> impl Iterator<Item = (String, Vec<usize>)> + '_ {
        self.shapes_iter(self.variant.fused_projections)
    }

    fn shapes_iter(&self, fused: bool) -> impl Iterator<Item = (String, Vec<usize>)> + '_ {
        let (h, i, v) = (self.hidden_size, self.intermediate_size, self.vocab_size);
        let d = self.head_dim;
        let q = self.num_attention_heads.saturating_mul(d);
        let kv = self.num_key_value_heads.saturating_mul(d);
        let var = &self.variant;
        let layer = move |l: usize| {
            let p = format!("model.layers.{l}");
            let mut t: Vec<(String, Vec<usize>)> =
                vec![(format!("{p}.input_layernorm.weight"), vec![h])];
            if fused {
                let qkv = q.saturating_add(kv.saturating_mul(2));
                t.push((format!("{p}.self_attn.qkv_proj.weight"), vec![qkv, h]));
            } else {
                for (n, rows) in [("q", q), ("k", kv), ("v", kv)] {
                    t.push((format!("{p}.self_attn.{n}_proj.weight"), vec![rows, h]));
                    if var.qkv_bias {
                        t.push((format!("{p}.self_attn.{n}_proj.bias"), vec![rows]));
                    }
                }
            }
            t.push((format!("{p}.self_attn.o_proj.weight"), vec![h, q]));
            if var.qk_norm {
                t.push((format!("{p}.self_attn.q_norm.weight"), vec![d]));
                t.push((format!("{p}.self_attn.k_norm.weight"), vec![d]));
            }
            t.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
            if var.sandwich_norms {
                t.push((format!("{p}.pre_feedforward_layernorm.weight"), vec![h]));
                t.push((format!("{p}.post_feedforward_layernorm.weight"), vec![h]));
            }
            if fused {
                t.push((
                    format!("{p}.mlp.gate_up_proj.weight"),
                    vec![i.saturating_mul(2), h],
                ));
            } else {
                t.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
                t.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
            }
            t.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
            t
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
