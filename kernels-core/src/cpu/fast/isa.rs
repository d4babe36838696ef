//! Which vector instruction set the vector (non-GEMM) fast paths use.
//!
//! With `std` the CPU is probed once at run time (`is_x86_feature_detected!`); without it the
//! choice follows the compile-time target features. `KERNELS_CPU_KERNEL=portable|avx2|avx512`,
//! read once by [`super::config::forced_kernel`] (the GEMM's setting too), caps the choice, so
//! every variant can be measured on one machine; a family the CPU cannot run falls back to the
//! best one below it.

use super::config::{Forced, forced_kernel};

/// A vector instruction set, in increasing order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Plain Rust written for the auto-vectorizer: every target.
    Portable,
    /// wasm `simd128` (compile-time: `-C target-feature=+simd128`).
    Simd128,
    /// x86_64 AVX2 + FMA, 8 lanes.
    Avx2,
    /// x86_64 AVX-512F, 16 lanes.
    Avx512,
}

impl Isa {
    /// Short name for logs and benchmarks (`KERNELS_CPU_KERNEL` accepts all but `simd128`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Simd128 => "simd128",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Whether this machine can run the variant (probed at run time with `std`).
    pub fn supported(self) -> bool {
        match self {
            Isa::Portable => true,
            Isa::Simd128 => cfg!(all(target_arch = "wasm32", target_feature = "simd128")),
            Isa::Avx2 => has_avx2_fma(),
            Isa::Avx512 => has_avx512f(),
        }
    }

    /// Every variant this machine can run, best last (tests run each).
    pub fn available() -> impl Iterator<Item = Isa> {
        [Isa::Portable, Isa::Simd128, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|i| i.supported())
    }

    /// The best supported variant not above `cap`.
    pub fn best_up_to(cap: Isa) -> Isa {
        Isa::available()
            .filter(|&i| i <= cap)
            .last()
            .unwrap_or(Isa::Portable)
    }

    /// The variant the fast paths use: the best one supported, capped by `KERNELS_CPU_KERNEL`
    /// (detected once with `std`).
    pub fn selected() -> Isa {
        #[cfg(feature = "std")]
        {
            static SELECTED: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
            *SELECTED.get_or_init(|| Isa::best_up_to(Isa::cap(forced_kernel())))
        }
        #[cfg(not(feature = "std"))]
        Isa::best_up_to(Isa::cap(forced_kernel()))
    }

    /// The cap a forced kernel family sets (none: no cap).
    fn cap(forced: Option<Forced>) -> Isa {
        match forced {
            Some(Forced::Portable) => Isa::Portable,
            Some(Forced::Avx2) => Isa::Avx2,
            Some(Forced::Avx512) | None => Isa::Avx512,
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) fn has_avx2_fma() -> bool {
    #[cfg(feature = "std")]
    return std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
    #[cfg(not(feature = "std"))]
    return cfg!(all(target_feature = "avx2", target_feature = "fma"));
}

/// AVX2 with F16C (the 16-bit widening packer's needs).
#[cfg(target_arch = "x86_64")]
pub(super) fn has_avx2_f16c() -> bool {
    #[cfg(feature = "std")]
    return std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c");
    #[cfg(not(feature = "std"))]
    return cfg!(all(target_feature = "avx2", target_feature = "f16c"));
}

#[cfg(target_arch = "x86_64")]
fn has_avx512f() -> bool {
    #[cfg(feature = "std")]
    return std::is_x86_feature_detected!("avx512f");
    #[cfg(not(feature = "std"))]
    return cfg!(target_feature = "avx512f");
}

/// Whether the CPU is Intel's (CPUID leaf 0's vendor string, probed once with `std`): for the
/// few choices measured to go opposite ways on Intel's and AMD's cores (`half_dot`'s
/// [`DOT_ROWS_AVX512_INTEL`](super::half_dot::DOT_ROWS_AVX512_INTEL)).
#[cfg(target_arch = "x86_64")]
pub(super) fn is_intel() -> bool {
    fn probe() -> bool {
        // SAFETY: every x86_64 CPU has CPUID leaf 0.
        #[allow(unused_unsafe)]
        let r = unsafe { core::arch::x86_64::__cpuid(0) };
        // "Genu" "ineI" "ntel"
        (r.ebx, r.edx, r.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e)
    }
    #[cfg(feature = "std")]
    {
        static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *INTEL.get_or_init(probe)
    }
    #[cfg(not(feature = "std"))]
    probe()
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx2_fma() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn has_avx512f() -> bool {
    false
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn caps_fall_back_to_a_supported_variant() {
        assert_eq!(Isa::best_up_to(Isa::Portable), Isa::Portable);
        assert!(Isa::best_up_to(Isa::Avx512).supported());
        assert!(Isa::selected().supported());
        assert!(Isa::available().any(|i| i == Isa::Portable));
        assert_eq!(Isa::cap(Some(Forced::Avx2)), Isa::Avx2);
        assert_eq!(Isa::cap(Some(Forced::Portable)), Isa::Portable);
        assert_eq!(Isa::cap(None), Isa::Avx512);
        assert!(Isa::best_up_to(Isa::cap(Some(Forced::Avx2))) <= Isa::Avx2);
    }
}
