//! GGUF files written by gguf-py (`tests/fixtures/gguf/make_fixtures.py`): kernels-core's reader
//! gets their metadata and tensor bytes, the tokenizers built from their `tokenizer.ggml.*`
//! encode as the script's references do (llama.cpp's SentencePiece algorithm, Python
//! `tokenizers`), and a tiny llama written as llama.cpp's converter writes it (q/k rows
//! permuted) gives the same logits as its safetensors form and as transformers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::rc::Rc;

use kernels_core::gguf::{GgmlType, GgufFile, GgufWriter, Value, llama, tokenizer};
use kernels_core::{Backend, CpuBackend};
use kernels_tests::golden::{assert_close, read_golden};
use native_cli::llama::{build, logits, read_dir};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixture("gguf").join(name)).unwrap()
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_slice(&read(name)).unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn the_reader_reads_what_gguf_py_wrote() {
    let bytes = read("basic.gguf");
    let g = GgufFile::parse(&bytes, "basic.gguf").unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.get_str("general.architecture").unwrap(), "llama");
    let v = |k: &str| g.get(k).unwrap().clone();
    assert_eq!(v("t.u8"), Value::U8(200));
    assert_eq!(v("t.i8"), Value::I8(-3));
    assert_eq!(v("t.u16"), Value::U16(60000));
    assert_eq!(v("t.i16"), Value::I16(-30000));
    assert_eq!(v("t.u32"), Value::U32(4_000_000_000));
    assert_eq!(v("t.i32"), Value::I32(-2_000_000_000));
    assert_eq!(v("t.f32"), Value::F32(1.5));
    assert_eq!(v("t.bool"), Value::Bool(true));
    assert_eq!(v("t.u64"), Value::U64(u64::MAX));
    assert_eq!(v("t.i64"), Value::I64(i64::MIN));
    assert_eq!(v("t.f64"), Value::F64(-2.25));
    assert_eq!(g.get_str("t.string").unwrap(), "héllo ▁wörld");
    let strings: Vec<&str> = g
        .get("t.strings")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(strings, ["a", "", "ü"]);
    let nested: Vec<Vec<i64>> = g
        .get("t.nested")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(nested, [vec![1, 2], vec![3]]);
    let want = json("basic.json");
    let tensors = want["tensors"].as_object().unwrap();
    assert_eq!(g.tensors.len(), tensors.len());
    for (name, t) in tensors {
        let info = g.tensor(name).unwrap();
        let shape: Vec<usize> = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(info.shape(), shape, "{name}");
        assert_eq!(info.ggml_type.name(), t["type"].as_str().unwrap(), "{name}");
        assert_eq!(info.offset % g.alignment as u64, 0);
        assert_eq!(
            g.tensor_data(info),
            &hex(t["hex"].as_str().unwrap())[..],
            "{name}"
        );
    }
    assert_eq!(g.tensor("q8.weight").unwrap().ggml_type, GgmlType::Q8_0);
}

#[test]
fn gguf_py_reads_what_the_writer_wrote_back_the_same() {
    // Rewriting the parsed file with our writer gives the same bytes gguf-py wrote (same
    // layout: tensors in order, each at the next multiple of the alignment).
    let bytes = read("basic.gguf");
    let g = GgufFile::parse(&bytes, "basic.gguf").unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in &g.metadata {
        w.add_metadata(k, v.clone()).unwrap();
    }
    for t in &g.tensors {
        w.add_tensor(&t.name, &t.shape(), t.ggml_type, g.tensor_data(t).to_vec())
            .unwrap();
    }
    assert_eq!(w.to_bytes().unwrap(), bytes);
}

fn check_tokenizer(gguf_name: &str, expected: &str, add_special: bool) {
    let bytes = read(gguf_name);
    let g = GgufFile::parse(&bytes, gguf_name).unwrap();
    let spec = tokenizer::tokenizer_json(&g).unwrap();
    let tok = native_cli::tokenizer_json::tokenizer_from_bytes(&serde_json::to_vec(&spec).unwrap())
        .unwrap();
    for case in json(expected).as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(text, add_special).unwrap().get_ids().to_vec();
        assert_eq!(got, want, "{gguf_name}: {text:?}");
        let back = tok.decode(&got, add_special).unwrap();
        assert_eq!(back, text, "{gguf_name}: decode of {got:?}");
    }
}

#[test]
fn sentencepiece_tokenizer_encodes_like_llama_cpp() {
    check_tokenizer("spm_tokenizer.gguf", "spm_tokenizer.json", true);
}

#[test]
fn byte_level_bpe_tokenizers_encode_like_python_tokenizers() {
    check_tokenizer("gpt2_tokenizer.gguf", "gpt2_tokenizer.json", false);
    check_tokenizer(
        "llama_bpe_tokenizer.gguf",
        "llama_bpe_tokenizer.json",
        false,
    );
}

#[test]
fn tiny_llama_gguf_gives_the_safetensors_logits() {
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let from_gguf = read_dir(&fixture("gguf").join("tiny_llama.gguf")).unwrap();
    let from_st = read_dir(&fixture("llama").join("gqa_tied")).unwrap();
    let a = build(&from_gguf, backend.clone()).unwrap();
    let b = build(&from_st, backend.clone()).unwrap();
    assert_eq!(a.config.bos_token_id, Some(1));
    assert_eq!(a.config.eos_token_ids, [2]);
    assert!(a.config.tie_word_embeddings);
    // The un-permuted q/k weights are the checkpoint's, bit for bit.
    for (name, t) in &from_st.tensors {
        assert_eq!(
            from_gguf.tensors[name].to_f32_vec().unwrap(),
            t.to_f32_vec().unwrap(),
            "{name}"
        );
    }
    let (_, tokens, want) = read_golden(&fixture("llama").join("gqa_tied/golden.json"));
    let la = logits(&a, &tokens, true).unwrap();
    assert_eq!(la, logits(&b, &tokens, true).unwrap());
    assert_close("tiny_llama.gguf vs transformers", &la, &want);
    // Its tokenizer came from tokenizer.ggml.*: BOS, then SentencePiece pieces.
    let tok = from_gguf.tokenizer.as_ref().unwrap();
    let ids = tok.encode("the hat", true).unwrap().get_ids().to_vec();
    let piece = |p: &str| tok.token_to_id(p).unwrap();
    // "▁the▁hat": `he` scores above `▁t`, which then joins the `▁` and `t` left of it.
    assert_eq!(
        ids,
        [
            1,
            piece("▁t"),
            piece("he"),
            piece("▁"),
            piece("h"),
            piece("a"),
            piece("t")
        ]
    );
}

#[test]
fn a_lying_model_file_is_an_error_naming_it() {
    let dir = std::env::temp_dir().join(format!("kernels-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cut.gguf");
    let bytes = read("tiny_llama.gguf");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = read_dir(&path).err().unwrap().to_string();
    assert!(
        e.contains("cut.gguf") && e.contains("runs past the end of the file"),
        "{e}"
    );
    std::fs::write(&path, b"").unwrap();
    let e = read_dir(&path).err().unwrap().to_string();
    assert!(e.contains("cut.gguf") && e.contains("truncated"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
    // And the permutation matters: loaded without undoing it, the logits differ.
    let g = GgufFile::parse(&bytes, "tiny_llama.gguf").unwrap();
    let q = g.tensor("blk.0.attn_q.weight").unwrap();
    let raw = llama::tensor_from_gguf(q, g.tensor_data(q)).unwrap();
    let files = read_dir(&fixture("gguf").join("tiny_llama.gguf")).unwrap();
    assert_ne!(
        raw.to_f32_vec().unwrap(),
        files.tensors["model.layers.0.self_attn.q_proj.weight"]
            .to_f32_vec()
            .unwrap()
    );
}

#[test]
fn the_fuzz_seed_llama_loads_and_runs() {
    let bytes = read("micro_llama.gguf");
    let g = GgufFile::parse(&bytes, "micro_llama.gguf").unwrap();
    let m = llama::load_llama(&g).unwrap();
    assert_eq!((m.config.num_hidden_layers, m.config.vocab_size), (1, 12));
    let model = kernels_core::models::llama::Llama::from_tensors(
        m.config,
        &m.tensors,
        Rc::new(CpuBackend::new()),
    )
    .unwrap();
    let rows = logits(&model, &[1, 7, 5], true).unwrap();
    assert_eq!((rows.len(), rows[0].len()), (3, 12));
    assert!(rows.iter().flatten().all(|x| x.is_finite()));
}

/// llama 3's rope scaling, which llama.cpp's converter writes as the `rope_freqs.weight`
/// factors: read back into the `llama3` rope of the config, the logits are transformers'.
#[test]
fn llama3_rope_factors_become_the_llama3_scaling() {
    use kernels_core::models::llama::RopeKind;
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let files = read_dir(&fixture("gguf").join("llama3_rope.gguf")).unwrap();
    let model = build(&files, backend).unwrap();
    let RopeKind::Llama3 { factor, .. } = model.config.variant.rope else {
        panic!("{:?}", model.config.variant.rope);
    };
    assert_eq!(factor, 8.0);
    assert!(!files.tensors.contains_key("rope_freqs.weight"));
    let (_, tokens, want) = read_golden(&fixture("families").join("llama3_rope/golden.json"));
    let got = logits(&model, &tokens, true).unwrap();
    assert_close("llama3_rope.gguf vs transformers", &got, &want);
    // Written back with kernels-core's writer, the factors are the converter's.
    let written = llama::llama_to_gguf(&model.config, &files.tensors)
        .unwrap()
        .to_bytes()
        .unwrap();
    let g = GgufFile::parse(&written, "w.gguf").unwrap();
    let original = read("llama3_rope.gguf");
    let o = GgufFile::parse(&original, "llama3_rope.gguf").unwrap();
    let f32s = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let ours = f32s(g.tensor_data(g.tensor("rope_freqs.weight").unwrap()));
    let theirs = f32s(o.tensor_data(o.tensor("rope_freqs.weight").unwrap()));
    for (a, b) in ours.iter().zip(&theirs) {
        assert!((a - b).abs() <= 1e-5 * b.abs(), "{ours:?} vs {theirs:?}");
    }
}

/// The `qwen2` (q/k/v biases) and `qwen3` (q/k norms) architectures: each family fixture written
/// as GGUF with kernels-core's writer (llama.cpp's names, no q/k permutation for these) reads
/// back to transformers' logits.
#[test]
fn qwen_architectures_map_their_extra_tensors() {
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    for (family, extra) in [
        ("qwen2", "blk.0.attn_q.bias"),
        ("qwen3", "blk.1.attn_k_norm.weight"),
    ] {
        let dir = fixture("families").join(family);
        let files = read_dir(&dir).unwrap();
        let config = build(&files, backend.clone()).unwrap().config;
        let bytes = llama::llama_to_gguf(&config, &files.tensors)
            .unwrap()
            .to_bytes()
            .unwrap();
        let g = GgufFile::parse(&bytes, family).unwrap();
        assert_eq!(g.get_str("general.architecture").unwrap(), family);
        assert!(g.tensor(extra).is_some(), "{family}: {extra}");
        // Not permuted: the q rows are the checkpoint's.
        let q = g.tensor("blk.0.attn_q.weight").unwrap();
        let raw = llama::tensor_from_gguf(q, g.tensor_data(q)).unwrap();
        assert_eq!(
            raw.to_f32_vec().unwrap(),
            files.tensors["model.layers.0.self_attn.q_proj.weight"]
                .to_f32_vec()
                .unwrap()
        );
        let m = llama::load_llama(&g).unwrap();
        // `layer_types` of full-attention layers only has no GGUF key; the rest round-trips.
        let mut want_config = config.clone();
        want_config.variant.sliding_layers.clear();
        assert_eq!(m.config, want_config, "{family}");
        let model =
            kernels_core::models::llama::Llama::from_tensors(m.config, &m.tensors, backend.clone())
                .unwrap();
        let golden: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("golden.json")).unwrap()).unwrap();
        let tokens: Vec<u32> = golden["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        let want: Vec<Vec<f32>> = golden["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect();
        let got = logits(&model, &tokens, true).unwrap();
        assert_close(&format!("{family} through GGUF"), &got, &want);
    }
}

/// `tiny_llama_<q>.gguf`: the same tiny llama with its matrices quantized by the gguf package
/// (the down projection, whose rows of 56 are not whole blocks, stays F32). Loaded, they stay
/// packed, and the model's logits on every backend (CPU, wgpu on its native-f16 path and on its
/// f32 path, the emulated CUDA device when built with `cuda-emulator`) are those of the f32 model on the weights as the gguf package
/// decodes them, within the llama golden budget.
#[test]
fn quantized_gguf_llamas_give_the_logits_of_their_gguf_decoded_weights() {
    use kernels_core::DType;
    let tokens: Vec<u32> = vec![1, 7, 12, 30, 4, 22, 9, 36];
    for (name, dtype) in [
        ("tiny_llama_q8_0", DType::Q8_0),
        ("tiny_llama_q4_0", DType::Q4_0),
    ] {
        let file = format!("{name}.gguf");
        let files = read_dir(&fixture("gguf").join(&file)).unwrap();
        let q = &files.tensors["model.layers.0.self_attn.q_proj.weight"];
        assert_eq!(q.dtype(), dtype, "{file}: matrices stay packed");
        assert_eq!(
            files.tensors["model.layers.0.mlp.down_proj.weight"].dtype(),
            DType::F32
        );
        // The reference: the f32 model on gguf-py's decoding of the same bytes.
        let mut decoded = read_dir(&fixture("gguf").join(&file)).unwrap();
        decoded.tensors =
            kernels_core::io::load_named(&read(&format!("{file}.dequantized.safetensors")), &file)
                .unwrap();
        let want = logits(
            &build(&decoded, Rc::new(CpuBackend::reference())).unwrap(),
            &tokens,
            true,
        )
        .unwrap();
        // The same bytes decoded by kernels-core: bit for bit gguf-py's.
        for (n, t) in &decoded.tensors {
            let ours = files.tensors[n].dequantize().unwrap();
            assert!(ours.bit_eq(t), "{file}: {n} decodes differently");
        }
        let mut backends: Vec<(String, Rc<dyn Backend>)> = vec![
            ("cpu-reference".into(), Rc::new(CpuBackend::reference())),
            // f32 activations: the reference's numbers but for summation order.
            (
                "cpu exact activations".into(),
                Rc::new(CpuBackend::new().with_exact_activations(true)),
            ),
        ];
        // The default: 8-bit activations and integer dot products (cpu::fast::qdot), within
        // 5e-3 relative L2 of the reference's logits at every position, same greedy token.
        let got = logits(
            &build(&files, Rc::new(CpuBackend::new())).unwrap(),
            &tokens,
            true,
        )
        .unwrap();
        let mut worst_rel = 0.0f64;
        for (p, (g, w)) in got.iter().zip(&want).enumerate() {
            let (mut d2, mut w2) = (0.0f64, 0.0f64);
            for (a, b) in g.iter().zip(w) {
                d2 += ((a - b) as f64).powi(2);
                w2 += (*b as f64).powi(2);
            }
            let rel = (d2 / w2).sqrt();
            worst_rel = worst_rel.max(rel);
            let argmax = |row: &[f32]| {
                (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best })
            };
            assert_eq!(argmax(g), argmax(w), "{file} on cpu: greedy token at {p}");
            eprintln!("{file} on cpu (integer products): position {p}: relative L2 {rel:.2e}");
        }
        assert!(
            worst_rel <= 5e-3,
            "{file} on cpu: relative L2 {worst_rel:.2e}"
        );
        for g in kernels_gpu::testing::gpu_backends("quantized_gguf_llamas") {
            backends.push((g.name.to_string(), g.backend));
        }
        // wgpu's f32 path too, where the default one reads f16 natively (lavapipe).
        if let Some(f32_path) =
            kernels_gpu::testing::wgpu_without_shader_f16("quantized_gguf_llamas")
        {
            backends.push(("wgpu without shader-f16".into(), Rc::new(f32_path)));
        }
        for (backend, be) in backends {
            let got = logits(&build(&files, be).unwrap(), &tokens, true).unwrap();
            assert_close(&format!("{file} on {backend}"), &got, &want);
        }
    }
}

/// CUDA's half products on the emulated device: a 12-token prefill of the q8_0 and q4_0 tiny
/// llamas (more rows than decode's `matvec` takes, so the packed products are 16-bit GEMMs on
/// f16 operands) stays within 1% of the largest f32 logit, with the f32 model's greedy token at
/// every position; it is not the f32 result (the activations were rounded).
#[cfg(feature = "cuda-emulator")]
#[test]
fn half_products_keep_the_quantized_llamas_greedy_tokens_on_emulated_cuda() {
    let tokens: Vec<u32> = vec![1, 7, 12, 30, 4, 22, 9, 36, 5, 17, 28, 3];
    let argmax =
        |row: &[f32]| (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best });
    for name in ["tiny_llama_q8_0", "tiny_llama_q4_0"] {
        let file = format!("{name}.gguf");
        let files = read_dir(&fixture("gguf").join(&file)).unwrap();
        let reference = Rc::new(CpuBackend::reference());
        let want = logits(&build(&files, reference).unwrap(), &tokens, true).unwrap();
        let Some(be) = kernels_gpu::testing::cuda_emulated("half_products") else {
            return;
        };
        let be = Rc::new(be.with_half_products(true));
        let got = logits(&build(&files, be.clone()).unwrap(), &tokens, true).unwrap();
        assert!(be.counters().half_gemms > 0, "{file}: {:?}", be.counters());
        let (mut worst, mut scale) = (0.0f32, 0.0f32);
        for (p, (g, w)) in got.iter().zip(&want).enumerate() {
            for (a, b) in g.iter().zip(w) {
                worst = worst.max((a - b).abs());
                scale = scale.max(b.abs());
            }
            assert_eq!(argmax(g), argmax(w), "{file}: greedy token at position {p}");
        }
        eprintln!(
            "{file}: half products, max abs error {worst:.2e} of the largest logit {scale:.2e}"
        );
        assert!(
            worst > 0.0 && worst <= 0.01 * scale,
            "{file}: {worst} of {scale}"
        );
    }
}

/// `--model FILE.gguf` memory-maps the file and its packed tensors share the map's pages
/// instead of copying them (the q/k matrices, whose rows are put back in Hugging Face order,
/// are copies).
#[test]
fn gguf_packed_tensors_share_the_memory_map() {
    use kernels_core::tensor::Storage;
    let files = read_dir(&fixture("gguf").join("tiny_llama_q8_0.gguf")).unwrap();
    let shared = |name: &str| match files.tensors[name].storage() {
        Storage::Packed(p) => p.is_shared_range(),
        other => panic!("{name}: {other:?}"),
    };
    assert!(shared("model.layers.0.mlp.gate_proj.weight"));
    assert!(shared("model.embed_tokens.weight"));
    assert!(!shared("model.layers.0.self_attn.q_proj.weight"));
}
