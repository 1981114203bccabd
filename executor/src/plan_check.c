/* The checks a plan must pass before the executor runs it: what the planner guarantees for
 * executable strategies, re-checked because a plan file may come from anywhere. */
#include "exec_internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int cz_exec_bucket_index(const cz_plan *plan, int id)
{
    if (id >= 0 && (size_t)id < plan->nbuckets && plan->buckets[id].id == id)
        return id;
    for (size_t i = 0; i < plan->nbuckets; i++)
        if (plan->buckets[i].id == id)
            return (int)i;
    return -1;
}

static int check_buckets(const cz_plan *plan, cz_error *err)
{
    int64_t end = 0;
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        if (bk->offset != end)
            return cz_error_set(err, CZ_EINVALID,
                                "plan $.buckets[%zu].offset = %lld, expected %lld (buckets must "
                                "tile the local buffer in order)",
                                b, (long long)bk->offset, (long long)end);
        if (bk->size > INT64_MAX - end)
            return cz_error_set(err, CZ_EINVALID,
                                "plan $.buckets[%zu].size = %lld: the buckets hold more than %lld "
                                "elements",
                                b, (long long)bk->size, (long long)INT64_MAX);
        end += bk->size;
        int64_t prev = 0;
        for (int r = 0; r < plan->dp; r++) {
            int64_t s = bk->ranges[2 * r], e = bk->ranges[2 * r + 1];
            if (s != prev || e < s || e > bk->size)
                return cz_error_set(err, CZ_EINVALID,
                                    "plan $.buckets[%zu].ranges[%d] = [%lld, %lld]: ranges must be "
                                    "contiguous, rank-ordered and inside [0, %lld]",
                                    b, r, (long long)s, (long long)e, (long long)bk->size);
            /* The all-gather addresses ranges by their start: an MPI displacement (int). */
            if (s > INT_MAX)
                return cz_error_set(
                    err, CZ_EUNSUPPORTED,
                    "plan $.buckets[%zu].ranges[%d] starts at element %lld; MPI displacements "
                    "are limited to %d (plan with a smaller bucket size)",
                    b, r, (long long)s, INT_MAX);
            if (e - s > INT_MAX)
                return cz_error_set(
                    err, CZ_EUNSUPPORTED,
                    "plan $.buckets[%zu].ranges[%d] holds %lld elements; MPI counts "
                    "are limited to %d",
                    b, r, (long long)(e - s), INT_MAX);
            prev = e;
        }
        if (prev != bk->size)
            return cz_error_set(err, CZ_EINVALID,
                                "plan $.buckets[%zu]: ranges end at %lld, not at size %lld", b,
                                (long long)prev, (long long)bk->size);
    }
    return CZ_OK;
}

static int check_params(const cz_plan *plan, cz_error *err)
{
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->id != (int)i)
            return cz_error_set(err, CZ_EINVALID, "plan $.params[%zu].id = %d, expected %zu", i,
                                p->id, i);
        if (p->dp_owner < 0 || p->dp_owner >= plan->dp)
            return cz_error_set(err, CZ_EUNSUPPORTED,
                                "plan $.params[%zu] ('%s') has dp_owner %d: parameters must be "
                                "owned whole by one DP rank in 0..%d",
                                i, p->name, p->dp_owner, plan->dp - 1);
        if (p->kind == CZ_KIND_MATRIX && p->ndim != 2)
            return cz_error_set(err, CZ_EINVALID,
                                "plan $.params[%zu] ('%s') is a matrix-optimizer parameter but "
                                "has %d dimensions",
                                i, p->name, p->ndim);
        if (p->nblocks > 64)
            return cz_error_set(err, CZ_EUNSUPPORTED,
                                "plan $.params[%zu] ('%s') has %d blocks; at most 64 supported", i,
                                p->name, p->nblocks);
        int rc = cz_shard_check(p, plan->tp, err);
        if (rc)
            return rc;
        int b = cz_exec_bucket_index(plan, p->bucket);
        if (b < 0)
            return cz_error_set(err, CZ_EINVALID, "plan $.params[%zu].bucket = %d: no such bucket",
                                i, p->bucket);
        const cz_plan_bucket *bk = &plan->buckets[b];
        int64_t s = bk->ranges[2 * p->dp_owner], e = bk->ranges[2 * p->dp_owner + 1];
        /* Written so that offset + numel cannot overflow: both are arbitrary int64 values. */
        if (p->offset < s || p->offset > e || p->numel > e - p->offset)
            return cz_error_set(err, CZ_EUNSUPPORTED,
                                "plan $.params[%zu] ('%s') at offset %lld with %lld elements in "
                                "bucket %d is not inside its owner's range [%lld, %lld) (DP "
                                "rank %d): the executor needs atomic ownership",
                                i, p->name, (long long)p->offset, (long long)p->numel, p->bucket,
                                (long long)s, (long long)e, p->dp_owner);
    }
    return CZ_OK;
}

static int check_schedules(const cz_plan *plan, cz_error *err)
{
    int rc = CZ_OK;
    int *seen = calloc(plan->nparams ? plan->nparams : 1, sizeof *seen);
    if (!seen)
        return cz_error_set(err, CZ_ENOMEM, "out of memory checking the plan");
    bool sc = plan->settings.tp == CZ_TP_SC;
    if (plan->nschedules != (size_t)plan->dp) {
        rc = cz_error_set(err, CZ_EINVALID, "plan has %zu tp_schedule entries, expected dp = %d",
                          plan->nschedules, plan->dp);
        goto done;
    }
    for (size_t k = 0; k < plan->nschedules; k++) {
        const cz_rank_schedule *rs = &plan->schedules[k];
        if (rs->dp_rank != (int)k) {
            rc =
                cz_error_set(err, CZ_EINVALID, "plan $.tp_schedule[%zu].dp_rank = %d, expected %zu",
                             k, rs->dp_rank, k);
            goto done;
        }
        for (int g = 0; g < rs->ngroups; g++) {
            const cz_plan_group *gr = &rs->groups[g];
            int want = sc ? 1 : plan->tp;
            if (gr->nslots != want && !(gr->nslots == 1 && plan->tp == 1)) {
                rc = cz_error_set(err, CZ_EINVALID,
                                  "plan $.tp_schedule[%zu].groups[%d] has %d slots, expected %d", k,
                                  g, gr->nslots, want);
                goto done;
            }
            for (int t = 0; t < gr->ntasks; t++) {
                int id = gr->task_param[t], s = gr->task_slot[t];
                if (id < 0 || (size_t)id >= plan->nparams || s < 0 || s >= gr->nslots) {
                    rc = cz_error_set(err, CZ_EINVALID,
                                      "plan $.tp_schedule[%zu].groups[%d]: task %d names param %d "
                                      "in slot %d, out of range",
                                      k, g, t, id, s);
                    goto done;
                }
                const cz_plan_param *p = &plan->params[id];
                if (p->kind != CZ_KIND_MATRIX || p->dp_owner != (int)k || seen[id]) {
                    rc = cz_error_set(err, CZ_EINVALID,
                                      "plan $.tp_schedule[%zu].groups[%d]: param '%s' is not a "
                                      "matrix owned by DP rank %zu, or is scheduled twice",
                                      k, g, p->name, k);
                    goto done;
                }
                seen[id] = 1;
            }
        }
    }
    for (size_t i = 0; i < plan->nparams; i++)
        if (plan->params[i].kind == CZ_KIND_MATRIX && !seen[i]) {
            rc = cz_error_set(err, CZ_EINVALID,
                              "plan: matrix param '%s' (owned by DP rank %d) is in no micro-group",
                              plan->params[i].name, plan->params[i].dp_owner);
            goto done;
        }
done:
    free(seen);
    return rc;
}

int cz_exec_plan_check(const cz_plan *plan, cz_error *err)
{
    if (plan->pp != 1)
        return cz_error_set(err, CZ_EUNSUPPORTED,
                            "plan has pp = %d: pipeline-parallel plans are not executed by this "
                            "version",
                            plan->pp);
    if (plan->dp < 1 || plan->tp < 1)
        return cz_error_set(err, CZ_EINVALID, "plan topology dp = %d, tp = %d: both must be >= 1",
                            plan->dp, plan->tp);
    if (plan->settings.dp == CZ_DP_EVEN || plan->settings.dp == CZ_DP_LAYERWISE)
        return cz_error_set(err, CZ_EUNSUPPORTED,
                            "plan uses DP strategy '%s', an analysis baseline the executor does "
                            "not run (it fragments parameters or breaks the bucket geometry); "
                            "plan with --dp alpha or --dp anchored",
                            cz_dp_strategy_name(plan->settings.dp));
    if (plan->settings.optimizer != CZ_OPTIM_MUON)
        return cz_error_set(err, CZ_EUNSUPPORTED,
                            "plan optimizer '%s': this version executes Muon (matrix) + AdamW "
                            "(elementwise) only",
                            cz_optimizer_name(plan->settings.optimizer));
    int rc = check_buckets(plan, err);
    if (!rc)
        rc = check_params(plan, err);
    if (!rc)
        rc = check_schedules(plan, err);
    return rc;
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

uint64_t cz_exec_plan_fingerprint(const cz_plan *plan)
{
    uint64_t h = 1469598103934665603ull;
    FNV_VAL(h, plan->dp);
    FNV_VAL(h, plan->tp);
    FNV_VAL(h, plan->pp);
    FNV_VAL(h, plan->settings.tp);
    FNV_VAL(h, plan->nparams);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        h = fnv(h, p->name, strlen(p->name) + 1);
        FNV_VAL(h, p->shape[0]);
        FNV_VAL(h, p->shape[1]);
        FNV_VAL(h, p->local_shape[0]);
        FNV_VAL(h, p->local_shape[1]);
        FNV_VAL(h, p->block_dim);
        FNV_VAL(h, p->nblocks);
        for (int k = 0; k < p->nblocks; k++)
            FNV_VAL(h, p->block_sizes[k]);
        FNV_VAL(h, p->tp_dim);
        FNV_VAL(h, p->kind);
        FNV_VAL(h, p->bucket);
        FNV_VAL(h, p->offset);
        FNV_VAL(h, p->numel);
        FNV_VAL(h, p->dp_owner);
    }
    FNV_VAL(h, plan->nbuckets);
    for (size_t b = 0; b < plan->nbuckets; b++) {
        FNV_VAL(h, plan->buckets[b].offset);
        FNV_VAL(h, plan->buckets[b].size);
        for (int r = 0; r < 2 * plan->dp; r++)
            FNV_VAL(h, plan->buckets[b].ranges[r]);
    }
    for (size_t k = 0; k < plan->nschedules; k++)
        for (int g = 0; g < plan->schedules[k].ngroups; g++) {
            const cz_plan_group *gr = &plan->schedules[k].groups[g];
            FNV_VAL(h, gr->ntasks);
            for (int t = 0; t < gr->ntasks; t++) {
                FNV_VAL(h, gr->task_param[t]);
                FNV_VAL(h, gr->task_slot[t]);
            }
        }
    return h;
}
