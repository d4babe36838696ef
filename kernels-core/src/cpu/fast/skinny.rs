//! Products with few rows or few columns, without packing the large operand.
//!
//! Decode runs `x [1, in] . W^T` (and `W . h^T` with one column): a matrix-vector product
//! whose cost is reading `W` once. The blocked GEMM would copy all of `W` into its packed
//! layout first, which costs more than the product itself. Here the small operand (`A'`, at
//! most [`MAX_ROWS`] rows) is copied into contiguous rows and the large one (`B'`) is streamed
//! where it lies, in one of its two layouts:
//!
//! - **dot** (`B'` column-contiguous, e.g. a weight `[out, in]` used as `W^T`): each output is
//!   a dot product of an `A'` row with a `B'` column; `R` rows by `J` columns of accumulators
//!   sweep `k` together and are summed across lanes at the end;
//! - **axpy** (`B'` row-contiguous): a block of output columns lives in registers for `R` rows
//!   while `k` rows of `B'` stream past, each scaled by a broadcast `A'` value.
//!
//! A product with few columns (`n` small) is the transposed one with few rows: `C^T = op(B)^T .
//! op(A)^T`. Results go through a small buffer `T [rows, cols]` and are then added into `C` with
//! the epilogue (bias, activation), so threads can each own a slice of `T`.

use alloc::vec::Vec;

use super::kernel_family::{Epilogue, Kernel};
use super::matref::MatRef;
use super::pool;
use crate::error::{Error, Result};

/// Products whose smaller side (`m`, or `n` when it is smaller) has at most this many entries
/// take this path.
pub const MAX_ROWS: usize = 8;

/// Rows of `A'` handled at once (one pass over `B'` per group).
const GROUP: usize = 4;

/// Work (multiply-adds) below which a product stays on one thread: 2^16 is a 256 KiB weight,
/// about 20 us of streaming, against a few microseconds to hand ranges to the pool's spinning
/// workers. (With a thread spawned per product the threshold was 2^21: threading the 0.9 MiB
/// projections of the llama decode made 2 threads slower than 1.)
#[cfg(feature = "threads")]
const MIN_THREAD_WORK: usize = 1 << 16;

/// One instruction set's kernels. The methods are `unsafe`: the value proves the CPU supports
/// the set (it is made only by [`Kernel`]), and the pointer contracts are the callers'.
pub(super) trait Isa: Copy + Send + Sync {
    /// Output columns of one axpy block.
    const AXPY_COLS: usize;
    /// Whether one row's dot products read the streamed columns one after another (one
    /// sequential stream) instead of several at once: where there is no prefetch instruction
    /// to start the next columns' reads (wasm), interleaved columns read a weight that is not
    /// in cache at 9-10 GB/s, one column at a time at 23 (the 32000 x 288 output layer of the
    /// stories15M shape under Node 20); natively, with prefetch, the interleaved columns are
    /// faster on AVX-512 (decode 2.4 against 3.0 ms a token), slower on AVX2 on Zen 3 (that
    /// module's figures).
    const STREAM_COLUMNS: bool;

    /// `t[r * ldt + j] = sum_p a[r * k + p] * b[j * ldb + p]` for `r < R`, `j < J`.
    ///
    /// # Safety
    /// `a` is valid for `R * k` reads, `b + j * ldb` for `k` reads (`j < J`), and `t + r * ldt
    /// + j` for writes.
    unsafe fn dot<const R: usize, const J: usize>(
        self,
        a: *const f32,
        k: usize,
        b: *const f32,
        ldb: usize,
        t: *mut f32,
        ldt: usize,
    );

    /// `t[r * ldt + j] = sum_p a[r * k + p] * b[j * ldb + p]` for `r < R`, `j < cols`: the
    /// columns one after another, each read front to back (one stream where `ldb == k`).
    ///
    /// # Safety
    /// `a` is valid for `R * k` reads, `b + j * ldb` for `k` reads (`j < cols`), and `t + r *
    /// ldt + j` for writes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn dot_columns<const R: usize>(
        self,
        a: *const f32,
        k: usize,
        b: *const f32,
        ldb: usize,
        cols: usize,
        t: *mut f32,
        ldt: usize,
    );

    /// `t[r * ldt + j] = sum_p a[r * k + p] * b[p * ldb + j]` for `r < R`, `j < cols`, where
    /// `cols == AXPY_COLS` when `FULL`, else `cols < AXPY_COLS`.
    ///
    /// # Safety
    /// `a` is valid for `R * k` reads, `b + p * ldb` for `cols` reads (`p < k`), and `t + r *
    /// ldt` for `cols` writes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn axpy<const R: usize, const FULL: bool>(
        self,
        a: *const f32,
        k: usize,
        b: *const f32,
        ldb: usize,
        cols: usize,
        t: *mut f32,
        ldt: usize,
    );
}

/// The dot and axpy kernels over one instruction set's primitives, which the invoking module
/// defines: the vector type `V` of `L` lanes, `NV` (vectors per axpy block), `STREAM_PREFETCH`
/// (how many values ahead one streamed column prefetches, 0 for none), and `unsafe fn`s
/// `zero`, `splat`, `load`, `load_tail` (the first `rem < L` lanes, the rest zero), `store`,
/// `store_tail`, `add`, `fma(a, b, c) = a * b + c`, `hsum` and `prefetch` (a hint, any
/// address). The attributes (`target_feature`) go on the kernels.
macro_rules! skinny_kernels {
    ($(#[$attr:meta])*) => {
        /// See [`Isa::dot`](crate::cpu::fast::skinny::Isa::dot).
        ///
        /// # Safety
        /// As there, and the CPU has this module's features.
        $(#[$attr])*
        pub(super) unsafe fn dot<const R: usize, const J: usize>(
            a: *const f32,
            k: usize,
            b: *const f32,
            ldb: usize,
            t: *mut f32,
            ldt: usize,
        ) {
            // SAFETY: the loads read `a + r * k + p` and `b + j * ldb + p` for `p < k` only
            // (the tail load reads `k - p` values), the stores the caller's `R x J` outputs.
            unsafe {
                let mut acc = [[zero(); J]; R];
                let mut bv = [zero(); J];
                let mut p = 0;
                while p + L <= k {
                    for (j, v) in bv.iter_mut().enumerate() {
                        *v = load(b.add(j * ldb + p));
                        // The next J columns, which the caller most likely reads next: short
                        // columns (small k) are too short for the hardware prefetcher to
                        // ramp up on.
                        prefetch(b.wrapping_add((j + 2 * J) * ldb + p));
                    }
                    for (r, row) in acc.iter_mut().enumerate() {
                        let av = load(a.add(r * k + p));
                        for (x, &bj) in row.iter_mut().zip(&bv) {
                            *x = fma(av, bj, *x);
                        }
                    }
                    p += L;
                }
                if p < k {
                    let rem = k - p;
                    for (j, v) in bv.iter_mut().enumerate() {
                        *v = load_tail(b.add(j * ldb + p), rem);
                    }
                    for (r, row) in acc.iter_mut().enumerate() {
                        let av = load_tail(a.add(r * k + p), rem);
                        for (x, &bj) in row.iter_mut().zip(&bv) {
                            *x = fma(av, bj, *x);
                        }
                    }
                }
                for (r, row) in acc.iter().enumerate() {
                    for (j, &x) in row.iter().enumerate() {
                        *t.add(r * ldt + j) = hsum(x);
                    }
                }
            }
        }

        /// See [`Isa::dot_columns`](crate::cpu::fast::skinny::Isa::dot_columns).
        ///
        /// # Safety
        /// As there, and the CPU has this module's features.
        $(#[$attr])*
        pub(super) unsafe fn dot_columns<const R: usize>(
            a: *const f32,
            k: usize,
            b: *const f32,
            ldb: usize,
            cols: usize,
            t: *mut f32,
            ldt: usize,
        ) {
            // One call for all the columns (not one a column: each call was a `vzeroupper`,
            // its arguments and four sums across lanes) and one sum across lanes a column: the
            // stories15M shape's f32 decode on an Intel Xeon (AVX-512, 2026-11-29, five
            // interleaved rounds, 1 thread) 356.3-370.3 tok/s against 322.5-357.2.
            // SAFETY: the loads read `a + r * k + p` and `b + j * ldb + p` for `p < k` and `j <
            // cols` only (the tail load reads `k - p` values), the stores the caller's `R x
            // cols` outputs.
            unsafe {
                for j in 0..cols {
                    let b = b.add(j * ldb);
                    // Four accumulators along `k`, so that the adds do not wait on each other.
                    let mut acc = [[zero(); 4]; R];
                    let mut p = 0;
                    while p + 4 * L <= k {
                        for u in 0..4 {
                            if STREAM_PREFETCH > 0 {
                                // The stream `STREAM_PREFETCH` values ahead (past this
                                // column's end: the next columns, which follow it).
                                prefetch(b.wrapping_add(p + u * L + STREAM_PREFETCH));
                            }
                            let bv = load(b.add(p + u * L));
                            for (r, row) in acc.iter_mut().enumerate() {
                                row[u] = fma(load(a.add(r * k + p + u * L)), bv, row[u]);
                            }
                        }
                        p += 4 * L;
                    }
                    while p + L <= k {
                        let bv = load(b.add(p));
                        for (r, row) in acc.iter_mut().enumerate() {
                            row[0] = fma(load(a.add(r * k + p)), bv, row[0]);
                        }
                        p += L;
                    }
                    if p < k {
                        let bv = load_tail(b.add(p), k - p);
                        for (r, row) in acc.iter_mut().enumerate() {
                            row[0] = fma(load_tail(a.add(r * k + p), k - p), bv, row[0]);
                        }
                    }
                    // One sum across lanes a column: the four accumulators add as vectors first.
                    for (r, row) in acc.iter().enumerate() {
                        *t.add(r * ldt + j) = hsum(add(add(row[0], row[1]), add(row[2], row[3])));
                    }
                }
            }
        }

        /// See [`Isa::axpy`](crate::cpu::fast::skinny::Isa::axpy).
        ///
        /// # Safety
        /// As there, and the CPU has this module's features.
        $(#[$attr])*
        #[allow(clippy::too_many_arguments)]
        pub(super) unsafe fn axpy<const R: usize, const FULL: bool>(
            a: *const f32,
            k: usize,
            b: *const f32,
            ldb: usize,
            cols: usize,
            t: *mut f32,
            ldt: usize,
        ) {
            // SAFETY: lane block `v` covers columns `v * L..(v + 1) * L`; it is loaded or
            // stored whole only when all of them are below `cols` (always when FULL), in part
            // (`cols - v * L` lanes) when some are, and not at all otherwise.
            unsafe {
                let mut acc = [[zero(); NV]; R];
                let mut bv = [zero(); NV];
                for p in 0..k {
                    let row = b.add(p * ldb);
                    for (v, x) in bv.iter_mut().enumerate() {
                        let lo = v * L;
                        *x = if FULL || lo + L <= cols {
                            load(row.add(lo))
                        } else if lo < cols {
                            load_tail(row.add(lo), cols - lo)
                        } else {
                            zero()
                        };
                    }
                    for (r, accr) in acc.iter_mut().enumerate() {
                        let s = splat(*a.add(r * k + p));
                        for (x, &bj) in accr.iter_mut().zip(&bv) {
                            *x = fma(s, bj, *x);
                        }
                    }
                }
                for (r, accr) in acc.iter().enumerate() {
                    let out = t.add(r * ldt);
                    for (v, &x) in accr.iter().enumerate() {
                        let lo = v * L;
                        if FULL || lo + L <= cols {
                            store(out.add(lo), x);
                        } else if lo < cols {
                            store_tail(out.add(lo), x, cols - lo);
                        }
                    }
                }
            }
        }
    };
}

/// `impl Isa for $ty` forwarding to the module's `dot` and `axpy` (the value of `$ty` proves the
/// CPU features those need) with `AXPY_COLS = NV * L`.
macro_rules! isa_impl {
    ($ty:ty) => {
        impl $crate::cpu::fast::skinny::Isa for $ty {
            const AXPY_COLS: usize = NV * L;
            const STREAM_COLUMNS: bool = STREAM_COLUMNS;

            unsafe fn dot<const R: usize, const J: usize>(
                self,
                a: *const f32,
                k: usize,
                b: *const f32,
                ldb: usize,
                t: *mut f32,
                ldt: usize,
            ) {
                // SAFETY: `self` proves the features; the pointer contract is the caller's.
                unsafe { dot::<R, J>(a, k, b, ldb, t, ldt) }
            }

            unsafe fn dot_columns<const R: usize>(
                self,
                a: *const f32,
                k: usize,
                b: *const f32,
                ldb: usize,
                cols: usize,
                t: *mut f32,
                ldt: usize,
            ) {
                // SAFETY: as for `dot`.
                unsafe { dot_columns::<R>(a, k, b, ldb, cols, t, ldt) }
            }

            unsafe fn axpy<const R: usize, const FULL: bool>(
                self,
                a: *const f32,
                k: usize,
                b: *const f32,
                ldb: usize,
                cols: usize,
                t: *mut f32,
                ldt: usize,
            ) {
                // SAFETY: as for `dot`.
                unsafe { axpy::<R, FULL>(a, k, b, ldb, cols, t, ldt) }
            }
        }
    };
}

mod portable;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm;
#[cfg(target_arch = "x86_64")]
mod x86;

pub(super) use portable::PortableIsa;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(super) use wasm::Simd128Isa;
#[cfg(target_arch = "x86_64")]
pub(super) use x86::{Avx2Isa, Avx512Isa};

/// How the streamed operand `B' [k, n]` lies in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Column `j` is `data[j * ld..][..k]`.
    Dot,
    /// Row `p` is `data[p * ld..][..n]`.
    Axpy,
}

/// `B'` as the kernels read it.
#[derive(Debug, Clone, Copy)]
struct Streamed<'a> {
    data: &'a [f32],
    ld: usize,
    layout: Layout,
    k: usize,
    n: usize,
}

impl<'a> Streamed<'a> {
    /// `b` if one of its dimensions is contiguous and its extent lies within its data.
    fn new(b: MatRef<'a>) -> Option<Self> {
        let (k, n) = (b.rows, b.cols);
        let (layout, ld, need) = if b.rs == 1 {
            (
                Layout::Dot,
                b.cs,
                (n - 1).checked_mul(b.cs)?.checked_add(k)?,
            )
        } else if b.cs == 1 {
            (
                Layout::Axpy,
                b.rs,
                (k - 1).checked_mul(b.rs)?.checked_add(n)?,
            )
        } else {
            return None;
        };
        (need <= b.data.len()).then_some(Streamed {
            data: b.data,
            ld,
            layout,
            k,
            n,
        })
    }
}

/// Whether [`run`] takes `a [m, k] . b [k, n]` (both non-empty).
pub(super) fn applies(a: MatRef, b: MatRef) -> bool {
    let (m, n) = (a.rows, b.cols);
    if m <= MAX_ROWS && m <= n {
        Streamed::new(b).is_some()
    } else if n <= MAX_ROWS {
        Streamed::new(a.t()).is_some()
    } else {
        false
    }
}

/// `C = epi(C + A . B)` for a product that [`applies`]; `a_buf` and `t_buf` are scratch.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    kernel: Kernel,
    threads: usize,
    a: MatRef,
    b: MatRef,
    c: &mut [f32],
    ldc: usize,
    epi: &Epilogue,
    a_buf: &mut Vec<f32>,
    t_buf: &mut Vec<f32>,
) -> Result<()> {
    let (m, n) = (a.rows, b.cols);
    // (A', B', C's strides for T's rows and columns, whether T is C transposed)
    let (small, big, rs, cs, swapped) = if m <= MAX_ROWS && m <= n {
        (a, b, ldc, 1, false)
    } else {
        (b.t(), a.t(), 1, ldc, true)
    };
    let big = Streamed::new(big).ok_or_else(|| internal("operand layout"))?;
    let (rows, k, cols) = (small.rows, small.cols, big.n);
    let ap = grow(a_buf, rows * k)?;
    for (i, dst) in ap.chunks_exact_mut(k.max(1)).enumerate() {
        // A row stored contiguously (decode's activations) is one copy.
        let at = i * small.rs;
        match at.checked_add(k).and_then(|end| small.data.get(at..end)) {
            Some(row) if small.cs == 1 => dst.copy_from_slice(row),
            _ => {
                for (p, d) in dst.iter_mut().enumerate() {
                    *d = small.data[at + p * small.cs];
                }
            }
        }
    }
    let t = grow(t_buf, rows * cols)?;
    // Parts of whole 16-column blocks, so every column goes through the same kernel (the same
    // bits) on any number of threads. T's part for columns j0..j1 is [rows, j1 - j0] at
    // t[rows * j0..].
    let threads = if work_threads(rows * k * cols) {
        threads
    } else {
        1
    };
    pool::for_slices_on(threads, t, rows, COLUMN_GRAIN, &|js, part| {
        compute(kernel, ap, big, rows, js.start, js.end, part);
        Ok(())
    })?;
    // Add T into C.
    for js in pool::ranges(threads, cols, COLUMN_GRAIN) {
        let (j0, j1) = (js.start, js.end);
        let part = &t[rows * j0..rows * j1];
        for (r, tr) in part.chunks_exact(j1 - j0).enumerate() {
            // T's row is a run of C's row (decode's products), or of C's one column where T is
            // C transposed (`W . h^T`): one slice.
            if cs == 1 {
                let at = r * rs + j0;
                let run = at.checked_add(tr.len()).and_then(|end| c.get_mut(at..end));
                if let Some(cr) = run {
                    if swapped {
                        epi.apply_column(cr, tr, r);
                    } else {
                        epi.apply_row(cr, tr, j0);
                    }
                    continue;
                }
            }
            for (dj, &v) in tr.iter().enumerate() {
                let j = j0 + dj;
                // C's column: T's column, or its row where T is C transposed (not told by
                // the strides: with one column, `ldc` may be 1 either way).
                let (ci, col) = (r * rs + j * cs, if swapped { r } else { j });
                if let Some(x) = c.get_mut(ci) {
                    *x = epi.apply(*x + v, col);
                }
            }
        }
    }
    Ok(())
}

/// Columns of a part are whole multiples of this (two 8-column dot blocks).
const COLUMN_GRAIN: usize = 16;

/// Whether a product of `work` multiply-adds is split over threads.
fn work_threads(work: usize) -> bool {
    #[cfg(feature = "threads")]
    return work >= MIN_THREAD_WORK;
    #[cfg(not(feature = "threads"))]
    {
        let _ = work;
        false
    }
}

/// `T[.., j0..j1]` into `t` (`[rows, j1 - j0]`) on `kernel`'s instruction set.
fn compute(
    kernel: Kernel,
    ap: &[f32],
    big: Streamed,
    rows: usize,
    j0: usize,
    j1: usize,
    t: &mut [f32],
) {
    match kernel {
        Kernel::Portable(_) => columns(PortableIsa, ap, big, rows, j0, j1, t),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2Fma(k) => columns(Avx2Isa::from(k), ap, big, rows, j0, j1, t),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512(k) => columns(Avx512Isa::from(k), ap, big, rows, j0, j1, t),
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Kernel::Simd128(_) => columns(Simd128Isa, ap, big, rows, j0, j1, t),
    }
}

/// Runs `R` (a literal) as a const generic: `with_rows!(r, R => expr)`.
macro_rules! with_rows {
    ($r:expr, $R:ident => $body:expr) => {
        match $r {
            1 => {
                const $R: usize = 1;
                $body
            }
            2 => {
                const $R: usize = 2;
                $body
            }
            3 => {
                const $R: usize = 3;
                $body
            }
            _ => {
                const $R: usize = 4;
                $body
            }
        }
    };
}

/// The kernel loop over row groups and column blocks. `ap` is `[rows, k]` and `t` is `[rows,
/// j1 - j0]`; [`Streamed::new`] checked that every column or row of `big` lies in its data.
fn columns<I: Isa>(
    isa: I,
    ap: &[f32],
    big: Streamed,
    rows: usize,
    j0: usize,
    j1: usize,
    t: &mut [f32],
) {
    let (k, ld, ldt) = (big.k, big.ld, j1 - j0);
    if ldt == 0 || t.len() < rows * ldt || ap.len() < rows * k || j1 > big.n {
        return;
    }
    let b = big.data.as_ptr();
    for r0 in (0..rows).step_by(GROUP) {
        let r = GROUP.min(rows - r0);
        // SAFETY: rows r0..r0 + r of `ap` hold `r * k` values; outputs (r0 + i, j - j0) for i < r
        // and j0 <= j < j1 lie in `t` ([rows, ldt], checked above); the streamed reads are the
        // columns (dot) or rows (axpy) Streamed::new bounded, at columns below j1 <= n.
        unsafe {
            let a = ap.as_ptr().add(r0 * k);
            let tr = t.as_mut_ptr().add(r0 * ldt);
            match big.layout {
                Layout::Dot => with_rows!(r, R => {
                    let mut j = j0;
                    // One row without prefetch: one column at a time (the `j < j1` loop).
                    if !(R == 1 && I::STREAM_COLUMNS) {
                        // R == 1: more columns at once, more independent streams in flight.
                        if R == 1 {
                            while j + 8 <= j1 {
                                isa.dot::<R, 8>(a, k, b.add(j * ld), ld, tr.add(j - j0), ldt);
                                j += 8;
                            }
                        }
                        while j + 4 <= j1 {
                            isa.dot::<R, 4>(a, k, b.add(j * ld), ld, tr.add(j - j0), ldt);
                            j += 4;
                        }
                    }
                    if j < j1 {
                        isa.dot_columns::<R>(a, k, b.add(j * ld), ld, j1 - j, tr.add(j - j0), ldt);
                    }
                }),
                Layout::Axpy => with_rows!(r, R => {
                    let w = I::AXPY_COLS;
                    let mut j = j0;
                    while j + w <= j1 {
                        isa.axpy::<R, true>(a, k, b.add(j), ld, w, tr.add(j - j0), ldt);
                        j += w;
                    }
                    if j < j1 {
                        isa.axpy::<R, false>(a, k, b.add(j), ld, j1 - j, tr.add(j - j0), ldt);
                    }
                }),
            }
        }
    }
}

/// A `len`-value prefix of `buf`, grown as needed; an allocation failure is an error.
fn grow(buf: &mut Vec<f32>, len: usize) -> Result<&mut [f32]> {
    super::buffers::grow(buf, len, 0.0, "matmul scratch buffer")?;
    Ok(&mut buf[..len])
}

fn internal(why: &str) -> Error {
    Error::bad_shape(
        "matmul",
        "operand",
        &[],
        alloc::format!("small-product path: {why}"),
    )
}

#[cfg(test)]
mod tests;
