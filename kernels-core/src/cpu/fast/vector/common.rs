//! What the vector kernels share: the run-time dispatch onto an instruction set
//! ([`with_simd!`]), the activations with a vector path ([`Act`]), and [`filled`] output
//! buffers (the fast paths' own).

/// Runs `body` with `$s` bound to the token of `isa` (inside a `#[target_feature]` function
/// for the x86 variants), or of the portable path when the CPU lacks `isa`.
macro_rules! with_simd {
    ($isa:expr, $s:ident => $body:expr) => {{
        #[allow(unused_imports)]
        use $crate::cpu::fast::isa::Isa as I;
        #[allow(unused_imports)]
        use $crate::cpu::fast::vector::simd::{self, Simd as _};
        match $isa {
            #[cfg(target_arch = "x86_64")]
            I::Avx512 => match simd::Avx512::new() {
                Some(t) => t.vectorize(|$s| $body),
                None => {
                    let $s = simd::Portable;
                    $body
                }
            },
            #[cfg(target_arch = "x86_64")]
            I::Avx2 => match simd::Avx2::new() {
                Some(t) => t.vectorize(|$s| $body),
                None => {
                    let $s = simd::Portable;
                    $body
                }
            },
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            I::Simd128 => simd::Simd128.vectorize(|$s| $body),
            _ => {
                let $s = simd::Portable;
                $body
            }
        }
    }};
}
pub(crate) use with_simd;

/// The element-wise activations with a vector path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    Exp,
    Sigmoid,
    Silu,
}

pub(crate) use crate::cpu::fast::buffers::{filled, zeroed};
