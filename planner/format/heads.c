/* The rule a per-head matrix ("heads": {"dim", "size"}) must keep, in one place for the model
 * loader, the planner (against the cluster's TP), the structural check and the executor.
 *
 * Heads are a uniform size, not a list: in GQA every Q, K and V head has head_dim rows, so one
 * size expresses unequal Q/K/V head counts, and a fused [Q, K, V] keeps its declared blocks,
 * each block's heads being its own. Megatron cuts every block of a fused QKV over TP on its own
 * (executor/src/util/shard.c), so TP rank t holds, of every block, its t-th share; that share
 * must be whole heads for a per-head task to need no other rank's rows. */
#include "cz_format.h"

#include <stdio.h>

const char *cz__heads_problem(const cz_param_def *d, int tp, char *buf, size_t cap)
{
    if (d->head_size <= 0)
        return NULL;
    if (d->ndim != 2) {
        snprintf(buf, cap, "'%s': heads are allowed only on 2-D parameters", d->name);
        return buf;
    }
    if (d->head_dim != 0 && d->head_dim != 1) {
        snprintf(buf, cap, "'%s': heads along dim %d; expected 0 or 1", d->name, d->head_dim);
        return buf;
    }
    if (d->nblocks > 0 && d->block_dim != d->head_dim) {
        snprintf(buf, cap,
                 "'%s': heads along dim %d but blocks along dim %d; heads lie inside the blocks, "
                 "so both must split the same dimension",
                 d->name, d->head_dim, d->block_dim);
        return buf;
    }
    bool blocked = d->nblocks > 0 && d->block_sizes;
    bool cut = tp > 1 && d->tp_dim == d->head_dim;
    for (int b = 0; b < (blocked ? d->nblocks : 1); b++) {
        int64_t len = blocked ? d->block_sizes[b] : d->shape[d->head_dim];
        if (len % d->head_size != 0) {
            if (blocked)
                snprintf(buf, cap,
                         "'%s': block %d has %lld rows or columns along dim %d, not a multiple "
                         "of the head size %lld",
                         d->name, b, (long long)len, d->head_dim, (long long)d->head_size);
            else
                snprintf(buf, cap, "'%s': shape[%d] = %lld is not a multiple of the head size %lld",
                         d->name, d->head_dim, (long long)len, (long long)d->head_size);
            return buf;
        }
        if (cut && (len % tp != 0 || (len / tp) % d->head_size != 0)) {
            char where[48] = "";
            if (blocked)
                snprintf(where, sizeof where, " in block %d", b);
            snprintf(buf, cap,
                     "'%s': %lld heads of size %lld%s do not split into whole heads over tp = %d; "
                     "a TP rank must hold whole heads (choose a TP size that divides the head "
                     "count, or drop \"heads\")",
                     d->name, (long long)(len / d->head_size), (long long)d->head_size, where, tp);
            return buf;
        }
    }
    return NULL;
}
