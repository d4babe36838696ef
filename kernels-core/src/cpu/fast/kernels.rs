//! Register-blocked micro-kernels: `C[mr x nr] += A~ . B~` for one packed micro-panel pair.
//!
//! Every kernel reads `A~` as `kc` columns of `MR` values (`a[p * MR + i] = A(i, p)`) and `B~`
//! as `kc` rows of `NR` values (`b[p * NR + j] = B(p, j)`), both zero-padded by the packer, so
//! the register loop always computes a full `MR x NR` tile. Full tiles accumulate straight into
//! `C`; edge tiles (`mr < MR` or `nr < NR`) go through a small buffer and only their valid part
//! is added, which keeps the `unsafe` SIMD loops free of bounds logic.

use super::matref::{HalfRef, MatRef, pack, pack_half};

/// A micro-kernel and the cache-block sizes tuned for it.
pub trait MicroKernel: Copy {
    /// Rows of the register tile (rows of an `A~` micro-panel).
    const MR: usize;
    /// Columns of the register tile (columns of a `B~` micro-panel).
    const NR: usize;
    /// Rows of the packed `A` block (kept in L2); a multiple of `MR`.
    const MC: usize;
    /// Depth of the packed blocks (one `B~` micro-panel of `KC x NR` stays in L1).
    const KC: usize;
    /// Columns of the packed `B` block (kept in L3); a multiple of `NR`.
    const NC: usize;

    /// `C[..mr, ..nr] += A~ . B~` over `kc = min(a.len() / MR, b.len() / NR)`, where row `i` of
    /// `C` starts at `c[i * ldc]`. Rows or columns missing from `c` are skipped, never written
    /// out of bounds.
    fn tile(&self, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize, mr: usize, nr: usize);

    /// Packs `A~`: rows `i0..i0 + len`, columns `p0..p0 + kc` of `a`, in panels of `MR`.
    fn pack_a(dst: &mut [f32], a: MatRef, i0: usize, len: usize, p0: usize, kc: usize);

    /// Packs `B~` given `B^T`: its rows `j0..j0 + len`, columns `p0..p0 + kc`, panels of `NR`.
    fn pack_b(dst: &mut [f32], bt: MatRef, j0: usize, len: usize, p0: usize, kc: usize);

    /// [`MicroKernel::pack_a`] from a 16-bit `A`, widened as it is packed.
    fn pack_a_half(dst: &mut [f32], a: HalfRef, i0: usize, len: usize, p0: usize, kc: usize);
}

/// The `MicroKernel::pack_*` methods for a kernel with literal `MR` and `NR` (associated
/// constants cannot be const-generic arguments).
macro_rules! packers {
    ($mr:literal, $nr:literal) => {
        fn pack_a(dst: &mut [f32], a: MatRef, i0: usize, len: usize, p0: usize, kc: usize) {
            pack::<$mr>(dst, a, i0, len, p0, kc)
        }
        fn pack_b(dst: &mut [f32], bt: MatRef, j0: usize, len: usize, p0: usize, kc: usize) {
            pack::<$nr>(dst, bt, j0, len, p0, kc)
        }
        fn pack_a_half(dst: &mut [f32], a: HalfRef, i0: usize, len: usize, p0: usize, kc: usize) {
            pack_half::<$mr>(dst, a, i0, len, p0, kc)
        }
    };
}

/// Adds the `mr x nr` top-left corner of `src` (row stride `src_ld`) into `c` (row stride
/// `ldc`). Iterators rather than indices: a short `c` loses rows instead of panicking.
#[inline]
fn add_tile(src: &[f32], src_ld: usize, c: &mut [f32], ldc: usize, mr: usize, nr: usize) {
    let rows = src.chunks(src_ld.max(1)).take(mr);
    for (i, s) in rows.enumerate() {
        let Some(dst) = c.get_mut(i * ldc..) else {
            return;
        };
        for (d, &v) in dst.iter_mut().zip(s).take(nr) {
            *d += v;
        }
    }
}

/// Whether a full `mr x nr` tile with row stride `ldc` fits in `c`.
#[inline]
fn full_tile_fits(c_len: usize, ldc: usize, mr: usize, nr: usize) -> bool {
    ldc >= nr
        && mr
            .saturating_sub(1)
            .checked_mul(ldc)
            .and_then(|x| x.checked_add(nr))
            <= Some(c_len)
}

/// Plain Rust written for LLVM's auto-vectorizer: the accumulator is a fixed-size array whose
/// rows are vector-width multiples, and `a * b + c` (not `mul_add`, which is a libm call
/// without hardware FMA) so it compiles to SIMD multiply-add on whatever the target has.
#[derive(Debug, Clone, Copy, Default)]
pub struct Portable;

impl Portable {
    const TILE_MR: usize = 4;
    const TILE_NR: usize = 8;
}

impl MicroKernel for Portable {
    const MR: usize = Self::TILE_MR;
    const NR: usize = Self::TILE_NR;
    const MC: usize = 128;
    const KC: usize = 256;
    const NC: usize = 1024;

    fn tile(&self, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize, mr: usize, nr: usize) {
        const MR: usize = Portable::TILE_MR;
        const NR: usize = Portable::TILE_NR;
        let mut acc = [[0.0f32; NR]; MR];
        for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
            for (row, &ai) in acc.iter_mut().zip(ap) {
                for (x, &bj) in row.iter_mut().zip(bp) {
                    *x += ai * bj;
                }
            }
        }
        if mr == MR && nr == NR && full_tile_fits(c.len(), ldc, MR, NR) {
            for (i, row) in acc.iter().enumerate() {
                for (d, &v) in c[i * ldc..i * ldc + NR].iter_mut().zip(row) {
                    *d += v;
                }
            }
        } else {
            add_tile(acc.as_flattened(), NR, c, ldc, mr.min(MR), nr.min(NR));
        }
    }

    packers!(4, 8);
}

#[cfg(target_arch = "x86_64")]
pub use avx2::Avx2Fma;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use core::arch::x86_64::{
        __m256, _MM_HINT_T0, _mm_prefetch, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_loadu_ps,
        _mm256_setzero_ps, _mm256_storeu_ps,
    };

    use super::{HalfRef, MatRef, MicroKernel, add_tile, full_tile_fits, pack, pack_half};

    const MR: usize = 6;
    const NR: usize = 16;

    /// The AVX2 + FMA kernel: a 6 x 16 tile is 12 `ymm` accumulators, plus two `B~` rows and
    /// one broadcast of `A~` = 15 of the 16 registers; 12 independent FMAs per `k` step cover
    /// the FMA latency on both ports.
    ///
    /// Holding a value proves the CPU has AVX2 and FMA: the only constructor checks.
    #[derive(Debug, Clone, Copy)]
    pub struct Avx2Fma {
        _proof: (),
    }

    impl Avx2Fma {
        /// The kernel if this CPU has AVX2 and FMA (checked at run time with `std`, at compile
        /// time from the target features without it).
        pub fn detect() -> Option<Self> {
            #[cfg(feature = "std")]
            let ok = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
            #[cfg(not(feature = "std"))]
            let ok = cfg!(all(target_feature = "avx2", target_feature = "fma"));
            ok.then_some(Avx2Fma { _proof: () })
        }
    }

    impl MicroKernel for Avx2Fma {
        const MR: usize = MR;
        const NR: usize = NR;
        // A block 144 x 256 x 4 B = 144 KiB sits in L2; a B~ micro-panel 256 x 16 x 4 B =
        // 16 KiB stays in L1 while the A~ micro-panels stream past it.
        const MC: usize = 144;
        const KC: usize = 256;
        const NC: usize = 4080;

        fn tile(&self, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize, mr: usize, nr: usize) {
            let kc = (a.len() / MR).min(b.len() / NR);
            if mr == MR && nr == NR && full_tile_fits(c.len(), ldc, MR, NR) {
                // SAFETY: `self` proves AVX2 + FMA; `a` holds `kc * MR` and `b` `kc * NR`
                // values by the choice of `kc`, and `c` holds rows `0..MR` of `NR` values at
                // stride `ldc` (checked just above).
                unsafe { kernel_6x16(kc, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), ldc) }
            } else {
                let mut buf = [0.0f32; MR * NR];
                // SAFETY: as above, with `buf` (MR * NR values) as a full tile at
                // stride NR.
                unsafe { kernel_6x16(kc, a.as_ptr(), b.as_ptr(), buf.as_mut_ptr(), NR) }
                add_tile(&buf, NR, c, ldc, mr.min(MR), nr.min(NR));
            }
        }

        packers!(6, 16);
    }

    /// `C[6 x 16] += A~ . B~` over `kc` steps.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `a` is valid for `kc * 6` reads, `b` for `kc * 16` reads, and
    /// `c` for reads and writes of 16 values at `c + i * ldc` for `i` in `0..6`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn kernel_6x16(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize) {
        // The C tile is read only after the k loop, too late for out-of-order execution to hide
        // a cache miss; ask for its lines now (a row of 16 values may straddle two lines).
        for i in 0..MR {
            let row = c.wrapping_add(i * ldc);
            _mm_prefetch::<_MM_HINT_T0>(row.cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(NR - 1).cast::<i8>());
        }
        let mut acc: [[__m256; 2]; MR] = [[_mm256_setzero_ps(); 2]; MR];
        for p in 0..kc {
            // SAFETY: p < kc, so the 16 values at b + 16p and the 6 at a + 6p are in bounds.
            let (b0, b1, ap) = unsafe {
                let bp = b.add(p * NR);
                (
                    _mm256_loadu_ps(bp),
                    _mm256_loadu_ps(bp.add(8)),
                    a.add(p * MR),
                )
            };
            for (i, row) in acc.iter_mut().enumerate() {
                // SAFETY: i < 6, within the 6 values at `ap`.
                let ai = unsafe { _mm256_broadcast_ss(&*ap.add(i)) };
                row[0] = _mm256_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm256_fmadd_ps(ai, b1, row[1]);
            }
        }
        for (i, row) in acc.iter().enumerate() {
            // SAFETY: row i < 6 of C holds 16 values at c + i * ldc (caller's contract).
            unsafe {
                let ci = c.add(i * ldc);
                let c0 = _mm256_loadu_ps(ci);
                let c1 = _mm256_loadu_ps(ci.add(8));
                _mm256_storeu_ps(ci, core::arch::x86_64::_mm256_add_ps(c0, row[0]));
                _mm256_storeu_ps(ci.add(8), core::arch::x86_64::_mm256_add_ps(c1, row[1]));
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub use avx512::Avx512;

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use core::arch::x86_64::{
        __m512, _MM_HINT_T0, _mm_prefetch, _mm512_add_ps, _mm512_fmadd_ps, _mm512_loadu_ps,
        _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps,
    };

    use super::{HalfRef, MatRef, MicroKernel, add_tile, full_tile_fits, pack, pack_half};

    const MR: usize = 8;
    const NR: usize = 32;

    /// The AVX-512 kernel: an 8 x 32 tile is 16 `zmm` accumulators, plus two `B~` rows and a
    /// broadcast of `A~` = 19 of the 32 registers; 16 independent FMAs per `k` step cover the
    /// FMA latency (on Zen 4, which runs a 512-bit FMA as two 256-bit halves, too).
    ///
    /// Holding a value proves the CPU has AVX-512F: the only constructor checks.
    #[derive(Debug, Clone, Copy)]
    pub struct Avx512 {
        _proof: (),
    }

    impl Avx512 {
        /// The kernel if this CPU has AVX-512F (checked at run time with `std`, at compile time
        /// from the target features without it).
        pub fn detect() -> Option<Self> {
            #[cfg(feature = "std")]
            let ok = std::is_x86_feature_detected!("avx512f");
            #[cfg(not(feature = "std"))]
            let ok = cfg!(target_feature = "avx512f");
            ok.then_some(Avx512 { _proof: () })
        }
    }

    impl MicroKernel for Avx512 {
        const MR: usize = MR;
        const NR: usize = NR;
        // A block 192 x 192 x 4 B = 144 KiB sits in L2; a B~ micro-panel 192 x 32 x 4 B =
        // 24 KiB stays in a 32 KiB L1 beside the A~ micro-panel (6 KiB) streaming past it.
        const MC: usize = 192;
        const KC: usize = 192;
        const NC: usize = 4096;

        fn tile(&self, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize, mr: usize, nr: usize) {
            let kc = (a.len() / MR).min(b.len() / NR);
            if mr == MR && nr == NR && full_tile_fits(c.len(), ldc, MR, NR) {
                // SAFETY: `self` proves AVX-512F; `a` holds `kc * MR` and `b` `kc * NR` values
                // by the choice of `kc`, and `c` holds rows `0..MR` of `NR` values at stride
                // `ldc` (checked just above).
                unsafe { kernel_8x32(kc, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), ldc) }
            } else {
                let mut buf = [0.0f32; MR * NR];
                // SAFETY: as above, with `buf` (MR * NR values) as a full tile at stride NR.
                unsafe { kernel_8x32(kc, a.as_ptr(), b.as_ptr(), buf.as_mut_ptr(), NR) }
                add_tile(&buf, NR, c, ldc, mr.min(MR), nr.min(NR));
            }
        }

        packers!(8, 32);
    }

    /// `C[8 x 32] += A~ . B~` over `kc` steps.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `a` is valid for `kc * 8` reads, `b` for `kc * 32` reads, and `c`
    /// for reads and writes of 32 values at `c + i * ldc` for `i` in `0..8`.
    #[target_feature(enable = "avx512f")]
    unsafe fn kernel_8x32(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize) {
        for i in 0..MR {
            let row = c.wrapping_add(i * ldc);
            _mm_prefetch::<_MM_HINT_T0>(row.cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(NR - 1).cast::<i8>());
        }
        let mut acc: [[__m512; 2]; MR] = [[_mm512_setzero_ps(); 2]; MR];
        for p in 0..kc {
            // SAFETY: p < kc, so the 32 values at b + 32p and the 8 at a + 8p are in bounds.
            let (b0, b1, ap) = unsafe {
                let bp = b.add(p * NR);
                (
                    _mm512_loadu_ps(bp),
                    _mm512_loadu_ps(bp.add(16)),
                    a.add(p * MR),
                )
            };
            for (i, row) in acc.iter_mut().enumerate() {
                // SAFETY: i < 8, within the 8 values at `ap`.
                let ai = _mm512_set1_ps(unsafe { *ap.add(i) });
                row[0] = _mm512_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm512_fmadd_ps(ai, b1, row[1]);
            }
        }
        for (i, row) in acc.iter().enumerate() {
            // SAFETY: row i < 8 of C holds 32 values at c + i * ldc (caller's contract).
            unsafe {
                let ci = c.add(i * ldc);
                let c0 = _mm512_loadu_ps(ci);
                let c1 = _mm512_loadu_ps(ci.add(16));
                _mm512_storeu_ps(ci, _mm512_add_ps(c0, row[0]));
                _mm512_storeu_ps(ci.add(16), _mm512_add_ps(c1, row[1]));
            }
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub use simd128::Simd128;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
    use core::arch::wasm32::{f32x4_add, f32x4_mul, f32x4_splat, v128, v128_load, v128_store};

    use super::{HalfRef, MatRef, MicroKernel, add_tile, full_tile_fits, pack, pack_half};

    const MR: usize = 4;
    const NR: usize = 8;

    /// The wasm SIMD kernel: 4 x 8 is 8 `f32x4` accumulators, few enough that engines keep
    /// them in the 16 host vector registers. `simd128` is a compile-time target feature on
    /// wasm (a module either validates with it or not), so no run-time check is needed.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct Simd128;

    impl MicroKernel for Simd128 {
        const MR: usize = MR;
        const NR: usize = NR;
        const MC: usize = 128;
        const KC: usize = 256;
        const NC: usize = 1024;

        fn tile(&self, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize, mr: usize, nr: usize) {
            let kc = (a.len() / MR).min(b.len() / NR);
            if mr == MR && nr == NR && full_tile_fits(c.len(), ldc, MR, NR) {
                // SAFETY: `a` holds `kc * MR` and `b` `kc * NR` values by the choice of `kc`;
                // `c` holds rows 0..MR of NR values at stride `ldc` (checked just above).
                unsafe { kernel_4x8(kc, a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), ldc) }
            } else {
                let mut buf = [0.0f32; MR * NR];
                // SAFETY: as above, with `buf` (MR * NR values) at stride NR.
                unsafe { kernel_4x8(kc, a.as_ptr(), b.as_ptr(), buf.as_mut_ptr(), NR) }
                add_tile(&buf, NR, c, ldc, mr.min(MR), nr.min(NR));
            }
        }

        packers!(4, 8);
    }

    /// `C[4 x 8] += A~ . B~` over `kc` steps.
    ///
    /// # Safety
    /// `a` is valid for `kc * 4` reads, `b` for `kc * 8` reads, and `c` for reads and writes
    /// of 8 values at `c + i * ldc` for `i` in `0..4`.
    unsafe fn kernel_4x8(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize) {
        let mut acc: [[v128; 2]; MR] = [[f32x4_splat(0.0); 2]; MR];
        for p in 0..kc {
            // SAFETY: p < kc, so the 8 values at b + 8p and the 4 at a + 4p are in bounds;
            // v128_load has no alignment requirement.
            let (b0, b1, ap) = unsafe {
                let bp = b.add(p * NR);
                (
                    v128_load(bp.cast::<v128>()),
                    v128_load(bp.add(4).cast::<v128>()),
                    a.add(p * MR),
                )
            };
            for (i, row) in acc.iter_mut().enumerate() {
                // SAFETY: i < 4, within the 4 values at `ap`.
                let ai = f32x4_splat(unsafe { *ap.add(i) });
                row[0] = f32x4_add(f32x4_mul(ai, b0), row[0]);
                row[1] = f32x4_add(f32x4_mul(ai, b1), row[1]);
            }
        }
        for (i, row) in acc.iter().enumerate() {
            // SAFETY: row i < 4 of C holds 8 values at c + i * ldc (caller's contract).
            unsafe {
                let ci = c.add(i * ldc);
                let c0 = v128_load(ci.cast::<v128>());
                let c1 = v128_load(ci.add(4).cast::<v128>());
                v128_store(ci.cast::<v128>(), f32x4_add(c0, row[0]));
                v128_store(ci.add(4).cast::<v128>(), f32x4_add(c1, row[1]));
            }
        }
    }
}
