// Fused optimizer steps: one thread per parameter reads param, grad and state once and writes
// the new param and state (torch.optim.AdamW and torch.optim.SGD semantics). CPU reference:
// kernels-core src/cpu/optim.rs.

// in0 = param, in1 = grad, in2 = m, in3 = v; out0 = param, out1 = m, out2 = v.
// p.u[0] = n, p.f = lr, beta1, beta2, eps, weight_decay, 1 - beta1^step, sqrt(1 - beta2^step)
KERNEL(adamw_step) {
    unsigned long long i = global_index();
    if (i >= p.u[0]) return;
    float lr = p.f[0], b1 = p.f[1], b2 = p.f[2];
    float g = in1[i];
    float w = in0[i] * (1.0f - lr * p.f[4]);
    float m = b1 * in2[i] + (1.0f - b1) * g;
    float v = b2 * in3[i] + (1.0f - b2) * g * g;
    float denom = sqrtf(v) / p.f[6] + p.f[3];
    out0[i] = w - (lr / p.f[5]) * m / denom;
    out1[i] = m;
    out2[i] = v;
}

// in0 = param, in1 = grad, in2 = momentum_buf; out0 = param, out1 = momentum_buf.
// p.u[0] = n, p.u[1] = nesterov, p.f = lr, momentum, weight_decay
KERNEL(sgd_step) {
    unsigned long long i = global_index();
    if (i >= p.u[0]) return;
    float lr = p.f[0], mom = p.f[1];
    float w = in0[i];
    float d = in1[i] + p.f[2] * w;
    float buf = mom * in2[i] + d;
    if (mom != 0.0f) d = p.u[1] != 0 ? d + mom * buf : buf;
    out0[i] = w - lr * d;
    out1[i] = buf;
}
