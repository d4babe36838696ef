//! Loading a `tokenizer.json`, the one way: the `kernels` tool (`llama::read_dir`,
//! `llama::from_bytes`), the web page (`web/src/llm.rs` includes this file) and the fuzz target
//! `tokenizer` (`tests/fuzz`, which includes it too) all call [`tokenizer_from_bytes`].

use tokenizers::Tokenizer;

/// Parses the bytes of a `tokenizer.json`. Their JSON syntax is checked first: tokenizers 0.22
/// panics on some malformed JSON instead of returning an error (`expect("Helper")` in its decoder
/// deserializer; found by the fuzz target). Natively a panic of the crate on a file it should
/// have refused becomes an error as well (in the browser a panic aborts, so the check above is
/// what keeps the page alive).
pub fn tokenizer_from_bytes(bytes: &[u8]) -> Result<Tokenizer, String> {
    serde_json::from_slice::<serde_json::Value>(bytes).map_err(|e| format!("not JSON: {e}"))?;
    match std::panic::catch_unwind(|| Tokenizer::from_bytes(bytes)) {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the tokenizers crate panicked reading it".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A syntax error inside `decoder` (the fuzz target's first crash, minimized): tokenizers
    /// panics on it; the loader says what is wrong.
    const BAD_DECODER: &[u8] = br#"{"decoder": {"type": "ByteLevel", "add_prefix_space": fas}}"#;

    #[test]
    #[cfg(not(target_arch = "wasm32"))]
    fn the_crate_itself_panics_on_a_syntax_error_in_the_decoder() {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = std::panic::catch_unwind(|| Tokenizer::from_bytes(BAD_DECODER).is_err());
        std::panic::set_hook(hook);
        assert!(
            r.is_err(),
            "tokenizers no longer panics: the JSON pre-check may go"
        );
    }

    #[test]
    fn a_syntax_error_is_an_error_not_a_panic() {
        let e = tokenizer_from_bytes(BAD_DECODER).err().unwrap_or_default();
        assert!(e.contains("not JSON") && e.contains("line 1"), "{e}");
        assert!(tokenizer_from_bytes(b"").is_err());
        assert!(tokenizer_from_bytes(b"{}").is_err());
    }

    #[test]
    fn a_good_file_loads() {
        let json = br#"{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
            "decoder": null, "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hi": 1},
            "unk_token": "[UNK]"}}"#;
        let t = tokenizer_from_bytes(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            t.encode("hi", false).map(|e| e.get_ids().to_vec()).ok(),
            Some(vec![1])
        );
    }
}
