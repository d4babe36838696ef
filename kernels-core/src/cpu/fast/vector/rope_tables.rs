//! Rope's `(cos, sin)` tables for the vector path, and a per-thread memory of the last ones.
//!
//! A decode step rotates q and k in every layer at one position: the same tables twelve times a
//! token on a six-layer model, each with a `pow` per frequency and a `sin` and `cos` per pair
//! (0.7% of a stories15M decode step on an Intel Xeon, `perf`, most of it the `pow`s). With
//! `std`, each thread keeps the last small tables it computed, keyed by every input bit for
//! bit, and hands them out again: one computation a token instead of twelve. Prefill's tables
//! (more than [`KEPT`] values) are computed each time and not kept.

use alloc::vec::Vec;

use super::common::zeroed;
use crate::cpu::rope::Freqs;
use crate::error::Result;

/// How often the tables are re-anchored on a directly computed angle.
const ROPE_ANCHOR: usize = 16;

/// Tables of at most this many values (each of `cos` and `sin`) are kept for the next call.
#[cfg(feature = "std")]
const KEPT: usize = 1 << 12;

/// Runs `f(cos, sin)` on the tables `[seq, head_dim / 2]` of [`compute`], from this thread's
/// memory where the last call asked for the same ones.
pub(super) fn with_tables<R>(
    freqs: &Freqs,
    offset: usize,
    seq: usize,
    head_dim: usize,
    f: impl FnOnce(&[f32], &[f32]) -> Result<R>,
) -> Result<R> {
    #[cfg(feature = "std")]
    {
        let key = Key::new(freqs, offset, seq, head_dim);
        let kept = LAST_TABLES.with_borrow(|last| match last {
            Some((k, (cos, sin))) if *k == key => Some((cos.clone(), sin.clone())),
            _ => None,
        });
        let (cos, sin) = match kept {
            Some(t) => t,
            None => {
                let (cos, sin) = compute(freqs, offset, seq, head_dim)?;
                if cos.len() > KEPT {
                    return f(&cos, &sin);
                }
                let t: CosSin = (cos.into(), sin.into());
                LAST_TABLES.set(Some((key, t.clone())));
                t
            }
        };
        f(&cos, &sin)
    }
    #[cfg(not(feature = "std"))]
    {
        let (cos, sin) = compute(freqs, offset, seq, head_dim)?;
        f(&cos, &sin)
    }
}

/// `(cos, sin)` tables `[seq, head_dim / 2]` of `freqs` ([`compute_from`] on its frequencies).
fn compute(
    freqs: &Freqs,
    offset: usize,
    seq: usize,
    head_dim: usize,
) -> Result<(Vec<f32>, Vec<f32>)> {
    compute_from(&freqs.inv_freqs(head_dim), offset, seq, head_dim)
}

/// `(cos, sin)` tables `[seq, head_dim / 2]` for the frequencies `inv_freqs` as the reference's
/// (f64, rounded once to f32), but with one `sin`/`cos` pair per 16 positions: in between, the
/// angle advances by rotating the f64 pair by `inv_freq`. The drift over 15 steps is a few f64
/// ulps, far below f32 rounding, so the tables agree with the reference's to the last bit
/// except in rare rounding ties.
fn compute_from(
    inv_freqs: &[f64],
    offset: usize,
    seq: usize,
    head_dim: usize,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let half = head_dim / 2;
    let mut cos = zeroed(seq * half, "rope")?;
    let mut sin = zeroed(seq * half, "rope")?;
    for (i, &f) in inv_freqs.iter().enumerate().take(half) {
        // The step rotation is only needed past the first anchor (not for a decode step).
        let (sf, cf) = if seq > 1 {
            (libm::sin(f), libm::cos(f))
        } else {
            (0.0, 1.0)
        };
        let (mut c, mut sn) = (1.0f64, 0.0f64);
        for s in 0..seq {
            if s % ROPE_ANCHOR == 0 {
                let angle = (offset + s) as f64 * f;
                (c, sn) = (libm::cos(angle), libm::sin(angle));
            } else {
                (c, sn) = (c * cf - sn * sf, sn * cf + c * sf);
            }
            cos[s * half + i] = c as f32;
            sin[s * half + i] = sn as f32;
        }
    }
    Ok((cos, sin))
}

/// Every input of the tables, the frequencies' floats as bits (so `-0.0` and `0.0`, or two
/// NaNs, are told apart exactly as the arithmetic would).
#[cfg(feature = "std")]
#[derive(Clone, Copy, PartialEq, Eq)]
struct Key {
    floats: [u32; 4],
    scaling: crate::op::RopeScaling,
    sizes: [usize; 4],
}

#[cfg(feature = "std")]
impl Key {
    fn new(freqs: &Freqs, offset: usize, seq: usize, head_dim: usize) -> Key {
        Key {
            floats: [freqs.theta, freqs.factor, freqs.low, freqs.high].map(f32::to_bits),
            scaling: freqs.scaling,
            sizes: [freqs.original_context, offset, seq, head_dim],
        }
    }
}

/// Kept `(cos, sin)` tables.
#[cfg(feature = "std")]
type CosSin = (alloc::rc::Rc<[f32]>, alloc::rc::Rc<[f32]>);

#[cfg(feature = "std")]
std::thread_local! {
    /// The last inputs and the tables computed from them.
    static LAST_TABLES: core::cell::RefCell<Option<(Key, CosSin)>> =
        const { core::cell::RefCell::new(None) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::RopeScaling;

    /// The tables computed from scratch, with no memory involved.
    fn fresh(freqs: &Freqs, offset: usize, seq: usize, head_dim: usize) -> Vec<u32> {
        let (cos, sin) = compute(freqs, offset, seq, head_dim).unwrap();
        cos.iter().chain(&sin).map(|x| x.to_bits()).collect()
    }

    fn remembered(freqs: &Freqs, offset: usize, seq: usize, head_dim: usize) -> Vec<u32> {
        with_tables(freqs, offset, seq, head_dim, |cos, sin| {
            Ok(cos.iter().chain(sin).map(|x| x.to_bits()).collect())
        })
        .unwrap()
    }

    #[test]
    fn remembered_tables_are_the_ones_each_call_asks_for() {
        let plain = Freqs::plain(10000.0);
        let other_theta = Freqs::plain(500000.0);
        let linear = Freqs {
            scaling: RopeScaling::Linear,
            factor: 4.0,
            ..plain
        };
        let negative_zero_low = Freqs {
            scaling: RopeScaling::Llama3,
            factor: 8.0,
            low: -0.0,
            high: 4.0,
            original_context: 8192,
            ..plain
        };
        // Each call differs from the one before in one input (the frequencies, the position,
        // the length or the head size), then repeats it; prefill's long tables are not kept.
        let calls = [
            (plain, 7, 1, 48),
            (plain, 7, 1, 48),
            (plain, 8, 1, 48),
            (other_theta, 8, 1, 48),
            (linear, 8, 1, 48),
            (
                Freqs {
                    factor: 2.0,
                    ..linear
                },
                8,
                1,
                48,
            ),
            (negative_zero_low, 8, 1, 48),
            (
                Freqs {
                    low: 0.0,
                    ..negative_zero_low
                },
                8,
                1,
                48,
            ),
            (plain, 8, 2, 48),
            (plain, 8, 2, 64),
            (plain, 8, 300, 64),
            (plain, 8, 300, 64),
            (plain, 8, 2, 64),
        ];
        for (i, &(freqs, offset, seq, head_dim)) in calls.iter().enumerate() {
            let want = fresh(&freqs, offset, seq, head_dim);
            assert_eq!(want.len(), 2 * seq * (head_dim / 2));
            assert_eq!(remembered(&freqs, offset, seq, head_dim), want, "call {i}");
        }
    }
}
