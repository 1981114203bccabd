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
 * Everything moves by parts: a part is the region of the full matrix one slot computes: a
 * whole matrix (today's task), one block of it (a block task), or one member's slice of a
 * cooperative task's region (cz__task_parts). The holder of a part receives from every TP
 * rank the elements of its shard inside the part (cz__region_runs), keeps the part's momentum,
 * and returns to every TP rank the elements of its shard inside the part's update. Whole-matrix
 * parts give exactly the layouts below as before. The members of a cooperative task then
 * compute their slices together (cz__muon_coop_run), all-reducing over a sub-plane of the TP
 * plane split at create time per width (color tp_rank / k).
 *
 * Buffer layouts (elements, parts always in the group's order: tasks in flat order, a
 * cooperative task's members in slot order):
 *   gather send:  per destination slot s, my shard inside each non-replicated part s holds;
 *   gather recv:  per source TP rank r, r's shard inside each non-replicated part I hold;
 *   scatter send: per destination TP rank r, r's shard inside the update of every part I hold;
 *   scatter recv: per source slot s, my shard inside the update of each part s holds;
 * each "shard inside a part" in the shard's storage order.
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
#include "alloc.h"
#include "canzona_exec.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "muon.h"
#include "shampoo.h"
#include "shard.h"
#include "soap.h"

#include <string.h>

/* Distinct cooperative widths of one schedule (widths divide TP: 32 is far more than any). */
#define CZ_MAX_COOP_WIDTHS 32

/* A part this rank holds: where it lives in full_g / full_u, and its momentum. */
typedef struct hpart {
    cz_exec_part x;
    const cz_plan_param *p;
    int64_t off, numel;
    float *momentum; /* part-sized, also listed in ex->mom for checkpoints */
} hpart;

/* A batch of cooperative tasks of one shape and slot set, in the order of their first task. */
typedef struct coop_batch {
    cz_muon_coop shape;
    cz_plane *plane;
    int width, first_slot;
    const float **in; /* the member's slices (full_g) and their updates (full_u) */
    float **out;
} coop_batch;

typedef struct pgroup {
    const cz_plan_group *g;
    cz_exec_part *parts; /* every part of the group, in order */
    int nparts;
    /* The all-to-all layouts of the group's two TP exchanges, one value per TP peer, in
     * elements, named <exchange>_<direction>_<what>: the gather brings the shards of a part to
     * its holder, the scatter returns the holder's update to every shard; "counts" is how much
     * goes to (send) or comes from (recv) that peer, "displs" where it starts in the packed
     * send or receive buffer (MPI_Alltoallv's sendcounts/sdispls/recvcounts/rdispls). */
    int64_t *gather_send_counts, *gather_send_displs, *gather_recv_counts, *gather_recv_displs;
    int64_t *scatter_send_counts, *scatter_send_displs, *scatter_recv_counts, *scatter_recv_displs;
    int64_t gather_n;      /* elements I send in the gather (per destination under sc) */
    cz_runs *gather_pack;  /* G -> gather send */
    cz_runs *unpack_recv;  /* gather recv -> the parts' gradients in full_g */
    cz_runs *unpack_local; /* G -> the gradients of the replicated parts I hold */
    cz_runs *scatter_pack; /* the parts' updates -> scatter send (sc: my shard of each) */
    cz_runs *apply;        /* (my shard, update) pairs from scatter recv (sc: scatter send) */
    hpart *hosted;         /* the parts I hold, in order */
    int nhosted;
    /* The hosted (width 1) parts, batched by cz__muon_run. */
    const cz_plan_param **hp;
    int *hb;
    const float **hin;
    float **hout;
    int nh1;
    cz_muon_prep muon;
    coop_batch *coop;
    int ncoop;
} pgroup;

struct cz_pipeline {
    int ngroups;
    pgroup *groups;
    int64_t gather_send_len, gather_recv_len, scatter_send_len, scatter_recv_len, full_n, batch_n,
        work_n, gram_n, sq_n;
    float *gather_send[2], *gather_recv[2], *scatter_send[2], *scatter_recv[2];
    float *full_g, *full_u, *batch, *work, *gram;
    double *sq;
    int64_t sh_work_n; /* Shampoo: work of the largest tile; two doubles of norms */
    float *sh_work;
    double *sh_stats;
    cz_comm_req *gather_req[2], *scatter_req[2];
    /* Recorded after a gather (scatter) buffer is packed; its send waits for it. */
    cz_event *gather_packed[2], *scatter_packed[2];
    cz_event *coop_ready; /* recorded before each cooperative all-reduce */
    /* The sub-planes of the cooperative widths (split from the TP plane at create). */
    int nwidths;
    int widths[CZ_MAX_COOP_WIDTHS];
    cz_plane wplanes[CZ_MAX_COOP_WIDTHS];
    /* Per sub-plane, one request per Gram panel (cz__muon_coop_run). */
    cz_comm_req *wreqs[CZ_MAX_COOP_WIDTHS][CZ_COOP_MAX_PANELS];
};

static bool replicated(const cz_plan_param *p)
{
    return p->def.tp_dim < 0;
}

float *cz__exec_momentum_of(const cz_executor *ex, int param, const cz_block *part)
{
    for (int i = 0; i < ex->nmom; i++) {
        const cz_momentum_part *m = &ex->mom[i];
        if (m->param == param && m->part.r0 == part->r0 && m->part.c0 == part->c0 &&
            m->part.rows == part->rows && m->part.cols == part->cols)
            return m->buf;
    }
    return NULL;
}

static bool holds(const cz_executor *ex, const cz_exec_part *x)
{
    return ex->sc || x->slot == ex->tp_rank;
}

static int64_t part_numel(const cz_exec_part *x)
{
    return x->part.rows * x->part.cols;
}

/* Elements of TP rank r's shard in part x: gathered (replicated parts gather nothing) and
 * scattered. */
static int64_t gcount(const cz_executor *ex, const cz_exec_part *x, int r)
{
    const cz_plan_param *p = &ex->plan->params[x->param];
    return replicated(p) ? 0 : cz__shard_region_numel(p, ex->tp, r, &x->part);
}

static int64_t scount(const cz_executor *ex, const cz_exec_part *x, int r)
{
    return cz__shard_region_numel(&ex->plan->params[x->param], ex->tp, r, &x->part);
}

static int list_parts(cz_executor *ex, pgroup *pg, cz_error *err)
{
    const cz_plan_group *g = pg->g;
    int n = 0;
    for (int t = 0; t < g->ntasks; t++)
        n += cz_group_task_width(g, t);
    pg->parts = cz__exec_calloc((size_t)n + 1, sizeof *pg->parts);
    if (!pg->parts)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
    for (int t = 0; t < g->ntasks; t++)
        pg->nparts += cz__task_parts(ex->plan, g, t, pg->parts + pg->nparts, n - pg->nparts);
    return CZ_OK;
}

static int layout_counts(cz_executor *ex, pgroup *pg, cz_error *err)
{
    int tp = ex->tp, me = ex->tp_rank;
    int rc = list_parts(ex, pg, err);
    if (rc)
        return rc;
    int64_t *arrs[8];
    for (int k = 0; k < 8; k++) {
        arrs[k] = cz__exec_calloc((size_t)tp, sizeof(int64_t));
        if (!arrs[k]) {
            for (int j = 0; j < k; j++)
                cz__exec_free(arrs[j]);
            return cz__error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
        }
    }
    pg->gather_send_counts = arrs[0], pg->gather_send_displs = arrs[1];
    pg->gather_recv_counts = arrs[2], pg->gather_recv_displs = arrs[3];
    pg->scatter_send_counts = arrs[4], pg->scatter_send_displs = arrs[5];
    pg->scatter_recv_counts = arrs[6], pg->scatter_recv_displs = arrs[7];
    int64_t full = 0, sc_send = 0;
    for (int i = 0; i < pg->nparts; i++) {
        const cz_exec_part *x = &pg->parts[i];
        if (ex->sc) {
            /* Every rank all-gathers its shard inside every part and applies its own. */
            pg->gather_n += gcount(ex, x, me);
            sc_send += scount(ex, x, me);
            for (int r = 0; r < tp; r++)
                pg->gather_recv_counts[r] += gcount(ex, x, r);
        } else {
            pg->gather_send_counts[x->slot] += gcount(ex, x, me);
            pg->scatter_recv_counts[x->slot] += scount(ex, x, me);
            if (x->slot == me)
                for (int r = 0; r < tp; r++) {
                    pg->gather_recv_counts[r] += gcount(ex, x, r);
                    pg->scatter_send_counts[r] += scount(ex, x, r);
                }
        }
        if (holds(ex, x)) {
            pg->nhosted++;
            full += part_numel(x);
        }
    }
    int64_t gs = 0, gr = 0, ss = 0, sr = 0;
    for (int r = 0; r < tp; r++) {
        /* iall_gather takes one count from every rank: the parts must give each rank as much
         * (whole matrices and blocks do; plan_check refuses cooperative tasks under sc). */
        if (ex->sc && pg->gather_recv_counts[r] != pg->gather_n)
            return cz__error_set(err, CZ_EINTERNAL,
                                 "micro-group %d: under sc TP rank %d gathers %lld elements and "
                                 "rank %d %lld; the all-gather needs equal counts",
                                 pg->g->id, r, (long long)pg->gather_recv_counts[r], me,
                                 (long long)pg->gather_n);
        pg->gather_send_displs[r] = gs;
        gs += pg->gather_send_counts[r];
        pg->gather_recv_displs[r] = gr;
        gr += pg->gather_recv_counts[r];
        pg->scatter_send_displs[r] = ss;
        ss += pg->scatter_send_counts[r];
        pg->scatter_recv_displs[r] = sr;
        sr += pg->scatter_recv_counts[r];
    }
    struct cz_pipeline *pp = ex->pipe;
    if (!ex->sc)
        pg->gather_n = gs;
    if (pg->gather_n > pp->gather_send_len)
        pp->gather_send_len = pg->gather_n;
    if (gr > pp->gather_recv_len)
        pp->gather_recv_len = gr;
    /* Under sc the scatter-send buffer holds my shard of each update, to apply from. */
    int64_t scatter_send = ex->sc ? sc_send : ss;
    if (scatter_send > pp->scatter_send_len)
        pp->scatter_send_len = scatter_send;
    if (sr > pp->scatter_recv_len)
        pp->scatter_recv_len = sr;
    if (full > pp->full_n)
        pp->full_n = full;
    return CZ_OK;
}

/* Turns a host run list into the backend's form and releases the list. */
static int make_runs(cz_executor *ex, cz_run_list *l, cz_runs **out, cz_error *err)
{
    *out = ex->compute.ops->runs_create(&ex->compute, l->v, l->n);
    size_t n = l->n;
    cz__run_list_free(l);
    return *out ? CZ_OK : cz__error_set(err, CZ_ENOMEM, "out of memory for %zu copy runs", n);
}

/* The sub-plane of the members of a cooperative task of width k. */
static cz_plane *width_plane(struct cz_pipeline *pp, int k)
{
    for (int i = 0; i < pp->nwidths; i++)
        if (pp->widths[i] == k)
            return &pp->wplanes[i];
    return NULL;
}

/* Groups my cooperative parts into batches: same width, first slot, shapes and Gram panels, in the
 * order of their first task (the same order on every member, so the all-reduces never cross). */
static int layout_coop(cz_executor *ex, pgroup *pg, cz_error *err)
{
    struct cz_pipeline *pp = ex->pipe;
    size_t nh = (size_t)pg->nhosted + 1;
    pg->coop = cz__exec_calloc(nh, sizeof *pg->coop);
    if (!pg->coop)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for cooperative batches");
    for (int i = 0; i < pg->nhosted; i++) {
        const cz_exec_part *x = &pg->hosted[i].x;
        if (x->width < 2)
            continue;
        bool tall = x->region.rows > x->region.cols;
        cz_muon_coop sh = {.rows = x->region.rows,
                           .cols = x->region.cols,
                           .prows = x->part.rows,
                           .pcols = x->part.cols,
                           .transposed = tall};
        sh.a = tall ? x->region.cols : x->region.rows;
        sh.n = tall ? x->part.rows : x->part.cols;
        /* 1 .. min(CZ_COOP_MAX_PANELS, a), as the sub-plane's requests need: the reader and the
         * structural check (cz__exec_plan_check, at create) refuse any other count. */
        sh.panels = x->panels;
        int first = x->slot - x->member, b = 0;
        while (b < pg->ncoop &&
               !(pg->coop[b].width == x->width && pg->coop[b].first_slot == first &&
                 pg->coop[b].shape.rows == sh.rows && pg->coop[b].shape.cols == sh.cols &&
                 pg->coop[b].shape.prows == sh.prows && pg->coop[b].shape.pcols == sh.pcols &&
                 pg->coop[b].shape.panels == sh.panels))
            b++;
        coop_batch *cb = &pg->coop[b];
        if (b == pg->ncoop) {
            pg->ncoop++;
            cb->shape = sh;
            cb->width = x->width;
            cb->first_slot = first;
            cb->plane = width_plane(pp, x->width);
            cb->in = cz__exec_calloc(nh, sizeof *cb->in);
            cb->out = cz__exec_calloc(nh, sizeof *cb->out);
            if (!cb->in || !cb->out)
                return cz__error_set(err, CZ_ENOMEM, "out of memory for cooperative batches");
            if (!cb->plane)
                return cz__error_set(err, CZ_EINTERNAL, "no sub-plane of width %d", x->width);
        }
        cb->in[cb->shape.count] = pp->full_g + pg->hosted[i].off;
        cb->out[cb->shape.count++] = pp->full_u + pg->hosted[i].off;
    }
    for (int b = 0; b < pg->ncoop; b++) {
        int64_t xn, gn, wn;
        cz__muon_coop_sizes(&pg->coop[b].shape, &xn, &gn, &wn);
        if (xn > pp->batch_n)
            pp->batch_n = xn;
        if (gn > pp->gram_n)
            pp->gram_n = gn;
        if (wn > pp->work_n)
            pp->work_n = wn;
        if (pg->coop[b].shape.count > pp->sq_n)
            pp->sq_n = pg->coop[b].shape.count;
    }
    return CZ_OK;
}

/* The index maps, held parts, Newton-Schulz batches and shard updates of one group. */
static int layout_maps(cz_executor *ex, pgroup *pg, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    struct cz_pipeline *pp = ex->pipe;
    int tp = ex->tp, me = ex->tp_rank, rc = CZ_OK;
    size_t nh = (size_t)pg->nhosted + 1;
    cz_run_list l = {0};
    pg->nhosted = 0; /* counted by layout_counts; listed again below */
    pg->hosted = cz__exec_calloc(nh, sizeof *pg->hosted);
    pg->hp = cz__exec_calloc(nh, sizeof *pg->hp);
    pg->hb = cz__exec_calloc(nh, sizeof *pg->hb);
    pg->hin = cz__exec_calloc(nh, sizeof *pg->hin);
    pg->hout = cz__exec_calloc(nh, sizeof *pg->hout);
    if (!pg->hosted || !pg->hp || !pg->hb || !pg->hin || !pg->hout)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");

    /* Gather send: per destination slot, my shard inside each non-replicated part it holds
     * (under sc: inside every part, to everyone). */
    int64_t pos = 0;
    for (int s = 0; s < (ex->sc ? 1 : tp) && !rc; s++)
        for (int i = 0; i < pg->nparts && !rc; i++) {
            const cz_exec_part *x = &pg->parts[i];
            const cz_plan_param *p = &plan->params[x->param];
            if (replicated(p) || (!ex->sc && x->slot != s))
                continue;
            rc = cz__region_runs(p, tp, me, &x->part, pos, ex->param_off[p->id], 1, 1, &l, err);
            pos += gcount(ex, x, me);
        }
    if (!rc)
        rc = make_runs(ex, &l, &pg->gather_pack, err);

    /* Held parts and their place in full_g/full_u. */
    int64_t fpos = 0;
    for (int i = 0; i < pg->nparts; i++) {
        const cz_exec_part *x = &pg->parts[i];
        if (!holds(ex, x))
            continue;
        hpart *h = &pg->hosted[pg->nhosted++];
        h->x = *x;
        h->p = &plan->params[x->param];
        h->off = fpos;
        h->numel = part_numel(x);
        fpos += h->numel;
        if (x->width == 1) {
            pg->hp[pg->nh1] = h->p;
            pg->hb[pg->nh1] = x->block;
            pg->hin[pg->nh1] = pp->full_g + h->off;
            pg->hout[pg->nh1] = pp->full_u + h->off;
            pg->nh1++;
        }
    }
    /* The gradients: per source rank its shard inside each part I hold, then the replicated
     * parts from my own copy. */
    for (int r = 0; r < tp && !rc; r++) {
        int64_t rpos = pg->gather_recv_displs[r];
        for (int k = 0; k < pg->nhosted && !rc; k++) {
            const hpart *h = &pg->hosted[k];
            if (replicated(h->p))
                continue;
            rc = cz__region_runs(h->p, tp, r, &h->x.part, rpos, h->off, 0, 0, &l, err);
            rpos += gcount(ex, &h->x, r);
        }
    }
    if (!rc)
        rc = make_runs(ex, &l, &pg->unpack_recv, err);
    for (int k = 0; k < pg->nhosted && !rc; k++) {
        const hpart *h = &pg->hosted[k];
        if (replicated(h->p)) /* the message of a replicated part is the part itself */
            rc = cz__region_runs(h->p, tp, me, &h->x.part, h->off, ex->param_off[h->p->id], 1, 1,
                                 &l, err);
    }
    if (!rc)
        rc = make_runs(ex, &l, &pg->unpack_local, err);

    /* Scatter send: per destination TP rank, its shard inside the update of every part I hold
     * (under sc only my own shard, applied from there). */
    for (int r = 0; r < tp && !rc; r++) {
        if (ex->sc && r != me)
            continue;
        int64_t spos = ex->sc ? 0 : pg->scatter_send_displs[r];
        for (int k = 0; k < pg->nhosted && !rc; k++) {
            const hpart *h = &pg->hosted[k];
            rc = cz__region_runs(h->p, tp, r, &h->x.part, spos, h->off, 0, 1, &l, err);
            spos += scount(ex, &h->x, r);
        }
    }
    if (!rc)
        rc = make_runs(ex, &l, &pg->scatter_pack, err);

    /* Shard updates: from the scatter's receive buffer, per source slot its parts in order
     * (under sc from the scatter-send buffer, every part in order). */
    for (int s = 0; s < (ex->sc ? 1 : tp) && !rc; s++) {
        int64_t upos = ex->sc ? 0 : pg->scatter_recv_displs[s];
        for (int i = 0; i < pg->nparts && !rc; i++) {
            const cz_exec_part *x = &pg->parts[i];
            if (!ex->sc && x->slot != s)
                continue;
            const cz_plan_param *p = &plan->params[x->param];
            rc = cz__region_runs(p, tp, me, &x->part, upos, ex->param_off[p->id], 1, 0, &l, err);
            upos += scount(ex, x, me);
        }
    }
    if (!rc)
        rc = make_runs(ex, &l, &pg->apply, err);
    cz__run_list_free(&l);
    if (!rc)
        rc = cz__muon_prepare_tasks(&pg->muon, pg->hp, pg->hb, pg->nh1, err);
    if (!rc) {
        if (pg->muon.batch_n > pp->batch_n)
            pp->batch_n = pg->muon.batch_n;
        if (pg->muon.work_n > pp->work_n)
            pp->work_n = pg->muon.work_n;
    }
    return rc ? rc : layout_coop(ex, pg, err);
}

static float *falloc(cz_executor *ex, int64_t n)
{
    return ex->compute.ops->alloc(&ex->compute, (size_t)(n + 1) * sizeof(float));
}

/* One sub-plane per cooperative width of my DP rank's schedule: the TP plane split into the
 * aligned k-slot sets (color tp_rank / k). Every TP rank of the group has the same schedule,
 * so every one makes the same splits in the same order. */
static int open_width_planes(cz_executor *ex, cz_error *err)
{
    struct cz_pipeline *pp = ex->pipe;
    const cz_rank_schedule *rs = ex->schedule;
    for (int g = 0; g < rs->ngroups; g++)
        for (int t = 0; t < rs->groups[g].ntasks; t++) {
            int k = cz_group_task_width(&rs->groups[g], t), i = 0;
            if (k < 2)
                continue;
            while (i < pp->nwidths && pp->widths[i] != k)
                i++;
            if (i < pp->nwidths)
                continue;
            if (pp->nwidths == CZ_MAX_COOP_WIDTHS)
                return cz__error_set(err, CZ_EUNSUPPORTED,
                                     "the plan uses more than %d cooperative widths", pp->nwidths);
            int rc = ex->tp_comm.ops->split(&ex->tp_comm, ex->tp_rank / k, ex->tp_rank % k,
                                            &pp->wplanes[pp->nwidths], err);
            if (rc)
                return rc;
            cz_plane *wp = &pp->wplanes[pp->nwidths];
            wp->compute = &ex->compute;
            wp->label = "cooperative";
            pp->widths[pp->nwidths++] = k; /* from here on, teardown closes it */
            if (wp->size != k)
                return cz__error_set(err, CZ_EINTERNAL, "the sub-plane of width %d has %d ranks", k,
                                     wp->size);
            for (int q = 0; q < CZ_COOP_MAX_PANELS; q++)
                if (!(pp->wreqs[i][q] = wp->ops->req_create(wp)))
                    return cz__error_set(err, CZ_ENOMEM, "out of memory for requests");
        }
    return CZ_OK;
}

int cz__exec_pipeline_init(cz_executor *ex, cz_error *err)
{
    const cz_rank_schedule *rs = ex->schedule;
    struct cz_pipeline *pp = cz__exec_calloc(1, sizeof *pp);
    if (!pp)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the pipeline");
    ex->pipe = pp;
    /* The splits are collective: first, before anything a rank could fail alone. */
    int rc = open_width_planes(ex, err);
    if (rc)
        return rc;
    pp->ngroups = rs->ngroups;
    pp->groups = cz__exec_calloc(rs->ngroups > 0 ? (size_t)rs->ngroups : 1, sizeof *pp->groups);
    if (!pp->groups)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the pipeline");
    int nmom = 0;
    for (int g = 0; g < rs->ngroups; g++) {
        pp->groups[g].g = &rs->groups[g];
        rc = layout_counts(ex, &pp->groups[g], err);
        if (rc)
            return rc;
        nmom += pp->groups[g].nhosted;
    }
    /* full_g/full_u first: the groups' Muon input and output pointers point into them. */
    pp->full_g = falloc(ex, pp->full_n);
    pp->full_u = falloc(ex, pp->full_n);
    ex->mom = cz__exec_calloc((size_t)nmom + 1, sizeof *ex->mom);
    if (!pp->full_g || !pp->full_u || !ex->mom)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the host buffers (%lld elements)",
                             (long long)pp->full_n);
    for (int g = 0; g < rs->ngroups; g++) {
        pgroup *pg = &pp->groups[g];
        rc = layout_maps(ex, pg, err);
        if (rc)
            return rc;
        for (int k = 0; k < pg->nhosted; k++) {
            hpart *h = &pg->hosted[k];
            int id = h->x.param;
            if (ex->use_shampoo || ex->use_soap) {
                /* Shampoo and SOAP plans have whole-matrix tasks only (plan_check). */
                int rc2 =
                    ex->use_shampoo
                        ? cz__shampoo_state_create(&ex->compute, &ex->shampoo, h->p,
                                                   &ex->shampoo_state[id], &pp->sh_work_n, err)
                        : cz__soap_state_create(&ex->compute, &ex->soap, h->p, &ex->soap_state[id],
                                                &pp->sh_work_n, err);
                if (rc2)
                    return rc2;
                continue;
            }
            h->momentum = falloc(ex, h->numel);
            if (!h->momentum)
                return cz__error_set(err, CZ_ENOMEM, "out of memory for the momentum of '%s'",
                                     h->p->def.name);
            ex->mom[ex->nmom++] = (cz_momentum_part){id, h->x.part, h->momentum};
        }
    }
    for (int k = 0; k < 2; k++) {
        pp->gather_send[k] = falloc(ex, pp->gather_send_len);
        pp->gather_recv[k] = falloc(ex, pp->gather_recv_len);
        pp->scatter_send[k] = falloc(ex, pp->scatter_send_len);
        pp->scatter_recv[k] = falloc(ex, pp->scatter_recv_len);
        if (!pp->gather_send[k] || !pp->gather_recv[k] || !pp->scatter_send[k] ||
            !pp->scatter_recv[k])
            return cz__error_set(err, CZ_ENOMEM, "out of memory for the pipeline buffers");
        pp->gather_req[k] = ex->tp_comm.ops->req_create(&ex->tp_comm);
        pp->scatter_req[k] = ex->tp_comm.ops->req_create(&ex->tp_comm);
        pp->gather_packed[k] = ex->compute.ops->event_create(&ex->compute);
        pp->scatter_packed[k] = ex->compute.ops->event_create(&ex->compute);
        if (!pp->gather_req[k] || !pp->scatter_req[k] || !pp->gather_packed[k] ||
            !pp->scatter_packed[k])
            return cz__error_set(err, CZ_ENOMEM, "out of memory for requests and events");
    }
    pp->coop_ready = ex->compute.ops->event_create(&ex->compute);
    if (!pp->coop_ready)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for requests and events");
    if (ex->use_shampoo || ex->use_soap) {
        pp->sh_work = falloc(ex, pp->sh_work_n);
        pp->sh_stats = ex->compute.ops->alloc(&ex->compute, 2 * sizeof(double));
        if (!pp->sh_work || !pp->sh_stats)
            return cz__error_set(err, CZ_ENOMEM,
                                 "out of memory for Shampoo's work buffer (%lld elements)",
                                 (long long)pp->sh_work_n);
        /* Newton-Schulz buffers are Muon's only. */
        pp->batch_n = pp->work_n = 0;
    }
    pp->batch = falloc(ex, pp->batch_n);
    pp->work = falloc(ex, pp->work_n);
    pp->gram = falloc(ex, pp->gram_n);
    pp->sq = ex->compute.ops->alloc(&ex->compute, (size_t)(pp->sq_n + 1) * sizeof(double));
    if (!pp->batch || !pp->work || !pp->gram || !pp->sq)
        return cz__error_set(err, CZ_ENOMEM,
                             "out of memory for the Newton-Schulz buffers (%lld elements)",
                             (long long)(pp->batch_n + pp->work_n + pp->gram_n));
    return CZ_OK;
}

void cz__exec_pipeline_free(cz_executor *ex)
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
            cz__exec_free(layouts[k]);
        cz_runs *runs[5] = {pg->gather_pack, pg->unpack_recv, pg->unpack_local, pg->scatter_pack,
                            pg->apply};
        for (int k = 0; k < 5; k++)
            if (runs[k])
                c->ops->runs_free(c, runs[k]);
        for (int b = 0; pg->coop && b < pg->ncoop; b++) {
            cz__exec_free(pg->coop[b].in);
            cz__exec_free(pg->coop[b].out);
        }
        cz__exec_free(pg->coop);
        cz__exec_free(pg->parts), cz__exec_free(pg->hosted), cz__exec_free(pg->hp);
        cz__exec_free(pg->hb), cz__exec_free(pg->hin), cz__exec_free(pg->hout);
        cz__muon_prep_free(&pg->muon);
    }
    cz__exec_free(pp->groups);
    float *bufs[] = {pp->gather_send[0],
                     pp->gather_send[1],
                     pp->gather_recv[0],
                     pp->gather_recv[1],
                     pp->scatter_send[0],
                     pp->scatter_send[1],
                     pp->scatter_recv[0],
                     pp->scatter_recv[1],
                     pp->full_g,
                     pp->full_u,
                     pp->batch,
                     pp->work,
                     pp->gram,
                     pp->sh_work};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        if (bufs[k])
            c->ops->release(c, bufs[k]);
    if (pp->sh_stats)
        c->ops->release(c, pp->sh_stats);
    if (pp->sq)
        c->ops->release(c, pp->sq);
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
    if (pp->coop_ready)
        c->ops->event_free(c, pp->coop_ready);
    for (int i = 0; i < pp->nwidths; i++) {
        for (int q = 0; q < CZ_COOP_MAX_PANELS; q++)
            if (pp->wreqs[i][q])
                pp->wplanes[i].ops->req_free(&pp->wplanes[i], pp->wreqs[i][q]);
        cz__plane_close(&pp->wplanes[i]);
    }
    cz__exec_free(pp);
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
    /* SOAP's first step only initialises its preconditioner: no update, no weight decay.
     * Shampoo with momentum applied its decay with that momentum before the pipeline. */
    float wd = (ex->use_soap && ex->steps == 0) || ex->shampoo_decay ? 0.0f : ex->muon.weight_decay;
    ex->compute.ops->apply_runs(&ex->compute, P, u, pg->apply, ex->muon.lr, wd);
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
        const hpart *h = &pg->hosted[k];
        float *hg = pp->full_g + h->off, *hu = pp->full_u + h->off;
        if (ex->use_shampoo)
            rc = cz__shampoo_run(c, &ex->shampoo, ex->shampoo_state[h->x.param], hg, hu,
                                 ex->steps + 1, pp->sh_work, pp->sh_stats, err);
        else
            rc = cz__soap_run(c, &ex->soap, ex->soap_state[h->x.param], hg, hu, ex->steps + 1,
                              pp->sh_work, err);
        progress_inflight(&pc);
    }
    for (int k = 0; k < pg->nhosted && !linalg; k++) {
        /* The optimizer input overwrites the gradient in place. */
        const hpart *h = &pg->hosted[k];
        float *fg = pp->full_g + h->off;
        c->ops->momentum(c, fg, h->momentum, fg, h->numel, ex->muon.momentum, ex->muon.nesterov);
        progress_inflight(&pc);
    }
    /* Cooperative batches first, in the same order on every member: a member's peers wait for
     * it at every all-reduce, so none of them should first spend time on its hosted work. */
    for (int b = 0; b < pg->ncoop && !linalg && !rc; b++) {
        coop_batch *cb = &pg->coop[b];
        rc = cz__muon_coop_run(c, cb->plane, &ex->muon, &cb->shape, cb->in, cb->out, pp->batch,
                               pp->gram, pp->work, pp->sq, pp->coop_ready,
                               pp->wreqs[cb->plane - pp->wplanes], progress_inflight, &pc, err);
    }
    if (!rc && !linalg)
        rc = cz__muon_run(c, &ex->muon, &pg->muon, pg->hin, pg->hout, pp->batch, pp->work,
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

int cz__exec_matrix_pipeline(cz_executor *ex, float *P, const float *G, cz_error *err)
{
    struct cz_pipeline *pp = ex->pipe;
    int ng = pp->ngroups, rc = CZ_OK;
    /* Shampoo's weight decay enters its momentum on the parameters of this step, before any
     * update of it is applied. */
    for (int k = 0; ex->shampoo_decay && k < ex->nowned; k++) {
        int i = ex->owned[k];
        if (ex->shampoo_decay[i])
            cz__shampoo_decay_momentum(&ex->compute, &ex->shampoo, P + ex->param_off[i],
                                       ex->shampoo_decay[i], ex->plan->params[i].numel, ex->muon.lr,
                                       ex->muon.weight_decay);
    }
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
