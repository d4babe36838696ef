// layer_norm and rms_norm over the last dim (p.c[0] = 1 for rms), forward and backward. One
// block per row; the backward writes grad_x and per-row statistics, then a second kernel sums
// grad_weight / grad_bias over rows, one thread per column, in row order. CPU reference:
// kernels-core src/cpu/norm.rs.

// (mean, 1/sqrt(var + eps)) of a layer_norm row, or (0, 1/sqrt(mean(x^2) + eps)) for rms_norm.
// Two passes (mean, then squared deviations) for accuracy.
__device__ inline void row_stats(const NormParams& p, const float* x, unsigned int n, float* mean_out,
                                 float* rstd_out) {
    // Four loads in flight a thread (decode's single row is bound by their latency).
    unsigned int bd = blockDim.x;
    float mean = 0.0f;
    if (p.c[0] == 0) {
        float acc = 0.0f;
        unsigned int j = threadIdx.x;
        for (; j + 3 * bd < n && j + 3 * bd >= j; j += 4 * bd) {
            float v[4];
            UNROLL for (unsigned int i = 0; i < 4; i++) v[i] = x[j + i * bd];
            UNROLL for (unsigned int i = 0; i < 4; i++) acc = acc + v[i];
        }
        for (; j < n; j += bd) acc = acc + x[j];
        mean = block_sum(acc) / (float)n;
    }
    float sq = 0.0f;
    unsigned int j = threadIdx.x;
    for (; j + 3 * bd < n && j + 3 * bd >= j; j += 4 * bd) {
        float v[4];
        UNROLL for (unsigned int i = 0; i < 4; i++) v[i] = x[j + i * bd] - mean;
        UNROLL for (unsigned int i = 0; i < 4; i++) sq = sq + v[i] * v[i];
    }
    for (; j < n; j += bd) {
        float d = x[j] - mean;
        sq = sq + d * d;
    }
    float var = block_sum(sq) / (float)n;
    *mean_out = mean;
    *rstd_out = 1.0f / sqrtf(var + p.eps);
}

// in0 = x [rows, n], in1 = weight [n], in2 = bias [n] (layer_norm); out0 [rows, n].
KERNEL(norm_forward, NormParams) {
    unsigned long long row = blockIdx.x;
    unsigned int n = p.cols;
    unsigned long long base = row * n;
    float mean, rstd;
    row_stats(p, in0 + base, n, &mean, &rstd);
    unsigned int bd = blockDim.x, j = threadIdx.x;
    bool rms = p.c[0] == 1;
    for (; j + 3 * bd < n && j + 3 * bd >= j; j += 4 * bd) {
        float xv[4], wv[4], bv[4];
        UNROLL for (unsigned int i = 0; i < 4; i++) {
            xv[i] = in0[base + j + i * bd];
            wv[i] = in1[j + i * bd];
            bv[i] = rms ? 0.0f : in2[j + i * bd];
        }
        UNROLL for (unsigned int i = 0; i < 4; i++) {
            float xhat = (xv[i] - mean) * rstd;
            out0[base + j + i * bd] = rms ? xhat * wv[i] : xhat * wv[i] + bv[i];
        }
    }
    for (; j < n; j += bd) {
        float xhat = (in0[base + j] - mean) * rstd;
        out0[base + j] = rms ? xhat * in1[j] : xhat * in1[j] + in2[j];
    }
}

// in0 = x, in1 = weight, in2 = grad_out; out0 = grad_x, out1 = stats [rows, 2] (mean, rstd).
// layer_norm: gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), gh = g * w.
// rms_norm:   gx = rstd * (gh - xhat * mean(gh * xhat)).
KERNEL(norm_backward_rows, NormParams) {
    unsigned long long row = blockIdx.x;
    unsigned int n = p.cols;
    unsigned long long base = row * n;
    float mean, rstd;
    row_stats(p, in0 + base, n, &mean, &rstd);
    float s1 = 0.0f, s2 = 0.0f;
    for (unsigned int j = threadIdx.x; j < n; j += blockDim.x) {
        float gh = in2[base + j] * in1[j];
        float xhat = (in0[base + j] - mean) * rstd;
        s1 = s1 + gh;
        s2 = s2 + gh * xhat;
    }
    float m1 = block_sum(s1) / (float)n;
    float m2 = block_sum(s2) / (float)n;
    for (unsigned int j = threadIdx.x; j < n; j += blockDim.x) {
        float gh = in2[base + j] * in1[j];
        float xhat = (in0[base + j] - mean) * rstd;
        // gh - m1 is exactly 0 over a row of one (NaN where gh is not finite); computed, a
        // contracted fma(g, w, -m1) leaves g * w's rounding error, which rstd magnifies.
        float centered = n == 1 ? 0.0f * gh : gh - m1;
        out0[base + j] = p.c[0] == 1 ? rstd * (gh - xhat * m2) : rstd * (centered - xhat * m2);
    }
    if (threadIdx.x == 0) {
        out1[2 * row] = mean;
        out1[2 * row + 1] = rstd;
    }
}

// in0 = x [rows, n], in1 = grad_out, in2 = stats; out0 = grad_weight [n], out1 = grad_bias [n]
// (layer_norm only). One thread per column.
KERNEL(norm_backward_cols, NormParams) {
    unsigned long long j = global_index();
    unsigned long long rows = p.rows, n = p.cols;
    if (j >= n) return;
    float gw = 0.0f, gb = 0.0f;
    for (unsigned long long r = 0; r < rows; r++) {
        float g = in1[r * n + j];
        float xhat = (in0[r * n + j] - in2[2 * r]) * in2[2 * r + 1];
        gw = gw + g * xhat;
        gb = gb + g;
    }
    out0[j] = gw;
    if (p.c[0] == 0) out1[j] = gb;
}
