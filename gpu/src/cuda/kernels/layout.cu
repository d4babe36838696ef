// Data movement: transpose of the last two dims, concat on the last dim and its split, and
// embedding lookup with its scatter-free backward. One thread per output element. Exact: no
// arithmetic except the embedding gradient's sums (in token order, as the CPU reference).
// CPU references: kernels-core src/cpu/layout.rs and src/cpu/embedding.rs.

// in0 = x [batch, r, c]; out0 = [batch, c, r]. p.u[0] = n, p.u[1] = r, p.u[2] = c
KERNEL(transpose) {
    unsigned long long o = global_index();
    if (o >= p.u[0]) return;
    unsigned long long r = p.u[1], c = p.u[2];
    unsigned long long plane = r * c;
    unsigned long long b = o / plane, rem = o % plane;
    unsigned long long ci = rem / r, ri = rem % r;
    out0[o] = in0[b * plane + ri * c + ci];
}

// in0 = a [rows, m], in1 = b [rows, k]; out0 = [rows, m + k]. p.u[0] = n out, p.u[1] = m,
// p.u[2] = k
KERNEL(concat) {
    unsigned long long o = global_index();
    if (o >= p.u[0]) return;
    unsigned long long m = p.u[1], k = p.u[2], w = m + k;
    unsigned long long row = o / w, j = o % w;
    out0[o] = j < m ? in0[row * m + j] : in1[row * k + (j - m)];
}

// in0 = grad_out [rows, m + k]; out0 = grad_a [rows, m], out1 = grad_b [rows, k].
KERNEL(concat_backward) {
    unsigned long long o = global_index();
    if (o >= p.u[0]) return;
    unsigned long long m = p.u[1], k = p.u[2], w = m + k;
    unsigned long long row = o / w, j = o % w;
    if (j < m) {
        out0[row * m + j] = in0[o];
    } else {
        out1[row * k + (j - m)] = in0[o];
    }
}

// in3 = ids [tokens] (i32), in0 = weight [vocab, d]; out0 = [tokens, d]. Ids uploaded from the
// host were range-checked; others read as zeros rather than out of bounds.
// p.u[0] = tokens * d, p.u[1] = d, p.u[2] = vocab
KERNEL(embedding) {
    unsigned long long o = global_index();
    if (o >= p.u[0]) return;
    unsigned long long d = p.u[1];
    int id = ((const int*)in3)[o / d];
    if (id < 0 || (unsigned int)id >= p.u[2]) {
        out0[o] = 0.0f;
        return;
    }
    out0[o] = in0[(unsigned long long)id * d + o % d];
}

// in3 = ids [tokens], in0 = grad_out [tokens, d]; out0 = grad_weight [vocab, d]: each thread
// owns one weight element and sums the tokens that picked its row (deterministic, no atomics).
// p.u[0] = vocab * d, p.u[1] = d, p.u[2] = tokens
KERNEL(embedding_backward) {
    unsigned long long o = global_index();
    if (o >= p.u[0]) return;
    unsigned long long d = p.u[1];
    int v = (int)(o / d);
    unsigned long long col = o % d;
    const int* ids = (const int*)in3;
    float acc = 0.0f;
    for (unsigned long long t = 0; t < p.u[2]; t++) {
        if (ids[t] == v) acc = acc + in0[t * d + col];
    }
    out0[o] = acc;
}
