/*
 * FSDP2's dim-0 sharding, as fully_shard applies it to every parameter (torch.chunk along dim 0
 * over the DP mesh dimension): the shard sizes a fully sharded plan records and validate
 * recomputes. Checked against torch 2.13 (gloo, 4 ranks): 7 rows give 2, 2, 2, 1 and 5 rows
 * give 2, 2, 1, 0; a parameter with fewer rows than ranks leaves the last ranks empty, which
 * FSDP2 pads, so its gradient still reaches every rank's reduce-scatter.
 */
#include "cz_format.h"

int64_t cz__fsdp_chunk_rows(int64_t rows, int dp)
{
    if (rows < 1 || dp < 1)
        return 0;
    return rows / dp + (rows % dp != 0);
}

int64_t cz__fsdp_rows(int64_t rows, int dp, int r)
{
    int64_t chunk = cz__fsdp_chunk_rows(rows, dp);
    if (chunk == 0 || r < 0 || r >= dp)
        return 0;
    /* r * chunk cannot overflow: r < dp and chunk <= rows, and r * chunk <= rows + dp. */
    int64_t start = (int64_t)r * chunk;
    if (start >= rows)
        return 0;
    return rows - start < chunk ? rows - start : chunk;
}

int cz__fsdp_even(int64_t rows, int dp)
{
    return rows >= 1 && dp >= 1 && rows % dp == 0;
}
