// wasm-pack test runs these in the browser too.
use super::*;
use crate::cpu::run;
use crate::cpu::testutil::*;
use crate::op::{Direction, Op};
use crate::rng::Rng;
use alloc::vec::Vec;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn mm(ta: bool, tb: bool) -> Op {
    Op::Matmul {
        trans_a: ta,
        trans_b: tb,
    }
}

/// Textbook reference in f64 with explicit transposes, independent of `Gemm`.
fn naive(ta: bool, tb: bool, a: &(Vec<usize>, Vec<f64>), b: &(Vec<usize>, Vec<f64>)) -> Vec<f64> {
    let mat = |s: &[usize], d: &[f64], t: bool, bi: usize| -> Vec<Vec<f64>> {
        let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
        let base = if s.len() == 2 { 0 } else { bi * r * c };
        let m: Vec<Vec<f64>> = (0..r)
            .map(|i| (0..c).map(|j| d[base + i * c + j]).collect())
            .collect();
        if t {
            (0..c).map(|j| (0..r).map(|i| m[i][j]).collect()).collect()
        } else {
            m
        }
    };
    let batch: usize = if a.0.len() > 2 {
        a.0[..a.0.len() - 2].iter().product()
    } else {
        b.0[..b.0.len() - 2].iter().product()
    };
    let mut out = Vec::new();
    for bi in 0..batch {
        let x = mat(&a.0, &a.1, ta, bi);
        let y = mat(&b.0, &b.1, tb, bi);
        for row in &x {
            for j in 0..y[0].len() {
                out.push(row.iter().zip(&y).map(|(x, yr)| x * yr[j]).sum());
            }
        }
    }
    out
}

#[test]
fn two_by_two_by_hand() {
    // [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]]
    let a = [1.0f32, 2.0, 3.0, 4.0];
    let b = [5.0f32, 6.0, 7.0, 8.0];
    let s = [2usize, 2];
    let out = run(
        &mm(false, false),
        Direction::Forward,
        &[View::float(&s, &a), View::float(&s, &b)],
    )
    .unwrap();
    assert_eq!(out[0].shape, vec![2, 2]);
    assert_eq!(out[0].floats(), &[19.0, 22.0, 43.0, 50.0]);
    // a^T @ b = [[1,3],[2,4]] @ [[5,6],[7,8]] = [[26,30],[38,44]]
    let out = run(
        &mm(true, false),
        Direction::Forward,
        &[View::float(&s, &a), View::float(&s, &b)],
    )
    .unwrap();
    assert_eq!(out[0].floats(), &[26.0, 30.0, 38.0, 44.0]);
    // a @ b^T = [[1,2],[3,4]] @ [[5,7],[6,8]] = [[17,23],[39,53]]
    let out = run(
        &mm(false, true),
        Direction::Forward,
        &[View::float(&s, &a), View::float(&s, &b)],
    )
    .unwrap();
    assert_eq!(out[0].floats(), &[17.0, 23.0, 39.0, 53.0]);
}

#[test]
fn backward_by_hand() {
    // out = a @ b with grad_out = ones: grad_a = ones @ b^T (row sums of b),
    // grad_b = a^T @ ones (column sums of a, repeated).
    let a = [1.0f64, 2.0, 3.0, 4.0];
    let b = [5.0f64, 6.0, 7.0, 8.0];
    let s = [2usize, 2];
    let ones = [1.0f64; 4];
    let out = [19.0f64, 22.0, 43.0, 50.0];
    let g = run(
        &mm(false, false),
        Direction::Backward,
        &[
            View::float(&s, &a),
            View::float(&s, &b),
            View::float(&s, &out),
            View::float(&s, &ones),
        ],
    )
    .unwrap();
    assert_eq!(g[0].floats(), &[11.0, 15.0, 11.0, 15.0]);
    assert_eq!(g[1].floats(), &[4.0, 4.0, 6.0, 6.0]);
}

#[test]
fn awkward_shapes_and_trans_flags_match_naive() {
    let mut rng = Rng::new(7);
    for &(m, k, n) in &[(1, 1, 1), (1, 7, 1), (7, 13, 1), (13, 7, 7), (3, 1, 13)] {
        for ta in [false, true] {
            for tb in [false, true] {
                for batch in [None, Some(vec![3]), Some(vec![2, 3])] {
                    let lead = batch.clone().unwrap_or_default();
                    let mut sa = lead.clone();
                    sa.extend(if ta { [k, m] } else { [m, k] });
                    let mut sb = lead.clone();
                    sb.extend(if tb { [n, k] } else { [k, n] });
                    let a = (sa.clone(), rand_vec(&mut rng, sa.iter().product()));
                    let b = (sb.clone(), rand_vec(&mut rng, sb.iter().product()));
                    let out = run_as::<f64>(&mm(ta, tb), &[a.clone(), b.clone()]);
                    let mut want_shape = lead.clone();
                    want_shape.extend([m, n]);
                    assert_eq!(out[0].shape, want_shape);
                    assert_close(out[0].floats(), &naive(ta, tb, &a, &b), 1e-12, 1e-12);
                }
            }
        }
    }
}

#[test]
fn broadcast_shared_2d_operand() {
    let mut rng = Rng::new(11);
    for ta in [false, true] {
        for tb in [false, true] {
            // b shared: a [3, 5, 7] (or [3, 7, 5]), b [7, 2] (or [2, 7]).
            let sa = if ta { vec![3, 7, 5] } else { vec![3, 5, 7] };
            let sb = if tb { vec![2, 7] } else { vec![7, 2] };
            let a = (sa.clone(), rand_vec(&mut rng, 105));
            let b = (sb.clone(), rand_vec(&mut rng, 14));
            let out = run_as::<f64>(&mm(ta, tb), &[a.clone(), b.clone()]);
            assert_eq!(out[0].shape, vec![3, 5, 2]);
            assert_close(out[0].floats(), &naive(ta, tb, &a, &b), 1e-12, 1e-12);
            // a shared: a [5, 7] (or [7, 5]), b [2, 3, 7, 2] (or [2, 3, 2, 7]).
            let sa2 = if ta { vec![7, 5] } else { vec![5, 7] };
            let sb2 = if tb {
                vec![2, 3, 2, 7]
            } else {
                vec![2, 3, 7, 2]
            };
            let a2 = (sa2, rand_vec(&mut rng, 35));
            let b2 = (sb2, rand_vec(&mut rng, 84));
            let out = run_as::<f64>(&mm(ta, tb), &[a2.clone(), b2.clone()]);
            assert_eq!(out[0].shape, vec![2, 3, 5, 2]);
            assert_close(out[0].floats(), &naive(ta, tb, &a2, &b2), 1e-12, 1e-12);
        }
    }
}

#[test]
fn shared_operand_grad_is_batch_sum() {
    // grad of a shared b equals the sum of the per-batch grads of b.
    let mut rng = Rng::new(5);
    let a = rand_vec(&mut rng, 3 * 2 * 4);
    let b = rand_vec(&mut rng, 4 * 3);
    let g = rand_vec(&mut rng, 3 * 2 * 3);
    let out = vec![0.0; 18];
    let grads = run(
        &mm(false, false),
        Direction::Backward,
        &[
            View::float(&[3, 2, 4], &a),
            View::float(&[4, 3], &b),
            View::float(&[3, 2, 3], &out),
            View::float(&[3, 2, 3], &g),
        ],
    )
    .unwrap();
    assert_eq!(grads[1].shape, vec![4, 3]);
    let mut want = vec![0.0; 12];
    for bi in 0..3 {
        let gb = run(
            &mm(false, false),
            Direction::Backward,
            &[
                View::float(&[2, 4], &a[bi * 8..bi * 8 + 8]),
                View::float(&[4, 3], &b),
                View::float(&[2, 3], &out[..6]),
                View::float(&[2, 3], &g[bi * 6..bi * 6 + 6]),
            ],
        )
        .unwrap();
        for (w, x) in want.iter_mut().zip(gb[1].floats()) {
            *w += x;
        }
    }
    assert_close(grads[1].floats(), &want, 1e-12, 1e-12);
}

#[test]
fn backward_matches_finite_differences() {
    let mut rng = Rng::new(3);
    let cases: &[(Vec<usize>, Vec<usize>, bool, bool)] = &[
        (vec![2, 3], vec![3, 4], false, false),
        (vec![3, 2], vec![3, 4], true, false),
        (vec![2, 3], vec![4, 3], false, true),
        (vec![3, 2], vec![4, 3], true, true),
        (vec![1, 1], vec![1, 1], false, false),
        (vec![3, 2, 7], vec![3, 7, 1], false, false),
        (vec![3, 7, 2], vec![3, 1, 7], true, true),
        (vec![2, 2, 5, 3], vec![3, 2], false, false),
        (vec![2, 5, 3], vec![2, 3], false, true),
        (vec![3, 5], vec![2, 3, 3, 4], true, false),
        (vec![5, 3], vec![3, 4, 3], false, true),
    ];
    for (i, (sa, sb, ta, tb)) in cases.iter().enumerate() {
        let a = (sa.clone(), rand_vec(&mut rng, sa.iter().product()));
        let b = (sb.clone(), rand_vec(&mut rng, sb.iter().product()));
        grad_check(&mm(*ta, *tb), &[a, b], 100 + i as u64);
    }
}

#[test]
fn f32_agrees_with_f64() {
    let mut rng = Rng::new(9);
    let a = (vec![3, 13, 64], rand_vec(&mut rng, 3 * 13 * 64));
    let b = (vec![64, 7], rand_vec(&mut rng, 64 * 7));
    let lo = run_as::<f32>(&mm(false, false), &[a.clone(), b.clone()]);
    let hi = run_as::<f64>(&mm(false, false), &[a, b]);
    assert_close(lo[0].floats(), hi[0].floats(), 1e-5, 1e-5);
}

#[test]
fn matmul_slices_matches_op_and_checks_lengths() {
    let mut rng = Rng::new(2);
    // op(a) = a^T: a stored [7, 5], so m = 5, k = 7; b [7, 3].
    let a = rand_vec(&mut rng, 7 * 5);
    let b = rand_vec(&mut rng, 7 * 3);
    let got = matmul_slices(&a, &b, 5, 7, 3, true, false).unwrap();
    let op = run_as::<f64>(
        &mm(true, false),
        &[(vec![7, 5], a.clone()), (vec![7, 3], b.clone())],
    );
    assert_eq!(got.as_slice(), op[0].floats(), "bit-identical to the op");
    assert!(matmul_slices(&a, &b, 5, 7, 4, true, false).is_err());
    assert!(matmul_slices(&a[..34], &b, 5, 7, 3, true, false).is_err());
    assert!(matches!(
        matmul_slices::<f64>(&[], &[], usize::MAX, 0, 2, false, false),
        Err(Error::LimitExceeded { .. })
    ));
    // k = 0 is an empty sum: zeros.
    assert_eq!(
        matmul_slices::<f64>(&[], &[], 2, 0, 3, false, false).unwrap(),
        vec![0.0; 6]
    );
}

#[test]
fn errors_name_shapes() {
    let x = [0.0f32; 12];
    let e = run(
        &mm(false, false),
        Direction::Forward,
        &[View::float(&[3, 4], &x), View::float(&[3, 4], &x)],
    )
    .unwrap_err();
    assert_eq!(e, Error::mismatch("matmul", &[3, 4], &[3, 4]));
    // Fine once b is transposed.
    assert!(
        run(
            &mm(false, true),
            Direction::Forward,
            &[View::float(&[3, 4], &x), View::float(&[3, 4], &x)],
        )
        .is_ok()
    );
    // Batch dims that differ and neither side 2-D.
    let y = [0.0f32; 24];
    let e = run(
        &mm(false, false),
        Direction::Forward,
        &[View::float(&[2, 3, 4], &y), View::float(&[3, 4, 2], &y)],
    )
    .unwrap_err();
    assert_eq!(e, Error::mismatch("matmul", &[2, 3, 4], &[3, 4, 2]));
    // Rank 1.
    let e = run(
        &mm(false, false),
        Direction::Forward,
        &[View::float(&[12], &x), View::float(&[3, 4], &x)],
    )
    .unwrap_err();
    assert!(matches!(e, Error::BadShape { op: "matmul", .. }), "{e:?}");
    // Empty.
    let e = run(
        &mm(false, false),
        Direction::Forward,
        &[View::float(&[0, 4], &[]), View::float(&[4, 2], &x[..8])],
    )
    .unwrap_err();
    assert!(matches!(e, Error::Empty { op: "matmul", .. }), "{e:?}");
    // Backward with a grad_out of the wrong shape.
    let e = run(
        &mm(false, false),
        Direction::Backward,
        &[
            View::float(&[3, 4], &x),
            View::float(&[4, 3], &x),
            View::float(&[3, 3], &x[..9]),
            View::float(&[9], &x[..9]),
        ],
    )
    .unwrap_err();
    assert_eq!(e, Error::mismatch("matmul", &[3, 3], &[9]));
}
