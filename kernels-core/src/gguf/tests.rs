//! The reader against the writer, and against every kind of malformed file: each built by
//! mutating a good one.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::*;

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A small file with every value type, a nested array and three tensors.
fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    let meta: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::from("llama")),
        ("u8", Value::U8(200)),
        ("i8", Value::I8(-3)),
        ("u16", Value::U16(60000)),
        ("i16", Value::I16(-30000)),
        ("u32", Value::U32(4_000_000_000)),
        ("i32", Value::I32(-2_000_000_000)),
        ("f32", Value::F32(1.5)),
        ("bool", Value::Bool(true)),
        ("u64", Value::U64(u64::MAX)),
        ("i64", Value::I64(i64::MIN)),
        ("f64", Value::F64(-2.25)),
        ("utf8", Value::from("héllo ▁")),
        (
            "nested",
            Value::Array(
                ValueType::Array,
                vec![
                    Value::Array(ValueType::I32, vec![Value::I32(1), Value::I32(-2)]),
                    Value::Array(ValueType::String, vec![Value::from("a"), Value::from("")]),
                    Value::Array(ValueType::F32, vec![]),
                ],
            ),
        ),
    ];
    for (k, v) in meta {
        w.add_metadata(k, v).unwrap();
    }
    w.add_tensor(
        "a.weight",
        &[2, 3],
        GgmlType::F32,
        f32_bytes(&[1., 2., 3., 4., 5., 6.]),
    )
    .unwrap();
    w.add_tensor("b", &[5], GgmlType::F16, vec![7u8; 10])
        .unwrap();
    w.add_tensor(
        "q",
        &[2, 64],
        GgmlType::Q8_0,
        (0..136).map(|i| i as u8).collect(),
    )
    .unwrap();
    w
}

fn sample() -> Vec<u8> {
    sample_writer().to_bytes().unwrap()
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
}

fn err(bytes: &[u8]) -> String {
    match GgufFile::parse(bytes, "m.gguf") {
        Ok(_) => panic!("parsed"),
        Err(e) => {
            assert!(
                matches!(e, Error::BadModelFile { ref path, .. } if path == "m.gguf"),
                "{e}"
            );
            e.to_string()
        }
    }
}

/// Where the u64 offset of tensor `name` lies (after its name, dims and type).
fn offset_field(bytes: &[u8], name: &str, n_dims: usize) -> usize {
    let mut at = find(bytes, name.as_bytes()) + name.len();
    at += 4 + 8 * n_dims + 4;
    at
}

#[test]
fn round_trip_keeps_metadata_tensors_and_bytes() {
    let w = sample_writer();
    let bytes = w.to_bytes().unwrap();
    let g = GgufFile::parse(&bytes, "m.gguf").unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.alignment, 32);
    assert_eq!(g.data_offset % 32, 0);
    assert_eq!(g.metadata, w.metadata);
    assert_eq!(g.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(g.get_usize("u32").unwrap(), 4_000_000_000);
    assert!(g.get_usize("i8").is_err());
    assert_eq!(g.get_f32_opt("f64").unwrap(), Some(-2.25));
    assert!(
        g.get_str("missing")
            .unwrap_err()
            .to_string()
            .contains("`missing`")
    );
    let names: Vec<&str> = g.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a.weight", "b", "q"]);
    let a = g.tensor("a.weight").unwrap();
    assert_eq!((a.dims.clone(), a.shape()), (vec![3, 2], vec![2, 3]));
    assert_eq!(g.tensor_data(a), &f32_bytes(&[1., 2., 3., 4., 5., 6.])[..]);
    let q = g.tensor("q").unwrap();
    assert_eq!(
        (q.ggml_type, q.byte_size, q.offset % 32),
        (GgmlType::Q8_0, 136, 0)
    );
    assert_eq!(
        g.tensor_data(q),
        &(0..136).map(|i| i as u8).collect::<Vec<_>>()[..]
    );
    assert_eq!(g.tensor_data(g.tensor("b").unwrap()), &[7u8; 10]);
}

#[test]
fn alignment_is_honoured() {
    let mut w = sample_writer();
    w.add_metadata("general.alignment", Value::U32(64)).unwrap();
    let bytes = w.to_bytes().unwrap();
    let g = GgufFile::parse(&bytes, "m.gguf").unwrap();
    assert_eq!(g.alignment, 64);
    assert_eq!(g.data_offset % 64, 0);
    for t in &g.tensors {
        assert_eq!(t.offset % 64, 0);
    }
    assert_eq!(g.tensor_data(g.tensor("b").unwrap()), &[7u8; 10]);
    assert!(w.add_metadata("general.alignment", Value::U32(64)).is_err());
    let mut w = GgufWriter::new();
    assert!(w.add_metadata("general.alignment", Value::U32(48)).is_err());
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample();
    for n in 0..bytes.len() {
        // The last tensor's padding is not data: cutting it loses nothing.
        let last = GgufFile::parse(&bytes, "m.gguf").unwrap();
        let q = last.tensor("q").unwrap();
        let end = last.data_offset + q.offset as usize + q.byte_size as usize;
        if n >= end {
            assert!(GgufFile::parse(&bytes[..n], "m.gguf").is_ok());
            continue;
        }
        let e = err(&bytes[..n]);
        assert!(
            e.contains("truncated") || e.contains("cannot fit") || e.contains("runs past"),
            "prefix {n}: {e}"
        );
    }
}

#[test]
fn random_corruption_never_panics() {
    let bytes = sample();
    let mut rng = crate::rng::Rng::new(11);
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..1 + (rng.uniform() * 4.0) as usize {
            let at = (rng.uniform() * b.len() as f32) as usize % b.len();
            b[at] = (rng.uniform() * 256.0) as u8;
        }
        let _ = GgufFile::parse(&b, "m.gguf");
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut b = sample();
    b[0] = b'X';
    assert!(err(&b).contains("not a GGUF file"));
    let mut b = sample();
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(err(&b).contains("version 1"));
    b[4..8].copy_from_slice(&4u32.to_le_bytes());
    assert!(err(&b).contains("unsupported GGUF version 4"));
    b[4..8].copy_from_slice(&2u32.to_le_bytes());
    assert!(GgufFile::parse(&b, "m.gguf").is_ok());
}

#[test]
fn huge_counts_are_refused_before_allocating() {
    let good = sample();
    let mut b = good.clone();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(err(&b).contains("tensor count"), "{}", err(&b));
    let mut b = good.clone();
    b[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(err(&b).contains("metadata key/value count"));
    // The first key's length.
    let mut b = good.clone();
    b[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(err(&b).contains("metadata key 0's length"), "{}", err(&b));
    // The element count of `nested`.
    let mut b = good.clone();
    let at = find(&b, b"nested") + 6 + 4 + 4;
    b[at..at + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    assert!(err(&b).contains("`nested`'s element count"), "{}", err(&b));
}

#[test]
fn bad_values_are_named() {
    let good = sample();
    // A key that is not UTF-8.
    let mut b = good.clone();
    let at = find(&b, b"utf8");
    b[at] = 0xff;
    assert!(err(&b).contains("not UTF-8"));
    // A value type that does not exist.
    let mut b = good.clone();
    let at = find(&b, b"bool") + 4;
    b[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    assert!(
        err(&b).contains("metadata `bool`: unknown value type 99"),
        "{}",
        err(&b)
    );
    // A bool that is neither 0 nor 1.
    let mut b = good.clone();
    b[at + 4] = 2;
    assert!(err(&b).contains("bool byte 2"));
    // A duplicate key: rename `u16` to `u32`... the second one wins the name.
    let mut b = good.clone();
    let at = find(&b, b"u16");
    b[at..at + 3].copy_from_slice(b"i16");
    assert!(err(&b).contains("`i16` appears twice"));
}

#[test]
fn nesting_is_bounded() {
    let mut v = Value::Array(ValueType::U8, vec![]);
    for _ in 0..20 {
        v = Value::Array(ValueType::Array, vec![v]);
    }
    let mut w = GgufWriter::new();
    w.add_metadata("deep", v).unwrap();
    assert!(err(&w.to_bytes().unwrap()).contains("nested deeper"));
}

#[test]
fn bad_tensor_infos_are_named() {
    let good = sample();
    let named = |e: &str, what: &str| assert!(e.contains(what), "{e}");
    // Unknown type id.
    let mut b = good.clone();
    let at = offset_field(&b, "a.weight", 2) - 4;
    b[at..at + 4].copy_from_slice(&4u32.to_le_bytes());
    named(&err(&b), "tensor `a.weight`: unknown ggml type id 4");
    // Q8_0 with an innermost dimension of 3.
    b[at..at + 4].copy_from_slice(&8u32.to_le_bytes());
    named(&err(&b), "not a multiple of Q8_0's block size 32");
    // Dimensions whose product overflows.
    let mut b = good.clone();
    let at = find(&b, b"a.weight") + 8 + 4;
    b[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    b[at + 8..at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    named(&err(&b), "overflow");
    // Too many dimensions.
    let mut b = good.clone();
    let at = find(&b, b"a.weight") + 8;
    b[at..at + 4].copy_from_slice(&5u32.to_le_bytes());
    named(&err(&b), "5 dimensions");
    b[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
    named(&err(&b), "0 dimensions");
    // Duplicate names.
    let mut b = good.clone();
    let at = find(&b, b"\x01\0\0\0\0\0\0\0q") + 8;
    b[at] = b'b';
    named(&err(&b), "tensor `b` appears twice");
}

#[test]
fn bad_offsets_are_named() {
    let good = sample();
    let g = GgufFile::parse(&good, "m.gguf").unwrap();
    let q_offset = g.tensor("q").unwrap().offset;
    let at = offset_field(&good, "q", 2);
    let with_offset = |off: u64| {
        let mut b = good.clone();
        b[at..at + 8].copy_from_slice(&off.to_le_bytes());
        err(&b)
    };
    let e = with_offset(q_offset + 32);
    assert!(
        e.contains("tensor `q`: offset") && e.contains("runs past the end of the file"),
        "{e}"
    );
    assert!(with_offset(u64::MAX - 31).contains("runs past"));
    assert!(with_offset(q_offset + 1).contains("not a multiple of the alignment 32"));
    assert!(with_offset(0).contains("overlap"));
}

#[test]
fn writer_refuses_inconsistent_tensors() {
    let mut w = GgufWriter::new();
    assert!(w.add_tensor("t", &[3], GgmlType::F32, vec![0; 8]).is_err());
    assert!(
        w.add_tensor("t", &[33], GgmlType::Q8_0, vec![0; 34])
            .is_err()
    );
    assert!(
        w.add_tensor("t", &[1, 1, 1, 1, 1], GgmlType::F32, vec![0; 4])
            .is_err()
    );
    w.add_tensor("t", &[1], GgmlType::F32, vec![0; 4]).unwrap();
    assert!(w.add_tensor("t", &[1], GgmlType::F32, vec![0; 4]).is_err());
    let bad_array = Value::Array(ValueType::U8, vec![Value::I8(1)]);
    assert!(w.add_metadata("a", bad_array).is_err());
    assert_eq!("x".to_string(), "x");
}

/// convert_hf_to_gguf.py's `LlamaModel.permute` on rows: the file's row `h * d + 2 * i + j`
/// holds the model's row `h * d + j * d / 2 + i`.
fn llama_cpp_permute(rows: &[Vec<f32>], n_head: usize) -> Vec<Vec<f32>> {
    let d = rows.len() / n_head;
    let mut out = rows.to_vec();
    for h in 0..n_head {
        for i in 0..d / 2 {
            for j in 0..2 {
                out[h * d + 2 * i + j] = rows[h * d + j * d / 2 + i].clone();
            }
        }
    }
    out
}

#[test]
fn unpermute_undoes_the_converters_permutation() {
    let (rows, cols, n_head) = (12, 3, 3);
    let model: Vec<Vec<f32>> = (0..rows)
        .map(|r| (0..cols).map(|c| (r * cols + c) as f32).collect())
        .collect();
    let file_rows = llama_cpp_permute(&model, n_head);
    assert_ne!(file_rows, model);
    let bytes: Vec<u8> = file_rows.iter().flat_map(|r| f32_bytes(r)).collect();
    let back = llama::unpermute_rows(&bytes, rows, n_head, "t").unwrap();
    let want: Vec<u8> = model.iter().flat_map(|r| f32_bytes(r)).collect();
    assert_eq!(back, want);
    // Whole rows move, whatever a row holds (quantized blocks): 34-byte rows.
    let raw: Vec<u8> = (0..4 * 34).map(|i| i as u8).collect();
    let once = llama::unpermute_rows(&raw, 4, 1, "t").unwrap();
    assert_eq!(&once[34..68], &raw[68..102]);
    assert!(llama::unpermute_rows(&raw, 4, 3, "t").is_err());
    assert!(llama::unpermute_rows(&raw[1..], 4, 1, "t").is_err());
    assert!(llama::unpermute_rows(&raw, 4, 0, "t").is_err());
}

#[test]
fn tensor_names_map_to_hugging_face() {
    let cases = [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
        (
            "blk.0.attn_q.weight",
            "model.layers.0.self_attn.q_proj.weight",
        ),
        (
            "blk.11.attn_k.bias",
            "model.layers.11.self_attn.k_proj.bias",
        ),
        (
            "blk.2.attn_output.weight",
            "model.layers.2.self_attn.o_proj.weight",
        ),
        (
            "blk.3.ffn_gate.weight",
            "model.layers.3.mlp.gate_proj.weight",
        ),
        (
            "blk.3.ffn_down.weight",
            "model.layers.3.mlp.down_proj.weight",
        ),
        (
            "blk.3.attn_norm.weight",
            "model.layers.3.input_layernorm.weight",
        ),
        (
            "blk.3.ffn_norm.weight",
            "model.layers.3.post_attention_layernorm.weight",
        ),
        (
            "blk.1.attn_q_norm.weight",
            "model.layers.1.self_attn.q_norm.weight",
        ),
    ];
    for (g, hf) in cases {
        assert_eq!(llama::hf_tensor_name(g).as_deref(), Some(hf), "{g}");
    }
    for bad in [
        "blk.x.attn_q.weight",
        "blk..attn_q.weight",
        "blk.0.attn_q.scale",
        "rope_freqs.weight",
        "blk.0",
    ] {
        assert_eq!(llama::hf_tensor_name(bad), None, "{bad}");
    }
}

/// A llama file's metadata (sizes of the tiny fixture) and F32 tensors of the right shapes.
fn llama_writer(arch: &str, tied: bool) -> GgufWriter {
    let mut w = GgufWriter::new();
    let k = |s: &str| alloc::format!("{arch}.{s}");
    w.add_metadata("general.architecture", Value::from(arch))
        .unwrap();
    for (key, v) in [
        ("block_count", 1u32),
        ("embedding_length", 8),
        ("feed_forward_length", 12),
        ("attention.head_count", 2),
        ("attention.head_count_kv", 1),
        ("context_length", 16),
    ] {
        w.add_metadata(&k(key), Value::U32(v)).unwrap();
    }
    w.add_metadata(&k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6))
        .unwrap();
    w.add_metadata(&k("rope.freq_base"), Value::F32(5e5))
        .unwrap();
    let tokens: Vec<Value> = (0..5)
        .map(|i| Value::from(alloc::format!("t{i}").as_str()))
        .collect();
    w.add_metadata(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, tokens),
    )
    .unwrap();
    w.add_metadata("tokenizer.ggml.bos_token_id", Value::U32(1))
        .unwrap();
    w.add_metadata("tokenizer.ggml.eos_token_id", Value::U32(2))
        .unwrap();
    let mut add = |name: &str, shape: &[usize]| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
        w.add_tensor(name, shape, GgmlType::F32, f32_bytes(&v))
            .unwrap();
    };
    add("token_embd.weight", &[5, 8]);
    add("output_norm.weight", &[8]);
    if !tied {
        add("output.weight", &[5, 8]);
    }
    add("blk.0.attn_norm.weight", &[8]);
    add("blk.0.ffn_norm.weight", &[8]);
    add("blk.0.attn_q.weight", &[8, 8]);
    add("blk.0.attn_k.weight", &[4, 8]);
    add("blk.0.attn_v.weight", &[4, 8]);
    add("blk.0.attn_output.weight", &[8, 8]);
    add("blk.0.ffn_gate.weight", &[12, 8]);
    add("blk.0.ffn_up.weight", &[12, 8]);
    add("blk.0.ffn_down.weight", &[8, 12]);
    w
}

#[test]
fn llama_metadata_becomes_the_config() {
    let bytes = llama_writer("llama", true).to_bytes().unwrap();
    let g = GgufFile::parse(&bytes, "m.gguf").unwrap();
    let c = llama::config_from_gguf(&g).unwrap();
    assert_eq!(
        (c.hidden_size, c.intermediate_size, c.num_hidden_layers),
        (8, 12, 1)
    );
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (2, 1, 4)
    );
    assert_eq!((c.vocab_size, c.max_position_embeddings), (5, 16));
    assert_eq!((c.rms_norm_eps, c.rope_theta), (1e-6, 5e5));
    assert_eq!(
        (c.bos_token_id, c.eos_token_ids.clone()),
        (Some(1), vec![2])
    );
    assert!(c.tie_word_embeddings);
    let m = llama::load_llama(&g).unwrap();
    let names: Vec<&String> = m.tensors.keys().collect();
    assert!(
        names
            .iter()
            .any(|n| *n == "model.layers.0.self_attn.k_proj.weight")
    );
    assert_eq!(
        m.tensors["model.layers.0.mlp.down_proj.weight"].shape(),
        &[8, 12]
    );
    let model = crate::models::llama::Llama::from_tensors(
        m.config,
        &m.tensors,
        alloc::rc::Rc::new(crate::CpuBackend::new()),
    );
    assert!(model.is_ok(), "{:?}", model.err());
    let untied = llama_writer("llama", false).to_bytes().unwrap();
    let g = GgufFile::parse(&untied, "m.gguf").unwrap();
    assert!(!llama::config_from_gguf(&g).unwrap().tie_word_embeddings);
}

#[test]
fn unsupported_architectures_and_types_are_named() {
    let bytes = llama_writer("gpt2", true).to_bytes().unwrap();
    let g = GgufFile::parse(&bytes, "m.gguf").unwrap();
    let e = llama::config_from_gguf(&g).unwrap_err().to_string();
    assert!(
        e.contains("m.gguf") && e.contains("architecture `gpt2` not supported"),
        "{e}"
    );
    assert!(e.contains("`llama`, `qwen2`, `qwen3`"), "{e}");
    let mut w = llama_writer("llama", true);
    w.add_metadata("llama.rope.scaling.type", Value::from("longrope"))
        .unwrap();
    let bytes = w.to_bytes().unwrap();
    let e = llama::config_from_gguf(&GgufFile::parse(&bytes, "m.gguf").unwrap()).unwrap_err();
    assert!(
        e.to_string()
            .contains("`llama.rope.scaling.type` = `longrope`"),
        "{e}"
    );
    // F16 keeps its bytes; a type that does not load names the ones that do.
    let info = TensorInfo {
        name: "w".into(),
        dims: vec![4],
        ggml_type: GgmlType::F16,
        offset: 0,
        byte_size: 8,
    };
    let t = llama::tensor_from_gguf(&info, &[0; 8]).unwrap();
    assert_eq!((t.dtype(), t.shape()), (crate::DType::F16, &[4usize][..]));
    let info = TensorInfo {
        name: "w".into(),
        dims: vec![256],
        ggml_type: GgmlType::Q2_K,
        offset: 0,
        byte_size: 84,
    };
    let e = llama::tensor_from_gguf(&info, &[0; 84])
        .unwrap_err()
        .to_string();
    assert!(e.contains("Q2_K") && e.contains("Q4_K and Q6_K"), "{e}");
}

#[test]
fn missing_metadata_is_named() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::from("llama"))
        .unwrap();
    let bytes = w.to_bytes().unwrap();
    let e = llama::config_from_gguf(&GgufFile::parse(&bytes, "m.gguf").unwrap()).unwrap_err();
    assert!(
        e.to_string()
            .contains("metadata `llama.embedding_length` is missing"),
        "{e}"
    );
}

#[test]
fn a_model_written_as_gguf_reads_back_the_same() {
    let bytes = llama_writer("llama", false).to_bytes().unwrap();
    let first = llama::load_llama(&GgufFile::parse(&bytes, "m.gguf").unwrap()).unwrap();
    let written = llama::llama_to_gguf(&first.config, &first.tensors)
        .unwrap()
        .to_bytes()
        .unwrap();
    let g = GgufFile::parse(&written, "w.gguf").unwrap();
    let back = llama::load_llama(&g).unwrap();
    assert_eq!(back.config, first.config);
    assert_eq!(back.tensors.len(), first.tensors.len());
    for (name, t) in &first.tensors {
        assert_eq!(
            back.tensors[name].to_f32_vec().unwrap(),
            t.to_f32_vec().unwrap(),
            "{name}"
        );
    }
    // The file holds the q rows permuted as llama.cpp's converter permutes them.
    let q = g.tensor("blk.0.attn_q.weight").unwrap();
    let hf = &first.tensors["model.layers.0.self_attn.q_proj.weight"];
    let rows: Vec<Vec<f32>> = hf
        .to_f32_vec()
        .unwrap()
        .chunks(8)
        .map(<[f32]>::to_vec)
        .collect();
    let want: Vec<u8> = llama_cpp_permute(&rows, 2)
        .iter()
        .flat_map(|r| f32_bytes(r))
        .collect();
    assert_eq!(g.tensor_data(q), &want[..]);
    for (g_name, hf_name) in [
        ("blk.7.ffn_up.weight", "model.layers.7.mlp.up_proj.weight"),
        ("output.weight", "lm_head.weight"),
    ] {
        assert_eq!(llama::gguf_tensor_name(hf_name).as_deref(), Some(g_name));
    }
    assert_eq!(
        llama::gguf_tensor_name("model.layers.0.mlp.gate_up_proj.weight"),
        None
    );
    // A config GGUF metadata cannot express is refused.
    let mut c = first.config.clone();
    c.variant.sliding_window = Some(4);
    assert!(llama::llama_to_gguf(&c, &first.tensors).is_err());
}

#[test]
fn rope_factors_that_match_no_llama3_scaling_are_refused() {
    let mut w = llama_writer("llama", true);
    w.add_tensor(
        "rope_freqs.weight",
        &[2],
        GgmlType::F32,
        f32_bytes(&[3.0, 1.0]),
    )
    .unwrap();
    let bytes = w.to_bytes().unwrap();
    let e = llama::config_from_gguf(&GgufFile::parse(&bytes, "m.gguf").unwrap()).unwrap_err();
    assert!(
        e.to_string().contains("match no llama 3 rope scaling"),
        "{e}"
    );
    let mut w = llama_writer("llama", true);
    w.add_tensor(
        "rope_freqs.weight",
        &[3],
        GgmlType::F32,
        f32_bytes(&[1.0; 3]),
    )
    .unwrap();
    let bytes = w.to_bytes().unwrap();
    let e = llama::config_from_gguf(&GgufFile::parse(&bytes, "m.gguf").unwrap()).unwrap_err();
    assert!(e.to_string().contains("expected F32 [2]"), "{e}");
}
