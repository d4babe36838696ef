//! A Hugging Face model directory, read through a file lookup so the same code serves a
//! directory on disk (the CLI) and files picked in a browser (the page): `config.json`,
//! `model.safetensors` or the shards `model.safetensors.index.json` lists, and `tokenizer.json`.
//! `tokenizer.json` is returned as bytes: the CLI and the page parse it with the `tokenizers`
//! crate.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A checkpoint's files, parsed as far as the format goes (the config stays text: the model
/// parses it and names what it lacks).
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub config: String,
    /// Tensors of every shard, by name.
    pub tensors: BTreeMap<String, Tensor>,
    /// `tokenizer.json`, when present.
    pub tokenizer_json: Option<Vec<u8>>,
}

/// `read(name)` gives a file of the directory, `Ok(None)` when it is absent. `origin` names
/// the directory in messages.
pub fn load_checkpoint(
    origin: &str,
    read: &mut dyn FnMut(&str) -> Result<Option<Vec<u8>>>,
) -> Result<Checkpoint> {
    let path = |name: &str| format!("{origin}/{name}");
    let text = |name: &str, bytes: Vec<u8>| {
        String::from_utf8(bytes).map_err(|_| Error::BadModelFile {
            path: path(name),
            why: "not UTF-8".into(),
        })
    };
    let config = match read("config.json")? {
        Some(b) => text("config.json", b)?,
        None => {
            return Err(Error::Missing {
                what: "file in the model directory".into(),
                name: path("config.json"),
            });
        }
    };
    let mut tensors = BTreeMap::new();
    if let Some(bytes) = read("model.safetensors")? {
        tensors = crate::io::load_weights_named(&bytes, &path("model.safetensors"))?;
    } else if let Some(index) = read("model.safetensors.index.json")? {
        let name = "model.safetensors.index.json";
        let bad = |why: String| Error::BadModelFile {
            path: path(name),
            why,
        };
        let v: Value = serde_json::from_str(&text(name, index)?).map_err(|e| bad(e.to_string()))?;
        let map = v
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("no `weight_map` object".into()))?;
        let mut shards: Vec<&str> = map.values().filter_map(Value::as_str).collect();
        shards.sort_unstable();
        shards.dedup();
        for shard in shards {
            // Shard names come from a file: refuse anything that leaves the directory.
            if shard.contains('/') || shard.contains('\\') || shard.starts_with('.') {
                return Err(bad(format!("bad shard name `{shard}`")));
            }
            let bytes = read(shard)?.ok_or_else(|| Error::Missing {
                what: format!("shard listed in {name}"),
                name: path(shard),
            })?;
            tensors.extend(crate::io::load_weights_named(&bytes, &path(shard))?);
        }
    } else {
        return Err(Error::Missing {
            what: "weights (neither model.safetensors nor model.safetensors.index.json)".into(),
            name: origin.into(),
        });
    }
    Ok(Checkpoint {
        config,
        tensors,
        tokenizer_json: read("tokenizer.json")?,
    })
}

/// [`load_checkpoint`] over files already in memory, by file name (a browser's picked files).
pub fn load_checkpoint_from_map(
    origin: &str,
    files: &BTreeMap<String, Vec<u8>>,
) -> Result<Checkpoint> {
    load_checkpoint(origin, &mut |name| Ok(files.get(name).cloned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, Vec<u8>)]) -> BTreeMap<String, Vec<u8>> {
        entries
            .iter()
            .map(|(n, b)| (String::from(*n), b.clone()))
            .collect()
    }

    fn safetensors(name: &str, values: &[f32]) -> Vec<u8> {
        let mut named = BTreeMap::new();
        named.insert(
            String::from(name),
            Tensor::from_f32(&[values.len()], values.to_vec()).unwrap(),
        );
        crate::io::save(&named).unwrap()
    }

    #[test]
    fn single_file_and_shards_load_the_same_tensors() {
        let mut rng = crate::rng::Rng::new(7);
        let a: Vec<f32> = (0..5).map(|_| rng.uniform()).collect();
        let b: Vec<f32> = (0..3).map(|_| rng.uniform()).collect();
        let index = br#"{"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}"#;
        let sharded = files(&[
            ("config.json", b"{}".to_vec()),
            ("model.safetensors.index.json", index.to_vec()),
            ("s1.safetensors", safetensors("a", &a)),
            ("s2.safetensors", safetensors("b", &b)),
        ]);
        let c = load_checkpoint_from_map("dir", &sharded).unwrap();
        assert_eq!(c.tensors["a"].to_f32_vec().unwrap(), a);
        assert_eq!(c.tensors["b"].to_f32_vec().unwrap(), b);
        assert!(c.tokenizer_json.is_none());
    }

    #[test]
    fn missing_files_are_named() {
        let e = load_checkpoint_from_map("dir", &files(&[])).unwrap_err();
        assert!(e.to_string().contains("dir/config.json"), "{e}");
        let only_config = files(&[("config.json", b"{}".to_vec())]);
        let e = load_checkpoint_from_map("dir", &only_config).unwrap_err();
        assert!(e.to_string().contains("model.safetensors"), "{e}");
        let index = br#"{"weight_map": {"a": "gone.safetensors"}}"#;
        let dangling = files(&[
            ("config.json", b"{}".to_vec()),
            ("model.safetensors.index.json", index.to_vec()),
        ]);
        let e = load_checkpoint_from_map("dir", &dangling).unwrap_err();
        assert!(e.to_string().contains("dir/gone.safetensors"), "{e}");
        let escaping = br#"{"weight_map": {"a": "../x.safetensors"}}"#;
        let bad = files(&[
            ("config.json", b"{}".to_vec()),
            ("model.safetensors.index.json", escaping.to_vec()),
        ]);
        let e = load_checkpoint_from_map("dir", &bad).unwrap_err();
        assert!(e.to_string().contains("bad shard name"), "{e}");
    }
}
