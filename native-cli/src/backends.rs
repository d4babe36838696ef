//! Backend choice for the commands that need the wgpu backend itself (its counters, adapter,
//! limits), not only `dyn Backend`: `kernels parity`, `kernels bench`, `kernels info`.
//!
//! Same rules as [`kernels_gpu::select_backend`]: `auto` takes wgpu when an adapter is found
//! and otherwise falls back to the CPU saying why; an explicit `wgpu` that cannot be met is an
//! error.

use std::rc::Rc;

use kernels_core::{Backend, CpuBackend};
use kernels_gpu::{BackendChoice, Counters, WgpuBackend, cuda_status, select_backend};

use crate::{CliResult, fail};

/// A chosen backend, the wgpu backend again when that is what was chosen, and why.
pub struct Chosen {
    pub backend: Rc<dyn Backend>,
    pub gpu: Option<Rc<WgpuBackend>>,
    pub reason: String,
}

/// Parses `--backend` (or `$KERNELS_BACKEND` when absent).
pub fn parse_choice(arg: Option<&str>) -> CliResult<BackendChoice> {
    Ok(match arg {
        Some(s) => BackendChoice::parse(s)?,
        None => BackendChoice::from_env()?,
    })
}

/// Creates the backend for `choice`.
pub fn choose(choice: BackendChoice) -> CliResult<Chosen> {
    match choice {
        BackendChoice::Wgpu => {
            let gpu = WgpuBackend::new()
                .map_err(|e| fail(format!("requested wgpu, but it is unavailable: {e}")))?;
            let reason = format!("requested wgpu: {}", gpu.name());
            Ok(from_gpu(gpu, reason))
        }
        // A usable CUDA device wins `auto`: the library's selection takes it (or says why not).
        BackendChoice::Auto if cuda_status().is_ok() => {
            let s = select_backend(choice)?;
            Ok(Chosen {
                backend: s.backend,
                gpu: None,
                reason: s.reason,
            })
        }
        BackendChoice::Auto => {
            let cuda_note = match cuda_status() {
                Err(why) if kernels_gpu::select::cuda_compiled() => {
                    format!("CUDA unavailable ({why}); ")
                }
                _ => String::new(),
            };
            match WgpuBackend::new() {
                Ok(gpu) => {
                    let reason =
                        format!("auto: {cuda_note}found a GPU adapter, using {}", gpu.name());
                    Ok(from_gpu(gpu, reason))
                }
                Err(e) => Ok(Chosen {
                    backend: Rc::new(CpuBackend::new()),
                    gpu: None,
                    reason: format!("auto: {cuda_note}wgpu unavailable ({e}), using the CPU"),
                }),
            }
        }
        BackendChoice::Cpu | BackendChoice::Cuda => {
            let s = select_backend(choice)?;
            Ok(Chosen {
                backend: s.backend,
                gpu: None,
                reason: s.reason,
            })
        }
    }
}

fn from_gpu(gpu: WgpuBackend, reason: String) -> Chosen {
    let gpu = Rc::new(gpu);
    Chosen {
        backend: gpu.clone(),
        gpu: Some(gpu),
        reason,
    }
}

/// The counters as a JSON object (the names of [`Counters`]' fields).
pub fn counters_json(c: &Counters) -> serde_json::Value {
    serde_json::json!({
        "dispatches": c.dispatches,
        "submits": c.submits,
        "bytes_uploaded": c.bytes_uploaded,
        "bytes_downloaded": c.bytes_downloaded,
        "buffers_created": c.buffers_created,
        "buffers_reused": c.buffers_reused,
        "pool_bytes": c.pool_bytes,
        "buffers_evicted": c.buffers_evicted,
    })
}

/// The counters as one line of text.
pub fn counters_text(c: &Counters) -> String {
    format!(
        "dispatches {}, submits {}, uploaded {} B, downloaded {} B, buffers created {}, reused {}, evicted {}, pool {} B",
        c.dispatches,
        c.submits,
        c.bytes_uploaded,
        c.bytes_downloaded,
        c.buffers_created,
        c.buffers_reused,
        c.buffers_evicted,
        c.pool_bytes
    )
}
