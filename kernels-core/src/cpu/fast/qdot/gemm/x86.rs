//! The tiled integer products on x86_64 (see [`super`]): one body per 32-element weight format,
//! written over [`Dot`] (a family's 8-bit multiply-add) and compiled per family in a
//! `target_feature` function. AVX-512 VNNI (32 vector registers) takes 8 weight rows by 8 rows
//! of `x`; AVX2 and AVX-VNNI (16) take 8 by 2.
//!
//! The helpers repeat `super::super::x86`'s (whose four-row decode kernel's numbers these
//! match bit for bit) so that each file can change without the other.

use core::arch::x86_64::*;

use super::super::x86::{Avx2, Avx512Vnni, AvxVnni, Dot};
use super::super::{Family, XRow};
use super::X_BLOCK_BYTES;
use super::kquant_x86::{Q4K, Q6K, kquant};
use crate::cpu::fast::matref::transpose8;
use crate::dtype::DType;
use crate::error::Result;

/// The rows of `w` against `xs` on an x86 `family` (which this CPU runs: the caller checked):
/// `out[j * xs.len() + r]`.
pub fn rows(
    family: Family,
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) -> Result<()> {
    // SAFETY: the caller checked that the CPU has the family's features (`Family::missing`).
    unsafe {
        match family {
            Family::Avx512Vnni => rows_avx512vnni(dtype, w, row_bytes, xs, out),
            Family::AvxVnni => rows_avxvnni(dtype, w, row_bytes, xs, out),
            _ => rows_avx2(dtype, w, row_bytes, xs, out),
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2(
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) -> Result<()> {
    unsafe { by_format::<Avx2, 2>(dtype, w, row_bytes, xs, out) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn rows_avxvnni(
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) -> Result<()> {
    unsafe { by_format::<AvxVnni, 2>(dtype, w, row_bytes, xs, out) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn rows_avx512vnni(
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) -> Result<()> {
    unsafe { by_format::<Avx512Vnni, 8>(dtype, w, row_bytes, xs, out) }
}

/// Weight rows per tile: one f32 lane each.
const JW: usize = 8;

const Q8_0: u8 = 0;
const Q4_0: u8 = 1;
const Q4_1: u8 = 2;
const Q5_0: u8 = 3;

/// Bytes per block of format `F`.
const fn block_bytes(f: u8) -> usize {
    [34, 18, 20, 22][f as usize]
}

/// What the stored (unsigned) values of format `F` carry above the signed ones.
const fn offset(f: u8) -> i32 {
    match f {
        Q4_0 => 8,
        Q5_0 => 16,
        _ => 0,
    }
}

#[inline(always)]
unsafe fn by_format<D: Dot, const RX: usize>(
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) -> Result<()> {
    unsafe {
        match dtype {
            DType::Q8_0 => blocked::<D, RX, Q8_0>(w, row_bytes, xs, out),
            DType::Q4_0 => blocked::<D, RX, Q4_0>(w, row_bytes, xs, out),
            DType::Q4_1 => blocked::<D, RX, Q4_1>(w, row_bytes, xs, out),
            DType::Q5_0 => blocked::<D, RX, Q5_0>(w, row_bytes, xs, out),
            // AVX-512's 32 registers hold eight rows of x's three sums each; AVX2's 16, four.
            DType::Q4_K if RX >= 8 => return kquant::<D, 8, Q4K>(w, row_bytes, xs, out),
            DType::Q4_K => return kquant::<D, 4, Q4K>(w, row_bytes, xs, out),
            DType::Q6_K if RX >= 8 => return kquant::<D, 8, Q6K>(w, row_bytes, xs, out),
            DType::Q6_K => return kquant::<D, 4, Q6K>(w, row_bytes, xs, out),
            _ => {}
        }
    }
    Ok(())
}

/// Every weight row of `w` against every row of `xs`, the rows of `xs` a block of at most
/// [`X_BLOCK_BYTES`] at a time, the weight [`JW`] rows at a time within a block (a last short
/// tile repeats its last row in the lanes past the weight, which are not stored).
#[inline(always)]
unsafe fn blocked<D: Dot, const RX: usize, const F: u8>(
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) {
    let nr = xs.len();
    let nb = row_bytes / block_bytes(F);
    if nr == 0 || nb == 0 || xs.iter().any(|x| x.qs.len() < 32 * nb || x.d.len() < nb) {
        return;
    }
    if F == Q4_1 && xs.iter().any(|x| x.sums.len() < 2 * nb) {
        return;
    }
    let n = (w.len() / row_bytes).min(out.len() / nr);
    let per_block = (X_BLOCK_BYTES / (32 * nb)).max(RX) / RX * RX;
    let mut r0 = 0;
    while r0 < nr {
        let r1 = (r0 + per_block).min(nr);
        let mut j = 0;
        while j < n {
            let m = JW.min(n - j);
            let wr: [&[u8]; JW] = core::array::from_fn(|jj| {
                let at = (j + jj.min(m - 1)) * row_bytes;
                &w[at..at + nb * block_bytes(F)]
            });
            unsafe { tile_rows::<D, RX, F>(&wr, (j, m), &xs[r0..r1], r0, nr, out) };
            j += m;
        }
        r0 = r1;
    }
}

/// The weight rows `wr` (rows `j..j + m` of the weight) against the rows `xs` (rows `r0..` of
/// `x`): `RX` at a time, then the rest one at a time.
#[inline(always)]
unsafe fn tile_rows<D: Dot, const RX: usize, const F: u8>(
    wr: &[&[u8]; JW],
    (j, m): (usize, usize),
    xs: &[XRow],
    r0: usize,
    nr: usize,
    out: &mut [f32],
) {
    let mut store = |r: usize, res: &[[f32; JW]], rows: usize| {
        for (rr, lanes) in res.iter().enumerate().take(rows) {
            for (jj, &v) in lanes.iter().enumerate().take(m) {
                out[(j + jj) * nr + r0 + r + rr] = v;
            }
        }
    };
    let mut r = 0;
    while r + RX <= xs.len() {
        let res = unsafe { kernel_any::<D, RX, F>(wr, &xs[r..r + RX]) };
        store(r, &res, RX);
        r += RX;
    }
    while r < xs.len() {
        let res = unsafe { kernel_any::<D, 1, F>(wr, &xs[r..r + 1]) };
        store(r, &res, 1);
        r += 1;
    }
}

/// The [`JW`] weight rows `wr` (whole blocks each) against the `R` rows `xs`: `out[r][j]`.
/// Per block: each weight block unpacked once and each activation block loaded once; the
/// `JW` integer dot products of one row of `x` are reduced to one exact `i32` each, side by
/// side in one vector, then converted and accumulated with one fused multiply-add by the
/// weights' scales times the activation's (as the four-row decode kernel does, lane for lane).
#[inline(always)]
unsafe fn kernel<D: Dot, const R: usize, const F: u8>(
    wr: &[&[u8]; JW],
    xs: &[XRow],
) -> [[f32; JW]; R] {
    let bb = block_bytes(F);
    let nb = wr[0].len() / bb;
    let xq: [&[i8]; R] = core::array::from_fn(|r| &xs[r].qs[..32 * nb]);
    let xd: [&[f32]; R] = core::array::from_fn(|r| &xs[r].d[..nb]);
    let xsum: [&[i32]; R] = core::array::from_fn(|r| {
        if offset(F) != 0 || F == Q4_1 {
            &xs[r].sums[..2 * nb]
        } else {
            &xs[r].sums[..0]
        }
    });
    unsafe {
        let zero = _mm256_setzero_si256();
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..nb {
            let at = b * bb;
            let wb: [&[u8]; JW] = core::array::from_fn(|j| wr[j].get_unchecked(at..at + bb));
            // The weight blocks: unsigned values (the 4- and 5-bit formats), or `q` (`Q8_0`,
            // its `|q|` taken per use for the sign trick).
            let q: [__m256i; JW] = core::array::from_fn(|j| unpack_u::<D, F>(wb[j]));
            let dw = halves8(&wb, 0);
            for r in 0..R {
                let x = load_x(xq[r].get_unchecked(32 * b..32 * b + 32));
                let p: [__m256i; JW] = core::array::from_fn(|j| {
                    if F == Q8_0 {
                        D::dot_u(
                            zero,
                            _mm256_sign_epi8(q[j], q[j]),
                            _mm256_sign_epi8(x, q[j]),
                        )
                    } else {
                        D::dot_u(zero, q[j], x)
                    }
                });
                let mut s = reduce8(&p);
                if offset(F) != 0 || F == Q4_1 {
                    let xs_b = *xsum[r].get_unchecked(2 * b) + *xsum[r].get_unchecked(2 * b + 1);
                    if offset(F) != 0 {
                        // sum (u - o) x = sum u x - o sum x, in i32 exactly.
                        s = _mm256_sub_epi32(s, _mm256_set1_epi32(offset(F) * xs_b));
                    }
                    let dx = *xd[r].get_unchecked(b);
                    acc[r] = _mm256_fmadd_ps(
                        _mm256_mul_ps(dw, _mm256_set1_ps(dx)),
                        _mm256_cvtepi32_ps(s),
                        acc[r],
                    );
                    if F == Q4_1 {
                        let mw = halves8(&wb, 2);
                        acc[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(dx * xs_b as f32), acc[r]);
                    }
                } else {
                    let dx = _mm256_set1_ps(*xd[r].get_unchecked(b));
                    acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(s), acc[r]);
                }
            }
        }
        let mut out = [[0.0f32; JW]; R];
        for r in 0..R {
            _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
        }
        out
    }
}

/// [`kernel_t`] for the formats with unsigned stored values, [`kernel_t8`] for `Q8_0` on the
/// VNNI families, [`kernel`] for `Q8_0` on AVX2.
#[inline(always)]
unsafe fn kernel_any<D: Dot, const R: usize, const F: u8>(
    wr: &[&[u8]; JW],
    xs: &[XRow],
) -> [[f32; JW]; R] {
    unsafe {
        if F == Q8_0 && D::VNNI {
            kernel_t8::<D, R>(wr, xs)
        } else if F == Q8_0 {
            kernel::<D, R, F>(wr, xs)
        } else {
            kernel_t::<D, R, F>(wr, xs)
        }
    }
}

/// [`kernel`] for the 4- and 5-bit formats without the reduction: the 8 unpacked weight blocks
/// are transposed once (lane `j` of vector `g` holds row `j`'s values `4g..4g + 4`), so one
/// multiply-add per group of four with the activation's four values broadcast accumulates all
/// 8 rows' dot products side by side. The same exact integers, so the same numbers.
#[inline(always)]
unsafe fn kernel_t<D: Dot, const R: usize, const F: u8>(
    wr: &[&[u8]; JW],
    xs: &[XRow],
) -> [[f32; JW]; R] {
    let bb = block_bytes(F);
    let nb = wr[0].len() / bb;
    let xq: [&[i8]; R] = core::array::from_fn(|r| &xs[r].qs[..32 * nb]);
    let xd: [&[f32]; R] = core::array::from_fn(|r| &xs[r].d[..nb]);
    let xsum: [&[i32]; R] = core::array::from_fn(|r| &xs[r].sums[..2 * nb]);
    unsafe {
        let zero = _mm256_setzero_si256();
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..nb {
            let at = b * bb;
            let wb: [&[u8]; JW] = core::array::from_fn(|j| wr[j].get_unchecked(at..at + bb));
            let wt = transpose8(core::array::from_fn(|j| unpack_u::<D, F>(wb[j])));
            let dw = halves8(&wb, 0);
            for r in 0..R {
                let xp = xq[r].get_unchecked(32 * b..32 * b + 32).as_ptr() as *const i32;
                let xs_b = *xsum[r].get_unchecked(2 * b) + *xsum[r].get_unchecked(2 * b + 1);
                // sum (u - o) x = sum u x - o sum x, in i32 exactly: the first chain starts
                // at -o sum x; two chains halve the dependency.
                let mut s0 = _mm256_set1_epi32(-offset(F) * xs_b);
                let mut s1 = zero;
                for g in (0..8).step_by(2) {
                    let x0 = _mm256_set1_epi32(xp.add(g).read_unaligned());
                    let x1 = _mm256_set1_epi32(xp.add(g + 1).read_unaligned());
                    s0 = D::dot_u(s0, wt[g], x0);
                    s1 = D::dot_u(s1, wt[g + 1], x1);
                }
                let s = _mm256_add_epi32(s0, s1);
                let dx = *xd[r].get_unchecked(b);
                acc[r] = _mm256_fmadd_ps(
                    _mm256_mul_ps(dw, _mm256_set1_ps(dx)),
                    _mm256_cvtepi32_ps(s),
                    acc[r],
                );
                if F == Q4_1 {
                    let mw = halves8(&wb, 2);
                    acc[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(dx * xs_b as f32), acc[r]);
                }
            }
        }
        let mut out = [[0.0f32; JW]; R];
        for r in 0..R {
            _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
        }
        out
    }
}

/// [`kernel_t`] for `Q8_0` on the VNNI families (signed weights): the activations offset to
/// unsigned (`x + 128`, by flipping the sign bit) multiply the signed weights, and the
/// accumulation starts at `-128` times each weight row's block sum, so the integers are
/// exactly `sum q x` (`vpdpbusd` adds in `i32` without saturating; AVX2's `vpmaddubsw` would
/// saturate, so AVX2 keeps [`kernel`]).
#[inline(always)]
unsafe fn kernel_t8<D: Dot, const R: usize>(wr: &[&[u8]; JW], xs: &[XRow]) -> [[f32; JW]; R] {
    let bb = block_bytes(Q8_0);
    let nb = wr[0].len() / bb;
    let xq: [&[i8]; R] = core::array::from_fn(|r| &xs[r].qs[..32 * nb]);
    let xd: [&[f32]; R] = core::array::from_fn(|r| &xs[r].d[..nb]);
    unsafe {
        let zero = _mm256_setzero_si256();
        let flip = _mm256_set1_epi32(0x8080_8080u32 as i32);
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..nb {
            let at = b * bb;
            let wb: [&[u8]; JW] = core::array::from_fn(|j| wr[j].get_unchecked(at..at + bb));
            let wt = transpose8(core::array::from_fn(|j| unpack_u::<D, Q8_0>(wb[j])));
            // -128 times each row's block sum: 128 (unsigned) times each group, negated.
            let mut c = zero;
            for g in wt.iter() {
                c = D::dot_u(c, _mm256_set1_epi8(-128), *g);
            }
            let init = _mm256_sub_epi32(zero, c);
            let dw = halves8(&wb, 0);
            for r in 0..R {
                let xp = xq[r].get_unchecked(32 * b..32 * b + 32).as_ptr() as *const i32;
                let mut s0 = init;
                let mut s1 = zero;
                for g in (0..8).step_by(2) {
                    let x0 = _mm256_xor_si256(_mm256_set1_epi32(xp.add(g).read_unaligned()), flip);
                    let x1 =
                        _mm256_xor_si256(_mm256_set1_epi32(xp.add(g + 1).read_unaligned()), flip);
                    s0 = D::dot_u(s0, x0, wt[g]);
                    s1 = D::dot_u(s1, x1, wt[g + 1]);
                }
                let s = _mm256_add_epi32(s0, s1);
                let dx = _mm256_set1_ps(*xd[r].get_unchecked(b));
                acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(s), acc[r]);
            }
        }
        let mut out = [[0.0f32; JW]; R];
        for r in 0..R {
            _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
        }
        out
    }
}

/// The eight lanes of each of `p` summed: lane `j` of the result is the sum of `p[j]`.
#[inline(always)]
unsafe fn reduce8(p: &[__m256i; JW]) -> __m256i {
    unsafe {
        let h01 = _mm256_hadd_epi32(p[0], p[1]);
        let h23 = _mm256_hadd_epi32(p[2], p[3]);
        let h45 = _mm256_hadd_epi32(p[4], p[5]);
        let h67 = _mm256_hadd_epi32(p[6], p[7]);
        // Low halves: rows 0-3's (then 4-7's) sums over elements 0-3 of each 128-bit half.
        let a = _mm256_hadd_epi32(h01, h23);
        let b = _mm256_hadd_epi32(h45, h67);
        let lo = _mm256_permute2x128_si256(a, b, 0x20);
        let hi = _mm256_permute2x128_si256(a, b, 0x31);
        _mm256_add_epi32(lo, hi)
    }
}

/// The f16 at byte `at` of each of the eight blocks, as f32 (F16C: exact).
#[inline(always)]
unsafe fn halves8(wb: &[&[u8]; JW], at: usize) -> __m256 {
    let h = |j: usize| u16::from_le_bytes([wb[j][at], wb[j][at + 1]]) as i16;
    unsafe {
        _mm256_cvtph_ps(_mm_setr_epi16(
            h(0),
            h(1),
            h(2),
            h(3),
            h(4),
            h(5),
            h(6),
            h(7),
        ))
    }
}

// The families' multiply-adds are decode's (`qdot::x86`'s `Dot`).

#[inline(always)]
unsafe fn load_x(x: &[i8]) -> __m256i {
    debug_assert!(x.len() >= 32);
    // SAFETY: 32 values in bounds (every caller slices them).
    unsafe { _mm256_loadu_si256(x.as_ptr() as *const __m256i) }
}

/// The stored values of a 32-element block of format `F` before its [`offset`]: unsigned for
/// the 4- and 5-bit formats, signed for `Q8_0`.
#[inline(always)]
unsafe fn unpack_u<D: Dot, const F: u8>(b: &[u8]) -> __m256i {
    debug_assert!(b.len() >= block_bytes(F));
    // SAFETY: every load lies within the block's bytes (checked above in debug builds; the
    // caller slices whole blocks).
    unsafe {
        match F {
            Q8_0 => _mm256_loadu_si256(b.as_ptr().add(2) as *const __m256i),
            Q4_0 => nibbles16(b.as_ptr().add(2)),
            Q4_1 => nibbles16(b.as_ptr().add(4)),
            _ => {
                let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                _mm256_or_si256(nibbles16(b.as_ptr().add(6)), D::high_bits(qh))
            }
        }
    }
}

/// 16 bytes of nibbles at `p` as 32 bytes: the low nibbles, then the high ones.
#[inline(always)]
unsafe fn nibbles16(p: *const u8) -> __m256i {
    unsafe {
        let b = _mm_loadu_si128(p as *const __m128i);
        let v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
        _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
    }
}
