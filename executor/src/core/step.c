/* One optimizer step (cz_executor_step, and its async form) and the phases it is made of,
 * which the bucket-wise step (bucket_step.c) shares through step_phases.h: reduce-scatter over
 * DP, the gradient statistics (norm, finiteness check, clipping), the elementwise optimizer
 * (AdamW on owned elementwise shards or their pieces in this rank's slice of a split layout's
 * elementwise buffer), the matrix micro-group pipeline over TP (pipeline.c), all-gather over DP.
 * Data is touched only through the compute ops; the one read-back of a step is the
 * per-parameter sums of squares of the owned gradients, after all reduce-scatters and before
 * anything is updated. The plain step depends on nothing of the bucket-wise one: the work a
 * bucket-wise step leaves in flight is completed through ex->bws_settle. */
#include "canzona_exec.h"
#include "alloc.h"
#include "binding.h"
#include "clock.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "qk_clip.h"
#include "step_phases.h"
#include "wire.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

void cz__exec_poison(cz_executor *ex, const char *why, ...)
{
    if (ex->poison.on)
        return; /* the first reason is the one to tell */
    va_list ap;
    va_start(ap, why);
    vsnprintf(ex->poison.why, sizeof ex->poison.why, why, ap);
    va_end(ap);
    ex->poison.on = true;
}

/* The refusal of a poisoned rank (mover: the lowest poisoned rank, when this one is not). */
static int poison_error(const cz_executor *ex, const char *what, int64_t mover, cz_error *err)
{
    if (ex->poison.on)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: the optimizer state matches no step (%s); restore a checkpoint "
                             "(cz_executor_load_state) first",
                             what, ex->poison.why);
    if (mover < 0)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: the optimizer state matches no step (that of another rank: its "
                             "message says why); restore a checkpoint (cz_executor_load_state) "
                             "first",
                             what);
    return cz__error_set(err, CZ_EINVALID,
                         "%s: the optimizer state matches no step (that of rank %lld: its message "
                         "says why); restore a checkpoint (cz_executor_load_state) first",
                         what, (long long)mover);
}

int cz__exec_poison_refuse(const cz_executor *ex, const char *what, cz_error *err)
{
    return ex->poison.on ? poison_error(ex, what, ex->ctrl.rank, err) : CZ_OK;
}

int cz__exec_poison_agree(cz_executor *ex, const char *what, cz_error *err)
{
    int64_t v = ex->poison.on ? ex->ctrl.rank : INT64_MAX;
    int rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, &v, 1, err);
    if (rc)
        return rc;
    return v == INT64_MAX ? CZ_OK : poison_error(ex, what, v, err);
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* The step's comparison of the rates and the clipping threshold across ranks, when any rank
 * changed them (changed: the number of ranks that did, summed with the gradient norm): every
 * rank returns CZ_EMISMATCH when they differ, its message ending with what early updates had
 * changed (early non-NULL). Early updates that moved any rank's state before the refusal leave
 * every rank's matching no step: the same reduction finds the lowest such rank. */
static int rates_agree(cz_executor *ex, double changed, const cz_step_early *early, cz_error *err)
{
    const char *unchanged = early ? early->unchanged : "no parameter was changed";
    if (!(changed > 0.0))
        return CZ_OK;
    /* The same hash on every rank exactly when every rank holds the same values (up to a
     * collision): its minimum and its negated minimum (the maximum) then agree. */
    uint64_t h = 14695981039346656037ULL;
    /* A rank of a split plan holds its part's parameters only, which differ between stages
     * and EP ranks: there the optimizers' own rates below are compared, not the table. */
    if (!ex->plan->slice.on)
        h = fnv(h, ex->rates.param, ex->plan->nparams * sizeof *ex->rates.param);
    h = fnv(h, &ex->cfg.max_grad_norm, sizeof ex->cfg.max_grad_norm);
    h = fnv(h, ex->rates.momentum, sizeof ex->rates.momentum);
    for (int k = 0; k < 2; k++) {
        cz_optim *o = k ? &ex->elem_opt : &ex->matrix_opt;
        cz_opt_rates r = o->ops->rates(o);
        h = fnv(h, &r, sizeof r);
    }
    int64_t v[3] = {(int64_t)(h >> 2), -(int64_t)(h >> 2),
                    early && early->moved ? ex->ctrl.rank : INT64_MAX};
    int rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, v, 3, err);
    if (rc)
        return rc;
    ex->rates.changed = false;
    if (v[0] == -v[1])
        return CZ_OK;
    long long step = (long long)(ex->steps + 1);
    if (v[2] != INT64_MAX)
        cz__exec_poison(ex,
                        "step %lld was refused after early updates had moved rank %lld's "
                        "parameters and optimizer state",
                        step, (long long)v[2]);
    return cz__error_set(err, CZ_EMISMATCH,
                         "step %lld: the ranks set different learning rates, weight decays, "
                         "momentum coefficients or clipping thresholds (every rank must set "
                         "the same before the same step); %s%s",
                         step, unchanged,
                         v[2] != INT64_MAX && !(early && early->moved)
                             ? " here, but early updates had changed another rank's: restore a "
                               "checkpoint"
                             : "");
}

/* The owned gradients' statistics, read back once per step (after all reduce-scatters,
 * before any update): the backend sums the squares of every owned shard into ex->own.stats. A sum
 * is non-finite exactly when its shard holds NaN/Inf, so the same pass is the finiteness
 * check (all ranks agree on the lowest such parameter id) and gives the global gradient norm
 * (the sums all-reduced; a tensor replicated over TP counted by TP rank 0 only). With
 * max_grad_norm set, a norm above it scales every owned gradient shard before the updates. */
static int grad_stats(cz_executor *ex, float *G, const cz_step_early *early, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    cz_compute *c = &ex->compute;
    for (int k = 0; k < ex->own.n; k++) {
        int i = ex->own.ids[k];
        c->ops->sumsq(c, G + ex->held.param_off[i] + ex->own.piece_lo[i], ex->own.piece_len[i],
                      &ex->own.stats[k]);
    }
    int rc = c->ops->download(c, ex->own.stats_host, ex->own.stats,
                              (size_t)ex->own.n * sizeof(double), err);
    if (rc)
        return rc;
    /* One control-plane reduction per step in the normal case: the norm's sum of squares, the
     * number of non-finite owned shards (every TP rank's, replicated ones included), the
     * number of ranks that changed their rates since the last comparison, the number whose
     * state matches no step (cz_exec_poison: refused here, before any update, so that a rank
     * poisoned alone does not leave the others in a collective) and the number that handed
     * QK-clip maxima (qk_clip.c). Only when the second is not zero does a second reduction
     * find the lowest such parameter, only when the third is not zero does one compare the
     * rates (rates.c), and only when the fifth is not zero are the maxima reduced: each before
     * any update. */
    double v[5] = {0.0, 0.0, ex->rates.changed ? 1.0 : 0.0, ex->poison.on ? 1.0 : 0.0,
                   cz__qk_clip_armed(ex) ? 1.0 : 0.0};
    for (int k = 0; k < ex->own.n; k++) {
        const cz_plan_param *p = &plan->params[ex->own.ids[k]];
        /* A tensor replicated over its TP (ETP for an expert) group counts once. */
        int r = ex->grid.experts && p->expert ? ex->grid.etp_rank : ex->grid.tp_rank;
        if (p->def.tp_dim >= 0 || r == 0)
            v[0] += ex->own.stats_host[k];
        v[1] += !isfinite(ex->own.stats_host[k]);
    }
    rc = ex->ctrl.ops->allreduce_sum_f64(&ex->ctrl, v, 5, err);
    if (rc)
        return rc;
    if (v[3] > 0.0)
        return poison_error(ex, "step", -1, err);
    if ((rc = rates_agree(ex, v[2], early, err)) != CZ_OK ||
        (rc = cz__qk_clip_agree(ex, v[4], err)) != CZ_OK)
        return rc;
    if (ex->cfg.check_finite && v[1] > 0.0) {
        int64_t bad = INT64_MAX;
        for (int k = 0; k < ex->own.n && bad == INT64_MAX; k++)
            if (!isfinite(ex->own.stats_host[k]))
                bad = ex->own.ids[k];
        rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, &bad, 1, err);
        if (rc)
            return rc;
        if (bad != INT64_MAX && cz_plan_is_fsdp(plan))
            return cz__error_set(err, CZ_EINVALID,
                                 "step %lld: the gradient of '%s' holds NaN or Inf (in some DP "
                                 "rank's FSDP2 shard of it); no parameter was changed",
                                 (long long)(ex->steps + 1), plan->params[bad].def.name);
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
    ex->clip.grad_norm = sqrt(sq);
    float max = ex->cfg.max_grad_norm;
    if (max > 0.0f && ex->clip.grad_norm > (double)max) {
        float f = (float)((double)max / (ex->clip.grad_norm + 1e-6));
        for (int k = 0; k < ex->own.n; k++) {
            int i = ex->own.ids[k];
            float *g = G + ex->held.param_off[i] + ex->own.piece_lo[i];
            c->ops->scale(c, g, g, ex->own.piece_len[i], f);
        }
    }
    return CZ_OK;
}

void cz__step_count(cz_executor *ex, cz_exec_timings *t)
{
    t->total = t->reduce_scatter + t->elementwise + t->matrix + t->all_gather;
    ex->steps++;
    ex->phase = (cz_phase){"after the step", ex->steps};
    t->steps = ex->steps;
    ex->last = *t;
}

int cz__step_elementwise_bucket(cz_executor *ex, float *P, const float *G, size_t b, bool *done,
                                cz_error *err)
{
    const cz_plan_bucket *bk = &ex->plan->buckets[b];
    if (done[b])
        return CZ_OK;
    done[b] = true;
    cz_bucket_plane bp = cz__wire_bucket_plane(ex, bk);
    int64_t lo = bp.base + bk->ranges[2 * bp.me], hi = bp.base + bk->ranges[2 * bp.me + 1];
    return ex->elem_opt.ops->step_shards(&ex->elem_opt, P, G, ex->steps + 1, lo, hi, err);
}

/* The elementwise optimizer's step on the pieces this rank owns; after early updates, on those
 * of the buckets they have not updated (elem_done). */
static int elementwise(cz_executor *ex, float *P, const float *G, bool *elem_done, cz_error *err)
{
    if (!elem_done)
        return ex->elem_opt.ops->step_shards(&ex->elem_opt, P, G, ex->steps + 1, 0, INT64_MAX, err);
    int rc = CZ_OK;
    for (int k = 0; rc == CZ_OK && k < ex->held.nbuckets; k++)
        rc = cz__step_elementwise_bucket(ex, P, G, (size_t)ex->held.buckets[k], elem_done, err);
    return rc;
}

/* The updates of a step once its statistics passed: the elementwise optimizer, the matrix
 * pipeline (their times into *t, from t1). */
static int updates(cz_executor *ex, float *P, const float *G, const cz_step_early *early, double t1,
                   cz_exec_timings *t, cz_error *err)
{
    int rc = elementwise(ex, P, G, early ? early->elem_done : NULL, err);
    if (rc)
        return rc;
    double t0 = cz__exec_now();
    t->elementwise = t0 - t1;

    ex->phase = (cz_phase){"micro-group pipeline of the matrix updates", ex->steps + 1};
    if ((rc = cz__exec_matrix_pipeline(ex, P, G, early != NULL, err)) != CZ_OK)
        return rc;
    t->matrix = cz__exec_now() - t0;
    return CZ_OK;
}

/* What follows the reduce-scatters in a step, up to every parameter updated: the statistics
 * (norm, finiteness, clipping), the elementwise optimizer, the matrix pipeline; the one sequence
 * of cz_executor_step and cz_executor_step_finish. *t gets the phases' times, the reduce-scatter's
 * counted from t0. */
int cz__step_update_all(cz_executor *ex, float *P, float *G, const cz_step_early *early, double t0,
                        cz_exec_timings *t, cz_error *err)
{
    int64_t step = ex->steps + 1;
    ex->phase = (cz_phase){"gradient norm and finiteness check", step};
    int rc = grad_stats(ex, G, early, err);
    if (rc)
        return rc;
    double t1 = cz__exec_now();
    t->reduce_scatter = t1 - t0;
    /* From here on a failure leaves some parameters and state moved, others not. */
    if ((rc = updates(ex, P, G, early, t1, t, err)) != CZ_OK) {
        cz__exec_poison(ex, "step %lld failed after its first update", (long long)step);
        return rc;
    }
    /* QK-clip scales the updated rows, before any all-gather reads them. */
    cz__qk_clip_apply(ex, P);
    return CZ_OK;
}

/* Each held bucket's gradients reduce-scattered (in the wire's dtype, wire.c) through the
 * shared scratch and averaged into this rank's range. */
static int reduce_scatter(cz_executor *ex, float *G, cz_error *err)
{
    for (int k = 0; k < ex->held.nbuckets; k++) {
        size_t b = (size_t)ex->held.buckets[k];
        int rc = cz__wire_reduce_scatter(ex, b, G, ex->scratch, NULL, err);
        if (rc)
            return rc;
        cz__wire_reduced(ex, b, G, ex->scratch);
    }
    return CZ_OK;
}

static int all_gather(cz_executor *ex, float *P, cz_error *err)
{
    for (int k = 0; k < ex->held.nbuckets; k++) {
        size_t b = (size_t)ex->held.buckets[k];
        int rc = cz__wire_all_gather(ex, b, P, NULL, err);
        if (rc)
            return rc;
        cz__wire_gathered(ex, b, P);
    }
    return CZ_OK;
}

/* The step between the backend's step_begin and step_end. */
static int run_step(cz_executor *ex, cz_error *err)
{
    int rc;
    cz_exec_timings t = {0};
    double t0 = cz__exec_now(), t1;
    float *P = ex->bind.flat_params, *G = ex->bind.flat_grads;
    int64_t step = ex->steps + 1;
    if (ex->bind.staged) {
        cz__binding_stage_in(ex);
        P = ex->bind.stage_params;
        G = ex->bind.stage_grads;
    }
    /* A fully sharded plan's gradients come reduce-scattered and its parameters are
     * all-gathered by the job's FSDP2: the step is the updates alone (their exchanges are the
     * micro-groups' all-to-alls), and its reduce-scatter and all-gather phases take no time. */
    bool fsdp = cz_plan_is_fsdp(ex->plan);
    /* The reduce-scatter reads the gradients once every op before (staging) is done. */
    ex->compute.ops->event_record(&ex->compute, ex->ev_grads);
    ex->phase = (cz_phase){"gradient reduce-scatter", step};
    rc = fsdp ? CZ_OK : reduce_scatter(ex, G, err);
    if (rc != CZ_OK || (rc = cz__step_update_all(ex, P, G, NULL, t0, &t, err)) != CZ_OK)
        return rc;
    t1 = cz__exec_now();

    /* The all-gather reads the parameters once every update (both optimizers') is applied. */
    ex->compute.ops->event_record(&ex->compute, ex->ev_params);
    ex->phase = (cz_phase){"parameter all-gather", step};
    if (!fsdp && (rc = all_gather(ex, P, err)) != CZ_OK) {
        cz__exec_poison(ex, "step %lld failed in its parameter all-gather, after its updates",
                        (long long)step);
        return rc;
    }
    if (ex->bind.staged)
        cz__binding_stage_out(ex);
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
    /* What a bucket-wise step left in flight completes first (its all-gathers). */
    if ((ex->bws_settle && (rc = ex->bws_settle(ex, "step", err)) != CZ_OK) ||
        (rc = cz__binding_check(ex, err)) != CZ_OK)
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
    if (ex->async.active)
        return cz__error_set(err, CZ_EINVALID,
                             "step_async: the previous step was not waited for (cz_executor_wait)");
    /* The cpu stream is the calling thread: the step runs here, its result waits for wait. */
    ex->async.rc = cz_executor_step(ex, &ex->async.err);
    ex->async.active = true;
    return CZ_OK;
}

int cz_executor_wait(cz_executor *ex, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "wait: executor is NULL");
    if (!ex->async.active)
        return cz__error_set(err, CZ_EINVALID,
                             "wait: no step was started (cz_executor_step_async)");
    ex->async.active = false;
    /* A GPU backend may still run the step's tail on its stream: wait for all of it (on the
     * CPU's stream, the calling thread, this returns at once). */
    if (!ex->async.rc) {
        ex->compute.ops->event_record(&ex->compute, ex->ev_params);
        ex->async.rc = ex->compute.ops->event_sync(&ex->compute, ex->ev_params, &ex->async.err);
    }
    if (ex->async.rc && err)
        *err = ex->async.err;
    return ex->async.rc;
}
