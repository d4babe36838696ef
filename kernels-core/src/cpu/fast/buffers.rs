//! Output and scratch buffers of the fast paths: an allocation failure is an
//! [`Error::OutOfMemory`] naming the buffer, never an abort.

use alloc::format;
use alloc::vec::Vec;

use crate::error::{Error, Result};

/// Grows `buf` to at least `len` values (new ones `fill`).
pub(crate) fn grow(buf: &mut Vec<f32>, len: usize, fill: f32, what: &str) -> Result<()> {
    if buf.len() < len {
        buf.try_reserve_exact(len - buf.len())
            .map_err(|_| Error::OutOfMemory {
                what: what.into(),
                bytes: (len as u64).saturating_mul(4),
            })?;
        buf.resize(len, fill);
    }
    Ok(())
}

/// A new output of `len` values, each `fill`, for the op `op`.
pub(crate) fn filled(len: usize, fill: f32, op: &str) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    grow(&mut v, len, fill, &format!("{op} output"))?;
    Ok(v)
}
