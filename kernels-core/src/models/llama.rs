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

mod config;

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::autograd::{Graph, Var};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::nn::{ParamStore, Params};
use crate::op::{Op, SAMPLE_TOP_K, SAMPLE_TOP_P};
use crate::rng::Rng;
use crate::tensor::Tensor;

pub use config::LlamaConfig;

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
                c.max_position_embeddings
            } else {
                self.capacity.min(c.max_position_embeddings)
            };
            self.capacity = want.max(total);
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
    /// misshapen tensor is an error naming it; extra tensors (e.g. `rotary_emb.inv_freq`) are
    /// ignored.
    pub fn from_tensors(
        config: LlamaConfig,
        tensors: &alloc::collections::BTreeMap<String, Tensor>,
        backend: Rc<dyn Backend>,
    ) -> Result<Llama> {
        config.validate()?;
        let needed = config.tensor_count()?;
        if needed > tensors.len() {
            // Some name is missing: the first one, found within len + 1 names.
            let name = config
                .tensor_shapes_iter()
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
        let mut store = ParamStore::new(backend);
        for (name, shape) in config.tensor_shapes() {
            let t = tensors.get(&name).ok_or_else(|| Error::Missing {
                what: "tensor in llama checkpoint".into(),
                name: name.clone(),
            })?;
            checked_shape(&name, t, &shape)?;
            if t.dtype().is_int() {
                return Err(Error::BadModelFile {
                    path: name.clone(),
                    why: format!("tensor `{name}` has integer dtype {}", t.dtype().name()),
                });
            }
            store.register(&name, t.clone())?;
        }
        Ok(Llama { config, store })
    }

    /// A freshly initialized model as Hugging Face initializes one: weights `normal(0, 0.02)`,
    /// norm weights ones.
    pub fn init(config: LlamaConfig, backend: Rc<dyn Backend>, rng: &mut Rng) -> Result<Llama> {
        config.validate()?;
        let mut store = ParamStore::new(backend);
        for (name, shape) in config.tensor_shapes() {
            let t = if shape.len() == 1 {
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
        if total > c.max_position_embeddings {
            return Err(Error::LimitExceeded {
                what: format!(
                    "llama: sequence length (cached {offset} + new {seq}) over max_position_embeddings"
                ),
                value: total as u64,
                limit: c.max_position_embeddings as u64,
            });
        }
        if let Some(k) = cache.as_deref_mut() {
            k.prepare(c, g, batch, total)?;
        }
        let (hq, hkv, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let mut x = g.embedding(ids, p.get("model.embed_tokens.weight")?)?;
        for l in 0..c.num_hidden_layers {
            let w = |n: &str| p.get(&format!("model.layers.{l}.{n}"));
            let h = g.rms_norm(&x, w("input_layernorm.weight")?, c.rms_norm_eps)?;
            // W @ h^T: [batch, heads * d, seq] -> [batch, heads, d, seq].
            let proj = |name: &str, heads: usize| -> Result<Var> {
                let t = g.matmul_t(w(name)?, &h, false, true)?;
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
            let q = to_rows(&proj("self_attn.q_proj.weight", hq)?, hq)?;
            let q = g.rope(&q, c.rope_theta, offset, false)?;
            let k_new = to_rows(&proj("self_attn.k_proj.weight", hkv)?, hkv)?;
            let k_new = g.rope(&k_new, c.rope_theta, offset, false)?;
            let v_new = to_rows(&proj("self_attn.v_proj.weight", hkv)?, hkv)?;
            let a = match cache.as_deref_mut() {
                Some(kc) => {
                    let slot = kc.layers.get_mut(l).ok_or_else(|| Error::Autograd {
                        why: format!("llama: KV cache has no layer {l}"),
                    })?;
                    let (k_cache, v_cache) = slot.take().ok_or_else(|| Error::Autograd {
                        why: format!("llama: KV cache layer {l} was lost by a failed forward"),
                    })?;
                    // The cache's values are moved into kv_write (donated in an inference
                    // graph), so the new rows land in place; the cache keeps the results (the
                    // same storage), which are unique again once this forward's locals drop.
                    let k = g.kv_write(k_cache, &k_new, offset)?;
                    let v = g.kv_write(v_cache, &v_new, offset)?;
                    *slot = Some((k.clone(), v.clone()));
                    g.attention_prefix(&q, &k, &v, true, total)?
                }
                None => g.attention(&q, &k_new, &v_new, true, None)?,
            };
            // [b, hq, s, d] -> [b, hq * d, s]; o_proj as (a^T)^T @ Wo^T = [b, s, hidden].
            let a_cols = if seq == 1 {
                g.reshape(&a, &[batch, hq * d, 1])?
            } else {
                let t = g.transpose(&a)?;
                g.reshape(&t, &[batch, hq * d, seq])?
            };
            let o = g.matmul_t(&a_cols, w("self_attn.o_proj.weight")?, true, true)?;
            x = g.add(&x, &o)?;
            let h2 = g.rms_norm(&x, w("post_attention_layernorm.weight")?, c.rms_norm_eps)?;
            let gate = g.matmul_t(&h2, w("mlp.gate_proj.weight")?, false, true)?;
            let up = g.matmul_t(&h2, w("mlp.up_proj.weight")?, false, true)?;
            let act = g.mul(&g.silu(&gate)?, &up)?;
            let down = g.matmul_t(&act, w("mlp.down_proj.weight")?, false, true)?;
            x = g.add(&x, &down)?;
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

/// How the next token is chosen. `temperature = 0` is greedy (argmax).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (ties at the boundary kept); 0 keeps all.
    pub top_k: usize,
    /// Keep the most likely tokens whose mass reaches `top_p`; 1 keeps all.
    pub top_p: f32,
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: SAMPLE_TOP_K,
            top_p: SAMPLE_TOP_P,
            seed: 0,
        }
    }
}

/// What to generate and when to stop.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    /// Generation ends after emitting any of these (default: the config's `eos_token_id`).
    pub stop_tokens: Vec<u32>,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    StopToken,
    MaxTokens,
    MaxPositions,
    Callback,
}

/// Streams generated token ids to `on_token(index, id)` as they come (return `false` to stop):
/// one prefill over the prompt, then one decode step per token over the KV cache. The logits
/// never leave the device: each step samples there and downloads only the token id.
pub async fn generate(
    model: &Llama,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_token: &mut dyn FnMut(usize, u32) -> bool,
) -> Result<(Vec<u32>, StopReason)> {
    let mut run = Generation::start(model, prompt, opts)?;
    while let Some(id) = run.next_token().await? {
        if !on_token(run.tokens().len() - 1, id) && run.stopped().is_none() {
            return Ok((run.into_tokens(), StopReason::Callback));
        }
    }
    let reason = run.stopped().unwrap_or(StopReason::MaxTokens);
    Ok((run.into_tokens(), reason))
}

/// A generation driven one token at a time, for callers that must do something between tokens
/// (a page yields to its event loop). [`generate`] is this in a loop.
pub struct Generation<'m> {
    model: &'m Llama,
    graph: Graph,
    params: Params,
    cache: KvCache,
    rng: Rng,
    sample_op: Op,
    opts: GenerateOptions,
    /// The next forward's input: the prompt, then the last sampled token.
    input: Var,
    out: Vec<u32>,
    stopped: Option<StopReason>,
}

impl<'m> Generation<'m> {
    /// Validates the prompt and the sampling attributes; no work on the device yet.
    pub fn start(
        model: &'m Llama,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<Generation<'m>> {
        let c = &model.config;
        if prompt.is_empty() {
            return Err(Error::Empty {
                op: "generate",
                tensor: "prompt".into(),
            });
        }
        if prompt.len() > c.max_position_embeddings {
            return Err(Error::LimitExceeded {
                what: "generate: prompt tokens over the model's max_position_embeddings".into(),
                value: prompt.len() as u64,
                limit: c.max_position_embeddings as u64,
            });
        }
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= c.vocab_size) {
            return Err(Error::IndexOutOfRange {
                op: "generate",
                tensor: "prompt".into(),
                index: bad as i64,
                bound: c.vocab_size,
            });
        }
        let s = opts.sampling;
        crate::cpu::sample::check_attrs(s.temperature, s.top_k, s.top_p)?;
        let backend = model.store.backend().clone();
        let graph = Graph::inference(backend.clone());
        let params = model.bind(&graph)?;
        let ids: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
        let input = graph.constant(backend.upload(&Tensor::from_i32(&[1, ids.len()], ids)?)?)?;
        Ok(Generation {
            model,
            graph,
            params,
            // Room for the prompt and every new token (the last is never fed back), capped at
            // max_position_embeddings when allocated.
            cache: KvCache::with_capacity(prompt.len().saturating_add(opts.max_new_tokens)),
            rng: Rng::new(s.seed),
            sample_op: Op::Sample {
                temperature: s.temperature,
                top_k: s.top_k,
                top_p: s.top_p,
            },
            opts: opts.clone(),
            input,
            out: Vec::new(),
            stopped: None,
        })
    }

    /// The next token (the first call is the prefill), or `None` once generation has ended
    /// ([`Generation::stopped`] says why).
    pub async fn next_token(&mut self) -> Result<Option<u32>> {
        if self.stopped.is_some() {
            return Ok(None);
        }
        if self.out.len() >= self.opts.max_new_tokens {
            self.stopped = Some(StopReason::MaxTokens);
            return Ok(None);
        }
        if self.cache.len() + self.input.shape()[1] > self.model.config.max_position_embeddings {
            self.stopped = Some(StopReason::MaxPositions);
            return Ok(None);
        }
        let (g, p, model) = (&self.graph, &self.params, self.model);
        let backend = model.store.backend().clone();
        let hidden = model.forward(g, p, &self.input, Some(&mut self.cache))?;
        let last = model.last_positions(g, &hidden)?;
        let logits = model.logits(g, p, &last)?;
        let u = g.constant(backend.upload(&Tensor::from_f32(&[1], vec![self.rng.uniform()])?)?)?;
        let next = g
            .apply(&self.sample_op, &[&logits, &u])?
            .pop()
            .ok_or_else(|| Error::Autograd {
                why: "sample: expected one output".into(),
            })?;
        let host = backend.download(next.tensor()).await?;
        let id = host.to_i64_vec()?.first().copied().unwrap_or(0) as u32;
        self.out.push(id);
        if self.opts.stop_tokens.contains(&id) {
            self.stopped = Some(StopReason::StopToken);
        }
        self.input = g.reshape(&next, &[1, 1])?;
        Ok(Some(id))
    }

    /// The tokens generated so far.
    pub fn tokens(&self) -> &[u32] {
        &self.out
    }

    /// Why generation ended, once it has (`Callback` is never set here: the caller stopped).
    pub fn stopped(&self) -> Option<StopReason> {
        self.stopped
    }

    pub fn into_tokens(self) -> Vec<u32> {
        self.out
    }
}

/// Greedy completions of many prompts of equal length at once (a batch), `new_tokens` each.
/// Used by evaluation, where every problem has the same shape.
pub async fn greedy_batch(
    model: &Llama,
    prompts: &[Vec<u32>],
    new_tokens: usize,
) -> Result<Vec<Vec<u32>>> {
    let Some(first) = prompts.first() else {
        return Ok(Vec::new());
    };
    let seq = first.len();
    if let Some(bad) = prompts.iter().find(|p| p.len() != seq) {
        return Err(Error::mismatch("greedy_batch", &[seq], &[bad.len()]));
    }
    let batch = prompts.len();
    let backend = model.store.backend().clone();
    let g = Graph::inference(backend.clone());
    let p = model.bind(&g)?;
    let mut cache = KvCache::with_capacity(seq.saturating_add(new_tokens));
    let ids: Vec<i32> = prompts.iter().flatten().map(|&t| t as i32).collect();
    let mut input = g.constant(backend.upload(&Tensor::from_i32(&[batch, seq], ids)?)?)?;
    let mut steps = Vec::new();
    for _ in 0..new_tokens {
        let hidden = model.forward(&g, &p, &input, Some(&mut cache))?;
        let last = model.last_positions(&g, &hidden)?;
        let logits = model.logits(&g, &p, &last)?;
        let next = g.argmax(&logits)?;
        input = g.reshape(&next, &[batch, 1])?;
        steps.push(next);
    }
    backend.flush()?;
    let mut out = vec![Vec::with_capacity(new_tokens); batch];
    for step in &steps {
        let ids = backend.download(step.tensor()).await?.to_i64_vec()?;
        for (row, id) in out.iter_mut().zip(ids) {
            row.push(id as u32);
        }
    }
    Ok(out)
}
