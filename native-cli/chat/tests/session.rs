//! A chat keeps its KV cache between turns: a backend that counts the token ids uploaded (each
//! prefill uploads its ids; a decode step feeds the sampled token on the device) shows that
//! turn 2 prefills only its own tokens, and the reply is the one a fresh cache gives. A
//! conversation past the context drops its oldest turns and goes on; a message too long for
//! the context alone is refused and the session goes on. Model: the random qwen2 checkpoint
//! of `tests/fixtures/families/qwen2` with the ChatML character tokenizer of
//! `tests/fixtures/chat/qwen2_chat`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use kernels_chat::{
    ChatError, ChatSession, ChatSetup, Completion, Decoder, Message, StopWhen, TextTokenizer,
};
use kernels_core::backend::LocalBoxFuture;
use kernels_core::models::llama::{Llama, Sampling};
use kernels_core::{Backend, CpuBackend, DType, DeviceId, Result, Tensor};
use kernels_core::{Direction, Op};

/// The CPU backend, counting the token ids each upload carries (`[batch, seq]` i32 tensors: a
/// prefill's ids).
#[derive(Debug)]
struct Counting {
    inner: CpuBackend,
    ids_uploaded: RefCell<Vec<usize>>,
}

impl Backend for Counting {
    fn name(&self) -> String {
        "counting cpu".into()
    }
    fn device(&self) -> DeviceId {
        self.inner.device()
    }
    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        if t.dtype() == DType::I32 && t.shape().len() == 2 {
            self.ids_uploaded.borrow_mut().push(t.numel());
        }
        self.inner.upload(t)
    }
    fn download<'a>(&'a self, t: &'a Tensor) -> LocalBoxFuture<'a, Result<Tensor>> {
        self.inner.download(t)
    }
    fn run(&self, op: &Op, dir: Direction, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        self.inner.run(op, dir, inputs)
    }
    fn run_donated(&self, op: &Op, donated: Vec<Tensor>, rest: &[&Tensor]) -> Result<Vec<Tensor>> {
        self.inner.run_donated(op, donated, rest)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn zeros(&self, shape: &[usize]) -> Result<Tensor> {
        self.inner.zeros(shape)
    }
}

fn read(p: PathBuf) -> String {
    std::fs::read_to_string(p).unwrap()
}

struct Setup {
    model: Llama,
    backend: Rc<Counting>,
    tok: TextTokenizer,
    chat: Rc<ChatSetup>,
}

fn setup(context: usize) -> Setup {
    let (config, checkpoint) = common::qwen2(context);
    let backend = Rc::new(Counting {
        inner: CpuBackend::new(),
        ids_uploaded: RefCell::new(Vec::new()),
    });
    let model = Llama::for_inference(config, &checkpoint.tensors, backend.clone()).unwrap();
    let tok = common::qwen2_chat_tokenizer();
    let tc = read(common::fixtures().join("chat/qwen2_chat/tokenizer_config.json"));
    let chat = ChatSetup::new("qwen2_chat", Some(&tc), None, None, &[], &tok).unwrap();
    Setup {
        model,
        backend,
        tok,
        chat: Rc::new(chat),
    }
}

fn take_uploads(s: &Setup) -> Vec<usize> {
    std::mem::take(&mut *s.backend.ids_uploaded.borrow_mut())
}

#[test]
fn turn_two_prefills_only_its_own_tokens() {
    let s = setup(512);
    let decoder = Decoder::new(&s.model, Sampling::default(), 0).unwrap();
    let mut session = ChatSession::new(decoder, s.tok.clone(), s.chat.clone(), Some("be brief."));
    let mut turn = |text: &str| {
        let (mut t, report) = session.turn(text, 12, 0).unwrap();
        pollster::block_on(t.run(&mut |_| Ok(()))).unwrap();
        let (_, reply) = t.finish().unwrap();
        (report, reply)
    };
    take_uploads(&s);
    let (r1, reply1) = turn("hello there");
    assert_eq!(
        take_uploads(&s),
        vec![r1.prompt_tokens],
        "turn 1 prefills its whole prompt"
    );
    assert_eq!(r1.reused, 0);
    let (r2, reply2) = turn("what now?");
    // The cache held turn 1's prompt and every reply token but the last (sampled, not fed).
    let cached_after_1 = r1.prompt_tokens + reply1.ids.len() - 1;
    assert_eq!(r2.reused, cached_after_1, "{r1:?} {r2:?}");
    assert_eq!(take_uploads(&s), vec![r2.prompt_tokens - cached_after_1]);
    // Its own tokens: the end of turn 1, the new message and the assistant's header.
    let own = s
        .tok
        .encode_rendered(
            "<|im_end|>\n<|im_start|>user\nwhat now?<|im_end|>\n<|im_start|>assistant\n",
        )
        .unwrap()
        .len();
    assert!(r2.prefill <= own + 1, "{r2:?}, own {own}");
    assert!(r2.prefill < r2.prompt_tokens / 2, "{r2:?}");
    // The reply is the one a fresh cache gives for the whole conversation.
    let messages = vec![
        Message::new("system", "be brief."),
        Message::new("user", "hello there"),
        Message::new("assistant", &reply1.text),
        Message::new("user", "what now?"),
    ];
    let ids = s
        .tok
        .encode_rendered(&s.chat.template.render(&messages, true, 0).unwrap())
        .unwrap();
    assert_eq!(ids.len(), r2.prompt_tokens);
    let mut fresh = Decoder::new(&s.model, Sampling::default(), 0).unwrap();
    let when = StopWhen {
        max_new_tokens: 12,
        stop_ids: s.chat.end_of_turn.clone(),
        ..StopWhen::default()
    };
    let (mut c, _) = Completion::start(&mut fresh, &s.tok, ids, &[], when).unwrap();
    pollster::block_on(c.run(&mut |_| Ok(()))).unwrap();
    assert_eq!(c.new_ids(), &reply2.ids[..]);
    assert_eq!(session.messages().len(), 5);
}

#[test]
fn a_conversation_past_the_context_drops_its_oldest_turns_and_goes_on() {
    let s = setup(160);
    let decoder = Decoder::new(&s.model, Sampling::default(), 0).unwrap();
    let mut session = ChatSession::new(decoder, s.tok.clone(), s.chat.clone(), Some("be brief."));
    let system_len = s
        .tok
        .encode_rendered("<|im_start|>system\nbe brief.<|im_end|>\n<|im_start|>user\n")
        .unwrap()
        .len();
    let mut dropped_at = None;
    for i in 0..8 {
        let text = format!("message number {i}, which is quite a long one.");
        let (mut t, report) = session.turn(&text, 8, 0).unwrap();
        assert!(report.prompt_tokens + 8 <= 160, "{report:?}");
        if report.dropped_messages > 0 {
            // Recomputed from the first changed token: the system message's stays cached.
            assert!(report.reused >= system_len - 1, "{report:?}");
            assert!(report.reused < report.prompt_tokens, "{report:?}");
            dropped_at.get_or_insert(i);
        }
        pollster::block_on(t.run(&mut |_| Ok(()))).unwrap();
        t.finish().unwrap();
        assert_eq!(session.messages()[0], Message::new("system", "be brief."));
        assert_eq!(
            session.messages().last().map(|m| m.role.as_str()),
            Some("assistant")
        );
    }
    assert!(dropped_at.is_some(), "never outgrew the context");
    assert!(session.messages().len() < 1 + 2 * 8);
}

#[test]
fn a_message_longer_than_the_context_is_refused_and_the_session_goes_on() {
    let s = setup(64);
    let decoder = Decoder::new(&s.model, Sampling::default(), 0).unwrap();
    let mut session = ChatSession::new(decoder, s.tok.clone(), s.chat.clone(), Some("hi."));
    let long = "a".repeat(100);
    match session.turn(&long, 8, 0) {
        Err(ChatError::TooLong { tokens, context }) => assert!(tokens > context),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted a message over the context"),
    }
    assert_eq!(session.messages().len(), 1);
    let (mut t, _) = session.turn("ok?", 4, 0).unwrap();
    pollster::block_on(t.run(&mut |_| Ok(()))).unwrap();
    t.finish().unwrap();
    assert_eq!(session.messages().len(), 3);
}

#[test]
fn a_template_that_loops_for_ever_runs_out_of_fuel_and_names_the_template() {
    let looping = r#"{"chat_template": "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"}"#;
    let t = kernels_chat::ChatTemplate::from_files("models/looping", Some(looping), None).unwrap();
    let e = t
        .render(&[Message::new("user", "hi")], true, 0)
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ChatError::Template { .. }), "{e:?}");
    assert!(
        msg.contains("models/looping") && msg.contains("chat template"),
        "{msg}"
    );
    assert!(msg.contains("more work than the limit"), "{msg}");
}
