//! Decode steps replayed from device memory ([`Backend::replay_step`] on CUDA, graphs on).
//!
//! A decode step is captured once per key (a decoder: its KV cache and model) as a CUDA graph
//! and relaunched for every later token as instantiated: no launch is recorded, no parameter
//! built, no graph updated. What changes from token to token lives in device memory:
//!
//! - the position: each kernel whose parameters hold a position ([`position_mask`]: rope's
//!   offset, the KV-cache write's, attention's keys read) adds the shift word of the step's
//!   `Params::shift` (`LaunchParams` in the prelude) to those slots, and the host writes the
//!   shift (position less the captured one) only when it changed;
//! - the fed ids: the graph's last node copies the sampled ids into the ids its first node (the
//!   embedding gather) reads, so greedy decode needs no host write at all; ids fed from
//!   elsewhere (a prefill's) are copied in on the device;
//! - the step's host inputs (a sampler's uniform draw): written into the captured buffers.
//!
//! Grids do not depend on the position (attention runs a block per query row over a cache of
//! fixed capacity, reading `kv_len` keys), so one capture serves every position the cache
//! holds. Before a capture is replayed, the next token is recorded the ordinary way and
//! compared with it: the same kernels, grids and GEMMs, parameters equal except the masked
//! slots (which must differ by the positions' difference), and every buffer read either the
//! captured one, written earlier in the step, the input or a host input. A step that differs
//! otherwise is never replayed (it runs as an updated graph, as before).

use std::collections::HashSet;
use std::sync::Arc;

use kernels_core::backend::ReplayStep;
use kernels_core::tensor::Storage;
use kernels_core::{Error, Result, Tensor};

use super::engine::{Grid, Kernel, Mem, Params, Step};
use super::{CudaBackend, CudaCounters};
use crate::device::Family;

/// The u32 slots of a kernel's parameters that hold a position, as bits (slot `i`: bit `i`):
/// the named blocks of `contract.cuh` (checked by a test against it).
pub(crate) fn position_mask(entry: &str) -> u32 {
    match entry {
        // RopeParams.offset, RopeKvWriteParams.offset: u[3].
        "rope" | "rope_kv_write" => 1 << 3,
        // KvWriteParams.pos: u[4].
        "kv_write" | "kv_write_copy" => 1 << 4,
        // AttentionParams.kv_len: u[7].
        "attn_forward" => 1 << 7,
        _ => 0,
    }
}

/// A captured decode step.
pub(crate) struct Replay {
    /// The engine's graph id.
    id: u64,
    /// Where it was captured.
    position: usize,
    /// Its launches and GEMMs, feed included (they hold its buffers).
    steps: Vec<Step>,
    /// The shift word, and what the device holds in it.
    shift: Arc<dyn Mem>,
    shift_now: u32,
    /// The ids its embedding reads, and the output copied into them at its end.
    input: Arc<dyn Mem>,
    fed: Arc<dyn Mem>,
    /// Its outputs (overwritten by each replay).
    outputs: Vec<Tensor>,
    /// What the host inputs' buffers hold (written only when a step's differ).
    host_now: Vec<Vec<u32>>,
    /// Checked against a second recording: replayed from then on.
    verified: bool,
}

/// A host input's device words (f32 or i32 elements).
fn host_words(t: &Tensor) -> Result<Vec<u32>> {
    match t.storage() {
        Storage::F32(v) => Ok(v.iter().map(|x| x.to_bits()).collect()),
        Storage::I32(v) => Ok(v.iter().map(|&x| x as u32).collect()),
        _ => Err(Error::Backend {
            backend: "cuda".into(),
            why: format!("replay: a host input of {} on the host", t.dtype()),
        }),
    }
}

/// Per key: a capture, or why there will be none.
pub(crate) enum State {
    Captured(Box<Replay>),
    Refused,
}

fn mem_of(be: &CudaBackend, t: &Tensor) -> Result<Arc<dyn Mem>> {
    Ok(be.buffer_of("replay", t)?.mem.clone())
}

fn same(a: &Arc<dyn Mem>, b: &Arc<dyn Mem>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

fn addr(m: &Arc<dyn Mem>) -> *const () {
    Arc::as_ptr(m) as *const ()
}

/// A buffer a step reads, at capture and in the recording compared with it.
type ReadPair<'a> = (&'a Arc<dyn Mem>, &'a Arc<dyn Mem>);

/// Why `new` (recorded at a position `delta` after `old`) cannot be replayed as `old`, if so.
fn differs(old: &[Step], new: &[Step], delta: u32, allowed: &HashSet<*const ()>) -> Option<String> {
    if old.len() != new.len() {
        return Some(format!("{} steps, then {}", old.len(), new.len()));
    }
    let mut written: HashSet<*const ()> = HashSet::new();
    for (i, (o, n)) in old.iter().zip(new).enumerate() {
        let reads: Vec<ReadPair<'_>> = match (o, n) {
            (
                Step::Launch {
                    kernel: k0,
                    grid: g0,
                    params: p0,
                    inputs: i0,
                    outputs: o0,
                },
                Step::Launch {
                    kernel: k1,
                    grid: g1,
                    params: p1,
                    inputs: i1,
                    outputs: o1,
                },
            ) => {
                if k0 != k1 || g0 != g1 || i0.len() != i1.len() || o0.len() != o1.len() {
                    return Some(format!("step {i}: {} then {}", k0.entry, k1.entry));
                }
                let mask = p0.shift_mask;
                let shifted = p0.u.iter().zip(&p1.u).enumerate().all(|(s, (a, b))| {
                    if mask >> s & 1 == 1 {
                        a.wrapping_add(delta) == *b
                    } else {
                        a == b
                    }
                });
                let rest = Params { u: p1.u, ..*p0 } == *p1;
                if !shifted || !rest {
                    return Some(format!("step {i} ({}): parameters", k0.entry));
                }
                written.extend(o1.iter().map(addr));
                i0.iter().zip(i1).collect()
            }
            (
                Step::Gemm {
                    gemm: m0,
                    a: a0,
                    b: b0,
                    c: c0,
                },
                Step::Gemm {
                    gemm: m1,
                    a: a1,
                    b: b1,
                    c: c1,
                },
            ) => {
                if m0 != m1 {
                    return Some(format!("step {i}: GEMM shapes"));
                }
                let mut r = vec![(a0, a1), (b0, b1)];
                if m0.accumulate {
                    r.push((c0, c1));
                }
                written.insert(addr(c1));
                r
            }
            _ => return Some(format!("step {i}: a launch against a GEMM")),
        };
        for (r0, r1) in reads {
            let ok = same(r0, r1) || written.contains(&addr(r1)) || allowed.contains(&addr(r1));
            if !ok {
                return Some(format!("step {i}: reads a buffer made for this token"));
            }
        }
    }
    None
}

impl CudaBackend {
    /// Runs `record` with kernels' position slots pointed at `shift` (see [`position_mask`]),
    /// and returns its outputs and the steps it recorded (not run).
    fn record_shifted(
        &self,
        shift: &Arc<dyn Mem>,
        record: &mut dyn FnMut() -> Result<Vec<Tensor>>,
    ) -> Result<(Vec<Tensor>, Vec<Step>)> {
        self.shift_at.set(self.engine.address(shift.as_ref())?);
        let outs = record();
        self.shift_at.set(0);
        let steps = std::mem::take(&mut *self.pending.borrow_mut());
        Ok((outs?, steps))
    }

    /// `Params::shift` for a launch of `kernel` while a step is captured.
    pub(crate) fn shift_params(&self, kernel: Kernel, params: &mut Params) {
        let at = self.shift_at.get();
        let mask = position_mask(kernel.entry);
        if at != 0 && mask != 0 {
            params.shift = at;
            params.shift_mask = mask;
        }
    }

    /// A launch copying `n` words from `from` into `to` (`concat` with nothing after it).
    fn copy_step(&self, from: Arc<dyn Mem>, to: Arc<dyn Mem>, n: usize) -> Result<Step> {
        let kernel = Kernel {
            family: Family::Layout,
            entry: "concat",
        };
        self.engine.prepare(kernel)?;
        let n32 = u32::try_from(n).map_err(|_| Error::LimitExceeded {
            what: "cuda replay: fed ids".into(),
            value: n as u64,
            limit: u64::from(u32::MAX),
        })?;
        let mut params = Params::default();
        params.u[..3].copy_from_slice(&[n32, n32, 0]);
        Ok(Step::Launch {
            kernel,
            grid: Grid {
                blocks: n32.div_ceil(256),
                threads: 256,
                cooperative: false,
            },
            params,
            inputs: vec![from],
            outputs: vec![to],
        })
    }

    pub(crate) fn replay_step_impl(
        &self,
        step: &ReplayStep<'_>,
        record: &mut dyn FnMut() -> Result<Vec<Tensor>>,
    ) -> Result<Vec<Tensor>> {
        if !self.graphs || !self.replay || self.replay_off.get() {
            return record();
        }
        let started = std::time::Instant::now();
        // What was recorded before is its own step.
        self.end_step()?;
        let state = self.replays.borrow_mut().remove(&step.key);
        let (state, outs) = match state {
            Some(State::Refused) => (State::Refused, self.record_plain(record)?),
            None => self.capture(step, record)?,
            Some(State::Captured(r)) if !r.verified => self.verify(step, r, record)?,
            Some(State::Captured(r)) => self.relaunch(step, r, started)?,
        };
        self.replays.borrow_mut().insert(step.key, state);
        Ok(outs)
    }

    fn record_plain(&self, record: &mut dyn FnMut() -> Result<Vec<Tensor>>) -> Result<Vec<Tensor>> {
        let outs = record()?;
        self.end_step()?;
        Ok(outs)
    }

    /// Records the step with its position slots on a fresh shift word (0), adds the feed and
    /// launches it as a new replay graph.
    fn capture(
        &self,
        step: &ReplayStep<'_>,
        record: &mut dyn FnMut() -> Result<Vec<Tensor>>,
    ) -> Result<(State, Vec<Tensor>)> {
        let shift: Arc<dyn Mem> = self.engine.alloc_zeroed(1)?.into();
        let (outputs, mut steps) = self.record_shifted(&shift, record)?;
        let fed_t = outputs.get(step.feed).ok_or_else(|| Error::Backend {
            backend: "cuda".into(),
            why: format!("replay: no output {} to feed", step.feed),
        })?;
        let (input, fed) = (mem_of(self, step.input)?, mem_of(self, fed_t)?);
        if step.input.numel() != fed_t.numel() {
            return Err(Error::mismatch(
                "replay feed",
                step.input.shape(),
                fed_t.shape(),
            ));
        }
        steps.push(self.copy_step(fed.clone(), input.clone(), fed_t.numel())?);
        let id = self.next_replay.get();
        self.next_replay.set(id + 1);
        if let Err(e) = self.engine.replay_capture(id, &steps) {
            // The driver refused the capture (or its instantiation or launch; nothing of the
            // step ran): the step runs as recorded, without the feed (its position slots read
            // the shift word, which holds 0), and no decode step of this backend is captured
            // again.
            eprintln!("cuda: decode steps not replayed on this backend: {e}");
            self.replay_off.set(true);
            self.count(|c| c.replay_refusals += 1);
            steps.pop();
            *self.pending.borrow_mut() = steps;
            self.end_step()?;
            return Ok((State::Refused, outputs));
        }
        let ns = self.step_started.take().map_or(0, |t| {
            u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
        });
        let nodes = steps.len() as u64;
        self.count(|c: &mut CudaCounters| {
            c.host_ns += ns;
            c.launches += 1; // the feed
            c.graph_launches += 1;
            c.graph_instantiations += 1;
            c.graph_nodes += nodes;
        });
        // What the host inputs' buffers hold now.
        let mut host_now = Vec::new();
        for (_, t) in step.host {
            host_now.push(host_words(t)?);
        }
        let replay = Replay {
            id,
            position: step.position,
            steps,
            shift,
            shift_now: 0,
            input,
            fed,
            outputs: outputs.clone(),
            host_now,
            verified: false,
        };
        Ok((State::Captured(Box::new(replay)), outputs))
    }

    /// Records the step the ordinary way (its position slots on the same shift word, which
    /// holds 0 then) and runs it as an updated graph; the capture is replayed from then on if
    /// the two recordings agree, else never.
    fn verify(
        &self,
        step: &ReplayStep<'_>,
        r: Box<Replay>,
        record: &mut dyn FnMut() -> Result<Vec<Tensor>>,
    ) -> Result<(State, Vec<Tensor>)> {
        if r.shift_now != 0 {
            self.engine.write(r.shift.as_ref(), &[0])?;
        }
        let (outs, steps) = self.record_shifted(&r.shift, record)?;
        let delta = (step.position.wrapping_sub(r.position)) as u32;
        let mut allowed: HashSet<*const ()> = HashSet::new();
        allowed.insert(addr(&mem_of(self, step.input)?));
        for (i, _) in step.host {
            if let Some(t) = outs.get(*i) {
                allowed.insert(addr(&mem_of(self, t)?));
            }
        }
        // The feed is not in the recording: compare without it.
        let captured = &r.steps[..r.steps.len().saturating_sub(1)];
        let why = differs(captured, &steps, delta, &allowed);
        *self.pending.borrow_mut() = steps;
        self.end_step()?;
        match why {
            None => {
                let mut r = r;
                r.verified = true;
                Ok((State::Captured(r), outs))
            }
            Some(why) => {
                self.engine.replay_drop(r.id);
                self.count(|c| c.replay_refusals += 1);
                if std::env::var_os("KERNELS_CUDA_REPLAY_DEBUG").is_some() {
                    eprintln!("cuda: decode step not replayed: {why}");
                }
                Ok((State::Refused, outs))
            }
        }
    }

    /// Relaunches the capture: writes what changed (the shift, host inputs, ids fed from
    /// elsewhere) and launches the graph as instantiated.
    fn relaunch(
        &self,
        step: &ReplayStep<'_>,
        mut r: Box<Replay>,
        started: std::time::Instant,
    ) -> Result<(State, Vec<Tensor>)> {
        let mut writes = 0u64;
        let delta = (step.position.wrapping_sub(r.position)) as u32;
        if delta != r.shift_now {
            self.engine.write(r.shift.as_ref(), &[delta])?;
            r.shift_now = delta;
            writes += 1;
        }
        r.host_now.resize(step.host.len(), Vec::new());
        for (k, (i, t)) in step.host.iter().enumerate() {
            let out = r.outputs.get(*i).ok_or_else(|| Error::Backend {
                backend: "cuda".into(),
                why: format!("replay: no output {i} for a host input"),
            })?;
            let words = host_words(t)?;
            if r.host_now[k] != words {
                self.engine.write(mem_of(self, out)?.as_ref(), &words)?;
                r.host_now[k] = words;
                writes += 1;
            }
        }
        let input = mem_of(self, step.input)?;
        if !same(&input, &r.input) && !same(&input, &r.fed) {
            let copy = self.copy_step(input, r.input.clone(), step.input.numel())?;
            copy.run(self.engine.as_ref())?;
            self.count(|c| c.launches += 1);
            writes += 1;
        }
        self.engine.replay_launch(r.id)?;
        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let nodes = r.steps.len() as u64;
        self.count(|c| {
            c.host_ns += ns;
            c.replays += 1;
            c.replayed_nodes += nodes;
            c.replay_writes += writes;
        });
        let outs = r.outputs.clone();
        Ok((State::Captured(r), outs))
    }

    /// Forgets `key`'s capture.
    pub(crate) fn release_replay_impl(&self, key: u64) {
        if let Some(State::Captured(r)) = self.replays.borrow_mut().remove(&key) {
            self.engine.replay_drop(r.id);
        }
    }
}
