//! The strided operand view the GEMM reads ([`MatRef`]) and the packing of its blocks into
//! micro-panels. A leaf module: the driver in [`super::gemm`] and the micro-kernels in
//! [`super::kernels`] both use it (and not each other in both directions).

use alloc::format;

use crate::error::{Error, Result};

const NAME: &str = "matmul";

/// A read-only strided matrix: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a> {
    pub(super) data: &'a [f32],
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) rs: usize,
    pub(super) cs: usize,
}

impl<'a> MatRef<'a> {
    /// The `rows x cols` matrix `op(X)` where `X` is stored row-major: `X` itself (`rows x
    /// cols`) when `trans` is false, else `X^T` of an `X` stored as `cols x rows`.
    pub fn new(data: &'a [f32], rows: usize, cols: usize, trans: bool) -> Result<Self> {
        if rows.checked_mul(cols).is_none_or(|n| data.len() < n) {
            return Err(Error::bad_shape(
                NAME,
                "operand",
                &[rows, cols],
                format!("needs {rows} x {cols} values, has {}", data.len()),
            ));
        }
        let (rs, cs) = if trans { (1, rows) } else { (cols, 1) };
        Ok(MatRef {
            data,
            rows,
            cols,
            rs,
            cs,
        })
    }

    /// The transpose: the same elements with rows and columns swapped (no copy).
    pub fn t(self) -> Self {
        MatRef {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }

    /// Rows `r0..r1` of `self` (no copy); `None` if the range is not within `0..rows`.
    pub(super) fn row_range(self, r0: usize, r1: usize) -> Option<Self> {
        if r0 > r1 || r1 > self.rows {
            return None;
        }
        let data = if r1 == r0 {
            &self.data[..0]
        } else {
            self.data.get(r0.checked_mul(self.rs)?..)?
        };
        Some(MatRef {
            data,
            rows: r1 - r0,
            ..self
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }
}

/// Packs rows `i0..i0 + len` (columns `p0..p0 + kc`) of `x` into micro-panels of `R` rows:
/// `dst[panel * R * kc + p * R + i] = x(i0 + panel * R + i, p0 + p)`, so the micro-kernel reads
/// one contiguous run and never needs a bounds check. Past `len` the panel is zero: those lanes
/// only feed tile entries that are discarded, but stale values there (a subnormal, say) could
/// still slow the kernel down. `R` is a constant so the per-element loops unroll.
pub(super) fn pack<const R: usize>(
    dst: &mut [f32],
    x: MatRef,
    i0: usize,
    len: usize,
    p0: usize,
    kc: usize,
) {
    for (panel, start) in (0..len).step_by(R).enumerate() {
        let rows = R.min(len - start);
        let out = &mut dst[panel * R * kc..(panel + 1) * R * kc];
        if x.rs == 1 {
            // The panel's rows are adjacent in memory: one copy per column.
            for (p, o) in out.chunks_exact_mut(R).enumerate() {
                let s = (p0 + p) * x.cs + i0 + start;
                let (head, tail) = o.split_at_mut(rows);
                head.copy_from_slice(&x.data[s..s + rows]);
                tail.fill(0.0);
            }
        } else if x.cs == 1 && rows == R {
            // Each row is contiguous along `p`: read the R rows side by side.
            let base = (i0 + start) * x.rs + p0;
            let src: [&[f32]; R] = core::array::from_fn(|i| &x.data[base + i * x.rs..][..kc]);
            #[cfg(target_arch = "x86_64")]
            if (4..=8).contains(&R) && super::isa::has_avx2_f16c() {
                // SAFETY: the CPU has AVX2 and F16C (checked); `src` holds `R <= 8` rows of `kc` values
                // and `out` R * kc (the panel).
                unsafe { transpose_panel::<R, _>(&F32Rows(&src[..]), kc, out) };
                continue;
            }
            for (p, o) in out.chunks_exact_mut(R).enumerate() {
                for (d, s) in o.iter_mut().zip(&src) {
                    *d = s[p];
                }
            }
        } else {
            if rows < R {
                out.fill(0.0);
            }
            for i in 0..rows {
                let base = (i0 + start + i) * x.rs + p0 * x.cs;
                for (p, o) in out.chunks_exact_mut(R).enumerate() {
                    o[i] = x.data[base + p * x.cs];
                }
            }
        }
    }
}

/// A read-only row-major matrix of 16-bit floats, `f16` (or `bf16` when `bf`): element `(i, j)`
/// is the two bytes at `2 (i * cols + j)` of `data`. The GEMM packs it into f32 micro-panels
/// directly (`pack_half`), with no f32 copy of the rows.
#[derive(Debug, Clone, Copy)]
pub struct HalfRef<'a> {
    data: &'a [u8],
    rows: usize,
    cols: usize,
    bf: bool,
}

impl<'a> HalfRef<'a> {
    /// `rows x cols` values of `data` (at least `2 rows cols` bytes).
    pub fn new(data: &'a [u8], rows: usize, cols: usize, bf: bool) -> Result<Self> {
        let need = rows.checked_mul(cols).and_then(|n| n.checked_mul(2));
        if need.is_none_or(|n| data.len() < n) {
            return Err(Error::bad_shape(
                NAME,
                "operand",
                &[rows, cols],
                format!(
                    "needs {rows} x {cols} 16-bit values, has {} bytes",
                    data.len()
                ),
            ));
        }
        Ok(HalfRef {
            data,
            rows,
            cols,
            bf,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row `i`'s `2 cols` bytes.
    fn row(&self, i: usize) -> &'a [u8] {
        &self.data[2 * i * self.cols..2 * (i + 1) * self.cols]
    }
}

/// Value `p` of a row of 16-bit floats (`bf16` when `bf`, else `f16`) as the vector widening
/// gives it: f16 as the reference decodes it, bf16 by the exact 16-bit shift (a signaling NaN
/// keeps its payload, where the reference's decoder quiets it).
fn half_value(row: &[u8], p: usize, bf: bool) -> f32 {
    if bf {
        f32::from_bits(u32::from(u16::from_le_bytes([row[2 * p], row[2 * p + 1]])) << 16)
    } else {
        crate::quant::decode::f16_at(row, 2 * p)
    }
}

/// [`pack`] for a 16-bit matrix: `dst[panel * R * kc + p * R + i] = x(i0 + panel * R + i, p0 +
/// p)` as f32 (exact), zero past `len`. With AVX2 and F16C, eight columns of up to eight rows
/// are widened (`vcvtph2ps`, or a shift for bf16, as the f16 kernels widen) and transposed in
/// registers: one pass over the 16-bit rows instead of widening them into an f32 copy and
/// packing that.
pub(super) fn pack_half<const R: usize>(
    dst: &mut [f32],
    x: HalfRef,
    i0: usize,
    len: usize,
    p0: usize,
    kc: usize,
) {
    for (panel, start) in (0..len).step_by(R).enumerate() {
        let rows = R.min(len - start);
        let out = &mut dst[panel * R * kc..(panel + 1) * R * kc];
        let src: [&[u8]; R] = core::array::from_fn(|i| {
            if i < rows {
                &x.row(i0 + start + i)[2 * p0..2 * (p0 + kc)]
            } else {
                &[]
            }
        });
        #[cfg(target_arch = "x86_64")]
        if (4..=8).contains(&R) && super::isa::has_avx2_f16c() {
            // SAFETY: the CPU has AVX2 and F16C (checked); `src` holds `rows <= R <= 8` rows of
            // `kc` values (the rest empty: read as zeros) and `out` R * kc (the panel).
            unsafe {
                if x.bf {
                    transpose_panel::<R, _>(&HalfRows::<true>(&src[..rows]), kc, out)
                } else {
                    transpose_panel::<R, _>(&HalfRows::<false>(&src[..rows]), kc, out)
                }
            };
            continue;
        }
        for (p, o) in out.chunks_exact_mut(R).enumerate() {
            for (i, d) in o.iter_mut().enumerate() {
                *d = if i < rows {
                    half_value(src[i], p, x.bf)
                } else {
                    0.0
                };
            }
        }
    }
}

/// Rows of a panel that [`transpose_panel`] reads eight values at a time: row `i` for `i <
/// count()`, zeros past them.
#[cfg(target_arch = "x86_64")]
trait PanelRows {
    fn count(&self) -> usize;
    /// Eight values of row `i` from column `p`.
    ///
    /// # Safety
    /// The CPU has what the type needs (AVX2, and F16C for 16-bit rows); `i < count()` and
    /// the row holds `p + 8` values.
    unsafe fn load8(&self, i: usize, p: usize) -> core::arch::x86_64::__m256;
    /// The value at `(i, p)`, `i < count()`.
    fn get(&self, i: usize, p: usize) -> f32;
}

/// f32 rows.
#[cfg(target_arch = "x86_64")]
struct F32Rows<'s, 'a>(&'s [&'a [f32]]);

#[cfg(target_arch = "x86_64")]
impl PanelRows for F32Rows<'_, '_> {
    fn count(&self) -> usize {
        self.0.len()
    }
    #[inline(always)]
    unsafe fn load8(&self, i: usize, p: usize) -> core::arch::x86_64::__m256 {
        // SAFETY: by the contract, 8 values from `p` lie in row `i`.
        unsafe { core::arch::x86_64::_mm256_loadu_ps(self.0[i].as_ptr().add(p)) }
    }
    fn get(&self, i: usize, p: usize) -> f32 {
        self.0[i][p]
    }
}

/// 16-bit rows (`bf16` when `BF`, else `f16`), two bytes a value.
#[cfg(target_arch = "x86_64")]
struct HalfRows<'s, 'a, const BF: bool>(&'s [&'a [u8]]);

#[cfg(target_arch = "x86_64")]
impl<const BF: bool> PanelRows for HalfRows<'_, '_, BF> {
    fn count(&self) -> usize {
        self.0.len()
    }
    #[inline(always)]
    unsafe fn load8(&self, i: usize, p: usize) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        // SAFETY: by the contract, 8 values (16 bytes) from `p` lie in row `i`, and the CPU has
        // AVX2 and F16C.
        unsafe {
            let h = _mm_loadu_si128(self.0[i].as_ptr().add(2 * p).cast());
            if BF {
                _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
            } else {
                _mm256_cvtph_ps(h)
            }
        }
    }
    fn get(&self, i: usize, p: usize) -> f32 {
        half_value(self.0[i], p, BF)
    }
}

/// The f16 at `b[at..at + 2]` as f32 by F16C's `vcvtph2ps`: exact, the bits of
/// `quant::decode::f16_at`, in one instruction where the software conversion takes several and
/// a branch on subnormals, which `Q6_K`'s super-block scales can all be (every one of them is in
/// the random 1.5B Q4_K_M file of kernels-core/README.md). The x86 kernels that read a scale per
/// super-block convert it here.
///
/// # Safety
/// The CPU has F16C.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn f16c_at(b: &[u8], at: usize) -> f32 {
    use core::arch::x86_64::*;
    let h = u16::from_le_bytes([b[at], b[at + 1]]);
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h)))) }
}

/// The 8 x 8 transpose of 32-bit lanes: lane `j` of result `g` is lane `g` of `v[j]`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn transpose8(
    v: [core::arch::x86_64::__m256i; 8],
) -> [core::arch::x86_64::__m256i; 8] {
    use core::arch::x86_64::*;
    unsafe {
        let t0 = _mm256_unpacklo_epi32(v[0], v[1]);
        let t1 = _mm256_unpackhi_epi32(v[0], v[1]);
        let t2 = _mm256_unpacklo_epi32(v[2], v[3]);
        let t3 = _mm256_unpackhi_epi32(v[2], v[3]);
        let t4 = _mm256_unpacklo_epi32(v[4], v[5]);
        let t5 = _mm256_unpackhi_epi32(v[4], v[5]);
        let t6 = _mm256_unpacklo_epi32(v[6], v[7]);
        let t7 = _mm256_unpackhi_epi32(v[6], v[7]);
        let u0 = _mm256_unpacklo_epi64(t0, t2);
        let u1 = _mm256_unpackhi_epi64(t0, t2);
        let u2 = _mm256_unpacklo_epi64(t1, t3);
        let u3 = _mm256_unpackhi_epi64(t1, t3);
        let u4 = _mm256_unpacklo_epi64(t4, t6);
        let u5 = _mm256_unpackhi_epi64(t4, t6);
        let u6 = _mm256_unpacklo_epi64(t5, t7);
        let u7 = _mm256_unpackhi_epi64(t5, t7);
        [
            _mm256_permute2x128_si256(u0, u4, 0x20),
            _mm256_permute2x128_si256(u1, u5, 0x20),
            _mm256_permute2x128_si256(u2, u6, 0x20),
            _mm256_permute2x128_si256(u3, u7, 0x20),
            _mm256_permute2x128_si256(u0, u4, 0x31),
            _mm256_permute2x128_si256(u1, u5, 0x31),
            _mm256_permute2x128_si256(u2, u6, 0x31),
            _mm256_permute2x128_si256(u3, u7, 0x31),
        ]
    }
}

/// `out[R p + i] = src(i, p)` for the `src.count() <= R` rows (`4 <= R <= 8`) of `kc` values (zeros for
/// `i >= src.count()`): 8 x 8 blocks transposed in registers ([`transpose8`]: the same values
/// moved, so the same bits as the scalar loop), the rest one by one.
///
/// # Safety
/// The CPU has AVX2 and what `src`'s loads need (F16C for 16-bit rows); every row of `src` holds
/// `kc` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn transpose_panel<const R: usize, S: PanelRows>(src: &S, kc: usize, out: &mut [f32]) {
    use core::arch::x86_64::*;
    let rows = src.count();
    if !(4..=8).contains(&R) || rows > R || out.len() < R * kc {
        return;
    }
    let mut p = 0;
    while p + 8 <= kc {
        // SAFETY: rows hold `kc` values and `out` `R kc` (checked above); `p + 8 <= kc`. Each
        // column but the last is stored as 8 lanes, the `8 - R` past it overwritten by the next
        // column's store; the last column stores its `R` lanes alone.
        unsafe {
            let v: [__m256i; 8] = core::array::from_fn(|i| {
                if i < rows {
                    _mm256_castps_si256(src.load8(i, p))
                } else {
                    _mm256_setzero_si256()
                }
            });
            let cols = transpose8(v);
            let o = out.as_mut_ptr().add(R * p);
            for (j, c) in cols.iter().enumerate().take(7) {
                _mm256_storeu_si256(o.add(R * j).cast(), *c);
            }
            let mut last = [0.0f32; 8];
            _mm256_storeu_si256(last.as_mut_ptr().cast(), cols[7]);
            core::ptr::copy_nonoverlapping(last.as_ptr(), o.add(R * 7), R);
        }
        p += 8;
    }
    for p in p..kc {
        for i in 0..R {
            out[R * p + i] = if i < rows { src.get(i, p) } else { 0.0 };
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;
    use alloc::vec::Vec;

    use super::*;

    /// Asserts that `got` holds `len` rows in panels of `R` (`kc` columns each, zeros past
    /// `len`), row `r`'s column `p` being `want(r, p)`, bit for bit.
    fn assert_panels<const R: usize>(
        got: &[f32],
        len: usize,
        kc: usize,
        want: impl Fn(usize, usize) -> f32,
        case: &str,
    ) {
        for r in 0..len.div_ceil(R) * R {
            for p in 0..kc {
                let w = if r < len { want(r, p) } else { 0.0 };
                let at = (r / R) * R * kc + R * p + r % R;
                assert_eq!(got[at].to_bits(), w.to_bits(), "R {R}, {case}: ({r}, {p})");
            }
        }
    }

    /// `pack::<R>` against its definition.
    fn check_pack<const R: usize>() {
        // The register transpose (x86) against the definition, with tails of `kc`, a partial
        // last panel and an offset start column.
        for (rows, k, kc, p0) in [(8, 8, 8, 0), (16, 29, 21, 5), (13, 40, 40, 0), (8, 3, 3, 0)] {
            let rows = rows.max(R);
            let data: Vec<f32> = (0..rows * k).map(|v| v as f32 * 0.5 - 3.0).collect();
            let x = MatRef::new(&data, rows, k, false).unwrap();
            let panels = rows.div_ceil(R);
            let mut got = vec![f32::NAN; panels * R * kc];
            pack::<R>(&mut got, x, 0, rows, p0, kc);
            let case = format!("{rows}x{k} kc {kc}");
            assert_panels::<R>(&got, rows, kc, |r, p| data[r * k + p0 + p], &case);
        }
    }

    #[test]
    fn packed_panels_hold_the_rows_side_by_side() {
        // Every kernel's `MR` and `NR` up to 16 (4, 6 and 8 go through the register transpose
        // on x86).
        check_pack::<4>();
        check_pack::<6>();
        check_pack::<8>();
        check_pack::<16>();
    }

    /// `pack_half::<R>` against the reference decoder's values packed by their definition,
    /// for f16 and bf16 bits of every kind (seeded random bits, with NaN, inf, subnormals and
    /// signed zeros planted).
    fn check_pack_half<const R: usize>() {
        let special: [u16; 8] = [
            0x7c00, 0xfc00, 0x7e01, 0x7c01, 0x0001, 0x8000, 0x03ff, 0xff80,
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for bf in [false, true] {
            for (rows, k, kc, p0, i0) in [
                (R, 8, 8, 0, 0),
                (2 * R + 3, 37, 29, 5, 1),
                (R - 1, 16, 16, 0, 0),
                (3 * R, 64, 40, 17, R),
            ] {
                let bits: Vec<u16> = (0..rows * k)
                    .map(|i| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        if i % 11 == 3 {
                            special[(state % 8) as usize]
                        } else {
                            (state >> 20) as u16
                        }
                    })
                    .collect();
                let bytes: Vec<u8> = bits.iter().flat_map(|h| h.to_le_bytes()).collect();
                let x = HalfRef::new(&bytes, rows, k, bf).unwrap();
                let len = rows - i0;
                let panels = len.div_ceil(R);
                let mut got = vec![f32::NAN; panels * R * kc];
                pack_half::<R>(&mut got, x, i0, len, p0, kc);
                let want = |r: usize, p: usize| {
                    let h = bits[(i0 + r) * k + p0 + p];
                    if bf {
                        f32::from_bits((h as u32) << 16)
                    } else {
                        crate::quant::decode::f16_to_f32(h)
                    }
                };
                let case = format!("bf16 {bf}, {rows}x{k} from row {i0} kc {kc} p0 {p0}");
                assert_panels::<R>(&got, len, kc, want, &case);
            }
        }
    }

    #[test]
    fn half_panels_widen_exactly_as_the_reference_decodes() {
        check_pack_half::<4>();
        check_pack_half::<6>();
        check_pack_half::<8>();
        check_pack_half::<16>();
    }
}
