//! Train a small MLP on the CPU, then the same model from the same seed on wgpu, and compare.
//!
//! The task: points in the square [-1, 1]^2, labelled by which third of the circle their angle
//! falls in. A 2 -> 64 -> 3 MLP with ReLU, cross-entropy and AdamW learns it in a few hundred
//! steps. The model is written once against `dyn Backend`; only the backend changes.
//!
//! `cargo run --release -p native-cli --example train_mlp`

use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::nn::{Linear, ParamStore};
use kernels_core::op::Activation;
use kernels_core::optim::AdamW;
use kernels_core::{Backend, CpuBackend, Rng, Tensor};

const BATCH: usize = 128;
const STEPS: usize = 300;

/// The points and their class: the angle's third of the circle.
fn data(rng: &mut Rng) -> kernels_core::Result<(Tensor, Tensor)> {
    let x = rng.uniform_tensor(&[BATCH, 2], -1.0, 1.0)?;
    let v = x.to_f32_vec()?;
    let labels = v
        .chunks(2)
        .map(|p| {
            let turn = (p[1].atan2(p[0]) / std::f32::consts::TAU).rem_euclid(1.0);
            ((turn * 3.0) as i32).min(2)
        })
        .collect();
    Ok((x, Tensor::from_i32(&[BATCH], labels)?))
}

/// Trains from `seed` on `backend`; returns the losses and the accuracy on fresh points.
fn train(backend: Rc<dyn Backend>, seed: u64) -> kernels_core::Result<(Vec<f32>, f32)> {
    let mut rng = Rng::new(seed);
    let mut store = ParamStore::new(backend.clone());
    let fc1 = Linear::new(&mut store, "fc1", 2, 64, true, &mut rng)?;
    let fc2 = Linear::new(&mut store, "fc2", 64, 3, true, &mut rng)?;
    let mut opt = AdamW::new(1e-2);
    let mut losses = Vec::new();
    for _ in 0..STEPS {
        let (x, y) = data(&mut rng)?;
        let g = Graph::new(backend.clone());
        let p = store.bind(&g)?;
        let h = fc1.forward_act(&g, &p, &g.constant(backend.upload(&x)?)?, Activation::Relu)?;
        let logits = fc2.forward(&g, &p, &h)?;
        let loss = g.cross_entropy(&logits, &g.constant(backend.upload(&y)?)?)?;
        let grads = g.backward(&loss)?;
        opt.step(&mut store, &grads)?;
        losses.push(pollster::block_on(backend.download(loss.tensor()))?.to_f32_vec()?[0]);
    }
    // Accuracy on points never trained on.
    let (x, y) = data(&mut rng)?;
    let g = Graph::inference(backend.clone());
    let p = store.bind(&g)?;
    let h = fc1.forward_act(&g, &p, &g.constant(backend.upload(&x)?)?, Activation::Relu)?;
    let predicted = g.argmax(&fc2.forward(&g, &p, &h)?)?;
    backend.flush()?;
    let predicted = pollster::block_on(backend.download(predicted.tensor()))?.to_i64_vec()?;
    let labels = y.to_i64_vec()?;
    let right = predicted
        .iter()
        .zip(&labels)
        .filter(|(a, b)| a == b)
        .count();
    Ok((losses, right as f32 / BATCH as f32))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (cpu_losses, cpu_acc) = train(Rc::new(CpuBackend::new()), 7)?;
    for (step, loss) in cpu_losses.iter().enumerate().step_by(50) {
        println!("cpu  step {step:>3}: loss {loss:.4}");
    }
    println!(
        "cpu: final loss {:.4}, held-out accuracy {:.1}%",
        cpu_losses[STEPS - 1],
        100.0 * cpu_acc
    );
    if cpu_acc < 0.9 {
        return Err(format!("the CPU run learned too little: {cpu_acc}").into());
    }

    let gpu = match kernels_gpu::WgpuBackend::new() {
        Ok(gpu) => Rc::new(gpu),
        Err(e) => {
            println!("no wgpu adapter ({e}): the wgpu half is skipped");
            return Ok(());
        }
    };
    let name = gpu.name();
    let (gpu_losses, gpu_acc) = train(gpu, 7)?;
    let worst = cpu_losses
        .iter()
        .zip(&gpu_losses)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!(
        "{name}: final loss {:.4}, held-out accuracy {:.1}%; largest loss difference from the CPU \
         over {STEPS} steps: {worst:.1e}",
        gpu_losses[STEPS - 1],
        100.0 * gpu_acc
    );
    // The same seed, data and arithmetic up to summation order: the curves stay together.
    if worst > 1e-2 {
        return Err(format!("wgpu's losses left the CPU's by {worst}").into());
    }
    Ok(())
}
