//! Randomized truncated SVD, the reference for `svd_lowrank` (Halko, Martinsson & Tropp 2011,
//! "Finding structure with randomness", Algorithms 4.4 and 5.1): `torch.svd_lowrank` without
//! centering and without oversampling.
//!
//! For one matrix `a [m, n]` and `q = rank` (at most `min(m, n)`: a larger rank is an error):
//!
//! 1. `omega [n, q]`: standard normals from `Rng::new(seed)`, row-major ([`gaussian_omega`]).
//! 2. `Q = orth(a omega) [m, q]`; then `power_iters` times `Q = orth(a^T Q) [n, q]`,
//!    `Q = orth(a Q) [m, q]` ([`orthonormalize_columns`]).
//! 3. `b = Q^T a [q, n]`; its exact SVD by one-sided Jacobi ([`jacobi_svd`]).
//! 4. `u = Q u_b [m, q]`, `s [q]` descending, `v = v_b [n, q]`, so `a ~ u diag(s) v^T`.
//! 5. Signs ([`fix_signs`]): each pair `(u_j, v_j)` is negated if needed so that the entry of
//!    largest magnitude of `u_j` (the first one, on exact ties) is positive. Backends that agree
//!    up to rounding then agree on signs too, except for near-ties in `|u_j|`.
//!
//! Batched input `[..., m, n]` shares one `omega` across the batch (as torch does), so every
//! matrix of the batch gives exactly what it would give alone with the same seed.
//!
//! Robustness: the working copy of `a` is scaled by a power of two (exact) so that its largest
//! entry is in `[0.5, 1)`; squared norms then neither overflow nor underflow in f32. Rank
//! deficiency never divides by zero: a column that Gram-Schmidt finds dependent is replaced by a
//! unit vector orthogonal to the previous ones, so `u` and `v` always have orthonormal columns
//! and the missing singular values come out as (numerically) zero.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, min_rank, non_empty};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::rng::Rng;

const OP: &str = "svd_lowrank";

/// Cap on one-sided Jacobi sweeps. Convergence is quadratic; a few sweeps to ~10 suffice in
/// practice, the cap only bounds the work on pathological input.
const MAX_SWEEPS: usize = 60;

/// Machine epsilon of `T` (f32 and f64 are the only `Real`s; f32 cannot tell `1 + 2^-30`
/// from 1).
fn epsilon<T: Real>() -> T {
    if T::from_f64(1.0 + 1.0 / (1u64 << 30) as f64) == T::ONE {
        T::from_f64(f32::EPSILON as f64)
    } else {
        T::from_f64(f64::EPSILON)
    }
}

/// `(scale, unscale)`: powers of two with `max|x| * scale` in `[0.5, 1)` (clamped to `2^±120`
/// so both stay representable in f32). All-zero input gets `(1, 1)`.
fn power_of_two_scale<T: Real>(x: &[T]) -> (T, T) {
    let max = x.iter().fold(0.0f64, |m, v| m.max(v.abs().to_f64()));
    if max == 0.0 || !max.is_finite() {
        return (T::ONE, T::ONE);
    }
    let (_, e) = libm::frexp(max);
    let e = e.clamp(-120, 120);
    (
        T::from_f64(libm::ldexp(1.0, -e)),
        T::from_f64(libm::ldexp(1.0, e)),
    )
}

/// The Gaussian test matrix `omega [n, q]`, row-major: `n * q` draws of
/// `Rng::new(seed).normal_f64()` converted to `T`, in that order. Other backends reproduce it
/// by calling this (or the same `Rng` sequence).
pub fn gaussian_omega<T: Real>(seed: u64, n: usize, q: usize) -> Vec<T> {
    let mut rng = Rng::new(seed);
    (0..n.saturating_mul(q))
        .map(|_| T::from_f64(rng.normal_f64()))
        .collect()
}

/// `a [r, k] @ b [k, c] -> [r, c]`, all row-major.
fn matmul<T: Real>(a: &[T], b: &[T], r: usize, k: usize, c: usize) -> Vec<T> {
    let mut out = vec![T::ZERO; r * c];
    for (out_row, a_row) in out.chunks_exact_mut(c).zip(a.chunks_exact(k)) {
        for (j, o) in out_row.iter_mut().enumerate() {
            let mut acc = T::ZERO;
            for (p, &x) in a_row.iter().enumerate() {
                acc += x * b[p * c + j];
            }
            *o = acc;
        }
    }
    out
}

/// `a [k, r]^T @ b [k, c] -> [r, c]`, all row-major.
fn matmul_tn<T: Real>(a: &[T], b: &[T], k: usize, r: usize, c: usize) -> Vec<T> {
    let mut out = vec![T::ZERO; r * c];
    for (i, out_row) in out.chunks_exact_mut(c).enumerate() {
        for (j, o) in out_row.iter_mut().enumerate() {
            let mut acc = T::ZERO;
            for p in 0..k {
                acc += a[p * r + i] * b[p * c + j];
            }
            *o = acc;
        }
    }
    out
}

fn dot<T: Real>(x: &[T], y: &[T]) -> T {
    let mut acc = T::ZERO;
    for (&a, &b) in x.iter().zip(y) {
        acc += a * b;
    }
    acc
}

fn norm<T: Real>(x: &[T]) -> T {
    dot(x, x).sqrt()
}

/// One modified Gram-Schmidt pass: removes from `col` its components along the orthonormal
/// columns in `done` (column-major, each of length `col.len()`).
fn project_out<T: Real>(done: &[T], col: &mut [T]) {
    let len = col.len();
    if len == 0 {
        return;
    }
    for qk in done.chunks_exact(len) {
        let d = dot(qk, col);
        for (c, &qv) in col.iter_mut().zip(qk) {
            *c -= d * qv;
        }
    }
}

/// Orthonormalizes `k` columns of length `len` stored column-major, in place, left to right.
///
/// Modified Gram-Schmidt, twice ("twice is enough", Kahan-Parlett): a column whose norm drops by
/// more than half in the second pass was numerically in the span of its predecessors, and a
/// zero column has no direction at all; both are replaced by the standard basis vector with the
/// smallest projection on the columns so far, orthogonalized twice. Needs `k <= len`.
fn orthonormalize_col_major<T: Real>(cols: &mut [T], len: usize, k: usize) {
    let half = T::from_f64(0.5);
    for j in 0..k.min(len) {
        let (done, rest) = cols.split_at_mut(j * len);
        let Some(col) = rest.get_mut(..len) else {
            return;
        };
        let r0 = norm(col);
        let mut keep = false;
        if r0 > T::ZERO && r0.is_finite() {
            project_out(done, col);
            let r1 = norm(col);
            project_out(done, col);
            let r2 = norm(col);
            keep = r2 > T::ZERO && r2 >= half * r1 && (T::ONE / r2).is_finite();
        }
        if !keep {
            // Residual of e_i against the columns so far: 1 - sum_p Q[i, p]^2, at least
            // 1 - j / len > 0 for the best i.
            let mut best = 0;
            let mut best_res = T::NEG_INFINITY;
            for i in 0..len {
                let mut proj = T::ZERO;
                for qk in done.chunks_exact(len) {
                    proj += qk[i] * qk[i];
                }
                let res = T::ONE - proj;
                if res > best_res {
                    best_res = res;
                    best = i;
                }
            }
            col.iter_mut().for_each(|c| *c = T::ZERO);
            col[best] = T::ONE;
            project_out(done, col);
            project_out(done, col);
        }
        let r = norm(col);
        if r > T::ZERO {
            let inv = T::ONE / r;
            col.iter_mut().for_each(|c| *c *= inv);
        }
    }
}

/// Row-major `[r, c]` to column-major (equivalently: the transpose, row-major `[c, r]`).
fn transpose<T: Real>(x: &[T], r: usize, c: usize) -> Vec<T> {
    let mut out = vec![T::ZERO; r * c];
    for (i, row) in x.chunks_exact(c).enumerate().take(r) {
        for (j, &v) in row.iter().enumerate() {
            out[j * r + i] = v;
        }
    }
    out
}

/// Orthonormalizes the columns of `y [rows, cols]` (row-major, `cols <= rows`) in place: the
/// `Q` of a thin QR, by modified Gram-Schmidt twice, with dependent or zero columns replaced by
/// unit vectors orthogonal to the previous ones (so the result has orthonormal columns for any
/// finite input, and never NaN).
pub fn orthonormalize_columns<T: Real>(y: &mut [T], rows: usize, cols: usize) -> Result<()> {
    const OP: &str = "orthonormalize_columns";
    if Some(y.len()) != rows.checked_mul(cols) {
        return Err(Error::bad_shape(
            OP,
            "y",
            &[rows, cols],
            alloc::format!("shape does not match {} elements", y.len()),
        ));
    }
    if cols > rows {
        return Err(Error::bad_shape(
            OP,
            "y",
            &[rows, cols],
            "more columns than rows cannot be orthonormal",
        ));
    }
    let mut cm = transpose(y, rows, cols);
    orthonormalize_col_major(&mut cm, rows, cols);
    let back = transpose(&cm, cols, rows);
    y.copy_from_slice(&back);
    Ok(())
}

/// One-sided (Hestenes) Jacobi on `k` columns of length `len` (column-major): rotates column
/// pairs until every pair is orthogonal to working precision. Returns the accumulated rotation
/// `J [k, k]` (column-major), so that `w_in J = w_out`.
fn hestenes<T: Real>(w: &mut [T], len: usize, k: usize) -> Vec<T> {
    let mut jm = vec![T::ZERO; k * k];
    for i in 0..k {
        jm[i * k + i] = T::ONE;
    }
    let eps = epsilon::<T>();
    let two = T::from_f64(2.0);
    for _sweep in 0..MAX_SWEEPS {
        let mut rotated = false;
        for p in 0..k {
            for r in p + 1..k {
                let (wp, wr) = (&w[p * len..(p + 1) * len], &w[r * len..(r + 1) * len]);
                let alpha = dot(wp, wp);
                let beta = dot(wr, wr);
                let gamma = dot(wp, wr);
                if gamma == T::ZERO || gamma.abs() <= eps * alpha.sqrt() * beta.sqrt() {
                    continue;
                }
                rotated = true;
                // tan of the angle that zeroes the off-diagonal of [[alpha, gamma], [gamma,
                // beta]], the smaller root; written so that zeta^2 cannot overflow.
                let zeta = (beta - alpha) / (two * gamma);
                let az = zeta.abs();
                let root = if az > T::ONE {
                    az * (T::ONE + (T::ONE / (zeta * zeta))).sqrt()
                } else {
                    (T::ONE + zeta * zeta).sqrt()
                };
                let t = if zeta >= T::ZERO { T::ONE } else { -T::ONE } / (az + root);
                let c = T::ONE / (T::ONE + t * t).sqrt();
                let s = c * t;
                rotate(w, len, p, r, c, s);
                rotate(&mut jm, k, p, r, c, s);
            }
        }
        if !rotated {
            break;
        }
    }
    jm
}

/// Columns `p < r` of a column-major matrix: `(x_p, x_r) <- (c x_p - s x_r, s x_p + c x_r)`.
fn rotate<T: Real>(x: &mut [T], len: usize, p: usize, r: usize, c: T, s: T) {
    let (head, tail) = x.split_at_mut(r * len);
    let xp = &mut head[p * len..(p + 1) * len];
    let xr = &mut tail[..len];
    for (a, b) in xp.iter_mut().zip(xr.iter_mut()) {
        let (va, vb) = (*a, *b);
        *a = c * va - s * vb;
        *b = s * va + c * vb;
    }
}

/// Negates column pairs `(u_j, v_j)` so that the entry of largest magnitude of each `u_j` is
/// positive (the first such entry on exact ties). `u [m, q]`, `v [n, q]`, row-major.
pub fn fix_signs<T: Real>(u: &mut [T], q: usize, v: &mut [T]) {
    if q == 0 {
        return;
    }
    for j in 0..q {
        let mut best = T::ZERO;
        for row in u.chunks_exact(q) {
            if row[j].abs() > best.abs() {
                best = row[j];
            }
        }
        if best < T::ZERO {
            for row in u.chunks_exact_mut(q) {
                row[j] = -row[j];
            }
            for row in v.chunks_exact_mut(q) {
                row[j] = -row[j];
            }
        }
    }
}

/// Exact thin SVD of a small dense matrix by one-sided Jacobi: `b [rows, cols]` (row-major) ->
/// `(u [rows, k], s [k], v [cols, k])` with `k = min(rows, cols)`, `s` descending,
/// `b = u diag(s) v^T`, `u` and `v` with orthonormal columns (zero singular values get
/// completing orthonormal vectors), signs as in [`fix_signs`].
///
/// This is the `k x k`-sized step of [`svd_lowrank`]; GPU backends run it on the host.
#[allow(clippy::type_complexity)]
pub fn jacobi_svd<T: Real>(b: &[T], rows: usize, cols: usize) -> Result<(Vec<T>, Vec<T>, Vec<T>)> {
    const OP: &str = "jacobi_svd";
    let shape = [rows, cols];
    if Some(b.len()) != rows.checked_mul(cols) {
        return Err(Error::bad_shape(
            OP,
            "b",
            &shape,
            alloc::format!("shape does not match {} elements", b.len()),
        ));
    }
    non_empty(OP, "b", &shape)?;
    check_finite(OP, "b", b)?;
    let (scale, unscale) = power_of_two_scale(b);
    let bs: Vec<T> = b.iter().map(|&x| x * scale).collect();
    // Orthogonalize the k vectors of the shorter side: the rows of b (= columns of b^T) when
    // rows <= cols, else the columns of b. Then `w_in J = w_out` with orthogonal columns:
    //   rows <= cols: b^T J = W  =>  b = J diag(s) (W / s)^T, so u = J, v = W / s;
    //   rows >  cols: b   J = W  =>  b = (W / s) diag(s) J^T, so u = W / s, v = J.
    let wide = rows <= cols;
    let (k, len) = if wide { (rows, cols) } else { (cols, rows) };
    let mut w = if wide { bs } else { transpose(&bs, rows, cols) };
    let jm = hestenes(&mut w, len, k);

    let sigma: Vec<T> = w.chunks_exact(len).map(norm).collect();
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&x, &y| {
        sigma[y]
            .partial_cmp(&sigma[x])
            .unwrap_or(core::cmp::Ordering::Equal)
    });

    // Column-major factors in sorted order: `normed` [len, k] (W / s), `rot` [k, k] (J).
    let mut normed = vec![T::ZERO; len * k];
    let mut rot = vec![T::ZERO; k * k];
    let mut s = vec![T::ZERO; k];
    for (dst, &src) in order.iter().enumerate() {
        let sg = sigma[src];
        s[dst] = sg * unscale;
        let inv = T::ONE / sg;
        if sg > T::ZERO && inv.is_finite() {
            for (o, &x) in normed[dst * len..(dst + 1) * len]
                .iter_mut()
                .zip(&w[src * len..(src + 1) * len])
            {
                *o = x * inv;
            }
        }
        rot[dst * k..(dst + 1) * k].copy_from_slice(&jm[src * k..(src + 1) * k]);
    }
    // Zero singular values left zero columns: complete them (the others are already orthonormal
    // to working precision, so this pass moves them by rounding only).
    orthonormalize_col_major(&mut normed, len, k);

    let (mut u, mut v) = if wide {
        (transpose(&rot, k, k), transpose(&normed, k, len))
    } else {
        (transpose(&normed, k, len), transpose(&rot, k, k))
    };
    fix_signs(&mut u, k, &mut v);
    Ok((u, s, v))
}

fn check_finite<T: Real>(op: &'static str, name: &str, x: &[T]) -> Result<()> {
    if let Some((index, v)) = x.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(Error::NonFinite {
            op,
            tensor: name.into(),
            index,
            value: v.to_f64(),
        });
    }
    Ok(())
}

/// `svd_lowrank` of one matrix `a [m, n]` with `q = rank <= min(m, n)` and the shared `omega
/// [n, q]`: `(u [m, q], s [q], v [n, q])`.
#[allow(clippy::type_complexity)]
fn lowrank_one<T: Real>(
    a: &[T],
    m: usize,
    n: usize,
    q: usize,
    power_iters: usize,
    omega: &[T],
) -> Result<(Vec<T>, Vec<T>, Vec<T>)> {
    let (scale, unscale) = power_of_two_scale(a);
    let a: Vec<T> = a.iter().map(|&x| x * scale).collect();
    // Q [m, q] spans (approximately) the dominant range of a.
    let mut qm = matmul(&a, omega, m, n, q);
    orthonormalize_columns(&mut qm, m, q)?;
    for _ in 0..power_iters {
        // Re-orthonormalizing between products keeps the small directions from drowning in
        // rounding error (Halko et al., Algorithm 4.4).
        let mut z = matmul_tn(&a, &qm, m, n, q); // a^T Q [n, q]
        orthonormalize_columns(&mut z, n, q)?;
        qm = matmul(&a, &z, m, n, q); // a Z [m, q]
        orthonormalize_columns(&mut qm, m, q)?;
    }
    let b = matmul_tn(&qm, &a, m, q, n); // Q^T a [q, n]
    let (ub, mut s, mut v) = jacobi_svd(&b, q, n)?;
    let mut u = matmul(&qm, &ub, m, q, q); // [m, q]
    s.iter_mut().for_each(|x| *x *= unscale);
    fix_signs(&mut u, q, &mut v);
    Ok((u, s, v))
}

/// Most power iterations `svd_lowrank` takes: more buy nothing in f32.
pub const MAX_POWER_ITERS: usize = 64;

/// Checks `svd_lowrank`'s attributes against the input's shape `[..., m, n]` (every backend's
/// check) and returns `(m, n, q)` with `q = rank`. A rank above `min(m, n)` or more than
/// [`MAX_POWER_ITERS`] power iterations is an error naming the value, never a silent clamp.
pub fn check_attrs(
    rank: usize,
    power_iters: usize,
    shape: &[usize],
) -> Result<(usize, usize, usize)> {
    min_rank(OP, "a", shape, 2)?;
    non_empty(OP, "a", shape)?;
    let (m, n) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    if rank == 0 || rank > m.min(n) {
        return Err(Error::BadAttr {
            op: OP,
            attr: "rank",
            value: format!("{rank}"),
            why: format!(
                "must be in [1, min(m, n)] = [1, {}] for an input of shape {shape:?}",
                m.min(n)
            ),
        });
    }
    if power_iters > MAX_POWER_ITERS {
        return Err(Error::BadAttr {
            op: OP,
            attr: "power_iters",
            value: format!("{power_iters}"),
            why: format!("must be <= {MAX_POWER_ITERS}"),
        });
    }
    Ok((m, n, rank))
}

/// Forward of `svd_lowrank`: `a [..., m, n]` -> `u [..., m, q]`, `s [..., q]`, `v [..., n, q]`
/// with `q = rank <= min(m, n)`. See the module docs.
pub fn svd_lowrank<T: Real>(
    rank: usize,
    power_iters: usize,
    seed: u64,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (shape, a) = float_arg(OP, args, 0, "a")?;
    let (m, n, q) = check_attrs(rank, power_iters, shape)?;
    check_finite(OP, "a", a)?;
    let lead = &shape[..shape.len() - 2];
    let batch: usize = lead.iter().product();
    let omega = gaussian_omega::<T>(seed, n, q);

    let mut u = Vec::with_capacity(batch * m * q);
    let mut s = Vec::with_capacity(batch * q);
    let mut v = Vec::with_capacity(batch * n * q);
    for am in a.chunks_exact(m * n) {
        let (ub, sb, vb) = lowrank_one(am, m, n, q, power_iters, &omega)?;
        u.extend_from_slice(&ub);
        s.extend_from_slice(&sb);
        v.extend_from_slice(&vb);
    }
    let with = |tail: &[usize]| -> Vec<usize> { lead.iter().chain(tail).copied().collect() };
    Ok(vec![
        Owned::float(with(&[m, q]), u),
        Owned::float(with(&[q]), s),
        Owned::float(with(&[n, q]), v),
    ])
}

#[cfg(test)]
mod tests;
