//! Weights larger than one storage binding: `linear`, `matmul` with a transposed 2-D weight
//! (the prefill tiles and decode's small-m kernel), `matmul_swiglu` (its product), decode's
//! packed `matvec` and the embedding lookup read them in row blocks. With the binding limit capped low on lavapipe, every result
//! is bit for bit the one-binding result (the blocks compute the same sums in the same order),
//! the capped runs really split (more dispatches, and `dequantize`, which does not split, is
//! refused on the same weight), and whole llamas give their transformers golden logits.

#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::rc::Rc;

use kernels_core::op::{Activation, Direction, Op};
use kernels_core::rng::Rng;
use kernels_core::{Backend, DType, Error, Tensor};
use kernels_gpu::{WgpuBackend, WgpuOptions, testing};
use kernels_tests::golden::{assert_close, read_golden};
use native_cli::llama::{build, logits, read_dir};

fn capped(cap: u64) -> WgpuBackend {
    let b = WgpuBackend::with_options(WgpuOptions {
        max_storage_binding_cap: Some(cap),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(b.limits().max_storage_buffer_binding_size, cap);
    b
}

fn normal(seed: u64, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape, Rng::new(seed).normal_vec(n, 0.0, 1.0)).unwrap()
}

fn run(gpu: &WgpuBackend, op: &Op, args: &[&Tensor]) -> kernels_core::Result<Vec<f32>> {
    let dev: Vec<Tensor> = args.iter().map(|t| gpu.upload(t).unwrap()).collect();
    let refs: Vec<&Tensor> = dev.iter().collect();
    let out = gpu.run(op, Direction::Forward, &refs)?;
    Ok(gpu.download_blocking(&out[0])?.as_f32()?.to_vec())
}

/// `op` on `args` gives the same bits on the capped backend as on one binding, in more
/// dispatches.
fn same_split(whole: &WgpuBackend, cap: &WgpuBackend, what: &str, op: &Op, args: &[&Tensor]) {
    let d0 = cap.counters().dispatches;
    let want = run(whole, op, args).unwrap_or_else(|e| panic!("{what} on one binding: {e}"));
    let got = run(cap, op, args).unwrap_or_else(|e| panic!("{what} split: {e}"));
    let d1 = cap.counters().dispatches;
    assert!(
        want.iter()
            .zip(&got)
            .all(|(a, b)| a.to_bits() == b.to_bits())
            && want.len() == got.len(),
        "{what}: the split result differs from one binding's"
    );
    assert!(
        d1 - d0 > 1,
        "{what}: expected several launches, got {}",
        d1 - d0
    );
}

#[test]
fn products_and_lookups_split_large_weights_over_bindings() {
    let Some(whole) = testing::wgpu("products_and_lookups_split_large_weights_over_bindings")
    else {
        return;
    };
    let cap = capped(16384);
    let xt = Op::Matmul {
        trans_a: false,
        trans_b: true,
    };
    // f32 [200, 40]: 32,000 bytes; rows of 160 bytes, so blocks of 96 rows (multiples of 8
    // keep every block on a 256-byte offset).
    let w = normal(1, &[200, 40]);
    let bias = normal(2, &[200]);
    for rows in [1usize, 3, 13] {
        let x = normal(3, &[rows, 40]);
        same_split(
            &whole,
            &cap,
            &format!("matmul x[{rows}] @ f32 w^T"),
            &xt,
            &[&x, &w],
        );
        let op = Op::Linear {
            activation: Activation::Relu,
        };
        same_split(
            &whole,
            &cap,
            &format!("linear x[{rows}] f32"),
            &op,
            &[&x, &w, &bias],
        );
        // The gated product: decode's one gated matvec on one binding; split, the product in
        // blocks and then the gate.
        same_split(
            &whole,
            &cap,
            &format!("matmul_swiglu x[{rows}] f32"),
            &Op::MatmulSwiglu,
            &[&x, &w],
        );
    }
    let x3 = normal(4, &[2, 5, 40]);
    same_split(&whole, &cap, "matmul batched x @ f32 w^T", &xt, &[&x3, &w]);
    // A gated product larger than one binding ([24, 256]: 24,576 bytes): its gate and up halves
    // as two split products, then swiglu.
    let w2 = normal(10, &[256, 40]);
    let x24 = normal(11, &[24, 40]);
    let what = "matmul_swiglu x[24] f32, product over the cap";
    same_split(&whole, &cap, what, &Op::MatmulSwiglu, &[&x24, &w2]);
    // Its up rows must start on an aligned offset to be bound apart (here at byte 16,000).
    let x40 = normal(12, &[40, 40]);
    match run(&cap, &Op::MatmulSwiglu, &[&x40, &w]) {
        Err(Error::LimitExceeded { what, .. }) => {
            assert!(
                what.starts_with("matmul_swiglu") && what.contains("256-byte"),
                "{what}"
            )
        }
        other => panic!("matmul_swiglu with unaligned halves over the cap: {other:?}"),
    }

    // Packed weights: decode's matvec (<= 8 rows) splits the packed rows; prefill decodes each
    // block into an f32 temporary of its own size.
    for (dtype, shape) in [
        (DType::Q8_0, [80usize, 256usize]),
        (DType::Q4_K, [128, 256]),
        (DType::F16, [40, 256]),
        (DType::BF16, [40, 256]),
    ] {
        let w = normal(5, &shape).quantize(dtype).unwrap();
        assert!(w.byte_len() > 16384, "{dtype:?} weight larger than the cap");
        let bias = normal(6, &[shape[0]]);
        for rows in [1usize, 12] {
            let x = normal(7, &[rows, shape[1]]);
            let what = format!("{} x[{rows}]", dtype.name());
            same_split(&whole, &cap, &format!("matmul {what}"), &xt, &[&x, &w]);
            let op = Op::Linear {
                activation: Activation::None,
            };
            same_split(
                &whole,
                &cap,
                &format!("linear {what}"),
                &op,
                &[&x, &w, &bias],
            );
            let what = format!("matmul_swiglu {what}");
            same_split(&whole, &cap, &what, &Op::MatmulSwiglu, &[&x, &w]);
        }
        // `dequantize` does not split: the same weight is refused there, naming the op.
        let dw = cap.upload(&w).unwrap();
        match cap.run(&Op::Dequantize, Direction::Forward, &[&dw]) {
            Err(Error::LimitExceeded { what, .. }) => {
                assert!(what.starts_with("dequantize"), "{what}")
            }
            other => panic!("dequantize of a {dtype:?} weight over the cap: {other:?}"),
        }
    }

    // Embedding tables over the cap, ids in every block, repeated, first and last rows.
    let ids: Vec<i32> = vec![0, 299, 150, 7, 299, 168, 167, 0, 42];
    let ids = Tensor::from_i32(&[3, 3], ids).unwrap();
    let table = normal(8, &[300, 24]);
    same_split(
        &whole,
        &cap,
        "embedding f32",
        &Op::Embedding,
        &[&ids, &table],
    );
    let ids_q: Vec<i32> = vec![0, 99, 50, 48, 47, 96, 95, 1];
    let ids_q = Tensor::from_i32(&[8], ids_q).unwrap();
    let table_q = normal(9, &[100, 256]).quantize(DType::Q8_0).unwrap();
    same_split(
        &whole,
        &cap,
        "embedding q8_0",
        &Op::Embedding,
        &[&ids_q, &table_q],
    );
}

#[test]
fn a_block_that_cannot_fit_is_an_error_naming_the_op() {
    let Some(_) = testing::wgpu("a_block_that_cannot_fit_is_an_error_naming_the_op") else {
        return;
    };
    let cap = capped(2048);
    // Q8_0 rows of 32 are 34 bytes: 128 of them make the smallest block that starts on a
    // 256-byte offset, 4,352 bytes packed (decode's matvec) and 16 KB as f32 (prefill), both
    // over the cap.
    let w = normal(1, &[300, 32]).quantize(DType::Q8_0).unwrap();
    let xt = Op::Matmul {
        trans_a: false,
        trans_b: true,
    };
    for rows in [6, 12] {
        let x = normal(2, &[rows, 32]);
        match run(&cap, &xt, &[&x, &w]) {
            Err(Error::LimitExceeded { what, limit, .. }) => {
                assert!(
                    what.starts_with("matmul") && what.contains("256-byte"),
                    "{what}"
                );
                assert_eq!(limit, 2048);
            }
            other => panic!("{rows} rows: expected LimitExceeded, got {other:?}"),
        }
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/llama")
        .join(name)
}

/// Llamas whose embedding and MLP matrices are each larger than the (capped) binding give the
/// logits of one binding bit for bit, and their transformers golden logits.
#[test]
fn llamas_larger_than_a_binding_give_their_golden_logits() {
    let Some(whole) = testing::wgpu("llamas_larger_than_a_binding_give_their_golden_logits") else {
        return;
    };
    let whole = Rc::new(whole);
    let cap = Rc::new(capped(4096));
    for name in ["gqa_tied", "gqa_untied_bf16"] {
        let files = read_dir(&fixture(name)).unwrap();
        let embed = &files.tensors["model.embed_tokens.weight"];
        assert!(
            embed.numel() * 4 > 4096,
            "{name}: the table (as f32) is over the cap"
        );
        let (_, tokens, want) = read_golden(&fixture(name).join("golden.json"));
        let run = |be: &Rc<WgpuBackend>| -> (Vec<Vec<f32>>, u64) {
            let before = be.counters().dispatches;
            let dyn_be: Rc<dyn Backend> = be.clone();
            let l = logits(&build(&files, dyn_be).unwrap(), &tokens, true).unwrap();
            (l, be.counters().dispatches - before)
        };
        let (a, da) = run(&whole);
        let (b, db) = run(&cap);
        assert_eq!(a, b, "{name}: split logits differ from one binding's");
        assert!(
            db > da,
            "{name}: the capped run split nothing ({db} vs {da} dispatches)"
        );
        assert_close(&format!("{name} split over bindings"), &b, &want);
    }
}
