//! Blocked single-precision GEMM: the GotoBLAS / BLIS loop nest over strided operands.
//!
//! ```text
//! for jc in 0..n step NC          B block  [KC x NC] packed into B~ (lives in L3)
//!   for pc in 0..k step KC
//!     pack B~
//!     for ic in 0..m step MC      A block  [MC x KC] packed into A~ (lives in L2)
//!       pack A~
//!       for jr in 0..NC step NR   B~ micro-panel [KC x NR] (stays in L1)
//!         for ir in 0..MC step MR
//!           micro-kernel: C[MR x NR] += A~ micro-panel . B~ micro-panel (registers)
//! ```
//!
//! Operands are strided views ([`MatRef`]), so a transpose is a swap of strides and is absorbed
//! by the packing: no transposed copy is ever made.

use alloc::format;
use alloc::vec::Vec;

use super::kernels::{MicroKernel, Portable};
use crate::error::{Error, Result};

#[cfg(target_arch = "x86_64")]
use super::kernels::Avx2Fma;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use super::kernels::Simd128;

const NAME: &str = "matmul";

/// A read-only strided matrix: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
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

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }
}

/// Which micro-kernel runs. Each SIMD variant holds its kernel value, which can only be made
/// where the CPU supports it, so `Kernel` is always safe to run.
#[derive(Debug, Clone, Copy)]
pub enum Kernel {
    /// Auto-vectorized plain Rust: every target.
    Portable(Portable),
    /// AVX2 + FMA intrinsics, 6 x 16 tile.
    #[cfg(target_arch = "x86_64")]
    Avx2Fma(Avx2Fma),
    /// wasm `simd128` intrinsics, 4 x 8 tile.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    Simd128(Simd128),
}

impl Kernel {
    /// The fastest kernel this machine supports.
    pub fn best() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = Avx2Fma::detect() {
            return Kernel::Avx2Fma(k);
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        return Kernel::Simd128(Simd128);
        #[allow(unreachable_code)]
        Kernel::Portable(Portable)
    }

    /// Short name for logs and benchmarks.
    pub fn name(&self) -> &'static str {
        match self {
            Kernel::Portable(_) => "portable",
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2Fma(_) => "avx2-fma",
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Kernel::Simd128(_) => "simd128",
        }
    }
}

/// A GEMM runner: a kernel plus its packing buffers, reused across calls (e.g. over a batch).
#[derive(Debug)]
pub struct Gemm {
    kernel: Kernel,
    a_pack: Vec<f32>,
    b_pack: Vec<f32>,
}

impl Gemm {
    pub fn new(kernel: Kernel) -> Self {
        Gemm {
            kernel,
            a_pack: Vec::new(),
            b_pack: Vec::new(),
        }
    }

    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// `C += A . B` for `A [m x k]`, `B [k x n]` and `C [m x n]` stored row-major at row
    /// stride `ldc` in `c`. Accumulating (rather than overwriting) lets a caller sum products
    /// over a batch into one buffer.
    pub fn run(&mut self, a: MatRef, b: MatRef, c: &mut [f32], ldc: usize) -> Result<()> {
        let (m, n) = (a.rows, b.cols);
        if a.cols != b.rows {
            return Err(Error::mismatch(NAME, &[a.rows, a.cols], &[b.rows, b.cols]));
        }
        if m == 0 || n == 0 || a.cols == 0 {
            return Ok(());
        }
        let need = (m - 1).checked_mul(ldc).and_then(|x| x.checked_add(n));
        if ldc < n || need.is_none_or(|need| c.len() < need) {
            return Err(Error::bad_shape(
                NAME,
                "out",
                &[m, n],
                format!("row stride {ldc} over {} values is too small", c.len()),
            ));
        }
        let (ap, bp) = (&mut self.a_pack, &mut self.b_pack);
        match self.kernel {
            Kernel::Portable(k) => drive(k, a, b, c, ldc, ap, bp),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2Fma(k) => drive(k, a, b, c, ldc, ap, bp),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Kernel::Simd128(k) => drive(k, a, b, c, ldc, ap, bp),
        }
    }
}

/// The loop nest of the module docs. Shapes are checked by [`Gemm::run`].
fn drive<K: MicroKernel>(
    kernel: K,
    a: MatRef,
    b: MatRef,
    c: &mut [f32],
    ldc: usize,
    a_buf: &mut Vec<f32>,
    b_buf: &mut Vec<f32>,
) -> Result<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let (mr, nr) = (K::MR, K::NR);
    let kc_max = K::KC.min(k);
    let a_pack = aligned(a_buf, K::MC.min(m.div_ceil(mr) * mr) * kc_max)?;
    let b_pack = aligned(b_buf, K::NC.min(n.div_ceil(nr) * nr) * kc_max)?;
    // B^T's rows are B's columns: packing B~ is packing B^T into row panels of NR.
    let bt = b.t();
    for jc in (0..n).step_by(K::NC) {
        let nc = K::NC.min(n - jc);
        for pc in (0..k).step_by(K::KC) {
            let kc = K::KC.min(k - pc);
            K::pack_b(b_pack, bt, jc, nc, pc, kc);
            for ic in (0..m).step_by(K::MC) {
                let mc = K::MC.min(m - ic);
                K::pack_a(a_pack, a, ic, mc, pc, kc);
                for (jp, jr) in (0..nc).step_by(nr).enumerate() {
                    let b_panel = &b_pack[jp * nr * kc..(jp + 1) * nr * kc];
                    let nr_here = nr.min(nc - jr);
                    for (ip, ir) in (0..mc).step_by(mr).enumerate() {
                        let a_panel = &a_pack[ip * mr * kc..(ip + 1) * mr * kc];
                        let off = (ic + ir) * ldc + jc + jr;
                        let c_tile = c.get_mut(off..).unwrap_or_default();
                        kernel.tile(a_panel, b_panel, c_tile, ldc, mr.min(mc - ir), nr_here);
                    }
                }
            }
        }
    }
    Ok(())
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

/// A `len`-value slice of `buf` starting on a 64-byte boundary, so `B~` rows never straddle a
/// cache line. Grows `buf` as needed; an allocation failure is an error, not an abort.
fn aligned(buf: &mut Vec<f32>, len: usize) -> Result<&mut [f32]> {
    const SLACK: usize = 64 / core::mem::size_of::<f32>();
    let need = len.saturating_add(SLACK);
    if buf.len() < need {
        buf.try_reserve_exact(need - buf.len())
            .map_err(|_| Error::OutOfMemory {
                what: "matmul packing buffer".into(),
                bytes: (need as u64).saturating_mul(4),
            })?;
        buf.resize(need, 0.0);
    }
    let off = buf.as_ptr().align_offset(64).min(SLACK);
    Ok(&mut buf[off..off + len])
}

#[cfg(test)]
mod tests;
