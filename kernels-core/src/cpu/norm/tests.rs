// wasm-pack test runs these in the browser too.
use super::*;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use crate::cpu::testutil::*;
use crate::gradcheck::{Options, check_op};

use crate::op::Direction;

const LN: Op = Op::LayerNorm {
    eps: crate::op::LAYER_NORM_EPS,
};
const RMS: Op = Op::RmsNorm {
    eps: crate::op::RMS_NORM_EPS,
};

#[test]
fn layer_norm_by_hand() {
    // [1, 2, 3]: mean 2, biased var 2/3, so xhat = [-1, 0, 1] * sqrt(3/2).
    let k = 1.5f64.sqrt();
    let x = t(&[2, 3], &[1., 2., 3., 5., 5., 5.]);
    let ones = t(&[3], &[1.; 3]);
    let zeros = t(&[3], &[0.; 3]);
    let op0 = Op::LayerNorm { eps: 0.0 };
    let y = fwd(op0, &[&t(&[3], &[1., 2., 3.]), &ones, &zeros]);
    close(&y, &[-k, 0., k], 1e-15);
    // weight and bias apply per column; a constant row normalizes to the bias.
    let w = t(&[3], &[1., 2., 3.]);
    let b = t(&[3], &[0.5, -0.5, 1.]);
    let y = fwd(LN, &[&x, &w, &b]);
    // eps is an f32 attribute: 1e-5 as f32, widened.
    let k5 = 1. / (2. / 3. + 1e-5f32 as f64).sqrt();
    close(&y, &[-k5 + 0.5, -0.5, 3. * k5 + 1., 0.5, -0.5, 1.], 1e-14);
    // A single column is all bias.
    let y = fwd(
        LN,
        &[
            &t(&[3, 1], &[7., -2., 4.]),
            &t(&[1], &[3.]),
            &t(&[1], &[0.25]),
        ],
    );
    assert_eq!(y, [0.25; 3]);
}

#[test]
fn layer_norm_is_accurate_far_from_zero_in_f32() {
    let x = narrow(&t(&[3], &[10000., 10001., 10002.]));
    let w = narrow(&t(&[3], &[1.; 3]));
    let b = narrow(&t(&[3], &[0.; 3]));
    let y = run(LN, Direction::Forward, &[&x, &w, &b]).unwrap();
    let y: Vec<f64> = y[0].floats().iter().map(|&v| v as f64).collect();
    let k = 1. / (2. / 3. + 1e-5f64).sqrt();
    close(&y, &[-k, 0., k], 1e-6);
}

#[test]
fn rms_norm_by_hand() {
    // [3, 4]: mean square 12.5.
    let r = 1. / 12.5f64.sqrt();
    let y = fwd(
        Op::RmsNorm { eps: 0.0 },
        &[&t(&[1, 2], &[3., 4.]), &t(&[2], &[1., -2.])],
    );
    close(&y, &[3. * r, -8. * r], 1e-15);
    // eps enters under the root: x = [0, 0] gives 0, not NaN.
    let y = fwd(RMS, &[&t(&[2], &[0., 0.]), &t(&[2], &[1., 1.])]);
    assert_eq!(y, [0., 0.]);
    // One column: x / sqrt(x^2 + eps) ~ sign(x).
    let y = fwd(RMS, &[&t(&[2, 1], &[2., -3.]), &t(&[1], &[1.])]);
    close(&y, &[1., -1.], 1e-6);
}

#[test]
fn backward_by_hand() {
    // dbias = column sums of dy; dweight = column sums of dy * xhat.
    let x = t(&[2, 2], &[0., 2., 5., 1.]);
    let w = t(&[2], &[1., 1.]);
    let b = t(&[2], &[0., 0.]);
    let op0 = Op::LayerNorm { eps: 0.0 };
    let y = run(op0, Direction::Forward, &[&x, &w, &b]).unwrap();
    let dy = t(&[2, 2], &[1., 2., 3., 4.]);
    let g = run(op0, Direction::Backward, &[&x, &w, &b, &y[0], &dy]).unwrap();
    // xhat rows: [-1, 1] and [1, -1].
    close(g[1].floats(), &[-1. + 3., 2. - 4.], 1e-15);
    close(g[2].floats(), &[4., 6.], 1e-15);
    // With two columns xhat is +-1 regardless of x, so dx = 0.
    close(g[0].floats(), &[0.; 4], 1e-15);
    assert_eq!(g[1].shape, [2]);
    assert_eq!(g[2].shape, [2]);
}

#[test]
fn gradcheck_both_norms() {
    let opts = Options::default();
    let shapes: [&[usize]; 6] = [&[2, 3, 5], &[1], &[7], &[13], &[1, 13], &[7, 2]];
    for (i, shape) in shapes.into_iter().enumerate() {
        let n = *shape.last().unwrap();
        let s = i as u64 * 3;
        let x = rand(s, shape, -2., 2.);
        let w = rand(s + 1, &[n], 0.5, 1.5);
        let b = rand(s + 2, &[n], -1., 1.);
        let r = check_op(&LN, &[x.clone(), w.clone(), b.clone()], opts).unwrap();
        assert!(r.pass(), "layer_norm {shape:?}: {r:?}");
        let r = check_op(&RMS, &[x.clone(), w.clone()], opts).unwrap();
        assert!(r.pass(), "rms_norm {shape:?}: {r:?}");
        f32_matches_f64(LN, &[&x, &w, &b], 1e-6, 2e-6);
        f32_matches_f64(RMS, &[&x, &w], 1e-6, 2e-6);
    }
}

#[test]
fn shape_and_attr_errors() {
    let x = t(&[2, 3], &[1.; 6]);
    let w3 = t(&[3], &[1.; 3]);
    let w2 = t(&[2], &[1.; 2]);
    let w13 = t(&[1, 3], &[1.; 3]);
    let e = run(LN, Direction::Forward, &[&x, &w2, &w3]).unwrap_err();
    assert_eq!(e, Error::mismatch("layer_norm", &[2], &[3]));
    let e = run(LN, Direction::Forward, &[&x, &w3, &w13]).unwrap_err();
    assert_eq!(e, Error::mismatch("layer_norm", &[1, 3], &[3]));
    let e = run(RMS, Direction::Forward, &[&x, &w13]).unwrap_err();
    assert_eq!(e, Error::mismatch("rms_norm", &[1, 3], &[3]));
    let scalar = t(&[], &[1.]);
    let w1 = t(&[1], &[1.]);
    let e = run(RMS, Direction::Forward, &[&scalar, &w1]).unwrap_err();
    assert!(matches!(e, Error::BadShape { op: "rms_norm", .. }), "{e:?}");
    let empty = t(&[0, 3], &[]);
    let e = run(LN, Direction::Forward, &[&empty, &w3, &w3]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Empty {
                op: "layer_norm",
                ..
            }
        ),
        "{e:?}"
    );
    for eps in [-1e-5, f32::NAN, f32::INFINITY] {
        let e = run(Op::LayerNorm { eps }, Direction::Forward, &[&x, &w3, &w3]).unwrap_err();
        assert!(matches!(e, Error::BadAttr { attr: "eps", .. }), "{e:?}");
        let e = run(Op::RmsNorm { eps }, Direction::Forward, &[&x, &w3]).unwrap_err();
        assert!(matches!(e, Error::BadAttr { attr: "eps", .. }), "{e:?}");
    }
    let bad = t(&[3, 2], &[1.; 6]);
    let e = run(LN, Direction::Backward, &[&x, &w3, &w3, &x, &bad]).unwrap_err();
    assert_eq!(e, Error::mismatch("layer_norm", &[3, 2], &[2, 3]));
    let e = run(RMS, Direction::Backward, &[&x, &w3, &bad, &x]).unwrap_err();
    assert_eq!(e, Error::mismatch("rms_norm", &[3, 2], &[2, 3]));
}

#[test]
fn nan_propagates_within_its_row() {
    let x = t(&[2, 2], &[f64::NAN, 1., 1., 3.]);
    let w = t(&[2], &[1., 1.]);
    let b = t(&[2], &[0., 0.]);
    let y = fwd(LN, &[&x, &w, &b]);
    assert!(y[0].is_nan() && y[1].is_nan());
    assert!(y[2].is_finite() && y[3].is_finite());
    let y = fwd(RMS, &[&x, &w]);
    assert!(y[0].is_nan() && y[1].is_nan());
    assert!(y[2].is_finite() && y[3].is_finite());
}
