// Rotary position embedding over x [batch, heads, seq, head_dim], forward and backward (the
// backward rotates grad_out by the negated angle, p.c[1] = 1). One thread per rotated pair.
// CPU reference: kernels-core src/cpu/rope.rs.
//
// Accuracy: at long positions the angle p * inv_freq is thousands of radians, where an f32
// product has lost the bits that decide the rotation. So the angle is never formed in f32: the
// host gives each frequency as a 64-bit fixed-point fraction of a turn, U = frac(inv_freq / 2pi)
// * 2^64 (computed in f64; in3 = [half, 2] words high, low), the kernel takes frac(p * U)
// exactly in 64-bit integer arithmetic (whole turns drop out), splits off the nearest quarter
// turn, and evaluates minimax sin/cos polynomials (Cephes sinf/cosf) on [-pi/4, pi/4] -- the
// same arithmetic as the WGSL kernel.

// 2 pi / 2^32: radians per unit of a 32-bit turn fraction.
#define RAD_PER_UNIT 1.4629180792671596e-9f

__device__ inline void cos_sin(const unsigned int* turns, unsigned int pos, unsigned int i,
                               float* c_out, float* s_out) {
    unsigned long long u = ((unsigned long long)turns[2 * i] << 32) | turns[2 * i + 1];
    // frac(pos * U) in units of 2^-32 turns (wrapping arithmetic is the mod 1).
    unsigned int t = (unsigned int)(((unsigned long long)pos * u) >> 32);
    // Nearest quarter turn and the signed remainder, |r| <= 2^29 (an eighth of a turn).
    unsigned int q = (t + 0x20000000u) >> 30;
    int r = (int)(t - (q << 30));
    float a = (float)r * RAD_PER_UNIT;
    float z = a * a;
    float s = a + a * z * (-1.6666654611e-1f + z * (8.3321608736e-3f + z * -1.9515295891e-4f));
    float c = 1.0f - 0.5f * z +
              z * z * (4.166664568298827e-2f + z * (-1.388731625493765e-3f + z * 2.443315711809948e-5f));
    switch (q & 3u) {
        case 0: *c_out = c; *s_out = s; break;
        case 1: *c_out = -s; *s_out = c; break;
        case 2: *c_out = -c; *s_out = -s; break;
        default: *c_out = s; *s_out = -c; break;
    }
}

// in0 = x [rows, head_dim] (rows = batch * heads * seq), in3 = turns; out0 same shape as x.
// p.pairs = rows * half; p.c[0] = interleaved, p.c[1] = inverse
KERNEL(rope, RopeParams) {
    unsigned long long idx = global_index();
    if (idx >= p.pairs) return;
    unsigned long long half = p.half;
    unsigned long long row = idx / half;
    unsigned int i = (unsigned int)(idx % half);
    unsigned int pos = p.offset + (unsigned int)(row % p.seq);
    float c, sn;
    cos_sin((const unsigned int*)in3, pos, i, &c, &sn);
    if (p.c[1] != 0) sn = -sn;
    unsigned long long base = row * 2 * half;
    unsigned long long ia = base + i, ib = base + i + half;
    if (p.c[0] != 0) {
        ia = base + 2 * (unsigned long long)i;
        ib = ia + 1;
    }
    float a = in0[ia], b = in0[ib];
    out0[ia] = a * c - b * sn;
    out0[ib] = b * c + a * sn;
}

// The offsets of pair i within a row of head_dim = 2 half (rotate_half, or interleaved when
// interleaved != 0).
__device__ inline void pair_at(unsigned int i, unsigned int half, int interleaved,
                               unsigned long long* ia, unsigned long long* ib) {
    if (interleaved) {
        *ia = 2ull * i;
        *ib = *ia + 1;
    } else {
        *ia = i;
        *ib = (unsigned long long)i + half;
    }
}

// Where pair `idx` of qkv [b, q_heads + 2 kv_heads, seq, d] lies (the WGSL `qkv_pair`'s twin):
// its row (of d), its pair i within the row and that pair's two offsets, its position t, head
// and batch entry. Shared by `rope_kv_write` and its backward.
struct QkvPair {
    unsigned long long d, row, t, head, batch, ia, ib;
    unsigned int i;
};

__device__ inline QkvPair qkv_pair(const RopeKvWriteParams& p, unsigned long long idx) {
    QkvPair q;
    unsigned long long half = p.half, seq = p.seq;
    unsigned long long heads = (unsigned long long)p.q_heads + 2ull * p.kv_heads;
    q.d = 2 * half;
    q.row = idx / half;
    q.i = (unsigned int)(idx % half);
    q.t = q.row % seq;
    q.head = (q.row / seq) % heads;
    q.batch = q.row / (seq * heads);
    pair_at(q.i, p.half, p.c[0], &q.ia, &q.ib);
    return q;
}

// The fused q/k/v step (the WGSL kernel's twin). in0 = qkv [b, q_heads + 2 kv_heads, seq, d],
// in3 = turns; out0 = the k cache and out1 = the v cache [b, kv_heads, cap, d] (rows offset..
// written), out2 = q [b, q_heads, seq, d]. One thread per pair of qkv; p.c[0] = interleaved.
KERNEL(rope_kv_write, RopeKvWriteParams) {
    unsigned long long idx = global_index();
    if (idx >= p.pairs) return;
    QkvPair q = qkv_pair(p, idx);
    unsigned long long d = q.d, seq = p.seq, row = q.row, t = q.t, head = q.head, batch = q.batch;
    unsigned long long ia = q.ia, ib = q.ib;
    unsigned int i = q.i;
    float a = in0[row * d + ia], b = in0[row * d + ib];
    if (head >= (unsigned long long)p.q_heads + p.kv_heads) {
        unsigned long long h = head - p.q_heads - p.kv_heads;
        unsigned long long dst = ((batch * p.kv_heads + h) * p.cap + p.offset + t) * d;
        out1[dst + ia] = a;
        out1[dst + ib] = b;
        return;
    }
    float c, sn;
    cos_sin((const unsigned int*)in3, p.offset + (unsigned int)t, i, &c, &sn);
    float ra = a * c - b * sn, rb = b * c + a * sn;
    if (head < p.q_heads) {
        unsigned long long dst = ((batch * p.q_heads + head) * seq + t) * d;
        out2[dst + ia] = ra;
        out2[dst + ib] = rb;
    } else {
        unsigned long long dst = ((batch * p.kv_heads + head - p.q_heads) * p.cap + p.offset + t) * d;
        out0[dst + ia] = ra;
        out0[dst + ib] = rb;
    }
}

// Its backward's input gradient. in0 = grad_q [b, q_heads, seq, d], in1 = grad_k and in2 =
// grad_v [b, kv_heads, seq, d] (the caches' written rows), in3 = turns; out0 = grad_qkv: q's and
// k's pairs rotated back, v's copied. One thread per pair of qkv; p.c[0] = interleaved.
KERNEL(rope_kv_write_backward, RopeKvWriteParams) {
    unsigned long long idx = global_index();
    if (idx >= p.pairs) return;
    QkvPair q = qkv_pair(p, idx);
    unsigned long long d = q.d, seq = p.seq, row = q.row, t = q.t, head = q.head, batch = q.batch;
    unsigned long long ia = q.ia, ib = q.ib;
    unsigned int i = q.i;
    float a, b;
    if (head < p.q_heads) {
        unsigned long long src = ((batch * p.q_heads + head) * seq + t) * d;
        a = in0[src + ia];
        b = in0[src + ib];
    } else if (head < (unsigned long long)p.q_heads + p.kv_heads) {
        unsigned long long src = ((batch * p.kv_heads + head - p.q_heads) * seq + t) * d;
        a = in1[src + ia];
        b = in1[src + ib];
    } else {
        unsigned long long src = ((batch * p.kv_heads + head - p.q_heads - p.kv_heads) * seq + t) * d;
        out0[row * d + ia] = in2[src + ia];
        out0[row * d + ib] = in2[src + ib];
        return;
    }
    // Rotated by the negated angle.
    float c, sn;
    cos_sin((const unsigned int*)in3, p.offset + (unsigned int)t, i, &c, &sn);
    out0[row * d + ia] = a * c + b * sn;
    out0[row * d + ib] = b * c - a * sn;
}
