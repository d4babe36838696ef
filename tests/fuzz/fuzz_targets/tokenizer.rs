//! The tokenizer loading path of `kernels generate` / `kernels logits` and of the web page:
//! `tokenizer_from_bytes` (native-cli/src/tokenizer_json.rs, included here as it is there) on
//! arbitrary bytes, then encoding and decoding, must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../../native-cli/src/tokenizer_json.rs"]
mod tokenizer_json;

fuzz_target!(|data: &[u8]| {
    let Ok(tok) = tokenizer_json::tokenizer_from_bytes(data) else {
        return;
    };
    for text in ["", "12+34=", "Hello, world! \u{e9}\u{1F600}", "  a  b\n"] {
        if let Ok(enc) = tok.encode(text, false) {
            let _ = tok.decode(enc.get_ids(), false);
        }
    }
    let _ = tok.decode(&[0, 1, 2, u32::MAX], false);
});
