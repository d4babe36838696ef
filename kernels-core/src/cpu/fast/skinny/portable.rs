//! The small-product kernels in plain Rust: `[f32; 8]` lanes that LLVM vectorizes for whatever
//! the target has (`a * b + c`, not `mul_add`, which is a libm call without hardware FMA).

type V = [f32; L];
const L: usize = 8;
const NV: usize = 4;
/// No prefetch instruction.
const STREAM_PREFETCH: usize = 0;
/// See [`Isa::STREAM_COLUMNS`](crate::cpu::fast::skinny::Isa::STREAM_COLUMNS).
const STREAM_COLUMNS: bool = false;

/// The portable instruction "set": every target.
#[derive(Debug, Clone, Copy, Default)]
pub struct PortableIsa;

#[inline(always)]
unsafe fn zero() -> V {
    [0.0; L]
}

#[inline(always)]
unsafe fn splat(x: f32) -> V {
    [x; L]
}

/// # Safety
/// `p` is valid for `L` reads.
#[inline(always)]
unsafe fn load(p: *const f32) -> V {
    // SAFETY: the caller's contract; `read_unaligned` has no alignment requirement.
    unsafe { p.cast::<V>().read_unaligned() }
}

/// # Safety
/// `p` is valid for `rem <= L` reads.
#[inline(always)]
unsafe fn load_tail(p: *const f32, rem: usize) -> V {
    let mut v = [0.0; L];
    for (i, x) in v.iter_mut().enumerate().take(rem) {
        // SAFETY: i < rem.
        *x = unsafe { *p.add(i) };
    }
    v
}

/// # Safety
/// `p` is valid for `L` writes.
#[inline(always)]
unsafe fn store(p: *mut f32, v: V) {
    // SAFETY: the caller's contract.
    unsafe { p.cast::<V>().write_unaligned(v) }
}

/// # Safety
/// `p` is valid for `rem <= L` writes.
#[inline(always)]
unsafe fn store_tail(p: *mut f32, v: V, rem: usize) {
    for (i, &x) in v.iter().enumerate().take(rem) {
        // SAFETY: i < rem.
        unsafe { *p.add(i) = x };
    }
}

#[inline(always)]
unsafe fn add(a: V, b: V) -> V {
    core::array::from_fn(|i| a[i] + b[i])
}

#[inline(always)]
unsafe fn fma(a: V, b: V, c: V) -> V {
    let mut r = c;
    for ((r, &a), &b) in r.iter_mut().zip(&a).zip(&b) {
        *r += a * b;
    }
    r
}

#[inline(always)]
unsafe fn hsum(v: V) -> f32 {
    // Pairwise, like the SIMD kernels' horizontal sums.
    let h: [f32; 4] = core::array::from_fn(|i| v[i] + v[i + 4]);
    (h[0] + h[2]) + (h[1] + h[3])
}

/// No prefetch instruction here.
#[inline(always)]
unsafe fn prefetch(_: *const f32) {}

skinny_kernels!();

isa_impl!(PortableIsa);
