//! The K-quant block decoders of the f32 panels on AVX2 and AVX-512F: `Q4_K` and `Q6_K` blocks
//! to f32 with the values of `quant::decode` (the reference's `q4_k_block` and `q6_k_block`)
//! bit for bit. Each value is the same one or two f32 operations on the same operands: `Q4_K`
//! `(d * sc) * q - dmin * m` (a product, then a difference: no fused multiply-add), `Q6_K`
//! `(d * sc) * (q - 32)`, the per-sub-block factors made by the same scalar code. Only the
//! unpacking of the quants and the conversions run eight (AVX2) or sixteen (AVX-512F) values at
//! a time (the scalar decoders were most of the panels' decode time on the K-quant rows of a
//! Q4_K_M file). Sixteen at a time, the `qgemm` bench's panel product (`decoded_b`, 1 thread,
//! Intel Xeon, 2026-11-30, four interleaved pairs, G multiply-adds/s, eight against sixteen):
//! `q4_k` 64 x 1024 x 4864 32.0-41.4 against 35.6-45.4 (faster in all four pairs), `q6_k`
//! 33.5-39.4 against 36.4-45.7 (three of four); at 256 rows, where a decoded panel serves four
//! times the rows, no difference beyond the noise.

use core::arch::x86_64::*;

use crate::cpu::fast::matref::f16c_at as f16_at;
use crate::quant::decode::q4_k_scale_min;

/// Bytes of a `Q4_K` block.
const Q4_K_BYTES: usize = 144;
/// Bytes of a `Q6_K` block.
const Q6_K_BYTES: usize = 210;

/// 32 unsigned values (`q`, one a byte) as f32, times `scale`, less `min`, into `out[..32]`:
/// eight at a time, or sixteen with `WIDE`.
///
/// # Safety
/// The caller runs AVX2 (and AVX-512F with `WIDE`); `out` holds 32 values.
#[inline(always)]
unsafe fn store_scaled<const WIDE: bool>(q: __m256i, scale: f32, min: f32, out: &mut [f32]) {
    debug_assert!(out.len() >= 32);
    unsafe {
        let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
        if WIDE {
            let (s, m) = (_mm512_set1_ps(scale), _mm512_set1_ps(min));
            for (h, half) in halves.into_iter().enumerate() {
                let wide = _mm512_cvtepu8_epi32(half);
                let v = _mm512_sub_ps(_mm512_mul_ps(s, _mm512_cvtepi32_ps(wide)), m);
                _mm512_storeu_ps(out.as_mut_ptr().add(16 * h), v);
            }
            return;
        }
        let (s, m) = (_mm256_set1_ps(scale), _mm256_set1_ps(min));
        for (h, half) in halves.into_iter().enumerate() {
            for (e, eight) in [half, _mm_unpackhi_epi64(half, half)]
                .into_iter()
                .enumerate()
            {
                let wide = _mm256_cvtepu8_epi32(eight);
                let v = _mm256_sub_ps(_mm256_mul_ps(s, _mm256_cvtepi32_ps(wide)), m);
                _mm256_storeu_ps(out.as_mut_ptr().add(16 * h + 8 * e), v);
            }
        }
    }
}

/// 16 signed values (the low half of `q`) as f32 times `scale` into `out[..16]`: eight at a
/// time, or all sixteen with `WIDE`.
///
/// # Safety
/// The caller runs AVX2 (and AVX-512F with `WIDE`); `out` holds 16 values.
#[inline(always)]
unsafe fn store_scaled16<const WIDE: bool>(q: __m128i, scale: f32, out: &mut [f32]) {
    debug_assert!(out.len() >= 16);
    unsafe {
        if WIDE {
            let v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
            _mm512_storeu_ps(out.as_mut_ptr(), _mm512_mul_ps(_mm512_set1_ps(scale), v));
            return;
        }
        let s = _mm256_set1_ps(scale);
        for (e, eight) in [q, _mm_unpackhi_epi64(q, q)].into_iter().enumerate() {
            let v = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight)));
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * e), v);
        }
    }
}

/// The whole `Q4_K` blocks of `bytes` into `out` (256 values each), as
/// `quant::decode::q4_k_block`.
///
/// # Safety
/// The caller runs AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn q4_k_blocks(bytes: &[u8], out: &mut [f32]) {
    unsafe { q4_k_body::<false>(bytes, out) }
}

/// [`q4_k_blocks`] sixteen values at a time (AVX-512F): the same bits.
///
/// # Safety
/// The caller runs AVX2, F16C and AVX-512F.
#[target_feature(enable = "avx2,f16c,avx512f")]
pub(super) unsafe fn q4_k_blocks_512(bytes: &[u8], out: &mut [f32]) {
    unsafe { q4_k_body::<true>(bytes, out) }
}

#[inline(always)]
unsafe fn q4_k_body<const WIDE: bool>(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(Q4_K_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        // SAFETY: F16C (the caller).
        let (d, dmin) = unsafe { (f16_at(b, 0), f16_at(b, 2)) };
        let scales = &b[4..16];
        for c in 0..4 {
            // SAFETY: 32 quant bytes of the block's 128 (`c < 4`); AVX2 (the caller).
            unsafe {
                let v = _mm256_loadu_si256(b.as_ptr().add(16 + 32 * c).cast());
                let low = _mm256_set1_epi8(0x0F);
                let nibbles = [
                    _mm256_and_si256(v, low),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                ];
                for (half, q) in nibbles.into_iter().enumerate() {
                    let j = 2 * c + half;
                    let (sc, m) = q4_k_scale_min(scales, j);
                    let (dl, ml) = (d * sc as f32, dmin * m as f32);
                    store_scaled::<WIDE>(q, dl, ml, &mut o[32 * j..32 * j + 32]);
                }
            }
        }
    }
}

/// The whole `Q6_K` blocks of `bytes` into `out` (256 values each), as
/// `quant::decode::q6_k_block`.
///
/// # Safety
/// The caller runs AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn q6_k_blocks(bytes: &[u8], out: &mut [f32]) {
    unsafe { q6_k_body::<false>(bytes, out) }
}

/// [`q6_k_blocks`] sixteen values at a time (AVX-512F): the same bits.
///
/// # Safety
/// The caller runs AVX2, F16C and AVX-512F.
#[target_feature(enable = "avx2,f16c,avx512f")]
pub(super) unsafe fn q6_k_blocks_512(bytes: &[u8], out: &mut [f32]) {
    unsafe { q6_k_body::<true>(bytes, out) }
}

#[inline(always)]
unsafe fn q6_k_body<const WIDE: bool>(bytes: &[u8], out: &mut [f32]) {
    for (b, o) in bytes
        .chunks_exact(Q6_K_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        // SAFETY: F16C (the caller).
        let d = unsafe { f16_at(b, 208) };
        let scales = &b[192..208];
        for h in 0..2 {
            // SAFETY: `ql` bytes `64 h..64 h + 64` and `qh` bytes `128 + 32 h..` of the block;
            // AVX2 (the caller).
            unsafe {
                let p = b.as_ptr();
                let ql0 = _mm256_loadu_si256(p.add(64 * h).cast());
                let ql1 = _mm256_loadu_si256(p.add(64 * h + 32).cast());
                let qh = _mm256_loadu_si256(p.add(128 + 32 * h).cast());
                let (low, three) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(3));
                // Bits `s..s + 2` of each `qh` byte as bits 4-5.
                let high = |v: __m256i| _mm256_slli_epi16::<4>(_mm256_and_si256(v, three));
                let q = [
                    _mm256_or_si256(_mm256_and_si256(ql0, low), high(qh)),
                    _mm256_or_si256(_mm256_and_si256(ql1, low), high(_mm256_srli_epi16::<2>(qh))),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), low),
                        high(_mm256_srli_epi16::<4>(qh)),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), low),
                        high(_mm256_srli_epi16::<6>(qh)),
                    ),
                ];
                for (k, qk) in q.into_iter().enumerate() {
                    // Values `128 h + 32 k + l`, `l < 32`: sub-blocks of 16 with their scales.
                    let signed = _mm256_sub_epi8(qk, _mm256_set1_epi8(32));
                    let at = 128 * h + 32 * k;
                    let sc = |i: usize| d * (scales[i / 16] as i8) as f32;
                    let halves = [
                        _mm256_castsi256_si128(signed),
                        _mm256_extracti128_si256::<1>(signed),
                    ];
                    for (e, half) in halves.into_iter().enumerate() {
                        let i = at + 16 * e;
                        store_scaled16::<WIDE>(half, sc(i), &mut o[i..i + 16]);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::decode::{q4_k_block, q6_k_block};
    use crate::rng::Rng;

    /// Random blocks (every byte, so scales of every size, zero, subnormal, infinite and NaN
    /// `f16` factors) decode to the reference's bits, on AVX2 and (where the CPU has it)
    /// AVX-512F.
    #[test]
    fn k_quant_blocks_decode_to_the_reference_bits() {
        if !crate::cpu::fast::isa::has_avx2_f16c() {
            return;
        }
        let mut rng = Rng::new(2813);
        let wide = std::is_x86_feature_detected!("avx512f");
        for (bb, fast, reference, needs_512) in [
            (
                Q4_K_BYTES,
                q4_k_blocks as unsafe fn(&[u8], &mut [f32]),
                q4_k_block as fn(&[u8], &mut [f32]),
                false,
            ),
            (Q6_K_BYTES, q6_k_blocks, q6_k_block, false),
            (Q4_K_BYTES, q4_k_blocks_512, q4_k_block, true),
            (Q6_K_BYTES, q6_k_blocks_512, q6_k_block, true),
        ] {
            if needs_512 && !wide {
                std::eprintln!("the AVX-512 decoders: skipped, the CPU lacks AVX-512F");
                continue;
            }
            for blocks in [1, 3] {
                for _ in 0..300 {
                    let bytes: alloc::vec::Vec<u8> = (0..blocks * bb)
                        .map(|_| (rng.uniform() * 256.0) as u8)
                        .collect();
                    let mut want = alloc::vec![0.0f32; 256 * blocks];
                    for (b, o) in bytes.chunks_exact(bb).zip(want.chunks_exact_mut(256)) {
                        reference(b, o);
                    }
                    let mut got = alloc::vec![f32::NAN; 256 * blocks];
                    // SAFETY: the CPU has AVX2 and F16C (checked above).
                    unsafe { fast(&bytes, &mut got) };
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(g.to_bits(), w.to_bits(), "{bb}-byte blocks, value {i}");
                    }
                }
            }
        }
    }
}
