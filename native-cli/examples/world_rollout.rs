//! Roll out the GRU world model: the trained weights shipped with the CLI, ten steps ahead from
//! held-out states of the simulated double pendulum, on the CPU and (when there is one) on a
//! wgpu adapter. Prints the ensemble mean's error per step against persistence ("no change"),
//! the ensemble's spread, and how far the two backends' predictions are apart.
//!
//! `cargo run --release -p native-cli --example world_rollout`

use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::models::world::{Windows, WorldModel, ensemble_stats, per_step_mse, sim};
use kernels_core::{Backend, CpuBackend, Tensor};

const WEIGHTS: &[u8] = include_bytes!("../models/world/world.safetensors");
const STEPS: usize = 10;
const BATCH: usize = 8;

/// Ensemble mean `[STEPS, BATCH, features]` and spread, on the host.
fn rollout(backend: Rc<dyn Backend>, s0: &Tensor) -> kernels_core::Result<(Tensor, Tensor)> {
    let (model, store) = WorldModel::load(backend.clone(), WEIGHTS)?;
    let g = Graph::inference(backend.clone());
    let p = store.bind(&g)?;
    let roll = model.rollout(&g, &p, &g.constant(backend.upload(s0)?)?, STEPS)?;
    let (mean, spread) = ensemble_stats(&g, &roll)?;
    backend.flush()?;
    Ok((
        pollster::block_on(backend.download(mean.tensor()))?,
        pollster::block_on(backend.download(spread.tensor()))?,
    ))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Held-out trajectories (seed 2, as `kernels gru predict`): windows starting at step 20.
    let data = sim::trajectories(2, BATCH, 40)?;
    let windows = Windows::new(&data, BATCH, 40, sim::FEATURES)?;
    let starts: Vec<(usize, usize)> = (0..BATCH).map(|b| (b, 20)).collect();
    let (s0, truth) = windows.gather(&starts, STEPS)?;

    let (mean, spread) = rollout(Rc::new(CpuBackend::new()), &s0)?;
    let model = per_step_mse(&mean, &truth)?;
    let persistence = kernels_core::models::world::persistence_mse(&s0, &truth)?;
    let spread = spread.to_f32_vec()?;
    let per_step = spread.len() / STEPS;
    println!("step  model MSE  persistence MSE  ensemble spread (mean std)");
    for t in 0..STEPS {
        let sp = spread[t * per_step..(t + 1) * per_step].iter().sum::<f32>() / per_step as f32;
        println!(
            "{:>4}  {:>9.2e}  {:>15.2e}  {sp:>10.2e}",
            t + 1,
            model[t],
            persistence[t]
        );
    }

    match kernels_gpu::WgpuBackend::new() {
        Ok(gpu) => {
            let name = gpu.name();
            let (gpu_mean, _) = rollout(Rc::new(gpu), &s0)?;
            let diff = mean
                .to_f32_vec()?
                .iter()
                .zip(gpu_mean.to_f32_vec()?)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            println!("{name}: the ensemble mean is within {diff:.1e} of the CPU's");
            if diff > 1e-3 {
                return Err(format!("wgpu's rollout differs from the CPU's by {diff}").into());
            }
        }
        Err(e) => println!("no wgpu adapter ({e}): CPU only"),
    }
    Ok(())
}
