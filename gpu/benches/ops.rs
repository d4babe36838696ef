//! matmul and softmax on wgpu and on the CPU (fast path), small sizes. A wgpu iteration is the
//! op plus a 4-byte read that submits the work and waits for the device, so it measures what a
//! caller waiting on one result sees. Without an adapter only the CPU runs (said on stderr).
//!
//! `cargo bench -p kernels-gpu --bench ops` (CI only compiles it: `cargo bench --no-run`).
//! Software adapters (lavapipe) make the wgpu figures meaningless as GPU speed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::rc::Rc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kernels_core::backend::now_or_never;
use kernels_core::{Backend, CpuBackend, Direction, Op, Rng, Tensor};
use kernels_gpu::WgpuBackend;

const MATMUL_SIZES: [usize; 2] = [64, 128];
const SOFTMAX_SHAPES: [(usize, usize); 2] = [(64, 256), (256, 1024)];

fn backends() -> Vec<(String, Rc<dyn Backend>, Option<Tensor>)> {
    let mut v: Vec<(String, Rc<dyn Backend>, Option<Tensor>)> =
        vec![("cpu".into(), Rc::new(CpuBackend::new()), None)];
    match WgpuBackend::new() {
        Ok(g) => {
            let fence = g.upload(&Tensor::zeros(&[1]).unwrap()).unwrap();
            v.push(("wgpu".into(), Rc::new(g), Some(fence)));
        }
        Err(e) => eprintln!("no wgpu adapter ({e}): CPU only"),
    }
    v
}

fn sync(be: &dyn Backend, fence: Option<&Tensor>) {
    if let Some(f) = fence {
        match now_or_never(be.download(f)) {
            Some(r) => drop(r.unwrap()),
            None => drop(pollster::block_on(be.download(f)).unwrap()),
        }
    }
}

fn run_op(c: &mut Criterion, group: &str, op: &Op, cases: Vec<(String, u64, Vec<Tensor>)>) {
    let backends = backends();
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (label, work, inputs) in &cases {
        g.throughput(Throughput::Elements(*work));
        for (name, be, fence) in &backends {
            let dev: Vec<Tensor> = inputs.iter().map(|t| be.upload(t).unwrap()).collect();
            let refs: Vec<&Tensor> = dev.iter().collect();
            g.bench_with_input(BenchmarkId::new(name.as_str(), label), &(), |b, _| {
                b.iter(|| {
                    let out = be.run(black_box(op), Direction::Forward, &refs).unwrap();
                    sync(be.as_ref(), fence.as_ref());
                    out
                })
            });
        }
    }
    g.finish();
}

/// Throughput in FLOP (`2 n^3`).
fn matmul(c: &mut Criterion) {
    let mut rng = Rng::new(1);
    let cases = MATMUL_SIZES
        .iter()
        .map(|&n| {
            let a = rng.uniform_tensor(&[n, n], -1.0, 1.0).unwrap();
            let b = rng.uniform_tensor(&[n, n], -1.0, 1.0).unwrap();
            (format!("{n}"), 2 * (n as u64).pow(3), vec![a, b])
        })
        .collect();
    let op = Op::Matmul {
        trans_a: false,
        trans_b: false,
    };
    run_op(c, "matmul", &op, cases);
}

/// Throughput in elements.
fn softmax(c: &mut Criterion) {
    let mut rng = Rng::new(2);
    let cases = SOFTMAX_SHAPES
        .iter()
        .map(|&(r, n)| {
            let x = rng.normal_tensor(&[r, n], 0.0, 1.0).unwrap();
            (format!("{r}x{n}"), (r * n) as u64, vec![x])
        })
        .collect();
    run_op(c, "softmax", &Op::Softmax { causal: false }, cases);
}

criterion_group!(benches, matmul, softmax);
criterion_main!(benches);
