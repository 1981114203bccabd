/* A GPU's FSDP2 shard of a parameter (fsdp_shard.h): a band of whole rows of its TP shard,
 * cut as fully_shard cuts it (torch.chunk along dim 0, planner/format/fsdp_shards.c), so that
 * the shard the job hands in and the rows the executor reads are the same by construction. */
#include "fsdp_shard.h"

static int64_t local_cols(const cz_plan_param *p)
{
    return p->def.ndim == 1 ? 1 : p->local_shape[1];
}

cz_block cz__fsdp_shard_block(const cz_plan *plan, const cz_plan_param *p, int d)
{
    int64_t rows = p->local_shape[0];
    int64_t n = cz__fsdp_rows(rows, plan->dp, d);
    /* d * chunk <= rows + dp (fsdp_shards.c): no overflow; a GPU past the rows holds none. */
    int64_t r0 = n > 0 ? (int64_t)d * cz__fsdp_chunk_rows(rows, plan->dp) : 0;
    return (cz_block){r0, 0, n, local_cols(p)};
}

int64_t cz__fsdp_shard_numel(const cz_plan *plan, const cz_plan_param *p, int d)
{
    cz_block s = cz__fsdp_shard_block(plan, p, d);
    return s.rows * s.cols;
}

bool cz__fsdp_gathers_from(const cz_plan *plan, const cz_plan_param *p, int k)
{
    /* Every TP rank of a DP rank holds the same rows of a TP-replicated matrix: its TP rank 0
     * sends them, and every one of them receives its update. */
    return p->def.tp_dim >= 0 || k % plan->tp == 0;
}

/* GPU k's band of its TP shard's storage: [*lo, *hi). */
static void band_of(const cz_plan *plan, const cz_plan_param *p, int k, int64_t *lo, int64_t *hi)
{
    cz_block s = cz__fsdp_shard_block(plan, p, k / plan->tp);
    *lo = s.r0 * s.cols;
    *hi = *lo + s.rows * s.cols;
}

int64_t cz__fsdp_region_numel(const cz_plan *plan, const cz_plan_param *p, int k, const cz_block *b)
{
    int64_t lo, hi;
    band_of(plan, p, k, &lo, &hi);
    return cz__band_region_numel(p, plan->tp, k % plan->tp, lo, hi, b);
}

int cz__fsdp_region_runs(const cz_plan *plan, const cz_plan_param *p, int k, const cz_block *b,
                         int64_t msg_off, int64_t other_off, int other_is_shard, int to_msg,
                         cz_run_list *l, cz_error *err)
{
    int64_t lo, hi;
    band_of(plan, p, k, &lo, &hi);
    return cz__band_region_runs(p, plan->tp, k % plan->tp, lo, hi, b, msg_off, other_off,
                                other_is_shard, to_msg, l, err);
}
