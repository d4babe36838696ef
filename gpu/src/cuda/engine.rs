//! What the CUDA backend needs from a device: memory, kernel launches and GEMM (cuBLAS). The driver
//! engine ([`super::driver`]) is cudarc. The seam is narrow so that in tests a CPU emulator
//! (`emulator.rs`: each family compiled by the host C++ compiler, grids run by
//! `host_runtime.hpp`) stands in for it.

use std::any::Any;
use std::sync::Arc;

use kernels_core::Result;

use crate::device::Family;

/// Per-launch parameters: twelve u32, eight f32, then the launch's specialization constants
/// (`struct Params` in the prelude), then a replayed graph's position shift (`struct
/// LaunchParams`): the device address of the shift word (0: none) and the u32 slots it is added
/// to (see `super::replay`). Passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Params {
    pub u: [u32; crate::device::PARAM_U32S],
    pub f: [f32; crate::device::PARAM_F32S],
    pub c: [u32; 4],
    pub shift: u64,
    pub shift_mask: u32,
    pub pad: u32,
}

impl Params {
    /// The op layer's parameters with the launch's constants.
    pub fn with_consts(p: &crate::device::Params, consts: &[(&'static str, u32)]) -> Self {
        let mut c = [0u32; 4];
        for (d, (_, v)) in c.iter_mut().zip(consts) {
            *d = *v;
        }
        Params {
            u: p.u,
            f: p.f,
            c,
            ..Params::default()
        }
    }
}

/// A kernel entry point of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub family: Family,
    pub entry: &'static str,
}

/// A 1-D launch. `cooperative`: the block's threads synchronize (row kernels); the emulator
/// needs to know, the device does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Grid {
    pub blocks: u32,
    pub threads: u32,
    pub cooperative: bool,
}

/// Device memory owned by an engine; each engine downcasts to its own type.
pub trait Mem: Any + std::fmt::Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
}

/// What `A` and `B` hold; `C` is f32 and the products are summed in f32 either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GemmInputs {
    /// f32 (SGEMM).
    #[default]
    F32,
    /// IEEE binary16, two to a 32-bit word (`cublasGemmEx`, tensor cores).
    F16,
    /// bfloat16, two to a word.
    BF16,
}

/// `C = op(A) op(B)` for `batch` row-major matrices: `op(A) [m, k]`, `op(B) [k, n]`, `C [m,
/// n]`, each operand at an element offset and a batch stride (0: shared).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gemm {
    pub inputs: GemmInputs,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans_a: bool,
    pub trans_b: bool,
    pub batch: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub offset_a: usize,
    pub offset_b: usize,
    pub offset_c: usize,
    /// Add the product to `C` (cuBLAS beta = 1) instead of overwriting it.
    pub accumulate: bool,
}

/// A column-major GEMM call (cuBLAS's convention), as [`Gemm::to_column_major`] maps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnMajorGemm {
    /// Transpose the first operand.
    pub trans_first: bool,
    pub trans_second: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Which of the row-major operands comes first: cuBLAS gets `B` then `A`.
    pub ld_first: usize,
    pub ld_second: usize,
    pub ldc: usize,
    pub stride_first: usize,
    pub stride_second: usize,
    pub stride_c: usize,
}

impl Gemm {
    /// A row-major `C [m, n]` is the column-major `C^T [n, m] = op(B)^T op(A)^T`, so cuBLAS
    /// multiplies B by A, with each transpose flag kept and the leading dims of the row-major
    /// storage: no copy of either operand.
    pub fn to_column_major(&self) -> ColumnMajorGemm {
        ColumnMajorGemm {
            trans_first: self.trans_b,
            trans_second: self.trans_a,
            m: self.n,
            n: self.m,
            k: self.k,
            ld_first: if self.trans_b { self.k } else { self.n },
            ld_second: if self.trans_a { self.m } else { self.k },
            ldc: self.n,
            stride_first: self.stride_b,
            stride_second: self.stride_a,
            stride_c: self.m * self.n,
        }
    }
}

/// One recorded piece of a step's work (see [`Engine::run_graph`]), holding its buffers so that
/// a tensor dropped before the step runs stays alive until it has.
#[derive(Debug, Clone)]
pub enum Step {
    Launch {
        kernel: Kernel,
        grid: Grid,
        params: Params,
        inputs: Vec<Arc<dyn Mem>>,
        outputs: Vec<Arc<dyn Mem>>,
    },
    Gemm {
        gemm: Gemm,
        a: Arc<dyn Mem>,
        b: Arc<dyn Mem>,
        c: Arc<dyn Mem>,
    },
}

/// What identifies a step's graph: each node's kernel, or a GEMM's shape (cuBLAS may pick
/// other kernels for another shape). Grids, parameters and pointers are not in it: an
/// instantiated graph takes new ones by an update, as a decode token's position and fresh
/// buffers need.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Node {
    Kernel(Kernel),
    Gemm {
        inputs: GemmInputs,
        mnk: (usize, usize, usize),
        trans: (bool, bool),
        batch: usize,
        accumulate: bool,
    },
}

impl Step {
    pub fn node(&self) -> Node {
        match self {
            Step::Launch { kernel, .. } => Node::Kernel(*kernel),
            Step::Gemm { gemm: g, .. } => Node::Gemm {
                inputs: g.inputs,
                mnk: (g.m, g.n, g.k),
                trans: (g.trans_a, g.trans_b),
                batch: g.batch,
                accumulate: g.accumulate,
            },
        }
    }

    /// Runs the step directly (no graph).
    pub fn run(&self, engine: &(impl Engine + ?Sized)) -> Result<()> {
        match self {
            Step::Launch {
                kernel,
                grid,
                params,
                inputs,
                outputs,
            } => {
                let ins: Vec<&dyn Mem> = inputs.iter().map(|m| m.as_ref()).collect();
                let outs: Vec<&dyn Mem> = outputs.iter().map(|m| m.as_ref()).collect();
                engine.launch(*kernel, *grid, params, &ins, &outs)
            }
            Step::Gemm { gemm, a, b, c } => engine.gemm(gemm, a.as_ref(), b.as_ref(), c.as_ref()),
        }
    }
}

/// How [`Engine::run_graph`] ran a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphRun {
    /// A graph of this shape was captured and instantiated, then launched.
    Instantiated,
    /// The graph of this shape took the step's grids, parameters and pointers, then launched.
    Updated,
    /// No graph: each launch and GEMM was issued on its own (the engine has no graphs, or
    /// capturing failed and graphs are off from then on).
    Direct,
}

/// A device the CUDA backend runs on.
pub trait Engine {
    /// e.g. `NVIDIA GeForce RTX 4090 (sm_89)`.
    fn describe(&self) -> String;
    /// Threads per block of the row kernels (a power of two, at most 256).
    fn row_threads(&self) -> u32;
    /// `words` zeroed 32-bit words.
    fn alloc_zeroed(&self, words: usize) -> Result<Box<dyn Mem>>;
    /// A copy of `words` on the device.
    fn upload(&self, words: &[u32]) -> Result<Box<dyn Mem>>;
    /// The first `words` words of `mem`, after all recorded work.
    fn download(&self, mem: &dyn Mem, words: usize) -> Result<Vec<u32>>;
    /// Launches `kernel`; unused inputs and outputs are passed as null.
    fn launch(
        &self,
        kernel: Kernel,
        grid: Grid,
        params: &Params,
        inputs: &[&dyn Mem],
        outputs: &[&dyn Mem],
    ) -> Result<()>;
    /// `c = op(a) op(b)` (see [`Gemm`]): SGEMM, or a 16-bit GEMM with f32 output and sums.
    fn gemm(&self, gemm: &Gemm, a: &dyn Mem, b: &dyn Mem, c: &dyn Mem) -> Result<()>;
    /// Waits for all recorded work.
    fn synchronize(&self) -> Result<()>;
    /// Makes `kernel` ready to launch (compiles its family), so that a launch recorded for a
    /// graph reports such errors when it is recorded.
    fn prepare(&self, _kernel: Kernel) -> Result<()> {
        Ok(())
    }
    /// Runs `steps` in order as one graph: the graph of their [`Node`]s is instantiated once
    /// and updated with each run's grids, parameters and pointers, then launched once. The
    /// default issues each step on its own.
    fn run_graph(&self, steps: &[Step]) -> Result<GraphRun> {
        for s in steps {
            s.run(self)?;
        }
        Ok(GraphRun::Direct)
    }
    /// The address kernels see for `mem` (what a launch's `Params::shift` holds).
    fn address(&self, mem: &dyn Mem) -> Result<u64>;
    /// Writes `words` at the start of `mem`, ordered after the work recorded so far.
    fn write(&self, mem: &dyn Mem, words: &[u32]) -> Result<()>;
    /// Captures `steps` as replay graph `id` (replacing one of that id), instantiates it and
    /// launches it once. Their buffers must stay alive while the graph is kept (the caller
    /// holds the steps).
    fn replay_capture(&self, id: u64, steps: &[Step]) -> Result<()>;
    /// Launches replay graph `id` as instantiated: no parameter is rebuilt or updated.
    fn replay_launch(&self, id: u64) -> Result<()>;
    /// Forgets replay graph `id`.
    fn replay_drop(&self, id: u64);
}
