//! The chat templates of Qwen2.5, Llama 3.2 and Gemma 3 render exactly what transformers'
//! `apply_chat_template` rendered for the same conversations
//! (`tests/fixtures/chat/make_fixtures.py`, strftime_now fixed), errors included; so does a
//! template of `tojson` calls (Python's `json.dumps`) and dict iteration.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_chat::{ChatError, ChatTemplate, Message, generation_config_eos};
use serde_json::Value;

const RENDERED: &str = include_str!("../../../tests/fixtures/chat/templates/rendered.json");

fn config(name: &str) -> &'static str {
    match name {
        "qwen2_5" => {
            include_str!("../../../tests/fixtures/chat/templates/qwen2_5/tokenizer_config.json")
        }
        "llama3_2" => {
            include_str!("../../../tests/fixtures/chat/templates/llama3_2/tokenizer_config.json")
        }
        "gemma3" => {
            include_str!("../../../tests/fixtures/chat/templates/gemma3/tokenizer_config.json")
        }
        "tojson" => {
            include_str!("../../../tests/fixtures/chat/templates/tojson/tokenizer_config.json")
        }
        other => panic!("no fixture {other}"),
    }
}

fn messages(v: &Value) -> Vec<Message> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

#[test]
fn templates_render_what_transformers_renders() {
    let cases: Vec<Value> = serde_json::from_str(RENDERED).unwrap();
    let mut checked = std::collections::BTreeMap::<String, usize>::new();
    for case in &cases {
        let name = case["template"].as_str().unwrap();
        let t = ChatTemplate::from_files(name, Some(config(name)), None).unwrap();
        let got = t.render(
            &messages(&case["messages"]),
            case["add_generation_prompt"].as_bool().unwrap(),
            case["now"].as_i64().unwrap(),
        );
        match (&case["rendered"], &case["error"]) {
            (Value::String(want), _) => assert_eq!(got.unwrap(), *want, "{name}: {case}"),
            (_, Value::String(why)) => {
                let e = got.unwrap_err();
                assert!(matches!(e, ChatError::Template { .. }), "{e:?}");
                assert!(e.to_string().contains(why.as_str()), "{name}: {e}");
            }
            _ => panic!("bad fixture {case}"),
        }
        *checked.entry(name.into()).or_default() += 1;
    }
    assert_eq!(checked.len(), 4, "{checked:?}");
    assert!(checked.values().all(|&n| n >= 6), "{checked:?}");
}

#[test]
fn the_jinja_file_wins_and_a_list_gives_its_default() {
    let cfg = r#"{"chat_template": "config", "eos_token": {"content": "</s>", "lstrip": false}}"#;
    let t = ChatTemplate::from_files("m", Some(cfg), Some("jinja {{ eos_token }}")).unwrap();
    assert_eq!(t.render(&[], true, 0).unwrap(), "jinja </s>");
    let listed = r#"{"chat_template": [{"name": "tool_use", "template": "tools"},
                                        {"name": "default", "template": "{{ messages[0].content | upper }}"}]}"#;
    let t = ChatTemplate::from_files("m", Some(listed), None).unwrap();
    assert_eq!(
        t.render(&[Message::new("user", "hi")], true, 0).unwrap(),
        "HI"
    );
    let no_default = r#"{"chat_template": [{"name": "tool_use", "template": "tools"}]}"#;
    let e = ChatTemplate::from_files("m", Some(no_default), None).unwrap_err();
    assert!(e.to_string().contains("tool_use"), "{e}");
}

#[test]
fn python_methods_and_loop_controls_work() {
    let src = "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}\
               [{{ m.content.strip().split(',') | join('|') }}]{% endfor %}";
    let t = ChatTemplate::from_files("m", None, Some(src)).unwrap();
    let msgs = [" a,b ", "c", "d"].map(|c| Message::new("user", c));
    assert_eq!(t.render(&msgs, true, 0).unwrap(), "[a|b][c]");
}

#[test]
fn missing_or_broken_templates_are_named() {
    let e =
        ChatTemplate::from_files("base-model", Some(r#"{"eos_token": "</s>"}"#), None).unwrap_err();
    assert_eq!(
        e,
        ChatError::NoTemplate {
            origin: "base-model".into()
        }
    );
    assert!(e.to_string().contains("no chat template"), "{e}");
    let e = ChatTemplate::from_files("m", None, None).unwrap_err();
    assert!(matches!(e, ChatError::NoTemplate { .. }));
    let e = ChatTemplate::from_files("m", Some("[1, 2]"), None).unwrap_err();
    assert!(e.to_string().contains("m/tokenizer_config.json"), "{e}");
    let e = ChatTemplate::from_files("m", Some(r#"{"chat_template": 3}"#), None).unwrap_err();
    assert!(e.to_string().contains("neither a string"), "{e}");
    let e = ChatTemplate::from_files("m", None, Some("{% if %}")).unwrap_err();
    assert!(matches!(e, ChatError::Template { .. }), "{e:?}");
    let t = ChatTemplate::from_files("m", None, Some("{{ raise_exception('no way') }}")).unwrap();
    let e = t.render(&[], true, 0).unwrap_err();
    assert!(e.to_string().contains("no way"), "{e}");
}

#[test]
fn end_of_turn_ids_join_eos_and_known_markers() {
    let t = ChatTemplate::from_files("m", Some(config("qwen2_5")), None).unwrap();
    assert_eq!(t.special_token("eos_token"), Some("<|im_end|>"));
    assert_eq!(t.special_token("bos_token"), None);
    let vocab = |s: &str| match s {
        "<|im_end|>" => Some(7),
        "<|endoftext|>" => Some(3),
        "<end_of_turn>" => Some(9),
        _ => None,
    };
    assert_eq!(t.end_of_turn_ids(&[3, 40], &vocab), vec![3, 7, 9, 40]);
    assert_eq!(t.end_of_turn_ids(&[], &|_| None), Vec::<u32>::new());
    assert_eq!(
        generation_config_eos("g", r#"{"eos_token_id": [1, 106]}"#).unwrap(),
        vec![1, 106]
    );
    assert_eq!(
        generation_config_eos("g", r#"{"eos_token_id": 2}"#).unwrap(),
        vec![2]
    );
    assert_eq!(
        generation_config_eos("g", r#"{}"#).unwrap(),
        Vec::<u32>::new()
    );
    let e = generation_config_eos("g", r#"{"eos_token_id": -1}"#).unwrap_err();
    assert!(e.to_string().contains("not a token id"), "{e}");
}
