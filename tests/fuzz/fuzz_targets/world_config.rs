//! The world model's config reader (`WorldModel::load`: `WorldConfig::infer` from the tensor
//! names and shapes, then the parameters) on a small valid checkpoint with arbitrary edits:
//! tensors dropped, renamed, reshaped, added, values made NaN. Never a panic; an unedited
//! checkpoint loads with the config it was made with.
#![no_main]

use std::collections::BTreeMap;
use std::rc::Rc;

use arbitrary::Arbitrary;
use kernels_core::backend::now_or_never;
use kernels_core::models::world::{WorldConfig, WorldModel};
use kernels_core::nn::ParamStore;
use kernels_core::{Backend, CpuBackend, Rng, Tensor, io};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum Edit {
    Drop(u8),
    Rename(u8, String),
    Reshape(u8, Vec<u8>),
    Add(String, Vec<u8>),
    Poison(u8, u16),
}

#[derive(Debug, Arbitrary)]
struct Input {
    features: u8,
    embed: u8,
    hidden: u8,
    members: u8,
    edits: Vec<Edit>,
}

fn zeros(dims: &[u8]) -> Option<Tensor> {
    let shape: Vec<usize> = dims.iter().take(4).map(|d| *d as usize % 9).collect();
    let n: usize = shape.iter().product();
    (n <= 512).then(|| Tensor::from_f32(&shape, vec![0.0; n]).ok())?
}

fuzz_target!(|input: Input| {
    let config = WorldConfig {
        features: input.features as usize % 6 + 1,
        embed: input.embed as usize % 6 + 1,
        hidden: input.hidden as usize % 6 + 1,
        members: input.members as usize % 3 + 1,
    };
    let backend: Rc<dyn Backend> = Rc::new(CpuBackend::new());
    let mut store = ParamStore::new(backend.clone());
    WorldModel::new(&mut store, config, &mut Rng::new(0)).expect("a small model builds");
    let mut host: BTreeMap<String, Tensor> = now_or_never(store.to_host())
        .expect("CPU tensors are ready")
        .expect("to_host");
    let unedited = input.edits.is_empty();
    let nth = |host: &BTreeMap<String, Tensor>, i: u8| -> Option<String> {
        host.keys().nth(i as usize % host.len().max(1)).cloned()
    };
    // A few edits per input: many large added tensors only make each run slow.
    for e in input.edits.iter().take(16) {
        match e {
            Edit::Drop(i) => {
                if let Some(k) = nth(&host, *i) {
                    host.remove(&k);
                }
            }
            Edit::Rename(i, to) => {
                if let Some(k) = nth(&host, *i)
                    && let Some(t) = host.remove(&k)
                {
                    host.insert(to.clone(), t);
                }
            }
            Edit::Reshape(i, dims) => {
                if let (Some(k), Some(t)) = (nth(&host, *i), zeros(dims)) {
                    host.insert(k, t);
                }
            }
            Edit::Add(name, dims) => {
                if let Some(t) = zeros(dims) {
                    host.insert(name.clone(), t);
                }
            }
            Edit::Poison(i, at) => {
                if let Some(k) = nth(&host, *i)
                    && let Some(t) = host.get(&k)
                    && let Ok(mut v) = t.to_f32_vec()
                    && !v.is_empty()
                {
                    let n = v.len();
                    v[*at as usize % n] = f32::NAN;
                    if let Ok(p) = Tensor::from_f32(t.shape(), v) {
                        host.insert(k, p);
                    }
                }
            }
        }
    }
    let Ok(bytes) = io::save(&host) else {
        return;
    };
    match WorldModel::load(backend, &bytes) {
        Ok((model, _)) if unedited => assert_eq!(model.config, config),
        Ok(_) => {}
        Err(e) => assert!(!unedited, "an unedited checkpoint failed to load: {e}"),
    }
});
