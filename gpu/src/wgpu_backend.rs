//! The wgpu backend: device setup, the buffer pool, batched command recording, counters, and the
//! one generic launcher every op family goes through.
//!
//! Tensors live in pooled storage buffers. Ops record compute passes into one command encoder;
//! the encoder is submitted on download, on [`Backend::flush`], or after
//! [`WgpuOptions::max_batch_dispatches`] dispatches. Each dispatch's parameters go into a slot of
//! one uniform arena that is written once per submit.
//!
//! Reuse hazard: `Queue::write_buffer` lands before the commands of the next submit, so an
//! upload must not reuse a buffer the still-unsubmitted encoder touches. Pooled buffers carry
//! the batch in which they were freed; uploads only take buffers freed in an earlier batch.
//! Compute outputs may take any pooled buffer: commands run in recording order.
// Tensors hold device buffers as `Arc<dyn DeviceBuffer>` (kernels-core shares them with threaded
// native code). On wasm32 wgpu's WebGPU handles are neither Send nor Sync, which is fine: the
// browser runs the backend on one thread, and nothing here hands an `Arc` to another.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};

use kernels_core::backend::LocalBoxFuture;
use kernels_core::op::{Direction, Op};
use kernels_core::tensor::{DeviceBuffer, Storage};
use kernels_core::{Backend, DType, DeviceId, Error, Result, Tensor};

/// Options for [`WgpuBackend::new_async`].
#[derive(Debug, Clone)]
pub struct WgpuOptions {
    /// Adapter preference.
    pub power_preference: wgpu::PowerPreference,
    /// Backends to try; `None` reads `WGPU_BACKEND` (default: all).
    pub backends: Option<wgpu::Backends>,
    /// Submit after this many recorded dispatches even without a download or flush.
    pub max_batch_dispatches: usize,
    /// Most bytes the buffer pool keeps in free buffers; freeing beyond it releases the least
    /// recently freed buffers first.
    pub max_pool_bytes: u64,
    /// Use subgroup operations in the row reductions where the adapter has them; `false`
    /// forces the workgroup-memory path.
    pub subgroups: bool,
    /// Caps the max storage binding size the backend works within (for testing the
    /// chunked and `LimitExceeded` paths on a real device); rounded down to the storage
    /// offset alignment.
    pub max_storage_binding_cap: Option<u64>,
}

impl Default for WgpuOptions {
    fn default() -> Self {
        WgpuOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            backends: None,
            max_batch_dispatches: 256,
            max_pool_bytes: 256 << 20,
            subgroups: true,
            max_storage_binding_cap: None,
        }
    }
}

/// What the backend has done so far. Read with [`WgpuBackend::counters`].
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
    /// Free buffers released because the pool was above [`WgpuOptions::max_pool_bytes`].
    pub buffers_evicted: u64,
    /// Bytes of the distinct tensors bound to each dispatch, summed over dispatches: the
    /// device memory traffic if every kernel read each input and wrote each output once (a
    /// tiled kernel's re-reads of its operands through the caches are not counted). Against
    /// an op's minimum it shows intermediates that fusion would remove.
    pub bytes_touched: u64,
}

impl Counters {
    /// What happened between `earlier` and `self`, field by field; `pool_bytes` is a level, not a
    /// count, so it keeps `self`'s value.
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
        }
    }
}

/// The op families, one WGSL file each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Elementwise,
    Matmul,
    Reduce,
    Softmax,
    Norm,
    Layout,
    Optim,
    Loss,
    Rope,
    Attention,
    Gru,
    Svd,
}

impl Family {
    /// Every family.
    pub const ALL: &'static [Family] = &[
        Family::Elementwise,
        Family::Matmul,
        Family::Reduce,
        Family::Softmax,
        Family::Norm,
        Family::Layout,
        Family::Optim,
        Family::Loss,
        Family::Rope,
        Family::Attention,
        Family::Gru,
        Family::Svd,
    ];
    /// File stem of the family's shader.
    pub fn name(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise",
            Family::Matmul => "matmul",
            Family::Reduce => "reduce",
            Family::Softmax => "softmax",
            Family::Norm => "norm",
            Family::Layout => "layout",
            Family::Optim => "optim",
            Family::Loss => "loss",
            Family::Rope => "rope",
            Family::Attention => "attention",
            Family::Gru => "gru",
            Family::Svd => "svd",
        }
    }
    /// Whether the family's row reductions come in a subgroup and a workgroup-memory
    /// variant (a prelude defining `row_sum` / `row_max`).
    pub fn has_subgroup_variant(self) -> bool {
        match self {
            Family::Reduce | Family::Softmax | Family::Norm => true,
            Family::Elementwise
            | Family::Matmul
            | Family::Layout
            | Family::Optim
            | Family::Loss
            | Family::Rope
            | Family::Attention
            | Family::Gru
            | Family::Svd => false,
        }
    }
    /// The source of the family's shader module: the family file, preceded for families
    /// with row reductions by the prelude of the chosen variant (subgroup operations, or
    /// the workgroup-memory fallback).
    pub fn module_source(self, subgroups: bool) -> String {
        if !self.has_subgroup_variant() {
            return self.source().to_string();
        }
        let prelude = if subgroups {
            ROW_REDUCE_SUBGROUP
        } else {
            ROW_REDUCE_WORKGROUP
        };
        format!("{prelude}\n{}", self.source())
    }
    /// The embedded WGSL source.
    pub fn source(self) -> &'static str {
        match self {
            Family::Elementwise => include_str!("shaders/elementwise.wgsl"),
            Family::Matmul => include_str!("shaders/matmul.wgsl"),
            Family::Reduce => include_str!("shaders/reduce.wgsl"),
            Family::Softmax => include_str!("shaders/softmax.wgsl"),
            Family::Norm => include_str!("shaders/norm.wgsl"),
            Family::Layout => include_str!("shaders/layout.wgsl"),
            Family::Optim => include_str!("shaders/optim.wgsl"),
            Family::Loss => include_str!("shaders/loss.wgsl"),
            Family::Rope => include_str!("shaders/rope.wgsl"),
            Family::Attention => include_str!("shaders/attention.wgsl"),
            Family::Gru => include_str!("shaders/gru.wgsl"),
            Family::Svd => include_str!("shaders/svd.wgsl"),
        }
    }
}

/// Row-reduction preludes (`row_sum`, `row_max` over a 256-thread workgroup).
pub const ROW_REDUCE_WORKGROUP: &str = include_str!("shaders/row_reduce_workgroup.wgsl");
/// The subgroup variant (needs `Features::SUBGROUP`).
pub const ROW_REDUCE_SUBGROUP: &str = include_str!("shaders/row_reduce_subgroup.wgsl");

/// Every shader uses one bind group layout: binding 0 the params uniform, 1..=4 read-only
/// storage, 5..=7 read-write storage. Unused slots get small dummy buffers.
pub(crate) const RO_SLOTS: usize = 4;
pub(crate) const RW_SLOTS: usize = 3;
/// Bytes of the per-dispatch parameter block (`struct Params` in every shader).
const PARAMS_BYTES: usize = 64;

/// Per-dispatch parameters: eight u32 then eight f32 (`struct Params` in the shaders).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Params {
    pub u: [u32; 8],
    pub f: [f32; 8],
}

impl Params {
    pub fn u(vals: &[u32]) -> Self {
        let mut p = Params::default();
        for (d, s) in p.u.iter_mut().zip(vals) {
            *d = *s;
        }
        p
    }
    pub fn with_f(mut self, vals: &[f32]) -> Self {
        for (d, s) in self.f.iter_mut().zip(vals) {
            *d = *s;
        }
        self
    }
    fn bytes(&self) -> [u8; PARAMS_BYTES] {
        let mut out = [0u8; PARAMS_BYTES];
        for (i, v) in self.u.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        for (i, v) in self.f.iter().enumerate() {
            out[32 + i * 4..32 + i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        out
    }
}

/// Device ids of every GPU backend (wgpu and CUDA) come from one counter, so they never collide.
pub(crate) static NEXT_DEVICE: AtomicU64 = AtomicU64::new(1);

/// Power-of-two size class of a buffer of `bytes` (at least 16).
fn size_class(bytes: u64) -> u64 {
    bytes.max(16).next_power_of_two()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PoolKind {
    Storage,
    Staging,
}

struct Pooled {
    buf: wgpu::Buffer,
    freed_in_batch: u64,
    /// Order of freeing, for least-recently-freed eviction.
    stamp: u64,
}

/// The free lists and what they hold.
#[derive(Default)]
struct FreeLists {
    lists: HashMap<(PoolKind, u64), Vec<Pooled>>,
    /// Bytes in every list (storage and staging).
    held: u64,
    next_stamp: u64,
}

/// State shared between the backend and its buffers (which return themselves on drop).
struct Shared {
    free: Mutex<FreeLists>,
    /// Most bytes the free lists may hold.
    max_bytes: u64,
    counters: Mutex<Counters>,
    batch: AtomicU64,
}

impl Shared {
    fn give_back(&self, kind: PoolKind, class: u64, buf: wgpu::Buffer) {
        if class > self.max_bytes {
            // Keeping it would evict everything else and still not fit.
            drop(buf);
            self.count(|c| c.buffers_evicted += 1);
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
            }
            evicted += 1;
            drop(victim);
        }
        drop(free);
        self.count(|c| {
            c.pool_bytes = c.pool_bytes.saturating_add_signed(storage_delta);
            c.buffers_evicted += evicted;
        });
    }

    fn take(&self, kind: PoolKind, class: u64, for_upload: bool) -> Option<wgpu::Buffer> {
        let batch = self.batch.load(Ordering::Relaxed);
        let mut free = self.free.lock().ok()?;
        let list = free.lists.get_mut(&(kind, class))?;
        let pos = list
            .iter()
            .rposition(|p| !for_upload || p.freed_in_batch < batch)?;
        let p = list.swap_remove(pos);
        free.held = free.held.saturating_sub(class);
        drop(free);
        if kind == PoolKind::Storage {
            self.count(|c| {
                c.pool_bytes = c.pool_bytes.saturating_sub(class);
                c.buffers_reused += 1;
            });
        }
        Some(p.buf)
    }

    fn count(&self, f: impl FnOnce(&mut Counters)) {
        if let Ok(mut c) = self.counters.lock() {
            f(&mut c);
        }
    }
}

/// A device buffer holding one tensor's elements. Returns to the pool when the last tensor
/// referencing it drops.
pub struct GpuBuffer {
    buf: Option<wgpu::Buffer>,
    class: u64,
    /// Bytes the tensor uses (a multiple of 4; the buffer may be larger).
    len: u64,
    device: DeviceId,
    shared: Weak<Shared>,
    /// Host copy of small integer tensors (ids, targets), so index ranges can be checked
    /// without a readback.
    host_ints: Option<Arc<Vec<i64>>>,
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
            shared.give_back(PoolKind::Storage, self.class, buf);
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

type PipelineKey = (Family, &'static str, Vec<(&'static str, u64)>);

struct Recording {
    encoder: Option<wgpu::CommandEncoder>,
    dispatches: usize,
    /// Parameter blocks of this batch, one aligned slot per dispatch.
    params: Vec<u8>,
}

/// Everything that belongs to one wgpu device: replaced wholesale when the device is lost and
/// the backend recovers.
struct Gpu {
    id: DeviceId,
    /// Everything the adapter offers (the device enables only what the backend uses).
    adapter_features: wgpu::Features,
    device: wgpu::Device,
    queue: wgpu::Queue,
    shared: Arc<Shared>,
    layout: wgpu::BindGroupLayout,
    pipeline_layout: wgpu::PipelineLayout,
    modules: RefCell<HashMap<(Family, bool), wgpu::ShaderModule>>,
    pipelines: RefCell<HashMap<PipelineKey, wgpu::ComputePipeline>>,
    /// Small constant tables uploaded once and kept (e.g. rope frequencies), by key.
    tables: RefCell<HashMap<String, Tensor>>,
    rec: RefCell<Recording>,
    arena: wgpu::Buffer,
    slot: usize,
    dummy_ro: wgpu::Buffer,
    dummy_rw: [wgpu::Buffer; RW_SLOTS],
    lost: Arc<Mutex<Option<String>>>,
    uncaptured: Arc<Mutex<Option<String>>>,
}

/// The wgpu backend. See the module docs.
pub struct WgpuBackend {
    info: wgpu::AdapterInfo,
    /// The limits the backend works within (the device's, with the testing caps of
    /// [`WgpuOptions`] applied).
    limits: wgpu::Limits,
    options: WgpuOptions,
    instance: wgpu::Instance,
    /// Subgroup reductions are in use (adapter has them and the options allow them).
    subgroups: bool,
    /// Smallest subgroup size the adapter reports (sizes the subgroup reduction's levels).
    subgroup_min: u32,
    gpu: RefCell<Rc<Gpu>>,
    /// Devices this backend lost, with the reason: their tensors fail with `DeviceLost`.
    lost_devices: RefCell<Vec<(DeviceId, String)>>,
    /// The current device's loss has been returned to a caller once; the next call recovers.
    loss_reported: Cell<bool>,
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WgpuBackend({})", self.name())
    }
}

fn backend_err(why: impl Into<String>) -> Error {
    Error::Backend {
        backend: "wgpu".into(),
        why: why.into(),
    }
}

fn map_wgpu_error(e: wgpu::Error, what: &str) -> Error {
    match e {
        wgpu::Error::OutOfMemory { .. } => Error::OutOfMemory {
            what: what.into(),
            bytes: 0,
        },
        wgpu::Error::Validation { description, .. } => {
            backend_err(format!("{what}: validation error: {description}"))
        }
        wgpu::Error::Internal { description, .. } => {
            backend_err(format!("{what}: internal error: {description}"))
        }
    }
}

/// Opens a device on the preferred adapter of `instance`. Returns the adapter info, the limits
/// requested, whether subgroups were enabled, the smallest subgroup size, and the device state
/// (starting from `counters`).
async fn open(
    instance: &wgpu::Instance,
    options: &WgpuOptions,
    counters: Counters,
) -> Result<(wgpu::AdapterInfo, wgpu::Limits, bool, u32, Gpu)> {
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: options.power_preference,
            force_fallback_adapter: false,
            compatible_surface: None,
            ..Default::default()
        })
        .await
        .map_err(|e| backend_err(format!("no adapter: {e}")))?;
    let info = adapter.get_info();
    let adapter_limits = adapter.limits();
    let required_limits = wgpu::Limits::default().or_better_values_from(&adapter_limits);
    // `or_better_values_from` may still ask for a default the adapter lacks (downlevel
    // adapters); fall back to exactly what the adapter has.
    let required_limits = if required_limits.check_limits(&adapter_limits) {
        required_limits
    } else {
        adapter_limits.clone()
    };
    // Subgroup reductions need at least 4 lanes (WebGPU's guaranteed minimum); below that
    // the workgroup-memory path is as good.
    let subgroups = options.subgroups
        && adapter.features().contains(wgpu::Features::SUBGROUP)
        && info.subgroup_min_size >= 4;
    let required_features = if subgroups {
        wgpu::Features::SUBGROUP
    } else {
        wgpu::Features::empty()
    };
    let (device, queue) = adapter
        .request_device(&wgpu::DeviceDescriptor {
            label: Some("kernels"),
            required_features,
            required_limits: required_limits.clone(),
            ..Default::default()
        })
        .await
        .map_err(|e| backend_err(format!("device request failed on {}: {e}", info.name)))?;

    let lost = Arc::new(Mutex::new(None));
    {
        let lost = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            if let Ok(mut l) = lost.lock() {
                *l = Some(format!("{reason:?}: {msg}"));
            }
        });
    }
    let uncaptured = Arc::new(Mutex::new(None));
    {
        let u = uncaptured.clone();
        // The default handler panics; keep the first message and report it as an Error.
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut slot) = u.lock()
                && slot.is_none()
            {
                *slot = Some(e.to_string());
            }
        }));
    }

    let storage = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: NonZeroU64::new(PARAMS_BYTES as u64),
        },
        count: None,
    }];
    for i in 0..RO_SLOTS {
        entries.push(storage(1 + i as u32, true));
    }
    for i in 0..RW_SLOTS {
        entries.push(storage((1 + RO_SLOTS + i) as u32, false));
    }
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("kernels-layout"),
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("kernels-pipeline-layout"),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let slot = (required_limits.min_uniform_buffer_offset_alignment as usize).max(PARAMS_BYTES);
    let max_batch = options.max_batch_dispatches.max(1);
    let arena = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("params-arena"),
        size: (slot * max_batch) as u64,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mk = |label: &'static str| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: 16,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    let dummy_ro = mk("dummy-ro");
    let dummy_rw = [mk("dummy-rw0"), mk("dummy-rw1"), mk("dummy-rw2")];
    let counters = Counters {
        pool_bytes: 0,
        ..counters
    };
    let gpu = Gpu {
        id: DeviceId(NEXT_DEVICE.fetch_add(1, Ordering::Relaxed)),
        adapter_features: adapter.features(),
        device,
        queue,
        shared: Arc::new(Shared {
            free: Mutex::new(FreeLists::default()),
            max_bytes: options.max_pool_bytes,
            counters: Mutex::new(counters),
            batch: AtomicU64::new(0),
        }),
        layout,
        pipeline_layout,
        modules: RefCell::new(HashMap::new()),
        pipelines: RefCell::new(HashMap::new()),
        tables: RefCell::new(HashMap::new()),
        rec: RefCell::new(Recording {
            encoder: None,
            dispatches: 0,
            params: Vec::new(),
        }),
        arena,
        slot,
        dummy_ro,
        dummy_rw,
        lost,
        uncaptured,
    };
    let min_sg = info.subgroup_min_size;
    Ok((info, required_limits, subgroups, min_sg, gpu))
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
        let (info, device_limits, subgroups, subgroup_min, gpu) =
            open(&instance, &options, Counters::default()).await?;
        let mut limits = device_limits.clone();
        if let Some(cap) = options.max_storage_binding_cap {
            // Keep the cap a multiple of the offset alignment so chunks can start anywhere
            // on a chunk boundary.
            let align = u64::from(limits.min_storage_buffer_offset_alignment.max(4));
            let cap = (cap / align).max(1) * align;
            limits.max_storage_buffer_binding_size =
                limits.max_storage_buffer_binding_size.min(cap);
        }
        Ok(WgpuBackend {
            info,
            limits,
            options,
            instance,
            subgroups,
            subgroup_min,
            gpu: RefCell::new(Rc::new(gpu)),
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
        let (info, _, subgroups, _, gpu) = open(&self.instance, &self.options, counters).await?;
        if info.name != self.info.name
            || info.backend != self.info.backend
            || subgroups != self.subgroups
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

    /// The wgpu device (for tests that need to poke it, e.g. force a loss with `destroy`).
    pub fn wgpu_device(&self) -> wgpu::Device {
        self.gpu().device.clone()
    }

    fn gpu(&self) -> Rc<Gpu> {
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
        g.shared.count(|c| c.pool_bytes = 0);
    }

    /// A constant table uploaded on first use and kept for the backend's lifetime.
    pub(crate) fn table(
        &self,
        key: String,
        make: impl FnOnce() -> Result<Tensor>,
    ) -> Result<Tensor> {
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

    /// After a device loss was returned to a caller, the next call gets a fresh device
    /// (natively; in the browser, where that cannot block, call `recover_async`).
    fn recover_if_reported(&self) -> Result<()> {
        if !self.loss_reported.get() {
            return Ok(());
        }
        let lost = self.gpu().lost.lock().ok().and_then(|l| l.clone());
        let Some(why) = lost else {
            self.loss_reported.set(false);
            return Ok(());
        };
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = why;
            self.recover()
        }
        #[cfg(target_arch = "wasm32")]
        {
            Err(Error::DeviceLost {
                why: format!("{why}; call WgpuBackend::recover_async() for a fresh device"),
            })
        }
    }

    pub(crate) fn check_alive(&self) -> Result<()> {
        let g = self.gpu();
        if let Ok(l) = g.lost.lock()
            && let Some(why) = l.as_ref()
        {
            self.loss_reported.set(true);
            return Err(Error::DeviceLost { why: why.clone() });
        }
        if let Ok(mut u) = g.uncaptured.lock()
            && let Some(why) = u.take()
        {
            return Err(backend_err(format!("uncaptured device error: {why}")));
        }
        Ok(())
    }

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
    fn check_buffer_size(&self, what: &str, bytes: u64) -> Result<()> {
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

    /// A storage buffer of at least `bytes`, from the pool when possible.
    fn acquire(&self, bytes: u64, for_upload: bool) -> Result<(wgpu::Buffer, u64)> {
        let g = self.gpu();
        let class = size_class(bytes);
        // Classes above the device's buffer size fall back to the exact (4-aligned) size.
        let class = if class > self.limits.max_buffer_size {
            bytes.div_ceil(4) * 4
        } else {
            class
        };
        if let Some(b) = g.shared.take(PoolKind::Storage, class, for_upload) {
            return Ok((b, class));
        }
        let buf = g.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tensor"),
            size: class,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        g.shared.count(|c| c.buffers_created += 1);
        Ok((buf, class))
    }

    /// A fresh output tensor of `shape` (contents undefined until a kernel writes them).
    pub(crate) fn alloc(&self, op: &'static str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let g = self.gpu();
        let n = kernels_core::tensor::numel(shape)
            .ok_or_else(|| Error::bad_shape(op, "out", shape, "element count overflows"))?;
        let bytes = (n as u64).saturating_mul(4);
        self.check_buffer_size(op, bytes)?;
        let (buf, class) = self.acquire(bytes, false)?;
        Ok(Tensor::from_device(
            shape,
            dtype,
            Arc::new(GpuBuffer {
                buf: Some(buf),
                class,
                len: bytes,
                device: g.id,
                shared: Arc::downgrade(&g.shared),
                host_ints: None,
            }),
        ))
    }

    fn module(&self, g: &Gpu, family: Family, subgroups: bool) -> wgpu::ShaderModule {
        let mut modules = g.modules.borrow_mut();
        modules
            .entry((family, subgroups))
            .or_insert_with(|| {
                g.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(family.name()),
                    source: wgpu::ShaderSource::Wgsl(family.module_source(subgroups).into()),
                })
            })
            .clone()
    }

    /// Levels of the subgroup tree that cover a 256-thread workgroup at the smallest
    /// subgroup size.
    fn subgroup_levels(&self) -> u32 {
        let size = u64::from(self.subgroup_min.max(2));
        let mut levels = 1;
        let mut covered = size;
        while covered < 256 {
            covered *= size;
            levels += 1;
        }
        levels
    }

    fn pipeline(
        &self,
        g: &Gpu,
        family: Family,
        entry: &'static str,
        constants: &[(&'static str, f64)],
    ) -> wgpu::ComputePipeline {
        let subgroups = self.subgroups && family.has_subgroup_variant();
        let mut constants = constants.to_vec();
        if subgroups {
            constants.push(("SG_LEVELS", f64::from(self.subgroup_levels())));
        }
        let key: PipelineKey = (
            family,
            entry,
            constants.iter().map(|(k, v)| (*k, v.to_bits())).collect(),
        );
        if let Some(p) = g.pipelines.borrow().get(&key) {
            return p.clone();
        }
        let module = self.module(g, family, subgroups);
        let p = g
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(&g.pipeline_layout),
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        g.pipelines.borrow_mut().insert(key, p.clone());
        p
    }

    /// The pipelines built so far, as `family/entry` plus `+subgroup` for subgroup variants
    /// (lets tests check which kernel variant ran).
    pub fn pipelines_built(&self) -> Vec<String> {
        let g = self.gpu();
        let mut out: Vec<String> = g
            .pipelines
            .borrow()
            .keys()
            .map(|(f, e, c)| {
                let sg = if c.iter().any(|(k, _)| *k == "SG_LEVELS") {
                    "+subgroup"
                } else {
                    ""
                };
                format!("{}/{e}{sg}", f.name())
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

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

    /// Records one dispatch: the family's `entry` specialized with `constants`, `params` in
    /// binding 0, `inputs` in the read-only slots and `outputs` in the read-write slots.
    /// Every tensor of `inputs`/`outputs` must live on this device.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        &self,
        op: &'static str,
        family: Family,
        entry: &'static str,
        constants: &[(&'static str, f64)],
        params: Params,
        inputs: &[&Tensor],
        outputs: &[&Tensor],
        grid: (u32, u32, u32),
    ) -> Result<()> {
        let ins: Vec<_> = inputs.iter().map(|t| (*t, None)).collect();
        let outs: Vec<_> = outputs.iter().map(|t| (*t, None)).collect();
        self.launch_ranges(op, family, entry, constants, params, &ins, &outs, grid)
    }

    /// One storage binding, checked against the binding limit.
    fn bind_one<'t>(
        &self,
        op: &'static str,
        t: &'t Tensor,
        range: Option<(usize, usize)>,
    ) -> Result<wgpu::BufferBinding<'t>> {
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
            .ok_or_else(|| backend_err(format!("{op}: buffer already released")))
    }

    /// As [`WgpuBackend::launch`], each tensor bound whole (`None`) or as the element range
    /// `(start, len)`; `start * 4` must be a multiple of the storage offset alignment. A
    /// binding above the storage binding limit is `LimitExceeded` naming the op.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_ranges(
        &self,
        op: &'static str,
        family: Family,
        entry: &'static str,
        constants: &[(&'static str, f64)],
        params: Params,
        inputs: &[(&Tensor, Option<(usize, usize)>)],
        outputs: &[(&Tensor, Option<(usize, usize)>)],
        grid: (u32, u32, u32),
    ) -> Result<()> {
        let g = self.gpu();
        if inputs.len() > RO_SLOTS || outputs.len() > RW_SLOTS {
            return Err(backend_err(format!("{op}: too many bindings for {entry}")));
        }
        let in_bufs = inputs
            .iter()
            .map(|(t, r)| self.bind_one(op, t, *r))
            .collect::<Result<Vec<_>>>()?;
        let out_bufs = outputs
            .iter()
            .map(|(t, r)| self.bind_one(op, t, *r))
            .collect::<Result<Vec<_>>>()?;
        // WebGPU rejects a dispatch whose writable binding overlaps any other binding (native
        // wgpu does not check): catch it here, so native tests find what the browser would.
        let overlaps = |a: &wgpu::BufferBinding, b: &wgpu::BufferBinding| {
            let end = |x: &wgpu::BufferBinding| x.size.map_or(u64::MAX, |s| x.offset + s.get());
            a.buffer == b.buffer && a.offset < end(b) && b.offset < end(a)
        };
        for (i, o) in out_bufs.iter().enumerate() {
            if out_bufs[i + 1..]
                .iter()
                .chain(&in_bufs)
                .any(|b| overlaps(o, b))
            {
                return Err(backend_err(format!(
                    "{op}: {entry} binds its writable slot {i} to a buffer another slot uses"
                )));
            }
        }
        let pipeline = self.pipeline(&g, family, entry, constants);
        // Launchers pass a tensor again for slots a kernel does not read: count each once.
        let mut touched: Vec<(*const Tensor, Option<(usize, usize)>)> = Vec::new();
        let mut bytes_touched = 0u64;
        for (t, r) in inputs.iter().chain(outputs) {
            let key = (*t as *const Tensor, *r);
            if !touched.contains(&key) {
                touched.push(key);
                bytes_touched += 4 * r.map_or(t.numel(), |(_, len)| len) as u64;
            }
        }

        let mut rec = g.rec.borrow_mut();
        if rec.dispatches >= self.options.max_batch_dispatches {
            drop(rec);
            self.submit()?;
            rec = g.rec.borrow_mut();
        }
        let offset = rec.dispatches * g.slot;
        rec.params.resize(offset, 0);
        rec.params.extend_from_slice(&params.bytes());
        rec.dispatches += 1;

        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &g.arena,
                offset: offset as u64,
                size: NonZeroU64::new(PARAMS_BYTES as u64),
            }),
        }];
        for i in 0..RO_SLOTS {
            let resource = match in_bufs.get(i) {
                Some(b) => wgpu::BindingResource::Buffer(b.clone()),
                None => g.dummy_ro.as_entire_binding(),
            };
            entries.push(wgpu::BindGroupEntry {
                binding: 1 + i as u32,
                resource,
            });
        }
        for (i, dummy) in g.dummy_rw.iter().enumerate() {
            let resource = match out_bufs.get(i) {
                Some(b) => wgpu::BindingResource::Buffer(b.clone()),
                None => dummy.as_entire_binding(),
            };
            entries.push(wgpu::BindGroupEntry {
                binding: (1 + RO_SLOTS + i) as u32,
                resource,
            });
        }
        let bind_group = g.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(entry),
            layout: &g.layout,
            entries: &entries,
        });
        let encoder = rec.encoder.get_or_insert_with(|| {
            g.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("kernels-batch"),
                })
        });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(entry),
                timestamp_writes: None,
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(grid.0, grid.1, grid.2);
        }
        g.shared.count(|c| {
            c.dispatches += 1;
            c.bytes_touched += bytes_touched;
        });
        Ok(())
    }

    /// An f32 tensor of zeros made on the device: a pooled buffer cleared by a command in the
    /// current batch (ordered after any recorded work that used the buffer before), with no
    /// host allocation and no upload.
    fn zeros_inner(&self, shape: &[usize]) -> Result<Tensor> {
        let t = self.alloc("zeros", shape, DType::F32)?;
        let bytes = (t.numel() as u64) * 4;
        if bytes == 0 {
            return Ok(t);
        }
        let g = self.gpu();
        let raw = self
            .buffer_of("zeros", &t)?
            .raw()
            .ok_or_else(|| backend_err(String::from("zeros: buffer already released")))?;
        let mut rec = g.rec.borrow_mut();
        let encoder = rec.encoder.get_or_insert_with(|| {
            g.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("kernels-batch"),
                })
        });
        encoder.clear_buffer(raw, 0, Some(bytes));
        Ok(t)
    }

    /// Submits the recorded batch (if any).
    fn submit(&self) -> Result<()> {
        let g = self.gpu();
        let mut rec = g.rec.borrow_mut();
        let Some(encoder) = rec.encoder.take() else {
            return Ok(());
        };
        if !rec.params.is_empty() {
            g.queue.write_buffer(&g.arena, 0, &rec.params);
        }
        rec.params.clear();
        rec.dispatches = 0;
        drop(rec);
        g.queue.submit(Some(encoder.finish()));
        g.shared.batch.fetch_add(1, Ordering::Relaxed);
        g.shared.count(|c| c.submits += 1);
        Ok(())
    }

    /// Runs `f` inside validation and out-of-memory error scopes and turns a captured error
    /// into an [`Error`]. Where the scope's result is not ready at once (the browser), the
    /// error surfaces later through the uncaptured-error check instead.
    pub(crate) fn scoped<R>(&self, what: &str, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.recover_if_reported()?;
        let g = self.gpu();
        self.check_alive()?;
        let oom = g.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = g.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let r = f();
        let val_err = kernels_core::backend::now_or_never(val.pop()).flatten();
        let oom_err = kernels_core::backend::now_or_never(oom.pop()).flatten();
        if val_err.is_some() || oom_err.is_some() || r.is_err() {
            // Errors on a destroyed device come before its lost callback; a poll delivers
            // the callback so the caller sees `DeviceLost` rather than the symptom.
            #[cfg(not(target_arch = "wasm32"))]
            let _ = g.device.poll(wgpu::PollType::Poll);
        }
        self.check_alive()?;
        if let Some(e) = oom_err {
            return Err(map_wgpu_error(e, what));
        }
        if let Some(e) = val_err {
            return Err(map_wgpu_error(e, what));
        }
        r
    }

    fn upload_inner(&self, t: &Tensor) -> Result<Tensor> {
        let g = self.gpu();
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
            Storage::Device(_) => {
                return Err(Error::NotOnHost { op: "upload" });
            }
        };
        let len = bytes.len() as u64;
        self.check_buffer_size("upload", len)?;
        let (buf, class) = self.acquire(len, true)?;
        if !bytes.is_empty() {
            g.queue.write_buffer(&buf, 0, &bytes);
        }
        g.shared.count(|c| c.bytes_uploaded += len);
        Ok(Tensor::from_device(
            t.shape(),
            t.dtype(),
            Arc::new(GpuBuffer {
                buf: Some(buf),
                class,
                len,
                device: g.id,
                shared: Arc::downgrade(&g.shared),
                host_ints,
            }),
        ))
    }

    /// Records the copy of `t` into a mappable staging buffer and submits; returns the staging
    /// buffer, its class and the byte count.
    fn stage_download(&self, t: &Tensor) -> Result<Option<(wgpu::Buffer, u64, u64)>> {
        let g = self.gpu();
        let src = self.buffer_of("download", t)?;
        let len = (t.numel() as u64) * 4;
        if len == 0 {
            return Ok(None);
        }
        let raw = src
            .raw()
            .ok_or_else(|| backend_err("download: buffer already released"))?;
        let class = size_class(len);
        let staging = match g.shared.take(PoolKind::Staging, class, false) {
            Some(b) => b,
            None => g.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("staging"),
                size: class,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        };
        {
            let mut rec = g.rec.borrow_mut();
            let encoder = rec.encoder.get_or_insert_with(|| {
                g.device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("kernels-batch"),
                    })
            });
            encoder.copy_buffer_to_buffer(raw, 0, &staging, 0, len);
        }
        self.submit()?;
        Ok(Some((staging, class, len)))
    }
}

/// Resolves when a `map_async` callback fires. Natively it drives the device with a blocking
/// poll; in the browser the event loop delivers the callback.
type MapState = (
    Option<std::result::Result<(), wgpu::BufferAsyncError>>,
    Option<Waker>,
);

struct MapFuture {
    state: Arc<Mutex<MapState>>,
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    device: wgpu::Device,
}

impl Future for MapFuture {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let take = |s: &Mutex<MapState>, cx: &Context<'_>| {
            let mut g = s.lock().map_err(|_| backend_err("map state poisoned"))?;
            match g.0.take() {
                Some(r) => Ok(Some(r)),
                None => {
                    g.1 = Some(cx.waker().clone());
                    Ok(None)
                }
            }
        };
        match take(&self.state, cx) {
            Err(e) => return Poll::Ready(Err(e)),
            Ok(Some(r)) => {
                return Poll::Ready(r.map_err(|e| backend_err(format!("map_async: {e}"))));
            }
            Ok(None) => {}
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            if let Err(e) = self.device.poll(wgpu::PollType::wait_indefinitely()) {
                return Poll::Ready(Err(backend_err(format!("poll: {e}"))));
            }
            match take(&self.state, cx) {
                Err(e) => return Poll::Ready(Err(e)),
                Ok(Some(r)) => {
                    return Poll::Ready(r.map_err(|e| backend_err(format!("map_async: {e}"))));
                }
                Ok(None) => {}
            }
        }
        Poll::Pending
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> String {
        format!("wgpu ({}, {:?})", self.info.name, self.info.backend)
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
                }
            };
            staging.unmap();
            g.shared.give_back(PoolKind::Staging, class, staging);
            g.shared.count(|c| c.bytes_downloaded += len);
            out
        })
    }
    fn run(&self, op: &Op, dir: Direction, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        self.scoped(op.name(), || crate::ops::run(self, op, dir, inputs))
    }
    fn flush(&self) -> Result<()> {
        self.scoped("flush", || self.submit())
    }
}
