// The baseline the tiled matmul is measured against (`kernels bench`): one thread per output
// element, every operand read straight from global memory, no workgroup tiles, no register
// blocking. c[M, N] = a[M, K] @ b[K, N], row-major, f32.

struct Dims {
    m: u32,
    n: u32,
    k: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> d: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

// 16 x 16 threads cover a 16 x 16 block of c; x runs along N so neighbours read neighbouring b.
@compute @workgroup_size(16, 16, 1)
fn matmul_naive(@builtin(global_invocation_id) gid: vec3<u32>) {
    let col = gid.x;
    let row = gid.y;
    if (row >= d.m || col >= d.n) { return; }
    var acc: f32 = 0.0;
    for (var i: u32 = 0u; i < d.k; i = i + 1u) {
        acc = acc + a[row * d.k + i] * b[i * d.n + col];
    }
    c[row * d.n + col] = acc;
}
