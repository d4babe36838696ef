//! The small-product kernels on wasm `simd128` (a compile-time feature there: no run-time
//! check). wasm has no fused multiply-add in `simd128`: `a * b + c` in two instructions.

use core::arch::wasm32::{
    f32x4_add, f32x4_extract_lane, f32x4_mul, f32x4_splat, v128, v128_load, v128_store,
};

type V = v128;
const L: usize = 4;
const NV: usize = 4;
/// No prefetch instruction in wasm.
const STREAM_PREFETCH: usize = 0;
/// See [`Isa::STREAM_COLUMNS`](crate::cpu::fast::skinny::Isa::STREAM_COLUMNS).
const STREAM_COLUMNS: bool = true;

/// wasm `simd128`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Simd128Isa;

#[inline(always)]
unsafe fn zero() -> V {
    f32x4_splat(0.0)
}

#[inline(always)]
unsafe fn splat(x: f32) -> V {
    f32x4_splat(x)
}

/// # Safety
/// `p` is valid for `L` reads.
#[inline(always)]
unsafe fn load(p: *const f32) -> V {
    // SAFETY: the caller's contract; v128_load has no alignment requirement.
    unsafe { v128_load(p.cast()) }
}

/// # Safety
/// `p` is valid for `rem <= L` reads.
#[inline(always)]
unsafe fn load_tail(p: *const f32, rem: usize) -> V {
    let mut buf = [0.0f32; L];
    for (i, x) in buf.iter_mut().enumerate().take(rem) {
        // SAFETY: i < rem.
        *x = unsafe { *p.add(i) };
    }
    // SAFETY: buf holds L values.
    unsafe { v128_load(buf.as_ptr().cast()) }
}

/// # Safety
/// `p` is valid for `L` writes.
#[inline(always)]
unsafe fn store(p: *mut f32, v: V) {
    // SAFETY: the caller's contract.
    unsafe { v128_store(p.cast(), v) }
}

/// # Safety
/// `p` is valid for `rem <= L` writes.
#[inline(always)]
unsafe fn store_tail(p: *mut f32, v: V, rem: usize) {
    let mut buf = [0.0f32; L];
    // SAFETY: buf holds L values.
    unsafe { v128_store(buf.as_mut_ptr().cast(), v) };
    for (i, &x) in buf.iter().enumerate().take(rem) {
        // SAFETY: i < rem.
        unsafe { *p.add(i) = x };
    }
}

#[inline(always)]
unsafe fn add(a: V, b: V) -> V {
    f32x4_add(a, b)
}

#[inline(always)]
unsafe fn fma(a: V, b: V, c: V) -> V {
    f32x4_add(f32x4_mul(a, b), c)
}

#[inline(always)]
unsafe fn hsum(v: V) -> f32 {
    (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<2>(v))
        + (f32x4_extract_lane::<1>(v) + f32x4_extract_lane::<3>(v))
}

/// No prefetch instruction here.
#[inline(always)]
unsafe fn prefetch(_: *const f32) {}

skinny_kernels!();
isa_impl!(Simd128Isa);
