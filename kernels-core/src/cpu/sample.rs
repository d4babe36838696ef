//! Next-token sampling: logits `[rows, vocab]` and one uniform `u` in `[0, 1)` per row ->
//! i32 ids `[rows]`.
//!
//! The definition every backend follows (Hugging Face's warpers, stated without sorting so a
//! GPU can compute it with reductions over one row):
//! - `temperature = 0`: the first maximum (argmax).
//! - Weights `w_i = exp((x_i - max) / temperature)`.
//! - top-k (`0 < k < vocab`): keep `x_i >= t_k`, the k-th largest logit counted with
//!   multiplicity; ties at the boundary are all kept (as `TopKLogitsWarper`).
//! - top-p (`< 1`): keep token `i` when the kept mass of strictly more likely tokens,
//!   `sum_{x_j > x_i} w_j`, is below `top_p` times the kept mass (the most likely always is).
//! - Draw: in index order, the first kept token whose running sum of weights exceeds
//!   `u * sum(kept w)`; rounding that never exceeds it picks the last kept token.
//! - A row with a NaN picks its first NaN, as argmax does.
//!
//! Sums are f32 in the reference's order; a backend summing in another order may differ only
//! when `u` lands within rounding of a boundary.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, OwnedData, View, float_arg, non_empty};
use crate::error::{Error, Result};
use crate::numerics::Real;

const OP: &str = "sample";

/// Validates the attributes (every backend's check).
pub fn check_attrs(temperature: f32, top_k: usize, top_p: f32) -> Result<()> {
    if !(temperature.is_finite() && temperature >= 0.0) {
        return Err(Error::BadAttr {
            op: OP,
            attr: "temperature",
            value: format!("{temperature}"),
            why: "must be finite and >= 0 (0 = greedy)".into(),
        });
    }
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(Error::BadAttr {
            op: OP,
            attr: "top_p",
            value: format!("{top_p}"),
            why: "must be in (0, 1]".into(),
        });
    }
    if top_k > i32::MAX as usize {
        return Err(Error::BadAttr {
            op: OP,
            attr: "top_k",
            value: format!("{top_k}"),
            why: "must fit an i32".into(),
        });
    }
    Ok(())
}

/// Validates shapes; returns `(rows, vocab)`.
pub fn check_shapes(logits: &[usize], uniform: &[usize]) -> Result<(usize, usize)> {
    let &[rows, vocab] = logits else {
        return Err(Error::bad_shape(
            OP,
            "logits",
            logits,
            "needs [rows, vocab]",
        ));
    };
    non_empty(OP, "logits", logits)?;
    if uniform != [rows] {
        return Err(Error::mismatch(OP, &[rows], uniform));
    }
    if vocab > i32::MAX as usize {
        return Err(Error::LimitExceeded {
            what: "sample: vocab".into(),
            value: vocab as u64,
            limit: i32::MAX as u64,
        });
    }
    Ok((rows, vocab))
}

/// Checks one row's uniform: in `[0, 1)` (NaN is not). Every backend's check: devices apply it
/// to the host copy kept at upload.
pub fn check_uniform(row: usize, u: f32, uniform_shape: &[usize]) -> Result<()> {
    if (0.0..1.0).contains(&u) {
        return Ok(());
    }
    Err(Error::BadShape {
        op: OP,
        tensor: "uniform".into(),
        shape: uniform_shape.to_vec(),
        why: format!("uniform[{row}] = {u} is not in [0, 1)"),
    })
}

/// Lanes of [`first_max`]'s passes: chunks of this many values whose per-lane steps are
/// independent, so that they vectorize (the id of a 32000-entry vocabulary each decode step).
const LANES: usize = 16;

/// `Ok(i)`: the first index of the largest value of the non-empty `row` (ties, `-0.0` and `0.0`
/// among them, go to the first); `Err(i)`: the first NaN.
fn first_max(row: &[f32]) -> core::result::Result<usize, usize> {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut nan = [false; LANES];
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for ((m, n), &v) in lanes.iter_mut().zip(&mut nan).zip(c) {
            *m = if v > *m { v } else { *m };
            *n |= v.is_nan();
        }
    }
    let mut max = f32::NEG_INFINITY;
    for &v in lanes.iter().chain(rest) {
        max = if v > max { v } else { max };
    }
    if nan.iter().any(|&n| n) || rest.iter().any(|v| v.is_nan()) {
        return Err(row.iter().position(|v| v.is_nan()).unwrap_or(0));
    }
    // The first chunk that holds the maximum, then its place there.
    let mut at = 0;
    for c in row.chunks(LANES) {
        if c.iter().fold(false, |hit, &v| hit | (v == max)) {
            return Ok(at + c.iter().position(|&v| v == max).unwrap_or(0));
        }
        at += c.len();
    }
    Ok(0)
}

/// Picks one id from one row (see the module docs).
pub fn sample_row(row: &[f32], u: f32, temperature: f32, top_k: usize, top_p: f32) -> usize {
    if row.is_empty() {
        return 0;
    }
    let best = match first_max(row) {
        Ok(i) | Err(i) => i,
    };
    if temperature == 0.0 || row[best].is_nan() {
        return best;
    }
    let max = row[best];
    // The k-th largest with multiplicity.
    let threshold = if top_k > 0 && top_k < row.len() {
        let mut sorted = row.to_vec();
        sorted.sort_by(|a, b| b.total_cmp(a));
        sorted[top_k - 1]
    } else {
        f32::NEG_INFINITY
    };
    let mut w: Vec<f32> = row
        .iter()
        .map(|&x| {
            if x >= threshold {
                Real::exp((x - max) / temperature)
            } else {
                0.0
            }
        })
        .collect();
    if top_p < 1.0 {
        let total: f32 = w.iter().sum();
        let limit = top_p * total;
        // Mass strictly above each distinct logit, from a descending order.
        let mut order: Vec<usize> = (0..row.len()).filter(|&i| w[i] > 0.0).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        let mut drop = vec![false; row.len()];
        let mut above = 0.0f32;
        let mut start = 0;
        while start < order.len() {
            let x = row[order[start]];
            let mut end = start;
            let mut group = 0.0f32;
            while end < order.len() && row[order[end]] == x {
                group += w[order[end]];
                end += 1;
            }
            if above >= limit {
                for &i in &order[start..end] {
                    drop[i] = true;
                }
            }
            above += group;
            start = end;
        }
        for (wi, d) in w.iter_mut().zip(drop) {
            if d {
                *wi = 0.0;
            }
        }
    }
    let total: f32 = w.iter().sum();
    let target = u * total;
    let mut acc = 0.0f32;
    let mut last_kept = best;
    for (i, &wi) in w.iter().enumerate() {
        if wi > 0.0 {
            acc += wi;
            last_kept = i;
            if acc > target {
                return i;
            }
        }
    }
    last_kept
}

/// Forward: logits `[rows, vocab]`, uniform `[rows]` -> ids `[rows]` (i32).
pub fn forward<T: Real>(
    temperature: f32,
    top_k: usize,
    top_p: f32,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    check_attrs(temperature, top_k, top_p)?;
    let (sl, logits) = float_arg(OP, args, 0, "logits")?;
    let (su, uniform) = float_arg(OP, args, 1, "uniform")?;
    let (rows, vocab) = check_shapes(sl, su)?;
    let mut out = Vec::with_capacity(rows);
    for (r, row) in logits.chunks_exact(vocab).enumerate() {
        let u = uniform.get(r).map_or(0.0, |u| u.to_f32());
        check_uniform(r, u, su)?;
        let id = match T::as_f32_slice(row) {
            Some(row) => sample_row(row, u, temperature, top_k, top_p),
            None => {
                let row: Vec<f32> = row.iter().map(|v| v.to_f32()).collect();
                sample_row(&row, u, temperature, top_k, top_p)
            }
        };
        out.push(id as i32);
    }
    Ok(vec![Owned {
        shape: vec![rows],
        data: OwnedData::I32(out),
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_is_the_first_maximum() {
        assert_eq!(sample_row(&[1.0, 3.0, 3.0, 2.0], 0.9, 0.0, 0, 1.0), 1);
        assert_eq!(sample_row(&[1.0, f32::NAN, 3.0], 0.5, 1.0, 0, 1.0), 1);
    }

    /// The first maximum (or first NaN) by one scalar pass, as `sample_row` once found it.
    fn first_max_scalar(row: &[f32]) -> usize {
        if let Some(i) = row.iter().position(|v| v.is_nan()) {
            return i;
        }
        let mut best = 0;
        for (i, &v) in row.iter().enumerate() {
            if v > row[best] {
                best = i;
            }
        }
        best
    }

    #[test]
    fn greedy_matches_one_scalar_pass_on_awkward_rows() {
        let mut rng = crate::rng::Rng::new(29);
        for len in [1, 2, 15, 16, 17, 31, 32, 33, 100, 32000] {
            for case in 0..8 {
                // Few distinct values, so that the maximum repeats; signed zeros and
                // infinities; a NaN in some rows, in the chunks or in the remainder.
                let mut row: Vec<f32> = (0..len)
                    .map(|_| [-0.0, 0.0, 1.0, -1.0, 2.5][rng.below(5) as usize])
                    .collect();
                match case {
                    1 => row.iter_mut().for_each(|v| *v = f32::NEG_INFINITY),
                    2 => row[rng.below(len as u64) as usize] = f32::INFINITY,
                    3 => row[rng.below(len as u64) as usize] = f32::NAN,
                    4 => row[len - 1] = f32::NAN,
                    5 => row.iter_mut().for_each(|v| *v = -*v - 3.0),
                    6 => row.iter_mut().for_each(|v| *v *= 0.0),
                    _ => {}
                }
                let want = first_max_scalar(&row);
                assert_eq!(sample_row(&row, 0.5, 0.0, 0, 1.0), want, "{len} {case}");
                if row[want].is_nan() {
                    assert_eq!(sample_row(&row, 0.5, 1.0, 5, 0.9), want, "{len} {case}");
                }
            }
        }
    }

    #[test]
    fn draws_follow_the_cumulative_weights() {
        // Equal logits at temperature 1: four tokens of weight 1 each; u splits [0, 1) in
        // quarters.
        let row = [0.0f32; 4];
        assert_eq!(sample_row(&row, 0.0, 1.0, 0, 1.0), 0);
        assert_eq!(sample_row(&row, 0.24, 1.0, 0, 1.0), 0);
        assert_eq!(sample_row(&row, 0.26, 1.0, 0, 1.0), 1);
        assert_eq!(sample_row(&row, 0.74, 1.0, 0, 1.0), 2);
        assert_eq!(sample_row(&row, 0.99, 1.0, 0, 1.0), 3);
        // ln 3 vs 0: weights 3 and 1, so token 0 holds [0, 0.75).
        let row = [libm::logf(3.0), 0.0];
        assert_eq!(sample_row(&row, 0.7, 1.0, 0, 1.0), 0);
        assert_eq!(sample_row(&row, 0.8, 1.0, 0, 1.0), 1);
        // Temperature 2 halves the logits: weights sqrt(3) and 1, boundary at 0.634.
        assert_eq!(sample_row(&row, 0.62, 2.0, 0, 1.0), 0);
        assert_eq!(sample_row(&row, 0.65, 2.0, 0, 1.0), 1);
    }

    #[test]
    fn top_k_keeps_ties_and_top_p_keeps_the_head() {
        let row = [1.0f32, 5.0, 3.0, 3.0, 0.0];
        // k = 1: only the maximum, whatever u.
        assert_eq!(sample_row(&row, 0.99, 1.0, 1, 1.0), 1);
        // k = 2: the 2nd largest is 3.0, so both 3.0 ties stay: tokens 1, 2, 3.
        for u in [0.0, 0.5, 0.9, 0.999] {
            let id = sample_row(&row, u, 1.0, 2, 1.0);
            assert!([1, 2, 3].contains(&id), "u {u}: {id}");
        }
        assert_eq!(sample_row(&row, 0.999, 1.0, 2, 1.0), 3);
        // top_p small: the maximum alone (mass above it is 0 < p, the next has mass e^0 ...).
        assert_eq!(sample_row(&row, 0.999, 1.0, 0, 0.1), 1);
        // Weights e^0, e^-2 (twice), e^-4, e^-5 sum to 1.2957. p = 0.9 (limit 1.166) keeps 5.0
        // (mass above: 0) and the 3.0 ties (above: 1.0), drops 1.0 (above: 1.2707) and 0.0.
        assert_eq!(sample_row(&row, 0.999, 1.0, 0, 0.9), 3);
        assert_eq!(sample_row(&row, 0.999, 1.0, 0, 0.78), 3);
        // p = 0.77 (limit 0.9977 < 1.0): the ties go, the maximum stays alone.
        assert_eq!(sample_row(&row, 0.999, 1.0, 0, 0.77), 1);
    }

    #[test]
    fn bad_attrs_and_shapes_are_named() {
        let x = [0.0f32; 6];
        let u = [0.5f32; 2];
        let args = [View::float(&[2, 3], &x), View::float(&[2], &u)];
        assert!(forward(1.0, 0, 1.0, &args).is_ok());
        let e = forward(-1.0, 0, 1.0, &args).unwrap_err();
        assert!(
            matches!(
                e,
                Error::BadAttr {
                    attr: "temperature",
                    ..
                }
            ),
            "{e}"
        );
        let e = forward(1.0, 0, 0.0, &args).unwrap_err();
        assert!(matches!(e, Error::BadAttr { attr: "top_p", .. }), "{e}");
        let bad_u = [1.0f32, 0.0];
        let args2 = [View::float(&[2, 3], &x), View::float(&[2], &bad_u)];
        assert!(forward(1.0, 0, 1.0, &args2).is_err());
        let args3 = [View::float(&[2, 3], &x), View::float(&[3], &x[..3])];
        assert!(matches!(
            forward(1.0, 0, 1.0, &args3).unwrap_err(),
            Error::ShapeMismatch { .. }
        ));
    }
}
