//! Backend selection: `KERNELS_BACKEND=cpu|wgpu|cuda|auto` (default `auto`).
//!
//! `auto` takes the best available GPU, else the CPU, and says which and why. An explicit request
//! that cannot be met is an error naming the reason.

use std::rc::Rc;

use kernels_core::{Backend, CpuBackend, Error, Result};

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
        BackendChoice::Wgpu => Err(Error::Backend {
            backend: "wgpu".into(),
            why: "this build has no wgpu backend yet".into(),
        }),
        BackendChoice::Cuda => Err(Error::Backend {
            backend: "cuda".into(),
            why: "this build has no CUDA backend (the `cuda` feature is not available yet)".into(),
        }),
        BackendChoice::Auto => Ok(Selected {
            backend: Rc::new(CpuBackend::new()),
            reason: "auto: no GPU backend is compiled into this build, using the CPU".into(),
        }),
    }
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
        assert!(auto.reason.contains("CPU"));
        assert!(select_backend(BackendChoice::Cuda).is_err());
    }
}
