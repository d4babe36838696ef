//! Generation with a [`Llama`]: sampling options, a token-at-a-time [`Generation`] driven by
//! the caller, [`generate`] (that in a loop) and [`greedy_batch`].

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
        if self.cache.len() + self.input.shape()[1] > self.model.config.max_positions() {
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
