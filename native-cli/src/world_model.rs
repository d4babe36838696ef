//! `kernels gru ...`: the GRU world model (train, predict, bench) and a plain one-layer GRU
//! with PyTorch `nn.GRU` weights run on safetensors files (`run`).
//!
//! The model, its simulator and its training step live in kernels-core
//! (`kernels_core::models::world`); this module reads and writes files, draws the progress bar
//! and prints the figures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use kernels_core::autograd::Graph;
use kernels_core::models::world::{
    self, Evaluation, Windows, WorldConfig, WorldModel, compress_residuals, ensemble_stats, sim,
};
use kernels_core::nn::ParamStore;
use kernels_core::optim::AdamW;
use kernels_core::{Backend, Rng, Tensor, io};

use crate::commands::op::write_atomically;
use crate::{CliResult, emit, fail};

/// The shipped weights (committed; `kernels gru train` writes here by default).
pub fn default_weights() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/world/world.safetensors")
}

/// Seeds of the simulated data: training and held-out trajectories never share initial states.
pub const TRAIN_SEED: u64 = 1;
pub const HELD_OUT_SEED: u64 = 2;
/// Held-out set: trajectories x observations.
pub const HELD_OUT: (usize, usize) = (64, 120);
/// Steps predicted ahead.
pub const HORIZON: usize = 10;

/// Loads a world model from a safetensors file onto `backend` (sizes inferred from the shapes).
pub fn load_world(backend: Rc<dyn Backend>, path: &Path) -> CliResult<(WorldModel, ParamStore)> {
    let bytes = std::fs::read(path)
        .map_err(|e| fail(format!("cannot read weights {}: {e}", path.display())))?;
    WorldModel::load(backend, &bytes).map_err(|e| fail(format!("weights {}: {e}", path.display())))
}

/// Saves `store` as F16 safetensors, atomically (the weights are small and F16 halves them; the
/// loader widens them back to f32).
pub fn save_f16(store: &ParamStore, path: &Path) -> CliResult<()> {
    let host = pollster::block_on(store.to_host())?;
    let mut bufs: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, t) in &host {
        let bytes: Vec<u8> = t
            .as_f32()?
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        bufs.push((name.clone(), t.shape().to_vec(), bytes));
    }
    let views = bufs
        .iter()
        .map(|(n, s, b)| {
            Ok((
                n.as_str(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F16, s.clone(), b)?,
            ))
        })
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    let bytes = safetensors::serialize(views, None)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    write_atomically(path, &bytes)
        .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    Ok(())
}

/// Options of `kernels gru train`.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub out: PathBuf,
    /// Continue from these weights instead of a fresh initialization.
    pub init: Option<PathBuf>,
    pub iters: usize,
    /// Stop early (saving) after this many minutes.
    pub max_minutes: f64,
    pub batch: usize,
    pub horizon: usize,
    pub lr: f32,
    pub seed: u64,
    /// Training trajectories x observations.
    pub trajectories: usize,
    pub length: usize,
    pub hidden: usize,
    pub members: usize,
}

/// `kernels gru train`: BPTT with AdamW on simulated trajectories; saves every 100 iterations
/// and at the end, then evaluates on the held-out set.
pub fn train(backend: Rc<dyn Backend>, reason: &str, o: &TrainOptions) -> CliResult<()> {
    let data = sim::trajectories(TRAIN_SEED, o.trajectories, o.length)?;
    let windows = Windows::new(&data, o.trajectories, o.length, sim::FEATURES)?;
    let (model, mut store) = match &o.init {
        Some(p) => load_world(backend.clone(), p)?,
        None => {
            let config = WorldConfig {
                hidden: o.hidden,
                members: o.members,
                ..WorldConfig::DEFAULT
            };
            let mut store = ParamStore::new(backend.clone());
            let model = WorldModel::new(&mut store, config, &mut Rng::new(o.seed))?;
            (model, store)
        }
    };
    emit(&format!(
        "training the world model on {} ({reason}): {:?}, {} parameters; {} trajectories x {} \
         observations of the damped double pendulum; batch {}, horizon {}, AdamW lr {}\n",
        backend.name(),
        model.config,
        store.numel(),
        o.trajectories,
        o.length,
        o.batch,
        o.horizon,
        o.lr
    ))?;
    let mut opt = AdamW::new(o.lr).weight_decay(1e-4);
    let mut rng = Rng::new(o.seed ^ 0x9e37_79b9);
    let bar = indicatif::ProgressBar::new(o.iters as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta}) {msg}",
        )?
        .progress_chars("=> "),
    );
    let start = Instant::now();
    let limit = Duration::from_secs_f64(o.max_minutes.max(0.0) * 60.0);
    let mut smoothed: Option<f64> = None;
    let mut done = 0;
    for it in 0..o.iters {
        // Cosine decay to a tenth of the peak rate.
        let frac = it as f32 / o.iters.max(1) as f32;
        opt.lr = o.lr * (0.1 + 0.9 * 0.5 * (1.0 + (std::f32::consts::PI * frac).cos()));
        let (s0, truth) = windows.sample(&mut rng, o.batch, o.horizon)?;
        let loss = model.train_step(&mut store, &mut opt, &s0, &truth)?;
        done = it + 1;
        if it % 10 == 0 || done == o.iters {
            let l = f64::from(pollster::block_on(backend.download(&loss))?.to_scalar()?);
            if !l.is_finite() {
                bar.abandon();
                return Err(fail(format!(
                    "training diverged at iteration {it}: loss {l}"
                )));
            }
            let s = smoothed.map_or(l, |s| 0.8 * s + 0.2 * l);
            smoothed = Some(s);
            bar.set_message(format!("loss {s:.5} lr {:.1e}", opt.lr));
        }
        if done % 100 == 0 {
            save_f16(&store, &o.out)?;
        }
        bar.inc(1);
        if start.elapsed() > limit {
            bar.println(format!("time limit reached after {done} iterations"));
            break;
        }
    }
    bar.finish();
    save_f16(&store, &o.out)?;
    emit(&format!(
        "{done} iterations in {:.1} s; weights written to {}\n",
        start.elapsed().as_secs_f64(),
        o.out.display()
    ))?;
    let eval = held_out(&model, &store, o.horizon)?;
    emit(&eval_table(&eval))?;
    Ok(())
}

/// Evaluates on the held-out trajectories (every 4th window of each).
pub fn held_out(model: &WorldModel, store: &ParamStore, horizon: usize) -> CliResult<Evaluation> {
    let (count, len) = HELD_OUT;
    let data = sim::trajectories(HELD_OUT_SEED, count, len)?;
    let windows = Windows::new(&data, count, len, sim::FEATURES)?;
    let starts = windows.grid(horizon, 4);
    Ok(pollster::block_on(world::evaluate(
        model, store, &windows, &starts, horizon, 64,
    ))?)
}

/// Per-step model and persistence MSE, their ratio, and the ensemble spread.
pub fn eval_table(e: &Evaluation) -> String {
    let mut s = format!(
        "held-out: {} windows of the damped double pendulum (seed {HELD_OUT_SEED}), MSE per feature\n\
         step  model (ensemble mean)  persistence  model/persistence  ensemble spread\n",
        e.windows
    );
    for (t, ((m, p), sp)) in e
        .model_mse
        .iter()
        .zip(&e.persistence_mse)
        .zip(&e.spread)
        .enumerate()
    {
        s += &format!(
            "{:>4}  {m:>21.3e}  {p:>11.3e}  {:>17.3}  {sp:>15.3e}\n",
            t + 1,
            m / p
        );
    }
    s += &format!(
        "mean  {:>21.3e}  {:>11.3e}  {:>17.3}\n",
        e.model(),
        e.persistence(),
        e.model() / e.persistence()
    );
    s
}

/// `kernels gru predict`: the held-out evaluation and one batch's residual compression, as text.
pub fn predict(
    backend: Rc<dyn Backend>,
    weights: &Path,
    horizon: usize,
    rank: usize,
) -> CliResult<String> {
    let (model, store) = load_world(backend.clone(), weights)?;
    let mut s = format!(
        "world model {} on {}: {:?}\n",
        weights.display(),
        backend.name(),
        model.config
    );
    let eval = held_out(&model, &store, horizon)?;
    s += &eval_table(&eval);
    let c = compression_on_held_out(&model, &store, horizon, 32, rank)?;
    s += &format!(
        "residuals of {} windows ({} x {}): rank-{} svd_lowrank keeps {:.2}x fewer numbers; \
         reconstruction error {:.3} (relative Frobenius); MSE {:.3e} -> {:.3e} after correction; \
         leading singular values {:?}\n",
        32,
        c.rows,
        c.cols,
        c.rank,
        c.ratio,
        c.rel_error,
        c.mse_pred,
        c.mse_corrected,
        c.singular_values
            .iter()
            .take(5)
            .map(|v| format!("{v:.3}"))
            .collect::<Vec<_>>()
    );
    Ok(s)
}

/// Held-out windows for the figures and the plot: the first `batch` windows of the grid.
fn held_out_batch(horizon: usize, batch: usize) -> CliResult<(Tensor, Tensor)> {
    let (count, len) = HELD_OUT;
    let data = sim::trajectories(HELD_OUT_SEED, count, len)?;
    let windows = Windows::new(&data, count, len, sim::FEATURES)?;
    let starts: Vec<(usize, usize)> = (0..batch).map(|b| (b % count, 7 * (b / count))).collect();
    Ok(windows.gather(&starts, horizon)?)
}

/// Rank-`rank` compression of the ensemble mean's residuals on `batch` held-out windows.
pub fn compression_on_held_out(
    model: &WorldModel,
    store: &ParamStore,
    horizon: usize,
    batch: usize,
    rank: usize,
) -> CliResult<world::CompressionReport> {
    let (s0, truth) = held_out_batch(horizon, batch)?;
    let backend = store.backend().clone();
    let g = Graph::inference(backend.clone());
    let p = store.bind(&g)?;
    let s0 = g.constant(backend.upload(&s0)?)?;
    let truth = g.constant(backend.upload(&truth)?)?;
    let roll = model.rollout(&g, &p, &s0, horizon)?;
    let (mean, _) = ensemble_stats(&g, &roll)?;
    let (_, rep) = pollster::block_on(compress_residuals(&g, &mean, &truth, rank, 0))?;
    Ok(rep)
}

/// The parameters of a one-layer `torch.nn.GRU`, by their `state_dict` names.
pub const GRU_WEIGHTS: [&str; 4] = ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"];

fn shape_error(file: &str, name: &str, t: &Tensor, want: String) -> crate::CliError {
    fail(format!(
        "gru run: {file} tensor `{name}` has shape {:?}, expected {want}",
        t.shape()
    ))
}

fn only_names(
    file: &str,
    map: &BTreeMap<String, Tensor>,
    allowed: &[&str],
    what: &str,
) -> CliResult<()> {
    let extra: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| !allowed.contains(k))
        .collect();
    if extra.is_empty() {
        Ok(())
    } else {
        Err(fail(format!(
            "gru run: {file} holds unexpected tensor(s) {extra:?}; {what}"
        )))
    }
}

fn get<'a>(file: &str, map: &'a BTreeMap<String, Tensor>, name: &str) -> CliResult<&'a Tensor> {
    map.get(name)
        .ok_or_else(|| fail(format!("gru run: {file} has no tensor `{name}`")))
}

/// A one-layer GRU with `nn.GRU` weights (`weight_ih_l0` `[3H, I]`, `weight_hh_l0` `[3H, H]`,
/// `bias_ih_l0`, `bias_hh_l0` `[3H]`) over `x` `[seq, batch, I]` from `h0` `[1, batch, H]`
/// (zeros when absent): `output` `[seq, batch, H]` and `h_n` `[1, batch, H]`, as PyTorch
/// returns them. Every shape is checked first, with an error naming the tensor.
pub fn run_gru(
    backend: &dyn Backend,
    weights: &BTreeMap<String, Tensor>,
    inputs: &BTreeMap<String, Tensor>,
) -> CliResult<BTreeMap<String, Tensor>> {
    let (wf, xf) = ("--weights", "--input");
    only_names(
        wf,
        weights,
        &GRU_WEIGHTS,
        "a one-layer nn.GRU (bias=True) state_dict holds exactly weight_ih_l0, weight_hh_l0, \
         bias_ih_l0, bias_hh_l0",
    )?;
    only_names(xf, inputs, &["x", "h0"], "expected x and optionally h0")?;
    let w_ih = get(wf, weights, "weight_ih_l0")?;
    let (gates, input) = match w_ih.shape() {
        &[g, i] if g > 0 && g % 3 == 0 && i > 0 => (g, i),
        _ => {
            return Err(shape_error(
                wf,
                "weight_ih_l0",
                w_ih,
                "[3 * hidden, input] (non-empty)".into(),
            ));
        }
    };
    let hidden = gates / 3;
    let w_hh = get(wf, weights, "weight_hh_l0")?;
    if w_hh.shape() != [gates, hidden] {
        return Err(shape_error(
            wf,
            "weight_hh_l0",
            w_hh,
            format!("[{gates}, {hidden}] (hidden {hidden} from weight_ih_l0)"),
        ));
    }
    let (b_ih, b_hh) = (
        get(wf, weights, "bias_ih_l0")?,
        get(wf, weights, "bias_hh_l0")?,
    );
    for (n, b) in [("bias_ih_l0", b_ih), ("bias_hh_l0", b_hh)] {
        if b.shape() != [gates] {
            return Err(shape_error(wf, n, b, format!("[{gates}]")));
        }
    }
    let x = get(xf, inputs, "x")?;
    let (seq, batch) = match x.shape() {
        &[s, b, i] if i == input && s > 0 && b > 0 => (s, b),
        _ => {
            return Err(shape_error(
                xf,
                "x",
                x,
                format!("[seq, batch, {input}] (input size {input} from weight_ih_l0, non-empty)"),
            ));
        }
    };
    let h0 = match inputs.get("h0") {
        Some(h) if h.shape() == [1, batch, hidden] => h.reshape(&[batch, hidden])?,
        Some(h) => {
            return Err(shape_error(
                xf,
                "h0",
                h,
                format!(
                    "[1, {batch}, {hidden}] (one layer, batch {batch} from x, hidden {hidden})"
                ),
            ));
        }
        None => Tensor::zeros(&[batch, hidden])?,
    };
    for (file, name, t) in [
        (xf, "x", x),
        (xf, "h0", &h0),
        (wf, "weight_ih_l0", w_ih),
        (wf, "weight_hh_l0", w_hh),
        (wf, "bias_ih_l0", b_ih),
        (wf, "bias_hh_l0", b_hh),
    ] {
        if let Some((i, v)) = t.as_f32()?.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(fail(format!(
                "gru run: {file} tensor `{name}` holds {v} at flat index {i}"
            )));
        }
    }
    let op = kernels_core::Op::GruSequence;
    let outs = crate::parity::run_on(
        backend,
        &op,
        kernels_core::Direction::Forward,
        &[x, &h0, w_ih, w_hh, b_ih, b_hh],
    )?;
    let [output, h_n]: [Tensor; 2] = outs
        .try_into()
        .map_err(|_| fail("gru run: gru_sequence did not return (output, h_n)"))?;
    debug_assert_eq!(output.shape(), [seq, batch, hidden]);
    let mut out = BTreeMap::new();
    out.insert("output".to_string(), output);
    out.insert("h_n".to_string(), h_n.reshape(&[1, batch, hidden])?);
    Ok(out)
}

fn read_tensors(flag: &str, path: &Path) -> CliResult<BTreeMap<String, Tensor>> {
    let bytes = std::fs::read(path).map_err(|e| {
        fail(format!(
            "gru run: cannot read {flag} {}: {e}",
            path.display()
        ))
    })?;
    io::load(&bytes).map_err(|e| {
        fail(format!(
            "gru run: {flag} {} is not a valid safetensors file: {e}",
            path.display()
        ))
    })
}

/// `kernels gru run`: reads both files, runs [`run_gru`], writes `out` atomically (nothing is
/// written on any error). Returns a one-line summary.
pub fn run_files(
    weights: &Path,
    input: &Path,
    out: &Path,
    backend: Option<&str>,
) -> CliResult<String> {
    let w = read_tensors("--weights", weights)?;
    let x = read_tensors("--input", input)?;
    let selected = kernels_gpu::select_backend(kernels_gpu::BackendChoice::from_arg(backend)?)?;
    let result = run_gru(selected.backend.as_ref(), &w, &x)?;
    let bytes = io::save(&result)?;
    write_atomically(out, &bytes)
        .map_err(|e| fail(format!("gru run: cannot write {}: {e}", out.display())))?;
    Ok(format!(
        "gru_sequence on {}: wrote output{:?}, h_n{:?} to {}\n",
        selected.backend.name(),
        result.get("output").map(Tensor::shape).unwrap_or_default(),
        result.get("h_n").map(Tensor::shape).unwrap_or_default(),
        out.display()
    ))
}
