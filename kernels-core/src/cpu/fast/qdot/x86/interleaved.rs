//! Products on the eight-row interleaved layout ([`super::super::interleave`]) on every x86
//! family through [`Dot`] ([`groups`]): whole groups of eight weight rows against one row of
//! `x` or its two residual terms (decode) or many rows (prefill), one kernel taking `R` rows of
//! `x` at a time.
//!
//! Per block: one 16-byte load and one conversion give the eight weight scales; each 32-byte
//! load of quants holds 4 bytes of every row, so one multiply-add (`vpdpbusd`, or `maddubs` +
//! `madd`) with 4 activation bytes broadcast adds to all eight rows' sums, lane `j` row `j`
//! (no horizontal add, and, unlike the plain layout's tiled GEMM, no transpose: the layout is
//! the transposed one); the activation's offset term and the f32 step (`acc + dw dx s`, one fma
//! for the eight rows) are one vector op each. The f32 arithmetic of each output is the
//! four-row kernel's (`quad`): per block `fma(dw * dx, s as f32, acc)`, with `s` the block's
//! exact integer sum, so the results are bit-identical to it whatever `R`, tile or thread an
//! output falls in.

use core::arch::x86_64::*;

use super::super::gemm::X_BLOCK_BYTES;
use super::{Dot, Q4_0, Q5_0, Q8_0, XRow, load32};
use crate::dtype::DType;

/// Bytes ahead that the group's stream is prefetched (into L1, a line at a time, as its block
/// is read). The weight is one sequential stream here (a group's eight rows are contiguous),
/// and at 1 KiB too few lines were in flight to cover the memory's latency at the rate a core
/// consumes it: the 0.5B Qwen's decode (AMD EPYC Zen 5, 1 thread, `kernels bench llama
/// --prefill-len 8 --new-tokens 16 --runs 3`, interleaved rounds, 2026-11-28, tok/s), Q4_0 at
/// 1, 2, 4, 8 and 16 KiB: 70.0-73.0, 75.5-78.1, 83.3-87.3, 89.3-95.8, 94.6-95.9; Q8_0
/// 52.7-53.2, 57.1-58.1, 62.6-65.3, 68.1-68.2, 65.2-67.1; Q4_K_M at 1 and 8 KiB 56.7-58.2 and
/// 68.6-69.1 (2 threads: Q4_0 110.3-111.6 -> 122.6-124.1). On AVX2 (Zen 3) 2 and 4 KiB had
/// measured no faster than 1 KiB.
const PREFETCH: usize = 8192;

/// Every whole group of `w` (`8 * row_bytes` bytes each) of `dtype` against every row of `xs`:
/// `out[j * xs.len() + r]`. The rows of `xs` are taken in blocks whose 8-bit values stay in L2
/// ([`X_BLOCK_BYTES`]) while every group passes over them, `RX` rows at a time within a block
/// (the rest two, then one, at a time: decode's row of `x` or its two residual terms), so each
/// group's unpacked quants serve several rows of `x` and each broadcast activation chunk eight
/// weight rows. Other dtypes (which have no interleaved layout) write nothing.
#[inline(always)]
pub(super) unsafe fn groups<D: Dot, const RX: usize>(
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) {
    unsafe {
        match dtype {
            DType::Q4_0 => groups_f::<D, RX, Q4_0>(w, row_bytes, xs, out),
            DType::Q5_0 => groups_f::<D, RX, Q5_0>(w, row_bytes, xs, out),
            DType::Q8_0 => groups_f::<D, RX, Q8_0>(w, row_bytes, xs, out),
            _ => {}
        }
    }
}

#[inline(always)]
unsafe fn groups_f<D: Dot, const RX: usize, const F: u8>(
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) {
    let nr = xs.len();
    let gb = 8 * row_bytes;
    if nr == 0 || gb == 0 {
        return;
    }
    let ng = (w.len() / gb).min(out.len() / (8 * nr));
    let nb = row_bytes / [34usize, 18, 20, 22][F as usize];
    // A row of x holds 32 bytes a weight block.
    let per_block = (X_BLOCK_BYTES / (32 * nb).max(1)).max(RX) / RX * RX;
    let mut r0 = 0;
    while r0 < nr {
        let r1 = (r0 + per_block).min(nr);
        for gi in 0..ng {
            let g = &w[gi * gb..(gi + 1) * gb];
            let o = &mut out[gi * 8 * nr..(gi + 1) * 8 * nr];
            let mut r = r0;
            while r + RX <= r1 {
                let x = RowsSrc::<RX>::new(&xs[r..r + RX], nb);
                let acc = unsafe { group_f::<D, RX, F, _>(g, nb, &x) };
                unsafe { store_t(&acc, &mut o[r..], nr) };
                r += RX;
            }
            if r + 2 <= r1 {
                let x = RowsSrc::<2>::new(&xs[r..r + 2], nb);
                let acc = unsafe { group_f::<D, 2, F, _>(g, nb, &x) };
                unsafe { store_t(&acc, &mut o[r..], nr) };
                r += 2;
            }
            while r < r1 {
                let x = RowsSrc::<1>::new(&xs[r..r + 1], nb);
                let acc = unsafe { group_f::<D, 1, F, _>(g, nb, &x) };
                unsafe { store_t(&acc, &mut o[r..], nr) };
                r += 1;
            }
        }
        r0 = r1;
    }
}

/// Accumulator `r` lane `j` to `out[j * ld + r]`.
#[inline(always)]
unsafe fn store_t<const R: usize>(acc: &[__m256; R], out: &mut [f32], ld: usize) {
    for (r, a) in acc.iter().enumerate() {
        let mut v = [0.0f32; 8];
        // SAFETY: `v` holds 8 values.
        unsafe { _mm256_storeu_ps(v.as_mut_ptr(), *a) };
        for (j, vj) in v.iter().enumerate() {
            out[j * ld + r] = *vj;
        }
    }
}

/// Where [`group_f`] reads `R` rows of quantized `x` block by block: chunk `c` (4 bytes:
/// values `4c..4c + 4` of the block) of row `r` broadcast, the row's block scale, and its
/// offset term (`offset` times the block's integer sum).
pub(super) trait XSrc<const R: usize> {
    unsafe fn chunk(&self, b: usize, c: usize, r: usize) -> __m256i;
    unsafe fn scale(&self, b: usize, r: usize) -> f32;
    unsafe fn offset_term(&self, b: usize, r: usize, offset: i32) -> i32;
}

/// `R` rows as [`Acts`](super::super::Acts) holds them (decode, and [`groups`]).
struct RowsSrc<'a, const R: usize> {
    q: [&'a [i8]; R],
    d: [&'a [f32]; R],
    sums: [&'a [i32]; R],
}

impl<'a, const R: usize> RowsSrc<'a, R> {
    #[inline(always)]
    fn new(xs: &[XRow<'a>], nb: usize) -> Self {
        RowsSrc {
            q: core::array::from_fn(|r| &xs[r].qs[..32 * nb]),
            d: core::array::from_fn(|r| &xs[r].d[..nb]),
            sums: core::array::from_fn(|r| &xs[r].sums[..2 * nb]),
        }
    }
}

impl<const R: usize> XSrc<R> for RowsSrc<'_, R> {
    #[inline(always)]
    unsafe fn chunk(&self, b: usize, c: usize, r: usize) -> __m256i {
        unsafe { bcast4(self.q[r], 32 * b + 4 * c) }
    }

    #[inline(always)]
    unsafe fn scale(&self, b: usize, r: usize) -> f32 {
        // SAFETY: `b < nb` (the callers' blocks).
        unsafe { *self.d[r].get_unchecked(b) }
    }

    #[inline(always)]
    unsafe fn offset_term(&self, b: usize, r: usize, offset: i32) -> i32 {
        // SAFETY: as above; two sums of 16 a block.
        let s =
            unsafe { *self.sums[r].get_unchecked(2 * b) + *self.sums[r].get_unchecked(2 * b + 1) };
        offset * s
    }
}

/// 4 activation bytes at `x[at..at + 4]` in every `i32` lane.
#[inline(always)]
unsafe fn bcast4(x: &[i8], at: usize) -> __m256i {
    debug_assert!(x.len() >= at + 4);
    // SAFETY: 4 bytes in bounds (the callers index within the row's blocks).
    unsafe { _mm256_set1_epi32(core::ptr::read_unaligned(x.as_ptr().add(at) as *const i32)) }
}

/// The eight rows of group `g` (`nb` blocks) against the `R` rows of `x`: accumulator `r`
/// lane `j` is row `j` against row `r`.
#[inline(always)]
pub(super) unsafe fn group_f<D: Dot, const R: usize, const F: u8, X: XSrc<R>>(
    g: &[u8],
    nb: usize,
    x: &X,
) -> [__m256; R] {
    let bb = [34usize, 18, 20, 22][F as usize];
    let gb = 8 * bb;
    let g = &g[..nb * gb];
    // What the unsigned quants carry on top of the values: 8 (`Q4_0`), 16 (`Q5_0`) and, where
    // `vpdpbusd` takes `Q8_0`'s stored bytes as they are, 128; AVX2 takes them signed.
    let offset = match F {
        Q4_0 => 8,
        Q5_0 => 16,
        _ if D::VNNI => 128,
        _ => 0,
    };
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..nb {
            let blk = g.get_unchecked(b * gb..(b + 1) * gb);
            let p = g.as_ptr().wrapping_add(b * gb + PREFETCH);
            for l in 0..gb.div_ceil(64) {
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64 * l) as *const i8);
            }
            let mut s = [_mm256_setzero_si256(); R];
            if F == Q8_0 {
                for c in 0..8 {
                    let v = load32(blk.get_unchecked(16 + 32 * c..16 + 32 * c + 32));
                    if D::VNNI {
                        for (r, sr) in s.iter_mut().enumerate() {
                            *sr = D::dot_u(*sr, v, x.chunk(b, c, r));
                        }
                    } else {
                        let w = _mm256_xor_si256(v, _mm256_set1_epi8(-128));
                        let aw = _mm256_sign_epi8(w, w);
                        for (r, sr) in s.iter_mut().enumerate() {
                            *sr = D::dot_u(*sr, aw, _mm256_sign_epi8(x.chunk(b, c, r), w));
                        }
                    }
                }
            } else {
                let mut p16 = [_mm256_setzero_si256(); R];
                for c in 0..4 {
                    let (lo, hi) = unpack_quads::<D, F>(blk, c);
                    if D::VNNI {
                        for (r, sr) in s.iter_mut().enumerate() {
                            *sr = D::dot_u(*sr, lo, x.chunk(b, c, r));
                            *sr = D::dot_u(*sr, hi, x.chunk(b, c + 4, r));
                        }
                    } else {
                        avx2_quads::<R, F, X>((lo, hi), x, (b, c), &mut p16, &mut s);
                    }
                }
            }
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(blk.as_ptr() as *const __m128i));
            scale_step(dw, &s, x, (b, offset), &mut acc);
        }
        acc
    }
}

/// Chunk `c` (0-3) of a `Q4_0` or `Q5_0` block of an interleaved group: the low and the high
/// nibbles of its 32 quant bytes (values `4c..4c + 4` and `16 + 4c..` of every row), with
/// `Q5_0`'s fifth bits.
///
/// # Safety
/// `blk` holds a whole block of the group (`8 * 18` or `8 * 22` bytes); the caller runs `D`.
#[inline(always)]
pub(super) unsafe fn unpack_quads<D: Dot, const F: u8>(blk: &[u8], c: usize) -> (__m256i, __m256i) {
    let q = if F == Q5_0 { 48 } else { 16 };
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let v = load32(blk.get_unchecked(q + 32 * c..q + 32 * c + 32));
        let mut lo = _mm256_and_si256(v, m4);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if F == Q5_0 {
            let mask = |m: usize| {
                let at = 16 + 4 * m;
                u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]])
            };
            lo = _mm256_or_si256(lo, D::high_bits(mask(2 * c)));
            hi = _mm256_or_si256(hi, D::high_bits(mask(2 * c + 1)));
        }
        (lo, hi)
    }
}

/// AVX2's multiply-adds of one chunk `c` of block `b` (`lo`, `hi` from [`unpack_quads`]) for
/// the `R` rows of `x`: `maddubs` pairs summed in `i16` in `p16`, widened into `s` by one
/// `madd` every `per_madd` chunks (two `maddubs` a chunk) instead of after each: |pair| <= 2 *
/// 15 * 127 = 3810 (`Q4_0`: 8 fit in 32767) or 2 * 31 * 127 = 7874 (`Q5_0`: 4 fit), so the
/// `i32` sums are the same integers.
///
/// # Safety
/// The caller runs AVX2; `x` holds block `b`.
#[inline(always)]
pub(super) unsafe fn avx2_quads<const R: usize, const F: u8, X: XSrc<R>>(
    (lo, hi): (__m256i, __m256i),
    x: &X,
    (b, c): (usize, usize),
    p16: &mut [__m256i; R],
    s: &mut [__m256i; R],
) {
    unsafe {
        for (r, pr) in p16.iter_mut().enumerate() {
            let pl = _mm256_maddubs_epi16(lo, x.chunk(b, c, r));
            let ph = _mm256_maddubs_epi16(hi, x.chunk(b, c + 4, r));
            *pr = _mm256_add_epi16(*pr, _mm256_add_epi16(pl, ph));
        }
        let per_madd = if F == Q5_0 { 2 } else { 4 };
        if (c + 1) % per_madd == 0 {
            for (sr, pr) in s.iter_mut().zip(p16.iter_mut()) {
                let wide = _mm256_madd_epi16(*pr, _mm256_set1_epi16(1));
                *sr = _mm256_add_epi32(*sr, wide);
                *pr = _mm256_setzero_si256();
            }
        }
    }
}

/// The f32 step of block `b` for the `R` rows of `x`: `acc = fma(dw * dx, s - offset term,
/// acc)`, the offset term (`offset` times the block's sum: `sum (u - o) x = sum u x - o sum
/// x`, in `i32` exactly) taken only where `offset` is not 0.
///
/// # Safety
/// The caller runs AVX2 and FMA; `x` holds block `b`.
#[inline(always)]
pub(super) unsafe fn scale_step<const R: usize, X: XSrc<R>>(
    dw: __m256,
    s: &[__m256i; R],
    x: &X,
    (b, offset): (usize, i32),
    acc: &mut [__m256; R],
) {
    unsafe {
        for r in 0..R {
            let mut si = s[r];
            if offset != 0 {
                si = _mm256_sub_epi32(si, _mm256_set1_epi32(x.offset_term(b, r, offset)));
            }
            let dx = _mm256_set1_ps(x.scale(b, r));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(si), acc[r]);
        }
    }
}
