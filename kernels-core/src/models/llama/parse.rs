//! [`LlamaConfig::from_json`]: a Hugging Face `config.json` of one of the llama-shaped families
//! (Llama 1-3, Qwen2/2.5, Qwen3, Mistral, Phi-3, Gemma 3 text), as transformers 5 writes it
//! (`rope_parameters`) or as older versions did (`rope_theta`, `rope_scaling`), read into a
//! [`LlamaConfig`] and its [`Variant`].
//!
//! Every field a family defines that changes the model is either implemented or refused by
//! name: nothing is ignored silently.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use serde_json::{Map, Value};

use super::config::{LlamaConfig, MlpAct, RopeKind, RopeParams, Variant, bad_config};
use crate::error::Result;
use crate::op::{RMS_NORM_EPS, ROPE_THETA};

type Obj = Map<String, Value>;

fn get_usize(obj: &Obj, key: &str, default: Option<usize>) -> Result<usize> {
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

fn get_opt_f32(obj: &Obj, key: &str) -> Result<Option<f32>> {
    match obj.get(key) {
        Some(Value::Number(n)) => n
            .as_f64()
            .map(|v| v as f32)
            .filter(|v| v.is_finite())
            .map(Some)
            .ok_or_else(|| bad_config(format!("`{key}` must be a finite number, got {n}"))),
        Some(Value::Null) | None => Ok(None),
        Some(other) => Err(bad_config(format!("`{key}` must be a number, got {other}"))),
    }
}

fn get_f32(obj: &Obj, key: &str, default: f32) -> Result<f32> {
    Ok(get_opt_f32(obj, key)?.unwrap_or(default))
}

fn get_ids(obj: &Obj, key: &str) -> Result<Vec<u32>> {
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

fn get_bool(obj: &Obj, key: &str) -> bool {
    obj.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// The families: `model_type`, its class in `architectures`, and what it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Llama,
    Qwen2,
    Qwen3,
    Mistral,
    Phi3,
    Gemma3,
}

const FAMILIES: [(&str, &str, Family); 6] = [
    ("llama", "LlamaForCausalLM", Family::Llama),
    ("qwen2", "Qwen2ForCausalLM", Family::Qwen2),
    ("qwen3", "Qwen3ForCausalLM", Family::Qwen3),
    ("mistral", "MistralForCausalLM", Family::Mistral),
    ("phi3", "Phi3ForCausalLM", Family::Phi3),
    ("gemma3_text", "Gemma3ForCausalLM", Family::Gemma3),
];

fn supported() -> String {
    FAMILIES
        .iter()
        .map(|(t, _, _)| format!("`{t}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn family(obj: &Obj) -> Result<Family> {
    let by_type = match obj.get("model_type").and_then(Value::as_str) {
        Some(t) => Some(
            FAMILIES
                .iter()
                .find(|(name, _, _)| *name == t)
                .map(|&(_, _, f)| (t, f))
                .ok_or_else(|| {
                    bad_config(format!(
                        "unsupported architecture: model_type `{t}` (implemented: {})",
                        supported()
                    ))
                })?,
        ),
        None => None,
    };
    let mut by_arch = None;
    if let Some(Value::Array(archs)) = obj.get("architectures") {
        for a in archs {
            let name = a.as_str().unwrap_or("");
            let f = FAMILIES
                .iter()
                .find(|(_, class, _)| *class == name)
                .map(|&(_, _, f)| (name, f))
                .ok_or_else(|| {
                    bad_config(format!(
                        "unsupported architecture `{a}` (implemented: {})",
                        FAMILIES
                            .iter()
                            .map(|(_, c, _)| *c)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            by_arch = Some(f);
        }
    }
    match (by_type, by_arch) {
        (Some((t, ft)), Some((a, fa))) if ft != fa => Err(bad_config(format!(
            "model_type `{t}` and architectures `{a}` name different families"
        ))),
        (Some((_, f)), _) | (None, Some((_, f))) => Ok(f),
        (None, None) => Ok(Family::Llama),
    }
}

/// `Err` naming `field` when `obj[field]` is present, not null and not `allowed`.
fn refuse_unless(obj: &Obj, field: &str, allowed: &[Value]) -> Result<()> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(()),
        Some(v) if allowed.contains(v) => Ok(()),
        Some(v) => Err(bad_config(format!(
            "unsupported: `{field}` = {v} (not implemented)"
        ))),
    }
}

/// One `rope_parameters` object (or a legacy `rope_scaling` with `rope_theta` beside it).
fn rope_params(rp: &Obj, theta: f32, max_positions: usize, where_: &str) -> Result<RopeParams> {
    let theta = get_f32(rp, "rope_theta", theta)?;
    refuse_unless(
        rp,
        "partial_rotary_factor",
        &[Value::from(1.0), Value::from(1)],
    )
    .map_err(|_| {
        bad_config(format!(
            "unsupported: `{where_}.partial_rotary_factor` != 1"
        ))
    })?;
    let kind_name = rp
        .get("rope_type")
        .or_else(|| rp.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let factor = || -> Result<f32> {
        get_opt_f32(rp, "factor")?
            .filter(|f| *f > 0.0)
            .ok_or_else(|| bad_config(format!("`{where_}.factor` must be a number > 0")))
    };
    let original = || {
        get_usize(rp, "original_max_position_embeddings", None)
            .map_err(|e| bad_config(format!("`{where_}`: {e}")))
    };
    let kind = match kind_name {
        "default" => RopeKind::Default,
        "linear" => RopeKind::Linear { factor: factor()? },
        "dynamic" => RopeKind::Dynamic { factor: factor()? },
        "llama3" => RopeKind::Llama3 {
            factor: factor()?,
            low_freq_factor: get_f32(rp, "low_freq_factor", 1.0)?,
            high_freq_factor: get_f32(rp, "high_freq_factor", 4.0)?,
            original_max_position_embeddings: original()?,
        },
        "yarn" => {
            refuse_unless(rp, "truncate", &[Value::Bool(true)])?;
            for f in ["mscale", "mscale_all_dim"] {
                if rp.get(f).is_some_and(|v| !v.is_null()) {
                    return Err(bad_config(format!(
                        "unsupported: `{where_}.{f}` (yarn's mscale is not implemented)"
                    )));
                }
            }
            let original = original()?;
            let factor = match get_opt_f32(rp, "factor")? {
                Some(f) if f > 0.0 => f,
                Some(f) => return Err(bad_config(format!("`{where_}.factor` = {f} must be > 0"))),
                None => max_positions as f32 / original.max(1) as f32,
            };
            let attention_factor = match get_opt_f32(rp, "attention_factor")? {
                Some(a) => a,
                None if factor <= 1.0 => 1.0,
                None => (0.1 * libm::log(f64::from(factor)) + 1.0) as f32,
            };
            RopeKind::Yarn {
                factor,
                beta_fast: get_opt_f32(rp, "beta_fast")?.unwrap_or(32.0),
                beta_slow: get_opt_f32(rp, "beta_slow")?.unwrap_or(1.0),
                original_max_position_embeddings: original,
                attention_factor,
            }
        }
        other => {
            return Err(bad_config(format!(
                "unsupported: `{where_}.rope_type` = `{other}` (implemented: default, linear, \
                 dynamic, llama3, yarn)"
            )));
        }
    };
    Ok(RopeParams { theta, kind })
}

impl LlamaConfig {
    /// Parses a Hugging Face `config.json` of a llama-shaped family. Another architecture, or a
    /// field that changes the model in a way this implementation lacks (an activation other
    /// than the family's, biases where the family has none, logit soft-capping, longrope...),
    /// is refused by name.
    pub fn from_json(text: &str) -> Result<LlamaConfig> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| bad_config(format!("not valid JSON: {e}")))?;
        let Value::Object(obj) = v else {
            return Err(bad_config("expected a JSON object".into()));
        };
        let fam = family(&obj)?;
        let gemma = fam == Family::Gemma3;
        // The activation: `hidden_act` (Gemma 3 calls it `hidden_activation`).
        let act_field = if gemma {
            "hidden_activation"
        } else {
            "hidden_act"
        };
        let act = obj.get(act_field).and_then(Value::as_str);
        let mlp_act = match (gemma, act) {
            (false, None | Some("silu")) => MlpAct::Silu,
            (true, None | Some("gelu_pytorch_tanh")) => MlpAct::GeluTanh,
            (_, Some(a)) => {
                return Err(bad_config(format!(
                    "unsupported: `{act_field}` = `{a}` (not implemented for this family)"
                )));
            }
        };
        // Biases: Qwen2 always has q/k/v biases; elsewhere `attention_bias` would add them to
        // the output projection too (not implemented), and `mlp_bias` to the MLP.
        for flag in ["attention_bias", "mlp_bias"] {
            refuse_unless(&obj, flag, &[Value::Bool(false)])?;
        }
        if gemma {
            for f in ["attn_logit_softcapping", "final_logit_softcapping"] {
                refuse_unless(&obj, f, &[])?;
            }
            refuse_unless(&obj, "use_bidirectional_attention", &[Value::Bool(false)])?;
        }
        let hidden_size = get_usize(&obj, "hidden_size", None)?;
        let num_hidden_layers = get_usize(&obj, "num_hidden_layers", None)?;
        let max_position_embeddings = get_usize(&obj, "max_position_embeddings", Some(2048))?;
        // Rotary parameters: transformers >= 5 writes `rope_parameters` ({rope_theta,
        // rope_type, ...}, or one per layer type for Gemma 3); older files `rope_theta` and
        // `rope_scaling`.
        let theta0 = get_f32(&obj, "rope_theta", ROPE_THETA)?;
        let legacy_scaling = match obj.get("rope_scaling") {
            Some(Value::Object(rs)) => Some(rs.clone()),
            None | Some(Value::Null) => None,
            Some(other) => {
                return Err(bad_config(format!(
                    "`rope_scaling` must be an object, got {other}"
                )));
            }
        };
        let rope_obj: Option<Obj> = match obj.get("rope_parameters") {
            Some(Value::Object(rp)) => Some(rp.clone()),
            None | Some(Value::Null) => legacy_scaling.clone(),
            Some(other) => {
                return Err(bad_config(format!(
                    "`rope_parameters` must be an object, got {other}"
                )));
            }
        };
        let (global, local) = match (&rope_obj, gemma) {
            (Some(rp), true) if rp.contains_key("full_attention") => {
                let part = |key: &str| -> Result<RopeParams> {
                    match rp.get(key) {
                        Some(Value::Object(o)) => {
                            rope_params(o, theta0, max_position_embeddings, key)
                        }
                        _ => Err(bad_config(format!("`rope_parameters.{key}` is missing"))),
                    }
                };
                (part("full_attention")?, Some(part("sliding_attention")?))
            }
            (rp, true) => {
                // transformers 4's Gemma 3: rope_theta (+ rope_scaling) for full layers,
                // rope_local_base_freq for sliding ones.
                let global = match rp {
                    Some(o) => rope_params(o, theta0, max_position_embeddings, "rope_scaling")?,
                    None => RopeParams {
                        theta: theta0,
                        kind: RopeKind::Default,
                    },
                };
                let local = RopeParams {
                    theta: get_f32(&obj, "rope_local_base_freq", 10000.0)?,
                    kind: RopeKind::Default,
                };
                (global, Some(local))
            }
            (Some(rp), false) => (
                rope_params(rp, theta0, max_position_embeddings, "rope_parameters")?,
                None,
            ),
            (None, false) => (
                RopeParams {
                    theta: theta0,
                    kind: RopeKind::Default,
                },
                None,
            ),
        };
        refuse_unless(
            &obj,
            "partial_rotary_factor",
            &[Value::from(1.0), Value::from(1)],
        )?;
        // Sliding windows: `layer_types` says which layers slide (Qwen2/3, Gemma 3); without
        // it every layer does when `sliding_window` is set (Mistral, Phi-3). Qwen2/3 write a
        // `sliding_window` that only counts with `use_sliding_window`.
        let qwen = matches!(fam, Family::Qwen2 | Family::Qwen3);
        let mut sliding_window = get_usize(&obj, "sliding_window", Some(0))?;
        if (qwen && !get_bool(&obj, "use_sliding_window")) || fam == Family::Llama {
            // transformers' Llama has no sliding window, whatever the file says.
            sliding_window = 0;
        }
        let sliding_layers: Vec<bool> = match obj.get("layer_types") {
            Some(Value::Array(types)) => {
                if types.len() != num_hidden_layers {
                    return Err(bad_config(format!(
                        "`layer_types` lists {} layers, num_hidden_layers = {num_hidden_layers}",
                        types.len()
                    )));
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        Some("full_attention") => Ok(false),
                        Some("sliding_attention") => Ok(true),
                        _ => Err(bad_config(format!(
                            "unsupported: `layer_types` entry {t} (implemented: \
                             full_attention, sliding_attention)"
                        ))),
                    })
                    .collect::<Result<_>>()?
            }
            None | Some(Value::Null) => Vec::new(),
            Some(other) => {
                return Err(bad_config(format!(
                    "`layer_types` must be a list, got {other}"
                )));
            }
        };
        if sliding_layers.iter().any(|&s| s) && sliding_window == 0 {
            return Err(bad_config(
                "`layer_types` has sliding_attention layers but `sliding_window` is not set".into(),
            ));
        }
        let query_pre_attn_scalar = if gemma {
            Some(
                get_opt_f32(&obj, "query_pre_attn_scalar")?
                    .filter(|q| *q > 0.0)
                    .ok_or_else(|| bad_config("`query_pre_attn_scalar` must be > 0".into()))?,
            )
        } else {
            None
        };
        let model_type = FAMILIES
            .iter()
            .find(|(_, _, f)| *f == fam)
            .map_or("llama", |(t, _, _)| *t)
            .to_string();
        let variant = Variant {
            model_type,
            rope: global.kind,
            local_rope: local,
            qkv_bias: fam == Family::Qwen2,
            qk_norm: matches!(fam, Family::Qwen3 | Family::Gemma3),
            fused_projections: fam == Family::Phi3,
            norm_plus_one: gemma,
            sandwich_norms: gemma,
            scale_embeddings: gemma,
            mlp_act,
            query_pre_attn_scalar,
            sliding_window: (sliding_window > 0).then_some(sliding_window),
            sliding_layers,
        };
        let num_attention_heads = get_usize(&obj, "num_attention_heads", None)?;
        let head_dim_default = hidden_size.checked_div(num_attention_heads).unwrap_or(0);
        let cfg = LlamaConfig {
            hidden_size,
            intermediate_size: get_usize(&obj, "intermediate_size", None)?,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads: get_usize(&obj, "num_key_value_heads", Some(num_attention_heads))?,
            vocab_size: get_usize(&obj, "vocab_size", None)?,
            rms_norm_eps: get_f32(&obj, "rms_norm_eps", RMS_NORM_EPS)?,
            rope_theta: global.theta,
            max_position_embeddings,
            // transformers' default is true for Gemma 3, false elsewhere.
            tie_word_embeddings: obj
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(gemma),
            head_dim: get_usize(&obj, "head_dim", Some(head_dim_default))?,
            bos_token_id: get_ids(&obj, "bos_token_id")?.first().copied(),
            eos_token_ids: get_ids(&obj, "eos_token_id")?,
            variant,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}
