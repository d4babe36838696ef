//! Llama checkpoints from a Hugging Face model directory, a GGUF file (memory-mapped), or the
//! demo model embedded in the binary, their tokenizer, generation timings ([`GenStats`]) and the
//! logits of a token sequence. The model itself is kernels-core's `models::llama`; generation
//! is kernels-chat's. The `generate`, `chat`, `logits` and `eval` commands, the demo and the
//! benchmarks load their models through it.

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use kernels_core::models::hf;
use kernels_core::models::llama::{Llama, LlamaConfig, quantize_checkpoint};
use kernels_core::{Backend, DType, Tensor};
use tokenizers::Tokenizer;

use crate::{CliResult, fail};

/// A model directory's files as bytes (from disk, or embedded in the binary).
pub struct ModelFiles {
    /// Where they came from, for messages.
    pub origin: String,
    /// `config.json` (for a GGUF file, the JSON of [`ModelFiles::parsed_config`]).
    pub config: String,
    /// The config when it did not come from `config.json` (a GGUF file's metadata):
    /// [`build`] uses it instead of parsing `config`.
    pub parsed_config: Option<LlamaConfig>,
    /// Tensors of every shard, by name.
    pub tensors: BTreeMap<String, Tensor>,
    /// The addresses of the memory-mapped file the tensors share (a GGUF file), if any: the
    /// pages [`build`] gives back after it repacks a tensor for the CPU.
    pub mapped: Option<std::ops::Range<usize>>,
    /// `tokenizer.json`, when present.
    pub tokenizer: Option<Tokenizer>,
    /// `tokenizer_config.json`, `chat_template.jinja` and `generation_config.json`, when
    /// present (what `kernels chat` and `generate --chat` read).
    pub chat_files: ChatFiles,
}

/// The text files of a model directory that chat needs.
#[derive(Debug, Clone, Default)]
pub struct ChatFiles {
    pub tokenizer_config: Option<String>,
    pub chat_template: Option<String>,
    pub generation_config: Option<String>,
}

impl ChatFiles {
    /// Reads those of `dir`'s files that exist.
    fn read(dir: &Path) -> CliResult<ChatFiles> {
        let text = |name: &str| -> CliResult<Option<String>> {
            let path = dir.join(name);
            match std::fs::read(&path) {
                Ok(b) => String::from_utf8(b)
                    .map(Some)
                    .map_err(|_| fail(format!("{}: not UTF-8", path.display()))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(fail(format!("{}: {e}", path.display()))),
            }
        };
        Ok(ChatFiles {
            tokenizer_config: text("tokenizer_config.json")?,
            chat_template: text("chat_template.jinja")?,
            generation_config: text("generation_config.json")?,
        })
    }
}

fn load_tokenizer_bytes(bytes: &[u8], origin: &str) -> CliResult<Tokenizer> {
    crate::tokenizer_json::tokenizer_from_bytes(bytes)
        .map_err(|e| fail(format!("{origin}/tokenizer.json: {e}")))
}

/// Reads `config.json`, `model.safetensors` or the shards `model.safetensors.index.json` lists,
/// and `tokenizer.json` when present (kernels-core's `models::hf`, which the page shares). A
/// path to a `.gguf` file reads that instead ([`read_gguf`]).
pub fn read_dir(dir: &Path) -> CliResult<ModelFiles> {
    if dir.is_file()
        && dir
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        return read_gguf(dir);
    }
    let origin = dir.display().to_string();
    let checkpoint = hf::load_checkpoint(&origin, &mut |name| {
        let path = dir.join(name);
        if !path.exists() {
            return Ok(None);
        }
        std::fs::read(&path)
            .map(Some)
            .map_err(|e| kernels_core::Error::BadModelFile {
                path: path.display().to_string(),
                why: e.to_string(),
            })
    })?;
    let tokenizer = checkpoint
        .tokenizer_json
        .map(|b| load_tokenizer_bytes(&b, &origin))
        .transpose()?;
    Ok(ModelFiles {
        origin,
        config: checkpoint.config,
        parsed_config: None,
        tensors: checkpoint.tensors,
        mapped: None,
        tokenizer,
        chat_files: ChatFiles::read(dir)?,
    })
}

/// Reads a GGUF file: memory-maps it, parses it (kernels-core's `gguf`), and takes the config
/// from its `<arch>.*` metadata, the tensors under their Hugging Face names (q/k rows
/// un-permuted), the tokenizer from `tokenizer.ggml.*` and the chat template from
/// `tokenizer.chat_template`.
pub fn read_gguf(path: &Path) -> CliResult<ModelFiles> {
    let origin = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| fail(format!("{origin}: {e}")))?;
    let len = file
        .metadata()
        .map_err(|e| fail(format!("{origin}: {e}")))?
        .len();
    // An empty file cannot be mapped; it parses (to an error) as an empty slice.
    let owner: kernels_core::SharedBytes = if len == 0 {
        std::sync::Arc::new(Vec::<u8>::new())
    } else {
        // SAFETY: the map is read-only, and the packed tensors keep it alive (they share its
        // pages instead of copying them). Another process truncating the file meanwhile could
        // fault a read (SIGBUS), as with any mmap-based loader; the bytes themselves are only
        // ever read through bounds-checked slices.
        std::sync::Arc::new(
            unsafe { memmap2::Mmap::map(&file) }
                .map_err(|e| fail(format!("{origin}: cannot map the file: {e}")))?,
        )
    };
    let bytes: &[u8] = (*owner).as_ref();
    let mapped = (len > 0).then(|| bytes.as_ptr() as usize..bytes.as_ptr() as usize + bytes.len());
    let parsed = kernels_core::gguf::GgufFile::parse(bytes, &origin)?;
    let model = kernels_core::gguf::llama::load_llama_in(&parsed, Some(&owner))?;
    let tokenizer = model
        .tokenizer_json
        .map(|b| {
            crate::tokenizer_json::tokenizer_from_bytes(&b)
                .map_err(|e| fail(format!("{origin}: the tokenizer of tokenizer.ggml.*: {e}")))
        })
        .transpose()?;
    Ok(ModelFiles {
        origin,
        config: model.config.to_json(),
        parsed_config: Some(model.config),
        tensors: model.tensors,
        mapped,
        tokenizer,
        chat_files: ChatFiles {
            chat_template: model.chat_template,
            ..ChatFiles::default()
        },
    })
}

/// The same from bytes (the embedded demo model).
pub fn from_bytes(
    origin: &str,
    config: &str,
    weights: &[u8],
    tokenizer: Option<&[u8]>,
) -> CliResult<ModelFiles> {
    Ok(ModelFiles {
        origin: origin.into(),
        config: config.into(),
        parsed_config: None,
        tensors: kernels_core::io::load_named(weights, &format!("{origin}/model.safetensors"))?,
        mapped: None,
        tokenizer: tokenizer
            .map(|b| load_tokenizer_bytes(b, origin))
            .transpose()?,
        chat_files: ChatFiles::default(),
    })
}

/// Builds the model on `backend` for inference ([`Llama::for_inference`]: q, k and v fused at
/// load on a device). On the CPU backend the q4_0 / q5_0 / q8_0 matrices are repacked for its
/// decode kernels (see `repack_in`) into a copy of the map; [`build_in`] repacks `files`
/// itself, so no plain copy of them stays behind.
pub fn build(files: &ModelFiles, backend: Rc<dyn Backend>) -> CliResult<Llama> {
    let config = match &files.parsed_config {
        Some(c) => c.clone(),
        None => LlamaConfig::from_json(&files.config)
            .map_err(|e| fail(format!("{}: {e}", files.origin)))?,
    };
    let mut tensors = None;
    if repacks(&*backend) {
        let mut t = files.tensors.clone();
        if repack_in(&mut t, files.mapped.as_ref(), &files.origin)? {
            tensors = Some(t);
        }
    }
    let cpu = repacks(&*backend);
    let model = Llama::for_inference(config, tensors.as_ref().unwrap_or(&files.tensors), backend)
        .map_err(|e| fail(format!("{}: {e}", files.origin)))?;
    if cpu {
        collapse_weights(&model, files.mapped.as_ref());
    }
    Ok(model)
}

/// Puts the weights of `model` (on the CPU backend) that this process wrote into memory of
/// its own (f32 matrices read from a checkpoint, `--quantize`'s and the repack's copies) into
/// transparent huge pages (`heap::collapse_into_huge_pages`): decode streams every weight each
/// token, and with 4 KiB pages each 4 KiB costs a TLB miss. Bytes that still lie in the
/// memory-mapped file (`mapped`) stay in the file's shared pages.
fn collapse_weights(model: &Llama, mapped: Option<&std::ops::Range<usize>>) {
    let span = |p: usize, len: usize| p..p.saturating_add(len);
    let spans = model
        .store
        .iter()
        .filter_map(|(_, t)| match t.as_f32() {
            Ok(v) => Some(span(v.as_ptr() as usize, std::mem::size_of_val(v))),
            Err(_) => t
                .packed_in()
                .ok()
                .filter(|(b, _)| !mapped.is_some_and(|m| in_mapping(m, b)))
                .map(|(b, _)| span(b.as_ptr() as usize, b.len())),
        })
        .collect();
    crate::heap::collapse_into_huge_pages(spans);
}

/// [`build`], repacking `files`' tensors in place for the CPU backend: the plain bytes of a
/// repacked matrix are dropped (an owned copy, as `--quantize` makes) or given back to the
/// kernel (pages of a memory-mapped file).
pub fn build_in(files: &mut ModelFiles, backend: Rc<dyn Backend>) -> CliResult<Llama> {
    if repacks(&*backend) {
        repack_in(&mut files.tensors, files.mapped.as_ref(), &files.origin)?;
    }
    build(files, backend)
}

/// Whether `backend` is the CPU backend with its fast kernels (not the reference).
fn repacks(backend: &dyn Backend) -> bool {
    backend.device() == kernels_core::DeviceId::CPU && backend.name() == "cpu"
}

/// Each `q4_0`, `q5_0` and `q8_0` matrix of `tensors` in the eight-row interleaved layout the
/// CPU backend's decode kernels read (`kernels_core::cpu::fast::qdot::interleave`, where the
/// kernel family has them, unless `KERNELS_CPU_REPACK=0`), each one's pages of the memory-mapped
/// file (`mapped`) given back to the kernel once copied, so the file's pages and the copy are
/// not both resident; every other weight matrix of the file is copied into huge pages
/// ([`huge_page_copy`]) the same way. Whether any was repacked or copied.
fn repack_in(
    tensors: &mut BTreeMap<String, Tensor>,
    mapped: Option<&std::ops::Range<usize>>,
    origin: &str,
) -> CliResult<bool> {
    use kernels_core::cpu::fast::qdot::interleave;
    let mut any = false;
    for (name, t) in tensors.iter_mut() {
        // Phi-3's fused projections are split at load (from their plain bytes).
        let split = name.ends_with("qkv_proj.weight") || name.ends_with("gate_up_proj.weight");
        if split || !kernels_core::models::llama::is_matrix_weight(name) {
            continue;
        }
        let Some(r) = (match interleave::repack_tensor_with(t, &mut huge_page_buffer) {
            Ok(None) => huge_page_copy(t, mapped),
            other => other,
        })
        .map_err(|e| fail(format!("{origin}: {name}: {e}")))?
        else {
            continue;
        };
        if let (Some(map), Ok(b)) = (mapped, t.packed_bytes()) {
            release(map, b);
        }
        *t = r;
        any = true;
    }
    Ok(any)
}

/// A matrix of the memory-mapped file that the repack left in the file's layout (f16, bf16,
/// the K-quants, and every format where the kernel family has no interleaved layout) copied
/// into memory of this process advised into transparent huge pages
/// (`heap::advise_huge_pages`; `KERNELS_HUGE_PAGES=0` leaves it in the file's pages): decode
/// streams it whole every token, and the file's 4 KiB pages cost a TLB miss every 4 KiB. The
/// file's pages are given back, so resident memory stays the same. `None` for other tensors.
fn huge_page_copy(
    t: &Tensor,
    mapped: Option<&std::ops::Range<usize>>,
) -> kernels_core::Result<Option<Tensor>> {
    // Only bytes that still lie in the file's mapping (not a copy made before).
    let in_file = t
        .packed_bytes()
        .is_ok_and(|b| mapped.is_some_and(|m| in_mapping(m, b)));
    if !in_file || !DType::WEIGHT.contains(&t.dtype()) {
        return Ok(None);
    }
    in_huge_pages(t)
}

/// A copy of `t`'s bytes in memory advised into transparent huge pages before the copy touches
/// it; `None` where huge pages are off or `t` is smaller than `heap::HUGE_PAGE_MIN`.
fn in_huge_pages(t: &Tensor) -> kernels_core::Result<Option<Tensor>> {
    let (bytes, layout) = t.packed_in()?;
    if !crate::heap::huge_pages() || bytes.len() < crate::heap::HUGE_PAGE_MIN {
        return Ok(None);
    }
    let mut copy = huge_page_buffer(bytes.len())?;
    copy.extend_from_slice(bytes);
    Tensor::from_raw_in(t.shape(), t.dtype(), copy, layout).map(Some)
}

/// An empty buffer with room for `len` bytes, advised into transparent huge pages before
/// anything touches it where huge pages are on and `len` is at least `heap::HUGE_PAGE_MIN`
/// (what the repack writes into, so a repacked weight lies in huge pages without a copy).
fn huge_page_buffer(len: usize) -> kernels_core::Result<Vec<u8>> {
    let mut b = Vec::new();
    if len < crate::heap::HUGE_PAGE_MIN || !crate::heap::huge_pages() {
        return Ok(b);
    }
    b.try_reserve_exact(len)
        .map_err(|_| kernels_core::Error::OutOfMemory {
            what: "a weight in huge pages".into(),
            bytes: len as u64,
        })?;
    crate::heap::advise_huge_pages(b.spare_capacity_mut());
    Ok(b)
}

/// Whether `b` lies within the file mapping `map`.
fn in_mapping(map: &std::ops::Range<usize>, b: &[u8]) -> bool {
    let (lo, hi) = (b.as_ptr() as usize, b.as_ptr() as usize + b.len());
    map.start <= lo && hi <= map.end
}

/// Gives the whole pages of `b` (which lies in the read-only file mapping `map`) back to the
/// kernel: they are no longer resident, and a later read faults them in again from the file
/// with the same bytes.
fn release(map: &std::ops::Range<usize>, b: &[u8]) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: sysconf reads a constant of the system.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let Ok(page @ 1..) = usize::try_from(page) else {
            return;
        };
        if !in_mapping(map, b) {
            return;
        }
        let (lo, hi) = (b.as_ptr() as usize, b.as_ptr() as usize + b.len());
        let (lo, hi) = (lo.next_multiple_of(page), hi / page * page);
        if hi > lo {
            // SAFETY: `lo..hi` lies within the read-only file mapping, whose pages hold the
            // file's bytes; MADV_DONTNEED drops them from this process, and a later access
            // maps the same bytes again from the file. Nothing is written or unmapped.
            unsafe {
                libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED);
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = (map, b);
}

/// Timings of one generation: prefill (prompt -> first token) and decode (the rest).
#[derive(Debug, Clone, Copy)]
pub struct GenStats {
    pub prompt_tokens: usize,
    pub new_tokens: usize,
    pub prefill: Duration,
    pub decode: Duration,
}

impl GenStats {
    /// `prefill N tok in X (Y tok/s), decode M tok in Z (W tok/s)`.
    pub fn line(&self) -> String {
        let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
        let decoded = self.new_tokens.saturating_sub(1);
        format!(
            "prefill {} tokens in {:.1} ms ({:.1} tok/s), decode {} tokens in {:.1} ms ({:.1} tok/s)",
            self.prompt_tokens,
            self.prefill.as_secs_f64() * 1e3,
            rate(self.prompt_tokens, self.prefill),
            decoded,
            self.decode.as_secs_f64() * 1e3,
            rate(decoded, self.decode)
        )
    }
}

/// The logits of a token sequence: `[positions][vocab]`, the last position or all of them.
pub fn logits(model: &Llama, tokens: &[u32], all_positions: bool) -> CliResult<Vec<Vec<f32>>> {
    let c = &model.config;
    if tokens.is_empty() {
        return Err(fail("--tokens is empty"));
    }
    if tokens.len() > c.max_positions() {
        return Err(fail(format!(
            "--tokens: {} tokens, but the model allows at most {} (max_position_embeddings = {})",
            tokens.len(),
            c.max_positions(),
            c.max_position_embeddings
        )));
    }
    if let Some(bad) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
        return Err(fail(format!(
            "--tokens: token {bad} is outside the vocabulary (vocab_size = {})",
            c.vocab_size
        )));
    }
    let backend = model.store.backend().clone();
    let g = kernels_core::autograd::Graph::inference(backend.clone());
    let p = model.bind(&g)?;
    let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
    let ids = g.constant(backend.upload(&Tensor::from_i32(&[1, ids.len()], ids)?)?)?;
    let hidden = model.forward(&g, &p, &ids, None)?;
    let hidden = if all_positions {
        hidden
    } else {
        let last = model.last_positions(&g, &hidden)?;
        g.reshape(&last, &[1, 1, c.hidden_size])?
    };
    let out = model.logits(&g, &p, &hidden)?;
    let host = pollster::block_on(backend.download(out.tensor()))?;
    Ok(host
        .to_f32_vec()?
        .chunks(c.vocab_size)
        .map(<[f32]>::to_vec)
        .collect())
}

/// `--quantize q8_0|q4_0|q4_k`: the dtype named, if it is one of
/// [`kernels_core::models::llama::QUANTIZE_CHOICES`] (or f16 / bf16 / q4_1 / q5_0, which
/// [`kernels_core::quant`] also writes).
pub fn parse_quantize(s: &str) -> Result<DType, String> {
    DType::from_name(s)
        .filter(|d| kernels_core::quant::QUANTIZE_TO.contains(d))
        .ok_or_else(|| {
            format!("`{s}` is not a format to quantize to; expected q8_0, q4_0 or q4_k (or f16, bf16, q4_1, q5_0)")
        })
}

/// Quantize on load: the model's matrices re-encoded as `to` (see
/// [`kernels_core::models::llama::quantize_checkpoint`]), with one line on stderr saying what
/// changed. `None` leaves the files as they are.
pub fn quantize_files(files: &mut ModelFiles, to: Option<DType>) -> CliResult<()> {
    let Some(to) = to else {
        return Ok(());
    };
    let s = quantize_checkpoint(&mut files.tensors, to)
        .map_err(|e| fail(format!("{}: --quantize {to}: {e}", files.origin)))?;
    let mut by_format: std::collections::BTreeMap<&str, usize> = Default::default();
    for d in s.quantized.values() {
        *by_format.entry(d.name()).or_default() += 1;
    }
    let formats: Vec<String> = by_format.iter().map(|(d, n)| format!("{n} {d}")).collect();
    eprintln!(
        "quantized {} matrices ({}), {} kept as they were; weights {:.1} MB -> {:.1} MB",
        s.quantized.len(),
        formats.join(", "),
        s.kept.len(),
        s.bytes_before as f64 / 1e6,
        s.bytes_after as f64 / 1e6
    );
    for (name, why) in &s.kept {
        eprintln!("  kept {name}: {why}");
    }
    Ok(())
}

#[cfg(test)]
mod huge_page_tests {
    use kernels_core::cpu::fast::qdot::interleave;
    use kernels_core::packed::Layout;
    use kernels_core::{DType, Tensor};

    /// A `dtype` matrix of `n` rows of `k` with every byte set from a counter (any bytes are a
    /// valid f16 or q8_0 weight's).
    fn matrix(dtype: DType, n: usize, k: usize) -> Tensor {
        let len = n * dtype.bytes_for(k).expect("whole blocks");
        let bytes = (0..len).map(|i| (i * 131 % 251) as u8).collect();
        Tensor::from_raw(&[n, k], dtype, bytes).expect("tensor")
    }

    #[test]
    fn copies_in_huge_pages_keep_bytes_and_layout() {
        crate::heap::init_huge_pages();
        if !crate::heap::huge_pages() {
            return; // KERNELS_HUGE_PAGES=0 in the environment
        }
        // 4 MiB and more: copied; the bytes and the layout are the original's.
        let big = matrix(DType::F16, 1024, 2048);
        let copy = super::in_huge_pages(&big)
            .expect("copy")
            .expect("large enough");
        assert_eq!(copy.packed_in().unwrap(), big.packed_in().unwrap());
        assert_ne!(
            copy.packed_bytes().unwrap().as_ptr(),
            big.packed_bytes().unwrap().as_ptr()
        );
        // Smaller: left as it is.
        assert!(
            super::in_huge_pages(&matrix(DType::F16, 8, 64))
                .unwrap()
                .is_none()
        );
        // Not in a file mapping: no copy of an f16 weight.
        assert!(super::huge_page_copy(&big, None).unwrap().is_none());
        let elsewhere = 0..1;
        assert!(
            super::huge_page_copy(&big, Some(&elsewhere))
                .unwrap()
                .is_none()
        );
        // Within the mapping: copied.
        let b = big.packed_bytes().unwrap();
        let around = b.as_ptr() as usize..b.as_ptr() as usize + b.len();
        assert!(
            super::huge_page_copy(&big, Some(&around))
                .unwrap()
                .is_some()
        );
        // A K-quant matrix (never repacked) within the mapping: copied, the same bytes.
        let kq = matrix(DType::Q4_K, 1024, 8192);
        let b = kq.packed_bytes().unwrap();
        let around = b.as_ptr() as usize..b.as_ptr() as usize + b.len();
        let copy = super::huge_page_copy(&kq, Some(&around))
            .unwrap()
            .expect("a K-quant matrix of 4.5 MiB is copied");
        assert_eq!(copy.packed_in().unwrap(), kq.packed_in().unwrap());
        // A repack into the advised buffer is the plain repack, interleaved layout and all.
        let q = matrix(DType::Q8_0, 2048, 2048);
        let want = interleave::repack_tensor(&q).expect("repack");
        let got = interleave::repack_tensor_with(&q, &mut super::huge_page_buffer).expect("repack");
        match (want, got) {
            (Some(w), Some(g)) => {
                assert_eq!(g.packed_in().unwrap(), w.packed_in().unwrap());
                assert_eq!(g.packed_in().unwrap().1, Layout::Rows8);
            }
            (None, None) => {} // a kernel family without the interleaved layout
            (w, g) => panic!("repacked {} vs {}", w.is_some(), g.is_some()),
        }
        let buf = super::huge_page_buffer(5 << 20).unwrap();
        assert!(buf.is_empty() && buf.capacity() >= 5 << 20);
    }
}
