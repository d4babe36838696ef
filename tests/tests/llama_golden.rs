//! Golden tests of the llama model against Hugging Face transformers: small random checkpoints
//! (GQA and MHA, tied and untied, sharded, BF16 weights) and the logits `LlamaForCausalLM`
//! gave for them, made once by `tests/fixtures/llama/make_golden.py` and committed. Every
//! position's logits are checked on the CPU and on every GPU backend of the matrix
//! (`kernels_gpu::testing`: wgpu, a CUDA device, the emulated CUDA device with the
//! `cuda-emulator` feature), with and without the KV cache.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::rc::Rc;

use kernels_core::{Backend, CpuBackend, Tensor};
use kernels_gpu::testing;
use kernels_tests::golden::{assert_close, logits_with_cache, read_golden};
use native_cli::llama::{build, logits, read_dir};

const CASES: &[&str] = &["gqa_tied", "mha_untied", "gqa_untied_bf16"];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/llama")
        .join(name)
}

fn golden(name: &str) -> (Vec<u32>, Vec<Vec<f32>>) {
    let (_, tokens, logits) = read_golden(&fixture(name).join("golden.json"));
    (tokens, logits)
}

fn check_backend(backend: Rc<dyn Backend>) {
    for name in CASES {
        let files = read_dir(&fixture(name)).unwrap();
        let model = build(&files, backend.clone()).unwrap();
        let (tokens, want) = golden(name);
        let all = logits(&model, &tokens, true).unwrap();
        assert_close(&format!("{name} on {}", backend.name()), &all, &want);
        let last = logits(&model, &tokens, false).unwrap();
        assert_close(
            &format!("{name} last position on {}", backend.name()),
            &last,
            &want[want.len() - 1..],
        );
        let cached = logits_with_cache(&model, &tokens);
        assert_close(
            &format!("{name} with KV cache on {}", backend.name()),
            &cached,
            &want,
        );
    }
}

#[test]
fn cpu_matches_transformers() {
    check_backend(Rc::new(CpuBackend::new()));
}

#[test]
fn cpu_reference_kernels_match_transformers() {
    check_backend(Rc::new(CpuBackend::reference()));
}

#[test]
fn every_gpu_backend_matches_transformers() {
    let test = "every_gpu_backend_matches_transformers";
    for gpu in testing::gpu_backends(test) {
        check_backend(gpu.backend.clone());
        eprintln!("{test}: ok on {}", gpu.name);
    }
}

#[test]
fn bad_checkpoints_are_named() {
    let files = read_dir(&fixture("gqa_tied")).unwrap();
    let cpu: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    // A missing tensor.
    let mut missing = read_dir(&fixture("gqa_tied")).unwrap();
    missing
        .tensors
        .remove("model.layers.1.mlp.up_proj.weight")
        .unwrap();
    let e = build(&missing, cpu.clone()).err().unwrap().to_string();
    assert!(e.contains("model.layers.1.mlp.up_proj.weight"), "{e}");
    // A misshapen one.
    let mut bad = read_dir(&fixture("gqa_tied")).unwrap();
    bad.tensors
        .insert("model.norm.weight".into(), Tensor::zeros(&[31]).unwrap());
    let e = build(&bad, cpu.clone()).err().unwrap().to_string();
    assert!(e.contains("model.norm.weight") && e.contains("[31]"), "{e}");
    // Another architecture.
    let mut other = read_dir(&fixture("gqa_tied")).unwrap();
    other.config = files.config.replace("\"llama\"", "\"gpt_neox\"");
    let e = build(&other, cpu.clone()).err().unwrap().to_string();
    assert!(e.contains("gpt_neox"), "{e}");
    // A prompt longer than the model allows (max_position_embeddings = 64).
    let model = build(&files, cpu).unwrap();
    let e = logits(&model, &[1; 65], false).err().unwrap().to_string();
    assert!(
        e.contains("65") && e.contains("max_position_embeddings"),
        "{e}"
    );
    let e = logits(&model, &[37], false).err().unwrap().to_string();
    assert!(e.contains("37") && e.contains("vocab"), "{e}");
}
