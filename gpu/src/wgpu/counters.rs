#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Queue submits.
    pub submits: u64,
    /// Bytes copied host -> device.
    pub bytes_uploaded: u64,
    /// Bytes copied device -> host.
    pub bytes_downloaded: u64,
    /// Storage buffers created (pool misses).
    pub buffers_created: u64,
    /// Storage buffers taken from the pool (pool hits).
    pub buffers_reused: u64,
    /// Bytes currently held by free storage buffers in the pool.
    pub pool_bytes: u64,
    /// Free buffers released because the pool was above [`crate::WgpuOptions::max_pool_bytes`].
    pub buffers_evicted: u64,
    /// Bytes of the distinct tensors bound to each dispatch, summed over dispatches: the
    /// device memory traffic if every kernel read each input and wrote each output once (a
    /// tiled kernel's re-reads of its operands through the caches are not counted). Against
    /// an op's minimum it shows intermediates that fusion would remove.
    pub bytes_touched: u64,
    /// Bytes of the storage buffers the backend holds now, in use or free in the pool (each a
    /// whole size class): its device memory for tensors, staging buffers for readback aside.
    pub storage_bytes: u64,
    /// The most `storage_bytes` has been since the backend was made.
    pub peak_storage_bytes: u64,
    /// Host nanoseconds from each batch's first recorded command until its submit returned
    /// (`crate::host_time`): the host's cost of recording and submitting, without the wait for
    /// results. One decode token is one batch.
    pub host_ns: u64,
    /// The part of `host_ns` spent in the submit itself: finishing the command encoder (wgpu
    /// validates and encodes the recorded pass into the driver's command buffer), writing the
    /// parameter arena and the queue submit. `host_ns - submit_ns` is the recording.
    pub submit_ns: u64,
    /// Bind groups created (a dispatch whose buffers, offsets and sizes were not seen before,
    /// or were evicted from the cache).
    pub bind_groups_created: u64,
}

impl Counters {
    /// What happened between `earlier` and `self`, field by field; `pool_bytes`,
    /// `storage_bytes` and `peak_storage_bytes` are levels, not counts, so they keep `self`'s
    /// values.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            dispatches: self.dispatches.saturating_sub(earlier.dispatches),
            submits: self.submits.saturating_sub(earlier.submits),
            bytes_uploaded: self.bytes_uploaded.saturating_sub(earlier.bytes_uploaded),
            bytes_downloaded: self
                .bytes_downloaded
                .saturating_sub(earlier.bytes_downloaded),
            buffers_created: self.buffers_created.saturating_sub(earlier.buffers_created),
            buffers_reused: self.buffers_reused.saturating_sub(earlier.buffers_reused),
            pool_bytes: self.pool_bytes,
            buffers_evicted: self.buffers_evicted.saturating_sub(earlier.buffers_evicted),
            bytes_touched: self.bytes_touched.saturating_sub(earlier.bytes_touched),
            storage_bytes: self.storage_bytes,
            peak_storage_bytes: self.peak_storage_bytes,
            host_ns: self.host_ns.saturating_sub(earlier.host_ns),
            submit_ns: self.submit_ns.saturating_sub(earlier.submit_ns),
            bind_groups_created: self
                .bind_groups_created
                .saturating_sub(earlier.bind_groups_created),
        }
    }
}
