/* The micro-group pipeline over the TP group (docs/EXECUTOR.md, "One step", item 4).
 *
 * For group g: ONE fused all-to-all sends every task's local gradient shard to the task's host
 * slot; the host reassembles each full gradient, runs Muon (its momentum is full size and lives
 * only there); ONE fused all-to-all sends every TP rank its shard of each update; every TP rank
 * applies weight decay and the update to its shard. The gather of g+1 is posted before the
 * compute of g and the scatter of g stays in flight during the compute of g+1 (two buffer sets).
 *
 * Under `sc` every TP rank all-gathers the shards of every task of the group and computes every
 * update itself; nothing is scattered.
 *
 * Replicated matrices (tp_dim null) are whole on every TP rank: the host uses its own copy of
 * the gradient (nothing gathered) and sends the whole update to every TP rank.
 *
 * Buffer layouts (elements, tasks always in the group's order):
 *   gather send:  per destination slot s, my shards of the non-replicated tasks hosted by s;
 *   gather recv:  per source TP rank r, r's shards of the non-replicated tasks I host;
 *   scatter send: per destination TP rank r, r's shard of the update of every task I host;
 *   scatter recv: per source slot s, my shards of the updates of the tasks s hosts. */
#include "exec_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct pgroup {
    const cz_plan_group *g;
    int *gsc, *gsd, *grc, *grd; /* gather: send/recv counts and displacements, tp each */
    int *ssc, *ssd, *src, *srd; /* scatter */
    int nhosted;
    int64_t hosted_full; /* sum of full numel of the tasks I host */
    int64_t recv_block;  /* gather recv elements per source rank */
} pgroup;

struct cz_pipeline {
    int ngroups;
    pgroup *groups;
    int64_t gsend_n, grecv_n, ssend_n, srecv_n, full_n;
    int max_hosted;
    float *gsend[2], *grecv[2], *ssend[2], *srecv[2];
    float *full_g, *full_u;
    const cz_plan_param **hp;
    const float **hin;
    float **hout;
    cz_comm_req *greq[2], *sreq[2];
};

static bool replicated(const cz_plan_param *p)
{
    return p->tp_dim < 0;
}

static int64_t full_numel(const cz_plan_param *p)
{
    return p->shape[0] * (p->ndim == 1 ? 1 : p->shape[1]);
}

static bool hosts(const cz_executor *ex, const cz_plan_group *g, int t)
{
    return ex->sc || g->task_slot[t] == ex->tp_rank;
}

static int to_int(int64_t v, const char *what, cz_error *err, int *out)
{
    if (v > INT_MAX)
        return cz_error_set(err, CZ_EUNSUPPORTED,
                            "a micro-group's %s holds %lld elements; MPI counts are limited to %d "
                            "(plan with a smaller capacity)",
                            what, (long long)v, INT_MAX);
    *out = (int)v;
    return CZ_OK;
}

static int layout_group(cz_executor *ex, pgroup *pg, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    const cz_plan_group *g = pg->g;
    int tp = ex->tp, rc = CZ_OK;
    int64_t all_nonrep = 0, hosted_nonrep = 0, hosted_all = 0;
    int *arrs[8];
    for (int k = 0; k < 8; k++) {
        arrs[k] = calloc((size_t)tp, sizeof(int));
        if (!arrs[k]) {
            for (int j = 0; j < k; j++)
                free(arrs[j]);
            return cz_error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
        }
    }
    pg->gsc = arrs[0], pg->gsd = arrs[1], pg->grc = arrs[2], pg->grd = arrs[3];
    pg->ssc = arrs[4], pg->ssd = arrs[5], pg->src = arrs[6], pg->srd = arrs[7];
    int64_t per_slot_nonrep[tp], per_slot_all[tp];
    memset(per_slot_nonrep, 0, sizeof per_slot_nonrep);
    memset(per_slot_all, 0, sizeof per_slot_all);
    for (int t = 0; t < g->ntasks; t++) {
        const cz_plan_param *p = &plan->params[g->task_param[t]];
        int s = ex->sc ? 0 : g->task_slot[t];
        per_slot_all[s] += p->numel;
        if (!replicated(p)) {
            per_slot_nonrep[s] += p->numel;
            all_nonrep += p->numel;
        }
        if (hosts(ex, g, t)) {
            pg->nhosted++;
            pg->hosted_full += full_numel(p);
            hosted_all += p->numel;
            if (!replicated(p))
                hosted_nonrep += p->numel;
        }
    }
    pg->recv_block = ex->sc ? all_nonrep : hosted_nonrep;
    int64_t gs = 0, ss = 0;
    for (int r = 0; r < tp && !rc; r++) {
        rc = to_int(ex->sc ? 0 : per_slot_nonrep[r], "gather", err, &pg->gsc[r]);
        if (!rc)
            rc = to_int(gs, "gather", err, &pg->gsd[r]);
        gs += pg->gsc[r];
        if (!rc)
            rc = to_int(pg->recv_block, "gather", err, &pg->grc[r]);
        if (!rc)
            rc = to_int(pg->recv_block * r, "gather", err, &pg->grd[r]);
        if (!rc)
            rc = to_int(ex->sc ? 0 : hosted_all, "scatter", err, &pg->ssc[r]);
        if (!rc)
            rc = to_int(ex->sc ? 0 : hosted_all * r, "scatter", err, &pg->ssd[r]);
        if (!rc)
            rc = to_int(ex->sc ? 0 : per_slot_all[r], "scatter", err, &pg->src[r]);
        if (!rc)
            rc = to_int(ss, "scatter", err, &pg->srd[r]);
        ss += pg->src[r];
    }
    if (rc)
        return rc;
    struct cz_pipeline *pp = ex->pipe;
    int64_t gsend = ex->sc ? all_nonrep : gs;
    if (gsend > pp->gsend_n)
        pp->gsend_n = gsend;
    if (pg->recv_block * tp > pp->grecv_n)
        pp->grecv_n = pg->recv_block * tp;
    /* Under sc the scatter-send buffer serves as scratch for my shard of each update. */
    int64_t ssend = ex->sc ? all_nonrep + hosted_all : hosted_all * tp;
    if (ssend > pp->ssend_n)
        pp->ssend_n = ssend;
    if (ss > pp->srecv_n)
        pp->srecv_n = ss;
    if (pg->hosted_full > pp->full_n)
        pp->full_n = pg->hosted_full;
    if (pg->nhosted > pp->max_hosted)
        pp->max_hosted = pg->nhosted;
    return CZ_OK;
}

int cz_exec_pipeline_init(cz_executor *ex, cz_error *err)
{
    const cz_rank_schedule *rs = ex->schedule;
    struct cz_pipeline *pp = calloc(1, sizeof *pp);
    if (!pp)
        return cz_error_set(err, CZ_ENOMEM, "out of memory for the pipeline");
    ex->pipe = pp;
    pp->ngroups = rs->ngroups;
    pp->groups = calloc(rs->ngroups > 0 ? (size_t)rs->ngroups : 1, sizeof *pp->groups);
    if (!pp->groups)
        return cz_error_set(err, CZ_ENOMEM, "out of memory for the pipeline");
    for (int g = 0; g < rs->ngroups; g++) {
        pp->groups[g].g = &rs->groups[g];
        int rc = layout_group(ex, &pp->groups[g], err);
        if (rc)
            return rc;
        for (int t = 0; t < rs->groups[g].ntasks; t++) {
            if (!hosts(ex, &rs->groups[g], t))
                continue;
            int id = rs->groups[g].task_param[t];
            ex->momentum[id] = calloc((size_t)full_numel(&ex->plan->params[id]), sizeof(float));
            if (!ex->momentum[id])
                return cz_error_set(err, CZ_ENOMEM, "out of memory for the momentum of '%s'",
                                    ex->plan->params[id].name);
        }
    }
    for (int k = 0; k < 2; k++) {
        pp->gsend[k] = malloc((size_t)(pp->gsend_n + 1) * sizeof(float));
        pp->grecv[k] = malloc((size_t)(pp->grecv_n + 1) * sizeof(float));
        pp->ssend[k] = malloc((size_t)(pp->ssend_n + 1) * sizeof(float));
        pp->srecv[k] = malloc((size_t)(pp->srecv_n + 1) * sizeof(float));
        if (!pp->gsend[k] || !pp->grecv[k] || !pp->ssend[k] || !pp->srecv[k])
            return cz_error_set(err, CZ_ENOMEM, "out of memory for the pipeline buffers");
    }
    pp->full_g = malloc((size_t)(pp->full_n + 1) * sizeof(float));
    pp->full_u = malloc((size_t)(pp->full_n + 1) * sizeof(float));
    size_t nh = (size_t)(pp->max_hosted + 1);
    pp->hp = calloc(nh, sizeof *pp->hp);
    pp->hin = calloc(nh, sizeof *pp->hin);
    pp->hout = calloc(nh, sizeof *pp->hout);
    if (!pp->full_g || !pp->full_u || !pp->hp || !pp->hin || !pp->hout)
        return cz_error_set(err, CZ_ENOMEM, "out of memory for the host buffers (%lld elements)",
                            (long long)pp->full_n);
    return CZ_OK;
}

void cz_exec_pipeline_free(cz_executor *ex)
{
    struct cz_pipeline *pp = ex->pipe;
    if (!pp)
        return;
    for (int g = 0; pp->groups && g < pp->ngroups; g++) {
        pgroup *pg = &pp->groups[g];
        free(pg->gsc), free(pg->gsd), free(pg->grc), free(pg->grd);
        free(pg->ssc), free(pg->ssd), free(pg->src), free(pg->srd);
    }
    free(pp->groups);
    for (int k = 0; k < 2; k++) {
        free(pp->gsend[k]), free(pp->grecv[k]), free(pp->ssend[k]), free(pp->srecv[k]);
    }
    free(pp->full_g);
    free(pp->full_u);
    free(pp->hp);
    free(pp->hin);
    free(pp->hout);
    free(pp);
    ex->pipe = NULL;
}

/* Packs my gradient shards of group g and posts its gather. */
static int post_gather(cz_executor *ex, int gi, const float *G, cz_error *err)
{
    struct cz_pipeline *pp = ex->pipe;
    pgroup *pg = &pp->groups[gi];
    const cz_plan_group *g = pg->g;
    float *send = pp->gsend[gi % 2];
    int64_t pos = 0;
    int nslots = ex->sc ? 1 : ex->tp;
    for (int s = 0; s < nslots; s++)
        for (int t = 0; t < g->ntasks; t++) {
            const cz_plan_param *p = &ex->plan->params[g->task_param[t]];
            if (replicated(p) || (!ex->sc && g->task_slot[t] != s))
                continue;
            memcpy(send + pos, G + cz_exec_param_offset(ex, p->id),
                   (size_t)p->numel * sizeof(float));
            pos += p->numel;
        }
    if (ex->sc)
        return ex->tp_comm.ops->iallgather(&ex->tp_comm, send, (int)pos, pp->grecv[gi % 2],
                                           &pp->greq[gi % 2], err);
    return ex->tp_comm.ops->ialltoallv(&ex->tp_comm, send, pg->gsc, pg->gsd, pp->grecv[gi % 2],
                                       pg->grc, pg->grd, &pp->greq[gi % 2], err);
}

/* Keeps the next group's gather and the previous group's scatter moving while computing. */
typedef struct progress_ctx {
    cz_executor *ex;
    int gi;
} progress_ctx;

static void progress_inflight(void *arg)
{
    progress_ctx *pc = arg;
    struct cz_pipeline *pp = pc->ex->pipe;
    cz_comm *tc = &pc->ex->tp_comm;
    tc->ops->progress(tc, pp->greq[(pc->gi + 1) % 2]);
    tc->ops->progress(tc, pp->sreq[(pc->gi + 1) % 2]);
}

/* Host side of group g: reassemble, Muon, and either post the scatter or (sc) apply. */
static int compute_group(cz_executor *ex, int gi, float *P, const float *G, cz_error *err)
{
    struct cz_pipeline *pp = ex->pipe;
    pgroup *pg = &pp->groups[gi];
    const cz_plan_group *g = pg->g;
    const float *recv = pp->grecv[gi % 2];
    int tp = ex->tp, n = 0;
    int64_t fpos = 0, rpos = 0;
    progress_ctx pc = {ex, gi};
    for (int t = 0; t < g->ntasks; t++) {
        if (!hosts(ex, g, t))
            continue;
        const cz_plan_param *p = &ex->plan->params[g->task_param[t]];
        float *fg = pp->full_g + fpos;
        int64_t fn = full_numel(p);
        if (replicated(p)) {
            memcpy(fg, G + cz_exec_param_offset(ex, p->id), (size_t)fn * sizeof(float));
        } else {
            for (int r = 0; r < tp; r++)
                cz_shard_unpack(p, tp, r, recv + pg->recv_block * r + rpos, fg);
            rpos += p->numel;
        }
        /* The optimizer input overwrites the gradient in place. */
        cz_muon_momentum(&ex->muon, fg, ex->momentum[p->id], fg, fn);
        progress_inflight(&pc);
        pp->hp[n] = p;
        pp->hin[n] = fg;
        pp->hout[n] = pp->full_u + fpos;
        n++;
        fpos += fn;
    }
    int rc = cz_muon_orthogonalize_ex(&ex->compute, &ex->muon, pp->hp, pp->hin, pp->hout, n,
                                      progress_inflight, &pc, err);
    if (rc)
        return rc;
    float *send = pp->ssend[gi % 2];
    if (ex->sc) {
        for (int k = 0; k < n; k++) {
            const cz_plan_param *p = pp->hp[k];
            const float *u = pp->hout[k];
            if (!replicated(p)) {
                cz_shard_pack(p, tp, ex->tp_rank, pp->hout[k], send);
                u = send;
            }
            cz_apply_update(P + cz_exec_param_offset(ex, p->id), u, p->numel, ex->muon.lr,
                            ex->muon.weight_decay);
        }
        return CZ_OK;
    }
    int64_t spos = 0;
    for (int r = 0; r < tp; r++)
        for (int k = 0; k < n; k++) {
            const cz_plan_param *p = pp->hp[k];
            if (replicated(p))
                memcpy(send + spos, pp->hout[k], (size_t)p->numel * sizeof(float));
            else
                cz_shard_pack(p, tp, r, pp->hout[k], send + spos);
            spos += p->numel;
        }
    return ex->tp_comm.ops->ialltoallv(&ex->tp_comm, send, pg->ssc, pg->ssd, pp->srecv[gi % 2],
                                       pg->src, pg->srd, &pp->sreq[gi % 2], err);
}

/* Waits for the scatter of group g and applies my update shards. */
static int finish_group(cz_executor *ex, int gi, float *P, cz_error *err)
{
    struct cz_pipeline *pp = ex->pipe;
    pgroup *pg = &pp->groups[gi];
    const cz_plan_group *g = pg->g;
    int rc = ex->tp_comm.ops->wait(&ex->tp_comm, pp->sreq[gi % 2], err);
    pp->sreq[gi % 2] = NULL;
    if (rc)
        return rc;
    const float *recv = pp->srecv[gi % 2];
    for (int s = 0; s < ex->tp; s++) {
        int64_t pos = pg->srd[s];
        for (int t = 0; t < g->ntasks; t++) {
            if (g->task_slot[t] != s)
                continue;
            const cz_plan_param *p = &ex->plan->params[g->task_param[t]];
            cz_apply_update(P + cz_exec_param_offset(ex, p->id), recv + pos, p->numel, ex->muon.lr,
                            ex->muon.weight_decay);
            pos += p->numel;
        }
    }
    return CZ_OK;
}

int cz_exec_matrix_pipeline(cz_executor *ex, float *P, const float *G, cz_error *err)
{
    struct cz_pipeline *pp = ex->pipe;
    int ng = pp->ngroups, rc = CZ_OK;
    if (ng == 0)
        return CZ_OK;
    rc = post_gather(ex, 0, G, err);
    for (int gi = 0; gi < ng && !rc; gi++) {
        if (gi + 1 < ng)
            rc = post_gather(ex, gi + 1, G, err);
        if (!rc)
            rc = ex->tp_comm.ops->wait(&ex->tp_comm, pp->greq[gi % 2], err);
        pp->greq[gi % 2] = NULL;
        if (!rc)
            rc = compute_group(ex, gi, P, G, err);
        if (!rc && !ex->sc && gi > 0)
            rc = finish_group(ex, gi - 1, P, err);
    }
    if (!rc && !ex->sc)
        rc = finish_group(ex, ng - 1, P, err);
    if (rc) {
        /* Leave no request behind: a later step or free must not see a stale one. */
        cz_error tmp;
        for (int k = 0; k < 2; k++) {
            ex->tp_comm.ops->wait(&ex->tp_comm, pp->greq[k], &tmp);
            ex->tp_comm.ops->wait(&ex->tp_comm, pp->sreq[k], &tmp);
            pp->greq[k] = pp->sreq[k] = NULL;
        }
    }
    return rc;
}
