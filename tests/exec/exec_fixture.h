/* Builds small plans by hand for the executor's unit tests (no planner, no files). */
#ifndef CZ_EXEC_FIXTURE_H
#define CZ_EXEC_FIXTURE_H

#include "cz_format.h"

#include <stdlib.h>
#include <string.h>

typedef struct fx_param {
    const char *name;
    int ndim;
    int64_t rows, cols;
    int tp_dim;
    cz_param_kind kind;
    int block_dim, nblocks;
    int64_t blocks[4];
} fx_param;

/* A plan for dp = 1 and the given tp: one bucket holding every parameter back to back (the last one
 * first), one micro-group holding every matrix parameter, task k on slot k % tp. Returns NULL on
 * OOM. */
static inline cz_plan *fx_plan(const fx_param *ps, int n, int tp)
{
    cz_plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return NULL;
    cz_settings_init(&pl->settings);
    pl->settings.dp = CZ_DP_ALPHA;
    pl->settings.tp = CZ_TP_ROLLBACK;
    pl->settings.optimizer = CZ_OPTIM_MUON;
    pl->dp = 1;
    pl->tp = tp;
    pl->pp = 1;
    pl->dtype = CZ_DTYPE_FP32;
    pl->nparams = (size_t)n;
    pl->params = calloc((size_t)n, sizeof *pl->params);
    pl->nbuckets = 1;
    pl->buckets = calloc(1, sizeof *pl->buckets);
    pl->nschedules = 1;
    pl->schedules = calloc(1, sizeof *pl->schedules);
    pl->schedules[0].ngroups = 1;
    pl->schedules[0].groups = calloc(1, sizeof(cz_plan_group));
    cz_plan_group *g = &pl->schedules[0].groups[0];
    g->nslots = tp;
    g->task_param = calloc((size_t)n, sizeof(int));
    g->task_slot = calloc((size_t)n, sizeof(int));
    g->load = calloc((size_t)tp, sizeof(double));
    /* Buckets fill in reverse registration order, as Megatron's do: the last parameter first. */
    int64_t off = 0;
    for (int i = n; i-- > 0;) {
        cz_plan_param *p = &pl->params[i];
        p->numel = ps[i].rows * (ps[i].ndim == 1 ? 1 : ps[i].cols) / (ps[i].tp_dim >= 0 ? tp : 1);
        p->offset = off;
        off += p->numel;
    }
    for (int i = 0; i < n; i++) {
        cz_plan_param *p = &pl->params[i];
        p->id = i;
        p->def.name = cz__strdup(ps[i].name);
        p->def.ndim = ps[i].ndim;
        p->def.shape[0] = ps[i].rows;
        p->def.shape[1] = ps[i].ndim == 1 ? 1 : ps[i].cols;
        p->def.tp_dim = ps[i].tp_dim;
        p->local_shape[0] = p->def.shape[0] / (p->def.tp_dim == 0 ? tp : 1);
        p->local_shape[1] = p->def.shape[1] / (p->def.tp_dim == 1 ? tp : 1);
        p->def.kind = ps[i].kind;
        p->def.block_dim = ps[i].nblocks ? ps[i].block_dim : -1;
        p->def.nblocks = ps[i].nblocks;
        if (p->def.nblocks) {
            p->def.block_sizes = calloc((size_t)p->def.nblocks, sizeof(int64_t));
            memcpy(p->def.block_sizes, ps[i].blocks, (size_t)p->def.nblocks * sizeof(int64_t));
        }
        p->def.layer = -1;
        p->bucket = 0;
        p->dp_owner = 0;
        if (p->def.kind == CZ_KIND_MATRIX) {
            g->task_param[g->ntasks] = i;
            g->task_slot[g->ntasks] = g->ntasks % tp;
            g->ntasks++;
        }
    }
    pl->buckets[0].size = off;
    pl->buckets[0].ranges = calloc(2, sizeof(int64_t));
    pl->buckets[0].ranges[1] = off;
    return pl;
}

/* Deterministic values in [-1, 1). */
static inline float fx_val(uint64_t k)
{
    k += 0x9e3779b97f4a7c15ull;
    k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
    k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
    k ^= k >> 31;
    return (float)((double)(k >> 40) / (double)(1ull << 23) - 1.0);
}

#endif
