//! The KV cache is allocated once and written in place: a decode step copies no cache (every
//! `kv_write` reuses the donated buffer, and the bytes a step makes or touches do not grow with
//! the position), and greedy tokens over the cache equal those of a full forward without one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::backend::LocalBoxFuture;
use kernels_core::models::llama::{self, GenerateOptions, KvCache, Llama, Sampling};
use kernels_core::op::{Direction, Op};
use kernels_core::tensor::Storage;
use kernels_core::{Backend, CpuBackend, DeviceId, Error, Result, Tensor};
use kernels_gpu::testing;
use native_cli::llama::{build, read_dir};

fn fixture_model(backend: Rc<dyn Backend>) -> Llama {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/llama/gqa_tied");
    build(&read_dir(&dir).unwrap(), backend).unwrap()
}

fn greedy(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        stop_tokens: vec![],
    }
}

/// What a [`Counting`] backend saw.
#[derive(Debug, Default, Clone, PartialEq)]
struct Seen {
    /// Elements of every output a kernel made (not counting outputs that reuse a donated
    /// input's storage).
    elems_made: usize,
    /// `kv_write`s that wrote into the donated cache, and those that copied it.
    in_place: usize,
    copied: usize,
    /// `matmul_add`s that accumulated into the donated residual (the residual stream `x`).
    residual_in_place: usize,
}

/// The CPU backend, counting what each op makes.
struct Counting {
    inner: CpuBackend,
    seen: RefCell<Seen>,
}

fn data_ptr(t: &Tensor) -> *const f32 {
    match t.storage() {
        Storage::F32(v) => v.as_ptr(),
        _ => std::ptr::null(),
    }
}

impl Backend for Counting {
    fn name(&self) -> String {
        "counting cpu".into()
    }
    fn device(&self) -> DeviceId {
        self.inner.device()
    }
    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        self.inner.upload(t)
    }
    fn download<'a>(&'a self, t: &'a Tensor) -> LocalBoxFuture<'a, Result<Tensor>> {
        self.inner.download(t)
    }
    fn run(&self, op: &Op, dir: Direction, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let outs = self.inner.run(op, dir, inputs)?;
        let mut s = self.seen.borrow_mut();
        s.elems_made += outs.iter().map(Tensor::numel).sum::<usize>();
        if matches!(op, Op::KvWrite { .. } | Op::RopeKvWrite { .. }) {
            s.copied += 1;
        }
        Ok(outs)
    }
    fn run_donated(&self, op: &Op, donated: Vec<Tensor>, rest: &[&Tensor]) -> Result<Vec<Tensor>> {
        let before: Vec<*const f32> = donated.iter().map(data_ptr).collect();
        let outs = self.inner.run_donated(op, donated, rest)?;
        let mut s = self.seen.borrow_mut();
        for (t, before) in outs.iter().zip(before) {
            if data_ptr(t) == before && matches!(op, Op::MatmulAdd { .. }) {
                s.residual_in_place += 1;
            } else if data_ptr(t) == before {
                s.in_place += 1;
            } else {
                s.elems_made += t.numel();
                s.copied += 1;
            }
        }
        Ok(outs)
    }
}

#[test]
fn cpu_decode_steps_write_the_cache_in_place_and_make_the_same_bytes_at_every_position() {
    let counting = Rc::new(Counting {
        inner: CpuBackend::new(),
        seen: RefCell::default(),
    });
    let model = fixture_model(counting.clone());
    let prompt = [3, 1, 4, 1, 5];
    let new = 50;
    let mut seen = Vec::new();
    let (tokens, _) = pollster::block_on(llama::generate(
        &model,
        &prompt,
        &greedy(new),
        &mut |_, _| {
            seen.push(counting.seen.borrow().clone());
            true
        },
    ))
    .unwrap();
    assert_eq!(tokens.len(), new);
    let steps: Vec<Seen> = seen
        .windows(2)
        .map(|w| Seen {
            elems_made: w[1].elems_made - w[0].elems_made,
            in_place: w[1].in_place - w[0].in_place,
            copied: w[1].copied - w[0].copied,
            residual_in_place: w[1].residual_in_place - w[0].residual_in_place,
        })
        .collect();
    let layers = model.config.num_hidden_layers;
    for (i, step) in steps.iter().enumerate() {
        // Keys and values of every layer written into the cache itself, never copied.
        assert_eq!(step.in_place, 2 * layers, "decode step {i}: {step:?}");
        assert_eq!(step.copied, 0, "decode step {i}: {step:?}");
        // Both residual adds of every layer accumulated into `x` (o_proj's and down_proj's).
        assert_eq!(
            step.residual_in_place,
            2 * layers,
            "decode step {i}: {step:?}"
        );
        // Every op's output has the same size at position 6 as at position 54.
        assert_eq!(step.elems_made, steps[0].elems_made, "decode step {i}");
    }
    // The prefill wrote the prompt in place too.
    assert_eq!(seen[0].in_place, 2 * layers);
    assert_eq!(seen[0].copied, 0);
}

/// Greedy tokens recomputed by a full forward over the whole sequence at every step (no cache).
fn greedy_without_cache(model: &Llama, prompt: &[u32], n: usize) -> Vec<u32> {
    let backend = model.store.backend().clone();
    let g = Graph::inference(backend.clone());
    let p = model.bind(&g).unwrap();
    let mut seq: Vec<u32> = prompt.to_vec();
    for _ in 0..n {
        let ids: Vec<i32> = seq.iter().map(|&t| t as i32).collect();
        let ids = Tensor::from_i32(&[1, ids.len()], ids).unwrap();
        let ids = g.constant(backend.upload(&ids).unwrap()).unwrap();
        let h = model.forward(&g, &p, &ids, None).unwrap();
        let last = model.last_positions(&g, &h).unwrap();
        let logits = model.logits(&g, &p, &last).unwrap();
        let id = g.argmax(&logits).unwrap();
        let host = pollster::block_on(backend.download(id.tensor())).unwrap();
        seq.push(host.to_i64_vec().unwrap()[0] as u32);
    }
    seq[prompt.len()..].to_vec()
}

#[test]
fn greedy_tokens_over_the_cache_equal_a_full_forward_on_every_backend() {
    let prompt = [3, 1, 4, 1, 5, 9, 2];
    let n = 40;
    let mut backends: Vec<(String, Rc<dyn Backend>)> =
        vec![("cpu".into(), Rc::new(CpuBackend::new()))];
    for b in testing::gpu_backends("greedy_tokens_over_the_cache_equal_a_full_forward") {
        backends.push((b.name, b.backend));
    }
    for (name, backend) in backends {
        let model = fixture_model(backend);
        let want = greedy_without_cache(&model, &prompt, n);
        let (got, _) =
            pollster::block_on(llama::generate(&model, &prompt, &greedy(n), &mut |_, _| {
                true
            }))
            .unwrap();
        assert_eq!(
            got, want,
            "{name}: cached and uncached greedy tokens differ"
        );
        // A batch of two prompts through greedy_batch: each row as alone.
        let other = [7, 7, 1, 0, 2, 8, 4];
        let both = pollster::block_on(llama::greedy_batch(
            &model,
            &[prompt.to_vec(), other.to_vec()],
            12,
        ))
        .unwrap();
        assert_eq!(both[0], want[..12], "{name}: batch row 0");
        assert_eq!(
            both[1],
            greedy_without_cache(&model, &other, 12),
            "{name}: batch row 1"
        );
    }
}

#[test]
fn wgpu_decode_steps_touch_the_same_bytes_at_every_position() {
    let Some(gpu) = testing::wgpu("wgpu_decode_steps_touch_the_same_bytes_at_every_position")
    else {
        return;
    };
    let gpu = Rc::new(gpu);
    let model = fixture_model(gpu.clone());
    let mut seen = Vec::new();
    pollster::block_on(llama::generate(
        &model,
        &[3, 1, 4],
        &greedy(56),
        &mut |_, _| {
            seen.push(gpu.counters());
            true
        },
    ))
    .unwrap();
    let steps: Vec<_> = seen.windows(2).map(|w| w[1].since(&w[0])).collect();
    let first = steps[0];
    for (i, s) in steps.iter().enumerate() {
        // The same dispatches over the same bytes at position 4 as at 58: no copy of the cache
        // (a concat would grow both), and no buffer made.
        assert_eq!(s.dispatches, first.dispatches, "step {i}: {s:?}");
        assert_eq!(s.bytes_touched, first.bytes_touched, "step {i}: {s:?}");
        // Once the pool has warmed up (the first steps after the prefill), nothing is made.
        if i >= 2 {
            assert_eq!(s.buffers_created, 0, "step {i}: {s:?}");
        }
    }
    eprintln!("wgpu decode step: {first:?}");
}

#[test]
fn the_cache_holds_what_was_asked_and_no_more() {
    let model = fixture_model(Rc::new(CpuBackend::new()));
    let backend = model.store.backend().clone();
    let g = Graph::inference(backend.clone());
    let p = model.bind(&g).unwrap();
    let ids = |n: usize| {
        let t = Tensor::from_i32(&[1, n], vec![1; n]).unwrap();
        g.constant(backend.upload(&t).unwrap()).unwrap()
    };
    let mut cache = KvCache::with_capacity(6);
    assert_eq!(cache.capacity(), 0);
    model.forward(&g, &p, &ids(4), Some(&mut cache)).unwrap();
    assert_eq!((cache.len(), cache.capacity()), (4, 6));
    model.forward(&g, &p, &ids(2), Some(&mut cache)).unwrap();
    let e = model
        .forward(&g, &p, &ids(1), Some(&mut cache))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::LimitExceeded {
                value: 7,
                limit: 6,
                ..
            }
        ),
        "{e}"
    );
    // Capped at max_position_embeddings (64), and the default is that.
    let mut big = KvCache::with_capacity(1000);
    model.forward(&g, &p, &ids(1), Some(&mut big)).unwrap();
    assert_eq!(big.capacity(), 64);
    let mut default = KvCache::new();
    model.forward(&g, &p, &ids(1), Some(&mut default)).unwrap();
    assert_eq!(default.capacity(), 64);
}

/// In a recording graph the cache is not donated (the tape keeps it), and gradients flow
/// through kv_write: the loss of two cached steps has the same gradients as one forward.
#[test]
fn a_recording_graph_differentiates_through_the_cache() {
    let model = fixture_model(Rc::new(CpuBackend::new()));
    let backend = model.store.backend().clone();
    let tokens = [3i32, 1, 4, 1, 5];
    let grads = |cached: bool| {
        let g = Graph::new(backend.clone());
        let p = model.bind(&g).unwrap();
        let ids = |t: &[i32]| {
            let t = Tensor::from_i32(&[1, t.len()], t.to_vec()).unwrap();
            g.constant(backend.upload(&t).unwrap()).unwrap()
        };
        let hidden = if cached {
            let mut cache = KvCache::new();
            model
                .forward(&g, &p, &ids(&tokens[..3]), Some(&mut cache))
                .unwrap();
            model
                .forward(&g, &p, &ids(&tokens[3..]), Some(&mut cache))
                .unwrap()
        } else {
            let h = model.forward(&g, &p, &ids(&tokens), None).unwrap();
            let last = Tensor::from_i32(&[2], vec![3, 4]).unwrap();
            let flat = g.reshape(&h, &[5, model.config.hidden_size]).unwrap();
            g.embedding(&g.constant(last).unwrap(), &flat).unwrap()
        };
        let n = hidden.tensor().numel();
        let loss = g.sum(&g.reshape(&hidden, &[n]).unwrap()).unwrap();
        let gr = g.backward(&loss).unwrap();
        let w = gr
            .get_named("model.layers.0.self_attn.k_proj.weight")
            .unwrap();
        w.to_f32_vec().unwrap()
    };
    let (a, b) = (grads(true), grads(false));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "k_proj gradients differ by {worst}");
    assert!(a.iter().any(|&x| x != 0.0));
}
