//! CUDA graphs on the emulated device: a llama's decode tokens, each one step (recorded, then
//! launched as one graph at the token's download), give the very logits and tokens of the
//! launch-by-launch path; the graph of the decode shape is instantiated once and then updated
//! and replayed, token after token, with every launch the token recorded.

use std::rc::Rc;

use kernels_core::autograd::Graph;
use kernels_core::models::llama::addition::{Size, config};
use kernels_core::models::llama::{KvCache, Llama};
use kernels_core::{Backend, Rng, Tensor};

use super::emulator::EmulatedDevice;
use super::kernels::host;
use super::{CudaBackend, CudaCounters};

const PROMPT: [i32; 5] = [1, 4, 2, 7, 3];
const DECODE: usize = 6;

/// What one run gives: per step (the prefill, then each decode token) the last position's
/// logits and the greedy token, and the counters after the prefill and after the last token.
struct Run {
    logits: Vec<Vec<f32>>,
    tokens: Vec<i64>,
    after_prefill: CudaCounters,
    after: CudaCounters,
}

fn decode(be: Rc<CudaBackend>) -> Run {
    let mut c = config(Size {
        hidden: 32,
        intermediate: 48,
        layers: 2,
        heads: 4,
        kv_heads: 2,
    });
    c.max_position_embeddings = 32;
    let dynbe: Rc<dyn Backend> = be.clone();
    let model = Llama::init(c, dynbe.clone(), &mut Rng::new(29)).unwrap();
    let g = Graph::inference(dynbe.clone());
    let p = model.bind(&g).unwrap();
    let mut cache = KvCache::with_capacity(PROMPT.len() + DECODE);
    let ids = Tensor::from_i32(&[1, PROMPT.len()], PROMPT.to_vec()).unwrap();
    let mut input = g.constant(dynbe.upload(&ids).unwrap()).unwrap();
    let (mut logits, mut tokens) = (Vec::new(), Vec::new());
    let mut after_prefill = CudaCounters::default();
    for step in 0..=DECODE {
        let h = model.forward(&g, &p, &input, Some(&mut cache)).unwrap();
        let last = model.last_positions(&g, &h).unwrap();
        let l = model.logits(&g, &p, &last).unwrap();
        let next = g.argmax(&l).unwrap();
        // The token's one read: the step runs here (as a graph with graphs on).
        let host = pollster::block_on(dynbe.download(l.tensor())).unwrap();
        logits.push(host.to_f32_vec().unwrap());
        let id = pollster::block_on(dynbe.download(next.tensor())).unwrap();
        tokens.push(id.to_i64_vec().unwrap()[0]);
        input = g.reshape(&next, &[1, 1]).unwrap();
        if step == 0 {
            after_prefill = be.counters();
        }
    }
    Run {
        logits,
        tokens,
        after_prefill,
        after: be.counters(),
    }
}

fn emulated(graphs: bool) -> Option<(Rc<CudaBackend>, &'static EmulatedDevice)> {
    host::compiler()?;
    let dev = EmulatedDevice::new(64).unwrap_or_else(|e| panic!("{e}"));
    let dev: &'static EmulatedDevice = Box::leak(Box::new(dev));
    let be =
        CudaBackend::with_engine(Box::new(super::emulator::tests::Shared(dev))).with_graphs(graphs);
    Some((Rc::new(be), dev))
}

#[test]
fn cuda_graphs_replay_decode_tokens_as_the_launches_would_run() {
    let (Some((plain, _)), Some((graphed, dev))) = (emulated(false), emulated(true)) else {
        return;
    };
    let a = decode(plain);
    let b = decode(graphed);
    assert_eq!(a.tokens, b.tokens, "greedy tokens");
    for (step, (x, y)) in a.logits.iter().zip(&b.logits).enumerate() {
        let same = x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(
            same,
            "step {step}: logits differ between graph and launches"
        );
    }
    // Without graphs nothing is captured.
    assert_eq!(a.after.graph_launches, 0, "{:?}", a.after);
    // The same work was recorded either way.
    assert_eq!(
        (a.after.launches, a.after.gemms),
        (b.after.launches, b.after.gemms)
    );
    // With graphs, every launch and GEMM of every step ran inside a graph launch: the logits'
    // read ends the step, the token's read finds nothing recorded.
    let (p, e) = (b.after_prefill, b.after);
    assert_eq!(e.graph_nodes, e.launches + e.gemms, "{e:?}");
    assert_eq!(e.graph_launches, 1 + DECODE as u64, "{e:?}");
    // The decode tokens share one shape: the first instantiates its graph, the rest update
    // and replay it with their own position and buffers.
    let decode_nodes = (e.launches + e.gemms) - (p.launches + p.gemms);
    assert!(decode_nodes > 0);
    assert_eq!(e.graph_instantiations - p.graph_instantiations, 1, "{e:?}");
    let shapes = dev.graph_launches();
    let per_token = decode_nodes / DECODE as u64;
    assert_eq!(
        decode_nodes % DECODE as u64,
        0,
        "{decode_nodes} over {DECODE} tokens"
    );
    assert!(
        shapes.contains(&(per_token as usize, DECODE as u64)),
        "the decode graph ({per_token} nodes) launched {DECODE} times: {shapes:?}"
    );
    assert!(e.host_ns > 0 && a.after.host_ns > 0);
}

#[test]
fn cuda_graphs_switch_reads_its_values() {
    // The switch's parsing (the env itself is not touched: tests run in parallel).
    assert!(super::switch_value("KERNELS_CUDA_GRAPHS", Some("0"), true) == Ok(false));
    assert!(super::switch_value("KERNELS_CUDA_GRAPHS", Some("off"), true) == Ok(false));
    assert!(super::switch_value("KERNELS_CUDA_GRAPHS", Some("1"), false) == Ok(true));
    assert!(super::switch_value("KERNELS_CUDA_GRAPHS", None, true) == Ok(true));
    assert!(super::switch_value("KERNELS_CUDA_GRAPHS", Some(""), true) == Ok(true));
    assert!(super::switch_value("KERNELS_CUDA_GRAPHS", Some("yes please"), true).is_err());
}

/// The host's cost of a decode token without graphs, with graphs updated each token and with
/// the decode step replayed (`replay.rs`), on the emulated device: the backend's `host_ns`
/// over the steady decode tokens (after the first two, which capture and check the replay)
/// less the time the emulator spent running the kernels and GEMMs (what a device would do), so
/// only the op glue, the recording, the writes and the launch calls are left. The decoder's
/// own path (`Decoder::decode`), as `kernels bench llama` runs it. A measurement, not a test:
/// run with `cargo test --release -p kernels-gpu --features cuda --lib -- --ignored
/// --nocapture cuda_graph_host_cost`.
#[test]
#[ignore = "a measurement; prints host µs per token"]
fn cuda_graph_host_cost_per_token() {
    use kernels_core::models::llama::{Decoder, Sampling};
    const TOKENS: usize = 16;
    const RUNS: usize = 5;
    let mut c = config(Size {
        hidden: 64,
        intermediate: 128,
        layers: 8,
        heads: 4,
        kv_heads: 2,
    });
    c.max_position_embeddings = 64;
    const MODES: [(&str, bool, bool); 3] = [
        ("without graphs", false, false),
        ("with graphs updated each token", true, false),
        ("with the step replayed", true, true),
    ];
    let mut per = [Vec::new(), Vec::new(), Vec::new()];
    let mut work = [0u64; 3];
    for _ in 0..RUNS {
        for (i, (_, graphs, replay)) in MODES.into_iter().enumerate() {
            let Some((be, dev)) = emulated(graphs) else {
                return;
            };
            let be = Rc::new(Rc::into_inner(be).unwrap().with_replay(replay));
            let dynbe: Rc<dyn Backend> = be.clone();
            let model = Llama::init(c.clone(), dynbe, &mut Rng::new(29)).unwrap();
            let greedy = Sampling {
                temperature: 0.0,
                ..Sampling::default()
            };
            let mut d = Decoder::new(&model, greedy, PROMPT.len() + TOKENS + 3).unwrap();
            let prompt: Vec<u32> = PROMPT.iter().map(|&t| t as u32).collect();
            pollster::block_on(d.prefill(&prompt)).unwrap();
            for _ in 0..2 {
                pollster::block_on(d.decode()).unwrap();
            }
            let start = (be.counters(), dev.device_ns());
            for _ in 0..TOKENS {
                pollster::block_on(d.decode()).unwrap();
            }
            let (e, device) = (be.counters(), dev.device_ns() - start.1);
            let host = e.host_ns - start.0.host_ns;
            per[i].push(host.saturating_sub(device) as f64 / 1e3 / TOKENS as f64);
            let nodes = |c: &CudaCounters| c.launches + c.gemms + c.replayed_nodes;
            work[i] = (nodes(&e) - nodes(&start.0)) / TOKENS as u64;
        }
    }
    for (i, (name, _, _)) in MODES.iter().enumerate() {
        let mut v = per[i].clone();
        v.sort_by(f64::total_cmp);
        eprintln!(
            "host µs per decode token {name}: median {:.1}, range {:.1}..{:.1} over {RUNS} runs \
             of {TOKENS} tokens, {} launches and GEMMs a token",
            v[v.len() / 2],
            v[0],
            v[v.len() - 1],
            work[i]
        );
    }
}
