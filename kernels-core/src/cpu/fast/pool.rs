//! One persistent pool of worker threads for the CPU products.
//!
//! A product is split by output rows (or columns) into ranges of `0..len`, and the ranges are
//! run by the calling thread and the pool's workers together:
//!
//! ```ignore
//! // out[j] for j in 0..n, in ranges of whole 16s:
//! pool::for_slices(&mut out, 1, 16, &|rows, out_part| {
//!     for (j, o) in rows.zip(out_part) { *o = dot(x, weight_row(j)); }
//!     Ok(())
//! })?;
//! ```
//!
//! - **Ranges.** `0..len` is cut into ranges made of whole `grain`s (every range starts at a
//!   multiple of `grain`; the last one ends at `len`), at most [`CHUNKS_PER_THREAD`] per thread.
//!   The cut depends only on `len`, `grain` and the thread count ([`ranges`]), never on which
//!   thread runs what or whether the pool was free: a kernel whose outputs do not depend on
//!   where its range starts (within the grain) gives the same bits on any number of threads.
//! - **Threads.** `KERNELS_THREADS` ([`config::threads`]) threads take part: the caller and
//!   `threads - 1` workers, started on first use and kept for the life of the process. With
//!   one thread, one range or without the `threads` feature (`no_std`) everything runs inline
//!   on the caller. On wasm32 std starts no threads: built with the `atomics` target feature
//!   (shared memory), the page starts web workers that call `run_worker`, then
//!   `seal_workers` makes them the pool's; without it (the default browser build) one thread.
//! - **Waking.** A product publishes its job and bumps an atomic epoch; workers that finished
//!   a job less than [`SPIN_MICROS`] µs ago are still spinning on that epoch and start without a system
//!   call. Workers idle for longer park, and the caller unparks them (a system call, off the
//!   hot path of decode, whose products follow each other within microseconds). The ranges are
//!   handed out through one atomic counter, so a worker that the OS descheduled does not hold
//!   the others up: the caller takes its ranges.
//! - **Busy pool.** One product at a time owns the workers. A second caller (another thread,
//!   or a range calling back into the pool) runs its ranges inline, one after the other: no
//!   deadlock, no oversubscription.
//! - **Errors.** Every range runs even when one fails (a range is cheap, and the output is
//!   wrong anyway); the error of the lowest range is returned. A panic in a range is caught
//!   on the thread that ran it (a worker survives it) and resumed on the caller once every
//!   range has finished, as `std::thread::scope` does.

use core::ops::Range;

use super::config;
use crate::error::{Error, Result};

/// Ranges per thread at most: more lets the fast threads take over a slow one's work, fewer
/// costs less per range.
pub const CHUNKS_PER_THREAD: usize = 4;

/// How long an idle worker spins on the epoch before it parks (microseconds).
pub const SPIN_MICROS: u64 = 500;

/// What [`for_slices`] runs on each range and its part of the output.
pub type SliceFn<'a, T> = dyn Fn(Range<usize>, &mut [T]) -> Result<()> + Sync + 'a;

/// What [`for_slices_scratch_on`] runs on each range, its output and its scratch value.
pub type ScratchFn<'a, T, S> = dyn Fn(Range<usize>, &mut [T], &mut S) -> Result<()> + Sync + 'a;

/// The ranges [`for_ranges_on`] cuts `0..len` into for `threads` threads, in order.
pub fn ranges(threads: usize, len: usize, grain: usize) -> impl Iterator<Item = Range<usize>> {
    let chunk = chunk_len(threads, len, grain);
    (0..len.div_ceil(chunk)).map(move |i| i * chunk..((i + 1) * chunk).min(len))
}

/// Elements per range (a multiple of `grain`; at least 1): of the cuts into at most
/// [`CHUNKS_PER_THREAD`] ranges a thread, the one whose busiest thread has the least work when
/// the ranges are taken in turn (the most ranges among equals). Cutting 14 grains into 8 ranges
/// of 2 made 7, and one of 2 threads ran 4 of them: a 0.5B model's 896-row products, in 64-row
/// grains, took a seventh longer than an even cut.
fn chunk_len(threads: usize, len: usize, grain: usize) -> usize {
    let grain = grain.max(1);
    let grains = len.div_ceil(grain).max(1);
    if threads <= 1 {
        return grains.saturating_mul(grain).max(1);
    }
    let most = threads.saturating_mul(CHUNKS_PER_THREAD).min(grains);
    let mut best = (usize::MAX, grains);
    for ranges in 1..=most {
        let chunk = grains.div_ceil(ranges);
        let load = busiest(grains, chunk, threads);
        if load <= best.0 {
            best = (load, chunk);
        }
    }
    best.1.saturating_mul(grain).max(1)
}

/// The grains of the busiest of `threads` threads when `grains` cut into ranges of `chunk`
/// (the last one shorter) are taken in turn: range `i` on thread `i % threads`.
fn busiest(grains: usize, chunk: usize, threads: usize) -> usize {
    let n = grains.div_ceil(chunk);
    let (q, r) = (n / threads, n % threads);
    let last = grains - (n - 1) * chunk;
    match r {
        // The last range falls to the last thread, which has `q` ranges as every other.
        0 => q * chunk,
        // The last range falls to the only thread with `q + 1` ranges.
        1 => q * chunk + last,
        _ => (q + 1) * chunk,
    }
}

/// Runs `f` on every range of `0..len` ([`ranges`]) on [`config::threads`] threads; the first
/// error (by range) is returned after every range has run.
pub fn for_ranges(
    len: usize,
    grain: usize,
    f: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    for_ranges_on(config::threads(), len, grain, f)
}

/// [`for_ranges`] on at most `threads` threads (the ranges follow `threads`, so a test can ask
/// for more threads than the pool has and still get that many ranges).
pub fn for_ranges_on(
    threads: usize,
    len: usize,
    grain: usize,
    f: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    let chunk = chunk_len(threads, len, grain);
    let chunks = len.div_ceil(chunk);
    if chunks <= 1 {
        return if len == 0 { Ok(()) } else { f(0..len) };
    }
    imp::run(threads, len, chunk, chunks, f)
}

/// [`for_ranges`] over `out` cut into units of `unit` values: range `r` of
/// `0..out.len().div_ceil(unit)` gets `out[r.start * unit..]` up to `r.end * unit` (or the end
/// of `out`, so a last short row is allowed). For outputs split by rows of `unit` values.
pub fn for_slices<T: Send>(out: &mut [T], unit: usize, grain: usize, f: &SliceFn<T>) -> Result<()> {
    for_slices_on(config::threads(), out, unit, grain, f)
}

/// [`for_slices`] on at most `threads` threads.
pub fn for_slices_on<T: Send>(
    threads: usize,
    out: &mut [T],
    unit: usize,
    grain: usize,
    f: &SliceFn<T>,
) -> Result<()> {
    if unit == 0 {
        return Err(Error::bad_shape(
            "pool",
            "out",
            &[out.len()],
            alloc::string::String::from("a unit of 0 values"),
        ));
    }
    let (total, len) = (out.len(), out.len().div_ceil(unit));
    let base = SyncPtr(out.as_mut_ptr());
    for_ranges_on(threads, len, grain, &|r: Range<usize>| {
        let lo = r.start.saturating_mul(unit).min(total);
        let hi = r.end.saturating_mul(unit).min(total);
        // SAFETY: `lo..hi` lies within `out` (clamped to `total`), and the pool runs each range
        // of `0..len` exactly once, the ranges disjoint: no two slices overlap, and `out` is
        // borrowed mutably until every range has returned.
        let part = unsafe { core::slice::from_raw_parts_mut(base.get().add(lo), hi - lo) };
        f(r, part)
    })
}

/// [`for_slices_on`] with a scratch value per range: range `i` (in [`ranges`] order) gets
/// `scratch[i]` (packing buffers reused across products, say). Too few scratch values for the
/// ranges is an error.
pub fn for_slices_scratch_on<T: Send, S: Send>(
    threads: usize,
    out: &mut [T],
    unit: usize,
    grain: usize,
    scratch: &mut [S],
    f: &ScratchFn<T, S>,
) -> Result<()> {
    let len = out.len().div_ceil(unit.max(1));
    let (chunk, have) = (chunk_len(threads, len, grain), scratch.len());
    if len.div_ceil(chunk) > have {
        return Err(Error::mismatch("pool", &[len.div_ceil(chunk)], &[have]));
    }
    let base = SyncPtr(scratch.as_mut_ptr());
    for_slices_on(threads, out, unit, grain, &|r, part| {
        let i = r.start / chunk;
        if i >= have {
            return Err(Error::mismatch("pool", &[i], &[have]));
        }
        // SAFETY: `i < have` indexes `scratch`, and ranges start at distinct multiples of
        // `chunk`, so no two ranges (each run once) make a reference to the same value.
        f(r, part, unsafe { &mut *base.get().add(i) })
    })
}

/// What [`for_columns`] runs on each range of columns and its view of them.
pub type ColumnsFn<'a, T> = dyn Fn(Range<usize>, Columns<'_, T>) -> Result<()> + Sync + 'a;

/// Columns `cols` of every row of a row-major output (`rows` rows of `ld` values), the part of
/// it one range of [`for_columns`] writes: rows one at a time through [`Columns::row`], or a
/// kernel's stores through [`Columns::as_mut_ptr`].
pub struct Columns<'a, T> {
    base: *mut T,
    rows: usize,
    ld: usize,
    cols: Range<usize>,
    _out: core::marker::PhantomData<&'a mut [T]>,
}

impl<T> Columns<'_, T> {
    /// Rows of the output.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Values from one row to the next.
    pub fn ld(&self) -> usize {
        self.ld
    }

    /// The columns of the output this view holds.
    pub fn cols(&self) -> Range<usize> {
        self.cols.clone()
    }

    /// Row `r`'s values in these columns (`None` past the last row).
    pub fn row(&mut self, r: usize) -> Option<&mut [T]> {
        (r < self.rows).then(|| {
            // SAFETY: `r < rows` and `cols` lies within `0..ld` ([`for_columns`] checked), so
            // the slice is within the output and within this view's columns, which no other
            // view holds; `&mut self` keeps it the only reference made through this view.
            unsafe {
                core::slice::from_raw_parts_mut(
                    self.base.add(r * self.ld + self.cols.start),
                    self.cols.len(),
                )
            }
        })
    }

    /// The first row's first value of these columns: value `c` of row `r` is at
    /// `r * ld() + c` from it, for `r < rows()` and `c < cols().len()`, and a kernel holding it
    /// may write only there.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.base.wrapping_add(self.cols.start)
    }
}

/// [`for_ranges`] over the `ld` columns of a row-major `out` (`out.len() / ld` rows of `ld`
/// values): range `r` gets columns `r` of every row ([`Columns`]). For products split by weight
/// rows that write their `[rows, n]` output directly. An `out` of other than whole rows is an
/// error.
pub fn for_columns<T: Send>(
    out: &mut [T],
    ld: usize,
    grain: usize,
    f: &ColumnsFn<T>,
) -> Result<()> {
    if ld == 0 || !out.len().is_multiple_of(ld) {
        return Err(Error::bad_shape(
            "pool",
            "out",
            &[out.len()],
            alloc::format!("not whole rows of {ld} values"),
        ));
    }
    let rows = out.len() / ld;
    let base = SyncPtr(out.as_mut_ptr());
    for_ranges(ld, grain, &|cols: Range<usize>| {
        let view = Columns {
            base: base.get(),
            rows,
            ld,
            cols: cols.clone(),
            _out: core::marker::PhantomData,
        };
        // The pool runs each range of `0..ld` exactly once and the ranges are disjoint, so no
        // two views share a value, and `out` stays borrowed mutably until every range returns.
        f(cols, view)
    })
}

/// What [`for_rows3`] runs on each range of rows and its rows of the three outputs.
pub type Rows3Fn<'a, A, B, C> =
    dyn Fn(Range<usize>, &mut [A], &mut [B], &mut [C]) -> Result<()> + Sync + 'a;

/// [`for_ranges`] over `rows` rows of three outputs at once, `a` holding `units.0` values a row,
/// `b` `units.1` and `c` `units.2`: range `r` gets rows `r` of each (for results kept in
/// separate arrays, such as quantized values and their scales). Outputs whose lengths are not
/// `rows` times their unit are an error.
pub fn for_rows3<A: Send, B: Send, C: Send>(
    rows: usize,
    grain: usize,
    (a, b, c): (&mut [A], &mut [B], &mut [C]),
    units: (usize, usize, usize),
    f: &Rows3Fn<A, B, C>,
) -> Result<()> {
    let lens = [a.len(), b.len(), c.len()];
    let want = [units.0, units.1, units.2].map(|u| rows.checked_mul(u));
    if lens.iter().zip(&want).any(|(l, w)| Some(*l) != *w) {
        return Err(Error::mismatch(
            "pool",
            &want.map(|w| w.unwrap_or(usize::MAX)),
            &lens,
        ));
    }
    let (pa, pb, pc) = (
        SyncPtr(a.as_mut_ptr()),
        SyncPtr(b.as_mut_ptr()),
        SyncPtr(c.as_mut_ptr()),
    );
    for_ranges(rows, grain, &|r: Range<usize>| {
        let part = |u: usize| (r.start * u, (r.end - r.start) * u);
        let ((a0, an), (b0, bn), (c0, cn)) = (part(units.0), part(units.1), part(units.2));
        // SAFETY: each output holds `rows * unit` values (checked above) and `r` lies within
        // `0..rows`, so each slice is within its output; the pool runs each range exactly once
        // and the ranges are disjoint, so no two slices overlap, and the outputs stay borrowed
        // mutably until every range has returned.
        let (sa, sb, sc) = unsafe {
            (
                core::slice::from_raw_parts_mut(pa.get().add(a0), an),
                core::slice::from_raw_parts_mut(pb.get().add(b0), bn),
                core::slice::from_raw_parts_mut(pc.get().add(c0), cn),
            )
        };
        f(r, sa, sb, sc)
    })
}

/// A pointer the ranges share; each range makes its own disjoint slice of it.
struct SyncPtr<T>(*mut T);

impl<T> SyncPtr<T> {
    /// Through a method, so closures capture the whole wrapper (which is `Sync`), not the field.
    fn get(&self) -> *mut T {
        self.0
    }
}

// SAFETY: the wrapper only hands the pointer to `for_slices_on`'s ranges, which make disjoint
// slices of it: sharing it is sending disjoint parts of a `&mut [T]`, sound for `T: Send`.
unsafe impl<T: Send> Sync for SyncPtr<T> {}

#[cfg(all(
    feature = "threads",
    any(not(target_arch = "wasm32"), target_feature = "atomics")
))]
mod imp;

#[cfg(not(all(
    feature = "threads",
    any(not(target_arch = "wasm32"), target_feature = "atomics")
)))]
mod imp {
    use core::ops::Range;

    use crate::error::Result;

    /// No threads here: the ranges run in order on the caller.
    pub(super) fn run(
        _threads: usize,
        len: usize,
        chunk: usize,
        chunks: usize,
        f: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
    ) -> Result<()> {
        super::inline(len, chunk, chunks, f)
    }
}

/// The pool's thread count in a browser ([`config::threads`] there): the caller and the web
/// workers sealed by [`seal_workers`]; 1 before that.
#[cfg(all(
    feature = "threads",
    target_arch = "wasm32",
    target_feature = "atomics"
))]
pub fn web_threads() -> usize {
    imp::web::workers().len().saturating_add(1)
}

/// One thread: this wasm32 build has no shared memory (built without the `atomics` target
/// feature), so no web worker can take part.
#[cfg(all(
    feature = "threads",
    target_arch = "wasm32",
    not(target_feature = "atomics")
))]
pub fn web_threads() -> usize {
    1
}

/// Runs the calling web worker as one of the pool's workers, for ever (wasm32 with the
/// `atomics` target feature). The page starts web workers that instantiate its module on its
/// shared memory and call this; then it calls [`seal_workers`]. The page's main thread must
/// never call it.
#[cfg(all(
    feature = "threads",
    target_arch = "wasm32",
    target_feature = "atomics"
))]
pub fn run_worker() -> ! {
    imp::web::run_worker()
}

/// Web workers that have called [`run_worker`] so far (at most 64 are taken).
#[cfg(all(
    feature = "threads",
    target_arch = "wasm32",
    target_feature = "atomics"
))]
pub fn registered_workers() -> usize {
    imp::web::registered()
}

/// Ranges the web workers have run so far (the caller's own are not counted).
#[cfg(all(
    feature = "threads",
    target_arch = "wasm32",
    target_feature = "atomics"
))]
pub fn worker_ranges() -> usize {
    imp::web::WORKER_RANGES.load(core::sync::atomic::Ordering::Relaxed)
}

/// Makes the registered web workers the pool's, once (later calls change nothing), and returns
/// how many it has. Never blocks, so the page's main thread may call it.
#[cfg(all(
    feature = "threads",
    target_arch = "wasm32",
    target_feature = "atomics"
))]
pub fn seal_workers() -> usize {
    imp::web::seal()
}

/// Every range in order on this thread; the first error is returned after all have run.
fn inline(
    len: usize,
    chunk: usize,
    chunks: usize,
    f: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    let mut first = Ok(());
    for i in 0..chunks {
        let r = f(i * chunk..((i + 1) * chunk).min(len));
        if first.is_ok() {
            first = r;
        }
    }
    first
}

#[cfg(test)]
mod tests;
