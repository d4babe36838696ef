//! The x86_64 kernels of [`super`]: AVX-512F and AVX2, both with FMA and F16C.

/// The dot kernels over one instruction set's primitives, which the invoking
/// module defines: the vector type `V` of `L` lanes, `GROUP` (rows of `x` at once), `WIDE`
/// (weight rows a tile streams at once for one row of `x`), `WIDE_U` (their accumulators along
/// `k`), `WIDE_PAIRS` (whether two rows of `x` take wide tiles too), `SHORT_ROWS_IN_SEQUENCE`
/// (whether one row of `x` takes rows under `LONG_ROW_BYTES` one at a time) with
/// `SEQUENCE_PREFETCH_BYTES` (how far ahead that stream is prefetched), and `unsafe fn`s `zero`,
/// `add`, `load_x` (`L` f32), `load_w::<BF>` (`L` f16 or bf16 values widened), `fma(a,
/// b, c) = a * b + c`, `hsum` and `prefetch` (a hint into L2, any address).
///
/// Decode streams the weight from memory (a token reads every weight once, far more than the
/// caches hold), and a tile's rows are as many streams `2 k` bytes apart: each only one to ten
/// KiB long, too short for the hardware prefetcher to ramp up on before the tile moves on. So
/// every stream is prefetched [`PREFETCH_BYTES`] ahead of its loads, into L2 (`prefetcht1`:
/// an L1 prefetch that far ahead over eight streams evicts the lines before they are read),
/// and past its row's end into the same row of the next tile. Eight rows at once keep more
/// lines in flight than four (one or two rows of `x`: the accumulators fit the registers).
/// Rows shorter than [`LONG_ROW_BYTES`] (k < 2048: most of a small model's matrices and its
/// head) prefetch [`PREFETCH_BYTES_SHORT`] ahead instead: measured on the 0.5B Qwen's decode
/// shapes (AMD EPYC Zen 4, 1 thread, `half_dot` bench, 2026-11-27, two interleaved pairs), its
/// 896-wide head streamed at 21.3-22.4 GiB/s against 17.3-17.6 at 2048 bytes, the 896 x 4864
/// weight at 21.0-21.1 against 18.1-20.7, while the 4864-wide rows kept 2048 (22.7-24.4 against
/// 20.2-21.9). That is the AVX-512 kernel's; the AVX2 kernel's short rows take 2048 (measured on
/// Zen 3, in its module).
const PREFETCH_BYTES: usize = 2048;
const PREFETCH_BYTES_SHORT: usize = 1024;
const LONG_ROW_BYTES: usize = 4096;

macro_rules! half_kernels {
    ($(#[$attr:meta])*) => {
        /// `t[(j - j0) * rows + r] = x[r] . w[j]` for `j0 <= j < j1`, `r < rows`.
        ///
        /// # Safety
        /// The CPU has this module's features; `w + j * row_bytes` is valid for `row_bytes =
        /// 2 k` reads for `j < j1`, `x` for `rows * k` reads, `t` for `(j1 - j0) * rows`
        /// writes.
        $(#[$attr])*
        #[allow(clippy::too_many_arguments)]
        pub(in crate::cpu::fast::half_dot) unsafe fn rows<const BF: bool>(
            w: *const u8,
            row_bytes: usize,
            j0: usize,
            j1: usize,
            x: *const f32,
            rows: usize,
            k: usize,
            t: *mut f32,
        ) {
            // SAFETY: every tile reads weight rows j..j + J <= j1 and rows r0..r0 + R <= rows
            // of x, and writes their outputs (J x R values at (j - j0) * rows + r0, stride
            // rows): `tiles` stops before a tile would pass j1.
            unsafe {
                let mut r0 = 0;
                while r0 < rows {
                    let rn = (rows - r0).min(GROUP);
                    let xr = x.add(r0 * k);
                    let tr = t.add(r0);
                    let at = Tiles { w, row_bytes, x: xr, k, t: tr, ldt: rows, j0, j1 };
                    // Wide tiles, then four rows, then one. A row's sum depends on its tile's
                    // `U` (accumulators along `k`) alone: the same in a wide tile as in a
                    // four-row one where `WIDE_U` is theirs (AVX-512), and the same on every
                    // thread count (the pool splits at multiples of the tiles).
                    // One row of `x` on short rows where the family reads them one at a time:
                    // one sequential stream through the weight.
                    let seq = SHORT_ROWS_IN_SEQUENCE && rn == 1 && row_bytes < LONG_ROW_BYTES;
                    let j = match rn {
                        1 if seq => j0,
                        1 => at.tiles::<1, WIDE, WIDE_U, BF>(j0),
                        2 if WIDE_PAIRS => at.tiles::<2, WIDE, 1, BF>(j0),
                        _ => j0,
                    };
                    let j = match rn {
                        1 if seq => j,
                        1 => at.tiles::<1, 4, 2, BF>(j),
                        2 => at.tiles::<2, 4, 1, BF>(j),
                        3 => at.tiles::<3, 4, 1, BF>(j),
                        _ => at.tiles::<4, 4, 1, BF>(j),
                    };
                    match rn {
                        1 => at.tiles::<1, 1, 4, BF>(j),
                        2 => at.tiles::<2, 1, 2, BF>(j),
                        3 => at.tiles::<3, 1, 2, BF>(j),
                        _ => at.tiles::<4, 1, 2, BF>(j),
                    };
                    r0 += rn;
                }
            }
        }

        /// One pass of [`rows`] over rows of `x` (`x`, `k`; outputs at `t`, stride `ldt`).
        struct Tiles {
            w: *const u8,
            row_bytes: usize,
            x: *const f32,
            k: usize,
            t: *mut f32,
            ldt: usize,
            j0: usize,
            j1: usize,
        }

        impl Tiles {
            /// Tiles of `J` weight rows from `j` while they fit below `j1`; the row after them.
            ///
            /// # Safety
            /// As [`rows`], for this pass's `R` rows of `x`.
            $(#[$attr])*
            #[inline]
            unsafe fn tiles<const R: usize, const J: usize, const U: usize, const BF: bool>(
                &self,
                mut j: usize,
            ) -> usize {
                // SAFETY: rows j..j + J <= j1 of the weight, outputs (j - j0) * ldt on.
                unsafe {
                    while j + J <= self.j1 {
                        let wj = self.w.add(j * self.row_bytes);
                        let tj = self.t.add((j - self.j0) * self.ldt);
                        block::<R, J, U, BF>(self.x, self.k, wj, self.row_bytes, tj, self.ldt);
                        j += J;
                    }
                }
                j
            }
        }

        /// `R` rows of `x` by `J` weight rows, `U` accumulators each along `k`.
        ///
        /// # Safety
        /// As [`rows`], for these rows.
        $(#[$attr])*
        #[inline]
        unsafe fn block<const R: usize, const J: usize, const U: usize, const BF: bool>(
            x: *const f32,
            k: usize,
            w: *const u8,
            row_bytes: usize,
            t: *mut f32,
            ldt: usize,
        ) {
            // SAFETY: reads at p + u * L + L <= k of each row; the tail is scalar.
            unsafe {
                // A step of `U * L` values covers a 64-byte line, several, or a part of one.
                const { assert!(32 % (U * L) == 0 || (U * L) % 32 == 0) };
                let mut acc = [[[zero(); U]; J]; R];
                let ahead_bytes = if J == 1 && SHORT_ROWS_IN_SEQUENCE && row_bytes < LONG_ROW_BYTES {
                    SEQUENCE_PREFETCH_BYTES
                } else if row_bytes >= LONG_ROW_BYTES {
                    PREFETCH_BYTES
                } else {
                    PREFETCH_BYTES_SHORT
                };
                let mut p = 0;
                while p + U * L <= k {
                    if p % 32 == 0 {
                        // The lines of each row stream PREFETCH_BYTES ahead: in this row, or
                        // past its end in the same row of the next tile.
                        let o = 2 * p + ahead_bytes;
                        let ahead = if o < row_bytes { o } else { o - row_bytes + J * row_bytes };
                        for line in 0..(U * L).div_ceil(32) {
                            for jj in 0..J {
                                prefetch(w.wrapping_add(jj * row_bytes + ahead + 64 * line));
                            }
                        }
                        // Keeps the prefetches ahead of this step's loads in the code: LLVM
                        // otherwise sinks them below the loads, and on AMD EPYC Zen 4 the 0.5B
                        // F16 decode (1 thread, interleaved pairs, 2026-11-27) ran at 23.8-24.7
                        // tok/s that way against 26.9-27.5 with the prefetches first.
                        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
                    }
                    for u in 0..U {
                        let mut wv = [zero(); J];
                        for (jj, v) in wv.iter_mut().enumerate() {
                            *v = load_w::<BF>(w.add(jj * row_bytes + 2 * (p + u * L)));
                        }
                        for (r, accr) in acc.iter_mut().enumerate() {
                            let xv = load_x(x.add(r * k + p + u * L));
                            for (a, &wj) in accr.iter_mut().zip(&wv) {
                                a[u] = fma(xv, wj, a[u]);
                            }
                        }
                    }
                    p += U * L;
                }
                while p + L <= k {
                    let mut wv = [zero(); J];
                    for (jj, v) in wv.iter_mut().enumerate() {
                        *v = load_w::<BF>(w.add(jj * row_bytes + 2 * p));
                    }
                    for (r, accr) in acc.iter_mut().enumerate() {
                        let xv = load_x(x.add(r * k + p));
                        for (a, &wj) in accr.iter_mut().zip(&wv) {
                            a[0] = fma(xv, wj, a[0]);
                        }
                    }
                    p += L;
                }
                for (r, accr) in acc.iter().enumerate() {
                    for (jj, a) in accr.iter().enumerate() {
                        let mut v = a[0];
                        for &more in &a[1..] {
                            v = add(v, more);
                        }
                        let mut s = hsum(v);
                        for q in p..k {
                            let h = core::ptr::read_unaligned(w.add(jj * row_bytes + 2 * q) as *const u16);
                            s += *x.add(r * k + q) * super::super::scalar::<BF>(h);
                        }
                        *t.add(jj * ldt + r) = s;
                    }
                }
            }
        }
    };
}

/// Prefill's dot form over one instruction set's primitives (those of [`half_kernels`]) and
/// its tile: the invoking module defines `TILE_X` (rows of `x` a tile takes), `TILE_W` (weight
/// rows) and `PREFILL_K` (most values of `k` a pass takes), and lists the row counts below
/// `TILE_X` (`tails`) a pass's last tile may have.
macro_rules! half_prefill {
    ($(#[$attr:meta])*; tails $($tail:literal)*) => {
        /// Prefill's product in the dot form: `t[(j - j0) * rows + r] += x[r] . w[j]` for `j0 <= j
        /// < j1`, `r < rows`, the 16-bit rows widened in registers as they are loaded (no packing,
        /// no f32 copy). `k` is cut into chunks of at most [`PREFILL_K`] values (where they start
        /// depends on `k` alone); within a chunk, tiles of `TILE_X` rows of `x` by `TILE_W` weight rows
        /// sum along `k` in one accumulator each, reduced at the chunk's end and added to `t`. So
        /// an output's bits depend on `k` alone, not on the tile, block or thread its row falls in.
        ///
        /// # Safety
        /// The CPU has this module's features; `w + j * row_bytes` is valid for `row_bytes = 2 k`
        /// reads for `j < j1`, `x` for `rows * k` reads, `t` for `(j1 - j0) * rows` reads and
        /// writes.
        $(#[$attr])*
        #[allow(clippy::too_many_arguments)]
        pub(in crate::cpu::fast::half_dot) unsafe fn prefill<const BF: bool>(
            w: *const u8,
            row_bytes: usize,
            j0: usize,
            j1: usize,
            x: *const f32,
            rows: usize,
            k: usize,
            t: *mut f32,
        ) {
            let chunk = k.div_ceil(k.div_ceil(PREFILL_K).max(1)).next_multiple_of(L);
            // SAFETY: each pass reads columns kb..kb + len <= k of rows r0..r0 + R <= rows of x
            // and of weight rows j0..j1, and its outputs.
            unsafe {
                let mut kb = 0;
                while kb < k {
                    let len = chunk.min(k - kb);
                    let mut r0 = 0;
                    while r0 < rows {
                        let rn = (rows - r0).min(TILE_X);
                        let p = Pass {
                            w: w.add(2 * kb),
                            row_bytes,
                            x: x.add(r0 * k + kb),
                            ldx: k,
                            len,
                            t: t.add(r0),
                            ldt: rows,
                        };
                        match rn {
                            $($tail => p.run::<$tail, BF>(j1 - j0, j0),)*
                            _ => p.run::<TILE_X, BF>(j1 - j0, j0),
                        }
                        r0 += rn;
                    }
                    kb += len;
                }
            }
        }

        /// One chunk of `k` for up to `TILE_X` rows of `x` over a block's weight rows.
        struct Pass {
            /// Weight row 0 at the chunk's first column.
            w: *const u8,
            row_bytes: usize,
            /// The first row of `x` at the chunk's first column, rows `ldx` apart.
            x: *const f32,
            ldx: usize,
            len: usize,
            /// The first row's output of weight row `j0`, weight rows `ldt` apart.
            t: *mut f32,
            ldt: usize,
        }

        impl Pass {
            /// Weight rows `j0..j0 + n` by `R` rows of `x`: tiles of `TILE_W`, then one.
            ///
            /// # Safety
            /// As [`prefill`], for these rows.
            $(#[$attr])*
            unsafe fn run<const R: usize, const BF: bool>(&self, n: usize, j0: usize) {
                // SAFETY: weight rows j0 + i < j0 + n, outputs i * ldt on.
                unsafe {
                    let mut i = 0;
                    while i + TILE_W <= n {
                        self.tile::<R, TILE_W, BF>(j0 + i, i);
                        i += TILE_W;
                    }
                    while i < n {
                        self.tile::<R, 1, BF>(j0 + i, i);
                        i += 1;
                    }
                }
            }

            /// `R` rows of `x` by weight rows `j..j + J` (outputs from `i * ldt`).
            ///
            /// # Safety
            /// As [`prefill`], for these rows.
            $(#[$attr])*
            #[inline]
            unsafe fn tile<const R: usize, const J: usize, const BF: bool>(&self, j: usize, i: usize) {
                // SAFETY: loads at p + L <= len of each row; the tail is scalar.
                unsafe {
                    let w = self.w.add(j * self.row_bytes);
                    let mut acc = [[zero(); J]; R];
                    let mut p = 0;
                    while p + L <= self.len {
                        let mut wv = [zero(); J];
                        for (jj, v) in wv.iter_mut().enumerate() {
                            *v = load_w::<BF>(w.add(jj * self.row_bytes + 2 * p));
                        }
                        for (r, accr) in acc.iter_mut().enumerate() {
                            let xv = load_x(self.x.add(r * self.ldx + p));
                            for (a, &wj) in accr.iter_mut().zip(&wv) {
                                *a = fma(xv, wj, *a);
                            }
                        }
                        p += L;
                    }
                    for (r, accr) in acc.iter().enumerate() {
                        for (jj, &a) in accr.iter().enumerate() {
                            let mut s = hsum(a);
                            for q in p..self.len {
                                let h = core::ptr::read_unaligned(
                                    w.add(jj * self.row_bytes + 2 * q) as *const u16
                                );
                                s += *self.x.add(r * self.ldx + q) * super::super::scalar::<BF>(h);
                            }
                            *self.t.add((i + jj) * self.ldt + r) += s;
                        }
                    }
                }
            }
        }
    };
}

pub(super) mod avx512 {
    use core::arch::x86_64::*;

    type V = __m512;
    const L: usize = 16;
    const GROUP: usize = 4;
    const WIDE: usize = 8;
    const WIDE_U: usize = 2;
    const WIDE_PAIRS: bool = true;
    /// Short rows for one row of `x` one at a time, one sequential stream prefetched
    /// [`SEQUENCE_PREFETCH_BYTES`] ahead (as the AVX2 kernel's, there 2 KiB ahead). The 0.5B
    /// Qwen's F16 decode (AMD EPYC Zen 5, `kernels bench llama --prefill-len 8 --new-tokens 16
    /// --runs 3`, interleaved rounds, 2026-11-28, tok/s), wide tiles against one stream 8 KiB
    /// ahead, two sessions of two rounds (the memory bandwidth the VM got moved between them):
    /// 1 thread 35.4-35.4 against 36.2-36.4 and 36.1-36.3 against 35.7-35.8, 2 threads
    /// 56.6-59.5 against 62.2-63.0 and 36.8-38.9 against 43.4-45.3; one stream 1 KiB ahead
    /// was slower at 1 thread (31.0-32.0 against 33.5-35.4).
    const SHORT_ROWS_IN_SEQUENCE: bool = true;
    const SEQUENCE_PREFETCH_BYTES: usize = 8192;
    use super::{LONG_ROW_BYTES, PREFETCH_BYTES, PREFETCH_BYTES_SHORT};

    #[inline(always)]
    unsafe fn zero() -> V {
        // SAFETY: called only inside this module's `target_feature` kernels.
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn add(a: V, b: V) -> V {
        // SAFETY: as `zero`.
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn load_x(p: *const f32) -> V {
        // SAFETY: as `zero`; the caller's pointer holds 16 values.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load_w<const BF: bool>(p: *const u8) -> V {
        // SAFETY: as `load_x`, 16 two-byte values.
        unsafe {
            let h = _mm256_loadu_si256(p as *const __m256i);
            if BF {
                _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
            } else {
                _mm512_cvtph_ps(h)
            }
        }
    }
    #[inline(always)]
    unsafe fn fma(a: V, b: V, c: V) -> V {
        // SAFETY: as `zero`.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn hsum(v: V) -> f32 {
        // SAFETY: as `zero`.
        unsafe { _mm512_reduce_add_ps(v) }
    }

    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        // SAFETY: a prefetch is a hint: it does not fault on any address.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p as *const i8) }
    }

    half_kernels!(#[target_feature(enable = "avx512f,avx2,fma,f16c")]);

    /// Rows of `x` by weight rows in a prefill tile: 24 accumulators, four widened weight
    /// vectors and one of `x` in the 32 registers (six rows of `x` share each widened weight
    /// vector: a conversion per six multiply-adds).
    const TILE_X: usize = 6;
    const TILE_W: usize = 4;
    /// Most values of `k` a prefill pass takes at once: a tile's six rows of `x` (24 KiB) stay
    /// in L1 and a block's weight rows in L2 while the tiles pass over them.
    pub(in crate::cpu::fast::half_dot) const PREFILL_K: usize = 1024;

    half_prefill!(#[target_feature(enable = "avx512f,avx2,fma,f16c")]; tails 1 2 3 4 5);

    /// `dst[i] = src[i]` widened to f32 for `i < n` (prefill's blocks on this family, which
    /// widens a block before the GEMM packs it: measured faster on Zen 4 than widening in the
    /// packing, section "f16 and bf16 weights" of the README).
    ///
    /// # Safety
    /// The CPU has this module's features; `src` is valid for `2 n` reads, `dst` for `n`
    /// writes.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(in crate::cpu::fast::half_dot) unsafe fn widen<const BF: bool>(
        src: *const u8,
        n: usize,
        dst: *mut f32,
    ) {
        // SAFETY: whole vectors below n, then single values.
        unsafe {
            let mut i = 0;
            while i + L <= n {
                _mm512_storeu_ps(dst.add(i), load_w::<BF>(src.add(2 * i)));
                i += L;
            }
            while i < n {
                let h = core::ptr::read_unaligned(src.add(2 * i) as *const u16);
                *dst.add(i) = super::super::scalar::<BF>(h);
                i += 1;
            }
        }
    }
}

pub(super) mod avx2 {
    use core::arch::x86_64::*;

    type V = __m256;
    const L: usize = 8;
    const GROUP: usize = 2;
    // Sixteen registers: eight rows of one accumulator each, pairs of rows four at a time.
    const WIDE: usize = 8;
    const WIDE_U: usize = 1;
    const WIDE_PAIRS: bool = false;
    /// One row of `x` on rows shorter than `LONG_ROW_BYTES` (the 0.5B Qwen's 896-wide matrices
    /// and head) takes one weight row at a time, so the weight is one sequential stream for the
    /// hardware prefetchers, instead of eight 1.8 KiB streams a tile: its F16 decode (AMD EPYC
    /// Zen 3, `kernels bench llama --new-tokens 32 --runs 3`, interleaved rounds, 2026-11-28)
    /// went from 11.63-13.74 to 12.73-14.60 tok/s at 1 thread (faster in 4 of 4 rounds) and
    /// from 16.18-22.17 to 19.84-24.47 at 2 (4 of 4); `half_dot` bench, 1 thread: the 896-wide
    /// head 11.4 -> 13.6 GiB/s.
    const SHORT_ROWS_IN_SEQUENCE: bool = true;
    use super::{LONG_ROW_BYTES, PREFETCH_BYTES};
    /// The AVX2 kernel's short rows prefetch as far ahead as the long ones: the 0.5B Qwen's F16
    /// decode (AMD EPYC Zen 3, which has no AVX-512, 1 thread, `kernels bench llama
    /// --new-tokens 32`, 2026-11-27) ran faster at 2048 bytes than at 1024 in 8 of 10
    /// interleaved pairs, by -2% to +9% (at 1024: 11.3-13.5 tok/s, at 2048: 12.0-14.7).
    const PREFETCH_BYTES_SHORT: usize = PREFETCH_BYTES;
    const SEQUENCE_PREFETCH_BYTES: usize = PREFETCH_BYTES;

    #[inline(always)]
    unsafe fn zero() -> V {
        // SAFETY: called only inside this module's `target_feature` kernels.
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn add(a: V, b: V) -> V {
        // SAFETY: as `zero`.
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn load_x(p: *const f32) -> V {
        // SAFETY: as `zero`; the caller's pointer holds 8 values.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load_w<const BF: bool>(p: *const u8) -> V {
        // SAFETY: as `load_x`, 8 two-byte values.
        unsafe {
            let h = _mm_loadu_si128(p as *const __m128i);
            if BF {
                _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
            } else {
                _mm256_cvtph_ps(h)
            }
        }
    }
    #[inline(always)]
    unsafe fn fma(a: V, b: V, c: V) -> V {
        // SAFETY: as `zero`.
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn hsum(v: V) -> f32 {
        // SAFETY: as `zero`.
        unsafe {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
            _mm_cvtss_f32(s)
        }
    }

    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        // SAFETY: a prefetch is a hint: it does not fault on any address.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p as *const i8) }
    }

    half_kernels!(#[target_feature(enable = "avx2,fma,f16c")]);

    /// Rows of `x` by weight rows in a prefill tile: twelve accumulators, three widened weight
    /// vectors and one of `x` fill the sixteen registers.
    const TILE_X: usize = 4;
    const TILE_W: usize = 3;
    /// Most values of `k` a prefill pass takes at once: a tile's four rows of `x` (16 KiB) stay
    /// in L1 and a block's weight rows in L2 while the tiles pass over them.
    pub(in crate::cpu::fast::half_dot) const PREFILL_K: usize = 1024;

    half_prefill!(#[target_feature(enable = "avx2,fma,f16c")]; tails 1 2 3);
}
