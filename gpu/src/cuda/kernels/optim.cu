// Fused optimizer steps: one thread per parameter reads param, grad and state once and writes
// the new param and state (torch.optim.AdamW and torch.optim.SGD semantics). CPU reference:
// kernels-core src/cpu/optim.rs.

// in0 = param, in1 = grad, in2 = m, in3 = v; out0 = param, out1 = m, out2 = v.
KERNEL(adamw_step, AdamwParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    float b1 = p.beta1, b2 = p.beta2;
    float g = in1[i];
    float w = in0[i] * p.decay;
    float m = b1 * in2[i] + (1.0f - b1) * g;
    float v = b2 * in3[i] + (1.0f - b2) * g * g;
    float denom = sqrtf(v) / p.bias_correction2_sqrt + p.eps;
    out0[i] = w - p.step_size * m / denom;
    out1[i] = m;
    out2[i] = v;
}

// in0 = param, in1 = grad, in2 = momentum_buf; out0 = param, out1 = momentum_buf.
KERNEL(sgd_step, SgdParams) {
    unsigned long long i = global_index();
    if (i >= p.n) return;
    float lr = p.lr, mom = p.momentum;
    float w = in0[i];
    // As the reference (and torch): no decay term when weight_decay is 0 (0 * inf is NaN), and
    // the buffer passes through unchanged when momentum is 0.
    float d = in1[i];
    if (p.weight_decay != 0.0f) d += p.weight_decay * w;
    float buf = in2[i];
    if (mom != 0.0f) {
        buf = mom * buf + d;
        d = p.nesterov != 0 ? d + mom * buf : buf;
    }
    out0[i] = w - lr * d;
    out1[i] = buf;
}
