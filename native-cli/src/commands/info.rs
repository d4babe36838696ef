//! `kernels info`: what this build is and which backend it would use, and why.

use kernels_core::OpKind;
use kernels_gpu::adapters::{AdapterSummary, list_adapters};
use kernels_gpu::{BackendChoice, select_backend};

use crate::{CliResult, emit};

/// Runs `kernels info`: prints [`report`].
pub fn run() -> CliResult<()> {
    emit(&report()?)
}

/// CPU features the fast paths can use, as detected at run time.
fn cpu_features() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            v.push("avx2");
        }
        if std::is_x86_feature_detected!("fma") {
            v.push("fma");
        }
        if std::is_x86_feature_detected!("avx512f") {
            v.push("avx512f");
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            v.push("neon");
        }
    }
    v
}

/// The report `kernels info` prints. Fails when `KERNELS_BACKEND` asks for something unknown or
/// unavailable.
pub fn report() -> CliResult<String> {
    let mut s = String::new();
    s.push_str(&format!(
        "kernels {} ({} build, {}-{})\n",
        env!("CARGO_PKG_VERSION"),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        std::env::consts::ARCH,
        std::env::consts::OS
    ));
    s.push_str(&format!("ops:             {}\n", OpKind::ALL.len()));
    let feats = cpu_features();
    s.push_str(&format!(
        "cpu features:    {}\n",
        if feats.is_empty() {
            "none detected".to_string()
        } else {
            feats.join(" ")
        }
    ));
    let env = std::env::var("KERNELS_BACKEND").ok();
    s.push_str(&format!(
        "KERNELS_BACKEND: {}\n",
        env.as_deref().unwrap_or("(unset: auto)")
    ));
    let adapters = list_adapters();
    s.push_str(&format!(
        "wgpu adapters:   {} (WGPU_BACKEND={})\n",
        adapters.len(),
        std::env::var("WGPU_BACKEND").unwrap_or_else(|_| "unset: all".into())
    ));
    for (i, a) in adapters.iter().enumerate() {
        s.push_str(&format!("  [{i}] {}\n", adapter_line(a)));
    }
    s.push_str(&format!(
        "cuda:            {}\n",
        match kernels_gpu::cuda_status() {
            Ok(devices) => format!("available, {devices}"),
            Err(why) if kernels_gpu::select::cuda_compiled() => {
                format!("compiled in, unavailable: {why}")
            }
            Err(why) => why,
        }
    ));
    let chosen = select_backend(BackendChoice::from_env()?)?;
    s.push_str(&format!(
        "backend:         {} ({})\n",
        chosen.backend.name(),
        chosen.reason
    ));
    if let Some(gpu) = &chosen.gpu {
        let l = gpu.limits();
        s.push_str(&format!(
            "device limits:   max storage binding {} B, max buffer {} B, max workgroups per dim {}, \
             max invocations per workgroup {}, max workgroup size {}x{}x{}, \
             max workgroup storage {} B, max storage buffers per stage {}\n",
            l.max_storage_buffer_binding_size,
            l.max_buffer_size,
            l.max_compute_workgroups_per_dimension,
            l.max_compute_invocations_per_workgroup,
            l.max_compute_workgroup_size_x,
            l.max_compute_workgroup_size_y,
            l.max_compute_workgroup_size_z,
            l.max_compute_workgroup_storage_size,
            l.max_storage_buffers_per_shader_stage
        ));
        let feats = adapters
            .iter()
            .find(|a| a.is(gpu.adapter_info()))
            .map(|a| a.feature_names())
            .unwrap_or_default();
        let has = |f: &str| {
            if feats.iter().any(|n| n == f) {
                "yes"
            } else {
                "no"
            }
        };
        s.push_str(&format!(
            "adapter features: shader-f16 {}, subgroup {} (the device enables none of them yet); all: {}\n",
            has("shader-f16"),
            has("subgroup"),
            if feats.is_empty() {
                "none".to_string()
            } else {
                feats.join(" ")
            }
        ));
    }
    Ok(s)
}

/// `llvmpipe (LLVM 15.0.6, 256 bits): Vulkan, Cpu, driver llvmpipe (Mesa 22.3.6 ...)`.
fn adapter_line(a: &AdapterSummary) -> String {
    let i = &a.info;
    let driver = match (i.driver.is_empty(), i.driver_info.is_empty()) {
        (true, true) => "unknown".to_string(),
        (false, true) => i.driver.clone(),
        (true, false) => i.driver_info.clone(),
        (false, false) => format!("{} ({})", i.driver, i.driver_info),
    };
    format!(
        "{}: backend {:?}, device type {:?}, driver {driver}",
        i.name, i.backend, i.device_type
    )
}
