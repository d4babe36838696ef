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

/// Group-blocks ahead (bytes) that the group's stream is prefetched.
const PREFETCH: usize = 1024;

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
    let nr = xs.len();
    let ng = (w.len() / (8 * row_bytes).max(1)).min(out.len() / (8 * nr).max(1));
    let mut sink = Transposed { out, nr };
    unsafe { groups_into::<D, RX, _>(dtype, w, row_bytes, xs, ng, false, &mut sink) }
}

/// [`groups`] into a row-major output: lane `j` of group `g` against row `r` of `xs` goes to
/// `out[r * ld + 8 * g + j]` plus `bias[8 * g + j]` (or `+ 0.0`, as the transposing path
/// adds), and with `pairs` rows `2i` and `2i + 1` of `xs` (one row's two residual terms) are
/// summed first into `out` row `i` (the sum the transposed path makes, in the same order).
///
/// # Safety
/// `out` must be valid for writes at `r * ld + c` for every output row `r` (`xs.len()`, or half
/// of it with `pairs`) and column `c < 8 * ng`, `ng` the whole groups in `w`, and no other
/// thread may access those values meanwhile; with `pairs`, `xs.len()` must be even. A `bias`
/// holds at least `8 * ng` values.
#[inline(always)]
pub(super) unsafe fn groups_rows<D: Dot, const RX: usize>(
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    (out, ld): (*mut f32, usize),
    pairs: bool,
    bias: Option<&[f32]>,
) {
    let ng = w.len() / (8 * row_bytes).max(1);
    let mut sink = Rows {
        out,
        ld,
        pairs,
        bias,
    };
    unsafe { groups_into::<D, RX, _>(dtype, w, row_bytes, xs, ng, pairs, &mut sink) }
}

/// Where [`groups_into`] puts the eight accumulators (lane `j` weight row `j`) of group `g`
/// against rows `r..r + R` of `x`.
trait Sink {
    unsafe fn put<const R: usize>(&mut self, g: usize, r: usize, acc: &[__m256; R]);
}

/// `out[(8 g + j) * nr + r]`: the transposed product.
struct Transposed<'a> {
    out: &'a mut [f32],
    nr: usize,
}

impl Sink for Transposed<'_> {
    #[inline(always)]
    unsafe fn put<const R: usize>(&mut self, g: usize, r: usize, acc: &[__m256; R]) {
        let o = &mut self.out[g * 8 * self.nr..(g + 1) * 8 * self.nr];
        for (i, a) in acc.iter().enumerate() {
            let mut v = [0.0f32; 8];
            // SAFETY: `v` holds 8 values.
            unsafe { _mm256_storeu_ps(v.as_mut_ptr(), *a) };
            for (j, vj) in v.iter().enumerate() {
                o[j * self.nr + r + i] = *vj;
            }
        }
    }
}

/// [`groups_rows`]' row-major output.
struct Rows<'a> {
    out: *mut f32,
    ld: usize,
    pairs: bool,
    bias: Option<&'a [f32]>,
}

impl Sink for Rows<'_> {
    #[inline(always)]
    unsafe fn put<const R: usize>(&mut self, g: usize, r: usize, acc: &[__m256; R]) {
        unsafe {
            let b = match self.bias {
                Some(b) => _mm256_loadu_ps(b[8 * g..8 * g + 8].as_ptr()),
                None => _mm256_setzero_ps(),
            };
            if self.pairs {
                debug_assert!(R.is_multiple_of(2) && r.is_multiple_of(2));
                for i in 0..R / 2 {
                    let v = _mm256_add_ps(_mm256_add_ps(acc[2 * i], acc[2 * i + 1]), b);
                    // SAFETY: row `r / 2 + i` and columns `8 g..8 g + 8` are the caller's
                    // (`groups_rows`' contract).
                    _mm256_storeu_ps(self.out.add((r / 2 + i) * self.ld + 8 * g), v);
                }
            } else {
                for (i, a) in acc.iter().enumerate() {
                    let v = _mm256_add_ps(*a, b);
                    // SAFETY: as above, row `r + i`.
                    _mm256_storeu_ps(self.out.add((r + i) * self.ld + 8 * g), v);
                }
            }
        }
    }
}

/// The loop of [`groups`] and [`groups_rows`] over the first `ng` groups of `w`, into `sink`;
/// with `pairs` the rows of `x` past the whole `RX`s go two at a time (never one), so a row's
/// two terms meet in one call.
#[inline(always)]
unsafe fn groups_into<D: Dot, const RX: usize, S: Sink>(
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    ng: usize,
    pairs: bool,
    sink: &mut S,
) {
    unsafe {
        match dtype {
            DType::Q4_0 => groups_f::<D, RX, Q4_0, S>(w, row_bytes, xs, ng, pairs, sink),
            DType::Q5_0 => groups_f::<D, RX, Q5_0, S>(w, row_bytes, xs, ng, pairs, sink),
            DType::Q8_0 => groups_f::<D, RX, Q8_0, S>(w, row_bytes, xs, ng, pairs, sink),
            _ => {}
        }
    }
}

#[inline(always)]
unsafe fn groups_f<D: Dot, const RX: usize, const F: u8, S: Sink>(
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    ng: usize,
    pairs: bool,
    sink: &mut S,
) {
    let nr = xs.len();
    let gb = 8 * row_bytes;
    if nr == 0 || gb == 0 {
        return;
    }
    let ng = ng.min(w.len() / gb);
    // A row of x holds 32 bytes a weight block.
    let x_bytes = 32 * (row_bytes / [34usize, 18, 20, 22][F as usize]);
    let per_block = (X_BLOCK_BYTES / x_bytes.max(1)).max(RX) / RX * RX;
    let mut r0 = 0;
    while r0 < nr {
        let r1 = (r0 + per_block).min(nr);
        for gi in 0..ng {
            let g = &w[gi * gb..(gi + 1) * gb];
            let mut r = r0;
            while r + RX <= r1 {
                let acc = unsafe { group_f::<D, RX, F>(g, row_bytes, &xs[r..r + RX]) };
                unsafe { sink.put(gi, r, &acc) };
                r += RX;
            }
            // One pair, or with `pairs` every pair left.
            let twos = if pairs {
                (r1 - r) / 2
            } else {
                usize::from(r + 2 <= r1)
            };
            for _ in 0..twos {
                let acc = unsafe { group_f::<D, 2, F>(g, row_bytes, &xs[r..r + 2]) };
                unsafe { sink.put(gi, r, &acc) };
                r += 2;
            }
            while r < r1 {
                let acc = unsafe { group_f::<D, 1, F>(g, row_bytes, &xs[r..r + 1]) };
                unsafe { sink.put(gi, r, &acc) };
                r += 1;
            }
        }
        r0 = r1;
    }
}

/// 4 activation bytes at `x[at..at + 4]` in every `i32` lane.
#[inline(always)]
unsafe fn bcast4(x: &[i8], at: usize) -> __m256i {
    debug_assert!(x.len() >= at + 4);
    // SAFETY: 4 bytes in bounds (the callers index within the row's blocks).
    unsafe { _mm256_set1_epi32(core::ptr::read_unaligned(x.as_ptr().add(at) as *const i32)) }
}

/// The eight rows of group `g` against the `R` rows `xs`: accumulator `r` lane `j` is row `j`
/// against `xs[r]`.
#[inline(always)]
unsafe fn group_f<D: Dot, const R: usize, const F: u8>(
    g: &[u8],
    row_bytes: usize,
    xs: &[XRow],
) -> [__m256; R] {
    let bb = [34usize, 18, 20, 22][F as usize];
    let gb = 8 * bb;
    let nb = row_bytes / bb;
    let g = &g[..nb * gb];
    let xq: [&[i8]; R] = core::array::from_fn(|r| &xs[r].qs[..32 * nb]);
    let xd: [&[f32]; R] = core::array::from_fn(|r| &xs[r].d[..nb]);
    let xsum: [&[i32]; R] = core::array::from_fn(|r| &xs[r].sums[..2 * nb]);
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
                        for r in 0..R {
                            let x = bcast4(xq[r], 32 * b + 4 * c);
                            s[r] = D::dot_u(s[r], v, x);
                        }
                    } else {
                        let w = _mm256_xor_si256(v, _mm256_set1_epi8(-128));
                        let aw = _mm256_sign_epi8(w, w);
                        for r in 0..R {
                            let x = bcast4(xq[r], 32 * b + 4 * c);
                            s[r] = D::dot_u(s[r], aw, _mm256_sign_epi8(x, w));
                        }
                    }
                }
            } else {
                let q = if F == Q5_0 { 48 } else { 16 };
                let m4 = _mm256_set1_epi8(0x0F);
                for c in 0..4 {
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
                    for r in 0..R {
                        let xl = bcast4(xq[r], 32 * b + 4 * c);
                        let xh = bcast4(xq[r], 32 * b + 16 + 4 * c);
                        s[r] = D::dot_u(s[r], lo, xl);
                        s[r] = D::dot_u(s[r], hi, xh);
                    }
                }
            }
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(blk.as_ptr() as *const __m128i));
            for r in 0..R {
                let mut si = s[r];
                if offset != 0 {
                    // sum (u - o) x = sum u x - o sum x, in i32 exactly.
                    let xs_b = *xsum[r].get_unchecked(2 * b) + *xsum[r].get_unchecked(2 * b + 1);
                    si = _mm256_sub_epi32(si, _mm256_set1_epi32(offset * xs_b));
                }
                let dx = _mm256_set1_ps(*xd[r].get_unchecked(b));
                acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(si), acc[r]);
            }
        }
        acc
    }
}
