//! Optimizer steps as ops, so training runs on whatever backend holds the parameters.
//!
//! Both are elementwise over one parameter tensor and its state; every argument must have the
//! parameter's shape. An empty parameter is allowed (the step is a no-op), as in torch. NaN or
//! Inf in the gradient or state propagate into the results, as in torch: a diverged step is the
//! caller's signal, not a kernel error.
//!
//! Scalar coefficients (`1 - lr * wd`, bias corrections, step size) are computed in f64 from the
//! f32 attributes and rounded once to `T`, the way torch computes them as Python floats.

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;

/// The scalar coefficients of one AdamW step, folded in f64 from the f32 attributes: every
/// backend's `adamw_step` takes them from here (rounded once to its element type), so replicas
/// on different backends fed the same gradient compute the same update
/// ([`crate::parallel`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamwConstants {
    /// `1 - lr * weight_decay`.
    pub decay: f64,
    /// `lr / (1 - beta1^step)`.
    pub step_size: f64,
    /// `sqrt(1 - beta2^step)`.
    pub bias2_sqrt: f64,
}

/// [`AdamwConstants`] for `step` (counting from 1).
pub fn adamw_constants(
    lr: f32,
    beta1: f32,
    beta2: f32,
    weight_decay: f32,
    step: u64,
) -> AdamwConstants {
    let lr = lr as f64;
    // beta^step: the exponent is exact in f64 up to 2^53 steps.
    let bias1 = 1.0 - libm::pow(beta1 as f64, step as f64);
    let bias2 = 1.0 - libm::pow(beta2 as f64, step as f64);
    AdamwConstants {
        decay: 1.0 - lr * weight_decay as f64,
        step_size: lr / bias1,
        bias2_sqrt: libm::sqrt(bias2),
    }
}

/// One `torch.optim.AdamW` step (`amsgrad=False`, `maximize=False`), `step` counting from 1:
///
/// ```text
/// param *= 1 - lr * weight_decay                     (decoupled weight decay)
/// m      = beta1 * m + (1 - beta1) * grad
/// v      = beta2 * v + (1 - beta2) * grad^2
/// param -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
/// ```
///
/// The last line is torch's arrangement of `lr * m_hat / (sqrt(v_hat) + eps)`.
/// Args `param, grad, m, v`, all of one shape; returns `[param, m, v]`.
pub fn adamw_step<T: Real>(
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    step: u64,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    const OP: &str = "adamw_step";
    if step == 0 {
        return Err(Error::BadAttr {
            op: OP,
            attr: "step",
            value: "0".into(),
            why: "steps count from 1".into(),
        });
    }
    let (shape, param) = float_arg(OP, args, 0, "param")?;
    let (g_shape, grad) = float_arg(OP, args, 1, "grad")?;
    let (m_shape, m) = float_arg(OP, args, 2, "m")?;
    let (v_shape, v) = float_arg(OP, args, 3, "v")?;
    same_shape(OP, shape, g_shape)?;
    same_shape(OP, shape, m_shape)?;
    same_shape(OP, shape, v_shape)?;

    let (b1, b2) = (beta1 as f64, beta2 as f64);
    let c = adamw_constants(lr, beta1, beta2, weight_decay, step);
    let decay = T::from_f64(c.decay);
    let (b1t, one_m_b1) = (T::from_f64(b1), T::from_f64(1.0 - b1));
    let (b2t, one_m_b2) = (T::from_f64(b2), T::from_f64(1.0 - b2));
    let step_size = T::from_f64(c.step_size);
    let bias2_sqrt = T::from_f64(c.bias2_sqrt);
    let eps = T::from_f32(eps);

    let n = param.len();
    let (mut p_out, mut m_out, mut v_out) = (vec![T::ZERO; n], vec![T::ZERO; n], vec![T::ZERO; n]);
    for i in 0..n {
        let g = grad[i];
        let mi = b1t * m[i] + one_m_b1 * g;
        let vi = b2t * v[i] + one_m_b2 * g * g;
        let denom = vi.sqrt() / bias2_sqrt + eps;
        p_out[i] = param[i] * decay - step_size * mi / denom;
        m_out[i] = mi;
        v_out[i] = vi;
    }
    Ok(vec![
        Owned::float(shape.to_vec(), p_out),
        Owned::float(shape.to_vec(), m_out),
        Owned::float(shape.to_vec(), v_out),
    ])
}

/// One `torch.optim.SGD` step with `dampening=0` and a zero-initialized momentum buffer
/// (torch's first step `buf = grad` is exactly `momentum * 0 + grad`):
///
/// ```text
/// g   = grad + weight_decay * param
/// buf = momentum * buf + g                 (only if momentum != 0; else buf is returned as is)
/// g   = nesterov ? g + momentum * buf : buf (only if momentum != 0; else g)
/// param -= lr * g
/// ```
///
/// With `momentum == 0` the buffer passes through unchanged (torch keeps no buffer then), and
/// `nesterov` has no effect (torch rejects that combination when the optimizer is built).
/// Args `param, grad, momentum_buf`, all of one shape; returns `[param, momentum_buf]`.
pub fn sgd_step<T: Real>(
    lr: f32,
    momentum: f32,
    weight_decay: f32,
    nesterov: bool,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    const OP: &str = "sgd_step";
    let (shape, param) = float_arg(OP, args, 0, "param")?;
    let (g_shape, grad) = float_arg(OP, args, 1, "grad")?;
    let (b_shape, buf) = float_arg(OP, args, 2, "momentum_buf")?;
    same_shape(OP, shape, g_shape)?;
    same_shape(OP, shape, b_shape)?;

    let lr = T::from_f32(lr);
    let mu = T::from_f32(momentum);
    let wd = T::from_f32(weight_decay);
    let n = param.len();
    let (mut p_out, mut b_out) = (vec![T::ZERO; n], vec![T::ZERO; n]);
    for i in 0..n {
        let mut g = grad[i];
        if weight_decay != 0.0 {
            g += wd * param[i];
        }
        let mut b = buf[i];
        if momentum != 0.0 {
            b = mu * b + g;
            g = if nesterov { g + mu * b } else { b };
        }
        p_out[i] = param[i] - lr * g;
        b_out[i] = b;
    }
    Ok(vec![
        Owned::float(shape.to_vec(), p_out),
        Owned::float(shape.to_vec(), b_out),
    ])
}

#[cfg(test)]
mod tests;
