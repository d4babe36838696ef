// softmax / log_softmax over the last dim (p.c[0] = 1 for log), forward and backward, with an
// optional causal mask (p.c[1] = 1): key j is masked for row i of each [s, t] block when
// j > i + (t - s). Masked outputs are 0 (softmax) or -inf (log_softmax) and get zero gradient.
// One block per row. CPU reference: kernels-core src/cpu/softmax.rs.

// Number of visible keys of this row: keys 0..valid.
__device__ inline unsigned int valid_len(const SoftmaxParams& p, unsigned long long row) {
    unsigned int t = p.cols;
    if (p.c[1] == 0) return t;
    long long s = p.seq;
    long long i = (long long)(row % (unsigned long long)s);
    long long last = i + (long long)t - s;
    if (last < 0) return 0;
    return last + 1 < (long long)t ? (unsigned int)(last + 1) : t;
}

// in0 = x [rows, t]; out0 [rows, t]. t = p.cols, s = p.seq
KERNEL(softmax_forward, SoftmaxParams) {
    unsigned long long row = blockIdx.x;
    unsigned int t = p.cols;
    const float* x = in0 + row * t;
    float* y = out0 + row * t;
    unsigned int valid = valid_len(p, row);
    bool log_out = p.c[0] == 1;
    float m = -k_inf();
    for (unsigned int j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, x[j]);
    m = block_max(m);
    float acc = 0.0f;
    for (unsigned int j = threadIdx.x; j < valid; j += blockDim.x) acc = acc + expf(x[j] - m);
    float total = block_sum(acc);
    float log_total = logf(total);
    for (unsigned int j = threadIdx.x; j < t; j += blockDim.x) {
        if (j < valid) {
            y[j] = log_out ? x[j] - m - log_total : expf(x[j] - m) / total;
        } else {
            y[j] = log_out ? -k_inf() : 0.0f;
        }
    }
}

// in0 = x, in1 = y (forward output), in2 = grad_y; out0 = grad_x. p as forward.
KERNEL(softmax_backward, SoftmaxParams) {
    unsigned long long row = blockIdx.x;
    unsigned int t = p.cols;
    unsigned long long base = row * t;
    unsigned int valid = valid_len(p, row);
    bool log_out = p.c[0] == 1;
    float acc = 0.0f;
    for (unsigned int j = threadIdx.x; j < valid; j += blockDim.x) {
        acc = acc + (log_out ? in2[base + j] : in2[base + j] * in1[base + j]);
    }
    float dot = block_sum(acc);
    for (unsigned int j = threadIdx.x; j < t; j += blockDim.x) {
        float gx = 0.0f;
        if (j < valid) {
            float y = in1[base + j];
            float g = in2[base + j];
            gx = log_out ? g - expf(y) * dot : y * (g - dot);
        }
        out0[base + j] = gx;
    }
}
