//! The GGUF reader (`kernels_core::gguf`) on arbitrary bytes: never a panic, an out-of-bounds
//! read or an allocation the input's size does not allow; what it accepts rewrites (with the
//! writer) to a file that parses and rewrites to the same bytes; the llama mapping and the
//! tokenizer.json builder return errors, never panic.
#![no_main]

use kernels_core::gguf::{GgufFile, GgufWriter, llama, tokenizer};
use libfuzzer_sys::fuzz_target;

fn rewrite(g: &GgufFile<'_>) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in &g.metadata {
        w.add_metadata(k, v.clone()).expect("parsed metadata is writable");
    }
    for t in &g.tensors {
        let data = g.tensor_data(t);
        assert_eq!(data.len() as u64, t.byte_size, "tensor `{}`", t.name);
        w.add_tensor(&t.name, &t.shape(), t.ggml_type, data.to_vec())
            .expect("a parsed tensor is writable");
    }
    w.to_bytes().expect("writes")
}

fuzz_target!(|data: &[u8]| {
    let Ok(g) = GgufFile::parse(data, "fuzz.gguf") else {
        return;
    };
    let once = rewrite(&g);
    let again = GgufFile::parse(&once, "rewritten.gguf").expect("a rewritten file parses");
    assert_eq!(rewrite(&again), once, "rewriting is not idempotent");
    let _ = llama::load_llama(&g);
    let _ = tokenizer::tokenizer_json(&g);
});
