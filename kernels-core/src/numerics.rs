//! The float abstraction the reference kernels are written against, and the error-budget check.
//!
//! Kernels are generic over [`Real`] (implemented for `f32` and `f64`) so the reference runs in
//! f32, and the finite-difference gradient checks run the very same code in f64.

use core::fmt::Debug;
use core::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

/// A real floating-point type with the math the kernels need (through `libm`).
pub trait Real:
    Copy
    + Debug
    + PartialOrd
    + Default
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    const INFINITY: Self;
    const NEG_INFINITY: Self;
    /// Converts from f64 (rounding for f32).
    fn from_f64(x: f64) -> Self;
    /// Converts from f32 (exact).
    fn from_f32(x: f32) -> Self;
    /// Widens to f64 (exact).
    fn to_f64(self) -> f64;
    /// Narrows to f32 (rounding for f64).
    fn to_f32(self) -> f32;
    fn from_usize(x: usize) -> Self {
        Self::from_f64(x as f64)
    }
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn erf(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn powf(self, e: Self) -> Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
    fn is_finite(self) -> bool;
    /// `s` itself where `Self` is `f32` (a kernel that works in f32 then reads it without a
    /// converted copy); `None` otherwise.
    fn as_f32_slice(s: &[Self]) -> Option<&[f32]>;
    /// The larger of two values; NaN if either is NaN (propagates, like `torch.max`).
    fn max_nan(self, other: Self) -> Self {
        if self.is_nan() || other.is_nan() {
            Self::from_f64(f64::NAN)
        } else if other > self {
            other
        } else {
            self
        }
    }
}

macro_rules! impl_real {
    ($t:ty, $exp:path, $ln:path, $sqrt:path, $tanh:path, $erf:path, $sin:path, $cos:path, $pow:path, $abs:path, $f32s:path) => {
        impl Real for $t {
            #[inline]
            fn as_f32_slice(s: &[Self]) -> Option<&[f32]> {
                $f32s(s)
            }
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const INFINITY: Self = <$t>::INFINITY;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            #[inline]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline]
            fn from_f32(x: f32) -> Self {
                x as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline]
            fn exp(self) -> Self {
                $exp(self)
            }
            #[inline]
            fn ln(self) -> Self {
                $ln(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                $sqrt(self)
            }
            #[inline]
            fn tanh(self) -> Self {
                $tanh(self)
            }
            #[inline]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline]
            fn sin(self) -> Self {
                $sin(self)
            }
            #[inline]
            fn cos(self) -> Self {
                $cos(self)
            }
            #[inline]
            fn powf(self, e: Self) -> Self {
                $pow(self, e)
            }
            #[inline]
            fn abs(self) -> Self {
                $abs(self)
            }
            #[inline]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline]
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
        }
    };
}

impl_real!(
    f32,
    libm::expf,
    libm::logf,
    libm::sqrtf,
    libm::tanhf,
    libm::erff,
    libm::sinf,
    libm::cosf,
    libm::powf,
    libm::fabsf,
    Some
);
impl_real!(
    f64,
    libm::exp,
    libm::log,
    libm::sqrt,
    libm::tanh,
    libm::erf,
    libm::sin,
    libm::cos,
    libm::pow,
    libm::fabs,
    not_f32
);

fn not_f32(_: &[f64]) -> Option<&[f32]> {
    None
}

/// A published error budget: `|got - ref| <= atol + rtol * |ref|`.
///
/// For reductions (matmul, softmax, norms, attention...) rounding error grows with the reduced
/// length `K`; such budgets scale both tolerances by `sqrt(max(K, 1))` (about 1e-4 at K = 4096 for
/// matmul). `Budget::EXACT` demands bit equality (data movement, relu, max, argmax).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub atol: f64,
    pub rtol: f64,
    /// Scale `atol` and `rtol` by `sqrt(K)` for the reduced length `K`.
    pub grows_with_k: bool,
}

impl Budget {
    /// Bitwise equal (NaN and Inf positions must match too).
    pub const EXACT: Budget = Budget {
        atol: 0.0,
        rtol: 0.0,
        grows_with_k: false,
    };
    /// A fixed budget.
    pub const fn fixed(atol: f64, rtol: f64) -> Budget {
        Budget {
            atol,
            rtol,
            grows_with_k: false,
        }
    }
    /// A budget that grows with `sqrt(K)`.
    pub const fn per_k(atol: f64, rtol: f64) -> Budget {
        Budget {
            atol,
            rtol,
            grows_with_k: true,
        }
    }
    /// The `(atol, rtol)` that apply at reduced length `k`.
    pub fn at(&self, k: usize) -> (f64, f64) {
        if self.grows_with_k {
            let s = libm::sqrt(k.max(1) as f64);
            (self.atol * s, self.rtol * s)
        } else {
            (self.atol, self.rtol)
        }
    }
    /// True for [`Budget::EXACT`].
    pub fn is_exact(&self) -> bool {
        self.atol == 0.0 && self.rtol == 0.0
    }
}

/// Result of comparing a computed tensor against its reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Largest `|got - ref|` over finite pairs.
    pub max_abs_err: f64,
    /// Largest `|got - ref| / |ref|` over finite pairs with `ref != 0`.
    pub max_rel_err: f64,
    /// Flat index of the worst violation (or of the largest error if none), if any elements.
    pub worst_index: Option<usize>,
    /// Number of elements outside the budget (including NaN/Inf position mismatches).
    pub violations: usize,
    /// Whether every element is within budget and NaN/Inf positions match.
    pub pass: bool,
}

/// Compares `got` against `reference` under `(atol, rtol)`. NaN must meet NaN, and an infinity
/// must meet the same infinity. Lengths must be equal (a length mismatch fails).
pub fn compare<T: Real>(got: &[T], reference: &[T], atol: f64, rtol: f64) -> Comparison {
    let mut c = Comparison {
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        worst_index: None,
        violations: 0,
        pass: got.len() == reference.len(),
    };
    let mut worst_excess = f64::NEG_INFINITY;
    for (i, (&g, &r)) in got.iter().zip(reference.iter()).enumerate() {
        let (g, r) = (g.to_f64(), r.to_f64());
        if g.is_nan() || r.is_nan() || g.is_infinite() || r.is_infinite() {
            let same = (g.is_nan() && r.is_nan()) || (g == r);
            if !same {
                c.violations += 1;
                c.pass = false;
                c.max_abs_err = f64::INFINITY;
                worst_excess = f64::INFINITY;
                c.worst_index = Some(i);
            }
            continue;
        }
        let abs = libm::fabs(g - r);
        let rel = if r != 0.0 {
            abs / libm::fabs(r)
        } else if abs == 0.0 {
            0.0
        } else {
            f64::INFINITY
        };
        if abs > c.max_abs_err {
            c.max_abs_err = abs;
        }
        if rel > c.max_rel_err {
            c.max_rel_err = rel;
        }
        let excess = abs - (atol + rtol * libm::fabs(r));
        if excess > 0.0 {
            c.violations += 1;
            c.pass = false;
        }
        if excess > worst_excess {
            worst_excess = excess;
            c.worst_index = Some(i);
        }
    }
    c
}

#[cfg(test)]
mod tests {
    // wasm-pack test runs these in the browser too.
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn compare_respects_budget_and_special_values() {
        let c = compare(&[1.0f32, 2.0, 3.0], &[1.0, 2.0, 3.0], 0.0, 0.0);
        assert!(c.pass && c.max_abs_err == 0.0);
        let c = compare(&[1.0f32, 2.001], &[1.0, 2.0], 0.0, 1e-4);
        assert!(!c.pass);
        assert_eq!(c.violations, 1);
        assert_eq!(c.worst_index, Some(1));
        let c = compare(&[1.0f32, 2.001], &[1.0, 2.0], 0.0, 1e-3);
        assert!(c.pass);
        let c = compare(
            &[f32::NAN, f32::INFINITY],
            &[f32::NAN, f32::INFINITY],
            0.0,
            0.0,
        );
        assert!(c.pass);
        let c = compare(&[f32::NAN], &[1.0], 1.0, 1.0);
        assert!(!c.pass);
        let c = compare(&[f32::INFINITY], &[f32::NEG_INFINITY], 1.0, 1.0);
        assert!(!c.pass);
        let c = compare(&[1.0f32], &[1.0, 2.0], 1.0, 1.0);
        assert!(!c.pass, "length mismatch must fail");
    }

    #[test]
    fn budget_grows_with_k() {
        let b = Budget::per_k(2e-6, 2e-6);
        let (a, r) = b.at(4096);
        assert!((a - 1.28e-4).abs() < 1e-9 && (r - 1.28e-4).abs() < 1e-9);
        assert_eq!(Budget::fixed(1.0, 2.0).at(100), (1.0, 2.0));
    }
}
