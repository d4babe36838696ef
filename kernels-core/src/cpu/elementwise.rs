//! Elementwise ops: binary arithmetic with suffix broadcasting, `scale`, the unary activations and
//! GELU, forward and backward.
//!
//! Broadcasting is deliberately narrow: `b.shape` must be a suffix of `a.shape` (`a [2, 3, 4]`
//! with `b [4]`, `[3, 4]`, `[2, 3, 4]` or the scalar `[]`). That covers bias adds and per-channel
//! scales without a general stride machinery, and every backend can implement it as
//! `b[i % b.len()]`. The gradient of `b` is summed over the broadcast leading dims.
//!
//! NaN and infinities propagate as in PyTorch (`log(-1)` is NaN, `log(0)` is `-inf`, no error).
//! Empty tensors are an [`Error::Empty`] (a GPU cannot bind a zero-sized buffer, so no backend
//! could honour them).
//!
//! Backward args follow [`crate::op`]: binary `(a, b, out, grad_out)`, unary, scale and gelu
//! `(x, out, grad_out)`. Where the derivative is cheaper from the output (exp, sqrt, sigmoid,
//! tanh) the kernel uses `out`.

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::{BinaryOp, GeluApprox, Op, UnaryOp};

/// `b` must be a (possibly empty) suffix of `a`'s shape and neither may be empty.
fn check_broadcast(op: &'static str, sa: &[usize], sb: &[usize]) -> Result<()> {
    non_empty(op, "a", sa)?;
    non_empty(op, "b", sb)?;
    if !sa.ends_with(sb) {
        return Err(Error::mismatch(op, sa, sb));
    }
    Ok(())
}

fn binary<T: Real>(op: BinaryOp, x: T, y: T) -> T {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
    }
}

/// `out = a op b`; a `[..., *b.shape]`, b a suffix of a's shape, out like a.
pub fn binary_forward<T: Real>(op: BinaryOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Binary(op).name();
    let (sa, a) = float_arg(name, args, 0, "a")?;
    let (sb, b) = float_arg(name, args, 1, "b")?;
    check_broadcast(name, sa, sb)?;
    // a is a whole number of copies of b; each chunk of a meets b element by element.
    let mut out = Vec::with_capacity(a.len());
    for ra in a.chunks_exact(b.len()) {
        out.extend(ra.iter().zip(b).map(|(&x, &y)| binary(op, x, y)));
    }
    Ok(vec![Owned::float(sa.to_vec(), out)])
}

/// Returns `[grad_a (like a), grad_b (like b, summed over the broadcast dims)]`.
pub fn binary_backward<T: Real>(op: BinaryOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Binary(op).name();
    let (sa, a) = float_arg(name, args, 0, "a")?;
    let (sb, b) = float_arg(name, args, 1, "b")?;
    let (so, _) = float_arg(name, args, 2, "out")?;
    let (sg, g) = float_arg(name, args, 3, "grad_out")?;
    check_broadcast(name, sa, sb)?;
    same_shape(name, so, sa)?;
    same_shape(name, sg, sa)?;
    let mut grad_a = Vec::with_capacity(a.len());
    // grad_b sums one term per broadcast copy; f64 keeps that sum within a rounding of exact.
    let mut grad_b = vec![0.0f64; b.len()];
    for (ra, rg) in a.chunks_exact(b.len()).zip(g.chunks_exact(b.len())) {
        for (((&x, &y), &dy), gb) in ra.iter().zip(b).zip(rg).zip(grad_b.iter_mut()) {
            let (da, db) = match op {
                BinaryOp::Add => (dy, dy),
                BinaryOp::Sub => (dy, -dy),
                BinaryOp::Mul => (dy * y, dy * x),
                // d(x/y)/dy = -x / y^2, written as PyTorch does so inf/NaN cases agree.
                BinaryOp::Div => (dy / y, -dy * x / (y * y)),
            };
            grad_a.push(da);
            *gb += db.to_f64();
        }
    }
    Ok(vec![
        Owned::float(sa.to_vec(), grad_a),
        Owned::float(sb.to_vec(), grad_b.into_iter().map(T::from_f64).collect()),
    ])
}

/// `out = x * factor`, any shape.
pub fn scale_forward<T: Real>(factor: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Scale { factor }.name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    non_empty(name, "x", sx)?;
    let f = T::from_f32(factor);
    Ok(vec![Owned::float(
        sx.to_vec(),
        x.iter().map(|&v| v * f).collect(),
    )])
}

/// `grad_x = grad_out * factor`.
pub fn scale_backward<T: Real>(factor: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Scale { factor }.name();
    let (sx, _) = float_arg(name, args, 0, "x")?;
    let (so, _) = float_arg(name, args, 1, "out")?;
    let (sg, g) = float_arg(name, args, 2, "grad_out")?;
    non_empty(name, "x", sx)?;
    same_shape(name, so, sx)?;
    same_shape(name, sg, sx)?;
    let f = T::from_f32(factor);
    Ok(vec![Owned::float(
        sx.to_vec(),
        g.iter().map(|&v| v * f).collect(),
    )])
}

/// Logistic function without overflow: `exp` only ever sees a non-positive argument.
fn sigmoid<T: Real>(x: T) -> T {
    if x >= T::ZERO {
        T::ONE / (T::ONE + (-x).exp())
    } else {
        // Also the NaN path: exp(NaN) is NaN, so NaN propagates.
        let e = x.exp();
        e / (T::ONE + e)
    }
}

fn unary<T: Real>(op: UnaryOp, x: T) -> T {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        // NaN stays NaN, as torch.relu.
        UnaryOp::Relu => {
            if x > T::ZERO || x.is_nan() {
                x
            } else {
                T::ZERO
            }
        }
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Silu => x * sigmoid(x),
    }
}

/// `d out / d x` times `dy`, from the input `x` and the output `y`.
fn unary_grad<T: Real>(op: UnaryOp, x: T, y: T, dy: T) -> T {
    match op {
        UnaryOp::Neg => -dy,
        UnaryOp::Exp => dy * y,
        UnaryOp::Log => dy / x,
        UnaryOp::Sqrt => dy / (y + y),
        // relu'(0) = 0, as PyTorch (threshold_backward on the output).
        UnaryOp::Relu => {
            if y > T::ZERO {
                dy
            } else {
                T::ZERO
            }
        }
        UnaryOp::Sigmoid => dy * y * (T::ONE - y),
        UnaryOp::Tanh => dy * (T::ONE - y * y),
        // d/dx x s(x) = s + x s (1 - s) = s (1 + x (1 - s)).
        UnaryOp::Silu => {
            let s = sigmoid(x);
            dy * s * (T::ONE + x * (T::ONE - s))
        }
    }
}

/// `out = f(x)`, any shape.
pub fn unary_forward<T: Real>(op: UnaryOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Unary(op).name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    non_empty(name, "x", sx)?;
    Ok(vec![Owned::float(
        sx.to_vec(),
        x.iter().map(|&v| unary(op, v)).collect(),
    )])
}

/// `grad_x = f'(x) * grad_out`; args `(x, out, grad_out)`.
pub fn unary_backward<T: Real>(op: UnaryOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Unary(op).name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (so, y) = float_arg(name, args, 1, "out")?;
    let (sg, g) = float_arg(name, args, 2, "grad_out")?;
    non_empty(name, "x", sx)?;
    same_shape(name, so, sx)?;
    same_shape(name, sg, sx)?;
    let grad = x
        .iter()
        .zip(y)
        .zip(g)
        .map(|((&x, &y), &dy)| unary_grad(op, x, y, dy))
        .collect();
    Ok(vec![Owned::float(sx.to_vec(), grad)])
}

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;
const GELU_KAPPA: f64 = 0.044_715;

/// `(gelu(x), gelu'(x))`, exact (erf) or with PyTorch's tanh approximation.
fn gelu<T: Real>(approximate: GeluApprox, x: T) -> (T, T) {
    let half = T::from_f64(0.5);
    match approximate {
        GeluApprox::None => {
            // Phi(x) = (1 + erf(x / sqrt 2)) / 2; gelu = x Phi(x); gelu' = Phi(x) + x phi(x).
            let cdf = half * (T::ONE + (x * T::from_f64(core::f64::consts::FRAC_1_SQRT_2)).erf());
            let pdf = T::from_f64(INV_SQRT_2PI) * (-half * x * x).exp();
            (x * cdf, cdf + x * pdf)
        }
        GeluApprox::Tanh => {
            // 0.5 (1 + tanh u) = sigmoid(2u): same function, but without the cancellation of
            // 1 + tanh(u) near -1 that costs f32 most of its digits for x below about -3.
            let k = T::from_f64(SQRT_2_OVER_PI);
            let kappa = T::from_f64(GELU_KAPPA);
            let x2 = x * x;
            let u = k * (x + kappa * x2 * x);
            let s = sigmoid(u + u);
            let du = k * (T::ONE + T::from_f64(3.0 * GELU_KAPPA) * x2);
            // d/du 0.5 (1 + tanh u) = 0.5 (1 - tanh^2 u) = 2 s (1 - s).
            let y = x * s;
            let dy = s + x * (s + s) * (T::ONE - s) * du;
            (y, dy)
        }
    }
}

/// `out = gelu(x)`, any shape.
pub fn gelu_forward<T: Real>(approximate: GeluApprox, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Gelu { approximate }.name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    non_empty(name, "x", sx)?;
    Ok(vec![Owned::float(
        sx.to_vec(),
        x.iter().map(|&v| gelu(approximate, v).0).collect(),
    )])
}

/// `grad_x = gelu'(x) * grad_out`; args `(x, out, grad_out)`.
pub fn gelu_backward<T: Real>(approximate: GeluApprox, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Gelu { approximate }.name();
    let (sx, x) = float_arg(name, args, 0, "x")?;
    let (so, _) = float_arg(name, args, 1, "out")?;
    let (sg, g) = float_arg(name, args, 2, "grad_out")?;
    non_empty(name, "x", sx)?;
    same_shape(name, so, sx)?;
    same_shape(name, sg, sx)?;
    let grad = x
        .iter()
        .zip(g)
        .map(|(&x, &dy)| gelu(approximate, x).1 * dy)
        .collect();
    Ok(vec![Owned::float(sx.to_vec(), grad)])
}

/// `out = silu(gate) * up`; `gate` and `up` of one shape.
pub fn swiglu_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Swiglu.name();
    let (sg, gate) = float_arg(name, args, 0, "gate")?;
    let (su, up) = float_arg(name, args, 1, "up")?;
    non_empty(name, "gate", sg)?;
    same_shape(name, sg, su)?;
    let out = gate
        .iter()
        .zip(up)
        .map(|(&g, &u)| g * sigmoid(g) * u)
        .collect();
    Ok(vec![Owned::float(sg.to_vec(), out)])
}

/// `grad_gate = grad * up * silu'(gate)`, `grad_up = grad * silu(gate)`, with
/// `silu'(x) = s (1 + x (1 - s))`, `s = sigmoid(x)`; args `(gate, up, out, grad_out)`.
pub fn swiglu_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Swiglu.name();
    let (sg, gate) = float_arg(name, args, 0, "gate")?;
    let (su, up) = float_arg(name, args, 1, "up")?;
    let (so, _) = float_arg(name, args, 2, "out")?;
    let (sd, grad) = float_arg(name, args, 3, "grad_out")?;
    non_empty(name, "gate", sg)?;
    for s in [su, so, sd] {
        same_shape(name, sg, s)?;
    }
    let mut grad_gate = Vec::with_capacity(gate.len());
    let mut grad_up = Vec::with_capacity(gate.len());
    for ((&g, &u), &d) in gate.iter().zip(up).zip(grad) {
        let s = sigmoid(g);
        grad_gate.push(d * u * (s * (T::ONE + g * (T::ONE - s))));
        grad_up.push(d * g * s);
    }
    Ok(vec![
        Owned::float(sg.to_vec(), grad_gate),
        Owned::float(sg.to_vec(), grad_up),
    ])
}

#[cfg(test)]
mod tests {
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
}
