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

/* Blocks that keep a 132-SM card (H100, H200) full: 2048 resident threads per SM, 8 blocks of
 * CZ_CUDA_THREADS each. */
#define CZ_LAUNCH_FILL_BLOCKS (132 * 2048 / CZ_CUDA_THREADS)
/* Runs are not split below this many elements: a piece's (dst, src, len) triple is 24 bytes of
 * device memory and its copy at least 16 KiB. */
#define CZ_LAUNCH_MIN_PIECE 4096

/* The longest piece a run list of `total` elements is cut into before its launch (the GPU
 * backend's runs_create). cz_launch_runs_grid gives every run the same number of x blocks, so a
 * list of many short runs (the rows of a column shard) and one long one (a row shard, a whole
 * matrix) left the long one to a few blocks that looped over it long after the others were done
 * (Qwen3-0.6B at TP 8: 220 iterations where the card needs 32; tests/exec/test_launch_shapes.c).
 * Pieces of total / CZ_LAUNCH_FILL_BLOCKS elements, a multiple of the block, let the card's
 * blocks share a long run whatever else the list holds. */
static inline int64_t cz_launch_run_piece(int64_t total)
{
    int64_t p = (total + CZ_LAUNCH_FILL_BLOCKS - 1) / CZ_LAUNCH_FILL_BLOCKS;
    p = (p + CZ_CUDA_THREADS - 1) / CZ_CUDA_THREADS * CZ_CUDA_THREADS;
    return p < CZ_LAUNCH_MIN_PIECE ? CZ_LAUNCH_MIN_PIECE : p;
}

/* The pieces of n runs, (dst, src, len) triples, cut at `piece` elements (each run's last piece
 * holds its remainder): their number, and with out non-NULL the pieces written to out (room for
 * that many triples), in order. Copies and updates are element by element, so a run's pieces do
 * what the run did. */
static inline int64_t cz_launch_split_runs(const int64_t *runs, int64_t n, int64_t piece,
                                           int64_t *out)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t d = runs[3 * i], s = runs[3 * i + 1], len = runs[3 * i + 2];
        for (int64_t at = 0; at < len; at += piece, k++)
            if (out) {
                out[3 * k] = d + at;
                out[3 * k + 1] = s + at;
                out[3 * k + 2] = len - at < piece ? len - at : piece;
            }
    }
    return k;
}

#endif /* CZ_LAUNCH_H */
