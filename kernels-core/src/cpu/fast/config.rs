//! Run-time choices of the fast matrix products, read once from the environment with `std`:
//!
//! - `KERNELS_CPU_KERNEL=avx512|avx2|portable` forces a micro-kernel family (GEMM and the
//!   small-`m` products alike), so each can be measured on one machine. A family this CPU cannot
//!   run, or an unknown name, is ignored: the best supported kernel runs instead.
//! - `KERNELS_THREADS=N` (with the `threads` feature) sets how many threads a large product may
//!   use; `1` turns threading off. Unset, zero or unparsable: the machine's
//!   `available_parallelism`.
//!
//! - `KERNELS_EXACT_ACTIVATIONS=1` keeps f32 activations in products with a block-quantized
//!   weight (the dequantize-then-f32 reference's numbers) instead of quantizing them to 8 bits
//!   for integer dot products ([`super::qdot`]); `0` or unset: 8-bit activations.
//!
//! Without `std` there is no environment: the best kernel, one thread.

/// A kernel family named by `KERNELS_CPU_KERNEL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forced {
    Avx512,
    Avx2,
    Portable,
}

impl Forced {
    /// The family a `KERNELS_CPU_KERNEL` value names (case-insensitive), if any.
    pub fn parse(s: &str) -> Option<Forced> {
        let s = s.trim();
        [
            ("avx512", Forced::Avx512),
            ("avx2", Forced::Avx2),
            ("portable", Forced::Portable),
        ]
        .into_iter()
        .find(|(name, _)| s.eq_ignore_ascii_case(name))
        .map(|(_, f)| f)
    }
}

/// The kernel family forced by `KERNELS_CPU_KERNEL`, read once.
#[cfg(feature = "std")]
pub fn forced_kernel() -> Option<Forced> {
    static FORCED: std::sync::OnceLock<Option<Forced>> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| {
        std::env::var("KERNELS_CPU_KERNEL")
            .ok()
            .and_then(|v| Forced::parse(&v))
    })
}

#[cfg(not(feature = "std"))]
pub fn forced_kernel() -> Option<Forced> {
    None
}

/// Whether `KERNELS_EXACT_ACTIVATIONS` asks for f32 activations with quantized weights (read
/// once; `1`, `true`, `yes` or `on`).
#[cfg(feature = "std")]
pub fn exact_activations() -> bool {
    static EXACT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *EXACT.get_or_init(|| parse_flag(std::env::var("KERNELS_EXACT_ACTIVATIONS").ok().as_deref()))
}

#[cfg(not(feature = "std"))]
pub fn exact_activations() -> bool {
    false
}

/// How products with a block-quantized weight quantize their activations:
/// `KERNELS_ACTIVATION_PRECISION=single` (8 bits once, llama.cpp's trade) or `residual` (the
/// default: 8 bits, then the rounding error to 8 bits again), read once.
#[cfg(feature = "std")]
pub fn activation_precision() -> super::qdot::Precision {
    static P: std::sync::OnceLock<super::qdot::Precision> = std::sync::OnceLock::new();
    *P.get_or_init(|| {
        let v = std::env::var("KERNELS_ACTIVATION_PRECISION").ok();
        if v.is_some_and(|v| v.trim().eq_ignore_ascii_case("single")) {
            super::qdot::Precision::Single
        } else {
            super::qdot::Precision::Residual
        }
    })
}

#[cfg(not(feature = "std"))]
pub fn activation_precision() -> super::qdot::Precision {
    super::qdot::Precision::Residual
}

/// A boolean environment value: `1`, `true`, `yes`, `on` (any case) are true.
pub fn parse_flag(v: Option<&str>) -> bool {
    v.is_some_and(|v| {
        ["1", "true", "yes", "on"]
            .iter()
            .any(|t| v.trim().eq_ignore_ascii_case(t))
    })
}

/// Threads a large product may use: `KERNELS_THREADS`, else the machine's parallelism (read
/// once). Always 1 without the `threads` feature.
#[cfg(all(feature = "threads", not(target_arch = "wasm32")))]
pub fn threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        let env = std::env::var("KERNELS_THREADS").ok();
        parse_threads(env.as_deref()).unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(1)
        })
    })
}

#[cfg(not(feature = "threads"))]
pub fn threads() -> usize {
    1
}

/// In a browser: the page's web workers and its main thread ([`super::pool::web_threads`]).
#[cfg(all(feature = "threads", target_arch = "wasm32"))]
pub fn threads() -> usize {
    super::pool::web_threads()
}

/// A `KERNELS_THREADS` value: a positive count, else `None` (use the default). Capped at 256.
pub fn parse_threads(v: Option<&str>) -> Option<usize> {
    let n: usize = v?.trim().parse().ok()?;
    (n > 0).then_some(n.min(256))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_counts() {
        assert_eq!(Forced::parse("AVX512"), Some(Forced::Avx512));
        assert_eq!(Forced::parse(" avx2 "), Some(Forced::Avx2));
        assert_eq!(Forced::parse("portable"), Some(Forced::Portable));
        assert_eq!(Forced::parse("sse"), None);
        assert_eq!(parse_threads(Some("2")), Some(2));
        assert_eq!(parse_threads(Some("1")), Some(1));
        assert_eq!(parse_threads(Some("0")), None);
        assert_eq!(parse_threads(Some("x")), None);
        assert_eq!(parse_threads(None), None);
        assert_eq!(parse_threads(Some("100000")), Some(256));
        assert!(parse_flag(Some("1")) && parse_flag(Some(" TRUE ")));
        assert!(!parse_flag(Some("0")) && !parse_flag(None) && !parse_flag(Some("")));
    }
}
