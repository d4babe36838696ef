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
    unsigned int sign = (h & 0x8000u) << 16;
    unsigned int e = (h >> 10) & 0x1fu;
    unsigned int m = h & 0x3ffu;
    if (e == 0u) {
        float mag = (float)m * 5.9604644775390625e-8f;  // m * 2^-24, exact
        return sign ? -mag : mag;
    }
    if (e == 31u) return __int_as_float((int)(sign | 0x7f800000u | (m << 13)));
    return __int_as_float((int)(sign | ((e + 112u) << 23) | (m << 13)));
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

// Element e (0 or 1) of a word of two 16-bit floats.
__device__ inline float half_of(unsigned int v, unsigned int e, bool bf) {
    unsigned int h = e == 0 ? (v & 0xffffu) : (v >> 16);
    return bf ? __int_as_float((int)(h << 16)) : f16_bits(h);
}

// acc + the dot product of 8 16-bit floats (four words, in element order) with xa, xb.
__device__ inline float dot8_halves(float acc, Words4 v, Floats4 xa, Floats4 xb, bool bf) {
    acc = acc + xa.a * half_of(v.a, 0, bf);
    acc = acc + xa.b * half_of(v.a, 1, bf);
    acc = acc + xa.c * half_of(v.b, 0, bf);
    acc = acc + xa.d * half_of(v.b, 1, bf);
    acc = acc + xb.a * half_of(v.c, 0, bf);
    acc = acc + xb.b * half_of(v.c, 1, bf);
    acc = acc + xb.c * half_of(v.d, 0, bf);
    acc = acc + xb.d * half_of(v.d, 1, bf);
    return acc;
}

// Decode's products without a decoded copy of the weight: out0 [rows, n] = in0 [rows, k] @ W^T
// (+ in1 = bias when p.bias = 1), W = in2 [n, k] packed. One block per output element; its
// threads stride over k, decoding as they go, and the block sums. Outputs (and the bias) at
// columns p.col0.. of rows of p.ldo (a column block, as the WGSL kernel's); p.accum = 1 adds them
// to what out0 holds (matmul_add into its residual); p.glu != 0 gates output j with the up row
// j + p.glu (matmul_swiglu: silu(gate) * up). f32 weights (decode's f32 products) and f16/bf16
// rows of even length are read without the per-element decode: f32 rows directly, 16-bit rows
// one 32-bit word (two elements) a load.
KERNEL(matvec, MatvecParams) {
    unsigned long long g = blockIdx.x;
    if (g >= (unsigned long long)p.rows * p.n) return;
    unsigned long long r = g / p.n, j = g % p.n, k = p.k;
    // With p.glu, the up row j + p.glu is dotted beside the gate row j (matmul_swiglu).
    unsigned long long ju = j + p.glu;
    const unsigned char* w = (const unsigned char*)in2;
    float acc = 0.0f, acc_up = 0.0f;
    const float* x = in0 + r * k;
    bool halves = (p.dtype == WEIGHT_F16 || p.dtype == WEIGHT_BF16) && (k & 1ull) == 0;
    if (p.dtype == F32_SOURCE) {
        // An f32 weight (decode's f32 products): the rows read as f32, coalesced across the
        // block, no per-element decode.
        const float* wj = (const float*)in2 + j * k;
        const float* wu = (const float*)in2 + ju * k;
        for (unsigned long long i = threadIdx.x; i < k; i += blockDim.x) {
            acc = acc + x[i] * wj[i];
            if (p.glu != 0) acc_up = acc_up + x[i] * wu[i];
        }
    } else if (halves) {
        // f16 or bf16 rows of even length: one 32-bit word (two elements) a load; rows of a
        // multiple of 8 elements at 16-byte aligned addresses (x's too): one 16-byte load (8
        // elements) a thread and iteration, x read as two Floats4 (4x the bytes in flight).
        const unsigned int* w32 = (const unsigned int*)in2;
        unsigned long long kw = k / 2, wj = j * kw, wu = ju * kw;
        bool bf = p.dtype == WEIGHT_BF16;
        bool wide = (k & 7ull) == 0 && aligned16(w32 + wj) && aligned16(w32 + wu) && aligned16(x);
        if (wide) {
            const Words4* wv = (const Words4*)(w32 + wj);
            const Words4* uv = (const Words4*)(w32 + wu);
            const Floats4* xv = (const Floats4*)x;
            for (unsigned long long i = threadIdx.x; i < k / 8; i += blockDim.x) {
                Words4 v = wv[i];
                Floats4 xa = xv[2 * i], xb = xv[2 * i + 1];
                acc = dot8_halves(acc, v, xa, xb, bf);
                if (p.glu != 0) acc_up = dot8_halves(acc_up, uv[i], xa, xb, bf);
            }
        }
        for (unsigned long long i = wide ? kw : threadIdx.x; i < kw; i += blockDim.x) {
            unsigned int v = w32[wj + i];
            float lo = bf ? __int_as_float((int)(v << 16)) : f16_bits(v & 0xffffu);
            float hi = bf ? __int_as_float((int)(v & 0xffff0000u)) : f16_bits(v >> 16);
            acc = acc + x[2 * i] * lo;
            acc = acc + x[2 * i + 1] * hi;
            if (p.glu != 0) {
                unsigned int u = w32[wu + i];
                float ulo = bf ? __int_as_float((int)(u << 16)) : f16_bits(u & 0xffffu);
                float uhi = bf ? __int_as_float((int)(u & 0xffff0000u)) : f16_bits(u >> 16);
                acc_up = acc_up + x[2 * i] * ulo;
                acc_up = acc_up + x[2 * i + 1] * uhi;
            }
        }
    } else {
        for (unsigned long long i = threadIdx.x; i < k; i += blockDim.x) {
            acc = acc + x[i] * decode(w, p.dtype, j * k + i);
            if (p.glu != 0) acc_up = acc_up + x[i] * decode(w, p.dtype, ju * k + i);
        }
    }
    float s = block_sum(acc);
    float up = p.glu != 0 ? block_sum(acc_up) : 0.0f;
    unsigned long long col = p.col0 + j;
    if (threadIdx.x == 0) {
        float v = p.bias == 1 ? s + in1[col] : s;
        if (p.glu != 0) v = s * sigmoid_safe(s) * up;
        unsigned long long o = r * p.ldo + col;
        out0[o] = p.accum == 1 ? out0[o] + v : v;
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
