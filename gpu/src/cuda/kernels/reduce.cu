// Reductions over the last dim: sum, mean, max (op code p.c[0]: REDUCE_* in contract.cuh),
// argmax and sample, forward and backward. One block per row: a strided pass per thread, then a tree in
// shared memory. CPU reference: kernels-core src/cpu/reduce.rs (the first maximum wins ties, a
// row holding NaN has its max at the first NaN).

// Whether candidate (v, i) beats the current best (bv, bi): NaN beats numbers, then larger
// values, then the lower index on ties. bi == NONE means no best yet.
#define NONE 0xffffffffu
__device__ inline bool beats(float v, unsigned int i, float bv, unsigned int bi) {
    if (i == NONE) return false;
    if (bi == NONE) return true;
    bool vn = v != v, bn = bv != bv;
    if (vn || bn) return vn && (!bn || i < bi);
    return v > bv || (v == bv && i < bi);
}

// Index of the first maximum of row `row[0..n]`; every thread gets it.
__device__ inline unsigned int block_argmax(const float* row, unsigned int n) {
    __shared__ float sh_v[MAX_THREADS];
    __shared__ unsigned int sh_i[MAX_THREADS];
    unsigned int lid = threadIdx.x;
    float best_v = 0.0f;
    unsigned int best_i = NONE;
    unsigned int j = lid, bd = blockDim.x;
    // Eight loads in flight, then compared in index order (a long row, as decode's logits, is
    // bound by the loads' latency one at a time).
    for (; j + 7 * bd < n && j + 7 * bd >= j; j += 8 * bd) {
        float v[8];
        UNROLL for (unsigned int i = 0; i < 8; i++) v[i] = row[j + i * bd];
        UNROLL for (unsigned int i = 0; i < 8; i++) {
            if (beats(v[i], j + i * bd, best_v, best_i)) {
                best_v = v[i];
                best_i = j + i * bd;
            }
        }
    }
    for (; j < n; j += bd) {
        if (beats(row[j], j, best_v, best_i)) {
            best_v = row[j];
            best_i = j;
        }
    }
    sh_v[lid] = best_v;
    sh_i[lid] = best_i;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (lid < s && beats(sh_v[lid + s], sh_i[lid + s], sh_v[lid], sh_i[lid])) {
            sh_v[lid] = sh_v[lid + s];
            sh_i[lid] = sh_i[lid + s];
        }
        __syncthreads();
    }
    unsigned int r = sh_i[0];
    __syncthreads();
    return r;
}

// in0 = x [rows, n]; out0 = [rows]. One block per row.
KERNEL(reduce_forward, RowsParams) {
    unsigned long long row = blockIdx.x;
    unsigned int n = p.cols;
    const float* x = in0 + row * n;
    if (p.c[0] == REDUCE_MAX) {
        unsigned int at = block_argmax(x, n);
        if (threadIdx.x == 0) out0[row] = x[at];
        return;
    }
    float acc = 0.0f;
    for (unsigned int j = threadIdx.x; j < n; j += blockDim.x) acc = acc + x[j];
    float total = block_sum(acc);
    if (threadIdx.x == 0) {
        out0[row] = p.c[0] == REDUCE_SUM    ? total
                    : p.c[0] == REDUCE_MEAN ? total / (float)n
                                            : KERNEL_NAN;
    }
}

// in0 = x [rows, n]; out1 = [rows] as i32. p as reduce_forward.
KERNEL(argmax, RowsParams) {
    unsigned long long row = blockIdx.x;
    unsigned int n = p.cols;
    unsigned int at = block_argmax(in0 + row * n, n);
    if (threadIdx.x == 0) ((int*)out1)[row] = (int)at;
}

// in0 = x [rows, n], in2 = grad_out [rows]; out0 = grad_x [rows, n]. p as reduce_forward.
KERNEL(reduce_backward, RowsParams) {
    unsigned long long row = blockIdx.x;
    unsigned int n = p.cols;
    unsigned long long base = row * n;
    float g = in2[row];
    if (p.c[0] == REDUCE_MAX) {
        unsigned int at = block_argmax(in0 + base, n);
        for (unsigned int j = threadIdx.x; j < n; j += blockDim.x) out0[base + j] = j == at ? g : 0.0f;
        return;
    }
    float v = p.c[0] == REDUCE_SUM ? g : p.c[0] == REDUCE_MEAN ? g / (float)n : KERNEL_NAN;
    for (unsigned int j = threadIdx.x; j < n; j += blockDim.x) out0[base + j] = v;
}

// ---- sample: the definition is kernels-core's cpu/sample.rs; as the WGSL, by reductions ----

// f32 -> u32 with the same order (finite values and infinities).
__device__ inline unsigned int order_key(float v) {
    unsigned int b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ inline float sample_weight(float v, float m, float t, unsigned int keep_from) {
    return order_key(v) < keep_from ? 0.0f : expf((v - m) / t);
}

// in0 = logits [rows, n], in1 = uniform [rows]; out1 = ids [rows] as i32.
KERNEL(sample, SampleParams) {
    __shared__ float sh_part[MAX_THREADS];
    unsigned long long row = blockIdx.x;
    unsigned int n = p.cols;
    unsigned int lid = threadIdx.x;
    unsigned int wg = blockDim.x;
    const float* x = in0 + row * n;
    int* out = (int*)out1;
    float t = p.temperature;
    // block_argmax puts a row's first NaN first, as the reference.
    unsigned int best = block_argmax(x, n);
    if (x[best] != x[best] || t == 0.0f) {
        if (lid == 0) out[row] = (int)best;
        return;
    }
    float m = x[best];
    unsigned int keep_from = 0;
    unsigned int k = p.top_k;
    if (k > 0 && k < n) {
        // The largest key t_k with count(key >= t_k) >= k: the k-th largest, bit by bit.
        unsigned int tk = 0;
        for (int bit = 31; bit >= 0; bit--) {
            unsigned int cand = tk | (1u << bit);
            float c = 0.0f;
            for (unsigned int j = lid; j < n; j += wg) c += order_key(x[j]) >= cand ? 1.0f : 0.0f;
            if (block_sum(c) >= (float)k) tk = cand;
        }
        keep_from = tk;
    }
    if (p.top_p < 1.0f) {
        float z = 0.0f;
        for (unsigned int j = lid; j < n; j += wg) z += sample_weight(x[j], m, t, keep_from);
        float limit = p.top_p * block_sum(z);
        // The largest key with mass(key > t0) >= limit; kept tokens start one above it.
        unsigned int t0 = 0;
        bool found = false;
        for (int bit = 31; bit >= 0; bit--) {
            unsigned int cand = t0 | (1u << bit);
            float above = 0.0f;
            for (unsigned int j = lid; j < n; j += wg)
                if (order_key(x[j]) > cand) above += sample_weight(x[j], m, t, keep_from);
            if (block_sum(above) >= limit) {
                t0 = cand;
                found = true;
            }
        }
        unsigned int tp = 0;
        if (found) {
            tp = t0 + 1;
        } else {
            float above0 = 0.0f;
            for (unsigned int j = lid; j < n; j += wg)
                if (order_key(x[j]) > 0u) above0 += sample_weight(x[j], m, t, keep_from);
            if (block_sum(above0) >= limit) tp = 1;
        }
        keep_from = keep_from > tp ? keep_from : tp;
    }
    // Draw: contiguous chunks per thread, a serial walk over the chunk sums, then in the chunk.
    unsigned int chunk = (n + wg - 1) / wg;
    unsigned int lo = lid * chunk < n ? lid * chunk : n;
    unsigned int hi = lo + chunk < n ? lo + chunk : n;
    float part = 0.0f;
    for (unsigned int j = lo; j < hi; j++) part += sample_weight(x[j], m, t, keep_from);
    float total = block_sum(part);
    sh_part[lid] = part;
    __syncthreads();
    if (lid == 0) {
        float goal = in1[row] * total;
        float acc = 0.0f;
        unsigned int c = 0;
        while (c + 1 < wg && !(acc + sh_part[c] > goal)) {
            acc += sh_part[c];
            c++;
        }
        unsigned int pick = best;
        unsigned int start = c * chunk < n ? c * chunk : n;
        for (unsigned int j = start; j < n; j++) {
            float w = sample_weight(x[j], m, t, keep_from);
            if (w > 0.0f) {
                acc += w;
                pick = j;
                if (acc > goal) break;
            }
        }
        out[row] = (int)pick;
    }
}
