//! Kernels written once over [`Simd`]: the vector `exp`, the logistic function, and the row
//! loops (reductions, maps) the ops are built from. Every function is `#[inline(always)]` so
//! it is compiled inside the caller's `#[target_feature]` context.

use super::simd::{MAGIC, Simd};

const LOG2E: f32 = core::f32::consts::LOG2_E;
/// `ln 2` in two parts (Cody and Waite): `LN2_HI` has 9 significant bits, so `n * LN2_HI` is
/// exact for `|n| <= 256` and `x - n * LN2_HI` loses nothing.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Below this `exp` is 0 in f32 (`e^-104 < 2^-150`), above the other it overflows; clamping
/// there keeps `n` within the two-factor scaling's range without changing any result.
const EXP_LO: f32 = -104.0;
const EXP_HI: f32 = 89.0;
/// Minimax coefficients of `(e^r - 1 - r) / r^2` on `|r| <= ln(2) / 2` (Cephes `expf`).
const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5, // 5.0000001201e-1 rounds to 0.5 in f32
];

/// `e^x` per lane, within 2 ulp over the whole f32 range (measured against f64 in the tests).
///
/// `x = n ln 2 + r` with `n = round(x log2 e)` and `|r| <= ln(2) / 2 + 1e-4`; `e^r` by a
/// degree-7 polynomial; `2^n` as two normal powers of two so that results in the subnormal
/// range are rounded once, by the last multiply. NaN propagates through `r`; `+inf` and large
/// inputs overflow to `+inf`, `-inf` and very negative inputs give `+0`.
#[inline(always)]
pub(crate) fn exp<S: Simd>(s: S, x: S::V) -> S::V {
    let x = s.clamp(x, s.splat(EXP_LO), s.splat(EXP_HI));
    let t = s.mul_add(x, s.splat(LOG2E), s.splat(MAGIC));
    let n = s.sub(t, s.splat(MAGIC));
    let r = s.sub(x, s.mul(n, s.splat(LN2_HI)));
    let r = s.sub(r, s.mul(n, s.splat(LN2_LO)));
    let mut p = s.splat(P[0]);
    for &c in &P[1..] {
        p = s.mul_add(p, r, s.splat(c));
    }
    let y = s.add(s.mul_add(p, s.mul(r, r), r), s.splat(1.0));
    let (a, b) = s.exp2_parts(t);
    s.mul(s.mul(y, a), b)
}

/// `1 / (1 + e^-x)` per lane from `e = exp(-|x|)`, which never overflows: `1 / (1 + e)` for
/// `x >= 0`, `e / (1 + e)` otherwise (the reference's two branches). NaN stays NaN.
#[inline(always)]
pub(crate) fn sigmoid<S: Simd>(s: S, x: S::V) -> S::V {
    let e = exp(s, s.sub(s.splat(0.0), s.abs(x)));
    let num = s.select_ge0(x, s.splat(1.0), e);
    s.div(num, s.add(s.splat(1.0), e))
}

/// `out[i] = f(x[i])`; `out` as long as `x`.
#[inline(always)]
pub(crate) fn map<S: Simd>(s: S, x: &[f32], out: &mut [f32], f: impl Fn(S::V) -> S::V) {
    for (xc, oc) in x.chunks(S::LANES).zip(out.chunks_mut(S::LANES)) {
        s.store(f(s.load(xc, 0.0)), oc);
    }
}

/// `out[i] = f(a[i], b[i])`.
#[inline(always)]
pub(crate) fn map2<S: Simd>(
    s: S,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    f: impl Fn(S::V, S::V) -> S::V,
) {
    let l = S::LANES;
    for ((ac, bc), oc) in a.chunks(l).zip(b.chunks(l)).zip(out.chunks_mut(l)) {
        s.store(f(s.load(ac, 0.0), s.load(bc, 0.0)), oc);
    }
}

/// `out[i] = f(a[i], b[i], c[i])`.
#[inline(always)]
pub(crate) fn map3<S: Simd>(
    s: S,
    a: &[f32],
    b: &[f32],
    c: &[f32],
    out: &mut [f32],
    f: impl Fn(S::V, S::V, S::V) -> S::V,
) {
    let l = S::LANES;
    let ins = a.chunks(l).zip(b.chunks(l)).zip(c.chunks(l));
    for (((ac, bc), cc), oc) in ins.zip(out.chunks_mut(l)) {
        s.store(f(s.load(ac, 0.0), s.load(bc, 0.0), s.load(cc, 0.0)), oc);
    }
}

/// Folds `x` into four independent accumulators (so a reduction is not one long dependency
/// chain): `step(acc, v)` per vector of `LANES` values, the tail padded with `fill`; returns
/// the four accumulators combined with `join`.
#[inline(always)]
fn fold4<S: Simd>(
    s: S,
    x: &[f32],
    fill: f32,
    init: S::V,
    step: impl Fn(S::V, S::V) -> S::V,
    join: impl Fn(S::V, S::V) -> S::V,
) -> S::V {
    let l = S::LANES;
    let mut acc = [init; 4];
    let mut chunks = x.chunks_exact(4 * l);
    for c in &mut chunks {
        for (k, a) in acc.iter_mut().enumerate() {
            *a = step(*a, s.load(&c[k * l..], fill));
        }
    }
    for c in chunks.remainder().chunks(l) {
        acc[0] = step(acc[0], s.load(c, fill));
    }
    let [a, b, c, d] = acc;
    join(join(a, b), join(c, d))
}

/// Largest value of `x` (a NaN may or may not win; callers let NaN reach the sum instead).
#[inline(always)]
pub(crate) fn max<S: Simd>(s: S, x: &[f32]) -> f32 {
    let ninf = s.splat(f32::NEG_INFINITY);
    let m = fold4(
        s,
        x,
        f32::NEG_INFINITY,
        ninf,
        |a, v| s.max(a, v),
        |a, b| s.max(a, b),
    );
    s.hmax(m)
}

/// `sum(x[i]^2)` in f32.
#[inline(always)]
pub(crate) fn sum_sq<S: Simd>(s: S, x: &[f32]) -> f32 {
    let z = s.splat(0.0);
    let acc = fold4(s, x, 0.0, z, |a, v| s.mul_add(v, v, a), |a, b| s.add(a, b));
    s.hsum(acc)
}

/// `sum(x[i])` in f32.
#[inline(always)]
pub(crate) fn sum<S: Simd>(s: S, x: &[f32]) -> f32 {
    let z = s.splat(0.0);
    s.hsum(fold4(s, x, 0.0, z, |a, v| s.add(a, v), |a, b| s.add(a, b)))
}

/// `(sum(x[i] - m), sum((x[i] - m)^2))` in f32.
#[inline(always)]
pub(crate) fn dev_sums<S: Simd>(s: S, x: &[f32], m: f32) -> (f32, f32) {
    let (mv, mut d1, mut d2) = (s.splat(m), s.splat(0.0), s.splat(0.0));
    for c in x.chunks(S::LANES) {
        // The tail is padded with m: a zero deviation.
        let d = s.sub(s.load(c, m), mv);
        d1 = s.add(d1, d);
        d2 = s.mul_add(d, d, d2);
    }
    (s.hsum(d1), s.hsum(d2))
}

/// `out[i] = exp(x[i] - m)`; returns their sum. `out` as long as `x`.
#[inline(always)]
pub(crate) fn exp_sum<S: Simd>(s: S, x: &[f32], m: f32, out: &mut [f32]) -> f32 {
    let mv = s.splat(m);
    // One accumulator is enough: the exp of each vector is independent work that overlaps.
    let mut acc = s.splat(0.0);
    for (c, o) in x.chunks(S::LANES).zip(out.chunks_mut(S::LANES)) {
        // The tail is padded with -inf: exp(-inf - m) = 0 (or NaN when m is infinite or NaN,
        // and then the row is NaN anyway, as in the reference).
        let e = exp(s, s.sub(s.load(c, f32::NEG_INFINITY), mv));
        s.store(e, o);
        acc = s.add(acc, e);
    }
    s.hsum(acc)
}

/// `x[i] = exp(x[i] - m)`; returns their sum.
#[inline(always)]
pub(crate) fn exp_sum_in_place<S: Simd>(s: S, x: &mut [f32], m: f32) -> f32 {
    let mv = s.splat(m);
    let mut acc = s.splat(0.0);
    for c in x.chunks_mut(S::LANES) {
        let e = exp(s, s.sub(s.load(c, f32::NEG_INFINITY), mv));
        s.store(e, c);
        acc = s.add(acc, e);
    }
    s.hsum(acc)
}

/// `x[i] *= f`.
#[inline(always)]
pub(crate) fn scale_in_place<S: Simd>(s: S, x: &mut [f32], f: f32) {
    let fv = s.splat(f);
    for c in x.chunks_mut(S::LANES) {
        let v = s.mul(s.load(c, 0.0), fv);
        s.store(v, c);
    }
}

/// `a . b` (lengths equal).
#[inline(always)]
pub(crate) fn dot<S: Simd>(s: S, a: &[f32], b: &[f32]) -> f32 {
    let l = S::LANES;
    let mut acc = s.splat(0.0);
    // Whole vectors first (no padding to test), then the short tail: the same multiply-adds.
    let whole = a.len().min(b.len()) / l * l;
    for (ac, bc) in a[..whole].chunks_exact(l).zip(b[..whole].chunks_exact(l)) {
        acc = s.mul_add(s.load(ac, 0.0), s.load(bc, 0.0), acc);
    }
    for (ac, bc) in a[whole..].chunks(l).zip(b[whole..].chunks(l)) {
        acc = s.mul_add(s.load(ac, 0.0), s.load(bc, 0.0), acc);
    }
    s.hsum(acc)
}

/// `[a . b[0], .., a . b[3]]`: four [`dot`]s, each with `dot`'s arithmetic (so its bits),
/// interleaved so that their dependency chains overlap (one `dot` waits out the multiply-add's
/// latency at every vector). Every `b[i]` is as long as `a`.
#[inline(always)]
pub(crate) fn dot4<S: Simd>(s: S, a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
    let l = S::LANES;
    let mut acc = [s.splat(0.0); 4];
    let n = b.iter().fold(a.len(), |n, bi| n.min(bi.len()));
    let whole = n / l * l;
    // Whole vectors with no bounds or padding tests in the loop (attention's scores spend
    // their time here), then the tail as `dot` takes it.
    let bw = b.map(|bi| &bi[..whole]);
    for (i, ac) in a[..whole].chunks_exact(l).enumerate() {
        let av = s.load(ac, 0.0);
        let at = i * l..i * l + l;
        for (acc, bi) in acc.iter_mut().zip(bw) {
            *acc = s.mul_add(av, s.load(&bi[at.clone()], 0.0), *acc);
        }
    }
    for (i, ac) in a[whole..].chunks(l).enumerate() {
        let av = s.load(ac, 0.0);
        let at = whole + i * l..whole + i * l + ac.len();
        for (acc, bi) in acc.iter_mut().zip(b) {
            *acc = s.mul_add(
                av,
                s.load(bi.get(at.clone()).unwrap_or_default(), 0.0),
                *acc,
            );
        }
    }
    acc.map(|a| s.hsum(a))
}

/// Vectors of `out` whose accumulators [`weighted_rows`] keeps in registers at once: eight
/// independent multiply-add chains (four waited on the multiply-add's latency), and a 64-wide
/// head's whole row on AVX2.
const WEIGHTED_VECTORS: usize = 8;

/// `out = sum_j p[j] * rows[j]` where `rows` holds `p.len()` rows of `out.len()` values. The
/// columns go in blocks of up to [`WEIGHTED_VECTORS`] whole vectors (then the short tail)
/// whose accumulators stay in registers across all rows (accumulating into `out` row by row
/// would reload and store it for every row). Each output is the same chain of multiply-adds
/// over `j` whatever the block.
#[inline(always)]
pub(crate) fn weighted_rows<S: Simd>(s: S, p: &[f32], rows: &[f32], out: &mut [f32]) {
    let (l, w) = (S::LANES, out.len());
    if w == 0 {
        return;
    }
    let mut c0 = 0;
    while w - c0 >= l {
        let left = (w - c0) / l;
        c0 += l * if left >= WEIGHTED_VECTORS {
            weighted_block::<S, WEIGHTED_VECTORS>(s, p, rows, c0, out)
        } else if left >= 4 {
            weighted_block::<S, 4>(s, p, rows, c0, out)
        } else if left == 3 {
            // A 48-wide head on AVX-512 in one pass over the rows, not two (of 2 vectors, then
            // 1) that each wait on the multiply-add's latency row by row.
            weighted_block::<S, 3>(s, p, rows, c0, out)
        } else if left >= 2 {
            weighted_block::<S, 2>(s, p, rows, c0, out)
        } else {
            weighted_block::<S, 1>(s, p, rows, c0, out)
        };
    }
    if c0 < w {
        weighted_tail(s, p, rows, c0, out);
    }
}

/// [`weighted_rows`] on `NV` whole vectors of columns from `c0` (the caller checked they are
/// within `out`); returns `NV`. Whole rows only, so no load or store tests its length.
#[inline(always)]
fn weighted_block<S: Simd, const NV: usize>(
    s: S,
    p: &[f32],
    rows: &[f32],
    c0: usize,
    out: &mut [f32],
) -> usize {
    let (l, w) = (S::LANES, out.len());
    let cols = c0..c0 + NV * l;
    let mut acc = [s.splat(0.0); NV];
    for (&pj, row) in p.iter().zip(rows.chunks_exact(w)) {
        let pv = s.splat(pj);
        for (a, part) in acc.iter_mut().zip(row[cols.clone()].chunks_exact(l)) {
            *a = s.mul_add(pv, s.load(part, 0.0), *a);
        }
    }
    for (a, d) in acc.into_iter().zip(out[cols].chunks_exact_mut(l)) {
        s.store(a, d);
    }
    NV
}

/// [`weighted_rows`] on the last columns from `c0`, fewer than one vector.
#[inline(always)]
fn weighted_tail<S: Simd>(s: S, p: &[f32], rows: &[f32], c0: usize, out: &mut [f32]) {
    let w = out.len();
    let mut acc = s.splat(0.0);
    for (&pj, row) in p.iter().zip(rows.chunks_exact(w)) {
        acc = s.mul_add(s.splat(pj), s.load(&row[c0..], 0.0), acc);
    }
    s.store(acc, &mut out[c0..]);
}
