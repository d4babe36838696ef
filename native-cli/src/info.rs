//! `kernels info`: what this build is and which backend it would use, and why.

use kernels_core::OpKind;
use kernels_gpu::{BackendChoice, select_backend};

use crate::CliResult;

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
    let choice = BackendChoice::from_env()?;
    let selected = select_backend(choice)?;
    s.push_str(&format!(
        "backend:         {} ({})\n",
        selected.backend.name(),
        selected.reason
    ));
    Ok(s)
}
