//! (stub: to be written)

use alloc::vec::Vec;

use super::{Owned, View};
use crate::error::{Error, Result};
use crate::numerics::Real;
#[allow(unused_imports)]
use crate::op::*;

#[allow(unused_variables)]
pub fn forward<T: Real>(trans_a: bool, trans_b: bool, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "matmul",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn backward<T: Real>(trans_a: bool, trans_b: bool, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "matmul",
        backend: "cpu (stub)".into(),
    })
}
