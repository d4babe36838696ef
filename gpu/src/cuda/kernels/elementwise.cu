// Elementwise ops, forward and backward: unary ops (op code p.c[0]), scale, gelu, and binary
// ops where `b` broadcasts over `a`'s leading dims (b repeats every nb elements); the column
// sums of broadcast gradients. One thread per element. CPU references: kernels-core
// src/cpu/elementwise.rs (unary, binary) and the matmul backward's batch sum.

// Unary op code: 0 neg, 1 exp, 2 log, 3 sqrt, 4 relu, 5 sigmoid, 6 tanh, 7 silu,
// 8 gelu (erf), 9 gelu (tanh approximation), 10 scale by p.f[0].
#define SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_C 0.044715f
#define INV_SQRT_2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

__device__ inline float unary_value(unsigned int op, float x, float factor) {
    switch (op) {
        case 0: return -x;
        case 1: return expf(x);
        case 2: return logf(x);
        case 3: return sqrtf(x);
        case 4: return (x > 0.0f || x != x) ? x : 0.0f;  // NaN stays NaN, as torch.relu
        case 5: return sigmoid_safe(x);
        case 6: return tanhf(x);
        case 7: return x * sigmoid_safe(x);
        case 8: return 0.5f * x * (1.0f + erff(x * INV_SQRT_2));
        case 9: return 0.5f * x * (1.0f + tanh_safe(SQRT_2_OVER_PI * (x + GELU_C * x * x * x)));
        default: return x * factor;
    }
}

// d out / d x times g, from the input x and the forward output y.
__device__ inline float unary_grad(unsigned int op, float x, float y, float g, float factor) {
    switch (op) {
        case 0: return -g;
        case 1: return g * y;
        case 2: return g / x;
        case 3: return g / (2.0f * y);
        case 4: return y > 0.0f ? g : 0.0f;  // relu'(0) = 0, from the output
        case 5: return g * y * (1.0f - y);
        case 6: return g * (1.0f - y * y);
        case 7: {
            float s = sigmoid_safe(x);
            return g * (s * (1.0f + x * (1.0f - s)));
        }
        case 8: {
            float cdf = 0.5f * (1.0f + erff(x * INV_SQRT_2));
            float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
            return g * (cdf + x * pdf);
        }
        case 9: {
            float inner = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
            float t = tanh_safe(inner);
            float dinner = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * x * x);
            return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner);
        }
        default: return g * factor;
    }
}

// in0 = x [n]; out0 [n]. p.u[0] = n, p.c[0] = op, p.f[0] = factor
KERNEL(unary_forward) {
    unsigned long long i = global_index();
    if (i >= p.u[0]) return;
    out0[i] = unary_value(p.c[0], in0[i], p.f[0]);
}

// in0 = x, in1 = y (forward output), in2 = grad_y; out0 = grad_x. p as unary_forward.
KERNEL(unary_backward) {
    unsigned long long i = global_index();
    if (i >= p.u[0]) return;
    out0[i] = unary_grad(p.c[0], in0[i], in1[i], in2[i], p.f[0]);
}

// Binary op code p.c[0]: 0 add, 1 sub, 2 mul, 3 div.
__device__ inline float binary_value(unsigned int op, float a, float b) {
    switch (op) {
        case 0: return a + b;
        case 1: return a - b;
        case 2: return a * b;
        default: return a / b;
    }
}

// in0 = a [n], in1 = b [nb] (repeats every nb); out0 [n]. p.u[0] = n, p.u[1] = nb
KERNEL(binary_forward) {
    unsigned long long i = global_index();
    if (i >= p.u[0]) return;
    out0[i] = binary_value(p.c[0], in0[i], in1[i % p.u[1]]);
}

// grad_a: in0 = a, in1 = b, in2 = grad_out; out0 = grad_a [n]. p as binary_forward.
KERNEL(binary_backward_a) {
    unsigned long long i = global_index();
    if (i >= p.u[0]) return;
    float g = in2[i];
    switch (p.c[0]) {
        case 0:
        case 1: out0[i] = g; break;
        case 2: out0[i] = g * in1[i % p.u[1]]; break;
        default: out0[i] = g / in1[i % p.u[1]]; break;
    }
}

// grad_b sums over the rows b was broadcast to, in row order (as the CPU reference).
// in0 = a, in1 = b, in2 = grad_out; out0 = grad_b [nb]. p.u[0] = n, p.u[1] = nb
KERNEL(binary_backward_b) {
    unsigned long long j = global_index();
    unsigned long long nb = p.u[1];
    if (j >= nb) return;
    unsigned long long rows = p.u[0] / nb;
    float bj = in1[j];
    float acc = 0.0f;
    for (unsigned long long r = 0; r < rows; r++) {
        unsigned long long i = r * nb + j;
        float g = in2[i];
        switch (p.c[0]) {
            case 0: acc = acc + g; break;
            case 1: acc = acc - g; break;
            case 2: acc = acc + g * in0[i]; break;
            default: acc = acc - g * in0[i] / (bj * bj); break;
        }
    }
    out0[j] = acc;
}


// linear's elementwise halves (CPU reference: kernels-core src/cpu/linear.rs); the products run
// on cuBLAS. Activation code p.c[0]: 0 none, 1 relu, 2 tanh, 3 sigmoid.
__device__ inline float linear_act(unsigned int act, float v) {
    switch (act) {
        case 1: return v > 0.0f ? v : 0.0f;
        case 2: return tanhf(v);
        case 3: return sigmoid_safe(v);
        default: return v;
    }
}

// The derivative from the activation's output y.
__device__ inline float linear_dact(unsigned int act, float y) {
    switch (act) {
        case 1: return y > 0.0f ? 1.0f : 0.0f;
        case 2: return 1.0f - y * y;
        case 3: return y * (1.0f - y);
        default: return 1.0f;
    }
}

// In place on the product: out0[i] = act(out0[i] + bias[i % nb]). in0 = bias [nb].
// p.u[0] = n, p.u[1] = nb
KERNEL(linear_epilogue) {
    unsigned long long i = global_index();
    if (i >= p.u[0]) return;
    out0[i] = linear_act(p.c[0], out0[i] + in0[i % p.u[1]]);
}

// g' = g * act'(y): in0 = grad_out, in1 = out (y); out0 = g'. p.u[0] = n
KERNEL(linear_grad_pre) {
    unsigned long long i = global_index();
    if (i >= p.u[0]) return;
    out0[i] = in0[i] * linear_dact(p.c[0], in1[i]);
}

// out0[j] = sum_r in0[r * nb + j] for r < n / nb (batched-matmul gradients of a shared 2-D
// operand, GRU bias gradients). p.u[0] = n, p.u[1] = nb
KERNEL(sum_rows) {
    unsigned long long j = global_index();
    unsigned long long nb = p.u[1];
    if (j >= nb) return;
    unsigned long long rows = p.u[0] / nb;
    float acc = 0.0f;
    // With an activation code c[0] (linear's backward), each term is scaled by act'(in1), the
    // activation's derivative from its output laid out like in0.
    for (unsigned long long r = 0; r < rows; r++) {
        float v = in0[r * nb + j];
        if (p.c[0] != 0) v = v * linear_dact(p.c[0], in1[r * nb + j]);
        acc = acc + v;
    }
    out0[j] = acc;
}
