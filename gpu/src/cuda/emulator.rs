//! A CPU stand-in for the CUDA device (tests, and `CudaBackend::emulated` with the
//! `cuda-emulator` feature), so the CUDA C kernels run on a machine
//! without an NVIDIA GPU: each family is compiled by the host C++ compiler (through
//! `host_shim.hpp`) into a shared library whose `emu_run` (`host_runtime.hpp`) runs a kernel over
//! the whole grid, blocks one after another, the threads of a cooperative block as fibers that
//! switch at `__syncthreads`. cuBLAS is replaced by a host GEMM with cuBLAS's column-major,
//! strided-batched semantics (f32, or 16-bit inputs widened exactly), called with the very
//! arguments the driver passes cuBLAS, so the row-major mapping ([`Gemm::to_column_major`]) is
//! tested too.
//!
//! The engine sits behind the real launchers ([`super::launch`]): shape checks, parameter
//! blocks and grids are the ones a device gets.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use kernels_core::{Error, Result};

use super::engine::{Engine, Gemm, GemmInputs, GraphRun, Grid, Kernel, Mem, Node, Params, Step};
use super::kernels::{Family, host};

/// Host memory; atomics so that kernels may write through the shared pointers the launch hands
/// out (the same buffer can be bound twice, as on the device).
#[derive(Debug)]
struct HostMem(Box<[AtomicU32]>);

impl Mem for HostMem {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl HostMem {
    fn new(words: Vec<u32>) -> Self {
        let raw = Box::into_raw(words.into_boxed_slice());
        // SAFETY: `AtomicU32` has the size, alignment and bit validity of `u32`; the box is
        // reassembled with the layout it was allocated with.
        HostMem(unsafe { Box::from_raw(raw as *mut [AtomicU32]) })
    }
    fn ptr(&self) -> *mut f32 {
        self.0.as_ptr() as *mut f32
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

fn err(why: impl std::fmt::Display) -> Error {
    Error::Backend {
        backend: "cuda-emulator".into(),
        why: why.to_string(),
    }
}

fn host_mem<'a>(m: &'a dyn Mem, what: &str) -> Result<&'a HostMem> {
    m.as_any()
        .downcast_ref::<HostMem>()
        .ok_or_else(|| err(format!("{what}: buffer of another engine")))
}

type Kern = unsafe extern "C" fn(
    Params,
    *const f32,
    *const f32,
    *const f32,
    *const f32,
    *mut f32,
    *mut f32,
    *mut f32,
);
type EmuRun = unsafe extern "C" fn(
    Kern,
    u32,
    u32,
    i32,
    *const Params,
    *const *const f32,
    *const *mut f32,
) -> i32;

/// The families compiled into shared libraries, once per test process.
struct Libraries {
    libs: HashMap<Family, Loaded>,
}

/// One family's library and its `emu_run`, looked up once when it is loaded (a lookup per
/// launch failed now and then, "dlsym failed", in a CI run).
struct Loaded {
    lib: libloading::Library,
    run: EmuRun,
}

/// Why not, when there is no C++ compiler or a family does not build (built once per process;
/// a failure is remembered).
fn libraries() -> Result<&'static Libraries> {
    static LIBS: OnceLock<std::result::Result<Libraries, String>> = OnceLock::new();
    LIBS.get_or_init(build_libraries).as_ref().map_err(err)
}

fn build_libraries() -> std::result::Result<Libraries, String> {
    let cc = host::find_compiler()?;
    let dir =
        host::try_scratch("emulator").map_err(|e| format!("creating a scratch directory: {e}"))?;
    // Compiled in parallel: the families are independent translation units.
    let built: Vec<(Family, std::result::Result<PathBuf, String>)> = std::thread::scope(|s| {
        let jobs: Vec<_> = Family::cuda_families()
            .map(|f| {
                let (cc, dir) = (&cc, &dir);
                let job = s.spawn(move || {
                    let so = dir.join(format!("lib{}.so", f.name()));
                    let so_arg = so.to_string_lossy().into_owned();
                    host::compile(cc, f, dir, &["-shared", "-O1", "-o", &so_arg]).map(|()| so)
                });
                (f, job)
            })
            .collect();
        jobs.into_iter()
            .map(|(f, j)| {
                let r = j
                    .join()
                    .unwrap_or_else(|_| Err("the compiler thread panicked".into()));
                (f, r)
            })
            .collect()
    });
    let libs = built
        .into_iter()
        .map(|(f, r)| {
            let so = r.map_err(|e| format!("{}.cu does not build for the host:\n{e}", f.name()))?;
            // SAFETY: the library is ours, built just now; its initializers only set globals.
            let lib = unsafe { libloading::Library::new(&so) }
                .map_err(|e| format!("loading {}: {e}", so.display()))?;
            // SAFETY: `emu_run` has the runtime's signature (`EmuRun`); the pointer is used only
            // while `lib`, kept beside it in the static table, stays loaded.
            let run: EmuRun = unsafe {
                *lib.get::<EmuRun>(b"emu_run")
                    .map_err(|e| format!("{}: emu_run: {e}", so.display()))?
            };
            Ok((f, Loaded { lib, run }))
        })
        .collect::<std::result::Result<HashMap<_, _>, String>>();
    // Loaded libraries stay mapped once their files are gone: nothing is left in /tmp.
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Libraries { libs: libs? })
}

/// The emulator's state is global per library (built-in index variables, fibers): one launch
/// at a time in the whole process.
static LAUNCH: Mutex<()> = Mutex::new(());

/// The emulated device. Records which kernel entries ran, so a test can ask that all did.
pub(crate) struct EmulatedDevice {
    libs: &'static Libraries,
    row_threads: u32,
    launched: Mutex<BTreeSet<(&'static str, &'static str)>>,
    /// The graphs captured so far, by shape (as the driver keeps its instantiated ones), with
    /// how many times each was launched.
    graphs: Mutex<HashMap<Vec<Node>, u64>>,
    /// Replay graphs by id (`Engine::replay_capture`): their steps in order.
    replays: Mutex<HashMap<u64, Vec<Step>>>,
    /// Nanoseconds spent running kernels and GEMMs on the CPU: what a device would do, so that
    /// a measurement of the host's own cost can take it out.
    device_ns: AtomicU64,
    /// Set by a test: replay captures fail, as a driver that refuses stream capture does.
    refuse_captures: std::sync::atomic::AtomicBool,
}

/// Graphs kept at once; more shapes than this start the cache afresh (the driver's bound too).
pub(crate) const MAX_GRAPHS: usize = 16;

impl EmulatedDevice {
    /// Fails, saying why, without a host C++ compiler or when a family does not build.
    /// `row_threads`: threads per block of the row kernels (a power of two up to 256, as a
    /// device's launcher picks).
    pub(crate) fn new(row_threads: u32) -> Result<Self> {
        Ok(EmulatedDevice {
            libs: libraries()?,
            row_threads,
            launched: Mutex::new(BTreeSet::new()),
            graphs: Mutex::new(HashMap::new()),
            replays: Mutex::new(HashMap::new()),
            device_ns: AtomicU64::new(0),
            refuse_captures: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// From now on, replay captures fail (a driver that refuses stream capture).
    #[cfg(test)]
    pub(crate) fn refuse_captures(&self) {
        self.refuse_captures.store(true, Ordering::Relaxed);
    }

    /// Nanoseconds the emulated kernels and GEMMs have run so far.
    #[cfg(test)]
    pub(crate) fn device_ns(&self) -> u64 {
        self.device_ns.load(Ordering::Relaxed)
    }

    fn timed<R>(&self, f: impl FnOnce() -> R) -> R {
        let t = std::time::Instant::now();
        let r = f();
        let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.device_ns.fetch_add(ns, Ordering::Relaxed);
        r
    }

    /// The shapes of the graphs captured so far, each with how often it was launched.
    #[cfg(test)]
    pub(crate) fn graph_launches(&self) -> Vec<(usize, u64)> {
        let g = self.graphs.lock().unwrap_or_else(|p| p.into_inner());
        g.iter().map(|(shape, n)| (shape.len(), *n)).collect()
    }

    /// `(family, entry)` of every kernel launched so far.
    #[cfg(test)]
    pub(crate) fn launched(&self) -> BTreeSet<(&'static str, &'static str)> {
        self.launched.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Engine for EmulatedDevice {
    fn describe(&self) -> String {
        format!("host emulator, {} threads per row block", self.row_threads)
    }
    fn row_threads(&self) -> u32 {
        self.row_threads
    }
    fn alloc_zeroed(&self, words: usize) -> Result<Box<dyn Mem>> {
        Ok(Box::new(HostMem::new(vec![0; words.max(1)])))
    }
    fn upload(&self, words: &[u32]) -> Result<Box<dyn Mem>> {
        if words.is_empty() {
            return self.alloc_zeroed(1);
        }
        Ok(Box::new(HostMem::new(words.to_vec())))
    }
    fn download(&self, mem: &dyn Mem, words: usize) -> Result<Vec<u32>> {
        let m = host_mem(mem, "download")?;
        if words > m.len() {
            return Err(err(format!("download of {words} words from {}", m.len())));
        }
        // SAFETY: in bounds (checked above), and no launch runs while the backend downloads.
        Ok(unsafe { std::slice::from_raw_parts(m.0.as_ptr() as *const u32, words) }.to_vec())
    }
    fn launch(
        &self,
        kernel: Kernel,
        grid: Grid,
        params: &Params,
        inputs: &[&dyn Mem],
        outputs: &[&dyn Mem],
    ) -> Result<()> {
        if inputs.len() > 4 || outputs.len() > 3 {
            return Err(err(format!(
                "{}: {} inputs, {} outputs (at most 4 and 3)",
                kernel.entry,
                inputs.len(),
                outputs.len()
            )));
        }
        let loaded = self
            .libs
            .libs
            .get(&kernel.family)
            .ok_or_else(|| err(format!("no library for {}", kernel.family.name())))?;
        let lib = &loaded.lib;
        let mut ins = [std::ptr::null::<f32>(); 4];
        for (d, m) in ins.iter_mut().zip(inputs) {
            *d = host_mem(*m, kernel.entry)?.ptr();
        }
        let mut outs = [std::ptr::null_mut::<f32>(); 3];
        for (d, m) in outs.iter_mut().zip(outputs) {
            *d = host_mem(*m, kernel.entry)?.ptr();
        }
        let _one_at_a_time = LAUNCH.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: every KERNEL has the prelude's signature (`Kern`).
        let f: libloading::Symbol<Kern> = unsafe { lib.get(kernel.entry.as_bytes()) }
            .map_err(|e| err(format!("kernel {}: {e}", kernel.entry)))?;
        // SAFETY: `emu_run` has the runtime's signature; the pointers are live host buffers
        // sized by the launcher, as on the device.
        let status = self.timed(|| unsafe {
            (loaded.run)(
                *f,
                grid.blocks,
                grid.threads,
                i32::from(grid.cooperative),
                params,
                ins.as_ptr(),
                outs.as_ptr(),
            )
        });
        if status != 0 {
            return Err(err(format!(
                "{} called __syncthreads but was launched as non-cooperative",
                kernel.entry
            )));
        }
        if let Ok(mut s) = self.launched.lock() {
            s.insert((kernel.family.name(), kernel.entry));
        }
        Ok(())
    }
    fn gemm(&self, g: &Gemm, a: &dyn Mem, b: &dyn Mem, c: &dyn Mem) -> Result<()> {
        let (a, b, c) = (
            host_mem(a, "gemm")?,
            host_mem(b, "gemm")?,
            host_mem(c, "gemm")?,
        );
        self.timed(|| host_gemm(g, a, b, c))
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    /// The emulated graph: the step's launches and GEMMs were recorded by the backend while
    /// the step was captured; launching replays them in the order recorded, with the grids,
    /// parameters and buffers of this step (what an updated graph holds on the device).
    fn run_graph(&self, steps: &[Step]) -> Result<GraphRun> {
        let shape: Vec<Node> = steps.iter().map(Step::node).collect();
        let new = {
            let mut g = self.graphs.lock().unwrap_or_else(|p| p.into_inner());
            let new = !g.contains_key(&shape);
            if new && g.len() >= MAX_GRAPHS {
                g.clear();
            }
            *g.entry(shape).or_insert(0) += 1;
            new
        };
        for s in steps {
            s.run(self)?;
        }
        Ok(if new {
            GraphRun::Instantiated
        } else {
            GraphRun::Updated
        })
    }
    fn address(&self, mem: &dyn Mem) -> Result<u64> {
        Ok(host_mem(mem, "address")?.ptr() as u64)
    }
    fn write(&self, mem: &dyn Mem, words: &[u32]) -> Result<()> {
        let m = host_mem(mem, "write")?;
        if words.len() > m.len() {
            return Err(err(format!(
                "write of {} words to {}",
                words.len(),
                m.len()
            )));
        }
        for (d, w) in m.0.iter().zip(words) {
            d.store(*w, Ordering::Relaxed);
        }
        Ok(())
    }
    /// The emulated replay graph: its steps, kept in order, run again at each launch with the
    /// parameters they were captured with; the kernels read the position shift from the
    /// device word their `Params::shift` points to, as on the device.
    fn replay_capture(&self, id: u64, steps: &[Step]) -> Result<()> {
        if self.refuse_captures.load(Ordering::Relaxed) {
            return Err(err(
                "beginning a graph capture: refused (the emulator stands in for a driver that refuses)",
            ));
        }
        {
            let mut r = self.replays.lock().unwrap_or_else(|p| p.into_inner());
            r.insert(id, steps.to_vec());
        }
        self.replay_launch(id)
    }
    fn replay_launch(&self, id: u64) -> Result<()> {
        let r = self.replays.lock().unwrap_or_else(|p| p.into_inner());
        let steps = r
            .get(&id)
            .ok_or_else(|| err(format!("no replay graph {id}")))?;
        // The whole relaunch is the device's work (the graph runs there; the host only launches
        // it): the emulator's own cost per node counts as device time too, not only the
        // kernels' (as `timed` counts them), so a measurement of the host leaves it out.
        let before = self.device_ns.load(Ordering::Relaxed);
        let started = std::time::Instant::now();
        let ran = steps.iter().try_for_each(|s| s.run(self));
        let total = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let kernels = self
            .device_ns
            .load(Ordering::Relaxed)
            .saturating_sub(before);
        self.device_ns
            .fetch_add(total.saturating_sub(kernels), Ordering::Relaxed);
        ran
    }
    fn replay_drop(&self, id: u64) {
        let mut r = self.replays.lock().unwrap_or_else(|p| p.into_inner());
        r.remove(&id);
    }
    fn prepare(&self, kernel: Kernel) -> Result<()> {
        let loaded = self
            .libs
            .libs
            .get(&kernel.family)
            .ok_or_else(|| err(format!("no library for {}", kernel.family.name())))?;
        // SAFETY: only looks the symbol up.
        unsafe { loaded.lib.get::<Kern>(kernel.entry.as_bytes()) }
            .map(|_| ())
            .map_err(|e| err(format!("kernel {}: {e}", kernel.entry)))
    }
}

/// What the driver's cuBLAS call computes, argument for argument (B first, then A).
fn host_gemm(g: &Gemm, a: &HostMem, b: &HostMem, c: &HostMem) -> Result<()> {
    let cm = g.to_column_major();
    column_major_gemm(
        g.inputs,
        (cm.trans_first, cm.trans_second),
        (cm.m, cm.n, cm.k),
        (&b.0, g.offset_b, cm.ld_first, cm.stride_first),
        (&a.0, g.offset_a, cm.ld_second, cm.stride_second),
        (&c.0, g.offset_c, cm.ldc, cm.stride_c),
        (g.batch, g.accumulate),
    )
}

type Operand<'a> = (&'a [AtomicU32], usize, usize, usize);

/// Element `i` of a GEMM operand: an f32 word, or a 16-bit float in the low (even `i`) or high
/// half of word `i / 2`, widened exactly.
fn element(buf: &[AtomicU32], inputs: GemmInputs, i: usize, what: &str) -> Result<f32> {
    let word = |w: usize| {
        buf.get(w)
            .map(|x| x.load(Ordering::Relaxed))
            .ok_or_else(|| err(format!("gemm reads {what}[{i}] of {} words", buf.len())))
    };
    Ok(match inputs {
        GemmInputs::F32 => f32::from_bits(word(i)?),
        GemmInputs::F16 | GemmInputs::BF16 => {
            let bits = (word(i / 2)? >> (16 * (i % 2))) & 0xffff;
            if inputs == GemmInputs::F16 {
                kernels_core::quant::decode::f16_to_f32(bits as u16)
            } else {
                f32::from_bits(bits << 16)
            }
        }
    })
}

/// cuBLAS `sgemm_strided_batched` (`F32` inputs), or `gemmStridedBatchedEx` with 16-bit `A`
/// and `B`, f32 `C` and f32 sums, with alpha 1 and beta 0 (or 1, `accumulate`): for each batch
/// `i`, `C_i = op(A_i) op(B_i)` (`+ C_i`) in column-major storage, `C_i [m, n]` with leading dimension `ldc`;
/// `op(A_i)` is `[m, k]` (stored `[m, k]` with `lda`, or `[k, m]` when transposed). Every
/// element read or written is bounds-checked: an error, never an out-of-range access.
fn column_major_gemm(
    inputs: GemmInputs,
    (trans_a, trans_b): (bool, bool),
    (m, n, k): (usize, usize, usize),
    (a, off_a, lda, stride_a): Operand<'_>,
    (b, off_b, ldb, stride_b): Operand<'_>,
    (c, off_c, ldc, stride_c): Operand<'_>,
    (batch, accumulate): (usize, bool),
) -> Result<()> {
    let get = |buf: &[AtomicU32], i: usize, what: &str| element(buf, inputs, i, what);
    for bi in 0..batch {
        let (ba, bb, bc) = (
            off_a + bi * stride_a,
            off_b + bi * stride_b,
            off_c + bi * stride_c,
        );
        for j in 0..n {
            for i in 0..m {
                let mut acc = 0.0f64;
                for p in 0..k {
                    let ai = if trans_a { p + i * lda } else { i + p * lda };
                    let bj = if trans_b { j + p * ldb } else { p + j * ldb };
                    acc += f64::from(get(a, ba + ai, "A")?) * f64::from(get(b, bb + bj, "B")?);
                }
                let ci = bc + i + j * ldc;
                let cell = c
                    .get(ci)
                    .ok_or_else(|| err(format!("gemm writes C[{ci}] of {}", c.len())))?;
                let v = if accumulate {
                    f32::from_bits(cell.load(Ordering::Relaxed)) + acc as f32
                } else {
                    acc as f32
                };
                cell.store(v.to_bits(), Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use kernels_core::op::Direction;
    use kernels_core::parity::Case;
    use kernels_core::{Op, OpKind, Rng, parity};

    use kernels_core::{Backend, DType, Tensor};

    use super::*;
    use crate::cuda::{CudaBackend, half_product_budget};
    use crate::parity::{check_all, check_under, failures};

    #[test]
    fn column_major_gemm_matches_a_row_major_product_through_the_mapping() {
        // Row-major a [2, 3] (stored transposed when trans_a) times b [3, 2].
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0];
        let want = [58.0f32, 64.0, 139.0, 154.0];
        let words = |v: &[f32]| -> Box<[AtomicU32]> {
            v.iter().map(|x| AtomicU32::new(x.to_bits())).collect()
        };
        let at = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
        for (trans_a, a_store) in [(false, &a), (true, &at)] {
            let (ma, mb) = (HostMem(words(a_store)), HostMem(words(&b)));
            let mc = HostMem(words(&[0.0; 4]));
            let g = Gemm {
                inputs: GemmInputs::F32,
                m: 2,
                n: 2,
                k: 3,
                trans_a,
                trans_b: false,
                batch: 1,
                stride_a: 0,
                stride_b: 0,
                offset_a: 0,
                offset_b: 0,
                offset_c: 0,
                accumulate: false,
            };
            host_gemm(&g, &ma, &mb, &mc).unwrap();
            let got: Vec<f32> =
                mc.0.iter()
                    .map(|w| f32::from_bits(w.load(Ordering::Relaxed)))
                    .collect();
            assert_eq!(got, want, "trans_a={trans_a}");
        }
    }

    #[test]
    fn to_half_rounds_as_the_reference_encoders() {
        let Some((be, _)) = emulated(64) else {
            return;
        };
        // Ties, the edges of f16's range (65504, 65520 rounds up to infinity), subnormals and
        // the tie below the smallest one, infinities, NaN with a payload, then random values
        // over every exponent.
        let mut v = vec![
            0.0f32,
            -0.0,
            1.0,
            1.0 + 1.0 / 2048.0,
            1.0 + 3.0 / 2048.0,
            65504.0,
            65519.996,
            65520.0,
            -1e10,
            6.103_515_6e-5,
            5.960_464_5e-8,
            2.980_232_2e-8,
            2.980_233e-8,
            1e-30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::from_bits(0x7fa0_1234),
            f32::from_bits(0xff80_0001),
        ];
        let mut rng = Rng::new(0x4A1F);
        for _ in 0..2000 {
            let bits = (rng.next_u64() as u32) & 0xbfff_ffff | ((rng.below(2) as u32) << 30);
            v.push(f32::from_bits(bits));
        }
        let n = v.len();
        let x = be
            .upload(&Tensor::from_f32(&[n], v.clone()).unwrap())
            .unwrap();
        for dtype in [DType::F16, DType::BF16] {
            let h = be.half_operand("to_half", &x, dtype).unwrap();
            let got = be.download_blocking(&h).unwrap();
            let want = kernels_core::quant::quantize(dtype, &v).unwrap();
            let got = got.packed_bytes().unwrap();
            let diff: Vec<(f32, u16, u16)> = (0..n)
                .filter(|&i| got[2 * i..2 * i + 2] != want[2 * i..2 * i + 2])
                .map(|i| {
                    let h = |b: &[u8]| u16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
                    (v[i], h(got), h(&want))
                })
                .take(8)
                .collect();
            assert!(diff.is_empty(), "{dtype}: (value, got, want) {diff:?}");
        }
        // A packed source is decoded as `dequantize` does, then rounded to f16.
        let w: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) * 0.37).collect();
        for dtype in [DType::Q8_0, DType::Q4_K, DType::BF16] {
            let n = if dtype == DType::Q4_K { 256 } else { 64 };
            let vals: Vec<f32> = w.iter().cycle().take(n).copied().collect();
            let packed = kernels_core::quant::quantize(dtype, &vals).unwrap();
            let host = Tensor::from_raw(&[n], dtype, packed.clone()).unwrap();
            let h = be.half_operand("to_half", &be.upload(&host).unwrap(), DType::F16);
            let got = be.download_blocking(&h.unwrap()).unwrap();
            let decoded = kernels_core::quant::dequantize(dtype, &packed, n).unwrap();
            let want = kernels_core::quant::quantize(DType::F16, &decoded).unwrap();
            assert_eq!(got.packed_bytes().unwrap(), &want[..], "{dtype}");
        }
    }

    /// CUDA's half products (a second backend on `dev`, with them on) on every weight parity
    /// case of the product ops, forward, under [`half_product_budget`]: the failures. Checks
    /// that 16-bit GEMMs ran and prints the largest error.
    fn half_product_failures(dev: &'static EmulatedDevice) -> Vec<String> {
        let be = CudaBackend::with_engine(Box::new(Shared(dev))).with_half_products(true);
        let reference = kernels_core::CpuBackend::reference();
        let (mut bad, mut rows, mut used) = (Vec::new(), 0, 0.0f64);
        for kind in [OpKind::Matmul, OpKind::MatmulAdd, OpKind::Linear] {
            for case in parity::cases(kind, 7).unwrap() {
                let Some(w) = case
                    .inputs
                    .iter()
                    .map(|t| t.dtype())
                    .find(|d| d.is_weight())
                else {
                    continue;
                };
                // An f32 activation against the case's weight.
                let budget = half_product_budget(DType::F32, w);
                let row = check_under(&case, Direction::Forward, &be, &reference, budget);
                rows += 1;
                for o in &row.outputs {
                    let c = o.comparison;
                    used = used.max(c.max_abs_err);
                }
                bad.extend(row.failure());
            }
        }
        eprintln!("half products: {rows} weight cases, largest abs error {used:.3e}");
        assert!(rows > 30, "{rows} weight cases");
        assert!(be.counters().half_gemms > 0, "{:?}", be.counters());
        bad
    }

    /// `None` after a skip line without a host C++ compiler (outside CI; in CI a failure).
    fn emulated(row_threads: u32) -> Option<(CudaBackend, &'static EmulatedDevice)> {
        host::compiler()?;
        let dev = EmulatedDevice::new(row_threads).unwrap_or_else(|e| panic!("{e}"));
        let dev: &'static EmulatedDevice = Box::leak(Box::new(dev));
        Some((CudaBackend::with_engine(Box::new(Shared(dev))), dev))
    }

    /// Lets the test keep a handle on the engine the backend owns.
    pub(crate) struct Shared(pub(crate) &'static EmulatedDevice);

    impl Engine for Shared {
        fn describe(&self) -> String {
            self.0.describe()
        }
        fn row_threads(&self) -> u32 {
            self.0.row_threads()
        }
        fn alloc_zeroed(&self, words: usize) -> Result<Box<dyn Mem>> {
            self.0.alloc_zeroed(words)
        }
        fn upload(&self, words: &[u32]) -> Result<Box<dyn Mem>> {
            self.0.upload(words)
        }
        fn download(&self, mem: &dyn Mem, words: usize) -> Result<Vec<u32>> {
            self.0.download(mem, words)
        }
        fn launch(
            &self,
            kernel: Kernel,
            grid: Grid,
            params: &Params,
            inputs: &[&dyn Mem],
            outputs: &[&dyn Mem],
        ) -> Result<()> {
            self.0.launch(kernel, grid, params, inputs, outputs)
        }
        fn gemm(&self, gemm: &Gemm, a: &dyn Mem, b: &dyn Mem, c: &dyn Mem) -> Result<()> {
            self.0.gemm(gemm, a, b, c)
        }
        fn synchronize(&self) -> Result<()> {
            self.0.synchronize()
        }
        fn run_graph(&self, steps: &[Step]) -> Result<GraphRun> {
            self.0.run_graph(steps)
        }
        fn prepare(&self, kernel: Kernel) -> Result<()> {
            self.0.prepare(kernel)
        }
        fn address(&self, mem: &dyn Mem) -> Result<u64> {
            self.0.address(mem)
        }
        fn write(&self, mem: &dyn Mem, words: &[u32]) -> Result<()> {
            self.0.write(mem, words)
        }
        fn replay_capture(&self, id: u64, steps: &[Step]) -> Result<()> {
            self.0.replay_capture(id, steps)
        }
        fn replay_launch(&self, id: u64) -> Result<()> {
            self.0.replay_launch(id)
        }
        fn replay_drop(&self, id: u64) {
            self.0.replay_drop(id)
        }
    }

    /// Paths of the CUDA launchers the shared cases do not reach: mse over several
    /// partial-sum chunks (then `sum_scale` over more than one partial), and causal attention
    /// with more query rows than keys (rows that see no key) and `dv != d`.
    fn launch_edges() -> Vec<Case> {
        let mut rng = Rng::new(0xC0DA);
        let mut f = |shape: &[usize]| rng.normal_tensor(shape, 0.0, 1.0).unwrap();
        let case = |op, inputs| Case {
            op,
            inputs,
            large: false,
        };
        let mse = [3, 4099];
        vec![
            case(Op::Mse, vec![f(&mse), f(&mse)]),
            case(
                Op::Attention {
                    causal: true,
                    scale: None,
                    kv_len: 0,
                    window: 0,
                },
                vec![f(&[1, 2, 6, 4]), f(&[1, 1, 3, 4]), f(&[1, 1, 3, 5])],
            ),
        ]
    }

    #[test]
    fn an_unknown_code_gives_nan_on_the_emulated_device() {
        let Some((be, _)) = emulated(64) else {
            return;
        };
        crate::contract::unknown_code::assert_nan(&be, &be);
    }

    #[test]
    fn emulated_cuda_kernels_match_the_cpu_reference_on_every_op() {
        let Some((be, dev)) = emulated(256) else {
            return;
        };
        let mut cases = Vec::new();
        for kind in OpKind::ALL {
            cases.extend(parity::cases(*kind, 7).unwrap());
        }
        cases.extend(launch_edges());
        let rows = check_all(&cases, &be);
        let ran = |k: &OpKind, d: Direction| {
            rows.iter()
                .any(|r| r.kind == k.name() && r.dir == d && r.error.is_none())
        };
        let missing: Vec<String> = OpKind::ALL
            .iter()
            .flat_map(|k| {
                let mut m = Vec::new();
                if !ran(k, Direction::Forward) {
                    m.push(format!("{k} forward"));
                }
                if k.spec().differentiable() && !ran(k, Direction::Backward) {
                    m.push(format!("{k} backward"));
                }
                m
            })
            .collect();
        let bad = failures(&rows);
        assert!(
            missing.is_empty() && bad.is_empty(),
            "ops that did not run: {missing:?}\n{} failures:\n{}",
            bad.len(),
            bad.join("\n")
        );
        // kv_write into a donated cache: the in-place kernel.
        assert!(crate::testing::check_kv_write_donation("emulated cuda", &be) > 0);
        // rope_kv_write into its two donated caches: one launch, in place.
        assert!(crate::testing::check_rope_kv_write_donation("emulated cuda", &be) > 0);
        // matmul_add into a donated residual: cuBLAS with beta = 1, matvec's accumulate.
        assert!(crate::testing::check_matmul_add_donation("emulated cuda", &be) > 0);
        // The same weight cases with half products on (`to_half`, cublasGemmEx's semantics).
        let bad = half_product_failures(dev);
        assert!(bad.is_empty(), "half products:\n{}", bad.join("\n"));
        // Every KERNEL of every family ran under the real launchers.
        let launched = dev.launched();
        let never: Vec<String> = Family::cuda_families()
            .flat_map(|f| f.cuda_entries().into_iter().map(move |e| (f.name(), e)))
            .filter(|fe| !launched.contains(fe))
            .map(|(f, e)| format!("{f}.cu {e}"))
            .collect();
        assert!(never.is_empty(), "kernels never launched: {never:?}");
    }
}
