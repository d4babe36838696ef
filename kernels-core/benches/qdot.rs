//! Decode's integer products (`x [1, k] . W^T` for a block-quantized `W [n, k]`, 8-bit
//! activations): each weight format on each integer kernel family this CPU runs, at both
//! activation precisions, and `q4_0`, `q5_0`, `q8_0` also in the eight-row interleaved layout
//! (`/rows8`). Criterion's bytes/s figure is the weight's bytes per second.
//!
//! Shapes are the 0.5B Qwen's: `896x4864` (k x n: ffn_gate/up), `4864x896` (ffn_down) and
//! `896x151936` (the tied lm_head). The K-quants need `k` a multiple of 256, so they take
//! `1024` where the model has 896.
//!
//! `qdot_repack` times the repack itself (a load-time cost) and the unpack back to the plain
//! layout (what prefill's paths do per panel).
//!
//! `KERNELS_THREADS=1 cargo bench -p kernels-core --features threads --bench qdot` (filter
//! with e.g. `-- q4_k/residual`). With the `threads` feature the products use `KERNELS_THREADS`
//! threads, the machine's by default; without it, one.

// A benchmark binary, not library code: a failed setup may stop it.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kernels_core::cpu::fast::qdot::{Family, Layout, Precision, interleave, product_t_in};
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

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("qdot_decode");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let formats = [
        DType::Q8_0,
        DType::Q4_0,
        DType::Q5_0,
        DType::Q4_K,
        DType::Q6_K,
    ];
    for dtype in formats {
        let kq = dtype.block_elems() == 256;
        let small = if kq { 1024 } else { 896 };
        for (k, n) in [(small, 4864), (4864, 896), (small, 151936)] {
            // Made on the first benchmark the filter selects (quantizing the lm_head's
            // 136M weights takes seconds).
            let mut operands: Option<(Vec<u8>, Vec<u8>, Vec<f32>)> = None;
            let row_bytes = dtype.bytes_for(k).expect("whole blocks");
            let mut out = vec![0.0f32; n];
            group.throughput(Throughput::Bytes((n * row_bytes) as u64));
            for family in Family::available() {
                if family == Family::Portable {
                    continue;
                }
                for (pname, p) in [
                    ("single", Precision::Single),
                    ("residual", Precision::Residual),
                ] {
                    for layout in [Layout::Plain, Layout::Rows8] {
                        if layout == Layout::Rows8 && !interleave::supports(dtype) {
                            continue;
                        }
                        let lname = if layout == Layout::Rows8 {
                            "/rows8"
                        } else {
                            ""
                        };
                        let id = BenchmarkId::new(
                            format!("{}/{pname}/{}{lname}", dtype.name(), family.name()),
                            format!("{k}x{n}"),
                        );
                        group.bench_function(id, |bench| {
                            let (w, w8, x) = operands.get_or_insert_with(|| {
                                let mut rng = Rng::new((k * n) as u64);
                                let w = weights(&mut rng, dtype, n, k);
                                let w8 = if interleave::supports(dtype) {
                                    interleave::repack(dtype, &w, row_bytes, n).expect("repack")
                                } else {
                                    Vec::new()
                                };
                                (w, w8, rng.uniform_vec(k, -1.0, 1.0))
                            });
                            let w = if layout == Layout::Rows8 { &*w8 } else { &*w };
                            bench.iter(|| {
                                product_t_in(
                                    family,
                                    p,
                                    dtype,
                                    (black_box(w), layout),
                                    row_bytes,
                                    black_box(x),
                                    (1, k, n),
                                    &mut out,
                                )
                                .expect("valid product")
                            })
                        });
                    }
                }
            }
        }
    }
    group.finish();
}

/// The load-time cost of the interleaved layout: repacking a weight (criterion's bytes/s is
/// the weight's bytes per second), on the shapes above.
fn repack(c: &mut Criterion) {
    let mut group = c.benchmark_group("qdot_repack");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q5_0] {
        for (k, n) in [(896, 4864), (4864, 896), (896, 151936)] {
            let row_bytes = dtype.bytes_for(k).expect("whole blocks");
            let mut w: Option<(Vec<u8>, Vec<u8>)> = None;
            group.throughput(Throughput::Bytes((n * row_bytes) as u64));
            for what in ["repack", "unpack"] {
                let id = BenchmarkId::new(format!("{}/{what}", dtype.name()), format!("{k}x{n}"));
                group.bench_function(id, |bench| {
                    let (w, w8) = w.get_or_insert_with(|| {
                        let w = weights(&mut Rng::new((k * n) as u64), dtype, n, k);
                        let w8 = interleave::repack(dtype, &w, row_bytes, n).expect("repack");
                        (w, w8)
                    });
                    if what == "repack" {
                        bench.iter(|| {
                            interleave::repack(dtype, black_box(w), row_bytes, n).expect("repack")
                        })
                    } else {
                        let mut plain = vec![0u8; w8.len()];
                        bench.iter(|| {
                            let span = (0, n);
                            let l = Layout::Rows8;
                            interleave::plain_rows(
                                dtype,
                                l,
                                black_box(w8),
                                row_bytes,
                                n,
                                span,
                                &mut plain,
                            )
                        })
                    }
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, decode, repack);
criterion_main!(benches);
