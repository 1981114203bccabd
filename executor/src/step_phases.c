/* The phases both forms of a step are made of (cz_executor_step in step.c, the bucket-wise
 * step in bucket_step.c): a bucket's plane, staging one parameter in and out, the first step's
 * binding check, and everything from the reduce-scatters' end to every parameter updated (the
 * gradient statistics, the elementwise optimizer, the matrix pipeline). */
#include "canzona_exec.h"
#include "clock.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "step_phases.h"

#include <math.h>

cz_bucket_plane cz__step_bucket_plane(cz_executor *ex, const cz_plan_bucket *bk)
{
    if (ex->experts && bk->expert)
        return (cz_bucket_plane){&ex->edp_comm, ex->edp, ex->edp_rank,
                                 ex->expert_base + bk->offset};
    return (cz_bucket_plane){&ex->dp_comm, ex->dp, ex->dp_rank, bk->offset};
}

/* A bucket's per-rank counts on its plane (its ranges: contiguous and rank-ordered, plan check). */
void cz__step_bucket_counts(const cz_plan_bucket *bk, const cz_bucket_plane *bp, size_t *counts)
{
    for (int r = 0; r < bp->n; r++)
        counts[r] = (size_t)(bk->ranges[2 * r + 1] - bk->ranges[2 * r]);
}

/* Staging: the job's buffers (per parameter, or flat of another dtype) into the fp32 flat
 * copies and back. Gradients come in every step; parameters at every step for fp32, and only
 * at the first for bf16 (stage_params is then the fp32 master copy). */
static void *job_param(const cz_executor *ex, size_t i, int64_t off)
{
    return ex->per_param ? ex->param_ptr[i]
                         : (char *)ex->flat_params + off * cz__dtype_bytes(ex->dtype);
}

static void *job_grad(const cz_executor *ex, size_t i, int64_t off)
{
    return ex->per_param ? ex->grad_ptr[i]
                         : (char *)ex->flat_grads + off * cz__dtype_bytes(ex->dtype);
}

/* One parameter's staging in (its gradient, and its parameter when `params`) and out. */
void cz__step_stage_in_param(cz_executor *ex, size_t i, bool params)
{
    cz_compute *c = &ex->compute;
    int64_t off = ex->param_off[i], n = ex->plan->params[i].numel;
    if (params)
        c->ops->convert(c, ex->stage_params + off, CZ_DTYPE_FP32, job_param(ex, i, off), ex->dtype,
                        n);
    c->ops->convert(c, ex->stage_grads + off, CZ_DTYPE_FP32, job_grad(ex, i, off), ex->dtype, n);
}

void cz__step_stage_out_param(cz_executor *ex, size_t i)
{
    cz_compute *c = &ex->compute;
    int64_t off = ex->param_off[i], n = ex->plan->params[i].numel;
    c->ops->convert(c, job_param(ex, i, off), ex->dtype, ex->stage_params + off, CZ_DTYPE_FP32, n);
}

int cz__step_check_bound(cz_executor *ex, cz_error *err)
{
    int rc = CZ_OK;
    if (!ex->flat_params && !ex->per_param)
        rc = cz__error_set(err, CZ_EINVALID,
                           "step: no buffers bound (call bind_buffers or "
                           "bind_param first)");
    for (size_t i = 0; !rc && ex->per_param && i < ex->plan->nparams; i++)
        if (cz__exec_holds(ex, &ex->plan->params[i]) && !ex->bound[i])
            rc = cz__error_set(err, CZ_EINVALID, "step: parameter '%s' is not bound",
                               ex->plan->params[i].def.name);
    if (ex->bind_agreed)
        return rc;
    /* First step: every rank confirms its binding so that a rank that failed to bind cannot
     * leave the others waiting in a collective. */
    cz__comm_phase("first step: checking every rank's buffers", ex->steps + 1);
    int64_t v = rc ? ex->ctrl.rank : INT64_MAX;
    cz_error tmp;
    int crc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, &v, 1, &tmp);
    if (rc)
        return rc;
    if (crc) {
        if (err)
            *err = tmp;
        return crc;
    }
    if (v != INT64_MAX)
        return cz__error_set(err, CZ_EINVALID, "step: rank %lld has not bound its buffers",
                             (long long)v);
    ex->bind_agreed = true;
    return CZ_OK;
}

/* The owned gradients' statistics, read back once per step (after all reduce-scatters,
 * before any update): the backend sums the squares of every owned shard into ex->stats. A sum
 * is non-finite exactly when its shard holds NaN/Inf, so the same pass is the finiteness
 * check (all ranks agree on the lowest such parameter id) and gives the global gradient norm
 * (the sums all-reduced; a tensor replicated over TP counted by TP rank 0 only). With
 * max_grad_norm set, a norm above it scales every owned gradient shard before the updates. */
static int grad_stats(cz_executor *ex, float *G, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    cz_compute *c = &ex->compute;
    for (int k = 0; k < ex->nowned; k++) {
        int i = ex->owned[k];
        c->ops->sumsq(c, G + ex->param_off[i] + ex->piece_lo[i], ex->piece_len[i], &ex->stats[k]);
    }
    int rc =
        c->ops->download(c, ex->stats_host, ex->stats, (size_t)ex->nowned * sizeof(double), err);
    if (rc)
        return rc;
    /* One control-plane reduction per step in the normal case: the norm's sum of squares, the
     * number of non-finite owned shards (every TP rank's, replicated ones included) and the
     * number of ranks that changed their rates since the last comparison. Only when the
     * second is not zero does a second reduction find the lowest such parameter, and only when
     * the third is not zero does one compare the rates (rates.c), before any update. */
    double v[3] = {0.0, 0.0, ex->rates_changed ? 1.0 : 0.0};
    for (int k = 0; k < ex->nowned; k++) {
        const cz_plan_param *p = &plan->params[ex->owned[k]];
        /* A tensor replicated over its TP (ETP for an expert) group counts once. */
        int r = ex->experts && p->expert ? ex->etp_rank : ex->tp_rank;
        if (p->def.tp_dim >= 0 || r == 0)
            v[0] += ex->stats_host[k];
        v[1] += !isfinite(ex->stats_host[k]);
    }
    rc = ex->ctrl.ops->allreduce_sum_f64(&ex->ctrl, v, 3, err);
    if (rc || (rc = cz__exec_rates_agree(ex, v[2], err)) != CZ_OK)
        return rc;
    if (ex->cfg.check_finite && v[1] > 0.0) {
        int64_t bad = INT64_MAX;
        for (int k = 0; k < ex->nowned && bad == INT64_MAX; k++)
            if (!isfinite(ex->stats_host[k]))
                bad = ex->owned[k];
        rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, &bad, 1, err);
        if (rc)
            return rc;
        if (bad != INT64_MAX && plan->params[bad].dp_owner < 0)
            return cz__error_set(err, CZ_EINVALID,
                                 "step %lld: the averaged gradient of '%s' holds NaN or Inf (found "
                                 "in the evenly sliced elementwise buffer); no parameter was "
                                 "changed",
                                 (long long)(ex->steps + 1), plan->params[bad].def.name);
        if (bad != INT64_MAX)
            return cz__error_set(err, CZ_EINVALID,
                                 "step %lld: the averaged gradient of '%s' holds NaN or Inf (found "
                                 "by DP rank %d); no parameter was changed",
                                 (long long)(ex->steps + 1), plan->params[bad].def.name,
                                 plan->params[bad].dp_owner);
    }
    double sq = v[0];
    ex->grad_norm = sqrt(sq);
    float max = ex->cfg.max_grad_norm;
    if (max > 0.0f && ex->grad_norm > (double)max) {
        float f = (float)((double)max / (ex->grad_norm + 1e-6));
        for (int k = 0; k < ex->nowned; k++) {
            int i = ex->owned[k];
            float *g = G + ex->param_off[i] + ex->piece_lo[i];
            c->ops->scale(c, g, g, ex->piece_len[i], f);
        }
    }
    return CZ_OK;
}

void cz__step_count(cz_executor *ex, cz_exec_timings *t)
{
    t->total = t->reduce_scatter + t->elementwise + t->matrix + t->all_gather;
    ex->steps++;
    cz__comm_phase("after the step", ex->steps);
    t->steps = ex->steps;
    ex->last = *t;
}

int cz__step_elementwise_bucket(cz_executor *ex, float *P, const float *G, size_t b, cz_error *err)
{
    const cz_plan_bucket *bk = &ex->plan->buckets[b];
    if (ex->ovl_elem_done[b])
        return CZ_OK;
    ex->ovl_elem_done[b] = true;
    cz_bucket_plane bp = cz__step_bucket_plane(ex, bk);
    int64_t lo = bp.base + bk->ranges[2 * bp.me], hi = bp.base + bk->ranges[2 * bp.me + 1];
    return ex->elem_opt.ops->step_shards(&ex->elem_opt, P, G, ex->steps + 1, lo, hi, err);
}

/* The elementwise optimizer's step on the pieces this rank owns; with early updates, on those of
 * the buckets they have not updated. */
static int elementwise(cz_executor *ex, float *P, const float *G, cz_error *err)
{
    if (!cz__exec_early_step(ex))
        return ex->elem_opt.ops->step_shards(&ex->elem_opt, P, G, ex->steps + 1, 0, INT64_MAX, err);
    int rc = CZ_OK;
    for (size_t b = 0; rc == CZ_OK && b < ex->plan->nbuckets; b++)
        if (cz__exec_holds_bucket(ex, &ex->plan->buckets[b]))
            rc = cz__step_elementwise_bucket(ex, P, G, b, err);
    return rc;
}

/* What follows the reduce-scatters in a step, up to every parameter updated: the statistics
 * (norm, finiteness, clipping), the elementwise optimizer, the matrix pipeline; the one sequence
 * of cz_executor_step and cz_executor_step_finish. *t gets the phases' times, the reduce-scatter's
 * counted from t0. */
int cz__step_update_all(cz_executor *ex, float *P, float *G, double t0, cz_exec_timings *t,
                        cz_error *err)
{
    int64_t step = ex->steps + 1;
    cz__comm_phase("gradient norm and finiteness check", step);
    int rc = grad_stats(ex, G, err);
    if (rc)
        return rc;
    double t1 = cz__exec_now();
    t->reduce_scatter = t1 - t0;

    if ((rc = elementwise(ex, P, G, err)) != CZ_OK)
        return rc;
    t0 = cz__exec_now();
    t->elementwise = t0 - t1;

    cz__comm_phase("micro-group pipeline of the matrix updates", step);
    if ((rc = cz__exec_matrix_pipeline(ex, P, G, err)) != CZ_OK)
        return rc;
    t->matrix = cz__exec_now() - t0;
    return CZ_OK;
}
