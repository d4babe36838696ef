// wasm-pack test runs these in the browser too.
use super::*;
use crate::cpu::testutil::*;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use crate::gradcheck::{Options, check_op};

use crate::op::Direction;
use crate::rng::Rng;

fn loss(op: Op, args: &[&Owned<f64>]) -> f64 {
    let y = run(op, Direction::Forward, args).unwrap();
    assert_eq!(y[0].shape, Vec::<usize>::new(), "losses are rank-0");
    y[0].floats()[0]
}
fn close(got: f64, want: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol * (1. + want.abs()),
        "{got} vs {want}"
    );
}
const CE: Op = Op::CrossEntropy;

#[test]
fn cross_entropy_by_hand() {
    // Uniform logits: ln(c) whatever the target.
    let x = t(&[2, 2], &[0., 0., 5., 5.]);
    close(loss(CE, &[&x, &ints(&[2], &[0, 1])]), 2f64.ln(), 1e-15);
    // -log_softmax([1, 2, 3])[2], also as rank-1 logits with a rank-0 target.
    let want = 0.4076059644443806;
    close(
        loss(CE, &[&t(&[1, 3], &[1., 2., 3.]), &ints(&[1], &[2])]),
        want,
        1e-15,
    );
    close(
        loss(CE, &[&t(&[3], &[1., 2., 3.]), &ints(&[], &[2])]),
        want,
        1e-15,
    );
    // Mean over rows: (2.4076... + 0.4076...) / 2.
    let x = t(&[2, 3], &[1., 2., 3., 1., 2., 3.]);
    close(
        loss(CE, &[&x, &ints(&[2], &[0, 2])]),
        (2.4076059644443806 + want) / 2.,
        1e-15,
    );
    // [2, 3, c] logits with [2, 3] targets: all rows uniform over 5 classes.
    let x = t(&[2, 3, 5], &[0.; 30]);
    close(
        loss(CE, &[&x, &ints(&[2, 3], &[0, 1, 2, 3, 4, 0])]),
        5f64.ln(),
        1e-15,
    );
    // One class: loss 0.
    close(
        loss(CE, &[&t(&[3, 1], &[7., -1., 0.]), &ints(&[3], &[0; 3])]),
        0.,
        0.,
    );
}

#[test]
fn cross_entropy_is_stable_for_large_logits() {
    let x = t(&[2, 3], &[1001., 1002., 1003., -1e30, 0., -1e30]);
    let targets = ints(&[2], &[2, 1]);
    close(loss(CE, &[&x, &targets]), 0.4076059644443806 / 2., 1e-12);
    let y = run(CE, Direction::Forward, &[&narrow(&x), &narrow(&targets)]).unwrap();
    close(y[0].floats()[0] as f64, 0.4076059644443806 / 2., 1e-6);
    // The target at -inf-like logit: a huge but finite loss, no NaN.
    let l = loss(CE, &[&t(&[2], &[-1e30, 0.]), &ints(&[], &[0])]);
    close(l, 1e30, 1e-12);
    // NaN logits propagate.
    assert!(loss(CE, &[&t(&[2], &[f64::NAN, 0.]), &ints(&[], &[1])]).is_nan());
}

#[test]
fn cross_entropy_backward_by_hand() {
    let x = t(&[2, 2], &[0., 0., 0., 0.]);
    let tgt = ints(&[2], &[0, 1]);
    let y = run(
        CE,
        Direction::Backward,
        &[&x, &tgt, &t(&[], &[0.]), &t(&[], &[2.])],
    )
    .unwrap();
    // (softmax - onehot) * 2 / 2.
    assert_eq!(y.len(), 1);
    assert_eq!(y[0].shape, [2, 2]);
    assert_eq!(y[0].floats(), [-0.5, 0.5, 0.5, -0.5]);
}

#[test]
fn cross_entropy_gradcheck() {
    let mut rng = Rng::new(3);
    for (i, shape) in [
        &[2usize, 3, 5][..],
        &[1, 13],
        &[7],
        &[13, 1],
        &[1, 1],
        &[7, 13],
    ]
    .into_iter()
    .enumerate()
    {
        let (lead, c) = shape.split_at(shape.len() - 1);
        let n: usize = lead.iter().product();
        let targets: Vec<i32> = (0..n).map(|_| rng.below(c[0] as u64) as i32).collect();
        let x = rand(i as u64, shape, -4., 4.);
        let tgt = ints(lead, &targets);
        let r = check_op(&CE, &[x.clone(), tgt.clone()], Options::default()).unwrap();
        assert!(r.pass(), "{shape:?}: {r:?}");
        f32_matches_f64(CE, &[&x, &tgt], 1e-7, 1e-6);
    }
}

#[test]
fn cross_entropy_errors() {
    let x = t(&[2, 3], &[0.; 6]);
    for bad in [3, -1, -100] {
        let e = run(CE, Direction::Forward, &[&x, &ints(&[2], &[0, bad])]).unwrap_err();
        assert_eq!(
            e,
            Error::IndexOutOfRange {
                op: "cross_entropy",
                tensor: "targets".into(),
                index: bad as i64,
                bound: 3
            }
        );
    }
    for st in [&[3usize][..], &[2, 1], &[1], &[]] {
        let n: usize = st.iter().product();
        let e = run(CE, Direction::Forward, &[&x, &ints(st, &vec![0; n])]).unwrap_err();
        assert_eq!(e, Error::mismatch("cross_entropy", st, &[2]), "{st:?}");
    }
    let e = run(CE, Direction::Forward, &[&t(&[], &[1.]), &ints(&[], &[0])]).unwrap_err();
    assert!(matches!(e, Error::BadShape { .. }), "{e:?}");
    let e = run(
        CE,
        Direction::Forward,
        &[&t(&[2, 0], &[]), &ints(&[2], &[0, 0])],
    )
    .unwrap_err();
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");
    let e = run(
        CE,
        Direction::Forward,
        &[&t(&[0, 3], &[]), &ints(&[0], &[])],
    )
    .unwrap_err();
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");
    // Float targets: dtype error.
    let e = run(CE, Direction::Forward, &[&x, &t(&[2], &[0., 1.])]).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e:?}");
    // grad_out must be rank-0.
    let s = t(&[], &[0.]);
    let g1 = t(&[1], &[1.]);
    let e = run(
        CE,
        Direction::Backward,
        &[&x, &ints(&[2], &[0, 1]), &s, &g1],
    )
    .unwrap_err();
    assert_eq!(e, Error::mismatch("cross_entropy", &[1], &[]));
}

#[test]
fn mse_by_hand() {
    let a = t(&[3], &[1., 2., 3.]);
    let b = t(&[3], &[1., 0., 0.]);
    close(loss(Op::Mse, &[&a, &b]), 13. / 3., 1e-15);
    let s = t(&[], &[0.]);
    let g = t(&[], &[1.5]);
    let d = run(Op::Mse, Direction::Backward, &[&a, &b, &s, &g]).unwrap();
    // 2 (a - b) * 1.5 / 3 = (a - b).
    assert_eq!(d[0].floats(), [0., 2., 3.]);
    assert_eq!(d[1].floats(), [-0., -2., -3.]);
    assert_eq!(d[1].shape, [3]);
    // Rank-0 inputs.
    close(loss(Op::Mse, &[&t(&[], &[2.]), &t(&[], &[-1.])]), 9., 0.);
}

#[test]
fn mse_gradcheck_and_errors() {
    for (i, shape) in [&[2usize, 3, 5][..], &[1], &[7], &[13, 7]]
        .into_iter()
        .enumerate()
    {
        let a = rand(i as u64, shape, -2., 2.);
        let b = rand(i as u64 + 50, shape, -2., 2.);
        let r = check_op(&Op::Mse, &[a.clone(), b.clone()], Options::default()).unwrap();
        assert!(r.pass(), "{shape:?}: {r:?}");
        f32_matches_f64(Op::Mse, &[&a, &b], 1e-7, 1e-6);
    }
    let a = t(&[2, 3], &[0.; 6]);
    let e = run(Op::Mse, Direction::Forward, &[&a, &t(&[3], &[0.; 3])]).unwrap_err();
    assert_eq!(e, Error::mismatch("mse", &[2, 3], &[3]));
    let e = run(Op::Mse, Direction::Forward, &[&t(&[0], &[]), &t(&[0], &[])]).unwrap_err();
    assert!(matches!(e, Error::Empty { op: "mse", .. }), "{e:?}");
    let g = t(&[2, 3], &[0.; 6]);
    let e = run(Op::Mse, Direction::Backward, &[&a, &a, &t(&[], &[0.]), &g]).unwrap_err();
    assert_eq!(e, Error::mismatch("mse", &[2, 3], &[]));
}
