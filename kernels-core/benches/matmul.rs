//! Single-threaded f32 matmul: the fast path vs `matrixmultiply::sgemm`, plus the reference at
//! small sizes. Throughput is `2 n^3` elements per iteration, so criterion's elements/s figure
//! is FLOP/s.
//!
//! `cargo bench -p kernels-core --bench matmul` (add `-- --quick` for a rough pass).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kernels_core::cpu::fast::gemm::Kernel;
use kernels_core::cpu::{self, View};
use kernels_core::{Direction, Op, Rng};

const SIZES: [usize; 4] = [128, 256, 512, 1024];
/// The reference is plain loops: only the small sizes finish in reasonable time.
const REFERENCE_SIZES: [usize; 2] = [128, 256];

fn matmul(c: &mut Criterion) {
    let op = Op::Matmul {
        trans_a: false,
        trans_b: false,
    };
    let mut group = c.benchmark_group("matmul");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    eprintln!("fast matmul kernel: {}", Kernel::best().name());
    for n in SIZES {
        let mut rng = Rng::new(n as u64);
        let a = rng.uniform_vec(n * n, -1.0, 1.0);
        let b = rng.uniform_vec(n * n, -1.0, 1.0);
        let shape = [n, n];
        let args = [View::float(&shape, &a), View::float(&shape, &b)];
        group.throughput(Throughput::Elements(2 * (n as u64).pow(3)));

        group.bench_with_input(BenchmarkId::new("fast", n), &n, |bench, _| {
            bench.iter(|| cpu::fast::run(black_box(&op), Direction::Forward, black_box(&args)))
        });

        let mut out = vec![0.0f32; n * n];
        group.bench_with_input(BenchmarkId::new("matrixmultiply", n), &n, |bench, _| {
            bench.iter(|| {
                // SAFETY: a, b and out each hold n * n f32 values, row-major with row stride n.
                unsafe {
                    matrixmultiply::sgemm(
                        n,
                        n,
                        n,
                        1.0,
                        black_box(a.as_ptr()),
                        n as isize,
                        1,
                        black_box(b.as_ptr()),
                        n as isize,
                        1,
                        0.0,
                        out.as_mut_ptr(),
                        n as isize,
                        1,
                    )
                }
            })
        });

        if REFERENCE_SIZES.contains(&n) {
            match cpu::run::<f32>(&op, Direction::Forward, &args) {
                Ok(_) => {
                    group.bench_with_input(BenchmarkId::new("reference", n), &n, |bench, _| {
                        bench.iter(|| cpu::run::<f32>(black_box(&op), Direction::Forward, &args))
                    });
                }
                Err(e) => eprintln!("reference matmul skipped: {e}"),
            }
        }
    }
    group.finish();
}

criterion_group!(benches, matmul);
criterion_main!(benches);
