/* One optimizer step (cz_executor_step, and its async form): reduce-scatter over DP, the
 * phases of step_phases.c (finiteness check, AdamW on owned elementwise shards or their pieces
 * in this rank's slice of a split layout's elementwise buffer, the matrix micro-group pipeline
 * over TP), all-gather over DP. Data is touched only through the compute ops; the one
 * read-back of a step is the per-parameter sums of squares of the owned gradients, after all
 * reduce-scatters and before anything is updated. */
#include "canzona_exec.h"
#include "alloc.h"
#include "clock.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "step_phases.h"

static int reduce_scatter(cz_executor *ex, float *G, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    int most = ex->dp > ex->edp ? ex->dp : ex->edp;
    size_t counts[most];
    /* Averaged over DP. An expert buffer is summed over its expert-DP group and scaled by 1/DP
     * too, as Megatron-Core's DDP does (expert_gradient_scaling_factor = 1 / DP size without
     * average_in_collective): each EP rank's expert gradient already gathers the tokens of the
     * DP replicas of its EP group. */
    float inv = 1.0f / (float)ex->dp;
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        if (!cz__exec_holds_bucket(ex, bk))
            continue;
        cz_bucket_plane bp = cz__step_bucket_plane(ex, bk);
        cz__step_bucket_counts(bk, &bp, counts);
        float *base = G + bp.base + bk->ranges[0];
        int rc = bp.plane->ops->reduce_scatter(bp.plane, base, ex->scratch, counts, CZ_DTYPE_FP32,
                                               ex->ev_grads, err);
        if (rc)
            return rc;
        float *mine = G + bp.base + bk->ranges[2 * bp.me];
        ex->compute.ops->scale(&ex->compute, mine, ex->scratch, (int64_t)counts[bp.me], inv);
    }
    return CZ_OK;
}

static int all_gather(cz_executor *ex, float *P, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    int most = ex->dp > ex->edp ? ex->dp : ex->edp;
    size_t counts[most];
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        if (!cz__exec_holds_bucket(ex, bk))
            continue;
        cz_bucket_plane bp = cz__step_bucket_plane(ex, bk);
        cz__step_bucket_counts(bk, &bp, counts);
        int rc = bp.plane->ops->all_gather(bp.plane, P + bp.base + bk->ranges[0], counts,
                                           CZ_DTYPE_FP32, ex->ev_params, err);
        if (rc)
            return rc;
    }
    return CZ_OK;
}

static void stage_in(cz_executor *ex)
{
    bool params = ex->dtype == CZ_DTYPE_FP32 || !ex->master_loaded;
    for (size_t i = 0; i < ex->plan->nparams; i++)
        if (cz__exec_holds(ex, &ex->plan->params[i]))
            cz__step_stage_in_param(ex, i, params);
    ex->master_loaded = true;
}

static void stage_out(cz_executor *ex)
{
    for (size_t i = 0; i < ex->plan->nparams; i++)
        if (cz__exec_holds(ex, &ex->plan->params[i]))
            cz__step_stage_out_param(ex, i);
}

/* The step between the backend's step_begin and step_end. */
static int run_step(cz_executor *ex, cz_error *err)
{
    int rc;
    cz_exec_timings t = {0};
    double t0 = cz__exec_now(), t1;
    float *P = ex->flat_params, *G = ex->flat_grads;
    int64_t step = ex->steps + 1;
    if (ex->staged) {
        stage_in(ex);
        P = ex->stage_params;
        G = ex->stage_grads;
    }
    /* The reduce-scatter reads the gradients once every op before (staging) is done. */
    ex->compute.ops->event_record(&ex->compute, ex->ev_grads);
    cz__comm_phase("gradient reduce-scatter", step);
    rc = reduce_scatter(ex, G, err);
    if (rc != CZ_OK || (rc = cz__step_update_all(ex, P, G, t0, &t, err)) != CZ_OK)
        return rc;
    t1 = cz__exec_now();

    /* The all-gather reads the parameters once every update (both optimizers') is applied. */
    ex->compute.ops->event_record(&ex->compute, ex->ev_params);
    cz__comm_phase("parameter all-gather", step);
    if ((rc = all_gather(ex, P, err)) != CZ_OK)
        return rc;
    if (ex->staged)
        stage_out(ex);
    t0 = cz__exec_now();
    t.all_gather = t0 - t1;
    cz__step_count(ex, &t);
    return CZ_OK;
}

int cz_executor_step(cz_executor *ex, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "step: executor is NULL");
    int rc;
    if ((rc = cz__exec_overlap_settle(ex, "step", err)) != CZ_OK ||
        (rc = cz__step_check_bound(ex, err)) != CZ_OK)
        return rc;
    /* Ordered after the job's writes to the bound buffers, and the job's next work after the
     * step, on whatever path the step leaves by. */
    ex->compute.ops->step_begin(&ex->compute);
    rc = run_step(ex, err);
    ex->compute.ops->step_end(&ex->compute);
    return rc;
}

int cz_executor_step_async(cz_executor *ex, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "step_async: executor is NULL");
    if (ex->async_active)
        return cz__error_set(err, CZ_EINVALID,
                             "step_async: the previous step was not waited for (cz_executor_wait)");
    /* The cpu stream is the calling thread: the step runs here, its result waits for wait. */
    ex->async_rc = cz_executor_step(ex, &ex->async_err);
    ex->async_active = true;
    return CZ_OK;
}

int cz_executor_wait(cz_executor *ex, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "wait: executor is NULL");
    if (!ex->async_active)
        return cz__error_set(err, CZ_EINVALID,
                             "wait: no step was started (cz_executor_step_async)");
    ex->async_active = false;
    /* A GPU backend may still run the step's tail on its stream: wait for all of it (on the
     * CPU's stream, the calling thread, this returns at once). */
    if (!ex->async_rc) {
        ex->compute.ops->event_record(&ex->compute, ex->ev_params);
        ex->async_rc = ex->compute.ops->event_sync(&ex->compute, ex->ev_params, &ex->async_err);
    }
    if (ex->async_rc && err)
        *err = ex->async_err;
    return ex->async_rc;
}
