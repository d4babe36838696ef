use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;

use super::*;
use crate::backend::{CpuBackend, now_or_never};

const TINY: WorldConfig = WorldConfig {
    features: 5,
    embed: 4,
    hidden: 6,
    members: 3,
};

fn tiny(seed: u64) -> (WorldModel, ParamStore) {
    let mut store = ParamStore::new(Rc::new(CpuBackend::new()));
    let model = WorldModel::new(&mut store, TINY, &mut Rng::new(seed)).unwrap();
    (model, store)
}

fn ready<T>(f: impl core::future::Future<Output = T>) -> T {
    now_or_never(f).unwrap()
}

fn loss_value(model: &WorldModel, store: &ParamStore, s0: &Tensor, truth: &Tensor) -> f64 {
    let g = Graph::inference(store.backend().clone());
    let p = store.bind(&g).unwrap();
    let s0 = g.constant(s0.clone()).unwrap();
    let truth = g.constant(truth.clone()).unwrap();
    let l = model.loss(&g, &p, &s0, &truth).unwrap();
    f64::from(l.tensor().to_scalar().unwrap())
}

#[test]
fn parameter_names_and_shapes() {
    let mut store = ParamStore::new(Rc::new(CpuBackend::new()));
    WorldModel::new(&mut store, WorldConfig::DEFAULT, &mut Rng::new(0)).unwrap();
    let shape = |n: &str| store.get(n).unwrap().shape().to_vec();
    assert_eq!(shape("encoder.weight"), [128, 64]);
    assert_eq!(shape("members.4.gru.weight_hh_l0"), [768, 256]);
    assert_eq!(shape("members.0.gru.weight_ih_l0"), [768, 128]);
    assert_eq!(shape("members.2.init.weight"), [256, 128]);
    assert_eq!(shape("members.3.readout.weight"), [64, 256]);
    assert_eq!(store.len(), 2 + 5 * 8);
    assert!(!store.contains("members.5.gru.bias_ih_l0"));
}

#[test]
fn rollout_shapes_members_differ_and_zero_readout_is_persistence() {
    let (model, mut store) = tiny(1);
    let mut rng = Rng::new(2);
    let s0 = rng.uniform_tensor(&[7, 5], -1.0, 1.0).unwrap();
    let g = Graph::inference(store.backend().clone());
    let p = store.bind(&g).unwrap();
    let s0v = g.constant(s0.clone()).unwrap();
    let roll = model.rollout(&g, &p, &s0v, 4).unwrap();
    assert_eq!(roll.members(), 3);
    assert_eq!(roll.stacked.shape(), [3, 4, 7, 5]);
    let members = ready(roll.download_members(&**store.backend())).unwrap();
    assert!(members.iter().all(|m| m.shape() == [4, 7, 5]));
    let a = members[0].to_f32_vec().unwrap();
    let b = members[1].to_f32_vec().unwrap();
    assert!(a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-3));
    let (mean, spread) = ensemble_stats(&g, &roll).unwrap();
    let (mean, spread) = (
        mean.tensor().to_f32_vec().unwrap(),
        spread.tensor().to_f32_vec().unwrap(),
    );
    // Mean and population std by hand at one element.
    let vals: Vec<f32> = members.iter().map(|m| m.to_f32_vec().unwrap()[9]).collect();
    let m = vals.iter().sum::<f32>() / 3.0;
    let sd = (vals.iter().map(|v| (v - m) * (v - m)).sum::<f32>() / 3.0).sqrt();
    assert!((mean[9] - m).abs() < 1e-6 && (spread[9] - sd).abs() < 1e-5);

    // The stacked rollout is the per-member one.
    let per = model.rollout_per_member(&g, &p, &s0v, 4).unwrap();
    for (want, got) in per.iter().zip(&members) {
        let (w, o) = (
            want.tensor().to_f32_vec().unwrap(),
            got.to_f32_vec().unwrap(),
        );
        assert!(w.iter().zip(&o).all(|(x, y)| (x - y).abs() < 1e-5));
    }
    // So is the one from weights stacked once.
    let e = model.stacked_weights(&store).unwrap().bind(&g).unwrap();
    let z = model.encode(&g, &p, &s0v).unwrap();
    let again = model.rollout_ensemble(&g, &e, &s0v, &z, 4).unwrap();
    assert!(again.stacked.tensor().bit_eq(roll.stacked.tensor()));

    // With every readout zeroed, each member predicts "no change".
    for e in 0..3 {
        for n in ["weight", "bias"] {
            let name = alloc::format!("members.{e}.readout.{n}");
            let shape = store.get(&name).unwrap().shape().to_vec();
            store.set(&name, Tensor::zeros(&shape).unwrap()).unwrap();
        }
    }
    let g = Graph::inference(store.backend().clone());
    let p = store.bind(&g).unwrap();
    let s0v = g.constant(s0.clone()).unwrap();
    let roll = model.rollout(&g, &p, &s0v, 3).unwrap();
    let s = s0.to_f32_vec().unwrap();
    let v = roll.stacked.tensor().to_f32_vec().unwrap();
    for step in v.chunks_exact(s.len()) {
        assert_eq!(step, s.as_slice());
    }
}

#[test]
fn shape_errors_name_the_problem() {
    let (model, store) = tiny(1);
    let g = Graph::inference(store.backend().clone());
    let p = store.bind(&g).unwrap();
    let bad = g.constant(Tensor::zeros(&[2, 4]).unwrap()).unwrap();
    assert!(matches!(
        model.rollout(&g, &p, &bad, 3),
        Err(Error::BadShape { .. })
    ));
    let s0 = g.constant(Tensor::zeros(&[2, 5]).unwrap()).unwrap();
    assert!(matches!(
        model.rollout(&g, &p, &s0, 0),
        Err(Error::Empty { .. })
    ));
    let truth = g.constant(Tensor::zeros(&[3, 3, 5]).unwrap()).unwrap();
    assert!(matches!(
        model.loss(&g, &p, &s0, &truth),
        Err(Error::ShapeMismatch { .. })
    ));
}

/// BPTT through the whole rollout against central differences of the loss, along a random
/// direction per parameter tensor (f32 loss, so a large step and a loose tolerance).
#[test]
fn bptt_gradients_match_finite_differences() {
    let (model, mut store) = tiny(5);
    let mut rng = Rng::new(6);
    let s0 = rng.uniform_tensor(&[3, 5], -1.0, 1.0).unwrap();
    let truth = rng.uniform_tensor(&[5, 3, 5], -1.0, 1.0).unwrap();
    let g = Graph::new(store.backend().clone());
    let p = store.bind(&g).unwrap();
    let s0v = g.constant(s0.clone()).unwrap();
    let tv = g.constant(truth.clone()).unwrap();
    let loss = model.loss(&g, &p, &s0v, &tv).unwrap();
    let grads = g.backward(&loss).unwrap();
    let names: Vec<String> = store.names().cloned().collect();
    assert_eq!(
        grads.named().len(),
        names.len(),
        "every parameter gets a gradient"
    );
    let eps = 1e-2f32;
    for name in names {
        let orig = store.get(&name).unwrap().clone();
        let shape = orig.shape().to_vec();
        let d = rng.normal_vec(orig.numel(), 0.0, 1.0);
        let gvec = grads.get_named(&name).unwrap().to_f32_vec().unwrap();
        let analytic: f64 = gvec.iter().zip(&d).map(|(a, b)| f64::from(a * b)).sum();
        let o = orig.to_f32_vec().unwrap();
        let mut at = |sign: f32| {
            let v = o
                .iter()
                .zip(&d)
                .map(|(x, dx)| x + sign * eps * dx)
                .collect();
            store
                .set(&name, Tensor::from_f32(&shape, v).unwrap())
                .unwrap();
            loss_value(&model, &store, &s0, &truth)
        };
        let numeric = (at(1.0) - at(-1.0)) / (2.0 * f64::from(eps));
        store.set(&name, orig).unwrap();
        let err = (analytic - numeric).abs();
        assert!(
            err <= 2e-4 + 2e-2 * numeric.abs(),
            "{name}: analytic {analytic}, numeric {numeric}"
        );
    }
}

#[test]
fn training_on_the_pendulum_reduces_the_loss() {
    let cfg = WorldConfig {
        features: sim::FEATURES,
        embed: 16,
        hidden: 16,
        members: 2,
    };
    let mut store = ParamStore::new(Rc::new(CpuBackend::new()));
    let model = WorldModel::new(&mut store, cfg, &mut Rng::new(0)).unwrap();
    let data = sim::trajectories(11, 8, 40).unwrap();
    let windows = Windows::new(&data, 8, 40, sim::FEATURES).unwrap();
    let mut rng = Rng::new(1);
    let (s0, truth) = windows.sample(&mut rng, 16, 4).unwrap();
    let before = loss_value(&model, &store, &s0, &truth);
    let mut opt = AdamW::new(3e-3).weight_decay(0.0);
    for _ in 0..60 {
        let (a, b) = windows.sample(&mut rng, 16, 4).unwrap();
        model.train_step(&mut store, &mut opt, &a, &b).unwrap();
    }
    let after = loss_value(&model, &store, &s0, &truth);
    assert!(after < 0.5 * before, "loss {before} -> {after}");
}

#[test]
fn residual_compression_is_exact_for_low_rank_residuals_and_reports_figures() {
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let g = Graph::inference(backend);
    let mut rng = Rng::new(4);
    let (steps, batch, f, k) = (3, 7, 9, 2);
    let truth = rng.uniform_tensor(&[steps, batch, f], -1.0, 1.0).unwrap();
    // pred = truth + a rank-2 residual.
    let a = rng.normal_vec(steps * batch * k, 0.0, 1.0);
    let b = rng.normal_vec(k * f, 0.0, 1.0);
    let mut pred = truth.to_f32_vec().unwrap();
    for (r, row) in pred.chunks_exact_mut(f).enumerate() {
        for (c, x) in row.iter_mut().enumerate() {
            *x += (0..k).map(|j| a[r * k + j] * b[j * f + c]).sum::<f32>();
        }
    }
    let pred = Tensor::from_f32(&[steps, batch, f], pred).unwrap();
    let tv = g.constant(truth.clone()).unwrap();
    let pv = g.constant(pred).unwrap();
    let (corrected, rep) = ready(compress_residuals(&g, &pv, &tv, k, 0)).unwrap();
    assert_eq!((rep.rows, rep.cols, rep.rank), (21, 9, 2));
    assert!((rep.ratio - 189.0 / (2.0 * 31.0)).abs() < 1e-12);
    assert!(rep.mse_pred > 0.1);
    assert!(rep.rel_error < 1e-3, "{rep:?}");
    let c = corrected.tensor().to_f32_vec().unwrap();
    let t = truth.to_f32_vec().unwrap();
    assert!(c.iter().zip(&t).all(|(x, y)| (x - y).abs() < 1e-3));
    // Rank 1 of a rank-2 residual loses the second direction.
    let (_, rep1) = ready(compress_residuals(&g, &pv, &tv, 1, 0)).unwrap();
    assert!(rep1.rel_error > 0.05 && rep1.rel_error < 1.0, "{rep1:?}");
    assert!(rep1.singular_values[0] >= rep.singular_values[1]);
}

#[test]
fn windows_line_up_with_the_trajectories() {
    let data: Vec<f32> = (0..2 * 6 * 3).map(|i| i as f32).collect();
    let w = Windows::new(&data, 2, 6, 3).unwrap();
    let (s0, truth) = w.gather(&[(1, 2), (0, 0)], 3).unwrap();
    // Trajectory 1, time 2 starts at (1 * 6 + 2) * 3 = 24.
    assert_eq!(s0.to_f32_vec().unwrap(), [24.0, 25.0, 26.0, 0.0, 1.0, 2.0]);
    let t = truth.to_f32_vec().unwrap();
    assert_eq!(&t[..6], &[27.0, 28.0, 29.0, 3.0, 4.0, 5.0]);
    assert_eq!(&t[12..], &[33.0, 34.0, 35.0, 9.0, 10.0, 11.0]);
    assert!(matches!(
        w.gather(&[(0, 3)], 3),
        Err(Error::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        Windows::new(&data, 2, 5, 3),
        Err(Error::BadShape { .. })
    ));
    let p = persistence_mse(&s0, &truth).unwrap();
    assert_eq!(p, [9.0, 36.0, 81.0]);
    assert_eq!(w.grid(3, 2), [(0, 0), (0, 2), (1, 0), (1, 2)]);
}

#[test]
fn batch_rows_is_the_gather_of_those_windows() {
    let data: Vec<f32> = (0..3 * 7 * 2).map(|i| i as f32).collect();
    let w = Windows::new(&data, 3, 7, 2).unwrap();
    let starts = [(2, 1), (0, 3), (1, 0), (2, 2), (0, 0)];
    let (s0, truth) = w.gather(&starts, 3).unwrap();
    for rows in [0..5, 1..4, 3..5, 2..2] {
        let (a, b) = batch_rows(&s0, &truth, rows.clone()).unwrap();
        let (want_a, want_b) = w.gather(&starts[rows.clone()], 3).unwrap();
        assert!(a.bit_eq(&want_a) && b.bit_eq(&want_b), "{rows:?}");
    }
    assert!(matches!(
        batch_rows(&s0, &truth, 4..6),
        Err(Error::IndexOutOfRange { .. })
    ));
    assert!(batch_rows(&truth, &s0, 0..1).is_err());
}

#[test]
fn config_is_inferred_from_a_saved_model() {
    let (_, store) = tiny(3);
    let host = ready(store.to_host()).unwrap();
    assert_eq!(WorldConfig::infer(&host).unwrap(), TINY);
    let mut broken = host.clone();
    broken.remove("encoder.weight");
    assert!(matches!(
        WorldConfig::infer(&broken),
        Err(Error::Missing { .. })
    ));
}

#[test]
fn load_reads_the_sizes_off_the_file_and_names_what_is_missing() {
    let (model, store) = tiny(11);
    let bytes = ready(store.save()).unwrap();
    let (loaded, back) = WorldModel::load(Rc::new(CpuBackend::new()), &bytes).unwrap();
    assert_eq!(loaded.config, model.config);
    let w = |s: &ParamStore| {
        s.get("members.2.readout.weight")
            .unwrap()
            .as_f32()
            .unwrap()
            .to_vec()
    };
    assert_eq!(w(&back), w(&store));
    // A file without the encoder is refused, naming it.
    let mut host = ready(store.to_host()).unwrap();
    host.remove("encoder.weight");
    let err =
        WorldModel::load(Rc::new(CpuBackend::new()), &crate::io::save(&host).unwrap()).unwrap_err();
    assert!(alloc::format!("{err}").contains("encoder.weight"), "{err}");
    assert!(WorldModel::load(Rc::new(CpuBackend::new()), b"not a file").is_err());
}
