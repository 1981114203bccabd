/* TP-aware DP partitioning: alpha balances the summed cost per DP rank, but what a GPU waits
 * for is the makespan the TP micro-group schedule makes of that set (a rank with one huge
 * matrix and many small ones can have the same sum as a well-packed rank and twice the
 * makespan). Starting from alpha's cuts, a local search moves one cut of one bucket by one
 * parameter boundary (handing one parameter to the neighbouring rank), rebuilds the TP schedule
 * of only the two ranks involved, and keeps the move when the stage's largest rank makespan
 * decreases, or stays and the sum of squared makespans decreases. Passes repeat over all cuts
 * in a fixed order until none improves (a local optimum) or a pass limit. Moves never stretch a
 * range past the alpha bound of the ILP formulation (docs/SOLVERS.md), so alpha keeps its
 * meaning for communication. Deterministic: fixed order, no randomness. */
#include "cz_types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TPAWARE_MAX_PASSES 50

typedef struct tpa {
    cz_plan *plan;
    int stage, R;
    int nb;
    int *bucket;  /* plan bucket index per stage bucket */
    int *first;   /* nb + 1 starts into order */
    int *order;   /* param ids by bucket, offset */
    int *cut;     /* nb * (R + 1): index into the bucket's params of the first param of rank>=r */
    double *ew;   /* per rank elementwise makespan share */
    double *mk;   /* per rank makespan */
    double *msum; /* per rank summed matrix cost */
    double *mmax; /* per rank largest matrix cost */
    int *version; /* per rank: bumped whenever its parameter set changes */
    /* Per move (bucket, cut, direction): the two makespans it produced and the versions of the
     * two ranks then. A rank's schedule depends only on its own parameters, so an evaluation
     * stays valid until either rank changes; the decision is still taken afresh each time. */
    int *memo_vf, *memo_vt;
    double *memo_mf, *memo_mt;
    cz_plan_param *scratch; /* matrix params of one rank, for the schedule builder */
} tpa;

/* Makespan of DP rank r of the stage as the TP schedule builder makes it: a one-rank scratch
 * plan holding only the rank's matrix parameters goes through cz_tp_schedule_build, so the
 * automatic capacity and every strategy behave exactly as in the full plan. */
static int rank_makespan(tpa *t, int r, double *out, cz_error *err)
{
    cz_plan *plan = t->plan;
    size_t n = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->stage == t->stage && p->dp_owner == r && p->kind == CZ_KIND_MATRIX) {
            t->scratch[n] = *p;
            t->scratch[n].stage = 0;
            t->scratch[n].dp_owner = 0;
            n++;
        }
    }
    cz_plan s;
    memset(&s, 0, sizeof s);
    s.settings = plan->settings;
    s.settings.dp = CZ_DP_ALPHA; /* owners, not range overlaps, decide the tasks */
    s.dp = 1;
    s.tp = plan->tp;
    s.pp = 1;
    s.nparams = n;
    s.params = t->scratch;
    int rc = cz_tp_schedule_build(&s, err);
    double sum = t->ew[r];
    for (size_t k = 0; rc == CZ_OK && k < s.nschedules; k++) {
        const cz_rank_schedule *rs = &s.schedules[k];
        for (int g = 0; g < rs->ngroups; g++) {
            double mx = 0;
            for (int j = 0; j < rs->groups[g].nslots; j++)
                mx = fmax(mx, rs->groups[g].load[j]);
            sum += mx;
        }
    }
    cz_plan_schedules_free(&s);
    *out = sum;
    return rc;
}

/* Recomputes the matrix totals of two ranks after a parameter moved between them. */
static void rank_matrix_totals(tpa *t, int a, int b)
{
    t->msum[a] = t->msum[b] = t->mmax[a] = t->mmax[b] = 0;
    for (size_t i = 0; i < t->plan->nparams; i++) {
        const cz_plan_param *p = &t->plan->params[i];
        if (p->stage != t->stage || p->kind != CZ_KIND_MATRIX ||
            (p->dp_owner != a && p->dp_owner != b))
            continue;
        t->msum[p->dp_owner] += p->cost;
        t->mmax[p->dp_owner] = fmax(t->mmax[p->dp_owner], p->cost);
    }
}

static int64_t pos_of(const tpa *t, int bi, int k)
{
    if (k >= t->first[bi + 1] - t->first[bi])
        return t->plan->buckets[t->bucket[bi]].size;
    return t->plan->params[t->order[t->first[bi] + k]].offset;
}

/* Range length of rank r in stage bucket bi for cut indices c[0..R]. */
static int64_t range_len(const tpa *t, int bi, const int *c, int r)
{
    int64_t lo = r == 0 ? 0 : pos_of(t, bi, c[r]);
    int64_t hi = r == t->R - 1 ? t->plan->buckets[t->bucket[bi]].size : pos_of(t, bi, c[r + 1]);
    return hi - lo;
}

/* The ILP's alpha bound: even + alpha (S - even) + largest parameter span of the bucket. */
static double len_bound(const tpa *t, int bi)
{
    double S = (double)t->plan->buckets[t->bucket[bi]].size, even = S / t->R, maxspan = 0;
    int np = t->first[bi + 1] - t->first[bi];
    for (int k = 0; k < np; k++)
        maxspan = fmax(maxspan, (double)(pos_of(t, bi, k + 1) - (k ? pos_of(t, bi, k) : 0)));
    double a = fmin(1.0, fmax(0.0, t->plan->settings.alpha));
    return fmin(S, even + a * (S - even) + maxspan);
}

static void objective(const tpa *t, double *max, double *sq)
{
    *max = 0;
    *sq = 0;
    for (int r = 0; r < t->R; r++) {
        *max = fmax(*max, t->mk[r]);
        *sq += t->mk[r] * t->mk[r];
    }
}

static void write_ranges(tpa *t)
{
    int R = t->R;
    for (int bi = 0; bi < t->nb; bi++) {
        cz_plan_bucket *b = &t->plan->buckets[t->bucket[bi]];
        const int *c = &t->cut[bi * (R + 1)];
        for (int r = 0; r < R; r++) {
            b->ranges[2 * r] = r == 0 ? 0 : pos_of(t, bi, c[r]);
            b->ranges[2 * r + 1] = r == R - 1 ? b->size : pos_of(t, bi, c[r + 1]);
        }
    }
}

static int search_stage(cz_plan *plan, int stage, int *changed, cz_error *err)
{
    int rc = CZ_OK, R = plan->dp;
    tpa t;
    memset(&t, 0, sizeof t);
    t.plan = plan;
    t.stage = stage;
    t.R = R;
    t.bucket = malloc((plan->nbuckets + 1) * sizeof *t.bucket);
    t.first = malloc((plan->nbuckets + 2) * sizeof *t.first);
    t.order = malloc((plan->nparams + 1) * sizeof *t.order);
    t.cut = malloc(((plan->nbuckets + 1) * (size_t)(R + 1)) * sizeof *t.cut);
    t.ew = calloc((size_t)R, sizeof *t.ew);
    t.mk = calloc((size_t)R, sizeof *t.mk);
    t.msum = calloc((size_t)R, sizeof *t.msum);
    t.mmax = calloc((size_t)R, sizeof *t.mmax);
    t.version = calloc((size_t)R, sizeof *t.version);
    size_t nmoves = (plan->nbuckets + 1) * (size_t)R * 2;
    t.memo_vf = malloc(nmoves * sizeof *t.memo_vf);
    t.memo_vt = malloc(nmoves * sizeof *t.memo_vt);
    t.memo_mf = malloc(nmoves * sizeof *t.memo_mf);
    t.memo_mt = malloc(nmoves * sizeof *t.memo_mt);
    t.scratch = malloc((plan->nparams + 1) * sizeof *t.scratch);
    if (!t.bucket || !t.first || !t.order || !t.cut || !t.ew || !t.mk || !t.msum || !t.mmax ||
        !t.scratch || !t.version || !t.memo_vf || !t.memo_vt || !t.memo_mf || !t.memo_mt) {
        rc = cz_error_set(err, CZ_ENOMEM, "out of memory in the tpaware DP search");
        goto done;
    }
    int n = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->stage != stage)
            continue;
        if (p->dp_owner < 0 || p->dp_owner >= R) {
            rc = cz_error_set(err, CZ_EINTERNAL,
                              "tpaware needs an atomic starting partition; parameter '%s' has DP "
                              "owner %d",
                              p->name ? p->name : "?", p->dp_owner);
            goto done;
        }
        t.order[n++] = (int)i;
        if (p->kind != CZ_KIND_MATRIX) {
            t.ew[p->dp_owner] += p->cost / plan->tp;
        } else {
            t.msum[p->dp_owner] += p->cost;
            t.mmax[p->dp_owner] = fmax(t.mmax[p->dp_owner], p->cost);
        }
    }
    if (cz_params_sort_by_position(plan, t.order, n) != CZ_OK) {
        rc = cz_error_set(err, CZ_ENOMEM, "out of memory in the tpaware DP search");
        goto done;
    }
    for (int k = 0; k < n; k++) {
        int b = plan->params[t.order[k]].bucket;
        if (t.nb == 0 || t.bucket[t.nb - 1] != b) {
            t.bucket[t.nb] = b;
            t.first[t.nb++] = k;
        }
    }
    t.first[t.nb] = n;
    /* Cut indices from the owners; owners must be monotone along each bucket. */
    for (int bi = 0; bi < t.nb; bi++) {
        int *c = &t.cut[bi * (R + 1)];
        int np = t.first[bi + 1] - t.first[bi];
        c[0] = 0;
        for (int r = 1; r <= R; r++) {
            c[r] = np;
            for (int k = 0; k < np; k++)
                if (plan->params[t.order[t.first[bi] + k]].dp_owner >= r) {
                    c[r] = k;
                    break;
                }
        }
        for (int k = 0; k < np; k++) {
            int o = plan->params[t.order[t.first[bi] + k]].dp_owner;
            if (k < c[o] || k >= c[o + 1]) {
                rc = cz_error_set(err, CZ_EINTERNAL,
                                  "tpaware needs contiguous ranges; bucket %d has owners out of "
                                  "rank order",
                                  t.bucket[bi]);
                goto done;
            }
        }
    }
    for (size_t i = 0; i < nmoves; i++)
        t.memo_vf[i] = t.memo_vt[i] = -1;
    for (int r = 0; r < R; r++)
        if ((rc = rank_makespan(&t, r, &t.mk[r], err)))
            goto done;
    double cur_max, cur_sq;
    objective(&t, &cur_max, &cur_sq);

    for (int pass = 0; pass < TPAWARE_MAX_PASSES; pass++) {
        int improved = 0;
        for (int bi = 0; bi < t.nb; bi++) {
            int *c = &t.cut[bi * (R + 1)];
            double bound = len_bound(&t, bi);
            for (int r = 1; r < R; r++) {
                for (int dir = -1; dir <= 1; dir += 2) {
                    int nc = c[r] + dir;
                    if (nc < c[r - 1] || nc > c[r + 1])
                        continue;
                    /* Left: the param before the cut goes from r-1 to r; right: the param at
                     * the cut goes from r to r-1. */
                    int k = dir < 0 ? nc : c[r];
                    int from = dir < 0 ? r - 1 : r, to = dir < 0 ? r : r - 1;
                    int old = c[r];
                    int64_t len_to = range_len(&t, bi, c, to);
                    c[r] = nc;
                    int64_t nlen_to = range_len(&t, bi, c, to);
                    if (nlen_to > len_to && (double)nlen_to > bound) {
                        c[r] = old;
                        continue;
                    }
                    cz_plan_param *p = &plan->params[t.order[t.first[bi] + k]];
                    int mat = p->kind == CZ_KIND_MATRIX;
                    double ew_move = mat ? 0 : p->cost / plan->tp;
                    /* Any schedule of a rank lasts at least its elementwise share plus the
                     * larger of its largest task and its matrix work spread over the TP ranks:
                     * when that already exceeds the current maximum the move cannot be kept,
                     * so the costly schedule rebuild is skipped (same decisions, less time). */
                    double lb = t.ew[to] + ew_move +
                                fmax(mat ? fmax(t.mmax[to], p->cost) : t.mmax[to],
                                     (t.msum[to] + (mat ? p->cost : 0)) / plan->tp);
                    if (lb > cur_max * (1 + 1e-12)) {
                        c[r] = old;
                        continue;
                    }
                    double save_from = t.mk[from], save_to = t.mk[to];
                    p->dp_owner = to;
                    t.ew[from] -= ew_move;
                    t.ew[to] += ew_move;
                    size_t mv = ((size_t)bi * R + r) * 2 + (dir > 0);
                    if (t.memo_vf[mv] == t.version[from] && t.memo_vt[mv] == t.version[to]) {
                        t.mk[from] = t.memo_mf[mv];
                        t.mk[to] = t.memo_mt[mv];
                    } else {
                        if ((rc = rank_makespan(&t, from, &t.mk[from], err)) ||
                            (rc = rank_makespan(&t, to, &t.mk[to], err)))
                            goto done;
                        t.memo_vf[mv] = t.version[from];
                        t.memo_vt[mv] = t.version[to];
                        t.memo_mf[mv] = t.mk[from];
                        t.memo_mt[mv] = t.mk[to];
                    }
                    double nmax, nsq;
                    objective(&t, &nmax, &nsq);
                    /* Relative slack: summation noise must not count as an improvement. */
                    int better = nmax < cur_max * (1 - 1e-12) ||
                                 (nmax <= cur_max * (1 + 1e-12) && nsq < cur_sq * (1 - 1e-12));
                    if (better) {
                        cur_max = nmax;
                        cur_sq = nsq;
                        improved = 1;
                        *changed = 1;
                        t.version[from]++;
                        t.version[to]++;
                        if (mat)
                            rank_matrix_totals(&t, from, to);
                    } else {
                        p->dp_owner = from;
                        t.ew[from] += ew_move;
                        t.ew[to] -= ew_move;
                        t.mk[from] = save_from;
                        t.mk[to] = save_to;
                        c[r] = old;
                    }
                }
            }
        }
        if (!improved)
            break;
    }
    if (*changed)
        write_ranges(&t);
done:
    free(t.bucket);
    free(t.first);
    free(t.order);
    free(t.cut);
    free(t.ew);
    free(t.mk);
    free(t.msum);
    free(t.mmax);
    free(t.version);
    free(t.memo_vf);
    free(t.memo_vt);
    free(t.memo_mf);
    free(t.memo_mt);
    free(t.scratch);
    return rc;
}

int cz_dp_partition_tpaware(cz_plan *plan, cz_error *err)
{
    if (plan->dp < 2)
        return CZ_OK;
    int changed = 0;
    for (int st = 0; st < plan->pp; st++) {
        int rc = search_stage(plan, st, &changed, err);
        if (rc)
            return rc;
    }
    /* A caller that already built schedules gets them consistent with the new owners. */
    if (changed && plan->nschedules > 0)
        return cz_tp_schedule_build(plan, err);
    return CZ_OK;
}
