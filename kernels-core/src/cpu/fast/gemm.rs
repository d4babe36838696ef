//! Blocked single-precision GEMM: the GotoBLAS / BLIS loop nest over strided operands.
//!
//! ```text
//! for jc in 0..n step NC          B block  [KC x NC] packed into B~ (lives in L3)
//!   for pc in 0..k step KC
//!     pack B~
//!     for ic in 0..m step MC      A block  [MC x KC] packed into A~ (lives in L2)
//!       pack A~
//!       for jr in 0..NC step NR   B~ micro-panel [KC x NR] (stays in L1)
//!         for ir in 0..MC step MR
//!           micro-kernel: C[MR x NR] += A~ micro-panel . B~ micro-panel (registers)
//! ```
//!
//! Operands are strided views ([`MatRef`]), so a transpose is a swap of strides and is absorbed
//! by the packing: no transposed copy is ever made.

use alloc::format;
use alloc::vec::Vec;

use super::config;
pub use super::kernel_family::{Epilogue, Kernel};
use super::kernels::MicroKernel;
pub use super::matref::{HalfRef, MatRef};
use super::{pool, skinny};
use crate::error::{Error, Result};

const NAME: &str = "matmul";

/// Multiply-adds below which a blocked GEMM stays on one thread (2^23: about 150 us of work; a
/// thread costs tens of microseconds to start, more on a busy machine).
#[cfg(feature = "threads")]
const MIN_THREAD_WORK: usize = 1 << 23;

/// Packing buffers of one thread.
#[derive(Debug, Default)]
struct Buffers {
    a: Vec<f32>,
    b: Vec<f32>,
}

/// A GEMM runner: a kernel, a thread count and packing buffers, reused across calls (e.g.
/// over a batch).
#[derive(Debug)]
pub struct Gemm {
    kernel: Kernel,
    threads: usize,
    bufs: Vec<Buffers>,
}

impl Gemm {
    /// A runner on `kernel` with the configured thread count ([`config::threads`]).
    pub fn new(kernel: Kernel) -> Self {
        Gemm {
            kernel,
            threads: config::threads(),
            bufs: kept::take(),
        }
    }

    /// The same runner limited to `threads` threads (at least 1; more than 1 only with the
    /// `threads` feature).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// `C += A . B` for `A [m x k]`, `B [k x n]` and `C [m x n]` stored row-major at row
    /// stride `ldc` in `c`. Accumulating (rather than overwriting) lets a caller sum products
    /// over a batch into one buffer.
    pub fn run(&mut self, a: MatRef, b: MatRef, c: &mut [f32], ldc: usize) -> Result<()> {
        self.run_with(a, b, c, ldc, &Epilogue::NONE)
    }

    /// `C = epi(C + A . B)`: [`Gemm::run`] followed by the epilogue on every output (fused into
    /// the write of the small-product path).
    pub fn run_with(
        &mut self,
        a: MatRef,
        b: MatRef,
        c: &mut [f32],
        ldc: usize,
        epi: &Epilogue,
    ) -> Result<()> {
        let (m, n) = (a.rows, b.cols);
        if !check(a, b, c, ldc)? {
            return Ok(());
        }
        if let Some(bias) = epi.bias
            && bias.len() < n
        {
            return Err(Error::mismatch(NAME, &[m, n], &[bias.len()]));
        }
        if a.cols > 0 {
            if self.bufs.is_empty() {
                self.bufs.push(Buffers::default());
            }
            if skinny::applies(a, b) {
                let Buffers { a: ab, b: bb } = &mut self.bufs[0];
                return skinny::run(self.kernel, self.threads, a, b, c, ldc, epi, ab, bb);
            }
            self.blocked(a, b, c, ldc)?;
        }
        if !epi.is_none() {
            for row in c.chunks_mut(ldc).take(m) {
                for (j, x) in row.iter_mut().take(n).enumerate() {
                    *x = epi.apply(*x, j);
                }
            }
        }
        Ok(())
    }

    /// [`Gemm::run`] on the blocked loop nest only (never the small-product path), so every
    /// output is the same dot product whatever the shape around it: a caller that cuts a
    /// product into parts of any size gets the bits of the whole.
    pub fn run_blocked(&mut self, a: MatRef, b: MatRef, c: &mut [f32], ldc: usize) -> Result<()> {
        if !check(a, b, c, ldc)? || a.cols == 0 {
            return Ok(());
        }
        if self.bufs.is_empty() {
            self.bufs.push(Buffers::default());
        }
        self.blocked(a, b, c, ldc)
    }

    /// [`Gemm::run_blocked`] with `B` packed beforehand ([`PackedB`]): the same loop nest, the
    /// same bits, without packing `B` again. For products that share `B` (prefill's weight
    /// panels, each against the same `x^T`). Single-threaded: a caller splits the rows.
    pub fn run_blocked_packed(
        &mut self,
        a: MatRef,
        b: &PackedB,
        c: &mut [f32],
        ldc: usize,
    ) -> Result<()> {
        self.run_packed_left(Left::F32(a), b, c, ldc)
    }

    /// [`Gemm::run_blocked_packed`] with a 16-bit `A` (`f16` or `bf16`), widened as it is
    /// packed: the same packed values as `A` widened to f32 first, so the same bits.
    pub fn run_blocked_packed_half(
        &mut self,
        a: HalfRef,
        b: &PackedB,
        c: &mut [f32],
        ldc: usize,
    ) -> Result<()> {
        self.run_packed_left(Left::Half(a), b, c, ldc)
    }

    fn run_packed_left(&mut self, a: Left, b: &PackedB, c: &mut [f32], ldc: usize) -> Result<()> {
        let (rows, cols) = (a.rows(), a.cols());
        if b.kernel.name() != self.kernel.name() || cols != b.k {
            return Err(Error::mismatch(NAME, &[rows, cols], &[b.k, b.n]));
        }
        let need = rows
            .checked_sub(1)
            .and_then(|m| m.checked_mul(ldc))
            .and_then(|x| x.checked_add(b.n));
        if rows == 0 || b.n == 0 || cols == 0 {
            return Ok(());
        }
        if ldc < b.n || need.is_none_or(|need| c.len() < need) {
            return Err(Error::mismatch(NAME, &[rows, b.n], &[c.len()]));
        }
        if self.bufs.is_empty() {
            self.bufs.push(Buffers::default());
        }
        let a_buf = &mut self.bufs[0].a;
        match self.kernel {
            Kernel::Portable(k) => drive_packed(k, a, b, c, ldc, a_buf),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2Fma(k) => drive_packed(k, a, b, c, ldc, a_buf),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512(k) => drive_packed(k, a, b, c, ldc, a_buf),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Kernel::Simd128(k) => drive_packed(k, a, b, c, ldc, a_buf),
        }
    }

    /// The blocked GEMM, its rows split over threads when the product is large enough.
    fn blocked(&mut self, a: MatRef, b: MatRef, c: &mut [f32], ldc: usize) -> Result<()> {
        let kernel = self.kernel;
        let parts = self.parts(a.rows, a.cols, b.cols);
        while self.bufs.len() < parts {
            self.bufs.push(Buffers::default());
        }
        if parts <= 1 {
            return drive_any(kernel, a, b, c, ldc, &mut self.bufs[0]);
        }
        self.threaded(parts, a, b, c, ldc)
    }

    /// How many row blocks (threads) a `m x k x n` product is split into.
    fn parts(&self, m: usize, k: usize, n: usize) -> usize {
        #[cfg(feature = "threads")]
        if self.threads > 1 && m.saturating_mul(k).saturating_mul(n) >= MIN_THREAD_WORK {
            // At least 32 rows each, so every thread's share of packing B stays small.
            return self.threads.min(m / 32).max(1);
        }
        let _ = (m, k, n);
        1
    }

    /// The rows in `parts` blocks of whole tiles on the thread pool, each block with its own
    /// packing buffers.
    fn threaded(
        &mut self,
        parts: usize,
        a: MatRef,
        b: MatRef,
        c: &mut [f32],
        ldc: usize,
    ) -> Result<()> {
        let (kernel, m, n) = (self.kernel, a.rows, b.cols);
        // Row blocks on multiples of 24 (every kernel's MR divides it): whole tiles. One range
        // per block: `parts` grains of `rows` rows.
        let rows = m.div_ceil(parts).div_ceil(24) * 24;
        let have = c.len();
        let c = c
            .get_mut(..(m - 1) * ldc + n)
            .ok_or_else(|| Error::mismatch(NAME, &[m, n], &[have]))?;
        let count = pool::ranges(self.threads, m, rows).count();
        while self.bufs.len() < count {
            self.bufs.push(Buffers::default());
        }
        pool::for_slices_scratch_on(self.threads, c, ldc, rows, &mut self.bufs, &|r, ci, buf| {
            let ai = a
                .row_range(r.start, r.end)
                .ok_or_else(|| Error::mismatch(NAME, &[r.start, r.end], &[m]))?;
            drive_any(kernel, ai, b, ci, ldc, buf)
        })
    }
}

/// Checks `C [m x n] (+)= A . B` at row stride `ldc` in `c`: `Ok(false)` for an empty output.
fn check(a: MatRef, b: MatRef, c: &[f32], ldc: usize) -> Result<bool> {
    let (m, n) = (a.rows, b.cols);
    if a.cols != b.rows {
        return Err(Error::mismatch(NAME, &[a.rows, a.cols], &[b.rows, b.cols]));
    }
    if m == 0 || n == 0 {
        return Ok(false);
    }
    let need = (m - 1).checked_mul(ldc).and_then(|x| x.checked_add(n));
    if ldc < n || need.is_none_or(|need| c.len() < need) {
        return Err(Error::bad_shape(
            NAME,
            "out",
            &[m, n],
            format!("row stride {ldc} over {} values is too small", c.len()),
        ));
    }
    Ok(true)
}

/// [`drive`] on `kernel`.
fn drive_any(
    kernel: Kernel,
    a: MatRef,
    b: MatRef,
    c: &mut [f32],
    ldc: usize,
    buf: &mut Buffers,
) -> Result<()> {
    let (ap, bp) = (&mut buf.a, &mut buf.b);
    match kernel {
        Kernel::Portable(k) => drive(k, a, b, c, ldc, ap, bp),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2Fma(k) => drive(k, a, b, c, ldc, ap, bp),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512(k) => drive(k, a, b, c, ldc, ap, bp),
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Kernel::Simd128(k) => drive(k, a, b, c, ldc, ap, bp),
    }
}

impl Drop for Gemm {
    fn drop(&mut self) {
        kept::put(&mut self.bufs);
    }
}

/// Packing and scratch buffers kept on a thread between runners (with `std`): the CPU backend
/// makes a runner per product, and decode makes about a hundred small products a token, each
/// of which allocated and zeroed its scratch anew (1% of a stories15M decode step on an Intel
/// Xeon, `perf`). A runner takes this thread's buffers when it is made and gives back those of
/// its own thread's part when it drops, up to 32 MiB (a runner made while another
/// is alive on the thread starts empty).
mod kept {
    use super::Buffers;
    use alloc::vec::Vec;

    /// Buffers larger than this in all are not kept.
    #[cfg(feature = "std")]
    pub(super) const MAX_BYTES: usize = 32 << 20;

    #[cfg(feature = "std")]
    std::thread_local! {
        static KEPT: core::cell::Cell<Vec<Buffers>> = const { core::cell::Cell::new(Vec::new()) };
    }

    /// This thread's kept buffers (empty without `std`, or when a live runner holds them).
    pub(super) fn take() -> Vec<Buffers> {
        #[cfg(feature = "std")]
        return KEPT.take();
        #[cfg(not(feature = "std"))]
        Vec::new()
    }

    /// Keeps the first of `bufs` (the calling thread's part) for the next runner on this thread.
    pub(super) fn put(bufs: &mut Vec<Buffers>) {
        #[cfg(feature = "std")]
        {
            bufs.truncate(1);
            let bytes: usize = bufs
                .iter()
                .map(|b| (b.a.capacity() + b.b.capacity()) * core::mem::size_of::<f32>())
                .sum();
            if bytes <= MAX_BYTES {
                KEPT.set(core::mem::take(bufs));
            }
        }
        #[cfg(not(feature = "std"))]
        let _ = bufs;
    }
}

/// The loop nest of the module docs. Shapes are checked by [`Gemm::run`].
fn drive<K: MicroKernel>(
    kernel: K,
    a: MatRef,
    b: MatRef,
    c: &mut [f32],
    ldc: usize,
    a_buf: &mut Vec<f32>,
    b_buf: &mut Vec<f32>,
) -> Result<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let (mr, nr) = (K::MR, K::NR);
    let kc_max = K::KC.min(k);
    let a_pack = aligned(a_buf, K::MC.min(m.div_ceil(mr) * mr) * kc_max)?;
    let b_pack = aligned(b_buf, K::NC.min(n.div_ceil(nr) * nr) * kc_max)?;
    // B^T's rows are B's columns: packing B~ is packing B^T into row panels of NR.
    let bt = b.t();
    for jc in (0..n).step_by(K::NC) {
        let nc = K::NC.min(n - jc);
        for pc in (0..k).step_by(K::KC) {
            let kc = K::KC.min(k - pc);
            K::pack_b(b_pack, bt, jc, nc, pc, kc);
            block(
                kernel,
                Left::F32(a),
                a_pack,
                b_pack,
                (jc, nc),
                (pc, kc),
                c,
                ldc,
            );
        }
    }
    Ok(())
}

/// One `KC x NC` block of the loop nest, `B~` packed in `b_pack`: every `MC` block of `A` packed
/// in turn into `a_pack` and multiplied tile by tile into `C` (columns `jc..jc + nc`).
#[allow(clippy::too_many_arguments)]
#[inline]
fn block<K: MicroKernel>(
    kernel: K,
    a: Left,
    a_pack: &mut [f32],
    b_pack: &[f32],
    (jc, nc): (usize, usize),
    (pc, kc): (usize, usize),
    c: &mut [f32],
    ldc: usize,
) {
    let (m, mr, nr) = (a.rows(), K::MR, K::NR);
    for ic in (0..m).step_by(K::MC) {
        let mc = K::MC.min(m - ic);
        match a {
            Left::F32(a) => K::pack_a(a_pack, a, ic, mc, pc, kc),
            Left::Half(a) => K::pack_a_half(a_pack, a, ic, mc, pc, kc),
        }
        for (jp, jr) in (0..nc).step_by(nr).enumerate() {
            let b_panel = &b_pack[jp * nr * kc..(jp + 1) * nr * kc];
            let nr_here = nr.min(nc - jr);
            for (ip, ir) in (0..mc).step_by(mr).enumerate() {
                let a_panel = &a_pack[ip * mr * kc..(ip + 1) * mr * kc];
                let off = (ic + ir) * ldc + jc + jr;
                let c_tile = c.get_mut(off..).unwrap_or_default();
                kernel.tile(a_panel, b_panel, c_tile, ldc, mr.min(mc - ir), nr_here);
            }
        }
    }
}

/// The right operand `B [k x n]` of [`Gemm::run_blocked_packed`], packed once for one kernel:
/// every `KC x NC` block of `B~` in the loop nest's order, each on a 64-byte boundary.
#[derive(Debug)]
pub struct PackedB {
    kernel: Kernel,
    k: usize,
    n: usize,
    data: Vec<f32>,
    /// Where the first block starts in `data` (its 64-byte boundary).
    start: usize,
}

impl PackedB {
    /// Packs `b` for `kernel`'s micro-kernel; an allocation failure is an error.
    pub fn new(kernel: Kernel, b: MatRef) -> Result<PackedB> {
        let mut packed = PackedB {
            kernel,
            k: b.rows,
            n: b.cols,
            data: Vec::new(),
            start: 0,
        };
        match kernel {
            Kernel::Portable(_) => packed.fill::<super::kernels::Portable>(b)?,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2Fma(_) => packed.fill::<super::kernels::Avx2Fma>(b)?,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512(_) => packed.fill::<super::kernels::Avx512>(b)?,
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Kernel::Simd128(_) => packed.fill::<super::kernels::Simd128>(b)?,
        }
        Ok(packed)
    }

    /// Columns of `B` (`n`).
    pub fn cols(&self) -> usize {
        self.n
    }

    /// Values of the block at `(nc, kc)` for `K`: whole `NR` panels, rounded up to 64 bytes.
    fn block_len<K: MicroKernel>(nc: usize, kc: usize) -> usize {
        (nc.div_ceil(K::NR) * K::NR * kc).div_ceil(16) * 16
    }

    fn fill<K: MicroKernel>(&mut self, b: MatRef) -> Result<()> {
        let (k, n) = (self.k, self.n);
        let mut total = 0usize;
        for jc in (0..n).step_by(K::NC) {
            for pc in (0..k).step_by(K::KC) {
                let len = Self::block_len::<K>(K::NC.min(n - jc), K::KC.min(k - pc));
                total = total
                    .checked_add(len)
                    .ok_or_else(|| Error::mismatch(NAME, &[k, n], &[usize::MAX]))?;
            }
        }
        let dst = aligned(&mut self.data, total)?;
        let bt = b.t();
        let mut at = 0;
        for jc in (0..n).step_by(K::NC) {
            let nc = K::NC.min(n - jc);
            for pc in (0..k).step_by(K::KC) {
                let kc = K::KC.min(k - pc);
                let len = Self::block_len::<K>(nc, kc);
                K::pack_b(&mut dst[at..at + len], bt, jc, nc, pc, kc);
                at += len;
            }
        }
        self.start = self.data.as_ptr().align_offset(64).min(16);
        Ok(())
    }
}

/// The left operand of the loop nest: f32, or 16-bit values widened as they are packed.
#[derive(Clone, Copy)]
enum Left<'a> {
    F32(MatRef<'a>),
    Half(HalfRef<'a>),
}

impl Left<'_> {
    fn rows(&self) -> usize {
        match self {
            Left::F32(a) => a.rows,
            Left::Half(a) => a.rows(),
        }
    }

    fn cols(&self) -> usize {
        match self {
            Left::F32(a) => a.cols,
            Left::Half(a) => a.cols(),
        }
    }
}

/// [`drive`] over a [`PackedB`] packed for `K`.
fn drive_packed<K: MicroKernel>(
    kernel: K,
    a: Left,
    b: &PackedB,
    c: &mut [f32],
    ldc: usize,
    a_buf: &mut Vec<f32>,
) -> Result<()> {
    let (m, k, n) = (a.rows(), a.cols(), b.n);
    let mr = K::MR;
    let kc_max = K::KC.min(k);
    let a_pack = aligned(a_buf, K::MC.min(m.div_ceil(mr) * mr) * kc_max)?;
    let blocks = &b.data[b.start..];
    let mut at = 0;
    for jc in (0..n).step_by(K::NC) {
        let nc = K::NC.min(n - jc);
        for pc in (0..k).step_by(K::KC) {
            let kc = K::KC.min(k - pc);
            let len = PackedB::block_len::<K>(nc, kc);
            let b_pack = blocks
                .get(at..at + len)
                .ok_or_else(|| Error::mismatch(NAME, &[k, n], &[blocks.len()]))?;
            at += len;
            block(kernel, a, a_pack, b_pack, (jc, nc), (pc, kc), c, ldc);
        }
    }
    Ok(())
}

/// A `len`-value slice of `buf` starting on a 64-byte boundary, so `B~` rows never straddle a
/// cache line. Grows `buf` as needed; an allocation failure is an error, not an abort.
pub(super) fn aligned(buf: &mut Vec<f32>, len: usize) -> Result<&mut [f32]> {
    const SLACK: usize = 64 / core::mem::size_of::<f32>();
    let need = len.saturating_add(SLACK);
    super::buffers::grow(buf, need, 0.0, "matmul packing buffer")?;
    let off = buf.as_ptr().align_offset(64).min(SLACK);
    Ok(&mut buf[off..off + len])
}

#[cfg(test)]
pub(super) mod tests;
