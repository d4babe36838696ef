//! The llama architecture (Hugging Face `LlamaForCausalLM`), written once over [`Graph`] so it
//! runs, trains and generates on any backend.
//!
//! RMSNorm, rotary embeddings in the Hugging Face `rotate_half` layout, grouped-query attention
//! with a KV cache, a SwiGLU MLP, tied or untied embeddings. Parameters carry the Hugging Face
//! tensor names (`model.layers.0.self_attn.q_proj.weight`, ...), so a checkpoint directory loads
//! by name and a trained model saves in the same layout.
//!
//! Layout: projections are computed transposed (`W @ x^T`, `[batch, heads * head_dim, seq]`),
//! which reshapes to `[batch, heads, head_dim, seq]` without moving data (and, for one new
//! token, to `[batch, heads, 1, head_dim]`). The KV cache holds `[batch, kv_heads, capacity,
//! head_dim]` per layer, allocated once; each step writes its new keys and values in place
//! (`kv_write` on a donated cache) and attention reads the first `len` positions (`kv_len`), so
//! no step copies the cache.
//!
//! The config (`config.json`'s fields, checks, tensor names) is in `llama/config.rs`.

pub mod addition;
mod config;
mod fuse;
mod generate;
mod parse;
mod quantize;
pub mod train;

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::autograd::{AttentionAttrs, Graph, Var};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::nn::{ParamStore, Params};
use crate::op::{Activation, GeluApprox};
use crate::rng::Rng;
use crate::tensor::Tensor;

pub use config::{LlamaConfig, MlpAct, RopeKind, RopeParams, Variant};
pub use generate::{
    Decoder, GenerateOptions, Generation, Sampling, StopReason, generate, greedy_batch,
};
pub use quantize::{QUANTIZE_CHOICES, QuantizeSummary, format_for, quantize_checkpoint};

/// Keys and values seen so far, per layer, each `[batch, kv_heads, capacity, head_dim]` of
/// which the first [`KvCache::len`] positions are filled.
///
/// The buffers are allocated on the first forward, for the capacity asked for (at most the
/// model's `max_position_embeddings`), and never grow: each forward writes its new keys and
/// values into them in place (`kv_write` with the cache donated), so a decode step costs the same
/// at every position apart from attention's own reads. A forward past the capacity is an error.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    /// Keys and values per layer: values of the graph the cache is used with (so a recording
    /// graph differentiates through earlier steps); `None` only while a forward holds them.
    layers: Vec<Option<(Var, Var)>>,
    len: usize,
    /// Positions to allocate; 0 means the model's `max_position_embeddings`.
    capacity: usize,
    batch: usize,
}

/// Bytes of a KV cache of `positions` positions for `batch` sequences (keys and values of
/// every layer, f32), checked: an overflow is [`Error::LimitExceeded`], and a size this process
/// cannot reserve is [`Error::OutOfMemory`] naming the positions and `max_position_embeddings`,
/// before any buffer is allocated.
pub fn kv_cache_bytes(c: &LlamaConfig, batch: usize, positions: usize) -> Result<u64> {
    let what = || {
        format!(
            "a KV cache of {positions} positions (the prompt plus the new tokens, at most the \
             config's max_position_embeddings = {}) x {} layers x {} kv heads x head_dim {}",
            c.max_position_embeddings, c.num_hidden_layers, c.num_key_value_heads, c.head_dim
        )
    };
    let bytes = [
        batch,
        c.num_key_value_heads,
        positions,
        c.head_dim,
        c.num_hidden_layers,
        2,
        4,
    ]
    .into_iter()
    .try_fold(1u64, |a, b| a.checked_mul(b as u64))
    .ok_or_else(|| Error::LimitExceeded {
        what: what(),
        value: u64::MAX,
        limit: usize::MAX as u64,
    })?;
    // Reserve (without touching) what the buffers will take: a size beyond the address space
    // or the allocator's reach is refused here instead of aborting in the allocation.
    let reservable = usize::try_from(bytes)
        .ok()
        .is_some_and(|n| Vec::<u8>::new().try_reserve_exact(n).is_ok());
    if !reservable {
        return Err(Error::OutOfMemory {
            what: what(),
            bytes,
        });
    }
    Ok(bytes)
}

impl KvCache {
    /// An empty cache that will hold up to the model's `max_position_embeddings` positions.
    pub fn new() -> KvCache {
        KvCache::default()
    }
    /// An empty cache for `capacity` positions (prompt plus new tokens); capped at the model's
    /// `max_position_embeddings` when allocated.
    pub fn with_capacity(capacity: usize) -> KvCache {
        KvCache {
            capacity,
            ..KvCache::default()
        }
    }
    /// Number of positions cached.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True before the first forward.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Positions the cache holds once allocated (0 before the first forward).
    pub fn capacity(&self) -> usize {
        if self.layers.is_empty() {
            0
        } else {
            self.capacity
        }
    }

    /// Allocates the buffers on the first forward; afterwards checks that the batch matches and
    /// that `total` positions fit.
    fn prepare(&mut self, c: &LlamaConfig, g: &Graph, batch: usize, total: usize) -> Result<()> {
        if self.layers.is_empty() {
            let want = if self.capacity == 0 {
                c.max_positions()
            } else {
                self.capacity.min(c.max_positions())
            };
            let capacity = want.max(total);
            kv_cache_bytes(c, batch, capacity)?;
            self.capacity = capacity;
            self.batch = batch;
            let shape = [batch, c.num_key_value_heads, self.capacity, c.head_dim];
            let zeros = || g.constant(g.backend().zeros(&shape)?);
            self.layers = (0..c.num_hidden_layers)
                .map(|_| Ok(Some((zeros()?, zeros()?))))
                .collect::<Result<_>>()?;
            return Ok(());
        }
        if self.layers.len() != c.num_hidden_layers {
            return Err(Error::Autograd {
                why: format!(
                    "llama: KV cache has {} layers, the model {}",
                    self.layers.len(),
                    c.num_hidden_layers
                ),
            });
        }
        if batch != self.batch {
            return Err(Error::mismatch("llama KV cache", &[self.batch], &[batch]));
        }
        if total > self.capacity {
            return Err(Error::LimitExceeded {
                what: format!(
                    "llama: KV cache positions (cached {} + new {})",
                    self.len,
                    total - self.len
                ),
                value: total as u64,
                limit: self.capacity as u64,
            });
        }
        Ok(())
    }
}

/// A llama model: its config and its parameters on one backend.
#[derive(Debug, Clone)]
pub struct Llama {
    pub config: LlamaConfig,
    pub store: ParamStore,
}

/// Whether a checkpoint tensor is a matrix the model multiplies by (a projection, the
/// embedding table or the output head): those keep a weight dtype (f16, bf16, GGML blocks);
/// every other tensor (norm weights, biases) is decoded to f32 at load.
pub fn is_matrix_weight(name: &str) -> bool {
    name.ends_with("_proj.weight")
        || name.ends_with("embed_tokens.weight")
        || name.ends_with("lm_head.weight")
}

/// The parameters one checkpoint tensor becomes: itself, or (Phi-3) the rows of a fused
/// projection split into the separate ones, or (Gemma) a norm weight `w` stored as `1 + w`.
/// Weight dtypes stay packed on matrices (the split cuts whole rows of blocks) and are decoded
/// elsewhere.
fn load_transform(c: &LlamaConfig, name: &str, t: &Tensor) -> Result<Vec<(String, Tensor)>> {
    let t = &if t.dtype().is_weight() && !is_matrix_weight(name) {
        t.dequantize()?
    } else {
        t.clone()
    };
    let split = |parts: &[(&str, usize)]| -> Result<Vec<(String, Tensor)>> {
        let cols = t.shape().get(1).copied().unwrap_or(0);
        let row_bytes = t.dtype().bytes_for(cols).unwrap_or(0);
        let packed = t.dtype().is_weight();
        let (floats, bytes) = if packed {
            (Vec::new(), t.packed_bytes()?)
        } else {
            (t.to_f32_vec()?, &[][..])
        };
        let prefix = name.rsplit_once('.').map_or("", |(p, _)| p);
        let prefix = prefix.rsplit_once('.').map_or("", |(p, _)| p);
        let mut start = 0;
        parts
            .iter()
            .map(|&(part, rows)| {
                let end = start + rows;
                let too_small = || Error::BadModelFile {
                    path: name.into(),
                    why: format!("tensor `{name}` is too small to split"),
                };
                let piece = if packed {
                    let b = bytes
                        .get(start * row_bytes..end * row_bytes)
                        .ok_or_else(too_small)?;
                    Tensor::from_raw(&[rows, cols], t.dtype(), b.to_vec())?
                } else {
                    let f = floats.get(start * cols..end * cols).ok_or_else(too_small)?;
                    Tensor::from_f32(&[rows, cols], f.to_vec())?
                };
                start = end;
                Ok((format!("{prefix}.{part}.weight"), piece))
            })
            .collect()
    };
    let d = c.head_dim;
    let (q, kv) = (c.num_attention_heads * d, c.num_key_value_heads * d);
    if name.ends_with(".self_attn.qkv_proj.weight") {
        return split(&[("q_proj", q), ("k_proj", kv), ("v_proj", kv)]);
    }
    if name.ends_with(".mlp.gate_up_proj.weight") {
        let i = c.intermediate_size;
        return split(&[("gate_proj", i), ("up_proj", i)]);
    }
    if c.variant.norm_plus_one && name.ends_with("norm.weight") {
        let w: Vec<f32> = t.to_f32_vec()?.iter().map(|w| 1.0 + w).collect();
        return Ok(vec![(name.into(), Tensor::from_f32(t.shape(), w)?)]);
    }
    Ok(vec![(name.into(), t.clone())])
}

fn checked_shape(name: &str, t: &Tensor, want: &[usize]) -> Result<()> {
    if t.shape() != want {
        return Err(Error::BadModelFile {
            path: name.into(),
            why: format!(
                "tensor `{name}` has shape {:?}, the config needs {want:?}",
                t.shape()
            ),
        });
    }
    Ok(())
}

impl Llama {
    /// A model from host tensors by Hugging Face name (a parsed checkpoint). A missing or
    /// misshapen tensor is an error naming it, and so is a tensor the config does not use (a
    /// checkpoint of another shape of model, or a feature this implementation lacks). Phi-3's
    /// fused `qkv_proj` and `gate_up_proj` are split into the separate projections here, and
    /// Gemma's `(1 + weight)` norm weights are stored as `1 + weight`.
    pub fn from_tensors(
        config: LlamaConfig,
        tensors: &alloc::collections::BTreeMap<String, Tensor>,
        backend: Rc<dyn Backend>,
    ) -> Result<Llama> {
        Llama::load(config, tensors, backend, false)
    }

    /// [`Llama::from_tensors`] for inference: on a device backend, each layer's q, k and v
    /// projections are concatenated at load into one `self_attn.qkv_proj` (where the three
    /// share a dtype and q and k have no per-head norm), so a step makes one product for the
    /// three and one `rope_kv_write` (rope on q and k as k and v are written into the cache),
    /// and a SwiGLU MLP's gate and up into one `mlp.gate_up_proj` (where the two share a dtype),
    /// which one `matmul_swiglu` multiplies and gates.
    /// On the CPU the weights stay as the checkpoint has them (they are read where they lie,
    /// often in a memory-mapped file). The parameter names then differ from the checkpoint's:
    /// train and save with [`Llama::from_tensors`].
    pub fn for_inference(
        config: LlamaConfig,
        tensors: &alloc::collections::BTreeMap<String, Tensor>,
        backend: Rc<dyn Backend>,
    ) -> Result<Llama> {
        let fuse = backend.device() != crate::tensor::DeviceId::CPU;
        Llama::load(config, tensors, backend, fuse)
    }

    /// Whether layer `l` runs on a fused q/k/v projection ([`Llama::for_inference`]).
    pub fn fused_qkv(&self, l: usize) -> bool {
        self.store.contains(&fuse::qkv_name(l, "weight"))
    }

    fn load(
        config: LlamaConfig,
        tensors: &alloc::collections::BTreeMap<String, Tensor>,
        backend: Rc<dyn Backend>,
        fuse: bool,
    ) -> Result<Llama> {
        config.validate()?;
        let needed = config.tensor_count()?;
        if needed > tensors.len() {
            // Some name is missing: the first one, found within len + 1 names.
            let name = config
                .checkpoint_shapes_iter()
                .map(|(n, _)| n)
                .find(|n| !tensors.contains_key(n))
                .unwrap_or_default();
            return Err(Error::BadModelFile {
                path: "config.json".into(),
                why: format!(
                    "the config needs {needed} tensors (num_hidden_layers = {}), the checkpoint \
                     holds {}; the first missing is `{name}`",
                    config.num_hidden_layers,
                    tensors.len()
                ),
            });
        }
        let mut params = Vec::new();
        let mut used = alloc::collections::BTreeSet::new();
        for (name, shape) in config.checkpoint_shapes_iter() {
            let t = tensors.get(&name).ok_or_else(|| Error::Missing {
                what: format!("tensor in {} checkpoint", config.variant.model_type),
                name: name.clone(),
            })?;
            checked_shape(&name, t, &shape)?;
            if t.dtype().is_int() {
                return Err(Error::BadModelFile {
                    path: name.clone(),
                    why: format!("tensor `{name}` has integer dtype {}", t.dtype().name()),
                });
            }
            params.extend(load_transform(&config, &name, t)?);
            used.insert(name);
        }
        if let Some(extra) = tensors.keys().find(|n| !used.contains(*n)) {
            let unused = tensors.len() - used.len();
            return Err(Error::BadModelFile {
                path: extra.clone(),
                why: format!(
                    "the checkpoint holds {unused} tensor(s) the config does not use, the first \
                     `{extra}` (model_type `{}`, tie_word_embeddings = {}, \
                     num_hidden_layers = {}): a checkpoint of another model, or a feature this \
                     implementation lacks",
                    config.variant.model_type, config.tie_word_embeddings, config.num_hidden_layers
                ),
            });
        }
        if fuse {
            fuse::fuse_qkv(&config, &mut params)?;
            fuse::fuse_gate_up(&config, &mut params)?;
        }
        let mut store = ParamStore::new(backend);
        for (param, value) in params {
            store.register(&param, value)?;
        }
        Ok(Llama { config, store })
    }

    /// A freshly initialized model as Hugging Face initializes one: weights `normal(0, 0.02)`,
    /// norm weights ones.
    pub fn init(config: LlamaConfig, backend: Rc<dyn Backend>, rng: &mut Rng) -> Result<Llama> {
        config.validate()?;
        let mut store = ParamStore::new(backend);
        for (name, shape) in config.tensor_shapes() {
            let t = if name.ends_with(".bias") {
                Tensor::zeros(&shape)?
            } else if shape.len() == 1 {
                Tensor::full(&shape, 1.0)?
            } else {
                rng.normal_tensor(&shape, 0.0, 0.02)?
            };
            store.register(&name, t)?;
        }
        Ok(Llama { config, store })
    }

    /// Binds the parameters into a graph.
    pub fn bind(&self, g: &Graph) -> Result<Params> {
        self.store.bind(g)
    }

    /// ids `[batch, seq]` (i32) -> hidden states `[batch, seq, hidden]` after the final norm.
    /// With a cache, positions continue after the cached ones and the new keys and values are
    /// appended; without one, the sequence stands alone.
    pub fn forward(
        &self,
        g: &Graph,
        p: &Params,
        ids: &Var,
        mut cache: Option<&mut KvCache>,
    ) -> Result<Var> {
        let c = &self.config;
        let &[batch, seq] = ids.shape() else {
            return Err(Error::bad_shape(
                "llama",
                "ids",
                ids.shape(),
                "needs [batch, seq]",
            ));
        };
        if batch == 0 || seq == 0 {
            return Err(Error::Empty {
                op: "llama",
                tensor: "ids".into(),
            });
        }
        let offset = cache.as_ref().map_or(0, |k| k.len);
        let total = offset + seq;
        if total > c.max_positions() {
            return Err(Error::LimitExceeded {
                what: format!(
                    "llama: sequence length (cached {offset} + new {seq}) over max_position_embeddings"
                ),
                value: total as u64,
                limit: c.max_positions() as u64,
            });
        }
        if let Some(k) = cache.as_deref_mut() {
            k.prepare(c, g, batch, total)?;
        }
        let var = &c.variant;
        let (hq, hkv, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let mut x = g.embedding(ids, p.get("model.embed_tokens.weight")?)?;
        if var.scale_embeddings {
            // Gemma: sqrt(hidden_size) rounded to f32, as transformers' embed_scale buffer.
            x = g.scale(&x, libm::sqrt(c.hidden_size as f64) as f32)?;
        }
        for l in 0..c.num_hidden_layers {
            let w = |n: &str| p.get(&format!("model.layers.{l}.{n}"));
            let norm = |t: &Var, n: &str| g.rms_norm(t, w(n)?, c.rms_norm_eps);
            let h = norm(&x, "input_layernorm.weight")?;
            // W @ h^T: [batch, heads * d, seq] -> [batch, heads, d, seq]; with a bias, the
            // rows h @ W^T + b are transposed into that layout.
            let proj = |n: &str, heads: usize| -> Result<Var> {
                let t = if var.qkv_bias {
                    let weight = w(&format!("self_attn.{n}_proj.weight"))?;
                    let bias = w(&format!("self_attn.{n}_proj.bias"))?;
                    let rows = g.linear(&h, weight, bias, Activation::None)?;
                    if seq == 1 {
                        g.reshape(&rows, &[batch, heads * d, 1])?
                    } else {
                        g.transpose(&rows)?
                    }
                } else {
                    g.matmul_t(w(&format!("self_attn.{n}_proj.weight"))?, &h, false, true)?
                };
                g.reshape(&t, &[batch, heads, d, seq])
            };
            let to_rows = |t: &Var, heads: usize| -> Result<Var> {
                // [b, h, d, s] -> [b, h, s, d]; a reshape when s = 1 (same memory order).
                if seq == 1 {
                    g.reshape(t, &[batch, heads, 1, d])
                } else {
                    g.transpose(t)
                }
            };
            let rope = c.rope(l).op(offset, total, d, c.max_position_embeddings);
            // Qwen3 and Gemma 3 norm each head of q and k before the rotation.
            let head_norm = |t: Var, n: &str| -> Result<Var> {
                if var.qk_norm {
                    norm(&t, &format!("self_attn.{n}_norm.weight"))
                } else {
                    Ok(t)
                }
            };
            let attrs = AttentionAttrs {
                causal: true,
                scale: c.attention_scale(l),
                kv_len: 0,
                window: c.window(l).unwrap_or(0),
            };
            let layer_cache = match cache.as_deref_mut() {
                Some(kc) => {
                    let slot = kc.layers.get_mut(l).ok_or_else(|| Error::Autograd {
                        why: format!("llama: KV cache has no layer {l}"),
                    })?;
                    Some(slot)
                }
                None => None,
            };
            let a = if p.contains(&fuse::qkv_name(l, "weight")) {
                // One product over q, k and v concatenated at load, then rope on q and k as k
                // and v are written into the cache (without one, into caches of this sequence).
                let heads = hq + 2 * hkv;
                let qkv = to_rows(&proj("qkv", heads)?, heads)?;
                let op =
                    crate::op::Op::rope_kv_write_from(&rope).ok_or_else(|| Error::Autograd {
                        why: "llama: the rotation is not a rope op".into(),
                    })?;
                match layer_cache {
                    Some(slot) => {
                        // Moved into rope_kv_write (donated in an inference graph), as for
                        // kv_write below: the new rows land in place.
                        let (k_cache, v_cache) = slot.take().ok_or_else(|| Error::Autograd {
                            why: format!("llama: KV cache layer {l} was lost by a failed forward"),
                        })?;
                        let (k, v, q) = g.rope_kv_write(k_cache, v_cache, &qkv, op)?;
                        *slot = Some((k.clone(), v.clone()));
                        let attrs = AttentionAttrs {
                            kv_len: total,
                            ..attrs
                        };
                        g.attention_with(&q, &k, &v, attrs)?
                    }
                    None => {
                        let zeros = || g.constant(g.backend().zeros(&[batch, hkv, seq, d])?);
                        let (k, v, q) = g.rope_kv_write(zeros()?, zeros()?, &qkv, op)?;
                        g.attention_with(&q, &k, &v, attrs)?
                    }
                }
            } else {
                let q = head_norm(to_rows(&proj("q", hq)?, hq)?, "q")?;
                let q = g.rope_with(&q, rope)?;
                let k_new = head_norm(to_rows(&proj("k", hkv)?, hkv)?, "k")?;
                let k_new = g.rope_with(&k_new, rope)?;
                let v_new = to_rows(&proj("v", hkv)?, hkv)?;
                match layer_cache {
                    Some(slot) => {
                        let (k_cache, v_cache) = slot.take().ok_or_else(|| Error::Autograd {
                            why: format!("llama: KV cache layer {l} was lost by a failed forward"),
                        })?;
                        // The cache's values are moved into kv_write (donated in an inference
                        // graph), so the new rows land in place; the cache keeps the results
                        // (the same storage), which are unique again once this forward's
                        // locals drop.
                        let k = g.kv_write(k_cache, &k_new, offset)?;
                        let v = g.kv_write(v_cache, &v_new, offset)?;
                        *slot = Some((k.clone(), v.clone()));
                        let attrs = AttentionAttrs {
                            kv_len: total,
                            ..attrs
                        };
                        g.attention_with(&q, &k, &v, attrs)?
                    }
                    None => g.attention_with(&q, &k_new, &v_new, attrs)?,
                }
            };
            // [b, hq, s, d] -> [b, hq * d, s]; o_proj as (a^T)^T @ Wo^T = [b, s, hidden].
            let a_cols = if seq == 1 {
                g.reshape(&a, &[batch, hq * d, 1])?
            } else {
                let t = g.transpose(&a)?;
                g.reshape(&t, &[batch, hq * d, seq])?
            };
            // `x + op(a) @ W^T`: the residual add in the product's epilogue (`matmul_add`,
            // accumulated into `x` itself in an inference graph); Gemma 3 norms the product
            // first (its `post_norm`).
            let residual = |x: Var, a: &Var, wt: &str, trans_a: bool, post_norm: &str| {
                let wt = w(wt)?;
                if var.sandwich_norms {
                    let p = g.matmul_t(a, wt, trans_a, true)?;
                    g.add(&x, &norm(&p, post_norm)?)
                } else {
                    g.matmul_add(x, a, wt, trans_a, true)
                }
            };
            let o_proj = "self_attn.o_proj.weight";
            x = residual(x, &a_cols, o_proj, true, "post_attention_layernorm.weight")?;
            let h2 = if var.sandwich_norms {
                norm(&x, "pre_feedforward_layernorm.weight")?
            } else {
                norm(&x, "post_attention_layernorm.weight")?
            };
            let gate_up = fuse::gate_up_name(l);
            let act = if p.contains(&gate_up) {
                // Gate and up as one product over their weights concatenated at load, gated in
                // its epilogue.
                g.matmul_swiglu(&h2, p.get(&gate_up)?)?
            } else {
                let gate = g.matmul_t(&h2, w("mlp.gate_proj.weight")?, false, true)?;
                let up = g.matmul_t(&h2, w("mlp.up_proj.weight")?, false, true)?;
                match var.mlp_act {
                    MlpAct::Silu => g.swiglu(&gate, &up)?,
                    MlpAct::GeluTanh => {
                        let gate = g.gelu_with(&gate, GeluApprox::Tanh)?;
                        g.mul(&gate, &up)?
                    }
                }
            };
            let down = "mlp.down_proj.weight";
            x = residual(x, &act, down, false, "post_feedforward_layernorm.weight")?;
        }
        if let Some(k) = cache {
            k.len = total;
        }
        g.rms_norm(&x, p.get("model.norm.weight")?, c.rms_norm_eps)
    }

    /// Hidden states `[..., hidden]` -> logits `[..., vocab]`.
    pub fn logits(&self, g: &Graph, p: &Params, hidden: &Var) -> Result<Var> {
        let head = if self.config.tie_word_embeddings {
            p.get("model.embed_tokens.weight")?
        } else {
            p.get("lm_head.weight")?
        };
        g.matmul_t(hidden, head, false, true)
    }

    /// The last position's hidden state of each sequence: `[batch, seq, hidden]` ->
    /// `[batch, hidden]`, gathered on the device with the embedding op (rows of the flattened
    /// states), so only the rows that matter reach the vocabulary projection.
    pub fn last_positions(&self, g: &Graph, hidden: &Var) -> Result<Var> {
        let &[batch, seq, h] = hidden.shape() else {
            return Err(Error::bad_shape(
                "llama",
                "hidden",
                hidden.shape(),
                "needs [batch, seq, hidden]",
            ));
        };
        if seq == 1 {
            return g.reshape(hidden, &[batch, h]);
        }
        let rows: Vec<i32> = (0..batch).map(|b| (b * seq + seq - 1) as i32).collect();
        let rows = g.constant(g.backend().upload(&Tensor::from_i32(&[batch], rows)?)?)?;
        let flat = g.reshape(hidden, &[batch * seq, h])?;
        g.embedding(&rows, &flat)
    }

    /// Mean cross-entropy of the tokens at `positions` of every row: logits at position `i`
    /// predict `targets[b, i]`. ids and targets `[batch, seq]`.
    pub fn loss(
        &self,
        g: &Graph,
        p: &Params,
        ids: &Var,
        targets: &[i32],
        positions: &[usize],
    ) -> Result<Var> {
        let &[batch, seq] = ids.shape() else {
            return Err(Error::bad_shape(
                "llama",
                "ids",
                ids.shape(),
                "needs [batch, seq]",
            ));
        };
        if targets.len() != batch * seq {
            return Err(Error::mismatch(
                "llama loss",
                &[batch * seq],
                &[targets.len()],
            ));
        }
        if let Some(&bad) = positions.iter().find(|&&i| i >= seq) {
            return Err(Error::IndexOutOfRange {
                op: "llama loss",
                tensor: "positions".into(),
                index: bad as i64,
                bound: seq,
            });
        }
        let hidden = self.forward(g, p, ids, None)?;
        let h = self.config.hidden_size;
        let flat = g.reshape(&hidden, &[batch * seq, h])?;
        let rows: Vec<i32> = (0..batch)
            .flat_map(|b| positions.iter().map(move |&i| (b * seq + i) as i32))
            .collect();
        let n = rows.len();
        let picked: Vec<i32> = rows
            .iter()
            .map(|&r| targets.get(r as usize).copied().unwrap_or(0))
            .collect();
        let up = |t: Tensor| -> Result<Var> { g.constant(g.backend().upload(&t)?) };
        let rows = up(Tensor::from_i32(&[n], rows)?)?;
        let picked = up(Tensor::from_i32(&[n], picked)?)?;
        let sel = g.embedding(&rows, &flat)?;
        let logits = self.logits(g, p, &sel)?;
        g.cross_entropy(&logits, &picked)
    }
}
