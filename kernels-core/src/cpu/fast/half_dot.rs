//! `linear`, `matmul(x, w, trans_b)` and `matmul_swiglu`'s product with an `f16` or `bf16`
//! weight, on f32 activations: the weight streams from memory in its 16-bit size and is
//! widened to f32 in registers, never into an f32 copy of the whole weight.
//!
//! - **Decode** (at most [`STREAM_ROWS`] rows of `x`): eight weight rows at a time (one or two
//!   rows of `x`; four for more; one row of `x` takes rows under 4 KiB one at a time, a single
//!   sequential stream) are widened 16 (AVX-512) or 8 (AVX2) values at a time, with F16C's
//!   `vcvtph2ps` for `f16` and a zero-extend and shift by 16 for `bf16` (exact: a bf16 is the
//!   top half of an f32), and multiplied into f32 accumulators with FMA. Each row stream is
//!   prefetched 1-2 KiB ahead into L2 (the rows are too short for the hardware prefetcher),
//!   the single stream 8 KiB (AVX-512) or 2 KiB (AVX2) ahead.
//!   The weight rows are split over the thread pool ([`super::pool`]).
//! - **Prefill** (more rows): blocks of [`BLOCK_ROWS`] weight rows are multiplied by the
//!   blocked f32 GEMM, which widens the 16-bit rows as it packs them into its micro-panels (one
//!   pass over the rows, no f32 copy; on AVX-512 a block is widened into a buffer first,
//!   measured faster there); the blocks are split over the thread pool. On AVX2 up to
//!   [`DOT_ROWS`] rows of `x`, on AVX-512 up to [`DOT_ROWS_AVX512`], take the dot form instead
//!   (`x86::avx2::prefill`, `x86::avx512::prefill`): tiles of four rows of `x` by three weight
//!   rows (AVX2) or six by four (AVX-512), the 16-bit rows widened as they are loaded, nothing
//!   packed, `k` in chunks that keep the tile's rows of `x` in L1.
//!
//! The activations stay f32, as the reference's (decode the weight, then the f32 product): only
//! the summation order differs, within matmul's budget. AVX-512 BF16's `vdpbf16ps` is not used:
//! it would round the activations to bf16, and f16/bf16 weights keep f32 activations.
//! `KERNELS_CPU_KERNEL` caps the family like the GEMM's: `avx512`, `avx2` (both with F16C), or
//! `portable` (each row decoded by the reference's decoder, then an f32 dot).

use alloc::vec::Vec;

use super::buffers::scratch;
use super::config::Forced;
use super::gemm::{Gemm, HalfRef, Kernel, MatRef, PackedB};
use super::isa::Isa;
use super::pool;
use crate::cpu::linear;
use crate::error::{Error, Result};
use crate::op::Activation;
use crate::quant;
use crate::tensor::{DType, Tensor};

/// Rows of `x` up to which the weight is streamed through the dot kernels; more take the GEMM.
pub const STREAM_ROWS: usize = 8;
/// Weight rows per GEMM call in prefill: a multiple of every GEMM kernel's `MR` (4, 6 and 8), so
/// no tile but a range's last computes rows it throws away (64 rows were 10 tiles of 6 and one
/// of 4 in 6).
pub const BLOCK_ROWS: usize = 48;
/// Weight rows per range of the pool: whole groups of the decode kernels' four rows (prefill
/// cuts its ranges at the same multiples, for an even split over threads).
const GRAIN: usize = 16;
/// Multiply-adds below which a product stays on one thread.
const MIN_THREAD_WORK: usize = 1 << 16;

/// A kernel family of this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Portable,
    /// AVX2 + FMA + F16C, 8 lanes.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512F + F16C, 16 lanes.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Family {
    /// The family [`Isa::selected`] allows (F16C required for the x86 ones).
    pub fn best() -> Family {
        Family::of(Isa::selected())
    }

    fn of(isa: Isa) -> Family {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 if has_f16c() => Family::Avx512,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 if has_f16c() => Family::Avx2,
            _ => Family::Portable,
        }
    }

    /// Every family this machine runs (tests run each).
    pub fn available() -> Vec<Family> {
        let mut all: Vec<Family> = Isa::available().map(Family::of).collect();
        all.dedup();
        all
    }

    /// The GEMM kernel of the same family (the best one for the portable family on wasm).
    fn gemm_kernel(self) -> Kernel {
        let forced = match self {
            Family::Portable if cfg!(target_arch = "wasm32") => return Kernel::best(),
            Family::Portable => Forced::Portable,
            #[cfg(target_arch = "x86_64")]
            Family::Avx2 => Forced::Avx2,
            #[cfg(target_arch = "x86_64")]
            Family::Avx512 => Forced::Avx512,
        };
        Kernel::of(forced).unwrap_or_else(Kernel::best)
    }
}

#[cfg(target_arch = "x86_64")]
fn has_f16c() -> bool {
    #[cfg(feature = "std")]
    return std::is_x86_feature_detected!("f16c");
    #[cfg(not(feature = "std"))]
    return cfg!(target_feature = "f16c");
}

/// `act(x @ w^T + bias)` for an `f16` or `bf16` weight `w [n, k]` and f32 `x [.., k]`, shaped as
/// linear's output or `out_shape`; `None` for other inputs (the caller's path reports them).
pub fn product_of(
    activation: Activation,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    out_shape: Option<Vec<usize>>,
) -> Option<Result<Vec<Tensor>>> {
    let dtype = w.dtype();
    if !matches!(dtype, DType::F16 | DType::BF16)
        || x.dtype() != DType::F32
        || !x.is_host()
        || !w.is_host()
    {
        return None;
    }
    let (rows, k, n) = match bias {
        Some(b) => linear::check(x.shape(), w.shape(), b.shape()).ok()?,
        None => {
            let (xs, ws) = (x.shape(), w.shape());
            if ws.len() != 2 || xs.is_empty() || xs[xs.len() - 1] != ws[1] {
                return None;
            }
            let k = ws[1];
            (x.numel() / k.max(1), k, ws[0])
        }
    };
    if rows == 0 || k == 0 || n == 0 {
        return None;
    }
    let xv = x.as_f32().ok()?;
    let bv = match bias {
        Some(b) => Some(b.as_f32().ok()?),
        None => None,
    };
    let packed = w.packed_bytes().ok()?;
    let out_shape = out_shape.unwrap_or_else(|| linear::out_shape(x.shape(), n));
    let family = Family::best();
    Some((|| {
        if rows > STREAM_ROWS {
            // Prefill: each range's blocks of the transposed product straight into its columns.
            let bf = dtype == DType::BF16;
            #[cfg(target_arch = "x86_64")]
            if dot_form(family, rows) {
                let w = weight_rows(packed, (n, k))?;
                return super::transposed::by_ranges(
                    (rows, n),
                    GRAIN,
                    bv,
                    activation,
                    &out_shape,
                    &|| Ok(()),
                    &|_, js, part| {
                        dot_range(family, bf, w, xv, (rows, k), js, part);
                        Ok(())
                    },
                );
            }
            let (w, xt) = gemm_operands(family, packed, xv, (rows, k, n))?;
            return super::transposed::by_ranges(
                (rows, n),
                GRAIN,
                bv,
                activation,
                &out_shape,
                &|| Ok(RangeState::new(family)),
                &|s, js, part| gemm_range(s, bf, (w, &xt), k, js, part),
            );
        }
        let mut t = super::zeros(rows.checked_mul(n).ok_or_else(too_large)?)?;
        product_t(
            family,
            crate::cpu::fast::config::threads(),
            dtype,
            packed,
            xv,
            (rows, k, n),
            &mut t,
        )?;
        super::transposed::finish(t, (rows, n), bv, activation, &out_shape)
    })())
}

fn too_large() -> Error {
    Error::bad_shape(
        "matmul",
        "out",
        &[],
        alloc::string::String::from("output size overflows"),
    )
}

/// `t [n, rows] = w [n, k] . x [rows, k]^T` (the product transposed: weight row `j`'s outputs
/// are `t[j * rows..][..rows]`) for `w` of `dtype` (`f16` or `bf16`, `2 k` bytes a row), on
/// `family` and up to `threads` threads. `t` starts zeroed.
pub fn product_t(
    family: Family,
    threads: usize,
    dtype: DType,
    w: &[u8],
    x: &[f32],
    (rows, k, n): (usize, usize, usize),
    t: &mut [f32],
) -> Result<()> {
    let bf = match dtype {
        DType::F16 => false,
        DType::BF16 => true,
        other => {
            return Err(Error::UnsupportedOnBackend {
                op: "matmul",
                backend: alloc::format!("cpu half_dot ({other})"),
            });
        }
    };
    let row_bytes = k.checked_mul(2).ok_or_else(too_large)?;
    let need_w = n.checked_mul(row_bytes).ok_or_else(too_large)?;
    let need_t = n.checked_mul(rows).ok_or_else(too_large)?;
    let need_x = rows.checked_mul(k).ok_or_else(too_large)?;
    if w.len() < need_w || t.len() < need_t || x.len() < need_x || rows == 0 || k == 0 {
        return Err(Error::mismatch("matmul", &[n, k], &[rows, k]));
    }
    let (w, t, x) = (&w[..need_w], &mut t[..need_t], &x[..need_x]);
    let work = rows.saturating_mul(k).saturating_mul(n);
    let threads = if work >= MIN_THREAD_WORK { threads } else { 1 };
    if rows > STREAM_ROWS {
        return gemm_t(family, threads, bf, w, x, (rows, k), t);
    }
    pool::for_slices_on(threads, t, rows, GRAIN, &|js, part| {
        stream(family, bf, w, x, (rows, k), js.start, js.end, part)
    })
}

/// Weight rows `j0..j1` dotted with every row of `x` into `part` (`[j1 - j0, rows]`); nothing
/// is written where the operands disagree. Errs only where the portable kernel's decoded row
/// cannot be allocated.
#[allow(clippy::too_many_arguments)]
fn stream(
    family: Family,
    bf: bool,
    w: &[u8],
    x: &[f32],
    (rows, k): (usize, usize),
    j0: usize,
    j1: usize,
    part: &mut [f32],
) -> Result<()> {
    let row_bytes = 2 * k;
    if part.len() < (j1 - j0) * rows || w.len() < j1 * row_bytes || x.len() < rows * k {
        return Ok(());
    }
    match family {
        Family::Portable => {
            let dtype = if bf { DType::BF16 } else { DType::F16 };
            let mut row = scratch(k, 0.0f32, "decoded f16 weight row")?;
            for j in j0..j1 {
                quant::decode_blocks(dtype, &w[j * row_bytes..(j + 1) * row_bytes], &mut row);
                for r in 0..rows {
                    part[(j - j0) * rows + r] = dot(&x[r * k..(r + 1) * k], &row);
                }
            }
        }
        // SAFETY: the family was made only where the CPU has its features (`Family::of`); the
        // weight rows `j0..j1` (`2 k` bytes each), `rows * k` activations and `(j1 - j0) *
        // rows` outputs lie in the slices (checked above).
        #[cfg(target_arch = "x86_64")]
        Family::Avx512 => unsafe {
            let (wp, xp, tp) = (w.as_ptr(), x.as_ptr(), part.as_mut_ptr());
            if bf {
                x86::avx512::rows::<true>(wp, row_bytes, j0, j1, xp, rows, k, tp)
            } else {
                x86::avx512::rows::<false>(wp, row_bytes, j0, j1, xp, rows, k, tp)
            }
        },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Family::Avx2 => unsafe {
            let (wp, xp, tp) = (w.as_ptr(), x.as_ptr(), part.as_mut_ptr());
            if bf {
                x86::avx2::rows::<true>(wp, row_bytes, j0, j1, xp, rows, k, tp)
            } else {
                x86::avx2::rows::<false>(wp, row_bytes, j0, j1, xp, rows, k, tp)
            }
        },
    }
    Ok(())
}

/// A plain f32 dot product with eight accumulators (auto-vectorized).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The prefill: `t [n, rows]` by blocks of [`BLOCK_ROWS`] widened weight rows on the GEMM
/// (`t_block = w_block [b, k] . x^T [k, rows]`), the blocks split over the pool.
fn gemm_t(
    family: Family,
    threads: usize,
    bf: bool,
    w: &[u8],
    x: &[f32],
    (rows, k): (usize, usize),
    t: &mut [f32],
) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    if dot_form(family, rows) {
        return pool::for_slices_on(threads, t, rows, GRAIN, &|js, part| {
            dot_range(family, bf, w, x, (rows, k), js, part);
            Ok(())
        });
    }
    let n = w.len() / (2 * k).max(1);
    let (w, xt) = gemm_operands(family, w, x, (rows, k, n))?;
    pool::for_slices_on(threads, t, rows, GRAIN, &|js, part| {
        let mut s = RangeState::new(family);
        gemm_range(&mut s, bf, (w, &xt), k, js, part)
    })
}

/// Most rows of `x` prefill takes in the dot form on AVX2 (`dot_range`); more take the
/// packed GEMM, whose packing of the weight is shared by more rows. Measured on the 0.5B Qwen's
/// F16 file (AMD EPYC Zen 3, `kernels bench llama --prefill-len P --runs 3`, interleaved
/// rounds, prefill tok/s, GEMM against dot form, 2026-11-28): at 64 tokens on 2 threads
/// 120.1-139.8 against 138.4-157.8 (six rounds of six for the dot form), on 1 thread
/// 78.4-91.7 against 78.9-95.2 (five of eight); at 128 on 1 thread 81.0-97.0 against
/// 78.1-94.1 (none of three); at 256 even (nine rounds, means 90.8 and 91.5).
pub const DOT_ROWS: usize = 64;
/// The same on AVX-512 (tiles of six rows of `x` by four weight rows, `x86::avx512::prefill`).
/// Measured on the 0.5B Qwen's F16 file (AMD EPYC Zen 5, `kernels bench llama --prefill-len P
/// --runs 2`, interleaved rounds, prefill tok/s, GEMM against dot form, 2026-11-28): at 64
/// tokens on 1 thread 215.5-225.6 against 243.8-246.2 (five rounds of five for the dot form), on
/// 2 threads 383.9-400.7 against 445.2-447.6 (two of two); at 128 on 1 thread 251.7-253.3
/// against 255.6-256.5; at 256 on 1 thread 267.0-270.5 against 253.8-263.4 (none of four), so
/// more rows keep the GEMM.
pub const DOT_ROWS_AVX512: usize = 128;
/// [`DOT_ROWS_AVX512`] on Intel's cores, where widening 16-bit values in the dot form's tiles
/// (again for every six rows of `x`) costs more than packing the weight once: on an Intel Xeon
/// (family 6 model 207, the 0.5B Qwen's F16 file, `kernels bench llama --prefill-len P --runs
/// 2`, interleaved rounds, prefill tok/s, 2026-11-29, dot form against GEMM), at 16 tokens 75.2-80.0
/// against 50.5-51.6 (four rounds), at 32 98.8-100.7 against 90.8-100.2, at 64 on 1 thread
/// 95.0-111.0 against 97.5-131.8 (eight rounds), on 2 threads
/// 165.8-196.7 against 177.9-227.1 (six of eight), at 128 96.2-116.3 against 142.6-151.2.
pub const DOT_ROWS_AVX512_INTEL: usize = 32;

/// Whether prefill of `rows` rows of `x` on `family` takes the dot form ([`DOT_ROWS`],
/// [`DOT_ROWS_AVX512`], [`DOT_ROWS_AVX512_INTEL`]).
#[cfg(target_arch = "x86_64")]
fn dot_form(family: Family, rows: usize) -> bool {
    match family {
        Family::Avx2 => rows <= DOT_ROWS,
        Family::Avx512 if super::isa::is_intel() => rows <= DOT_ROWS_AVX512_INTEL,
        Family::Avx512 => rows <= DOT_ROWS_AVX512,
        Family::Portable => false,
    }
}

/// Weight rows of the dot form's blocks: a block's chunk of `k` (at most
/// `PREFILL_K` values of either family, 96 KiB of 16-bit rows) stays in L2 while every row of `x`
/// passes over it.
#[cfg(target_arch = "x86_64")]
const DOT_BLOCK_ROWS: usize = 48;

/// Weight rows `js` of the prefill on AVX2 or AVX-512 into `part` (`[js, rows]`, zeroed), in the
/// dot form (`x86::avx2::prefill`, `x86::avx512::prefill`: no packing, the 16-bit rows widened
/// as they are loaded; nothing on the portable family), blocks of
/// [`DOT_BLOCK_ROWS`] rows at a time. Every output's bits depend on `k` alone, not on the
/// block or range its row falls in. Nothing is written where the slices are short.
#[cfg(target_arch = "x86_64")]
fn dot_range(
    family: Family,
    bf: bool,
    w: &[u8],
    x: &[f32],
    (rows, k): (usize, usize),
    js: core::ops::Range<usize>,
    part: &mut [f32],
) {
    type Prefill = unsafe fn(*const u8, usize, usize, usize, *const f32, usize, usize, *mut f32);
    let prefill: Prefill = match (family, bf) {
        (Family::Avx512, true) => x86::avx512::prefill::<true>,
        (Family::Avx512, false) => x86::avx512::prefill::<false>,
        (Family::Avx2, true) => x86::avx2::prefill::<true>,
        (Family::Avx2, false) => x86::avx2::prefill::<false>,
        (Family::Portable, _) => return,
    };
    let row_bytes = 2 * k;
    if part.len() < js.len() * rows || w.len() < js.end * row_bytes || x.len() < rows * k {
        return;
    }
    for b0 in js.clone().step_by(DOT_BLOCK_ROWS) {
        let b1 = (b0 + DOT_BLOCK_ROWS).min(js.end);
        // SAFETY: `Family::Avx2` exists only where the CPU has AVX2, FMA and F16C,
        // `Family::Avx512` only where it has AVX-512F too (the kernel was chosen by the
        // family); weight rows b0..b1 (`2 k` bytes each), `rows * k` activations and the
        // block's `(b1 - b0) * rows` outputs lie in the slices (checked above).
        unsafe {
            let tp = part.as_mut_ptr().add((b0 - js.start) * rows);
            prefill(w.as_ptr(), row_bytes, b0, b1, x.as_ptr(), rows, k, tp);
        }
    }
}

/// The prefill GEMM's operands: the weight's `n` rows and `x^T` packed once for every block
/// (packing it per block was a fifth of a 256-token F16 prefill).
fn gemm_operands<'a>(
    family: Family,
    w: &'a [u8],
    x: &'a [f32],
    (rows, k, n): (usize, usize, usize),
) -> Result<(&'a [u8], PackedB)> {
    let w = weight_rows(w, (n, k))?;
    let xt = PackedB::new(family.gemm_kernel(), MatRef::new(x, k, rows, true)?)?;
    Ok((w, xt))
}

/// The weight's `n` rows of `k` 16-bit values (the error where `w` is shorter).
fn weight_rows(w: &[u8], (n, k): (usize, usize)) -> Result<&[u8]> {
    let need_w = n.checked_mul(2 * k).ok_or_else(too_large)?;
    w.get(..need_w)
        .ok_or_else(|| Error::mismatch("matmul", &[n, k], &[w.len() / (2 * k).max(1), k]))
}

/// What one range of the prefill GEMM keeps across its blocks: the GEMM with its packing
/// buffers, and a block of widened rows where the family widens before packing.
struct RangeState {
    family: Family,
    gemm: Gemm,
    buf: Vec<f32>,
}

impl RangeState {
    fn new(family: Family) -> Self {
        RangeState {
            family,
            gemm: Gemm::new(family.gemm_kernel()).with_threads(1),
            buf: Vec::new(),
        }
    }
}

/// Weight rows `js` of the prefill GEMM into `part` (`[js, rows]`, zeroed): blocks of
/// [`BLOCK_ROWS`] rows times `x^T` (`xt`, packed). The GEMM widens the 16-bit rows as it packs
/// them; on AVX-512 a block is widened into a buffer first (measured faster there). The packed
/// values are the same either way, and every output is the blocked GEMM's dot product whatever
/// block or range its row falls in, so the bits do not depend on the cut or the path.
fn gemm_range(
    s: &mut RangeState,
    bf: bool,
    (w, xt): (&[u8], &PackedB),
    k: usize,
    js: core::ops::Range<usize>,
    part: &mut [f32],
) -> Result<()> {
    let row_bytes = 2 * k;
    let rows = xt.cols();
    let RangeState { family, gemm, buf } = s;
    for b0 in js.clone().step_by(BLOCK_ROWS) {
        let b1 = (b0 + BLOCK_ROWS).min(js.end);
        let c = &mut part[(b0 - js.start) * rows..(b1 - js.start) * rows];
        let wb = &w[b0 * row_bytes..b1 * row_bytes];
        #[cfg(target_arch = "x86_64")]
        if *family == Family::Avx512 {
            let n = (b1 - b0) * k;
            super::buffers::grow(buf, n, 0.0, "f16 weight block")?;
            // SAFETY: the family proves the features; `wb` holds `n` two-byte values and
            // `buf` at least `n` values.
            unsafe {
                if bf {
                    x86::avx512::widen::<true>(wb.as_ptr(), n, buf.as_mut_ptr())
                } else {
                    x86::avx512::widen::<false>(wb.as_ptr(), n, buf.as_mut_ptr())
                }
            }
            let a = MatRef::new(&buf[..n], b1 - b0, k, false)?;
            gemm.run_blocked_packed(a, xt, c, rows)?;
            continue;
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (&family, &buf);
        let a = HalfRef::new(wb, b1 - b0, k, bf)?;
        gemm.run_blocked_packed_half(a, xt, c, rows)?;
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;

/// One `f16` (or `bf16` when `BF`) value's bits as f32, as the reference decodes it (the x86
/// kernels' tails).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn scalar<const BF: bool>(h: u16) -> f32 {
    if BF {
        f32::from_bits((h as u32) << 16)
    } else {
        quant::decode::f16_to_f32(h)
    }
}
