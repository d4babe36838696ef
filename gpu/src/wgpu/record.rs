//! The batch being recorded: one command encoder, one compute pass that every dispatch goes into
//! until a copy, a clear or the submit ends it (wgpu orders the dispatches of one pass by their
//! bindings: a dispatch that reads or writes what an earlier one wrote waits for it), and the
//! caches that keep a dispatch free of host allocation once warm: bind groups by the identity of
//! their buffers, offsets and sizes, and pipelines by family, entry and constants.

use std::collections::HashMap;

use super::device::{RO_SLOTS, RW_SLOTS};
use crate::device::Family;

/// Most override constants a pipeline is cached under without allocating (more take the
/// general path, `WgpuBackend::pipeline`, which allocates its key).
pub(crate) const FAST_CONSTS: usize = 8;

/// A pipeline's family, entry point and constants (unused constant slots are `("", 0)`).
pub(crate) type FastPipelineKey = (Family, &'static str, [(&'static str, u32); FAST_CONSTS]);

/// One storage slot of a bind group: the buffer (its handle's identity), offset and size in
/// bytes; `None` for a slot bound to a dummy buffer.
pub(crate) type SlotKey = Option<(wgpu::Buffer, u64, u64)>;

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
    groups: HashMap<BindKey, (wgpu::BindGroup, u64)>,
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

#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "record_tests.rs"]
mod tests;
