/*
 * launch.h — how many thread blocks a CUDA kernel over n elements gets. Plain arithmetic shared
 * by the kernels' launchers and the CPU tests: every kernel runs a grid-stride loop, so the grid
 * only needs enough blocks to fill the GPU, and is capped so a launch never exceeds the grid
 * limit however large n is.
 */
#ifndef CZ_LAUNCH_H
#define CZ_LAUNCH_H

#include <stdint.h>

#define CZ_CUDA_THREADS 256
/* 132 SMs (H100 SXM) x 16 resident blocks of 256 threads, rounded up: enough to fill any
 * current GPU; more blocks would only loop fewer times. */
#define CZ_CUDA_MAX_BLOCKS 4096

/* Blocks for n elements at `threads` per block: ceil(n / threads), at least 1, at most
 * max_blocks. */
static inline int cz_launch_blocks(int64_t n, int threads, int max_blocks)
{
    if (n <= 0)
        return 1;
    int64_t b = (n + threads - 1) / threads;
    return b > max_blocks ? max_blocks : (int)b;
}

#endif /* CZ_LAUNCH_H */
