//! Generation over the KV cache: sampling on the device (a decode step downloads only the
//! token id), the same tokens on CPU and wgpu for a seed, and the shipped demo model's
//! held-out accuracy, its greedy answers the same on the CPU and every GPU backend of the matrix
//! (`kernels_gpu::testing`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::rc::Rc;

use kernels_core::models::llama::{self, GenerateOptions, Llama, Sampling, StopReason};
use kernels_core::{Backend, CpuBackend};
use kernels_gpu::testing;
use native_cli::addition;
use native_cli::llama::{build, read_dir};

fn fixture_model(backend: Rc<dyn Backend>) -> Llama {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/llama/gqa_tied");
    build(&read_dir(&dir).unwrap(), backend).unwrap()
}

fn run(model: &Llama, prompt: &[u32], opts: &GenerateOptions) -> (Vec<u32>, StopReason) {
    pollster::block_on(llama::generate(model, prompt, opts, &mut |_, _| true)).unwrap()
}

fn opts(sampling: Sampling, n: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        sampling,
        stop_tokens: vec![],
    }
}

const SAMPLINGS: [Sampling; 3] = [
    Sampling {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        seed: 0,
    },
    Sampling {
        temperature: 0.9,
        top_k: 8,
        top_p: 1.0,
        seed: 7,
    },
    Sampling {
        temperature: 1.2,
        top_k: 0,
        top_p: 0.85,
        seed: 11,
    },
];

#[test]
fn cpu_generation_is_seeded_and_stops() {
    let model = fixture_model(Rc::new(CpuBackend::new()));
    let prompt = [3, 1, 4, 1, 5];
    for s in SAMPLINGS {
        let (a, why) = run(&model, &prompt, &opts(s, 12));
        assert_eq!(a.len(), 12);
        assert_eq!(why, StopReason::MaxTokens);
        assert_eq!(run(&model, &prompt, &opts(s, 12)).0, a, "{s:?}");
    }
    // Different seeds give different samples at a high temperature.
    let hot = |seed| Sampling {
        temperature: 3.0,
        top_k: 0,
        top_p: 1.0,
        seed,
    };
    assert_ne!(
        run(&model, &prompt, &opts(hot(1), 16)).0,
        run(&model, &prompt, &opts(hot(2), 16)).0
    );
    // A stop token ends generation right after it is emitted.
    let greedy = run(&model, &prompt, &opts(SAMPLINGS[0], 12)).0;
    let stop = greedy[4];
    let first = greedy.iter().position(|&t| t == stop).unwrap();
    let mut o = opts(SAMPLINGS[0], 12);
    o.stop_tokens = vec![stop];
    let (stopped, why) = run(&model, &prompt, &o);
    assert_eq!(why, StopReason::StopToken);
    assert_eq!(stopped, greedy[..=first]);
    // The position limit (max_position_embeddings = 64) ends it too.
    let (long, why) = run(&model, &prompt, &opts(SAMPLINGS[0], 100));
    assert_eq!(why, StopReason::MaxPositions);
    assert_eq!(long.len(), 64 - prompt.len() + 1);
    // A prompt longer than the model allows is an error naming the limit.
    let e = pollster::block_on(llama::generate(
        &model,
        &[1; 65],
        &opts(SAMPLINGS[0], 1),
        &mut |_, _| true,
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("max_position_embeddings") && e.contains("65"),
        "{e}"
    );
}

#[test]
fn wgpu_samples_on_the_device_and_matches_the_cpu() {
    // wgpu itself: the test reads its counters.
    let Some(gpu) = testing::wgpu("wgpu_samples_on_the_device_and_matches_the_cpu") else {
        return;
    };
    let gpu = Rc::new(gpu);
    let cpu_model = fixture_model(Rc::new(CpuBackend::new()));
    let gpu_model = fixture_model(gpu.clone());
    let prompt = [3, 1, 4, 1, 5];
    for s in SAMPLINGS {
        let want = run(&cpu_model, &prompt, &opts(s, 10)).0;
        // Counters at every streamed token: each decode step's traffic.
        let mut seen = Vec::new();
        let (got, _) = pollster::block_on(llama::generate(
            &gpu_model,
            &prompt,
            &opts(s, 10),
            &mut |_, _| {
                seen.push(gpu.counters());
                true
            },
        ))
        .unwrap();
        assert_eq!(got, want, "{s:?}: wgpu and CPU tokens differ");
        for w in seen.windows(2) {
            let step = w[1].since(&w[0]);
            assert_eq!(
                step.bytes_downloaded, 4,
                "{s:?}: a decode step must download only the i32 token id: {step:?}"
            );
            // The only upload is the step's uniform (4 bytes) or nothing more than that.
            assert!(step.bytes_uploaded <= 4, "{s:?}: {step:?}");
            assert_eq!(step.submits, 1, "{s:?}: one submit per token: {step:?}");
            // 8 per layer (2 layers): norm, one product over q, k and v concatenated at load,
            // rope_kv_write (rope on q and k as k and v are written into the cache),
            // attention, o_proj with the residual add in its epilogue, norm, matmul_swiglu (gate
            // and up as one gated product over their weights concatenated at load), down_proj
            // with the residual; plus embedding, final norm, lm_head and sample.
            assert_eq!(step.dispatches, 8 * 2 + 4, "{s:?}: {step:?}");
        }
    }
}

#[test]
fn demo_model_adds_and_agrees_across_backends() {
    let files = addition::embedded().unwrap();
    let cpu = build(&files, Rc::new(CpuBackend::new())).unwrap();
    let tok = addition::tokenizer_of(&files).unwrap();
    let (ok, n, wrong) = addition::evaluate(&cpu, &tok, 300, 5, 300, &mut |_, _| {}).unwrap();
    assert!(
        ok * 100 >= n * 95,
        "held-out exact match {ok}/{n} below 95%: {wrong:?}"
    );
    let mut rng = kernels_core::Rng::new(9);
    let prompts: Vec<Vec<u32>> = (0..16)
        .map(|_| {
            let (a, b) = addition::draw(&mut rng, true);
            addition::ids(&addition::prompt(a, b)).unwrap()
        })
        .collect();
    let on_cpu =
        pollster::block_on(llama::greedy_batch(&cpu, &prompts, addition::ANSWER_LEN)).unwrap();
    let test = "demo_model_adds_and_agrees_across_backends";
    for gpu in testing::gpu_backends(test) {
        let gpu_model = build(&files, gpu.backend.clone()).unwrap();
        let on_gpu = pollster::block_on(llama::greedy_batch(
            &gpu_model,
            &prompts,
            addition::ANSWER_LEN,
        ))
        .unwrap();
        assert_eq!(on_cpu, on_gpu, "{}", gpu.name);
        eprintln!("{test}: ok on {}", gpu.name);
    }
}
