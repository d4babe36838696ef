//! The bytes of a packed weight tensor: its own, or a range of a buffer it shares with other
//! tensors (a memory-mapped GGUF file, the bytes of a file the page read), so loading a file
//! does not copy its weights.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ops::{Deref, Range};

/// A buffer tensors may share: anything that is bytes (a `Vec<u8>`, a memory map).
pub type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// The layout of a weight's packed bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// GGML's blocks, row after row (what files hold and GPU backends take).
    Plain,
    /// The CPU backend's eight-row interleaved `q4_0` / `q5_0` / `q8_0` (see
    /// `cpu::fast::qdot::interleave`): whole groups of 8 rows interleaved, the tail rows plain.
    Rows8,
}

/// `len` bytes at `start` of `owner`, in `layout`.
#[derive(Clone)]
pub struct PackedBytes {
    owner: SharedBytes,
    start: usize,
    len: usize,
    layout: Layout,
}

impl PackedBytes {
    /// Bytes of their own.
    pub fn owned(bytes: Vec<u8>) -> PackedBytes {
        let len = bytes.len();
        PackedBytes {
            owner: Arc::new(bytes),
            start: 0,
            len,
            layout: Layout::Plain,
        }
    }
    /// Bytes of their own in `layout`.
    pub fn owned_in(bytes: Vec<u8>, layout: Layout) -> PackedBytes {
        PackedBytes {
            layout,
            ..PackedBytes::owned(bytes)
        }
    }
    /// The layout of the bytes.
    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// `range` of `owner`, shared with it; `None` when the range is not inside it.
    pub fn shared(owner: SharedBytes, range: Range<usize>) -> Option<PackedBytes> {
        let total = (*owner).as_ref().len();
        (range.start <= range.end && range.end <= total).then(|| PackedBytes {
            owner,
            start: range.start,
            len: range.end - range.start,
            layout: Layout::Plain,
        })
    }
    /// `part`'s range in `owner` when it is a sub-slice of the owner's bytes (found by address,
    /// without unsafe code), shared with it.
    pub fn within(owner: &SharedBytes, part: &[u8]) -> Option<PackedBytes> {
        let base = (**owner).as_ref().as_ptr() as usize;
        let at = (part.as_ptr() as usize).checked_sub(base)?;
        PackedBytes::shared(owner.clone(), at..at.checked_add(part.len())?)
    }
    /// True when no other handle to the buffer is alive (so writing into it is unseen).
    pub fn is_unique(&mut self) -> bool {
        Arc::get_mut(&mut self.owner).is_some()
    }
    /// Whether the bytes are a range of a larger shared buffer (not a copy of their own).
    pub fn is_shared_range(&self) -> bool {
        self.len != (*self.owner).as_ref().len()
    }
}

impl Deref for PackedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // The range was checked against the owner when made; an owner cannot shrink.
        (*self.owner)
            .as_ref()
            .get(self.start..self.start + self.len)
            .unwrap_or(&[])
    }
}

impl PartialEq for PackedBytes {
    fn eq(&self, other: &PackedBytes) -> bool {
        self.layout == other.layout && **self == **other
    }
}

impl fmt::Debug for PackedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PackedBytes({} bytes, {:?})", self.len, self.layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn shared_ranges_are_checked_and_found_by_address() {
        let owner: SharedBytes = Arc::new(vec![1u8, 2, 3, 4, 5]);
        let p = PackedBytes::shared(owner.clone(), 1..4).unwrap();
        assert_eq!(&*p, &[2, 3, 4]);
        assert!(p.is_shared_range());
        assert!(PackedBytes::shared(owner.clone(), 3..6).is_none());
        let whole: &[u8] = (*owner).as_ref();
        let q = PackedBytes::within(&owner, &whole[2..5]).unwrap();
        assert_eq!(&*q, &[3, 4, 5]);
        let elsewhere = [3u8, 4];
        assert!(PackedBytes::within(&owner, &elsewhere).is_none());
        let mut own = PackedBytes::owned(vec![9, 9]);
        assert!(own.is_unique() && !own.is_shared_range());
        let mut shared = p.clone();
        assert!(!shared.is_unique());
    }
}
