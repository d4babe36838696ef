//! `nn` layers with PyTorch parameter names, layouts and initialization.
//!
//! Parameters live in a [`ParamStore`] (name -> tensor, on the store's backend). A layer
//! registers its parameters under a prefix when built (`prefix.weight`, `prefix.bias`, ...,
//! exactly the names of the PyTorch module's `state_dict`) and keeps only their names; its
//! `forward` takes the [`Graph`] and the parameters bound to it ([`ParamStore::bind`]), so the
//! same layer trains on any backend and its gradients come back by name.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;

use crate::autograd::{Graph, Var};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::Activation;
use crate::rng::Rng;
use crate::tensor::Tensor;

/// Named parameters on one backend. See the module docs.
#[derive(Clone)]
pub struct ParamStore {
    backend: Rc<dyn Backend>,
    params: BTreeMap<String, Tensor>,
}

impl core::fmt::Debug for ParamStore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let shapes: BTreeMap<&str, &[usize]> = self
            .params
            .iter()
            .map(|(k, t)| (k.as_str(), t.shape()))
            .collect();
        f.debug_struct("ParamStore")
            .field("backend", &self.backend.name())
            .field("params", &shapes)
            .finish()
    }
}

/// `prefix.name`, or `name` for an empty prefix.
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.into()
    } else {
        format!("{prefix}.{name}")
    }
}

impl ParamStore {
    /// An empty store whose parameters live on `backend`.
    pub fn new(backend: Rc<dyn Backend>) -> ParamStore {
        ParamStore {
            backend,
            params: BTreeMap::new(),
        }
    }
    /// The backend the parameters live on.
    pub fn backend(&self) -> &Rc<dyn Backend> {
        &self.backend
    }

    fn check_device(&self, op: &'static str, t: &Tensor) -> Result<()> {
        t.check_device(op, self.backend.device())
    }

    /// Adds a parameter already on the store's device. A name may be registered once.
    pub fn insert(&mut self, name: &str, t: Tensor) -> Result<()> {
        self.check_device("ParamStore::insert", &t)?;
        if self.params.contains_key(name) {
            return Err(Error::Autograd {
                why: format!("parameter `{name}` is registered twice"),
            });
        }
        self.params.insert(name.into(), t);
        Ok(())
    }

    /// Uploads a host tensor to the store's device and adds it under `name`.
    pub fn register(&mut self, name: &str, host: Tensor) -> Result<()> {
        if self.params.contains_key(name) {
            return Err(Error::Autograd {
                why: format!("parameter `{name}` is registered twice"),
            });
        }
        let t = self.backend.upload(&host)?;
        self.insert(name, t)
    }

    /// Replaces the value of an existing parameter (same shape, same device): optimizers use it.
    pub fn set(&mut self, name: &str, t: Tensor) -> Result<()> {
        self.check_device("ParamStore::set", &t)?;
        let old = self.get(name)?;
        if old.shape() != t.shape() {
            return Err(Error::mismatch("ParamStore::set", old.shape(), t.shape()));
        }
        self.params.insert(name.into(), t);
        Ok(())
    }

    /// The parameter `name`, or [`Error::Missing`].
    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.params.get(name).ok_or_else(|| Error::Missing {
            what: "parameter".into(),
            name: name.into(),
        })
    }
    /// True when `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.params.contains_key(name)
    }
    /// Names and tensors, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Tensor)> {
        self.params.iter()
    }
    /// Names, in order.
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.params.keys()
    }
    /// Number of parameters (tensors).
    pub fn len(&self) -> usize {
        self.params.len()
    }
    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }
    /// Total number of scalar parameters.
    pub fn numel(&self) -> usize {
        self.params.values().map(Tensor::numel).sum()
    }

    /// Binds every parameter into `g` as a named parameter leaf (constants in inference mode),
    /// so [`crate::autograd::Gradients::get_named`] reports gradients by these names.
    pub fn bind(&self, g: &Graph) -> Result<Params> {
        let mut vars = BTreeMap::new();
        for (name, t) in &self.params {
            vars.insert(name.clone(), g.param_named(name, t.clone())?);
        }
        Ok(Params { vars })
    }

    /// Every parameter copied to the host, by name.
    pub async fn to_host(&self) -> Result<BTreeMap<String, Tensor>> {
        let mut out = BTreeMap::new();
        for (name, t) in &self.params {
            out.insert(name.clone(), self.backend.download(t).await?);
        }
        Ok(out)
    }

    /// The parameters as a safetensors file, by name.
    pub async fn save(&self) -> Result<Vec<u8>> {
        let host = self.to_host().await?;
        crate::io::save(&host)
    }

    /// Loads every registered parameter by name from a safetensors file. Every expected name must
    /// be present ([`Error::Missing`]) with the registered shape ([`Error::ShapeMismatch`]);
    /// extra tensors in the file are ignored. On any error the store is left untouched.
    pub fn load(&mut self, bytes: &[u8]) -> Result<()> {
        let file = crate::io::load(bytes)?;
        self.load_map(&file)
    }

    /// Loads every registered parameter by name from host tensors (a parsed file). Every expected
    /// name must be present ([`Error::Missing`]) with the registered shape and dtype
    /// ([`Error::ShapeMismatch`]); extra tensors are ignored. On any error the store is left
    /// untouched.
    pub fn load_map(&mut self, file: &BTreeMap<String, Tensor>) -> Result<()> {
        let mut fresh = BTreeMap::new();
        for (name, old) in &self.params {
            let t = file.get(name).ok_or_else(|| Error::Missing {
                what: "tensor in parameter file".into(),
                name: name.clone(),
            })?;
            if t.shape() != old.shape() {
                return Err(Error::mismatch("ParamStore::load", old.shape(), t.shape()));
            }
            if t.dtype() != old.dtype() {
                return Err(Error::DTypeMismatch {
                    op: "ParamStore::load",
                    tensor: name.clone(),
                    expected: old.dtype().name(),
                    got: t.dtype(),
                });
            }
            fresh.insert(name.clone(), self.backend.upload(t)?);
        }
        self.params = fresh;
        Ok(())
    }
}

/// Parameters of a [`ParamStore`] bound into one [`Graph`], by name.
#[derive(Debug, Clone)]
pub struct Params {
    vars: BTreeMap<String, Var>,
}

impl Params {
    /// The bound parameter `name`, or [`Error::Missing`].
    pub fn get(&self, name: &str) -> Result<&Var> {
        self.vars.get(name).ok_or_else(|| Error::Missing {
            what: "bound parameter".into(),
            name: name.into(),
        })
    }
    /// Names and vars, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Var)> {
        self.vars.iter()
    }
    /// Whether a parameter `name` is bound.
    pub fn contains(&self, name: &str) -> bool {
        self.vars.contains_key(name)
    }
}

/// `uniform(-bound, bound)` of `shape`, PyTorch's default init for linear and recurrent layers.
fn uniform(rng: &mut Rng, shape: &[usize], bound: f32) -> Result<Tensor> {
    rng.uniform_tensor(shape, -bound, bound)
}

fn inv_sqrt(op: &'static str, what: &str, n: usize) -> Result<f32> {
    if n == 0 {
        return Err(Error::Empty {
            op,
            tensor: what.into(),
        });
    }
    Ok(Real::sqrt(n as f32).recip())
}

/// `torch.nn.Linear`: `y = x W^T + b`, weight `[out, in]`, bias `[out]`.
#[derive(Debug, Clone)]
pub struct Linear {
    /// Name of the weight, `prefix.weight`.
    pub weight: String,
    /// Name of the bias, `prefix.bias`, when the layer has one.
    pub bias: Option<String>,
    pub in_features: usize,
    pub out_features: usize,
}

impl Linear {
    /// Registers `prefix.weight` (and `prefix.bias`), both `uniform(-1/sqrt(in), 1/sqrt(in))`
    /// as in PyTorch (`kaiming_uniform(a=sqrt(5))` reduces to that bound).
    pub fn new(
        store: &mut ParamStore,
        prefix: &str,
        in_features: usize,
        out_features: usize,
        bias: bool,
        rng: &mut Rng,
    ) -> Result<Linear> {
        let k = inv_sqrt("Linear", "in_features", in_features)?;
        if out_features == 0 {
            return Err(Error::Empty {
                op: "Linear",
                tensor: "out_features".into(),
            });
        }
        let weight = join(prefix, "weight");
        store.register(&weight, uniform(rng, &[out_features, in_features], k)?)?;
        let bias = if bias {
            let name = join(prefix, "bias");
            store.register(&name, uniform(rng, &[out_features], k)?)?;
            Some(name)
        } else {
            None
        };
        Ok(Linear {
            weight,
            bias,
            in_features,
            out_features,
        })
    }

    /// x `[..., in]` -> `[..., out]`: one `linear` op (with a bias), else one matmul with
    /// `trans_b`.
    pub fn forward(&self, g: &Graph, p: &Params, x: &Var) -> Result<Var> {
        self.forward_act(g, p, x, Activation::None)
    }

    /// `act(linear(x))`, the activation fused into the same op when the layer has a bias (a
    /// device then runs it in the matmul's epilogue).
    pub fn forward_act(&self, g: &Graph, p: &Params, x: &Var, act: Activation) -> Result<Var> {
        if x.shape().last() != Some(&self.in_features) {
            return Err(Error::bad_shape(
                "Linear",
                "x",
                x.shape(),
                format!("last dim must be in_features = {}", self.in_features),
            ));
        }
        let w = p.get(&self.weight)?;
        if let Some(b) = &self.bias {
            return g.linear(x, w, p.get(b)?, act);
        }
        let y = g.matmul_t(x, w, false, true)?;
        match act {
            Activation::None => Ok(y),
            Activation::Relu => g.relu(&y),
            Activation::Tanh => g.tanh(&y),
            Activation::Sigmoid => g.sigmoid(&y),
        }
    }
}

/// `torch.nn.Embedding`: weight `[num_embeddings, dim]`, init `normal(0, 1)`.
#[derive(Debug, Clone)]
pub struct Embedding {
    /// Name of the weight, `prefix.weight`.
    pub weight: String,
    pub num_embeddings: usize,
    pub dim: usize,
}

impl Embedding {
    /// Registers `prefix.weight` with PyTorch's `normal(0, 1)` init.
    pub fn new(
        store: &mut ParamStore,
        prefix: &str,
        num_embeddings: usize,
        dim: usize,
        rng: &mut Rng,
    ) -> Result<Embedding> {
        if num_embeddings == 0 || dim == 0 {
            return Err(Error::bad_shape(
                "Embedding",
                "weight",
                &[num_embeddings, dim],
                "needs at least one row and one column",
            ));
        }
        let weight = join(prefix, "weight");
        store.register(
            &weight,
            rng.normal_tensor(&[num_embeddings, dim], 0.0, 1.0)?,
        )?;
        Ok(Embedding {
            weight,
            num_embeddings,
            dim,
        })
    }

    /// Integer ids `[...]` -> `[..., dim]`.
    pub fn forward(&self, g: &Graph, p: &Params, ids: &Var) -> Result<Var> {
        g.embedding(ids, p.get(&self.weight)?)
    }
}

/// `torch.nn.LayerNorm` over the last dim: weight (ones) and bias (zeros) `[dim]`.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    pub weight: String,
    pub bias: String,
    pub dim: usize,
    pub eps: f32,
}

impl LayerNorm {
    /// Registers `prefix.weight` = 1 and `prefix.bias` = 0; PyTorch's default eps is
    /// [`LAYER_NORM_EPS`](crate::op::LAYER_NORM_EPS).
    pub fn new(store: &mut ParamStore, prefix: &str, dim: usize, eps: f32) -> Result<LayerNorm> {
        if dim == 0 {
            return Err(Error::Empty {
                op: "LayerNorm",
                tensor: "dim".into(),
            });
        }
        let weight = join(prefix, "weight");
        let bias = join(prefix, "bias");
        store.register(&weight, Tensor::full(&[dim], 1.0)?)?;
        store.register(&bias, Tensor::zeros(&[dim])?)?;
        Ok(LayerNorm {
            weight,
            bias,
            dim,
            eps,
        })
    }

    /// Normalizes x `[..., dim]`.
    pub fn forward(&self, g: &Graph, p: &Params, x: &Var) -> Result<Var> {
        g.layer_norm(x, p.get(&self.weight)?, p.get(&self.bias)?, self.eps)
    }
}

/// RMS norm over the last dim (`torch.nn.RMSNorm`): weight (ones) `[dim]`.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    pub weight: String,
    pub dim: usize,
    pub eps: f32,
}

impl RmsNorm {
    /// Registers `prefix.weight` = 1.
    pub fn new(store: &mut ParamStore, prefix: &str, dim: usize, eps: f32) -> Result<RmsNorm> {
        if dim == 0 {
            return Err(Error::Empty {
                op: "RmsNorm",
                tensor: "dim".into(),
            });
        }
        let weight = join(prefix, "weight");
        store.register(&weight, Tensor::full(&[dim], 1.0)?)?;
        Ok(RmsNorm { weight, dim, eps })
    }

    /// Normalizes x `[..., dim]`.
    pub fn forward(&self, g: &Graph, p: &Params, x: &Var) -> Result<Var> {
        g.rms_norm(x, p.get(&self.weight)?, self.eps)
    }
}

/// One-layer `torch.nn.GRU` (sequence-first): `weight_ih_l0` `[3H, I]`, `weight_hh_l0`
/// `[3H, H]`, `bias_ih_l0` and `bias_hh_l0` `[3H]`, gates in the order r, z, n.
#[derive(Debug, Clone)]
pub struct Gru {
    pub weight_ih: String,
    pub weight_hh: String,
    pub bias_ih: String,
    pub bias_hh: String,
    pub input_size: usize,
    pub hidden_size: usize,
}

impl Gru {
    /// Registers the four `_l0` parameters, all `uniform(-1/sqrt(H), 1/sqrt(H))`: PyTorch's
    /// recurrent layers take the bound from the hidden size, not the input size.
    pub fn new(
        store: &mut ParamStore,
        prefix: &str,
        input_size: usize,
        hidden_size: usize,
        rng: &mut Rng,
    ) -> Result<Gru> {
        let k = inv_sqrt("Gru", "hidden_size", hidden_size)?;
        if input_size == 0 {
            return Err(Error::Empty {
                op: "Gru",
                tensor: "input_size".into(),
            });
        }
        let h3 = 3 * hidden_size;
        let gru = Gru {
            weight_ih: join(prefix, "weight_ih_l0"),
            weight_hh: join(prefix, "weight_hh_l0"),
            bias_ih: join(prefix, "bias_ih_l0"),
            bias_hh: join(prefix, "bias_hh_l0"),
            input_size,
            hidden_size,
        };
        store.register(&gru.weight_ih, uniform(rng, &[h3, input_size], k)?)?;
        store.register(&gru.weight_hh, uniform(rng, &[h3, hidden_size], k)?)?;
        store.register(&gru.bias_ih, uniform(rng, &[h3], k)?)?;
        store.register(&gru.bias_hh, uniform(rng, &[h3], k)?)?;
        Ok(gru)
    }

    /// x `[seq, batch, input]`, h0 `[batch, hidden]` (zeros when `None`) ->
    /// `(output [seq, batch, hidden], h_n [batch, hidden])`, through the `gru_sequence` op.
    pub fn forward(&self, g: &Graph, p: &Params, x: &Var, h0: Option<&Var>) -> Result<(Var, Var)> {
        let zeros;
        let h0 = match h0 {
            Some(h) => h,
            None => {
                let batch = match x.shape() {
                    [_, b, _] => *b,
                    s => {
                        return Err(Error::bad_shape(
                            "Gru",
                            "x",
                            s,
                            "expected [seq, batch, input]",
                        ));
                    }
                };
                zeros = g.constant(g.backend().zeros(&[batch, self.hidden_size])?)?;
                &zeros
            }
        };
        g.gru_sequence(
            x,
            h0,
            p.get(&self.weight_ih)?,
            p.get(&self.weight_hh)?,
            p.get(&self.bias_ih)?,
            p.get(&self.bias_hh)?,
        )
    }
}

#[cfg(test)]
mod tests {
    // wasm-pack test runs these in the browser too.
    use super::*;
    use crate::backend::CpuBackend;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn store() -> ParamStore {
        ParamStore::new(Rc::new(CpuBackend::new()))
    }

    #[test]
    fn pytorch_names_shapes_and_init_bounds() {
        let mut s = store();
        let mut rng = Rng::new(3);
        let lin = Linear::new(&mut s, "fc1", 7, 13, true, &mut rng).unwrap();
        Embedding::new(&mut s, "emb", 11, 5, &mut rng).unwrap();
        LayerNorm::new(&mut s, "ln", 5, crate::op::LAYER_NORM_EPS).unwrap();
        RmsNorm::new(&mut s, "", 5, crate::op::RMS_NORM_EPS).unwrap();
        let gru = Gru::new(&mut s, "rnn", 3, 4, &mut rng).unwrap();
        let names: Vec<&str> = s.names().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "emb.weight",
                "fc1.bias",
                "fc1.weight",
                "ln.bias",
                "ln.weight",
                "rnn.bias_hh_l0",
                "rnn.bias_ih_l0",
                "rnn.weight_hh_l0",
                "rnn.weight_ih_l0",
                "weight",
            ]
        );
        assert_eq!(lin.weight, "fc1.weight");
        assert_eq!(s.get("fc1.weight").unwrap().shape(), &[13, 7]);
        assert_eq!(s.get("fc1.bias").unwrap().shape(), &[13]);
        assert_eq!(s.get(&gru.weight_ih).unwrap().shape(), &[12, 3]);
        assert_eq!(s.get(&gru.weight_hh).unwrap().shape(), &[12, 4]);
        assert_eq!(s.get(&gru.bias_hh).unwrap().shape(), &[12]);
        let bound = 1.0 / 7f32.sqrt();
        let w = s.get("fc1.weight").unwrap().to_f32_vec().unwrap();
        assert!(w.iter().all(|x| x.abs() <= bound));
        // Spread over the interval, not a constant.
        assert!(w.iter().any(|x| *x > bound * 0.5) && w.iter().any(|x| *x < -bound * 0.5));
        let gb = 1.0 / 4f32.sqrt();
        let gw = s.get("rnn.weight_ih_l0").unwrap().to_f32_vec().unwrap();
        assert!(gw.iter().all(|x| x.abs() <= gb) && gw.iter().any(|x| x.abs() > 1.0 / 3.0));
        assert_eq!(s.get("ln.weight").unwrap().to_f32_vec().unwrap(), [1.0; 5]);
        assert_eq!(s.get("ln.bias").unwrap().to_f32_vec().unwrap(), [0.0; 5]);
        assert_eq!(s.numel(), 13 * 7 + 13 + 55 + 10 + 5 + 12 * 3 + 12 * 4 + 24);
    }

    #[test]
    fn registration_errors() {
        let mut s = store();
        let mut rng = Rng::new(0);
        Linear::new(&mut s, "a", 2, 2, false, &mut rng).unwrap();
        assert!(!s.contains("a.bias"));
        assert!(matches!(
            Linear::new(&mut s, "a", 2, 2, false, &mut rng),
            Err(Error::Autograd { .. })
        ));
        assert!(matches!(
            Linear::new(&mut s, "b", 0, 2, true, &mut rng),
            Err(Error::Empty { .. })
        ));
        assert!(matches!(s.get("nope"), Err(Error::Missing { .. })));
        assert!(matches!(
            s.set("a.weight", Tensor::zeros(&[3]).unwrap()),
            Err(Error::ShapeMismatch { .. })
        ));
    }

    #[test]
    fn load_checks_names_and_shapes_and_is_all_or_nothing() {
        let mut s = store();
        s.register("x", Tensor::full(&[2], 1.0).unwrap()).unwrap();
        s.register("y", Tensor::full(&[3], 2.0).unwrap()).unwrap();
        let mut file = BTreeMap::new();
        file.insert("x".into(), Tensor::full(&[2], 5.0).unwrap());
        // `y` missing: error, and `x` is not half-loaded.
        let e = s.load_map(&file).unwrap_err();
        assert_eq!(
            e,
            Error::Missing {
                what: "tensor in parameter file".into(),
                name: "y".into()
            }
        );
        assert_eq!(s.get("x").unwrap().to_f32_vec().unwrap(), [1.0, 1.0]);
        file.insert("y".into(), Tensor::full(&[4], 5.0).unwrap());
        assert!(matches!(
            s.load_map(&file),
            Err(Error::ShapeMismatch { .. })
        ));
        assert_eq!(s.get("x").unwrap().to_f32_vec().unwrap(), [1.0, 1.0]);
        file.insert("y".into(), Tensor::full(&[3], 6.0).unwrap());
        file.insert("extra".into(), Tensor::full(&[1], 6.0).unwrap());
        s.load_map(&file).unwrap();
        assert_eq!(s.get("x").unwrap().to_f32_vec().unwrap(), [5.0, 5.0]);
        assert_eq!(s.get("y").unwrap().to_f32_vec().unwrap(), [6.0; 3]);
        assert!(!s.contains("extra"));
    }
}
