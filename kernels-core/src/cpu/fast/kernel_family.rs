//! Which micro-kernel family the fast products run ([`Kernel`], chosen at run time) and what
//! happens to each output after a product ([`Epilogue`]): shared by the blocked GEMM
//! ([`super::gemm`]) and the small-`m` products (`skinny`).

use alloc::vec::Vec;

use super::config::{self, Forced};
use super::kernels::Portable;
use crate::cpu::linear;
use crate::op::Activation;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use super::kernels::Simd128;
#[cfg(target_arch = "x86_64")]
use super::kernels::{Avx2Fma, Avx512};

/// Which micro-kernel family runs (the blocked GEMM's micro-kernel and the small-product
/// kernels of the same instruction set). Each SIMD variant holds its kernel value, which can only
/// be made where the CPU supports it, so `Kernel` is always safe to run.
#[derive(Debug, Clone, Copy)]
pub enum Kernel {
    /// Auto-vectorized plain Rust: every target.
    Portable(Portable),
    /// AVX2 + FMA intrinsics, 6 x 16 tile.
    #[cfg(target_arch = "x86_64")]
    Avx2Fma(Avx2Fma),
    /// AVX-512F intrinsics, 8 x 32 tile.
    #[cfg(target_arch = "x86_64")]
    Avx512(Avx512),
    /// wasm `simd128` intrinsics, 4 x 8 tile.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    Simd128(Simd128),
}

impl Kernel {
    /// The kernel to use: the one `KERNELS_CPU_KERNEL` forces if this CPU can run it (see
    /// [`config`]), else [`Kernel::fastest`].
    pub fn best() -> Kernel {
        config::forced_kernel()
            .and_then(Kernel::of)
            .unwrap_or_else(Kernel::fastest)
    }

    /// The fastest kernel this machine supports.
    pub fn fastest() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = Avx512::detect() {
            return Kernel::Avx512(k);
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = Avx2Fma::detect() {
            return Kernel::Avx2Fma(k);
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        return Kernel::Simd128(Simd128);
        #[allow(unreachable_code)]
        Kernel::Portable(Portable)
    }

    /// The kernel of a family, if this CPU can run it.
    pub fn of(family: Forced) -> Option<Kernel> {
        match family {
            Forced::Portable => Some(Kernel::Portable(Portable)),
            #[cfg(target_arch = "x86_64")]
            Forced::Avx2 => Avx2Fma::detect().map(Kernel::Avx2Fma),
            #[cfg(target_arch = "x86_64")]
            Forced::Avx512 => Avx512::detect().map(Kernel::Avx512),
            #[cfg(not(target_arch = "x86_64"))]
            Forced::Avx2 | Forced::Avx512 => None,
        }
    }

    /// Every kernel this machine can run, portable first.
    pub fn available() -> Vec<Kernel> {
        #[allow(unused_mut)]
        let mut v = alloc::vec![Kernel::Portable(Portable)];
        #[cfg(target_arch = "x86_64")]
        v.extend(Avx2Fma::detect().map(Kernel::Avx2Fma));
        #[cfg(target_arch = "x86_64")]
        v.extend(Avx512::detect().map(Kernel::Avx512));
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        v.push(Kernel::Simd128(Simd128));
        v
    }

    /// Short name for logs and benchmarks.
    pub fn name(&self) -> &'static str {
        match self {
            Kernel::Portable(_) => "portable",
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2Fma(_) => "avx2-fma",
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512(_) => "avx512",
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Kernel::Simd128(_) => "simd128",
        }
    }
}

/// What happens to each output after the product: `c = act(c + bias[j])` for column `j`
/// (`linear`'s epilogue). [`Epilogue::NONE`] leaves the sum as it is.
#[derive(Debug, Clone, Copy)]
pub struct Epilogue<'a> {
    pub bias: Option<&'a [f32]>,
    pub act: Activation,
}

impl Epilogue<'_> {
    pub const NONE: Epilogue<'static> = Epilogue {
        bias: None,
        act: Activation::None,
    };

    pub(super) fn is_none(&self) -> bool {
        self.bias.is_none() && self.act == Activation::None
    }

    /// The epilogue of the output `v` in column `col`.
    #[inline]
    pub(super) fn apply(&self, v: f32, col: usize) -> f32 {
        let v = match self.bias {
            Some(b) => v + b.get(col).copied().unwrap_or(0.0),
            None => v,
        };
        linear::act(self.act, v)
    }

    /// `c[i] = apply(c[i] + t[i], col0 + i)` over a row of contiguous columns, the same bits
    /// as [`Epilogue::apply`] element by element; without an activation the loop is plain adds
    /// (which vectorize), not a `match` per element.
    pub(super) fn apply_row(&self, c: &mut [f32], t: &[f32], col0: usize) {
        let bias = self
            .bias
            .map(|b| col0.checked_add(c.len()).and_then(|end| b.get(col0..end)));
        match (bias, self.act) {
            (None, Activation::None) => {
                for (x, &v) in c.iter_mut().zip(t) {
                    *x += v;
                }
            }
            (Some(Some(b)), Activation::None) => {
                for ((x, &v), &bj) in c.iter_mut().zip(t).zip(b) {
                    *x = (*x + v) + bj;
                }
            }
            _ => {
                for (i, (x, &v)) in c.iter_mut().zip(t).enumerate() {
                    *x = self.apply(*x + v, col0 + i);
                }
            }
        }
    }

    /// `c[i] = apply(c[i] + t[i], col)` over a run of one column's rows, the same bits as
    /// [`Epilogue::apply`] element by element.
    pub(super) fn apply_column(&self, c: &mut [f32], t: &[f32], col: usize) {
        match (self.bias, self.act) {
            (None, Activation::None) => {
                for (x, &v) in c.iter_mut().zip(t) {
                    *x += v;
                }
            }
            (Some(b), Activation::None) => {
                let bj = b.get(col).copied().unwrap_or(0.0);
                for (x, &v) in c.iter_mut().zip(t) {
                    *x = (*x + v) + bj;
                }
            }
            _ => {
                for (x, &v) in c.iter_mut().zip(t) {
                    *x = self.apply(*x + v, col);
                }
            }
        }
    }
}
