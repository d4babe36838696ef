//! The device engine: cudarc over the CUDA driver, NVRTC and cuBLAS, all three loaded at run
//! time. Creation checks, in order, that each library loads and that a device answers, and says
//! which step failed; nothing here may panic or fail to link on a machine without CUDA.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::CompileOptions;
use kernels_core::{Error, Result};

use super::engine::{Engine, Gemm, GemmInputs, GraphRun, Grid, Kernel, Mem, Node, Params, Step};
use crate::device::Family;

// SAFETY: `Params` is `#[repr(C)]` plain old data matching `struct Params` in the prelude.
unsafe impl DeviceRepr for Params {}

fn err(why: impl std::fmt::Display) -> Error {
    Error::Backend {
        backend: "cuda".into(),
        why: why.to_string(),
    }
}

fn driver_err(what: &str, e: cudarc::driver::DriverError) -> Error {
    if format!("{e:?}").contains("OUT_OF_MEMORY") {
        return Error::OutOfMemory {
            what: format!("cuda: {what}"),
            bytes: 0,
        };
    }
    err(format!("{what}: {e}"))
}

#[derive(Debug)]
struct DeviceMem(CudaSlice<u32>);

impl Mem for DeviceMem {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn slice<'a>(m: &'a dyn Mem, what: &str) -> Result<&'a CudaSlice<u32>> {
    m.as_any()
        .downcast_ref::<DeviceMem>()
        .map(|d| &d.0)
        .ok_or_else(|| err(format!("{what}: buffer of another engine")))
}

/// Whether the driver, NVRTC and cuBLAS libraries load, and how many devices answer; `Err`
/// names the first missing piece.
pub fn probe() -> Result<usize> {
    // SAFETY: only tries to open the shared libraries.
    let (driver, nvrtc, cublas) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
            cudarc::cublas::sys::is_culib_present(),
        )
    };
    if !driver {
        return Err(err(
            "no CUDA driver: libcuda could not be loaded (install the NVIDIA driver)",
        ));
    }
    if !nvrtc {
        return Err(err(
            "no NVRTC: libnvrtc could not be loaded (install the CUDA runtime compiler, e.g. the cuda-nvrtc package, and put it on LD_LIBRARY_PATH)",
        ));
    }
    if !cublas {
        return Err(err(
            "no cuBLAS: libcublas could not be loaded (install libcublas and put it on LD_LIBRARY_PATH)",
        ));
    }
    let count = CudaContext::device_count().map_err(|e| driver_err("counting devices", e))?;
    if count <= 0 {
        return Err(err("the CUDA driver loaded but reports no device"));
    }
    Ok(count as usize)
}

pub struct Driver {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    arch: String,
    name: String,
    /// NVRTC output per family, compiled on first use.
    modules: RefCell<HashMap<Family, Arc<CudaModule>>>,
    functions: RefCell<HashMap<Kernel, CudaFunction>>,
    /// Instantiated graphs by shape ([`Engine::run_graph`]).
    graphs: RefCell<HashMap<Vec<Node>, Exec>>,
    /// Set when the driver refused a capture: graphs are off from then on.
    no_graphs: Cell<bool>,
    /// Replay graphs by id ([`Engine::replay_capture`]).
    replays: RefCell<HashMap<u64, Exec>>,
}

/// Graphs kept at once; more shapes than this start the cache afresh.
const MAX_GRAPHS: usize = 16;

/// An instantiated graph, destroyed with its owner.
struct Exec(cudarc::driver::sys::CUgraphExec);

impl Drop for Exec {
    fn drop(&mut self) {
        // SAFETY: instantiated by `run_graph` and owned here; launches that use it are
        // ordered on the stream before anything frees its resources (the driver defers that).
        let _ = unsafe { cudarc::driver::result::graph::exec_destroy(self.0) };
    }
}

/// A captured graph, destroyed once it was instantiated or used to update one.
struct Captured(cudarc::driver::sys::CUgraph);

impl Drop for Captured {
    fn drop(&mut self) {
        // SAFETY: returned by `cuStreamEndCapture` and owned here.
        let _ = unsafe { cudarc::driver::result::graph::destroy(self.0) };
    }
}

impl Driver {
    /// Opens device `ordinal`.
    pub fn new(ordinal: usize) -> Result<Self> {
        let count = probe()?;
        if ordinal >= count {
            return Err(err(format!(
                "device {ordinal} requested, the driver reports {count}"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| driver_err("creating a context", e))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| driver_err("reading the compute capability", e))?;
        let name = ctx.name().map_err(|e| driver_err("reading the name", e))?;
        // One stream: no cross-stream events (which a capture would not take).
        // SAFETY: every launch, copy and free of this engine is ordered on `stream`.
        unsafe { ctx.disable_event_tracking() };
        // A stream of its own, not the legacy default stream: the driver refuses to capture
        // that one (`cuStreamBeginCapture`: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, seen on an
        // H200 with driver 580 on 2026-11-27), so every graph needs this.
        let stream = ctx
            .new_stream()
            .map_err(|e| driver_err("creating a stream", e))?;
        let blas = CudaBlas::new(stream.clone()).map_err(|e| err(format!("cuBLAS: {e:?}")))?;
        Ok(Driver {
            ctx,
            stream,
            blas,
            arch: format!("compute_{major}{minor}"),
            name: format!("{name} (sm_{major}{minor})"),
            modules: RefCell::new(HashMap::new()),
            functions: RefCell::new(HashMap::new()),
            graphs: RefCell::new(HashMap::new()),
            no_graphs: Cell::new(false),
            replays: RefCell::new(HashMap::new()),
        })
    }

    fn module(&self, family: Family) -> Result<Arc<CudaModule>> {
        if let Some(m) = self.modules.borrow().get(&family) {
            return Ok(m.clone());
        }
        let opts = CompileOptions {
            options: vec![format!("--gpu-architecture={}", self.arch)],
            name: Some(format!("{}.cu", family.name())),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(family.cuda_module_source(), opts)
            .map_err(|e| err(format!("NVRTC compiling {}.cu: {e:?}", family.name())))?;
        let module = self
            .ctx
            .load_module(ptx)
            .map_err(|e| driver_err(&format!("loading {}.cu", family.name()), e))?;
        self.modules.borrow_mut().insert(family, module.clone());
        Ok(module)
    }

    fn function(&self, kernel: Kernel) -> Result<CudaFunction> {
        if let Some(f) = self.functions.borrow().get(&kernel) {
            return Ok(f.clone());
        }
        let f = self
            .module(kernel.family)?
            .load_function(kernel.entry)
            .map_err(|e| driver_err(&format!("kernel {}", kernel.entry), e))?;
        self.functions.borrow_mut().insert(kernel, f.clone());
        Ok(f)
    }

    /// Records `steps` into a graph by stream capture (nothing runs yet).
    fn capture(&self, steps: &[Step]) -> Result<Captured> {
        use cudarc::driver::{result::stream, sys::CUstreamCaptureMode};
        let cu = self.stream.cu_stream();
        // SAFETY: the stream is this engine's; every step only launches kernels or cuBLAS
        // products on it (allocations and copies happened when the step was recorded).
        // Relaxed: cuBLAS may allocate its workspace on its first product, which the other
        // modes refuse while a stream captures (the allocation is not part of the graph).
        unsafe { stream::begin_capture(cu, CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED) }
            .map_err(|e| driver_err("beginning a graph capture", e))?;
        let ran = steps.iter().try_for_each(|s| s.run(self));
        // SAFETY: ends the capture begun above, also when a step failed.
        let graph =
            unsafe { stream::end_capture(cu) }.map_err(|e| driver_err("ending a graph capture", e));
        let graph = match graph {
            Ok(g) if !g.is_null() => Captured(g),
            Ok(_) => return Err(err("the capture made no graph")),
            Err(e) => {
                ran?;
                return Err(e);
            }
        };
        ran?;
        Ok(graph)
    }

    /// Launches `steps` as the graph of their shape: the captured graph updates the one
    /// instantiated for that shape, or is instantiated when there is none or the update is
    /// refused.
    fn launch_graph(&self, steps: &[Step]) -> Result<GraphRun> {
        use cudarc::driver::{result::graph, sys};
        let shape: Vec<Node> = steps.iter().map(Step::node).collect();
        let captured = self.capture(steps)?;
        let mut graphs = self.graphs.borrow_mut();
        let mut run = GraphRun::Updated;
        let updated = graphs.get(&shape).is_some_and(|exec| {
            let mut info = sys::CUgraphExecUpdateResultInfo_st {
                result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
                errorNode: std::ptr::null_mut(),
                errorFromNode: std::ptr::null_mut(),
            };
            // SAFETY: both graphs are live; the update changes only node parameters.
            let r = unsafe { sys::cuGraphExecUpdate_v2(exec.0, captured.0, &mut info) };
            r == sys::CUresult::CUDA_SUCCESS
                && info.result == sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS
        });
        if !updated {
            // SAFETY: the captured graph is live.
            let exec = unsafe { graph::instantiate(captured.0, sys::CUgraphInstantiate_flags(0)) }
                .map_err(|e| driver_err("instantiating a graph", e))?;
            if graphs.len() >= MAX_GRAPHS {
                graphs.clear();
            }
            graphs.insert(shape.clone(), Exec(exec));
            run = GraphRun::Instantiated;
        }
        drop(captured);
        let exec = graphs
            .get(&shape)
            .ok_or_else(|| err("a graph instantiated just now is missing"))?;
        // SAFETY: the graph and the stream are live.
        unsafe { graph::launch(exec.0, self.stream.cu_stream()) }
            .map_err(|e| driver_err("launching a graph", e))?;
        Ok(run)
    }
}

fn c_int(what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::LimitExceeded {
        what: format!("cuda gemm: {what}"),
        value: v as u64,
        limit: i32::MAX as u64,
    })
}

fn op(trans: bool) -> cublasOperation_t {
    if trans {
        cublasOperation_t::CUBLAS_OP_T
    } else {
        cublasOperation_t::CUBLAS_OP_N
    }
}

impl Engine for Driver {
    fn describe(&self) -> String {
        self.name.clone()
    }
    fn row_threads(&self) -> u32 {
        256
    }
    fn alloc_zeroed(&self, words: usize) -> Result<Box<dyn Mem>> {
        let s = self
            .stream
            .alloc_zeros::<u32>(words.max(1))
            .map_err(|e| driver_err("alloc", e))?;
        Ok(Box::new(DeviceMem(s)))
    }
    fn upload(&self, words: &[u32]) -> Result<Box<dyn Mem>> {
        if words.is_empty() {
            return self.alloc_zeroed(1);
        }
        let s = self
            .stream
            .clone_htod(words)
            .map_err(|e| driver_err("upload", e))?;
        Ok(Box::new(DeviceMem(s)))
    }
    fn download(&self, mem: &dyn Mem, words: usize) -> Result<Vec<u32>> {
        let s = slice(mem, "download")?;
        if words == 0 {
            return Ok(Vec::new());
        }
        let view = s
            .try_slice(0..words)
            .ok_or_else(|| err(format!("download of {words} words from {}", s.len())))?;
        self.stream
            .clone_dtoh(&view)
            .map_err(|e| driver_err("download", e))
    }
    fn launch(
        &self,
        kernel: Kernel,
        grid: Grid,
        params: &Params,
        inputs: &[&dyn Mem],
        outputs: &[&dyn Mem],
    ) -> Result<()> {
        let f = self.function(kernel)?;
        let mut ptrs = [0u64; 7];
        let mut guards = Vec::new();
        for (i, m) in inputs.iter().take(4).enumerate() {
            let (p, g) = slice(*m, kernel.entry)?.device_ptr(&self.stream);
            ptrs[i] = p;
            guards.push(g);
        }
        for (i, m) in outputs.iter().take(3).enumerate() {
            let (p, g) = slice(*m, kernel.entry)?.device_ptr(&self.stream);
            ptrs[4 + i] = p;
            guards.push(g);
        }
        let mut b = self.stream.launch_builder(&f);
        b.arg(params);
        for p in &ptrs {
            b.arg(p);
        }
        let cfg = LaunchConfig {
            grid_dim: (grid.blocks, 1, 1),
            block_dim: (grid.threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: every kernel has the prelude's signature (Params by value, seven pointers);
        // the launchers size the grid and the buffers to the parameters they pass.
        unsafe { b.launch(cfg) }.map_err(|e| driver_err(kernel.entry, e))?;
        drop(guards);
        Ok(())
    }
    fn gemm(&self, g: &Gemm, a: &dyn Mem, b: &dyn Mem, c: &dyn Mem) -> Result<()> {
        let cm = g.to_column_major();
        let (pa, ga) = slice(a, "gemm")?.device_ptr(&self.stream);
        let (pb, gb) = slice(b, "gemm")?.device_ptr(&self.stream);
        let (pc, gc) = slice(c, "gemm")?.device_ptr(&self.stream);
        let (alpha, beta) = (1.0f32, if g.accumulate { 1.0f32 } else { 0.0 });
        let c_at = (pc + 4 * g.offset_c as u64) as *mut f32;
        let (m, n, k) = (c_int("m", cm.m)?, c_int("n", cm.n)?, c_int("k", cm.k)?);
        let (ld_first, ld_second) = (c_int("ld", cm.ld_first)?, c_int("ld", cm.ld_second)?);
        let (ldc, batch) = (c_int("ldc", cm.ldc)?, c_int("batch", g.batch)?);
        let half = match g.inputs {
            GemmInputs::F32 => None,
            GemmInputs::F16 => Some(cudaDataType::CUDA_R_16F),
            GemmInputs::BF16 => Some(cudaDataType::CUDA_R_16BF),
        };
        let status = match half {
            // SAFETY: the launcher checked that every operand's offset plus its extent fits its
            // buffer; the pointers stay valid while the guards live.
            None => unsafe {
                cudarc::cublas::result::sgemm_strided_batched(
                    *self.blas.handle(),
                    op(cm.trans_first),
                    op(cm.trans_second),
                    m,
                    n,
                    k,
                    &alpha,
                    (pb + 4 * g.offset_b as u64) as *const f32,
                    ld_first,
                    cm.stride_first as i64,
                    (pa + 4 * g.offset_a as u64) as *const f32,
                    ld_second,
                    cm.stride_second as i64,
                    &beta,
                    c_at,
                    ldc,
                    cm.stride_c as i64,
                    batch,
                )
            },
            // 16-bit operands (2 bytes an element), f32 output, f32 sums: tensor cores.
            // SAFETY: as above; the operands are 16-bit tensors of the extents checked.
            Some(t) => unsafe {
                cudarc::cublas::result::gemm_strided_batched_ex(
                    *self.blas.handle(),
                    op(cm.trans_first),
                    op(cm.trans_second),
                    m,
                    n,
                    k,
                    (&alpha as *const f32).cast(),
                    (pb + 2 * g.offset_b as u64) as *const std::ffi::c_void,
                    t,
                    ld_first,
                    cm.stride_first as i64,
                    (pa + 2 * g.offset_a as u64) as *const std::ffi::c_void,
                    t,
                    ld_second,
                    cm.stride_second as i64,
                    (&beta as *const f32).cast(),
                    c_at.cast(),
                    cudaDataType::CUDA_R_32F,
                    ldc,
                    cm.stride_c as i64,
                    batch,
                    cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP,
                )
            },
        };
        status.map_err(|e| err(format!("cuBLAS gemm ({:?} inputs): {e:?}", g.inputs)))?;
        drop((ga, gb, gc));
        Ok(())
    }
    fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| driver_err("synchronize", e))
    }
    fn prepare(&self, kernel: Kernel) -> Result<()> {
        self.function(kernel).map(|_| ())
    }
    fn run_graph(&self, steps: &[Step]) -> Result<GraphRun> {
        if !self.no_graphs.get() {
            match self.launch_graph(steps) {
                Ok(run) => return Ok(run),
                // Launch by launch from now on: what the capture refused runs directly.
                Err(e) => {
                    eprintln!("cuda: graphs off for this backend: {e}");
                    self.no_graphs.set(true);
                    self.graphs.borrow_mut().clear();
                }
            }
        }
        for s in steps {
            s.run(self)?;
        }
        Ok(GraphRun::Direct)
    }
    fn address(&self, mem: &dyn Mem) -> Result<u64> {
        let (p, _guard) = slice(mem, "address")?.device_ptr(&self.stream);
        Ok(p)
    }
    fn write(&self, mem: &dyn Mem, words: &[u32]) -> Result<()> {
        let s = slice(mem, "write")?;
        if words.len() > s.len() {
            return Err(err(format!(
                "write of {} words to {}",
                words.len(),
                s.len()
            )));
        }
        let (p, guard) = s.device_ptr(&self.stream);
        // SAFETY: in bounds (checked above); from pageable host memory the driver stages the
        // words before it returns, so `words` may go once it has, and the copy is ordered on
        // the stream before the launches that follow.
        unsafe { cudarc::driver::result::memcpy_htod_async(p, words, self.stream.cu_stream()) }
            .map_err(|e| driver_err("write", e))?;
        drop(guard);
        Ok(())
    }
    fn replay_capture(&self, id: u64, steps: &[Step]) -> Result<()> {
        use cudarc::driver::{result::graph, sys};
        let captured = self.capture(steps)?;
        // SAFETY: the captured graph is live.
        let exec = unsafe { graph::instantiate(captured.0, sys::CUgraphInstantiate_flags(0)) }
            .map_err(|e| driver_err("instantiating a replay graph", e))?;
        drop(captured);
        self.replays.borrow_mut().insert(id, Exec(exec));
        self.replay_launch(id)
    }
    fn replay_launch(&self, id: u64) -> Result<()> {
        let replays = self.replays.borrow();
        let exec = replays
            .get(&id)
            .ok_or_else(|| err(format!("no replay graph {id}")))?;
        // SAFETY: the graph and the stream are live; the caller keeps the graph's buffers.
        unsafe { cudarc::driver::result::graph::launch(exec.0, self.stream.cu_stream()) }
            .map_err(|e| driver_err("launching a replay graph", e))
    }
    fn replay_drop(&self, id: u64) {
        self.replays.borrow_mut().remove(&id);
    }
}
