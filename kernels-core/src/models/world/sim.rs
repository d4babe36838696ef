//! The world model's training data: a damped double pendulum, observed through 64 fixed features.
//!
//! Two unit masses on unit rods under gravity, with viscous damping on both joints, integrated
//! with RK4 (`DT` per sub-step, [`SUBSTEPS`] sub-steps per observation). The raw observation is
//! `[sin t1, cos t1, sin t2, cos t2, w1 / 4, w2 / 4]` (angles through sin and cos so the wrap at
//! pi is no jump). The model sees [`FEATURES`] features `tanh(P o + c)`, with `P [64, 6]` and `c`
//! drawn once from [`LIFT_SEED`]: a smooth, fixed, mildly nonlinear lift, so the 64 inputs are
//! redundant but meaningful views of the true 4-dimensional state, bounded in (-1, 1).
//!
//! Everything runs in f64 with `libm` and is bit-reproducible for a seed.

use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::rng::Rng;

/// Features per observation (the encoder's input width).
pub const FEATURES: usize = 64;
/// Raw observation width before the lift.
pub const RAW: usize = 6;
/// Seed of the fixed lift `P`, `c` (part of the data's definition: never change it).
pub const LIFT_SEED: u64 = 0x05ee_d1f7;
/// Integration step in seconds.
pub const DT: f64 = 0.01;
/// RK4 sub-steps per observation (observations are `DT * SUBSTEPS` = 0.05 s apart).
pub const SUBSTEPS: usize = 5;

const G: f64 = 9.81;
/// Joint damping (1/s): trajectories lose energy slowly, stay chaotic for seconds.
const DAMPING: f64 = 0.15;

/// `[theta1, theta2, omega1, omega2]`.
pub type State = [f64; 4];

/// Time derivative of the state (equal masses and lengths, viscous joint damping).
fn deriv(s: State) -> State {
    let [t1, t2, w1, w2] = s;
    let d = t1 - t2;
    let (sd, cd) = (libm::sin(d), libm::cos(d));
    // 2 m1 + m2 - m2 cos(2 d) with m1 = m2 = 1 and l1 = l2 = 1.
    let den = 3.0 - libm::cos(2.0 * d);
    let a1 = (-3.0 * G * libm::sin(t1)
        - G * libm::sin(t1 - 2.0 * t2)
        - 2.0 * sd * (w2 * w2 + w1 * w1 * cd))
        / den;
    let a2 = (2.0 * sd * (2.0 * w1 * w1 + 2.0 * G * libm::cos(t1) + w2 * w2 * cd)) / den;
    [w1, w2, a1 - DAMPING * w1, a2 - DAMPING * w2]
}

fn axpy(s: State, k: State, h: f64) -> State {
    [
        s[0] + h * k[0],
        s[1] + h * k[1],
        s[2] + h * k[2],
        s[3] + h * k[3],
    ]
}

/// One RK4 step of `DT`.
pub fn rk4(s: State) -> State {
    let k1 = deriv(s);
    let k2 = deriv(axpy(s, k1, DT / 2.0));
    let k3 = deriv(axpy(s, k2, DT / 2.0));
    let k4 = deriv(axpy(s, k3, DT));
    let mut out = s;
    for i in 0..4 {
        out[i] += DT / 6.0 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]);
    }
    out
}

/// Total mechanical energy (for tests: damping only ever removes it).
pub fn energy(s: State) -> f64 {
    let [t1, t2, w1, w2] = s;
    let kinetic = w1 * w1 + 0.5 * w2 * w2 + w1 * w2 * libm::cos(t1 - t2);
    let potential = -2.0 * G * libm::cos(t1) - G * libm::cos(t2);
    kinetic + potential
}

/// The raw observation of a state.
pub fn observe(s: State) -> [f64; RAW] {
    let [t1, t2, w1, w2] = s;
    [
        libm::sin(t1),
        libm::cos(t1),
        libm::sin(t2),
        libm::cos(t2),
        w1 / 4.0,
        w2 / 4.0,
    ]
}

/// The fixed lift from raw observations to [`FEATURES`] features.
#[derive(Debug, Clone)]
pub struct Lift {
    /// `[FEATURES, RAW]`, row-major.
    p: Vec<f64>,
    c: Vec<f64>,
}

impl Lift {
    /// The lift of [`LIFT_SEED`].
    pub fn new() -> Lift {
        let mut rng = Rng::new(LIFT_SEED);
        // Gain ~1 per feature: inputs of order 1 land in tanh's curved but unsaturated range.
        let gain = 1.0 / libm::sqrt(RAW as f64 / 2.0);
        let p = (0..FEATURES * RAW)
            .map(|_| gain * rng.normal_f64())
            .collect();
        let c = (0..FEATURES).map(|_| 0.3 * rng.normal_f64()).collect();
        Lift { p, c }
    }

    /// `tanh(P o + c)`.
    pub fn apply(&self, o: &[f64; RAW], out: &mut Vec<f32>) {
        for (row, c) in self.p.chunks_exact(RAW).zip(&self.c) {
            let dot: f64 = row.iter().zip(o).map(|(a, b)| a * b).sum();
            out.push(libm::tanh(dot + c) as f32);
        }
    }
}

impl Lift {
    /// The raw observation whose lift is closest to `features` in the least-squares sense:
    /// `atanh(f) - c = P o` solved through the normal equations (P has full column rank: 64
    /// random rows, 6 columns). Features are clamped inside (-1, 1) first, so a model's
    /// prediction slightly past tanh's range still decodes.
    pub fn decode(&self, features: &[f32]) -> Result<[f64; RAW]> {
        if features.len() != FEATURES {
            return Err(Error::bad_shape(
                "Lift::decode",
                "features",
                &[features.len()],
                alloc::format!("expected [{FEATURES}]"),
            ));
        }
        let mut a = [[0.0f64; RAW + 1]; RAW];
        for (index, ((row, c), &f)) in self
            .p
            .chunks_exact(RAW)
            .zip(&self.c)
            .zip(features)
            .enumerate()
        {
            if !f.is_finite() {
                return Err(Error::NonFinite {
                    op: "Lift::decode",
                    tensor: "features".into(),
                    index,
                    value: f64::from(f),
                });
            }
            let y = libm::atanh(f64::from(f).clamp(-0.999_999, 0.999_999)) - c;
            for (i, &pi) in row.iter().enumerate() {
                for (j, &pj) in row.iter().enumerate() {
                    a[i][j] += pi * pj;
                }
                a[i][RAW] += pi * y;
            }
        }
        // P is fixed and well conditioned: a zero pivot would be a broken lift, not bad input.
        solve(a).map_err(|(index, value)| Error::NonFinite {
            op: "Lift::decode",
            tensor: "pivot of the normal equations".into(),
            index,
            value,
        })
    }
}

/// Gaussian elimination with partial pivoting on the augmented `[RAW, RAW + 1]` system.
/// A (near) zero pivot is returned as `Err((column, pivot))`.
fn solve(mut a: [[f64; RAW + 1]; RAW]) -> core::result::Result<[f64; RAW], (usize, f64)> {
    for col in 0..RAW {
        let pivot = (col..RAW)
            .max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))
            .unwrap_or(col);
        // Also catches NaN.
        if a[pivot][col].abs().is_nan() || a[pivot][col].abs() <= 1e-12 {
            return Err((col, a[pivot][col]));
        }
        a.swap(col, pivot);
        let top = a[col];
        for row in a.iter_mut().skip(col + 1) {
            let k = row[col] / top[col];
            for (x, t) in row.iter_mut().zip(&top).skip(col) {
                *x -= k * t;
            }
        }
    }
    let mut x = [0.0f64; RAW];
    for r in (0..RAW).rev() {
        let tail: f64 = (r + 1..RAW).map(|c| a[r][c] * x[c]).sum();
        x[r] = (a[r][RAW] - tail) / a[r][r];
    }
    Ok(x)
}

impl Default for Lift {
    fn default() -> Self {
        Lift::new()
    }
}

/// A random initial state: both angles uniform in `[-2, 2]` rad (up to ~115 degrees, where the
/// motion is chaotic), angular velocities uniform in `[-1, 1]` rad/s.
pub fn random_state(rng: &mut Rng) -> State {
    let mut u = |lo: f64, hi: f64| lo + (hi - lo) * rng.uniform_f64();
    [u(-2.0, 2.0), u(-2.0, 2.0), u(-1.0, 1.0), u(-1.0, 1.0)]
}

/// `count` trajectories of `len` observations each, as features `[count, len, FEATURES]`
/// (flattened), from initial states drawn with `seed`. Different seeds give independent sets
/// (training vs held-out).
pub fn trajectories(seed: u64, count: usize, len: usize) -> Result<Vec<f32>> {
    let total = count
        .checked_mul(len)
        .and_then(|n| n.checked_mul(FEATURES))
        .ok_or_else(|| Error::LimitExceeded {
            what: "trajectory features".into(),
            value: u64::MAX,
            limit: usize::MAX as u64,
        })?;
    if total == 0 {
        return Err(Error::Empty {
            op: "sim::trajectories",
            tensor: "count * len".into(),
        });
    }
    let lift = Lift::new();
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    out.try_reserve_exact(total)
        .map_err(|_| Error::OutOfMemory {
            what: "trajectory features".into(),
            bytes: total as u64 * 4,
        })?;
    for _ in 0..count {
        let s0 = random_state(&mut rng);
        for s in states(s0, len) {
            lift.apply(&observe(s), &mut out);
        }
    }
    Ok(out)
}

/// The states at observations `0..len` of the trajectory from `s0` (`s0` first).
pub fn states(s0: State, len: usize) -> impl Iterator<Item = State> {
    core::iter::successors(Some(s0), |&s| {
        let mut s = s;
        for _ in 0..SUBSTEPS {
            s = rk4(s);
        }
        Some(s)
    })
    .take(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damping_removes_energy_and_rk4_is_accurate() {
        let mut rng = Rng::new(3);
        for _ in 0..5 {
            let s0 = random_state(&mut rng);
            let mut s = s0;
            let mut e_prev = energy(s);
            for _ in 0..400 {
                s = rk4(s);
                let e = energy(s);
                // Damping dissipates; RK4's own error is far below this slack.
                assert!(e <= e_prev + 1e-6, "energy rose: {e_prev} -> {e}");
                e_prev = e;
            }
            assert!(energy(s) < energy(s0) - 1e-3, "no dissipation over 4 s");
        }
    }

    #[test]
    fn decode_inverts_the_lift_and_states_match_trajectories() {
        let lift = Lift::new();
        let mut rng = Rng::new(9);
        for _ in 0..20 {
            let o = observe(random_state(&mut rng));
            let mut f = Vec::new();
            lift.apply(&o, &mut f);
            let back = lift.decode(&f).unwrap();
            for (a, b) in o.iter().zip(&back) {
                // f32 features: the inverse is as good as their rounding allows.
                assert!((a - b).abs() < 1e-4, "{o:?} decoded as {back:?}");
            }
        }
        assert!(lift.decode(&[0.0; 3]).is_err());
        let mut bad = [0.0f32; FEATURES];
        bad[5] = f32::NAN;
        assert!(matches!(lift.decode(&bad), Err(Error::NonFinite { .. })));
        // `states` is the trajectory `trajectories` lifts.
        let s0 = random_state(&mut Rng::new(4));
        let mut f = Vec::new();
        for s in states(s0, 6) {
            lift.apply(&observe(s), &mut f);
        }
        assert_eq!(f, trajectories(4, 1, 6).unwrap());
        assert_eq!(states(s0, 6).count(), 6);
    }

    #[test]
    fn features_are_bounded_reproducible_and_distinct_per_seed() {
        let a = trajectories(1, 3, 7).unwrap();
        let b = trajectories(1, 3, 7).unwrap();
        let c = trajectories(2, 3, 7).unwrap();
        assert_eq!(a.len(), 3 * 7 * FEATURES);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().all(|x| x.abs() < 1.0));
        // The lift is not saturated: features spread over (-1, 1).
        let sat = a.iter().filter(|x| x.abs() > 0.99).count();
        assert!(sat * 10 < a.len(), "{sat} of {} saturated", a.len());
        // Consecutive observations move (the pendulum is not at rest).
        let step: f32 = (0..FEATURES).map(|i| (a[FEATURES + i] - a[i]).abs()).sum();
        assert!(step > 1e-3);
        assert!(matches!(trajectories(1, 0, 7), Err(Error::Empty { .. })));
    }
}
