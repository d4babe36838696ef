//! The argument types every reference kernel reads and returns ([`View`], [`Owned`]) and the
//! argument checks they share. A leaf module: the kernel files import it, never the dispatcher
//! in [`super`], so dispatching to a kernel family is not a circle.

use alloc::format;
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::tensor::{DType, numel};

/// Borrowed elements of one argument.
#[derive(Debug, Clone, Copy)]
pub enum Data<'a, T> {
    Float(&'a [T]),
    I32(&'a [i32]),
    I64(&'a [i64]),
}

/// A borrowed argument: shape and elements (row-major, contiguous).
#[derive(Debug, Clone, Copy)]
pub struct View<'a, T> {
    pub shape: &'a [usize],
    pub data: Data<'a, T>,
}

impl<'a, T: Real> View<'a, T> {
    /// A float view.
    pub fn float(shape: &'a [usize], data: &'a [T]) -> Self {
        View {
            shape,
            data: Data::Float(data),
        }
    }
    /// The float elements, or a dtype error naming `op` and `name`.
    pub fn floats(&self, op: &'static str, name: &str) -> Result<&'a [T]> {
        match self.data {
            Data::Float(x) => Ok(x),
            Data::I32(_) => Err(Error::DTypeMismatch {
                op,
                tensor: name.into(),
                expected: "f32",
                got: DType::I32,
            }),
            Data::I64(_) => Err(Error::DTypeMismatch {
                op,
                tensor: name.into(),
                expected: "f32",
                got: DType::I64,
            }),
        }
    }
    /// The integer elements widened to i64, or a dtype error.
    pub fn ints(&self, op: &'static str, name: &str) -> Result<Vec<i64>> {
        match self.data {
            Data::I32(x) => Ok(x.iter().map(|&v| v as i64).collect()),
            Data::I64(x) => Ok(x.to_vec()),
            Data::Float(_) => Err(Error::DTypeMismatch {
                op,
                tensor: name.into(),
                expected: "i32 or i64",
                got: DType::F32,
            }),
        }
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self.data {
            Data::Float(_) => DType::F32,
            Data::I32(_) => DType::I32,
            Data::I64(_) => DType::I64,
        }
    }
    /// Number of elements the data holds.
    pub fn len(&self) -> usize {
        match self.data {
            Data::Float(x) => x.len(),
            Data::I32(x) => x.len(),
            Data::I64(x) => x.len(),
        }
    }
    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Owned elements of one result.
#[derive(Debug, Clone, PartialEq)]
pub enum OwnedData<T> {
    Float(Vec<T>),
    I32(Vec<i32>),
}

/// An owned result: shape and elements.
#[derive(Debug, Clone, PartialEq)]
pub struct Owned<T> {
    pub shape: Vec<usize>,
    pub data: OwnedData<T>,
}

impl<T: Real> Owned<T> {
    /// A float result.
    pub fn float(shape: Vec<usize>, data: Vec<T>) -> Self {
        debug_assert_eq!(numel(&shape), Some(data.len()));
        Owned {
            shape,
            data: OwnedData::Float(data),
        }
    }
    /// The float elements (empty slice for integer results).
    pub fn floats(&self) -> &[T] {
        match &self.data {
            OwnedData::Float(x) => x,
            OwnedData::I32(_) => &[],
        }
    }
    /// A borrowed view of this result.
    pub fn view(&self) -> View<'_, T> {
        View {
            shape: &self.shape,
            data: match &self.data {
                OwnedData::Float(x) => Data::Float(x),
                OwnedData::I32(x) => Data::I32(x),
            },
        }
    }
}

/// Argument `i` of `args`, or an arity error.
fn arg<'a, 'b, T: Real>(
    op: &'static str,
    args: &'b [View<'a, T>],
    i: usize,
) -> Result<&'b View<'a, T>> {
    args.get(i).ok_or(Error::Arity {
        op,
        expected: i + 1,
        got: args.len(),
    })
}

/// Fails unless `shape` holds exactly `len` elements.
fn holds(op: &'static str, name: &str, shape: &[usize], len: usize) -> Result<()> {
    if numel(shape) != Some(len) {
        return Err(Error::bad_shape(
            op,
            name,
            shape,
            format!("shape does not match {len} elements"),
        ));
    }
    Ok(())
}

/// The float argument `i` of `args`: `(shape, elements)`. Checks the dtype and that the element
/// count matches the shape.
pub fn float_arg<'a, T: Real>(
    op: &'static str,
    args: &[View<'a, T>],
    i: usize,
    name: &str,
) -> Result<(&'a [usize], &'a [T])> {
    let v = arg(op, args, i)?;
    let x = v.floats(op, name)?;
    holds(op, name, v.shape, x.len())?;
    Ok((v.shape, x))
}

/// The integer argument `i` of `args`, widened to i64: `(shape, elements)`.
pub fn int_arg<'a, T: Real>(
    op: &'static str,
    args: &[View<'a, T>],
    i: usize,
    name: &str,
) -> Result<(&'a [usize], Vec<i64>)> {
    let v = arg(op, args, i)?;
    let x = v.ints(op, name)?;
    holds(op, name, v.shape, x.len())?;
    Ok((v.shape, x))
}

/// Fails with [`Error::Empty`] when the shape holds no elements.
pub fn non_empty(op: &'static str, name: &str, shape: &[usize]) -> Result<()> {
    if shape.contains(&0) {
        return Err(Error::Empty {
            op,
            tensor: name.into(),
        });
    }
    Ok(())
}

/// Fails with [`Error::BadShape`] when the rank is below `min`.
pub fn min_rank(op: &'static str, name: &str, shape: &[usize], min: usize) -> Result<()> {
    if shape.len() < min {
        return Err(Error::bad_shape(
            op,
            name,
            shape,
            format!("needs rank >= {min}"),
        ));
    }
    Ok(())
}

/// Fails with [`Error::ShapeMismatch`] unless the shapes are equal.
pub fn same_shape(op: &'static str, lhs: &[usize], rhs: &[usize]) -> Result<()> {
    if lhs != rhs {
        return Err(Error::mismatch(op, lhs, rhs));
    }
    Ok(())
}

/// Splits a shape into `(rows, last)`: the product of the leading dims and the last dim.
pub fn rows_last(shape: &[usize]) -> (usize, usize) {
    match shape.split_last() {
        Some((&last, lead)) => (lead.iter().product(), last),
        None => (1, 1),
    }
}
