// wasm-pack test runs these in the browser too.
use super::*;
use crate::cpu::run;
use crate::op::{Direction, Op};
use alloc::string::ToString;
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
    // (m, n, true rank, requested rank): m < n, m > n, 1 x n, n x 1, primes, rank = min.
    let cases = [
        (7, 13, 3, 3),
        (13, 7, 3, 5),
        (1, 13, 1, 1),
        (13, 1, 1, 1),
        (5, 5, 5, 5),
        (31, 17, 6, 6),
        (8, 8, 2, 8),
    ];
    for (m, n, r, rank) in cases {
        let a = low_rank(m as u64 * 100 + n as u64, m, n, r);
        let q = rank;
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

/// A rank above `min(m, n)` and more than 64 power iterations are errors naming the op and the
/// value (they were clamped in silence: issue 15, defect 5).
#[test]
fn rank_above_min_m_n_and_too_many_power_iters_are_named_errors() {
    let a = to_f32(&low_rank(1, 4, 6, 2));
    let x = [View::float(&[4, 6], &a)];
    let bad_attr = |r: Result<Vec<Owned<f32>>>| match r {
        Err(e @ Error::BadAttr { .. }) => e,
        other => panic!("{other:?}"),
    };
    let e = bad_attr(svd_lowrank(1 << 30, 2, 0, &x));
    let msg = e.to_string();
    assert!(
        msg.contains("svd_lowrank") && msg.contains("rank") && msg.contains("1073741824"),
        "{msg}"
    );
    assert!(msg.contains("[1, 4]"), "{msg}");
    let e = bad_attr(svd_lowrank(5, 2, 0, &x));
    assert!(e.to_string().contains('5'), "{e}");
    assert!(svd_lowrank(4, 2, 0, &x).is_ok());
    // Rejected before any iteration runs (1e9 iterations would take hours).
    let e = bad_attr(svd_lowrank(2, 1_000_000_000, 0, &x));
    let msg = e.to_string();
    assert!(
        msg.contains("svd_lowrank") && msg.contains("power_iters") && msg.contains("1000000000"),
        "{msg}"
    );
    assert!(svd_lowrank(2, MAX_POWER_ITERS, 0, &x).is_ok());
    // The attribute parser says the same instead of clamping to 64.
    let kind = crate::op::OpKind::SvdLowrank;
    let e = Op::from_attrs(kind, &[("rank", "2"), ("power_iters", "1000000000")]).unwrap_err();
    assert!(e.to_string().contains("1000000000"), "{e}");
    assert!(Op::from_attrs(kind, &[("rank", "2"), ("power_iters", "64")]).is_ok());
}
