//! `kernels quantize --model DIR --to q4_k --out FILE.gguf`: a Hugging Face checkpoint (f32,
//! f16 or bf16; or a GGUF file) with its matrices quantized as it loads, written as a GGUF v3
//! file that the `gguf` package and llama.cpp's tools read back, with the tokenizer
//! (`tokenizer.json` and `tokenizer_config.json` as `tokenizer.ggml.*`, kernels-core's
//! `gguf::tokenizer_write`; a GGUF file's own `tokenizer.*` keys). The file is written whole or
//! not at all (a temporary beside it, then a rename).

use std::path::Path;

use kernels_core::DType;
use kernels_core::gguf::llama::llama_to_gguf;
use kernels_core::gguf::tokenizer_write::{HfTokenizer, add_tokenizer};
use kernels_core::gguf::{GgufFile, GgufWriter};
use kernels_core::models::llama::LlamaConfig;

use crate::atomic_write::write_atomically_verified;
use crate::llama::{quantize_files, read_dir};
use crate::{CliResult, emit, fail};

/// `kernels quantize` (`with_tokenizer` false: `--no-tokenizer`).
pub fn run(model: &Path, to: DType, out: &Path, with_tokenizer: bool) -> CliResult<()> {
    let mut files = read_dir(model)?;
    let config = match &files.parsed_config {
        Some(c) => c.clone(),
        None => LlamaConfig::from_json(&files.config)
            .map_err(|e| fail(format!("{}: {e}", files.origin)))?,
    };
    // The checkpoint must be one the loader accepts (names, shapes, no stray tensors) before
    // anything is written.
    config
        .validate()
        .map_err(|e| fail(format!("{}: {e}", files.origin)))?;
    quantize_files(&mut files, Some(to))?;
    let mut writer = llama_to_gguf(&config, &files.tensors).map_err(|e| match e {
        // The writer's complaints are about the config the user gave.
        kernels_core::Error::BadModelFile { why, .. } => fail(format!(
            "--model {}: cannot be written as GGUF: {why}",
            files.origin
        )),
        e => fail(format!("--model {}: {e}", files.origin)),
    })?;
    let tokenizer = if !with_tokenizer {
        false
    } else if model.is_dir() {
        tokenizer_of_dir(&mut writer, model, config.vocab_size).map_err(|e| {
            fail(format!(
                "{e} (--no-tokenizer writes the weights and config without it)"
            ))
        })?
    } else {
        tokenizer_of_gguf(&mut writer, model)?
    };
    let bytes = writer
        .to_bytes()
        .map_err(|e| fail(format!("{}: {e}", out.display())))?;
    let origin = out.display().to_string();
    let made = read_back(&bytes, &config, files.tensors.len(), out)?;
    // The file is read back from disk, under its temporary name, before it is renamed into
    // place: a short or corrupted write is never left as `--out`.
    write_atomically_verified(out, &bytes, &|tmp| {
        read_back_file(tmp, &made).map_err(|why| {
            std::io::Error::other(format!(
                "not written: the file does not read back from disk: {why}"
            ))
        })
    })
    .map_err(|e| fail(format!("--out {origin}: {e}")))?;
    let note = match (tokenizer, with_tokenizer) {
        (true, _) => "",
        (false, true) => {
            "; no tokenizer: the checkpoint has no tokenizer.json, so llama.cpp cannot run the file"
        }
        (false, false) => "; no tokenizer (--no-tokenizer), so llama.cpp cannot run the file",
    };
    emit(&format!(
        "wrote {} ({:.1} MB, {} tensors{note})\n",
        out.display(),
        bytes.len() as f64 / 1e6,
        files.tensors.len()
    ))
}

/// Reads a file of `dir` when it exists.
fn read_opt(dir: &Path, name: &str) -> CliResult<Option<Vec<u8>>> {
    let path = dir.join(name);
    match crate::limits::read_regular(&path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(fail(format!("{}: {e}", path.display()))),
    }
}

/// Adds the `tokenizer.ggml.*` keys of `dir`'s `tokenizer.json` (false when there is none).
fn tokenizer_of_dir(w: &mut GgufWriter, dir: &Path, vocab_size: usize) -> CliResult<bool> {
    let Some(json) = read_opt(dir, "tokenizer.json")? else {
        return Ok(false);
    };
    let config = read_opt(dir, "tokenizer_config.json")?;
    let jinja = read_opt(dir, "chat_template.jinja")?;
    let jinja = jinja
        .map(|b| {
            String::from_utf8(b).map_err(|_| {
                fail(format!(
                    "{}: not UTF-8",
                    dir.join("chat_template.jinja").display()
                ))
            })
        })
        .transpose()?;
    let path = dir.join("tokenizer.json").display().to_string();
    let files = HfTokenizer {
        path: &path,
        tokenizer_json: &json,
        tokenizer_config: config.as_deref(),
        chat_template_jinja: jinja.as_deref(),
    };
    add_tokenizer(w, &files, vocab_size)?;
    Ok(true)
}

/// Copies a GGUF file's `tokenizer.*` keys (false when it has no `tokenizer.ggml.model`).
fn tokenizer_of_gguf(w: &mut GgufWriter, path: &Path) -> CliResult<bool> {
    let origin = path.display().to_string();
    let bytes = crate::limits::read_regular(path).map_err(|e| fail(format!("{origin}: {e}")))?;
    let file = GgufFile::parse(&bytes, &origin)?;
    let has = file.get("tokenizer.ggml.model").is_some();
    for (k, v) in &file.metadata {
        if k.starts_with("tokenizer.") {
            w.set_metadata(k, v.clone())?;
        }
    }
    Ok(has)
}

/// The header of a GGUF file as written: what its read-back from disk must give.
#[derive(Debug, Clone, PartialEq)]
pub struct WrittenHeader {
    pub bytes: u64,
    pub version: u32,
    pub alignment: usize,
    pub data_offset: usize,
    pub metadata: Vec<(String, kernels_core::gguf::Value)>,
    pub tensors: Vec<kernels_core::gguf::TensorInfo>,
}

impl WrittenHeader {
    fn of(file: &GgufFile<'_>, bytes: u64) -> WrittenHeader {
        WrittenHeader {
            bytes,
            version: file.version,
            alignment: file.alignment,
            data_offset: file.data_offset,
            metadata: file.metadata.clone(),
            tensors: file.tensors.clone(),
        }
    }
}

/// Reads the file at `path` from disk (mapped, as `generate` reads a GGUF) and checks that its
/// length, header, metadata and tensor infos are the ones `want` says were written; the error
/// says what differs.
pub fn read_back_file(path: &Path, want: &WrittenHeader) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    if len != want.bytes {
        return Err(format!("{len} bytes on disk, {} written", want.bytes));
    }
    // SAFETY: a read-only map of a file only this process has named (a fresh temporary);
    // every read goes through bounds-checked slices.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| e.to_string())?;
    let parsed = GgufFile::parse(&map, &path.display().to_string()).map_err(|e| e.to_string())?;
    let got = WrittenHeader::of(&parsed, len);
    if got.version != want.version
        || got.alignment != want.alignment
        || got.data_offset != want.data_offset
    {
        return Err(format!(
            "header (version {}, alignment {}, data at {}) is not the one written (version {}, \
             alignment {}, data at {})",
            got.version,
            got.alignment,
            got.data_offset,
            want.version,
            want.alignment,
            want.data_offset
        ));
    }
    if let Some(((k, _), _)) = (want.metadata.iter())
        .zip(&got.metadata)
        .find(|(w, g)| w != g)
    {
        return Err(format!("metadata key {k} differs from the one written"));
    }
    if got.metadata.len() != want.metadata.len() {
        return Err(format!(
            "{} metadata keys on disk, {} written",
            got.metadata.len(),
            want.metadata.len()
        ));
    }
    if let Some((t, _)) = (want.tensors.iter())
        .zip(&got.tensors)
        .find(|(w, g)| w != g)
    {
        return Err(format!(
            "tensor {}'s entry differs from the one written",
            t.name
        ));
    }
    if got.tensors.len() != want.tensors.len() {
        return Err(format!(
            "{} tensors on disk, {} written",
            got.tensors.len(),
            want.tensors.len()
        ));
    }
    Ok(())
}

/// Parses the file about to be written as `generate` will (header, metadata, the config from
/// it, every tensor) and checks the config and tensor count came through unchanged, so a file
/// the loader would refuse is never put in place. Returns the header, for the read-back from
/// disk.
fn read_back(
    bytes: &[u8],
    config: &LlamaConfig,
    tensors: usize,
    out: &Path,
) -> CliResult<WrittenHeader> {
    let origin = out.display().to_string();
    let not_written = |why: String| {
        fail(format!(
            "--out {origin}: not written: the GGUF made does not read back: {why}"
        ))
    };
    let file = GgufFile::parse(bytes, &origin).map_err(|e| not_written(e.to_string()))?;
    let model =
        kernels_core::gguf::llama::load_llama(&file).map_err(|e| not_written(e.to_string()))?;
    let (a, b) = (&model.config, config);
    let fields = [
        (
            "num_hidden_layers",
            a.num_hidden_layers,
            b.num_hidden_layers,
        ),
        ("hidden_size", a.hidden_size, b.hidden_size),
        (
            "intermediate_size",
            a.intermediate_size,
            b.intermediate_size,
        ),
        (
            "num_attention_heads",
            a.num_attention_heads,
            b.num_attention_heads,
        ),
        (
            "num_key_value_heads",
            a.num_key_value_heads,
            b.num_key_value_heads,
        ),
        ("head_dim", a.head_dim, b.head_dim),
        ("vocab_size", a.vocab_size, b.vocab_size),
        (
            "max_position_embeddings",
            a.max_position_embeddings,
            b.max_position_embeddings,
        ),
    ];
    for (name, got, want) in fields {
        if got != want {
            return Err(not_written(format!(
                "{name} reads back as {got}, not {want}"
            )));
        }
    }
    if model.tensors.len() != tensors {
        return Err(not_written(format!(
            "{} tensors read back, not {tensors}",
            model.tensors.len()
        )));
    }
    Ok(WrittenHeader::of(&file, bytes.len() as u64))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// The demo model as GGUF bytes, its config and tensor count.
    fn demo_gguf() -> (Vec<u8>, LlamaConfig, usize) {
        let files = crate::addition::embedded().unwrap();
        let config = LlamaConfig::from_json(&files.config).unwrap();
        let bytes = llama_to_gguf(&config, &files.tensors)
            .unwrap()
            .to_bytes()
            .unwrap();
        (bytes, config, files.tensors.len())
    }

    /// The read-back reads the file on disk: a file cut short, or with a header byte changed,
    /// after it was written is refused, naming what differs.
    #[test]
    fn the_read_back_is_of_the_file_on_disk() {
        let (bytes, config, n) = demo_gguf();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("m.gguf");
        let want = read_back(&bytes, &config, n, &out).unwrap();
        std::fs::write(&out, &bytes).unwrap();
        read_back_file(&out, &want).unwrap();
        std::fs::write(&out, &bytes[..bytes.len() - 1]).unwrap();
        let e = read_back_file(&out, &want).unwrap_err();
        assert!(e.contains("bytes on disk"), "{e}");
        // The first tensor's name's first byte, changed on disk.
        let name = want.tensors[0].name.as_bytes();
        let at = bytes.windows(name.len()).position(|w| w == name).unwrap();
        let mut changed = bytes.clone();
        changed[at] ^= 0x01;
        std::fs::write(&out, &changed).unwrap();
        let e = read_back_file(&out, &want).unwrap_err();
        assert!(e.contains(&want.tensors[0].name), "{e}");
    }

    /// A read-back failure (here: the header expected differs from the one on disk) leaves
    /// neither the output nor a temporary file, and an existing output as it was.
    #[test]
    fn a_failed_read_back_leaves_no_output_and_no_temporary_file() {
        let (bytes, config, n) = demo_gguf();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("m.gguf");
        let mut want = read_back(&bytes, &config, n, &out).unwrap();
        want.tensors.pop();
        let verify = |tmp: &Path| read_back_file(tmp, &want).map_err(std::io::Error::other);
        let e = write_atomically_verified(&out, &bytes, &verify).unwrap_err();
        assert!(e.to_string().contains("tensors on disk"), "{e}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        std::fs::write(&out, b"old").unwrap();
        assert!(write_atomically_verified(&out, &bytes, &verify).is_err());
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
