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
pub(crate) fn sigmoid<T: Real>(x: T) -> T {
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
mod tests;
