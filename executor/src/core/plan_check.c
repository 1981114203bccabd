/* The checks a plan must pass before the executor runs it: what the planner guarantees for
 * executable strategies, re-checked because a plan file may come from anywhere. The structural
 * rules are validate's own (plan_structure.c); what needs the model is protected by the plan's
 * content hash, checked when the plan is read from a file (executor_open.c). */
#include "comm.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "optimizer.h"
#include "shard.h"

#include <jansson.h>
#include <stdio.h>

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What the optimizers need: Muon works on 2-D matrices, and every shard must be cut cleanly. */
static int check_params(const cz_plan *plan, cz_error *err)
{
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->def.kind == CZ_KIND_MATRIX && p->def.ndim != 2)
            return cz__error_set(err, CZ_EINVALID,
                                 "plan $.params[%zu] ('%s') is a matrix-optimizer parameter but "
                                 "has %d dimensions",
                                 i, p->def.name, p->def.ndim);
        int rc = cz__shard_check(p, cz_plan_param_tp(plan, p), err);
        if (rc)
            return rc;
    }
    return CZ_OK;
}

/* The rules `canzona validate` checks without a model (plan_structure.c), stopping at the
 * first violation; validate lists them all. They include the block and cooperative tasks'
 * (a block in range, each matrix whole once or each of its blocks once, a width dividing the
 * slots from an aligned first slot, no cooperative whole multi-block matrix, Muon only), which
 * are all the pipeline assumes of them. */
static int check_structure(const cz_plan *plan, cz_error *err)
{
    cz_plan_checks c = {0};
    c.expert_groups = 1; /* the executor runs them (and the check keeps their rules) */
    c.out = json_array();
    if (!c.out)
        return cz__error_set(err, CZ_ENOMEM, "out of memory checking the plan");
    cz__plan_check_structure(&c, plan);
    int rc = CZ_OK;
    size_t n = json_array_size(c.out);
    if (c.oom) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory checking the plan");
    } else if (n > 0) {
        const json_t *v = json_array_get(c.out, 0);
        char more[96] = "";
        if (n > 1)
            snprintf(more, sizeof more, " (and %zu more violations; canzona validate lists all)",
                     n - 1);
        rc = cz__error_set(err, CZ_EINVALID, "plan %s: %s [%s]%s",
                           json_string_value(json_object_get(v, "path")),
                           json_string_value(json_object_get(v, "message")),
                           json_string_value(json_object_get(v, "code")), more);
    }
    json_decref(c.out);
    return rc;
}

int cz__exec_plan_check(const cz_plan *plan, cz_error *err)
{
    if (plan->dp < 1 || plan->tp < 1 || plan->pp < 1)
        return cz__error_set(err, CZ_EINVALID,
                             "plan topology dp = %d, tp = %d, pp = %d: each must be >= 1", plan->dp,
                             plan->tp, plan->pp);
    if (plan->settings.dp == CZ_DP_EVEN || plan->settings.dp == CZ_DP_LAYERWISE)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "plan uses DP strategy '%s', an analysis baseline the executor does "
                             "not run (it fragments parameters or breaks the bucket geometry); "
                             "plan with --dp alpha or --dp anchored",
                             cz_dp_strategy_name(plan->settings.dp));
    int rc;
    if ((rc = cz__optimizer_plan_check(plan, err)) != CZ_OK ||
        (rc = check_structure(plan, err)) != CZ_OK ||
        (rc = cz__comm_plan_check(plan, err)) != CZ_OK)
        return rc;
    return check_params(plan, err);
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

#define FNV_VAL(h, v)                                                                              \
    do {                                                                                           \
        int64_t fv_ = (int64_t)(v);                                                                \
        h = fnv(h, &fv_, sizeof fv_);                                                              \
    } while (0)

/* Schedule k of the DP ranks' then the expert ranks'. */
static const cz_rank_schedule *sched_at(const cz_plan *plan, size_t k)
{
    return k < plan->nschedules ? &plan->schedules[k]
                                : &plan->expert_schedules[k - plan->nschedules];
}

uint64_t cz__exec_plan_fingerprint(const cz_plan *plan)
{
    uint64_t h = 1469598103934665603ull;
    /* A plan whose content matched its hash (a file, or every piece of a slice) is named by
     * it: the same for every rank of the plan whichever form it read, and O(1) where hashing
     * every rank's schedule cost a rank of 131,072 as much as the cluster's plan. */
    if (plan->content_hash_ok > 0 && plan->content_sha256[0]) {
        h = fnv(h, plan->content_sha256, 64);
        FNV_VAL(h, plan->dp);
        FNV_VAL(h, plan->tp);
        FNV_VAL(h, plan->pp);
        return h;
    }
    FNV_VAL(h, plan->dp);
    FNV_VAL(h, plan->tp);
    FNV_VAL(h, plan->pp);
    FNV_VAL(h, plan->ep);
    FNV_VAL(h, plan->etp);
    FNV_VAL(h, plan->edp);
    FNV_VAL(h, plan->settings.tp);
    FNV_VAL(h, plan->settings.layout);
    FNV_VAL(h, plan->nparams);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        h = fnv(h, p->def.name, strlen(p->def.name) + 1);
        FNV_VAL(h, p->def.shape[0]);
        FNV_VAL(h, p->def.shape[1]);
        FNV_VAL(h, p->local_shape[0]);
        FNV_VAL(h, p->local_shape[1]);
        FNV_VAL(h, p->def.block_dim);
        FNV_VAL(h, p->def.nblocks);
        for (int k = 0; k < p->def.nblocks; k++)
            FNV_VAL(h, p->def.block_sizes[k]);
        if (p->def.head_size > 0) { /* only then: a plan without heads keeps its hash */
            FNV_VAL(h, p->def.head_dim);
            FNV_VAL(h, p->def.head_size);
        }
        FNV_VAL(h, p->def.tp_dim);
        FNV_VAL(h, p->def.kind);
        FNV_VAL(h, p->bucket);
        FNV_VAL(h, p->offset);
        FNV_VAL(h, p->numel);
        FNV_VAL(h, p->dp_owner);
        FNV_VAL(h, p->stage);
        FNV_VAL(h, p->expert);
        FNV_VAL(h, p->ep_rank);
    }
    FNV_VAL(h, plan->nbuckets);
    for (size_t b = 0; b < plan->nbuckets; b++) {
        FNV_VAL(h, plan->buckets[b].offset);
        FNV_VAL(h, plan->buckets[b].size);
        FNV_VAL(h, plan->buckets[b].elementwise);
        FNV_VAL(h, plan->buckets[b].stage);
        FNV_VAL(h, plan->buckets[b].expert);
        FNV_VAL(h, plan->buckets[b].ep_rank);
        for (int r = 0; r < 2 * cz_plan_bucket_nranks(plan, &plan->buckets[b]); r++)
            FNV_VAL(h, plan->buckets[b].ranges[r]);
    }
    /* Every DP rank's schedule, then every expert rank's. */
    size_t nall = plan->nschedules + plan->nexpert_schedules;
    for (size_t k = 0; k < nall; k++)
        for (int g = 0; g < sched_at(plan, k)->ngroups; g++) {
            const cz_plan_group *gr = &sched_at(plan, k)->groups[g];
            FNV_VAL(h, gr->ntasks);
            for (int t = 0; t < gr->ntasks; t++) {
                FNV_VAL(h, gr->task_param[t]);
                FNV_VAL(h, gr->task_slot[t]);
                FNV_VAL(h, cz_group_task_block(gr, t));
                FNV_VAL(h, cz_group_task_width(gr, t));
                FNV_VAL(h, cz_group_task_panels(gr, t));
            }
        }
    return h;
}
