//! Randomized truncated SVD, the reference for `svd_lowrank` (Halko, Martinsson & Tropp 2011,
//! "Finding structure with randomness", Algorithms 4.4 and 5.1): `torch.svd_lowrank` without
//! centering and without oversampling.
//!
//! For one matrix `a [m, n]` and `q = min(rank, m, n)`:
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

/// `svd_lowrank` of one matrix `a [m, n]` with `q = min(rank, m, n)` and the shared `omega
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

/// Forward of `svd_lowrank`: `a [..., m, n]` -> `u [..., m, q]`, `s [..., q]`, `v [..., n, q]`
/// with `q = min(rank, m, n)`. See the module docs.
pub fn svd_lowrank<T: Real>(
    rank: usize,
    power_iters: usize,
    seed: u64,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (shape, a) = float_arg(OP, args, 0, "a")?;
    min_rank(OP, "a", shape, 2)?;
    non_empty(OP, "a", shape)?;
    if rank == 0 {
        return Err(Error::BadAttr {
            op: OP,
            attr: "rank",
            value: "0".into(),
            why: "must be >= 1".into(),
        });
    }
    check_finite(OP, "a", a)?;
    let (lead, mn) = shape.split_at(shape.len() - 2);
    let (m, n) = (mn[0], mn[1]);
    let q = rank.min(m).min(n);
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
mod tests {
    // wasm-pack test runs these in the browser too.
    use super::*;
    use crate::cpu::run;
    use crate::op::{Direction, Op};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn svd<T: Real>(
        a: &[T],
        shape: &[usize],
        rank: usize,
        iters: usize,
        seed: u64,
    ) -> (Owned<T>, Owned<T>, Owned<T>) {
        let out = svd_lowrank(rank, iters, seed, &[View::float(shape, a)]).unwrap();
        let mut it = out.into_iter();
        (it.next().unwrap(), it.next().unwrap(), it.next().unwrap())
    }

    /// `u diag(s) v^T` for one matrix, in f64.
    fn reconstruct<T: Real>(u: &[T], s: &[T], v: &[T], m: usize, n: usize) -> Vec<f64> {
        let q = s.len();
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..q)
                    .map(|p| u[i * q + p].to_f64() * s[p].to_f64() * v[j * q + p].to_f64())
                    .sum();
            }
        }
        out
    }

    /// max |x^T x - I| over the q columns of x [rows, q].
    fn ortho_err<T: Real>(x: &[T], rows: usize, q: usize) -> f64 {
        let mut worst = 0.0f64;
        for a in 0..q {
            for b in 0..q {
                let d: f64 = (0..rows)
                    .map(|i| x[i * q + a].to_f64() * x[i * q + b].to_f64())
                    .sum();
                let want = if a == b { 1.0 } else { 0.0 };
                worst = worst.max((d - want).abs());
            }
        }
        worst
    }

    fn max_rel_diff(got: &[f64], want: &[f64]) -> f64 {
        let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        got.iter()
            .zip(want)
            .fold(0.0f64, |m, (g, w)| m.max((g - w).abs()))
            / scale
    }

    fn gaussian(seed: u64, len: usize) -> Vec<f64> {
        let mut r = Rng::new(seed);
        (0..len).map(|_| r.normal_f64()).collect()
    }

    /// A random `[m, r]` x `[r, n]` product: rank exactly `r` (almost surely).
    fn low_rank(seed: u64, m: usize, n: usize, r: usize) -> Vec<f64> {
        let x = gaussian(seed, m * r);
        let y = gaussian(seed + 1, r * n);
        matmul(&x, &y, m, r, n)
    }

    /// Random orthonormal columns `[rows, k]` by classical Gram-Schmidt in f64 (written
    /// independently of the kernel's helper).
    fn random_orthonormal(seed: u64, rows: usize, k: usize) -> Vec<f64> {
        let g = gaussian(seed, rows * k);
        let mut cols: Vec<Vec<f64>> = Vec::new();
        for j in 0..k {
            let mut c: Vec<f64> = (0..rows).map(|i| g[i * k + j]).collect();
            for _ in 0..2 {
                for prev in &cols {
                    let d: f64 = c.iter().zip(prev).map(|(a, b)| a * b).sum();
                    c.iter_mut().zip(prev).for_each(|(a, b)| *a -= d * b);
                }
            }
            let nrm = c.iter().map(|a| a * a).sum::<f64>().sqrt();
            c.iter_mut().for_each(|a| *a /= nrm);
            cols.push(c);
        }
        let mut out = vec![0.0; rows * k];
        for (j, c) in cols.iter().enumerate() {
            for i in 0..rows {
                out[i * k + j] = c[i];
            }
        }
        out
    }

    /// `U diag(s) V^T` with known singular values `s` (descending).
    fn with_spectrum(seed: u64, m: usize, n: usize, s: &[f64]) -> Vec<f64> {
        let k = s.len();
        let u = random_orthonormal(seed, m, k);
        let v = random_orthonormal(seed + 7, n, k);
        reconstruct(&u, s, &v, m, n)
    }

    fn to_f32(x: &[f64]) -> Vec<f32> {
        x.iter().map(|&v| v as f32).collect()
    }

    #[test]
    fn diagonal_by_hand() {
        // a = [[3, 0], [0, -2]]: s = [3, 2]; u = I after the sign rule, so v = [[1, 0], [0, -1]].
        let (u, s, v) = svd(&[3.0f64, 0.0, 0.0, -2.0], &[2, 2], 2, 2, 0);
        assert_eq!(u.shape, vec![2, 2]);
        assert_eq!(s.shape, vec![2]);
        assert_eq!(v.shape, vec![2, 2]);
        let close =
            |got: &[f64], want: &[f64]| got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-12);
        assert!(close(s.floats(), &[3.0, 2.0]), "{:?}", s.floats());
        assert!(close(u.floats(), &[1.0, 0.0, 0.0, 1.0]), "{:?}", u.floats());
        assert!(
            close(v.floats(), &[1.0, 0.0, 0.0, -1.0]),
            "{:?}",
            v.floats()
        );
    }

    #[test]
    fn rank_one_by_hand() {
        // [[1, 1], [1, 1]] = 2 * (1, 1)/sqrt2 (1, 1)^T/sqrt2; the second value is 0.
        let (u, s, v) = svd(&[1.0f64, 1.0, 1.0, 1.0], &[2, 2], 2, 1, 3);
        let h = core::f64::consts::FRAC_1_SQRT_2;
        let s = s.floats();
        assert!((s[0] - 2.0).abs() < 1e-12 && s[1].abs() < 1e-12, "{s:?}");
        for (got, want) in [(u.floats(), [h, h]), (v.floats(), [h, h])] {
            assert!((got[0] - want[0]).abs() < 1e-12 && (got[2] - want[1]).abs() < 1e-12);
        }
        assert!(u.floats().iter().chain(v.floats()).all(|x| x.is_finite()));
        assert!(ortho_err(u.floats(), 2, 2) < 1e-12);
        assert!(ortho_err(v.floats(), 2, 2) < 1e-12);
    }

    #[test]
    fn jacobi_svd_by_hand() {
        // [[3, 0], [4, 5]]: a^T a = [[25, 20], [20, 25]], eigenvalues 45 and 5; its transpose
        // and its 1 x 4 / 4 x 1 flattenings (a single value, the Frobenius norm sqrt(50)) too.
        for (rows, cols, b) in [
            (2, 2, vec![3.0f64, 0.0, 4.0, 5.0]),
            (2, 2, vec![3.0f64, 4.0, 0.0, 5.0]),
        ] {
            let (u, s, v) = jacobi_svd(&b, rows, cols).unwrap();
            assert!((s[0] - 45f64.sqrt()).abs() < 1e-13, "{s:?}");
            assert!((s[1] - 5f64.sqrt()).abs() < 1e-13, "{s:?}");
            let r = reconstruct(&u, &s, &v, rows, cols);
            assert!(max_rel_diff(&r, &b) < 1e-14);
        }
        for (rows, cols) in [(1, 4), (4, 1)] {
            let (u, s, v) = jacobi_svd(&[3.0f64, 0.0, 4.0, 5.0], rows, cols).unwrap();
            assert!((s[0] - 50f64.sqrt()).abs() < 1e-13, "{s:?}");
            assert_eq!(u.len() + v.len(), 5);
        }
    }

    #[test]
    fn jacobi_svd_wide_tall_and_deficient() {
        for (rows, cols, r) in [(5, 9, 5), (9, 5, 5), (7, 7, 3), (1, 13, 1), (13, 1, 1)] {
            let b = low_rank(11, rows, cols, r);
            let (u, s, v) = jacobi_svd(&b, rows, cols).unwrap();
            let k = rows.min(cols);
            assert_eq!((u.len(), s.len(), v.len()), (rows * k, k, cols * k));
            assert!(s.windows(2).all(|w| w[0] >= w[1]), "not descending: {s:?}");
            assert!(max_rel_diff(&reconstruct(&u, &s, &v, rows, cols), &b) < 1e-13);
            assert!(ortho_err(&u, rows, k) < 1e-13, "{rows}x{cols}");
            assert!(ortho_err(&v, cols, k) < 1e-13, "{rows}x{cols}");
            for &x in &s[r..] {
                assert!(x < 1e-13 * s[0], "{rows}x{cols} rank {r}: {s:?}");
            }
            // Frobenius norm is the root of the sum of squared singular values.
            let fro: f64 = b.iter().map(|x| x * x).sum();
            let ss: f64 = s.iter().map(|x| x * x).sum();
            assert!((fro - ss).abs() < 1e-12 * fro);
        }
        assert!(matches!(
            jacobi_svd(&[1.0f64, 2.0, 3.0], 2, 2),
            Err(Error::BadShape { .. })
        ));
        assert!(matches!(
            jacobi_svd::<f64>(&[], 0, 3),
            Err(Error::Empty { .. })
        ));
    }

    #[test]
    fn exact_for_low_rank_inputs() {
        // (m, n, true rank, requested rank): m < n, m > n, 1 x n, n x 1, primes, rank > min.
        let cases = [
            (7, 13, 3, 3),
            (13, 7, 3, 5),
            (1, 13, 1, 4),
            (13, 1, 1, 2),
            (5, 5, 5, 10),
            (31, 17, 6, 6),
            (8, 8, 2, 8),
        ];
        for (m, n, r, rank) in cases {
            let a = low_rank(m as u64 * 100 + n as u64, m, n, r);
            let q = rank.min(m).min(n);
            for iters in [0, 2] {
                let (u, s, v) = svd(&a, &[m, n], rank, iters, 42);
                assert_eq!(u.shape, vec![m, q]);
                assert_eq!(s.shape, vec![q]);
                assert_eq!(v.shape, vec![n, q]);
                let rec = reconstruct(u.floats(), s.floats(), v.floats(), m, n);
                let e = max_rel_diff(&rec, &a);
                assert!(e < 1e-12, "f64 {m}x{n} r{r} q{q} it{iters}: {e}");
                assert!(ortho_err(u.floats(), m, q) < 1e-12, "u {m}x{n}");
                assert!(ortho_err(v.floats(), n, q) < 1e-12, "v {m}x{n}");
                assert!(s.floats().windows(2).all(|w| w[0] >= w[1]));

                let a32 = to_f32(&a);
                let (u, s, v) = svd(&a32, &[m, n], rank, iters, 42);
                let rec = reconstruct(u.floats(), s.floats(), v.floats(), m, n);
                let e = max_rel_diff(&rec, &a);
                assert!(e < 1e-5, "f32 {m}x{n} r{r} q{q} it{iters}: {e}");
                assert!(ortho_err(u.floats(), m, q) < 1e-5, "u32 {m}x{n}");
                assert!(ortho_err(v.floats(), n, q) < 1e-5, "v32 {m}x{n}");
                // Beyond the true rank, the singular values are rounding noise.
                for &x in &s.floats()[r.min(q)..] {
                    assert!(x < 1e-5 * s.floats()[0], "{m}x{n}: {:?}", s.floats());
                }
            }
        }
    }

    #[test]
    fn singular_values_of_a_decaying_spectrum() {
        // s_i = 0.5 * 10^(-i/2), ratio 0.316 per step. Randomized range finding with p power
        // iterations resolves s_j to about (s_q / s_j) * (s_{q+1} / s_q)^(2p+1) relative, so the
        // top values come out essentially exact and the last one of the q within ~1e-3.
        let (m, n, q) = (40, 29, 8);
        let spectrum: Vec<f64> = (0..20)
            .map(|i| 0.5 * 10f64.powf(-(i as f64) / 2.0))
            .collect();
        let a = with_spectrum(5, m, n, &spectrum);
        let rel = |s: &[f64]| -> Vec<f64> {
            s.iter()
                .zip(&spectrum)
                .map(|(g, w)| (g - w).abs() / w)
                .collect()
        };
        let (_, s, _) = svd(&a, &[m, n], q, 2, 9);
        let r = rel(s.floats());
        assert!(r[..6].iter().all(|&e| e < 1e-12), "f64: {r:?}");
        assert!(r.iter().all(|&e| e < 1e-5), "f64: {r:?}");
        let (_, s32, _) = svd(&to_f32(&a), &[m, n], q, 2, 9);
        let s32: Vec<f64> = s32.floats().iter().map(|&x| x as f64).collect();
        let r32 = rel(&s32);
        assert!(r32.iter().all(|&e| e < 5e-5), "f32: {r32:?}");
        // Without power iterations the tail is visibly worse (~1e-2 on the last value).
        let (_, s0, _) = svd(&a, &[m, n], q, 0, 9);
        let r0 = rel(s0.floats());
        assert!(
            r0[q - 1] > 1e-4 && r0[q - 1] < 1e-1,
            "no power iterations: {r0:?}"
        );
    }

    #[test]
    fn power_iterations_help_on_a_flat_spectrum() {
        // s_i = 0.9^i decays slowly: without power iterations the captured top value is
        // visibly off, with them it is close. (Guards that the iterations actually run.)
        let (m, n) = (60, 50);
        let spectrum: Vec<f64> = (0..50).map(|i| 0.9f64.powi(i)).collect();
        let a = with_spectrum(21, m, n, &spectrum);
        let err = |iters| {
            let (_, s, _) = svd(&a, &[m, n], 5, iters, 1);
            (0..5)
                .map(|i| (s.floats()[i] - spectrum[i]).abs() / spectrum[i])
                .fold(0.0f64, f64::max)
        };
        let (e0, e6) = (err(0), err(6));
        assert!(e6 < e0 / 4.0, "iters 0: {e0}, iters 6: {e6}");
    }

    #[test]
    fn deterministic_for_a_seed_and_seed_matters() {
        let a = to_f32(&with_spectrum(3, 20, 17, &[1.0, 0.9, 0.8, 0.7, 0.6, 0.5]));
        let (u1, s1, v1) = svd(&a, &[20, 17], 3, 1, 77);
        let (u2, s2, v2) = svd(&a, &[20, 17], 3, 1, 77);
        assert_eq!((&u1, &s1, &v1), (&u2, &s2, &v2));
        let (_, s3, _) = svd(&a, &[20, 17], 3, 1, 78);
        assert_ne!(s1, s3, "a different seed must give a different sketch here");
    }

    #[test]
    fn omega_follows_the_documented_rng_order() {
        let om = gaussian_omega::<f32>(12, 3, 2);
        let mut r = Rng::new(12);
        let want: Vec<f32> = (0..6).map(|_| r.normal_f64() as f32).collect();
        assert_eq!(om, want);
    }

    #[test]
    fn batched_equals_one_by_one() {
        let (m, n) = (7, 5);
        let a = to_f32(&gaussian(8, 2 * 3 * m * n));
        let (u, s, v) = svd(&a, &[2, 3, m, n], 3, 2, 4);
        assert_eq!(u.shape, vec![2, 3, m, 3]);
        assert_eq!(s.shape, vec![2, 3, 3]);
        assert_eq!(v.shape, vec![2, 3, n, 3]);
        for b in 0..6 {
            let (ub, sb, vb) = svd(&a[b * m * n..(b + 1) * m * n], &[m, n], 3, 2, 4);
            assert_eq!(&u.floats()[b * m * 3..(b + 1) * m * 3], ub.floats());
            assert_eq!(&s.floats()[b * 3..(b + 1) * 3], sb.floats());
            assert_eq!(&v.floats()[b * n * 3..(b + 1) * n * 3], vb.floats());
        }
    }

    #[test]
    fn sign_rule_holds() {
        let a = to_f32(&gaussian(30, 9 * 6));
        let (u, _, _) = svd(&a, &[9, 6], 4, 2, 0);
        let q = 4;
        for j in 0..q {
            let col: Vec<f32> = (0..9).map(|i| u.floats()[i * q + j]).collect();
            let big = col
                .iter()
                .fold(0.0f32, |b, &x| if x.abs() > b.abs() { x } else { b });
            assert!(big > 0.0, "column {j}: {col:?}");
        }
    }

    #[test]
    fn zero_matrix_and_extreme_scales() {
        let (u, s, v) = svd(&[0.0f32; 12], &[3, 4], 2, 2, 0);
        assert!(s.floats().iter().all(|&x| x == 0.0));
        assert!(ortho_err(u.floats(), 3, 2) < 1e-6 && ortho_err(v.floats(), 4, 2) < 1e-6);
        // Squared norms of these would overflow / underflow in f32 without the exact rescaling.
        let base = low_rank(2, 6, 5, 2);
        for scale in [1e30f64, 1e-30] {
            let a: Vec<f32> = base.iter().map(|&x| (x * scale) as f32).collect();
            let (u, s, v) = svd(&a, &[6, 5], 2, 2, 0);
            let want: Vec<f64> = a.iter().map(|&x| x as f64).collect();
            let rec = reconstruct(u.floats(), s.floats(), v.floats(), 6, 5);
            let e = max_rel_diff(&rec, &want);
            assert!(e < 1e-5, "scale {scale}: {e} {:?}", s.floats());
        }
    }

    #[test]
    fn orthonormalize_handles_dependent_and_zero_columns() {
        // Columns: x, 2x, 0, y -> four orthonormal columns, no NaN.
        let (rows, cols) = (5, 4);
        let x = [1.0f64, 2.0, 0.0, -1.0, 3.0];
        let y = [0.5f64, 0.0, 1.0, 1.0, -2.0];
        let mut m = vec![0.0; rows * cols];
        for i in 0..rows {
            m[i * cols] = x[i];
            m[i * cols + 1] = 2.0 * x[i];
            m[i * cols + 3] = y[i];
        }
        orthonormalize_columns(&mut m, rows, cols).unwrap();
        assert!(m.iter().all(|v| v.is_finite()));
        assert!(ortho_err(&m, rows, cols) < 1e-14);
        assert!(orthonormalize_columns(&mut m, 2, 10).is_err());
        let mut wide = vec![1.0f64; 6];
        assert!(matches!(
            orthonormalize_columns(&mut wide, 2, 3),
            Err(Error::BadShape { .. })
        ));
    }

    #[test]
    fn errors() {
        let bad = |shape: &[usize], data: &[f32], rank| {
            svd_lowrank(rank, 2, 0, &[View::float(shape, data)]).unwrap_err()
        };
        assert!(matches!(bad(&[0, 4], &[], 1), Error::Empty { op: OP, .. }));
        assert!(matches!(bad(&[3, 0], &[], 1), Error::Empty { op: OP, .. }));
        assert!(matches!(
            bad(&[3], &[1.0; 3], 1),
            Error::BadShape { op: OP, .. }
        ));
        assert!(matches!(
            bad(&[2, 2], &[1.0; 4], 0),
            Error::BadAttr { op: OP, .. }
        ));
        assert!(matches!(bad(&[2, 2], &[1.0; 3], 1), Error::BadShape { .. }));
        let mut a = [1.0f32; 6];
        a[4] = f32::NAN;
        match bad(&[2, 3], &a, 1) {
            Error::NonFinite { op, index, .. } => assert_eq!((op, index), (OP, 4)),
            e => panic!("{e:?}"),
        }
        a[4] = 1.0;
        a[1] = f32::NEG_INFINITY;
        match bad(&[2, 3], &a, 1) {
            Error::NonFinite { index, value, .. } => {
                assert_eq!(index, 1);
                assert_eq!(value, f64::NEG_INFINITY);
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn through_the_dispatcher() {
        let op = Op::SvdLowrank {
            rank: 2,
            power_iters: 1,
            seed: 5,
        };
        let a = to_f32(&low_rank(1, 4, 6, 2));
        let out = run::<f32>(&op, Direction::Forward, &[View::float(&[4, 6], &a)]).unwrap();
        assert_eq!(out.len(), 3);
        let direct = svd_lowrank(2, 1, 5, &[View::float(&[4, 6], &a)]).unwrap();
        assert_eq!(out, direct);
        assert!(matches!(
            run::<f32>(&op, Direction::Backward, &[View::float(&[4, 6], &a)]),
            Err(Error::NoBackward { .. })
        ));
    }
}
