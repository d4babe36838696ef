//! The integer products on x86_64: one body per weight format, written once over [`Dot`] (the
//! 8-bit by 8-bit multiply-add of a family) and compiled per family in a `target_feature`
//! function:
//!
//! - AVX2: `vpmaddubsw` (u8 x i8 pairs to i16) then `vpmaddwd` with ones (to i32);
//! - AVX-VNNI and AVX-512 VNNI: `vpdpbusd` (u8 x i8 quads summed into i32 in one instruction).
//!
//! Both multiply an unsigned byte by a signed one; signed weights go through the sign trick
//! (`|w|` times `x` with `w`'s sign), which is why the activations stay in `[-127, 127]`. One
//! 32-element chunk gives eight `i32` lanes, lane `t` the sum over elements `4t..4t + 4`, so
//! lanes 0-3 and 4-7 are the two 16-element halves (`Q6_K`'s sub-blocks).

use core::arch::x86_64::*;

use super::{Family, TILE, XRow};
// The f16 at `b[at..at + 2]` as f32 (F16C: exact, as `quant::decode::f16_at`).
use crate::cpu::fast::matref::f16c_at as f16_at;
use crate::dtype::DType;

mod interleaved;
mod kquant;
mod tiles;

/// The prefill K-quant GEMM (`gemm/kquant_x86.rs`) unpacks `Q4_K` scales with decode's masks
/// and prefetches with decode's line loop.
pub(super) use kquant::{prefetch_lines, q4_k_scales};
pub use tiles::TiledX;

pub fn has_avx2() -> bool {
    #[cfg(feature = "std")]
    return std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c");
    #[cfg(not(feature = "std"))]
    return cfg!(all(
        target_feature = "avx2",
        target_feature = "fma",
        target_feature = "f16c"
    ));
}

pub fn has_avxvnni() -> bool {
    #[cfg(feature = "std")]
    return has_avx2() && std::is_x86_feature_detected!("avxvnni");
    #[cfg(not(feature = "std"))]
    return has_avx2() && cfg!(target_feature = "avxvnni");
}

pub fn has_avx512vnni() -> bool {
    #[cfg(feature = "std")]
    return has_avx2()
        && std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vnni");
    #[cfg(not(feature = "std"))]
    return has_avx2()
        && cfg!(all(
            target_feature = "avx512f",
            target_feature = "avx512vl",
            target_feature = "avx512bw",
            target_feature = "avx512vnni"
        ));
}

/// The rows of `w` against `xs` on an x86 `family` (which this CPU runs: the caller checked).
pub fn rows(
    family: Family,
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) {
    // SAFETY: the caller checked that the CPU has the family's features (`Family::missing`).
    unsafe {
        match family {
            Family::Avx512Vnni => rows_avx512vnni(dtype, w, row_bytes, xs, out),
            Family::AvxVnni => rows_avxvnni(dtype, w, row_bytes, xs, out),
            _ => rows_avx2(dtype, w, row_bytes, xs, out),
        }
    }
}

/// The whole interleaved groups ([`super::interleave`]) of `w` (`8 * row_bytes` bytes each) of
/// `dtype` (`Q4_0`, `Q5_0`, `Q8_0`) against every row of `xs` (decode's one or two, prefill's
/// many) on an x86 `family` (which this CPU runs: the caller checked): `out[j * xs.len() + r]`.
/// AVX-512 VNNI (32 vector registers) takes 8 rows of `x` at a time, AVX2 and AVX-VNNI (16)
/// take 4.
pub fn groups(
    family: Family,
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) {
    // SAFETY: the caller checked that the CPU has the family's features (`Family::missing`).
    unsafe {
        match family {
            Family::Avx512Vnni => groups_avx512vnni(dtype, w, row_bytes, xs, out),
            Family::AvxVnni => groups_avxvnni(dtype, w, row_bytes, xs, out),
            _ => groups_avx2(dtype, w, row_bytes, xs, out),
        }
    }
}

/// The rows of `xs` (`nb` blocks each) packed for [`groups_rows`] on `family` against a weight
/// of `dtype`: tiles of the family's rows of `x`, each block's offset term for the format.
pub fn tiled_x(
    family: Family,
    dtype: DType,
    xs: &[XRow],
    nb: usize,
) -> crate::error::Result<TiledX> {
    let vnni = matches!(family, Family::AvxVnni | Family::Avx512Vnni);
    // The offset `interleaved::group_f` takes off the unsigned quants' products.
    let offset = match dtype {
        DType::Q4_0 => 8,
        DType::Q5_0 => 16,
        DType::Q8_0 if vnni => 128,
        _ => 0,
    };
    TiledX::new(xs, rows_at_once(family), nb, offset)
}

/// Rows of `x` the eight-row kernel takes at a time on `family`. Twelve on AVX-512 VNNI (24
/// accumulators in its 32 registers): the weight's unpacking and scales serve half again as
/// many rows as at eight. The 0.5B Qwen's prefill (AMD EPYC Zen 5, `kernels bench llama --runs
/// 2`, two interleaved rounds, 2026-11-28, tok/s, 8 against 12): Q4_0 256 tokens 1 thread
/// 380.1-384.5 against 395.3-397.5, 64 tokens 390.5-394.6 against 398.3-399.2, 256 on 2
/// threads 734.1-745.9 against 742.7-751.8; Q8_0 256 343.0-345.1 against 367.4-367.5; Q4_K_M
/// 64 283.3-285.4 against 289.0-294.1.
fn rows_at_once(family: Family) -> usize {
    if family == Family::Avx512Vnni { 12 } else { 4 }
}

/// [`groups`] into a row-major output (`out` and its row stride) on `x` packed by [`tiled_x`]
/// for the same family and dtype, each row's residual `pairs` summed and `bias` added
/// ([`tiles::groups_rows`], whose contract `out` meets).
///
/// # Safety
/// As [`tiles::groups_rows`]; and the CPU runs `family` (the caller checked).
#[allow(clippy::too_many_arguments)]
pub unsafe fn groups_rows(
    family: Family,
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    x: &TiledX,
    out: (*mut f32, usize),
    pairs: bool,
    bias: Option<&[f32]>,
) {
    let args = (dtype, w, row_bytes, x, out, pairs, bias);
    unsafe {
        match family {
            Family::Avx512Vnni => groups_rows_avx512vnni(args),
            Family::AvxVnni => groups_rows_avxvnni(args),
            _ => groups_rows_avx2(args),
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn groups_rows_avx2((d, w, rb, x, out, pairs, bias): tiles::RowsArgs) {
    unsafe { tiles::groups_rows::<Avx2, 4, false>(d, w, rb, x, out, pairs, bias) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn groups_rows_avxvnni((d, w, rb, x, out, pairs, bias): tiles::RowsArgs) {
    unsafe { tiles::groups_rows::<AvxVnni, 4, false>(d, w, rb, x, out, pairs, bias) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn groups_rows_avx512vnni((d, w, rb, x, out, pairs, bias): tiles::RowsArgs) {
    unsafe { tiles::groups_rows::<Avx512Vnni, 12, true>(d, w, rb, x, out, pairs, bias) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn groups_avx2(dtype: DType, w: &[u8], row_bytes: usize, xs: &[XRow], out: &mut [f32]) {
    unsafe { interleaved::groups::<Avx2, 4>(dtype, w, row_bytes, xs, out) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn groups_avxvnni(dtype: DType, w: &[u8], row_bytes: usize, xs: &[XRow], out: &mut [f32]) {
    unsafe { interleaved::groups::<AvxVnni, 4>(dtype, w, row_bytes, xs, out) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn groups_avx512vnni(
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) {
    unsafe { interleaved::groups::<Avx512Vnni, 8>(dtype, w, row_bytes, xs, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2(dtype: DType, w: &[u8], row_bytes: usize, xs: &[XRow], out: &mut [f32]) {
    unsafe { rows_with::<Avx2>(dtype, w, row_bytes, xs, out) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn rows_avxvnni(dtype: DType, w: &[u8], row_bytes: usize, xs: &[XRow], out: &mut [f32]) {
    unsafe { rows_with::<AvxVnni>(dtype, w, row_bytes, xs, out) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn rows_avx512vnni(dtype: DType, w: &[u8], row_bytes: usize, xs: &[XRow], out: &mut [f32]) {
    unsafe { rows_with::<Avx512Vnni>(dtype, w, row_bytes, xs, out) }
}

/// The multiply-add of a family: `acc + sum of u * x` over each group of 4 bytes, for `u` in
/// `[0, 128]` (as unsigned) and `x` in `[-127, 127]`.
pub(super) trait Dot {
    /// Whether `dot_u` sums in `i32` without saturating for any unsigned `u` (`vpdpbusd`).
    const VNNI: bool;

    /// `Q4_K` weight rows per pass of decode against `x`'s two residual terms
    /// ([`kquant::rows_q4_k`]): 2 on AVX-512 VNNI, where four rows kept more vectors live than
    /// its registers hold and spilled (`qdot` bench, `q4_k/residual` on a cache-resident
    /// `1024x4864` weight, Intel Xeon, 2026-11-29: 9.0 GiB/s against 4.9 with four); 4 on AVX2
    /// and AVX-VNNI, faster there with four (9.0 and 9.3 GiB/s against 7.0-8.2 and 8.0).
    const Q4_K_TERM_ROWS: usize;

    unsafe fn dot_u(acc: __m256i, u: __m256i, x: __m256i) -> __m256i;

    /// The scales of a 32-element chunk's two 16-element halves (lanes 0-3 and 4-7 of
    /// [`Dot::dot_scaled`]), each in `[-128, 127]`, as `i16` pairs (lanes 0-7 `lo`, 8-15
    /// `hi`): one `vpmaddwd` (or `vpdpwssd`) then sums each pair of `vpmaddubsw`'s products and
    /// scales it.
    #[inline(always)]
    unsafe fn scales(lo: i32, hi: i32) -> __m256i {
        unsafe { _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16)) }
    }

    /// `acc + s * dot_u(0, u, x)` per lane (`s` from [`Dot::scales`]), exactly: the K-quants'
    /// scaled sub-block sums, `s * (p0 + p1)` as `s * p0 + s * p1` (`|p| <= 2 * 128 * 127`
    /// and `|s| <= 128`: no saturation, no overflow). The VNNI families add in the same
    /// `vpdpwssd`. (`vpdpbusd`, then `vpmulld` by an `i32` scale and an add, is four micro-ops
    /// on Intel where these are two or three, for the same sums in the same lanes: decode of
    /// `Q4_K` at one term 20-30% faster and of `Q6_K` 10-20% on a cache-resident weight, `qdot`
    /// bench, AVX-512 VNNI.)
    #[inline(always)]
    unsafe fn dot_scaled(acc: __m256i, u: __m256i, x: __m256i, s: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), s)) }
    }

    /// One `Q6_K` weight row against `R` rows of `x` ([`kquant::q6_k`]).
    ///
    /// # Safety
    /// The CPU has the family's features; `w` is whole super-blocks and each row of `xs`
    /// covers them.
    #[inline(always)]
    unsafe fn q6_k<const R: usize>(w: &[u8], xs: &[XRow]) -> [f32; R]
    where
        Self: Sized,
    {
        unsafe { kquant::q6_k::<Self, R>(w, xs) }
    }

    /// 16 in byte `i` where bit `i` of `qh` is set, else 0 (`Q5_0`'s fifth bits).
    #[inline(always)]
    unsafe fn high_bits(qh: u32) -> __m256i {
        unsafe {
            let bytes = _mm256_shuffle_epi8(
                _mm256_set1_epi32(qh as i32),
                _mm256_setr_epi8(
                    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                    3, 3, 3, 3, 3, 3,
                ),
            );
            let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
            let bits = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
            _mm256_and_si256(bits, _mm256_set1_epi8(16))
        }
    }
}

pub(super) struct Avx2;
pub(super) struct AvxVnni;
pub(super) struct Avx512Vnni;

impl Dot for Avx2 {
    const VNNI: bool = false;
    const Q4_K_TERM_ROWS: usize = 4;

    #[inline(always)]
    unsafe fn dot_u(acc: __m256i, u: __m256i, x: __m256i) -> __m256i {
        // |u * x| pairs stay below 2 * 128 * 127 < 2^15: no saturation.
        unsafe {
            let p = _mm256_maddubs_epi16(u, x);
            _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))
        }
    }
}

impl Dot for AvxVnni {
    const VNNI: bool = true;
    const Q4_K_TERM_ROWS: usize = 4;

    #[inline(always)]
    unsafe fn dot_u(acc: __m256i, u: __m256i, x: __m256i) -> __m256i {
        unsafe { _mm256_dpbusd_avx_epi32(acc, u, x) }
    }

    #[inline(always)]
    unsafe fn dot_scaled(acc: __m256i, u: __m256i, x: __m256i, s: __m256i) -> __m256i {
        // As on AVX2, the pair sums and the scale in one `vpdpwssd`.
        unsafe { _mm256_dpwssd_avx_epi32(acc, _mm256_maddubs_epi16(u, x), s) }
    }
}

impl Dot for Avx512Vnni {
    const VNNI: bool = true;
    const Q4_K_TERM_ROWS: usize = 2;

    #[inline(always)]
    unsafe fn dot_u(acc: __m256i, u: __m256i, x: __m256i) -> __m256i {
        unsafe { _mm256_dpbusd_epi32(acc, u, x) }
    }

    #[inline(always)]
    unsafe fn dot_scaled(acc: __m256i, u: __m256i, x: __m256i, s: __m256i) -> __m256i {
        // As on AVX2, the pair sums and the scale in one `vpdpwssd`.
        unsafe { _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, x), s) }
    }

    #[inline(always)]
    unsafe fn q6_k<const R: usize>(w: &[u8], xs: &[XRow]) -> [f32; R] {
        // SAFETY: this family's kernels run with AVX-512 F, BW, VL and VNNI.
        unsafe { kquant::q6_k_512::<R>(w, xs) }
    }

    #[inline(always)]
    unsafe fn high_bits(qh: u32) -> __m256i {
        // The 32 bits are the byte mask itself (AVX-512BW).
        unsafe { _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(16)) }
    }
}

#[inline(always)]
unsafe fn load32(p: &[u8]) -> __m256i {
    debug_assert!(p.len() >= 32);
    // SAFETY: 32 bytes in bounds (every caller slices them).
    unsafe { _mm256_loadu_si256(p.as_ptr() as *const __m256i) }
}

#[inline(always)]
unsafe fn load_x(x: &[i8]) -> __m256i {
    debug_assert!(x.len() >= 32);
    unsafe { _mm256_loadu_si256(x.as_ptr() as *const __m256i) }
}

/// 16 bytes of nibbles as 32 bytes: the low nibbles, then the high ones.
#[inline(always)]
unsafe fn nibbles16(p: &[u8]) -> __m256i {
    debug_assert!(p.len() >= 16);
    unsafe {
        let b = _mm_loadu_si128(p.as_ptr() as *const __m128i);
        let v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
        _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
    }
}

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

#[inline(always)]
fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline(always)]
unsafe fn rows_with<D: Dot>(
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) {
    let nr = xs.len();
    if nr == 0 || row_bytes == 0 {
        return;
    }
    let mut w = w;
    let mut out = out;
    // Decode (one row of `x`, or its two residual terms): four weight rows at a time, sharing
    // the activation loads (the 32-element formats also reduce their sums together); `Q4_K`
    // takes two at a time against two terms ([`kquant::rows_q4_k`]).
    let quad_dtype = matches!(
        dtype,
        DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q4_K
    );
    if nr <= 2 && quad_dtype {
        let per = if nr == 2 && dtype == DType::Q4_K {
            D::Q4_K_TERM_ROWS
        } else {
            4
        };
        let quads = w.len() / row_bytes / per;
        let (w4, wrest) = w.split_at(quads * per * row_bytes);
        let (o4, orest) = out.split_at_mut((quads * per * nr).min(out.len()));
        for (wq, oq) in w4
            .chunks_exact(per * row_bytes)
            .zip(o4.chunks_exact_mut(per * nr))
        {
            unsafe {
                match (nr, dtype) {
                    (1, DType::Q8_0) => quad::<D, 1, Q8_0>(wq, row_bytes, xs, oq),
                    (1, DType::Q4_0) => quad::<D, 1, Q4_0>(wq, row_bytes, xs, oq),
                    (1, DType::Q4_1) => quad::<D, 1, Q4_1>(wq, row_bytes, xs, oq),
                    (1, DType::Q4_K) => kquant::rows_q4_k::<D, 1, 4>(wq, row_bytes, xs, oq),
                    (1, _) => quad::<D, 1, Q5_0>(wq, row_bytes, xs, oq),
                    (_, DType::Q8_0) => quad::<D, 2, Q8_0>(wq, row_bytes, xs, oq),
                    (_, DType::Q4_0) => quad::<D, 2, Q4_0>(wq, row_bytes, xs, oq),
                    (_, DType::Q4_1) => quad::<D, 2, Q4_1>(wq, row_bytes, xs, oq),
                    (_, DType::Q4_K) if per == 2 => {
                        kquant::rows_q4_k::<D, 2, 2>(wq, row_bytes, xs, oq)
                    }
                    (_, DType::Q4_K) => kquant::rows_q4_k::<D, 2, 4>(wq, row_bytes, xs, oq),
                    (_, _) => quad::<D, 2, Q5_0>(wq, row_bytes, xs, oq),
                }
            }
        }
        (w, out) = (wrest, orest);
    }
    for (wr, o) in w.chunks_exact(row_bytes).zip(out.chunks_exact_mut(nr)) {
        let mut tiles = xs.chunks_exact(TILE);
        let mut outs = o.chunks_exact_mut(TILE);
        for (xt, ot) in (&mut tiles).zip(&mut outs) {
            unsafe { row::<D, TILE>(dtype, wr, xt, ot) };
        }
        // The rest in pairs (decode's two residual terms), then one.
        let (xr, or) = (tiles.remainder(), outs.into_remainder());
        let mut pairs = xr.chunks_exact(2);
        let mut opairs = or.chunks_exact_mut(2);
        for (xt, ot) in (&mut pairs).zip(&mut opairs) {
            unsafe { row::<D, 2>(dtype, wr, xt, ot) };
        }
        for (x, ot) in pairs.remainder().iter().zip(opairs.into_remainder()) {
            let mut one = [0.0f32];
            unsafe { row::<D, 1>(dtype, wr, core::slice::from_ref(x), &mut one) };
            *ot = one[0];
        }
    }
}

/// One weight row against `R` rows of `x`.
#[inline(always)]
unsafe fn row<D: Dot, const R: usize>(dtype: DType, w: &[u8], xs: &[XRow], out: &mut [f32]) {
    let r = unsafe {
        match dtype {
            DType::Q8_0 => blocks32::<D, R, Q8_0>(w, xs),
            DType::Q4_0 => blocks32::<D, R, Q4_0>(w, xs),
            DType::Q4_1 => blocks32::<D, R, Q4_1>(w, xs),
            DType::Q5_0 => blocks32::<D, R, Q5_0>(w, xs),
            DType::Q4_K => kquant::q4_k::<D, R>(w, xs),
            DType::Q6_K => D::q6_k::<R>(w, xs),
            _ => [0.0; R],
        }
    };
    out.copy_from_slice(&r[..out.len()]);
}

const Q8_0: u8 = 0;
const Q4_0: u8 = 1;
const Q4_1: u8 = 2;
const Q5_0: u8 = 3;

/// A 32-element block of format `F`: its values as signed bytes (`Q4_1`: unsigned ones), its
/// scale and its min (0 but for `Q4_1`).
#[inline(always)]
unsafe fn unpack32<D: Dot, const F: u8>(b: &[u8]) -> (__m256i, f32, f32) {
    unsafe {
        let m = if F == Q4_1 { f16_at(b, 2) } else { 0.0 };
        (unpack_q::<D, F>(b), f16_at(b, 0), m)
    }
}

/// The values of a 32-element block of format `F` (see [`unpack32`]).
#[inline(always)]
unsafe fn unpack_q<D: Dot, const F: u8>(b: &[u8]) -> __m256i {
    unsafe {
        let u = unpack_u::<D, F>(b);
        match F {
            Q4_0 => _mm256_sub_epi8(u, _mm256_set1_epi8(8)),
            Q5_0 => _mm256_sub_epi8(u, _mm256_set1_epi8(16)),
            _ => u,
        }
    }
}

/// What [`unpack_q`] subtracts from [`unpack_u`]'s bytes for format `F`.
const fn offset(f: u8) -> i32 {
    match f {
        Q4_0 => 8,
        Q5_0 => 16,
        _ => 0,
    }
}

/// The stored values of a 32-element block before its offset ([`offset`]): unsigned for the
/// 4- and 5-bit formats, signed for `Q8_0`.
#[inline(always)]
unsafe fn unpack_u<D: Dot, const F: u8>(b: &[u8]) -> __m256i {
    unsafe {
        match F {
            Q8_0 => load32(&b[2..34]),
            Q4_0 => nibbles16(&b[2..18]),
            Q4_1 => nibbles16(&b[4..20]),
            _ => {
                let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                _mm256_or_si256(nibbles16(&b[6..22]), D::high_bits(qh))
            }
        }
    }
}

/// How far ahead (bytes) the four-row decode prefetches each row's stream.
const PREFETCH: usize = 1024;

/// Four weight rows of a 32-element format (`w` holds them `row_bytes` apart) against `R` rows
/// of `x`: `out[j * R + r]`. Each activation block is loaded once for the four rows; the four
/// block sums of one row of `x` are reduced together (`vphaddd`) and scaled as one vector by
/// the four weight scales (converted together) times the activation's.
#[inline(always)]
unsafe fn quad<D: Dot, const R: usize, const F: u8>(
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) {
    let bb = [34, 18, 20, 22][F as usize];
    let nb = row_bytes / bb;
    let rows: [&[u8]; 4] = core::array::from_fn(|j| &w[j * row_bytes..(j + 1) * row_bytes]);
    let xq: [&[i8]; R] = core::array::from_fn(|r| &xs[r].qs[..32 * nb]);
    let xd: [&[f32]; R] = core::array::from_fn(|r| &xs[r].d[..nb]);
    let xsum: [&[i32]; R] = core::array::from_fn(|r| &xs[r].sums[..2 * nb]);
    unsafe {
        let mut acc = [_mm_setzero_ps(); R];
        for b in 0..nb {
            let at = b * bb;
            let wb: [&[u8]; 4] = core::array::from_fn(|j| rows[j].get_unchecked(at..at + bb));
            // Each row's stream PREFETCH bytes ahead, into L1 (past the row's end: the same
            // row of the next four): with the hardware prefetcher alone, four interleaved
            // streams ran well below the memory bandwidth. A fixed distance keeps the lines in
            // flight within L1 whatever the row length. A prefetch never faults: past the
            // weight it is wasted, not wrong.
            let ahead = at + PREFETCH;
            let (row, off) = if ahead < row_bytes {
                (0, ahead)
            } else {
                (4, ahead - row_bytes)
            };
            for j in 0..4 {
                let p = w.as_ptr().wrapping_add((row + j) * row_bytes + off);
                _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
            }
            let x: [__m256i; R] =
                core::array::from_fn(|r| load_x(xq[r].get_unchecked(32 * b..32 * b + 32)));
            let mut p = [[_mm256_setzero_si256(); 4]; R];
            for j in 0..4 {
                let q = unpack_u::<D, F>(wb[j]);
                if F != Q8_0 {
                    // Unsigned values straight into the multiply (the offset comes off the
                    // sums below).
                    for r in 0..R {
                        p[r][j] = D::dot_u(_mm256_setzero_si256(), q, x[r]);
                    }
                } else {
                    let aq = _mm256_sign_epi8(q, q);
                    for r in 0..R {
                        p[r][j] = D::dot_u(_mm256_setzero_si256(), aq, _mm256_sign_epi8(x[r], q));
                    }
                }
            }
            let dw = _mm_cvtph_ps(_mm_setr_epi16(
                u16_at(wb[0], 0) as i16,
                u16_at(wb[1], 0) as i16,
                u16_at(wb[2], 0) as i16,
                u16_at(wb[3], 0) as i16,
                0,
                0,
                0,
                0,
            ));
            for r in 0..R {
                let h01 = _mm256_hadd_epi32(p[r][0], p[r][1]);
                let h23 = _mm256_hadd_epi32(p[r][2], p[r][3]);
                let h = _mm256_hadd_epi32(h01, h23);
                let mut s =
                    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                if offset(F) != 0 {
                    // sum (u - o) x = sum u x - o sum x, in i32 exactly.
                    let xs_b = *xsum[r].get_unchecked(2 * b) + *xsum[r].get_unchecked(2 * b + 1);
                    s = _mm_sub_epi32(s, _mm_set1_epi32(offset(F) * xs_b));
                }
                let dx = _mm_set1_ps(*xd[r].get_unchecked(b));
                acc[r] = _mm_fmadd_ps(_mm_mul_ps(dw, dx), _mm_cvtepi32_ps(s), acc[r]);
            }
            if F == Q4_1 {
                let mw = _mm_cvtph_ps(_mm_setr_epi16(
                    u16_at(wb[0], 2) as i16,
                    u16_at(wb[1], 2) as i16,
                    u16_at(wb[2], 2) as i16,
                    u16_at(wb[3], 2) as i16,
                    0,
                    0,
                    0,
                    0,
                ));
                for r in 0..R {
                    let xs_b = *xsum[r].get_unchecked(2 * b) + *xsum[r].get_unchecked(2 * b + 1);
                    let m = *xd[r].get_unchecked(b) * xs_b as f32;
                    acc[r] = _mm_fmadd_ps(mw, _mm_set1_ps(m), acc[r]);
                }
            }
        }
        for r in 0..R {
            let mut v = [0.0f32; 4];
            _mm_storeu_ps(v.as_mut_ptr(), acc[r]);
            for j in 0..4 {
                out[j * R + r] = v[j];
            }
        }
    }
}

/// The 32-element formats.
#[inline(always)]
unsafe fn blocks32<D: Dot, const R: usize, const F: u8>(w: &[u8], xs: &[XRow]) -> [f32; R] {
    let bb = [34, 18, 20, 22][F as usize];
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut mins = [0.0f32; R];
        for (b, wb) in w.chunks_exact(bb).enumerate() {
            let (q, d, m) = unpack32::<D, F>(wb);
            if F != Q4_1 {
                let aq = _mm256_sign_epi8(q, q);
                for r in 0..R {
                    let x = &xs[r];
                    let xq = load_x(&x.qs[32 * b..]);
                    let p = D::dot_u(_mm256_setzero_si256(), aq, _mm256_sign_epi8(xq, q));
                    let dd = _mm256_set1_ps(d * x.d[b]);
                    acc[r] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[r]);
                }
            } else {
                for r in 0..R {
                    let x = &xs[r];
                    let xq = load_x(&x.qs[32 * b..]);
                    let p = D::dot_u(_mm256_setzero_si256(), q, xq);
                    let dx = x.d[b];
                    let dd = _mm256_set1_ps(d * dx);
                    acc[r] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[r]);
                    mins[r] += m * dx * (x.sums[2 * b] + x.sums[2 * b + 1]) as f32;
                }
            }
        }
        let mut out = [0.0f32; R];
        for r in 0..R {
            out[r] = hsum(acc[r]) + mins[r];
        }
        out
    }
}

/// [`super::quantize_term`] on AVX2, bit for bit: every block of `x` (`block` values each, a
/// multiple of 32) into `qs`, its scale into `d`, the sum of every 16 values into `sums`, and
/// (given `res`) what the 8 bits missed, `x - d q`, into `res`; `false` (nothing written) where
/// this CPU has no AVX2.
pub fn quantize_blocks(
    x: &[f32],
    block: usize,
    (qs, d, sums): (&mut [i8], &mut [f32], &mut [i32]),
    res: Option<&mut [f32]>,
) -> bool {
    if !has_avx2() || block == 0 || !block.is_multiple_of(32) {
        return false;
    }
    // SAFETY: the CPU has AVX2 (checked above).
    unsafe { quantize_blocks_avx2(x, block, (qs, d, sums), res) };
    true
}

#[target_feature(enable = "avx2")]
unsafe fn quantize_blocks_avx2(
    x: &[f32],
    block: usize,
    (qs, d, sums): (&mut [i8], &mut [f32], &mut [i32]),
    mut res: Option<&mut [f32]>,
) {
    let nb = (x.len() / block)
        .min(qs.len() / block)
        .min(d.len())
        .min(sums.len() * 16 / block);
    if res.as_ref().is_some_and(|r| r.len() < nb * block) {
        res = None;
    }
    for b in 0..nb {
        let span = b * block..(b + 1) * block;
        let (xb, qb) = (&x[span.clone()], &mut qs[span.clone()]);
        let sb = &mut sums[b * block / 16..(b + 1) * block / 16];
        let mut rb = res.as_deref_mut().map(|r| &mut r[span.clone()]);
        // SAFETY: every load and store below is within `xb`, `qb` or `rb` (whole chunks of 8
        // and 32 values).
        unsafe {
            let sign = _mm256_set1_ps(-0.0);
            let mut m = _mm256_setzero_ps();
            for c in xb.chunks_exact(8) {
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(c.as_ptr())));
            }
            let h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_max_ss(h, _mm_shuffle_ps::<0b01>(h, h));
            let amax = _mm_cvtss_f32(h);
            let id = 127.0 / amax;
            if amax == 0.0 || !id.is_finite() {
                // All zero, or a subnormal largest value: the scalar block (which divides).
                d[b] = super::quantize_block(xb, qb);
                super::block_sums_and_residual(xb, qb, d[b], sb, rb);
                continue;
            }
            let db = amax / 127.0;
            d[b] = db;
            let (vid, vd) = (_mm256_set1_ps(id), _mm256_set1_ps(db));
            // `nearest_int`: round half to even through the float's mantissa.
            let magic = _mm256_set1_ps(12_582_912.0);
            let mask = _mm256_set1_epi32(0x007f_ffff);
            let off = _mm256_set1_epi32(0x0040_0000);
            let (lo, hi) = (_mm256_set1_epi32(-127), _mm256_set1_epi32(127));
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            for (c, chunk) in xb.chunks_exact(32).enumerate() {
                let xv: [__m256; 4] =
                    core::array::from_fn(|i| _mm256_loadu_ps(chunk.as_ptr().add(8 * i)));
                let n: [__m256i; 4] = core::array::from_fn(|i| {
                    let v = _mm256_castps_si256(_mm256_add_ps(_mm256_mul_ps(xv[i], vid), magic));
                    let n = _mm256_sub_epi32(_mm256_and_si256(v, mask), off);
                    _mm256_max_epi32(_mm256_min_epi32(n, hi), lo)
                });
                let ab = _mm256_packs_epi32(n[0], n[1]);
                let cd = _mm256_packs_epi32(n[2], n[3]);
                let p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
                _mm256_storeu_si256(qb.as_mut_ptr().add(32 * c) as *mut __m256i, p);
                sb[2 * c] = hsum_i32(_mm256_add_epi32(n[0], n[1]));
                sb[2 * c + 1] = hsum_i32(_mm256_add_epi32(n[2], n[3]));
                if let Some(r) = rb.as_deref_mut() {
                    // x - d q: a product then a difference, as the scalar residual.
                    for (i, &xi) in xv.iter().enumerate() {
                        let dq = _mm256_mul_ps(vd, _mm256_cvtepi32_ps(n[i]));
                        _mm256_storeu_ps(r.as_mut_ptr().add(32 * c + 8 * i), _mm256_sub_ps(xi, dq));
                    }
                }
            }
        }
    }
}

/// The eight `i32` lanes of `v` summed.
#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }
}
