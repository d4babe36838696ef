//! Training helpers shared by `kernels train transformer` and the web page's Train section: the
//! learning-rate schedule and one step of next-token training over a batch of token rows.

use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::parallel::{DataParallel, StepReport};
use crate::tensor::Tensor;

use super::Llama;

/// Warmup (a twentieth of the run, 1 to 200 steps) then cosine decay to a tenth of `peak`.
pub fn lr_at(step: usize, steps: usize, peak: f32) -> f32 {
    let warmup = (steps / 20).clamp(1, 200);
    if step < warmup {
        return peak * (step + 1) as f32 / warmup as f32;
    }
    let t = (step - warmup) as f32 / (steps.saturating_sub(warmup)).max(1) as f32;
    peak * (0.1 + 0.9 * 0.5 * (1.0 + libm::cosf(core::f32::consts::PI * t)))
}

/// A batch of `rows` token rows of `seq` tokens: `ids` and the next-token `targets`, both
/// `[rows, seq]` row-major, and the `positions` whose logits the loss counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub rows: usize,
    pub seq: usize,
    pub ids: Vec<i32>,
    pub targets: Vec<i32>,
    pub positions: Vec<usize>,
}

/// One step of `dp` on `batch`: every replica's mean cross-entropy over its rows' `positions`,
/// gradients reduced, one AdamW step (a single replica is plain training).
pub async fn step(dp: &mut DataParallel<Llama>, batch: &Batch) -> Result<StepReport> {
    let seq = batch.seq;
    let want = batch.rows.saturating_mul(seq);
    if batch.ids.len() != want || batch.targets.len() != want {
        return Err(Error::mismatch(
            "llama train step",
            &[want],
            &[batch.ids.len().min(batch.targets.len())],
        ));
    }
    dp.step(batch.rows, |_, model, g, p, rows| {
        let shard = Tensor::from_i32(
            &[rows.len(), seq],
            batch.ids[rows.start * seq..rows.end * seq].to_vec(),
        )?;
        let shard = g.constant(g.backend().upload(&shard)?)?;
        model.loss(
            g,
            p,
            &shard,
            &batch.targets[rows.start * seq..rows.end * seq],
            &batch.positions,
        )
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays_to_a_tenth() {
        let peak = 3e-3;
        assert!((lr_at(0, 100, peak) - peak / 5.0).abs() < 1e-9);
        assert!((lr_at(4, 100, peak) - peak).abs() < 1e-9);
        assert!((lr_at(99, 100, peak) - 0.1 * peak).abs() < 1e-5);
        assert!(lr_at(50, 100, peak) < lr_at(10, 100, peak));
        // One step: no division by zero.
        assert!(lr_at(0, 1, peak).is_finite());
    }
}
