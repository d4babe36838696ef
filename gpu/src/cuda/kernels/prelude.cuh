// Prepended to every family's source before NVRTC compiles it (and before the host compiler
// checks or emulates it in the tests): the parameter block, the uniform kernel signature, the
// index helpers and the block reductions shared by the row kernels.
//
// Every kernel takes the same arguments, like the WGSL bind group: an 80-byte parameter block by
// value, four read-only inputs and three outputs (unused ones are null). Integer tensors (ids,
// targets) are i32 on the device and read through `const int*` casts.

// `struct Params`, the named parameter blocks, the op codes and KERNEL_NAN come from the
// generated contract.cuh.

// What a kernel is passed: the parameter block, then where a replayed graph keeps its position
// shift (gpu/src/cuda/replay.rs). A graph captured at position P and replayed at P + d reads d
// from `shift[0]` (device memory the host writes, or null) and adds it to the u32 slots of the
// block whose bits are set in `shift_mask` (the position, the cache write offset, the keys
// read), so the very launches serve every position.
struct LaunchParams {
    Params raw;
    const unsigned int* shift;
    unsigned int shift_mask;
    unsigned int pad;
};

__device__ inline Params shifted(const LaunchParams& l) {
    Params p = l.raw;
    if (l.shift != 0 && l.shift_mask != 0) {
        unsigned int d = l.shift[0];
        for (int i = 0; i < 12; i++) {
            if ((l.shift_mask >> i) & 1u) p.u[i] += d;  // wraps: a shift below the capture too
        }
    }
    return p;
}

// `KERNEL(entry, Block) { ... }` defines the entry point with the uniform signature and a body
// that gets the launch's named parameter block (gpu/src/params.rs) as `p`.
#define KERNEL(name, Block)                                                                   \
    __device__ inline void name##_body(const Block p, const float* in0, const float* in1,      \
                                       const float* in2, const float* in3, float* out0,        \
                                       float* out1, float* out2);                              \
    extern "C" __global__ void name(const LaunchParams raw, const float* in0, const float* in1, \
                                    const float* in2, const float* in3, float* out0,          \
                                    float* out1, float* out2) {                               \
        name##_body(Block::of(shifted(raw)), in0, in1, in2, in3, out0, out1, out2);           \
    }                                                                                         \
    __device__ inline void name##_body(const Block p, const float* in0, const float* in1,      \
                                       const float* in2, const float* in3, float* out0,        \
                                       float* out1, float* out2)

// `#pragma unroll` for NVRTC (the host compiler of the tests would warn on it).
#ifdef __CUDA_ARCH__
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

// Threads per block of the row kernels' reductions (the launcher uses this many or fewer,
// always a power of two).
#define MAX_THREADS 256

__device__ inline float k_inf() { return __int_as_float(0x7f800000); }

// Global thread index in 64 bits: n may be close to 2^32 and the last block overshoots it.
__device__ inline unsigned long long global_index() {
    return (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
}

// The lanes of a warp that a block of blockDim.x threads fills (all 32 past the first warp).
__device__ inline unsigned int warp_mask() {
    return blockDim.x >= 32 ? 0xffffffffu : (1u << blockDim.x) - 1u;
}

// The sum of v over the team of `team` consecutive threads (a power of two, at most the block)
// holding this thread, given to all of them: shuffles inside a warp (xor butterfly), then the
// team's warps' sums in warp order from shared memory (two barriers). Every thread of the block
// calls it with the same `team`.
__device__ inline float team_sum(float v, unsigned int team) {
    __shared__ float sh_team[MAX_THREADS / 32];
    unsigned int w = team < 32 ? team : 32;
    for (unsigned int o = w / 2; o > 0; o >>= 1) v = v + __shfl_xor_sync(warp_mask(), v, (int)o);
    if (team <= 32) return v;
    if (threadIdx.x % 32 == 0) sh_team[threadIdx.x / 32] = v;
    __syncthreads();
    unsigned int first = (threadIdx.x / team) * (team / 32);
    float total = sh_team[first];
    for (unsigned int i = 1; i < team / 32; i++) total = total + sh_team[first + i];
    __syncthreads();
    return total;
}

// Sum of one value per thread of the block; every thread gets the result. Every thread of the
// block must call it.
__device__ inline float block_sum(float v) {
    return team_sum(v, blockDim.x);
}

// As block_sum, with fmaxf.
__device__ inline float block_max(float v) {
    __shared__ float sh_max[MAX_THREADS / 32];
    unsigned int lid = threadIdx.x, bd = blockDim.x, w = bd < 32 ? bd : 32;
    for (unsigned int o = w / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(warp_mask(), v, (int)o));
    if (bd <= 32) return v;
    if (lid % 32 == 0) sh_max[lid / 32] = v;
    __syncthreads();
    float total = sh_max[0];
    for (unsigned int i = 1; i < bd / 32; i++) total = fmaxf(total, sh_max[i]);
    __syncthreads();
    return total;
}

// tanh without overflow for large |x| and without cancellation near zero (as the WGSL).
__device__ inline float tanh_safe(float x) {
    float ax = fabsf(x);
    if (x != x) return x;
    float t;
    if (ax < 0.004f) {
        t = ax - ax * ax * ax / 3.0f;
    } else if (ax > 10.0f) {
        t = 1.0f;
    } else {
        t = 1.0f - 2.0f / (expf(2.0f * ax) + 1.0f);
    }
    return x < 0.0f ? -t : t;
}

// Two branches so exp never overflows (as the CPU reference).
__device__ inline float sigmoid_safe(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}
