/*
 * A small plan built by hand for the analysis tests (validate, inspect, diff), with a model and
 * cluster that match it. dp = 2, tp = 2, pp = 1, buckets of 600 elements aligned to 64.
 *
 *   id name      shape   tp_dim kind        local   numel
 *   0  embed     8x16    0      elementwise 4x16    64
 *   1  l0.qkv    32x16   0      matrix      16x16   256
 *   2  l0.proj   16x32   1      matrix      16x16   256
 *   3  l0.norm   16      -1     elementwise 16      16
 *   4  l1.fc     64x16   0      matrix      32x16   512
 *   5  out       8x16    0      elementwise 4x16    64
 *
 * Buckets fill in reverse order: bucket 0 = out@0, l1.fc@64, l0.norm@576, l0.proj@640 (ends at
 * 896 >= 600, closes; 896 is a multiple of dp); bucket 1 = l0.qkv@0, embed@256 (size 320,
 * offset 896). Ranges: bucket 0 [0,576) [576,896); bucket 1 [0,256) [256,320). Owners:
 * rank 0 = out, l1.fc, l0.qkv; rank 1 = l0.norm, l0.proj, embed. Schedules (rollback, one group
 * each): rank 0 slots [[l1.fc], [l0.qkv]], rank 1 slots [[l0.proj], []].
 */
#ifndef CZ_HAND_PLAN_H
#define CZ_HAND_PLAN_H

#include "cz_types.h"

#include <stdlib.h>
#include <string.h>

#define HAND_NPARAMS 6

static const struct {
    const char *name;
    int ndim;
    int64_t rows, cols;
    int tp_dim;
    cz_param_kind kind;
    int bucket;
    int64_t offset;
    int owner;
} hand_params[HAND_NPARAMS] = {
    {"embed", 2, 8, 16, 0, CZ_KIND_ELEMENTWISE, 1, 256, 1},
    {"l0.qkv", 2, 32, 16, 0, CZ_KIND_MATRIX, 1, 0, 0},
    {"l0.proj", 2, 16, 32, 1, CZ_KIND_MATRIX, 0, 640, 1},
    {"l0.norm", 1, 16, 1, -1, CZ_KIND_ELEMENTWISE, 0, 576, 1},
    {"l1.fc", 2, 64, 16, 0, CZ_KIND_MATRIX, 0, 64, 0},
    {"out", 2, 8, 16, 0, CZ_KIND_ELEMENTWISE, 0, 0, 0},
};

static inline cz_model *hand_model(void)
{
    cz_model *m = calloc(1, sizeof *m);
    m->name = cz__strdup("hand");
    m->source = cz__strdup("hand.json");
    memset(m->sha256, 'a', 64);
    m->dtype = CZ_DTYPE_BF16;
    m->nlayers = 2;
    m->nparams = HAND_NPARAMS;
    m->params = calloc(HAND_NPARAMS, sizeof *m->params);
    for (int i = 0; i < HAND_NPARAMS; i++) {
        cz_param_def *d = &m->params[i];
        d->name = cz__strdup(hand_params[i].name);
        d->ndim = hand_params[i].ndim;
        d->shape[0] = hand_params[i].rows;
        d->shape[1] = hand_params[i].cols;
        d->tp_dim = hand_params[i].tp_dim;
        d->kind = hand_params[i].kind;
        d->block_dim = -1;
        d->layer = i == 0 || i == 5 ? -1 : (i == 4 ? 1 : 0);
    }
    return m;
}

static inline cz_cluster *hand_cluster(void)
{
    cz_cluster *c = calloc(1, sizeof *c);
    c->name = cz__strdup("hand-2x2");
    c->source = cz__strdup("hand-2x2.json");
    memset(c->sha256, 'b', 64);
    c->dp = 2, c->tp = 2, c->pp = 1, c->gpus = 4, c->gpus_per_node = 4;
    c->device.name = cz__strdup("test-gpu");
    c->device.matmul_tflops = 100.0;
    c->device.mem_gbps = 1000.0;
    c->device.memory_gib = 80.0;
    c->links.intra_node_gbps = 100.0;
    c->links.inter_node_gbps = 25.0;
    c->links.latency_us = 5.0;
    c->bucket_size = 600;
    c->bucket_align = 64;
    return c;
}

static inline void hand_group(cz_plan_group *g, int id, int nslots, int ntasks, const int *param,
                              const int *slot)
{
    g->id = id;
    g->nslots = nslots;
    g->ntasks = ntasks;
    g->task_param = calloc((size_t)ntasks + 1, sizeof *g->task_param);
    g->task_slot = calloc((size_t)ntasks + 1, sizeof *g->task_slot);
    g->load = calloc((size_t)nslots, sizeof *g->load);
    for (int t = 0; t < ntasks; t++)
        g->task_param[t] = param[t], g->task_slot[t] = slot[t];
}

/* Recomputes every group's slot loads from the params' costs. */
static inline void hand_group_loads(cz_plan *p)
{
    for (size_t k = 0; k < p->nschedules; k++)
        for (int g = 0; g < p->schedules[k].ngroups; g++) {
            cz_plan_group *gr = &p->schedules[k].groups[g];
            for (int x = 0; x < gr->nslots; x++)
                gr->load[x] = 0.0;
            for (int t = 0; t < gr->ntasks; t++)
                gr->load[gr->task_slot[t]] += p->params[gr->task_param[t]].cost;
        }
}

/* The plan without costs and metrics (callers fill them: validate tests through the cost model
 * and metrics code, inspect/diff tests by hand). */
static inline cz_plan *hand_plan(void)
{
    cz_plan *p = calloc(1, sizeof *p);
    p->generator = cz__strdup("canzona");
    p->generator_version = cz__strdup(CZ_VERSION);
    p->model_name = cz__strdup("hand");
    p->model_sha256 = calloc(65, 1);
    memset(p->model_sha256, 'a', 64);
    p->cluster_name = cz__strdup("hand-2x2");
    p->cluster_sha256 = calloc(65, 1);
    memset(p->cluster_sha256, 'b', 64);
    p->dtype = CZ_DTYPE_BF16;
    cz_settings_init(&p->settings);
    p->settings.dp = CZ_DP_ALPHA;
    p->settings.tp = CZ_TP_ROLLBACK;
    p->capacity_used = 1000.0;
    p->dp = 2, p->tp = 2, p->pp = 1, p->gpus_per_node = 4;
    p->bucket_size = 600, p->bucket_align = 64;
    p->nparams = HAND_NPARAMS;
    p->params = calloc(HAND_NPARAMS, sizeof *p->params);
    for (int i = 0; i < HAND_NPARAMS; i++) {
        cz_plan_param *q = &p->params[i];
        q->id = i;
        q->def.name = cz__strdup(hand_params[i].name);
        q->def.ndim = hand_params[i].ndim;
        q->def.shape[0] = hand_params[i].rows;
        q->def.shape[1] = hand_params[i].cols;
        q->local_shape[0] = q->def.shape[0];
        q->local_shape[1] = q->def.shape[1];
        q->def.tp_dim = hand_params[i].tp_dim;
        if (q->def.tp_dim >= 0)
            q->local_shape[q->def.tp_dim] /= 2;
        q->def.kind = hand_params[i].kind;
        q->def.block_dim = -1;
        q->def.layer = i == 0 || i == 5 ? -1 : (i == 4 ? 1 : 0);
        q->stage = 0;
        q->bucket = hand_params[i].bucket;
        q->offset = hand_params[i].offset;
        q->numel = q->local_shape[0] * q->local_shape[1];
        q->dp_owner = hand_params[i].owner;
    }
    p->nbuckets = 2;
    p->buckets = calloc(2, sizeof *p->buckets);
    const int64_t sizes[2] = {896, 320}, cut[2] = {576, 256};
    for (int b = 0; b < 2; b++) {
        cz_plan_bucket *k = &p->buckets[b];
        k->id = b;
        k->stage = 0;
        k->offset = b == 0 ? 0 : 896;
        k->size = sizes[b];
        k->ranges = calloc(4, sizeof *k->ranges);
        k->ranges[0] = 0, k->ranges[1] = cut[b], k->ranges[2] = cut[b], k->ranges[3] = sizes[b];
    }
    p->nschedules = 2;
    p->schedules = calloc(2, sizeof *p->schedules);
    const int r0p[] = {4, 1}, r0s[] = {0, 1}, r1p[] = {2}, r1s[] = {0};
    for (int r = 0; r < 2; r++) {
        p->schedules[r].stage = 0;
        p->schedules[r].dp_rank = r;
        p->schedules[r].ngroups = 1;
        p->schedules[r].groups = calloc(1, sizeof(cz_plan_group));
    }
    hand_group(&p->schedules[0].groups[0], 0, 2, 2, r0p, r0s);
    hand_group(&p->schedules[1].groups[0], 0, 2, 1, r1p, r1s);
    return p;
}

#endif /* CZ_HAND_PLAN_H */
