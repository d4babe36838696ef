//! The f16 / bf16 weight products of `cpu::fast::half_dot` (f32 activations, the weight widened
//! in registers): the decode shapes of Qwen2.5-0.5B, `x [1, k] . W^T` for `W [n, k]` of f16
//! (896 x 4864 gate/up, 4864 x 896 down, 896 x 151936 the tied embedding's head), on each
//! kernel family this CPU runs and on 1 and 2 threads. Throughput is the weight's bytes, so
//! criterion's bytes/s is the rate the weight streams at (the memory roof's unit). As in a
//! model's decode, the weight comes from memory, not the caches: the iterations take turns over
//! enough copies of a small weight to pass [`COLD_BYTES`] (more than an L3). One prefill
//! shape (`x [64, 896]`, 4864 rows) is timed as FLOP/s (`2 rows k n` elements).
//!
//! `cargo bench -p kernels-core --bench half_dot` (add `-- --quick` for a rough pass; save a
//! baseline with `-- --save-baseline before`, compare with `-- --baseline before`).

// A benchmark binary, not library code: a failed setup may stop it.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kernels_core::cpu::fast::half_dot::{Family, product_t};
use kernels_core::{DType, Rng, quant};

/// `(k, n)`: the weight is `[n, k]`.
const DECODE: [(usize, usize); 3] = [(896, 4864), (4864, 896), (896, 151_936)];
const PREFILL: (usize, usize, usize) = (64, 896, 4864);
/// Bytes of weight copies the decode iterations cycle through.
const COLD_BYTES: usize = 96 << 20;

fn weight(dtype: DType, n: usize, k: usize, seed: u64) -> Vec<u8> {
    let vals = Rng::new(seed).uniform_vec(n * k, -1.0, 1.0);
    quant::quantize(dtype, &vals).expect("encode the weight")
}

fn half_dot(c: &mut Criterion) {
    let mut group = c.benchmark_group("half_dot");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let families = Family::available();
    for (k, n) in DECODE {
        let one = weight(DType::F16, n, k, (k * n) as u64);
        let copies: Vec<Vec<u8>> = vec![one; COLD_BYTES.div_ceil(2 * n * k)];
        let x = Rng::new(k as u64).uniform_vec(k, -1.0, 1.0);
        let mut t = vec![0.0f32; n];
        group.throughput(Throughput::Bytes((2 * n * k) as u64));
        for &family in &families {
            for threads in [1, 2] {
                let id = BenchmarkId::new(
                    format!("f16-decode-{family:?}-t{threads}"),
                    format!("{k}x{n}"),
                );
                let mut turn = 0;
                group.bench_function(id, |b| {
                    b.iter(|| {
                        turn = (turn + 1) % copies.len();
                        product_t(
                            family,
                            threads,
                            DType::F16,
                            black_box(&copies[turn]),
                            black_box(&x),
                            (1, k, n),
                            &mut t,
                        )
                        .expect("product")
                    })
                });
            }
        }
    }
    let (rows, k, n) = PREFILL;
    let w = weight(DType::F16, n, k, 7);
    let x = Rng::new(8).uniform_vec(rows * k, -1.0, 1.0);
    let mut t = vec![0.0f32; rows * n];
    group.throughput(Throughput::Elements((2 * rows * k * n) as u64));
    let family = Family::best();
    for threads in [1, 2] {
        let id = BenchmarkId::new(
            format!("f16-prefill-{family:?}-t{threads}"),
            format!("{rows}x{k}x{n}"),
        );
        group.bench_function(id, |b| {
            b.iter(|| {
                t.fill(0.0);
                product_t(
                    family,
                    threads,
                    DType::F16,
                    black_box(&w),
                    black_box(&x),
                    (rows, k, n),
                    &mut t,
                )
                .expect("product")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, half_dot);
criterion_main!(benches);
