//! The tiled integer products on x86_64 (see [`super`]): one body per 32-element weight format,
//! written over [`Dot`] (a family's 8-bit multiply-add) and compiled per family in a
//! `target_feature` function. AVX-512 VNNI (32 vector registers) takes 4 weight rows by 4 rows
//! of `x`; AVX2 and AVX-VNNI (16) take 4 by 2.
//!
//! The helpers repeat `super::super::x86`'s (the one-weight-row kernels, whose numbers these
//! match bit for bit) so that each file can change without the other.

use core::arch::x86_64::*;

use super::super::{Family, XRow};
use super::X_BLOCK_BYTES;
use crate::dtype::DType;

/// The rows of `w` against `xs` on an x86 `family` (which this CPU runs: the caller checked):
/// `out[j * xs.len() + r]`.
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

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2(dtype: DType, w: &[u8], row_bytes: usize, xs: &[XRow], out: &mut [f32]) {
    unsafe { by_format::<Avx2, 2>(dtype, w, row_bytes, xs, out) }
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn rows_avxvnni(dtype: DType, w: &[u8], row_bytes: usize, xs: &[XRow], out: &mut [f32]) {
    unsafe { by_format::<AvxVnni, 2>(dtype, w, row_bytes, xs, out) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn rows_avx512vnni(dtype: DType, w: &[u8], row_bytes: usize, xs: &[XRow], out: &mut [f32]) {
    unsafe { by_format::<Avx512Vnni, 4>(dtype, w, row_bytes, xs, out) }
}

/// Weight rows per tile.
const JW: usize = 4;

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
) {
    unsafe {
        match dtype {
            DType::Q8_0 => blocked::<D, RX, Q8_0>(w, row_bytes, xs, out),
            DType::Q4_0 => blocked::<D, RX, Q4_0>(w, row_bytes, xs, out),
            DType::Q4_1 => blocked::<D, RX, Q4_1>(w, row_bytes, xs, out),
            DType::Q5_0 => blocked::<D, RX, Q5_0>(w, row_bytes, xs, out),
            _ => {}
        }
    }
}

/// Every weight row of `w` against every row of `xs`, the rows of `xs` a block of at most
/// [`X_BLOCK_BYTES`] at a time, the weight [`JW`] rows at a time within a block.
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
    let n = (w.len() / row_bytes).min(out.len() / nr);
    let per_block = (X_BLOCK_BYTES / (32 * nb)).max(RX) / RX * RX;
    let mut r0 = 0;
    while r0 < nr {
        let r1 = (r0 + per_block).min(nr);
        let mut j = 0;
        while j + JW <= n {
            unsafe { tile_rows::<D, JW, RX, F>(w, row_bytes, j, &xs[r0..r1], r0, nr, out) };
            j += JW;
        }
        while j < n {
            unsafe { tile_rows::<D, 1, RX, F>(w, row_bytes, j, &xs[r0..r1], r0, nr, out) };
            j += 1;
        }
        r0 = r1;
    }
}

/// Weight rows `j..j + W` against the rows `xs` (rows `r0..` of `x`): `RX` at a time, then the
/// rest two and one at a time.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_rows<D: Dot, const W: usize, const RX: usize, const F: u8>(
    w: &[u8],
    row_bytes: usize,
    j: usize,
    xs: &[XRow],
    r0: usize,
    nr: usize,
    out: &mut [f32],
) {
    let wj = &w[j * row_bytes..(j + W) * row_bytes];
    let mut r = 0;
    let mut store = |r: usize, res: &[[f32; 4]; W], m: usize| {
        for (jj, row) in res.iter().enumerate() {
            let at = (j + jj) * nr + r0 + r;
            out[at..at + m].copy_from_slice(&row[..m]);
        }
    };
    while r + RX <= xs.len() {
        let res = unsafe { kernel::<D, W, RX, F>(wj, row_bytes, &xs[r..r + RX]) };
        store(r, &res, RX);
        r += RX;
    }
    if RX > 2 && r + 2 <= xs.len() {
        let res = unsafe { kernel::<D, W, 2, F>(wj, row_bytes, &xs[r..r + 2]) };
        store(r, &res, 2);
        r += 2;
    }
    while r < xs.len() {
        let res = unsafe { kernel::<D, W, 1, F>(wj, row_bytes, &xs[r..r + 1]) };
        store(r, &res, 1);
        r += 1;
    }
}

/// `W` weight rows (`row_bytes` apart in `w`) against the `R` rows `xs` (`R <= 4`):
/// `out[j][r]`. Per block: the `W` weight blocks unpacked once, each activation block loaded
/// once, and per pair one integer dot product and one fused multiply-add into the pair's own
/// eight-lane accumulator (as `super::super::x86`'s `blocks32`).
#[inline(always)]
unsafe fn kernel<D: Dot, const W: usize, const R: usize, const F: u8>(
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
) -> [[f32; 4]; W] {
    let bb = block_bytes(F);
    let nb = row_bytes / bb;
    let wr: [&[u8]; W] = core::array::from_fn(|j| &w[j * row_bytes..j * row_bytes + nb * bb]);
    let xq: [&[i8]; R] = core::array::from_fn(|r| &xs[r].qs[..32 * nb]);
    let xd: [&[f32]; R] = core::array::from_fn(|r| &xs[r].d[..nb]);
    let xsum: [&[i32]; R] = core::array::from_fn(|r| {
        if F == Q4_1 {
            &xs[r].sums[..2 * nb]
        } else {
            &xs[r].sums[..0]
        }
    });
    unsafe {
        let zero = _mm256_setzero_si256();
        let mut acc = [[_mm256_setzero_ps(); R]; W];
        let mut mins = [[0.0f32; R]; W];
        for b in 0..nb {
            let at = b * bb;
            // The weight blocks: unsigned values (the 4- and 5-bit formats), or `|q|` and `q`
            // (`Q8_0`, for the sign trick).
            let mut q = [zero; W];
            let mut sg = [zero; W];
            let mut dw = [_mm256_setzero_ps(); W];
            let mut mw = [0.0f32; W];
            for j in 0..W {
                let wb = wr[j].get_unchecked(at..at + bb);
                dw[j] = _mm256_set1_ps(f16_at(wb, 0));
                if F == Q4_1 {
                    mw[j] = f16_at(wb, 2);
                }
                let u = unpack_u::<D, F>(wb);
                if F == Q8_0 {
                    sg[j] = u;
                    q[j] = _mm256_sign_epi8(u, u);
                } else {
                    q[j] = u;
                }
            }
            for r in 0..R {
                let x = load_x(xq[r].get_unchecked(32 * b..32 * b + 32));
                let dx = *xd[r].get_unchecked(b);
                let dxv = _mm256_set1_ps(dx);
                // sum (u - o) x = sum u x - o sum x per lane of four, exactly in i32: the
                // accumulation starts at -o times the activation's lane sums.
                let init = if offset(F) != 0 {
                    let ox = D::dot_u(zero, _mm256_set1_epi8(offset(F) as i8), x);
                    _mm256_sub_epi32(zero, ox)
                } else {
                    zero
                };
                let xs_b = if F == Q4_1 {
                    (*xsum[r].get_unchecked(2 * b) + *xsum[r].get_unchecked(2 * b + 1)) as f32
                } else {
                    0.0
                };
                for j in 0..W {
                    let p = if F == Q8_0 {
                        D::dot_u(zero, q[j], _mm256_sign_epi8(x, sg[j]))
                    } else {
                        D::dot_u(init, q[j], x)
                    };
                    let dd = _mm256_mul_ps(dw[j], dxv);
                    acc[j][r] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[j][r]);
                    if F == Q4_1 {
                        mins[j][r] += mw[j] * dx * xs_b;
                    }
                }
            }
        }
        let mut out = [[0.0f32; 4]; W];
        for j in 0..W {
            for r in 0..R {
                out[j][r] = hsum(acc[j][r]) + mins[j][r];
            }
        }
        out
    }
}

/// The multiply-add of a family: `acc + sum of u * x` over each group of 4 bytes, for `u` in
/// `[0, 128]` (as unsigned) and `x` in `[-127, 127]`.
trait Dot {
    unsafe fn dot_u(acc: __m256i, u: __m256i, x: __m256i) -> __m256i;

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

struct Avx2;
struct AvxVnni;
struct Avx512Vnni;

impl Dot for Avx2 {
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
    #[inline(always)]
    unsafe fn dot_u(acc: __m256i, u: __m256i, x: __m256i) -> __m256i {
        unsafe { _mm256_dpbusd_avx_epi32(acc, u, x) }
    }
}

impl Dot for Avx512Vnni {
    #[inline(always)]
    unsafe fn dot_u(acc: __m256i, u: __m256i, x: __m256i) -> __m256i {
        unsafe { _mm256_dpbusd_epi32(acc, u, x) }
    }

    #[inline(always)]
    unsafe fn high_bits(qh: u32) -> __m256i {
        // The 32 bits are the byte mask itself (AVX-512BW).
        unsafe { _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(16)) }
    }
}

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

/// The eight lanes summed in the one-weight-row kernels' order.
#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

/// The f16 at `b[at..at + 2]` as f32 (F16C: exact).
#[inline(always)]
unsafe fn f16_at(b: &[u8], at: usize) -> f32 {
    let h = u16::from_le_bytes([b[at], b[at + 1]]);
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32))) }
}
