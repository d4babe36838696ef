//! Prefill's integer products as a register-tiled GEMM on the packed weight: 8 weight rows by
//! `RX` quantized rows of `x` at a time (`x86`; `RX` = 8 on AVX-512 VNNI, 2 on AVX2 and
//! AVX-VNNI), so each unpacked weight block serves `RX` rows of `x` and each activation block
//! 8 weight rows. Per block, the 8 unpacked weight blocks are transposed once (lane `j` of
//! vector `g` holds row `j`'s values `4g..4g + 4`), so per row of `x` eight multiply-adds with
//! the activation's groups of four broadcast give the 8 rows' exact `i32` block sums side by
//! side (AVX2's `Q8_0` reduces 8 products instead: its multiply-add saturates on the offset
//! activations), converted and accumulated with one fused multiply-add by the weight scales
//! times the activation scale: one vector instruction of f32 work for 8 outputs, where the
//! one-weight-row kernels spent three per output. The rows of `x` are taken in blocks whose
//! 8-bit values stay in L2 ([`X_BLOCK_BYTES`]) while every weight row of a thread's range
//! passes over them.
//!
//! The numbers are the four-row decode kernel's, lane for lane: each output is
//! `acc = fma(dw * dx, s, acc)` over the blocks in order, `s` the block's exact integer dot
//! product (`Q4_1`: then `acc = fma(m, dx * sum x, acc)`). So a row of `x` gets the same bits
//! in prefill as in decode (on weights of whole fours of rows), whatever the tile, block or
//! thread it falls in; the published budgets ([`super::QUANTIZED_ACTIVATION_BUDGETS`],
//! [`super::RESIDUAL_ACTIVATION_BUDGETS`]) cover both kernels.
//!
//! Taken for `Q4_1` on the x86 families ([`tiled`]), and for tails of `Q8_0`, `Q4_0` and
//! `Q5_0` weights past their last whole group of eight rows: their whole groups take the
//! eight-row GEMM on the interleaved layout (`super::x86`'s `groups`), which needs no transpose.
//! `Q4_K` and `Q6_K` take their own GEMM (`kquant_x86`: eight weight rows in the lanes of a
//! vector, the group repacked once per block of rows of `x`), whose numbers are the portable
//! kernel's, not the decode kernels' (see there); at residual precision only up to
//! [`residual_k_quant_max_rows`] rows, past which the f32 panels are faster. The other
//! families keep their per-row kernels.

use super::{Family, XRow};
use crate::dtype::DType;
use crate::error::Result;

#[cfg(target_arch = "x86_64")]
mod kquant_x86;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod kquant_tests;
#[cfg(test)]
mod tests;

/// Fewest quantized rows of `x` the tiled kernels take: fewer (decode, one row of `x` or its
/// two residual terms) keep the four-weight-row decode kernel, which streams the weight.
pub const MIN_ROWS: usize = 3;

/// Most bytes of 8-bit activations in one block of rows of `x` (L2-resident while a thread's
/// weight rows pass over it).
pub const X_BLOCK_BYTES: usize = 192 * 1024;

/// Whether `nr` quantized rows of `x` against a weight of `dtype` take the tiled kernels on
/// `family`.
pub fn tiled(family: Family, dtype: DType, nr: usize) -> bool {
    nr >= MIN_ROWS
        && matches!(
            dtype,
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q4_K | DType::Q6_K
        )
        && matches!(family, Family::Avx2 | Family::AvxVnni | Family::Avx512Vnni)
        && family.missing().is_none()
}

/// The most rows of x for which prefill of a `Q4_1` weight (and, on AVX2 without VNNI, of
/// `Q4_0` and `Q5_0`: [`residual_prefill`]) at residual precision takes the integer kernels: the f32 panel path gains with rows (each decoded panel serves more of them)
/// while the tiled kernels' rate stays flat. Measured end to end on the 0.5B Qwen's Q4_0 file
/// (1 thread, AVX-512 VNNI, 2026-11-26, before Q4_0 took the eight-row GEMM): the tiles
/// 1.5-5.5% faster at 64 rows, the panels 2-10% faster at 128 and 7-11% at 256.
pub const RESIDUAL_PREFILL_MAX_ROWS: usize = 64;

/// Whether prefill of `rows` rows of x at [`super::Precision::Residual`] (two integer products
/// per weight block) on `family` with a weight of `dtype` takes the integer products rather
/// than the f32 panel path: where measured faster. `Q4_0`, `Q5_0` and `Q8_0` take the eight-row
/// GEMM on interleaved groups (a plain weight interleaved a span at a time) at any count:
/// 1.1-1.3x the panels at 64 and 256 rows (`qgemm` bench, 1 thread, AVX-512 VNNI, 2026-11-27).
/// On AVX2 without VNNI the integer products cost more (`vpmaddubsw` and `vpmaddwd` where VNNI
/// has one `vpdpbusd`; `Q8_0`'s signed bytes a `vpsignb` more), twice at residual precision,
/// and the panels were faster for `Q8_0` at any count and for `Q4_0` and `Q5_0` above
/// [`RESIDUAL_PREFILL_MAX_ROWS`] (0.5B prefill, 1 thread, AMD EPYC Zen 3, 2026-11-27, two
/// interleaved pairs, tok/s integer against panels: Q8_0 at 64 tokens 66.1-66.3 against
/// 90.5-92.9; Q4_0 at 64 97.2-99.5 against 90.6-92.1, at 256 90.9-92.0 against 98.5-100.9;
/// Q4_K_M, whose 896-wide rows are `Q5_0`, at 256 82.2-82.8 against 95.3-97.6). `Q4_1` takes
/// the tiled kernels up to [`RESIDUAL_PREFILL_MAX_ROWS`] rows; the K-quants' per-row kernels
/// are slower than the panels at residual precision, faster at single.
pub fn residual_prefill(family: Family, dtype: DType, rows: usize) -> bool {
    let x86 = matches!(family, Family::Avx2 | Family::AvxVnni | Family::Avx512Vnni)
        && family.missing().is_none();
    let avx2_panels =
        family == Family::Avx2 && (dtype == DType::Q8_0 || rows > RESIDUAL_PREFILL_MAX_ROWS);
    (x86 && super::interleave::supports(dtype) && !avx2_panels)
        || (rows <= RESIDUAL_PREFILL_MAX_ROWS
            && dtype == DType::Q4_1
            && tiled(family, dtype, MIN_ROWS))
        || (rows <= residual_k_quant_max_rows(family)
            && matches!(dtype, DType::Q4_K | DType::Q6_K)
            && tiled(family, dtype, MIN_ROWS))
}

/// The most rows of x for which prefill of a `Q4_K` or `Q6_K` weight at residual precision
/// takes the K-quant GEMM (`kquant_x86`) rather than the f32 panels: 64 on the VNNI families,
/// 16 on AVX2. The GEMM's rate is flat in the rows; the panels' grows with them (each decoded
/// panel serves more rows). Measured end to end (`kernels bench llama --prefill-len P`, a
/// random Qwen2.5-1.5B-shaped Q4_K_M, Intel Xeon with AVX-512 VNNI, 2026-12-02, after the
/// scales' F16C conversion, two interleaved pairs, prefill tok/s panels against the GEMM):
/// at 64 tokens 39.1-39.9 against 41.5-42.2 on 1 thread and 76.2-77.8 against 82.3-82.6 on 2;
/// at 256 tokens 55.7-57.2 against 39.3-40.3 and 102.5-104.5 against 77.6-78.3. The 0.5B
/// Q4_K_M (its `ffn_down` alone is `Q4_K`/`Q6_K`) at 64 tokens, three pairs, 32 against 64 as
/// the limit: 182.3-187.3 against 191.9-195.4 tok/s on 1 thread, 315.4-340.2 against
/// 327.3-348.9 on 2. Forced to AVX2 on that Xeon (1 thread): at 32 tokens 27.1-27.4 against
/// 27.6-27.9 (even), at 64 34.0-34.3 against 27.7-28.4 (the panels ahead). At 16 and 32
/// tokens the GEMM led before that conversion too (2026-11-30, 1 thread, AVX-512 VNNI: 13.4-16.6
/// against 12.4-12.7 and 23.7-25.4 against 19.2-21.1 tok/s, `Q4_K` alone on it).
pub fn residual_k_quant_max_rows(family: Family) -> usize {
    if family == Family::Avx2 { 16 } else { 64 }
}

/// `out[j * xs.len() + r] = dot(w row j, xs[r])` for the rows of `w` (`row_bytes` each) on
/// `family`'s tiled kernels (where [`tiled`]; nothing is written otherwise). Errs only when a
/// kernel's scratch cannot be allocated.
pub fn rows(
    family: Family,
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) -> Result<()> {
    if !tiled(family, dtype, xs.len()) || row_bytes == 0 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    return x86::rows(family, dtype, w, row_bytes, xs, out);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (w, out);
        Ok(())
    }
}
