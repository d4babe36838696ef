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
            if R == 8 && super::isa::has_avx2_fma() {
                // SAFETY: the CPU has AVX2 (checked); `src` holds 8 rows of `kc` values and
                // `out` 8 * kc (the panel).
                unsafe { transpose_panel(&src[..], kc, out) };
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

/// `out[8 p + i] = src[i][p]` for 8 rows of `kc` values: 8 x 8 blocks transposed in registers
/// ([`transpose8`]: the same values moved, so the same bits as the scalar loop), the rest one by
/// one.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose_panel(src: &[&[f32]], kc: usize, out: &mut [f32]) {
    use core::arch::x86_64::*;
    if src.len() < 8 || out.len() < 8 * kc || src.iter().any(|r| r.len() < kc) {
        return;
    }
    let mut p = 0;
    while p + 8 <= kc {
        // SAFETY: rows hold `kc` values and `out` `8 kc` (checked above); `p + 8 <= kc`.
        unsafe {
            let r = core::array::from_fn(|i| _mm256_loadu_si256(src[i].as_ptr().add(p).cast()));
            for (j, c) in transpose8(r).iter().enumerate() {
                _mm256_storeu_si256(out.as_mut_ptr().add(8 * (p + j)).cast(), *c);
            }
        }
        p += 8;
    }
    for p in p..kc {
        for (i, row) in src.iter().enumerate().take(8) {
            out[8 * p + i] = row[p];
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;
    use alloc::vec::Vec;

    use super::*;

    #[test]
    fn packed_panels_of_eight_rows_hold_the_rows_side_by_side() {
        // The 8 x 8 register transpose (x86) against the definition, with tails of `kc`, a
        // partial last panel and an offset start column.
        for (rows, k, kc, p0) in [(8, 8, 8, 0), (16, 29, 21, 5), (13, 40, 40, 0), (8, 3, 3, 0)] {
            let data: Vec<f32> = (0..rows * k).map(|v| v as f32 * 0.5 - 3.0).collect();
            let x = MatRef::new(&data, rows, k, false).unwrap();
            let panels = rows.div_ceil(8);
            let mut got = vec![f32::NAN; panels * 8 * kc];
            pack::<8>(&mut got, x, 0, rows, p0, kc);
            for r in 0..panels * 8 {
                for p in 0..kc {
                    let want = if r < rows { data[r * k + p0 + p] } else { 0.0 };
                    let at = (r / 8) * 8 * kc + 8 * p + r % 8;
                    assert_eq!(
                        got[at].to_bits(),
                        want.to_bits(),
                        "{rows}x{k} kc {kc}: ({r}, {p})"
                    );
                }
            }
        }
    }
}
