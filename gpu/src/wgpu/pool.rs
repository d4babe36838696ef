use std::any::Any;
use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::counters::Counters;
use super::record::FastHash;
use kernels_core::DeviceId;
use kernels_core::tensor::DeviceBuffer;

/// Power-of-two size class of a buffer of `bytes` (at least 16).
pub(crate) fn size_class(bytes: u64) -> u64 {
    bytes.max(16).next_power_of_two()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PoolKind {
    Storage,
    Staging,
}

pub(crate) struct Pooled {
    pub(crate) buf: wgpu::Buffer,
    /// The buffer's identity ([`Shared::fresh_id`]), kept with it through the pool.
    pub(crate) id: u64,
    pub(crate) freed_in_batch: u64,
    /// Order of freeing, for least-recently-freed eviction.
    pub(crate) stamp: u64,
}

/// The free lists and what they hold.
#[derive(Default)]
pub(crate) struct FreeLists {
    pub(crate) lists: HashMap<(PoolKind, u64), Vec<Pooled>, FastHash>,
    /// Bytes in every list (storage and staging).
    pub(crate) held: u64,
    pub(crate) next_stamp: u64,
}

/// State shared between the backend and its buffers (which return themselves on drop).
pub(crate) struct Shared {
    pub(crate) free: Mutex<FreeLists>,
    /// Most bytes the free lists may hold.
    pub(crate) max_bytes: u64,
    pub(crate) counters: Mutex<Counters>,
    pub(crate) batch: AtomicU64,
    /// The last buffer identity handed out (`fresh_id`).
    pub(crate) last_id: AtomicU64,
}

impl Shared {
    /// A new buffer identity: never 0 (a bind group's dummy slot), never handed out twice, so
    /// the bind-group cache can key on it without holding the buffer.
    pub(crate) fn fresh_id(&self) -> u64 {
        self.last_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn give_back(&self, kind: PoolKind, class: u64, buf: wgpu::Buffer, id: u64) {
        if class > self.max_bytes {
            // Keeping it would evict everything else and still not fit.
            drop(buf);
            self.count(|c| {
                c.buffers_evicted += 1;
                if kind == PoolKind::Storage {
                    c.storage_bytes = c.storage_bytes.saturating_sub(class);
                }
            });
            return;
        }
        let freed_in_batch = self.batch.load(Ordering::Relaxed);
        let Ok(mut free) = self.free.lock() else {
            return;
        };
        let stamp = free.next_stamp;
        free.next_stamp += 1;
        free.lists.entry((kind, class)).or_default().push(Pooled {
            buf,
            id,
            freed_in_batch,
            stamp,
        });
        free.held += class;
        let mut storage_delta: i64 = if kind == PoolKind::Storage {
            class as i64
        } else {
            0
        };
        let mut evicted = 0;
        let mut storage_evicted = 0;
        // Above the cap, release the least recently freed buffers (the ones the current
        // workload has stopped asking for) until the pool fits again.
        while free.held > self.max_bytes {
            let oldest = free
                .lists
                .iter()
                .flat_map(|(key, list)| {
                    list.iter()
                        .enumerate()
                        .map(move |(i, p)| (p.stamp, *key, i))
                })
                .min_by_key(|(stamp, _, _)| *stamp);
            let Some((_, key, i)) = oldest else { break };
            let Some(list) = free.lists.get_mut(&key) else {
                break;
            };
            let victim = list.remove(i);
            if list.is_empty() {
                free.lists.remove(&key);
            }
            free.held = free.held.saturating_sub(key.1);
            if key.0 == PoolKind::Storage {
                storage_delta -= key.1 as i64;
                storage_evicted += key.1;
            }
            evicted += 1;
            drop(victim);
        }
        drop(free);
        self.count(|c| {
            c.pool_bytes = c.pool_bytes.saturating_add_signed(storage_delta);
            c.buffers_evicted += evicted;
            c.storage_bytes = c.storage_bytes.saturating_sub(storage_evicted);
        });
    }

    pub(crate) fn take(
        &self,
        kind: PoolKind,
        class: u64,
        for_upload: bool,
    ) -> Option<(wgpu::Buffer, u64)> {
        let batch = self.batch.load(Ordering::Relaxed);
        let mut free = self.free.lock().ok()?;
        let list = free.lists.get_mut(&(kind, class))?;
        // Last in, first out, in order (no swap_remove): a workload that allocates and frees
        // in the same order each time (a decode token) gets the same buffers each time, so its
        // bind groups are found in the cache.
        let pos = list
            .iter()
            .rposition(|p| !for_upload || p.freed_in_batch < batch)?;
        let p = list.remove(pos);
        free.held = free.held.saturating_sub(class);
        drop(free);
        if kind == PoolKind::Storage {
            self.count(|c| {
                c.pool_bytes = c.pool_bytes.saturating_sub(class);
                c.buffers_reused += 1;
            });
        }
        Some((p.buf, p.id))
    }

    pub(crate) fn count(&self, f: impl FnOnce(&mut Counters)) {
        if let Ok(mut c) = self.counters.lock() {
            f(&mut c);
        }
    }
}

/// A device buffer holding one tensor's elements. Returns to the pool when the last tensor
/// referencing it drops.
pub struct GpuBuffer {
    pub(crate) buf: Option<wgpu::Buffer>,
    /// The buffer's identity (`Shared::fresh_id`): bind groups are cached by it.
    pub(crate) id: u64,
    pub(crate) class: u64,
    /// Bytes the tensor uses (a multiple of 4; the buffer may be larger).
    pub(crate) len: u64,
    pub(crate) device: DeviceId,
    pub(crate) shared: Weak<Shared>,
    /// Host copy of small integer tensors (ids, targets), so index ranges can be checked
    /// without a readback.
    pub(crate) host_ints: Option<Arc<Vec<i64>>>,
    /// Host copy of small rank-1 f32 tensors (`crate::device::host_float_copy`).
    pub(crate) host_floats: Option<Arc<Vec<f32>>>,
}

impl std::fmt::Debug for GpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GpuBuffer(device {}, {} bytes in class {})",
            self.device.0, self.len, self.class
        )
    }
}

impl GpuBuffer {
    pub(crate) fn raw(&self) -> Option<&wgpu::Buffer> {
        self.buf.as_ref()
    }
    pub(crate) fn host_ints(&self) -> Option<&Arc<Vec<i64>>> {
        self.host_ints.as_ref()
    }
    pub(crate) fn host_floats(&self) -> Option<&Arc<Vec<f32>>> {
        self.host_floats.as_ref()
    }
    /// The whole tensor, or elements `start..start + len` of it, as a binding.
    pub(crate) fn binding(&self, range: Option<(usize, usize)>) -> Option<wgpu::BufferBinding<'_>> {
        let buf = self.buf.as_ref()?;
        let (offset, size) = match range {
            Some((start, len)) => ((start as u64) * 4, (len as u64) * 4),
            None => (0, self.len),
        };
        Some(wgpu::BufferBinding {
            buffer: buf,
            offset,
            size: NonZeroU64::new(size.max(4)),
        })
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        if let (Some(buf), Some(shared)) = (self.buf.take(), self.shared.upgrade()) {
            shared.give_back(PoolKind::Storage, self.class, buf, self.id);
        }
    }
}

impl DeviceBuffer for GpuBuffer {
    fn device(&self) -> DeviceId {
        self.device
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
