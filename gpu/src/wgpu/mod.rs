//! The wgpu backend: device setup, the buffer pool, batched command recording, counters, and the
//! one generic launcher every op family goes through.
//!
//! Tensors live in pooled storage buffers. Ops record their dispatches into one compute pass of
//! one command encoder (a copy or a clear ends the pass; wgpu orders dependent dispatches within
//! it); the encoder is submitted on download, on [`Backend::flush`], or after
//! [`WgpuOptions::max_batch_dispatches`] dispatches. Each dispatch's parameters go into a slot of
//! one uniform arena that is written once per submit, bound at a dynamic offset, so bind groups
//! are cached by their storage buffers (`record::BindCache`): warm decode makes none.
//!
//! Reuse hazard: `Queue::write_buffer` lands before the commands of the next submit, so an
//! upload must not reuse a buffer the still-unsubmitted encoder touches. Pooled buffers carry
//! the batch in which they were freed; uploads only take buffers freed in an earlier batch.
//! Compute outputs may take any pooled buffer: commands run in recording order.
// Tensors hold device buffers as `Arc<dyn DeviceBuffer>` (kernels-core shares them with threaded
// native code). On wasm32 wgpu's WebGPU handles are neither Send nor Sync, which is fine: the
// browser runs the backend on one thread, and nothing here hands an `Arc` to another.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

use std::cell::{Cell, RefCell};

use std::rc::Rc;
use std::sync::{Arc, Mutex};

use kernels_core::backend::LocalBoxFuture;
use kernels_core::op::{Direction, Op};

use kernels_core::{Backend, DType, DeviceId, Error, Result, Tensor};

mod attention;
mod buffers;
mod counters;
mod device;
mod launch;
mod map;
mod matmul;
mod options;
mod pipelines;
mod pool;
mod readback;
mod record;
mod recovery;
mod shaders;
mod svd;

use self::device::Gpu;
use self::device::Opened;
use self::device::backend_err;
use self::device::open;
use self::map::{MapFuture, MapState};
use self::pool::PoolKind;
/// Largest `q = min(rank, m, n)` svd_lowrank's device Jacobi step keeps per-vector state for
/// (`MAX_Q` in `shaders/svd.wgsl`).
pub const SVD_MAX_Q: usize = 256;

pub use counters::Counters;
pub use options::WgpuOptions;
pub use pool::GpuBuffer;
pub use shaders::{ROW_REDUCE_SUBGROUP, ROW_REDUCE_WORKGROUP};

/// What the backend has done so far. Read with [`WgpuBackend::counters`].
/// The wgpu backend. See the module docs.
pub struct WgpuBackend {
    pub(crate) info: wgpu::AdapterInfo,
    /// The limits the backend works within (the device's, with the testing caps of
    /// [`WgpuOptions`] applied).
    pub(crate) limits: wgpu::Limits,
    pub(crate) options: WgpuOptions,
    pub(crate) instance: wgpu::Instance,
    /// Subgroup reductions are in use (adapter has them and the options allow them).
    pub(crate) subgroups: bool,
    /// Smallest subgroup size the adapter reports (sizes the subgroup reduction's levels).
    pub(crate) subgroup_min: u32,
    /// f16 values are read with native f16 types (adapter has `shader-f16`, options allow it).
    pub(crate) f16: bool,
    /// Decode's packed products run one invocation per output ([`WgpuOptions::per_output_matvec`]).
    pub(crate) per_output_matvec: bool,
    pub(crate) gpu: RefCell<Rc<Gpu>>,
    /// Devices this backend lost, with the reason: their tensors fail with `DeviceLost`.
    pub(crate) lost_devices: RefCell<Vec<(DeviceId, String)>>,
    /// The current device's loss has been returned to a caller once; the next call recovers.
    pub(crate) loss_reported: Cell<bool>,
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WgpuBackend({})", self.name())
    }
}
impl WgpuBackend {
    /// Finds an adapter and creates a device, requesting the adapter's own limits (they are at
    /// least wgpu's defaults on any WebGPU-capable adapter, and often far above them).
    pub async fn new_async(options: WgpuOptions) -> Result<Self> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle().with_env();
        if let Some(b) = options.backends {
            desc.backends = b;
        }
        let instance = wgpu::Instance::new(desc);
        let options = WgpuOptions {
            max_batch_dispatches: options.max_batch_dispatches.max(1),
            ..options
        };
        let opened = open(&instance, &options, Counters::default()).await?;
        let mut limits = opened.limits.clone();
        if let Some(cap) = options.max_storage_binding_cap {
            // Keep the cap a multiple of the offset alignment so chunks can start anywhere
            // on a chunk boundary.
            let align = u64::from(limits.min_storage_buffer_offset_alignment.max(4));
            let cap = (cap / align).max(1) * align;
            limits.max_storage_buffer_binding_size =
                limits.max_storage_buffer_binding_size.min(cap);
        }
        let per_output_matvec = options
            .per_output_matvec
            .or_else(matvec_from_env)
            .unwrap_or_else(|| crate::adapters::is_software(&opened.info));
        Ok(WgpuBackend {
            per_output_matvec,
            info: opened.info,
            limits,
            options,
            instance,
            subgroups: opened.subgroups,
            subgroup_min: opened.subgroup_min,
            f16: opened.f16,
            gpu: RefCell::new(Rc::new(opened.gpu)),
            lost_devices: RefCell::new(Vec::new()),
            loss_reported: Cell::new(false),
        })
    }

    /// Replaces the device with a fresh one on the same adapter, after a device loss (or at
    /// any time). Tensors of the old device fail with [`Error::DeviceLost`] from then on;
    /// counters carry over. Natively, the call after a reported loss does this by itself.
    pub async fn recover_async(&self) -> Result<()> {
        let old = self.gpu();
        let why = old
            .lost
            .lock()
            .ok()
            .and_then(|l| l.clone())
            .unwrap_or_else(|| "replaced by recover()".into());
        let counters = old.shared.counters.lock().map(|c| *c).unwrap_or_default();
        let Opened {
            info,
            subgroups,
            f16,
            gpu,
            ..
        } = open(&self.instance, &self.options, counters).await?;
        if info.name != self.info.name
            || info.backend != self.info.backend
            || subgroups != self.subgroups
            || f16 != self.f16
        {
            return Err(backend_err(format!(
                "recovery found a different adapter ({} on {:?}) than the lost device's ({} on {:?})",
                info.name, info.backend, self.info.name, self.info.backend
            )));
        }
        self.lost_devices.borrow_mut().push((old.id, why));
        *self.gpu.borrow_mut() = Rc::new(gpu);
        self.loss_reported.set(false);
        // The old device's state (pool, pipelines, tables) drops with the last `Rc`.
        drop(old);
        Ok(())
    }

    /// Blocking [`WgpuBackend::recover_async`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn recover(&self) -> Result<()> {
        pollster::block_on(self.recover_async())
    }

    /// Whether the row reductions use subgroup operations on this device.
    pub fn uses_subgroups(&self) -> bool {
        self.subgroups
    }

    /// Whether decode's packed products run one invocation per output (no barriers) here.
    pub fn uses_per_output_matvec(&self) -> bool {
        self.per_output_matvec
    }

    /// Whether f16 values are read with native f16 types (`shader-f16`) on this device.
    pub fn uses_shader_f16(&self) -> bool {
        self.f16
    }

    /// The wgpu device (for tests that need to poke it, e.g. force a loss with `destroy`).
    pub fn wgpu_device(&self) -> wgpu::Device {
        self.gpu().device.clone()
    }

    pub(crate) fn gpu(&self) -> Rc<Gpu> {
        self.gpu.borrow().clone()
    }

    /// Blocking constructor (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new() -> Result<Self> {
        pollster::block_on(Self::new_async(WgpuOptions::default()))
    }

    /// Blocking constructor with options (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn with_options(options: WgpuOptions) -> Result<Self> {
        pollster::block_on(Self::new_async(options))
    }

    /// The adapter this backend runs on.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }
    /// The features the adapter offers (e.g. `SHADER_F16`, `SUBGROUP`), whether used or not.
    pub fn adapter_features(&self) -> wgpu::Features {
        self.gpu().adapter_features
    }
    /// The limits the device was created with.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }
    /// A snapshot of the counters.
    pub fn counters(&self) -> Counters {
        let g = self.gpu();
        g.shared.counters.lock().map(|c| *c).unwrap_or_default()
    }
    /// Frees every buffer held by the pool.
    pub fn trim_pool(&self) {
        let g = self.gpu();
        if let Ok(mut free) = g.shared.free.lock() {
            free.lists.clear();
            free.held = 0;
        }
        // Cached bind groups hold their buffers: drop them too, so the trim frees memory.
        g.bind_groups.borrow_mut().clear();
        g.shared.count(|c| {
            c.storage_bytes = c.storage_bytes.saturating_sub(c.pool_bytes);
            c.pool_bytes = 0;
        });
    }

    /// A constant table uploaded on first use and kept for the backend's lifetime.
    pub(crate) fn table(&self, key: String, make: &dyn Fn() -> Result<Tensor>) -> Result<Tensor> {
        let g = self.gpu();
        if let Some(t) = g.tables.borrow().get(&key) {
            return Ok(t.clone());
        }
        let t = self.upload_inner(&make()?)?;
        g.tables.borrow_mut().insert(key, t.clone());
        Ok(t)
    }

    /// Downloads a tensor, blocking until it is on the host (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn download_blocking(&self, t: &Tensor) -> Result<Tensor> {
        pollster::block_on(self.download(t))
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> String {
        let api = crate::adapters::backend_label(self.info.backend);
        if self.info.name.is_empty() {
            // The browser need not name its adapter.
            format!("wgpu ({api})")
        } else {
            format!("wgpu ({}, {api})", self.info.name)
        }
    }
    fn device(&self) -> DeviceId {
        let g = self.gpu();
        g.id
    }
    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        if !t.is_host() {
            return Err(Error::NotOnHost { op: "upload" });
        }
        self.scoped("upload", || self.upload_inner(t))
    }
    fn zeros(&self, shape: &[usize]) -> Result<Tensor> {
        self.scoped("zeros", || self.zeros_inner(shape))
    }
    fn download<'a>(&'a self, t: &'a Tensor) -> LocalBoxFuture<'a, Result<Tensor>> {
        let g = self.gpu();
        Box::pin(async move {
            let staged = self.scoped("download", || self.stage_download(t))?;
            let Some((staging, class, len)) = staged else {
                return match t.dtype() {
                    DType::F32 => Tensor::from_f32(t.shape(), Vec::new()),
                    DType::I32 => Tensor::from_i32(t.shape(), Vec::new()),
                    DType::I64 => Tensor::from_i64(t.shape(), Vec::new()),
                    _ => Tensor::from_raw(t.shape(), t.dtype(), Vec::new()),
                };
            };
            let state: Arc<Mutex<MapState>> = Arc::new(Mutex::new((None, None)));
            {
                let state = state.clone();
                staging.map_async(wgpu::MapMode::Read, 0..len, move |r| {
                    if let Ok(mut g) = state.lock() {
                        g.0 = Some(r);
                        if let Some(w) = g.1.take() {
                            w.wake();
                        }
                    }
                });
            }
            let mapped = MapFuture {
                state,
                device: g.device.clone(),
            }
            .await;
            if let Err(e) = mapped {
                // A lost device fails the map before its lost callback has run; one more
                // poll delivers the callback, so the caller gets `DeviceLost`, not a map error.
                #[cfg(not(target_arch = "wasm32"))]
                let _ = g.device.poll(wgpu::PollType::Poll);
                self.check_alive()?;
                return Err(e);
            }
            self.check_alive()?;
            let out = {
                let view = staging
                    .get_mapped_range(0..len)
                    .map_err(|e| backend_err(format!("download: {e}")))?;
                let bytes: &[u8] = &view;
                match t.dtype() {
                    DType::F32 => Tensor::from_f32(
                        t.shape(),
                        bytes
                            .chunks_exact(4)
                            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                            .collect(),
                    ),
                    DType::I32 => Tensor::from_i32(
                        t.shape(),
                        bytes
                            .chunks_exact(4)
                            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                            .collect(),
                    ),
                    DType::I64 => Tensor::from_i64(
                        t.shape(),
                        bytes
                            .chunks_exact(4)
                            .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                            .collect(),
                    ),
                    _ => crate::device::packed_from_bytes(t, bytes),
                }
            };
            staging.unmap();
            // Staging buffers are never bound: their identity is not used.
            g.shared.give_back(PoolKind::Staging, class, staging, 0);
            g.shared.count(|c| c.bytes_downloaded += len);
            out
        })
    }
    fn run(&self, op: &Op, dir: Direction, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        self.scoped(op.name(), || crate::ops::run(self, op, dir, inputs))
    }
    fn run_donated(&self, op: &Op, donated: Vec<Tensor>, rest: &[&Tensor]) -> Result<Vec<Tensor>> {
        self.scoped(op.name(), || {
            crate::ops::run_donated(self, op, donated, rest)
        })
    }
    fn flush(&self) -> Result<()> {
        self.scoped("flush", || self.submit())
    }
}

/// `KERNELS_MATVEC=each|workgroup` (native only; anything else is ignored).
fn matvec_from_env() -> Option<bool> {
    #[cfg(not(target_arch = "wasm32"))]
    match std::env::var("KERNELS_MATVEC").as_deref() {
        Ok("each") => return Some(true),
        Ok("workgroup") => return Some(false),
        _ => {}
    }
    None
}
