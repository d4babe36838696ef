//! The batch's one compute pass and the bind-group cache: dependent dispatches in one pass see
//! each other's writes, and decode after its first token makes no bind group.

use std::rc::Rc;

use kernels_core::models::llama::{self, GenerateOptions, Llama, LlamaConfig, Sampling};
use kernels_core::op::{BinaryOp, Direction, Op};
use kernels_core::{Backend, CpuBackend, Rng, Tensor};

use crate::testing;

/// A chain of dependent ops, all in one batch (one submit, one compute pass): transposes whose
/// every output element comes from another workgroup's writes of the dispatch before, each
/// followed by an add in place of a row. Any two dependent dispatches that overlapped would
/// read stale elements; the result must equal the CPU's exactly (small integers throughout).
#[test]
fn dependent_dispatches_in_one_pass_see_each_others_writes() {
    let Some(gpu) = testing::wgpu("dependent_dispatches_in_one_pass_see_each_others_writes") else {
        return;
    };
    let cpu = CpuBackend::new();
    let (r, c) = (192usize, 320usize); // 61,440 elements: 240 workgroups a dispatch
    let mut rng = Rng::new(0x0dde);
    let x0: Vec<f32> = (0..r * c).map(|_| (rng.uniform() * 64.0).floor()).collect();
    let row_c: Vec<f32> = (0..c).map(|i| (i % 7) as f32).collect();
    let row_r: Vec<f32> = (0..r).map(|i| (i % 5) as f32 - 2.0).collect();
    let chain = |be: &dyn Backend, x: Tensor, rows: (&Tensor, &Tensor), steps: usize| {
        let mut x = x;
        for s in 0..steps {
            x = be
                .run(&Op::Transpose, Direction::Forward, &[&x])
                .unwrap()
                .remove(0);
            // After an odd number of transposes x is [c, r]: its rows have r elements.
            let row = if s % 2 == 0 { rows.1 } else { rows.0 };
            x = be
                .run(&Op::Binary(BinaryOp::Add), Direction::Forward, &[&x, row])
                .unwrap()
                .remove(0);
        }
        x
    };
    let steps = 40;
    let host = |v: &[f32], shape: &[usize]| Tensor::from_f32(shape, v.to_vec()).unwrap();
    let want = chain(
        &cpu,
        host(&x0, &[r, c]),
        (&host(&row_c, &[c]), &host(&row_r, &[r])),
        steps,
    );
    let up = |t: Tensor| gpu.upload(&t).unwrap();
    let (x, rc, rr) = (
        up(host(&x0, &[r, c])),
        up(host(&row_c, &[c])),
        up(host(&row_r, &[r])),
    );
    gpu.flush().unwrap();
    let before = gpu.counters();
    let got = chain(&gpu, x, (&rc, &rr), steps);
    let got = gpu.download_blocking(&got).unwrap();
    let d = gpu.counters().since(&before);
    assert_eq!(d.submits, 1, "the chain must be one batch: {d:?}");
    assert_eq!(d.dispatches, 2 * steps as u64, "{d:?}");
    assert_eq!(got.shape(), want.shape());
    assert_eq!(got.to_f32_vec().unwrap(), want.to_f32_vec().unwrap());
}

#[allow(clippy::unwrap_used)]
fn tiny_llama(backend: Rc<dyn Backend>) -> Llama {
    let config = LlamaConfig {
        hidden_size: 64,
        intermediate_size: 128,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        vocab_size: 96,
        rms_norm_eps: 1e-5,
        rope_theta: kernels_core::op::ROPE_THETA,
        max_position_embeddings: 64,
        tie_word_embeddings: true,
        head_dim: 16,
        bos_token_id: None,
        eos_token_ids: vec![],
        variant: Default::default(),
    };
    Llama::init(config, backend, &mut Rng::new(0x11a3)).unwrap()
}

/// Warm decode makes no bind group: the pool hands out its buffers in a cycle of a few tokens
/// (a token's id and residual stream are alive while the next token's are made, and an upload
/// takes only a buffer freed in an earlier batch), and the cache keys bind groups by them and
/// keeps them `KEEP_BATCHES` batches. Here the 7th decode step on makes none (measured: 33, 26,
/// 16, 10, 10, 8, then 0). Each step's host time is counted.
#[test]
fn steady_state_decode_creates_no_bind_group() {
    let Some(gpu) = testing::wgpu("steady_state_decode_creates_no_bind_group") else {
        return;
    };
    let gpu = Rc::new(gpu);
    let model = tiny_llama(gpu.clone());
    let opts = GenerateOptions {
        max_new_tokens: 16,
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        stop_tokens: vec![],
    };
    let mut seen = Vec::new();
    pollster::block_on(llama::generate(&model, &[5, 9, 2], &opts, &mut |_, _| {
        seen.push(gpu.counters());
        true
    }))
    .unwrap();
    assert_eq!(seen.len(), 16);
    let steps: Vec<_> = seen.windows(2).map(|w| w[1].since(&w[0])).collect();
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s.submits, 1, "step {i}: {s:?}");
        assert!(s.dispatches > 0 && s.host_ns > 0, "step {i}: {s:?}");
        if i >= 6 {
            assert_eq!(s.bind_groups_created, 0, "decode step {}: {s:?}", i + 1);
        }
    }
}

/// Counts the heap allocations (and reallocations) of the thread that makes them: the lib's
/// unit tests run on several threads at once, and only the recording thread's are wanted.
struct CountingAlloc;

thread_local! {
    static ALLOCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count_one() {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

fn allocs_so_far() -> u64 {
    ALLOCS.try_with(std::cell::Cell::get).unwrap_or(0)
}

// SAFETY: every call is forwarded to the system allocator with its own arguments; the count is
// a const-initialized thread-local `Cell`, which neither allocates nor runs a destructor.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract is `System.alloc`'s.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_one();
        // SAFETY: as `alloc`.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        count_one();
        // SAFETY: `ptr` came from this allocator, which is `System`'s.
        unsafe { std::alloc::System.realloc(ptr, layout, new) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as `realloc`.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: CountingAlloc = CountingAlloc;

/// A warm dispatch allocates nothing on the host. Records `n` dispatches (decode's mix of
/// shapes: 1 to 3 inputs, ranges and whole tensors, two pipelines) into one batch, after the
/// same batch ran twice (pipelines, bind groups and the parameter buffer warm), and counts this
/// thread's allocations while recording, the submit left out. wgpu's own lists (the pass's
/// commands, the encoder's) still grow by doubling, a few reallocations a batch: 32 and then
/// 224 dispatches (both below `max_batch_dispatches`, so one submit each) may differ by a few
/// of those, while one allocation a dispatch would add 192.
#[test]
fn warm_dispatches_allocate_nothing() {
    let Some(gpu) = testing::wgpu("warm_dispatches_allocate_nothing") else {
        return;
    };
    let n = 4096usize;
    let up = |v: f32| gpu.upload(&Tensor::full(&[n], v).unwrap()).unwrap();
    let (x, y) = (up(1.0), up(2.0));
    let outs: Vec<Tensor> = (0..3)
        .map(|_| gpu.alloc("test", &[n], kernels_core::DType::F32).unwrap())
        .collect();
    let relu = [(
        "OP",
        crate::device::unary_code(kernels_core::op::UnaryOp::Relu),
    )];
    let add = [("OP", crate::device::bop_code(BinaryOp::Add))];
    let unary: crate::device::Params = crate::params::UnaryParams {
        n: n as u32,
        factor: 0.0,
    }
    .into();
    let binary: crate::device::Params = crate::params::BinaryParams {
        n: (n / 2) as u32,
        nb: (n / 2) as u32,
        start: 0,
    }
    .into();
    let record = |count: usize| {
        for i in 0..count {
            let out = &outs[i % 3];
            let half = Some(((i % 2) * n / 2, n / 2));
            let r = if i % 2 == 0 {
                gpu.dispatch(
                    "test",
                    crate::device::Family::Elementwise,
                    "unary_forward",
                    &relu,
                    unary,
                    &[(&x, None)],
                    &[(out, None)],
                    (16, 1, 1),
                )
            } else {
                gpu.dispatch(
                    "test",
                    crate::device::Family::Elementwise,
                    "binary_forward",
                    &add,
                    binary,
                    &[(&x, half), (&y, half)],
                    &[(out, half)],
                    (8, 1, 1),
                )
            };
            r.unwrap();
        }
    };
    let measure = |count: usize| {
        let before = allocs_so_far();
        record(count);
        let made = allocs_so_far() - before;
        gpu.submit().unwrap();
        made
    };
    for _ in 0..2 {
        measure(224);
    }
    let (few, many) = (measure(32), measure(224));
    let after = gpu.download_blocking(&outs[0]).unwrap();
    assert!(
        after
            .as_f32()
            .unwrap()
            .iter()
            .all(|&v| v == 1.0 || v == 3.0)
    );
    eprintln!("allocations recording a warm batch: 32 dispatches {few}, 224 dispatches {many}");
    assert!(
        many <= few + 20,
        "recording 192 more warm dispatches made {} more allocations ({few} for 32, {many} for 224): \
         something allocates per dispatch",
        many.saturating_sub(few)
    );
}
