//! Prefill's products with a block-quantized weight (`x [rows, k] . W^T`, `rows` = 64 and 256):
//! each weight format through the integer products ([`product_t_in`], 8-bit activations at both
//! precisions, on the fastest integer family this CPU runs; `q4_0`, `q5_0` and `q8_0` also on
//! the eight-row interleaved layout, `.../rows8`; on x86 what prefill runs for those three, the
//! GEMM writing the `[rows, n]` output, `.../into_rows`) and through the f32 panel path
//! ([`panel_product_t`]: the weight decoded panel by panel into the blocked f32 GEMM, what
//! prefill took at the default precision before the integer GEMM). Criterion's elements/s
//! figure is multiply-adds per second.
//!
//! Shapes are the 0.5B Qwen's: `64x896x4864` (rows x k x n: ffn_gate/up) and `64x4864x896`
//! (ffn_down). The K-quants need `k` a multiple of 256, so they take `1024` where the model
//! has 896.
//!
//! `KERNELS_THREADS=1 cargo bench -p kernels-core --features threads --bench qgemm` (filter
//! with e.g. `-- q4_0/residual`). With the `threads` feature the products use `KERNELS_THREADS`
//! threads, the machine's by default; without it, one.

// A benchmark binary, not library code: a failed setup may stop it.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kernels_core::cpu::fast::packed::panel_product_t;
#[cfg(target_arch = "x86_64")]
use kernels_core::cpu::fast::qdot::into_rows;
use kernels_core::cpu::fast::qdot::{Family, Layout, Precision, interleave, product_t_in};
use kernels_core::cpu::fast::{config, decoded_b};
use kernels_core::op::Activation;
use kernels_core::{DType, Rng, quant};

/// `n * k` weights of `dtype` at unit scale (`Q6_K`, which has no encoder: random blocks).
fn weights(rng: &mut Rng, dtype: DType, n: usize, k: usize) -> Vec<u8> {
    if dtype != DType::Q6_K {
        let w = rng.uniform_vec(n * k, -1.0, 1.0);
        return quant::quantize(dtype, &w).expect("whole blocks");
    }
    let mut out = Vec::with_capacity(n * k / 256 * 210);
    for _ in 0..n * k / 256 {
        let mut b = [0u8; 210];
        for v in b[..192].iter_mut() {
            *v = (rng.uniform() * 256.0) as u8;
        }
        for v in b[192..208].iter_mut() {
            *v = ((rng.uniform() * 2.0 - 1.0) * 127.0) as i8 as u8;
        }
        b[208..210].copy_from_slice(
            &half::f16::from_f32(1.0 / (32.0 * 127.0))
                .to_bits()
                .to_le_bytes(),
        );
        out.extend_from_slice(&b);
    }
    out
}

fn prefill(c: &mut Criterion) {
    let mut group = c.benchmark_group("qgemm_prefill");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let formats = [
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q4_K,
        DType::Q6_K,
    ];
    let family = Family::best();
    for (rows, dtype) in [64, 256].into_iter().flat_map(|r| formats.map(|d| (r, d))) {
        let kq = dtype.block_elems() == 256;
        let small = if kq { 1024 } else { 896 };
        for (k, n) in [(small, 4864), (4864, 896)] {
            let mut rng = Rng::new((k * n) as u64);
            let w = weights(&mut rng, dtype, n, k);
            let row_bytes = dtype.bytes_for(k).expect("whole blocks");
            let x = rng.uniform_vec(rows * k, -1.0, 1.0);
            let mut out = vec![0.0f32; rows * n];
            let mut layouts = vec![("", w.clone(), Layout::Plain)];
            if interleave::supports(dtype) && interleave::repacks_for(family) {
                let r = interleave::repack(dtype, &w, row_bytes, n).expect("repack");
                layouts.push(("/rows8", r, Layout::Rows8));
            }
            group.throughput(Throughput::Elements((rows * k * n) as u64));
            let shape = format!("{rows}x{k}x{n}");
            for (pname, p) in [
                ("single", Precision::Single),
                ("residual", Precision::Residual),
            ] {
                for (lname, wl, layout) in &layouts {
                    let id = BenchmarkId::new(
                        format!("{}/{pname}/{}{lname}", dtype.name(), family.name()),
                        &shape,
                    );
                    // What prefill runs on x86: the eight-row GEMM writing `[rows, n]`.
                    #[cfg(target_arch = "x86_64")]
                    if into_rows::takes_into_rows(family, dtype, rows, n) {
                        let name = format!(
                            "{}/{pname}/{}{lname}/into_rows",
                            dtype.name(),
                            family.name()
                        );
                        let id = BenchmarkId::new(name, &shape);
                        group.bench_function(id, |bench| {
                            bench.iter(|| {
                                let ops = (
                                    (black_box(&wl[..]), *layout),
                                    row_bytes,
                                    black_box(&x[..]),
                                    (rows, k, n),
                                    None,
                                );
                                into_rows::product_into_rows(family, p, dtype, ops, &mut out)
                                    .expect("valid product")
                            })
                        });
                    }
                    group.bench_function(id, |bench| {
                        bench.iter(|| {
                            product_t_in(
                                family,
                                p,
                                dtype,
                                (black_box(wl), *layout),
                                row_bytes,
                                black_box(&x),
                                (rows, k, n),
                                &mut out,
                            )
                            .expect("valid product")
                        })
                    });
                }
            }
            // What prefill runs on the panels now: the weight decoded straight into `B~`.
            for (lname, wl, layout) in &layouts {
                let name = format!("{}/decoded_b{lname}", dtype.name());
                group.bench_function(BenchmarkId::new(name, &shape), |bench| {
                    bench.iter(|| {
                        decoded_b::product(
                            dtype,
                            (black_box(wl), *layout),
                            row_bytes,
                            black_box(&x),
                            None,
                            Activation::None,
                            (rows, k, n),
                            &[rows, n],
                        )
                        .expect("valid product")
                    })
                });
            }
            let id = BenchmarkId::new(format!("{}/panel", dtype.name()), &shape);
            group.bench_function(id, |bench| {
                bench.iter(|| {
                    panel_product_t(
                        config::threads(),
                        dtype,
                        black_box(&w),
                        row_bytes,
                        black_box(&x),
                        (rows, k, n),
                        &mut out,
                    )
                    .expect("valid product")
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, prefill);
criterion_main!(benches);
