//! Benchmark support: the naive one-thread-per-output WGSL matmul the tiled kernel is compared
//! against, with its own small launcher, and a timing helper.
//!
//! The naive kernel is not an op of the backend (nothing should ever use it for real work), so
//! it does not go through the op families: [`NaiveMatmul`] opens its own device on the adapter
//! [`crate::WgpuBackend`] would pick (same `WGPU_BACKEND`, same power preference) and keeps its
//! operands resident, so a timed run is one dispatch and one submit, as for the tiled matmul.

use std::time::Duration;

use kernels_core::op::{Direction, LAYER_NORM_EPS, Op, RMS_NORM_EPS};
use kernels_core::{Backend, Error, Result, Rng, Tensor};
// `std::time::Instant` panics in the browser; web-time is std's natively.
use web_time::Instant;

/// Shaders used only by benchmarks: `(file name, source)`. The naga validation test checks
/// them with the op families' shaders.
pub const SHADERS: &[(&str, &str)] = &[(
    "matmul_naive.wgsl",
    include_str!("wgpu/shaders/matmul_naive.wgsl"),
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

/// What one run of a benchmark must do: FLOPs (compute-bound ops: GFLOPS are reported) or
/// none (memory-bound ops: GB/s of `min_bytes`), and the least bytes it must move (read the
/// inputs once, write the outputs once).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Work {
    pub flops: Option<f64>,
    pub min_bytes: u64,
}

impl Work {
    /// `(GFLOPS, GB/s)` of one run taking `time`: GFLOPS for compute-bound work, GB/s otherwise.
    pub fn rates(&self, time: Duration) -> (Option<f64>, Option<f64>) {
        let s = time.as_secs_f64().max(1e-12);
        match self.flops {
            Some(f) => (Some(f / s / 1e9), None),
            None => (None, Some(self.min_bytes as f64 / s / 1e9)),
        }
    }
}

/// One benchmark: an op on host inputs (uploaded once before timing) and the work it does.
/// `kernels bench` and the web page's bench panel measure the same list.
#[derive(Debug, Clone)]
pub struct BenchCase {
    /// `matmul`, `softmax`, `layer_norm`, `rms_norm`, `attention_prefill`.
    pub bench: &'static str,
    /// e.g. `256x256x256`, `1024x1024`.
    pub size: String,
    pub op: Op,
    pub inputs: Vec<Tensor>,
    pub work: Work,
}

/// Square `n x n @ n x n` products, inputs uniform in [-1, 1).
pub fn matmul_cases(sizes: &[usize], rng: &mut Rng) -> Result<Vec<BenchCase>> {
    sizes
        .iter()
        .map(|&n| {
            Ok(BenchCase {
                bench: "matmul",
                size: format!("{n}x{n}x{n}"),
                op: Op::Matmul {
                    trans_a: false,
                    trans_b: false,
                },
                inputs: vec![
                    rng.uniform_tensor(&[n, n], -1.0, 1.0)?,
                    rng.uniform_tensor(&[n, n], -1.0, 1.0)?,
                ],
                work: Work {
                    flops: Some(2.0 * (n as f64).powi(3)),
                    min_bytes: (3 * n * n * 4) as u64,
                },
            })
        })
        .collect()
}

/// softmax, layer_norm and rms_norm over the rows of one `[rows, cols]` input (memory-bound:
/// GB/s of reading it and writing the output once).
pub fn rowwise_cases(rows: usize, cols: usize, rng: &mut Rng) -> Result<Vec<BenchCase>> {
    let x = rng.normal_tensor(&[rows, cols], 0.0, 1.0)?;
    let w = rng.uniform_tensor(&[cols], 0.5, 1.5)?;
    let bias = rng.uniform_tensor(&[cols], -0.5, 0.5)?;
    let work = Work {
        flops: None,
        min_bytes: (2 * rows * cols * 4) as u64,
    };
    let size = format!("{rows}x{cols}");
    let case = |bench, op, inputs| BenchCase {
        bench,
        size: size.clone(),
        op,
        inputs,
        work,
    };
    Ok(vec![
        case("softmax", Op::Softmax { causal: false }, vec![x.clone()]),
        case(
            "layer_norm",
            Op::LayerNorm {
                eps: LAYER_NORM_EPS,
            },
            vec![x.clone(), w.clone(), bias],
        ),
        case("rms_norm", Op::RmsNorm { eps: RMS_NORM_EPS }, vec![x, w]),
    ])
}

/// Causal attention prefill over `[b, h, s, d]` queries, keys and values.
pub fn attention_case([b, h, s, d]: [usize; 4], rng: &mut Rng) -> Result<BenchCase> {
    let mut qkv = Vec::with_capacity(3);
    for _ in 0..3 {
        qkv.push(rng.normal_tensor(&[b, h, s, d], 0.0, 1.0)?);
    }
    Ok(BenchCase {
        bench: "attention_prefill",
        size: format!("b{b} h{h} s{s} d{d} causal"),
        op: Op::Attention {
            causal: true,
            scale: None,
            kv_len: 0,
            window: 0,
        },
        inputs: qkv,
        // Causal: only the lower half of QK^T and PV is work.
        work: Work {
            flops: Some(2.0 * (b * h * s * s * d) as f64),
            min_bytes: (4 * b * h * s * d * 4) as u64,
        },
    })
}

/// Times `case` on `backend` without blocking (the browser's way): inputs uploaded once, one
/// warm-up run, then `runs` timed runs; each is the op plus, when `fence` is given (a resident
/// tensor of the backend), its download, which submits the recorded work and waits for the
/// device. Returns the wall time of each timed run.
pub async fn time_case_async(
    backend: &dyn Backend,
    fence: Option<&Tensor>,
    case: &BenchCase,
    runs: usize,
) -> Result<Vec<Duration>> {
    let dev: Vec<Tensor> = case
        .inputs
        .iter()
        .map(|t| backend.upload(t))
        .collect::<Result<_>>()?;
    let refs: Vec<&Tensor> = dev.iter().collect();
    let mut samples = Vec::with_capacity(runs.max(1));
    for i in 0..=runs.max(1) {
        let t0 = Instant::now();
        let outs = backend.run(&case.op, Direction::Forward, &refs)?;
        if let Some(f) = fence {
            backend.download(f).await?;
        }
        drop(outs);
        // Run 0 warms up (pipelines, pool).
        if i > 0 {
            samples.push(t0.elapsed());
        }
    }
    Ok(samples)
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

    #[test]
    fn rates_follow_the_kind_of_work() {
        let ms = Duration::from_millis;
        let compute = Work {
            flops: Some(2e9),
            min_bytes: 12,
        };
        assert_eq!(compute.rates(ms(500)), (Some(4.0), None));
        let memory = Work {
            flops: None,
            min_bytes: 3_000_000_000,
        };
        assert_eq!(memory.rates(ms(1500)), (None, Some(2.0)));
    }

    #[test]
    fn bench_cases_are_well_formed_and_run_on_the_cpu() {
        let mut rng = Rng::new(5);
        let mut cases = matmul_cases(&[3, 8], &mut rng).unwrap();
        cases.extend(rowwise_cases(5, 7, &mut rng).unwrap());
        cases.push(attention_case([1, 2, 4, 8], &mut rng).unwrap());
        let names: Vec<&str> = cases.iter().map(|c| c.bench).collect();
        assert_eq!(
            names,
            [
                "matmul",
                "matmul",
                "softmax",
                "layer_norm",
                "rms_norm",
                "attention_prefill"
            ]
        );
        assert_eq!(cases[1].size, "8x8x8");
        assert_eq!(cases[1].work.flops, Some(1024.0));
        let cpu = kernels_core::CpuBackend::new();
        for c in &cases {
            assert_eq!(c.inputs.len(), c.op.spec().inputs.len(), "{}", c.bench);
            let samples =
                kernels_core::backend::now_or_never(time_case_async(&cpu, None, c, 2)).unwrap();
            assert_eq!(samples.unwrap().len(), 2, "{}", c.bench);
        }
    }

    /// The naive kernel computes a matmul (checked against plain loops on 7 x 13 @ 13 x 5).
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn naive_matmul_matches_plain_loops() {
        let naive = match NaiveMatmul::new() {
            Ok(n) => n,
            Err(e) => {
                use crate::testing::{Need, in_ci, missing, report};
                let why = e.to_string();
                report(missing(
                    "naive_matmul_matches_plain_loops",
                    "wgpu adapter",
                    &why,
                    Need::InCi,
                    in_ci(),
                ));
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
