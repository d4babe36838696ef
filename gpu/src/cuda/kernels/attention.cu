// Scaled dot-product attention with GQA and an optional causal mask, forward and backward.
// q [b, hq, s, d], k [b, hkv, t, d], v [b, hkv, t, dv]; query head h reads kv head
// h / (hq / hkv) by index (no repeated K/V). Causal (p.c[0] = 1): key j is masked for query row
// i when j > i + (t - s); a sliding window (p.c[1] > 0, causal only) also masks keys
// j <= i + (t - s) - p.c[1]. A row that sees no key outputs 0. CPU reference: kernels-core
// src/cpu/attention.rs.
//
// Forward: one block per query row; the row's max and sum over the scores, then the output
// accumulated tile by tile of keys (probabilities staged in shared memory, each thread owning
// output elements e = lid, lid + blockDim...). The [s, t] score matrix never exists.
// Backward recomputes the probabilities: `attn_dq` (one block per query row) writes the row's
// max, sum and delta = sum_j p_j dp_j to `stats` and accumulates dq; `attn_dkv` (one block per
// key of each kv head) loops over the query rows of the heads sharing the kv head.
//
// Every kernel reads `AttentionParams` (gpu/src/params.rs); p.c[0] = causal, p.c[1] = window. Keys are laid out
// p.seq_kv per head; only the first p.kv_len are read (a preallocated KV cache).

// Keys 0..visible(i) are seen by query row i.
__device__ inline unsigned int visible(const AttentionParams& p, unsigned int i) {
    unsigned int s = p.seq_q, t = p.kv_len;
    if (p.c[0] == 0) return t;
    if ((unsigned long long)i + 1 + t <= s) return 0;
    unsigned long long v = (unsigned long long)i + 1 + t - s;
    return v < t ? (unsigned int)v : t;
}

// The first key query row i sees: keys first_key(i)..visible(i).
__device__ inline unsigned int first_key(const AttentionParams& p, unsigned int i) {
    unsigned int hi = visible(p, i), w = p.c[1];
    return (w == 0 || hi <= w) ? 0 : hi - w;
}

__device__ inline float dot(const float* a, const float* b, unsigned int n) {
    float acc = 0.0f;
    for (unsigned int e = 0; e < n; e++) acc = acc + a[e] * b[e];
    return acc;
}

// Offsets of the kv head that query row `row` (b, h, i) reads: K and V element bases.
__device__ inline void kv_bases(const AttentionParams& p, unsigned long long row, unsigned long long* k_base,
                                unsigned long long* v_base) {
    unsigned long long s = p.seq_q, t = p.seq_kv;
    unsigned long long bh = row / s;
    unsigned long long b = bh / p.heads_q, h = bh % p.heads_q;
    unsigned long long hkv = p.heads_q / p.group;
    unsigned long long kvh = b * hkv + h / p.group;
    *k_base = kvh * t * p.head_dim;
    *v_base = kvh * t * p.head_dim_v;
}

// in0 = q, in1 = k, in2 = v; out0 = out [b, hq, s, dv]. One block per query row.
KERNEL(attn_forward, AttentionParams) {
    __shared__ float sh_p[MAX_THREADS];
    unsigned long long row = blockIdx.x;
    unsigned int d = p.head_dim, dv = p.head_dim_v;
    unsigned int i = (unsigned int)(row % p.seq_q);
    unsigned long long k_base, v_base;
    kv_bases(p, row, &k_base, &v_base);
    const float* qr = in0 + row * d;
    unsigned int vis = visible(p, i), lo = first_key(p, i);
    float m = -k_inf();
    for (unsigned int j = lo + threadIdx.x; j < vis; j += blockDim.x) {
        m = fmaxf(m, dot(qr, in1 + k_base + (unsigned long long)j * d, d) * p.scale);
    }
    m = block_max(m);
    float l = 0.0f;
    for (unsigned int j = lo + threadIdx.x; j < vis; j += blockDim.x) {
        l = l + expf(dot(qr, in1 + k_base + (unsigned long long)j * d, d) * p.scale - m);
    }
    l = block_sum(l);
    float* o = out0 + row * dv;
    for (unsigned int e = threadIdx.x; e < dv; e += blockDim.x) o[e] = 0.0f;
    for (unsigned int j0 = lo; j0 < vis; j0 += blockDim.x) {
        unsigned int j = j0 + threadIdx.x;
        sh_p[threadIdx.x] =
            j < vis ? expf(dot(qr, in1 + k_base + (unsigned long long)j * d, d) * p.scale - m) / l : 0.0f;
        __syncthreads();
        unsigned int n = vis - j0 < blockDim.x ? vis - j0 : blockDim.x;
        for (unsigned int e = threadIdx.x; e < dv; e += blockDim.x) {
            float acc = o[e];
            for (unsigned int jj = 0; jj < n; jj++) {
                acc = acc + sh_p[jj] * in2[v_base + (unsigned long long)(j0 + jj) * dv + e];
            }
            o[e] = acc;
        }
        __syncthreads();
    }
}

// in0 = q, in1 = k, in2 = v, in3 = grad_out; out0 = dq [b, hq, s, d], out2 = stats
// [b * hq * s, 4] (max, sum, delta, 0). One block per query row.
KERNEL(attn_dq, AttentionParams) {
    __shared__ float sh_ds[MAX_THREADS];
    unsigned long long row = blockIdx.x;
    unsigned int d = p.head_dim, dv = p.head_dim_v;
    unsigned int i = (unsigned int)(row % p.seq_q);
    unsigned long long k_base, v_base;
    kv_bases(p, row, &k_base, &v_base);
    const float* qr = in0 + row * d;
    const float* gr = in3 + row * dv;
    unsigned int vis = visible(p, i), lo = first_key(p, i);
    float m = -k_inf();
    for (unsigned int j = lo + threadIdx.x; j < vis; j += blockDim.x) {
        m = fmaxf(m, dot(qr, in1 + k_base + (unsigned long long)j * d, d) * p.scale);
    }
    m = block_max(m);
    float l = 0.0f;
    for (unsigned int j = lo + threadIdx.x; j < vis; j += blockDim.x) {
        l = l + expf(dot(qr, in1 + k_base + (unsigned long long)j * d, d) * p.scale - m);
    }
    l = block_sum(l);
    float delta = 0.0f;
    for (unsigned int j = lo + threadIdx.x; j < vis; j += blockDim.x) {
        float pj = expf(dot(qr, in1 + k_base + (unsigned long long)j * d, d) * p.scale - m) / l;
        delta = delta + pj * dot(gr, in2 + v_base + (unsigned long long)j * dv, dv);
    }
    delta = block_sum(delta);
    if (threadIdx.x == 0) {
        out2[row * 4] = m;
        out2[row * 4 + 1] = l;
        out2[row * 4 + 2] = delta;
        out2[row * 4 + 3] = 0.0f;
    }
    float* dq = out0 + row * d;
    for (unsigned int e = threadIdx.x; e < d; e += blockDim.x) dq[e] = 0.0f;
    for (unsigned int j0 = lo; j0 < vis; j0 += blockDim.x) {
        unsigned int j = j0 + threadIdx.x;
        float ds = 0.0f;
        if (j < vis) {
            float pj = expf(dot(qr, in1 + k_base + (unsigned long long)j * d, d) * p.scale - m) / l;
            ds = pj * (dot(gr, in2 + v_base + (unsigned long long)j * dv, dv) - delta) * p.scale;
        }
        sh_ds[threadIdx.x] = ds;
        __syncthreads();
        unsigned int n = vis - j0 < blockDim.x ? vis - j0 : blockDim.x;
        for (unsigned int e = threadIdx.x; e < d; e += blockDim.x) {
            float acc = dq[e];
            for (unsigned int jj = 0; jj < n; jj++) {
                acc = acc + sh_ds[jj] * in1[k_base + (unsigned long long)(j0 + jj) * d + e];
            }
            dq[e] = acc;
        }
        __syncthreads();
    }
}

// in0 = q, in1 = k, in2 = v, in3 = grad_out, stats from attn_dq in out2; out0 = dk
// [b, hkv, t, d], out1 = dv [b, hkv, t, dv]. One block per key (b, kv head, j).
KERNEL(attn_dkv, AttentionParams) {
    __shared__ float sh_pj[MAX_THREADS];
    __shared__ float sh_ds[MAX_THREADS];
    unsigned long long key = blockIdx.x;
    unsigned long long s = p.seq_q, t = p.seq_kv;
    unsigned int d = p.head_dim, dv = p.head_dim_v;
    unsigned long long group = p.group;
    unsigned long long hkv = p.heads_q / group;
    unsigned long long kvh = key / t;
    unsigned int j = (unsigned int)(key % t);
    unsigned long long b = kvh / hkv;
    unsigned long long first_head = (kvh % hkv) * group;
    const float* kr = in1 + key * d;
    const float* vr = in2 + key * dv;
    const float* stats = out2;
    float* dk = out0 + key * d;
    float* dvo = out1 + key * dv;
    for (unsigned int e = threadIdx.x; e < d; e += blockDim.x) dk[e] = 0.0f;
    for (unsigned int e = threadIdx.x; e < dv; e += blockDim.x) dvo[e] = 0.0f;
    unsigned long long rows = group * s;
    for (unsigned long long r0 = 0; r0 < rows; r0 += blockDim.x) {
        unsigned long long r = r0 + threadIdx.x;
        float pj = 0.0f, ds = 0.0f;
        if (r < rows) {
            unsigned int i = (unsigned int)(r % s);
            unsigned long long row = (b * p.heads_q + first_head + r / s) * s + i;
            if (j >= first_key(p, i) && j < visible(p, i)) {
                float m = stats[row * 4], l = stats[row * 4 + 1], delta = stats[row * 4 + 2];
                pj = expf(dot(in0 + row * d, kr, d) * p.scale - m) / l;
                ds = pj * (dot(in3 + row * dv, vr, dv) - delta) * p.scale;
            }
        }
        sh_pj[threadIdx.x] = pj;
        sh_ds[threadIdx.x] = ds;
        __syncthreads();
        unsigned long long n = rows - r0 < blockDim.x ? rows - r0 : blockDim.x;
        for (unsigned int e = threadIdx.x; e < d || e < dv; e += blockDim.x) {
            float acc_k = e < d ? dk[e] : 0.0f;
            float acc_v = e < dv ? dvo[e] : 0.0f;
            for (unsigned long long rr = 0; rr < n; rr++) {
                unsigned long long r2 = r0 + rr;
                // Rows that do not see key j add nothing, not even 0 * q (NaN for infinite q).
                if (j >= visible(p, (unsigned int)(r2 % s))) continue;
                unsigned long long row2 = (b * p.heads_q + first_head + r2 / s) * s + r2 % s;
                if (e < d) acc_k = acc_k + sh_ds[rr] * in0[row2 * d + e];
                if (e < dv) acc_v = acc_v + sh_pj[rr] * in3[row2 * dv + e];
            }
            if (e < d) dk[e] = acc_k;
            if (e < dv) dvo[e] = acc_v;
        }
        __syncthreads();
    }
}
