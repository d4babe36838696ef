//! Fast f32 CPU paths beside the reference (stub: to be written).

use alloc::vec::Vec;

use super::{Owned, View};
use crate::error::Result;
use crate::op::{Direction, Op};

/// Runs `op` on a fast path if one exists for it; `None` means "use the reference".
#[allow(unused_variables)]
pub fn run(op: &Op, dir: Direction, args: &[View<f32>]) -> Option<Result<Vec<Owned<f32>>>> {
    None
}
