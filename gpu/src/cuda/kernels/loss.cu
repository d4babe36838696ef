// Losses: cross-entropy over class logits and mean squared error, forward and backward.
// Forward is two steps: one block per row (cross-entropy) or per chunk (mse) writes a partial
// sum, then one block adds the partials in a fixed tree order and scales by 1/N (`sum_scale`).
// Backward is one block per row (cross-entropy recomputes the row's max and sum) or one thread
// per element (mse). CPU reference: kernels-core src/cpu/loss.rs.

// The row's target class, clamped into range (targets made on the device are not checked on
// the host; an out-of-range one must not read outside the row).
__device__ inline unsigned int target_of(const float* in3, unsigned long long row, unsigned int c) {
    int k = ((const int*)in3)[row];
    if (k < 0) k = 0;
    if ((unsigned int)k >= c) k = (int)c - 1;
    return (unsigned int)k;
}

// in0 = logits [rows, c], in3 = targets [rows]; out0 = per-row loss [rows].
KERNEL(ce_rows, CrossEntropyParams) {
    unsigned long long row = blockIdx.x;
    unsigned int c = p.classes;
    const float* x = in0 + row * c;
    float m = -k_inf();
    for (unsigned int j = threadIdx.x; j < c; j += blockDim.x) m = fmaxf(m, x[j]);
    m = block_max(m);
    float s = 0.0f;
    for (unsigned int j = threadIdx.x; j < c; j += blockDim.x) s = s + expf(x[j] - m);
    s = block_sum(s);
    // -log softmax(x)_k = ln sum exp(x - m) - (x_k - m)
    if (threadIdx.x == 0) out0[row] = logf(s) - (x[target_of(in3, row, c)] - m);
}

// in0 = partials [n]; out0 = [1] = sum * p.scale. One block.
KERNEL(sum_scale, SumScaleParams) {
    float s = 0.0f;
    for (unsigned int j = threadIdx.x; j < p.n; j += blockDim.x) s = s + in0[j];
    s = block_sum(s);
    if (threadIdx.x == 0) out0[0] = s * p.scale;
}

// in0 = logits [rows, c], in2 = grad_out [1], in3 = targets; out0 = grad_logits [rows, c].
// p.scale = 1 / rows
KERNEL(ce_backward, CrossEntropyParams) {
    unsigned long long row = blockIdx.x;
    unsigned int c = p.classes;
    const float* x = in0 + row * c;
    float m = -k_inf();
    for (unsigned int j = threadIdx.x; j < c; j += blockDim.x) m = fmaxf(m, x[j]);
    m = block_max(m);
    float s = 0.0f;
    for (unsigned int j = threadIdx.x; j < c; j += blockDim.x) s = s + expf(x[j] - m);
    s = block_sum(s);
    unsigned int k = target_of(in3, row, c);
    float scale = in2[0] * p.scale;
    for (unsigned int j = threadIdx.x; j < c; j += blockDim.x) {
        float prob = expf(x[j] - m) / s;
        out0[row * c + j] = (prob - (j == k ? 1.0f : 0.0f)) * scale;
    }
}

// in0 = a, in1 = b, each [n] viewed as chunks of p.chunk; out0 = per-chunk sum of (a - b)^2.
// One block per chunk.
KERNEL(mse_chunks, MseChunksParams) {
    unsigned long long chunk = blockIdx.x;
    unsigned long long start = chunk * p.chunk;
    unsigned long long end = start + p.chunk < p.n ? start + p.chunk : p.n;
    float s = 0.0f;
    for (unsigned long long j = start + threadIdx.x; j < end; j += blockDim.x) {
        float d = in0[j] - in1[j];
        s = s + d * d;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) out0[chunk] = s;
}

// in0 = a, in1 = b, in2 = grad_out [1]; out0 = grad_a, out1 = grad_b. p.scale = 2 / n
KERNEL(mse_backward, MseGradParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    float d = (in0[i] - in1[i]) * (in2[0] * p.scale);
    out0[i] = d;
    out1[i] = -d;
}
