/* A GPU's FSDP2 shard of a parameter (fsdp_shard.h): a band of whole rows of the full matrix,
 * cut as fully_shard cuts it (torch.chunk along dim 0, planner/format/fsdp_shards.c), so that
 * the shard the job hands in and the rows the executor reads are the same by construction. */
#include "fsdp_shard.h"

static int64_t full_cols(const cz_plan_param *p)
{
    return p->def.ndim == 1 ? 1 : p->def.shape[1];
}

cz_block cz__fsdp_shard_block(const cz_plan *plan, const cz_plan_param *p, int k)
{
    int64_t rows = p->local_shape[0];
    int64_t n = cz__fsdp_rows(rows, plan->dp, k);
    /* k * chunk <= rows + dp (fsdp_shards.c): no overflow; a GPU past the rows holds none. */
    int64_t r0 = n > 0 ? (int64_t)k * cz__fsdp_chunk_rows(rows, plan->dp) : 0;
    return (cz_block){r0, 0, n, full_cols(p)};
}

int64_t cz__fsdp_shard_numel(const cz_plan *plan, const cz_plan_param *p, int k)
{
    cz_block s = cz__fsdp_shard_block(plan, p, k);
    return s.rows * s.cols;
}

/* The rows of b that GPU k's shard holds: [*lo, *hi). */
static void rows_in(const cz_block *s, const cz_block *b, int64_t *lo, int64_t *hi)
{
    *lo = s->r0 > b->r0 ? s->r0 : b->r0;
    *hi = s->r0 + s->rows < b->r0 + b->rows ? s->r0 + s->rows : b->r0 + b->rows;
    if (*hi < *lo)
        *hi = *lo;
}

int64_t cz__fsdp_region_numel(const cz_plan *plan, const cz_plan_param *p, int k, const cz_block *b)
{
    cz_block s = cz__fsdp_shard_block(plan, p, k);
    int64_t lo, hi;
    rows_in(&s, b, &lo, &hi);
    return (hi - lo) * b->cols;
}

int cz__fsdp_region_runs(const cz_plan *plan, const cz_plan_param *p, int k, const cz_block *b,
                         int64_t msg_off, int64_t other_off, int other_is_shard, int to_msg,
                         cz_run_list *l, cz_error *err)
{
    cz_block s = cz__fsdp_shard_block(plan, p, k);
    int64_t lo, hi, msg = msg_off;
    rows_in(&s, b, &lo, &hi);
    /* Every shard row holds every column: row i of b's part is one run of b->cols elements,
     * at (i - r0) * cols + c0 in the shard, (i - b->r0) * b->cols in the region. */
    for (int64_t i = lo; i < hi; i++) {
        int64_t o =
            other_off + (other_is_shard ? (i - s.r0) * s.cols + b->c0 : (i - b->r0) * b->cols);
        int rc = to_msg ? cz__run_list_add(l, msg, o, b->cols, err)
                        : cz__run_list_add(l, o, msg, b->cols, err);
        if (rc)
            return rc;
        msg += b->cols;
    }
    return CZ_OK;
}
