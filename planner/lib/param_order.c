/* The orders of cz_order.h: parameters in buffer order (by bucket, then by offset inside the
 * bucket), and anything by decreasing cost. */
#include "cz_order.h"
#include "cz_format.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int bucket;
    int64_t offset;
    int id;
} position;

static int position_cmp(const void *a, const void *b)
{
    const position *p = a, *q = b;
    if (p->bucket != q->bucket)
        return p->bucket < q->bucket ? -1 : 1;
    if (p->offset != q->offset)
        return p->offset < q->offset ? -1 : 1;
    return (p->id > q->id) - (p->id < q->id);
}

static int costed_cmp(const void *a, const void *b)
{
    const cz_costed *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost > y->cost ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

void cz__costed_sort(cz_costed *v, size_t n)
{
    if (n > 1)
        qsort(v, n, sizeof *v, costed_cmp);
}

/* Sorts n parameter ids into buffer order: by bucket, then offset, then id. Returns CZ_OK or
 * CZ_ENOMEM (ids untouched). */
static int params_sort_by_position(const cz_plan *plan, int *ids, int n)
{
    /* Sorting keys rather than ids keeps the comparator free of global state. */
    position *keys = malloc(((size_t)n + 1) * sizeof *keys);
    if (!keys)
        return CZ_ENOMEM;
    for (int k = 0; k < n; k++) {
        const cz_plan_param *p = &plan->params[ids[k]];
        keys[k] = (position){p->bucket, p->offset, ids[k]};
    }
    qsort(keys, (size_t)n, sizeof *keys, position_cmp);
    for (int k = 0; k < n; k++)
        ids[k] = keys[k].id;
    free(keys);
    return CZ_OK;
}

void cz__stage_buckets_free(cz_stage_buckets *v)
{
    free(v->bucket);
    free(v->first);
    free(v->order);
    memset(v, 0, sizeof *v);
}

int cz__stage_buckets_build(cz_stage_buckets *v, const cz_plan *plan, int stage)
{
    memset(v, 0, sizeof *v);
    v->bucket = malloc((plan->nbuckets + 1) * sizeof *v->bucket);
    v->first = malloc((plan->nbuckets + 2) * sizeof *v->first);
    v->order = malloc((plan->nparams + 1) * sizeof *v->order);
    if (!v->bucket || !v->first || !v->order)
        return CZ_ENOMEM;
    for (size_t i = 0; i < plan->nparams; i++)
        if (plan->params[i].stage == stage && plan->params[i].bucket >= 0)
            v->order[v->n++] = (int)i;
    if (params_sort_by_position(plan, v->order, v->n) != CZ_OK)
        return CZ_ENOMEM;
    for (int k = 0; k < v->n; k++) {
        int b = plan->params[v->order[k]].bucket;
        if (v->nb == 0 || v->bucket[v->nb - 1] != b) {
            v->bucket[v->nb] = b;
            v->first[v->nb] = k;
            v->nb++;
        }
    }
    v->first[v->nb] = v->n;
    return CZ_OK;
}
