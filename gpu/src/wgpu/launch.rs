use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use kernels_core::{DType, Error, Result, Tensor};

use super::WgpuBackend;
use super::device::Gpu;
use super::device::PARAMS_BYTES;
use super::device::RO_SLOTS;
use super::device::RW_SLOTS;
use super::device::backend_err;
use super::record::{BindKey, FastPipelineKey};
use crate::device::Family;
use crate::device::{Device, Grid, Launch, PARAM_U32S, Params};

/// Threads per workgroup of the one-thread-per-element kernels (`WG` in the shaders).
const ELEM_WORKGROUP: u64 = 256;

/// The parameter block's bytes (`struct Params` in the shaders).
pub(crate) fn params_bytes(p: &Params) -> [u8; PARAMS_BYTES] {
    let mut out = [0u8; PARAMS_BYTES];
    for (i, v) in p.u.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    for (i, v) in p.f.iter().enumerate() {
        out[4 * PARAM_U32S + i * 4..4 * PARAM_U32S + i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    out
}

impl WgpuBackend {
    /// Splits `groups` workgroups into a 2-D grid within the per-dimension limit; kernels
    /// recover the flat index as `wid.y * nwg.x + wid.x` and drop the excess.
    pub(crate) fn grid_1d(&self, groups: u64) -> Result<(u32, u32, u32)> {
        let max = u64::from(self.limits.max_compute_workgroups_per_dimension.max(1));
        let groups = groups.max(1);
        if groups <= max {
            return Ok((groups as u32, 1, 1));
        }
        let y = groups.div_ceil(max);
        if y > max {
            return Err(Error::LimitExceeded {
                what: "workgroups of one dispatch".into(),
                value: groups,
                limit: max * max,
            });
        }
        Ok((max as u32, y as u32, 1))
    }

    /// Max workgroups per grid dimension.
    pub(crate) fn max_groups(&self) -> u32 {
        self.limits.max_compute_workgroups_per_dimension.max(1)
    }

    /// One storage binding, checked against the binding limit, with its buffer's identity.
    pub(crate) fn bind_one<'t>(
        &self,
        op: &'static str,
        t: &'t Tensor,
        range: Option<(usize, usize)>,
    ) -> Result<(wgpu::BufferBinding<'t>, u64)> {
        let buf = self.buffer_of(op, t)?;
        let limit = self.limits.max_storage_buffer_binding_size;
        let bytes = match range {
            Some((_, len)) => (len as u64) * 4,
            None => buf.len,
        };
        if bytes > limit {
            return Err(Error::LimitExceeded {
                what: format!(
                    "{op}: bytes of a {:?} tensor in one storage binding (only elementwise ops split it)",
                    t.shape()
                ),
                value: bytes,
                limit,
            });
        }
        buf.binding(range)
            .map(|b| (b, buf.id))
            .ok_or_else(|| backend_err(format!("{op}: buffer already released")))
    }

    /// Records one dispatch: the family's `entry` specialized with `constants`, `params` in
    /// binding 0, `inputs` in the read-only slots and `outputs` in the read-write slots, each
    /// tensor bound whole (`None`) or as the element range `(start, len)`; `start * 4` must be a
    /// multiple of the storage offset alignment. A binding above the storage binding limit is
    /// `LimitExceeded` naming the op. Every tensor must live on this device.
    ///
    /// The dispatch goes into the batch's one compute pass. Once its pipeline and bind group
    /// are cached (a decode token after the first) it allocates nothing on the host: the
    /// bindings sit in arrays, the caches are found by keys built on the stack, and the
    /// parameter block is appended to the batch's reused buffer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn dispatch(
        &self,
        op: &'static str,
        family: Family,
        entry: &'static str,
        constants: &[(&'static str, u32)],
        params: Params,
        inputs: &[(&Tensor, Option<(usize, usize)>)],
        outputs: &[(&Tensor, Option<(usize, usize)>)],
        grid: (u32, u32, u32),
    ) -> Result<()> {
        let g = self.gpu();
        g.clock.begin();
        if inputs.len() > RO_SLOTS || outputs.len() > RW_SLOTS {
            return Err(backend_err(format!("{op}: too many bindings for {entry}")));
        }
        // The bind group's key: each slot's buffer identity, offset and size (zeros: a dummy).
        let mut key: BindKey = Default::default();
        let mut in_bufs: [Option<wgpu::BufferBinding<'_>>; RO_SLOTS] = Default::default();
        for ((slot, k), (t, r)) in in_bufs.iter_mut().zip(&mut key).zip(inputs) {
            let (b, id) = self.bind_one(op, t, *r)?;
            *k = [id, b.offset, b.size.map_or(0, NonZeroU64::get)];
            *slot = Some(b);
        }
        let mut out_bufs: [Option<wgpu::BufferBinding<'_>>; RW_SLOTS] = Default::default();
        for ((slot, k), (t, r)) in out_bufs.iter_mut().zip(&mut key[RO_SLOTS..]).zip(outputs) {
            let (b, id) = self.bind_one(op, t, *r)?;
            *k = [id, b.offset, b.size.map_or(0, NonZeroU64::get)];
            *slot = Some(b);
        }
        // WebGPU rejects a dispatch whose writable binding overlaps any other binding (native
        // wgpu does not check): catch it here, so native tests find what the browser would.
        let overlaps = |a: &wgpu::BufferBinding, b: &wgpu::BufferBinding| {
            let end = |x: &wgpu::BufferBinding| x.size.map_or(u64::MAX, |s| x.offset + s.get());
            a.buffer == b.buffer && a.offset < end(b) && b.offset < end(a)
        };
        for (i, o) in out_bufs.iter().enumerate() {
            let Some(o) = o else { continue };
            if out_bufs[i + 1..]
                .iter()
                .chain(&in_bufs)
                .flatten()
                .any(|b| overlaps(o, b))
            {
                return Err(backend_err(format!(
                    "{op}: {entry} binds its writable slot {i} to a buffer another slot uses"
                )));
            }
        }
        let pipeline = self.pipeline_fast(&g, family, entry, constants);
        // Launchers pass a tensor again for slots a kernel does not read: count each once.
        let all = || inputs.iter().chain(outputs);
        let mut bytes_touched = 0u64;
        for (i, (t, r)) in all().enumerate() {
            let seen = all().take(i).any(|(u, q)| std::ptr::eq(*u, *t) && q == r);
            if !seen {
                bytes_touched += 4 * r.map_or(t.numel(), |(_, len)| len) as u64;
            }
        }

        let mut rec = g.rec.borrow_mut();
        if rec.dispatches >= self.options.max_batch_dispatches {
            drop(rec);
            self.submit()?;
            g.clock.begin();
            rec = g.rec.borrow_mut();
        }
        let offset = rec.dispatches * g.slot;
        let dynamic = u32::try_from(offset)
            .map_err(|_| backend_err(format!("{op}: parameter offset {offset} beyond u32")))?;
        rec.params.resize(offset, 0);
        rec.params.extend_from_slice(&params_bytes(&params));
        rec.dispatches += 1;

        let (bind_group, created) = self.bind_group(&g, entry, key, &in_bufs, &out_bufs);
        let pass = rec.pass(&g.device);
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[dynamic]);
        pass.dispatch_workgroups(grid.0, grid.1, grid.2);
        g.shared.count(|c| {
            c.dispatches += 1;
            c.bytes_touched += bytes_touched;
            c.bind_groups_created += u64::from(created);
        });
        Ok(())
    }

    /// The bind group of these storage bindings (dummies in empty slots) with the parameter
    /// arena at a dynamic offset: from the cache, or made and cached (`true`).
    fn bind_group(
        &self,
        g: &Gpu,
        entry: &'static str,
        key: BindKey,
        in_bufs: &[Option<wgpu::BufferBinding<'_>>; RO_SLOTS],
        out_bufs: &[Option<wgpu::BufferBinding<'_>>; RW_SLOTS],
    ) -> (wgpu::BindGroup, bool) {
        let batch = g.shared.batch.load(Ordering::Relaxed);
        let mut cache = g.bind_groups.borrow_mut();
        if let Some(group) = cache.get(&key, batch) {
            return (group, false);
        }
        fn binding<'a>(
            b: &Option<wgpu::BufferBinding<'a>>,
            dummy: &'a wgpu::Buffer,
        ) -> wgpu::BindingResource<'a> {
            match b {
                Some(b) => wgpu::BindingResource::Buffer(b.clone()),
                None => dummy.as_entire_binding(),
            }
        }
        let params = wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &g.arena,
                offset: 0,
                size: NonZeroU64::new(PARAMS_BYTES as u64),
            }),
        };
        let ro = in_bufs
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: 1 + i as u32,
                resource: binding(b, &g.dummy_ro),
            });
        let rw = out_bufs
            .iter()
            .zip(&g.dummy_rw)
            .enumerate()
            .map(|(i, (b, dummy))| wgpu::BindGroupEntry {
                binding: (1 + RO_SLOTS + i) as u32,
                resource: binding(b, dummy),
            });
        let entries: Vec<wgpu::BindGroupEntry<'_>> =
            std::iter::once(params).chain(ro).chain(rw).collect();
        let group = g.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(entry),
            layout: &g.layout,
            entries: &entries,
        });
        cache.insert(key, group.clone(), batch);
        (group, true)
    }

    /// `pipeline`, found without allocating when `constants` has at most
    /// [`super::record::FAST_CONSTS`] entries.
    fn pipeline_fast(
        &self,
        g: &Gpu,
        family: Family,
        entry: &'static str,
        constants: &[(&'static str, u32)],
    ) -> wgpu::ComputePipeline {
        let Some(key) = FastPipelineKey::new(family, entry, constants) else {
            return self.pipeline(g, family, entry, constants);
        };
        if let Some(p) = g.fast_pipelines.borrow().get(&key) {
            return p.clone();
        }
        let p = self.pipeline(g, family, entry, constants);
        g.fast_pipelines.borrow_mut().insert(key, p.clone());
        p
    }

    /// An f32 tensor of zeros made on the device: a pooled buffer cleared by a command in the
    /// current batch (ordered after any recorded work that used the buffer before), with no
    /// host allocation and no upload.
    pub(crate) fn zeros_inner(&self, shape: &[usize]) -> Result<Tensor> {
        let t = self.alloc("zeros", shape, DType::F32)?;
        let bytes = (t.numel() as u64) * 4;
        if bytes == 0 {
            return Ok(t);
        }
        let g = self.gpu();
        g.clock.begin();
        let raw = self
            .buffer_of("zeros", &t)?
            .raw()
            .ok_or_else(|| backend_err(String::from("zeros: buffer already released")))?;
        let mut rec = g.rec.borrow_mut();
        rec.encoder(&g.device).clear_buffer(raw, 0, Some(bytes));
        Ok(t)
    }

    /// Submits the recorded batch (if any).
    pub(crate) fn submit(&self) -> Result<()> {
        let g = self.gpu();
        let mut rec = g.rec.borrow_mut();
        let Some(encoder) = rec.take() else {
            return Ok(());
        };
        let submit_start = crate::host_time::now();
        if !rec.params.is_empty() {
            g.queue.write_buffer(&g.arena, 0, &rec.params);
        }
        rec.params.clear();
        drop(rec);
        g.queue.submit(Some(encoder.finish()));
        let submit_ns = crate::host_time::ns_since(submit_start);
        let batch = g.shared.batch.fetch_add(1, Ordering::Relaxed) + 1;
        g.bind_groups.borrow_mut().prune(batch);
        let host_ns = g.clock.end();
        g.shared.count(|c| {
            c.submits += 1;
            c.host_ns += host_ns;
            c.submit_ns += submit_ns.min(host_ns);
        });
        Ok(())
    }
}

impl Device for WgpuBackend {
    fn per_output_matvec(&self) -> bool {
        self.per_output_matvec
    }
    fn f32_matvec(&self) -> bool {
        true
    }
    fn alloc(&self, op: &'static str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        WgpuBackend::alloc(self, op, shape, dtype)
    }
    fn upload_host(&self, t: &Tensor) -> Result<Tensor> {
        self.upload_inner(t)
    }
    fn table(&self, key: String, make: &dyn Fn() -> Result<Tensor>) -> Result<Tensor> {
        WgpuBackend::table(self, key, make)
    }
    fn host_ints(&self, op: &'static str, t: &Tensor) -> Result<Option<Arc<Vec<i64>>>> {
        Ok(self.buffer_of(op, t)?.host_ints().cloned())
    }
    fn host_floats(&self, op: &'static str, t: &Tensor) -> Result<Option<Arc<Vec<f32>>>> {
        Ok(self.buffer_of(op, t)?.host_floats().cloned())
    }
    fn chunk_elems(&self) -> usize {
        WgpuBackend::chunk_elems(self)
    }
    fn launch(&self, op: &'static str, l: &Launch<'_>) -> Result<()> {
        let groups = match l.grid {
            Grid::Elems(n) | Grid::Teams(n) => (n as u64).div_ceil(ELEM_WORKGROUP),
            Grid::Groups(n) => n as u64,
        };
        self.dispatch(
            op,
            l.family,
            l.entry,
            l.consts,
            l.params,
            l.inputs,
            l.outputs,
            self.grid_1d(groups)?,
        )
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    #[test]
    fn an_unknown_code_gives_nan_on_wgpu() {
        if let Some(be) = crate::testing::wgpu("an_unknown_code_gives_nan_on_wgpu") {
            crate::contract::unknown_code::assert_nan(&be, &be);
        }
    }
}
