//! The model-level step of generation with a [`Llama`]: sampling options, the [`Decoder`]
//! (prefill and decode over a KV cache that survives between calls), the id-level
//! [`Generation`] and [`generate`] for benchmarks and model tests, and [`greedy_batch`].

use alloc::vec;
use alloc::vec::Vec;

use super::{KvCache, Llama};
use crate::autograd::{Graph, Var};
use crate::error::{Error, Result};
use crate::nn::Params;
use crate::op::{Op, SAMPLE_TOP_K, SAMPLE_TOP_P};
use crate::rng::Rng;
use crate::tensor::Tensor;

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

/// A model's inference state across calls: the graph, its bound parameters, the KV cache and
/// the sampler. This is the model-level step of every generation: [`Decoder::prefill`] feeds
/// token ids after the cached positions and samples the next token; [`Decoder::decode`] feeds
/// the token it sampled last (still on the device) and samples the next. The cache survives
/// between calls, so a chat prefills only a turn's new tokens, and [`Decoder::truncate`] forgets
/// positions from a point on (a conversation that changed there). The text-level loop (prompt
/// encoding, stop conditions, streaming) is kernels-chat's.
pub struct Decoder {
    /// A clone of the caller's model (its tensors are shared, not copied).
    model: Llama,
    graph: Graph,
    params: Params,
    cache: KvCache,
    rng: Rng,
    sample_op: Op,
    /// The last sampled token, on the device: [`Decoder::decode`]'s input.
    last: Option<Var>,
    /// This decoder's steps for [`crate::Backend::replay_step`] (its cache and model).
    replay_key: u64,
}

impl Drop for Decoder {
    fn drop(&mut self) {
        self.model.store.backend().release_replay(self.replay_key);
    }
}

/// Distinct [`Decoder`] replay keys in one process. `AtomicUsize`, not `AtomicU64`: the
/// `no_std` targets (thumbv7em) have no 64-bit atomics; a 32-bit count wraps only after 2^32
/// decoders.
static REPLAY_KEYS: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(1);

impl Decoder {
    /// A decoder whose cache will hold `capacity` positions (capped at the model's
    /// `max_position_embeddings` when allocated; 0: that). Checks the sampling attributes; no
    /// work on the device yet.
    pub fn new(model: &Llama, sampling: Sampling, capacity: usize) -> Result<Decoder> {
        let s = sampling;
        crate::cpu::sample::check_attrs(s.temperature, s.top_k, s.top_p)?;
        let graph = Graph::inference(model.store.backend().clone());
        let params = model.bind(&graph)?;
        Ok(Decoder {
            model: model.clone(),
            graph,
            params,
            cache: KvCache::with_capacity(capacity),
            rng: Rng::new(s.seed),
            sample_op: Op::Sample {
                temperature: s.temperature,
                top_k: s.top_k,
                top_p: s.top_p,
            },
            last: None,
            replay_key: REPLAY_KEYS.fetch_add(1, core::sync::atomic::Ordering::Relaxed) as u64,
        })
    }

    pub fn model(&self) -> &Llama {
        &self.model
    }

    /// Positions in the cache.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// The most positions this decoder holds: the capacity asked for (0: the model's
    /// `max_position_embeddings`), at most the model's.
    pub fn context(&self) -> usize {
        let max = self.model.config.max_positions();
        match self.cache.capacity {
            0 => max,
            n => n.min(max),
        }
    }

    /// Forgets the cached positions from `len` on (the next prefill continues at `len`); the
    /// last sampled token is dropped, so the next call must be a prefill.
    pub fn truncate(&mut self, len: usize) {
        self.cache.len = self.cache.len.min(len);
        self.last = None;
    }

    /// Feeds `ids` after the cached positions and samples the token that follows them.
    pub async fn prefill(&mut self, ids: &[u32]) -> Result<u32> {
        let c = &self.model.config;
        if ids.is_empty() {
            return Err(Error::Empty {
                op: "generate",
                tensor: "prompt".into(),
            });
        }
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= c.vocab_size) {
            return Err(Error::IndexOutOfRange {
                op: "generate",
                tensor: "prompt".into(),
                index: i64::from(bad),
                bound: c.vocab_size,
            });
        }
        self.check_room(ids.len())?;
        let ids: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
        let backend = self.model.store.backend().clone();
        let input = self
            .graph
            .constant(backend.upload(&Tensor::from_i32(&[1, ids.len()], ids)?)?)?;
        self.step(&input).await
    }

    /// Feeds the token sampled last and samples the next.
    pub async fn decode(&mut self) -> Result<u32> {
        Ok(self.decode_step(false).await?.0)
    }

    /// [`Decoder::decode`], also giving the logits the token was sampled from (`[1, vocab]`,
    /// on the host).
    pub async fn decode_logits(&mut self) -> Result<(u32, Tensor)> {
        let (id, logits) = self.decode_step(true).await?;
        let logits = logits.ok_or_else(|| Error::Autograd {
            why: "generate: a decode step gave no logits".into(),
        })?;
        Ok((id, logits))
    }

    async fn decode_step(&mut self, want_logits: bool) -> Result<(u32, Option<Tensor>)> {
        let input = self.last.clone().ok_or_else(|| Error::Autograd {
            why: "generate: decode before a prefill".into(),
        })?;
        self.check_room(1)?;
        let position = self.cache.len();
        let backend = self.model.store.backend().clone();
        if position >= self.cache.capacity() {
            // The forward says why the cache is full.
            return Ok((self.step(&input).await?, None));
        }
        // One token through the cache, which a backend may replay as captured (CUDA graphs):
        // then `record` does not run and the cache's length moves here.
        self.last = None;
        // Greedy sampling reads no draw: a constant one, which a replay need not rewrite.
        let draw = self.rng.uniform();
        let draw = if self.greedy() { 0.0 } else { draw };
        let u = Tensor::from_f32(&[1], vec![draw])?;
        let (g, p, model, op) = (&self.graph, &self.params, &self.model, &self.sample_op);
        let cache = &mut self.cache;
        let mut recorded = false;
        let step = crate::backend::ReplayStep {
            key: self.replay_key,
            position,
            input: input.tensor(),
            feed: 0,
            host: &[(1, u.clone())],
        };
        let outs = backend.replay_step(&step, &mut || {
            recorded = true;
            let hidden = model.forward(g, p, &input, Some(&mut *cache))?;
            let last = model.last_positions(g, &hidden)?;
            let logits = model.logits(g, p, &last)?;
            let u = g.constant(backend.upload(&u)?)?;
            let next = sample(g, op, &logits, &u)?;
            Ok(vec![
                next.tensor().clone(),
                u.tensor().clone(),
                logits.tensor().clone(),
            ])
        })?;
        if !recorded {
            cache.len = position + 1;
        }
        let missing = || Error::Autograd {
            why: "generate: a decode step gave no token".into(),
        };
        let next = outs.first().cloned().ok_or_else(missing)?;
        let host = backend.download(&next).await?;
        let id = host.to_i64_vec()?.first().copied().unwrap_or(0) as u32;
        let logits = match (want_logits, outs.get(2)) {
            (true, Some(l)) => Some(backend.download(l).await?),
            (true, None) => return Err(missing()),
            (false, _) => None,
        };
        self.last = Some(g.reshape(&g.constant(next)?, &[1, 1])?);
        Ok((id, logits))
    }

    fn greedy(&self) -> bool {
        matches!(self.sample_op, Op::Sample { temperature, .. } if temperature == 0.0)
    }

    fn check_room(&self, new: usize) -> Result<()> {
        let total = self.cache.len().saturating_add(new);
        let limit = self.model.config.max_positions();
        if total > limit {
            return Err(Error::LimitExceeded {
                what: "generate: tokens over the model's max_position_embeddings".into(),
                value: total as u64,
                limit: limit as u64,
            });
        }
        Ok(())
    }

    async fn step(&mut self, input: &Var) -> Result<u32> {
        self.last = None;
        let (g, p, model) = (&self.graph, &self.params, &self.model);
        let backend = model.store.backend().clone();
        let hidden = model.forward(g, p, input, Some(&mut self.cache))?;
        let last = model.last_positions(g, &hidden)?;
        let logits = model.logits(g, p, &last)?;
        let u = g.constant(backend.upload(&Tensor::from_f32(&[1], vec![self.rng.uniform()])?)?)?;
        let next = sample(g, &self.sample_op, &logits, &u)?;
        let host = backend.download(next.tensor()).await?;
        let id = host.to_i64_vec()?.first().copied().unwrap_or(0) as u32;
        self.last = Some(g.reshape(&next, &[1, 1])?);
        Ok(id)
    }
}

/// The sampled ids of `logits` (`u`: the step's uniform draw).
fn sample(g: &Graph, op: &Op, logits: &Var, u: &Var) -> Result<Var> {
    g.apply(op, &[logits, u])?
        .pop()
        .ok_or_else(|| Error::Autograd {
            why: "sample: expected one output".into(),
        })
}

/// Token ids generated from a prompt one at a time over a [`Decoder`], for benchmarks and
/// model tests (text generation, with its stop conditions and streaming, is kernels-chat's).
/// [`generate`] is this in a loop.
pub struct Generation<'m> {
    decoder: Decoder,
    _model: core::marker::PhantomData<&'m Llama>,
    prompt: Vec<u32>,
    opts: GenerateOptions,
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
        if prompt.len() > c.max_positions() {
            return Err(Error::LimitExceeded {
                what: "generate: prompt tokens over the model's max_position_embeddings".into(),
                value: prompt.len() as u64,
                limit: c.max_positions() as u64,
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
        // Room for the prompt and every new token (the last is never fed back), capped at
        // max_position_embeddings when allocated.
        let capacity = prompt.len().saturating_add(opts.max_new_tokens);
        Ok(Generation {
            decoder: Decoder::new(model, opts.sampling, capacity)?,
            _model: core::marker::PhantomData,
            prompt: prompt.to_vec(),
            opts: opts.clone(),
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
        let feed = if self.out.is_empty() {
            self.prompt.len()
        } else {
            1
        };
        if self.decoder.cached() + feed > self.decoder.model.config.max_positions() {
            self.stopped = Some(StopReason::MaxPositions);
            return Ok(None);
        }
        let id = if self.out.is_empty() {
            self.decoder.prefill(&self.prompt).await?
        } else {
            self.decoder.decode().await?
        };
        self.out.push(id);
        if self.opts.stop_tokens.contains(&id) {
            self.stopped = Some(StopReason::StopToken);
        }
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
