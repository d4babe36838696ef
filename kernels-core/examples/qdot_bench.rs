//! Times `x [m, k] . W^T` with a quantized `W [n, k]` on the CPU backend, 8-bit activations
//! (integer dot products, `cpu::fast::qdot`) against f32 activations
//! (`with_exact_activations(true)`: the earlier path), interleaved round by round.
//!
//! `cargo run -p kernels-core --release --example qdot_bench [rounds] [iters]`; one thread
//! unless built with the `threads` feature. Prints, per case, the median time of each round
//! for both paths and the speedup's range over rounds.

use std::time::Instant;

use kernels_core::cpu::fast::qdot::Family;
use kernels_core::{Backend, CpuBackend, DType, Direction, Op, Rng, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time(b: &CpuBackend, x: &Tensor, w: &Tensor, iters: usize) -> kernels_core::Result<f64> {
    let op = Op::Matmul {
        trans_a: false,
        trans_b: true,
    };
    let mut t = Vec::with_capacity(iters);
    for _ in 0..iters {
        let s = Instant::now();
        let y = b.run(&op, Direction::Forward, &[x, w])?;
        std::hint::black_box(y);
        t.push(s.elapsed().as_secs_f64());
    }
    Ok(median(t))
}

fn main() -> kernels_core::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rounds = args.first().copied().unwrap_or(5);
    let iters = args.get(1).copied().unwrap_or(20);
    println!("family {}", Family::best().name());
    let cases = [
        (DType::Q4_0, 1, 896, 4864),
        (DType::Q4_0, 1, 4864, 896),
        (DType::Q8_0, 1, 896, 4864),
        (DType::Q8_0, 1, 4864, 896),
        (DType::Q5_0, 1, 896, 4864),
        (DType::Q4_K, 1, 4864, 896),
        (DType::Q4_0, 64, 896, 4864),
        (DType::Q4_K, 64, 4864, 896),
    ];
    let mut rng = Rng::new(7);
    let fast = CpuBackend::new();
    let exact = CpuBackend::new().with_exact_activations(true);
    for (dtype, m, k, n) in cases {
        let w = Tensor::from_f32(&[n, k], rng.uniform_vec(n * k, -1.0, 1.0))?.quantize(dtype)?;
        let x = Tensor::from_f32(&[m, k], rng.uniform_vec(m * k, -1.0, 1.0))?;
        let (mut tf, mut te, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let e = time(&exact, &x, &w, iters)?;
            let f = time(&fast, &x, &w, iters)?;
            te.push(e);
            tf.push(f);
            ratio.push(e / f);
        }
        let lo = ratio.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratio.iter().copied().fold(0.0, f64::max);
        println!(
            "{dtype} m {m} k {k} n {n}: f32 acts {:.1} us (median of rounds), 8-bit {:.1} us; speedup {:.2}x median, {lo:.2}-{hi:.2}x over {rounds} rounds",
            median(te.clone()) * 1e6,
            median(tf.clone()) * 1e6,
            median(ratio.clone()),
        );
    }
    Ok(())
}
