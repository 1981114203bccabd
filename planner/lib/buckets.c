/*
 * Gradient bucket layout, as Megatron builds it: per pipeline stage, parameters fill the buffer
 * in reverse registration order (gradients become ready from the last layer backwards); each
 * parameter's local shard starts at a multiple of `align` elements; a bucket closes as soon as it
 * holds at least `size` elements (the parameter that crosses the size stays in it); each bucket is
 * padded at its end to a multiple of dp so that an even reduce-scatter is possible.
 *
 * Alignment is relative to the bucket's start: offsets in the plan are bucket-relative, so a
 * bucket is self-contained (its start in the stage buffer is a multiple of dp, not of align).
 */
#include "cz_types.h"

#include <stdlib.h>

static int64_t round_up(int64_t v, int64_t m)
{
    return m > 1 ? (v + m - 1) / m * m : v;
}

static int bucket_push(cz_plan *plan, size_t *cap, int stage, int64_t offset, int64_t size,
                       cz_error *err)
{
    if (plan->nbuckets == *cap) {
        size_t ncap = *cap ? 2 * *cap : 8;
        cz_plan_bucket *nb = realloc(plan->buckets, ncap * sizeof *nb);
        if (!nb)
            return cz_error_set(err, CZ_ENOMEM, "out of memory laying out buckets");
        plan->buckets = nb;
        *cap = ncap;
    }
    cz_plan_bucket *b = &plan->buckets[plan->nbuckets];
    b->id = (int)plan->nbuckets;
    b->stage = stage;
    b->offset = offset;
    b->size = size;
    b->ranges = calloc(2 * (size_t)plan->dp, sizeof *b->ranges);
    if (!b->ranges)
        return cz_error_set(err, CZ_ENOMEM, "out of memory laying out buckets");
    plan->nbuckets++;
    return CZ_OK;
}

int cz_buckets_layout(cz_plan *plan, cz_error *err)
{
    int rc = CZ_OK;
    size_t cap = 0;
    int64_t size = plan->bucket_size > 0 ? plan->bucket_size : 1;
    int64_t align = plan->bucket_align > 0 ? plan->bucket_align : 1;
    for (size_t i = 0; i < plan->nbuckets; i++)
        free(plan->buckets[i].ranges);
    free(plan->buckets);
    plan->buckets = NULL;
    plan->nbuckets = 0;
    for (int stage = 0; stage < plan->pp; stage++) {
        int64_t start = 0; /* this bucket's start in the stage's buffer */
        int64_t used = 0;  /* elements used in the open bucket */
        int open = 0;
        for (size_t k = plan->nparams; k-- > 0;) {
            cz_plan_param *p = &plan->params[k];
            if (p->stage != stage)
                continue;
            int64_t off = round_up(used, align);
            p->offset = off;
            p->bucket = (int)plan->nbuckets;
            used = off + p->numel;
            open = 1;
            if (used >= size) {
                int64_t padded = round_up(used, plan->dp);
                if ((rc = bucket_push(plan, &cap, stage, start, padded, err)) != CZ_OK)
                    return rc;
                start += padded;
                used = 0;
                open = 0;
            }
        }
        if (open) {
            int64_t padded = round_up(used, plan->dp);
            if ((rc = bucket_push(plan, &cap, stage, start, padded, err)) != CZ_OK)
                return rc;
        }
    }
    return CZ_OK;
}
