//! What runs on both sides: the demo llama's greedy answers and logits, and a GRU rollout.

use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use alloc::{format, vec};

use kernels_core::autograd::Graph;
use kernels_core::backend::now_or_never;
use kernels_core::models::llama::{KvCache, Llama, LlamaConfig, greedy_batch};
use kernels_core::models::world::{WorldModel, sim};
use kernels_core::{Backend, CpuBackend, Error, Result, Tensor};

use crate::report::{Answer, Report};
use crate::{ADDER_CONFIG, ADDER_WEIGHTS, WORLD_MEMBER};

/// The characters of the demo model's vocabulary, in id order (its `tokenizer.json`; a test
/// checks the two agree).
pub const VOCAB: [char; 13] = [
    '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '+', '=', '$',
];
/// Tokens the demo model answers with: four digits of the sum, least significant first, and `$`.
pub const ANSWER_LEN: usize = 5;
/// The fixed problems `a + b` answered greedily.
pub const PROBLEMS: [(u32, u32); 8] = [
    (0, 0),
    (999, 999),
    (123, 456),
    (7, 45),
    (500, 500),
    (318, 682),
    (64, 937),
    (250, 749),
];
/// The prompt whose logits (every position) are compared.
pub const LOGITS_PROMPT: &str = "123+456=";
/// Steps of the world-model rollout.
pub const ROLLOUT_STEPS: usize = 10;
/// Seed of the held-out trajectories (`native-cli`'s `world_model::HELD_OUT_SEED`); the
/// rollout starts from the first state of the first one.
pub const STATE_SEED: u64 = 2;

/// Counts instructions (or anything monotonic) around the workload's parts; the host passes
/// [`NoClock`].
pub trait Clock {
    fn now(&mut self) -> u64;
}

/// A clock that reads 0: the host does not count.
pub struct NoClock;

impl Clock for NoClock {
    fn now(&mut self) -> u64 {
        0
    }
}

/// Token ids of a string of [`VOCAB`] characters.
pub fn ids(text: &str) -> Result<Vec<u32>> {
    text.chars()
        .map(|c| {
            VOCAB
                .iter()
                .position(|&v| v == c)
                .map(|i| i as u32)
                .ok_or_else(|| Error::Missing {
                    what: "character of the addition vocabulary".into(),
                    name: format!("{c}"),
                })
        })
        .collect()
}

/// `aaa+bbb=`.
pub fn prompt(a: u32, b: u32) -> String {
    format!("{a:03}+{b:03}=")
}

/// The text of token ids (`?` for an id outside the vocabulary).
pub fn text(ids: &[u32]) -> String {
    ids.iter()
        .map(|&i| VOCAB.get(i as usize).copied().unwrap_or('?'))
        .collect()
}

fn download(backend: &dyn Backend, t: &Tensor) -> Result<Tensor> {
    now_or_never(backend.download(t)).ok_or_else(|| Error::Autograd {
        why: "embedded workload: a CPU download was not ready at once".into(),
    })?
}

/// Runs the whole workload on a CPU backend; `clock` brackets each part.
pub fn run(clock: &mut dyn Clock) -> Result<Report> {
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());

    let t0 = clock.now();
    let config = LlamaConfig::from_json(ADDER_CONFIG)?;
    let tensors = kernels_core::io::load_named(ADDER_WEIGHTS, "adder/model.safetensors")?;
    let model = Llama::from_tensors(config, &tensors, backend.clone())?;
    drop(tensors);
    let t_loaded = clock.now();

    let mut answers = Vec::new();
    for &(a, b) in &PROBLEMS {
        let p = ids(&prompt(a, b))?;
        let out = now_or_never(greedy_batch(&model, &[p], ANSWER_LEN)).ok_or_else(|| {
            Error::Autograd {
                why: "embedded workload: greedy_batch was not ready at once".into(),
            }
        })??;
        let tokens = out.into_iter().next().unwrap_or_default();
        answers.push(Answer { a, b, tokens });
    }
    let t_answers = clock.now();

    // One answer again, token by token through the KV cache, to count prefill and decode apart.
    let (a, b) = PROBLEMS[2];
    let g = Graph::inference(backend.clone());
    let p = model.bind(&g)?;
    let prompt_ids: Vec<i32> = ids(&prompt(a, b))?.iter().map(|&t| t as i32).collect();
    let mut cache = KvCache::with_capacity(prompt_ids.len() + ANSWER_LEN);
    let mut input =
        g.constant(backend.upload(&Tensor::from_i32(&[1, prompt_ids.len()], prompt_ids)?)?)?;
    let mut steps = Vec::new();
    let mut marks = Vec::new();
    for _ in 0..ANSWER_LEN {
        let hidden = model.forward(&g, &p, &input, Some(&mut cache))?;
        let last = model.last_positions(&g, &hidden)?;
        let next = g.argmax(&model.logits(&g, &p, &last)?)?;
        backend.flush()?;
        marks.push(clock.now());
        input = g.reshape(&next, &[1, 1])?;
        steps.push(next);
    }
    let mut timed = Vec::new();
    for s in &steps {
        timed.extend(
            download(backend.as_ref(), s.tensor())?
                .to_i64_vec()?
                .iter()
                .map(|&t| t as u32),
        );
    }
    if answers.get(2).map(|x| &x.tokens) != Some(&timed) {
        return Err(Error::Autograd {
            why: format!(
                "embedded workload: token-by-token decode gave {timed:?}, greedy_batch {:?}",
                answers.get(2).map(|x| &x.tokens)
            ),
        });
    }
    let prefill = marks.first().map_or(0, |&m| m - t_answers);
    let decode = marks.last().zip(marks.first()).map_or(0, |(l, f)| l - f);
    drop((g, p, cache, input, steps));
    let t_timed = clock.now();

    let logits = {
        let g = Graph::inference(backend.clone());
        let p = model.bind(&g)?;
        let tokens: Vec<i32> = ids(LOGITS_PROMPT)?.iter().map(|&t| t as i32).collect();
        let n = tokens.len();
        let input = g.constant(backend.upload(&Tensor::from_i32(&[1, n], tokens)?)?)?;
        let hidden = model.forward(&g, &p, &input, None)?;
        let out = model.logits(&g, &p, &hidden)?;
        backend.flush()?;
        download(backend.as_ref(), out.tensor())?.to_f32_vec()?
    };
    let t_logits = clock.now();
    drop(model);

    let (world, store) = WorldModel::load(backend.clone(), WORLD_MEMBER)?;
    let features = world.config.features;
    let state = sim::trajectories(STATE_SEED, 1, 1)?;
    let t_world_loaded = clock.now();
    let rollout = {
        let g = Graph::inference(backend.clone());
        let p = store.bind(&g)?;
        let s0 = g.constant(backend.upload(&Tensor::from_f32(&[1, features], state.clone())?)?)?;
        let roll = world.rollout(&g, &p, &s0, ROLLOUT_STEPS)?;
        backend.flush()?;
        // The first member's predictions: the first block of the stacked ones.
        let all = download(backend.as_ref(), roll.stacked.tensor())?.to_f32_vec()?;
        let per = all.len() / roll.members().max(1);
        if roll.members() == 0 {
            return Err(Error::Empty {
                op: "embedded workload",
                tensor: "ensemble members".into(),
            });
        }
        all.get(..per).unwrap_or_default().to_vec()
    };
    let t_rollout = clock.now();

    Ok(Report {
        answers,
        logits,
        logits_shape: vec![LOGITS_PROMPT.len(), VOCAB.len()],
        state,
        rollout,
        rollout_shape: vec![ROLLOUT_STEPS, features],
        cost: crate::report::Cost {
            llama_load: t_loaded - t0,
            answers: t_answers - t_loaded,
            prefill,
            decode,
            logits: t_logits - t_timed,
            world_load: t_world_loaded - t_logits,
            rollout: t_rollout - t_world_loaded,
        },
    })
}

/// Reads an answer (four digits least significant first, then `$`) back as a number.
pub fn read_answer(text: &str) -> Option<u32> {
    let digits = text.strip_suffix('$')?;
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        digits
            .bytes()
            .rev()
            .fold(0, |n, b| n * 10 + u32::from(b - b'0')),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::compare::compare;
    use crate::report::Report;

    #[test]
    fn the_vocabulary_is_the_demo_tokenizers() {
        let json: serde_json::Value = serde_json::from_str(include_str!(
            "../../../native-cli/models/adder/tokenizer.json"
        ))
        .unwrap();
        let vocab = json["model"]["vocab"].as_object().unwrap();
        assert_eq!(vocab.len(), VOCAB.len());
        for (i, c) in VOCAB.iter().enumerate() {
            assert_eq!(vocab[&alloc::string::ToString::to_string(c)], i, "{c}");
        }
    }

    #[test]
    fn answers_read_back() {
        assert_eq!(read_answer("9750$"), Some(579));
        assert_eq!(read_answer("0001$"), Some(1000));
        assert_eq!(read_answer("975$"), None);
        assert_eq!(read_answer("97a0$"), None);
        assert_eq!(ids("12+=$").unwrap(), [1, 2, 10, 11, 12]);
        assert!(ids("1x").is_err());
    }

    /// The host side of the comparison: the workload runs, answers every problem right (the
    /// demo model is trained for this), is deterministic, and survives the report's text.
    #[test]
    fn the_host_workload_answers_and_round_trips() {
        let host = run(&mut NoClock).unwrap();
        assert_eq!(host.answers.len(), PROBLEMS.len());
        for a in &host.answers {
            assert_eq!(read_answer(&text(&a.tokens)), Some(a.a + a.b), "{a:?}");
        }
        assert_eq!(host.logits.len(), LOGITS_PROMPT.len() * VOCAB.len());
        assert_eq!(host.rollout.len(), ROLLOUT_STEPS * host.state.len());
        assert!(
            host.logits
                .iter()
                .chain(&host.rollout)
                .all(|x| x.is_finite())
        );
        let (back, _) = Report::parse(&host.to_text(None)).unwrap();
        let again = run(&mut NoClock).unwrap();
        for c in compare(&back, &again) {
            assert!(c.pass, "{c:?}");
            assert!(!c.detail.contains("FAIL"));
        }
        assert_eq!(back.logits, again.logits);
        assert_eq!(back.rollout, again.rollout);
    }
}
