//! `complete_batch` (an evaluation's prompts at once) stops and decodes each row as
//! `Completion` does the same prompt alone: the same ids, the same stop, the same text.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::rc::Rc;

use kernels_chat::{Completion, Decoder, Stop, StopWhen, TextTokenizer, complete_batch};
use kernels_core::CpuBackend;
use kernels_core::models::llama::{Llama, Sampling};

/// The random qwen2 checkpoint of the family fixtures with the ChatML tokenizer (vocab 37).
fn model(context: usize) -> (Llama, TextTokenizer) {
    let (config, checkpoint) = common::qwen2(context);
    let model =
        Llama::for_inference(config, &checkpoint.tensors, Rc::new(CpuBackend::new())).unwrap();
    (model, common::qwen2_chat_tokenizer())
}

/// One prompt alone through `Completion`: (new ids, why it stopped, its text).
fn alone(
    model: &Llama,
    tok: &TextTokenizer,
    prompt: &[u32],
    when: &StopWhen,
) -> (Vec<u32>, Stop, String) {
    let mut decoder = Decoder::new(model, Sampling::default(), 0).unwrap();
    let (mut run, _) =
        Completion::start(&mut decoder, tok, prompt.to_vec(), &[], when.clone()).unwrap();
    let mut text = String::new();
    while let Some(step) = pollster::block_on(run.step()).unwrap() {
        text.push_str(&step.piece);
    }
    text.push_str(&run.finish().unwrap().0);
    (run.new_ids().to_vec(), run.stopped().unwrap().clone(), text)
}

#[test]
fn a_batch_stops_each_row_as_a_completion_does() {
    let (model, tok) = model(32);
    let prompts: Vec<Vec<u32>> = vec![vec![5, 6, 7, 8], vec![9, 10, 11, 12], vec![20, 3, 4, 15]];
    // The first row's third token stops it; a stop string from the second row's text.
    let plain = StopWhen {
        max_new_tokens: 12,
        ..StopWhen::default()
    };
    let (ids0, _, _) = alone(&model, &tok, &prompts[0], &plain);
    let (_, _, text1) = alone(&model, &tok, &prompts[1], &plain);
    let stop_string: String = text1.chars().skip(4).take(2).collect();
    assert!(
        ids0.len() > 2 && stop_string.chars().count() == 2,
        "{ids0:?} {text1:?}"
    );
    let cases = [
        plain.clone(),
        StopWhen {
            stop_ids: vec![ids0[2]],
            show_stop_id: true,
            ..plain.clone()
        },
        StopWhen {
            stop_ids: vec![ids0[2]],
            show_stop_id: false,
            ..plain.clone()
        },
        StopWhen {
            stop_strings: vec![stop_string.clone()],
            ..plain.clone()
        },
        // More than the context leaves: capped as a Completion caps it.
        StopWhen {
            max_new_tokens: 100,
            ..plain.clone()
        },
    ];
    let mut stops = Vec::new();
    for when in &cases {
        let batch = pollster::block_on(complete_batch(&model, &tok, &prompts, when)).unwrap();
        assert_eq!(batch.len(), prompts.len());
        for (p, got) in prompts.iter().zip(&batch) {
            let (ids, stop, text) = alone(&model, &tok, p, when);
            assert_eq!(
                (&got.ids, &got.stop, &got.text),
                (&ids, &stop, &text),
                "{when:?}"
            );
            stops.push(stop);
        }
    }
    // Every kind of stop was met.
    assert!(stops.contains(&Stop::MaxTokens));
    assert!(stops.contains(&Stop::Context));
    assert!(stops.iter().any(|s| matches!(s, Stop::StopId(_))));
    assert!(stops.contains(&Stop::StopString(stop_string)), "{stops:?}");
    // Prompts of different lengths, an empty one, one longer than the context: errors.
    let uneven = vec![prompts[0].clone(), vec![1]];
    assert!(pollster::block_on(complete_batch(&model, &tok, &uneven, &plain)).is_err());
    assert!(pollster::block_on(complete_batch(&model, &tok, &[vec![]], &plain)).is_err());
    let long = vec![vec![1u32; 33]];
    assert!(pollster::block_on(complete_batch(&model, &tok, &long, &plain)).is_err());
    assert!(
        pollster::block_on(complete_batch(&model, &tok, &[], &plain))
            .unwrap()
            .is_empty()
    );
}
