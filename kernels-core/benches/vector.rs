//! The vector (non-GEMM) fast paths against the reference, on every instruction set this
//! machine runs: softmax, rms_norm and layer_norm over `[1024, 4096]`, exp and silu over 1M
//! values, swiglu, and one decode step of attention over a 400-position KV cache with
//! llama-like heads (6 heads of 48 and of 64), plus causal prefills of 128 tokens and of 256
//! with the 0.5B Qwen's grouped heads (14 of 64 over 2 key-value heads). Throughput is in
//! elements of the main input (for attention: keys times heads).
//!
//! `cargo bench -p kernels-core --bench vector` (add `-- --quick` for a rough pass, or a
//! filter such as `-- softmax`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kernels_core::cpu::fast::isa::Isa;
use kernels_core::cpu::fast::vector;
use kernels_core::cpu::{self, View};
use kernels_core::op::UnaryOp;
use kernels_core::{Direction, Op, Rng};

/// Benchmarks `op` on `inputs` on the reference and on each instruction set.
fn compare(c: &mut Criterion, group: &str, label: &str, op: Op, inputs: &[(Vec<usize>, Vec<f32>)]) {
    let views: Vec<View<f32>> = inputs.iter().map(|(s, d)| View::float(s, d)).collect();
    let elems = inputs[0].1.len() as u64;
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(elems));
    g.bench_with_input(BenchmarkId::new("reference", label), &(), |b, _| {
        b.iter(|| cpu::run(black_box(&op), Direction::Forward, black_box(&views)))
    });
    for isa in Isa::available() {
        g.bench_with_input(BenchmarkId::new(isa.name(), label), &(), |b, _| {
            b.iter(|| vector::forward_with(isa, black_box(&op), black_box(&views)))
        });
    }
    g.finish();
}

fn normal(rng: &mut Rng, shape: &[usize], std: f32) -> (Vec<usize>, Vec<f32>) {
    let n = shape.iter().product();
    (shape.to_vec(), rng.normal_vec(n, 0.0, std))
}

fn rows(c: &mut Criterion) {
    let mut rng = Rng::new(1);
    let shape = [1024, 4096];
    let x = normal(&mut rng, &shape, 2.0);
    compare(
        c,
        "softmax",
        "1024x4096",
        Op::Softmax { causal: false },
        std::slice::from_ref(&x),
    );
    let w = normal(&mut rng, &[4096], 1.0);
    compare(
        c,
        "rms_norm",
        "1024x4096",
        Op::RmsNorm { eps: 1e-5 },
        &[x.clone(), w.clone()],
    );
    let b = normal(&mut rng, &[4096], 1.0);
    compare(
        c,
        "layer_norm",
        "1024x4096",
        Op::LayerNorm { eps: 1e-5 },
        &[x, w, b],
    );
}

fn elementwise(c: &mut Criterion) {
    let mut rng = Rng::new(2);
    let n = 1 << 20;
    let x = normal(&mut rng, &[n], 4.0);
    compare(
        c,
        "exp",
        "1M",
        Op::Unary(UnaryOp::Exp),
        std::slice::from_ref(&x),
    );
    compare(
        c,
        "silu",
        "1M",
        Op::Unary(UnaryOp::Silu),
        std::slice::from_ref(&x),
    );
    let up = normal(&mut rng, &[n], 1.0);
    compare(c, "swiglu", "1M", Op::Swiglu, &[x, up]);
}

fn attention(c: &mut Criterion) {
    let mut rng = Rng::new(3);
    for (heads, d, t) in [(6, 48, 400), (6, 64, 400)] {
        let inputs = [
            normal(&mut rng, &[1, heads, 1, d], 1.0),
            normal(&mut rng, &[1, heads, t, d], 1.0),
            normal(&mut rng, &[1, heads, t, d], 1.0),
        ];
        let label = format!("h{heads}_d{d}_t{t}");
        let op = Op::Attention {
            causal: true,
            scale: None,
            kv_len: 0,
            window: 0,
        };
        compare(c, "attention_decode", &label, op, &inputs);
    }
    let (heads, d, s) = (6, 48, 128);
    let inputs = [
        normal(&mut rng, &[1, heads, s, d], 1.0),
        normal(&mut rng, &[1, heads, s, d], 1.0),
        normal(&mut rng, &[1, heads, s, d], 1.0),
    ];
    let op = Op::Attention {
        causal: true,
        scale: None,
        kv_len: 0,
        window: 0,
    };
    compare(c, "attention_prefill", "h6_d48_s128", op, &inputs);
    // The 0.5B Qwen's heads (14 of 64 sharing 2 key-value heads) over a 256-token prompt.
    let (hq, hkv, d, s) = (14, 2, 64, 256);
    let inputs = [
        normal(&mut rng, &[1, hq, s, d], 1.0),
        normal(&mut rng, &[1, hkv, s, d], 1.0),
        normal(&mut rng, &[1, hkv, s, d], 1.0),
    ];
    compare(c, "attention_prefill", "h14kv2_d64_s256", op, &inputs);
    let rope = Op::rope(10000.0, 400, false);
    let q = normal(&mut rng, &[1, 6, 1, 48], 1.0);
    compare(c, "rope_decode", "h6_d48", rope, &[q]);
    let rope = Op::rope(10000.0, 0, false);
    let q = normal(&mut rng, &[1, 6, 256, 48], 1.0);
    compare(c, "rope_prefill", "h6_d48_s256", rope, &[q]);
}

criterion_group!(benches, rows, elementwise, attention);
criterion_main!(benches);
