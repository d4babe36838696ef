//! The GRU world-model section: the shipped model (embedded, so the page works offline) predicts
//! the damped double pendulum from an initial state the visitor picks; the page plots both
//! angles, true against the ensemble's mean with a mean +/- std band, times the rollout per
//! backend and shows the residual compression.
//!
//! This file is the section as plain data (settings, the prediction, the angle series, plot
//! geometry, readouts): it builds and is tested natively. `dom` (wasm32 only) is the canvas
//! and the controls.
//!
//! The model predicts the 64 lifted features; the angles are read back through
//! [`Lift::decode`] per member, so the band is the members' disagreement about the angle itself.

#[cfg(target_arch = "wasm32")]
pub(crate) mod dom;

use std::f64::consts::PI;
use std::time::Duration;

use kernels_core::autograd::Graph;
use kernels_core::models::world::sim::{self, Lift, State};
use kernels_core::models::world::{
    CompressionReport, WorldModel, compress_residuals, ensemble_stats,
};
use kernels_core::nn::ParamStore;
use kernels_core::{Error, Result, Tensor};
use web_time::Instant;

use crate::report::whole_number;

/// The horizon the shipped model was trained on; longer rollouts are allowed and drift.
pub const TRAINED_STEPS: usize = 10;
pub const MAX_STEPS: usize = 40;
/// The svd_lowrank seed: the readout is reproducible.
pub const SVD_SEED: u64 = 0;
/// Seconds between observations.
pub const STEP_SECONDS: f64 = sim::DT * sim::SUBSTEPS as f64;

/// What the visitor controls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// `[theta1, theta2, omega1, omega2]` (rad, rad/s).
    pub state: State,
    pub steps: usize,
    /// Rank kept by the residual compression.
    pub rank: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            state: [1.2, -0.6, 0.0, 0.5],
            steps: TRAINED_STEPS,
            rank: 2,
        }
    }
}

/// Input ranges: the training distribution's angles were in [-2, 2] and velocities in [-1, 1];
/// a bit beyond is allowed (and shows the model's limits), far beyond is refused.
pub const ANGLE_LIMIT: f64 = PI;
pub const VELOCITY_LIMIT: f64 = 4.0;

impl Settings {
    /// Parses the six inputs (theta1, theta2, omega1, omega2, steps, rank), saying which one is
    /// wrong and why.
    pub fn parse(fields: [&str; 6]) -> std::result::Result<Settings, String> {
        let names = ["theta1", "theta2", "omega1", "omega2"];
        let mut state = [0.0; 4];
        for (i, (slot, name)) in state.iter_mut().zip(names).enumerate() {
            let v: f64 = fields[i]
                .trim()
                .parse()
                .map_err(|_| format!("{name}: `{}` is not a number", fields[i]))?;
            let limit = if i < 2 { ANGLE_LIMIT } else { VELOCITY_LIMIT };
            if !v.is_finite() || v.abs() > limit {
                return Err(format!("{name}: {v} is outside [-{limit:.2}, {limit:.2}]"));
            }
            *slot = v;
        }
        let steps = whole_number(fields[4], "steps", 1, MAX_STEPS)?;
        // The residual matrix is [steps, 64]: its rank is at most `steps`.
        let rank = whole_number(fields[5], "rank", 1, steps.min(sim::FEATURES))?;
        Ok(Settings { state, steps, rank })
    }
}

/// One plotted observable over t = 0..=steps: truth, ensemble mean and std.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: &'static str,
    pub truth: Vec<f64>,
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
}

impl Series {
    pub fn all_finite(&self) -> bool {
        self.truth
            .iter()
            .chain(&self.mean)
            .chain(&self.std)
            .all(|v| v.is_finite())
    }

    /// Root mean square of mean - truth over the predicted steps.
    pub fn rmse(&self) -> f64 {
        let n = self.truth.len().saturating_sub(1).max(1);
        let sq: f64 = self
            .truth
            .iter()
            .zip(&self.mean)
            .skip(1)
            .map(|(a, b)| (a - b) * (a - b))
            .sum();
        (sq / n as f64).sqrt()
    }
}

/// `angle + 2 pi k` nearest to `near`: a member's angle stays continuous from step to step.
pub fn unwrap_near(angle: f64, near: f64) -> f64 {
    angle + 2.0 * PI * ((near - angle) / (2.0 * PI)).round()
}

/// The two angle series: truth from the simulator's states (t = 0..=steps), predictions from
/// each member's features `[steps, 64]` decoded through the lift, unwrapped step by step from
/// the true initial angle, then averaged over members (population std, as `ensemble_stats`).
pub fn angle_series(truth: &[State], members: &[Vec<f32>], lift: &Lift) -> Result<[Series; 2]> {
    let steps = truth.len().saturating_sub(1);
    let f = sim::FEATURES;
    if steps == 0 || members.is_empty() {
        return Err(Error::Empty {
            op: "angle_series",
            tensor: "truth or members".into(),
        });
    }
    // per_member[m][i][t]: angle i of member m at step t.
    let mut per_member = Vec::with_capacity(members.len());
    for m in members {
        if m.len() != steps * f {
            return Err(Error::bad_shape(
                "angle_series",
                "member prediction",
                &[m.len()],
                format!("expected [{steps} * {f}]"),
            ));
        }
        let mut angles = [vec![truth[0][0]], vec![truth[0][1]]];
        for feat in m.chunks_exact(f) {
            let o = lift.decode(feat)?;
            for (i, series) in angles.iter_mut().enumerate() {
                let raw = o[2 * i].atan2(o[2 * i + 1]);
                let prev = series.last().copied().unwrap_or(raw);
                series.push(unwrap_near(raw, prev));
            }
        }
        per_member.push(angles);
    }
    let n = per_member.len() as f64;
    let build = |i: usize, name: &'static str| {
        let (mut mean, mut std) = (Vec::new(), Vec::new());
        for t in 0..=steps {
            let mu = per_member.iter().map(|a| a[i][t]).sum::<f64>() / n;
            let var = per_member
                .iter()
                .map(|a| (a[i][t] - mu) * (a[i][t] - mu))
                .sum::<f64>()
                / n;
            mean.push(mu);
            std.push(var.sqrt());
        }
        Series {
            name,
            truth: truth.iter().map(|s| s[i]).collect(),
            mean,
            std,
        }
    };
    Ok([build(0, "θ1 (rad)"), build(1, "θ2 (rad)")])
}

/// One backend's prediction for a [`Settings`].
#[derive(Debug, Clone)]
pub struct Prediction {
    pub backend: String,
    pub series: [Series; 2],
    /// Each member's features `[steps, 64]` (for the cross-backend agreement).
    pub members: Vec<Vec<f32>>,
    pub compression: CompressionReport,
    /// Upload of s0, the rollout of every member and the readback of their predictions.
    pub rollout: Duration,
}

/// Runs the simulator for the truth and the model for the prediction on `store`'s backend;
/// every read is awaited (nothing blocks in the browser).
pub async fn predict(
    model: &WorldModel,
    store: &ParamStore,
    settings: &Settings,
    lift: &Lift,
) -> Result<Prediction> {
    let backend = store.backend().clone();
    let states: Vec<State> = sim::states(settings.state, settings.steps + 1).collect();
    let mut features = Vec::with_capacity((settings.steps + 1) * sim::FEATURES);
    for s in &states {
        lift.apply(&sim::observe(*s), &mut features);
    }
    let (first, rest) = features.split_at(sim::FEATURES);
    let s0 = Tensor::from_f32(&[1, sim::FEATURES], first.to_vec())?;
    let truth = Tensor::from_f32(&[settings.steps, 1, sim::FEATURES], rest.to_vec())?;

    let start = Instant::now();
    let g = Graph::inference(backend.clone());
    let p = store.bind(&g)?;
    let s0 = g.constant(backend.upload(&s0)?)?;
    let roll = model.rollout(&g, &p, &s0, settings.steps)?;
    let members = roll
        .download_members(&*backend)
        .await?
        .iter()
        .map(Tensor::to_f32_vec)
        .collect::<Result<Vec<_>>>()?;
    let rollout = start.elapsed();

    let (mean, _) = ensemble_stats(&g, &roll)?;
    let truth = g.constant(backend.upload(&truth)?)?;
    let (_, compression) = compress_residuals(&g, &mean, &truth, settings.rank, SVD_SEED).await?;
    Ok(Prediction {
        backend: backend.name(),
        series: angle_series(&states, &members, lift)?,
        members,
        compression,
        rollout,
    })
}

/// Max abs difference between two predictions' member features (CPU vs WebGPU).
pub fn agreement(a: &Prediction, b: &Prediction) -> f64 {
    a.members
        .iter()
        .flatten()
        .zip(b.members.iter().flatten())
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max)
}

/// `12.3 ms` (or microseconds below 1 ms).
pub fn fmt_ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 1.0 {
        format!("{:.0} µs", ms * 1e3)
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// The compression readout, one line.
pub fn compression_text(c: &CompressionReport) -> String {
    format!(
        "residuals [{} x {}] kept at rank {}: {} numbers instead of {} ({:.1}x smaller); \
         reconstruction error {:.3} (relative); MSE {:.2e} -> {:.2e} after correction",
        c.rows,
        c.cols,
        c.rank,
        c.rank * (c.rows + c.cols + 1),
        c.rows * c.cols,
        c.ratio,
        c.rel_error,
        c.mse_pred,
        c.mse_corrected
    )
}

/// A plot panel: a pixel rectangle and the value range it shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Panel {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    pub lo: f64,
    pub hi: f64,
    pub steps: usize,
}

impl Panel {
    /// Fits the series' truth and band (mean +/- std) with 8% headroom; a flat series still
    /// gets a visible range.
    pub fn fit(series: &Series, x: f64, y: f64, w: f64, h: f64) -> Panel {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for (t, m) in series.mean.iter().enumerate() {
            let s = series.std.get(t).copied().unwrap_or(0.0);
            lo = lo.min(m - s);
            hi = hi.max(m + s);
        }
        for v in &series.truth {
            lo = lo.min(*v);
            hi = hi.max(*v);
        }
        if !lo.is_finite() || !hi.is_finite() {
            (lo, hi) = (-1.0, 1.0);
        }
        let span = (hi - lo).max(0.1);
        let mid = (hi + lo) / 2.0;
        Panel {
            x,
            y,
            w,
            h,
            lo: mid - span * 0.58,
            hi: mid + span * 0.58,
            steps: series.truth.len().saturating_sub(1).max(1),
        }
    }

    pub fn px(&self, t: usize) -> f64 {
        self.x + self.w * t as f64 / self.steps as f64
    }

    pub fn py(&self, v: f64) -> f64 {
        self.y + self.h * (1.0 - (v - self.lo) / (self.hi - self.lo))
    }
}

/// About `count` round tick values (steps of 1, 2 or 5 times a power of ten) inside [lo, hi].
pub fn ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    if !lo.is_finite() || !hi.is_finite() || hi <= lo || count == 0 {
        return Vec::new();
    }
    let raw = (hi - lo) / count as f64;
    let pow = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * pow)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * pow);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// Decimals that tell the ticks apart (0.05 steps need 2, 0.5 steps 1, 5 steps 0).
pub fn tick_decimals(ticks: &[f64]) -> usize {
    match ticks {
        [a, b, ..] if b > a => (-(b - a).log10().floor()).max(0.0) as usize,
        _ => 1,
    }
}

/// Points drawn for one series: truth and mean lines (steps + 1 each) and the band's outline
/// (2 (steps + 1)).
pub fn points_drawn(series: &Series) -> usize {
    4 * series.truth.len()
}

#[cfg(test)]
mod tests {
    /// The trained weights (F16 safetensors, `kernels gru train`), which the page fetches.
    const WEIGHTS: &[u8] = include_bytes!("../../native-cli/models/world/world.safetensors");

    use super::*;
    use kernels_core::CpuBackend;
    use kernels_core::backend::now_or_never;
    use std::rc::Rc;

    fn fields(s: &Settings) -> [String; 6] {
        let [a, b, c, d] = s.state;
        [a, b, c, d]
            .map(|v| v.to_string())
            .into_iter()
            .chain([s.steps.to_string(), s.rank.to_string()])
            .collect::<Vec<_>>()
            .try_into()
            .unwrap()
    }

    #[test]
    fn settings_parse_round_trips_and_names_bad_fields() {
        let s = Settings {
            state: [0.3, -1.7, 0.25, -2.0],
            steps: 17,
            rank: 3,
        };
        let f = fields(&s);
        assert_eq!(
            Settings::parse(f.each_ref().map(String::as_str)).unwrap(),
            s
        );
        let bad = |i: usize, v: &str| {
            let mut f = fields(&s);
            f[i] = v.into();
            Settings::parse(f.each_ref().map(String::as_str)).unwrap_err()
        };
        assert!(bad(0, "x").starts_with("theta1"));
        assert!(bad(1, "3.5").starts_with("theta2"));
        assert!(bad(3, "NaN").starts_with("omega2"));
        assert!(bad(4, "0").starts_with("steps"));
        assert!(bad(4, &(MAX_STEPS + 1).to_string()).starts_with("steps"));
        // rank is bounded by the steps (the residual matrix's rows).
        let mut f = fields(&s);
        f[4] = "2".into();
        assert!(
            Settings::parse(f.each_ref().map(String::as_str))
                .unwrap_err()
                .starts_with("rank")
        );
    }

    #[test]
    fn unwrap_keeps_angles_continuous() {
        let near = 3.1;
        let wrapped = -3.1; // just past pi, as atan2 returns it
        let u = unwrap_near(wrapped, near);
        assert!((u - (2.0 * PI - 3.1)).abs() < 1e-12);
        assert!((unwrap_near(0.2, 0.1) - 0.2).abs() < 1e-12);
        assert!((unwrap_near(0.2, 4.0 * PI) - (0.2 + 4.0 * PI)).abs() < 1e-12);
    }

    #[test]
    fn perfect_members_give_the_truth_with_no_spread() {
        let lift = Lift::new();
        // Starts near pi so the angle wraps during the rollout.
        let states: Vec<State> = sim::states([3.0, -0.5, 2.0, 1.0], 9).collect();
        let mut feats = Vec::new();
        for s in &states[1..] {
            lift.apply(&sim::observe(*s), &mut feats);
        }
        let [t1, t2] = angle_series(&states, &[feats.clone(), feats.clone()], &lift).unwrap();
        for s in [&t1, &t2] {
            assert!(s.all_finite());
            assert_eq!(s.truth.len(), 9);
            assert!(s.rmse() < 1e-3, "{} rmse {}", s.name, s.rmse());
            assert!(s.std.iter().all(|v| *v < 1e-9));
        }
        assert!(t1.truth.iter().any(|v| *v > PI), "the test should cross pi");
        // Two members that disagree have a spread of half their difference.
        let mut other = feats.clone();
        for v in &mut other {
            *v *= 0.9;
        }
        let [a, _] = angle_series(&states, &[feats.clone(), other], &lift).unwrap();
        assert!(a.std[1..].iter().all(|v| *v > 0.0));
        assert!(angle_series(&states, &[feats[1..].to_vec()], &lift).is_err());
        assert!(angle_series(&states, &[], &lift).is_err());
    }

    #[test]
    fn panel_maps_the_range_inside_its_rectangle() {
        let s = Series {
            name: "x",
            truth: vec![0.0, 1.0, 2.0],
            mean: vec![0.0, 1.5, 2.5],
            std: vec![0.0, 0.5, 1.0],
        };
        let p = Panel::fit(&s, 50.0, 20.0, 400.0, 200.0);
        assert!(p.lo < 0.0 && p.hi > 3.5);
        assert_eq!(p.px(0), 50.0);
        assert_eq!(p.px(2), 450.0);
        for v in [0.0, 3.5, 1.0] {
            let y = p.py(v);
            assert!((20.0..=220.0).contains(&y), "{v} -> {y}");
        }
        assert!(p.py(3.0) < p.py(0.0), "larger values are higher up");
        let flat = Series {
            name: "flat",
            truth: vec![1.0; 4],
            mean: vec![1.0; 4],
            std: vec![0.0; 4],
        };
        let q = Panel::fit(&flat, 0.0, 0.0, 10.0, 10.0);
        assert!(q.hi > q.lo && q.py(1.0).is_finite());
        assert_eq!(points_drawn(&flat), 16);
    }

    #[test]
    fn ticks_are_round_and_inside() {
        // Never more than asked for: a step of 0.5 would give 6 ticks.
        assert_eq!(ticks(-0.37, 2.9, 5), vec![0.0, 1.0, 2.0]);
        assert_eq!(ticks(-0.37, 2.9, 7), vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
        let t = ticks(-13.0, 41.0, 4);
        assert!(
            t.iter()
                .all(|v| (-13.0..=41.0).contains(v) && v % 10.0 == 0.0),
            "{t:?}"
        );
        assert!(ticks(1.0, 1.0, 5).is_empty());
        assert_eq!(tick_decimals(&ticks(0.0, 0.5, 6)), 1);
        assert_eq!(tick_decimals(&ticks(-0.6, -0.4, 4)), 2);
        assert_eq!(tick_decimals(&ticks(-13.0, 41.0, 4)), 0);
        assert_eq!(tick_decimals(&[]), 1);
        assert!(ticks(0.0, f64::NAN, 5).is_empty());
    }

    #[test]
    fn readouts() {
        assert_eq!(fmt_ms(Duration::from_micros(250)), "250 µs");
        assert_eq!(fmt_ms(Duration::from_micros(12_340)), "12.3 ms");
        assert_eq!(fmt_ms(Duration::from_millis(1234)), "1234 ms");
        let c = CompressionReport {
            rows: 10,
            cols: 64,
            rank: 2,
            ratio: 640.0 / 150.0,
            rel_error: 0.25,
            mse_pred: 1e-3,
            mse_corrected: 6.25e-5,
            singular_values: vec![1.0, 0.5],
        };
        let t = compression_text(&c);
        assert!(t.contains("[10 x 64]") && t.contains("rank 2"), "{t}");
        assert!(
            t.contains("150 numbers instead of 640 (4.3x smaller)"),
            "{t}"
        );
        assert!(t.contains("0.250"), "{t}");
    }

    #[test]
    fn the_embedded_model_beats_persistence_on_the_cpu() {
        let backend = Rc::new(CpuBackend::new());
        let (model, store) = WorldModel::load(backend, WEIGHTS).unwrap();
        let lift = Lift::new();
        let settings = Settings::default();
        let p = now_or_never(predict(&model, &store, &settings, &lift))
            .unwrap()
            .unwrap();
        assert_eq!(p.members.len(), model.config.members);
        for s in &p.series {
            assert!(s.all_finite());
            assert_eq!(s.mean.len(), settings.steps + 1);
            // Persistence: the initial angle held for every step.
            let hold = Series {
                mean: vec![s.truth[0]; s.truth.len()],
                ..s.clone()
            };
            assert!(
                s.rmse() < hold.rmse(),
                "{}: model {} vs persistence {}",
                s.name,
                s.rmse(),
                hold.rmse()
            );
        }
        let c = &p.compression;
        assert_eq!(
            (c.rows, c.cols, c.rank),
            (settings.steps, 64, settings.rank)
        );
        assert!(c.rel_error.is_finite() && c.rel_error < 1.0);
        assert_eq!(agreement(&p, &p), 0.0);
    }
}
