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
pub use super::matref::MatRef;
use crate::error::{Error, Result};

#[cfg(target_arch = "x86_64")]
use super::kernels::Avx2Fma;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use super::kernels::Simd128;

const NAME: &str = "matmul";

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
