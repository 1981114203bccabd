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
 *   scatter recv: per source slot s, my shards of the updates of the tasks s hosts.
 *
 * Every layout is fixed by the plan, so everything is laid out once at create time: the
 * all-to-all counts, the copy-run index maps that pack and unpack the buffers (replayed by the
 * backend's copy_runs), the Newton-Schulz batches and the list of shard updates to apply.
 * A step only replays them; it allocates nothing and touches data only through the compute
 * ops.
 *
 * Dependencies, not host waits, order the overlap: packing a gather (scatter) buffer records
 * a compute event that the posted exchange waits for before reading it; the compute of group
 * g waits for the gather's request (plane wait) before unpacking; applying g's updates waits
 * for g's scatter request. gather(g+1) is posted before compute(g) and scatter(g-1) completes
 * after it, so the three are in flight together. On the CPU backend the stream is the calling
 * thread (events complete when recorded) and the MPI plane resolves a wait on the host. */
#include "exec_internal.h"

#include <string.h>

/* One shard update: p[p_off ..] = p*(1 - lr*wd) - lr*u[u_off ..] over n elements. */
typedef struct apply_ref {
    int64_t p_off, u_off, n;
} apply_ref;

typedef struct pgroup {
    const cz_plan_group *g;
    /* The all-to-all layouts of the group's two TP exchanges, one value per TP peer, in
     * elements, named <exchange>_<direction>_<what>: the gather brings the shards of a task to
     * its host, the scatter returns the host's update to every shard; "counts" is how much
     * goes to (send) or comes from (recv) that peer, "displs" where it starts in the packed
     * send or receive buffer (MPI_Alltoallv's sendcounts/sdispls/recvcounts/rdispls). */
    int64_t *gather_send_counts, *gather_send_displs, *gather_recv_counts, *gather_recv_displs;
    int64_t *scatter_send_counts, *scatter_send_displs, *scatter_recv_counts, *scatter_recv_displs;
    int nhosted;
    int64_t hosted_full;   /* sum of full numel of the tasks I host */
    int64_t recv_block;    /* gather recv elements per source rank */
    int64_t gather_n;      /* elements I send in the gather (per destination under sc) */
    cz_runs *gather_pack;  /* G -> gather send */
    cz_runs *unpack_recv;  /* gather recv -> full gradients */
    cz_runs *unpack_local; /* G -> full gradients of the replicated matrices I host */
    cz_runs *scatter_pack; /* full updates -> scatter send (sc: my shard of each) */
    int *hosted;           /* param ids of the tasks I host, in group order */
    int64_t *hosted_off;   /* their offsets in full_g and full_u */
    const cz_plan_param **hp;
    const float **hin;
    float **hout;
    cz_muon_prep muon;
    apply_ref *apply; /* my shard updates, from scatter recv (sc: scatter send) */
    int napply;
} pgroup;

struct cz_pipeline {
    int ngroups;
    pgroup *groups;
    int64_t gather_send_len, gather_recv_len, scatter_send_len, scatter_recv_len, full_n, batch_n,
        work_n;
    float *gather_send[2], *gather_recv[2], *scatter_send[2], *scatter_recv[2];
    float *full_g, *full_u, *batch, *work;
    int64_t sh_work_n; /* Shampoo: work of the largest tile; two doubles of norms */
    float *sh_work;
    double *sh_stats;
    cz_comm_req *gather_req[2], *scatter_req[2];
    /* Recorded after a gather (scatter) buffer is packed; its send waits for it. */
    cz_event *gather_packed[2], *scatter_packed[2];
};

static bool replicated(const cz_plan_param *p)
{
    return p->def.tp_dim < 0;
}

static int64_t full_numel(const cz_plan_param *p)
{
    return p->def.shape[0] * (p->def.ndim == 1 ? 1 : p->def.shape[1]);
}

static bool hosts(const cz_executor *ex, const cz_plan_group *g, int t)
{
    return ex->sc || g->task_slot[t] == ex->tp_rank;
}

static int layout_counts(cz_executor *ex, pgroup *pg, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    const cz_plan_group *g = pg->g;
    int tp = ex->tp;
    int64_t all_nonrep = 0, hosted_nonrep = 0, hosted_all = 0;
    int64_t *arrs[8];
    for (int k = 0; k < 8; k++) {
        arrs[k] = cz_exec_calloc((size_t)tp, sizeof(int64_t));
        if (!arrs[k]) {
            for (int j = 0; j < k; j++)
                cz_exec_free(arrs[j]);
            return cz_error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
        }
    }
    pg->gather_send_counts = arrs[0], pg->gather_send_displs = arrs[1];
    pg->gather_recv_counts = arrs[2], pg->gather_recv_displs = arrs[3];
    pg->scatter_send_counts = arrs[4], pg->scatter_send_displs = arrs[5];
    pg->scatter_recv_counts = arrs[6], pg->scatter_recv_displs = arrs[7];
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
    for (int r = 0; r < tp; r++) {
        pg->gather_send_counts[r] = ex->sc ? 0 : per_slot_nonrep[r];
        pg->gather_send_displs[r] = gs;
        gs += pg->gather_send_counts[r];
        pg->gather_recv_counts[r] = pg->recv_block;
        pg->gather_recv_displs[r] = pg->recv_block * r;
        pg->scatter_send_counts[r] = ex->sc ? 0 : hosted_all;
        pg->scatter_send_displs[r] = ex->sc ? 0 : hosted_all * r;
        pg->scatter_recv_counts[r] = ex->sc ? 0 : per_slot_all[r];
        pg->scatter_recv_displs[r] = ss;
        ss += pg->scatter_recv_counts[r];
    }
    struct cz_pipeline *pp = ex->pipe;
    pg->gather_n = ex->sc ? all_nonrep : gs;
    if (pg->gather_n > pp->gather_send_len)
        pp->gather_send_len = pg->gather_n;
    if (pg->recv_block * tp > pp->gather_recv_len)
        pp->gather_recv_len = pg->recv_block * tp;
    /* Under sc the scatter-send buffer holds my shard of each update, to apply from. */
    int64_t scatter_send = ex->sc ? hosted_all : hosted_all * tp;
    if (scatter_send > pp->scatter_send_len)
        pp->scatter_send_len = scatter_send;
    if (ss > pp->scatter_recv_len)
        pp->scatter_recv_len = ss;
    if (pg->hosted_full > pp->full_n)
        pp->full_n = pg->hosted_full;
    return CZ_OK;
}

/* Turns a host run list into the backend's form and releases the list. */
static int make_runs(cz_executor *ex, cz_run_list *l, cz_runs **out, cz_error *err)
{
    *out = ex->compute.ops->runs_create(&ex->compute, l->v, l->n);
    size_t n = l->n;
    cz_run_list_free(l);
    return *out ? CZ_OK : cz_error_set(err, CZ_ENOMEM, "out of memory for %zu copy runs", n);
}

/* The index maps, hosted matrices, Newton-Schulz batches and shard updates of one group. */
static int layout_maps(cz_executor *ex, pgroup *pg, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    const cz_plan_group *g = pg->g;
    struct cz_pipeline *pp = ex->pipe;
    int tp = ex->tp, rc = CZ_OK;
    size_t nh = (size_t)pg->nhosted + 1;
    cz_run_list l = {0};
    pg->hosted = cz_exec_calloc(nh, sizeof *pg->hosted);
    pg->hosted_off = cz_exec_calloc(nh, sizeof *pg->hosted_off);
    pg->hp = cz_exec_calloc(nh, sizeof *pg->hp);
    pg->hin = cz_exec_calloc(nh, sizeof *pg->hin);
    pg->hout = cz_exec_calloc(nh, sizeof *pg->hout);
    pg->apply = cz_exec_calloc((size_t)g->ntasks + 1, sizeof *pg->apply);
    if (!pg->hosted || !pg->hosted_off || !pg->hp || !pg->hin || !pg->hout || !pg->apply)
        return cz_error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");

    /* Gather send: per destination slot, my shards of the non-replicated tasks it hosts. */
    int nslots = ex->sc ? 1 : tp;
    int64_t pos = 0;
    for (int s = 0; s < nslots && !rc; s++)
        for (int t = 0; t < g->ntasks && !rc; t++) {
            const cz_plan_param *p = &plan->params[g->task_param[t]];
            if (replicated(p) || (!ex->sc && g->task_slot[t] != s))
                continue;
            rc = cz_run_list_add(&l, pos, cz_exec_param_offset(ex, p->id), p->numel, err);
            pos += p->numel;
        }
    if (!rc)
        rc = make_runs(ex, &l, &pg->gather_pack, err);

    /* Hosted matrices, their place in full_g/full_u, and the unpacking of their gradients. */
    int n = 0;
    int64_t fpos = 0, rpos = 0;
    for (int t = 0; t < g->ntasks && !rc; t++) {
        if (!hosts(ex, g, t))
            continue;
        const cz_plan_param *p = &plan->params[g->task_param[t]];
        pg->hosted[n] = p->id;
        pg->hosted_off[n] = fpos;
        pg->hp[n] = p;
        pg->hin[n] = pp->full_g + fpos;
        pg->hout[n] = pp->full_u + fpos;
        n++;
        if (!replicated(p)) {
            for (int r = 0; r < tp && !rc; r++)
                rc = cz_shard_runs(p, tp, r, fpos, pg->recv_block * r + rpos, 1, &l, err);
            rpos += p->numel;
        }
        fpos += full_numel(p);
    }
    if (!rc)
        rc = make_runs(ex, &l, &pg->unpack_recv, err);
    for (int k = 0; k < n && !rc; k++)
        if (replicated(pg->hp[k]))
            rc = cz_run_list_add(&l, pg->hosted_off[k], cz_exec_param_offset(ex, pg->hosted[k]),
                                 full_numel(pg->hp[k]), err);
    if (!rc)
        rc = make_runs(ex, &l, &pg->unpack_local, err);

    /* Scatter send: per destination TP rank, its shard of every update I host (under sc only
     * my own shard, applied from there). */
    int64_t spos = 0;
    for (int r = 0; r < tp && !rc; r++) {
        if (ex->sc && r != ex->tp_rank)
            continue;
        for (int k = 0; k < n && !rc; k++) {
            const cz_plan_param *p = pg->hp[k];
            if (ex->sc)
                pg->apply[pg->napply++] =
                    (apply_ref){cz_exec_param_offset(ex, p->id), spos, p->numel};
            rc = cz_shard_runs(p, tp, r, pg->hosted_off[k], spos, 0, &l, err);
            spos += p->numel;
        }
    }
    if (!rc)
        rc = make_runs(ex, &l, &pg->scatter_pack, err);
    cz_run_list_free(&l);

    /* Shard updates from the scatter's receive buffer: per source slot, its tasks in order. */
    for (int s = 0; s < tp && !ex->sc && !rc; s++) {
        int64_t upos = pg->scatter_recv_displs[s];
        for (int t = 0; t < g->ntasks; t++) {
            if (g->task_slot[t] != s)
                continue;
            const cz_plan_param *p = &plan->params[g->task_param[t]];
            pg->apply[pg->napply++] = (apply_ref){cz_exec_param_offset(ex, p->id), upos, p->numel};
            upos += p->numel;
        }
    }
    if (!rc)
        rc = cz_muon_prepare(&pg->muon, pg->hp, n, err);
    if (!rc) {
        if (pg->muon.batch_n > pp->batch_n)
            pp->batch_n = pg->muon.batch_n;
        if (pg->muon.work_n > pp->work_n)
            pp->work_n = pg->muon.work_n;
    }
    return rc;
}

static float *falloc(cz_executor *ex, int64_t n)
{
    return ex->compute.ops->alloc(&ex->compute, (size_t)(n + 1) * sizeof(float));
}

int cz_exec_pipeline_init(cz_executor *ex, cz_error *err)
{
    const cz_rank_schedule *rs = ex->schedule;
    struct cz_pipeline *pp = cz_exec_calloc(1, sizeof *pp);
    if (!pp)
        return cz_error_set(err, CZ_ENOMEM, "out of memory for the pipeline");
    ex->pipe = pp;
    pp->ngroups = rs->ngroups;
    pp->groups = cz_exec_calloc(rs->ngroups > 0 ? (size_t)rs->ngroups : 1, sizeof *pp->groups);
    if (!pp->groups)
        return cz_error_set(err, CZ_ENOMEM, "out of memory for the pipeline");
    for (int g = 0; g < rs->ngroups; g++) {
        pp->groups[g].g = &rs->groups[g];
        int rc = layout_counts(ex, &pp->groups[g], err);
        if (rc)
            return rc;
    }
    /* full_g/full_u first: the groups' Muon input and output pointers point into them. */
    pp->full_g = falloc(ex, pp->full_n);
    pp->full_u = falloc(ex, pp->full_n);
    if (!pp->full_g || !pp->full_u)
        return cz_error_set(err, CZ_ENOMEM, "out of memory for the host buffers (%lld elements)",
                            (long long)pp->full_n);
    for (int g = 0; g < rs->ngroups; g++) {
        int rc = layout_maps(ex, &pp->groups[g], err);
        if (rc)
            return rc;
        for (int t = 0; t < rs->groups[g].ntasks; t++) {
            if (!hosts(ex, &rs->groups[g], t))
                continue;
            int id = rs->groups[g].task_param[t];
            if (ex->use_shampoo || ex->use_soap) {
                const cz_plan_param *p = &ex->plan->params[id];
                int rc2 = ex->use_shampoo
                              ? cz_shampoo_state_create(&ex->compute, &ex->shampoo, p,
                                                        &ex->shampoo_state[id], &pp->sh_work_n, err)
                              : cz_soap_state_create(&ex->compute, &ex->soap, p,
                                                     &ex->soap_state[id], &pp->sh_work_n, err);
                if (rc2)
                    return rc2;
                continue;
            }
            ex->momentum[id] = falloc(ex, full_numel(&ex->plan->params[id]));
            if (!ex->momentum[id])
                return cz_error_set(err, CZ_ENOMEM, "out of memory for the momentum of '%s'",
                                    ex->plan->params[id].def.name);
        }
    }
    for (int k = 0; k < 2; k++) {
        pp->gather_send[k] = falloc(ex, pp->gather_send_len);
        pp->gather_recv[k] = falloc(ex, pp->gather_recv_len);
        pp->scatter_send[k] = falloc(ex, pp->scatter_send_len);
        pp->scatter_recv[k] = falloc(ex, pp->scatter_recv_len);
        if (!pp->gather_send[k] || !pp->gather_recv[k] || !pp->scatter_send[k] ||
            !pp->scatter_recv[k])
            return cz_error_set(err, CZ_ENOMEM, "out of memory for the pipeline buffers");
        pp->gather_req[k] = ex->tp_comm.ops->req_create(&ex->tp_comm);
        pp->scatter_req[k] = ex->tp_comm.ops->req_create(&ex->tp_comm);
        pp->gather_packed[k] = ex->compute.ops->event_create(&ex->compute);
        pp->scatter_packed[k] = ex->compute.ops->event_create(&ex->compute);
        if (!pp->gather_req[k] || !pp->scatter_req[k] || !pp->gather_packed[k] ||
            !pp->scatter_packed[k])
            return cz_error_set(err, CZ_ENOMEM, "out of memory for requests and events");
    }
    if (ex->use_shampoo || ex->use_soap) {
        pp->sh_work = falloc(ex, pp->sh_work_n);
        pp->sh_stats = ex->compute.ops->alloc(&ex->compute, 2 * sizeof(double));
        if (!pp->sh_work || !pp->sh_stats)
            return cz_error_set(err, CZ_ENOMEM,
                                "out of memory for Shampoo's work buffer (%lld elements)",
                                (long long)pp->sh_work_n);
        /* Newton-Schulz buffers are Muon's only. */
        pp->batch_n = pp->work_n = 0;
    }
    pp->batch = falloc(ex, pp->batch_n);
    pp->work = falloc(ex, pp->work_n);
    if (!pp->batch || !pp->work)
        return cz_error_set(err, CZ_ENOMEM,
                            "out of memory for the Newton-Schulz buffers (%lld elements)",
                            (long long)(pp->batch_n + pp->work_n));
    return CZ_OK;
}

void cz_exec_pipeline_free(cz_executor *ex)
{
    struct cz_pipeline *pp = ex->pipe;
    if (!pp)
        return;
    cz_compute *c = &ex->compute;
    for (int g = 0; pp->groups && g < pp->ngroups; g++) {
        pgroup *pg = &pp->groups[g];
        int64_t *layouts[8] = {pg->gather_send_counts,  pg->gather_send_displs,
                               pg->gather_recv_counts,  pg->gather_recv_displs,
                               pg->scatter_send_counts, pg->scatter_send_displs,
                               pg->scatter_recv_counts, pg->scatter_recv_displs};
        for (int k = 0; k < 8; k++)
            cz_exec_free(layouts[k]);
        cz_runs *runs[4] = {pg->gather_pack, pg->unpack_recv, pg->unpack_local, pg->scatter_pack};
        for (int k = 0; k < 4; k++)
            if (runs[k])
                c->ops->runs_free(c, runs[k]);
        cz_exec_free(pg->hosted), cz_exec_free(pg->hosted_off), cz_exec_free(pg->hp);
        cz_exec_free(pg->hin), cz_exec_free(pg->hout), cz_exec_free(pg->apply);
        cz_muon_prep_free(&pg->muon);
    }
    cz_exec_free(pp->groups);
    float *bufs[] = {pp->gather_send[0],  pp->gather_send[1],  pp->gather_recv[0],
                     pp->gather_recv[1],  pp->scatter_send[0], pp->scatter_send[1],
                     pp->scatter_recv[0], pp->scatter_recv[1], pp->full_g,
                     pp->full_u,          pp->batch,           pp->work,
                     pp->sh_work};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        if (bufs[k])
            c->ops->release(c, bufs[k]);
    if (pp->sh_stats)
        c->ops->release(c, pp->sh_stats);
    for (int k = 0; k < 2; k++) {
        if (pp->gather_req[k])
            ex->tp_comm.ops->req_free(&ex->tp_comm, pp->gather_req[k]);
        if (pp->scatter_req[k])
            ex->tp_comm.ops->req_free(&ex->tp_comm, pp->scatter_req[k]);
        if (pp->gather_packed[k])
            c->ops->event_free(c, pp->gather_packed[k]);
        if (pp->scatter_packed[k])
            c->ops->event_free(c, pp->scatter_packed[k]);
    }
    cz_exec_free(pp);
    ex->pipe = NULL;
}

/* Posts one all-to-all as a group of sends and receives, completed through req. */
static int post_exchange(cz_plane *pl, cz_comm_req *req, cz_event *after, const float *send,
                         const int64_t *sc, const int64_t *sd, float *recv, const int64_t *rc,
                         const int64_t *rd, cz_error *err)
{
    int st = pl->ops->group_start(pl, req, after, err);
    if (st)
        return st;
    for (int r = 0; r < pl->size; r++) {
        pl->ops->send(pl, req, send + sd[r], (size_t)sc[r], CZ_DTYPE_FP32, r);
        pl->ops->recv(pl, req, recv + rd[r], (size_t)rc[r], CZ_DTYPE_FP32, r);
    }
    return pl->ops->group_end(pl, req, err);
}

/* Packs my gradient shards of group g and posts its gather. */
static int post_gather(cz_executor *ex, int gi, const float *G, cz_error *err)
{
    struct cz_pipeline *pp = ex->pipe;
    pgroup *pg = &pp->groups[gi];
    float *send = pp->gather_send[gi % 2];
    cz_event *packed = pp->gather_packed[gi % 2];
    ex->compute.ops->copy_runs(&ex->compute, send, G, pg->gather_pack);
    ex->compute.ops->event_record(&ex->compute, packed);
    if (ex->sc)
        return ex->tp_comm.ops->iall_gather(&ex->tp_comm, send, (size_t)pg->gather_n,
                                            pp->gather_recv[gi % 2], CZ_DTYPE_FP32, packed,
                                            pp->gather_req[gi % 2], err);
    return post_exchange(&ex->tp_comm, pp->gather_req[gi % 2], packed, send, pg->gather_send_counts,
                         pg->gather_send_displs, pp->gather_recv[gi % 2], pg->gather_recv_counts,
                         pg->gather_recv_displs, err);
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
    cz_plane *tc = &pc->ex->tp_comm;
    tc->ops->progress(tc, pp->gather_req[(pc->gi + 1) % 2]);
    tc->ops->progress(tc, pp->scatter_req[(pc->gi + 1) % 2]);
}

/* Applies my shard updates of group g from u (scatter recv, or scatter send under sc). */
static void apply_group(cz_executor *ex, const pgroup *pg, float *P, const float *u)
{
    /* SOAP's first step only initialises its preconditioner: no update, no weight decay. */
    float wd = ex->use_soap && ex->steps == 0 ? 0.0f : ex->muon.weight_decay;
    for (int k = 0; k < pg->napply; k++)
        ex->compute.ops->apply_update(&ex->compute, P + pg->apply[k].p_off, u + pg->apply[k].u_off,
                                      pg->apply[k].n, ex->muon.lr, wd);
}

/* Host side of group g: reassemble, Muon, and either post the scatter or (sc) apply. */
static int compute_group(cz_executor *ex, int gi, float *P, const float *G, cz_error *err)
{
    struct cz_pipeline *pp = ex->pipe;
    pgroup *pg = &pp->groups[gi];
    cz_compute *c = &ex->compute;
    progress_ctx pc = {ex, gi};
    c->ops->copy_runs(c, pp->full_g, pp->gather_recv[gi % 2], pg->unpack_recv);
    c->ops->copy_runs(c, pp->full_g, G, pg->unpack_local);
    int rc = CZ_OK;
    bool linalg = ex->use_shampoo || ex->use_soap;
    /* SOAP folds its weight decay into the update with the current rates (set_lr and
     * set_weight_decay change them between steps). */
    ex->soap.lr = ex->muon.lr;
    ex->soap.weight_decay = ex->muon.weight_decay;
    for (int k = 0; k < pg->nhosted && linalg && !rc; k++) {
        if (ex->use_shampoo)
            rc = cz_shampoo_run(c, &ex->shampoo, ex->shampoo_state[pg->hosted[k]], pg->hin[k],
                                pg->hout[k], ex->steps + 1, pp->sh_work, pp->sh_stats, err);
        else
            rc = cz_soap_run(c, &ex->soap, ex->soap_state[pg->hosted[k]], pg->hin[k], pg->hout[k],
                             ex->steps + 1, pp->sh_work, err);
        progress_inflight(&pc);
    }
    for (int k = 0; k < pg->nhosted && !linalg; k++) {
        /* The optimizer input overwrites the gradient in place. */
        float *fg = pp->full_g + pg->hosted_off[k];
        c->ops->momentum(c, fg, ex->momentum[pg->hosted[k]], fg, full_numel(pg->hp[k]),
                         ex->muon.momentum, ex->muon.nesterov);
        progress_inflight(&pc);
    }
    if (!rc && !linalg)
        rc = cz_muon_run(c, &ex->muon, &pg->muon, pg->hin, pg->hout, pp->batch, pp->work,
                         progress_inflight, &pc, err);
    if (rc)
        return rc;
    float *send = pp->scatter_send[gi % 2];
    c->ops->copy_runs(c, send, pp->full_u, pg->scatter_pack);
    if (ex->sc) {
        apply_group(ex, pg, P, send);
        return CZ_OK;
    }
    c->ops->event_record(c, pp->scatter_packed[gi % 2]);
    return post_exchange(&ex->tp_comm, pp->scatter_req[gi % 2], pp->scatter_packed[gi % 2], send,
                         pg->scatter_send_counts, pg->scatter_send_displs, pp->scatter_recv[gi % 2],
                         pg->scatter_recv_counts, pg->scatter_recv_displs, err);
}

/* Waits for the scatter of group g and applies my update shards. */
static int finish_group(cz_executor *ex, int gi, float *P, cz_error *err)
{
    struct cz_pipeline *pp = ex->pipe;
    int rc = ex->tp_comm.ops->wait(&ex->tp_comm, pp->scatter_req[gi % 2], err);
    if (rc)
        return rc;
    apply_group(ex, &pp->groups[gi], P, pp->scatter_recv[gi % 2]);
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
            rc = ex->tp_comm.ops->wait(&ex->tp_comm, pp->gather_req[gi % 2], err);
        if (!rc)
            rc = compute_group(ex, gi, P, G, err);
        if (!rc && !ex->sc && gi > 0)
            rc = finish_group(ex, gi - 1, P, err);
    }
    if (!rc && !ex->sc)
        rc = finish_group(ex, ng - 1, P, err);
    if (rc) {
        /* Leave no request in flight: a later step or free must not see a stale one. */
        cz_error tmp;
        for (int k = 0; k < 2; k++) {
            ex->tp_comm.ops->wait(&ex->tp_comm, pp->gather_req[k], &tmp);
            ex->tp_comm.ops->wait(&ex->tp_comm, pp->scatter_req[k], &tmp);
        }
    }
    return rc;
}
