//! Benchmark support: the naive one-thread-per-output WGSL matmul the tiled kernel is compared
//! against, with its own small launcher, and a timing helper.
//!
//! The naive kernel is not an op of the backend (nothing should ever use it for real work), so
//! it does not go through the op families: [`NaiveMatmul`] opens its own device on the adapter
//! [`crate::WgpuBackend`] would pick (same `WGPU_BACKEND`, same power preference) and keeps its
//! operands resident, so a timed run is one dispatch and one submit, as for the tiled matmul.

use std::time::{Duration, Instant};

use kernels_core::{Error, Result};

/// Shaders used only by benchmarks: `(file name, source)`. The naga validation test checks
/// them with the op families' shaders.
pub const SHADERS: &[(&str, &str)] = &[(
    "matmul_naive.wgsl",
    include_str!("shaders/matmul_naive.wgsl"),
)];

fn err(why: impl Into<String>) -> Error {
    Error::Backend {
        backend: "wgpu (bench)".into(),
        why: why.into(),
    }
}

/// Median of `samples` (the upper middle one for an even count); zero when empty.
pub fn median(samples: &[Duration]) -> Duration {
    let mut v = samples.to_vec();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Runs `f` once to warm up, then `runs` times, and returns the wall time of each timed run.
pub fn time_runs(runs: usize, mut f: impl FnMut() -> Result<()>) -> Result<Vec<Duration>> {
    f()?;
    (0..runs.max(1))
        .map(|_| {
            let t0 = Instant::now();
            f()?;
            Ok(t0.elapsed())
        })
        .collect()
}

/// The naive matmul on its own device, with operands of one size resident.
pub struct NaiveMatmul {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipeline: wgpu::ComputePipeline,
    name: String,
}

/// Operands of one problem size, on the device.
pub struct NaiveProblem {
    m: u32,
    n: u32,
    bind_group: wgpu::BindGroup,
    // Read back by `NaiveMatmul::read`, which blocks and so exists natively only.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    c: wgpu::Buffer,
}

impl std::fmt::Debug for NaiveMatmul {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NaiveMatmul({})", self.name)
    }
}

impl NaiveMatmul {
    /// Opens a device on the adapter the backend would choose (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new() -> Result<Self> {
        pollster::block_on(Self::new_async())
    }

    /// Opens a device on the adapter the backend would choose.
    pub async fn new_async() -> Result<Self> {
        let desc = wgpu::InstanceDescriptor::new_without_display_handle().with_env();
        let instance = wgpu::Instance::new(desc);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                ..Default::default()
            })
            .await
            .map_err(|e| err(format!("no adapter: {e}")))?;
        let info = adapter.get_info();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("kernels-bench"),
                ..Default::default()
            })
            .await
            .map_err(|e| err(format!("device request failed on {}: {e}", info.name)))?;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("matmul_naive"),
            source: wgpu::ShaderSource::Wgsl(SHADERS[0].1.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("matmul_naive"),
            layout: None,
            module: &module,
            entry_point: Some("matmul_naive"),
            compilation_options: Default::default(),
            cache: None,
        });
        Ok(NaiveMatmul {
            device,
            queue,
            pipeline,
            name: format!("{}, {:?}", info.name, info.backend),
        })
    }

    /// The adapter, e.g. `llvmpipe (LLVM 15.0.6, 256 bits), Vulkan`.
    pub fn adapter_name(&self) -> &str {
        &self.name
    }

    /// Uploads `a [m, k]` and `b [k, n]` (row-major) and prepares the output.
    pub fn problem(
        &self,
        a: &[f32],
        b: &[f32],
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<NaiveProblem> {
        if a.len() != m * k || b.len() != k * n || m == 0 || n == 0 || k == 0 {
            return Err(Error::BadShape {
                op: "matmul_naive",
                tensor: "a, b".into(),
                shape: vec![m, n, k],
                why: format!("a has {} elements, b {}", a.len(), b.len()),
            });
        }
        let dim = |v: usize| u32::try_from(v).map_err(|_| err("matmul_naive: dimension above u32"));
        let (mu, nu, ku) = (dim(m)?, dim(n)?, dim(k)?);
        let storage = |label: &'static str, bytes: u64, extra: wgpu::BufferUsages| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | extra,
                mapped_at_creation: false,
            })
        };
        let ab = storage("a", (a.len() * 4) as u64, wgpu::BufferUsages::empty());
        let bb = storage("b", (b.len() * 4) as u64, wgpu::BufferUsages::empty());
        let c = storage("c", (m * n * 4) as u64, wgpu::BufferUsages::COPY_SRC);
        let dims = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("dims"),
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.queue.write_buffer(&ab, 0, bytemuck::cast_slice(a));
        self.queue.write_buffer(&bb, 0, bytemuck::cast_slice(b));
        self.queue
            .write_buffer(&dims, 0, bytemuck::cast_slice(&[mu, nu, ku, 0u32]));
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("matmul_naive"),
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: dims.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: ab.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: bb.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: c.as_entire_binding(),
                },
            ],
        });
        Ok(NaiveProblem {
            m: mu,
            n: nu,
            bind_group,
            c,
        })
    }

    /// One dispatch and one submit, waiting until the device is done.
    pub fn run(&self, p: &NaiveProblem) -> Result<()> {
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("matmul_naive"),
            });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("matmul_naive"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &p.bind_group, &[]);
            pass.dispatch_workgroups(p.n.div_ceil(16), p.m.div_ceil(16), 1);
        }
        self.queue.submit(Some(enc.finish()));
        self.wait()
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn wait(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| err(format!("poll: {e}")))
    }

    #[cfg(target_arch = "wasm32")]
    fn wait(&self) -> Result<()> {
        Ok(())
    }

    /// The output `c [m, n]` of the last run (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(&self, p: &NaiveProblem) -> Result<Vec<f32>> {
        let bytes = u64::from(p.m) * u64::from(p.n) * 4;
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("staging"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("read"),
            });
        enc.copy_buffer_to_buffer(&p.c, 0, &staging, 0, bytes);
        self.queue.submit(Some(enc.finish()));
        let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
        let s = slot.clone();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            if let Ok(mut g) = s.lock() {
                *g = Some(r);
            }
        });
        self.wait()?;
        let mapped = slot.lock().map_err(|_| err("map state poisoned"))?.take();
        match mapped {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(err(format!("map_async: {e}"))),
            None => return Err(err("map_async did not complete")),
        }
        let out = {
            let view = staging
                .get_mapped_range(..)
                .map_err(|e| err(format!("read: {e}")))?;
            bytemuck::cast_slice::<u8, f32>(&view).to_vec()
        };
        staging.unmap();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    #[test]
    fn median_is_the_middle_sample() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[ms(5), ms(1), ms(3)]), ms(3));
        assert_eq!(median(&[ms(4), ms(1), ms(3), ms(2)]), ms(3));
        assert_eq!(median(&[]), Duration::ZERO);
    }

    /// The naive kernel computes a matmul (checked against plain loops on 7 x 13 @ 13 x 5).
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn naive_matmul_matches_plain_loops() {
        let naive = match NaiveMatmul::new() {
            Ok(n) => n,
            Err(e) => {
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("CI=true but no wgpu adapter: {e}");
                }
                eprintln!("skipping: no wgpu adapter ({e})");
                return;
            }
        };
        let (m, n, k) = (7, 5, 13);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 11) as f32 * 0.25 - 1.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.5 - 1.5).collect();
        let p = naive.problem(&a, &b, m, n, k).unwrap();
        naive.run(&p).unwrap();
        let got = naive.read(&p).unwrap();
        for i in 0..m {
            for j in 0..n {
                let want: f32 = (0..k).map(|x| a[i * k + x] * b[x * n + j]).sum();
                let g = got[i * n + j];
                assert!(
                    (g - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "({i},{j}): {g} vs {want}"
                );
            }
        }
        assert!(naive.problem(&a, &b, m, n, k + 1).is_err());
    }
}
