//! Shape checks for the GPU launchers, mirroring the CPU reference's errors: the op and the
//! offending shapes are named before anything is recorded on the device.

use kernels_core::cpu::matmul::MatmulShape;
use kernels_core::{Error, Result};

// The basic checks are the CPU reference's own, so both backends fail with the same errors.
pub use kernels_core::cpu::{min_rank, non_empty, rows_last, same_shape as same};

/// Binary ops: `b.shape` must be a suffix of `a.shape`. Returns `(n, nb)` element counts.
pub fn broadcast_suffix(op: &'static str, a: &[usize], b: &[usize]) -> Result<(usize, usize)> {
    non_empty(op, "a", a)?;
    non_empty(op, "b", b)?;
    if b.len() > a.len() || a[a.len() - b.len()..] != *b {
        return Err(Error::mismatch(op, a, b));
    }
    Ok((a.iter().product(), b.iter().product()))
}

/// Matmul geometry: the CPU reference's own checks and errors (`batch` products of
/// `op(a)[m, k] @ op(b)[k, n]`, batch steps 0 for a shared 2-D operand).
pub fn matmul(
    op: &'static str,
    a: &[usize],
    b: &[usize],
    trans_a: bool,
    trans_b: bool,
) -> Result<MatmulShape> {
    MatmulShape::new(op, trans_a, trans_b, a, b)
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
        assert_eq!((d.batch, d.a_step, d.b_step), (5, 6, 0));
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

/// GRU geometry (`gru_cell` / `gru_sequence`).
#[derive(Debug, Clone, Copy)]
pub struct GruDims {
    pub seq: usize,
    pub batch: usize,
    pub input: usize,
    pub hidden: usize,
}

/// Validates x (`[batch, input]` for the cell, `[seq, batch, input]` for the sequence), h and
/// the parameters, as the CPU reference does.
pub fn gru(name: &'static str, sequence: bool, args: &[&[usize]]) -> Result<GruDims> {
    let arg = |i: usize| -> &[usize] { args.get(i).copied().unwrap_or_default() };
    let xs = arg(0);
    let (seq, batch, input) = match (sequence, xs) {
        (false, &[b, i]) => (1, b, i),
        (true, &[s, b, i]) => (s, b, i),
        (false, _) => {
            return Err(Error::bad_shape(
                name,
                "x",
                xs,
                "needs rank 2 [batch, input]",
            ));
        }
        (true, _) => {
            return Err(Error::bad_shape(
                name,
                "x",
                xs,
                "needs rank 3 [seq, batch, input]",
            ));
        }
    };
    non_empty(name, "x", xs)?;
    let h_name = if sequence { "h0" } else { "h" };
    let hs = arg(1);
    let &[h_batch, hidden] = hs else {
        return Err(Error::bad_shape(
            name,
            h_name,
            hs,
            "needs rank 2 [batch, hidden]",
        ));
    };
    non_empty(name, h_name, hs)?;
    if h_batch != batch {
        return Err(Error::mismatch(name, xs, hs));
    }
    let gates = hidden
        .checked_mul(3)
        .ok_or_else(|| Error::bad_shape(name, h_name, hs, "3 * hidden overflows"))?;
    for (i, what, want) in [
        (2, "weight_ih", vec![gates, input]),
        (3, "weight_hh", vec![gates, hidden]),
        (4, "bias_ih", vec![gates]),
        (5, "bias_hh", vec![gates]),
    ] {
        let s = arg(i);
        if s != want.as_slice() {
            return Err(Error::bad_shape(
                name,
                what,
                s,
                format!("expected {want:?} for input size {input}, hidden size {hidden}"),
            ));
        }
    }
    Ok(GruDims {
        seq,
        batch,
        input,
        hidden,
    })
}

/// `gru_ensemble` geometry: every input has a leading member axis (x `[members, seq, batch,
/// input]`), and each member's slices are a `gru_sequence`'s. `(members, per-member dims)`.
pub fn gru_ensemble(name: &'static str, args: &[&[usize]]) -> Result<(usize, GruDims)> {
    let xs = args.first().copied().unwrap_or_default();
    let &[members, _, _, _] = xs else {
        return Err(Error::bad_shape(
            name,
            "x",
            xs,
            "needs rank 4 [members, seq, batch, input]",
        ));
    };
    non_empty(name, "x", xs)?;
    let names = ["x", "h0", "weight_ih", "weight_hh", "bias_ih", "bias_hh"];
    let mut per = Vec::with_capacity(names.len());
    for (i, what) in names.iter().enumerate() {
        let s = args.get(i).copied().unwrap_or_default();
        match s.split_first() {
            Some((&m, rest)) if m == members => per.push(rest),
            _ => {
                return Err(Error::bad_shape(
                    name,
                    what,
                    s,
                    format!("expected {members} members first"),
                ));
            }
        }
    }
    Ok((members, gru(name, true, &per)?))
}

/// cross_entropy geometry: logits `[..., classes]`, targets the leading dims; `(rows, classes)`.
pub fn cross_entropy(
    name: &'static str,
    logits: &[usize],
    targets: &[usize],
) -> Result<(usize, usize)> {
    min_rank(name, "logits", logits, 1)?;
    non_empty(name, "logits", logits)?;
    same(name, targets, &logits[..logits.len() - 1])?;
    Ok(rows_last(logits))
}

/// The last two dims of a shape of rank >= 2 (`(rows, cols)` of each matrix).
pub fn matrix_dims(shape: &[usize]) -> (usize, usize) {
    match shape {
        [.., r, c] => (*r, *c),
        [c] => (1, *c),
        [] => (1, 1),
    }
}

/// `lead ++ tail`.
pub fn with_lead(lead: &[usize], tail: &[usize]) -> Vec<usize> {
    lead.iter().chain(tail).copied().collect()
}
