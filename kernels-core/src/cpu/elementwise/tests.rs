// wasm-pack test runs these in the browser too.
use super::*;
use crate::cpu::testutil::*;
use crate::cpu::{self, Data, OwnedData};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use crate::op::Direction;

const BIN: [BinaryOp; 4] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
const UN: [UnaryOp; 8] = [
    UnaryOp::Neg,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Relu,
    UnaryOp::Sigmoid,
    UnaryOp::Tanh,
    UnaryOp::Silu,
];

#[test]
fn binary_broadcast_forward_by_hand() {
    let a = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = t(&[3], &[10., 20., 40.]);
    let add = Op::Binary(BinaryOp::Add);
    assert_eq!(fwd(add, &[&a, &b]), [11., 22., 43., 14., 25., 46.]);
    let sub = Op::Binary(BinaryOp::Sub);
    assert_eq!(fwd(sub, &[&a, &b]), [-9., -18., -37., -6., -15., -34.]);
    let mul = Op::Binary(BinaryOp::Mul);
    assert_eq!(fwd(mul, &[&a, &b]), [10., 40., 120., 40., 100., 240.]);
    let div = Op::Binary(BinaryOp::Div);
    assert_eq!(fwd(div, &[&b, &b]), [1., 1., 1.]);
    assert_eq!(
        fwd(div, &[&a, &b]),
        [0.1, 0.1, 3. / 40., 0.4, 0.25, 6. / 40.]
    );
    // Scalar b broadcasts everywhere; same-shape b is plain elementwise.
    let s = t(&[], &[2.]);
    assert_eq!(fwd(mul, &[&a, &s]), [2., 4., 6., 8., 10., 12.]);
    assert_eq!(fwd(sub, &[&a, &a]), [0.; 6]);
    let out = run(mul, Direction::Forward, &[&a, &s]).unwrap();
    assert_eq!(out[0].shape, [2, 3]);
    // Scalar with scalar: rank-0 result.
    let out = run(add, Direction::Forward, &[&s, &s]).unwrap();
    assert_eq!(out[0].shape, Vec::<usize>::new());
    assert_eq!(out[0].floats(), [4.]);
    // a [2, 3, 4] with b [3, 4]: b repeats every 12 elements.
    let a3 = t(&[2, 3, 4], &(0..24).map(|i| i as f64).collect::<Vec<_>>());
    let b2 = t(
        &[3, 4],
        &(0..12).map(|i| 100. * i as f64).collect::<Vec<_>>(),
    );
    let want: Vec<f64> = (0..24).map(|i| (i + 100 * (i % 12)) as f64).collect();
    assert_eq!(fwd(add, &[&a3, &b2]), want);
    // Division by zero and NaN follow IEEE, no error.
    let z = t(&[3], &[0., 0., 0.]);
    let num = t(&[3], &[1., -1., 0.]);
    let q = fwd(div, &[&num, &z]);
    assert_eq!(q[..2], [f64::INFINITY, f64::NEG_INFINITY]);
    assert!(q[2].is_nan());
}

#[test]
fn binary_broadcast_backward_by_hand() {
    // a [2, 2], b [2]: grad_b sums over the two rows.
    let a = t(&[2, 2], &[1., 2., 3., 4.]);
    let b = t(&[2], &[2., 4.]);
    let out = t(&[2, 2], &[0.; 4]);
    let g = t(&[2, 2], &[1., 10., 100., 1000.]);
    let bw = |op| run(Op::Binary(op), Direction::Backward, &[&a, &b, &out, &g]).unwrap();
    let r = bw(BinaryOp::Add);
    assert_eq!(r[0].floats(), [1., 10., 100., 1000.]);
    assert_eq!(r[1].shape, [2]);
    assert_eq!(r[1].floats(), [101., 1010.]);
    let r = bw(BinaryOp::Sub);
    assert_eq!(r[1].floats(), [-101., -1010.]);
    let r = bw(BinaryOp::Mul);
    assert_eq!(r[0].floats(), [2., 40., 200., 4000.]);
    assert_eq!(r[1].floats(), [1. + 300., 20. + 4000.]);
    let r = bw(BinaryOp::Div);
    assert_eq!(r[0].floats(), [0.5, 2.5, 50., 250.]);
    // -g a / b^2: (-1*1 - 100*3)/4, (-10*2 - 1000*4)/16.
    assert_eq!(r[1].floats(), [-301. / 4., -4020. / 16.]);
}

#[test]
fn binary_shape_errors() {
    let a = t(&[2, 3], &[0.; 6]);
    for (sb, n) in [(&[2usize][..], 2), (&[1, 3][..], 3), (&[3, 2][..], 6)] {
        let b = t(sb, &vec![1.; n]);
        let e = run(Op::Binary(BinaryOp::Add), Direction::Forward, &[&a, &b]).unwrap_err();
        assert_eq!(e, Error::mismatch("add", &[2, 3], sb), "{sb:?}");
    }
    // b may not be bigger than a.
    let big = t(&[4, 2, 3], &[0.; 24]);
    let e = run(Op::Binary(BinaryOp::Mul), Direction::Forward, &[&a, &big]).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "mul", .. }), "{e:?}");
    // Empty tensors.
    let empty = t(&[0, 3], &[]);
    let b = t(&[3], &[1.; 3]);
    let e = run(Op::Binary(BinaryOp::Div), Direction::Forward, &[&empty, &b]).unwrap_err();
    assert_eq!(
        e,
        Error::Empty {
            op: "div",
            tensor: "a".into()
        }
    );
    // Backward with a grad_out of the wrong shape.
    let g = t(&[3, 2], &[0.; 6]);
    let e = run(
        Op::Binary(BinaryOp::Add),
        Direction::Backward,
        &[&a, &b, &a, &g],
    )
    .unwrap_err();
    assert_eq!(e, Error::mismatch("add", &[3, 2], &[2, 3]));
    // Element count that disagrees with the shape.
    let lying = Owned {
        shape: vec![2, 3],
        data: OwnedData::Float(vec![0.0f64; 5]),
    };
    let e = run(Op::Binary(BinaryOp::Add), Direction::Forward, &[&lying, &b]).unwrap_err();
    assert!(matches!(e, Error::BadShape { .. }), "{e:?}");
}

#[test]
fn binary_gradcheck_every_broadcast() {
    for (i, op) in BIN.into_iter().enumerate() {
        for (j, sb) in [&[5usize][..], &[3, 5], &[2, 3, 5], &[]]
            .into_iter()
            .enumerate()
        {
            let seed = (i * 10 + j) as u64;
            let a = rand(seed, &[2, 3, 5], -2., 2.);
            // Keep divisors away from zero.
            let b = rand(seed + 100, sb, 0.5, 2.);
            gradcheck(Op::Binary(op), &[a.clone(), b.clone()]);
            f32_matches_f64(Op::Binary(op), &[&a, &b], 1e-7, 1e-6);
        }
        // Awkward sizes: 1, 7, 13.
        for n in [1usize, 7, 13] {
            let a = rand(n as u64, &[13, n], -2., 2.);
            let b = rand(n as u64 + 7, &[n], 0.5, 2.);
            gradcheck(Op::Binary(op), &[a, b]);
        }
    }
}

#[test]
fn scale_forward_backward() {
    let op = Op::Scale { factor: -2.5 };
    let x = t(&[3], &[1., -2., 0.5]);
    assert_eq!(fwd(op, &[&x]), [-2.5, 5., -1.25]);
    gradcheck(op, &[rand(3, &[2, 3, 5], -1., 1.)]);
    gradcheck(op, &[rand(4, &[7], -1., 1.)]);
    f32_matches_f64(op, &[&rand(5, &[13], -1., 1.)], 1e-7, 1e-7);
    let e = run(op, Direction::Forward, &[&t(&[7, 0], &[])]).unwrap_err();
    assert!(matches!(e, Error::Empty { op: "scale", .. }));
}

#[test]
fn unary_forward_by_hand() {
    let x = t(&[5], &[-2., -0.5, 0., 1., 3.]);
    let u = |op| fwd(Op::Unary(op), &[&x]);
    assert_eq!(u(UnaryOp::Neg), [2., 0.5, -0., -1., -3.]);
    assert_eq!(u(UnaryOp::Relu), [0., 0., 0., 1., 3.]);
    let e = core::f64::consts::E;
    close(
        &u(UnaryOp::Exp),
        &[1. / (e * e), 1. / e.sqrt(), 1., e, e * e * e],
        1e-15,
    );
    close(
        &u(UnaryOp::Sigmoid),
        &[
            0.11920292202211755,
            0.3775406687981454,
            0.5,
            0.7310585786300049,
            0.9525741268224334,
        ],
        1e-15,
    );
    close(
        &u(UnaryOp::Tanh),
        &[
            -0.9640275800758169,
            -0.46211715726000974,
            0.,
            0.7615941559557649,
            0.9950547536867305,
        ],
        1e-15,
    );
    close(
        &u(UnaryOp::Silu),
        &[
            -0.2384058440442351,
            -0.18877033439907268,
            0.,
            0.7310585786300049,
            2.8577223804673,
        ],
        1e-14,
    );
    let p = t(&[4], &[1., 4., 0.25, e]);
    close(
        &fwd(Op::Unary(UnaryOp::Sqrt), &[&p]),
        &[1., 2., 0.5, e.sqrt()],
        1e-15,
    );
    close(
        &fwd(Op::Unary(UnaryOp::Log), &[&p]),
        &[0., 4f64.ln(), -4f64.ln(), 1.],
        1e-15,
    );
}

#[test]
fn unary_special_values_follow_pytorch() {
    let x = t(&[4], &[-1., 0., f64::NAN, f64::INFINITY]);
    let log = fwd(Op::Unary(UnaryOp::Log), &[&x]);
    assert!(log[0].is_nan() && log[2].is_nan());
    assert_eq!(log[1], f64::NEG_INFINITY);
    assert_eq!(log[3], f64::INFINITY);
    let sqrt = fwd(Op::Unary(UnaryOp::Sqrt), &[&x]);
    assert!(sqrt[0].is_nan() && sqrt[2].is_nan());
    for op in UN {
        let y = fwd(Op::Unary(op), &[&x]);
        assert!(y[2].is_nan(), "{op:?} must propagate NaN");
    }
    // Stable sigmoid: no overflow, no NaN, saturates; in f32 as well.
    for big in [1000.0, 88.8, 1e30] {
        let x64 = t(&[2], &[big, -big]);
        let x32 = narrow(&x64);
        let y64 = run(Op::Unary(UnaryOp::Sigmoid), Direction::Forward, &[&x64]).unwrap();
        let y32 = run(Op::Unary(UnaryOp::Sigmoid), Direction::Forward, &[&x32]).unwrap();
        assert_eq!(y32[0].floats()[0], 1.0);
        assert!(y32[0].floats()[1] >= 0.0 && y32[0].floats()[1] < 1e-38);
        assert_eq!(y64[0].floats()[0], 1.0);
        assert!(y64[0].floats()[1] >= 0.0 && y64[0].floats()[1] < 1e-38);
        let silu = run(Op::Unary(UnaryOp::Silu), Direction::Forward, &[&x32]).unwrap();
        assert_eq!(silu[0].floats()[0], big as f32);
        assert!(silu[0].floats()[1].is_finite());
    }
    let inf = t(&[2], &[f64::INFINITY, f64::NEG_INFINITY]);
    assert_eq!(fwd(Op::Unary(UnaryOp::Sigmoid), &[&inf]), [1., 0.]);
    assert_eq!(fwd(Op::Unary(UnaryOp::Tanh), &[&inf]), [1., -1.]);
    assert_eq!(fwd(Op::Unary(UnaryOp::Exp), &[&inf]), [f64::INFINITY, 0.]);
}

#[test]
fn relu_gradient_at_zero_is_zero() {
    let x = t(&[4], &[-1., 0., 2., -0.]);
    let y = t(&[4], &fwd(Op::Unary(UnaryOp::Relu), &[&x]));
    let g = t(&[4], &[5., 6., 7., 8.]);
    let r = run(Op::Unary(UnaryOp::Relu), Direction::Backward, &[&x, &y, &g]).unwrap();
    assert_eq!(r[0].floats(), [0., 0., 7., 0.]);
}

#[test]
fn unary_gradcheck_and_dtype_agreement() {
    for (i, op) in UN.into_iter().enumerate() {
        for (j, shape) in [&[2usize, 3, 5][..], &[1], &[7], &[13]]
            .into_iter()
            .enumerate()
        {
            let seed = (i * 10 + j) as u64;
            let x = match op {
                UnaryOp::Log | UnaryOp::Sqrt => rand(seed, shape, 0.2, 3.),
                _ => rand(seed, shape, -3., 3.),
            };
            // Stay away from relu's kink at 0.
            let x = if op == UnaryOp::Relu {
                let v = x
                    .floats()
                    .iter()
                    .map(|&v| if v.abs() < 0.05 { 0.5 } else { v });
                Owned::float(x.shape.clone(), v.collect())
            } else {
                x
            };
            gradcheck(Op::Unary(op), core::slice::from_ref(&x));
            f32_matches_f64(Op::Unary(op), &[&x], 1e-7, 1e-6);
        }
    }
}

#[test]
fn unary_empty_and_bad_grad_shape() {
    let empty = t(&[3, 0], &[]);
    for op in UN {
        let e = run(Op::Unary(op), Direction::Forward, &[&empty]).unwrap_err();
        assert!(matches!(e, Error::Empty { .. }), "{op:?}: {e:?}");
    }
    let x = t(&[2, 3], &[1.; 6]);
    let g = t(&[6], &[1.; 6]);
    let e = run(Op::Unary(UnaryOp::Exp), Direction::Backward, &[&x, &x, &g]).unwrap_err();
    assert_eq!(e, Error::mismatch("exp", &[6], &[2, 3]));
}

#[test]
fn gelu_by_hand() {
    let x = t(&[5], &[-3., -1., 0., 1., 2.]);
    let exact = fwd(
        Op::Gelu {
            approximate: GeluApprox::None,
        },
        &[&x],
    );
    // x * Phi(x), Phi from the normal CDF table.
    close(
        &exact,
        &[
            -0.00404969409489031,
            -0.15865525393145707,
            0.,
            0.8413447460685429,
            1.9544997361036416,
        ],
        1e-14,
    );
    let tanh = fwd(
        Op::Gelu {
            approximate: GeluApprox::Tanh,
        },
        &[&x],
    );
    close(
        &tanh,
        &[
            -0.0036373920817729943,
            -0.15880800939172324,
            0.,
            0.8411919906082768,
            1.954597694087775,
        ],
        1e-14,
    );
    // gelu'(0) = 1/2 in both forms; exact gelu'(1) = Phi(1) + phi(1).
    let pts = t(&[2], &[0., 1.]);
    let y = t(&[2], &[0., 0.]);
    let g = t(&[2], &[1., 1.]);
    let op = Op::Gelu {
        approximate: GeluApprox::None,
    };
    let d = run(op, Direction::Backward, &[&pts, &y, &g]).unwrap();
    close(
        d[0].floats(),
        &[0.5, 0.8413447460685429 + 0.24197072451914337],
        1e-14,
    );
}

#[test]
fn gelu_gradcheck_and_dtype_agreement() {
    for approximate in [GeluApprox::None, GeluApprox::Tanh] {
        let op = Op::Gelu { approximate };
        for (j, shape) in [&[2usize, 3, 5][..], &[1], &[7], &[13]]
            .into_iter()
            .enumerate()
        {
            let x = rand(j as u64 + 40, shape, -4., 4.);
            gradcheck(op, core::slice::from_ref(&x));
            f32_matches_f64(op, &[&x], 1e-7, 2e-6);
        }
        // Far tails: no NaN, saturates to x and 0.
        let x = narrow(&t(&[2], &[-30., 30.]));
        let y = run(op, Direction::Forward, &[&x]).unwrap();
        assert_eq!(y[0].floats()[1], 30.);
        assert!(y[0].floats()[0].abs() < 1e-30);
    }
}

#[test]
fn ints_are_rejected() {
    let ids = [1i32, 2];
    let v = View::<f64> {
        shape: &[2],
        data: Data::I32(&ids),
    };
    let e = cpu::run(&Op::Unary(UnaryOp::Exp), Direction::Forward, &[v]).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e:?}");
}
