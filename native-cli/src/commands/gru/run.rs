//! `kernels gru run`: a plain one-layer GRU with PyTorch `nn.GRU` weights, run on safetensors
//! files; every shape is checked before anything runs, and nothing is written on any error.

use std::collections::BTreeMap;
use std::path::Path;

use kernels_core::{Backend, Tensor, io};
use kernels_gpu::{BackendChoice, select_backend};

use crate::atomic_write::write_atomically;
use crate::{CliError, CliResult, emit, fail};

/// The parameters of a one-layer `torch.nn.GRU`, by their `state_dict` names.
pub const GRU_WEIGHTS: [&str; 4] = ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"];

fn shape_error(file: &str, name: &str, t: &Tensor, want: String) -> CliError {
    fail(format!(
        "gru run: {file} tensor `{name}` has shape {:?}, expected {want}",
        t.shape()
    ))
}

fn only_names(
    file: &str,
    map: &BTreeMap<String, Tensor>,
    allowed: &[&str],
    what: &str,
) -> CliResult<()> {
    let extra: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| !allowed.contains(k))
        .collect();
    if extra.is_empty() {
        Ok(())
    } else {
        Err(fail(format!(
            "gru run: {file} holds unexpected tensor(s) {extra:?}; {what}"
        )))
    }
}

fn get<'a>(file: &str, map: &'a BTreeMap<String, Tensor>, name: &str) -> CliResult<&'a Tensor> {
    map.get(name)
        .ok_or_else(|| fail(format!("gru run: {file} has no tensor `{name}`")))
}

/// A one-layer GRU with `nn.GRU` weights (`weight_ih_l0` `[3H, I]`, `weight_hh_l0` `[3H, H]`,
/// `bias_ih_l0`, `bias_hh_l0` `[3H]`) over `x` `[seq, batch, I]` from `h0` `[1, batch, H]`
/// (zeros when absent): `output` `[seq, batch, H]` and `h_n` `[1, batch, H]`, as PyTorch
/// returns them. Every shape is checked first, with an error naming the tensor.
pub fn run_gru(
    backend: &dyn Backend,
    weights: &BTreeMap<String, Tensor>,
    inputs: &BTreeMap<String, Tensor>,
) -> CliResult<BTreeMap<String, Tensor>> {
    let (wf, xf) = ("--weights", "--input");
    only_names(
        wf,
        weights,
        &GRU_WEIGHTS,
        "a one-layer nn.GRU (bias=True) state_dict holds exactly weight_ih_l0, weight_hh_l0, \
         bias_ih_l0, bias_hh_l0",
    )?;
    only_names(xf, inputs, &["x", "h0"], "expected x and optionally h0")?;
    let w_ih = get(wf, weights, "weight_ih_l0")?;
    let (gates, input) = match w_ih.shape() {
        &[g, i] if g > 0 && g % 3 == 0 && i > 0 => (g, i),
        _ => {
            return Err(shape_error(
                wf,
                "weight_ih_l0",
                w_ih,
                "[3 * hidden, input] (non-empty)".into(),
            ));
        }
    };
    let hidden = gates / 3;
    let w_hh = get(wf, weights, "weight_hh_l0")?;
    if w_hh.shape() != [gates, hidden] {
        return Err(shape_error(
            wf,
            "weight_hh_l0",
            w_hh,
            format!("[{gates}, {hidden}] (hidden {hidden} from weight_ih_l0)"),
        ));
    }
    let (b_ih, b_hh) = (
        get(wf, weights, "bias_ih_l0")?,
        get(wf, weights, "bias_hh_l0")?,
    );
    for (n, b) in [("bias_ih_l0", b_ih), ("bias_hh_l0", b_hh)] {
        if b.shape() != [gates] {
            return Err(shape_error(wf, n, b, format!("[{gates}]")));
        }
    }
    let x = get(xf, inputs, "x")?;
    let (seq, batch) = match x.shape() {
        &[s, b, i] if i == input && s > 0 && b > 0 => (s, b),
        _ => {
            return Err(shape_error(
                xf,
                "x",
                x,
                format!("[seq, batch, {input}] (input size {input} from weight_ih_l0, non-empty)"),
            ));
        }
    };
    let h0 = match inputs.get("h0") {
        Some(h) if h.shape() == [1, batch, hidden] => h.reshape(&[batch, hidden])?,
        Some(h) => {
            return Err(shape_error(
                xf,
                "h0",
                h,
                format!(
                    "[1, {batch}, {hidden}] (one layer, batch {batch} from x, hidden {hidden})"
                ),
            ));
        }
        None => Tensor::zeros(&[batch, hidden])?,
    };
    for (file, name, t) in [
        (xf, "x", x),
        (xf, "h0", &h0),
        (wf, "weight_ih_l0", w_ih),
        (wf, "weight_hh_l0", w_hh),
        (wf, "bias_ih_l0", b_ih),
        (wf, "bias_hh_l0", b_hh),
    ] {
        if let Some((i, v)) = t.as_f32()?.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(fail(format!(
                "gru run: {file} tensor `{name}` holds {v} at flat index {i}"
            )));
        }
    }
    let op = kernels_core::Op::GruSequence;
    let outs = crate::parity::run_on(
        backend,
        &op,
        kernels_core::Direction::Forward,
        &[x, &h0, w_ih, w_hh, b_ih, b_hh],
    )?;
    let [output, h_n]: [Tensor; 2] = outs
        .try_into()
        .map_err(|_| fail("gru run: gru_sequence did not return (output, h_n)"))?;
    debug_assert_eq!(output.shape(), [seq, batch, hidden]);
    let mut out = BTreeMap::new();
    out.insert("output".to_string(), output);
    out.insert("h_n".to_string(), h_n.reshape(&[1, batch, hidden])?);
    Ok(out)
}

fn read_tensors(flag: &str, path: &Path) -> CliResult<BTreeMap<String, Tensor>> {
    let bytes = std::fs::read(path).map_err(|e| {
        fail(format!(
            "gru run: cannot read {flag} {}: {e}",
            path.display()
        ))
    })?;
    io::load(&bytes).map_err(|e| {
        fail(format!(
            "gru run: {flag} {} is not a valid safetensors file: {e}",
            path.display()
        ))
    })
}

/// `kernels gru run`: reads both files, runs [`run_gru`], writes `out` atomically (nothing is
/// written on any error). Returns a one-line summary.
pub fn run_files(
    weights: &Path,
    input: &Path,
    out: &Path,
    backend: Option<&str>,
) -> CliResult<String> {
    let w = read_tensors("--weights", weights)?;
    let x = read_tensors("--input", input)?;
    let selected = select_backend(BackendChoice::from_arg(backend)?)?;
    let result = run_gru(selected.backend.as_ref(), &w, &x)?;
    let bytes = io::save(&result)?;
    write_atomically(out, &bytes)
        .map_err(|e| fail(format!("gru run: cannot write {}: {e}", out.display())))?;
    Ok(format!(
        "gru_sequence on {}: wrote output{:?}, h_n{:?} to {}\n",
        selected.backend.name(),
        result.get("output").map(Tensor::shape).unwrap_or_default(),
        result.get("h_n").map(Tensor::shape).unwrap_or_default(),
        out.display()
    ))
}

/// Runs `kernels gru run` and prints its summary.
pub fn run(weights: &Path, input: &Path, out: &Path, backend: Option<&str>) -> CliResult<()> {
    emit(&run_files(weights, input, out, backend)?)
}
