// wasm-pack test runs these in the browser too.
use super::*;
use crate::cpu;
use crate::cpu::testutil::*;
use crate::error::Error;
use crate::gradcheck::{Options, check_op};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use crate::op::Direction;

fn fwd(op: Op, x: &Owned<f64>) -> Vec<f64> {
    run(op, Direction::Forward, &[x]).unwrap()[0]
        .floats()
        .to_vec()
}
fn ops(causal: bool) -> [Op; 2] {
    [Op::Softmax { causal }, Op::LogSoftmax { causal }]
}

#[test]
fn softmax_by_hand() {
    let x = t(&[2, 3], &[1., 2., 3., 0., 0., 0.]);
    let y = fwd(Op::Softmax { causal: false }, &x);
    let third = 1. / 3.;
    close(
        &y,
        &[
            0.09003057317038046,
            0.24472847105479767,
            0.6652409557748219,
            third,
            third,
            third,
        ],
        1e-15,
    );
    let l = fwd(Op::LogSoftmax { causal: false }, &x);
    let ln3 = 3f64.ln();
    close(
        &l,
        &[
            -2.4076059644443806,
            -1.4076059644443806,
            -0.4076059644443806,
            -ln3,
            -ln3,
            -ln3,
        ],
        1e-15,
    );
    // Rank 1 and a single element.
    assert_eq!(fwd(Op::Softmax { causal: false }, &t(&[1], &[-7.])), [1.]);
    assert_eq!(
        fwd(Op::LogSoftmax { causal: false }, &t(&[1], &[-7.])),
        [0.]
    );
}

#[test]
fn large_inputs_do_not_overflow() {
    let x = t(&[3], &[1000., 1001., 1002.]);
    let x32 = narrow(&x);
    for op in ops(false) {
        let y64 = fwd(op, &x);
        let y = run(op, Direction::Forward, &[&x32]).unwrap();
        let y32: Vec<f64> = y[0].floats().iter().map(|&v| v as f64).collect();
        let want = fwd(op, &t(&[3], &[1., 2., 3.]));
        close(&y64, &want, 1e-12);
        close(&y32, &want, 1e-6);
    }
    // -1e30 next to 0: the small one underflows to exactly 0, no NaN.
    let y = fwd(Op::Softmax { causal: false }, &t(&[2], &[-1e30, 0.]));
    assert_eq!(y, [0., 1.]);
}

#[test]
fn nan_and_infinities_follow_pytorch() {
    let x = t(&[2, 3], &[1., f64::NAN, 2., 0., f64::NEG_INFINITY, 0.]);
    for op in ops(false) {
        let y = fwd(op, &x);
        assert!(y[..3].iter().all(|v| v.is_nan()), "{op}: {y:?}");
    }
    assert_eq!(fwd(Op::Softmax { causal: false }, &x)[3..], [0.5, 0., 0.5]);
    let l = fwd(Op::LogSoftmax { causal: false }, &x);
    assert_eq!(l[4], f64::NEG_INFINITY);
    close(&[l[3], l[5]], &[-2f64.ln(), -2f64.ln()], 1e-15);
}

#[test]
fn causal_square_and_rectangular_masks() {
    // s = t = 3: lower triangle.
    let x = t(&[3, 3], &[1., 5., 5., 1., 1., 5., 1., 1., 1.]);
    let y = fwd(Op::Softmax { causal: true }, &x);
    let third = 1. / 3.;
    close(&y, &[1., 0., 0., 0.5, 0.5, 0., third, third, third], 1e-15);
    let l = fwd(Op::LogSoftmax { causal: true }, &x);
    let ninf = f64::NEG_INFINITY;
    let (h, th) = (-2f64.ln(), -3f64.ln());
    close(&l, &[0., ninf, ninf, h, h, ninf, th, th, th], 1e-15);
    // s = 2 < t = 4: row 0 sees keys 0..=2, row 1 sees all four.
    let x = t(&[2, 4], &[0.; 8]);
    let y = fwd(Op::Softmax { causal: true }, &x);
    close(
        &y,
        &[third, third, third, 0., 0.25, 0.25, 0.25, 0.25],
        1e-15,
    );
    // s = 3 > t = 2: row 0 sees nothing (all zeros / all -inf), row 1 key 0, row 2 both.
    let x = t(&[3, 2], &[4., 4., 4., 4., 4., 4.]);
    assert_eq!(
        fwd(Op::Softmax { causal: true }, &x),
        [0., 0., 1., 0., 0.5, 0.5]
    );
    let l = fwd(Op::LogSoftmax { causal: true }, &x);
    close(&l, &[ninf, ninf, 0., ninf, h, h], 1e-15);
    // The mask repeats per matrix of a batch [2, 3, 2]: same result twice.
    let xb = t(&[2, 3, 2], &[4.; 12]);
    let yb = fwd(Op::Softmax { causal: true }, &xb);
    assert_eq!(yb[..6], yb[6..]);
    assert_eq!(yb[..6], [0., 0., 1., 0., 0.5, 0.5]);
    // Masked entries ignore their inputs entirely (NaN and inf included).
    let x = t(&[2, 2], &[1., f64::NAN, 1., 1.]);
    assert_eq!(fwd(Op::Softmax { causal: true }, &x), [1., 0., 0.5, 0.5]);
}

#[test]
fn fully_masked_rows_have_zero_gradient() {
    let x = rand(1, &[3, 2], -1., 1.);
    let g = rand(2, &[3, 2], -1., 1.);
    for op in ops(true) {
        let y = run(op, Direction::Forward, &[&x]).unwrap();
        let d = run(op, Direction::Backward, &[&x, &y[0], &g]).unwrap();
        let d = d[0].floats();
        assert_eq!(d[..2], [0., 0.], "{op}");
        // Row 1 sees a single key: softmax is constant 1 there, so its gradient is 0, and
        // the masked key gets 0 too.
        assert_eq!(d[2..4], [0., 0.], "{op}");
        assert!(d[4] != 0. && d[5] != 0.);
    }
}

#[test]
fn backward_by_hand() {
    // y = [1/2, 1/2], dy = [1, 0]: softmax grad = y (dy - 1/2) = [1/4, -1/4].
    let x = t(&[2], &[0., 0.]);
    let dy = t(&[2], &[1., 0.]);
    let op = Op::Softmax { causal: false };
    let y = run(op, Direction::Forward, &[&x]).unwrap();
    let d = run(op, Direction::Backward, &[&x, &y[0], &dy]).unwrap();
    close(d[0].floats(), &[0.25, -0.25], 1e-15);
    // log-softmax grad = dy - p sum(dy) = [1 - 1/2, 0 - 1/2].
    let op = Op::LogSoftmax { causal: false };
    let y = run(op, Direction::Forward, &[&x]).unwrap();
    let d = run(op, Direction::Backward, &[&x, &y[0], &dy]).unwrap();
    close(d[0].floats(), &[0.5, -0.5], 1e-15);
}

#[test]
fn gradcheck_every_variant() {
    let opts = Options::default();
    let shapes: [&[usize]; 7] = [&[2, 3, 5], &[1], &[7], &[13], &[1, 1], &[2, 4, 3], &[7, 13]];
    for (i, shape) in shapes.into_iter().enumerate() {
        let x = rand(i as u64, shape, -3., 3.);
        for op in ops(false) {
            let r = check_op(&op, core::slice::from_ref(&x), opts).unwrap();
            assert!(r.pass(), "{op} {shape:?}: {r:?}");
        }
    }
    // Causal softmax through the shared checker, every geometry (t < s included).
    let causal: [&[usize]; 6] = [
        &[2, 3, 5],
        &[1, 7, 7],
        &[3, 3],
        &[2, 3, 4],
        &[1, 1],
        &[2, 5, 3],
    ];
    for (i, shape) in causal.into_iter().enumerate() {
        let x = rand(i as u64 + 20, shape, -3., 3.);
        let op = Op::Softmax { causal: true };
        let r = check_op(&op, core::slice::from_ref(&x), opts).unwrap();
        assert!(r.pass(), "{op} {shape:?}: {r:?}");
        // Causal log-softmax has constant -inf outputs, which poison the shared checker's
        // weighted sum: check it here against the sum over the finite outputs only.
        masked_log_softmax_fd(&x);
    }
}

/// Central differences of `L = sum w * y` over the finite outputs of causal log-softmax.
fn masked_log_softmax_fd(x: &Owned<f64>) {
    let op = Op::LogSoftmax { causal: true };
    let w = rand(7, &x.shape, -1., 1.);
    let loss = |x: &Owned<f64>| -> f64 {
        let y = fwd(op, x);
        y.iter()
            .zip(w.floats())
            .filter(|(y, _)| y.is_finite())
            .map(|(y, w)| y * w)
            .sum()
    };
    let y = run(op, Direction::Forward, &[x]).unwrap();
    let g = run(op, Direction::Backward, &[x, &y[0], &w]).unwrap();
    let eps = 1e-6;
    for (i, &analytic) in g[0].floats().iter().enumerate() {
        let mut p = x.clone();
        let mut m = x.clone();
        if let (cpu::OwnedData::Float(pv), cpu::OwnedData::Float(mv)) = (&mut p.data, &mut m.data) {
            pv[i] += eps;
            mv[i] -= eps;
        }
        let numeric = (loss(&p) - loss(&m)) / (2. * eps);
        assert!(
            (analytic - numeric).abs() <= 1e-6 + 1e-3 * numeric.abs(),
            "log_softmax causal {:?} at {i}: {analytic} vs {numeric}",
            x.shape
        );
    }
}

#[test]
fn f32_agrees_with_f64() {
    for (i, shape) in [&[2usize, 3, 5][..], &[13], &[7, 13], &[3, 5, 2]]
        .into_iter()
        .enumerate()
    {
        let x = rand(i as u64 + 50, shape, -5., 5.);
        for op in ops(false) {
            f32_matches_f64(op, &[&x], 1e-7, 2e-6);
        }
        if shape.len() >= 2 {
            for op in ops(true) {
                f32_matches_f64(op, &[&x], 1e-7, 2e-6);
            }
        }
    }
}

#[test]
fn shape_errors() {
    let scalar = t(&[], &[1.]);
    for op in ops(false) {
        let e = run(op, Direction::Forward, &[&scalar]).unwrap_err();
        assert!(matches!(e, Error::BadShape { .. }), "{op}: {e:?}");
    }
    let row = t(&[3], &[1.; 3]);
    for op in ops(true) {
        let e = run(op, Direction::Forward, &[&row]).unwrap_err();
        assert!(
            matches!(&e, Error::BadShape { op: "softmax" | "log_softmax", shape, .. } if shape == &[3]),
            "{e:?}"
        );
    }
    let empty = t(&[2, 0], &[]);
    for op in ops(false).into_iter().chain(ops(true)) {
        let e = run(op, Direction::Forward, &[&empty]).unwrap_err();
        assert!(matches!(e, Error::Empty { .. }), "{op}: {e:?}");
    }
    let x = t(&[2, 3], &[0.; 6]);
    let bad = t(&[3, 2], &[0.; 6]);
    let e = run(
        Op::Softmax { causal: false },
        Direction::Backward,
        &[&x, &x, &bad],
    )
    .unwrap_err();
    assert_eq!(e, Error::mismatch("softmax", &[3, 2], &[2, 3]));
    let e = run(
        Op::LogSoftmax { causal: true },
        Direction::Backward,
        &[&x, &bad, &x],
    )
    .unwrap_err();
    assert_eq!(e, Error::mismatch("log_softmax", &[3, 2], &[2, 3]));
}
