//! `kernels parity`: every parity case, forward and backward, on one backend against
//! `CpuBackend::reference()`, as a table or as one JSON document. Fails when any check fails,
//! including ops the backend does not support (those are failed rows carrying the error).

use kernels_core::parity::all_cases;
use kernels_gpu::{BackendChoice, Counters, Selected, select_backend};

use crate::format::table;
use crate::parity::{Row, check_all};
use crate::{CliResult, emit, emit_json, fail};

/// Options of `kernels parity`.
#[derive(Debug, Clone)]
pub struct ParityOptions {
    /// `cpu`, `wgpu` or `auto` (None: `$KERNELS_BACKEND`, else auto).
    pub backend: Option<String>,
    pub json: bool,
    pub seed: u64,
    /// Also the cases above 65,535 workgroups.
    pub large: bool,
}

/// One row as the JSON object `{"op","dir","shape","max_abs_err","max_rel_err","budget","pass"}`
/// plus `"error"` (null when the run succeeded) and `"k"` (the reduced length that scaled the
/// budget). Non-finite errors (NaN/Inf position mismatches) are null.
pub fn row_json(r: &Row) -> serde_json::Value {
    let ran = r.error.is_none() && !r.outputs.is_empty();
    let num = |x: f64| {
        if ran && x.is_finite() {
            serde_json::json!(x)
        } else {
            serde_json::Value::Null
        }
    };
    serde_json::json!({
        "op": r.op,
        "dir": r.dir.name(),
        "shape": r.shape,
        "max_abs_err": num(r.max_abs_err()),
        "max_rel_err": num(r.max_rel_err()),
        "budget": {"atol": r.atol, "rtol": r.rtol, "k": r.k},
        "pass": r.pass(),
        "error": r.failure().filter(|_| !r.pass()),
    })
}

/// The JSON document `kernels parity --json` prints.
pub fn report_json(chosen: &Selected, seed: u64, rows: &[Row]) -> serde_json::Value {
    let passed = rows.iter().filter(|r| r.pass()).count();
    serde_json::json!({
        "backend": chosen.backend.name(),
        "reason": chosen.reason,
        "reference": "cpu-reference",
        "seed": seed,
        "rows": rows.iter().map(row_json).collect::<Vec<_>>(),
        "passed": passed,
        "failed": rows.len() - passed,
        "counters": chosen.gpu.as_ref().map(|g| counters_json(&g.counters())),
    })
}

/// The counters as a JSON object (the names of [`Counters`]' fields).
pub fn counters_json(c: &Counters) -> serde_json::Value {
    serde_json::json!({
        "dispatches": c.dispatches,
        "submits": c.submits,
        "bytes_uploaded": c.bytes_uploaded,
        "bytes_downloaded": c.bytes_downloaded,
        "buffers_created": c.buffers_created,
        "buffers_reused": c.buffers_reused,
        "pool_bytes": c.pool_bytes,
        "buffers_evicted": c.buffers_evicted,
    })
}

/// The counters as one line of text.
pub fn counters_text(c: &Counters) -> String {
    format!(
        "dispatches {}, submits {}, uploaded {} B, downloaded {} B, buffers created {}, reused {}, evicted {}, pool {} B",
        c.dispatches,
        c.submits,
        c.bytes_uploaded,
        c.bytes_downloaded,
        c.buffers_created,
        c.buffers_reused,
        c.buffers_evicted,
        c.pool_bytes
    )
}

/// The backend the parity cases run on: `backend` itself, except that the CPU's fast paths
/// take f32 activations in products with a quantized weight (its default 8-bit activations are
/// checked against their own budgets in kernels-core's qdot tests, not the ops' f32 budgets).
pub fn parity_backend(
    backend: &std::rc::Rc<dyn kernels_core::Backend>,
) -> std::rc::Rc<dyn kernels_core::Backend> {
    if backend.device() == kernels_core::DeviceId::CPU {
        std::rc::Rc::new(kernels_core::CpuBackend::new().with_exact_activations(true))
    } else {
        backend.clone()
    }
}

/// Runs `kernels parity`.
pub fn run(opts: &ParityOptions) -> CliResult<()> {
    let chosen = select_backend(BackendChoice::from_arg(opts.backend.as_deref())?)?;
    let cases = all_cases(opts.seed, opts.large)?;
    let rows = check_all(&cases, parity_backend(&chosen.backend).as_ref());
    let failed: Vec<&Row> = rows.iter().filter(|r| !r.pass()).collect();
    if opts.json {
        let doc = report_json(&chosen, opts.seed, &rows);
        emit_json(&doc)?;
    } else {
        let mut s = format!(
            "kernels parity: {} cases of {} ops on {} ({}) against cpu-reference, seed {}\n\n",
            cases.len(),
            kernels_core::OpKind::ALL.len(),
            chosen.backend.name(),
            chosen.reason,
            opts.seed
        );
        s.push_str(&table(&rows, false));
        s.push_str(&format!(
            "\n{}/{} checks within budget\n",
            rows.len() - failed.len(),
            rows.len()
        ));
        if let Some(g) = &chosen.gpu {
            s.push_str(&format!("counters: {}\n", counters_text(&g.counters())));
        }
        if !failed.is_empty() {
            s.push_str("\nfailures:\n");
            for r in &failed {
                s.push_str(&format!(
                    "  {} {} {}: {}\n",
                    r.op,
                    r.dir.name(),
                    r.shape,
                    r.failure().unwrap_or_default()
                ));
            }
        }
        emit(&s)?;
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(fail(format!(
            "parity: {} of {} checks failed on {}",
            failed.len(),
            rows.len(),
            chosen.backend.name()
        )))
    }
}
