/* Deterministic data for canzona-bench: splitmix64 over a packed key, mapped to [-1, 1). */
#include "bench.h"

#include <stdlib.h>

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float cz_bench_value(uint64_t seed, int stream, int param, int64_t step, int dp_rank, int64_t index)
{
    uint64_t h = mix(seed);
    h = mix(h ^ ((uint64_t)stream << 56) ^ ((uint64_t)(uint32_t)param << 20) ^ (uint64_t)dp_rank);
    h = mix(h ^ (uint64_t)step);
    h = mix(h ^ (uint64_t)index);
    return (float)((double)(h >> 40) / (double)(1ull << 23) - 1.0);
}

void cz_bench_fill_shard(const cz_plan_param *p, int tp, int r, uint64_t seed, int stream,
                         int64_t step, int dp_rank, float scale, float *shard)
{
    int64_t cols = p->def.ndim == 1 ? 1 : p->def.shape[1];
    int64_t lo[CZ_MAX_BLOCKS], hi[CZ_MAX_BLOCKS];
    int n = cz__shard_ranges(p, tp, r, lo, hi, CZ_MAX_BLOCKS);
    /* Local row/column -> full row/column along the TP dimension; the local extent follows
     * from the ranges (tp may be 1 to generate a whole tensor). */
    int64_t extent = 0;
    for (int q = 0; q < n; q++)
        extent += hi[q] - lo[q];
    int64_t lrows = p->def.tp_dim == 0 ? extent : p->def.shape[0];
    int64_t lcols = p->def.tp_dim == 1 ? extent : cols;
    int64_t *map = malloc((size_t)(extent ? extent : 1) * sizeof(int64_t));
    if (!map)
        return;
    int64_t k = 0;
    for (int q = 0; q < n; q++)
        for (int64_t x = lo[q]; x < hi[q]; x++)
            map[k++] = x;
    for (int64_t i = 0; i < lrows; i++)
        for (int64_t j = 0; j < lcols; j++) {
            int64_t fi = p->def.tp_dim == 0 ? map[i] : i, fj = p->def.tp_dim == 1 ? map[j] : j;
            shard[i * lcols + j] =
                scale * cz_bench_value(seed, stream, p->id, step, dp_rank, fi * cols + fj);
        }
    free(map);
}

void cz_bench_mean_grad(const cz_plan_param *p, uint64_t seed, int64_t step, int dp, float *buf,
                        double *g)
{
    int64_t mn = p->def.shape[0] * (p->def.ndim == 1 ? 1 : p->def.shape[1]);
    for (int64_t k = 0; k < mn; k++)
        g[k] = 0.0;
    for (int d = 0; d < dp; d++) {
        cz_bench_fill_shard(p, 1, 0, seed, 1, step, d, 1.0f, buf);
        for (int64_t k = 0; k < mn; k++)
            g[k] += buf[k] / dp;
    }
}
