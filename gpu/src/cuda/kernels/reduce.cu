// Reductions over the last dim: sum, mean, max (op code p.u[7]: 0 sum, 1 mean, 2 max) and
// argmax, forward and backward. One block per row: a strided pass per thread, then a tree in
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
    for (unsigned int j = lid; j < n; j += blockDim.x) {
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

// in0 = x [rows, n]; out0 = [rows]. p.u[0] = rows, p.u[1] = n. One block per row.
KERNEL(reduce_forward) {
    unsigned long long row = blockIdx.x;
    unsigned int n = p.u[1];
    const float* x = in0 + row * n;
    if (p.u[7] == 2) {
        unsigned int at = block_argmax(x, n);
        if (threadIdx.x == 0) out0[row] = x[at];
        return;
    }
    float acc = 0.0f;
    for (unsigned int j = threadIdx.x; j < n; j += blockDim.x) acc = acc + x[j];
    float total = block_sum(acc);
    if (threadIdx.x == 0) out0[row] = p.u[7] == 1 ? total / (float)n : total;
}

// in0 = x [rows, n]; out1 = [rows] as i32. p as reduce_forward.
KERNEL(argmax) {
    unsigned long long row = blockIdx.x;
    unsigned int n = p.u[1];
    unsigned int at = block_argmax(in0 + row * n, n);
    if (threadIdx.x == 0) ((int*)out1)[row] = (int)at;
}

// in0 = x [rows, n], in2 = grad_out [rows]; out0 = grad_x [rows, n]. p as reduce_forward.
KERNEL(reduce_backward) {
    unsigned long long row = blockIdx.x;
    unsigned int n = p.u[1];
    unsigned long long base = row * n;
    float g = in2[row];
    if (p.u[7] == 2) {
        unsigned int at = block_argmax(in0 + base, n);
        for (unsigned int j = threadIdx.x; j < n; j += blockDim.x) out0[base + j] = j == at ? g : 0.0f;
        return;
    }
    float v = p.u[7] == 1 ? g / (float)n : g;
    for (unsigned int j = threadIdx.x; j < n; j += blockDim.x) out0[base + j] = v;
}
