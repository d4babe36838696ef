//! One small vector vocabulary ([`Simd`]) implemented per instruction set, so each kernel in
//! [`super::math`] is written once and compiled for every [`Isa`](super::super::isa::Isa).
//!
//! A token type per instruction set (`Avx512`, `Avx2`, `Simd128`, `Portable`) implements the
//! trait. The x86 tokens can only be made by `new()`, which checks the CPU, so holding one
//! proves its intrinsics are safe to call. `vectorize` runs a closure inside a
//! `#[target_feature]` function: the `#[inline(always)]` kernels it calls are inlined there
//! and compiled for that instruction set.

/// `1.5 * 2^23`: adding it to a float below `2^22` in magnitude rounds to an integer, which
/// then sits in the low mantissa bits (`bits(t) - MAGIC_BITS`).
pub(crate) const MAGIC: f32 = 12_582_912.0;
pub(crate) const MAGIC_BITS: i32 = 0x4B40_0000;

/// The vector operations the kernels use. `V` holds `LANES` f32 values.
pub(crate) trait Simd: Copy {
    type V: Copy;
    const LANES: usize;

    fn splat(self, x: f32) -> Self::V;
    /// The first `LANES` values of `s`; a shorter slice is padded with `fill`.
    fn load(self, s: &[f32], fill: f32) -> Self::V;
    /// Writes the first `min(d.len(), LANES)` lanes of `v` to `d`.
    fn store(self, v: Self::V, d: &mut [f32]);
    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    fn div(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c`, fused where the instruction set has FMA.
    fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// The larger lane (either one when a lane is NaN).
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    /// `v` clamped to `[lo, hi]`, NaN lanes kept NaN.
    fn clamp(self, v: Self::V, lo: Self::V, hi: Self::V) -> Self::V;
    fn abs(self, v: Self::V) -> Self::V;
    /// Per lane: `x >= 0 ? a : b` (NaN picks `b`).
    fn select_ge0(self, x: Self::V, a: Self::V, b: Self::V) -> Self::V;
    fn hsum(self, v: Self::V) -> f32;
    /// Largest lane (NaN lanes may or may not win).
    fn hmax(self, v: Self::V) -> f32;
    /// For `t = n + MAGIC` (`n` an integer in `[-252, 252]`): `(2^(n >> 1), 2^(n - (n >> 1)))`,
    /// two normal powers of two whose product is `2^n`.
    fn exp2_parts(self, t: Self::V) -> (Self::V, Self::V);
}

/// Auto-vectorized plain Rust: 8 lanes as an array (two SSE or NEON registers).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Portable;

const PL: usize = 8;

#[inline(always)]
fn map1(a: [f32; PL], f: impl Fn(f32) -> f32) -> [f32; PL] {
    let mut r = [0.0; PL];
    for (r, a) in r.iter_mut().zip(a) {
        *r = f(a);
    }
    r
}

#[inline(always)]
fn map2(a: [f32; PL], b: [f32; PL], f: impl Fn(f32, f32) -> f32) -> [f32; PL] {
    let mut r = [0.0; PL];
    for ((r, a), b) in r.iter_mut().zip(a).zip(b) {
        *r = f(a, b);
    }
    r
}

impl Simd for Portable {
    type V = [f32; PL];
    const LANES: usize = PL;

    #[inline(always)]
    fn splat(self, x: f32) -> Self::V {
        [x; PL]
    }
    #[inline(always)]
    fn load(self, s: &[f32], fill: f32) -> Self::V {
        // A full vector is a fixed-size copy; only the tail loops.
        if let Some(full) = s.first_chunk::<PL>() {
            return *full;
        }
        let mut r = [fill; PL];
        for (r, &x) in r.iter_mut().zip(s) {
            *r = x;
        }
        r
    }
    #[inline(always)]
    fn store(self, v: Self::V, d: &mut [f32]) {
        if let Some(full) = d.first_chunk_mut::<PL>() {
            *full = v;
            return;
        }
        for (d, x) in d.iter_mut().zip(v) {
            *d = x;
        }
    }
    #[inline(always)]
    fn add(self, a: Self::V, b: Self::V) -> Self::V {
        map2(a, b, |a, b| a + b)
    }
    #[inline(always)]
    fn sub(self, a: Self::V, b: Self::V) -> Self::V {
        map2(a, b, |a, b| a - b)
    }
    #[inline(always)]
    fn mul(self, a: Self::V, b: Self::V) -> Self::V {
        map2(a, b, |a, b| a * b)
    }
    #[inline(always)]
    fn div(self, a: Self::V, b: Self::V) -> Self::V {
        map2(a, b, |a, b| a / b)
    }
    #[inline(always)]
    fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        // Not `f32::mul_add`: without hardware FMA that is a slow software call.
        self.add(self.mul(a, b), c)
    }
    #[inline(always)]
    fn max(self, a: Self::V, b: Self::V) -> Self::V {
        map2(a, b, |a, b| if a > b { a } else { b })
    }
    #[inline(always)]
    fn clamp(self, v: Self::V, lo: Self::V, hi: Self::V) -> Self::V {
        let v = map2(v, lo, |v, lo| if v < lo { lo } else { v });
        map2(v, hi, |v, hi| if v > hi { hi } else { v })
    }
    #[inline(always)]
    fn abs(self, v: Self::V) -> Self::V {
        map1(v, |v| f32::from_bits(v.to_bits() & 0x7FFF_FFFF))
    }
    #[inline(always)]
    fn select_ge0(self, x: Self::V, a: Self::V, b: Self::V) -> Self::V {
        let mut r = b;
        for ((r, x), a) in r.iter_mut().zip(x).zip(a) {
            if x >= 0.0 {
                *r = a;
            }
        }
        r
    }
    #[inline(always)]
    fn hsum(self, v: Self::V) -> f32 {
        let [a, b, c, d, e, f, g, h] = v;
        ((a + e) + (c + g)) + ((b + f) + (d + h))
    }
    #[inline(always)]
    fn hmax(self, v: Self::V) -> f32 {
        v.into_iter()
            .fold(f32::NEG_INFINITY, |m, x| if x > m { x } else { m })
    }
    #[inline(always)]
    fn exp2_parts(self, t: Self::V) -> (Self::V, Self::V) {
        let mut a = [0.0; PL];
        let mut b = [0.0; PL];
        for ((a, b), t) in a.iter_mut().zip(b.iter_mut()).zip(t) {
            let n = (t.to_bits() as i32).wrapping_sub(MAGIC_BITS);
            let h = n >> 1;
            *a = f32::from_bits((h.wrapping_add(127) << 23) as u32);
            *b = f32::from_bits((n.wrapping_sub(h).wrapping_add(127) << 23) as u32);
        }
        (a, b)
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use super::{MAGIC_BITS, Simd};
    use crate::cpu::fast::isa::Isa;

    /// AVX2 + FMA, 8 lanes. Holding one proves the CPU has both.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Avx2 {
        _proof: (),
    }

    impl Avx2 {
        pub(crate) fn new() -> Option<Avx2> {
            Isa::Avx2.supported().then_some(Avx2 { _proof: () })
        }

        /// Runs `f` compiled for AVX2 + FMA.
        #[inline(always)]
        pub(crate) fn vectorize<R>(self, f: impl FnOnce(Avx2) -> R) -> R {
            #[target_feature(enable = "avx2,fma")]
            fn inner<R>(t: Avx2, f: impl FnOnce(Avx2) -> R) -> R {
                f(t)
            }
            // SAFETY: `self` proves the CPU has AVX2 and FMA.
            unsafe { inner(self, f) }
        }
    }

    /// AVX-512F, 16 lanes. Holding one proves the CPU has it (AVX-512F implies AVX2 and FMA).
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Avx512 {
        _proof: (),
    }

    impl Avx512 {
        pub(crate) fn new() -> Option<Avx512> {
            Isa::Avx512.supported().then_some(Avx512 { _proof: () })
        }

        /// Runs `f` compiled for AVX-512F.
        #[inline(always)]
        pub(crate) fn vectorize<R>(self, f: impl FnOnce(Avx512) -> R) -> R {
            #[target_feature(enable = "avx512f,avx2,fma")]
            fn inner<R>(t: Avx512, f: impl FnOnce(Avx512) -> R) -> R {
                f(t)
            }
            // SAFETY: `self` proves the CPU has AVX-512F.
            unsafe { inner(self, f) }
        }
    }

    // SAFETY (every `unsafe` block below): the token proves the CPU supports the intrinsics;
    // loads and stores touch only `LANES` values that the slice holds (checked), or a local
    // buffer.
    impl Simd for Avx2 {
        type V = __m256;
        const LANES: usize = 8;

        #[inline(always)]
        fn splat(self, x: f32) -> __m256 {
            unsafe { _mm256_set1_ps(x) }
        }
        #[inline(always)]
        fn load(self, s: &[f32], fill: f32) -> __m256 {
            if s.len() >= 8 {
                unsafe { _mm256_loadu_ps(s.as_ptr()) }
            } else {
                let mut b = [fill; 8];
                b[..s.len()].copy_from_slice(s);
                unsafe { _mm256_loadu_ps(b.as_ptr()) }
            }
        }
        #[inline(always)]
        fn store(self, v: __m256, d: &mut [f32]) {
            if d.len() >= 8 {
                unsafe { _mm256_storeu_ps(d.as_mut_ptr(), v) }
            } else {
                let mut b = [0.0f32; 8];
                unsafe { _mm256_storeu_ps(b.as_mut_ptr(), v) };
                let n = d.len();
                d.copy_from_slice(&b[..n]);
            }
        }
        #[inline(always)]
        fn add(self, a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_add_ps(a, b) }
        }
        #[inline(always)]
        fn sub(self, a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_sub_ps(a, b) }
        }
        #[inline(always)]
        fn mul(self, a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_mul_ps(a, b) }
        }
        #[inline(always)]
        fn div(self, a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_div_ps(a, b) }
        }
        #[inline(always)]
        fn mul_add(self, a: __m256, b: __m256, c: __m256) -> __m256 {
            unsafe { _mm256_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        fn max(self, a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_max_ps(a, b) }
        }
        #[inline(always)]
        fn clamp(self, v: __m256, lo: __m256, hi: __m256) -> __m256 {
            // maxps/minps return the second operand when either is NaN.
            unsafe { _mm256_min_ps(hi, _mm256_max_ps(lo, v)) }
        }
        #[inline(always)]
        fn abs(self, v: __m256) -> __m256 {
            unsafe { _mm256_andnot_ps(_mm256_set1_ps(-0.0), v) }
        }
        #[inline(always)]
        fn select_ge0(self, x: __m256, a: __m256, b: __m256) -> __m256 {
            unsafe {
                let m = _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_setzero_ps());
                _mm256_blendv_ps(b, a, m)
            }
        }
        #[inline(always)]
        fn hsum(self, v: __m256) -> f32 {
            unsafe {
                let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
                let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                let s = _mm_add_ss(s, _mm_movehdup_ps(s));
                _mm_cvtss_f32(s)
            }
        }
        #[inline(always)]
        fn hmax(self, v: __m256) -> f32 {
            unsafe {
                let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
                let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
                let s = _mm_max_ss(s, _mm_movehdup_ps(s));
                _mm_cvtss_f32(s)
            }
        }
        #[inline(always)]
        fn exp2_parts(self, t: __m256) -> (__m256, __m256) {
            unsafe {
                let n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(MAGIC_BITS));
                let h = _mm256_srai_epi32::<1>(n);
                let bias = _mm256_set1_epi32(127);
                let a = _mm256_slli_epi32::<23>(_mm256_add_epi32(h, bias));
                let b = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_sub_epi32(n, h), bias));
                (_mm256_castsi256_ps(a), _mm256_castsi256_ps(b))
            }
        }
    }

    impl Simd for Avx512 {
        type V = __m512;
        const LANES: usize = 16;

        #[inline(always)]
        fn splat(self, x: f32) -> __m512 {
            unsafe { _mm512_set1_ps(x) }
        }
        #[inline(always)]
        fn load(self, s: &[f32], fill: f32) -> __m512 {
            if s.len() >= 16 {
                unsafe { _mm512_loadu_ps(s.as_ptr()) }
            } else {
                // Masked-off lanes are not read (no fault past the end of `s`).
                let k: __mmask16 = ((1u32 << s.len()) - 1) as u16;
                unsafe { _mm512_mask_loadu_ps(_mm512_set1_ps(fill), k, s.as_ptr()) }
            }
        }
        #[inline(always)]
        fn store(self, v: __m512, d: &mut [f32]) {
            if d.len() >= 16 {
                unsafe { _mm512_storeu_ps(d.as_mut_ptr(), v) }
            } else {
                let k: __mmask16 = ((1u32 << d.len()) - 1) as u16;
                unsafe { _mm512_mask_storeu_ps(d.as_mut_ptr(), k, v) }
            }
        }
        #[inline(always)]
        fn add(self, a: __m512, b: __m512) -> __m512 {
            unsafe { _mm512_add_ps(a, b) }
        }
        #[inline(always)]
        fn sub(self, a: __m512, b: __m512) -> __m512 {
            unsafe { _mm512_sub_ps(a, b) }
        }
        #[inline(always)]
        fn mul(self, a: __m512, b: __m512) -> __m512 {
            unsafe { _mm512_mul_ps(a, b) }
        }
        #[inline(always)]
        fn div(self, a: __m512, b: __m512) -> __m512 {
            unsafe { _mm512_div_ps(a, b) }
        }
        #[inline(always)]
        fn mul_add(self, a: __m512, b: __m512, c: __m512) -> __m512 {
            unsafe { _mm512_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        fn max(self, a: __m512, b: __m512) -> __m512 {
            unsafe { _mm512_max_ps(a, b) }
        }
        #[inline(always)]
        fn clamp(self, v: __m512, lo: __m512, hi: __m512) -> __m512 {
            // vmaxps/vminps return the second operand when either is NaN.
            unsafe { _mm512_min_ps(hi, _mm512_max_ps(lo, v)) }
        }
        #[inline(always)]
        fn abs(self, v: __m512) -> __m512 {
            unsafe { _mm512_abs_ps(v) }
        }
        #[inline(always)]
        fn select_ge0(self, x: __m512, a: __m512, b: __m512) -> __m512 {
            unsafe {
                let k = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_setzero_ps());
                _mm512_mask_blend_ps(k, b, a)
            }
        }
        #[inline(always)]
        fn hsum(self, v: __m512) -> f32 {
            unsafe { _mm512_reduce_add_ps(v) }
        }
        #[inline(always)]
        fn hmax(self, v: __m512) -> f32 {
            unsafe { _mm512_reduce_max_ps(v) }
        }
        #[inline(always)]
        fn exp2_parts(self, t: __m512) -> (__m512, __m512) {
            unsafe {
                let n = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(MAGIC_BITS));
                let h = _mm512_srai_epi32::<1>(n);
                let bias = _mm512_set1_epi32(127);
                let a = _mm512_slli_epi32::<23>(_mm512_add_epi32(h, bias));
                let b = _mm512_slli_epi32::<23>(_mm512_add_epi32(_mm512_sub_epi32(n, h), bias));
                (_mm512_castsi512_ps(a), _mm512_castsi512_ps(b))
            }
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) use wasm::Simd128;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use core::arch::wasm32::*;

    use super::{MAGIC_BITS, Simd};

    /// wasm `simd128`, 4 lanes (enabled at compile time, so always safe).
    #[derive(Debug, Clone, Copy, Default)]
    pub(crate) struct Simd128;

    impl Simd128 {
        #[inline(always)]
        pub(crate) fn vectorize<R>(self, f: impl FnOnce(Simd128) -> R) -> R {
            f(self)
        }
    }

    impl Simd for Simd128 {
        type V = v128;
        const LANES: usize = 4;

        #[inline(always)]
        fn splat(self, x: f32) -> v128 {
            f32x4_splat(x)
        }
        #[inline(always)]
        fn load(self, s: &[f32], fill: f32) -> v128 {
            if s.len() >= 4 {
                // SAFETY: `s` holds at least 4 values; wasm loads need no alignment.
                return unsafe { v128_load(s.as_ptr().cast()) };
            }
            let mut b = [fill; 4];
            let n = s.len().min(4);
            b[..n].copy_from_slice(&s[..n]);
            f32x4(b[0], b[1], b[2], b[3])
        }
        #[inline(always)]
        fn store(self, v: v128, d: &mut [f32]) {
            if d.len() >= 4 {
                // SAFETY: `d` holds at least 4 values; wasm stores need no alignment.
                return unsafe { v128_store(d.as_mut_ptr().cast(), v) };
            }
            let b = [
                f32x4_extract_lane::<0>(v),
                f32x4_extract_lane::<1>(v),
                f32x4_extract_lane::<2>(v),
                f32x4_extract_lane::<3>(v),
            ];
            let n = d.len().min(4);
            d[..n].copy_from_slice(&b[..n]);
        }
        #[inline(always)]
        fn add(self, a: v128, b: v128) -> v128 {
            f32x4_add(a, b)
        }
        #[inline(always)]
        fn sub(self, a: v128, b: v128) -> v128 {
            f32x4_sub(a, b)
        }
        #[inline(always)]
        fn mul(self, a: v128, b: v128) -> v128 {
            f32x4_mul(a, b)
        }
        #[inline(always)]
        fn div(self, a: v128, b: v128) -> v128 {
            f32x4_div(a, b)
        }
        #[inline(always)]
        fn mul_add(self, a: v128, b: v128, c: v128) -> v128 {
            f32x4_add(f32x4_mul(a, b), c)
        }
        #[inline(always)]
        fn max(self, a: v128, b: v128) -> v128 {
            f32x4_pmax(a, b)
        }
        #[inline(always)]
        fn clamp(self, v: v128, lo: v128, hi: v128) -> v128 {
            // pmax(a, b) = a < b ? b : a and pmin(a, b) = b < a ? b : a keep a NaN `a`.
            f32x4_pmin(f32x4_pmax(v, lo), hi)
        }
        #[inline(always)]
        fn abs(self, v: v128) -> v128 {
            f32x4_abs(v)
        }
        #[inline(always)]
        fn select_ge0(self, x: v128, a: v128, b: v128) -> v128 {
            v128_bitselect(a, b, f32x4_ge(x, f32x4_splat(0.0)))
        }
        #[inline(always)]
        fn hsum(self, v: v128) -> f32 {
            (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<2>(v))
                + (f32x4_extract_lane::<1>(v) + f32x4_extract_lane::<3>(v))
        }
        #[inline(always)]
        fn hmax(self, v: v128) -> f32 {
            let m = f32x4_pmax(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
            let m = f32x4_pmax(m, i32x4_shuffle::<1, 0, 3, 2>(m, m));
            f32x4_extract_lane::<0>(m)
        }
        #[inline(always)]
        fn exp2_parts(self, t: v128) -> (v128, v128) {
            let n = i32x4_sub(t, i32x4_splat(MAGIC_BITS));
            let h = i32x4_shr(n, 1);
            let bias = i32x4_splat(127);
            let a = i32x4_shl(i32x4_add(h, bias), 23);
            let b = i32x4_shl(i32x4_add(i32x4_sub(n, h), bias), 23);
            (a, b)
        }
    }
}
