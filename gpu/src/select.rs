//! Backend selection: `KERNELS_BACKEND=cpu|wgpu|cuda|auto` (default `auto`).
//!
//! `auto` takes the best available GPU -- CUDA when the `cuda` feature is compiled in and a device
//! answers, else a hardware wgpu adapter -- else the CPU, and says which and why (including why
//! CUDA was passed over). A software adapter (wgpu `DeviceType::Cpu`: lavapipe, SwiftShader) is
//! never preferred over the CPU backend. An explicit request that cannot be met is an error naming the reason: `cuda` in a
//! build without the feature says so, and with it names what is missing (driver, NVRTC,
//! cuBLAS, device).

use std::rc::Rc;

use kernels_core::{Backend, CpuBackend, Error, Result};

use crate::wgpu::WgpuBackend;

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    Cpu,
    Wgpu,
    Cuda,
    /// `cuda:N`: the CUDA device of ordinal `N` (`--devices cuda:0,cuda:1`).
    CudaDevice(usize),
    Auto,
}

impl BackendChoice {
    /// Parses `cpu`, `wgpu`, `cuda`, `cuda:N` or `auto` (case-insensitive).
    pub fn parse(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        if let Some(n) = lower.strip_prefix("cuda:") {
            return n
                .parse::<usize>()
                .map(BackendChoice::CudaDevice)
                .map_err(|_| Error::Backend {
                    backend: s.trim().into(),
                    why: format!("`cuda:{n}`: the device ordinal must be a whole number"),
                });
        }
        match lower.as_str() {
            "cpu" => Ok(BackendChoice::Cpu),
            "wgpu" | "gpu" | "webgpu" => Ok(BackendChoice::Wgpu),
            "cuda" => Ok(BackendChoice::Cuda),
            "auto" | "" => Ok(BackendChoice::Auto),
            other => Err(Error::Backend {
                backend: other.into(),
                why: "unknown backend; expected cpu, wgpu, cuda, cuda:N or auto".into(),
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

    /// A command's `--backend` value when given, else `KERNELS_BACKEND`, else `auto`.
    pub fn from_arg(arg: Option<&str>) -> Result<Self> {
        match arg {
            Some(s) => Self::parse(s),
            None => Self::from_env(),
        }
    }
}

/// A selected backend and the reason it was chosen.
pub struct Selected {
    pub backend: Rc<dyn Backend>,
    /// The same backend as [`WgpuBackend`] when wgpu was chosen, for what `dyn Backend` does not
    /// offer (its counters, adapter, limits); `None` for the CPU and CUDA.
    pub gpu: Option<Rc<WgpuBackend>>,
    /// The same backend as [`crate::CudaBackend`] when CUDA was chosen (its counters).
    #[cfg(feature = "cuda")]
    pub cuda: Option<Rc<crate::cuda::CudaBackend>>,
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
        BackendChoice::Cpu => Ok(cpu_selected("requested cpu".into())),
        BackendChoice::Wgpu => {
            let be = require_wgpu()?;
            let reason = format!("requested wgpu: {}", be.name());
            Ok(wgpu_selected(be, reason))
        }
        BackendChoice::Cuda => {
            new_cuda(None, |name| format!("requested cuda: {name}")).map_err(|e| Error::Backend {
                backend: "cuda".into(),
                why: format!("requested cuda, but it is unavailable: {e}"),
            })
        }
        BackendChoice::CudaDevice(n) => new_cuda(Some(n), |name| {
            format!("requested cuda:{n}: {name}")
        })
        .map_err(|e| Error::Backend {
            backend: format!("cuda:{n}"),
            why: format!("requested cuda:{n}, but it is unavailable: {e}"),
        }),
        BackendChoice::Auto => {
            // Why CUDA was passed over, when it was compiled in (nothing otherwise, so builds
            // without the feature say what they always said).
            let cuda_note = if cfg!(feature = "cuda") {
                match new_cuda(None, |name| {
                    format!("auto: found a CUDA device, using {name}")
                }) {
                    Ok(selected) => return Ok(selected),
                    Err(e) => format!("CUDA unavailable ({e}); "),
                }
            } else {
                String::new()
            };
            match new_wgpu() {
                // A software adapter (lavapipe, SwiftShader) runs kernels far slower than the
                // CPU backend: `auto` never prefers it; `--backend wgpu` still reaches it.
                Ok(be) if crate::adapters::is_software(be.adapter_info()) => {
                    Ok(cpu_selected(format!(
                        "auto: {cuda_note}the only wgpu adapter, {}, is a software renderer \
                         (slower than the CPU backend), using the CPU; --backend wgpu forces it",
                        be.adapter_info().name
                    )))
                }
                Ok(be) => {
                    let reason =
                        format!("auto: {cuda_note}found a GPU adapter, using {}", be.name());
                    Ok(wgpu_selected(Rc::new(be), reason))
                }
                Err(e) => Ok(cpu_selected(format!(
                    "auto: {cuda_note}wgpu unavailable ({e}), using the CPU"
                ))),
            }
        }
    }
}

/// An explicit request for wgpu (`--backend wgpu`, `KERNELS_BACKEND=wgpu`, a benchmark's
/// `wgpu` target): the backend, or an error saying it was requested and why it is unavailable.
pub fn require_wgpu() -> Result<Rc<WgpuBackend>> {
    new_wgpu().map(Rc::new).map_err(|e| Error::Backend {
        backend: "wgpu".into(),
        why: format!("requested wgpu, but it is unavailable: {e}"),
    })
}

/// The replicas of a data-parallel run (`--devices cpu,wgpu,wgpu`): one backend per
/// comma-separated entry, in order. Each entry is `cpu`, `wgpu` or `cuda` (or `auto`, which
/// picks as `--backend auto` does); every `wgpu` entry opens a device of its own on the adapter
/// and every `cuda` entry a context of its own, so two `wgpu` entries are two devices whose
/// tensors never mix. An empty list or entry, or one that cannot be opened, is an error naming
/// the entry.
pub fn select_devices(list: &str) -> Result<Vec<Selected>> {
    let entries: Vec<&str> = list.split(',').map(str::trim).collect();
    if entries.iter().any(|e| e.is_empty()) {
        return Err(Error::Backend {
            backend: list.into(),
            why: "--devices needs a comma-separated list of cpu, wgpu, cuda or auto, with no \
                  empty entry"
                .into(),
        });
    }
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            select_backend(BackendChoice::parse(e)?).map_err(|err| Error::Backend {
                backend: (*e).into(),
                why: format!("--devices entry {i} ({e}): {err}"),
            })
        })
        .collect()
}

fn cpu_selected(reason: String) -> Selected {
    Selected {
        backend: Rc::new(CpuBackend::new()),
        gpu: None,
        #[cfg(feature = "cuda")]
        cuda: None,
        reason,
    }
}

fn wgpu_selected(be: Rc<WgpuBackend>, reason: String) -> Selected {
    Selected {
        backend: be.clone(),
        gpu: Some(be),
        #[cfg(feature = "cuda")]
        cuda: None,
        reason,
    }
}

/// Whether this build has the CUDA backend (the `cuda` feature).
pub fn cuda_compiled() -> bool {
    cfg!(feature = "cuda")
}

/// Whether CUDA can be used here: `Ok` with the device count, or `Err` with why not (not
/// compiled in; no driver, NVRTC or cuBLAS; no device). Creates no context.
pub fn cuda_status() -> std::result::Result<String, String> {
    #[cfg(feature = "cuda")]
    {
        crate::cuda::probe()
            .map(|n| format!("{n} device(s)"))
            .map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(NOT_COMPILED.into())
    }
}

#[cfg(not(feature = "cuda"))]
const NOT_COMPILED: &str = "this build has no CUDA backend: the `cuda` feature is not compiled in \
     (rebuild with `--features kernels-gpu/cuda`)";

#[cfg(feature = "cuda")]
fn new_cuda(ordinal: Option<usize>, reason: impl FnOnce(&str) -> String) -> Result<Selected> {
    let be = Rc::new(match ordinal {
        Some(n) => crate::cuda::CudaBackend::on_device(n)?,
        None => crate::cuda::CudaBackend::new()?,
    });
    Ok(Selected {
        backend: be.clone(),
        gpu: None,
        reason: reason(&be.name()),
        cuda: Some(be),
    })
}

#[cfg(not(feature = "cuda"))]
fn new_cuda(_ordinal: Option<usize>, _reason: impl FnOnce(&str) -> String) -> Result<Selected> {
    Err(Error::Backend {
        backend: "cuda".into(),
        why: NOT_COMPILED.into(),
    })
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
        assert!(select_backend(BackendChoice::Cpu).unwrap().gpu.is_none());
        let auto = select_backend(BackendChoice::Auto).unwrap();
        // Either a GPU was found (and named) or the CPU fallback says why.
        assert!(auto.reason.starts_with("auto: "), "{}", auto.reason);
        // The wgpu handle is there exactly when wgpu was chosen.
        assert_eq!(
            auto.gpu.is_some(),
            auto.backend.name().starts_with("wgpu"),
            "{}",
            auto.reason
        );
        if let Some(g) = &auto.gpu {
            assert!(
                !crate::adapters::is_software(g.adapter_info()),
                "{}",
                auto.reason
            );
        }
        match select_backend(BackendChoice::Wgpu) {
            Ok(s) => {
                assert!(s.backend.name().starts_with("wgpu"));
                assert!(s.gpu.is_some());
                // Only a software adapter here (lavapipe in CI): auto took the CPU and says why.
                let g = s.gpu.as_ref().unwrap();
                if crate::adapters::is_software(g.adapter_info()) && !cfg!(feature = "cuda") {
                    assert_eq!(auto.backend.name(), "cpu", "{}", auto.reason);
                    assert!(auto.reason.contains("software"), "{}", auto.reason);
                }
            }
            Err(e) => assert!(e.to_string().contains("requested wgpu"), "{e}"),
        }
    }

    #[test]
    fn device_lists() {
        let two = select_devices("cpu, cpu").unwrap();
        assert_eq!(two.len(), 2);
        assert!(two.iter().all(|s| s.backend.name() == "cpu"));
        for bad in ["", "cpu,", "cpu,,cpu", "cpu,tpu", "cpu,cuda:x", "cuda:-1"] {
            assert!(select_devices(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            BackendChoice::parse("CUDA:1").unwrap(),
            BackendChoice::CudaDevice(1)
        );
        // `cuda:N` opens that device, or says why it cannot, naming it.
        match select_devices("cuda:0,cuda:7") {
            Ok(all) => assert!(all.iter().all(|s| s.backend.name().starts_with("cuda"))),
            Err(e) => assert!(e.to_string().contains("cuda:"), "{e}"),
        }
    }

    #[test]
    fn backend_flag_wins_over_the_environment() {
        assert_eq!(
            BackendChoice::from_arg(Some("cpu")).unwrap(),
            BackendChoice::Cpu
        );
        assert_eq!(
            BackendChoice::from_arg(Some("webgpu")).unwrap(),
            BackendChoice::Wgpu
        );
        let e = BackendChoice::from_arg(Some("tpu"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("tpu") && e.contains("unknown backend"), "{e}");
        assert_eq!(
            BackendChoice::from_arg(None).ok(),
            BackendChoice::from_env().ok()
        );
    }

    /// `cuda` is selected only when it is compiled in and a device answers; otherwise the
    /// explicit request is an error naming why, and `auto` falls back saying why. Runs on any
    /// machine: whichever case holds here is checked against `cuda_status`.
    #[test]
    fn cuda_selection_and_fallback() {
        let status = cuda_status();
        let explicit = select_backend(BackendChoice::Cuda);
        let auto = select_backend(BackendChoice::Auto).unwrap();
        match &status {
            Ok(_) => {
                let s = explicit.unwrap();
                assert!(
                    s.backend.name().starts_with("cuda ("),
                    "{}",
                    s.backend.name()
                );
                assert!(
                    auto.reason.starts_with("auto: found a CUDA device"),
                    "{}",
                    auto.reason
                );
            }
            Err(why) => {
                let e = explicit.unwrap_err().to_string();
                assert!(e.contains("requested cuda, but it is unavailable"), "{e}");
                assert!(e.contains(why.as_str()), "{e} vs {why}");
                assert!(!auto.backend.name().starts_with("cuda"));
                if cuda_compiled() {
                    assert!(
                        auto.reason
                            .starts_with(&format!("auto: CUDA unavailable ({why}); ")),
                        "{}",
                        auto.reason
                    );
                } else {
                    assert!(e.contains("`cuda` feature is not compiled in"), "{e}");
                    assert!(!auto.reason.contains("CUDA"), "{}", auto.reason);
                }
            }
        }
    }

    /// This machine kind has no NVIDIA driver: with the feature on, the reason names the
    /// missing driver rather than failing to link or panicking.
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_without_a_driver_is_a_clear_error() {
        if std::path::Path::new("/proc/driver/nvidia").exists() {
            eprintln!("skipped: an NVIDIA driver is installed here");
            return;
        }
        let why = cuda_status().unwrap_err();
        assert!(why.contains("no CUDA driver"), "{why}");
        let e = crate::cuda::CudaBackend::new().unwrap_err();
        assert!(matches!(e, Error::Backend { .. }), "{e:?}");
    }
}
