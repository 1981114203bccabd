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

/* The grid's y limit, and the most blocks a launch over a run list gets in all. */
#define CZ_CUDA_MAX_GRID_Y 65535
#define CZ_CUDA_MAX_RUN_BLOCKS 65536

/* The grid of a kernel over a list of nruns copy runs, the longest max_len elements
 * (copy_runs, apply_runs): y walks the runs, x the elements of a run. One block per run left
 * a run as long as a whole matrix (every run at TP 1) to a single multiprocessor: measured on
 * an H200, 1.39 s of a 1.44 s Qwen3-0.6B step (docs/PERF.md section 7). x covers the longest
 * run, capped so that x * y stays within CZ_CUDA_MAX_RUN_BLOCKS; both loops are grid-stride. */
static inline void cz_launch_runs_grid(int64_t nruns, int64_t max_len, int threads, int *gx,
                                       int *gy)
{
    int64_t y = nruns < 1 ? 1 : nruns > CZ_CUDA_MAX_GRID_Y ? CZ_CUDA_MAX_GRID_Y : nruns;
    int64_t cap = CZ_CUDA_MAX_RUN_BLOCKS / y;
    int64_t x = max_len <= 0 ? 1 : (max_len + threads - 1) / threads;
    if (cap < 1)
        cap = 1;
    *gx = (int)(x > cap ? cap : x);
    *gy = (int)y;
}

#endif /* CZ_LAUNCH_H */
