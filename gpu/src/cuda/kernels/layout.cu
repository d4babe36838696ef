// Data movement: transpose of the last two dims, concat on the last dim and its split, and
// embedding lookup with its scatter-free backward. One thread per output element. Exact: no
// arithmetic except the embedding gradient's sums (in token order, as the CPU reference).
// CPU references: kernels-core src/cpu/layout.rs and src/cpu/embedding.rs.

// in0 = x [batch, r, c]; out0 = [batch, c, r]. r = p.rows, c = p.cols
KERNEL(transpose, TransposeParams) {
    unsigned long long o = global_index();
    if (o >= p.n) return;
    unsigned long long r = p.rows, c = p.cols;
    unsigned long long plane = r * c;
    unsigned long long b = o / plane, rem = o % plane;
    unsigned long long ci = rem / r, ri = rem % r;
    out0[o] = in0[b * plane + ri * c + ci];
}

// in0 = a [rows, m], in1 = b [rows, k]; out0 = [rows, m + k]. m = p.width_a,
// k = p.width_b
KERNEL(concat, ConcatParams) {
    unsigned long long o = global_index();
    if (o >= p.n) return;
    unsigned long long m = p.width_a, k = p.width_b, w = m + k;
    unsigned long long row = o / w, j = o % w;
    out0[o] = j < m ? in0[row * m + j] : in1[row * k + (j - m)];
}

// in0 = grad_out [rows, m + k]; out0 = grad_a [rows, m], out1 = grad_b [rows, k].
KERNEL(concat_backward, ConcatParams) {
    unsigned long long o = global_index();
    if (o >= p.n) return;
    unsigned long long m = p.width_a, k = p.width_b, w = m + k;
    unsigned long long row = o / w, j = o % w;
    if (j < m) {
        out0[row * m + j] = in0[o];
    } else {
        out1[row * k + (j - m)] = in0[o];
    }
}

// kv_write: rows [heads, s, d] into a cache [heads, cap, d] at positions pos..pos + s.
// s = p.rows, d = p.width, cap = p.cap. In place: in0 = rows; out0 = the cache itself (donated),
// one thread per row element, the rest of the cache untouched.
KERNEL(kv_write, KvWriteParams) {
    unsigned long long o = global_index();
    if (o >= p.n) return;
    unsigned long long per = (unsigned long long)p.rows * p.width;
    unsigned long long head = o / per;
    out0[head * p.cap * p.width + (unsigned long long)p.pos * p.width + o % per] = in0[o];
}

// Out of place: in0 = cache, in1 = rows; out0 = [heads, cap, d], one thread per cache element.
KERNEL(kv_write_copy, KvWriteParams) {
    unsigned long long o = global_index();
    if (o >= p.n) return;
    unsigned long long per = (unsigned long long)p.cap * p.width;
    unsigned long long head = o / per, r = o % per;
    unsigned long long lo = (unsigned long long)p.pos * p.width;
    unsigned long long hi = lo + (unsigned long long)p.rows * p.width;
    out0[o] = (r >= lo && r < hi) ? in1[head * p.rows * p.width + (r - lo)] : in0[o];
}

// in0 = grad_out [heads, cap, d]; out0 = grad_cache (the written rows zeroed), out1 = grad_rows
// [heads, s, d]. One thread per grad_out element.
KERNEL(kv_write_backward, KvWriteParams) {
    unsigned long long o = global_index();
    if (o >= p.n) return;
    unsigned long long per = (unsigned long long)p.cap * p.width;
    unsigned long long head = o / per, r = o % per;
    unsigned long long lo = (unsigned long long)p.pos * p.width;
    unsigned long long hi = lo + (unsigned long long)p.rows * p.width;
    if (r >= lo && r < hi) {
        out0[o] = 0.0f;
        out1[head * p.rows * p.width + (r - lo)] = in0[o];
    } else {
        out0[o] = in0[o];
    }
}

// in3 = ids [tokens] (i32), in0 = weight [vocab, d]; out0 = [tokens, d]. Ids uploaded from the
// host were range-checked; others read as zeros rather than out of bounds.
// p.n = tokens * d, d = p.dim
KERNEL(embedding, EmbeddingParams) {
    unsigned long long o = global_index();
    if (o >= p.n) return;
    unsigned long long d = p.dim;
    int id = ((const int*)in3)[o / d];
    if (id < 0 || (unsigned int)id >= p.vocab) {
        if (p.first == 0) out0[o] = 0.0f;
        return;
    }
    unsigned int row = (unsigned int)id;
    if (row < p.first || row - p.first >= p.rows) return;
    out0[o] = in0[(unsigned long long)(row - p.first) * d + o % d];
}

// in3 = ids [tokens], in0 = grad_out [tokens, d]; out0 = grad_weight [vocab, d]: each thread
// owns one weight element and sums the tokens that picked its row (deterministic, no atomics).
// p.n = vocab * d, d = p.dim
KERNEL(embedding_backward, EmbeddingGradParams) {
    unsigned long long o = global_index();
    if (o >= p.n) return;
    unsigned long long d = p.dim;
    int v = (int)(o / d);
    unsigned long long col = o % d;
    const int* ids = (const int*)in3;
    float acc = 0.0f;
    for (unsigned long long t = 0; t < p.tokens; t++) {
        if (ids[t] == v) acc = acc + in0[t * d + col];
    }
    out0[o] = acc;
}
