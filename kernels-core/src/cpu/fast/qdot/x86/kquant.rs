//! The K-quant bodies (`Q4_K`, `Q6_K`) of the x86 integer products: one weight row against up
//! to [`TILE`](super::TILE) rows of `x` (prefill's tiles, and the rows left over), and for
//! `Q4_K` four weight rows against one row of `x` and two or four (the family's
//! `Q4_K_TERM_ROWS`) against two (decode: `x`, or its two residual terms). `Q6_K` decode stays
//! one row at a time: four-row `Q6_K` kernels (the rows chunk by chunk, or super-block by
//! super-block) were 15-35% faster on a cache-resident weight but twice as slow streaming one
//! from DRAM (1024 x 151936 on a Zen 4, 40-45 ms against 19-24 ms), which is where decode reads
//! it. AVX-512 VNNI runs it in 512-bit vectors ([`q6_k_512`]).
//!
//! Both `Q4_K` kernels give the same bits. Per super-block and per pair of rows, the integer
//! sums sit in eight `i32` lanes (lane `t` holds elements `4t..4t + 4` of every 32-element
//! chunk, times the chunk's scale), are converted to f32 and multiply-added into eight f32
//! lanes, which are summed once at the end of the row. The multi-row kernel keeps that per-lane
//! layout for each of its rows (integer sums are exact in any order); what it shares is the
//! activation loads (once per chunk for all its rows), the scale unpacking (`Q4_K`'s 12 bytes
//! with llama.cpp's masks, its mins' products in one vector for the rows) and a prefetch of
//! each row's stream.

use core::arch::x86_64::*;

use super::{Dot, PREFETCH, XRow, f16_at, hsum, load_x, load32};

/// `Q4_K`'s eight 6-bit scales (bytes 0-7) and eight mins (bytes 8-15) from a super-block's
/// first 16 bytes (`d`, `dmin`, then the 12 packed bytes): llama.cpp's masks on the words
/// `[u0, u2, u1, u2 >> 4]`, or-ed with the high bits from `[u0, u0, u1, u1]` (the values
/// `quant::decode::q4_k_scale_min` reads one by one).
///
/// # Safety
/// The CPU has AVX2 (`vpsrlvd`).
#[inline(always)]
pub(in crate::cpu::fast::qdot) unsafe fn q4_k_scales(sb: &[u8]) -> __m128i {
    const M1: i32 = 0x3f3f_3f3f;
    const M2: i32 = 0x0f0f_0f0f;
    const M3: i32 = 0x0303_0303;
    let sb = &sb[..16];
    // SAFETY: 16 bytes in bounds (sliced above).
    unsafe {
        let v = _mm_loadu_si128(sb.as_ptr() as *const __m128i);
        let x = _mm_srlv_epi32(
            _mm_shuffle_epi32::<0b11_10_11_01>(v),
            _mm_setr_epi32(0, 0, 0, 4),
        );
        let y = _mm_shuffle_epi32::<0b10_10_01_01>(v);
        let low = _mm_and_si128(x, _mm_setr_epi32(M1, M2, M1, M2));
        let high = _mm_and_si128(_mm_srli_epi32::<6>(y), _mm_setr_epi32(0, M3, 0, M3));
        _mm_or_si128(low, _mm_slli_epi32::<4>(high))
    }
}

/// [`q4_k_scales`] as bytes, for the kernels that read them one by one.
///
/// # Safety
/// The CPU has AVX2.
#[inline(always)]
unsafe fn q4_k_scale_bytes(sb: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    // SAFETY: AVX2 (caller); `out` holds 16 bytes.
    unsafe { _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, q4_k_scales(sb)) };
    out
}

/// Bytes ahead the row-at-a-time K-quant kernels prefetch their stream, at least (whole rows):
/// one row of a short weight row (840 bytes of `Q6_K` at `k` 1024) was too close to hide
/// memory. `qdot` bench, `q6_k` at 1024 x 151936 (streamed from memory), 1 thread, AVX-512
/// VNNI, Intel Xeon, 2026-11-30, three interleaved rounds, GiB/s, one row ahead against four
/// and eight: single 7.5-8.8 against 8.7-10.6 and 9.3-10.5, residual 6.4-7.6 against 8.1-9.9
/// and 8.0-10.5.
const PREFETCH_ROWS_BYTES: usize = 4096;

/// Bytes ahead, in address order, that the multi-row `Q4_K` kernel also prefetches its stream
/// into L2 (its rows are read side by side, so `J` rows' `at` is about byte `J * at` of their
/// group). At 2 threads both threads stream from memory at once and each one's kernel slowed
/// (section "A larger model" of kernels-core/README.md). `kernels bench llama` on the 1.5B
/// Q4_K_M file, 2 threads, 20 interleaved pairs (2026-11-30, Intel Xeon, AVX-512 VNNI): decode
/// 15.5 against 15.0 tok/s (medians), 15 pairs of 20 faster, the median pair 1.05x; at 1
/// thread three pairs even. 16 KiB measured as without it on the `qdot` bench.
const PREFETCH_L2_BYTES: usize = 8192;

/// Prefetches the `len` bytes from `p` with hint `HINT` (`_MM_HINT_T0`: into L1, `_MM_HINT_T1`:
/// into L2), a cache line at a time. A prefetch never faults: past the weight it is wasted,
/// not wrong.
#[inline(always)]
pub(in crate::cpu::fast::qdot) unsafe fn prefetch_lines<const HINT: i32>(p: *const u8, len: usize) {
    let mut l = 0;
    while l < len {
        unsafe { _mm_prefetch::<HINT>(p.wrapping_add(l) as *const i8) };
        l += 64;
    }
}

/// Prefetches `len` bytes from byte `at + PREFETCH_L2_BYTES` of `w` into L2.
#[inline(always)]
unsafe fn prefetch_l2(w: &[u8], at: usize, len: usize) {
    unsafe { prefetch_lines::<_MM_HINT_T1>(w.as_ptr().wrapping_add(at + PREFETCH_L2_BYTES), len) }
}

/// Prefetches bytes `at..at + len` of the weight row at least [`PREFETCH_ROWS_BYTES`] after
/// `w` (one row of the weight; whole rows ahead) into L1: the row-at-a-time K-quant kernels'
/// stream.
#[inline(always)]
unsafe fn prefetch_next_row(w: &[u8], at: usize, len: usize) {
    let rows = PREFETCH_ROWS_BYTES.div_ceil(w.len().max(1));
    let next = w.as_ptr().wrapping_add(rows * w.len() + at);
    unsafe { prefetch_lines::<_MM_HINT_T0>(next, len) }
}

/// Prefetches the `len` bytes [`PREFETCH`] bytes past `at` in each of the `J` rows of `w`
/// (`row_bytes` apart; past a row's end: the same row of the next `J`) into L1.
#[inline(always)]
unsafe fn prefetch_rows<const J: usize>(w: &[u8], row_bytes: usize, at: usize, len: usize) {
    let ahead = at + PREFETCH;
    let (row, off) = if ahead < row_bytes {
        (0, ahead)
    } else {
        (J, ahead - row_bytes)
    };
    for j in 0..J {
        let p = w.as_ptr().wrapping_add((row + j) * row_bytes + off);
        unsafe { prefetch_lines::<_MM_HINT_T0>(p, len) };
    }
}

/// One `Q4_K` weight row against `R` rows of `x`.
#[inline(always)]
pub(super) unsafe fn q4_k<D: Dot, const R: usize>(w: &[u8], xs: &[XRow]) -> [f32; R] {
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let mut mins = [0.0f32; R];
        let low = _mm256_set1_epi8(0x0F);
        for (b, wb) in w.chunks_exact(144).enumerate() {
            prefetch_next_row(w, 144 * b, 144);
            let (d, dmin) = (f16_at(wb, 0), f16_at(wb, 2));
            let sm = q4_k_scale_bytes(wb);
            let mut isum = [_mm256_setzero_si256(); R];
            for c in 0..4 {
                let v = load32(&wb[16 + 32 * c..]);
                let lo = _mm256_and_si256(v, low);
                let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                let (s_lo, s_hi) = (sm[2 * c] as i32, sm[2 * c + 1] as i32);
                let (s_lo, s_hi) = (D::scales(s_lo, s_lo), D::scales(s_hi, s_hi));
                for r in 0..R {
                    let xq = &xs[r].qs[256 * b + 64 * c..];
                    let p = D::dot_scaled(isum[r], lo, load_x(xq), s_lo);
                    isum[r] = D::dot_scaled(p, hi, load_x(&xq[32..]), s_hi);
                }
            }
            for r in 0..R {
                let x = &xs[r];
                let s = &x.sums[16 * b..16 * b + 16];
                let msum: i32 = (0..8)
                    .map(|j| sm[8 + j] as i32 * (s[2 * j] + s[2 * j + 1]))
                    .sum();
                let dx = x.d[b];
                acc[r] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(isum[r]), acc[r]);
                mins[r] += dmin * dx * msum as f32;
            }
        }
        let mut out = [0.0f32; R];
        for r in 0..R {
            out[r] = hsum(acc[r]) - mins[r];
        }
        out
    }
}

/// `J` (at most 4) `Q4_K` weight rows (`w` holds them `row_bytes` apart) against `R` rows of
/// `x`: `out[j * R + r]`, the bits [`q4_k`] gives each row. Decode takes four rows against one
/// row of `x`, and `Q4_K_TERM_ROWS` against its two residual terms.
#[inline(always)]
pub(super) unsafe fn rows_q4_k<D: Dot, const R: usize, const J: usize>(
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) {
    // The mins below gather up to four rows in one vector.
    const { assert!(J >= 1 && J <= 4) };
    let nb = row_bytes / 144;
    let rows: [&[u8]; J] = core::array::from_fn(|j| &w[j * row_bytes..(j + 1) * row_bytes]);
    let xq: [&[i8]; R] = core::array::from_fn(|r| &xs[r].qs[..256 * nb]);
    let xd: [&[f32]; R] = core::array::from_fn(|r| &xs[r].d[..nb]);
    let xsum: [&[i32]; R] = core::array::from_fn(|r| &xs[r].sums[..16 * nb]);
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        let mut acc = [[_mm256_setzero_ps(); J]; R];
        let mut mins = [_mm_setzero_ps(); R];
        for b in 0..nb {
            let at = 144 * b;
            prefetch_rows::<J>(w, row_bytes, at, 144);
            prefetch_l2(w, J * at, J * 144);
            let wb: [&[u8]; J] = core::array::from_fn(|j| rows[j].get_unchecked(at..at + 144));
            let sm: [[u8; 16]; J] = core::array::from_fn(|j| q4_k_scale_bytes(wb[j]));
            let mut isum = [[_mm256_setzero_si256(); J]; R];
            for c in 0..4 {
                let xc = 256 * b + 64 * c;
                let x: [[__m256i; 2]; R] = core::array::from_fn(|r| {
                    let p = xq[r].get_unchecked(xc..xc + 64);
                    [load_x(p), load_x(&p[32..])]
                });
                for j in 0..J {
                    let v = load32(wb[j].get_unchecked(16 + 32 * c..48 + 32 * c));
                    let lo = _mm256_and_si256(v, low);
                    let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                    let (s_lo, s_hi) = (sm[j][2 * c] as i32, sm[j][2 * c + 1] as i32);
                    let (s_lo, s_hi) = (D::scales(s_lo, s_lo), D::scales(s_hi, s_hi));
                    for r in 0..R {
                        let p = D::dot_scaled(isum[r][j], lo, x[r][0], s_lo);
                        isum[r][j] = D::dot_scaled(p, hi, x[r][1], s_hi);
                    }
                }
            }
            let d: [f32; J] = core::array::from_fn(|j| f16_at(wb[j], 0));
            // The rows' `dmin`s and eight mins each (i32 lanes, against the pair sums of 16
            // below); zero past row `J`.
            let dm: [f32; 4] = core::array::from_fn(|j| if j < J { f16_at(wb[j], 2) } else { 0.0 });
            let dmin = _mm_loadu_ps(dm.as_ptr());
            let mn: [__m256i; 4] = core::array::from_fn(|j| {
                if j < J {
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64(sm[j][8..16].as_ptr() as *const __m128i))
                } else {
                    _mm256_setzero_si256()
                }
            });
            for r in 0..R {
                let dx = *xd[r].get_unchecked(b);
                for j in 0..J {
                    acc[r][j] = _mm256_fmadd_ps(
                        _mm256_set1_ps(d[j] * dx),
                        _mm256_cvtepi32_ps(isum[r][j]),
                        acc[r][j],
                    );
                }
                // The sums of the eight 32-element sub-blocks of x, in order: `hadd` pairs
                // the 16-element sums in lanes 0, 1, 4, 5, 2, 3, 6, 7; the permute puts them
                // back.
                let s = xsum[r].get_unchecked(16 * b..16 * b + 16);
                let s0 = _mm256_loadu_si256(s.as_ptr() as *const __m256i);
                let s1 = _mm256_loadu_si256(s[8..].as_ptr() as *const __m256i);
                let pairs = _mm256_permute4x64_epi64::<0xD8>(_mm256_hadd_epi32(s0, s1));
                let p: [__m256i; 4] = core::array::from_fn(|j| _mm256_mullo_epi32(mn[j], pairs));
                let h =
                    _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
                let msum = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                // dmin * dx * msum per row, in that order (as `q4_k`).
                let m = _mm_mul_ps(_mm_mul_ps(dmin, _mm_set1_ps(dx)), _mm_cvtepi32_ps(msum));
                mins[r] = _mm_add_ps(mins[r], m);
            }
        }
        for r in 0..R {
            let mut m = [0.0f32; 4];
            _mm_storeu_ps(m.as_mut_ptr(), mins[r]);
            for j in 0..J {
                out[j * R + r] = hsum(acc[r][j]) - m[j];
            }
        }
    }
}

/// One `Q6_K` weight row against `R` rows of `x`.
#[inline(always)]
pub(super) unsafe fn q6_k<D: Dot, const R: usize>(w: &[u8], xs: &[XRow]) -> [f32; R] {
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let (low, three, off) = (
            _mm256_set1_epi8(0x0F),
            _mm256_set1_epi8(3),
            _mm256_set1_epi8(32),
        );
        for (b, wb) in w.chunks_exact(210).enumerate() {
            prefetch_next_row(w, 210 * b, 210);
            let d = f16_at(wb, 208);
            let scales = &wb[192..208];
            let mut isum = [_mm256_setzero_si256(); R];
            for h in 0..2 {
                let ql0 = load32(&wb[64 * h..]);
                let ql1 = load32(&wb[64 * h + 32..]);
                let qh = load32(&wb[128 + 32 * h..]);
                let hbits = |s: i32| {
                    let v = match s {
                        0 => qh,
                        2 => _mm256_srli_epi16(qh, 2),
                        4 => _mm256_srli_epi16(qh, 4),
                        _ => _mm256_srli_epi16(qh, 6),
                    };
                    _mm256_slli_epi16(_mm256_and_si256(v, three), 4)
                };
                let q = [
                    _mm256_or_si256(_mm256_and_si256(ql0, low), hbits(0)),
                    _mm256_or_si256(_mm256_and_si256(ql1, low), hbits(2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low), hbits(4)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low), hbits(6)),
                ];
                for (k, qk) in q.iter().enumerate() {
                    let c = 4 * h + k;
                    let wq = _mm256_sub_epi8(*qk, off);
                    let scv = D::scales(
                        (scales[2 * c] as i8) as i32,
                        (scales[2 * c + 1] as i8) as i32,
                    );
                    let aw = _mm256_sign_epi8(wq, wq);
                    for r in 0..R {
                        let xq = load_x(&xs[r].qs[256 * b + 32 * c..]);
                        isum[r] = D::dot_scaled(isum[r], aw, _mm256_sign_epi8(xq, wq), scv);
                    }
                }
            }
            for r in 0..R {
                acc[r] = _mm256_fmadd_ps(
                    _mm256_set1_ps(d * xs[r].d[b]),
                    _mm256_cvtepi32_ps(isum[r]),
                    acc[r],
                );
            }
        }
        let mut out = [0.0f32; R];
        for r in 0..R {
            out[r] = hsum(acc[r]);
        }
        out
    }
}

/// The i16 scales of [`q6_k_512`]'s chunk pair `p`'s four 16-element quarters, picked from the
/// super-block's 16 scales widened to i16: quarter `i` (lanes 8i..8i + 8) takes scale `4p + i`.
/// A constant, so each weight row loads four vectors instead of building them.
static Q6K_PICKS: [[i16; 32]; 4] = {
    let mut t = [[0i16; 32]; 4];
    let mut p = 0;
    while p < 4 {
        let mut l = 0;
        while l < 32 {
            t[p][l] = (4 * p + l / 8) as i16;
            l += 1;
        }
        p += 1;
    }
    t
};

/// [`q6_k`] in 512-bit vectors (AVX-512 BW and VNNI): two 32-element chunks per vector, the
/// same bits. Each `i16` pair is `(q0 - 32) x0 + (q1 - 32) x1` as `vpmaddubsw` of the unsigned
/// 6-bit values less `vpmaddubsw` of 32 (where [`q6_k`] multiplies `|q - 32|` by `x` with `q -
/// 32`'s sign: AVX-512 has no `vpsignb`), scaled into `i32` lanes by `vpdpwssd`; chunk `2i`
/// sums in lanes 0-7 and `2i + 1` in 8-15, added into eight lanes once a super-block: the same
/// exact integers in the same lanes as [`q6_k`], so the same f32 steps after. About half the
/// instructions of the 256-bit body.
///
/// # Safety
/// The CPU has AVX-512 F, BW, VL and VNNI (the caller's `target_feature`).
#[inline(always)]
pub(super) unsafe fn q6_k_512<const R: usize>(w: &[u8], xs: &[XRow]) -> [f32; R] {
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let (low, three, thirty_two) = (
            _mm512_set1_epi8(0x0F),
            _mm512_set1_epi8(3),
            _mm512_set1_epi8(32),
        );
        let picks: [__m512i; 4] = [
            _mm512_loadu_si512(Q6K_PICKS[0].as_ptr() as *const __m512i),
            _mm512_loadu_si512(Q6K_PICKS[1].as_ptr() as *const __m512i),
            _mm512_loadu_si512(Q6K_PICKS[2].as_ptr() as *const __m512i),
            _mm512_loadu_si512(Q6K_PICKS[3].as_ptr() as *const __m512i),
        ];
        for (b, wb) in w.chunks_exact(210).enumerate() {
            prefetch_next_row(w, 210 * b, 210);
            let d = f16_at(wb, 208);
            let sc = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(
                wb[192..208].as_ptr() as *const __m128i,
            )));
            let mut isum = [_mm512_setzero_si512(); R];
            for h in 0..2 {
                // Chunks 4h, 4h + 1 (low nibbles of the 64 bytes, high bits 0-1 and 2-3 of
                // `qh`) and 4h + 2, 4h + 3 (high nibbles, bits 4-5 and 6-7).
                let ql = _mm512_loadu_si512(wb[64 * h..].as_ptr() as *const __m512i);
                let qh = _mm256_loadu_si256(wb[128 + 32 * h..].as_ptr() as *const __m256i);
                let qh =
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qh), _mm256_srli_epi16::<2>(qh));
                let hi = |v: __m512i| _mm512_slli_epi16::<4>(_mm512_and_si512(v, three));
                let q = [
                    _mm512_or_si512(_mm512_and_si512(ql, low), hi(qh)),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(ql), low),
                        hi(_mm512_srli_epi16::<4>(qh)),
                    ),
                ];
                for (k, &qk) in q.iter().enumerate() {
                    let pair = 2 * h + k;
                    let scv = _mm512_permutexvar_epi16(picks[pair], sc);
                    for r in 0..R {
                        let xq = &xs[r].qs[256 * b + 64 * pair..];
                        let x = _mm512_loadu_si512(xq.as_ptr() as *const __m512i);
                        let p = _mm512_sub_epi16(
                            _mm512_maddubs_epi16(qk, x),
                            _mm512_maddubs_epi16(thirty_two, x),
                        );
                        isum[r] = _mm512_dpwssd_epi32(isum[r], p, scv);
                    }
                }
            }
            for r in 0..R {
                let s = _mm256_add_epi32(
                    _mm512_castsi512_si256(isum[r]),
                    _mm512_extracti64x4_epi64::<1>(isum[r]),
                );
                acc[r] = _mm256_fmadd_ps(
                    _mm256_set1_ps(d * xs[r].d[b]),
                    _mm256_cvtepi32_ps(s),
                    acc[r],
                );
            }
        }
        let mut out = [0.0f32; R];
        for r in 0..R {
            out[r] = hsum(acc[r]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::q4_k_scale_bytes;
    use crate::quant::decode::q4_k_scale_min;
    use crate::rng::Rng;

    /// [`super::q6_k_512`] gives [`super::q6_k`]'s bits (on AVX-512 VNNI's `Dot`) on random
    /// super-blocks with every scale sign, all-zero and extreme blocks, for one row of `x`,
    /// its two residual terms and a prefill tile ([`TILE`] rows). Runs where the CPU has
    /// AVX-512 VNNI.
    #[test]
    fn q6_k_512_gives_the_256_bit_kernels_bits() {
        use crate::DType;
        use crate::cpu::fast::qdot::tests::{set_scales, weights};
        use crate::cpu::fast::qdot::{Acts, TILE, XRow};
        use alloc::vec::Vec;
        if !(std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512vnni")
            && std::is_x86_feature_detected!("f16c")
            && std::is_x86_feature_detected!("fma"))
        {
            std::eprintln!("q6_k_512: skipped, the CPU lacks AVX-512 BW, VL or VNNI");
            return;
        }
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
        unsafe fn both<const R: usize>(w: &[u8], xs: &[XRow]) -> ([f32; R], [f32; R]) {
            unsafe {
                (
                    super::q6_k::<super::super::Avx512Vnni, R>(w, xs),
                    super::q6_k_512::<R>(w, xs),
                )
            }
        }
        let mut rng = Rng::new(61);
        for blocks in [1usize, 2, 5] {
            let k = 256 * blocks;
            for case in 0..12 {
                let mut w = weights(&mut rng, DType::Q6_K, 1, k);
                match case % 4 {
                    0 => set_scales(DType::Q6_K, &mut w, 65504.0),
                    1 => set_scales(DType::Q6_K, &mut w, 6e-8),
                    _ => {}
                }
                if case == 5 {
                    w[..210].fill(0);
                }
                let scale = if case % 4 == 0 { 1e20 } else { 1.0 };
                let x: Vec<f32> = (0..TILE * k)
                    .map(|_| (rng.uniform() * 2.0 - 1.0) * scale)
                    .collect();
                for residual in [false, true] {
                    let acts = Acts::new(DType::Q6_K, &x, k, residual).unwrap();
                    let rows: Vec<XRow> = (0..TILE).map(|r| acts.row(r)).collect();
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    // SAFETY: the features were detected above; `w` is whole super-blocks of
                    // `k` values and every row of `x` has `k`.
                    let (a1, b1) = unsafe { both::<1>(&w, &rows[..1]) };
                    let (a2, b2) = unsafe { both::<2>(&w, &rows[..2]) };
                    let (at, bt) = unsafe { both::<TILE>(&w, &rows) };
                    assert_eq!(bits(&a1), bits(&b1), "k {k} case {case}");
                    assert_eq!(bits(&a2), bits(&b2), "k {k} case {case}");
                    assert_eq!(bits(&at), bits(&bt), "k {k} case {case}");
                }
            }
        }
    }

    /// The masks give every scale and min `q4_k_scale_min` reads, on random bytes (where the
    /// CPU has AVX2).
    #[test]
    fn q4_k_scales_match_the_decoder() {
        if !std::is_x86_feature_detected!("avx2") {
            std::eprintln!("q4_k_scales: skipped, the CPU lacks AVX2");
            return;
        }
        let mut rng = Rng::new(21);
        for _ in 0..2000 {
            // A super-block's first 16 bytes: `d` and `dmin` (ignored), then the scales.
            let sb: [u8; 16] = core::array::from_fn(|_| (rng.uniform() * 256.0) as u8);
            // SAFETY: AVX2 was detected above; `sb` holds 16 bytes.
            let sm = unsafe { q4_k_scale_bytes(&sb) };
            for j in 0..8 {
                let b = &sb[4..];
                assert_eq!((sm[j], sm[8 + j]), q4_k_scale_min(b, j), "{b:?} {j}");
            }
        }
    }
}
