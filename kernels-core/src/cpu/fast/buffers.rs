//! Output and scratch buffers of the fast paths: an allocation failure is an
//! [`Error::OutOfMemory`] naming the buffer, never an abort.

use alloc::format;
use alloc::vec::Vec;

use crate::error::{Error, Result};

/// Grows `buf` to at least `len` values (new ones `fill`), reserved fallibly: an allocation
/// failure names `what`.
pub(crate) fn grow<T: Copy>(buf: &mut Vec<T>, len: usize, fill: T, what: &str) -> Result<()> {
    if buf.len() < len {
        buf.try_reserve_exact(len - buf.len())
            .map_err(|_| out_of_memory_of::<T>(what.into(), len))?;
        buf.resize(len, fill);
    }
    Ok(())
}

/// The error for a buffer `what` of `len` values of `T` that could not be reserved.
pub(crate) fn out_of_memory_of<T>(what: alloc::string::String, len: usize) -> Error {
    Error::OutOfMemory {
        what,
        bytes: (len as u64).saturating_mul(core::mem::size_of::<T>() as u64),
    }
}

/// A new output of `len` values, each `fill`, for the op `op` (its name formatted only on
/// failure: decode allocates about a hundred outputs a token).
pub(crate) fn filled(len: usize, fill: f32, op: &str) -> Result<Vec<f32>> {
    reserved(len, fill, || format!("{op} output"))
}

/// A scratch buffer of `len` copies of `fill` (any element type), reserved fallibly: an
/// allocation failure names `what`.
pub(crate) fn scratch<T: Copy>(len: usize, fill: T, what: &str) -> Result<Vec<T>> {
    reserved(len, fill, || what.into())
}

/// `len` copies of `fill`, reserved fallibly; `what` names the buffer on failure.
fn reserved<T: Copy>(
    len: usize,
    fill: T,
    what: impl FnOnce() -> alloc::string::String,
) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| out_of_memory_of::<T>(what(), len))?;
    v.resize(len, fill);
    Ok(v)
}

/// Outputs of at least this many values are zeroed on the pool ([`zeroed`]).
const POOL_ZEROING: usize = 1 << 16;

/// A new output of `len` zeros for the op `op`, the zeros written by the pool's threads where it
/// is large: prefill's products allocate outputs of megabytes, and a serial fill of each was 3%
/// of a 2-thread prefill of the 0.5B Qwen, with the other thread waiting.
pub(crate) fn zeroed(len: usize, op: &str) -> Result<Vec<f32>> {
    if len < POOL_ZEROING {
        return filled(len, 0.0, op);
    }
    let mut v: Vec<f32> = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| out_of_memory_of::<f32>(format!("{op} output"), len))?;
    let spare = v.spare_capacity_mut().get_mut(..len).unwrap_or_default();
    let written = spare.len();
    super::pool::for_slices(spare, 1, POOL_ZEROING, &|_, part| {
        for x in part {
            x.write(0.0);
        }
        Ok(())
    })?;
    // SAFETY: `for_slices` returned Ok, so it ran the closure on every range of `spare`
    // (`written` values, all of `len` after the reservation above): each one is initialized.
    unsafe { v.set_len(written) };
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_outputs_hold_len_zeros_on_either_side_of_the_pool_threshold() {
        for len in [0, 1, POOL_ZEROING - 1, POOL_ZEROING, 3 * POOL_ZEROING + 17] {
            let v = zeroed(len, "test").unwrap();
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|x| x.to_bits() == 0), "len {len}");
        }
    }
}
