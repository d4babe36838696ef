//! (stub: to be written)

use alloc::vec::Vec;

use super::{Owned, View};
use crate::error::{Error, Result};
use crate::numerics::Real;
#[allow(unused_imports)]
use crate::op::*;

#[allow(unused_variables)]
pub fn forward<T: Real>(op: ReduceOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "reduce",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn backward<T: Real>(op: ReduceOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "reduce",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn argmax<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "reduce",
        backend: "cpu (stub)".into(),
    })
}
