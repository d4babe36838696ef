//! A stopgap f64 oracle for ops whose CPU reference kernel has not landed yet: plain loops
//! straight from the PyTorch definitions. Once the reference exists the parity test uses it
//! instead. Returns `None` for ops (or directions) it does not cover.

#![allow(clippy::needless_range_loop)]

use kernels_core::Tensor;
use kernels_core::op::{BinaryOp, Direction, GeluApprox, Op, ReduceOp, UnaryOp};

fn f(t: &Tensor) -> Vec<f64> {
    t.as_f32().unwrap().iter().map(|&v| f64::from(v)).collect()
}

fn rows_last(s: &[usize]) -> (usize, usize) {
    let n = *s.last().unwrap_or(&1);
    (s.iter().product::<usize>() / n.max(1), n)
}

fn erf(x: f64) -> f64 {
    libm::erf(x)
}

fn unary_f(code: u32, x: f64, factor: f64) -> f64 {
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    match code {
        0 => -x,
        1 => x.exp(),
        2 => x.ln(),
        3 => x.sqrt(),
        4 => x.max(0.0),
        5 => sig(x),
        6 => x.tanh(),
        7 => x * sig(x),
        8 => 0.5 * x * (1.0 + erf(x / 2f64.sqrt())),
        9 => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        _ => x * factor,
    }
}

/// d unary / dx, analytically.
fn unary_d(code: u32, x: f64, factor: f64) -> f64 {
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let c = (2.0 / std::f64::consts::PI).sqrt();
    match code {
        0 => -1.0,
        1 => x.exp(),
        2 => 1.0 / x,
        3 => 0.5 / x.sqrt(),
        4 => {
            if x > 0.0 {
                1.0
            } else {
                0.0
            }
        }
        5 => sig(x) * (1.0 - sig(x)),
        6 => 1.0 - x.tanh() * x.tanh(),
        7 => sig(x) * (1.0 + x * (1.0 - sig(x))),
        8 => {
            0.5 * (1.0 + erf(x / 2f64.sqrt()))
                + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
        }
        9 => {
            let t = (c * (x + 0.044715 * x * x * x)).tanh();
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
        }
        _ => factor,
    }
}

fn unary_code(op: &Op) -> Option<(u32, f64)> {
    Some(match op {
        Op::Unary(u) => (
            match u {
                UnaryOp::Neg => 0,
                UnaryOp::Exp => 1,
                UnaryOp::Log => 2,
                UnaryOp::Sqrt => 3,
                UnaryOp::Relu => 4,
                UnaryOp::Sigmoid => 5,
                UnaryOp::Tanh => 6,
                UnaryOp::Silu => 7,
            },
            0.0,
        ),
        Op::Gelu { approximate } => (
            match approximate {
                GeluApprox::None => 8,
                GeluApprox::Tanh => 9,
            },
            0.0,
        ),
        Op::Scale { factor } => (10, f64::from(*factor)),
        _ => return None,
    })
}

/// Softmax rows with the causal mask; returns (probabilities, valid lengths per row).
fn softmax_rows(x: &[f64], shape: &[usize], causal: bool) -> (Vec<f64>, Vec<usize>) {
    let (rows, t) = rows_last(shape);
    let s = if shape.len() >= 2 {
        shape[shape.len() - 2]
    } else {
        1
    };
    let mut out = vec![0.0; x.len()];
    let mut valid = Vec::new();
    for r in 0..rows {
        let i = (r % s) as i64;
        let v = if causal {
            (i + t as i64 - s as i64 + 1).clamp(0, t as i64) as usize
        } else {
            t
        };
        let row = &x[r * t..r * t + v];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|&z| (z - m).exp()).sum();
        for j in 0..v {
            out[r * t + j] = (x[r * t + j] - m).exp() / sum;
        }
        valid.push(v);
    }
    (out, valid)
}

pub fn run(op: &Op, dir: Direction, args: &[Tensor]) -> Option<Vec<Vec<f64>>> {
    use Direction::{Backward as B, Forward as F};
    if let Some((code, factor)) = unary_code(op) {
        let x = f(&args[0]);
        return match dir {
            F => Some(vec![x.iter().map(|&v| unary_f(code, v, factor)).collect()]),
            B => {
                let g = f(&args[2]);
                Some(vec![
                    x.iter()
                        .zip(&g)
                        .map(|(&v, &gv)| {
                            if code == 0 {
                                -gv
                            } else {
                                gv * unary_d(code, v, factor)
                            }
                        })
                        .collect(),
                ])
            }
        };
    }
    match (op, dir) {
        (Op::Binary(b), F) => {
            let (a, bb) = (f(&args[0]), f(&args[1]));
            let nb = bb.len();
            Some(vec![
                a.iter()
                    .enumerate()
                    .map(|(i, &x)| {
                        let y = bb[i % nb];
                        match b {
                            BinaryOp::Add => x + y,
                            BinaryOp::Sub => x - y,
                            BinaryOp::Mul => x * y,
                            BinaryOp::Div => x / y,
                        }
                    })
                    .collect(),
            ])
        }
        (Op::Binary(b), B) => {
            let (a, bb, g) = (f(&args[0]), f(&args[1]), f(&args[3]));
            let nb = bb.len();
            let mut ga = vec![0.0; a.len()];
            let mut gb = vec![0.0; nb];
            for i in 0..a.len() {
                let (x, y, gv) = (a[i], bb[i % nb], g[i]);
                let (da, db) = match b {
                    BinaryOp::Add => (1.0, 1.0),
                    BinaryOp::Sub => (1.0, -1.0),
                    BinaryOp::Mul => (y, x),
                    BinaryOp::Div => (1.0 / y, -x / (y * y)),
                };
                ga[i] = gv * da;
                gb[i % nb] += gv * db;
            }
            Some(vec![ga, gb])
        }
        (Op::Reduce(r), F) => {
            let x = f(&args[0]);
            let (rows, n) = rows_last(args[0].shape());
            Some(vec![
                (0..rows)
                    .map(|i| {
                        let row = &x[i * n..(i + 1) * n];
                        match r {
                            ReduceOp::Sum => row.iter().sum(),
                            ReduceOp::Mean => row.iter().sum::<f64>() / n as f64,
                            ReduceOp::Max => row.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                        }
                    })
                    .collect(),
            ])
        }
        (Op::Reduce(r), B) => {
            let x = f(&args[0]);
            let g = f(&args[2]);
            let (rows, n) = rows_last(args[0].shape());
            let mut gx = vec![0.0; x.len()];
            for i in 0..rows {
                let row = &x[i * n..(i + 1) * n];
                let mut at = 0;
                for j in 0..n {
                    if row[j] > row[at] {
                        at = j;
                    }
                }
                for j in 0..n {
                    gx[i * n + j] = match r {
                        ReduceOp::Sum => g[i],
                        ReduceOp::Mean => g[i] / n as f64,
                        ReduceOp::Max => {
                            if j == at {
                                g[i]
                            } else {
                                0.0
                            }
                        }
                    };
                }
            }
            Some(vec![gx])
        }
        (Op::Argmax, F) => {
            let x = f(&args[0]);
            let (rows, n) = rows_last(args[0].shape());
            Some(vec![
                (0..rows)
                    .map(|i| {
                        let row = &x[i * n..(i + 1) * n];
                        let mut at = 0;
                        for j in 0..n {
                            if row[j] > row[at] {
                                at = j;
                            }
                        }
                        at as f64
                    })
                    .collect(),
            ])
        }
        (Op::Softmax { causal } | Op::LogSoftmax { causal }, F) => {
            let log = matches!(op, Op::LogSoftmax { .. });
            let (p, valid) = softmax_rows(&f(&args[0]), args[0].shape(), *causal);
            let t = *args[0].shape().last().unwrap();
            Some(vec![
                p.iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let masked = i % t >= valid[i / t];
                        match (log, masked) {
                            (false, _) => v,
                            (true, false) => v.ln(),
                            (true, true) => f64::NEG_INFINITY,
                        }
                    })
                    .collect(),
            ])
        }
        (Op::LayerNorm { eps } | Op::RmsNorm { eps }, F) => {
            let rms = matches!(op, Op::RmsNorm { .. });
            let x = f(&args[0]);
            let w = f(&args[1]);
            let bias = if rms { vec![0.0; w.len()] } else { f(&args[2]) };
            let (rows, n) = rows_last(args[0].shape());
            let mut out = vec![0.0; x.len()];
            for r in 0..rows {
                let row = &x[r * n..(r + 1) * n];
                let mean = if rms {
                    0.0
                } else {
                    row.iter().sum::<f64>() / n as f64
                };
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
                let rstd = 1.0 / (var + f64::from(*eps)).sqrt();
                for j in 0..n {
                    out[r * n + j] = (row[j] - mean) * rstd * w[j] + bias[j];
                }
            }
            Some(vec![out])
        }
        (Op::Transpose, F) => {
            let x = f(&args[0]);
            let s = args[0].shape();
            let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
            let mut out = vec![0.0; x.len()];
            for b in 0..x.len() / (r * c) {
                for i in 0..r {
                    for j in 0..c {
                        out[b * r * c + j * r + i] = x[b * r * c + i * c + j];
                    }
                }
            }
            Some(vec![out])
        }
        (Op::Concat, F) => {
            let (a, b) = (f(&args[0]), f(&args[1]));
            let (rows, m) = rows_last(args[0].shape());
            let (_, k) = rows_last(args[1].shape());
            let mut out = Vec::new();
            for r in 0..rows {
                out.extend_from_slice(&a[r * m..(r + 1) * m]);
                out.extend_from_slice(&b[r * k..(r + 1) * k]);
            }
            Some(vec![out])
        }
        (Op::Embedding, F) => {
            let ids = args[0].to_i64_vec().unwrap();
            let w = f(&args[1]);
            let d = args[1].shape()[1];
            let mut out = Vec::new();
            for id in ids {
                out.extend_from_slice(&w[id as usize * d..(id as usize + 1) * d]);
            }
            Some(vec![out])
        }
        (
            Op::AdamwStep {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
                step,
            },
            F,
        ) => {
            let (p, g, m, v) = (f(&args[0]), f(&args[1]), f(&args[2]), f(&args[3]));
            let (lr, b1, b2, eps, wd) = (
                f64::from(*lr),
                f64::from(*beta1),
                f64::from(*beta2),
                f64::from(*eps),
                f64::from(*weight_decay),
            );
            let bc1 = 1.0 - b1.powf(*step as f64);
            let bc2 = 1.0 - b2.powf(*step as f64);
            let mut po = Vec::new();
            let mut mo = Vec::new();
            let mut vo = Vec::new();
            for i in 0..p.len() {
                let w = p[i] * (1.0 - lr * wd);
                let mm = b1 * m[i] + (1.0 - b1) * g[i];
                let vv = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
                po.push(w - lr * (mm / bc1) / ((vv / bc2).sqrt() + eps));
                mo.push(mm);
                vo.push(vv);
            }
            Some(vec![po, mo, vo])
        }
        (
            Op::SgdStep {
                lr,
                momentum,
                weight_decay,
                nesterov,
            },
            F,
        ) => {
            let (p, g, buf) = (f(&args[0]), f(&args[1]), f(&args[2]));
            let (lr, mo, wd) = (
                f64::from(*lr),
                f64::from(*momentum),
                f64::from(*weight_decay),
            );
            let mut po = Vec::new();
            let mut bo = Vec::new();
            for i in 0..p.len() {
                let mut d = g[i] + wd * p[i];
                let b = mo * buf[i] + d;
                if mo != 0.0 {
                    d = if *nesterov { d + mo * b } else { b };
                }
                po.push(p[i] - lr * d);
                bo.push(b);
            }
            Some(vec![po, bo])
        }
        (Op::Softmax { causal } | Op::LogSoftmax { causal }, B) => {
            let log = matches!(op, Op::LogSoftmax { .. });
            let (p, valid) = softmax_rows(&f(&args[0]), args[0].shape(), *causal);
            let g = f(&args[2]);
            let t = *args[0].shape().last().unwrap();
            let mut gx = vec![0.0; g.len()];
            for r in 0..g.len() / t {
                let v = valid[r];
                let row = r * t..r * t + v;
                let dot: f64 = if log {
                    g[row.clone()].iter().sum()
                } else {
                    row.clone().map(|i| g[i] * p[i]).sum()
                };
                for i in row {
                    gx[i] = if log {
                        g[i] - p[i] * dot
                    } else {
                        p[i] * (g[i] - dot)
                    };
                }
            }
            Some(vec![gx])
        }
        (Op::Transpose, B) => {
            // The gradient is the transpose of grad_out (shape [..., c, r]).
            let g = f(&args[2]);
            let s = args[2].shape();
            let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
            let mut out = vec![0.0; g.len()];
            for b in 0..g.len() / (r * c) {
                for i in 0..r {
                    for j in 0..c {
                        out[b * r * c + j * r + i] = g[b * r * c + i * c + j];
                    }
                }
            }
            Some(vec![out])
        }
        (Op::Concat, B) => {
            let g = f(&args[3]);
            let (rows, m) = rows_last(args[0].shape());
            let (_, k) = rows_last(args[1].shape());
            let (mut ga, mut gb) = (Vec::new(), Vec::new());
            for r in 0..rows {
                ga.extend_from_slice(&g[r * (m + k)..r * (m + k) + m]);
                gb.extend_from_slice(&g[r * (m + k) + m..(r + 1) * (m + k)]);
            }
            Some(vec![ga, gb])
        }
        (Op::Embedding, B) => {
            let ids = args[0].to_i64_vec().unwrap();
            let d = args[1].shape()[1];
            let g = f(&args[3]);
            let mut gw = vec![0.0; args[1].numel()];
            for (t, id) in ids.iter().enumerate() {
                for j in 0..d {
                    gw[*id as usize * d + j] += g[t * d + j];
                }
            }
            Some(vec![gw])
        }
        _ => None,
    }
}
