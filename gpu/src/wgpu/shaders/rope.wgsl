// Rotary position embedding over x [batch, heads, seq, head_dim], forward and backward (the
// backward rotates grad_out by the negated angle). One thread per rotated pair.
//
// Accuracy: the angle p * inv_freq reaches thousands of radians at long positions, where an f32
// product has already lost the bits that decide the rotation, and WGSL's sin/cos only promise
// an absolute error of 2^-11 on [-pi, pi]. So the angle is never formed in f32: the host gives
// each frequency as a 64-bit fixed-point fraction of a turn, U = frac(inv_freq / 2pi) * 2^64
// (computed in f64), the shader takes frac(p * U) exactly in integer arithmetic (mod 2^64, so
// whole turns drop out), splits off the nearest quarter turn, and evaluates minimax sin/cos
// polynomials (Cephes sinf/cosf) on the remaining [-pi/4, pi/4].

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

override INTERLEAVED: bool = false;
override INVERSE: bool = false;
const WG: u32 = 256u;
// 2 pi / 2^32: radians per unit of a 32-bit turn fraction.
const RAD_PER_UNIT: f32 = 1.4629180792671596e-9;

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> in1: array<f32>;
@group(0) @binding(3) var<storage, read> in2: array<f32>;
// [half, 2]: (high, low) 32-bit words of each frequency's turn fraction.
@group(0) @binding(4) var<storage, read> turns: array<u32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;
@group(0) @binding(6) var<storage, read_write> out1: array<f32>;
@group(0) @binding(7) var<storage, read_write> out2: array<f32>;

// High 32 bits of the 64-bit product a * b.
fn mul_hi(a: u32, b: u32) -> u32 {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
}

// (cos, sin) of the angle pos * inv_freq[i].
fn cos_sin(pos: u32, i: u32) -> vec2<f32> {
    let hi = turns[2u * i];
    let lo = turns[2u * i + 1u];
    // frac(pos * U) in units of 2^-32 turns (wrapping arithmetic is the mod 1).
    let t = pos * hi + mul_hi(pos, lo);
    // Nearest quarter turn and the signed remainder, |r| <= 2^29 (an eighth of a turn).
    let q = (t + 0x20000000u) >> 30u;
    let r = bitcast<i32>(t - (q << 30u));
    let a = f32(r) * RAD_PER_UNIT;
    let z = a * a;
    let s = a + a * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
    let c = 1.0 - 0.5 * z
        + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
    switch q {
        case 0u: { return vec2<f32>(c, s); }
        case 1u: { return vec2<f32>(-s, c); }
        case 2u: { return vec2<f32>(-c, -s); }
        default: { return vec2<f32>(s, -c); }
    }
}

// x [rows, head_dim] with rows = batch * heads * seq; out0 same shape.
// p.pairs = rows * half
@compute @workgroup_size(256)
fn rope(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let p = rope_params();
    let idx = (wid.y * nwg.x + wid.x) * WG + lid;
    if (idx >= p.pairs) { return; }
    let half = p.half;
    let row = idx / half;
    let i = idx % half;
    let pos = p.offset + row % p.seq;
    let cs = cos_sin(pos, i);
    let c = cs.x;
    let sn = select(cs.y, -cs.y, INVERSE);
    let base = row * 2u * half;
    var ia = base + i;
    var ib = base + i + half;
    if (INTERLEAVED) {
        ia = base + 2u * i;
        ib = ia + 1u;
    }
    let a = x[ia];
    let b = x[ib];
    out0[ia] = a * c - b * sn;
    out0[ib] = b * c + a * sn;
}

// The offsets of pair i within a row of head_dim = 2 * half (rotate_half or interleaved).
fn pair_at(i: u32, half: u32) -> vec2<u32> {
    if (INTERLEAVED) { return vec2<u32>(2u * i, 2u * i + 1u); }
    return vec2<u32>(i, i + half);
}

// Where pair `idx` of qkv [b, q_heads + 2 kv_heads, seq, d] lies: its row (of d), its pair i
// within the row and that pair's two offsets, its position t, head and batch entry. Shared by
// `rope_kv_write` and its backward.
struct QkvPair {
    d: u32,
    row: u32,
    i: u32,
    t: u32,
    head: u32,
    batch: u32,
    at: vec2<u32>,
}

fn qkv_pair(p: RopeKvWriteParams, idx: u32) -> QkvPair {
    let row = idx / p.half;
    let i = idx % p.half;
    let heads = p.q_heads + 2u * p.kv_heads;
    return QkvPair(2u * p.half, row, i, row % p.seq, (row / p.seq) % heads,
                   row / (p.seq * heads), pair_at(i, p.half));
}

// The fused q/k/v step. x = qkv [b, q_heads + 2 kv_heads, seq, d] (d = 2 half); out0 = the k
// cache and out1 = the v cache [b, kv_heads, cap, d] (rows offset..offset + seq written), out2
// = q [b, q_heads, seq, d]. q's and k's pairs are rotated as `rope` rotates them, v's copied.
// One thread per pair of qkv.
@compute @workgroup_size(256)
fn rope_kv_write(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let p = rope_kv_write_params();
    let idx = (wid.y * nwg.x + wid.x) * WG + lid;
    if (idx >= p.pairs) { return; }
    let q = qkv_pair(p, idx);
    let d = q.d;
    let row = q.row;
    let i = q.i;
    let t = q.t;
    let head = q.head;
    let batch = q.batch;
    let at = q.at;
    let a = x[row * d + at.x];
    let b = x[row * d + at.y];
    if (head >= p.q_heads + p.kv_heads) {
        let h = head - p.q_heads - p.kv_heads;
        let dst = ((batch * p.kv_heads + h) * p.cap + p.offset + t) * d;
        out1[dst + at.x] = a;
        out1[dst + at.y] = b;
        return;
    }
    let cs = cos_sin(p.offset + t, i);
    let ra = a * cs.x - b * cs.y;
    let rb = b * cs.x + a * cs.y;
    if (head < p.q_heads) {
        let dst = ((batch * p.q_heads + head) * p.seq + t) * d;
        out2[dst + at.x] = ra;
        out2[dst + at.y] = rb;
    } else {
        let h = head - p.q_heads;
        let dst = ((batch * p.kv_heads + h) * p.cap + p.offset + t) * d;
        out0[dst + at.x] = ra;
        out0[dst + at.y] = rb;
    }
}

// Its backward's input gradient. x = grad_q [b, q_heads, seq, d], in1 = grad_k and in2 = grad_v
// [b, kv_heads, seq, d] (the written rows of the caches' gradients); out0 = grad_qkv [b,
// q_heads + 2 kv_heads, seq, d]: q's and k's pairs rotated back, v's copied. One thread per
// pair of qkv.
@compute @workgroup_size(256)
fn rope_kv_write_backward(@builtin(workgroup_id) wid: vec3<u32>,
                          @builtin(num_workgroups) nwg: vec3<u32>,
                          @builtin(local_invocation_index) lid: u32) {
    let p = rope_kv_write_params();
    let idx = (wid.y * nwg.x + wid.x) * WG + lid;
    if (idx >= p.pairs) { return; }
    let q = qkv_pair(p, idx);
    let d = q.d;
    let row = q.row;
    let i = q.i;
    let t = q.t;
    let head = q.head;
    let batch = q.batch;
    let at = q.at;
    var a: f32;
    var b: f32;
    if (head < p.q_heads) {
        let src = ((batch * p.q_heads + head) * p.seq + t) * d;
        a = x[src + at.x];
        b = x[src + at.y];
    } else if (head < p.q_heads + p.kv_heads) {
        let src = ((batch * p.kv_heads + head - p.q_heads) * p.seq + t) * d;
        a = in1[src + at.x];
        b = in1[src + at.y];
    } else {
        let src = ((batch * p.kv_heads + head - p.q_heads - p.kv_heads) * p.seq + t) * d;
        out0[row * d + at.x] = in2[src + at.x];
        out0[row * d + at.y] = in2[src + at.y];
        return;
    }
    // Rotated by the negated angle.
    let cs = cos_sin(p.offset + t, i);
    out0[row * d + at.x] = a * cs.x + b * cs.y;
    out0[row * d + at.y] = b * cs.x - a * cs.y;
}
