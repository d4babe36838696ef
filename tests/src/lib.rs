//! Cross-crate integration tests live in `tests/tests/`; this library is their shared harness.
//!
//! One test body, every backend: [`assert_parity`] runs every parity case, forward and backward,
//! on a backend against the CPU reference and fails with a list of every case outside its budget.
//! The fast CPU backend runs it today; GPU backends join by calling it with their backend.

use kernels_core::parity::all_cases;
use kernels_core::{Backend, Result};
use native_cli::parity::{Row, check_all};

/// Runs every parity case on `backend` (including the > 65,535-workgroup cases when `large`) and
/// returns the rows.
pub fn parity_rows(backend: &dyn Backend, seed: u64, large: bool) -> Result<Vec<Row>> {
    Ok(check_all(&all_cases(seed, large)?, backend))
}

/// The failures among `rows`, one line each: backend, op, direction, shapes and what went wrong.
pub fn failures(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter_map(|r| {
            r.failure()
                .map(|why| format!("{} {} {} {}: {why}", r.backend, r.op, r.dir.name(), r.shape))
        })
        .collect()
}

/// Every parity case on `backend` within budget, or an `Err` listing each one that is not.
pub fn assert_parity(
    backend: &dyn Backend,
    seed: u64,
    large: bool,
) -> std::result::Result<usize, String> {
    let rows = parity_rows(backend, seed, large).map_err(|e| e.to_string())?;
    let bad = failures(&rows);
    if bad.is_empty() {
        Ok(rows.len())
    } else {
        Err(format!(
            "{} of {} parity checks on {} failed:\n  {}",
            bad.len(),
            rows.len(),
            backend.name(),
            bad.join("\n  ")
        ))
    }
}
