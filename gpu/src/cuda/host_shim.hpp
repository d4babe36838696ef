// Lets a host C++ compiler take the CUDA C kernels (tests only): the qualifiers become plain
// C++, the built-in index variables become globals the emulator sets, `__shared__` arrays become
// statics (blocks run one after another, so a block's threads share them), and __syncthreads
// switches to the next thread's fiber (host_runtime.hpp).
#include <math.h>
#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __shared__ static

struct dim3 {
    unsigned int x, y, z;
};

// `volatile`: the emulator changes threadIdx between fibers inside __syncthreads, so no read
// may be cached across a call.
static volatile dim3 threadIdx = {0, 0, 0};
static volatile dim3 blockIdx = {0, 0, 0};
static volatile dim3 blockDim = {1, 1, 1};
static volatile dim3 gridDim = {1, 1, 1};

void emu_syncthreads();
#define __syncthreads() emu_syncthreads()

// A warp shuffle (xor of the lane), emulated through a block-wide exchange: every thread of the
// block must call it together, as the kernels' team reductions do.
static float emu_shfl[1024];
static inline float __shfl_xor_sync(unsigned int, float v, int lane_mask) {
    unsigned int t = threadIdx.x;
    emu_shfl[t] = v;
    emu_syncthreads();
    float r = emu_shfl[t ^ (unsigned int)lane_mask];
    emu_syncthreads();
    return r;
}

static inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

static inline unsigned int __float_as_uint(float f) {
    unsigned int i;
    memcpy(&i, &f, sizeof i);
    return i;
}
