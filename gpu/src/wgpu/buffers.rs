//! The backend's buffers: looking up a tensor's buffer (with the lost-device and device checks),
//! size checks against the device limits, and allocation from the pool.
use super::WgpuBackend;
use super::device::backend_err;
use super::pool::GpuBuffer;
use super::pool::PoolKind;
use super::pool::size_class;
use kernels_core::DType;
use kernels_core::DeviceId;
use kernels_core::Error;
use kernels_core::Result;
use kernels_core::Tensor;
use kernels_core::tensor::Storage;
use std::sync::Arc;

impl WgpuBackend {
    /// The device buffer of a tensor of this backend.
    pub(crate) fn buffer_of<'t>(&self, op: &'static str, t: &'t Tensor) -> Result<&'t GpuBuffer> {
        let g = self.gpu();
        match t.storage() {
            Storage::Device(b) => {
                if let Some((_, why)) = self
                    .lost_devices
                    .borrow()
                    .iter()
                    .find(|(id, _)| *id == b.device())
                {
                    return Err(Error::DeviceLost {
                        why: format!(
                            "{op}: a tensor lives on device {} of this backend, which was lost \
                             ({why}); the backend now runs on device {}: upload the tensor again",
                            b.device().0,
                            g.id.0
                        ),
                    });
                }
                if b.device() != g.id {
                    return Err(Error::DeviceMismatch {
                        op,
                        expected: g.id.0,
                        got: b.device().0,
                    });
                }
                b.as_any()
                    .downcast_ref::<GpuBuffer>()
                    .ok_or_else(|| backend_err(format!("{op}: not a wgpu buffer")))
            }
            _ => Err(Error::DeviceMismatch {
                op,
                expected: g.id.0,
                got: DeviceId::CPU.0,
            }),
        }
    }

    /// A tensor's buffer must fit the device; binding it whole must also fit the storage
    /// binding limit, which `launch` checks (elementwise ops bind chunks instead).
    pub(crate) fn check_buffer_size(&self, what: &str, bytes: u64) -> Result<()> {
        let limit = self.limits.max_buffer_size;
        if bytes > limit {
            return Err(Error::LimitExceeded {
                what: format!("{what}: bytes in one buffer"),
                value: bytes,
                limit,
            });
        }
        Ok(())
    }

    /// Elements per chunk when an elementwise op splits a tensor over several bindings: the
    /// binding limit, rounded down to the storage offset alignment so every chunk starts on
    /// an aligned offset.
    pub(crate) fn chunk_elems(&self) -> usize {
        let align = u64::from(self.limits.min_storage_buffer_offset_alignment.max(4));
        let limit = self.limits.max_storage_buffer_binding_size;
        let bytes = ((limit / align) * align).max(align);
        usize::try_from(bytes / 4).unwrap_or(usize::MAX)
    }

    /// A storage buffer of at least `bytes`, from the pool when possible, with its size class
    /// and identity.
    pub(crate) fn acquire(&self, bytes: u64, for_upload: bool) -> Result<(wgpu::Buffer, u64, u64)> {
        let g = self.gpu();
        let class = size_class(bytes);
        // Classes above the device's buffer size fall back to the exact (4-aligned) size.
        let class = if class > self.limits.max_buffer_size {
            bytes.div_ceil(4) * 4
        } else {
            class
        };
        if let Some((b, id)) = g.shared.take(PoolKind::Storage, class, for_upload) {
            return Ok((b, class, id));
        }
        let buf = g.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tensor"),
            size: class,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        g.shared.count(|c| {
            c.buffers_created += 1;
            c.storage_bytes += class;
            c.peak_storage_bytes = c.peak_storage_bytes.max(c.storage_bytes);
        });
        Ok((buf, class, g.shared.fresh_id()))
    }

    /// A fresh output tensor of `shape` (contents undefined until a kernel writes them).
    pub(crate) fn alloc(&self, op: &'static str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let g = self.gpu();
        let n = kernels_core::tensor::numel(shape)
            .ok_or_else(|| Error::bad_shape(op, "out", shape, "element count overflows"))?;
        let bytes = (n as u64).saturating_mul(4);
        self.check_buffer_size(op, bytes)?;
        let (buf, class, id) = self.acquire(bytes, false)?;
        Ok(Tensor::from_device(
            shape,
            dtype,
            Arc::new(GpuBuffer {
                buf: Some(buf),
                id,
                class,
                len: bytes,
                device: g.id,
                shared: Arc::downgrade(&g.shared),
                host_ints: None,
                host_floats: None,
            }),
        ))
    }
}
