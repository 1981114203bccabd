/* The micro-group pipeline over the TP group (docs/EXECUTOR.md, "One step", item 4).
 *
 * For group g: ONE fused all-to-all sends every task's local gradient shard to the task's host
 * slot; the host reassembles each full gradient and the plan's matrix optimizer (optimizer.h)
 * turns the group's gradients into updates (its state, e.g. Muon's momentum, is full size and
 * lives only there); ONE fused all-to-all sends every TP rank its shard of each update; every
 * TP rank applies weight decay and the update to its shard. The gather of g+1 is posted before the
 * compute of g and the scatter of g stays in flight during the compute of g+1 (two buffer sets;
 * one when the schedule has one group, since a run uses set j % 2 for its j-th group).
 *
 * On a plane of one rank (TP 1, or a fully sharded plan at DP 1) nothing leaves the rank: the
 * exchanges would copy each message to the same place of a buffer of the same layout. There the
 * pipeline has no exchange buffers at all: each pack map is composed with the map that reads
 * its message (compose_into), so the gradients are copied from the local shards straight into
 * full_g and the updates applied straight from full_u, element for element what the exchanges
 * would have delivered (the same bits). There, with an optimizer that updates in place
 * (update_in_place: Muon), full_u is full_g: one buffer instead of two.
 *
 * Under `sc` every TP rank all-gathers the shards of every task of the group and computes every
 * update itself; nothing is scattered.
 *
 * Replicated matrices (tp_dim null) are whole on every TP rank: the host uses its own copy of
 * the gradient (nothing gathered) and sends the whole update to every TP rank.
 *
 * A fully sharded plan (FSDP2, TP 1) runs the same pipeline over the stage's shard group (the
 * DP plane): a slot is a GPU of it, a rank's shard of a matrix is the rows FSDP2 gives it
 * (fsdp_shard.h; nothing is replicated), and the two all-to-alls of a group bring each whole
 * gradient to its owner and return the update's rows to every rank (docs/EXECUTOR.md, "The
 * fully sharded step").
 *
 * Everything moves by parts: a part is the region of the full matrix one slot computes: a
 * whole matrix (today's task), one block of it (a block task), or one member's slice of a
 * cooperative task's region (cz__task_parts). The holder of a part receives from every TP
 * rank the elements of its shard inside the part (cz__region_runs), hands it to the optimizer
 * (which keeps the part's state), and returns to every TP rank the elements of its shard inside
 * the part's update. The members of a cooperative task compute their slices together (Muon's
 * cooperative Newton-Schulz), all-reducing over a sub-plane of the TP plane that this file
 * splits at create time per width (color tp_rank / k) and lends the optimizer.
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
 * backend's copy_runs), the optimizer's batches (group_add) and the list of shard updates to
 * apply.
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
#include "fsdp_shard.h"
#include "ns_coop.h"
#include "optimizer.h"
#include "shard.h"

#include <stdlib.h>
#include <string.h>

bool cz__exec_exchange_one_rank = false;

bool cz__exec_plane_local(int n)
{
    return n == 1 && !cz__exec_exchange_one_rank;
}

/* Distinct cooperative widths of one schedule (widths divide TP: 32 is far more than any). */
#define CZ_MAX_COOP_WIDTHS 32

/* A part this rank holds: where it lives in full_g / full_u. */
typedef struct hpart {
    cz_exec_part x;
    const cz_plan_param *p;
    int64_t off, numel;
} hpart;

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
    int64_t scatter_n;     /* elements I send in the scatter (under sc: my shard of each) */
    cz_runs *gather_pack;  /* G -> gather send */
    cz_runs *unpack_recv;  /* gather recv -> the parts' gradients in full_g */
    cz_runs *unpack_local; /* G -> the gradients of the replicated parts I hold */
    cz_runs *scatter_pack; /* the parts' updates -> scatter send (sc: my shard of each) */
    cz_runs *apply;        /* (my shard, update) pairs from scatter recv (sc: scatter send) */
    cz_runs **apply_part;  /* the same per part (NULL: none of my shard), applied one by one
                              when the parts' parameters have rates of their own */
    hpart *hosted;         /* the parts I hold, in order */
    int nhosted;
    cz_opt_group *og; /* the matrix optimizer's layout of the parts I hold */
    /* cz__exec_group_ready: the same on every rank of the plane. */
    int64_t ready;
} pgroup;

/* What a pipeline works with, lent by the executor at create: the plan, the compute backend,
 * the matrix optimizer, where each parameter's local shard starts in the flat buffers, the
 * per-parameter rates, and the step count (the step a run belongs to is *steps + 1). The
 * pipeline reads nothing else of the executor. */
typedef struct cz_pipeline_ctx {
    const cz_plan *plan;
    cz_compute *compute;
    cz_optim *opt;
    const int64_t *param_off;
    const cz_exec_rates *rates;
    const int64_t *steps;
} cz_pipeline_ctx;

/* One pipeline: the micro-groups of one schedule over the plane of the group that splits its
 * parameters (today the DP rank's schedule over the TP plane). Everything below reads the
 * group's size, this rank's place in it and the plane from here, never from the executor. */
struct cz_pipeline {
    cz_pipeline_ctx cx;
    const cz_rank_schedule *rs;
    cz_plane *plane; /* the TP plane */
    int tp, tp_rank; /* its size and this rank's place */
    bool sc;         /* every rank computes every task (synchronous compute) */
    /* A fully sharded plan's: the plane is the stage's shard group (the DP plane at TP 1), a
     * slot is a GPU of it, and a rank's shard of a matrix is its FSDP2 rows (fsdp_shard.h). */
    bool fsdp;
    /* The plane has one rank: no exchanges and no exchange buffers (the header). */
    bool local;
    int ngroups;
    pgroup *groups;
    /* The groups by readiness (ready ascending, then id): the order of early updates, the same
     * on every rank of the plane. `done`: how many of them this step's early updates ran. */
    int *order;
    int done;
    int64_t gather_send_len, gather_recv_len, scatter_send_len, scatter_recv_len, full_n;
    float *gather_send[2], *gather_recv[2], *scatter_send[2], *scatter_recv[2];
    float *full_g, *full_u;
    cz_comm_req *gather_req[2], *scatter_req[2];
    /* Recorded after a gather (scatter) buffer is packed; its send waits for it. */
    cz_event *gather_packed[2], *scatter_packed[2];
    cz_event *coop_ready; /* recorded before each cooperative all-reduce */
    /* The sub-planes of the cooperative widths (split from the TP plane at create). */
    int nwidths;
    int widths[CZ_MAX_COOP_WIDTHS];
    cz_plane wplanes[CZ_MAX_COOP_WIDTHS];
    /* Per sub-plane, one request per Gram panel. */
    cz_comm_req *wreqs[CZ_MAX_COOP_WIDTHS][CZ_COOP_MAX_PANELS];
    /* Bytes this rank has sent to the plane's other ranks in gathers and scatters since
     * create (cz_exec_wire.tp_bytes): what the simulator charges the micro-group exchanges. */
    int64_t sent_bytes;
};

/* Whole on every rank of the plane: a TP-replicated matrix (never under FSDP, which shards
 * every parameter over the shard group). */
static bool replicated(const struct cz_pipeline *pp, const cz_plan_param *p)
{
    return !pp->fsdp && p->def.tp_dim < 0;
}

/* Elements of rank r's shard of p inside b, and the runs between it and a message: the plan's
 * TP shard, or under FSDP the rank's FSDP2 rows (the same contract, fsdp_shard.h). */
static int64_t shard_in(const struct cz_pipeline *pp, const cz_plan_param *p, int r,
                        const cz_block *b)
{
    return pp->fsdp ? cz__fsdp_region_numel(pp->cx.plan, p, r, b)
                    : cz__shard_region_numel(p, pp->tp, r, b);
}

static int region_runs(const struct cz_pipeline *pp, const cz_plan_param *p, int r,
                       const cz_block *b, int64_t msg_off, int64_t other_off, int other_is_shard,
                       int to_msg, cz_run_list *l, cz_error *err)
{
    if (pp->fsdp)
        return cz__fsdp_region_runs(pp->cx.plan, p, r, b, msg_off, other_off, other_is_shard,
                                    to_msg, l, err);
    return cz__region_runs(p, pp->tp, r, b, msg_off, other_off, other_is_shard, to_msg, l, err);
}

static bool holds(struct cz_pipeline *pp, const cz_exec_part *x)
{
    return pp->sc || x->slot == pp->tp_rank;
}

static int64_t part_numel(const cz_exec_part *x)
{
    return x->part.rows * x->part.cols;
}

/* Whether rank r of the plane sends its shard of p to p's holders: every rank's shard of a
 * TP-sharded matrix; none of a replicated one, which its holders have; under FSDP, of a
 * TP-replicated matrix only the TP rank 0 of each DP rank (cz__fsdp_gathers_from). */
static bool gathers_from(const struct cz_pipeline *pp, const cz_plan_param *p, int r)
{
    return pp->fsdp ? cz__fsdp_gathers_from(pp->cx.plan, p, r) : !replicated(pp, p);
}

/* Elements of rank r's shard in part x: gathered (where gathers_from) and scattered. */
static int64_t gcount(struct cz_pipeline *pp, const cz_exec_part *x, int r)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    const cz_plan_param *p = &cx->plan->params[x->param];
    return gathers_from(pp, p, r) ? shard_in(pp, p, r, &x->part) : 0;
}

static int64_t scount(struct cz_pipeline *pp, const cz_exec_part *x, int r)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    return shard_in(pp, &cx->plan->params[x->param], r, &x->part);
}

static int list_parts(struct cz_pipeline *pp, pgroup *pg, cz_error *err)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    const cz_plan_group *g = pg->g;
    int n = 0;
    for (int t = 0; t < g->ntasks; t++)
        n += cz_group_task_width(g, t);
    pg->parts = cz__exec_calloc((size_t)n + 1, sizeof *pg->parts);
    if (!pg->parts)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
    for (int t = 0; t < g->ntasks; t++)
        pg->nparts += cz__task_parts(cx->plan, g, t, pg->parts + pg->nparts, n - pg->nparts);
    return CZ_OK;
}

static int layout_counts(struct cz_pipeline *pp, pgroup *pg, cz_error *err)
{
    int tp = pp->tp, me = pp->tp_rank, rc;
    if ((rc = list_parts(pp, pg, err)) != CZ_OK)
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
        if (pp->sc) {
            /* Every rank all-gathers its shard inside every part and applies its own. */
            pg->gather_n += gcount(pp, x, me);
            sc_send += scount(pp, x, me);
            for (int r = 0; r < tp; r++)
                pg->gather_recv_counts[r] += gcount(pp, x, r);
        } else {
            pg->gather_send_counts[x->slot] += gcount(pp, x, me);
            pg->scatter_recv_counts[x->slot] += scount(pp, x, me);
            if (x->slot == me)
                for (int r = 0; r < tp; r++) {
                    pg->gather_recv_counts[r] += gcount(pp, x, r);
                    pg->scatter_send_counts[r] += scount(pp, x, r);
                }
        }
        if (holds(pp, x)) {
            pg->nhosted++;
            full += part_numel(x);
        }
    }
    int64_t gs = 0, gr = 0, ss = 0, sr = 0;
    for (int r = 0; r < tp; r++) {
        /* iall_gather takes one count from every rank: the parts must give each rank as much
         * (whole matrices and blocks do; plan_check refuses cooperative tasks under sc). */
        if (pp->sc && pg->gather_recv_counts[r] != pg->gather_n)
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
    if (!pp->sc)
        pg->gather_n = gs;
    if (pg->gather_n > pp->gather_send_len)
        pp->gather_send_len = pg->gather_n;
    if (gr > pp->gather_recv_len)
        pp->gather_recv_len = gr;
    /* Under sc the scatter-send buffer holds my shard of each update, to apply from. */
    pg->scatter_n = pp->sc ? sc_send : ss;
    if (pg->scatter_n > pp->scatter_send_len)
        pp->scatter_send_len = pg->scatter_n;
    if (sr > pp->scatter_recv_len)
        pp->scatter_recv_len = sr;
    if (full > pp->full_n)
        pp->full_n = full;
    return CZ_OK;
}

/* Turns a host run list into the backend's form and releases the list. */
static int make_runs(const cz_pipeline_ctx *cx, cz_run_list *l, cz_runs **out, cz_error *err)
{
    *out = cx->compute->ops->runs_create(cx->compute, l->v, l->n);
    size_t n = l->n;
    if (*out)
        cz__compute_note_runs(cx->compute, n);
    cz__run_list_free(l);
    return *out ? CZ_OK : cz__error_set(err, CZ_ENOMEM, "out of memory for %zu copy runs", n);
}

static int by_dst(const void *a, const void *b)
{
    const cz_copy_run *x = a, *y = b;
    return (x->dst > y->dst) - (x->dst < y->dst);
}

/* A pack map's list l (message <- source): the backend's runs *out, or on a plane of one rank
 * kept in *via, sorted by message position, for compose_into (no exchange buffer to pack). */
static int pack_runs(struct cz_pipeline *pp, cz_run_list *l, cz_run_list *via, cz_runs **out,
                     cz_error *err)
{
    if (!pp->local)
        return make_runs(&pp->cx, l, out, err);
    cz__run_list_free(via);
    *via = *l;
    *l = (cz_run_list){0};
    if (via->n > 1)
        qsort(via->v, via->n, sizeof *via->v, by_dst);
    return CZ_OK;
}

/* On a plane of one rank: replaces l (destination <- message) with the runs destination <-
 * source through via (message <- source, sorted by message position), what the pack, the
 * exchange with itself (the same layout on both sides: layout_maps checks the counts) and l
 * would copy, in one map. Every message element l reads is one that via writes. */
static int compose_into(const cz_run_list *via, cz_run_list *l, cz_error *err)
{
    cz_run_list out = {0};
    int rc = CZ_OK;
    for (size_t i = 0; i < l->n && rc == CZ_OK; i++) {
        int64_t d = l->v[i].dst, m = l->v[i].src, len = l->v[i].len;
        size_t lo = 0, hi = via->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (via->v[mid].dst <= m)
                lo = mid + 1;
            else
                hi = mid;
        }
        /* via->v[lo - 1] is the last run starting at or before m; the next ones follow on. */
        for (size_t k = lo; len > 0 && rc == CZ_OK; k++) {
            const cz_copy_run *v = k > 0 && k - 1 < via->n ? &via->v[k - 1] : NULL;
            if (!v || m < v->dst || m >= v->dst + v->len) {
                rc = cz__error_set(err, CZ_EINTERNAL,
                                   "a one-rank micro-group exchange reads message element %lld, "
                                   "which its pack does not write",
                                   (long long)m);
                break;
            }
            int64_t take = v->dst + v->len - m < len ? v->dst + v->len - m : len;
            rc = cz__run_list_add(&out, d, v->src + (m - v->dst), take, err);
            d += take, m += take, len -= take;
        }
    }
    cz__run_list_free(l);
    if (rc != CZ_OK)
        cz__run_list_free(&out);
    *l = out;
    return rc;
}

/* Gather send: per destination slot, my shard inside each non-replicated part it holds (under
 * sc: inside every part, to everyone). */
static int map_gather_send(struct cz_pipeline *pp, pgroup *pg, cz_run_list *l, cz_run_list *via,
                           cz_error *err)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    int tp = pp->tp, me = pp->tp_rank, rc;
    int64_t pos = 0;
    for (int s = 0; s < (pp->sc ? 1 : tp); s++)
        for (int i = 0; i < pg->nparts; i++) {
            const cz_exec_part *x = &pg->parts[i];
            const cz_plan_param *p = &cx->plan->params[x->param];
            if (!gathers_from(pp, p, me) || (!pp->sc && x->slot != s))
                continue;
            if ((rc = region_runs(pp, p, me, &x->part, pos, cx->param_off[p->id], 1, 1, l, err)) !=
                CZ_OK)
                return rc;
            pos += gcount(pp, x, me);
        }
    /* The runs fill exactly the send buffer the counts laid out. */
    CZ_ASSERT(pos == pg->gather_n, err);
    return pack_runs(pp, l, via, &pg->gather_pack, err);
}

/* The parts I hold and their place in full_g/full_u. */
static int list_hosted(struct cz_pipeline *pp, pgroup *pg, cz_error *err)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    size_t cap = (size_t)pg->nhosted + 1;
    int64_t fpos = 0;
    pg->nhosted = 0; /* counted by layout_counts; listed again here */
    if (!(pg->hosted = cz__exec_calloc(cap, sizeof *pg->hosted)))
        return cz__error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
    for (int i = 0; i < pg->nparts; i++) {
        const cz_exec_part *x = &pg->parts[i];
        if (!holds(pp, x))
            continue;
        hpart *h = &pg->hosted[pg->nhosted++];
        h->x = *x;
        h->p = &cx->plan->params[x->param];
        h->off = fpos;
        h->numel = part_numel(x);
        fpos += h->numel;
    }
    CZ_ASSERT((size_t)pg->nhosted < cap && fpos <= pp->full_n, err);
    return CZ_OK;
}

/* The gradients: per source rank its shard inside each part I hold, then the replicated parts
 * from my own copy (on a plane of one rank all from my own copy, through via). */
static int map_unpack(struct cz_pipeline *pp, pgroup *pg, cz_run_list *l, cz_run_list *via,
                      cz_error *err)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    int tp = pp->tp, me = pp->tp_rank, rc;
    for (int r = 0; r < tp; r++) {
        int64_t rpos = pg->gather_recv_displs[r];
        for (int k = 0; k < pg->nhosted; k++) {
            const hpart *h = &pg->hosted[k];
            if (!gathers_from(pp, h->p, r))
                continue;
            if ((rc = region_runs(pp, h->p, r, &h->x.part, rpos, h->off, 0, 0, l, err)) != CZ_OK)
                return rc;
            rpos += gcount(pp, &h->x, r);
        }
        CZ_ASSERT(rpos == pg->gather_recv_displs[r] + pg->gather_recv_counts[r], err);
    }
    if ((rc = pp->local ? compose_into(via, l, err) : make_runs(cx, l, &pg->unpack_recv, err)) !=
        CZ_OK)
        return rc;
    for (int k = 0; k < pg->nhosted; k++) {
        const hpart *h = &pg->hosted[k];
        /* The message of a replicated part is the part itself. */
        if (replicated(pp, h->p) &&
            (rc = region_runs(pp, h->p, me, &h->x.part, h->off, cx->param_off[h->p->id], 1, 1, l,
                              err)) != CZ_OK)
            return rc;
    }
    return make_runs(cx, l, &pg->unpack_local, err);
}

/* Scatter send: per destination TP rank, its shard inside the update of every part I hold
 * (under sc only my own shard, applied from there). */
static int map_scatter_send(struct cz_pipeline *pp, pgroup *pg, cz_run_list *l, cz_run_list *via,
                            cz_error *err)
{
    int tp = pp->tp, me = pp->tp_rank, rc;
    for (int r = 0; r < tp; r++) {
        if (pp->sc && r != me)
            continue;
        int64_t spos = pp->sc ? 0 : pg->scatter_send_displs[r];
        for (int k = 0; k < pg->nhosted; k++) {
            const hpart *h = &pg->hosted[k];
            if ((rc = region_runs(pp, h->p, r, &h->x.part, spos, h->off, 0, 1, l, err)) != CZ_OK)
                return rc;
            spos += scount(pp, &h->x, r);
        }
        CZ_ASSERT(pp->sc ? spos == pg->scatter_n
                         : spos == pg->scatter_send_displs[r] + pg->scatter_send_counts[r],
                  err);
    }
    return pack_runs(pp, l, via, &pg->scatter_pack, err);
}

/* Shard updates: from the scatter's receive buffer, per source slot its parts in order (under
 * sc from the scatter-send buffer, every part in order; on a plane of one rank from full_u,
 * through via). */
/* map_apply's part i (x) of the group: its runs of (my shard, update) pairs from upos on, added
 * to the group's list l and kept alone in apply_part[i]. */
static int map_apply_part(struct cz_pipeline *pp, pgroup *pg, cz_run_list *l,
                          const cz_run_list *via, int i, int64_t upos, cz_error *err)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    const cz_exec_part *x = &pg->parts[i];
    const cz_plan_param *p = &cx->plan->params[x->param];
    cz_run_list lp = {0};
    int rc;
    if ((rc = region_runs(pp, p, pp->tp_rank, &x->part, upos, cx->param_off[p->id], 1, 0, &lp,
                          err)) != CZ_OK ||
        (pp->local && (rc = compose_into(via, &lp, err)) != CZ_OK))
        goto done;
    for (size_t k = 0; k < lp.n; k++)
        if ((rc = cz__run_list_add(l, lp.v[k].dst, lp.v[k].src, lp.v[k].len, err)) != CZ_OK)
            goto done;
    if (lp.n > 0)
        return make_runs(cx, &lp, &pg->apply_part[i], err); /* takes lp */
done:
    cz__run_list_free(&lp);
    return rc;
}

static int map_apply(struct cz_pipeline *pp, pgroup *pg, cz_run_list *l, const cz_run_list *via,
                     cz_error *err)
{
    int tp = pp->tp, me = pp->tp_rank, rc;
    pg->apply_part = cz__exec_calloc((size_t)(pg->nparts > 0 ? pg->nparts : 1), sizeof(cz_runs *));
    if (!pg->apply_part)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
    for (int s = 0; s < (pp->sc ? 1 : tp); s++) {
        int64_t upos = pp->sc ? 0 : pg->scatter_recv_displs[s];
        for (int i = 0; i < pg->nparts; i++) {
            const cz_exec_part *x = &pg->parts[i];
            if (!pp->sc && x->slot != s)
                continue;
            if ((rc = map_apply_part(pp, pg, l, via, i, upos, err)) != CZ_OK)
                return rc;
            upos += scount(pp, x, me);
        }
        CZ_ASSERT(pp->sc ? upos == pg->scatter_n
                         : upos == pg->scatter_recv_displs[s] + pg->scatter_recv_counts[s],
                  err);
    }
    return make_runs(&pp->cx, l, &pg->apply, err);
}

/* The index maps and held parts of one group. On a plane of one rank each exchange is with
 * this rank itself, from displacement 0 to displacement 0: the composed maps are what it would
 * deliver when its send and receive counts agree. */
static int layout_maps(struct cz_pipeline *pp, pgroup *pg, cz_error *err)
{
    cz_run_list l = {0}, via = {0};
    int rc;
    if (pp->local)
        CZ_ASSERT(pg->gather_recv_counts[0] == pg->gather_n &&
                      (pp->sc || pg->scatter_send_counts[0] == pg->scatter_recv_counts[0]),
                  err);
    if ((rc = map_gather_send(pp, pg, &l, &via, err)) != CZ_OK ||
        (rc = list_hosted(pp, pg, err)) != CZ_OK ||
        (rc = map_unpack(pp, pg, &l, &via, err)) != CZ_OK ||
        (rc = map_scatter_send(pp, pg, &l, &via, err)) != CZ_OK ||
        (rc = map_apply(pp, pg, &l, &via, err)) != CZ_OK)
        goto done;
done:
    cz__run_list_free(&l);
    cz__run_list_free(&via);
    return rc;
}

/* Hands the matrix optimizer the parts I hold in group pg, with where their gradients and
 * updates live in full_g/full_u, and the cooperative sub-planes. */
static int add_to_optimizer(struct cz_pipeline *pp, pgroup *pg, cz_error *err)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    cz_optim *o = cx->opt;
    cz_coop_planes cp = {pp->nwidths, pp->widths, pp->wplanes, pp->wreqs, pp->coop_ready};
    cz_opt_part *parts = cz__exec_calloc((size_t)pg->nhosted + 1, sizeof *parts);
    int rc;
    if (!parts)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
    for (int k = 0; k < pg->nhosted; k++) {
        const hpart *h = &pg->hosted[k];
        parts[k] = (cz_opt_part){h->x, h->p, pp->full_g + h->off, pp->full_u + h->off};
    }
    rc = o->ops->group_add(o, parts, pg->nhosted, &cp, &pg->og, err);
    cz__exec_free(parts);
    return rc;
}

static float *falloc(const cz_pipeline_ctx *cx, cz_exec_mem_kind kind, int64_t n)
{
    return cz__compute_alloc(cx->compute, kind, (size_t)(n + 1) * sizeof(float));
}

/* One sub-plane per cooperative width of my DP rank's schedule: the TP plane split into the
 * aligned k-slot sets (color tp_rank / k). Every TP rank of the group has the same schedule,
 * so every one makes the same splits in the same order. */
static int open_width_planes(struct cz_pipeline *pp, cz_error *err)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    const cz_rank_schedule *rs = pp->rs;
    for (int g = 0; g < rs->ngroups; g++)
        for (int t = 0; t < rs->groups[g].ntasks; t++) {
            int k = cz_group_task_width(&rs->groups[g], t), i = 0;
            /* A TP-local task's members never talk to each other: no sub-plane. */
            if (k < 2 || cz_task_is_local(&cx->plan->params[rs->groups[g].task_param[t]].def, k))
                continue;
            while (i < pp->nwidths && pp->widths[i] != k)
                i++;
            if (i < pp->nwidths)
                continue;
            if (pp->nwidths == CZ_MAX_COOP_WIDTHS)
                return cz__error_set(err, CZ_EUNSUPPORTED,
                                     "the plan uses more than %d cooperative widths", pp->nwidths);
            int rc = pp->plane->ops->split(pp->plane, pp->tp_rank / k, pp->tp_rank % k,
                                           &pp->wplanes[pp->nwidths], err);
            if (rc)
                return rc;
            cz_plane *wp = &pp->wplanes[pp->nwidths];
            wp->compute = cx->compute;
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

int64_t cz__exec_group_ready(const cz_plan *plan, const cz_plan_group *g)
{
    int64_t ready = -1;
    for (int t = 0; t < g->ntasks; t++)
        if (plan->params[g->task_param[t]].bucket > ready)
            ready = plan->params[g->task_param[t]].bucket;
    return ready;
}

/* Each group's readiness and the groups in readiness order (a stable insertion sort: groups
 * are few). */
static int order_by_readiness(struct cz_pipeline *pp, cz_error *err)
{
    const cz_plan *plan = pp->cx.plan;
    pp->order = cz__exec_calloc(pp->ngroups > 0 ? (size_t)pp->ngroups : 1, sizeof *pp->order);
    if (!pp->order)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the pipeline");
    for (int g = 0; g < pp->ngroups; g++) {
        pgroup *pg = &pp->groups[g];
        pg->ready = cz__exec_group_ready(plan, pg->g);
        int at = g;
        for (; at > 0 && pp->groups[pp->order[at - 1]].ready > pg->ready; at--)
            pp->order[at] = pp->order[at - 1];
        pp->order[at] = g;
    }
    return CZ_OK;
}

/* The counts and displacements of every group's exchanges, which size the buffers. */
static int layout_groups(struct cz_pipeline *pp, cz_error *err)
{
    const cz_rank_schedule *rs = pp->rs;
    int rc;
    pp->ngroups = rs->ngroups;
    pp->groups = cz__exec_calloc(rs->ngroups > 0 ? (size_t)rs->ngroups : 1, sizeof *pp->groups);
    if (!pp->groups)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the pipeline");
    for (int g = 0; g < rs->ngroups; g++) {
        pp->groups[g].g = &rs->groups[g];
        if ((rc = layout_counts(pp, &pp->groups[g], err)) != CZ_OK)
            return rc;
    }
    return order_by_readiness(pp, err);
}

/* The pipeline's backend buffers: full_g and full_u, and the sets of exchange buffers it uses:
 * none on a plane of one rank, one when the schedule has a single group (a run's j-th group
 * uses set j % 2, and a run has at most ngroups groups), else two. pipeline_buffers lists them
 * (where each pointer goes, its kind and floats), so that pipeline_open allocates and
 * cz__exec_pipeline_probe counts the same list. */
#define PIPE_MAX_BUFS 10
typedef struct pipe_buf {
    float **at;
    cz_exec_mem_kind kind;
    int64_t n;
} pipe_buf;

/* On a plane of one rank with an optimizer that updates in place (update_in_place), full_u is
 * full_g: one buffer for the gradients and the updates (the apply maps read the updates from
 * it). */
static bool one_full(const struct cz_pipeline *pp)
{
    return pp->local && cz__optimizer_updates_in_place(pp->cx.plan);
}

static int pipeline_buffers(struct cz_pipeline *pp, pipe_buf *out)
{
    int n = 0, sets = pp->local ? 0 : pp->ngroups > 1 ? 2 : 1;
    out[n++] = (pipe_buf){&pp->full_g, CZ_EXEC_MEM_FULL, pp->full_n};
    if (!one_full(pp)) /* else full_u is set to full_g once it is allocated */
        out[n++] = (pipe_buf){&pp->full_u, CZ_EXEC_MEM_FULL, pp->full_n};
    for (int k = 0; k < sets; k++) {
        out[n++] = (pipe_buf){&pp->gather_send[k], CZ_EXEC_MEM_EXCHANGE, pp->gather_send_len};
        out[n++] = (pipe_buf){&pp->gather_recv[k], CZ_EXEC_MEM_EXCHANGE, pp->gather_recv_len};
        out[n++] = (pipe_buf){&pp->scatter_send[k], CZ_EXEC_MEM_EXCHANGE, pp->scatter_send_len};
        out[n++] = (pipe_buf){&pp->scatter_recv[k], CZ_EXEC_MEM_EXCHANGE, pp->scatter_recv_len};
    }
    return n;
}

/* The buffers of pipeline_buffers, each n + 1 floats (falloc). */
static int alloc_buffers(struct cz_pipeline *pp, cz_error *err)
{
    pipe_buf b[PIPE_MAX_BUFS];
    int n = pipeline_buffers(pp, b);
    for (int i = 0; i < n; i++)
        if (!(*b[i].at = falloc(&pp->cx, b[i].kind, b[i].n)))
            return cz__error_set(
                err, CZ_ENOMEM, "out of memory for the pipeline's %s buffers (%lld elements)",
                b[i].kind == CZ_EXEC_MEM_FULL ? "full-gradient and update" : "exchange",
                (long long)b[i].n);
    if (one_full(pp))
        pp->full_u = pp->full_g;
    return CZ_OK;
}

/* The requests of both buffer sets and the events their sends wait for (made whether or not a
 * set has buffers: the runs wait on and progress both sets' requests, idle ones included). */
static int alloc_exchanges(struct cz_pipeline *pp, cz_error *err)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    cz_compute *c = cx->compute;
    for (int k = 0; k < 2; k++) {
        pp->gather_req[k] = pp->plane->ops->req_create(pp->plane);
        pp->scatter_req[k] = pp->plane->ops->req_create(pp->plane);
        pp->gather_packed[k] = c->ops->event_create(c);
        pp->scatter_packed[k] = c->ops->event_create(c);
        if (!pp->gather_req[k] || !pp->scatter_req[k] || !pp->gather_packed[k] ||
            !pp->scatter_packed[k])
            return cz__error_set(err, CZ_ENOMEM, "out of memory for requests and events");
    }
    return CZ_OK;
}

/* A pipeline of schedule rs over plane (tp ranks, this one tp_rank); *out is set before
 * anything can fail, so that the caller's teardown frees what was made. */
static int pipeline_open(cz_executor *ex, const cz_rank_schedule *rs, cz_plane *plane, int tp,
                         int tp_rank, bool sc, struct cz_pipeline **out, cz_error *err)
{
    struct cz_pipeline *pp = cz__exec_calloc(1, sizeof *pp);
    int rc;
    if (!pp)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the pipeline");
    *out = pp;
    *pp = (struct cz_pipeline){
        .cx = {ex->plan, &ex->compute, &ex->matrix_opt, ex->held.param_off, &ex->rates, &ex->steps},
        .rs = rs,
        .plane = plane,
        .tp = tp,
        .tp_rank = tp_rank,
        .sc = sc,
        .fsdp = cz_plan_is_fsdp(ex->plan),
        .local = cz__exec_plane_local(tp)};
    /* The splits are collective: first, before anything a rank could fail alone. */
    if ((rc = open_width_planes(pp, err)) != CZ_OK || (rc = layout_groups(pp, err)) != CZ_OK)
        return rc;
    for (int g = 0; g < pp->ngroups; g++)
        if ((rc = layout_maps(pp, &pp->groups[g], err)) != CZ_OK)
            return rc;
    /* The buffers (full_g/full_u among them) and the event before the optimizer: its parts
     * point into them. */
    if ((rc = alloc_buffers(pp, err)) != CZ_OK)
        return rc;
    pp->coop_ready = pp->cx.compute->ops->event_create(pp->cx.compute);
    if (!pp->coop_ready)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for requests and events");
    for (int g = 0; g < pp->ngroups; g++)
        if ((rc = add_to_optimizer(pp, &pp->groups[g], err)) != CZ_OK)
            return rc;
    return alloc_exchanges(pp, err);
}

static void pipeline_close(struct cz_pipeline *pp);

int cz__exec_pipeline_probe(const cz_plan *plan, const cz_rank_schedule *rs, int tp, int tp_rank,
                            bool sc, const int64_t *param_off, cz_compute *c,
                            cz_exec_pipeline_sizes *out, cz_error *err)
{
    struct cz_pipeline *pp = cz__exec_calloc(1, sizeof *pp);
    int rc = CZ_OK;
    if (!pp)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the pipeline");
    *pp = (struct cz_pipeline){.cx = {plan, c, NULL, param_off, NULL, NULL},
                               .rs = rs,
                               .tp = tp,
                               .tp_rank = tp_rank,
                               .sc = sc,
                               .local = cz__exec_plane_local(tp)};
    /* The same layouts and index maps as pipeline_open, through c's runs_create, and its
     * buffers counted into c's record (not allocated); no plane, no optimizer. */
    if ((rc = layout_groups(pp, err)) != CZ_OK)
        goto done;
    pipe_buf b[PIPE_MAX_BUFS];
    for (int i = 0, n = pipeline_buffers(pp, b); i < n; i++)
        c->mem[b[i].kind] += (b[i].n + 1) * (int64_t)sizeof(float);
    cz_exec_pipeline_sizes z = {0};
    for (int g = 0; g < pp->ngroups; g++) {
        pgroup *pg = &pp->groups[g];
        if ((rc = layout_maps(pp, pg, err)) != CZ_OK)
            goto done;
        /* On a plane of one rank nothing is packed: the unpack and apply maps read the
         * sources themselves. */
        z.gather_pack += pp->local ? 0 : pg->gather_n;
        z.scatter_pack += pp->local ? 0 : pg->scatter_n;
        for (int r = 0; r < tp; r++) {
            z.unpack += pg->gather_recv_counts[r];
            z.apply += sc ? 0 : pg->scatter_recv_counts[r];
        }
        z.apply += sc ? pg->scatter_n : 0;
        z.nhosted += pg->nhosted;
        for (int k = 0; k < pg->nhosted; k++) {
            z.hosted += pg->hosted[k].numel;
            z.unpack += replicated(pp, pg->hosted[k].p) ? pg->hosted[k].numel : 0;
        }
    }
    if (out)
        *out = z;
done:
    pipeline_close(pp);
    return rc;
}

int cz__exec_pipeline_init(cz_executor *ex, cz_error *err)
{
    int rc;
    /* A fully sharded plan's micro-groups span the stage's shard group, whose GPU k is slot k
     * (the shard plane: the DP plane at TP 1). */
    if (cz_plan_is_fsdp(ex->plan)) {
        cz_plane *sg = ex->grid.tp == 1 ? &ex->planes.dp : &ex->planes.shard;
        return pipeline_open(ex, ex->schedule, sg, sg->size, sg->rank, false, &ex->pipe, err);
    }
    if ((rc = pipeline_open(ex, ex->schedule, &ex->planes.tp, ex->grid.tp, ex->grid.tp_rank,
                            ex->grid.sc, &ex->pipe, err)) != CZ_OK)
        return rc;
    /* An expert rank's micro-groups run over its ETP plane, after the DP rank's. */
    if (!ex->grid.experts)
        return CZ_OK;
    return pipeline_open(ex, ex->expert_schedule, &ex->planes.etp, ex->grid.etp, ex->grid.etp_rank,
                         ex->grid.sc, &ex->epipe, err);
}

static void pipeline_close(struct cz_pipeline *pp)
{
    if (!pp)
        return;
    cz_compute *c = pp->cx.compute;
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
        for (int i = 0; pg->apply_part && i < pg->nparts; i++)
            if (pg->apply_part[i])
                c->ops->runs_free(c, pg->apply_part[i]);
        cz__exec_free(pg->apply_part);
        cz__exec_free(pg->parts);
        cz__exec_free(pg->hosted);
    }
    cz__exec_free(pp->groups);
    cz__exec_free(pp->order);
    /* Requests first: one still in flight (a step that failed between a post and its wait)
     * completes in req_free, writing into the buffers released after it. */
    for (int k = 0; k < 2; k++) {
        if (pp->gather_req[k])
            pp->plane->ops->req_free(pp->plane, pp->gather_req[k]);
        if (pp->scatter_req[k])
            pp->plane->ops->req_free(pp->plane, pp->scatter_req[k]);
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
    float *bufs[] = {pp->gather_send[0],  pp->gather_send[1],
                     pp->gather_recv[0],  pp->gather_recv[1],
                     pp->scatter_send[0], pp->scatter_send[1],
                     pp->scatter_recv[0], pp->scatter_recv[1],
                     pp->full_g,          pp->full_u != pp->full_g ? pp->full_u : NULL};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        if (bufs[k])
            c->ops->release(c, bufs[k]);
    cz__exec_free(pp);
}

int64_t cz__exec_pipeline_sent(const struct cz_pipeline *pp)
{
    return pp ? pp->sent_bytes : 0;
}

void cz__exec_pipeline_free(cz_executor *ex)
{
    pipeline_close(ex->pipe);
    pipeline_close(ex->epipe);
    ex->pipe = ex->epipe = NULL;
}

/* Posts one all-to-all as a group of sends and receives, completed through req, adding what
 * goes to the other ranks to the pipeline's count. The exchanges are fp32 whatever the job's
 * dtype (docs/EXECUTOR.md, "Micro-group exchanges stay fp32"). */
static int post_exchange(struct cz_pipeline *pp, cz_comm_req *req, cz_event *after,
                         const float *send, const int64_t *sc, const int64_t *sd, float *recv,
                         const int64_t *rc, const int64_t *rd, cz_error *err)
{
    cz_plane *pl = pp->plane;
    int st = pl->ops->group_start(pl, req, after, err);
    if (st)
        return st;
    for (int r = 0; r < pl->size; r++) {
        pl->ops->send(pl, req, send + sd[r], (size_t)sc[r], CZ_DTYPE_FP32, r);
        pl->ops->recv(pl, req, recv + rd[r], (size_t)rc[r], CZ_DTYPE_FP32, r);
        if (r != pl->rank)
            pp->sent_bytes += sc[r] * (int64_t)sizeof(float);
    }
    return pl->ops->group_end(pl, req, err);
}

/* Packs my gradient shards of group gi into buffer set k and posts its gather. */
static int post_gather(struct cz_pipeline *pp, int gi, int k, const float *G, cz_error *err)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    pgroup *pg = &pp->groups[gi];
    float *send = pp->gather_send[k];
    cz_event *packed = pp->gather_packed[k];
    cx->compute->ops->copy_runs(cx->compute, send, G, pg->gather_pack);
    cx->compute->ops->event_record(cx->compute, packed);
    if (pp->sc) {
        /* Every other rank receives my shards: (tp - 1) copies of them leave this rank, in a
         * ring or not. */
        pp->sent_bytes += pg->gather_n * (int64_t)sizeof(float) * (pp->tp - 1);
        return pp->plane->ops->iall_gather(pp->plane, send, (size_t)pg->gather_n,
                                           pp->gather_recv[k], CZ_DTYPE_FP32, packed,
                                           pp->gather_req[k], err);
    }
    return post_exchange(pp, pp->gather_req[k], packed, send, pg->gather_send_counts,
                         pg->gather_send_displs, pp->gather_recv[k], pg->gather_recv_counts,
                         pg->gather_recv_displs, err);
}

/* Keeps the next group's gather and the previous group's scatter (both in the other buffer set
 * than the group computing, k) moving while computing. */
typedef struct progress_ctx {
    struct cz_pipeline *pp;
    int k;
} progress_ctx;

static void progress_inflight(void *arg)
{
    progress_ctx *pc = arg;
    struct cz_pipeline *pp = pc->pp;
    cz_plane *tc = pp->plane;
    tc->ops->progress(tc, pp->gather_req[1 - pc->k]);
    tc->ops->progress(tc, pp->scatter_req[1 - pc->k]);
}

/* Applies my shard updates of group g from u (scatter recv, or scatter send under sc) with the
 * rate and weight decay the matrix optimizer gives for this step, or part by part with each
 * part's parameter's when they differ (parameter groups). */
static void apply_group(struct cz_pipeline *pp, const pgroup *pg, float *P, const float *u)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    const cz_optim *o = cx->opt;
    if (!o->param_rates || cx->rates->matrix_uniform) {
        cz_opt_rates r = o->ops->apply_rates(o, *cx->steps + 1);
        cx->compute->ops->apply_runs(cx->compute, P, u, pg->apply, r.lr, r.wd);
        return;
    }
    for (int i = 0; i < pg->nparts; i++)
        if (pg->apply_part[i]) {
            cz_opt_rates r = o->param_rates[pg->parts[i].param];
            cx->compute->ops->apply_runs(cx->compute, P, u, pg->apply_part[i], r.lr, r.wd);
        }
}

/* Host side of group gi (its gather in buffer set k): reassemble, the optimizer's update, and
 * either post the scatter or (sc) apply. */
static int compute_group(struct cz_pipeline *pp, int gi, int k, float *P, const float *G,
                         cz_error *err)
{
    const cz_pipeline_ctx *cx = &pp->cx;
    pgroup *pg = &pp->groups[gi];
    cz_compute *c = cx->compute;
    cz_optim *o = cx->opt;
    progress_ctx pc = {pp, k};
    cz_opt_progress pr = {progress_inflight, &pc};
    int rc;
    if (!pp->local)
        c->ops->copy_runs(c, pp->full_g, pp->gather_recv[k], pg->unpack_recv);
    c->ops->copy_runs(c, pp->full_g, G, pg->unpack_local);
    if ((rc = o->ops->step_group(o, pg->og, *cx->steps + 1, &pr, err)) != CZ_OK)
        return rc;
    /* On a plane of one rank the update is applied from full_u before the next group writes
     * it (the apply maps read it in place of the scatter's message). */
    if (pp->local) {
        apply_group(pp, pg, P, pp->full_u);
        return CZ_OK;
    }
    float *send = pp->scatter_send[k];
    c->ops->copy_runs(c, send, pp->full_u, pg->scatter_pack);
    if (pp->sc) {
        apply_group(pp, pg, P, send);
        return CZ_OK;
    }
    c->ops->event_record(c, pp->scatter_packed[k]);
    return post_exchange(pp, pp->scatter_req[k], pp->scatter_packed[k], send,
                         pg->scatter_send_counts, pg->scatter_send_displs, pp->scatter_recv[k],
                         pg->scatter_recv_counts, pg->scatter_recv_displs, err);
}

/* Waits for the scatter of group gi (buffer set k) and applies my update shards. */
static int finish_group(struct cz_pipeline *pp, int gi, int k, float *P, cz_error *err)
{
    int rc;
    if ((rc = pp->plane->ops->wait(pp->plane, pp->scatter_req[k], err)) != CZ_OK)
        return rc;
    apply_group(pp, &pp->groups[gi], P, pp->scatter_recv[k]);
    return CZ_OK;
}

static int group_at(const int *ids, int j)
{
    return ids ? ids[j] : j;
}

/* Runs n groups, group ids[j] the j-th (ids NULL: groups 0 .. n-1), overlapped as the header
 * says, group j in buffer set j % 2; every request is complete on return. The groups are
 * independent (each its own parameters and state), so any order gives the same bits. */
static int pipeline_run(struct cz_pipeline *pp, float *P, const float *G, const int *ids, int n,
                        cz_error *err)
{
    int rc = CZ_OK;
    if (n == 0)
        return CZ_OK;
    /* On a plane of one rank there is nothing to post: each group reads its gradients, is
     * computed and applied in turn. */
    for (int j = 0; pp->local && j < n; j++)
        if ((rc = compute_group(pp, group_at(ids, j), 0, P, G, err)) != CZ_OK)
            return rc;
    if (pp->local)
        return CZ_OK;
    if ((rc = post_gather(pp, group_at(ids, 0), 0, G, err)) != CZ_OK)
        goto done;
    for (int j = 0; j < n; j++)
        if ((j + 1 < n &&
             (rc = post_gather(pp, group_at(ids, j + 1), (j + 1) % 2, G, err)) != CZ_OK) ||
            (rc = pp->plane->ops->wait(pp->plane, pp->gather_req[j % 2], err)) != CZ_OK ||
            (rc = compute_group(pp, group_at(ids, j), j % 2, P, G, err)) != CZ_OK ||
            (!pp->sc && j > 0 &&
             (rc = finish_group(pp, group_at(ids, j - 1), (j - 1) % 2, P, err)) != CZ_OK))
            goto done;
    if (!pp->sc)
        rc = finish_group(pp, group_at(ids, n - 1), (n - 1) % 2, P, err);
done:
    if (rc != CZ_OK) {
        /* Leave no request in flight: a later step or free must not see a stale one. */
        cz_error tmp;
        for (int k = 0; k < 2; k++) {
            pp->plane->ops->wait(pp->plane, pp->gather_req[k], &tmp);
            pp->plane->ops->wait(pp->plane, pp->scatter_req[k], &tmp);
        }
    }
    return rc;
}

/* The groups of pp not yet run by this step's early updates, in readiness order; the next step
 * starts from the first again. */
static int pipeline_run_rest(struct cz_pipeline *pp, float *P, const float *G, cz_error *err)
{
    int from = pp->done;
    pp->done = 0;
    return pipeline_run(pp, P, G, pp->order + from, pp->ngroups - from, err);
}

int cz__exec_matrix_pipeline(cz_executor *ex, float *P, const float *G, bool rest, cz_error *err)
{
    cz_optim *o = &ex->matrix_opt;
    int rc;
    /* The optimizer's elementwise part of the update on my shards (Shampoo's weight decay into
     * its momentum) comes before any part's update is applied. */
    if (o->ops->step_shards &&
        (rc = o->ops->step_shards(o, P, G, ex->steps + 1, 0, INT64_MAX, err)) != CZ_OK)
        return rc;
    /* A bucket-wise step with early updates: what they left, in their order. */
    if (rest) {
        if ((rc = pipeline_run_rest(ex->pipe, P, G, err)) != CZ_OK)
            return rc;
        return ex->epipe ? pipeline_run_rest(ex->epipe, P, G, err) : CZ_OK;
    }
    if ((rc = pipeline_run(ex->pipe, P, G, NULL, ex->pipe->ngroups, err)) != CZ_OK)
        return rc;
    return ex->epipe ? pipeline_run(ex->epipe, P, G, NULL, ex->epipe->ngroups, err) : CZ_OK;
}

/* Early updates (bucket_step.c) ---------------------------------------------------------- */

static int64_t next_ready(const struct cz_pipeline *pp)
{
    return pp && pp->done < pp->ngroups ? pp->groups[pp->order[pp->done]].ready : INT64_MAX;
}

int64_t cz__exec_early_next(const cz_executor *ex)
{
    int64_t a = next_ready(ex->pipe), b = next_ready(ex->epipe);
    return a < b ? a : b;
}

/* The groups of pp, from the next not run, whose buckets are all at most `upto`. */
static int run_ready(struct cz_pipeline *pp, float *P, const float *G, int64_t upto, int *ran,
                     cz_error *err)
{
    int n = 0;
    while (pp->done + n < pp->ngroups && pp->groups[pp->order[pp->done + n]].ready <= upto)
        n++;
    int rc = pipeline_run(pp, P, G, pp->order + pp->done, n, err);
    pp->done += n;
    *ran += n;
    return rc;
}

int cz__exec_early_run(cz_executor *ex, float *P, const float *G, int64_t upto, int *ran,
                       cz_error *err)
{
    int rc = run_ready(ex->pipe, P, G, upto, ran, err);
    if (rc != CZ_OK || !ex->epipe)
        return rc;
    return run_ready(ex->epipe, P, G, upto, ran, err);
}

void cz__exec_early_reset(cz_executor *ex)
{
    ex->pipe->done = 0;
    if (ex->epipe)
        ex->epipe->done = 0;
}
