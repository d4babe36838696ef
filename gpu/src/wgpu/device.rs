use std::cell::RefCell;
use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use super::counters::Counters;
use super::options::WgpuOptions;
use super::pool::FreeLists;
use super::pool::Shared;
use super::record::{BindCache, PipelineCache, Recording};
use crate::device::Family;
use kernels_core::{DeviceId, Error, Result, Tensor};

/// Every shader uses one bind group layout: binding 0 the params uniform, 1..=4 read-only
/// storage, 5..=7 read-write storage. Unused slots get small dummy buffers.
pub(crate) const RO_SLOTS: usize = 4;
pub(crate) const RW_SLOTS: usize = 3;
/// Bytes of the per-dispatch parameter block (`struct Params` in every shader).
pub(crate) const PARAMS_BYTES: usize = 4 * (crate::device::PARAM_U32S + crate::device::PARAM_F32S);

pub(crate) type PipelineKey = (Family, Variant, &'static str, Vec<(&'static str, u64)>);

/// Which variant of a family's shader module a pipeline was built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Variant {
    /// Row reductions with subgroup operations (`Features::SUBGROUP`).
    pub(crate) subgroups: bool,
    /// f16 values read with native f16 types (`Features::SHADER_F16`).
    pub(crate) f16: bool,
}

/// What [`open`] found and enabled.
pub(crate) struct Opened {
    pub(crate) info: wgpu::AdapterInfo,
    /// The limits requested.
    pub(crate) limits: wgpu::Limits,
    /// Subgroup operations are enabled.
    pub(crate) subgroups: bool,
    /// The smallest subgroup size the adapter reports.
    pub(crate) subgroup_min: u32,
    /// `shader-f16` is enabled.
    pub(crate) f16: bool,
    pub(crate) gpu: Gpu,
}

/// Everything that belongs to one wgpu device: replaced wholesale when the device is lost and
/// the backend recovers.
pub(crate) struct Gpu {
    pub(crate) id: DeviceId,
    /// Everything the adapter offers (the device enables only what the backend uses).
    pub(crate) adapter_features: wgpu::Features,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) shared: Arc<Shared>,
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) pipeline_layout: wgpu::PipelineLayout,
    pub(crate) modules: RefCell<HashMap<(Family, Variant), wgpu::ShaderModule>>,
    pub(crate) pipelines: RefCell<HashMap<PipelineKey, wgpu::ComputePipeline>>,
    /// Small constant tables uploaded once and kept (e.g. rope frequencies), by key.
    pub(crate) tables: RefCell<HashMap<String, Tensor>>,
    pub(crate) rec: RefCell<Recording>,
    /// Bind groups by their buffers (steady-state decode makes none).
    pub(crate) bind_groups: RefCell<BindCache>,
    /// Pipelines by family, entry and at most `FAST_CONSTS` constants (found without
    /// allocating).
    pub(crate) fast_pipelines: RefCell<PipelineCache>,
    /// Times the batch being recorded (`Counters::host_ns`).
    pub(crate) clock: crate::host_time::HostClock,
    pub(crate) arena: wgpu::Buffer,
    pub(crate) slot: usize,
    pub(crate) dummy_ro: wgpu::Buffer,
    pub(crate) dummy_rw: [wgpu::Buffer; RW_SLOTS],
    pub(crate) lost: Arc<Mutex<Option<String>>>,
    pub(crate) uncaptured: Arc<Mutex<Option<String>>>,
}

pub(crate) fn backend_err(why: impl Into<String>) -> Error {
    Error::Backend {
        backend: "wgpu".into(),
        why: why.into(),
    }
}

pub(crate) fn map_wgpu_error(e: wgpu::Error, what: &str) -> Error {
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

/// Opens a device on the preferred adapter of `instance`, with the device state starting from
/// `counters`.
pub(crate) async fn open(
    instance: &wgpu::Instance,
    options: &WgpuOptions,
    counters: Counters,
) -> Result<Opened> {
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
    let f16 = options.shader_f16 && adapter.features().contains(wgpu::Features::SHADER_F16);
    let mut required_features = wgpu::Features::empty();
    if subgroups {
        required_features |= wgpu::Features::SUBGROUP;
    }
    if f16 {
        required_features |= wgpu::Features::SHADER_F16;
    }
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
            // Each dispatch's block is at its own offset in the arena, given at
            // `set_bind_group`, so one bind group serves a dispatch at any place in a batch.
            has_dynamic_offset: true,
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
    // Each dispatch's block starts on the uniform offset alignment.
    let align = (required_limits.min_uniform_buffer_offset_alignment as usize).max(1);
    let slot = PARAMS_BYTES.div_ceil(align) * align;
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
        id: DeviceId::fresh(),
        adapter_features: adapter.features(),
        device,
        queue,
        shared: Arc::new(Shared {
            free: Mutex::new(FreeLists::default()),
            max_bytes: options.max_pool_bytes,
            counters: Mutex::new(counters),
            batch: AtomicU64::new(0),
            last_id: AtomicU64::new(0),
        }),
        layout,
        pipeline_layout,
        modules: RefCell::new(HashMap::new()),
        pipelines: RefCell::new(HashMap::new()),
        tables: RefCell::new(HashMap::new()),
        rec: RefCell::new(Recording::new()),
        bind_groups: RefCell::new(BindCache::default()),
        fast_pipelines: RefCell::new(PipelineCache::default()),
        clock: Default::default(),
        arena,
        slot,
        dummy_ro,
        dummy_rw,
        lost,
        uncaptured,
    };
    let subgroup_min = info.subgroup_min_size;
    Ok(Opened {
        info,
        limits: required_limits,
        subgroups,
        subgroup_min,
        f16,
        gpu,
    })
}
