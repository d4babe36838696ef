//! The optional CUDA backend (`cuda` feature): the same [`Backend`] trait as the CPU and wgpu,
//! for NVIDIA GPUs through the vendor libraries, via `cudarc`.
//!
//! - decode's products (at most 8 rows: f32, f16, bf16 and packed weights, `matmul_swiglu`'s
//!   gated form) are the `matvec_stream` kernel of `quant.cu`: several weight rows a block, a
//!   team of up to 32 lanes per row reading it once in 16-byte units, summed by warp shuffles;
//! - every other matmul (and every product inside other ops: GRU projections, low-rank SVD) is cuBLAS
//!   SGEMM, strided batched, with the transposes passed to cuBLAS instead of copies; with
//!   [`CudaBackend::with_half_products`] (`KERNELS_CUDA_HALF=1`), products with a 16-bit or
//!   packed weight that are not decode's `matvec` run in 16 bits on tensor cores
//!   (`cublasGemmEx`, f32 sums), under their own budget ([`HALF_PRODUCT_BUDGETS`]);
//! - every other op is CUDA C in `src/cuda/kernels/<family>.cu`, one file per op family
//!   (mirroring the WGSL families), compiled at run time by NVRTC on first use and cached per
//!   backend; each kernel names its CPU reference in kernels-core;
//! - the driver, NVRTC and cuBLAS are loaded dynamically: the crate builds without the CUDA
//!   toolkit, and a machine without them gets a clear [`Error::Backend`], never a panic.
//!
//! The op glue is the shared op layer (`crate::ops`, written once against `crate::device::Device`,
//! which [`launch`] implements); the device behind it is an [`engine::Engine`] (cudarc: [`driver`]), a seam kept narrow so that in
//! tests a CPU emulator running the same CUDA C (`emulator.rs`) stands in for the device.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use kernels_core::backend::LocalBoxFuture;
use kernels_core::op::{Direction, Op};
use kernels_core::tensor::{DeviceBuffer, Storage};
use kernels_core::{Backend, DType, DeviceId, Error, Result, Tensor};

mod attention;
pub mod driver;
#[cfg(any(test, feature = "cuda-emulator"))]
mod emulator;
pub mod engine;
#[cfg(test)]
mod graph_tests;
pub mod kernels;
mod launch;
mod matmul;
#[cfg(test)]
mod matvec_tests;
mod replay;
#[cfg(test)]
mod replay_tests;
mod svd;

use engine::{Engine, Gemm, GraphRun, Grid, Kernel, Mem, Params, Step};

/// Threads per row block on the emulated device: what the driver engine picks.
#[cfg(feature = "cuda-emulator")]
const EMULATED_ROW_THREADS: u32 = 256;

/// What the backend has done so far. Read with [`CudaBackend::counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CudaCounters {
    /// Kernel launches.
    pub launches: u64,
    /// cuBLAS GEMM calls (SGEMM and 16-bit).
    pub gemms: u64,
    /// Of those, 16-bit ones (`cublasGemmEx` on f16 or bf16 operands).
    pub half_gemms: u64,
    /// Bytes copied host -> device.
    pub bytes_uploaded: u64,
    /// Bytes copied device -> host.
    pub bytes_downloaded: u64,
    /// Steps (the launches and GEMMs recorded between two reads of the device) run as one
    /// CUDA graph launch ([`CudaBackend::with_graphs`]).
    pub graph_launches: u64,
    /// Of those, the ones that instantiated a graph (a step of a new shape); the others
    /// updated the graph of their shape with their grids, parameters and pointers.
    pub graph_instantiations: u64,
    /// Launches and GEMMs that ran inside graph launches.
    pub graph_nodes: u64,
    /// Decode steps relaunched as captured ([`kernels_core::Backend::replay_step`]): no launch
    /// recorded, no parameter built, no graph updated.
    pub replays: u64,
    /// Launches and GEMMs those relaunches ran.
    pub replayed_nodes: u64,
    /// The host's writes before a relaunch: the position shift when it changed, host inputs
    /// that changed, ids fed from elsewhere (copied on the device).
    pub replay_writes: u64,
    /// Captures never replayed: the next token's recording differed from it otherwise than by
    /// the position (`KERNELS_CUDA_REPLAY_DEBUG=1` says how).
    pub replay_refusals: u64,
    /// Host time from the first launch or GEMM a step records until its graph launch (or, with
    /// graphs off, its last launch) returned: the host's cost of a step, without the wait for
    /// results (see `crate::host_time`'s definition, the same for every backend).
    pub host_ns: u64,
}

/// Whether a CUDA device can be used here: `Ok(device count)`, or why not (no driver, no
/// NVRTC, no cuBLAS, no device). Cheap; creates no context.
pub fn probe() -> Result<usize> {
    guarded("probe", driver::probe)
}

/// Runs `f`, turning a panic inside cudarc (a library symbol missing from an old driver, say)
/// into an error: a missing CUDA installation must never abort the caller.
fn guarded<R>(what: &str, f: impl FnOnce() -> Result<R>) -> Result<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        Err(Error::Backend {
            backend: "cuda".into(),
            why: format!("{what}: the CUDA libraries failed: {why}"),
        })
    })
}

/// One tensor's elements on the CUDA device (32-bit words; i64 ids are stored as i32).
pub struct CudaBuffer {
    mem: Arc<dyn Mem>,
    device: DeviceId,
    /// Host copy of integer tensors uploaded from the host (ids, targets), so index ranges can
    /// be checked without a readback.
    host_ints: Option<Arc<Vec<i64>>>,
    /// Host copy of small rank-1 f32 tensors (`crate::device::host_float_copy`).
    host_floats: Option<Arc<Vec<f32>>>,
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBuffer(device {}, {:?})", self.device.0, self.mem)
    }
}

impl DeviceBuffer for CudaBuffer {
    fn device(&self) -> DeviceId {
        self.device
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl CudaBuffer {
    pub(crate) fn host_ints(&self) -> Option<&Arc<Vec<i64>>> {
        self.host_ints.as_ref()
    }
    pub(crate) fn host_floats(&self) -> Option<&Arc<Vec<f32>>> {
        self.host_floats.as_ref()
    }
}

/// The CUDA backend. See the module docs.
pub struct CudaBackend {
    engine: Box<dyn Engine>,
    id: DeviceId,
    /// Small constant tables (rope frequencies), uploaded once per key.
    tables: RefCell<HashMap<String, Tensor>>,
    counters: Cell<CudaCounters>,
    /// Products with a weight operand in 16 bits (see [`CudaBackend::with_half_products`]).
    half_products: bool,
    /// Steps run as CUDA graphs (see [`CudaBackend::with_graphs`]).
    graphs: bool,
    /// Decode steps relaunched as captured (see [`CudaBackend::with_replay`]).
    replay: bool,
    /// Set when the engine refused a replay capture: no decode step is captured again.
    replay_off: Cell<bool>,
    /// The launches and GEMMs of the step being recorded (graphs on).
    pending: RefCell<Vec<Step>>,
    /// When the step being recorded began (its first launch or GEMM).
    step_started: Cell<Option<std::time::Instant>>,
    /// Decode steps captured for replay, by key (`replay.rs`).
    replays: RefCell<HashMap<u64, replay::State>>,
    /// The engine id of the next replay graph.
    next_replay: Cell<u64>,
    /// While a step is captured for replay: the address of its position shift word (0: none).
    shift_at: Cell<u64>,
}

/// A step that records this many launches and GEMMs runs them at once, launch by launch, and
/// records on: a training loop that never reads the device back would otherwise hold every
/// intermediate of every iteration. A decode token of a 1B llama is about 150 launches.
pub const MAX_GRAPH_STEPS: usize = 4096;

/// The error budgets of CUDA's half products ([`CudaBackend::with_half_products`]) against the
/// f32 reference, for f16 and for bf16 operands: the activations are rounded to the 16-bit
/// format (relative error up to 2^-11 for f16, 2^-8 for bf16), as are packed weights decoded to
/// f16; products and sums stay f32. On the parity suite's weight cases (unit-scale inputs, run
/// on the emulated device by `emulated_cuda_kernels_match_the_cpu_reference_on_every_op`) the
/// worst case needs between a quarter and a half of these; matmul's f32 budget fails 26 of
/// those 72 cases.
pub const HALF_PRODUCT_BUDGETS: [(DType, kernels_core::numerics::Budget); 2] = [
    (
        DType::F16,
        kernels_core::numerics::Budget::per_k(2e-3, 2e-3),
    ),
    (
        DType::BF16,
        kernels_core::numerics::Budget::per_k(1.6e-2, 1.6e-2),
    ),
];

/// The budget a product with operands of these dtypes meets under half products (from
/// [`HALF_PRODUCT_BUDGETS`], by the format it runs in); `None` for an f32 product, which half
/// products leave to SGEMM and matmul's own budget.
pub fn half_product_budget(a: DType, b: DType) -> Option<kernels_core::numerics::Budget> {
    let (format, _) = matmul::half_format(a, b)?;
    HALF_PRODUCT_BUDGETS
        .iter()
        .find(|(d, _)| *d == format)
        .map(|(_, b)| *b)
}

/// `KERNELS_CUDA_HALF`: `1` turns half products on, `0` (or unset) off.
fn half_products_from_env() -> Result<bool> {
    switch_from_env("KERNELS_CUDA_HALF", false)
}

/// `KERNELS_CUDA_REPLAY`: `0` turns decode-step replays off, `1` (or unset) on.
pub fn replay_from_env() -> Result<bool> {
    switch_from_env("KERNELS_CUDA_REPLAY", true)
}

/// `KERNELS_CUDA_GRAPHS`: `0` turns CUDA graphs off, `1` (or unset) on.
pub fn graphs_from_env() -> Result<bool> {
    switch_from_env("KERNELS_CUDA_GRAPHS", true)
}

fn switch_from_env(name: &str, default: bool) -> Result<bool> {
    switch_value(name, std::env::var(name).ok().as_deref(), default)
}

/// A `1`/`0` switch's value (`on`/`off`, `true`/`false`; unset or empty: `default`).
fn switch_value(name: &str, value: Option<&str>, default: bool) -> Result<bool> {
    match value.map(str::trim) {
        None | Some("") => Ok(default),
        Some("1" | "on" | "true") => Ok(true),
        Some("0" | "off" | "false") => Ok(false),
        Some(other) => Err(Error::Backend {
            backend: "cuda".into(),
            why: format!("{name}={other:?}: expected 1 or 0"),
        }),
    }
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBackend({})", self.engine.describe())
    }
}

impl CudaBackend {
    /// Opens the device named by `KERNELS_CUDA_DEVICE` (an ordinal, default 0), with half
    /// products as `KERNELS_CUDA_HALF` says (default off). Fails with [`Error::Backend`] saying
    /// why when there is no driver, NVRTC, cuBLAS or device.
    pub fn new() -> Result<Self> {
        let ordinal = match std::env::var("KERNELS_CUDA_DEVICE") {
            Ok(v) => v.trim().parse::<usize>().map_err(|_| Error::Backend {
                backend: "cuda".into(),
                why: format!("KERNELS_CUDA_DEVICE={v:?} is not a device ordinal"),
            })?,
            Err(_) => 0,
        };
        Self::on_device(ordinal)
    }

    /// Opens CUDA device `ordinal` (`--devices cuda:0,cuda:1`: one context per device).
    pub fn on_device(ordinal: usize) -> Result<Self> {
        let engine = guarded("opening the device", || driver::Driver::new(ordinal))?;
        Ok(Self::with_engine(Box::new(engine))
            .with_half_products(half_products_from_env()?)
            .with_graphs(graphs_from_env()?)
            .with_replay(replay_from_env()?))
    }

    /// The CUDA backend on the emulated device (`cuda-emulator` feature; for tests): the same
    /// launchers and CUDA C, each family built by the host C++ compiler into a shared library
    /// and its grids run on the CPU (cuBLAS replaced by a host SGEMM with its semantics). Slow,
    /// for small problems only. Fails, saying why, without a C++ compiler (`c++`, `g++` or
    /// `clang++`) or when a family does not build.
    #[cfg(feature = "cuda-emulator")]
    pub fn emulated() -> Result<Self> {
        let device = emulator::EmulatedDevice::new(EMULATED_ROW_THREADS)?;
        Ok(Self::with_engine(Box::new(device))
            .with_half_products(half_products_from_env()?)
            .with_graphs(graphs_from_env()?)
            .with_replay(replay_from_env()?))
    }

    pub(crate) fn with_engine(engine: Box<dyn Engine>) -> Self {
        CudaBackend {
            engine,
            id: DeviceId::fresh(),
            tables: RefCell::new(HashMap::new()),
            counters: Cell::new(CudaCounters::default()),
            half_products: false,
            graphs: false,
            replay: true,
            replay_off: Cell::new(false),
            pending: RefCell::new(Vec::new()),
            step_started: Cell::new(None),
            replays: RefCell::new(HashMap::new()),
            next_replay: Cell::new(1),
            shift_at: Cell::new(0),
        }
    }

    /// Whether each step (the launches and GEMMs recorded between two reads of the device: a
    /// decode token, say) runs as one CUDA graph launch: recorded on the host, captured into a
    /// graph once per shape (the sequence of kernels and GEMM shapes) and instantiated, then
    /// for every later step of that shape the instantiated graph is updated with the step's
    /// grids, parameters and buffers (`cuGraphExecUpdate`) and launched. On by default
    /// (`KERNELS_CUDA_GRAPHS=0` turns it off). Results are the same either way: the same
    /// kernels run on the same buffers in the same order. A launch's errors (a kernel that does
    /// not compile) are still reported by the op that launched it; an error of the device
    /// itself comes with the next read. If the driver refuses to capture, graphs turn off for
    /// the backend and the step runs launch by launch.
    pub fn with_graphs(mut self, on: bool) -> Self {
        self.graphs = on;
        self
    }

    /// See [`CudaBackend::with_graphs`].
    pub fn graphs(&self) -> bool {
        self.graphs
    }

    /// Whether decode steps ([`Backend::replay_step`], what `Decoder::decode` runs) are
    /// captured once per decoder and relaunched as instantiated, their position and fed ids in
    /// device memory (see `replay.rs`), rather than recorded and written into their graph each
    /// token. Only with graphs on; on by default (`KERNELS_CUDA_REPLAY=0` turns it off).
    pub fn with_replay(mut self, on: bool) -> Self {
        self.replay = on;
        self
    }

    /// See [`CudaBackend::with_replay`].
    pub fn replay(&self) -> bool {
        self.replay && self.graphs
    }

    /// Adds `step` to the step being recorded; at [`MAX_GRAPH_STEPS`], runs what was recorded.
    fn record(&self, step: Step) -> Result<()> {
        let full = {
            let mut p = self.pending.borrow_mut();
            p.push(step);
            (p.len() >= MAX_GRAPH_STEPS).then(|| std::mem::take(&mut *p))
        };
        match full {
            Some(steps) => steps.iter().try_for_each(|s| s.run(self.engine.as_ref())),
            None => Ok(()),
        }
    }

    fn step_begins(&self) {
        if self.step_started.get().is_none() {
            self.step_started.set(Some(std::time::Instant::now()));
        }
    }

    /// Runs the recorded step (graphs on) and ends its host clock. Called before any read of
    /// the device and by [`Backend::flush`].
    fn end_step(&self) -> Result<()> {
        let steps = std::mem::take(&mut *self.pending.borrow_mut());
        let run = if steps.is_empty() {
            Ok(None)
        } else {
            self.engine.run_graph(&steps).map(Some)
        };
        let ns = self.step_started.take().map_or(0, |t| {
            u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
        });
        // The buffers the step held are released only once its work is queued.
        let nodes = steps.len() as u64;
        drop(steps);
        let run = run?;
        self.count(|c| {
            c.host_ns += ns;
            if let Some(r @ (GraphRun::Instantiated | GraphRun::Updated)) = run {
                c.graph_launches += 1;
                c.graph_nodes += nodes;
                c.graph_instantiations += u64::from(r == GraphRun::Instantiated);
            }
        });
        Ok(())
    }

    /// Whether products with a weight operand (f16, bf16 or GGML blocks) that are not decode's
    /// packed `matvec` (prefill's, of more than 8 rows) multiply in 16 bits on tensor cores,
    /// where SGEMM would first decode the weight to f32: the other operand is rounded to the
    /// weight's format (bf16 for a bf16 weight, else f16; packed blocks are decoded to f16),
    /// and `cublasGemmEx` sums in f32. Off by default, as
    /// PyTorch's reduced-precision matmul switches are: the results then meet
    /// [`HALF_PRODUCT_BUDGETS`], not matmul's f32 budget, and an activation beyond f16's range
    /// (65504) becomes an infinity.
    pub fn with_half_products(mut self, on: bool) -> Self {
        self.half_products = on;
        self
    }

    /// See [`CudaBackend::with_half_products`].
    pub fn half_products(&self) -> bool {
        self.half_products
    }

    /// Launches, GEMMs and bytes moved so far.
    pub fn counters(&self) -> CudaCounters {
        self.counters.get()
    }

    fn count(&self, f: impl FnOnce(&mut CudaCounters)) {
        let mut c = self.counters.get();
        f(&mut c);
        self.counters.set(c);
    }

    pub(crate) fn row_threads(&self) -> u32 {
        self.engine.row_threads()
    }

    pub(crate) fn buffer_of<'a>(&self, op: &'static str, t: &'a Tensor) -> Result<&'a CudaBuffer> {
        t.check_device(op, self.id)?;
        t.device_buffer()
            .and_then(|b| b.as_any().downcast_ref::<CudaBuffer>())
            .ok_or(Error::DeviceMismatch {
                op,
                expected: self.id.0,
                got: t.device().0,
            })
    }

    pub(crate) fn launch(
        &self,
        op: &'static str,
        kernel: Kernel,
        grid: Grid,
        params: Params,
        inputs: &[&Tensor],
        outputs: &[&Tensor],
    ) -> Result<()> {
        if grid.blocks == 0 {
            return Ok(());
        }
        self.step_begins();
        let mut params = params;
        self.shift_params(kernel, &mut params);
        if self.graphs {
            self.engine.prepare(kernel)?;
            let held = |ts: &[&Tensor]| -> Result<Vec<Arc<dyn Mem>>> {
                ts.iter()
                    .map(|t| self.buffer_of(op, t).map(|b| b.mem.clone()))
                    .collect()
            };
            let step = Step::Launch {
                kernel,
                grid,
                params,
                inputs: held(inputs)?,
                outputs: held(outputs)?,
            };
            self.record(step)?;
        } else {
            let ins = inputs
                .iter()
                .map(|t| self.buffer_of(op, t).map(|b| b.mem.as_ref()))
                .collect::<Result<Vec<_>>>()?;
            let outs = outputs
                .iter()
                .map(|t| self.buffer_of(op, t).map(|b| b.mem.as_ref()))
                .collect::<Result<Vec<_>>>()?;
            self.engine.launch(kernel, grid, &params, &ins, &outs)?;
        }
        self.count(|c| c.launches += 1);
        Ok(())
    }

    /// `c = op(a) op(b)`; every operand's offset and extent are checked against its tensor.
    pub(crate) fn gemm(
        &self,
        op: &'static str,
        g: &Gemm,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
    ) -> Result<()> {
        let last = |off: usize, stride: usize, len: usize| {
            g.batch
                .checked_sub(1)
                .and_then(|b| b.checked_mul(stride))
                .and_then(|x| x.checked_add(off))
                .and_then(|x| x.checked_add(len))
        };
        let fits = |t: &Tensor, end: Option<usize>| end.is_some_and(|e| e <= t.numel());
        if !fits(a, last(g.offset_a, g.stride_a, g.m * g.k))
            || !fits(b, last(g.offset_b, g.stride_b, g.k * g.n))
            || !fits(c, last(g.offset_c, g.m * g.n, g.m * g.n))
        {
            return Err(Error::bad_shape(
                op,
                "matmul operand",
                a.shape(),
                format!(
                    "{} x [{}, {}] @ [{}, {}] at offsets {}, {} does not fit its buffers",
                    g.batch, g.m, g.k, g.k, g.n, g.offset_a, g.offset_b
                ),
            ));
        }
        let (ma, mb, mc) = (
            self.buffer_of(op, a)?,
            self.buffer_of(op, b)?,
            self.buffer_of(op, c)?,
        );
        self.step_begins();
        if self.graphs {
            self.record(Step::Gemm {
                gemm: *g,
                a: ma.mem.clone(),
                b: mb.mem.clone(),
                c: mc.mem.clone(),
            })?;
        } else {
            self.engine
                .gemm(g, ma.mem.as_ref(), mb.mem.as_ref(), mc.mem.as_ref())?;
        }
        let half = u64::from(g.inputs != engine::GemmInputs::F32);
        self.count(|c| {
            c.gemms += 1;
            c.half_gemms += half;
        });
        Ok(())
    }

    /// Downloads now (CUDA copies block the host thread anyway).
    pub fn download_blocking(&self, t: &Tensor) -> Result<Tensor> {
        let buf = self.buffer_of("download", t)?;
        self.end_step()?;
        let words = self
            .engine
            .download(buf.mem.as_ref(), crate::device::device_words(t))?;
        self.count(|c| c.bytes_downloaded += 4 * words.len() as u64);
        match t.dtype() {
            DType::F32 => {
                Tensor::from_f32(t.shape(), words.into_iter().map(f32::from_bits).collect())
            }
            DType::I32 => {
                Tensor::from_i32(t.shape(), words.into_iter().map(|w| w as i32).collect())
            }
            DType::I64 => Tensor::from_i64(
                t.shape(),
                words.into_iter().map(|w| i64::from(w as i32)).collect(),
            ),
            _ => {
                let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                crate::device::packed_from_bytes(t, &bytes)
            }
        }
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        format!("cuda ({})", self.engine.describe())
    }
    fn device(&self) -> DeviceId {
        self.id
    }
    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        let host_floats = match t.storage() {
            Storage::F32(v) => crate::device::host_float_copy(t.shape(), v),
            _ => None,
        };
        let (words, host_ints): (Vec<u32>, Option<Arc<Vec<i64>>>) = match t.storage() {
            Storage::F32(v) => (v.iter().map(|x| x.to_bits()).collect(), None),
            Storage::I32(v) => (
                v.iter().map(|&x| x as u32).collect(),
                Some(Arc::new(v.iter().map(|&x| i64::from(x)).collect())),
            ),
            Storage::I64(v) => {
                // Kernels index with i32; ids beyond it cannot address any tensor anyway.
                let words = v
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| {
                        i32::try_from(x)
                            .map(|y| y as u32)
                            .map_err(|_| Error::IndexOutOfRange {
                                op: "upload",
                                tensor: format!("i64 element {i}"),
                                index: x,
                                bound: i32::MAX as usize,
                            })
                    })
                    .collect::<Result<Vec<_>>>()?;
                (words, Some(Arc::new(v.to_vec())))
            }
            Storage::Packed(b) => (crate::device::packed_upload_words(t, b)?, None),
            Storage::Device(_) => return Err(Error::NotOnHost { op: "upload" }),
        };
        let mem: Arc<dyn Mem> = self.engine.upload(&words)?.into();
        self.count(|c| c.bytes_uploaded += 4 * words.len() as u64);
        Ok(Tensor::from_device(
            t.shape(),
            t.dtype(),
            Arc::new(CudaBuffer {
                mem,
                device: self.id,
                host_ints,
                host_floats,
            }),
        ))
    }
    fn download<'a>(&'a self, t: &'a Tensor) -> LocalBoxFuture<'a, Result<Tensor>> {
        Box::pin(std::future::ready(self.download_blocking(t)))
    }
    fn run(&self, op: &Op, dir: Direction, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        crate::ops::run(self, op, dir, inputs)
    }
    fn run_donated(&self, op: &Op, donated: Vec<Tensor>, rest: &[&Tensor]) -> Result<Vec<Tensor>> {
        crate::ops::run_donated(self, op, donated, rest)
    }
    fn flush(&self) -> Result<()> {
        // Runs the recorded step; waiting surfaces any asynchronous error.
        self.end_step()?;
        self.engine.synchronize()
    }
    fn zeros(&self, shape: &[usize]) -> Result<Tensor> {
        crate::device::Device::alloc(self, "zeros", shape, DType::F32)
    }
    fn replay_step(
        &self,
        step: &kernels_core::backend::ReplayStep<'_>,
        record: &mut dyn FnMut() -> Result<Vec<Tensor>>,
    ) -> Result<Vec<Tensor>> {
        self.replay_step_impl(step, record)
    }
    fn release_replay(&self, key: u64) {
        self.release_replay_impl(key)
    }
}
