/* Parameters in buffer order: by bucket, then by offset inside the bucket. */
#include "cz_types.h"

#include <stdlib.h>

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

int cz_params_sort_by_position(const cz_plan *plan, int *ids, int n)
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
