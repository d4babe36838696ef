//! The batch being recorded: one command encoder, one compute pass that every dispatch goes into
//! until a copy, a clear or the submit ends it (wgpu orders the dispatches of one pass by their
//! bindings: a dispatch that reads or writes what an earlier one wrote waits for it), and the
//! caches that keep a dispatch free of host allocation once warm: bind groups by the identity of
//! their buffers, offsets and sizes, and pipelines by family, entry and constants. Both caches
//! are keyed by plain integers (buffer identities, the addresses of the `&'static str` names)
//! and hashed with a multiply-rotate hash, so a warm dispatch neither clones a handle nor runs
//! SipHash over its key.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use super::device::{RO_SLOTS, RW_SLOTS};
use crate::device::Family;

/// Most override constants a pipeline is cached under without allocating (more take the
/// general path, `WgpuBackend::pipeline`, which allocates its key).
pub(crate) const FAST_CONSTS: usize = 8;

/// A pipeline's family, entry point and constants, the names by address and length (a name
/// spelled at two places may get two entries, each the same pipeline from
/// `WgpuBackend::pipeline`, which compares names by content); unused constant slots are zeros.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FastPipelineKey {
    family: Family,
    /// Words in use in `words`: 2 for the entry, 3 for each constant.
    used: usize,
    words: [usize; 2 + 3 * FAST_CONSTS],
}

impl FastPipelineKey {
    /// The key, or `None` with more than `FAST_CONSTS` constants.
    pub(crate) fn new(
        family: Family,
        entry: &'static str,
        constants: &[(&'static str, u32)],
    ) -> Option<Self> {
        if constants.len() > FAST_CONSTS {
            return None;
        }
        let mut words = [0usize; 2 + 3 * FAST_CONSTS];
        words[0] = entry.as_ptr() as usize;
        words[1] = entry.len();
        for (w, (name, value)) in words[2..].chunks_exact_mut(3).zip(constants) {
            w[0] = name.as_ptr() as usize;
            w[1] = name.len();
            w[2] = *value as usize;
        }
        Some(FastPipelineKey {
            family,
            used: 2 + 3 * constants.len(),
            words,
        })
    }

    /// The words that identify the pipeline.
    fn key(&self) -> &[usize] {
        &self.words[..self.used]
    }
}

// Only the words in use are compared and hashed (decode's kernels have one to three constants).
impl PartialEq for FastPipelineKey {
    fn eq(&self, other: &Self) -> bool {
        self.family == other.family && self.key() == other.key()
    }
}

impl Eq for FastPipelineKey {}

impl std::hash::Hash for FastPipelineKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.family.hash(state);
        for &w in self.key() {
            state.write_usize(w);
        }
    }
}

/// Pipelines by [`FastPipelineKey`].
pub(crate) type PipelineCache = HashMap<FastPipelineKey, wgpu::ComputePipeline, FastHash>;

/// One storage slot of a bind group: the buffer's identity (`Shared::fresh_id`; 0 for a slot
/// bound to a dummy buffer), offset and size in bytes.
pub(crate) type SlotKey = [u64; 3];

/// Every storage slot of a bind group, read-only ones first. The parameters' uniform slot is
/// not in it: its offset is dynamic, given at `set_bind_group`.
pub(crate) type BindKey = [SlotKey; RO_SLOTS + RW_SLOTS];

pub(crate) struct Recording {
    /// The batch's open compute pass (declared first: it must drop before the encoder).
    pub(crate) pass: Option<wgpu::ComputePass<'static>>,
    pub(crate) encoder: Option<wgpu::CommandEncoder>,
    pub(crate) dispatches: usize,
    /// Parameter blocks of this batch, one aligned slot per dispatch.
    pub(crate) params: Vec<u8>,
}

impl Recording {
    pub(crate) fn new() -> Self {
        Recording {
            pass: None,
            encoder: None,
            dispatches: 0,
            params: Vec::new(),
        }
    }

    /// The batch's encoder with no pass open, for copies and clears (ends the open pass: the
    /// commands after it are ordered after its dispatches).
    pub(crate) fn encoder(&mut self, device: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        self.encoder.get_or_insert_with(|| new_encoder(device))
    }

    /// The batch's compute pass, begun if none is open.
    pub(crate) fn pass(&mut self, device: &wgpu::Device) -> &mut wgpu::ComputePass<'static> {
        let Recording { pass, encoder, .. } = self;
        pass.get_or_insert_with(|| {
            encoder
                .get_or_insert_with(|| new_encoder(device))
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("kernels-batch"),
                    timestamp_writes: None,
                })
                .forget_lifetime()
        })
    }

    /// Ends the open pass and hands out the encoder, leaving the recording empty.
    pub(crate) fn take(&mut self) -> Option<wgpu::CommandEncoder> {
        self.pass = None;
        self.dispatches = 0;
        self.encoder.take()
    }
}

fn new_encoder(device: &wgpu::Device) -> wgpu::CommandEncoder {
    device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("kernels-batch"),
    })
}

/// How many batches back a cached bind group may have last been used and stay.
pub(crate) const KEEP_BATCHES: u64 = 8;

/// Bind groups made so far, by their storage slots, each with the last batch that used it.
#[derive(Default)]
pub(crate) struct BindCache {
    groups: HashMap<BindKey, (wgpu::BindGroup, u64), FastHash>,
}

impl BindCache {
    /// The bind group of `key`, stamped as used in `batch`.
    pub(crate) fn get(&mut self, key: &BindKey, batch: u64) -> Option<wgpu::BindGroup> {
        let (group, used) = self.groups.get_mut(key)?;
        *used = batch;
        Some(group.clone())
    }

    pub(crate) fn insert(&mut self, key: BindKey, group: wgpu::BindGroup, batch: u64) {
        self.groups.insert(key, (group, batch));
    }

    /// Drops the bind groups no dispatch of the last `KEEP_BATCHES` batches used (`batch` is
    /// the batch about to be recorded). A cached group holds its buffers: this keeps a buffer
    /// the pool released alive for at most that many batches more. Decode gets its buffers
    /// from the pool in a cycle of up to six tokens (a token's id and residual stream are
    /// alive while the next token's are made, and the sampler's 4-byte upload may only take
    /// a buffer freed in an earlier batch), so once warm a token finds every group it needs.
    pub(crate) fn prune(&mut self, batch: u64) {
        self.groups
            .retain(|_, (_, used)| used.saturating_add(KEEP_BATCHES) >= batch);
    }

    /// Drops every cached bind group (and with them their hold on buffers).
    pub(crate) fn clear(&mut self) {
        self.groups.clear();
    }
}

/// A multiply-rotate hash (the Firefox/rustc "Fx" hash) for the caches' integer keys: they are
/// made by this backend, not by an adversary, so SipHash's flooding resistance buys nothing.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FastHash;

impl BuildHasher for FastHash {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(0)
    }
}

pub(crate) struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    fn write_isize(&mut self, v: isize) {
        self.add(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "record_tests.rs"]
mod tests;
