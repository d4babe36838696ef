//! The small-product kernels on x86_64: AVX2 + FMA (8 lanes) and AVX-512 (16 lanes, masked
//! tails). Each is a module of primitives plus the shared [`skinny_kernels`] bodies compiled
//! with that module's `target_feature`.

pub use avx2::Avx2Isa;
pub use avx512::Avx512Isa;

mod avx2 {
    use core::arch::x86_64::{
        __m256, __m256i, _MM_HINT_T1, _mm_add_ps, _mm_add_ss, _mm_cvtss_f32, _mm_movehl_ps,
        _mm_prefetch, _mm_shuffle_ps, _mm256_add_ps, _mm256_castps256_ps128, _mm256_extractf128_ps,
        _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_loadu_si256, _mm256_maskload_ps,
        _mm256_maskstore_ps, _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };

    use crate::cpu::fast::kernels::Avx2Fma;

    type V = __m256;
    const L: usize = 8;
    /// 4 rows x 2 vectors = 8 accumulators, 2 loaded rows and a broadcast: 11 of 16 registers.
    const NV: usize = 2;
    /// One row's columns one after another: on AMD EPYC Zen 3 the stories15M shape's f32 decode
    /// (`kernels bench llama --model /tmp/llama-s15 --backend cpu`, 2026-11-28, interleaved
    /// rounds) ran at 182.5-227.7 tok/s this way against 157.9-191.5 with eight columns at once
    /// at 1 thread (faster in 6 of 6 rounds), 264.4-291.2 against 227.2-279.1 at 2 (4 of 6): its
    /// 288- and 768-wide columns are too short streams for eight at a time.
    const STREAM_COLUMNS: bool = true;
    /// No software prefetch on the stream (as measured on Zen 3).
    const STREAM_PREFETCH: usize = 0;

    /// AVX2 + FMA; holding one proves the CPU has them.
    #[derive(Debug, Clone, Copy)]
    pub struct Avx2Isa(#[allow(dead_code)] Avx2Fma);

    impl From<Avx2Fma> for Avx2Isa {
        fn from(k: Avx2Fma) -> Self {
            Avx2Isa(k)
        }
    }

    /// `MASK[8 - rem..][..8]` selects the first `rem` lanes.
    static MASK: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn mask(rem: usize) -> __m256i {
        // SAFETY: rem <= 8, so the 8 values at 8 - rem are within MASK.
        unsafe { _mm256_loadu_si256(MASK.as_ptr().add(8 - rem.min(8)).cast()) }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn zero() -> V {
        _mm256_setzero_ps()
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn splat(x: f32) -> V {
        _mm256_set1_ps(x)
    }

    /// # Safety
    /// `p` is valid for `L` reads.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load(p: *const f32) -> V {
        // SAFETY: the caller's contract.
        unsafe { _mm256_loadu_ps(p) }
    }

    /// # Safety
    /// `p` is valid for `rem < L` reads (masked-off lanes are not accessed).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load_tail(p: *const f32, rem: usize) -> V {
        // SAFETY: the caller's contract.
        unsafe { _mm256_maskload_ps(p, mask(rem)) }
    }

    /// # Safety
    /// `p` is valid for `L` writes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store(p: *mut f32, v: V) {
        // SAFETY: the caller's contract.
        unsafe { _mm256_storeu_ps(p, v) }
    }

    /// # Safety
    /// `p` is valid for `rem < L` writes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store_tail(p: *mut f32, v: V, rem: usize) {
        // SAFETY: the caller's contract.
        unsafe { _mm256_maskstore_ps(p, mask(rem), v) }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn add(a: V, b: V) -> V {
        _mm256_add_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fma(a: V, b: V, c: V) -> V {
        _mm256_fmadd_ps(a, b, c)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: V) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn prefetch(p: *const f32) {
        _mm_prefetch::<_MM_HINT_T1>(p.cast());
    }

    skinny_kernels!(#[target_feature(enable = "avx2,fma")]);
    isa_impl!(Avx2Isa);
}

mod avx512 {
    use core::arch::x86_64::{
        __m512, _MM_HINT_T1, _mm_prefetch, _mm512_add_ps, _mm512_fmadd_ps, _mm512_loadu_ps,
        _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_reduce_add_ps, _mm512_set1_ps,
        _mm512_setzero_ps, _mm512_storeu_ps,
    };

    use crate::cpu::fast::kernels::Avx512;

    type V = __m512;
    const L: usize = 16;
    /// 4 rows x 4 vectors = 16 accumulators, 4 loaded rows and a broadcast: 21 of 32 registers.
    const NV: usize = 4;
    /// One row's columns one after another, the stream prefetched 16 KiB ahead into L2: on AMD
    /// EPYC Zen 5 the stories15M shape's f32 decode (`kernels bench llama --model
    /// /tmp/llama-s15 --backend cpu --threads 1`, 2026-11-28, three interleaved rounds) ran at
    /// 508.4-516.1 tok/s against 447.0-485.0 with four columns at once (the earlier choice,
    /// measured on Zen 4) and 492.5-504.7 with the stream 8 KiB ahead; four columns prefetched
    /// 6 tiles ahead instead of 2 gave 482.8-494.3. Three more rounds: 494.4-511.4 against
    /// 482.5-491.0; 2 threads, two rounds: 761.8-787.9 against 705.0-738.8.
    const STREAM_COLUMNS: bool = true;
    const STREAM_PREFETCH: usize = 4096;

    /// AVX-512F; holding one proves the CPU has it.
    #[derive(Debug, Clone, Copy)]
    pub struct Avx512Isa(#[allow(dead_code)] Avx512);

    impl From<Avx512> for Avx512Isa {
        fn from(k: Avx512) -> Self {
            Avx512Isa(k)
        }
    }

    #[inline]
    fn mask(rem: usize) -> u16 {
        ((1u32 << rem.min(16)) - 1) as u16
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn zero() -> V {
        _mm512_setzero_ps()
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn splat(x: f32) -> V {
        _mm512_set1_ps(x)
    }

    /// # Safety
    /// `p` is valid for `L` reads.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load(p: *const f32) -> V {
        // SAFETY: the caller's contract.
        unsafe { _mm512_loadu_ps(p) }
    }

    /// # Safety
    /// `p` is valid for `rem < L` reads (masked-off lanes are not accessed).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load_tail(p: *const f32, rem: usize) -> V {
        // SAFETY: the caller's contract.
        unsafe { _mm512_maskz_loadu_ps(mask(rem), p) }
    }

    /// # Safety
    /// `p` is valid for `L` writes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store(p: *mut f32, v: V) {
        // SAFETY: the caller's contract.
        unsafe { _mm512_storeu_ps(p, v) }
    }

    /// # Safety
    /// `p` is valid for `rem < L` writes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_tail(p: *mut f32, v: V, rem: usize) {
        // SAFETY: the caller's contract.
        unsafe { _mm512_mask_storeu_ps(p, mask(rem), v) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn add(a: V, b: V) -> V {
        _mm512_add_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn fma(a: V, b: V, c: V) -> V {
        _mm512_fmadd_ps(a, b, c)
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn hsum(v: V) -> f32 {
        _mm512_reduce_add_ps(v)
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn prefetch(p: *const f32) {
        _mm_prefetch::<_MM_HINT_T1>(p.cast());
    }

    skinny_kernels!(#[target_feature(enable = "avx512f")]);
    isa_impl!(Avx512Isa);
}
