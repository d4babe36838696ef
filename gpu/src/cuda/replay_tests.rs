//! Decode steps replayed from device memory (`replay.rs`) on the emulated device: a llama
//! decoded with replays gives the very logits and tokens of graphs off, and the CPU reference's
//! within the golden tests' budget, across a prompt, many positions, a truncated cache (a
//! position below the capture's) and a second prompt; a steady token records no launch, builds
//! no parameter, updates no graph and (greedy) writes nothing from the host.

use std::rc::Rc;

use kernels_core::models::llama::addition::{Size, config};
use kernels_core::models::llama::{Decoder, Llama, LlamaConfig, Sampling};
use kernels_core::{Backend, CpuBackend, Rng};

use super::emulator::EmulatedDevice;
use super::kernels::host;
use super::{CudaBackend, CudaCounters};

/// The golden tests' budget against the CPU reference (tests/src/golden.rs).
const ATOL: f32 = 2e-4;
const RTOL: f32 = 2e-4;

fn model_config() -> LlamaConfig {
    let mut c = config(Size {
        hidden: 32,
        intermediate: 48,
        layers: 2,
        heads: 4,
        kv_heads: 2,
    });
    c.max_position_embeddings = 40;
    c
}

fn emulated(graphs: bool) -> Option<Rc<CudaBackend>> {
    emulated_device(graphs).map(|(be, _)| be)
}

fn emulated_device(graphs: bool) -> Option<(Rc<CudaBackend>, &'static EmulatedDevice)> {
    host::compiler()?;
    let dev = EmulatedDevice::new(64).unwrap_or_else(|e| panic!("{e}"));
    let dev: &'static EmulatedDevice = Box::leak(Box::new(dev));
    let be =
        CudaBackend::with_engine(Box::new(super::emulator::tests::Shared(dev))).with_graphs(graphs);
    Some((Rc::new(be), dev))
}

/// Per decode token: its logits, its id, and the counters after it.
#[derive(Default)]
struct Trace {
    logits: Vec<Vec<f32>>,
    ids: Vec<u32>,
    counters: Vec<CudaCounters>,
}

const PROMPT_A: [u32; 9] = [1, 4, 2, 7, 3, 9, 11, 5, 6];
const PROMPT_B: [u32; 4] = [8, 2, 12, 1];
const TOKENS: usize = 8;
/// The cache is cut back to this before the second prompt: its decode positions start below
/// the capture's.
const CUT: usize = 3;

/// A decoder's run: prompt A, `TOKENS` tokens, the cache truncated to `CUT`, prompt B,
/// `TOKENS` tokens (each token's logits read too).
fn decode(be: Rc<dyn Backend>, cuda: Option<&CudaBackend>, sampling: Sampling) -> Trace {
    let model = Llama::init(model_config(), be, &mut Rng::new(29)).unwrap();
    let mut d = Decoder::new(&model, sampling, 30).unwrap();
    let mut t = Trace::default();
    for (turn, prompt) in [&PROMPT_A[..], &PROMPT_B[..]].into_iter().enumerate() {
        if turn == 1 {
            d.truncate(CUT);
        }
        pollster::block_on(d.prefill(prompt)).unwrap();
        for _ in 0..TOKENS {
            let (id, logits) = pollster::block_on(d.decode_logits()).unwrap();
            t.ids.push(id);
            t.logits.push(logits.to_f32_vec().unwrap());
            if let Some(c) = cuda {
                t.counters.push(c.counters());
            }
        }
    }
    t
}

fn same_bits(a: &[Vec<f32>], b: &[Vec<f32>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
        })
}

fn greedy() -> Sampling {
    Sampling {
        temperature: 0.0,
        ..Sampling::default()
    }
}

#[test]
fn replayed_decode_steps_give_the_logits_of_graphs_off_and_of_the_cpu() {
    let (Some(off), Some(on)) = (emulated(false), emulated(true)) else {
        return;
    };
    let cpu = decode(Rc::new(CpuBackend::new()), None, greedy());
    let a = decode(off.clone(), Some(&off), greedy());
    let b = decode(on.clone(), Some(&on), greedy());
    assert_eq!(a.ids, b.ids, "greedy ids, graphs off and replayed");
    assert_eq!(cpu.ids, b.ids, "greedy ids, the CPU and replayed");
    assert!(
        same_bits(&a.logits, &b.logits),
        "logits differ between graphs off and replayed"
    );
    for (i, (r, y)) in cpu.logits.iter().zip(&b.logits).enumerate() {
        assert_eq!(r.len(), y.len());
        for (v, (want, got)) in r.iter().zip(y).enumerate() {
            assert!(
                (want - got).abs() <= ATOL + RTOL * want.abs(),
                "token {i}, id {v}: CPU {want}, replayed {got}"
            );
        }
    }
    // Without graphs nothing is replayed.
    let last_off = a.counters.last().copied().unwrap_or_default();
    assert_eq!((last_off.replays, last_off.graph_launches), (0, 0));
    // With graphs: per prompt, the first decode token is captured, the second recorded and
    // checked against it, the rest replayed; the second prompt's tokens (at positions below
    // and then past the capture's) replay the first prompt's capture.
    let e = b.counters.last().copied().unwrap_or_default();
    assert_eq!(e.replay_refusals, 0, "{e:?}");
    assert_eq!(e.replays, 2 * TOKENS as u64 - 2, "{e:?}");
    for w in b.counters.windows(2).skip(2).take(TOKENS - 3) {
        let (p, n) = (w[0], w[1]);
        assert_eq!(n.replays, p.replays + 1, "{n:?}");
        // A steady token: no launch recorded (no parameter built), no GEMM, no graph launched
        // or updated, nothing uploaded; the host writes the position shift, nothing else
        // (greedy: the ids are fed on the device, the draw is constant).
        assert_eq!((n.launches, n.gemms), (p.launches, p.gemms), "{n:?}");
        assert_eq!(
            (n.graph_launches, n.graph_instantiations),
            (p.graph_launches, p.graph_instantiations)
        );
        assert_eq!(n.bytes_uploaded, p.bytes_uploaded, "{n:?}");
        assert!(n.replayed_nodes > p.replayed_nodes);
        assert_eq!(n.replay_writes, p.replay_writes + 1, "{n:?}");
    }
}

/// A driver that refuses the capture (an H200 refused every capture on the legacy default
/// stream): the decode goes on without replays, with the logits of graphs off, and the capture
/// is tried once, not per token.
#[test]
fn a_refused_capture_decodes_on_without_replays() {
    let (Some(off), Some((on, dev))) = (emulated(false), emulated_device(true)) else {
        return;
    };
    dev.refuse_captures();
    let a = decode(off.clone(), Some(&off), greedy());
    let b = decode(on.clone(), Some(&on), greedy());
    assert_eq!(a.ids, b.ids, "greedy ids, graphs off and capture refused");
    assert!(
        same_bits(&a.logits, &b.logits),
        "logits differ between graphs off and a refused capture"
    );
    let e = b.counters.last().copied().unwrap_or_default();
    assert_eq!((e.replays, e.replay_refusals), (0, 1), "{e:?}");
    // The steps still ran as (updated) graphs.
    assert!(e.graph_launches > 0, "{e:?}");
}

#[test]
fn replayed_sampled_decode_gives_the_ids_of_graphs_off() {
    let (Some(off), Some(on)) = (emulated(false), emulated(true)) else {
        return;
    };
    let s = Sampling {
        temperature: 0.9,
        top_k: 20,
        top_p: 0.95,
        seed: 5,
    };
    let a = decode(off.clone(), Some(&off), s);
    let b = decode(on.clone(), Some(&on), s);
    assert_eq!(a.ids, b.ids, "sampled ids, graphs off and replayed");
    assert!(same_bits(&a.logits, &b.logits), "sampled: logits differ");
    let e = b.counters.last().copied().unwrap_or_default();
    assert_eq!(e.replays, 2 * TOKENS as u64 - 2, "{e:?}");
    // Each replay writes the shift and the sampler's draw: the host's only work.
    assert!(e.replay_writes >= e.replays, "{e:?}");
}

#[test]
fn position_slots_are_the_named_fields_of_contract_cuh() {
    let contract = include_str!("kernels/contract.cuh");
    for (entry, block, field) in [
        ("rope", "RopeParams", "offset"),
        ("rope_kv_write", "RopeKvWriteParams", "offset"),
        ("kv_write", "KvWriteParams", "pos"),
        ("kv_write_copy", "KvWriteParams", "pos"),
        ("attn_forward", "AttentionParams", "kv_len"),
    ] {
        let start = contract
            .find(&format!("struct {block} {{"))
            .unwrap_or_else(|| panic!("{block}"));
        let body = &contract[start..];
        let body = &body[..body.find("};").unwrap()];
        let mask = super::replay::position_mask(entry);
        assert_eq!(mask.count_ones(), 1, "{entry}");
        let slot = mask.trailing_zeros();
        assert!(
            body.contains(&format!("p.{field} = raw.u[{slot}];")),
            "{entry}: {block}.{field} is not u[{slot}]"
        );
    }
    assert_eq!(super::replay::position_mask("matvec_stream"), 0);
}
