//! wgpu's streaming decode product (`matvec_stream`: several weight rows per workgroup, a team of
//! threads per row, every x row dotted with each weight word read) against the CPU reference,
//! on seeded random inputs: every weight dtype (f32, f16, bf16 and the GGML blocks), row lengths
//! the units do not tile where the format allows, 1..=8 x rows, out features that are not a
//! multiple of the rows per workgroup, NaN and infinity in x, bias, accumulation, the gated
//! product and a weight split over bindings. Run with the workgroup matvec forced (lavapipe
//! defaults to `matvec_each`) and with the team reduction on subgroups and on workgroup memory.

// Native adapters (pollster, lavapipe); the browser's suite is web_parity.rs.
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_core::op::{Activation, Direction, Op};
use kernels_core::{Backend, CpuBackend, DType, Rng, Tensor};
use kernels_gpu::{WgpuBackend, WgpuOptions, testing};

fn normal(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape, Rng::new(seed).normal_vec(n, 0.0, 1.0)).unwrap()
}

/// Rows of x `[rows, k]` scaled by 1 / sqrt(k), so that the products are about 1 (the gated
/// product's silu then loses no digits to a large gate) while one misread weight moves an output
/// by about 1 / sqrt(k), far beyond the tolerance.
fn activations(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    let k = shape[shape.len() - 1] as f32;
    Tensor::from_f32(shape, Rng::new(seed).normal_vec(n, 0.0, 1.0 / k.sqrt())).unwrap()
}

/// A `[n, k]` weight of `dtype` from seeded random values (Q6_K, which has no quantizer: random
/// quants and sub-scales with a small f16 super-scale).
fn weight(dtype: DType, n: usize, k: usize, seed: u64) -> Tensor {
    match dtype {
        DType::F32 => normal(&[n, k], seed),
        DType::Q6_K => {
            let mut rng = Rng::new(seed);
            let mut b: Vec<u8> = (0..n * k / 256 * 210)
                .map(|_| (rng.next_u64() % 251) as u8)
                .collect();
            for blk in b.chunks_mut(210) {
                blk[208..210].copy_from_slice(&0x211fu16.to_le_bytes());
            }
            Tensor::from_raw(&[n, k], dtype, b).unwrap()
        }
        d => normal(&[n, k], seed).quantize(d).unwrap(),
    }
}

/// Row lengths for `dtype`: multiples of its block, and for f32, f16 and bf16 lengths that are
/// odd or not a multiple of 8 (the element-by-element and tail paths). Short rows take teams of
/// 4 to 16 threads (the host sizes a team to the row), which on lavapipe (subgroups of 8 or 16)
/// puts several teams in one subgroup: the subgroup reduction's masked path.
fn lengths(dtype: DType) -> &'static [usize] {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => &[3, 66, 520],
        DType::Q4_K | DType::Q6_K => &[256, 768],
        _ => &[32, 544],
    }
}

/// f32 and every weight dtype.
fn dtypes() -> impl Iterator<Item = DType> {
    std::iter::once(DType::F32).chain(DType::WEIGHT)
}

fn check(gpu: &WgpuBackend, label: &str, op: &Op, args: &[&Tensor]) {
    let want = CpuBackend::reference()
        .run(op, Direction::Forward, args)
        .unwrap();
    let dev: Vec<Tensor> = args.iter().map(|t| gpu.upload(t).unwrap()).collect();
    let dev: Vec<&Tensor> = dev.iter().collect();
    let got = gpu.run(op, Direction::Forward, &dev).unwrap();
    let got = gpu.download_blocking(&got[0]).unwrap();
    assert_eq!(got.shape(), want[0].shape(), "{label}");
    let (g, w) = (got.as_f32().unwrap(), want[0].as_f32().unwrap());
    let c = kernels_core::numerics::compare(g, w, 1e-4, 1e-4);
    assert!(c.pass, "{label}: {c:?}\n got {g:?}\nwant {w:?}");
}

/// Every case on one backend; asserts `matvec_stream` ran in the wanted reduction variant.
fn suite(gpu: &WgpuBackend, subgroups: bool) {
    assert!(!gpu.uses_per_output_matvec());
    assert_eq!(gpu.uses_subgroups(), subgroups);
    let matmul = Op::Matmul {
        trans_a: false,
        trans_b: true,
    };
    let mut seed = 10;
    for dtype in dtypes() {
        for &k in lengths(dtype) {
            // n: not a multiple of 8 rows per workgroup (and one that is, with rows to spare).
            for (rows, n) in [(1, 13), (3, 8), (8, 9)] {
                seed += 1;
                let w = weight(dtype, n, k, seed);
                let x = activations(&[rows, k], seed + 1000);
                let label = format!("{dtype:?} k={k} rows={rows} n={n}");
                check(gpu, &format!("matmul {label}"), &matmul, &[&x, &w]);
            }
        }
        // Bias, accumulation, the gated product and NaN/inf in x, in turn over the row
        // counts 1..=8 (each twice per dtype).
        let k = lengths(dtype)[lengths(dtype).len() - 1];
        for rows in 1..=8 {
            seed += 1;
            let n = 11;
            let w = weight(dtype, n, k, seed);
            let x = activations(&[rows, k], seed + 1000);
            let label = format!("{dtype:?} k={k} rows={rows} n={n}");
            match rows % 4 {
                0 => {
                    let b = normal(&[n], seed + 2000);
                    let linear = Op::Linear {
                        activation: Activation::None,
                    };
                    check(gpu, &format!("linear {label}"), &linear, &[&x, &w, &b]);
                }
                1 => {
                    let res = normal(&[rows, n], seed + 3000);
                    let add = Op::MatmulAdd {
                        trans_a: false,
                        trans_b: true,
                    };
                    check(gpu, &format!("matmul_add {label}"), &add, &[&res, &x, &w]);
                }
                2 => {
                    let wg = weight(dtype, 2 * n, k, seed + 4000);
                    let op = Op::MatmulSwiglu;
                    check(gpu, &format!("matmul_swiglu {label}"), &op, &[&x, &wg]);
                }
                _ => {
                    // The rows they feed are NaN or infinite where the reference's are.
                    let mut xv = x.as_f32().unwrap().to_vec();
                    xv[k / 3] = f32::INFINITY;
                    xv[k + k / 2] = f32::NAN;
                    xv[(rows - 1) * k] = f32::NEG_INFINITY;
                    let x_bad = Tensor::from_f32(&[rows, k], xv).unwrap();
                    check(gpu, &format!("nan/inf x {label}"), &matmul, &[&x_bad, &w]);
                }
            }
        }
    }
    let built = gpu.pipelines_built();
    let stream = if subgroups {
        "quant/matvec_stream+subgroup"
    } else {
        "quant/matvec_stream"
    };
    assert!(
        built.iter().any(|p| p.split("+f16").next() == Some(stream)),
        "{built:?}"
    );
    assert!(
        !built
            .iter()
            .any(|p| p.starts_with("quant/matvec_each") || p.starts_with("quant/dequantize")),
        "{built:?}"
    );
}

fn backend(subgroups: bool) -> WgpuBackend {
    WgpuBackend::with_options(WgpuOptions {
        per_output_matvec: Some(false),
        subgroups,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn streaming_matvec_matches_the_reference_with_subgroups() {
    let Some(probe) = testing::wgpu("streaming_matvec_matches_the_reference_with_subgroups") else {
        return;
    };
    if !probe.uses_subgroups() {
        // Lavapipe has subgroups; an adapter without them is covered by the test below.
        assert!(
            !probe.adapter_info().name.contains("llvmpipe"),
            "lavapipe reports subgroups"
        );
        return;
    }
    drop(probe);
    suite(&backend(true), true);
}

#[test]
fn streaming_matvec_matches_the_reference_on_workgroup_memory() {
    let Some(_) = testing::wgpu("streaming_matvec_matches_the_reference_on_workgroup_memory")
    else {
        return;
    };
    suite(&backend(false), false);
}

/// A weight larger than one storage binding is read in row blocks, one launch each, writing
/// columns `col0..` of rows of `ldo` (with the bias and accumulation of its columns).
#[test]
fn streaming_matvec_reads_a_split_weight_in_column_blocks() {
    let Some(_) = testing::wgpu("streaming_matvec_reads_a_split_weight_in_column_blocks") else {
        return;
    };
    for subgroups in [true, false] {
        let gpu = WgpuBackend::with_options(WgpuOptions {
            per_output_matvec: Some(false),
            subgroups,
            max_storage_binding_cap: Some(8192),
            ..Default::default()
        })
        .unwrap();
        let (n, k) = (67, 256);
        for (i, dtype) in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_K]
            .into_iter()
            .enumerate()
        {
            let seed = 500 + 10 * i as u64;
            let w = weight(dtype, n, k, seed);
            let bytes = w.packed_bytes().map_or(n * k * 4, |b| b.len());
            assert!(bytes > 8192, "{dtype:?}: the weight must be split");
            let x = activations(&[3, k], seed + 1);
            let b = normal(&[n], seed + 2);
            let linear = Op::Linear {
                activation: Activation::None,
            };
            let label = format!("split {dtype:?} subgroups={subgroups}");
            check(&gpu, &format!("linear {label}"), &linear, &[&x, &w, &b]);
            let res = normal(&[3, n], seed + 3);
            let add = Op::MatmulAdd {
                trans_a: false,
                trans_b: true,
            };
            check(&gpu, &format!("matmul_add {label}"), &add, &[&res, &x, &w]);
        }
        let built = gpu.pipelines_built();
        assert!(
            built.iter().any(|p| p.starts_with("quant/matvec_stream")),
            "{built:?}"
        );
    }
}
