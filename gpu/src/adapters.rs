//! What wgpu can see: every adapter with its backend, device type, driver, limits and features.
//! `kernels info` prints this; the backend itself picks one adapter in
//! [`crate::WgpuBackend::new_async`].

/// One adapter as wgpu reports it.
#[derive(Debug, Clone)]
pub struct AdapterSummary {
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
}

impl AdapterSummary {
    /// `shader-f16`, `subgroup`, ...: the adapter's features in WebGPU-style spelling.
    pub fn feature_names(&self) -> Vec<String> {
        feature_names(self.features)
    }

    /// True when `info` describes this adapter (same name, backend, vendor and device ids).
    pub fn is(&self, info: &wgpu::AdapterInfo) -> bool {
        self.info.name == info.name
            && self.info.backend == info.backend
            && self.info.vendor == info.vendor
            && self.info.device == info.device
    }
}

/// True for software rasterizers (lavapipe, SwiftShader, WARP): their timings say nothing about
/// GPU speed. wgpu says `DeviceType::Cpu` natively; in a browser it says so only for a "fallback
/// adapter", and Chromium's SwiftShader need not be one, so the name counts too.
pub fn is_software(info: &wgpu::AdapterInfo) -> bool {
    let name = info.name.to_ascii_lowercase();
    info.device_type == wgpu::DeviceType::Cpu
        || [
            "swiftshader",
            "llvmpipe",
            "lavapipe",
            "microsoft basic render",
        ]
        .iter()
        .any(|s| name.contains(s))
}

/// `SHADER_F16` -> `shader-f16`.
pub fn feature_names(f: wgpu::Features) -> Vec<String> {
    f.iter_names()
        .map(|(name, _)| name.to_ascii_lowercase().replace('_', "-"))
        .collect()
}

/// `Vulkan`, `Metal`, ..., and `WebGPU` for the browser's (wgpu's `BrowserWebGpu`).
pub fn backend_label(b: wgpu::Backend) -> String {
    match b {
        wgpu::Backend::BrowserWebGpu => "WebGPU".into(),
        other => format!("{other:?}"),
    }
}

/// The limits the kernels depend on, by wgpu's field names, for reports.
pub fn limit_list(l: &wgpu::Limits) -> Vec<(&'static str, u64)> {
    vec![
        (
            "max_storage_buffer_binding_size",
            l.max_storage_buffer_binding_size,
        ),
        ("max_buffer_size", l.max_buffer_size),
        (
            "max_compute_workgroups_per_dimension",
            u64::from(l.max_compute_workgroups_per_dimension),
        ),
        (
            "max_compute_invocations_per_workgroup",
            u64::from(l.max_compute_invocations_per_workgroup),
        ),
        (
            "max_compute_workgroup_size_x",
            u64::from(l.max_compute_workgroup_size_x),
        ),
        (
            "max_compute_workgroup_size_y",
            u64::from(l.max_compute_workgroup_size_y),
        ),
        (
            "max_compute_workgroup_size_z",
            u64::from(l.max_compute_workgroup_size_z),
        ),
        (
            "max_compute_workgroup_storage_size",
            u64::from(l.max_compute_workgroup_storage_size),
        ),
        (
            "max_storage_buffers_per_shader_stage",
            u64::from(l.max_storage_buffers_per_shader_stage),
        ),
        ("max_bind_groups", u64::from(l.max_bind_groups)),
        (
            "max_uniform_buffer_binding_size",
            l.max_uniform_buffer_binding_size,
        ),
    ]
}

/// Every adapter of the backends `WGPU_BACKEND` allows (all when unset). Native only: the
/// browser offers one adapter through `requestAdapter`.
#[cfg(not(target_arch = "wasm32"))]
pub fn list_adapters() -> Vec<AdapterSummary> {
    let desc = wgpu::InstanceDescriptor::new_without_display_handle().with_env();
    let backends = desc.backends;
    let instance = wgpu::Instance::new(desc);
    pollster::block_on(instance.enumerate_adapters(backends))
        .into_iter()
        .map(|a| AdapterSummary {
            info: a.get_info(),
            limits: a.limits(),
            features: a.features(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_names_use_webgpu_spelling() {
        let names = feature_names(wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP);
        assert!(names.contains(&"shader-f16".to_string()), "{names:?}");
        assert!(names.contains(&"subgroup".to_string()), "{names:?}");
        assert!(feature_names(wgpu::Features::empty()).is_empty());
    }
}
