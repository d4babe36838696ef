// Elementwise ops, forward and backward: unary ops (op code p.c[0]), scale, gelu, and binary
// ops where `b` broadcasts over `a`'s leading dims (b repeats every nb elements); the column
// sums of broadcast gradients. One thread per element. CPU references: kernels-core
// src/cpu/elementwise.rs (unary, binary) and the matmul backward's batch sum.

// Unary op code (OP_* in contract.cuh): the unary ops, gelu (erf or tanh), or scale by p.factor.
#define SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_C 0.044715f
#define INV_SQRT_2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

__device__ inline float unary_value(unsigned int op, float x, float factor) {
    switch (op) {
        case OP_NEG: return -x;
        case OP_EXP: return expf(x);
        case OP_LOG: return logf(x);
        case OP_SQRT: return sqrtf(x);
        case OP_RELU: return (x > 0.0f || x != x) ? x : 0.0f;  // NaN stays NaN, as torch.relu
        case OP_SIGMOID: return sigmoid_safe(x);
        case OP_TANH: return tanhf(x);
        case OP_SILU: return x * sigmoid_safe(x);
        case OP_GELU_NONE: return 0.5f * x * (1.0f + erff(x * INV_SQRT_2));
        case OP_GELU_TANH: return 0.5f * x * (1.0f + tanh_safe(SQRT_2_OVER_PI * (x + GELU_C * x * x * x)));
        case OP_SCALE: return x * factor;
        default: return KERNEL_NAN;
    }
}

// d out / d x times g, from the input x and the forward output y.
__device__ inline float unary_grad(unsigned int op, float x, float y, float g, float factor) {
    switch (op) {
        case OP_NEG: return -g;
        case OP_EXP: return g * y;
        case OP_LOG: return g / x;
        case OP_SQRT: return g / (2.0f * y);
        case OP_RELU: return y > 0.0f ? g : 0.0f;  // relu'(0) = 0, from the output
        case OP_SIGMOID: return g * y * (1.0f - y);
        case OP_TANH: return g * (1.0f - y * y);
        case OP_SILU: {
            float s = sigmoid_safe(x);
            return g * (s * (1.0f + x * (1.0f - s)));
        }
        case OP_GELU_NONE: {
            float cdf = 0.5f * (1.0f + erff(x * INV_SQRT_2));
            float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
            return g * (cdf + x * pdf);
        }
        case OP_GELU_TANH: {
            float inner = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
            float t = tanh_safe(inner);
            float dinner = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * x * x);
            return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner);
        }
        case OP_SCALE: return g * factor;
        default: return KERNEL_NAN;
    }
}

// in0 = x [n]; out0 [n]. p.c[0] = op
KERNEL(unary_forward, UnaryParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    out0[i] = unary_value(p.c[0], in0[i], p.factor);
}

// in0 = x, in1 = y (forward output), in2 = grad_y; out0 = grad_x. p as unary_forward.
KERNEL(unary_backward, UnaryParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    out0[i] = unary_grad(p.c[0], in0[i], in1[i], in2[i], p.factor);
}

// Binary op code p.c[0] (BOP_* in contract.cuh).
__device__ inline float binary_value(unsigned int op, float a, float b) {
    switch (op) {
        case BOP_ADD: return a + b;
        case BOP_SUB: return a - b;
        case BOP_MUL: return a * b;
        case BOP_DIV: return a / b;
        default: return KERNEL_NAN;
    }
}

// in0 = a [n], in1 = b [nb] (repeats every nb); out0 [n]
KERNEL(binary_forward, BinaryParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    out0[i] = binary_value(p.c[0], in0[i], in1[i % p.nb]);
}

// grad_a: in0 = a, in1 = b, in2 = grad_out; out0 = grad_a [n]. p as binary_forward.
KERNEL(binary_backward_a, BinaryParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    float g = in2[i];
    switch (p.c[0]) {
        case BOP_ADD:
        case BOP_SUB: out0[i] = g; break;
        case BOP_MUL: out0[i] = g * in1[i % p.nb]; break;
        case BOP_DIV: out0[i] = g / in1[i % p.nb]; break;
        default: out0[i] = KERNEL_NAN; break;
    }
}

// grad_b sums over the rows b was broadcast to, in row order (as the CPU reference).
// in0 = a, in1 = b, in2 = grad_out; out0 = grad_b [nb].
KERNEL(binary_backward_b, BinaryParams) {
    unsigned long long j = global_index();
    unsigned long long nb = p.nb;
    if (j >= nb) return;
    unsigned long long rows = p.n / nb;
    float bj = in1[j];
    float acc = 0.0f;
    for (unsigned long long r = 0; r < rows; r++) {
        unsigned long long i = r * nb + j;
        float g = in2[i];
        switch (p.c[0]) {
            case BOP_ADD: acc = acc + g; break;
            case BOP_SUB: acc = acc - g; break;
            case BOP_MUL: acc = acc + g * in0[i]; break;
            case BOP_DIV: acc = acc - g * in0[i] / (bj * bj); break;
            default: acc = KERNEL_NAN; break;
        }
    }
    out0[j] = acc;
}


// linear's elementwise halves (CPU reference: kernels-core src/cpu/linear.rs); the products run
// on cuBLAS. Activation code p.c[0] (ACT_* in contract.cuh).
__device__ inline float linear_act(unsigned int act, float v) {
    switch (act) {
        case ACT_NONE: return v;
        case ACT_RELU: return v > 0.0f ? v : 0.0f;
        case ACT_TANH: return tanhf(v);
        case ACT_SIGMOID: return sigmoid_safe(v);
        default: return KERNEL_NAN;
    }
}

// The derivative from the activation's output y.
__device__ inline float linear_dact(unsigned int act, float y) {
    switch (act) {
        case ACT_NONE: return 1.0f;
        case ACT_RELU: return y > 0.0f ? 1.0f : 0.0f;
        case ACT_TANH: return 1.0f - y * y;
        case ACT_SIGMOID: return y * (1.0f - y);
        default: return KERNEL_NAN;
    }
}

// In place on the product: out0[i] = act(out0[i] + bias[i % nb]). in0 = bias [nb], nb = p.cols.
KERNEL(linear_epilogue, EpilogueParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    out0[i] = linear_act(p.c[0], out0[i] + in0[i % p.cols]);
}

// g' = g * act'(y): in0 = grad_out, in1 = out (y); out0 = g'.
KERNEL(linear_grad_pre, ElemsParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    out0[i] = in0[i] * linear_dact(p.c[0], in1[i]);
}

// out0[j] = sum_r in0[r * nb + j] for r < n / nb (batched-matmul gradients of a shared 2-D
// operand, GRU bias gradients).
KERNEL(sum_rows, SumRowsParams) {
    unsigned long long j = global_index();
    unsigned long long nb = p.cols;
    if (j >= nb) return;
    unsigned long long rows = p.n / nb;
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

// swiglu (CPU reference: kernels-core src/cpu/elementwise.rs): out0 = silu(in0) * in1 (gate, up).
KERNEL(swiglu_forward, ElemsParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    float g = in0[i];
    out0[i] = g * sigmoid_safe(g) * in1[i];
}

// matmul_swiglu's gate over its product: in0 = y [rows, 2 half] (gate columns, then up
// columns); out0 [rows, half] = silu(gate) * up, as swiglu_forward.
KERNEL(glu_forward, GluParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    unsigned long long at = (i / p.half) * 2ull * p.half + i % p.half;
    float g = in0[at];
    out0[i] = g * sigmoid_safe(g) * in0[at + p.half];
}

// in0 = y [rows, 2 half], in1 = grad_out [rows, half]; out0 = dy [rows, 2 half]: swiglu_backward's
// grad_gate in the gate columns and grad_up in the up columns.
KERNEL(glu_backward, GluParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    unsigned long long at = (i / p.half) * 2ull * p.half + i % p.half;
    float g = in0[at];
    float s = sigmoid_safe(g);
    float d = in1[i];
    out0[at] = d * in0[at + p.half] * (s * (1.0f + g * (1.0f - s)));
    out0[at + p.half] = d * g * s;
}

// in0 = gate, in1 = up, in2 = grad_out; out0 = grad_gate, out1 = grad_up.
KERNEL(swiglu_backward, ElemsParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    float g = in0[i];
    float s = sigmoid_safe(g);
    float d = in2[i];
    out0[i] = d * in1[i] * (s * (1.0f + g * (1.0f - s)));
    out1[i] = d * g * s;
}
