//! (stub: to be written)

use alloc::vec::Vec;

use super::{Owned, View};
use crate::error::{Error, Result};
use crate::numerics::Real;
#[allow(unused_imports)]
use crate::op::*;

#[allow(unused_variables)]
pub fn binary_forward<T: Real>(op: BinaryOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "elementwise",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn binary_backward<T: Real>(op: BinaryOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "elementwise",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn scale_forward<T: Real>(factor: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "elementwise",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn scale_backward<T: Real>(factor: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "elementwise",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn unary_forward<T: Real>(op: UnaryOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "elementwise",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn unary_backward<T: Real>(op: UnaryOp, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "elementwise",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn gelu_forward<T: Real>(approximate: GeluApprox, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "elementwise",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn gelu_backward<T: Real>(approximate: GeluApprox, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "elementwise",
        backend: "cpu (stub)".into(),
    })
}
