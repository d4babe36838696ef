//! Helpers every op family's glue shares.

use kernels_core::Tensor;

use crate::device::Device;

pub(crate) fn arg<'a>(args: &[&'a Tensor], i: usize) -> &'a Tensor {
    // Arity was checked against the spec before any family runner indexes.
    args[i]
}

/// Element ranges `(start, len)` covering `n` elements, each within one storage binding and
/// starting on the storage offset alignment (one range when the tensor fits).
pub(crate) fn elem_chunks(be: &dyn Device, n: usize) -> Vec<(usize, usize)> {
    let step = be.chunk_elems().max(1);
    (0..n.div_ceil(step))
        .map(|c| (c * step, step.min(n - c * step)))
        .collect()
}
