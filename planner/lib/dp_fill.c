/*
 * The slot-fill DP partition: the joint strategy's cut of every domain (the default; a domain is
 * a stage's dense buffer over its DP ranks or an EP rank's experts over its expert-DP ranks,
 * dealt over their TP or ETP slots), and a variant of alpha under block and cooperative tasks.
 *
 * Summed loads miss what sets a DP rank's makespan once its matrices become block and
 * cooperative tasks: the tasks are quantized. On eight slots four 8 ms blocks split over two
 * slots each fill the rank at 5.2 ms per slot, and the 2 ms of slot time a summed load would
 * still count as free lies in gaps of 0.3 ms that no matrix fits. So this variant deals the
 * parameters with a model of the slots themselves:
 *
 *  - a rank is its TP slots' loads. A matrix parameter's tasks (largest hosted cost first) go
 *    on top of the rank's packing as it stands, each by cz__slot_place (slot_pack.c: the width
 *    and aligned run of slots within the target T at the least slot time, gaps counted); where
 *    they do not fit, the rank's whole set is repacked largest first, as the packed TP schedule
 *    packs it (microgroups.c). An elementwise parameter adds cost / tp to every slot;
 *  - buckets are dealt in the caller's order (dp_partition.c tries two); in each, ranks 0, 1,
 *    ... take the next parameters while they fit, so every rank keeps one contiguous range per
 *    bucket. Or (by_rank) rank by rank: rank 0, then 1, ..., each taking, from the next
 *    parameter of every bucket, the costliest that fits, until none does: still one range per
 *    bucket, but a rank can hold a small matrix of several buckets while the large ones of
 *    each go to ranks of their own. Bucket by bucket, a bucket of alternating fc2, fc1, fc2,
 *    ... deals one matrix per rank and leaves no rank for the next bucket's fc1 that does not
 *    already hold one: the Kimi-K2-like experts on 1,024 GPUs end at fc1 + fc2 there, at fc1
 *    rank by rank (docs/PERF.md, section 15);
 *  - the least T at which every parameter fits is found by bisection from the split lower bound
 *    (alpha's variant, the joint strategy's first pass) or from the domain's own bound
 *    (domain_bound: the joint strategy's later passes, where every rank starts from a base,
 *    the time its GPUs spend on the other buffer's work).
 *
 * The slot model is not the TP scheduler (rollback, micro-groups, its own width search), which
 * then schedules each rank's set for real; the planner keeps this variant only where the real
 * makespan is shorter (planner.c). Cost per probe: every task placed once (at most the sum over
 * widths of tp / width runs each), plus a repack per rejected parameter, only for ranks of at
 * most FILL_REPACK_TASKS tasks and only where the rank's least slot time could fit; about 15
 * probes (planning times: docs/PERF.md, section 15).
 */
#include "cz_algorithms.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The bisection stops at this relative width: the cost model's rates are not more precise. */
#define FILL_TOLERANCE 1e-4
#define FILL_PROBES 64
/* Ranks of more tasks are not repacked: with many small tasks (experts) the packing as it
 * stands is as good, and a repack per rejected parameter would cost more than the rest. */
#define FILL_REPACK_TASKS 64

typedef struct {
    const cz_plan *plan;
    const cz_task_table *tt;
    int tp, dp;
    const double *base; /* dp or NULL: the time each rank's GPUs are busy before its buckets */
    size_t cap;         /* every task of the plan (+1) */
    int *head;     /* dp: each rank's last task taken (-1: none), its list linked through next */
    int *next;     /* cap: the task a rank took before this one (-1: none) */
    int *count;    /* dp */
    double *ew;    /* dp: each rank's elementwise cost, spread over its tp slots */
    double *rload; /* dp x tp: each rank's slot loads (matrices only) */
    double *need;  /* dp: each rank's least slot time, summed over its tasks (a repack's bound) */
    cz_costed *trial; /* cap: a rank's tasks and a parameter's, for a repack */
    int *mine;        /* cap: a parameter's tasks, largest hosted cost first */
    double *load;     /* tp: slot loads of one packing */
    int *pos;         /* nb: by_rank, each bucket's next parameter */
    int *heap;        /* nb: by_rank, the buckets a rank may still take from (heap_down) */
} fill_ctx;

static double hosted(const cz_task_table *tt, int x)
{
    return tt->cost[(size_t)x * tt->nwidths];
}

static double busiest(const double *load, int n)
{
    double m = 0.0;
    for (int j = 0; j < n; j++)
        m = load[j] > m ? load[j] : m;
    return m;
}

/* Places task x on f->load within T. */
static bool place(fill_ctx *f, int x, double T)
{
    int w, slot;
    return cz__slot_place(f->tt, f->tp, f->load, &f->tt->cost[(size_t)x * f->tt->nwidths], T, &w,
                          &slot);
}

/* Packs rank r's tasks and nt more from t0 on empty slots within T, largest hosted cost first:
 * the TP schedule's packed form (microgroups.c, schedule_packed) at the one target. */
static bool repack(fill_ctx *f, int r, int t0, int nt, double T)
{
    int m = 0;
    for (int x = f->head[r]; x >= 0; x = f->next[x])
        f->trial[m].id = x, f->trial[m++].cost = hosted(f->tt, x);
    for (int x = t0; x < t0 + nt; x++)
        f->trial[m].id = x, f->trial[m++].cost = hosted(f->tt, x);
    cz__costed_sort(f->trial, (size_t)m);
    for (int j = 0; j < f->tp; j++)
        f->load[j] = 0.0;
    for (int i = 0; i < m; i++)
        if (!place(f, f->trial[i].id, T))
            return false;
    return true;
}

/* Adds parameter p to rank r when it fits within T: first on top of the rank's packing as it
 * stands (a rank of hundreds of small experts takes one more without a repack), else with the
 * rank's whole set repacked largest first, where its least slot time leaves that possible. */
static bool param_place(fill_ctx *f, int r, const cz_plan_param *p, double T)
{
    const cz_task_table *tt = f->tt;
    double *rl = &f->rload[(size_t)r * f->tp];
    int t0 = tt->first[p->id], nt = tt->first[p->id + 1] - t0;
    if (p->def.kind != CZ_KIND_MATRIX || nt == 0) {
        double ew = f->ew[r] + p->cost / f->tp;
        T -= f->base ? f->base[r] : 0.0;
        if (busiest(rl, f->tp) + ew > T) {
            if (f->count[r] == 0 || f->count[r] > FILL_REPACK_TASKS ||
                f->need[r] > (T - ew) * f->tp || !repack(f, r, 0, 0, T - ew))
                return false;
            memcpy(rl, f->load, (size_t)f->tp * sizeof *rl);
        }
        f->ew[r] = ew;
        return true;
    }
    double room = T - f->ew[r] - (f->base ? f->base[r] : 0.0), need = f->need[r];
    for (int x = t0; x < t0 + nt; x++)
        need += cz__task_least_slot_time(tt, &tt->cost[(size_t)x * tt->nwidths], INFINITY);
    /* The parameter's own tasks, largest hosted cost first (a few blocks: insertion sort). */
    for (int i = 0; i < nt; i++) {
        int x = t0 + i, at = i;
        while (at > 0 && hosted(tt, f->mine[at - 1]) < hosted(tt, x)) {
            f->mine[at] = f->mine[at - 1];
            at--;
        }
        f->mine[at] = x;
    }
    memcpy(f->load, rl, (size_t)f->tp * sizeof *rl);
    bool fits = true;
    for (int i = 0; i < nt && fits; i++)
        fits = place(f, f->mine[i], room);
    if (!fits && (f->count[r] + nt > FILL_REPACK_TASKS || need > room * f->tp ||
                  !repack(f, r, t0, nt, room)))
        return false;
    for (int x = t0; x < t0 + nt; x++)
        f->next[x] = f->head[r], f->head[r] = x;
    f->count[r] += nt;
    f->need[r] = need;
    memcpy(rl, f->load, (size_t)f->tp * sizeof *rl);
    return true;
}

/* Every rank empty, before a probe. */
static void probe_reset(fill_ctx *f)
{
    for (int r = 0; r < f->dp; r++)
        f->head[r] = -1, f->count[r] = 0, f->ew[r] = f->need[r] = 0.0;
    memset(f->rload, 0, (size_t)f->dp * (size_t)f->tp * sizeof *f->rload);
}

/* One probe: deals every bucket at target T; true when all parameters fit. cutj: per bucket in
 * processing order, dp + 1 cut indices into the bucket's parameters. */
static bool fill_probe(fill_ctx *f, const cz_dp_buckets *b, double T, int *cutj)
{
    probe_reset(f);
    for (int o = 0; o < b->nb; o++) {
        const int *ids = &b->ids[b->first[o]];
        int np = b->first[o + 1] - b->first[o], j = 0;
        int *cut = &cutj[(size_t)o * (f->dp + 1)];
        for (int r = 0; r < f->dp; r++) {
            cut[r] = j;
            while (j < np && param_place(f, r, &f->plan->params[ids[j]], T))
                j++;
        }
        cut[f->dp] = np;
        if (j < np)
            return false;
    }
    return true;
}

/* The next parameter of bucket o (by_rank). */
static const cz_plan_param *next_of(const fill_ctx *f, const cz_dp_buckets *b, int o)
{
    return &f->plan->params[b->ids[b->first[o] + f->pos[o]]];
}

/* Whether bucket x's next parameter comes before y's: costlier, ties by bucket. */
static bool head_before(const fill_ctx *f, const cz_dp_buckets *b, int x, int y)
{
    double cx = next_of(f, b, x)->cost, cy = next_of(f, b, y)->cost;
    return cx > cy || (cx == cy && x < y);
}

/* f->heap[0 .. n) as a binary heap of buckets by head_before: restores it downward from k. */
static void heap_down(fill_ctx *f, const cz_dp_buckets *b, int n, int k)
{
    for (;;) {
        int c = 2 * k + 1;
        if (c >= n)
            return;
        if (c + 1 < n && head_before(f, b, f->heap[c + 1], f->heap[c]))
            c++;
        if (!head_before(f, b, f->heap[c], f->heap[k]))
            return;
        int t = f->heap[c];
        f->heap[c] = f->heap[k], f->heap[k] = t, k = c;
    }
}

/* fill_probe's by_rank form: rank r starts a range in every bucket where the last rank's
 * ended, and takes the costliest next parameter of any bucket that fits, until none does. A
 * next parameter that does not fit is not tried again on the rank (its load only grows), so a
 * rank costs its takes plus one refusal per bucket, each a heap operation over the buckets
 * (the caller keeps their number bounded, dp_partition.c). */
static bool fill_probe_by_rank(fill_ctx *f, const cz_dp_buckets *b, double T, int *cutj)
{
    probe_reset(f);
    for (int o = 0; o < b->nb; o++)
        f->pos[o] = 0;
    for (int r = 0; r < f->dp; r++) {
        int n = 0;
        for (int o = 0; o < b->nb; o++) {
            cutj[(size_t)o * (f->dp + 1) + r] = f->pos[o];
            if (f->pos[o] < b->first[o + 1] - b->first[o])
                f->heap[n++] = o;
        }
        for (int k = n / 2 - 1; k >= 0; k--)
            heap_down(f, b, n, k);
        while (n > 0) {
            int o = f->heap[0];
            bool took = param_place(f, r, next_of(f, b, o), T);
            /* Taken and more left: the bucket's new next parameter takes its place; refused
             * here, or the bucket dealt: it leaves the heap. */
            if (!took || ++f->pos[o] >= b->first[o + 1] - b->first[o])
                f->heap[0] = f->heap[--n];
            heap_down(f, b, n, 0);
        }
    }
    bool all = true;
    for (int o = 0; o < b->nb; o++) {
        int np = b->first[o + 1] - b->first[o];
        cutj[(size_t)o * (f->dp + 1) + f->dp] = np;
        all = all && f->pos[o] == np;
    }
    return all;
}

static bool probe(fill_ctx *f, const cz_dp_buckets *b, double T, int *cutj)
{
    return b->by_rank ? fill_probe_by_rank(f, b, T, cutj) : fill_probe(f, b, T, cutj);
}

/* A lower bound on the domain's least target: its largest task at its cheapest per-slot cost,
 * its busiest rank's base, and its slot time (each task at its least, elementwise work, the
 * bases) over all of its slots. Bisecting from it rather than from the plan's bound finds the
 * domain's own target, so a domain lighter than the plan's busiest (a later pipeline stage, one
 * EP rank's experts) is spread over all of its ranks instead of filling the first ones. */
static double domain_bound(const fill_ctx *f, const cz_dp_buckets *b)
{
    const cz_task_table *tt = f->tt;
    double largest = 0.0, area = 0.0;
    for (int k = 0; k < b->first[b->nb]; k++) {
        const cz_plan_param *p = &f->plan->params[b->ids[k]];
        int t0 = tt->first[p->id], nt = tt->first[p->id + 1] - t0;
        if (p->def.kind != CZ_KIND_MATRIX || nt == 0) {
            area += p->cost;
            largest = p->cost / f->tp > largest ? p->cost / f->tp : largest;
            continue;
        }
        for (int x = t0; x < t0 + nt; x++) {
            const double *cw = &tt->cost[(size_t)x * tt->nwidths];
            double cheapest = INFINITY;
            for (int w = 0; w < tt->nwidths; w++)
                if (tt->widths[w] <= f->tp && cw[w] < cheapest)
                    cheapest = cw[w];
            if (isfinite(cheapest) && cheapest > largest)
                largest = cheapest;
            area += cz__task_least_slot_time(tt, cw, INFINITY);
        }
    }
    for (int r = 0; f->base && r < f->dp; r++) {
        area += f->base[r] * f->tp;
        largest = f->base[r] > largest ? f->base[r] : largest;
    }
    double mean = area / ((double)f->dp * f->tp);
    return mean > largest ? mean : largest;
}

int cz__dp_fill_cuts(const cz_plan *plan, const cz_dp_buckets *b, int *cutj, double *target,
                     double *bound, cz_error *err)
{
    int rc = CZ_OK;
    const cz_task_table *tt = &plan->tasks;
    fill_ctx f = {.plan = plan,
                  .tt = tt,
                  .tp = b->slots > 0 ? b->slots : 1,
                  .dp = b->nranks,
                  .base = b->base,
                  .cap = tt->ntasks + 1};
    if (!tt->first)
        return cz__error_set(err, CZ_EINTERNAL, "the slot-fill partition needs the task table");
    f.head = malloc((size_t)f.dp * sizeof *f.head);
    f.next = malloc(f.cap * sizeof *f.next);
    f.count = malloc((size_t)f.dp * sizeof *f.count);
    f.ew = malloc((size_t)f.dp * sizeof *f.ew);
    f.rload = malloc((size_t)f.dp * (size_t)f.tp * sizeof *f.rload);
    f.need = malloc((size_t)f.dp * sizeof *f.need);
    f.trial = malloc(f.cap * sizeof *f.trial);
    f.mine = malloc(f.cap * sizeof *f.mine);
    f.load = malloc((size_t)f.tp * sizeof *f.load);
    f.pos = malloc(((size_t)b->nb + 1) * sizeof *f.pos);
    f.heap = malloc(((size_t)b->nb + 1) * sizeof *f.heap);
    if (!f.head || !f.next || !f.count || !f.ew || !f.rload || !f.need || !f.trial || !f.mine ||
        !f.load || !f.pos || !f.heap) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory in the slot-fill partition");
        goto done;
    }
    /* An upper end that fits: doubled from the split lower bound (every parameter fits on an
     * empty rank once T exceeds its hosted cost and the rank's base, so this ends). */
    double lo = b->lo > 0.0 ? b->lo : domain_bound(&f, b), hi = lo > 0.0 ? lo : 1e-9;
    if (bound)
        *bound = lo;
    for (int r = 0; f.base && r < f.dp; r++)
        hi = f.base[r] > hi ? f.base[r] : hi;
    int tries = 0;
    while (!probe(&f, b, hi, cutj)) {
        lo = hi;
        hi *= 2.0;
        if (++tries > 200) {
            rc = cz__error_set(err, CZ_EINTERNAL,
                               "the slot-fill partition found no feasible "
                               "target (a cost is not finite)");
            goto done;
        }
    }
    for (int it = 0; it < FILL_PROBES && hi - lo > FILL_TOLERANCE * hi; it++) {
        double mid = 0.5 * (lo + hi);
        if (probe(&f, b, mid, cutj))
            hi = mid;
        else
            lo = mid;
    }
    /* The cuts of the least feasible target found. */
    if (!probe(&f, b, hi, cutj))
        rc = cz__error_set(err, CZ_EINTERNAL, "the slot-fill partition lost a feasible target");
    *target = hi;
done:
    free(f.head);
    free(f.next);
    free(f.count);
    free(f.ew);
    free(f.rload);
    free(f.need);
    free(f.trial);
    free(f.mine);
    free(f.load);
    free(f.pos);
    free(f.heap);
    return rc;
}
