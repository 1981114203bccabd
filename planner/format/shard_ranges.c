/* Where a TP rank's shard of a parameter lies along the TP dimension, from the plan alone: the
 * executor packs and unpacks shards with it (executor/src/util/shard.c) and the simulator
 * counts the bytes of the micro-group exchanges with it (planner/lib/sim_program.c), so the two
 * cannot disagree about who holds what.
 *
 * A TP split cuts the tp_dim into tp equal slices. When the parameter's blocks split the same
 * dimension (fused QKV, gate/up), Megatron cuts every block separately: the local shard is the
 * concatenation, in block order, of each block's r-th slice. */
#include "cz_format.h"

#include <stdint.h>

/* Saturating (cz__i64_sat_add): the simulator reads plans before the structural check has
 * bounded their sizes, as cz_task_region does. */
#define sat_add cz__i64_sat_add

int cz__shard_ranges(const cz_plan_param *p, int tp, int r, int64_t *lo, int64_t *hi, int max)
{
    if (max < 1)
        return 0;
    if (p->def.tp_dim < 0 || tp == 1) {
        lo[0] = 0;
        hi[0] = p->def.shape[p->def.tp_dim < 0 ? 0 : p->def.tp_dim];
        return 1;
    }
    int d = p->def.tp_dim;
    if (p->def.nblocks > 0 && p->def.block_dim == d) {
        int n = 0;
        int64_t off = 0;
        for (int b = 0; b < p->def.nblocks && n < max; b++) {
            int64_t s = p->def.block_sizes[b] / tp;
            lo[n] = sat_add(off, (int64_t)r * s);
            hi[n] = sat_add(lo[n], s);
            n++;
            off = sat_add(off, p->def.block_sizes[b]);
        }
        return n;
    }
    int64_t s = p->def.shape[d] / tp;
    lo[0] = (int64_t)r * s;
    hi[0] = lo[0] + s;
    return 1;
}
