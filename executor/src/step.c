/* One optimizer step: reduce-scatter over DP, finiteness check, AdamW on owned elementwise
 * shards (or their pieces in this rank's slice of a split layout's elementwise buffer), the matrix
 * micro-group pipeline over TP, all-gather over DP. Data is touched only through the compute ops;
 * the one read-back of a step is the per-parameter sums of squares of the owned gradients, after
 * all reduce-scatters and before anything is updated. */
#include "canzona_exec.h"
#include "alloc.h"
#include "clock.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "executor_impl.h"

#include <math.h>

/* The plane a bucket is reduced and gathered over, its size and this rank's place in it, and
 * where the bucket starts in the flat buffers: the DP plane for the dense buffer; for an
 * expert bucket, the expert-DP plane and the expert buffer. */
typedef struct bucket_plane {
    cz_plane *plane;
    int n, me;
    int64_t base;
} bucket_plane;

static bucket_plane plane_of(cz_executor *ex, const cz_plan_bucket *bk)
{
    if (ex->experts && bk->expert)
        return (bucket_plane){&ex->edp_comm, ex->edp, ex->edp_rank, ex->expert_base + bk->offset};
    return (bucket_plane){&ex->dp_comm, ex->dp, ex->dp_rank, bk->offset};
}

/* A bucket's per-rank counts on its plane (its ranges: contiguous and rank-ordered, plan check). */
static void bucket_counts(const cz_plan_bucket *bk, const bucket_plane *bp, size_t *counts)
{
    for (int r = 0; r < bp->n; r++)
        counts[r] = (size_t)(bk->ranges[2 * r + 1] - bk->ranges[2 * r]);
}

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
        bucket_plane bp = plane_of(ex, bk);
        bucket_counts(bk, &bp, counts);
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
        bucket_plane bp = plane_of(ex, bk);
        bucket_counts(bk, &bp, counts);
        int rc = bp.plane->ops->all_gather(bp.plane, P + bp.base + bk->ranges[0], counts,
                                           CZ_DTYPE_FP32, ex->ev_params, err);
        if (rc)
            return rc;
    }
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
static void stage_in_param(cz_executor *ex, size_t i, bool params)
{
    cz_compute *c = &ex->compute;
    int64_t off = ex->param_off[i], n = ex->plan->params[i].numel;
    if (params)
        c->ops->convert(c, ex->stage_params + off, CZ_DTYPE_FP32, job_param(ex, i, off), ex->dtype,
                        n);
    c->ops->convert(c, ex->stage_grads + off, CZ_DTYPE_FP32, job_grad(ex, i, off), ex->dtype, n);
}

static void stage_out_param(cz_executor *ex, size_t i)
{
    cz_compute *c = &ex->compute;
    int64_t off = ex->param_off[i], n = ex->plan->params[i].numel;
    c->ops->convert(c, job_param(ex, i, off), ex->dtype, ex->stage_params + off, CZ_DTYPE_FP32, n);
}

static void stage_in(cz_executor *ex)
{
    bool params = ex->dtype == CZ_DTYPE_FP32 || !ex->master_loaded;
    for (size_t i = 0; i < ex->plan->nparams; i++)
        if (cz__exec_holds(ex, &ex->plan->params[i]))
            stage_in_param(ex, i, params);
    ex->master_loaded = true;
}

static void stage_out(cz_executor *ex)
{
    for (size_t i = 0; i < ex->plan->nparams; i++)
        if (cz__exec_holds(ex, &ex->plan->params[i]))
            stage_out_param(ex, i);
}

static int check_bound(cz_executor *ex, cz_error *err)
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

/* What follows the reduce-scatters in a step, up to every parameter updated: the statistics
 * (norm, finiteness, clipping), the elementwise optimizer, the matrix pipeline; the one sequence
 * of cz_executor_step and cz_executor_step_finish. *t gets the phases' times, the reduce-scatter's
 * counted from t0. */
static int update_all(cz_executor *ex, float *P, float *G, double t0, cz_exec_timings *t,
                      cz_error *err)
{
    int64_t step = ex->steps + 1;
    cz__comm_phase("gradient norm and finiteness check", step);
    int rc = grad_stats(ex, G, err);
    if (rc)
        return rc;
    double t1 = cz__exec_now();
    t->reduce_scatter = t1 - t0;

    /* The elementwise optimizer's step on the pieces this rank owns. */
    if ((rc = ex->elem_opt.ops->step_shards(&ex->elem_opt, P, G, step, err)) != CZ_OK)
        return rc;
    t0 = cz__exec_now();
    t->elementwise = t0 - t1;

    cz__comm_phase("micro-group pipeline of the matrix updates", step);
    if ((rc = cz__exec_matrix_pipeline(ex, P, G, err)) != CZ_OK)
        return rc;
    t->matrix = cz__exec_now() - t0;
    return CZ_OK;
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
    if (rc != CZ_OK || (rc = update_all(ex, P, G, t0, &t, err)) != CZ_OK)
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
    t.total = t.reduce_scatter + t.elementwise + t.matrix + t.all_gather;
    ex->steps++;
    cz__comm_phase("after the step", ex->steps);
    t.steps = ex->steps;
    ex->last = t;
    return CZ_OK;
}

static int ovl_settle(cz_executor *ex, const char *what, cz_error *err);

int cz_executor_step(cz_executor *ex, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "step: executor is NULL");
    int rc;
    if ((rc = ovl_settle(ex, "step", err)) != CZ_OK || (rc = check_bound(ex, err)) != CZ_OK)
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

/* ---- The bucket-wise step (docs/EXECUTOR.md, "The bucket-wise step") ----
 * cz_executor_bucket_ready stages one bucket and posts its reduce-scatter; step_finish waits
 * for them all, runs update_all as cz_executor_step does, and posts the all-gathers, which
 * bucket_wait completes one by one. The same collectives and ops on the same data as run_step
 * (each reduce-scatter into a range of its own instead of the shared scratch), hence the same
 * bits. */

enum { CZ_OVL_IDLE = 0, CZ_OVL_DECLARED = 1, CZ_OVL_REDUCING = 2, CZ_OVL_GATHERING = 3 };

static int ovl_nomem(cz_error *err)
{
    return cz__error_set(err, CZ_ENOMEM, "bucket-wise step: out of memory for its tables");
}

/* The tables, requests and reduce-scatter ranges of the bucket-wise step, at its first use only
 * (a job that never calls it pays nothing): a later step allocates nothing. */
static int ovl_setup(cz_executor *ex, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    size_t nb = plan->nbuckets, np = plan->nparams;
    int *cur = NULL;
    int rc = CZ_OK;
    if (ex->ovl_ready)
        return CZ_OK;
    ex->ovl_state = cz__exec_calloc(nb + 1, sizeof *ex->ovl_state);
    ex->ovl_rs = cz__exec_calloc(nb + 1, sizeof *ex->ovl_rs);
    ex->ovl_ag = cz__exec_calloc(nb + 1, sizeof *ex->ovl_ag);
    ex->ovl_recv_off = cz__exec_calloc(nb + 1, sizeof *ex->ovl_recv_off);
    ex->ovl_pstart = cz__exec_calloc(nb + 1, sizeof *ex->ovl_pstart);
    ex->ovl_pidx = cz__exec_calloc(np + 1, sizeof *ex->ovl_pidx);
    cur = cz__exec_calloc(nb + 1, sizeof *cur);
    if (!ex->ovl_state || !ex->ovl_rs || !ex->ovl_ag || !ex->ovl_recv_off || !ex->ovl_pstart ||
        !ex->ovl_pidx || !cur) {
        rc = ovl_nomem(err);
        goto done;
    }
    int64_t total = 0;
    for (size_t b = 0; b < nb; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        if (!cz__exec_holds_bucket(ex, bk))
            continue;
        bucket_plane bp = plane_of(ex, bk);
        ex->ovl_recv_off[b] = total;
        total += bk->ranges[2 * bp.me + 1] - bk->ranges[2 * bp.me];
        ex->ovl_rs[b] = bp.plane->ops->req_create(bp.plane);
        ex->ovl_ag[b] = bp.plane->ops->req_create(bp.plane);
        if (!ex->ovl_rs[b] || !ex->ovl_ag[b]) {
            rc = ovl_nomem(err);
            goto done;
        }
    }
    ex->ovl_recv =
        ex->compute.ops->alloc(&ex->compute, (size_t)(total > 0 ? total : 1) * sizeof(float));
    if (!ex->ovl_recv) {
        rc = cz__error_set(err, CZ_ENOMEM,
                           "bucket-wise step: out of memory for its %lld-element reduce-scatter "
                           "ranges",
                           (long long)total);
        goto done;
    }
    /* The held parameters bucket by bucket, ids ascending within one (a counting sort). */
    for (size_t i = 0; i < np; i++)
        if (cz__exec_holds(ex, &plan->params[i]))
            ex->ovl_pstart[plan->params[i].bucket + 1]++;
    for (size_t b = 0; b < nb; b++) {
        ex->ovl_pstart[b + 1] += ex->ovl_pstart[b];
        cur[b] = ex->ovl_pstart[b];
    }
    for (size_t i = 0; i < np; i++)
        if (cz__exec_holds(ex, &plan->params[i]))
            ex->ovl_pidx[cur[plan->params[i].bucket]++] = (int)i;
    ex->ovl_ready = true;
done:
    /* A failed setup is retried by the next call: cz_executor_free releases what it left. */
    cz__exec_free(cur);
    return rc;
}

/* Completes bucket b's all-gather and, staged, writes its parameters back to the job's. */
static int ovl_gather_done(cz_executor *ex, size_t b, cz_error *err)
{
    bucket_plane bp = plane_of(ex, &ex->plan->buckets[b]);
    int rc = bp.plane->ops->wait(bp.plane, ex->ovl_ag[b], err);
    ex->ovl_state[b] = CZ_OVL_IDLE;
    if (rc == CZ_OK && ex->staged)
        for (int k = ex->ovl_pstart[b]; k < ex->ovl_pstart[b + 1]; k++)
            stage_out_param(ex, (size_t)ex->ovl_pidx[k]);
    ex->ovl_gathering = false;
    for (size_t k = 0; k < ex->plan->nbuckets; k++)
        if (ex->ovl_state[k] == CZ_OVL_GATHERING)
            ex->ovl_gathering = true;
    return rc;
}

/* Completes every all-gather still outstanding (the next step's first call, save and load). */
static int ovl_settle(cz_executor *ex, const char *what, cz_error *err)
{
    if (ex->ovl_active)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: a bucket-wise step is in progress (buckets were declared ready): "
                             "finish it with cz_executor_step_finish first",
                             what);
    if (!ex->ovl_gathering)
        return CZ_OK;
    int rc = CZ_OK;
    ex->compute.ops->step_begin(&ex->compute);
    /* In the order they were posted (forward order); after a failure the others still complete,
     * the first failure reported. */
    for (size_t b = ex->plan->nbuckets; b-- > 0;) {
        cz_error tmp;
        if (ex->ovl_state[b] != CZ_OVL_GATHERING)
            continue;
        int brc = ovl_gather_done(ex, b, rc != CZ_OK ? &tmp : err);
        rc = rc != CZ_OK ? rc : brc;
    }
    ex->compute.ops->step_end(&ex->compute);
    return rc;
}

int cz__exec_overlap_settle(cz_executor *ex, const char *what, cz_error *err)
{
    return ovl_settle(ex, what, err);
}

/* Posts, in bucket order, every declared bucket whose predecessors are all posted (every one
 * with `all`, the missing ones too): the order is the plan's on every rank, whatever order the
 * job declares them in, as MPI and NCCL match collectives by their order on a communicator. */
static int ovl_post(cz_executor *ex, bool all, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    float *G = ex->staged ? ex->stage_grads : ex->flat_grads;
    int most = ex->dp > ex->edp ? ex->dp : ex->edp;
    size_t counts[most];
    bool recorded = false;
    for (; ex->ovl_next < plan->nbuckets; ex->ovl_next++) {
        size_t b = ex->ovl_next;
        const cz_plan_bucket *bk = &plan->buckets[b];
        if (!cz__exec_holds_bucket(ex, bk))
            continue;
        if (ex->ovl_state[b] != CZ_OVL_DECLARED && !all)
            break;
        /* The reduce-scatter reads the gradients once their staging is done. */
        if (!recorded)
            ex->compute.ops->event_record(&ex->compute, ex->ev_grads);
        recorded = true;
        bucket_plane bp = plane_of(ex, bk);
        bucket_counts(bk, &bp, counts);
        int rc = bp.plane->ops->ireduce_scatter(bp.plane, G + bp.base + bk->ranges[0],
                                                ex->ovl_recv + ex->ovl_recv_off[b], counts,
                                                CZ_DTYPE_FP32, ex->ev_grads, ex->ovl_rs[b], err);
        if (rc)
            return rc;
        ex->ovl_state[b] = CZ_OVL_REDUCING;
    }
    /* MPI progresses a collective only inside MPI calls: the ones in flight get a turn. */
    for (size_t b = 0; b < ex->ovl_next; b++)
        if (ex->ovl_state[b] == CZ_OVL_REDUCING) {
            bucket_plane bp = plane_of(ex, &plan->buckets[b]);
            bp.plane->ops->progress(bp.plane, ex->ovl_rs[b]);
        }
    return CZ_OK;
}

/* Waits for every reduce-scatter posted, in posting order; with `scale`, each bucket's range is
 * then averaged into the gradients as reduce_scatter does. All are waited for even after a
 * failure (the first reported), so that nothing stays in flight. */
static int ovl_wait_reduced(cz_executor *ex, bool scale, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    float *G = ex->staged ? ex->stage_grads : ex->flat_grads;
    float inv = 1.0f / (float)ex->dp; /* reduce_scatter's factor, for the same bits */
    int rc = CZ_OK;
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        cz_error tmp;
        if (ex->ovl_state[b] != CZ_OVL_REDUCING)
            continue;
        bucket_plane bp = plane_of(ex, bk);
        int brc = bp.plane->ops->wait(bp.plane, ex->ovl_rs[b], rc != CZ_OK ? &tmp : err);
        ex->ovl_state[b] = CZ_OVL_IDLE;
        rc = rc != CZ_OK ? rc : brc;
        if (rc != CZ_OK || !scale)
            continue;
        int64_t lo = bk->ranges[2 * bp.me], n = bk->ranges[2 * bp.me + 1] - lo;
        ex->compute.ops->scale(&ex->compute, G + bp.base + lo, ex->ovl_recv + ex->ovl_recv_off[b],
                               n, inv);
    }
    return rc;
}

/* The first call of a bucket-wise step: what is left of the last one completed, the binding
 * checked (agreed across ranks at the first step, as cz_executor_step does), the tables set up. */
static int ovl_begin(cz_executor *ex, const char *what, cz_error *err)
{
    int rc;
    if ((rc = ovl_settle(ex, what, err)) != CZ_OK || (rc = check_bound(ex, err)) != CZ_OK ||
        (rc = ovl_setup(ex, err)) != CZ_OK)
        return rc;
    for (size_t b = 0; b < ex->plan->nbuckets; b++)
        ex->ovl_state[b] = CZ_OVL_IDLE;
    ex->ovl_next = 0;
    ex->ovl_active = true;
    ex->ovl_t0 = cz__exec_now();
    return CZ_OK;
}

/* A bucket index the job handed in: one of the plan's, in this rank's buffer. */
static int ovl_check_bucket(const cz_executor *ex, const char *what, size_t b, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    if (b >= plan->nbuckets)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: bucket %zu does not exist (the plan has %zu buckets; "
                             "cz_executor_bucket_count)",
                             what, b, plan->nbuckets);
    if (!cz__exec_holds_bucket(ex, &plan->buckets[b]))
        return cz__error_set(err, CZ_EINVALID,
                             "%s: bucket %zu is not in this rank's buffer (it is of pipeline "
                             "stage %d%s; cz_executor_bucket_held)",
                             what, b, plan->buckets[b].stage,
                             plan->buckets[b].expert ? ", another EP rank's experts" : "");
    if (ex->async_active)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: the step started by cz_executor_step_async was not waited for",
                             what);
    return CZ_OK;
}

size_t cz_executor_bucket_count(const cz_executor *ex)
{
    return ex ? ex->plan->nbuckets : 0;
}

int cz_executor_bucket_held(const cz_executor *ex, size_t bucket)
{
    return ex && bucket < ex->plan->nbuckets &&
           cz__exec_holds_bucket(ex, &ex->plan->buckets[bucket]);
}

int64_t cz_executor_param_bucket(const cz_executor *ex, size_t i)
{
    return ex && i < ex->plan->nparams ? ex->plan->params[i].bucket : -1;
}

int cz_executor_bucket_ready(cz_executor *ex, size_t bucket, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "bucket_ready: executor is NULL");
    int rc = ovl_check_bucket(ex, "bucket_ready", bucket, err);
    if (rc != CZ_OK || (!ex->ovl_active && (rc = ovl_begin(ex, "bucket_ready", err)) != CZ_OK))
        return rc;
    if (ex->ovl_state[bucket] != CZ_OVL_IDLE)
        return cz__error_set(err, CZ_EINVALID,
                             "bucket_ready: bucket %zu was already declared ready in step %lld "
                             "(each bucket once per step, then cz_executor_step_finish)",
                             bucket, (long long)(ex->steps + 1));
    /* Ordered after the job's writes to the bucket (its backward), as a step is. */
    ex->compute.ops->step_begin(&ex->compute);
    if (ex->staged) {
        bool params = ex->dtype == CZ_DTYPE_FP32 || !ex->master_loaded;
        for (int k = ex->ovl_pstart[bucket]; k < ex->ovl_pstart[bucket + 1]; k++)
            stage_in_param(ex, (size_t)ex->ovl_pidx[k], params);
    }
    ex->ovl_state[bucket] = CZ_OVL_DECLARED;
    cz__comm_phase("bucket-wise step: gradient reduce-scatters posted", ex->steps + 1);
    rc = ovl_post(ex, false, err);
    ex->compute.ops->step_end(&ex->compute);
    return rc;
}

/* Ends a bucket-wise step with nothing updated: every rank posts the reduce-scatters it has not
 * (in the same order, their data unused) and waits for all of them, so that no collective is
 * left half-matched. */
static int ovl_drain(cz_executor *ex, cz_error *err)
{
    int rc = ovl_post(ex, true, err);
    cz_error tmp;
    int wrc = ovl_wait_reduced(ex, false, rc != CZ_OK ? &tmp : err);
    return rc != CZ_OK ? rc : wrc;
}

/* step_finish between the backend's step_begin and step_end. */
static int ovl_finish(cz_executor *ex, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    int64_t step = ex->steps + 1;
    cz_exec_timings t = {0};
    double t0 = cz__exec_now(), t1;
    /* Every bucket declared on every rank? Agreed before any wait, so that a rank missing one
     * cannot leave the others waiting for a reduce-scatter it never posted: then every rank
     * posts the ones it has not (their data unused), waits for all, and updates nothing. */
    int64_t v[2] = {INT64_MAX, INT64_MAX};
    for (size_t b = 0; b < plan->nbuckets && v[0] == INT64_MAX; b++)
        if (cz__exec_holds_bucket(ex, &plan->buckets[b]) && ex->ovl_state[b] == CZ_OVL_IDLE) {
            v[0] = (int64_t)b;
            v[1] = ex->ctrl.rank;
        }
    cz__comm_phase("bucket-wise step: checking that every rank declared every bucket", step);
    int rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, v, 2, err);
    if (rc)
        return rc;
    if (v[0] != INT64_MAX) {
        if ((rc = ovl_drain(ex, err)) != CZ_OK)
            return rc;
        return cz__error_set(err, CZ_EINVALID,
                             "step %lld: bucket %lld was not declared ready "
                             "(cz_executor_bucket_ready) before cz_executor_step_finish on rank "
                             "%lld (the lowest such bucket and rank); no parameter was changed",
                             (long long)step, (long long)v[0], (long long)v[1]);
    }
    /* Every bucket staged: the bf16 master copy is loaded. */
    ex->master_loaded = true;
    float *P = ex->staged ? ex->stage_params : ex->flat_params;
    float *G = ex->staged ? ex->stage_grads : ex->flat_grads;
    cz__comm_phase("bucket-wise step: waiting for the gradient reduce-scatters", step);
    if ((rc = ovl_wait_reduced(ex, true, err)) != CZ_OK ||
        (rc = update_all(ex, P, G, t0, &t, err)) != CZ_OK)
        return rc;
    t1 = cz__exec_now();

    /* The all-gathers read the parameters once every update is applied; posted in forward
     * order (the first layers' bucket, the highest index, first: the next forward's first
     * need), each completed by bucket_wait or the next step. */
    ex->compute.ops->event_record(&ex->compute, ex->ev_params);
    cz__comm_phase("bucket-wise step: parameter all-gathers posted", step);
    int most = ex->dp > ex->edp ? ex->dp : ex->edp;
    size_t counts[most];
    for (size_t b = plan->nbuckets; b-- > 0;) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        if (!cz__exec_holds_bucket(ex, bk))
            continue;
        bucket_plane bp = plane_of(ex, bk);
        bucket_counts(bk, &bp, counts);
        if ((rc = bp.plane->ops->iall_gatherv(bp.plane, P + bp.base + bk->ranges[0], counts,
                                              CZ_DTYPE_FP32, ex->ev_params, ex->ovl_ag[b], err)) !=
            CZ_OK)
            return rc;
        ex->ovl_state[b] = CZ_OVL_GATHERING;
        ex->ovl_gathering = true;
    }
    t.all_gather = cz__exec_now() - t1;
    t.total = t.reduce_scatter + t.elementwise + t.matrix + t.all_gather;
    ex->steps++;
    cz__comm_phase("after the step", ex->steps);
    t.steps = ex->steps;
    ex->last = t;
    return CZ_OK;
}

int cz_executor_step_finish(cz_executor *ex, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "step_finish: executor is NULL");
    if (ex->async_active)
        return cz__error_set(err, CZ_EINVALID,
                             "step_finish: the step started by cz_executor_step_async was not "
                             "waited for");
    int rc;
    /* A rank that declared no bucket still joins the agreement (every bucket of it missing). */
    if (!ex->ovl_active && (rc = ovl_begin(ex, "step_finish", err)) != CZ_OK)
        return rc;
    ex->compute.ops->step_begin(&ex->compute);
    rc = ovl_finish(ex, err);
    ex->compute.ops->step_end(&ex->compute);
    ex->ovl_active = false;
    return rc;
}

int cz_executor_step_cancel(cz_executor *ex, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "step_cancel: executor is NULL");
    if (!ex->ovl_active)
        return CZ_OK;
    ex->compute.ops->step_begin(&ex->compute);
    cz__comm_phase("bucket-wise step: cancelled, completing its reduce-scatters", ex->steps + 1);
    int rc = ovl_drain(ex, err);
    ex->compute.ops->step_end(&ex->compute);
    ex->ovl_active = false;
    return rc;
}

int cz_executor_bucket_wait(cz_executor *ex, size_t bucket, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "bucket_wait: executor is NULL");
    int rc = ovl_check_bucket(ex, "bucket_wait", bucket, err);
    /* Nothing outstanding for it: its parameters are already the job's to read. */
    if (rc != CZ_OK || !ex->ovl_ready || ex->ovl_state[bucket] != CZ_OVL_GATHERING)
        return rc;
    ex->compute.ops->step_begin(&ex->compute);
    rc = ovl_gather_done(ex, bucket, err);
    ex->compute.ops->step_end(&ex->compute);
    return rc;
}
