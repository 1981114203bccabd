/* The bucket-wise step (docs/EXECUTOR.md, "The bucket-wise step"): cz_executor_bucket_ready
 * stages one bucket and posts its reduce-scatter; step_finish waits for them all, runs the
 * plain step's update sequence (cz__step_update_all), and posts the all-gathers, which
 * bucket_wait completes one by one. The same collectives and ops on the same data as the plain
 * step (each reduce-scatter into a range of its own instead of the shared scratch), hence the
 * same bits. With early updates on, bucket_ready also runs each micro-group whose buckets are
 * all posted (docs/EXECUTOR.md, "Early updates"). */
#include "alloc.h"
#include "binding.h"
#include "bucket_step.h"
#include "canzona_exec.h"
#include "clock.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "step_phases.h"
#include "wire.h"

#include <stdint.h>
#include <stdio.h>

/* A bucket's state in the step: not declared (or gathered), declared but not posted (a lower
 * one is not declared yet), reduce-scatter posted, reduce-scatter waited for (its range
 * averaged into the gradients), all-gather posted. */
enum {
    CZ_OVL_IDLE = 0,
    CZ_OVL_DECLARED = 1,
    CZ_OVL_REDUCING = 2,
    CZ_OVL_REDUCED = 3,
    CZ_OVL_GATHERING = 4
};

/* The step's state, allocated at its first use (cz_executor_bucket_ready, step_finish,
 * set_early_updates; a job that never calls them pays nothing), its tables at the first step
 * (`tables`): per bucket of the plan, its state in the step (CZ_OVL_*), its reduce-scatter's
 * and all-gather's requests (on its bucket's plane), and where its reduce-scatter lands in
 * `recv` (backend memory: this rank's range of every bucket it holds). pidx lists the held
 * parameter ids bucket by bucket (pstart[b] .. pstart[b + 1]), for staging one bucket.
 * Reduce-scatters are posted in bucket order (next: the next to post), the one order every
 * rank follows. */
struct cz_bucket_step {
    bool tables, active, gathering;
    int *state;
    cz_comm_req **rs, **ag;
    float *recv;
    int64_t *recv_off;
    int *pidx, *pstart;
    size_t next;
    double t0; /* when the step's first bucket was declared, for the timings */
    /* Early updates (cz_executor_set_early_updates): bucket_ready runs each micro-group whose
     * buckets are all posted; nearly counts this step's, early_s their time. */
    bool early;
    int nearly;
    double early_s;
    /* And the all-gathers they post: bucket b's once every bucket up to ag_key[b] is posted
     * (then every rank of its plane has updated its part of b: the highest bucket of any
     * micro-group, of any rank, with a parameter in b), in the order of ag_list (the held
     * buckets by key, then forward order), the same on every rank; ag_next: how many of them
     * are posted; elem_done[b]: b's elementwise updates done. */
    int64_t *ag_key;
    int *ag_list;
    size_t nag, ag_next;
    bool *elem_done;
    char note[192]; /* unchanged()'s text */
};

static int ovl_settle(cz_executor *ex, const char *what, cz_error *err);

/* ex->bws, made at the first call that needs it. */
static cz_bucket_step *bws_of(cz_executor *ex, cz_error *err)
{
    if (!ex->bws && (ex->bws = cz__exec_calloc(1, sizeof *ex->bws)) != NULL)
        ex->bws_settle = ovl_settle;
    if (!ex->bws)
        cz__error_set(err, CZ_ENOMEM, "bucket-wise step: out of memory for its state");
    return ex->bws;
}

static int ovl_nomem(cz_error *err)
{
    return cz__error_set(err, CZ_ENOMEM, "bucket-wise step: out of memory for its tables");
}

/* Raises the keys for every group of n schedules (cz_gather_key_raise); tb: room for the
 * largest group's tasks. */
static void gather_keys_of(cz_executor *ex, const cz_rank_schedule *rs, size_t n, int64_t *tb)
{
    const cz_plan *plan = ex->plan;
    for (size_t s = 0; s < n; s++)
        for (int g = 0; g < rs[s].ngroups; g++) {
            const cz_plan_group *gr = &rs[s].groups[g];
            for (int t = 0; t < gr->ntasks; t++)
                tb[t] = plan->params[gr->task_param[t]].bucket;
            cz_gather_key_raise(ex->bws->ag_key, tb, gr->ntasks);
        }
}

static int most_tasks(const cz_rank_schedule *rs, size_t n)
{
    int m = 0;
    for (size_t s = 0; s < n; s++)
        for (int g = 0; g < rs[s].ngroups; g++)
            m = rs[s].groups[g].ntasks > m ? rs[s].groups[g].ntasks : m;
    return m;
}

/* Early updates' all-gather keys and order (executor_impl.h), from the plan alone, so that every
 * rank finds the same: every schedule's groups count, a superset of the bucket's plane's. A
 * slice of a split folder holds only its rank's schedules: its buckets carry the keys the whole
 * plan gives (canzona plan --split), in its own numbering, which keeps their order. */
static int gather_keys(cz_executor *ex, cz_error *err)
{
    cz_bucket_step *bs = ex->bws;
    const cz_plan *plan = ex->plan;
    size_t nb = plan->nbuckets;
    for (size_t b = 0; b < nb; b++)
        bs->ag_key[b] = plan->slice.on ? plan->buckets[b].gather_key : (int64_t)b;
    if (!plan->slice.on) {
        int m = most_tasks(plan->schedules, plan->nschedules),
            me = most_tasks(plan->expert_schedules, plan->nexpert_schedules);
        int64_t *tb = cz__exec_calloc((size_t)(m > me ? m : me) + 1, sizeof *tb);
        if (!tb)
            return ovl_nomem(err);
        gather_keys_of(ex, plan->schedules, plan->nschedules, tb);
        gather_keys_of(ex, plan->expert_schedules, plan->nexpert_schedules, tb);
        cz__exec_free(tb);
    }
    /* The held buckets by key, ties in forward order (the highest index first): an insertion
     * sort, run once. */
    bs->nag = 0;
    for (size_t b = nb; b-- > 0;) {
        if (!cz__exec_holds_bucket(ex, &plan->buckets[b]))
            continue;
        size_t at = bs->nag++;
        for (; at > 0 && bs->ag_key[bs->ag_list[at - 1]] > bs->ag_key[b]; at--)
            bs->ag_list[at] = bs->ag_list[at - 1];
        bs->ag_list[at] = (int)b;
    }
    return CZ_OK;
}

/* The tables, requests and reduce-scatter ranges of the bucket-wise step, at its first use only
 * (a job that never calls it pays nothing): a later step allocates nothing. */
static int ovl_setup(cz_executor *ex, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    size_t nb = plan->nbuckets, np = plan->nparams;
    cz_bucket_step *bs = bws_of(ex, err);
    int *cur = NULL;
    int rc = CZ_OK;
    if (!bs)
        return CZ_ENOMEM;
    if (bs->tables)
        return CZ_OK;
    bs->state = cz__exec_calloc(nb + 1, sizeof *bs->state);
    bs->rs = cz__exec_calloc(nb + 1, sizeof *bs->rs);
    bs->ag = cz__exec_calloc(nb + 1, sizeof *bs->ag);
    bs->recv_off = cz__exec_calloc(nb + 1, sizeof *bs->recv_off);
    bs->pstart = cz__exec_calloc(nb + 1, sizeof *bs->pstart);
    bs->pidx = cz__exec_calloc(np + 1, sizeof *bs->pidx);
    bs->ag_key = cz__exec_calloc(nb + 1, sizeof *bs->ag_key);
    bs->ag_list = cz__exec_calloc(nb + 1, sizeof *bs->ag_list);
    bs->elem_done = cz__exec_calloc(nb + 1, sizeof *bs->elem_done);
    cur = cz__exec_calloc(nb + 1, sizeof *cur);
    if (!bs->state || !bs->rs || !bs->ag || !bs->recv_off || !bs->pstart || !bs->pidx ||
        !bs->ag_key || !bs->ag_list || !bs->elem_done || !cur) {
        rc = ovl_nomem(err);
        goto done;
    }
    int64_t total = 0;
    for (size_t b = 0; b < nb; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        if (!cz__exec_holds_bucket(ex, bk))
            continue;
        cz_bucket_plane bp = cz__wire_bucket_plane(ex, bk);
        /* A bucket not on the wire (a plane of one rank) is reduced in place: no range. */
        bs->recv_off[b] = total;
        if (cz__wire_exchanged(&bp))
            total += bk->ranges[2 * bp.me + 1] - bk->ranges[2 * bp.me];
        bs->rs[b] = bp.plane->ops->req_create(bp.plane);
        bs->ag[b] = bp.plane->ops->req_create(bp.plane);
        if (!bs->rs[b] || !bs->ag[b]) {
            rc = ovl_nomem(err);
            goto done;
        }
    }
    bs->recv = cz__compute_alloc(&ex->compute, CZ_EXEC_MEM_OTHER,
                                 (size_t)(total > 0 ? total : 1) * sizeof(float));
    if (!bs->recv) {
        rc = cz__error_set(err, CZ_ENOMEM,
                           "bucket-wise step: out of memory for its %lld-element reduce-scatter "
                           "ranges",
                           (long long)total);
        goto done;
    }
    /* The held parameters bucket by bucket, ids ascending within one (a counting sort). */
    for (size_t i = 0; i < np; i++)
        if (cz__exec_holds(ex, &plan->params[i]))
            bs->pstart[plan->params[i].bucket + 1]++;
    for (size_t b = 0; b < nb; b++) {
        bs->pstart[b + 1] += bs->pstart[b];
        cur[b] = bs->pstart[b];
    }
    for (size_t i = 0; i < np; i++)
        if (cz__exec_holds(ex, &plan->params[i]))
            bs->pidx[cur[plan->params[i].bucket]++] = (int)i;
    if ((rc = gather_keys(ex, err)) != CZ_OK)
        goto done;
    bs->tables = true;
done:
    /* A failed setup is retried by the next call: cz_executor_free releases what it left. */
    cz__exec_free(cur);
    return rc;
}

/* Completes bucket b's all-gather and, staged, writes its parameters back to the job's. */
static int ovl_gather_done(cz_executor *ex, size_t b, cz_error *err)
{
    cz_bucket_step *bs = ex->bws;
    cz_bucket_plane bp = cz__wire_bucket_plane(ex, &ex->plan->buckets[b]);
    int rc = bp.plane->ops->wait(bp.plane, bs->ag[b], err);
    bs->state[b] = CZ_OVL_IDLE;
    if (rc == CZ_OK)
        cz__wire_gathered(ex, b, cz__binding_params(&ex->bind));
    if (rc == CZ_OK && ex->bind.staged)
        for (int k = bs->pstart[b]; k < bs->pstart[b + 1]; k++)
            cz__binding_stage_out_param(ex, (size_t)bs->pidx[k]);
    bs->gathering = false;
    for (size_t k = 0; k < ex->plan->nbuckets; k++)
        if (bs->state[k] == CZ_OVL_GATHERING)
            bs->gathering = true;
    return rc;
}

/* Completes every all-gather still outstanding (the next step's first call, save and load). */
static int ovl_settle(cz_executor *ex, const char *what, cz_error *err)
{
    cz_bucket_step *bs = ex->bws;
    if (!bs)
        return CZ_OK;
    if (bs->active)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: a bucket-wise step is in progress (buckets were declared ready): "
                             "finish it with cz_executor_step_finish first",
                             what);
    if (!bs->gathering)
        return CZ_OK;
    int rc = CZ_OK;
    ex->compute.ops->step_begin(&ex->compute);
    /* In forward order (the order step_finish posts them; early updates post them in another,
     * which the waits need not follow); after a failure the others still complete, the first
     * failure reported. */
    for (size_t b = ex->plan->nbuckets; b-- > 0;) {
        cz_error tmp;
        if (bs->state[b] != CZ_OVL_GATHERING)
            continue;
        int brc = ovl_gather_done(ex, b, rc != CZ_OK ? &tmp : err);
        rc = rc != CZ_OK ? rc : brc;
    }
    ex->compute.ops->step_end(&ex->compute);
    return rc;
}

static int ovl_early_due(cz_executor *ex, bool update, cz_error *err);

/* Posts, in bucket order, every declared bucket whose predecessors are all posted (every one
 * with `all`, the missing ones too): the order is the plan's on every rank, whatever order the
 * job declares them in, as MPI and NCCL match collectives by their order on a communicator.
 * With early updates, what falls due after each post runs before the next post
 * (ovl_early_due), so that each plane's collectives (its reduce-scatters and the all-gathers
 * early updates post among them) are posted in one sequence fixed by the plan on every rank:
 * a rank that posts several buckets at once (it declared a higher one first) posts the
 * all-gathers due between them where every other rank does, not after them all. */
static int ovl_post(cz_executor *ex, bool all, bool update, cz_error *err)
{
    cz_bucket_step *bs = ex->bws;
    const cz_plan *plan = ex->plan;
    float *G = cz__binding_grads(&ex->bind);
    bool recorded = false;
    int rc;
    for (;;) {
        if (bs->early && (rc = ovl_early_due(ex, update, err)) != CZ_OK)
            return rc;
        while (bs->next < plan->nbuckets && !cz__exec_holds_bucket(ex, &plan->buckets[bs->next]))
            bs->next++;
        size_t b = bs->next;
        if (b >= plan->nbuckets || (bs->state[b] != CZ_OVL_DECLARED && !all))
            break;
        /* The reduce-scatter reads the gradients once their staging is done. */
        if (!recorded)
            ex->compute.ops->event_record(&ex->compute, ex->ev_grads);
        recorded = true;
        ex->phase = (cz_phase){"bucket-wise step: gradient reduce-scatters posted", ex->steps + 1};
        rc = cz__wire_reduce_scatter(ex, b, G, bs->recv + bs->recv_off[b], bs->rs[b], err);
        if (rc)
            return rc;
        bs->state[b] = CZ_OVL_REDUCING;
        bs->next++;
    }
    /* MPI progresses a collective only inside MPI calls: the ones in flight get a turn. */
    for (size_t b = 0; b < bs->next; b++)
        if (bs->state[b] == CZ_OVL_REDUCING) {
            cz_bucket_plane bp = cz__wire_bucket_plane(ex, &plan->buckets[b]);
            bp.plane->ops->progress(bp.plane, bs->rs[b]);
        }
    return CZ_OK;
}

/* Waits for every reduce-scatter posted of the buckets up to `upto`, in posting order; with
 * `scale`, each bucket's range is then averaged into the gradients as reduce_scatter does. All
 * are waited for even after a failure (the first reported), so that nothing stays in flight. */
static int ovl_wait_reduced(cz_executor *ex, bool scale, size_t upto, cz_error *err)
{
    cz_bucket_step *bs = ex->bws;
    const cz_plan *plan = ex->plan;
    float *G = cz__binding_grads(&ex->bind);
    int rc = CZ_OK;
    for (size_t b = 0; b < plan->nbuckets && b <= upto; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        cz_error tmp;
        if (bs->state[b] != CZ_OVL_REDUCING)
            continue;
        cz_bucket_plane bp = cz__wire_bucket_plane(ex, bk);
        int brc = bp.plane->ops->wait(bp.plane, bs->rs[b], rc != CZ_OK ? &tmp : err);
        bs->state[b] = CZ_OVL_REDUCED;
        rc = rc != CZ_OK ? rc : brc;
        if (rc != CZ_OK || !scale)
            continue;
        cz__wire_reduced(ex, b, G, bs->recv + bs->recv_off[b]);
    }
    return rc;
}

/* The first call of a bucket-wise step: what is left of the last one completed, the binding
 * checked (agreed across ranks at the first step, as cz_executor_step does), the tables set up. */
static int ovl_begin(cz_executor *ex, const char *what, cz_error *err)
{
    int rc;
    /* Alike on every rank (the plan's layout): nothing is posted. */
    if (cz_plan_is_fsdp(ex->plan))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "%s: the plan's layout is fsdp, which has no buckets (FSDP2 "
                             "reduce-scatters and all-gathers its own): use cz_executor_step",
                             what);
    /* The all-gathers' order comes from every rank's schedule (gather_keys), which a rank of a
     * split plan does not hold: its folder records it, or (written by an earlier canzona) the
     * step is refused before anything is posted, alike on every rank of that folder. */
    for (size_t b = 0; ex->plan->slice.on && b < ex->plan->nbuckets; b++)
        if (ex->plan->buckets[b].gather_key < 0)
            return cz__error_set(err, CZ_EUNSUPPORTED,
                                 "%s: the split plan folder records no all-gather order for "
                                 "its buckets (\"gather_key\"; written by an earlier canzona "
                                 "plan --split); write it again, create the executor from the "
                                 "plan file (DIR/plan.json), or use cz_executor_step",
                                 what);
    if (!bws_of(ex, err))
        return CZ_ENOMEM;
    /* A poisoned state is refused before anything is posted: every rank refuses alike when
     * it was poisoned by an agreement (a cancel, a refusal), and early updates from such a
     * state would move it further from any step. */
    if ((rc = cz__exec_poison_refuse(ex, what, err)) != CZ_OK ||
        (rc = ovl_settle(ex, what, err)) != CZ_OK || (rc = cz__binding_check(ex, err)) != CZ_OK ||
        (rc = ovl_setup(ex, err)) != CZ_OK)
        return rc;
    cz_bucket_step *bs = ex->bws;
    for (size_t b = 0; b < ex->plan->nbuckets; b++)
        bs->state[b] = CZ_OVL_IDLE;
    bs->next = 0;
    bs->nearly = 0;
    bs->early_s = 0.0;
    bs->ag_next = 0;
    for (size_t b = 0; b < ex->plan->nbuckets; b++)
        bs->elem_done[b] = false;
    cz__exec_early_reset(ex);
    bs->active = true;
    bs->t0 = cz__exec_now();
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
    if (ex->async.active)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: the step started by cz_executor_step_async was not waited for",
                             what);
    return CZ_OK;
}

/* The end of a message refusing a step: "no parameter was changed" (a string constant), or
 * during a bucket-wise step after early updates, what they changed (in bs->note). */
static const char *unchanged(cz_executor *ex)
{
    cz_bucket_step *bs = ex->bws;
    int buckets = 0;
    for (size_t b = 0; bs->active && b < ex->plan->nbuckets; b++)
        buckets += bs->elem_done[b];
    if (!bs->active || (bs->nearly == 0 && buckets == 0))
        return "no parameter was changed";
    snprintf(bs->note, sizeof bs->note,
             "early updates had changed %d micro-groups and the elementwise parameters of %d "
             "buckets of this rank (their parameters and optimizer state moved one step: "
             "restore a checkpoint)",
             bs->nearly, buckets);
    return bs->note;
}

/* Whether early updates of the open step moved anything on this rank. */
static bool ovl_moved(cz_executor *ex)
{
    return unchanged(ex) == ex->bws->note;
}

/* A refused or cancelled bucket-wise step, once the ranks agreed on mover (the lowest rank
 * whose early updates had moved its state; INT64_MAX: none): with one, every rank's state
 * matches no step. */
static void ovl_poison_if_moved(cz_executor *ex, int64_t mover, const char *how)
{
    if (mover != INT64_MAX)
        cz__exec_poison(ex,
                        "step %lld was %s after early updates had moved rank %lld's parameters "
                        "and optimizer state",
                        (long long)(ex->steps + 1), how, (long long)mover);
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

/* Posts bucket b's parameter all-gather (ev_params recorded after its updates). */
static int ovl_post_gather(cz_executor *ex, size_t b, float *P, cz_error *err)
{
    cz_bucket_step *bs = ex->bws;
    int rc = cz__wire_all_gather(ex, b, P, bs->ag[b], err);
    if (rc != CZ_OK)
        return rc;
    bs->state[b] = CZ_OVL_GATHERING;
    bs->gathering = true;
    return CZ_OK;
}

/* Early updates at the current point of the step (bs->next buckets posted): every micro-group
 * not yet run whose buckets are all posted, in readiness order, each once the reduce-scatters
 * of its buckets are waited for; then the all-gathers of the buckets every rank has updated by
 * now (the rule of ag_key), each after its elementwise updates. Which groups and all-gathers
 * fall due depends only on how many buckets are posted, the same sequence on every rank, so
 * their exchanges and collectives match whatever order the ranks declare their buckets in.
 * Without `update` (a step ended with nothing more updated: ovl_drain), the all-gathers only,
 * each rank sending its own ranges as they are: what the early updates changed, or nothing. */
static int ovl_early_due(cz_executor *ex, bool update, cz_error *err)
{
    cz_bucket_step *bs = ex->bws;
    float *P = cz__binding_params(&ex->bind);
    float *G = cz__binding_grads(&ex->bind);
    double t0 = cz__exec_now();
    int rc = CZ_OK;
    ex->phase = (cz_phase){"bucket-wise step: early micro-group updates", ex->steps + 1};
    for (int64_t k; update && rc == CZ_OK && (k = cz__exec_early_next(ex)) < (int64_t)bs->next;)
        if ((rc = ovl_wait_reduced(ex, true, (size_t)k, err)) == CZ_OK)
            rc = cz__exec_early_run(ex, P, G, k, &bs->nearly, err);
    while (rc == CZ_OK && bs->ag_next < bs->nag) {
        size_t b = (size_t)bs->ag_list[bs->ag_next];
        if (bs->ag_key[b] >= (int64_t)bs->next)
            break;
        /* Its reduce-scatter is waited for first either way: the all-gather takes the
         * bucket's state over. */
        if ((rc = ovl_wait_reduced(ex, update, b, err)) != CZ_OK ||
            (update &&
             (rc = cz__step_elementwise_bucket(ex, P, G, b, bs->elem_done, err)) != CZ_OK))
            break;
        ex->compute.ops->event_record(&ex->compute, ex->ev_params);
        rc = ovl_post_gather(ex, b, P, err);
        bs->ag_next++;
    }
    bs->early_s += cz__exec_now() - t0;
    return rc;
}

int cz_executor_bucket_ready(cz_executor *ex, size_t bucket, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "bucket_ready: executor is NULL");
    int rc = ovl_check_bucket(ex, "bucket_ready", bucket, err);
    if (rc != CZ_OK ||
        ((!ex->bws || !ex->bws->active) && (rc = ovl_begin(ex, "bucket_ready", err)) != CZ_OK))
        return rc;
    cz_bucket_step *bs = ex->bws;
    if (bs->state[bucket] != CZ_OVL_IDLE)
        return cz__error_set(err, CZ_EINVALID,
                             "bucket_ready: bucket %zu was already declared ready in step %lld "
                             "(each bucket once per step, then cz_executor_step_finish)",
                             bucket, (long long)(ex->steps + 1));
    /* Ordered after the job's writes to the bucket (its backward), as a step is. */
    ex->compute.ops->step_begin(&ex->compute);
    if (ex->bind.staged) {
        bool params = ex->bind.dtype == CZ_DTYPE_FP32 || !ex->bind.master_loaded;
        for (int k = bs->pstart[bucket]; k < bs->pstart[bucket + 1]; k++)
            cz__binding_stage_in_param(ex, (size_t)bs->pidx[k], params);
    }
    bs->state[bucket] = CZ_OVL_DECLARED;
    ex->phase = (cz_phase){"bucket-wise step: gradient reduce-scatters posted", ex->steps + 1};
    /* With early updates, the micro-groups and all-gathers that fall due run inside (on a GPU
     * stream of the executor's, ordered after the job's work so far by step_begin): the job's
     * later work waits for the staging and the posts only, as step_end orders it. */
    rc = ovl_post(ex, false, true, err);
    ex->compute.ops->step_end(&ex->compute);
    /* A failure among early updates may leave a micro-group half applied. */
    if (rc != CZ_OK && bs->early && ovl_moved(ex))
        cz__exec_poison(ex, "step %lld failed during its early updates",
                        (long long)(ex->steps + 1));
    return rc;
}

/* Ends a bucket-wise step with nothing more updated: every rank posts the reduce-scatters it has
 * not (in the same order, their data unused) and waits for all of them, so that no collective
 * is left half-matched. Early updates may have posted some all-gathers, not as many on every
 * rank: every rank posts the rest where the one sequence has them (ovl_post), the next call
 * completing them. */
static int ovl_drain(cz_executor *ex, cz_error *err)
{
    int rc = ovl_post(ex, true, false, err);
    cz_error tmp;
    int wrc = ovl_wait_reduced(ex, false, SIZE_MAX, rc != CZ_OK ? &tmp : err);
    return rc != CZ_OK ? rc : wrc;
}

/* step_finish's all-gathers: with early updates those they did not post, in their order; else
 * every bucket's in forward order. */
static int ovl_post_gathers(cz_executor *ex, float *P, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    cz_bucket_step *bs = ex->bws;
    int rc = CZ_OK;
    for (; bs->early && bs->ag_next < bs->nag; bs->ag_next++)
        if ((rc = ovl_post_gather(ex, (size_t)bs->ag_list[bs->ag_next], P, err)) != CZ_OK)
            return rc;
    if (bs->early)
        return CZ_OK;
    for (size_t b = plan->nbuckets; rc == CZ_OK && b-- > 0;)
        if (cz__exec_holds_bucket(ex, &plan->buckets[b]))
            rc = ovl_post_gather(ex, b, P, err);
    return rc;
}

/* step_finish between the backend's step_begin and step_end. */
static int ovl_finish(cz_executor *ex, cz_error *err)
{
    cz_bucket_step *bs = ex->bws;
    const cz_plan *plan = ex->plan;
    int64_t step = ex->steps + 1;
    cz_exec_timings t = {0};
    double t0 = cz__exec_now(), t1;
    /* Every bucket declared on every rank? Agreed before any wait, so that a rank missing one
     * cannot leave the others waiting for a reduce-scatter it never posted: then every rank
     * posts the ones it has not (their data unused), waits for all, and updates nothing. */
    /* With it, the lowest rank whose early updates moved its state, for a refusal. */
    bool moved = ovl_moved(ex);
    int64_t v[3] = {INT64_MAX, INT64_MAX, moved ? ex->ctrl.rank : INT64_MAX};
    for (size_t b = 0; b < plan->nbuckets && v[0] == INT64_MAX; b++)
        if (cz__exec_holds_bucket(ex, &plan->buckets[b]) && bs->state[b] == CZ_OVL_IDLE) {
            v[0] = (int64_t)b;
            v[1] = ex->ctrl.rank;
        }
    ex->phase =
        (cz_phase){"bucket-wise step: checking that every rank declared every bucket", step};
    int rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, v, 3, err);
    if (rc)
        return rc;
    if (v[0] != INT64_MAX) {
        ovl_poison_if_moved(ex, v[2], "refused");
        if ((rc = ovl_drain(ex, err)) != CZ_OK)
            return rc;
        return cz__error_set(err, CZ_EINVALID,
                             "step %lld: bucket %lld was not declared ready "
                             "(cz_executor_bucket_ready) before cz_executor_step_finish on rank "
                             "%lld (the lowest such bucket and rank); %s%s",
                             (long long)step, (long long)v[0], (long long)v[1], unchanged(ex),
                             v[2] != INT64_MAX && !moved
                                 ? " here, but early updates had changed another rank's: restore "
                                   "a checkpoint"
                                 : "");
    }
    /* Every bucket staged: the bf16 master copy is loaded. */
    ex->bind.master_loaded = true;
    float *P = cz__binding_params(&ex->bind);
    float *G = cz__binding_grads(&ex->bind);
    ex->phase = (cz_phase){"bucket-wise step: waiting for the gradient reduce-scatters", step};
    /* After early updates, the sequence runs what they left and its refusals say what they
     * changed (every early group has run by now). */
    cz_step_early early = {bs->elem_done, unchanged(ex), moved};
    if ((rc = ovl_wait_reduced(ex, true, SIZE_MAX, err)) != CZ_OK ||
        (rc = cz__step_update_all(ex, P, G, bs->early ? &early : NULL, t0, &t, err)) != CZ_OK) {
        if (moved)
            cz__exec_poison(ex, "step %lld failed after its early updates", (long long)step);
        return rc;
    }
    t1 = cz__exec_now();

    /* The all-gathers read the parameters once every update is applied; posted in forward
     * order (the first layers' bucket, the highest index, first: the next forward's first
     * need), each completed by bucket_wait or the next step; with early updates, those they
     * did not post, in their order. */
    ex->compute.ops->event_record(&ex->compute, ex->ev_params);
    ex->phase = (cz_phase){"bucket-wise step: parameter all-gathers posted", step};
    if ((rc = ovl_post_gathers(ex, P, err)) != CZ_OK) {
        cz__exec_poison(ex, "step %lld failed in its parameter all-gathers, after its updates",
                        (long long)step);
        return rc;
    }
    t.all_gather = cz__exec_now() - t1;
    t.matrix += bs->early_s; /* the early updates' share, spent in bucket_ready */
    cz__step_count(ex, &t);
    return CZ_OK;
}

int cz_executor_step_finish(cz_executor *ex, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "step_finish: executor is NULL");
    if (ex->async.active)
        return cz__error_set(err, CZ_EINVALID,
                             "step_finish: the step started by cz_executor_step_async was not "
                             "waited for");
    int rc;
    /* A rank that declared no bucket still joins the agreement (every bucket of it missing). */
    if ((!ex->bws || !ex->bws->active) && (rc = ovl_begin(ex, "step_finish", err)) != CZ_OK)
        return rc;
    cz_bucket_step *bs = ex->bws;
    ex->compute.ops->step_begin(&ex->compute);
    rc = ovl_finish(ex, err);
    ex->compute.ops->step_end(&ex->compute);
    bs->active = false;
    return rc;
}

int cz_executor_step_cancel(cz_executor *ex, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "step_cancel: executor is NULL");
    cz_bucket_step *bs = ex->bws;
    int rc = CZ_OK;
    bool moved = false;
    if (bs && bs->active) {
        ex->compute.ops->step_begin(&ex->compute);
        ex->phase = (cz_phase){"bucket-wise step: cancelled, completing its reduce-scatters",
                               ex->steps + 1};
        rc = ovl_drain(ex, err);
        ex->compute.ops->step_end(&ex->compute);
        moved = ovl_moved(ex);
        bs->active = false;
    }
    /* Every rank, with an open step or not, learns the lowest rank whose early updates moved
     * its state: then no rank's state is that of a step, and every rank says so. */
    int64_t v = moved ? ex->ctrl.rank : INT64_MAX;
    cz_error tmp;
    ex->phase = (cz_phase){"bucket-wise step: cancelled, agreeing on what moved", ex->steps + 1};
    int crc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, &v, 1, rc != CZ_OK ? &tmp : err);
    if (crc != CZ_OK) /* what the others hold is unknown: this rank's own */
        v = moved ? ex->ctrl.rank : INT64_MAX;
    ovl_poison_if_moved(ex, v, "cancelled");
    if (rc != CZ_OK || crc != CZ_OK)
        return rc != CZ_OK ? rc : crc;
    if (moved)
        return cz__error_set(err, CZ_EINVALID, "step_cancel: step %lld was cancelled, but %s",
                             (long long)(ex->steps + 1), bs->note);
    if (v != INT64_MAX)
        return cz__error_set(err, CZ_EINVALID,
                             "step_cancel: step %lld was cancelled, but early updates had changed "
                             "the parameters and optimizer state of rank %lld (its message says "
                             "which): restore a checkpoint",
                             (long long)(ex->steps + 1), (long long)v);
    return CZ_OK;
}

int cz_executor_bucket_wait(cz_executor *ex, size_t bucket, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "bucket_wait: executor is NULL");
    int rc = ovl_check_bucket(ex, "bucket_wait", bucket, err);
    /* Nothing outstanding for it: its parameters are already the job's to read. Inside an open
     * step (early updates post all-gathers there) they are the step's to complete: a wait here
     * would mark the bucket undeclared. */
    const cz_bucket_step *bs = ex->bws;
    if (rc != CZ_OK || !bs || !bs->tables || bs->active || bs->state[bucket] != CZ_OVL_GATHERING)
        return rc;
    ex->compute.ops->step_begin(&ex->compute);
    rc = ovl_gather_done(ex, bucket, err);
    ex->compute.ops->step_end(&ex->compute);
    return rc;
}

int cz_executor_early_groups(const cz_executor *ex)
{
    return ex && ex->bws ? ex->bws->nearly : 0;
}

bool cz__bucket_step_early(const cz_executor *ex)
{
    return ex->bws && ex->bws->early;
}

size_t cz__bucket_step_gathers_posted(const cz_executor *ex)
{
    return ex->bws ? ex->bws->ag_next : 0;
}

/* Why early updates cannot be on for this executor now (CZ_OK: they can). */
static int early_refusal(const cz_executor *ex, cz_error *err)
{
    if (cz_plan_is_fsdp(ex->plan))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "set_early_updates: the plan's layout is fsdp, which has no "
                             "buckets to update early from (the bucket-wise step does not apply)");
    if ((ex->bws && ex->bws->active) || ex->async.active)
        return cz__error_set(err, CZ_EINVALID,
                             "set_early_updates: a step is in progress (finish it first)");
    if (ex->cfg.check_finite)
        return cz__error_set(err, CZ_EINVALID,
                             "set_early_updates: the NaN/Inf check is on (check_finite = 1): it "
                             "refuses a step before any update, which early updates cannot "
                             "promise; create the executor with check_finite = 0 for them");
    if (ex->cfg.max_grad_norm > 0.0f)
        return cz__error_set(err, CZ_EINVALID,
                             "set_early_updates: clipping is on (max_grad_norm = %g): it scales "
                             "every gradient by the global norm, known only once every bucket "
                             "is reduced; set max_grad_norm to 0 for early updates",
                             (double)ex->cfg.max_grad_norm);
    if (ex->clip.qk)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "set_early_updates: QK-clip is set (cz_executor_set_qk_clip): it "
                             "scales rows after the step agreed on the maxima, which early "
                             "updates' all-gathers would leave before; clear it for them");
    if (ex->matrix_opt.ops->step_shards)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "set_early_updates: the %s optimizer updates every owned shard "
                             "before any micro-group (its weight decay into the momentum); early "
                             "updates are Muon's and SOAP's",
                             ex->matrix_opt.ops->name);
    return CZ_OK;
}

int cz_executor_set_early_updates(cz_executor *ex, int on, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "set_early_updates: executor is NULL");
    int rc = on ? early_refusal(ex, err) : CZ_OK;
    if (!on && ex->bws && ex->bws->active)
        rc = cz__error_set(err, CZ_EINVALID,
                           "set_early_updates: a bucket-wise step is in progress (finish it "
                           "first)");
    if (rc == CZ_OK && on && !bws_of(ex, err))
        rc = CZ_ENOMEM;
    /* Collective: the ranks of a TP group must run the same micro-groups at the same point. */
    int64_t v[3] = {on != 0, -(int64_t)(on != 0), rc != CZ_OK ? ex->ctrl.rank : INT64_MAX};
    cz_error tmp;
    int crc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, v, 3, rc != CZ_OK ? &tmp : err);
    if (rc != CZ_OK || crc != CZ_OK)
        return rc != CZ_OK ? rc : crc;
    if (v[2] != INT64_MAX)
        return cz__error_set(err, CZ_EINVALID,
                             "set_early_updates: rank %lld refused it (its message says why)",
                             (long long)v[2]);
    if (v[0] != -v[1])
        return cz__error_set(err, CZ_EMISMATCH,
                             "set_early_updates: the ranks passed different values (every rank "
                             "must pass the same)");
    if (ex->bws)
        ex->bws->early = on != 0;
    return CZ_OK;
}

/* Releases backend memory (NULL allowed). */
static void brelease(cz_executor *ex, void *p)
{
    if (p)
        ex->compute.ops->release(&ex->compute, p);
}

void cz__bucket_step_free(cz_executor *ex)
{
    cz_bucket_step *bs = ex->bws;
    if (!bs)
        return;
    /* First: a request still in flight (a bucket's collective never waited for) completes in
     * req_free (MPI waits for it, bounded; the other planes have nothing pending) before the
     * buffers it reads and writes are released. */
    for (size_t b = 0; bs->rs && bs->ag && b < ex->plan->nbuckets; b++) {
        cz_plane *pl = cz__wire_bucket_plane(ex, &ex->plan->buckets[b]).plane;
        if (pl->ops && bs->rs[b])
            pl->ops->req_free(pl, bs->rs[b]);
        if (pl->ops && bs->ag[b])
            pl->ops->req_free(pl, bs->ag[b]);
    }
    if (ex->compute.ops)
        brelease(ex, bs->recv);
    cz__exec_free(bs->state);
    cz__exec_free(bs->rs);
    cz__exec_free(bs->ag);
    cz__exec_free(bs->recv_off);
    cz__exec_free(bs->pidx);
    cz__exec_free(bs->pstart);
    cz__exec_free(bs->ag_key);
    cz__exec_free(bs->ag_list);
    cz__exec_free(bs->elem_done);
    cz__exec_free(bs);
    ex->bws = NULL;
    ex->bws_settle = NULL;
}
