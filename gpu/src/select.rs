//! Backend selection: `KERNELS_BACKEND=cpu|wgpu|cuda|auto` (default `auto`).
//!
//! `auto` takes the best available GPU (wgpu), else the CPU, and says which and why. An explicit
//! request that cannot be met is an error naming the reason.

use std::rc::Rc;

use kernels_core::{Backend, CpuBackend, Error, Result};

use crate::wgpu_backend::WgpuBackend;

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    Cpu,
    Wgpu,
    Cuda,
    Auto,
}

impl BackendChoice {
    /// Parses `cpu`, `wgpu`, `cuda` or `auto` (case-insensitive).
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(BackendChoice::Cpu),
            "wgpu" | "gpu" | "webgpu" => Ok(BackendChoice::Wgpu),
            "cuda" => Ok(BackendChoice::Cuda),
            "auto" | "" => Ok(BackendChoice::Auto),
            other => Err(Error::Backend {
                backend: other.into(),
                why: "unknown backend; expected cpu, wgpu, cuda or auto".into(),
            }),
        }
    }

    /// Reads `KERNELS_BACKEND`, defaulting to `auto`.
    pub fn from_env() -> Result<Self> {
        match std::env::var("KERNELS_BACKEND") {
            Ok(v) => Self::parse(&v),
            Err(_) => Ok(BackendChoice::Auto),
        }
    }
}

/// A selected backend and the reason it was chosen.
pub struct Selected {
    pub backend: Rc<dyn Backend>,
    pub reason: String,
}

impl std::fmt::Debug for Selected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Selected({}: {})", self.backend.name(), self.reason)
    }
}

/// Picks a backend for `choice`.
pub fn select_backend(choice: BackendChoice) -> Result<Selected> {
    match choice {
        BackendChoice::Cpu => Ok(Selected {
            backend: Rc::new(CpuBackend::new()),
            reason: "requested cpu".into(),
        }),
        BackendChoice::Wgpu => {
            let be = new_wgpu().map_err(|e| Error::Backend {
                backend: "wgpu".into(),
                why: format!("requested wgpu, but it is unavailable: {e}"),
            })?;
            let reason = format!("requested wgpu: {}", be.name());
            Ok(Selected {
                backend: Rc::new(be),
                reason,
            })
        }
        BackendChoice::Cuda => Err(Error::Backend {
            backend: "cuda".into(),
            why: "this build has no CUDA backend (the `cuda` feature is not available yet)".into(),
        }),
        BackendChoice::Auto => match new_wgpu() {
            Ok(be) => {
                let reason = format!("auto: found a GPU adapter, using {}", be.name());
                Ok(Selected {
                    backend: Rc::new(be),
                    reason,
                })
            }
            Err(e) => Ok(Selected {
                backend: Rc::new(CpuBackend::new()),
                reason: format!("auto: wgpu unavailable ({e}), using the CPU"),
            }),
        },
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn new_wgpu() -> Result<WgpuBackend> {
    WgpuBackend::new()
}

#[cfg(target_arch = "wasm32")]
fn new_wgpu() -> Result<WgpuBackend> {
    // The browser cannot block on adapter creation: build it with
    // `WgpuBackend::new_async(..).await` instead.
    Err(Error::Backend {
        backend: "wgpu".into(),
        why: "use WgpuBackend::new_async in the browser".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_select() {
        assert_eq!(BackendChoice::parse("CPU").unwrap(), BackendChoice::Cpu);
        assert_eq!(BackendChoice::parse("auto").unwrap(), BackendChoice::Auto);
        assert!(BackendChoice::parse("tpu").is_err());
        assert_eq!(
            select_backend(BackendChoice::Cpu).unwrap().backend.name(),
            "cpu"
        );
        let auto = select_backend(BackendChoice::Auto).unwrap();
        // Either a GPU was found (and named) or the CPU fallback says why.
        assert!(auto.reason.starts_with("auto: "), "{}", auto.reason);
        match select_backend(BackendChoice::Wgpu) {
            Ok(s) => assert!(s.backend.name().starts_with("wgpu")),
            Err(e) => assert!(e.to_string().contains("requested wgpu"), "{e}"),
        }
        assert!(select_backend(BackendChoice::Cuda).is_err());
    }
}
