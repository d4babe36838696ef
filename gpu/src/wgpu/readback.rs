use std::sync::Arc;

use super::WgpuBackend;
use super::device::backend_err;
use super::pool::GpuBuffer;
use super::pool::PoolKind;
use super::pool::size_class;
use kernels_core::tensor::Storage;
use kernels_core::{Error, Result, Tensor};

impl WgpuBackend {
    pub(crate) fn upload_inner(&self, t: &Tensor) -> Result<Tensor> {
        let g = self.gpu();
        let host_floats = match t.storage() {
            Storage::F32(v) => crate::device::host_float_copy(t.shape(), v),
            _ => None,
        };
        let (bytes, host_ints): (Vec<u8>, Option<Arc<Vec<i64>>>) = match t.storage() {
            Storage::F32(v) => (bytemuck::cast_slice(v.as_slice()).to_vec(), None),
            Storage::I32(v) => (
                bytemuck::cast_slice(v.as_slice()).to_vec(),
                Some(Arc::new(v.iter().map(|&x| i64::from(x)).collect())),
            ),
            Storage::I64(v) => {
                // Shaders index with i32; ids beyond it cannot address any tensor anyway.
                let mut out = Vec::with_capacity(v.len() * 4);
                for (i, &x) in v.iter().enumerate() {
                    let y = i32::try_from(x).map_err(|_| Error::IndexOutOfRange {
                        op: "upload",
                        tensor: format!("i64 element {i}"),
                        index: x,
                        bound: i32::MAX as usize,
                    })?;
                    out.extend_from_slice(&y.to_le_bytes());
                }
                (out, Some(Arc::new(v.to_vec())))
            }
            Storage::Packed(b) => (
                bytemuck::cast_slice(crate::device::packed_upload_words(t, b)?.as_slice()).to_vec(),
                None,
            ),
            Storage::Device(_) => {
                return Err(Error::NotOnHost { op: "upload" });
            }
        };
        let len = bytes.len() as u64;
        self.check_buffer_size("upload", len)?;
        let (buf, class, id) = self.acquire(len, true)?;
        if !bytes.is_empty() {
            g.queue.write_buffer(&buf, 0, &bytes);
        }
        g.shared.count(|c| c.bytes_uploaded += len);
        Ok(Tensor::from_device(
            t.shape(),
            t.dtype(),
            Arc::new(GpuBuffer {
                buf: Some(buf),
                id,
                class,
                len,
                device: g.id,
                shared: Arc::downgrade(&g.shared),
                host_ints,
                host_floats,
            }),
        ))
    }

    /// Records the copy of `t` into a mappable staging buffer and submits; returns the staging
    /// buffer, its class and the byte count.
    pub(crate) fn stage_download(&self, t: &Tensor) -> Result<Option<(wgpu::Buffer, u64, u64)>> {
        let g = self.gpu();
        let src = self.buffer_of("download", t)?;
        let len = (crate::device::device_words(t) as u64) * 4;
        if len == 0 {
            return Ok(None);
        }
        let raw = src
            .raw()
            .ok_or_else(|| backend_err("download: buffer already released"))?;
        let class = size_class(len);
        let staging = match g.shared.take(PoolKind::Staging, class, false) {
            Some((b, _)) => b,
            None => g.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("staging"),
                size: class,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        };
        g.clock.begin();
        {
            let mut rec = g.rec.borrow_mut();
            rec.encoder(&g.device)
                .copy_buffer_to_buffer(raw, 0, &staging, 0, len);
        }
        self.submit()?;
        Ok(Some((staging, class, len)))
    }
}
