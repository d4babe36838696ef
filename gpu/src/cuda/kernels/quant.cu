// Weight dtypes decoded to f32: f16, bf16 and GGML's blocks (q8_0, q4_0, q4_1, q5_0, q4_k,
// q6_k), byte for byte the layouts of kernels-core src/quant/decode.rs (the CPU reference,
// bit-exact with the gguf package) and of quant.wgsl. One thread per output element; the packed
// tensor is bound in the third input slot and read as bytes.

__device__ inline unsigned int byte_at(const unsigned char* q, unsigned long long off) {
    return q[off];
}

__device__ inline unsigned int u16_at(const unsigned char* q, unsigned long long off) {
    return q[off] | ((unsigned int)q[off + 1] << 8);
}

// IEEE binary16 bits to f32, exactly (subnormals included).
__device__ inline float f16_bits(unsigned int h) {
#ifdef __CUDA_ARCH__
    // The hardware conversion (as cuda_fp16's __half2float): exact, one instruction.
    float f;
    unsigned short b = (unsigned short)(h & 0xffffu);
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
    return f;
#else
    unsigned int sign = (h & 0x8000u) << 16;
    unsigned int e = (h >> 10) & 0x1fu;
    unsigned int m = h & 0x3ffu;
    if (e == 0u) {
        float mag = (float)m * 5.9604644775390625e-8f;  // m * 2^-24, exact
        return sign ? -mag : mag;
    }
    if (e == 31u) return __int_as_float((int)(sign | 0x7f800000u | (m << 13)));
    return __int_as_float((int)(sign | ((e + 112u) << 23) | (m << 13)));
#endif
}

__device__ inline float f16_at(const unsigned char* q, unsigned long long off) {
    return f16_bits(u16_at(q, off));
}

__device__ inline float i8_of(unsigned int b) { return (float)(signed char)(unsigned char)b; }

// Element i of a tensor of weight dtype `dtype` (the WEIGHT_* codes).
__device__ inline float decode(const unsigned char* q, unsigned int dtype, unsigned long long i) {
    switch (dtype) {
        case WEIGHT_F16:
            return f16_at(q, 2 * i);
        case WEIGHT_BF16:
            return __int_as_float((int)(u16_at(q, 2 * i) << 16));
        case WEIGHT_Q8_0: {
            unsigned long long b = (i / 32) * 34;
            return i8_of(byte_at(q, b + 2 + i % 32)) * f16_at(q, b);
        }
        case WEIGHT_Q4_0: {
            unsigned long long b = (i / 32) * 18;
            unsigned int e = i % 32;
            unsigned int v = (byte_at(q, b + 2 + e % 16) >> (4 * (e / 16))) & 0xfu;
            return f16_at(q, b) * (float)((int)v - 8);
        }
        case WEIGHT_Q4_1: {
            unsigned long long b = (i / 32) * 20;
            unsigned int e = i % 32;
            unsigned int v = (byte_at(q, b + 4 + e % 16) >> (4 * (e / 16))) & 0xfu;
            float prod = f16_at(q, b) * (float)v;
            return prod + f16_at(q, b + 2);
        }
        case WEIGHT_Q5_0: {
            unsigned long long b = (i / 32) * 22;
            unsigned int e = i % 32;
            unsigned int qh = u16_at(q, b + 2) | (u16_at(q, b + 4) << 16);
            unsigned int lo = (byte_at(q, b + 6 + e % 16) >> (4 * (e / 16))) & 0xfu;
            unsigned int v = lo | (((qh >> e) & 1u) << 4);
            return f16_at(q, b) * (float)((int)v - 16);
        }
        case WEIGHT_Q4_K: {
            unsigned long long b = (i / 256) * 144;
            unsigned int e = i % 256;
            unsigned int c = e / 64, hi = (e % 64) / 32, j = 2 * c + hi;
            unsigned int sc, m;
            if (j < 4) {
                sc = byte_at(q, b + 4 + j) & 63u;
                m = byte_at(q, b + 8 + j) & 63u;
            } else {
                sc = (byte_at(q, b + 8 + j) & 0xfu) | ((byte_at(q, b + j) >> 6) << 4);
                m = (byte_at(q, b + 8 + j) >> 4) | ((byte_at(q, b + 4 + j) >> 6) << 4);
            }
            unsigned int v = (byte_at(q, b + 16 + 32 * c + e % 32) >> (4 * hi)) & 0xfu;
            float dl = f16_at(q, b) * (float)sc;
            float ml = f16_at(q, b + 2) * (float)m;
            return dl * (float)v - ml;
        }
        case WEIGHT_Q6_K: {
            unsigned long long b = (i / 256) * 210;
            unsigned int e = i % 256;
            unsigned int h = e / 128, k = (e % 128) / 32, l = e % 32;
            unsigned int ql = (byte_at(q, b + 64 * h + l + 32 * (k & 1)) >> (4 * (k >> 1))) & 0xfu;
            unsigned int qh = (byte_at(q, b + 128 + 32 * h + l) >> (2 * k)) & 3u;
            float sc = f16_at(q, b + 208) * i8_of(byte_at(q, b + 192 + e / 16));
            return sc * (float)((int)(ql | (qh << 4)) - 32);
        }
        case F32_SOURCE:  // an f32 weight
            return ((const float*)q)[i];
        default:
            return KERNEL_NAN;  // a code it does not know
    }
}

// in2 = x of weight dtype p.dtype; out0 = f32 [p.n].
KERNEL(dequantize, DequantizeParams) {
    unsigned long long o = global_index();
    if (o >= p.n) return;
    out0[o] = decode((const unsigned char*)in2, p.dtype, o);
}

// The embedding lookup of a packed table: in1 = ids [tokens] (i32), in2 = weight [vocab, dim];
// out0 = [tokens, dim], decoding only the rows the ids pick (out-of-range ids give 0; the op
// layer refuses them before launching).
KERNEL(dequantize_rows, DequantizeParams) {
    unsigned long long o = global_index();
    if (o >= p.n) return;
    unsigned long long d = p.dim;
    int id = ((const int*)in1)[o / d];
    if (id < 0 || (unsigned int)id >= p.vocab) {
        if (p.first == 0) out0[o] = 0.0f;
        return;
    }
    unsigned int row = (unsigned int)id;
    if (row < p.first || row - p.first >= p.rows) return;
    out0[o] = decode((const unsigned char*)in2, p.dtype,
                     (unsigned long long)(row - p.first) * d + o % d);
}

// 16 bytes loaded at once (the alignment makes it one 128-bit load).
struct alignas(16) Words4 {
    unsigned int a, b, c, d;
};
struct alignas(16) Floats4 {
    float a, b, c, d;
};

__device__ inline bool aligned16(const void* p) {
    return ((unsigned long long)p & 15ull) == 0;
}

// ---- matvec_stream: decode's products, several weight rows a block, each read once ----
//
// out0 [rows, n] = in0 [rows, k] @ W^T (+ in1 = bias when p.bias = 1), W = in2 [n, k] of any
// weight dtype (or f32, F32_SOURCE), packed; outputs at columns p.col0.. of rows of p.ldo;
// p.accum = 1 adds them to what out0 holds (matmul_add into its residual); p.glu != 0 gates
// output j with the up row j + p.glu (matmul_swiglu: silu(gate) * up). As matvec.wgsl: a block of
// 256 threads (Grid::Teams) takes p.c[1] = MV_RPW weight rows, each with a team of 256 / MV_RPW
// consecutive threads (a power of two from 4 to 256, about four units a lane: launch.rs's
// cuda_matvec_team), which walks its row once in
// units of 16 bytes (8 f16/bf16 or 4+4 f32 elements), a quarter Q8_0 block or half a Q4_0 block,
// or 8 of a Q4_K block's quant bytes, the lanes on consecutive units; each unit is dotted with
// all p.rows (1..8) rows of x, so the weight is read once whatever the rows. A team's
// sums are reduced by warp shuffles, then across its warps in shared memory. Other dtypes and shapes the
// units do not tile take `decode` element by element. Each weight is decoded to f32 as `decode`
// does before it multiplies x, so NaN and infinity come out where the reference puts them; only
// the order of the sum differs.

#define MV_MAX_ROWS 8


// The two f16 (or bf16) values of a word, low half first.
__device__ inline void halves_of(unsigned int v, bool bf, float* lo, float* hi) {
    if (bf) {
        *lo = __int_as_float((int)(v << 16));
        *hi = __int_as_float((int)(v & 0xffff0000u));
    } else {
        *lo = f16_bits(v & 0xffffu);
        *hi = f16_bits(v >> 16);
    }
}

// acc[r] += x[r, e..e + 8] . w[0..8] for every row r of x (`xa`: x is 16-byte aligned, so are
// its rows at e, a multiple of 8 with k one too: two 16-byte loads).
__device__ inline void mv_acc8(float* acc, const float* x, unsigned int rows, unsigned long long k,
                               unsigned long long e, const float* w, bool xa) {
    UNROLL for (unsigned int r = 0; r < MV_MAX_ROWS; r++) {
        if (r >= rows) break;
        const float* xr = x + r * k + e;
        float s;
        if (xa) {
            Floats4 a = ((const Floats4*)xr)[0], b = ((const Floats4*)xr)[1];
            s = (a.a * w[0] + a.b * w[1]) + (a.c * w[2] + a.d * w[3]) + ((b.a * w[4] + b.b * w[5]) + (b.c * w[6] + b.d * w[7]));
        } else {
            s = (xr[0] * w[0] + xr[1] * w[1]) + (xr[2] * w[2] + xr[3] * w[3]) + ((xr[4] * w[4] + xr[5] * w[5]) + (xr[6] * w[6] + xr[7] * w[7]));
        }
        acc[r] = acc[r] + s;
    }
}

// 16 bits at an even byte offset, and 8 bytes (as two little-endian words) at one.
__device__ inline unsigned int mv_u16(const unsigned char* q, unsigned long long off) {
    return *(const unsigned short*)(q + off);
}
__device__ inline void mv_bytes8(const unsigned char* q, unsigned long long off, unsigned int* lo, unsigned int* hi) {
    *lo = mv_u16(q, off) | (mv_u16(q, off + 2) << 16);
    *hi = mv_u16(q, off + 4) | (mv_u16(q, off + 6) << 16);
}

// quant.cu's decode of Q4_K's 6-bit scale and min of sub-block j from the 12 bytes at sc.
__device__ inline void mv_q4k_scale_min(const unsigned char* sc, unsigned int j, unsigned int* s, unsigned int* m) {
    if (j < 4) {
        *s = sc[j] & 63u;
        *m = sc[j + 4] & 63u;
    } else {
        *s = (sc[j + 4] & 0xfu) | ((sc[j - 4] >> 6) << 4);
        *m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
}

// The block units of matvec_stream's packed rows (rb: the row's first byte): each decodes its
// 8 or 16 weights as `decode` does and adds their products with x to acc. Loops unrolled over
// four units issue their loads together.

// Q8_0: a quarter block (8 quants) a unit, the block's f16 scale beside it.
__device__ inline void q8_0_unit(const unsigned char* w, unsigned long long rb, unsigned long long u, float* acc,
                                 const float* x, unsigned int rows, unsigned long long k, bool xa) {
    unsigned long long b = rb + (u / 4) * 34;
    float d = f16_bits(mv_u16(w, b));
    unsigned int lo, hi;
    mv_bytes8(w, b + 2 + 8 * (u % 4), &lo, &hi);
    float v[8];
    UNROLL for (int i = 0; i < 4; i++) {
        v[i] = i8_of((lo >> (8 * i)) & 0xffu) * d;
        v[4 + i] = i8_of((hi >> (8 * i)) & 0xffu) * d;
    }
    mv_acc8(acc, x, rows, k, 8 * u, v, xa);
}

// Q4_0: half a block a unit, 8 quant bytes: elements 8h.. (low nibbles) and 16 + 8h.. (high).
__device__ inline void q4_0_unit(const unsigned char* w, unsigned long long rb, unsigned long long u, float* acc,
                                 const float* x, unsigned int rows, unsigned long long k, bool xa) {
    unsigned long long b = rb + (u / 2) * 18, e = (u / 2) * 32 + 8 * (u % 2);
    float d = f16_bits(mv_u16(w, b));
    unsigned int lo, hi;
    mv_bytes8(w, b + 2 + 8 * (u % 2), &lo, &hi);
    float v[8];
    UNROLL for (int s = 0; s < 2; s++) {
        UNROLL for (int i = 0; i < 4; i++) {
            v[i] = d * (float)((int)((lo >> (8 * i + 4 * s)) & 0xfu) - 8);
            v[4 + i] = d * (float)((int)((hi >> (8 * i + 4 * s)) & 0xfu) - 8);
        }
        mv_acc8(acc, x, rows, k, e + 16 * s, v, xa);
    }
}

// Q4_K: 8 of the 128 quant bytes a unit: elements 64c + 8s.. (low nibbles, sub-block 2c) and
// 64c + 32 + 8s.. (high nibbles, sub-block 2c + 1).
__device__ inline void q4_k_unit(const unsigned char* w, unsigned long long rb, unsigned long long u, float* acc,
                                 const float* x, unsigned int rows, unsigned long long k, bool xa) {
    unsigned long long b = rb + (u / 16) * 144;
    unsigned int c = (unsigned int)(u % 16) / 4, s = (unsigned int)(u % 4);
    unsigned long long e = (u / 16) * 256 + 64 * c + 8 * s;
    float d = f16_bits(mv_u16(w, b)), dmin = f16_bits(mv_u16(w, b + 2));
    unsigned int lo, hi;
    mv_bytes8(w, b + 16 + 32 * c + 8 * s, &lo, &hi);
    float v[8];
    UNROLL for (unsigned int half = 0; half < 2; half++) {
        unsigned int sc, m;
        mv_q4k_scale_min(w + b + 4, 2 * c + half, &sc, &m);
        float dl = d * (float)sc, ml = dmin * (float)m;
        UNROLL for (int i = 0; i < 4; i++) {
            v[i] = dl * (float)((lo >> (8 * i + 4 * half)) & 0xfu) - ml;
            v[4 + i] = dl * (float)((hi >> (8 * i + 4 * half)) & 0xfu) - ml;
        }
        mv_acc8(acc, x, rows, k, e + 32 * half, v, xa);
    }
}

// Unit u of a row of block dtype D (Q8_0, Q4_0 or Q4_K) at rb.
template <unsigned int D>
__device__ inline void mv_unit(const unsigned char* w, unsigned long long rb, unsigned long long u, float* acc,
                               const float* x, unsigned int rows, unsigned long long k, bool xa) {
    if (D == WEIGHT_Q8_0) q8_0_unit(w, rb, u, acc, x, rows, k, xa);
    else if (D == WEIGHT_Q4_0) q4_0_unit(w, rb, u, acc, x, rows, k, xa);
    else q4_k_unit(w, rb, u, acc, x, rows, k, xa);
}

// Units u = lane, lane + T, .. < units of a row of block dtype D (at rb), four at a time.
template <unsigned int D>
__device__ inline void mv_blocks(const unsigned char* w, unsigned long long rb, unsigned long long units,
                                 unsigned int lane, unsigned int T, float* acc, const float* x,
                                 unsigned int rows, unsigned long long k, bool xa) {
    unsigned long long u = lane;
    for (; u + 3 * T < units; u += 4 * T) {
        UNROLL for (unsigned int i = 0; i < 4; i++) mv_unit<D>(w, rb, u + i * T, acc, x, rows, k, xa);
    }
    for (; u < units; u += T) mv_unit<D>(w, rb, u, acc, x, rows, k, xa);
}

// Weight row j dotted with every row of x by lane `lane` of a team of T: its share in acc.
__device__ inline void mv_row(const MatvecParams& p, const float* x, const unsigned char* w,
                              unsigned long long j, unsigned int lane, unsigned int T, float* acc) {
    unsigned long long k = p.k;
    unsigned int rows = p.rows < MV_MAX_ROWS ? p.rows : MV_MAX_ROWS;
    bool xa = aligned16(x) && (k & 7ull) == 0;
    float v[8];
    if (p.dtype == F32_SOURCE && xa && aligned16(w + 4 * j * k)) {
        const Floats4* wr = (const Floats4*)(w + 4 * j * k);
        for (unsigned long long u = lane; u < k / 8; u += T) {
            Floats4 a = wr[2 * u], b = wr[2 * u + 1];
            v[0] = a.a; v[1] = a.b; v[2] = a.c; v[3] = a.d;
            v[4] = b.a; v[5] = b.b; v[6] = b.c; v[7] = b.d;
            mv_acc8(acc, x, rows, k, 8 * u, v, xa);
        }
        return;
    }
    if ((p.dtype == WEIGHT_F16 || p.dtype == WEIGHT_BF16) && xa && aligned16(w + 2 * j * k)) {
        bool bf = p.dtype == WEIGHT_BF16;
        const Words4* wr = (const Words4*)(w + 2 * j * k);
        unsigned long long units = k / 8, u = lane;
        // Four 16-byte loads in flight a lane.
        for (; u + 3 * T < units; u += 4 * T) {
            Words4 q4[4];
            UNROLL for (unsigned int i = 0; i < 4; i++) q4[i] = wr[u + i * T];
            UNROLL for (unsigned int i = 0; i < 4; i++) {
                Words4 a = q4[i];
                halves_of(a.a, bf, &v[0], &v[1]); halves_of(a.b, bf, &v[2], &v[3]);
                halves_of(a.c, bf, &v[4], &v[5]); halves_of(a.d, bf, &v[6], &v[7]);
                mv_acc8(acc, x, rows, k, 8 * (u + i * T), v, xa);
            }
        }
        for (; u < units; u += T) {
            Words4 a = wr[u];
            halves_of(a.a, bf, &v[0], &v[1]); halves_of(a.b, bf, &v[2], &v[3]);
            halves_of(a.c, bf, &v[4], &v[5]); halves_of(a.d, bf, &v[6], &v[7]);
            mv_acc8(acc, x, rows, k, 8 * u, v, xa);
        }
        return;
    }
    if (p.dtype == WEIGHT_Q8_0 && (k & 31ull) == 0) {
        mv_blocks<WEIGHT_Q8_0>(w, j * (k / 32) * 34, k / 8, lane, T, acc, x, rows, k, xa);
        return;
    }
    if (p.dtype == WEIGHT_Q4_0 && (k & 31ull) == 0) {
        mv_blocks<WEIGHT_Q4_0>(w, j * (k / 32) * 18, k / 16, lane, T, acc, x, rows, k, xa);
        return;
    }
    if (p.dtype == WEIGHT_Q4_K && (k & 255ull) == 0) {
        mv_blocks<WEIGHT_Q4_K>(w, j * (k / 256) * 144, k / 16, lane, T, acc, x, rows, k, xa);
        return;
    }
    // Every other dtype and shape: element by element, as `decode` reads them.
    for (unsigned long long i = lane; i < k; i += T) {
        float wi = decode(w, p.dtype, j * k + i);
        UNROLL for (unsigned int r = 0; r < MV_MAX_ROWS; r++) {
            if (r >= rows) break;
            acc[r] = acc[r] + x[r * k + i] * wi;
        }
    }
}

// Grid::Teams of p.n * team threads in blocks of 256; p.c[1] = MV_RPW (p.c[0], MV_ROWS, is p.rows).
KERNEL(matvec_stream, MatvecParams) {
    unsigned int rpw = p.c[1];
    unsigned int T = rpw == 0 || rpw > blockDim.x ? blockDim.x : blockDim.x / rpw;
    unsigned int lane = threadIdx.x % T;
    unsigned long long j = (unsigned long long)blockIdx.x * (blockDim.x / T) + threadIdx.x / T;
    bool live = j < p.n;
    unsigned int rows = p.rows < MV_MAX_ROWS ? p.rows : MV_MAX_ROWS;
    const unsigned char* w = (const unsigned char*)in2;
    float acc[MV_MAX_ROWS], acc_up[MV_MAX_ROWS];
    UNROLL for (int r = 0; r < MV_MAX_ROWS; r++) {
        acc[r] = 0.0f;
        acc_up[r] = 0.0f;
    }
    if (live) {
        mv_row(p, in0, w, j, lane, T, acc);
        if (p.glu != 0) mv_row(p, in0, w, j + p.glu, lane, T, acc_up);
    }
    // Every thread reduces (the shuffles are warp-wide); lane r of the team stores x row r.
    // Constant bounds with a break, here and above: acc stays in registers.
    unsigned long long col = p.col0 + j;
    UNROLL for (unsigned int r = 0; r < MV_MAX_ROWS; r++) {
        if (r >= rows) break;
        float s = team_sum(acc[r], T);
        float up = p.glu != 0 ? team_sum(acc_up[r], T) : 0.0f;
        if (live && lane == r % T) {
            float out = p.bias == 1 ? s + in1[col] : s;
            if (p.glu != 0) out = s * sigmoid_safe(s) * up;
            unsigned long long o = r * p.ldo + col;
            out0[o] = p.accum == 1 ? out0[o] + out : out;
        }
    }
}

// f32 to IEEE binary16 bits, rounded to nearest even as the `half` crate and cuda_fp16's
// __float2half_rn round: subnormals kept, beyond 65504 (after rounding) infinity, NaN stays a
// quiet NaN with the top of its payload.
__device__ inline unsigned int f16_of(float f) {
    unsigned int x = __float_as_uint(f);
    unsigned int sign = (x >> 16) & 0x8000u;
    unsigned int ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u | ((ax >> 13) & 0x3ffu);
    if (ax >= 0x47800000u) return sign | 0x7c00u;  // 65536 and above (infinity too)
    if (ax < 0x38800000u) {                        // below 2^-14: a subnormal half, or zero
        if (ax < 0x33000000u) return sign;         // below 2^-25 rounds to zero
        unsigned int e = ax >> 23;
        unsigned int m = (ax & 0x7fffffu) | 0x800000u;
        unsigned int shift = 126u - e;  // 14..24: m * 2^(e - 150) in units of 2^-24
        unsigned int r = m >> shift;
        unsigned int rem = m & ((1u << shift) - 1u);
        unsigned int halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (r & 1u))) r += 1u;
        return sign | r;
    }
    unsigned int r = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);
    unsigned int rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r += 1u;  // a carry may reach infinity
    return sign | r;
}

// f32 to bfloat16 bits, rounded to nearest even; NaN stays a quiet NaN.
__device__ inline unsigned int bf16_of(float f) {
    unsigned int x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

// An operand of CUDA's half products: n elements, f32 in in0 (p.source = F32_SOURCE) or of the
// weight dtype coded p.source in in2 (decoded as `dequantize` does), rounded to f16 (p.bf16 = 0)
// or bf16 (p.bf16 = 1). One thread per output word: elements 2w and 2w + 1 (the high half of
// the last word is zero when n is odd).
KERNEL(to_half, ToHalfParams) {
    unsigned long long w = global_index();
    unsigned long long n = p.n;
    if (2 * w >= n) return;
    unsigned int bits[2] = {0u, 0u};
    for (unsigned int j = 0; j < 2; j++) {
        unsigned long long i = 2 * w + j;
        if (i >= n) break;
        float v = p.source == F32_SOURCE ? in0[i] : decode((const unsigned char*)in2, p.source, i);
        bits[j] = p.bf16 == 1 ? bf16_of(v) : f16_of(v);
    }
    ((unsigned int*)out0)[w] = bits[0] | (bits[1] << 16);
}
