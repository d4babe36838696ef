// The CPU emulator of a CUDA launch (tests only), appended after a family's kernels. Blocks run
// one after another. Kernels whose threads never synchronize run thread after thread; the others
// run each thread of a block as a fiber (ucontext) that yields at __syncthreads, round-robin,
// so every thread reaches a barrier before any passes it, as on the device. Entry: `emu_run`,
// loaded by the emulated device (src/cuda/emulator.rs).
#include <stdlib.h>
#include <ucontext.h>

#include <vector>

typedef void (*emu_kernel)(const LaunchParams, const float*, const float*, const float*, const float*,
                           float*, float*, float*);

namespace emu_rt {
struct Launch {
    emu_kernel f;
    LaunchParams p;
    const float* in[4];
    float* out[3];
};
static Launch launch;
static bool in_fibers = false;
static int sync_outside_fiber = 0;
static ucontext_t sched;
static std::vector<ucontext_t> fibers;
static std::vector<char> stacks;
static std::vector<char> done;
static unsigned int current = 0;
static const size_t STACK = 64 * 1024;

static void run_one() {
    launch.f(launch.p, launch.in[0], launch.in[1], launch.in[2], launch.in[3], launch.out[0],
             launch.out[1], launch.out[2]);
}

static void fiber_entry() {
    run_one();
    done[current] = 1;
}
}  // namespace emu_rt

void emu_syncthreads() {
    if (!emu_rt::in_fibers) {
        // A kernel launched as thread-independent synchronized: the launcher is wrong.
        emu_rt::sync_outside_fiber = 1;
        return;
    }
    swapcontext(&emu_rt::fibers[emu_rt::current], &emu_rt::sched);
}

// Runs `f` over `blocks` x `threads`. Returns 0, or 1 when a kernel launched with
// cooperative = 0 called __syncthreads.
extern "C" int emu_run(emu_kernel f, unsigned int blocks, unsigned int threads, int cooperative,
                       const LaunchParams* p, const float* const* ins, float* const* outs) {
    using namespace emu_rt;
    launch.f = f;
    launch.p = *p;
    for (int i = 0; i < 4; i++) launch.in[i] = ins[i];
    for (int i = 0; i < 3; i++) launch.out[i] = outs[i];
    gridDim.x = blocks;
    blockDim.x = threads;
    sync_outside_fiber = 0;
    if (!cooperative) {
        for (unsigned int b = 0; b < blocks; b++) {
            blockIdx.x = b;
            for (unsigned int t = 0; t < threads; t++) {
                threadIdx.x = t;
                run_one();
            }
        }
        return sync_outside_fiber;
    }
    fibers.resize(threads);
    stacks.resize((size_t)threads * STACK);
    done.resize(threads);
    in_fibers = true;
    for (unsigned int b = 0; b < blocks; b++) {
        blockIdx.x = b;
        for (unsigned int t = 0; t < threads; t++) {
            getcontext(&fibers[t]);
            fibers[t].uc_stack.ss_sp = &stacks[(size_t)t * STACK];
            fibers[t].uc_stack.ss_size = STACK;
            fibers[t].uc_link = &sched;
            makecontext(&fibers[t], fiber_entry, 0);
            done[t] = 0;
        }
        // Between two barriers the threads run in thread order or in reverse, alternating by
        // block and by phase, so a read of another thread's shared write without a barrier
        // between them sees a stale value in one order or the other.
        bool left = true;
        for (unsigned int phase = 0; left; phase++) {
            left = false;
            bool reverse = ((b + phase) & 1) != 0;
            for (unsigned int i = 0; i < threads; i++) {
                unsigned int t = reverse ? threads - 1 - i : i;
                if (done[t]) continue;
                current = t;
                threadIdx.x = t;
                swapcontext(&sched, &fibers[t]);
                if (!done[t]) left = true;
            }
        }
    }
    in_fibers = false;
    return 0;
}
