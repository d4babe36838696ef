//! The world-model part of `kernels demo`: the shipped model predicts held-out pendulum
//! windows on each demo backend; prints the error against persistence, the ensemble spread, the
//! residual compression and the CPU/GPU agreement, and writes an SVG plot of predicted against
//! true trajectories.

use std::fmt::Write as _;
use std::path::Path;
use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::models::world::{
    Windows, compress_residuals, ensemble_stats, per_step_mse, persistence_mse, sim,
};
use kernels_core::{Backend, Tensor};

use crate::atomic_write::write_atomically;
use crate::world_model::{HELD_OUT, HELD_OUT_SEED, HORIZON, load_world_or_embedded};
use crate::{CliResult, emit, fail};

/// Windows of the demo batch: one per held-out trajectory, from t = 20.
const BATCH: usize = 16;
/// Features drawn in the plot.
const PLOTTED: [usize; 3] = [0, 1, 2];

/// Host results of one backend: ensemble mean and spread `[steps, batch, F]`.
struct Run {
    name: String,
    mean: Tensor,
    spread: Tensor,
}

fn predict(backend: Rc<dyn Backend>, s0: &Tensor, truth: &Tensor) -> CliResult<(Run, String)> {
    let (model, store, _) = load_world_or_embedded(backend.clone(), None)?;
    let g = Graph::inference(backend.clone());
    let p = store.bind(&g)?;
    let s0v = g.constant(backend.upload(s0)?)?;
    let tv = g.constant(backend.upload(truth)?)?;
    let roll = model.rollout(&g, &p, &s0v, HORIZON)?;
    let (mean, spread) = ensemble_stats(&g, &roll)?;
    let (_, c) = pollster::block_on(compress_residuals(&g, &mean, &tv, 32, 0))?;
    let figures = format!(
        "  residuals [{} x {}] by rank-{} svd_lowrank: {:.2}x fewer numbers, reconstruction error \
         {:.3}, MSE {:.2e} -> {:.2e} after correction\n",
        c.rows, c.cols, c.rank, c.ratio, c.rel_error, c.mse_pred, c.mse_corrected
    );
    let mean = pollster::block_on(backend.download(mean.tensor()))?;
    let spread = pollster::block_on(backend.download(spread.tensor()))?;
    Ok((
        Run {
            name: backend.name(),
            mean,
            spread,
        },
        figures,
    ))
}

/// Runs the section on `backends` and writes the plot to `plot`.
/// The held-out error of the ensemble mean on one backend, against persistence.
#[derive(Debug, Clone)]
pub struct WorldFigure {
    pub backend: String,
    /// Mean over the steps of the per-step MSE.
    pub mse: f64,
    pub persistence_mse: f64,
}

pub fn run(backends: &[(Rc<dyn Backend>, String)], plot: &Path) -> CliResult<Vec<WorldFigure>> {
    let (count, len) = HELD_OUT;
    let data = sim::trajectories(HELD_OUT_SEED, count, len)?;
    let windows = Windows::new(&data, count, len, sim::FEATURES)?;
    let starts: Vec<(usize, usize)> = (0..BATCH).map(|b| (b, 20)).collect();
    let (s0, truth) = windows.gather(&starts, HORIZON)?;
    emit(&format!(
        "world model (damped double pendulum, {BATCH} held-out windows, {HORIZON} steps of 0.05 s):\n"
    ))?;
    let persistence = persistence_mse(&s0, &truth)?;
    let mut runs = Vec::new();
    let mut figures_out = Vec::new();
    for (backend, _) in backends {
        let (r, figures) = predict(backend.clone(), &s0, &truth)?;
        let model = per_step_mse(&r.mean, &truth)?;
        let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let spread = r.spread.as_f32()?;
        emit(&format!(
            "  {}: MSE {:.2e} (step 1 {:.2e}, step {HORIZON} {:.2e}) vs persistence {:.2e}: {:.0}x \
             lower; mean ensemble spread {:.2e}\n{figures}",
            r.name,
            avg(&model),
            model.first().copied().unwrap_or_default(),
            model.last().copied().unwrap_or_default(),
            avg(&persistence),
            avg(&persistence) / avg(&model),
            spread.iter().map(|&x| f64::from(x)).sum::<f64>() / spread.len().max(1) as f64,
        ))?;
        figures_out.push(WorldFigure {
            backend: r.name.clone(),
            mse: avg(&model),
            persistence_mse: avg(&persistence),
        });
        runs.push(r);
    }
    if let [a, b, ..] = runs.as_slice() {
        let diff = a
            .mean
            .as_f32()?
            .iter()
            .zip(b.mean.as_f32()?)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        emit(&format!(
            "  {} vs {}: ensemble means agree to {diff:.1e} (max abs)\n",
            a.name, b.name
        ))?;
    }
    let first = runs
        .first()
        .ok_or_else(|| fail("world model: no backend ran"))?;
    let svg = svg(
        &s0,
        &truth,
        first,
        &persistence,
        &per_step_mse(&first.mean, &truth)?,
    )?;
    write_atomically(plot, svg.as_bytes())
        .map_err(|e| fail(format!("cannot write {}: {e}", plot.display())))?;
    emit(&format!("  plot written to {}\n\n", plot.display()))?;
    Ok(figures_out)
}

const COLORS: [&str; 3] = ["#1f77b4", "#d62728", "#2ca02c"];

/// Two panels: window 0's plotted features over time (truth, ensemble mean with a +-2 std band,
/// persistence), and the per-step MSE of the model and of persistence (log scale).
fn svg(
    s0: &Tensor,
    truth: &Tensor,
    r: &Run,
    persistence: &[f64],
    model: &[f64],
) -> CliResult<String> {
    let f = sim::FEATURES;
    let batch = s0.shape().first().copied().unwrap_or(1);
    let (s0, truth) = (s0.as_f32()?, truth.as_f32()?);
    let (mean, spread) = (r.mean.as_f32()?, r.spread.as_f32()?);
    // Value of feature `k` of window 0 at time t (t = 0 is s0).
    let at = |v: &[f32], t: usize, k: usize| -> f64 {
        if t == 0 {
            f64::from(s0[k])
        } else {
            f64::from(v[(t - 1) * batch * f + k])
        }
    };
    let (w, h, pad) = (900.0, 360.0, 50.0);
    let pw = (w - 3.0 * pad) / 2.0;
    let ph = h - 2.0 * pad;
    let steps = HORIZON;
    let x_of = |t: usize, x0: f64| x0 + pad + pw * t as f64 / steps as f64;
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for &k in &PLOTTED {
        for t in 0..=steps {
            lo = lo.min(at(truth, t, k));
            hi = hi.max(at(truth, t, k));
            let m = at(mean, t, k);
            let sd = if t == 0 { 0.0 } else { at(spread, t, k) };
            lo = lo.min(m - 2.0 * sd);
            hi = hi.max(m + 2.0 * sd);
        }
    }
    let span = (hi - lo).max(1e-6);
    let y_of = |v: f64| pad + ph * (1.0 - (v - lo) / span);
    let mut s = String::new();
    writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    )?;
    writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#)?;
    writeln!(
        s,
        r#"<text x="{}" y="20">World model on {}: features {PLOTTED:?} of a held-out window (solid: truth, dashed: ensemble mean with a 2-std band, dotted: persistence)</text>"#,
        pad,
        xml(&r.name)
    )?;
    writeln!(
        s,
        r#"<rect x="{pad}" y="{pad}" width="{pw}" height="{ph}" fill="none" stroke="gray"/>"#
    )?;
    for (i, &k) in PLOTTED.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let mut band_top = Vec::new();
        let mut band_bottom = Vec::new();
        for t in 0..=steps {
            let m = at(mean, t, k);
            let sd = if t == 0 { 0.0 } else { at(spread, t, k) };
            band_top.push(format!("{:.1},{:.1}", x_of(t, 0.0), y_of(m + 2.0 * sd)));
            band_bottom.push(format!("{:.1},{:.1}", x_of(t, 0.0), y_of(m - 2.0 * sd)));
        }
        band_bottom.reverse();
        writeln!(
            s,
            r#"<polygon points="{} {}" fill="{c}" fill-opacity="0.2" stroke="none"/>"#,
            band_top.join(" "),
            band_bottom.join(" ")
        )?;
        let line = |v: &[f32]| {
            (0..=steps)
                .map(|t| format!("{:.1},{:.1}", x_of(t, 0.0), y_of(at(v, t, k))))
                .collect::<Vec<_>>()
                .join(" ")
        };
        writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
            line(truth)
        )?;
        writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2" stroke-dasharray="6,4"/>"#,
            line(mean)
        )?;
        let y0 = y_of(at(truth, 0, k));
        writeln!(
            s,
            r#"<line x1="{:.1}" y1="{y0:.1}" x2="{:.1}" y2="{y0:.1}" stroke="{c}" stroke-dasharray="2,3"/>"#,
            x_of(0, 0.0),
            x_of(steps, 0.0)
        )?;
    }
    writeln!(
        s,
        r#"<text x="{}" y="{}">step (0.05 s each)</text>"#,
        pad + pw / 2.0 - 40.0,
        h - 15.0
    )?;
    // Error panel, log10 scale.
    let x1 = pad + pw;
    let logs: Vec<f64> = model
        .iter()
        .chain(persistence)
        .map(|v| v.max(1e-12).log10())
        .collect();
    let (elo, ehi) = logs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    let (elo, ehi) = (elo.floor(), ehi.ceil().max(elo.floor() + 1.0));
    let ey = |v: f64| pad + ph * (1.0 - (v.max(1e-12).log10() - elo) / (ehi - elo));
    let ex = |t: usize| x1 + pad + pw * (t as f64 - 1.0) / (steps.max(2) - 1) as f64;
    writeln!(
        s,
        r#"<rect x="{}" y="{pad}" width="{pw}" height="{ph}" fill="none" stroke="gray"/>"#,
        x1 + pad
    )?;
    for e in (elo as i32)..=(ehi as i32) {
        let y = ey(10f64.powi(e));
        writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" font-size="10">1e{e}</text>"#,
            x1 + 8.0,
            y + 3.0
        )?;
    }
    for (vals, c, label) in [
        (model, "#1f77b4", "model MSE"),
        (persistence, "#7f7f7f", "persistence MSE"),
    ] {
        let pts: Vec<String> = vals
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", ex(i + 1), ey(*v)))
            .collect();
        writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
            pts.join(" ")
        )?;
        let last = vals.last().copied().unwrap_or(1.0);
        writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" fill="{c}" text-anchor="end">{label}</text>"#,
            ex(steps) - 4.0,
            ey(last) - 6.0
        )?;
    }
    writeln!(
        s,
        r#"<text x="{}" y="{}">MSE per step, {BATCH} windows (log scale)</text>"#,
        x1 + pad + pw / 2.0 - 110.0,
        h - 15.0
    )?;
    s.push_str("</svg>\n");
    Ok(s)
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
