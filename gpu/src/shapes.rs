//! Shape checks for the GPU launchers, mirroring the CPU reference's errors: the op and the
//! offending shapes are named before anything is recorded on the device.

use kernels_core::{Error, Result};

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

/// Fails unless the rank is at least `min`.
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
pub fn same(op: &'static str, lhs: &[usize], rhs: &[usize]) -> Result<()> {
    if lhs != rhs {
        return Err(Error::mismatch(op, lhs, rhs));
    }
    Ok(())
}

/// `(rows, last)`: product of the leading dims and the last dim.
pub fn rows_last(shape: &[usize]) -> (usize, usize) {
    match shape.split_last() {
        Some((&last, lead)) => (lead.iter().product(), last),
        None => (1, 1),
    }
}

/// Binary ops: `b.shape` must be a suffix of `a.shape`. Returns `(n, nb)` element counts.
pub fn broadcast_suffix(op: &'static str, a: &[usize], b: &[usize]) -> Result<(usize, usize)> {
    non_empty(op, "a", a)?;
    non_empty(op, "b", b)?;
    if b.len() > a.len() || a[a.len() - b.len()..] != *b {
        return Err(Error::mismatch(op, a, b));
    }
    Ok((a.iter().product(), b.iter().product()))
}

/// A matmul problem: `batch` products of `[m, k] @ [k, n]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatmulDims {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Elements between consecutive batches of a (0: shared 2-D operand).
    pub stride_a: usize,
    pub stride_b: usize,
    pub out_shape: Vec<usize>,
}

/// Checks `a @ b` with transpose flags: ranks >= 2, inner dims equal, leading dims equal or one
/// operand 2-D (shared across the other's batch).
pub fn matmul(
    op: &'static str,
    a: &[usize],
    b: &[usize],
    trans_a: bool,
    trans_b: bool,
) -> Result<MatmulDims> {
    min_rank(op, "a", a, 2)?;
    min_rank(op, "b", b, 2)?;
    non_empty(op, "a", a)?;
    non_empty(op, "b", b)?;
    let (ra, rb) = (a.len(), b.len());
    let (a0, a1) = (a[ra - 2], a[ra - 1]);
    let (b0, b1) = (b[rb - 2], b[rb - 1]);
    let (m, ka) = if trans_a { (a1, a0) } else { (a0, a1) };
    let (kb, n) = if trans_b { (b1, b0) } else { (b0, b1) };
    if ka != kb {
        return Err(Error::mismatch(op, a, b));
    }
    let lead_a = &a[..ra - 2];
    let lead_b = &b[..rb - 2];
    let lead: Vec<usize> = if lead_a == lead_b {
        lead_a.to_vec()
    } else if lead_a.is_empty() {
        lead_b.to_vec()
    } else if lead_b.is_empty() {
        lead_a.to_vec()
    } else {
        return Err(Error::mismatch(op, a, b));
    };
    let batch: usize = lead.iter().product();
    let stride_a = if lead_a.is_empty() { 0 } else { a0 * a1 };
    let stride_b = if lead_b.is_empty() { 0 } else { b0 * b1 };
    let mut out_shape = lead;
    out_shape.push(m);
    out_shape.push(n);
    Ok(MatmulDims {
        batch,
        m,
        n,
        k: ka,
        stride_a,
        stride_b,
        out_shape,
    })
}

/// Norm parameters: `x [..., n]`, `weight [n]` (and `bias [n]`). Returns `(rows, n)`.
pub fn norm(op: &'static str, x: &[usize], params: &[(&str, &[usize])]) -> Result<(usize, usize)> {
    min_rank(op, "x", x, 1)?;
    non_empty(op, "x", x)?;
    let (rows, n) = rows_last(x);
    for (name, s) in params {
        if *s != [n] {
            return Err(Error::bad_shape(
                op,
                name,
                s,
                format!("expected [{n}] to match the last dim of x {x:?}"),
            ));
        }
    }
    Ok((rows, n))
}

/// Concat on the last dim: equal ranks and leading dims. Returns `(rows, m, k, out_shape)`.
pub fn concat(
    op: &'static str,
    a: &[usize],
    b: &[usize],
) -> Result<(usize, usize, usize, Vec<usize>)> {
    min_rank(op, "a", a, 1)?;
    min_rank(op, "b", b, 1)?;
    non_empty(op, "a", a)?;
    non_empty(op, "b", b)?;
    if a.len() != b.len() || a[..a.len() - 1] != b[..b.len() - 1] {
        return Err(Error::mismatch(op, a, b));
    }
    let (rows, m) = rows_last(a);
    let (_, k) = rows_last(b);
    let mut out = a.to_vec();
    if let Some(last) = out.last_mut() {
        *last = m + k;
    }
    Ok((rows, m, k, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_and_matmul_shapes() {
        assert_eq!(
            broadcast_suffix("add", &[2, 3, 4], &[3, 4]).unwrap(),
            (24, 12)
        );
        assert_eq!(broadcast_suffix("add", &[2, 3], &[]).unwrap(), (6, 1));
        assert!(matches!(
            broadcast_suffix("add", &[2, 3], &[2]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            broadcast_suffix("add", &[0, 3], &[3]),
            Err(Error::Empty { .. })
        ));
        let d = matmul("matmul", &[5, 2, 3], &[3, 4], false, false).unwrap();
        assert_eq!(d.out_shape, vec![5, 2, 4]);
        assert_eq!((d.batch, d.stride_a, d.stride_b), (5, 6, 0));
        let d = matmul("matmul", &[3, 2], &[4, 3], true, true).unwrap();
        assert_eq!(d.out_shape, vec![2, 4]);
        assert!(matmul("matmul", &[2, 3], &[2, 3], false, false).is_err());
        assert!(matmul("matmul", &[2, 2, 3], &[3, 3, 4], false, false).is_err());
        assert!(matmul("matmul", &[3], &[3, 4], false, false).is_err());
    }

    #[test]
    fn norm_and_concat_shapes() {
        assert_eq!(
            norm("layer_norm", &[2, 7], &[("weight", &[7])]).unwrap(),
            (2, 7)
        );
        assert!(norm("layer_norm", &[2, 7], &[("weight", &[6])]).is_err());
        let (rows, m, k, out) = concat("concat", &[2, 3], &[2, 5]).unwrap();
        assert_eq!((rows, m, k, out), (2, 3, 5, vec![2, 8]));
        assert!(concat("concat", &[2, 3], &[3, 5]).is_err());
    }
}
