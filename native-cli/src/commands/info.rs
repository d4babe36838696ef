//! `kernels info`: what this build is and which backend it would use, and why.

use kernels_core::OpKind;
use kernels_gpu::adapters::{AdapterSummary, list_adapters};
use kernels_gpu::{BackendChoice, select_backend};

use crate::{CliResult, emit, emit_json};

/// Runs `kernels info`: prints [`report`], or [`report_json`] with `json`.
pub fn run(json: bool) -> CliResult<()> {
    if json {
        emit_json(&report_json()?)
    } else {
        emit(&report()?)
    }
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

/// What `kernels info` reports, gathered once for the text and the JSON.
struct Info {
    build: &'static str,
    cpu_features: Vec<&'static str>,
    kernels_backend: Option<String>,
    wgpu_backend: Option<String>,
    adapters: Vec<AdapterSummary>,
    cuda: String,
    backend: String,
    reason: String,
    /// The chosen GPU's limits, by name (wgpu's names), when a GPU is chosen.
    limits: Option<Vec<(&'static str, u64)>>,
    /// The chosen GPU adapter's features, when a GPU is chosen.
    features: Option<Vec<String>>,
}

fn gather() -> CliResult<Info> {
    let adapters = list_adapters();
    let cuda = match kernels_gpu::cuda_status() {
        Ok(devices) => format!("available, {devices}"),
        Err(why) if kernels_gpu::select::cuda_compiled() => {
            format!("compiled in, unavailable: {why}")
        }
        Err(why) => why,
    };
    let chosen = select_backend(BackendChoice::from_env()?)?;
    let (limits, features) = match &chosen.gpu {
        Some(gpu) => {
            let limits = kernels_gpu::adapters::limit_list(gpu.limits());
            let features = adapters
                .iter()
                .find(|a| a.is(gpu.adapter_info()))
                .map(|a| a.feature_names())
                .unwrap_or_default();
            (Some(limits), Some(features))
        }
        None => (None, None),
    };
    Ok(Info {
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        cpu_features: cpu_features(),
        kernels_backend: std::env::var("KERNELS_BACKEND").ok(),
        wgpu_backend: std::env::var("WGPU_BACKEND").ok(),
        adapters,
        cuda,
        backend: chosen.backend.name(),
        reason: chosen.reason,
        limits,
        features,
    })
}

/// The report `kernels info` prints. Fails when `KERNELS_BACKEND` asks for something unknown or
/// unavailable.
pub fn report() -> CliResult<String> {
    let i = gather()?;
    let mut s = String::new();
    s.push_str(&format!(
        "kernels {} ({} build, {}-{})\n",
        env!("CARGO_PKG_VERSION"),
        i.build,
        std::env::consts::ARCH,
        std::env::consts::OS
    ));
    s.push_str(&format!("ops:             {}\n", OpKind::ALL.len()));
    s.push_str(&format!(
        "cpu features:    {}\n",
        if i.cpu_features.is_empty() {
            "none detected".to_string()
        } else {
            i.cpu_features.join(" ")
        }
    ));
    s.push_str(&format!(
        "KERNELS_BACKEND: {}\n",
        i.kernels_backend.as_deref().unwrap_or("(unset: auto)")
    ));
    s.push_str(&format!(
        "wgpu adapters:   {} (WGPU_BACKEND={})\n",
        i.adapters.len(),
        i.wgpu_backend.as_deref().unwrap_or("unset: all")
    ));
    for (n, a) in i.adapters.iter().enumerate() {
        s.push_str(&format!("  [{n}] {}\n", adapter_line(a)));
    }
    s.push_str(&format!("cuda:            {}\n", i.cuda));
    s.push_str(&format!("backend:         {} ({})\n", i.backend, i.reason));
    if let Some(limits) = &i.limits {
        let list: Vec<String> = limits.iter().map(|(k, v)| format!("{k} {v}")).collect();
        s.push_str(&format!("device limits:   {}\n", list.join(", ")));
    }
    if let Some(feats) = &i.features {
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

/// `kernels info --json`: one object, `{"version", "build", "arch", "os", "ops",
/// "cpu_features": [str], "kernels_backend": str|null, "wgpu_backend": str|null,
/// "adapters": [{"name", "backend", "device_type", "driver", "software"}], "cuda": str,
/// "backend": str, "reason": str, "device_limits": {name: n}|null,
/// "adapter_features": [str]|null}`.
pub fn report_json() -> CliResult<serde_json::Value> {
    let i = gather()?;
    let adapters: Vec<serde_json::Value> = i
        .adapters
        .iter()
        .map(|a| {
            serde_json::json!({
                "name": a.info.name,
                "backend": format!("{:?}", a.info.backend),
                "device_type": format!("{:?}", a.info.device_type),
                "driver": a.info.driver,
                "software": kernels_gpu::adapters::is_software(&a.info),
            })
        })
        .collect();
    let limits = i.limits.map(|l| {
        l.into_iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(v)))
            .collect::<serde_json::Map<_, _>>()
    });
    Ok(serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "build": i.build,
        "arch": std::env::consts::ARCH,
        "os": std::env::consts::OS,
        "ops": OpKind::ALL.len(),
        "cpu_features": i.cpu_features,
        "kernels_backend": i.kernels_backend,
        "wgpu_backend": i.wgpu_backend,
        "adapters": adapters,
        "cuda": i.cuda,
        "backend": i.backend,
        "reason": i.reason,
        "device_limits": limits,
        "adapter_features": i.features,
    }))
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
