//! A GGUF file of a llama-shaped architecture as this crate's model: its `<arch>.*` metadata as
//! a [`LlamaConfig`] ([`config_from_gguf`]), its tensors under the Hugging Face names the loader
//! expects ([`hf_tensor_name`], [`tensors_from_gguf`]), with the q/k row permutation that
//! llama.cpp's converter applies undone ([`unpermute_rows`]), and everything at once
//! ([`load_llama`]); and the other way, a model's config and tensors as a GGUF file
//! ([`llama_to_gguf`]).
//!
//! Architectures: `llama` (which llama.cpp also uses for Mistral), `qwen2` and `qwen3`. Others
//! are refused by name.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::{GgmlType, GgufFile, GgufWriter, TensorInfo, Value};
use crate::error::{Error, Result};
use crate::models::llama::{LlamaConfig, RopeKind, Variant};
use crate::op::{RMS_NORM_EPS, ROPE_THETA};
use crate::tensor::{DType, SharedBytes, Tensor};

/// `general.architecture` values this module maps, and whether llama.cpp's converter permuted
/// the q/k rows of that architecture (`LlamaModel.permute`; Qwen's converters do not).
const ARCHITECTURES: [(&str, bool); 3] = [("llama", true), ("qwen2", false), ("qwen3", false)];

fn supported() -> String {
    ARCHITECTURES
        .iter()
        .map(|(a, _)| format!("`{a}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The file's `general.architecture`, refused unless it is one of those mapped.
pub fn architecture<'f>(file: &'f GgufFile<'_>) -> Result<&'f str> {
    let arch = file.get_str("general.architecture")?;
    if ARCHITECTURES.iter().any(|(a, _)| *a == arch) {
        Ok(arch)
    } else {
        Err(file.bad(format!(
            "architecture `{arch}` not supported (supported: {})",
            supported()
        )))
    }
}

fn permuted(arch: &str) -> bool {
    ARCHITECTURES.iter().any(|&(a, p)| a == arch && p)
}

/// The model's config from the `<arch>.*` and `tokenizer.ggml.*` metadata: sizes, norm epsilon,
/// rope base and scaling (`none`, `linear`, `yarn`, and llama 3's from the `rope_freqs.weight`
/// factors), context length, vocabulary size (the token
/// list's length, else `<arch>.vocab_size`, else the embedding's rows), BOS/EOS ids, and tied
/// embeddings when the file has no `output.weight`.
pub fn config_from_gguf(file: &GgufFile<'_>) -> Result<LlamaConfig> {
    let arch = architecture(file)?;
    let key = |k: &str| format!("{arch}.{k}");
    let hidden_size = file.get_usize(&key("embedding_length"))?;
    let num_attention_heads = file.get_usize(&key("attention.head_count"))?;
    let num_key_value_heads = file
        .get_usize_opt(&key("attention.head_count_kv"))?
        .unwrap_or(num_attention_heads);
    let head_dim = match file.get_usize_opt(&key("attention.key_length"))? {
        Some(d) => d,
        None => hidden_size.checked_div(num_attention_heads).unwrap_or(0),
    };
    if let Some(v) = file.get_usize_opt(&key("attention.value_length"))?
        && v != head_dim
    {
        return Err(file.bad(format!(
            "`{arch}.attention.value_length` = {v} differs from the key length {head_dim} (not \
             implemented)"
        )));
    }
    if let Some(r) = file.get_usize_opt(&key("rope.dimension_count"))?
        && r != head_dim
    {
        return Err(file.bad(format!(
            "`{arch}.rope.dimension_count` = {r}: partial rotary embeddings (head_dim {head_dim}) \
             are not implemented"
        )));
    }
    let max_position_embeddings = file.get_usize_opt(&key("context_length"))?.unwrap_or(2048);
    let rope_theta = file
        .get_f32_opt(&key("rope.freq_base"))?
        .unwrap_or(ROPE_THETA);
    let rope = match (
        rope_scaling(file, arch, max_position_embeddings)?,
        file.tensor(ROPE_FREQS),
    ) {
        (rope, None) => rope,
        (RopeKind::Default, Some(freqs)) => llama3_rope(file, freqs, rope_theta, head_dim)?,
        (_, Some(_)) => {
            return Err(file.bad(format!(
                "tensor `{ROPE_FREQS}` beside `{arch}.rope.scaling.type`: two rope scalings"
            )));
        }
    };
    let vocab_size = match file.get_array_opt("tokenizer.ggml.tokens")? {
        Some(tokens) => tokens.len(),
        None => match file.get_usize_opt(&key("vocab_size"))? {
            Some(v) => v,
            None => file
                .tensor("token_embd.weight")
                .and_then(|t| t.shape().first().copied())
                .unwrap_or(0),
        },
    };
    let id = |k: &str| -> Result<Option<u32>> {
        match file.get_usize_opt(k)? {
            None => Ok(None),
            Some(v) => u32::try_from(v)
                .map(Some)
                .map_err(|_| file.bad(format!("`{k}` = {v} is not a token id"))),
        }
    };
    let mut eos_token_ids: Vec<u32> = id("tokenizer.ggml.eos_token_id")?.into_iter().collect();
    if let Some(eot) = id("tokenizer.ggml.eot_token_id")?
        && !eos_token_ids.contains(&eot)
    {
        eos_token_ids.push(eot);
    }
    let variant = variant_of(arch, rope);
    let cfg = LlamaConfig {
        hidden_size,
        intermediate_size: file.get_usize(&key("feed_forward_length"))?,
        num_hidden_layers: file.get_usize(&key("block_count"))?,
        num_attention_heads,
        num_key_value_heads,
        vocab_size,
        rms_norm_eps: file
            .get_f32_opt(&key("attention.layer_norm_rms_epsilon"))?
            .unwrap_or(RMS_NORM_EPS),
        rope_theta,
        max_position_embeddings,
        tie_word_embeddings: file.tensor("output.weight").is_none(),
        head_dim,
        bos_token_id: id("tokenizer.ggml.bos_token_id")?,
        eos_token_ids,
        variant,
    };
    cfg.validate().map_err(|e| match e {
        Error::BadModelFile { why, .. } => file.bad(why),
        other => other,
    })?;
    Ok(cfg)
}

/// The tensor of per-frequency rope factors llama.cpp's converter writes for llama 3's rope
/// scaling (it writes no `rope.scaling.*` keys for it).
const ROPE_FREQS: &str = "rope_freqs.weight";

/// llama 3's rope scaling recovered from `rope_freqs.weight`: the factors
/// `convert_hf_to_gguf.py` computes (`LlamaModel.generate_extra_tensors`) for `factor` (the
/// largest), `low_freq_factor` 1 or 2, `high_freq_factor` 2, 4 or 8 and an original context of
/// a power of two (16 to 2^20), the first of these that gives the file's factors at every
/// frequency (any that does gives the same model). Factors that match none are an error.
fn llama3_rope(
    file: &GgufFile<'_>,
    info: &TensorInfo,
    theta: f32,
    head_dim: usize,
) -> Result<RopeKind> {
    let half = head_dim / 2;
    if info.ggml_type != GgmlType::F32 || info.dims.as_slice() != [half as u64] {
        return Err(file.bad(format!(
            "tensor `{ROPE_FREQS}` is {} {:?}, expected F32 [{half}] (head_dim / 2)",
            info.ggml_type.name(),
            info.shape()
        )));
    }
    let factors: Vec<f64> = file
        .tensor_data(info)
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    let factor = factors.iter().copied().fold(1.0f64, f64::max);
    for original in (4..=20).map(|p| 1usize << p) {
        for (low, high) in [(1.0, 4.0), (1.0, 2.0), (1.0, 8.0), (2.0, 4.0), (2.0, 8.0)] {
            let want = llama3_factors(theta, head_dim, factor, low, high, original as f64);
            let matches = want
                .iter()
                .zip(&factors)
                .all(|(&w, &got)| libm::fabs(w - got) <= 1e-4 * libm::fabs(w));
            if matches {
                return Ok(RopeKind::Llama3 {
                    factor: factor as f32,
                    low_freq_factor: low as f32,
                    high_freq_factor: high as f32,
                    original_max_position_embeddings: original,
                });
            }
        }
    }
    Err(file.bad(format!(
        "tensor `{ROPE_FREQS}`: its {half} rope factors (largest {factor}) match no llama 3 rope \
         scaling (low_freq_factor 1-2, high_freq_factor 2-8, original context 16 to 2^20)"
    )))
}

/// The rope factors of llama 3's scaling, one per frequency, as `convert_hf_to_gguf.py`
/// computes them (frequencies in float32, as torch does).
fn llama3_factors(
    theta: f32,
    head_dim: usize,
    factor: f64,
    low: f64,
    high: f64,
    original: f64,
) -> Vec<f64> {
    let two_pi = 2.0 * core::f64::consts::PI;
    (0..head_dim / 2)
        .map(|i| {
            let e = (2 * i) as f32 / head_dim as f32;
            let freq = f64::from(1.0 / libm::powf(theta, e));
            let wavelen = two_pi / freq;
            if wavelen < original / high {
                1.0
            } else if wavelen > original / low {
                factor
            } else {
                let smooth = (original / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

fn rope_scaling(file: &GgufFile<'_>, arch: &str, max_positions: usize) -> Result<RopeKind> {
    let key = |k: &str| format!("{arch}.rope.scaling.{k}");
    let kind = match file.get(&key("type")) {
        None => "none",
        Some(_) => file.get_str(&key("type"))?,
    };
    let factor = || -> Result<f32> {
        file.get_f32_opt(&key("factor"))?
            .filter(|f| *f > 0.0)
            .ok_or_else(|| file.bad(format!("`{}` must be a number > 0", key("factor"))))
    };
    Ok(match kind {
        "none" => RopeKind::Default,
        "linear" => RopeKind::Linear { factor: factor()? },
        "yarn" => {
            let factor = factor()?;
            let original = file
                .get_usize_opt(&key("original_context_length"))?
                .unwrap_or(max_positions);
            RopeKind::Yarn {
                factor,
                beta_fast: file
                    .get_f32_opt(&format!("{arch}.rope.scaling.yarn_beta_fast"))?
                    .unwrap_or(32.0),
                beta_slow: file
                    .get_f32_opt(&format!("{arch}.rope.scaling.yarn_beta_slow"))?
                    .unwrap_or(1.0),
                original_max_position_embeddings: original,
                attention_factor: if factor <= 1.0 {
                    1.0
                } else {
                    (0.1 * libm::log(f64::from(factor)) + 1.0) as f32
                },
            }
        }
        other => {
            return Err(file.bad(format!(
                "`{}` = `{other}` not supported (supported: none, linear, yarn)",
                key("type")
            )));
        }
    })
}

/// The Hugging Face name of a llama.cpp tensor name (`blk.3.attn_q.weight` ->
/// `model.layers.3.self_attn.q_proj.weight`), `None` for a name with no counterpart.
pub fn hf_tensor_name(gguf_name: &str) -> Option<String> {
    if let Some((_, h)) = GLOBAL_NAMES.iter().find(|(g, _)| *g == gguf_name) {
        return Some((*h).into());
    }
    let rest = gguf_name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (part, suffix) = rest.split_once('.')?;
    if suffix != "weight" && suffix != "bias" {
        return None;
    }
    let (_, hf) = LAYER_NAMES.iter().find(|(g, _)| *g == part)?;
    Some(format!("model.layers.{layer}.{hf}.{suffix}"))
}

/// llama.cpp's per-layer tensor names and their Hugging Face counterparts.
const LAYER_NAMES: [(&str, &str); 11] = [
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
];

/// llama.cpp's names of the tensors outside the layers.
const GLOBAL_NAMES: [(&str, &str); 3] = [
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
];

/// The llama.cpp name of a Hugging Face tensor name (the inverse of [`hf_tensor_name`]).
pub fn gguf_tensor_name(hf_name: &str) -> Option<String> {
    if let Some((g, _)) = GLOBAL_NAMES.iter().find(|(_, h)| *h == hf_name) {
        return Some((*g).into());
    }
    let rest = hf_name.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (part, suffix) = rest.rsplit_once('.')?;
    if suffix != "weight" && suffix != "bias" {
        return None;
    }
    let (g, _) = LAYER_NAMES.iter().find(|(_, h)| *h == part)?;
    Some(format!("blk.{layer}.{g}.{suffix}"))
}

/// Undoes llama.cpp's q/k permutation (`LlamaModel.permute`: `w.reshape(n_head, 2, d // n_head
/// // 2, *rest).swapaxes(1, 2).reshape(w.shape)`) on `rows` rows of `data`, each
/// `data.len() / rows` bytes: the file's row `h * d + 2 * i + j` goes back to row
/// `h * d + j * d / 2 + i` (`d` the rows per head). Whole rows move, so it works on the raw bytes
/// of any type whose blocks run along the row.
pub fn unpermute_rows(data: &[u8], rows: usize, n_head: usize, what: &str) -> Result<Vec<u8>> {
    move_rows(data, rows, n_head, what, false)
}

/// llama.cpp's q/k permutation itself (what its converter does to a Hugging Face checkpoint):
/// the inverse of [`unpermute_rows`], for writing a llama GGUF file.
pub fn permute_rows(data: &[u8], rows: usize, n_head: usize, what: &str) -> Result<Vec<u8>> {
    move_rows(data, rows, n_head, what, true)
}

fn move_rows(
    data: &[u8],
    rows: usize,
    n_head: usize,
    what: &str,
    forward: bool,
) -> Result<Vec<u8>> {
    let bad = |why: String| Error::BadModelFile {
        path: what.into(),
        why,
    };
    let per_head = rows.checked_div(n_head).unwrap_or(0);
    if n_head == 0 || !rows.is_multiple_of(n_head) || !per_head.is_multiple_of(2) {
        return Err(bad(format!(
            "tensor `{what}`: {rows} rows cannot be split into {n_head} heads of an even size"
        )));
    }
    let row_bytes = data.len().checked_div(rows).unwrap_or(0);
    if row_bytes.checked_mul(rows) != Some(data.len()) {
        return Err(bad(format!(
            "tensor `{what}`: {} bytes are not {rows} rows",
            data.len()
        )));
    }
    let half = per_head / 2;
    let mut out = alloc::vec![0u8; data.len()];
    for h in 0..n_head {
        for i in 0..half {
            for j in 0..2 {
                let file_row = (h * per_head + 2 * i + j) * row_bytes;
                let model_row = (h * per_head + j * half + i) * row_bytes;
                let (from, to) = if forward {
                    (model_row, file_row)
                } else {
                    (file_row, model_row)
                };
                if let (Some(dst), Some(src)) = (
                    out.get_mut(to..to + row_bytes),
                    data.get(from..from + row_bytes),
                ) {
                    dst.copy_from_slice(src);
                }
            }
        }
    }
    Ok(out)
}

/// One tensor of a GGUF file as a [`Tensor`] of its row-major shape, from `bytes` (its data,
/// possibly with rows permuted, in `info.ggml_type`'s layout).
///
/// `F32` becomes an f32 tensor; `F16`, `BF16`, `Q8_0`, `Q4_0`, `Q4_1`, `Q5_0`, `Q4_K` and
/// `Q6_K` keep their bytes as the [`crate::DType`] of the same name (decoded where they are
/// read); every other ggml type is an error naming it and the ones that load.
pub fn tensor_from_gguf(info: &TensorInfo, bytes: &[u8]) -> Result<Tensor> {
    tensor_from_gguf_in(info, bytes, None)
}

/// [`tensor_from_gguf`], with the packed types sharing `bytes` with `owner` (the whole file's
/// buffer: a memory map) instead of copying them, when given.
pub fn tensor_from_gguf_in(
    info: &TensorInfo,
    bytes: &[u8],
    owner: Option<&SharedBytes>,
) -> Result<Tensor> {
    let shape = info.shape();
    let packed = |dtype: DType| match owner {
        Some(o) => Tensor::from_shared(&shape, dtype, o, bytes),
        None => Tensor::from_raw(&shape, dtype, bytes.to_vec()),
    };
    let t = match info.ggml_type {
        GgmlType::F32 => {
            let values: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            Tensor::from_f32(&shape, values)
        }
        GgmlType::F16 => packed(DType::F16),
        GgmlType::BF16 => packed(DType::BF16),
        GgmlType::Q8_0 => packed(DType::Q8_0),
        GgmlType::Q4_0 => packed(DType::Q4_0),
        GgmlType::Q4_1 => packed(DType::Q4_1),
        GgmlType::Q5_0 => packed(DType::Q5_0),
        GgmlType::Q4_K => packed(DType::Q4_K),
        GgmlType::Q6_K => packed(DType::Q6_K),
        other => {
            return Err(Error::BadModelFile {
                path: info.name.clone(),
                why: format!(
                    "tensor `{}` has ggml type {}; the types that load are F32, F16, BF16, \
                     Q8_0, Q4_0, Q4_1, Q5_0, Q4_K and Q6_K",
                    info.name,
                    other.name()
                ),
            });
        }
    };
    t.map_err(|e| Error::BadModelFile {
        path: info.name.clone(),
        why: format!("tensor `{}`: {e}", info.name),
    })
}

/// Every tensor of `file` under its Hugging Face name, the q/k rows of a permuted architecture
/// put back in Hugging Face order. A tensor with no Hugging Face counterpart is an error naming
/// it.
pub fn tensors_from_gguf(
    file: &GgufFile<'_>,
    config: &LlamaConfig,
) -> Result<BTreeMap<String, Tensor>> {
    tensors_from_gguf_in(file, config, None)
}

/// [`tensors_from_gguf`], the packed tensors sharing the file's bytes with `owner` (the buffer
/// `file` was parsed from) rather than copied, when given; q/k rows put back in order are
/// copies either way.
pub fn tensors_from_gguf_in(
    file: &GgufFile<'_>,
    config: &LlamaConfig,
    owner: Option<&SharedBytes>,
) -> Result<BTreeMap<String, Tensor>> {
    let arch = architecture(file)?;
    let permute = permuted(arch);
    let mut out = BTreeMap::new();
    for info in &file.tensors {
        if info.name == ROPE_FREQS {
            // Read into the config's rope scaling (`config_from_gguf`).
            continue;
        }
        let hf = hf_tensor_name(&info.name).ok_or_else(|| {
            file.bad(format!(
                "tensor `{}` has no counterpart in the {arch} model",
                info.name
            ))
        })?;
        let data = file.tensor_data(info);
        let heads = if info.name.ends_with(".attn_q.weight") {
            Some(config.num_attention_heads)
        } else if info.name.ends_with(".attn_k.weight") {
            Some(config.num_key_value_heads)
        } else {
            None
        };
        let rows = info.shape().first().copied().unwrap_or(0);
        let t = match heads {
            Some(n_head) if permute && info.dims.len() == 2 => {
                tensor_from_gguf(info, &unpermute_rows(data, rows, n_head, &info.name)?)?
            }
            _ => tensor_from_gguf_in(info, data, owner)?,
        };
        out.insert(hf, t);
    }
    Ok(out)
}

fn variant_of(arch: &str, rope: RopeKind) -> Variant {
    Variant {
        model_type: arch.into(),
        rope,
        qkv_bias: arch == "qwen2",
        qk_norm: arch == "qwen3",
        ..Variant::default()
    }
}

/// A GGUF file of a model, as llama.cpp's converter writes it: `general.architecture` and the
/// `<arch>.*` metadata of `config` (read back by [`config_from_gguf`]), BOS/EOS ids, and every
/// tensor of `tensors` (Hugging Face names, the loader's shapes) under its llama.cpp name, in
/// its own dtype (f32 as F32, a weight dtype as its ggml type),
/// q/k rows permuted for `llama`. A config the metadata cannot express (Phi-3, Gemma 3, sliding
/// windows, rope scaling other than linear and yarn) is an error. Add a tokenizer's
/// `tokenizer.ggml.*` keys to the writer before writing it.
pub fn llama_to_gguf(
    config: &LlamaConfig,
    tensors: &BTreeMap<String, Tensor>,
) -> Result<GgufWriter> {
    let bad = |why: String| Error::BadModelFile {
        path: "<gguf writer>".into(),
        why,
    };
    let arch = config.variant.model_type.as_str();
    // `layer_types` of full-attention layers only say nothing.
    let mut normalized = config.variant.clone();
    if normalized.sliding_window.is_none() {
        normalized.sliding_layers.clear();
    }
    if !ARCHITECTURES.iter().any(|(a, _)| *a == arch)
        || normalized != variant_of(arch, config.variant.rope)
        || matches!(config.variant.rope, RopeKind::Dynamic { .. })
    {
        return Err(bad(format!(
            "a `{arch}` config with these features cannot be written as GGUF metadata \
             (supported: {} without sliding windows; rope scaling none, linear, yarn, llama3)",
            supported()
        )));
    }
    let mut w = GgufWriter::new();
    let key = |k: &str| format!("{arch}.{k}");
    // GGUF's size fields are u32: a larger value is refused naming the config field and the
    // GGUF key, never written wrapped or saturated.
    let size = |field: &str, gguf_key: &str, v: usize| -> Result<Value> {
        u32::try_from(v).map(Value::U32).map_err(|_| {
            bad(format!(
                "{field} = {v} does not fit GGUF's u32 field `{}` (at most {})",
                key(gguf_key),
                u32::MAX
            ))
        })
    };
    w.add_metadata("general.architecture", Value::from(arch))?;
    for (k, field, v) in [
        ("block_count", "num_hidden_layers", config.num_hidden_layers),
        (
            "context_length",
            "max_position_embeddings",
            config.max_position_embeddings,
        ),
        ("embedding_length", "hidden_size", config.hidden_size),
        (
            "feed_forward_length",
            "intermediate_size",
            config.intermediate_size,
        ),
        (
            "attention.head_count",
            "num_attention_heads",
            config.num_attention_heads,
        ),
        (
            "attention.head_count_kv",
            "num_key_value_heads",
            config.num_key_value_heads,
        ),
        ("attention.key_length", "head_dim", config.head_dim),
        ("attention.value_length", "head_dim", config.head_dim),
        ("rope.dimension_count", "head_dim", config.head_dim),
        ("vocab_size", "vocab_size", config.vocab_size),
    ] {
        w.add_metadata(&key(k), size(field, k, v)?)?;
    }
    w.add_metadata(
        &key("attention.layer_norm_rms_epsilon"),
        Value::F32(config.rms_norm_eps),
    )?;
    w.add_metadata(&key("rope.freq_base"), Value::F32(config.rope_theta))?;
    match config.variant.rope {
        RopeKind::Linear { factor } => {
            w.add_metadata(&key("rope.scaling.type"), Value::from("linear"))?;
            w.add_metadata(&key("rope.scaling.factor"), Value::F32(factor))?;
        }
        RopeKind::Yarn {
            factor,
            beta_fast,
            beta_slow,
            original_max_position_embeddings,
            ..
        } => {
            w.add_metadata(&key("rope.scaling.type"), Value::from("yarn"))?;
            w.add_metadata(&key("rope.scaling.factor"), Value::F32(factor))?;
            w.add_metadata(
                &key("rope.scaling.original_context_length"),
                size(
                    "rope_scaling.original_max_position_embeddings",
                    "rope.scaling.original_context_length",
                    original_max_position_embeddings,
                )?,
            )?;
            w.add_metadata(&key("rope.scaling.yarn_beta_fast"), Value::F32(beta_fast))?;
            w.add_metadata(&key("rope.scaling.yarn_beta_slow"), Value::F32(beta_slow))?;
        }
        RopeKind::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            let factors = llama3_factors(
                config.rope_theta,
                config.head_dim,
                f64::from(factor),
                f64::from(low_freq_factor),
                f64::from(high_freq_factor),
                original_max_position_embeddings as f64,
            );
            let bytes: Vec<u8> = factors
                .iter()
                .flat_map(|&f| (f as f32).to_le_bytes())
                .collect();
            w.add_tensor(ROPE_FREQS, &[factors.len()], GgmlType::F32, bytes)?;
        }
        _ => {}
    }
    if let Some(bos) = config.bos_token_id {
        w.add_metadata("tokenizer.ggml.bos_token_id", Value::U32(bos))?;
    }
    if let Some(&eos) = config.eos_token_ids.first() {
        w.add_metadata("tokenizer.ggml.eos_token_id", Value::U32(eos))?;
    }
    let permute = permuted(arch);
    for (hf, t) in tensors {
        let name = gguf_tensor_name(hf)
            .ok_or_else(|| bad(format!("tensor `{hf}` has no llama.cpp name")))?;
        let (ggml_type, bytes) = match t.dtype() {
            DType::F32 => (
                GgmlType::F32,
                t.to_f32_vec()?
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect::<Vec<u8>>(),
            ),
            d => (ggml_type_of(d, hf)?, t.packed_bytes()?.to_vec()),
        };
        let rows = t.shape().first().copied().unwrap_or(0);
        let heads = if name.ends_with(".attn_q.weight") {
            Some(config.num_attention_heads)
        } else if name.ends_with(".attn_k.weight") {
            Some(config.num_key_value_heads)
        } else {
            None
        };
        let bytes = match heads {
            Some(n_head) if permute && t.shape().len() == 2 => {
                permute_rows(&bytes, rows, n_head, hf)?
            }
            _ => bytes,
        };
        w.add_tensor(&name, t.shape(), ggml_type, bytes)?;
    }
    Ok(w)
}

/// The ggml type of a weight dtype (each has one: the layouts are GGML's).
fn ggml_type_of(d: DType, tensor: &str) -> Result<GgmlType> {
    Ok(match d {
        DType::F32 => GgmlType::F32,
        DType::F16 => GgmlType::F16,
        DType::BF16 => GgmlType::BF16,
        DType::Q8_0 => GgmlType::Q8_0,
        DType::Q4_0 => GgmlType::Q4_0,
        DType::Q4_1 => GgmlType::Q4_1,
        DType::Q5_0 => GgmlType::Q5_0,
        DType::Q4_K => GgmlType::Q4_K,
        DType::Q6_K => GgmlType::Q6_K,
        DType::I32 | DType::I64 => {
            return Err(Error::BadModelFile {
                path: "<gguf writer>".into(),
                why: format!("tensor `{tensor}` has integer dtype {d}"),
            });
        }
    })
}

/// A GGUF model as the loader's parts: the config, the tensors by Hugging Face name, and the
/// tokenizer as a `tokenizer.json` ([`super::tokenizer::tokenizer_json`]; `None` when the file
/// has no `tokenizer.ggml.model`).
#[derive(Debug, Clone)]
pub struct GgufModel {
    pub config: LlamaConfig,
    pub tensors: BTreeMap<String, Tensor>,
    pub tokenizer_json: Option<Vec<u8>>,
    /// `tokenizer.chat_template`, when present.
    pub chat_template: Option<String>,
}

/// Reads a parsed GGUF file's model: [`config_from_gguf`], [`tensors_from_gguf`] and the
/// tokenizer.
pub fn load_llama(file: &GgufFile<'_>) -> Result<GgufModel> {
    load_llama_in(file, None)
}

/// [`load_llama`], the packed tensors sharing `owner`'s bytes (the buffer `file` was parsed
/// from: a memory map on native, the file's bytes in the page) instead of copies.
pub fn load_llama_in(file: &GgufFile<'_>, owner: Option<&SharedBytes>) -> Result<GgufModel> {
    let config = config_from_gguf(file)?;
    let tensors = tensors_from_gguf_in(file, &config, owner)?;
    let tokenizer_json = match file.get("tokenizer.ggml.model") {
        None => None,
        Some(_) => Some(
            serde_json::to_vec(&super::tokenizer::tokenizer_json(file)?)
                .map_err(|e| file.bad(format!("tokenizer.json: {e}")))?,
        ),
    };
    let chat_template = match file.get("tokenizer.chat_template") {
        None => None,
        Some(_) => Some(String::from(file.get_str("tokenizer.chat_template")?)),
    };
    Ok(GgufModel {
        config,
        tensors,
        tokenizer_json,
        chat_template,
    })
}
