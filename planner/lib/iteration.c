/*
 * iteration.c — the training iteration around the optimizer step (docs/SIMULATOR.md, "The
 * iteration"): the forward/backward compute estimate of one parameter, and the event model of
 * an iteration whose optimizer step runs bucket by bucket under the last backward pass and
 * whose parameter all-gathers the next forward pass awaits bucket by bucket.
 */
#include "cz_analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double cz__iter_forward_flops(const cz_param_def *d, int64_t local_numel, int tp, double seq_len,
                              double micro_batch_size)
{
    /* Norms and biases are elementwise passes whose time is memory-bound and small beside the
     * matmuls; the embedding is a lookup. Neither is counted. */
    if (d->ndim != 2 || local_numel <= 0 || (d->name && strstr(d->name, "embedding")))
        return 0.0;
    double tokens = seq_len * micro_batch_size;
    double flops = 2.0 * (double)local_numel * tokens;
    if (d->name && strstr(d->name, "linear_qkv")) {
        /* Attention's scores (Q K^T) and weighted values (A V): 2 b s^2 d_q FLOPs each over
         * all heads, halved by the causal mask (FlashAttention skips the masked blocks).
         * d_q = heads x head dim: the Q block's rows when the fused matrix declares Q, K, V
         * as blocks, else the hidden size (its columns; true of every model whose heads
         * times head dim is the hidden size). The heads are split over TP. */
        double dq = d->block_dim == 0 && d->nblocks == 3 && d->block_sizes
                        ? (double)d->block_sizes[0]
                        : (double)d->shape[1];
        flops += 2.0 * micro_batch_size * seq_len * seq_len * dq / (tp > 0 ? tp : 1);
    }
    return flops;
}

/* ---- the overlapped iteration: a list schedule over one DP channel and, per DP rank, a
 * compute stream and a TP link ---------------------------------------------------------------- */

typedef struct it_item {
    int res;           /* 0: the DP channel; 1 + 2 d: rank d's compute; 2 + 2 d: its TP link;
                          1 + 2 D: none (the joins of deferred updates, of no duration) */
    int left;          /* dependencies not yet scheduled */
    int prio;          /* at equal start on one resource the higher goes first */
    double dur, ready; /* ready: the latest end of its dependencies (or its release) */
    double start, end;
} it_item;

typedef struct it_graph {
    it_item *it;
    int n, cap;
    int *from, *to; /* edge k: item to[k] waits for item from[k] */
    int nedges, ecap;
} it_graph;

static int it_add(it_graph *g, int res, double dur, double release)
{
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 256;
        it_item *p = realloc(g->it, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        g->it = p;
        g->cap = cap;
    }
    g->it[g->n] = (it_item){res, 0, 0, dur > 0 ? dur : 0.0, release, 0.0, 0.0};
    return g->n++;
}

/* Item `to` waits for item `from`; nothing when from < 0. Returns 0 or -1 (out of memory). */
static int it_dep(it_graph *g, int to, int from)
{
    if (from < 0)
        return 0;
    if (g->nedges == g->ecap) {
        int cap = g->ecap ? 2 * g->ecap : 1024;
        int *f = realloc(g->from, (size_t)cap * sizeof *f);
        if (!f)
            return -1;
        g->from = f;
        int *t = realloc(g->to, (size_t)cap * sizeof *t);
        if (!t)
            return -1;
        g->to = t;
        g->ecap = cap;
    }
    g->from[g->nedges] = from;
    g->to[g->nedges++] = to;
    g->it[to].left++;
    return 0;
}

/* Whether item i, which can start at s, goes before item b (-1: none yet), which can start at
 * bs: the order of it_run. */
static int it_before(const it_graph *g, int i, double s, int b, double bs)
{
    if (b < 0 || s != bs)
        return b < 0 || s < bs;
    const it_item *x = &g->it[i], *y = &g->it[b];
    int zx = x->dur == 0.0, zy = y->dur == 0.0;
    if (zx != zy)
        return zx > zy;
    if (x->prio != y->prio)
        return x->prio > y->prio;
    if (x->ready != y->ready)
        return x->ready < y->ready;
    return i < b;
}

/* Non-preemptive list scheduling: repeatedly the item that can start earliest (its
 * dependencies done, its resource free), ties to an item of no duration (it may make others
 * ready at that same time, which must compete before the resource is committed), then to the
 * higher priority, then to the one ready first, then to the one added first (the backward
 * chunks are added first). Among items of one priority a resource is first come, first
 * served. */
static int it_run(it_graph *g, int nres, cz_error *err)
{
    int rc = CZ_OK;
    int *first = calloc((size_t)g->n + 1, sizeof *first);
    int *next = malloc((g->nedges ? (size_t)g->nedges : 1) * sizeof *next);
    int *fill = calloc((size_t)g->n + 1, sizeof *fill);
    int *elig = malloc(((size_t)g->n + 1) * sizeof *elig); /* items whose dependencies are done */
    double *free_at = calloc((size_t)nres, sizeof *free_at);
    if (!first || !next || !fill || !elig || !free_at) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating the iteration");
        goto done;
    }
    /* The dependents of each item, as a compressed list. */
    for (int k = 0; k < g->nedges; k++)
        first[g->from[k] + 1]++;
    for (int i = 0; i < g->n; i++)
        first[i + 1] += first[i];
    for (int k = 0; k < g->nedges; k++)
        next[first[g->from[k]] + fill[g->from[k]]++] = g->to[k];
    int nelig = 0;
    for (int i = 0; i < g->n; i++)
        if (g->it[i].left == 0)
            elig[nelig++] = i;
    for (int round = 0; round < g->n; round++) {
        int best = -1, at = -1;
        double bs = 0.0;
        for (int e = 0; e < nelig; e++) {
            const it_item *x = &g->it[elig[e]];
            double s = fmax(x->ready, free_at[x->res]);
            if (it_before(g, elig[e], s, best, bs)) {
                at = e;
                best = elig[e];
                bs = s;
            }
        }
        if (best < 0) { /* every item left waits on another: the graph has a cycle */
            rc = cz__error_set(err, CZ_EINVALID,
                               "the iteration's dependencies form a cycle (%d of %d events left)",
                               g->n - round, g->n);
            goto done;
        }
        elig[at] = elig[--nelig];
        it_item *x = &g->it[best];
        x->start = bs;
        x->end = bs + x->dur;
        free_at[x->res] = x->end;
        for (int k = first[best]; k < first[best + 1]; k++) {
            it_item *y = &g->it[next[k]];
            y->ready = fmax(y->ready, x->end);
            if (--y->left == 0)
                elig[nelig++] = next[k];
        }
    }
done:
    free(first);
    free(next);
    free(fill);
    free(elig);
    free(free_at);
    return rc;
}

static int clamp_bucket(int b, int nb)
{
    return b < 0 ? 0 : (b >= nb ? nb - 1 : b);
}

/* The event graph of one iteration (cz__iter_overlap) and the items it reads back, built
 * phase by phase; every builder below returns 0, or -1 when out of memory. Resources: 0 the
 * DP channel, 1 + 2d rank d's compute stream, 2 + 2d its TP stream, 1 + 2D the joins. */
typedef struct it_build {
    it_graph g;
    int nb, D, g1;             /* buckets, DP ranks, the most micro-groups of a rank (at least 1) */
    int pass_prio;             /* a pass chunk's priority: 1 with passes_first */
    int reduced;               /* deferred: the join of every reduce-scatter; -1 otherwise */
    int updated;               /* deferred: the join of every rank's updates; -1 otherwise */
    int *bwd;                  /* each rank's last backward chunk */
    int *fwd_first, *fwd_last; /* each rank's first and last forward chunk */
    int *rs, *ag;              /* each bucket's reduce-scatter and all-gather */
    int *chunk;                /* [d * nb + k]: rank d's backward chunk of bucket k */
    int *elem;                 /* [d * nb + k]: rank d's elementwise updates of bucket k */
    int *gather, *comp, *scat, *order; /* [d * g1 + j]: slot j of rank d's micro-groups */
} it_build;

static void it_build_free(it_build *b)
{
    free(b->g.it);
    free(b->g.from);
    free(b->g.to);
    free(b->bwd);
    free(b->fwd_first);
    free(b->fwd_last);
    free(b->rs);
    free(b->ag);
    free(b->elem);
    free(b->gather);
    free(b->comp);
    free(b->scat);
    free(b->chunk);
    free(b->order);
}

static int it_build_alloc(it_build *b)
{
    size_t nb = (size_t)b->nb, D = (size_t)b->D, g1 = (size_t)b->g1;
    b->bwd = malloc(D * sizeof *b->bwd);
    b->fwd_first = malloc(D * sizeof *b->fwd_first);
    b->fwd_last = malloc(D * sizeof *b->fwd_last);
    b->rs = malloc(nb * sizeof *b->rs);
    b->ag = malloc(nb * sizeof *b->ag);
    b->elem = malloc(nb * D * sizeof *b->elem);
    b->gather = malloc(g1 * D * sizeof *b->gather);
    b->comp = malloc(g1 * D * sizeof *b->comp);
    b->scat = malloc(g1 * D * sizeof *b->scat);
    b->order = malloc(g1 * D * sizeof *b->order);
    b->chunk = malloc(nb * D * sizeof *b->chunk);
    return b->bwd && b->fwd_first && b->fwd_last && b->rs && b->ag && b->elem && b->gather &&
                   b->comp && b->scat && b->order && b->chunk
               ? 0
               : -1;
}

/* The last micro-batch's backward, chunk by chunk in backward order, on every rank (released
 * at t0: the micro-batches before it run undisturbed, their gradients are not final); each
 * bucket's reduce-scatter once every rank's backward has passed it; deferred, their join. */
static int it_backward(it_build *b, const cz_iter_model *m, double t0)
{
    int nb = b->nb, D = b->D;
    it_graph *g = &b->g;
    for (int d = 0; d < D; d++)
        for (int k = 0; k < nb; k++) {
            int c = b->chunk[(size_t)d * nb + k] = it_add(g, 1 + 2 * d, m->bwd_s[k], t0);
            if (c < 0 || it_dep(g, c, k ? b->chunk[(size_t)d * nb + k - 1] : -1))
                return -1;
            g->it[c].prio = b->pass_prio;
        }
    for (int k = 0; k < nb; k++) {
        if ((b->rs[k] = it_add(g, 0, m->rs_s[k], 0.0)) < 0)
            return -1;
        g->it[b->rs[k]].prio = m->ag_forward_order ? nb + 1 : 0;
        for (int d = 0; d < D; d++)
            if (it_dep(g, b->rs[k], b->chunk[(size_t)d * nb + k]))
                return -1;
    }
    for (int d = 0; d < D; d++)
        b->bwd[d] = b->chunk[(size_t)d * nb + nb - 1];
    /* Deferred updates: every update waits for this join of every reduce-scatter. */
    if (m->deferred) {
        if ((b->reduced = it_add(g, 1 + 2 * D, 0.0, 0.0)) < 0)
            return -1;
        for (int k = 0; k < nb; k++)
            if (it_dep(g, b->reduced, b->rs[k]))
                return -1;
    }
    return 0;
}

/* Rank d's updates: each bucket's elementwise updates after its reduce-scatter; the
 * micro-groups in the order their inputs become ready (order[]: by bucket, stable), each one's
 * gather once its inputs' buckets are reduced and the previous group's gather is done (and,
 * under synchronous compute, the previous group computed; pipelined, with one group in flight:
 * after the scatter two groups back), its compute after the gather and the previous group's
 * compute, its scatter after its compute. Slots j below are positions in that order. */
static int it_rank_updates(it_build *b, const cz_iter_model *m, int d)
{
    const cz_iter_rank *rk = &m->ranks[d];
    int nb = b->nb, cres = 1 + 2 * d, tres = 2 + 2 * d;
    size_t g1 = (size_t)b->g1;
    it_graph *g = &b->g;
    for (int k = 0; k < nb; k++) {
        int e = b->elem[(size_t)d * nb + k] = it_add(g, cres, rk->elem_s[k], 0.0);
        if (e < 0 || it_dep(g, e, m->deferred ? b->reduced : b->rs[k]))
            return -1;
    }
    /* A counting sort by bucket keeps the plan's order within a bucket; deferred, the plan's
     * order. */
    int j = 0;
    for (int k = 0; k < nb; k++)
        for (int q = 0; q < rk->ngroups; q++)
            if (m->deferred ? k == 0 : clamp_bucket(rk->groups[q].bucket, nb) == k)
                b->order[(size_t)d * g1 + (size_t)j++] = q;
    for (j = 0; j < rk->ngroups; j++) {
        const cz_iter_group *gr = &rk->groups[b->order[(size_t)d * g1 + (size_t)j]];
        size_t at = (size_t)d * g1 + (size_t)j;
        int bk = clamp_bucket(gr->bucket, nb);
        int x = b->gather[at] = it_add(g, tres, gr->gather_s, 0.0);
        if (x < 0 || it_dep(g, x, m->deferred ? b->reduced : b->rs[bk]) ||
            it_dep(g, x, j ? b->gather[at - 1] : -1) ||
            it_dep(g, x, !m->pipelined && j ? b->comp[at - 1] : -1) ||
            it_dep(g, x, m->pipelined && j >= 2 ? b->scat[at - 2] : -1))
            return -1;
        int c = b->comp[at] = it_add(g, cres, gr->compute_s, 0.0);
        if (c < 0 || it_dep(g, c, x) || it_dep(g, c, j ? b->comp[at - 1] : -1))
            return -1;
        int s = b->scat[at] = it_add(g, tres, gr->scatter_s, 0.0);
        if (s < 0 || it_dep(g, s, c))
            return -1;
    }
    return 0;
}

/* Deferred, the join of every rank's updates; each bucket's parameter all-gather once every
 * rank has updated its part of it (and, deferred, after that join). */
static int it_gathers(it_build *b, const cz_iter_model *m)
{
    int nb = b->nb, D = b->D;
    size_t g1 = (size_t)b->g1;
    it_graph *g = &b->g;
    if (m->deferred) {
        if ((b->updated = it_add(g, 1 + 2 * D, 0.0, 0.0)) < 0)
            return -1;
        for (int d = 0; d < D; d++) {
            for (int k = 0; k < nb; k++)
                if (it_dep(g, b->updated, b->elem[(size_t)d * nb + k]))
                    return -1;
            for (int j = 0; j < m->ranks[d].ngroups; j++)
                if (it_dep(g, b->updated, b->scat[(size_t)d * g1 + (size_t)j]))
                    return -1;
        }
    }
    for (int k = 0; k < nb; k++) {
        if ((b->ag[k] = it_add(g, 0, m->ag_s[k], 0.0)) < 0 || it_dep(g, b->ag[k], b->rs[k]) ||
            it_dep(g, b->ag[k], b->updated))
            return -1;
        g->it[b->ag[k]].prio = m->ag_forward_order ? k + 1 : 0;
        for (int d = 0; d < D; d++) {
            const cz_iter_rank *rk = &m->ranks[d];
            if (it_dep(g, b->ag[k], b->elem[(size_t)d * nb + k]))
                return -1;
            /* Scatters end in the order the groups run: the last one with an input here. */
            int lj = -1;
            for (int j = 0; rk->touches && j < rk->ngroups; j++)
                if (rk->touches[(size_t)b->order[(size_t)d * g1 + (size_t)j] * (size_t)nb + k])
                    lj = j;
            if (it_dep(g, b->ag[k], lj >= 0 ? b->scat[(size_t)d * g1 + (size_t)lj] : -1))
                return -1;
        }
    }
    return 0;
}

/* The next iteration's first forward micro-batch, in forward order (the last bucket first),
 * each chunk after its bucket's all-gather. */
static int it_forward(it_build *b, const cz_iter_model *m)
{
    it_graph *g = &b->g;
    for (int d = 0; d < b->D; d++) {
        int prev = b->bwd[d];
        for (int k = b->nb - 1; k >= 0; k--) {
            int f = it_add(g, 1 + 2 * d, m->fwd_s[k], 0.0);
            if (f < 0 || it_dep(g, f, prev) || it_dep(g, f, b->ag[k]))
                return -1;
            g->it[f].prio = b->pass_prio;
            if (k == b->nb - 1)
                b->fwd_first[d] = f;
            prev = f;
        }
        b->fwd_last[d] = prev;
    }
    return 0;
}

int cz__iter_overlap(const cz_iter_model *m, cz_iter_timeline *out, cz_error *err)
{
    int nb = m->nbuckets, D = m->nranks, M = m->micro_batches, rc = CZ_OK;
    memset(out, 0, sizeof *out);
    if (nb < 0 || D < 1 || M < 1)
        return cz__error_set(err, CZ_EINVALID,
                             "iteration model: %d buckets, %d DP ranks, %d micro-batches", nb, D,
                             M);
    double F = 0.0, B = 0.0;
    for (int k = 0; k < nb; k++)
        F += m->fwd_s[k], B += m->bwd_s[k];
    out->passes_s = M * (F + B);
    out->bwd_end_s = out->passes_s;
    out->iter_s = out->passes_s;
    if (nb == 0)
        return CZ_OK;
    /* With passes_first a compute stream runs a ready forward or backward chunk before any
     * optimizer work, which fills the time the passes leave. */
    it_build b = {.nb = nb,
                  .D = D,
                  .g1 = 1,
                  .pass_prio = m->passes_first ? 1 : 0,
                  .reduced = -1,
                  .updated = -1};
    for (int d = 0; d < D; d++)
        b.g1 = m->ranks[d].ngroups > b.g1 ? m->ranks[d].ngroups : b.g1;
    int oom = it_build_alloc(&b) || it_backward(&b, m, M * F + (M - 1) * B);
    for (int d = 0; d < D && !oom; d++)
        oom = it_rank_updates(&b, m, d);
    if (oom || it_gathers(&b, m) || it_forward(&b, m)) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating the iteration");
        goto done;
    }
    if ((rc = it_run(&b.g, 2 + 2 * D, err)) != CZ_OK)
        goto done;
    const it_item *it = b.g.it;
    double bwd_end = 0.0, wait = 0.0, end = 0.0;
    for (int d = 0; d < D; d++) {
        bwd_end = fmax(bwd_end, it[b.bwd[d]].end);
        wait = fmax(wait, it[b.fwd_first[d]].start - it[b.bwd[d]].end);
        end = fmax(end, it[b.fwd_last[d]].end);
    }
    out->bwd_end_s = bwd_end;
    out->bwd_delay_s = fmax(0.0, bwd_end - out->passes_s);
    /* The DP channel works between the end of the first backward chunk and the start of the
     * last forward chunk (bucket 0's all-gather comes before it): whatever order it runs in,
     * the step stays exposed by at least its excess over that window. */
    double dp = 0.0;
    for (int k = 0; k < nb; k++)
        dp += m->rs_s[k] + m->ag_s[k];
    out->dp_bound_s = fmax(0.0, dp - (B - m->bwd_s[0]) - (F - m->fwd_s[0]));
    out->first_wait_s = wait;
    /* The iteration ends where the next one would start if its first forward micro-batch,
     * which ends at `end`, had not waited for anything. */
    out->iter_s = end - F;
done:
    it_build_free(&b);
    return rc;
}

json_t *cz__sim_iteration_json(const cz_sim_result *r)
{
    double passes = r->fwd_s + r->bwd_s;
    json_t *o =
        json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:b}", "seq_len", r->seq_len,
                  "micro_batch_size", r->micro_batch_size, "micro_batches", r->micro_batches,
                  "pass_efficiency", r->pass_efficiency, "pass_tflops", r->pass_tflops, "forward_s",
                  r->fwd_s, "backward_s", r->bwd_s, "iteration_s", r->iter_s, "exposed_step_s",
                  r->iter_s - passes, "overlap", r->iter_overlap);
    if (!o)
        return NULL;
    json_t *more =
        r->iter_overlap
            ? json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f}", "gather_order",
                        r->gather_forward_order ? "forward" : "ready", "updates",
                        r->deferred_updates ? "deferred" : "early", "overlap_iteration_s",
                        r->iter_overlap_s, "overlap_exposed_step_s", r->iter_overlap_s - passes,
                        "overlap_dp_bound_s", r->dp_bound_s, "overlap_backward_delay_s",
                        r->bwd_delay_s, "overlap_first_bucket_wait_s", r->first_wait_s,
                        "overlap_speedup",
                        r->iter_overlap_s > 0 ? r->iter_s / r->iter_overlap_s : 1.0)
            : json_pack("{s:s}", "overlap_note", r->iter_note);
    if (!more || json_object_update(o, more)) {
        json_decref(more);
        json_decref(o);
        return NULL;
    }
    json_decref(more);
    return o;
}
