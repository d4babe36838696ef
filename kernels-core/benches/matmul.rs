//! Single-threaded f32 matmul: the fast path (the whole op, on the default kernel) and our GEMM
//! on each micro-kernel this CPU runs (`ours-avx512`, `ours-avx2-fma`, ...), vs
//! `matrixmultiply::sgemm` and `gemm::gemm` (one thread each), plus the reference at small
//! sizes. Throughput is `2 n^3` elements per iteration, so criterion's elements/s figure is
//! FLOP/s. A second group times the decode shape `x [1, k] . W^T` (`W [n, k]`): there
//! criterion's elements/s is the weight's bytes/s.
//!
//! `cargo bench -p kernels-core --bench matmul` (add `-- --quick` for a rough pass).

// A benchmark binary, not library code: a failed setup may stop it.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kernels_core::cpu::fast::gemm::{Gemm, Kernel, MatRef};
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
        .measurement_time(Duration::from_secs(3));
    eprintln!("fast matmul kernel: {}", Kernel::best().name());
    // The fast path's own thread count (KERNELS_THREADS) stays whatever it is; `ours-*` and
    // the peers run on one thread.
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
        for kernel in Kernel::available() {
            let mut g = Gemm::new(kernel).with_threads(1);
            let am = MatRef::new(&a, n, n, false).expect("a is n x n");
            let bm = MatRef::new(&b, n, n, false).expect("b is n x n");
            let id = BenchmarkId::new(format!("ours-{}", kernel.name()), n);
            group.bench_with_input(id, &n, |bench, _| {
                bench.iter(|| {
                    out.fill(0.0);
                    g.run(black_box(am), black_box(bm), &mut out, n)
                })
            });
        }

        group.bench_with_input(BenchmarkId::new("gemm", n), &n, |bench, _| {
            bench.iter(|| {
                // SAFETY: a, b and out each hold n * n f32 values, row-major (row stride n,
                // column stride 1); read_dst is false, so out is only written.
                unsafe {
                    gemm::gemm(
                        n,
                        n,
                        n,
                        out.as_mut_ptr(),
                        1,
                        n as isize,
                        false,
                        black_box(a.as_ptr()),
                        1,
                        n as isize,
                        black_box(b.as_ptr()),
                        1,
                        n as isize,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    )
                }
            })
        });

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

/// Decode's products: `x [1, k] . W^T` for a weight `W [n, k]` (the llama's projections and
/// its lm_head), on each kernel with one thread.
fn matvec(c: &mut Criterion) {
    let mut group = c.benchmark_group("matvec");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (k, n) in [
        (288, 288),
        (288, 768),
        (768, 288),
        (288, 32000),
        (4096, 4096),
    ] {
        let mut rng = Rng::new((k * n) as u64);
        let x = rng.uniform_vec(k, -1.0, 1.0);
        let w = rng.uniform_vec(n * k, -1.0, 1.0);
        let mut out = vec![0.0f32; n];
        group.throughput(Throughput::Bytes((4 * n * k) as u64));
        let xm = MatRef::new(&x, 1, k, false).expect("x is 1 x k");
        let wm = MatRef::new(&w, k, n, true).expect("w is n x k");
        for kernel in Kernel::available() {
            let mut g = Gemm::new(kernel).with_threads(1);
            let id = BenchmarkId::new(format!("ours-{}", kernel.name()), format!("{k}x{n}"));
            group.bench_with_input(id, &n, |bench, _| {
                bench.iter(|| {
                    out.fill(0.0);
                    g.run(black_box(xm), black_box(wm), &mut out, n)
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, matmul, matvec);
criterion_main!(benches);
