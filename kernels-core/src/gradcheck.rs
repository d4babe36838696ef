//! Finite-difference gradient checks, run in f64 on the very same reference kernels.
//!
//! For an op with outputs `y_o`, the checker draws seeded random weights `w_o` and differentiates
//! the scalar `L = sum_o <w_o, y_o>`: the analytic gradient is the op's backward with
//! `grad_outputs = w`, the numeric one is the central difference `(L(x+eps) - L(x-eps)) / 2eps`
//! per input element. f64 makes `eps = 1e-6` meaningful; kinks (relu at 0, ties in max) are the
//! caller's to avoid when drawing inputs.

use alloc::string::String;
use alloc::vec::Vec;

use crate::cpu::{self, Owned, OwnedData, View};
use crate::error::{Error, Result};
use crate::op::{Direction, Op};
use crate::rng::Rng;
use crate::tensor::{Storage, Tensor};

/// Options of [`check_op`].
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Central-difference step.
    pub eps: f64,
    /// Relative tolerance between analytic and numeric gradients.
    pub rtol: f64,
    /// Absolute tolerance (for gradients near zero).
    pub atol: f64,
    /// At most this many elements per input are perturbed (a seeded sample beyond it).
    pub max_elems_per_input: usize,
    /// Seed for the output weights and the element sample.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            eps: 1e-6,
            rtol: 1e-3,
            atol: 1e-6,
            max_elems_per_input: 64,
            seed: 0,
        }
    }
}

/// Outcome of [`check_op`].
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Elements perturbed in total.
    pub checked: usize,
    /// Elements outside the tolerance.
    pub failures: usize,
    /// Largest `|analytic - numeric|`.
    pub max_abs_err: f64,
    /// The worst element: (input name, flat index, analytic, numeric).
    pub worst: Option<(String, usize, f64, f64)>,
}

impl Report {
    /// True when every checked element is within tolerance.
    pub fn pass(&self) -> bool {
        self.failures == 0 && self.checked > 0
    }
}

/// Converts a host tensor to an owned f64 argument (floats widened, integers kept).
pub fn to_f64(t: &Tensor) -> Result<Owned<f64>> {
    let data = match t.storage() {
        Storage::F32(v) => OwnedData::Float(v.iter().map(|&x| x as f64).collect()),
        Storage::I32(v) => OwnedData::I32(v.to_vec()),
        Storage::I64(v) => OwnedData::I32(
            v.iter()
                .map(|&x| i32::try_from(x).unwrap_or(i32::MAX))
                .collect(),
        ),
        Storage::Packed(b) => OwnedData::Float(
            crate::quant::dequantize(t.dtype(), b, t.numel())?
                .into_iter()
                .map(|x| x as f64)
                .collect(),
        ),
        Storage::Device(_) => return Err(Error::NotOnHost { op: "gradcheck" }),
    };
    Ok(Owned {
        shape: t.shape().to_vec(),
        data,
    })
}

fn weighted_loss(op: &Op, args: &[View<f64>], weights: &[Vec<f64>]) -> Result<f64> {
    let outs = cpu::run(op, Direction::Forward, args)?;
    let mut l = 0.0;
    for (o, w) in outs.iter().zip(weights) {
        for (y, w) in o.floats().iter().zip(w) {
            if *w != 0.0 {
                l += y * w;
            }
        }
    }
    Ok(l)
}

/// Checks the backward of `op` against central differences at `inputs` (see the module docs).
pub fn check_op(op: &Op, inputs: &[Owned<f64>], opts: Options) -> Result<Report> {
    let spec = op.spec();
    if !spec.differentiable() {
        return Err(Error::NoBackward { op: op.name() });
    }
    let views: Vec<View<f64>> = inputs.iter().map(|o| o.view()).collect();
    let outs = cpu::run(op, Direction::Forward, &views)?;
    let mut rng = Rng::new(opts.seed ^ 0x6a09_e667_f3bc_c909);
    let weights: Vec<Vec<f64>> = outs
        .iter()
        // Non-finite outputs (e.g. -inf at causally masked log_softmax entries) are constants of
        // the inputs; weight 0 keeps them from turning the weighted loss into NaN.
        .map(|o| {
            o.floats()
                .iter()
                .map(|y| if y.is_finite() { rng.normal_f64() } else { 0.0 })
                .collect()
        })
        .collect();

    // Analytic: backward(inputs ++ outputs ++ weights).
    let weight_owned: Vec<Owned<f64>> = outs
        .iter()
        .zip(&weights)
        .map(|(o, w)| Owned::float(o.shape.clone(), w.clone()))
        .collect();
    let mut bargs: Vec<View<f64>> = views.clone();
    bargs.extend(outs.iter().map(|o| o.view()));
    bargs.extend(weight_owned.iter().map(|o| o.view()));
    let grads = cpu::run(op, Direction::Backward, &bargs)?;

    let mut report = Report {
        checked: 0,
        failures: 0,
        max_abs_err: 0.0,
        worst: None,
    };
    let mut worst_excess = f64::NEG_INFINITY;
    for (gi, name) in spec.grad_inputs.iter().enumerate() {
        let idx = spec
            .inputs
            .iter()
            .position(|s| s.name == *name)
            .ok_or_else(|| Error::Autograd {
                why: alloc::format!("{}: grad input {name} is not an input", op.name()),
            })?;
        let grad = grads.get(gi).ok_or_else(|| Error::Autograd {
            why: alloc::format!("{}: backward returned no grad_{name}", op.name()),
        })?;
        // A gradient has its input's shape, not merely its element count.
        if grad.shape != inputs[idx].shape {
            return Err(Error::mismatch(op.name(), &grad.shape, &inputs[idx].shape));
        }
        let analytic = grad.floats();
        let base = inputs[idx].floats();
        if analytic.len() != base.len() {
            return Err(Error::mismatch(op.name(), &[analytic.len()], &[base.len()]));
        }
        let n = base.len();
        let picks: Vec<usize> = if n <= opts.max_elems_per_input {
            (0..n).collect()
        } else {
            (0..opts.max_elems_per_input)
                .map(|_| rng.below(n as u64) as usize)
                .collect()
        };
        for e in picks {
            let mut perturbed: Vec<Owned<f64>> = inputs.to_vec();
            let loss_at = |perturbed: &mut Vec<Owned<f64>>, x: f64| -> Result<f64> {
                if let OwnedData::Float(v) = &mut perturbed[idx].data {
                    v[e] = x;
                }
                let pv: Vec<View<f64>> = perturbed.iter().map(|o| o.view()).collect();
                weighted_loss(op, &pv, &weights)
            };
            let lp = loss_at(&mut perturbed, base[e] + opts.eps)?;
            let lm = loss_at(&mut perturbed, base[e] - opts.eps)?;
            let numeric = (lp - lm) / (2.0 * opts.eps);
            let a = analytic[e];
            let err = libm::fabs(a - numeric);
            let excess = err - (opts.atol + opts.rtol * libm::fabs(numeric));
            report.checked += 1;
            if err > report.max_abs_err || err.is_nan() {
                report.max_abs_err = err;
            }
            if excess > 0.0 || err.is_nan() {
                report.failures += 1;
            }
            if excess > worst_excess || err.is_nan() {
                worst_excess = if err.is_nan() { f64::INFINITY } else { excess };
                report.worst = Some(((*name).into(), e, a, numeric));
            }
        }
    }
    Ok(report)
}
