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
