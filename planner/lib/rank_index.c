/*
 * Which DP ranks hold a part of each parameter, found once instead of asking every rank about
 * every parameter. At 8,192 GPUs a DeepSeek-V3-shaped model has some 45,000 parameters over
 * 1,024 DP ranks: the schedule builder, the metrics and the memory model each asked all 46
 * million (parameter, rank) pairs, most of a second between them.
 *
 * An owned parameter is held by its dp_owner alone. A fragmented one (the even baseline, the
 * split layout's elementwise buffer) is held by every rank whose range of its bucket it
 * intersects; the ranges of a valid plan are contiguous and rank-ordered, so those ranks are
 * found by binary search. A plan read from a file may have ranges in any order (validate
 * reports that): its buckets are searched rank by rank, as before, so the answer is the same.
 */
#include "cz_algorithms.h"

#include <stdlib.h>
#include <string.h>

int cz__rank_window_init(cz_rank_window *w, const cz_plan *plan, cz_error *err)
{
    w->plan = plan;
    w->ordered = calloc(plan->nbuckets + 1, 1);
    if (!w->ordered)
        return cz__error_set(err, CZ_ENOMEM, "out of memory indexing DP ranges");
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *k = &plan->buckets[b];
        int n = cz_plan_bucket_nranks(plan, k);
        bool ok = k->ranges != NULL && n > 0 && k->ranges[0] == 0;
        for (int r = 0; ok && r < n; r++)
            ok = k->ranges[2 * r + 1] >= k->ranges[2 * r] &&
                 (r == 0 || k->ranges[2 * r] == k->ranges[2 * r - 1]);
        w->ordered[b] = ok;
    }
    return CZ_OK;
}

void cz__rank_window_free(cz_rank_window *w)
{
    free(w->ordered);
    w->ordered = NULL;
}

void cz__rank_window_of(const cz_rank_window *w, const cz_plan_param *p, int *lo, int *hi)
{
    const cz_plan *plan = w->plan;
    *lo = *hi = 0;
    if (p->bucket < 0 || (size_t)p->bucket >= plan->nbuckets || !plan->buckets[p->bucket].ranges)
        return;
    const cz_plan_bucket *k = &plan->buckets[p->bucket];
    int n = cz_plan_bucket_nranks(plan, k);
    if (!w->ordered[p->bucket] || p->numel <= 0) {
        *hi = n;
        return;
    }
    int64_t start = p->offset, end;
    if (__builtin_add_overflow(p->offset, p->numel, &end))
        end = INT64_MAX;
    /* The first rank whose range ends after the start, then every rank that starts before the
     * end (empty ranges among them intersect nothing; the caller's overlap test skips them). */
    int a = 0, b = n;
    while (a < b) {
        int mid = a + (b - a) / 2;
        if (k->ranges[2 * mid + 1] <= start)
            a = mid + 1;
        else
            b = mid;
    }
    int e = a;
    while (e < n && k->ranges[2 * e] < end)
        e++;
    *lo = a;
    *hi = e;
}

/* The buffers of a plan as its partitions deal them: per stage the dense buffer, then (expert
 * groups) each EP rank's expert buffer. Domain of stage s, EP rank e: s * (1 + ep) + 1 + e. */
static int domain_of(const cz_plan *plan, int stage, int expert, int ep_rank)
{
    int per = 1 + (cz_plan_has_experts(plan) ? plan->ep : 0);
    if (stage < 0 || stage >= plan->pp || (expert && (ep_rank < 0 || ep_rank >= per - 1)))
        return -1;
    return stage * per + (expert ? 1 + ep_rank : 0);
}

int cz__domain_index_build(cz_domain_index *ix, const cz_plan *plan, cz_error *err)
{
    memset(ix, 0, sizeof *ix);
    ix->per_stage = 1 + (cz_plan_has_experts(plan) ? plan->ep : 0);
    ix->n = plan->pp * ix->per_stage;
    size_t n = (size_t)ix->n;
    ix->pfirst = calloc(n + 2, sizeof *ix->pfirst);
    ix->bfirst = calloc(n + 2, sizeof *ix->bfirst);
    ix->params = malloc((plan->nparams + 1) * sizeof *ix->params);
    ix->buckets = malloc((plan->nbuckets + 1) * sizeof *ix->buckets);
    if (!ix->pfirst || !ix->bfirst || !ix->params || !ix->buckets) {
        cz__domain_index_free(ix);
        return cz__error_set(err, CZ_ENOMEM, "out of memory indexing buffers");
    }
    /* Counting sorts that keep ascending ids within a domain. */
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int d = domain_of(plan, p->stage, p->expert, p->ep_rank);
        if (d >= 0)
            ix->pfirst[d + 2]++;
    }
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *k = &plan->buckets[b];
        int d = domain_of(plan, k->stage, k->expert, k->ep_rank);
        if (d >= 0)
            ix->bfirst[d + 2]++;
    }
    for (size_t d = 0; d < n; d++) {
        ix->pfirst[d + 2] += ix->pfirst[d + 1];
        ix->bfirst[d + 2] += ix->bfirst[d + 1];
    }
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int d = domain_of(plan, p->stage, p->expert, p->ep_rank);
        if (d >= 0)
            ix->params[ix->pfirst[d + 1]++] = (int)i;
    }
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *k = &plan->buckets[b];
        int d = domain_of(plan, k->stage, k->expert, k->ep_rank);
        if (d >= 0)
            ix->buckets[ix->bfirst[d + 1]++] = (int)b;
    }
    return CZ_OK;
}

void cz__domain_index_free(cz_domain_index *ix)
{
    free(ix->pfirst);
    free(ix->bfirst);
    free(ix->params);
    free(ix->buckets);
    memset(ix, 0, sizeof *ix);
}

int cz__domain_index_of(const cz_domain_index *ix, int stage, int expert, int ep_rank)
{
    if (stage < 0 || ix->per_stage < 1 || stage * ix->per_stage >= ix->n ||
        (expert && (ep_rank < 0 || ep_rank >= ix->per_stage - 1)))
        return -1;
    return stage * ix->per_stage + (expert ? 1 + ep_rank : 0);
}
