/* TP-aware DP partitioning: alpha balances the summed cost per DP rank, but what a GPU waits
 * for is the makespan the TP micro-group schedule makes of that set (a rank with one huge
 * matrix and many small ones can have the same sum as a well-packed rank and twice the
 * makespan). Starting from alpha's cuts, a local search moves one cut of one bucket by one
 * parameter boundary (handing one parameter to the neighbouring rank), rebuilds the TP schedule
 * of only the two ranks involved, and keeps the move when the stage's largest rank makespan
 * decreases, or stays and the sum of squared makespans decreases. Passes repeat over all cuts in a
 * fixed order until none improves (a local optimum) or a pass limit; larger moves (phase 2) follow.
 * Moves never stretch a range past the alpha bound of the ILP formulation (docs/SOLVERS.md), so
 * alpha keeps its meaning for communication. Phase 3 then hands parameters back towards DP balance
 * under the makespan the search reached. A stage keeps the result only when its largest makespan
 * fell by TPAWARE_MIN_GAIN or more, or fell at no cost in DP balance; otherwise alpha's cuts stay,
 * so tpaware is never worse than its start and never pays DP balance for nothing. Deterministic
 * (fixed order, no randomness) unless the CPU-time limit settings.tpaware_time_limit_s stops it
 * first. */
#include "cz_types.h"
#include "ilp_glpk.h" /* cz__plan_solver_note */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TPAWARE_MAX_PASSES 50
/* Phase 2 (multi-boundary and compound moves): largest shift of one cut, number of
 * phase-2 rounds, and a deterministic work budget per stage in parameters visited by schedule
 * rebuilds (a rebuild visits every parameter of the stage), so planning time stays bounded on
 * models with many thousands of matrices whatever the instance. */
#define TPAWARE_MAX_SHIFT 4
#define TPAWARE_MAX_ROUNDS 200
#define TPAWARE_WORK_BUDGET 4e7
/* A makespan gain below this fraction is within the cost model's noise (rated rates, not
 * measurements): when the search could not buy more than that, alpha's cuts stay, so the
 * DP balance is never paid for a gain nobody could measure. */
#define TPAWARE_MIN_GAIN 1e-4
/* Share of the time limit the search may use; the rest is kept for phase 3, which gives back
 * DP balance, so that a search stopped by the clock does not leave that price unpaid. */
#define TPAWARE_SEARCH_SHARE 0.8

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
    double *dpl;  /* per rank DP load: summed cost of every parameter it owns (metrics' dp.load) */
    double deadline; /* cz__cpu_seconds() after which the search stops (time limit) */
    int timed_out;
    unsigned clock_polls; /* time_left calls, to read the clock on every 32nd only */
    int *version;         /* per rank: bumped whenever its parameter set changes */
    /* Per move (bucket, cut, direction): the two makespans it produced and the versions of the
     * two ranks then. A rank's schedule depends only on its own parameters, so an evaluation
     * stays valid until either rank changes; the decision is still taken afresh each time. */
    int *memo_vf, *memo_vt;
    double *memo_mf, *memo_mt;
    /* Scratch of cz__tp_schedule_tasks: one rank's matrix parameters (nparams + 1) and the
     * slot loads (tp). */
    cz_costed *tasks;
    double *slot_load;
    int np_stage; /* parameters of the stage: the work of one rank_makespan call */
    double work;  /* phase 2: parameters visited by schedule rebuilds so far */
    /* Phase 2 scratch, all of size R (cuts: R + 1): ranks that gained / lost a parameter,
     * snapshots of the per-rank totals, trial cut vectors. */
    int *recv, *lose, *recv1, *lose1;
    double *ew0, *msum0, *mk0, *ew1, *msum1;
    int *nc1, *nc2, *oc1, *oc2;
} tpa;

/* Makespan of DP rank r of the stage as the TP schedule builder makes it: the rank's matrix
 * tasks go through cz__tp_schedule_tasks, so the automatic capacity and every strategy behave
 * exactly as in the full plan. */
static int rank_makespan(tpa *t, int r, double *out, cz_error *err)
{
    const cz_plan *plan = t->plan;
    int n = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->stage == t->stage && p->dp_owner == r && p->def.kind == CZ_KIND_MATRIX) {
            t->tasks[n].id = p->id;
            t->tasks[n].cost = p->cost;
            n++;
        }
    }
    cz_rank_schedule rs = {0};
    double capacity, sum = t->ew[r];
    int rc = cz__tp_schedule_tasks(&rs, &plan->tasks, t->tasks, n, &plan->settings, plan->tp,
                                   t->slot_load, &capacity, err);
    for (int g = 0; rc == CZ_OK && g < rs.ngroups; g++) {
        double mx = 0;
        for (int j = 0; j < rs.groups[g].nslots; j++)
            mx = fmax(mx, rs.groups[g].load[j]);
        sum += mx;
    }
    cz__rank_schedule_free_groups(&rs);
    *out = sum;
    return rc;
}

/* Recomputes the matrix totals of two ranks after a parameter moved between them. */
static void rank_matrix_totals(tpa *t, int a, int b)
{
    t->msum[a] = t->msum[b] = t->mmax[a] = t->mmax[b] = 0;
    for (size_t i = 0; i < t->plan->nparams; i++) {
        const cz_plan_param *p = &t->plan->params[i];
        if (p->stage != t->stage || p->def.kind != CZ_KIND_MATRIX ||
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

static double dp_load_max(const tpa *t)
{
    double m = 0;
    for (int r = 0; r < t->R; r++)
        m = fmax(m, t->dpl[r]);
    return m;
}

/* The acceptance rule of every search move: a lower largest makespan, or the same with a lower
 * sum of squares, which opens later moves. The DP balance is deliberately not a condition
 * here (requiring it cost Qwen3-8B on DP8 x TP8 a makespan of 1.36 instead of 1.12 of the
 * lower bound); phase 3 pays it back afterwards. Relative slack 1e-12: summation noise never
 * counts as an improvement. */
static int accept_move(double nmax, double nsq, double cur_max, double cur_sq)
{
    return nmax < cur_max * (1 - 1e-12) ||
           (nmax <= cur_max * (1 + 1e-12) && nsq < cur_sq * (1 - 1e-12));
}

/* The CPU-time limit: checked between moves, so one schedule rebuild may overrun it. Phase
 * 2 asks between candidate moves, most of which are pruned in well under a microsecond, so the
 * clock is read on every 32nd question only (reading it was a tenth of the search time). */
static int time_left(tpa *t)
{
    if (!t->timed_out && (t->clock_polls++ & 31) == 0 && cz__cpu_seconds() >= t->deadline)
        t->timed_out = 1;
    return !t->timed_out;
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

/* A one-boundary move of cut r of bucket bi, as phases 1 and 3 try it: left (dir -1), the
 * parameter before the cut goes from rank r-1 to r; right (dir +1), the parameter at the cut
 * goes from r to r-1. */
typedef struct tpa_move {
    int bi, r, old, nc, from, to, mat;
    int *c; /* the bucket's cuts */
    cz_plan_param *p;
    double ew_move, save_from, save_to;
    size_t memo; /* index into the memo of rank makespans */
} tpa_move;

/* Fills m; 0 when the cut cannot move that way (it would pass a neighbouring cut). */
static int move_init(tpa *t, int bi, int r, int dir, tpa_move *m)
{
    int *c = &t->cut[bi * (t->R + 1)];
    int nc = c[r] + dir;
    if (nc < c[r - 1] || nc > c[r + 1])
        return 0;
    int k = dir < 0 ? nc : c[r];
    cz_plan_param *p = &t->plan->params[t->order[t->first[bi] + k]];
    *m = (tpa_move){.bi = bi,
                    .r = r,
                    .old = c[r],
                    .nc = nc,
                    .from = dir < 0 ? r - 1 : r,
                    .to = dir < 0 ? r : r - 1,
                    .mat = p->def.kind == CZ_KIND_MATRIX,
                    .c = c,
                    .p = p,
                    .memo = ((size_t)bi * t->R + r) * 2 + (dir > 0)};
    m->ew_move = m->mat ? 0 : p->cost / t->plan->tp;
    return 1;
}

/* Moves the cut unless that lengthens the receiving range past the bucket's length bound, or
 * the receiving rank could not finish within limit whatever its schedule: any schedule lasts at
 * least the rank's elementwise share plus the larger of its largest task and its matrix work
 * spread over the TP ranks, so such a move is refused before the costly schedule rebuild
 * (same decisions, less time). Returns 0 with the cut unchanged when refused. */
static int move_cut(tpa *t, tpa_move *m, double bound, double limit)
{
    int64_t len_to = range_len(t, m->bi, m->c, m->to);
    m->c[m->r] = m->nc;
    int64_t nlen_to = range_len(t, m->bi, m->c, m->to);
    int to = m->to;
    double cost = m->p->cost;
    double lb = t->ew[to] + m->ew_move +
                fmax(m->mat ? fmax(t->mmax[to], cost) : t->mmax[to],
                     (t->msum[to] + (m->mat ? cost : 0)) / t->plan->tp);
    if ((nlen_to > len_to && (double)nlen_to > bound) || lb > limit) {
        m->c[m->r] = m->old;
        return 0;
    }
    return 1;
}

/* Hands the parameter over and sets both ranks' makespans (from the memo when neither rank
 * changed since the move was last tried). DP loads are the caller's. */
static int move_apply(tpa *t, tpa_move *m, cz_error *err)
{
    int from = m->from, to = m->to, rc;
    m->save_from = t->mk[from];
    m->save_to = t->mk[to];
    m->p->dp_owner = to;
    t->ew[from] -= m->ew_move;
    t->ew[to] += m->ew_move;
    size_t mv = m->memo;
    if (t->memo_vf[mv] == t->version[from] && t->memo_vt[mv] == t->version[to]) {
        t->mk[from] = t->memo_mf[mv];
        t->mk[to] = t->memo_mt[mv];
        return CZ_OK;
    }
    if ((rc = rank_makespan(t, from, &t->mk[from], err)) ||
        (rc = rank_makespan(t, to, &t->mk[to], err)))
        return rc;
    t->memo_vf[mv] = t->version[from];
    t->memo_vt[mv] = t->version[to];
    t->memo_mf[mv] = t->mk[from];
    t->memo_mt[mv] = t->mk[to];
    return CZ_OK;
}

/* A kept move: both ranks changed, so their memoized makespans are stale. */
static void move_keep(tpa *t, const tpa_move *m)
{
    t->version[m->from]++;
    t->version[m->to]++;
    if (m->mat)
        rank_matrix_totals(t, m->from, m->to);
}

/* Undoes move_apply and move_cut. */
static void move_undo(tpa *t, const tpa_move *m)
{
    m->p->dp_owner = m->from;
    t->ew[m->from] += m->ew_move;
    t->ew[m->to] -= m->ew_move;
    t->mk[m->from] = m->save_from;
    t->mk[m->to] = m->save_to;
    m->c[m->r] = m->old;
}

/* Phase 1: one cut by one boundary, passes in a fixed order until a pass keeps nothing. */
static int single_moves(tpa *t, double *cur_max, double *cur_sq, int *changed, cz_error *err)
{
    int rc = CZ_OK, R = t->R;
    for (int pass = 0; pass < TPAWARE_MAX_PASSES; pass++) {
        int improved = 0;
        for (int bi = 0; bi < t->nb && time_left(t); bi++) {
            double bound = len_bound(t, bi);
            for (int r = 1; r < R && time_left(t); r++) {
                for (int dir = -1; dir <= 1; dir += 2) {
                    tpa_move m;
                    if (!move_init(t, bi, r, dir, &m) ||
                        !move_cut(t, &m, bound, *cur_max * (1 + 1e-12)))
                        continue;
                    if ((rc = move_apply(t, &m, err)))
                        goto done;
                    t->dpl[m.from] -= m.p->cost;
                    t->dpl[m.to] += m.p->cost;
                    double nmax, nsq;
                    objective(t, &nmax, &nsq);
                    if (accept_move(nmax, nsq, *cur_max, *cur_sq)) {
                        *cur_max = nmax;
                        *cur_sq = nsq;
                        improved = 1;
                        *changed = 1;
                        move_keep(t, &m);
                    } else {
                        t->dpl[m.from] += m.p->cost;
                        t->dpl[m.to] -= m.p->cost;
                        move_undo(t, &m);
                    }
                }
            }
        }
        if (!improved)
            break;
    }
done:
    return rc;
}

/* Phase 3: give back the DP balance the makespan search spent where it bought nothing. With
 * the stage's largest makespan capped at what the search reached, a one-boundary move is kept
 * when it hands a parameter from a rank to a neighbour whose DP load stays below the giver's
 * (the sum of squared DP loads falls, the largest never rises) and neither rank's makespan
 * passes the cap. The search's ranks below the maximum had absorbed parameters freely; this
 * hands them back towards alpha's balance. Same moves, pruning and memo as phase 1. */
static int dp_rebalance(tpa *t, double cap, int *changed, cz_error *err)
{
    int rc = CZ_OK, R = t->R;
    for (int pass = 0; pass < TPAWARE_MAX_PASSES; pass++) {
        int improved = 0;
        for (int bi = 0; bi < t->nb && time_left(t); bi++) {
            double bound = len_bound(t, bi);
            for (int r = 1; r < R && time_left(t); r++) {
                for (int dir = -1; dir <= 1; dir += 2) {
                    tpa_move m;
                    if (!move_init(t, bi, r, dir, &m))
                        continue;
                    /* (a - x)^2 + (b + x)^2 < a^2 + b^2 exactly when b + x < a. */
                    if (!(t->dpl[m.to] + m.p->cost < t->dpl[m.from] * (1 - 1e-12)) ||
                        !move_cut(t, &m, bound, cap))
                        continue;
                    if ((rc = move_apply(t, &m, err)))
                        goto done;
                    /* No slack: the cap is the search's result, which must not get worse. */
                    if (t->mk[m.from] <= cap && t->mk[m.to] <= cap) {
                        t->dpl[m.from] -= m.p->cost;
                        t->dpl[m.to] += m.p->cost;
                        improved = 1;
                        *changed = 1;
                        move_keep(t, &m);
                    } else {
                        move_undo(t, &m);
                    }
                }
            }
        }
        if (!improved)
            break;
    }
done:
    return rc;
}

/* ---- Phase 2: moves a single cut shifted by one boundary cannot make ----
 * A "push" sets cut r of one bucket to a new index up to TPAWARE_MAX_SHIFT boundaries away and
 * drags every cut it overtakes along, so ranks stay contiguous and in order: it hands several
 * parameters at once, or hands a parameter across ranks that are empty in that bucket (e.g. an
 * MLP matrix from rank 4 straight to rank 6). A compound move applies two pushes at once so that
 * two ranks can exchange parameters (the busiest rank gives a large matrix to a partner in one
 * bucket while that partner gives smaller ones back in another), which no sequence of strictly
 * improving single moves may reach. */

/* Owner of position k of a bucket under cut vector c (c[r] = first index of rank >= r). */
static int owner_at(const int *c, int R, int k)
{
    int r = 0;
    while (r + 1 < R && c[r + 1] <= k)
        r++;
    return r;
}

/* Trial cut vector: c with cut r moved to nc and the cuts it overtakes dragged along. */
static void push_cut(const int *c, int R, int r, int nc, int *out)
{
    memcpy(out, c, (size_t)(R + 1) * sizeof *out);
    out[r] = nc;
    for (int q = r - 1; q >= 1 && out[q] > nc; q--)
        out[q] = nc;
    for (int q = r + 1; q < R && out[q] < nc; q++)
        out[q] = nc;
}

/* Index range [lo, hi) of the positions whose owner differs between cut vectors a and b. */
static void changed_span(const int *a, const int *b, int R, int *lo, int *hi)
{
    *lo = INT32_MAX;
    *hi = -1;
    for (int r = 1; r < R; r++)
        if (a[r] != b[r]) {
            *lo = a[r] < *lo ? a[r] : *lo;
            *lo = b[r] < *lo ? b[r] : *lo;
            *hi = a[r] > *hi ? a[r] : *hi;
            *hi = b[r] > *hi ? b[r] : *hi;
        }
}

/* No range may grow past the alpha bound (a range already longer may keep its length). */
static int within_bound(const tpa *t, int bi, const int *oldc, const int *newc)
{
    double bound = len_bound(t, bi);
    for (int r = 0; r < t->R; r++) {
        int64_t o = range_len(t, bi, oldc, r), n = range_len(t, bi, newc, r);
        if (n > o && (double)n > bound)
            return 0;
    }
    return 1;
}

/* Sets bucket bi to cut vector newc: owners, elementwise shares and matrix sums follow; ranks
 * that gain / lose a parameter are flagged in t->recv / t->lose. */
static void apply_cuts(tpa *t, int bi, const int *newc)
{
    int R = t->R, *c = &t->cut[bi * (R + 1)], lo, hi;
    changed_span(c, newc, R, &lo, &hi);
    for (int k = lo; k < hi; k++) {
        cz_plan_param *p = &t->plan->params[t->order[t->first[bi] + k]];
        int from = p->dp_owner, to = owner_at(newc, R, k);
        if (from == to)
            continue;
        p->dp_owner = to;
        t->dpl[from] -= p->cost;
        t->dpl[to] += p->cost;
        if (p->def.kind == CZ_KIND_MATRIX) {
            t->msum[from] -= p->cost;
            t->msum[to] += p->cost;
        } else {
            t->ew[from] -= p->cost / t->plan->tp;
            t->ew[to] += p->cost / t->plan->tp;
        }
        t->lose[from] = 1;
        t->recv[to] = 1;
    }
    memcpy(c, newc, (size_t)(R + 1) * sizeof *c);
}

/* Largest matrix that rank r now owns among positions [lo, hi) of bucket bi. */
static double moved_in_max(const tpa *t, int bi, int lo, int hi, int r)
{
    double m = 0;
    for (int k = lo; k < hi; k++) {
        const cz_plan_param *p = &t->plan->params[t->order[t->first[bi] + k]];
        if (p->dp_owner == r && p->def.kind == CZ_KIND_MATRIX)
            m = fmax(m, p->cost);
    }
    return m;
}

/* Scores the applied move over the flagged ranks. Moved spans: up to two (bucket, lo, hi).
 * Keeps it (*kept = 1) under the phase-1 rule, else leaves t->mk as it was (the caller
 * restores owners and totals). */
static int evaluate(tpa *t, const int *span, int nspan, double *cur_max, double *cur_sq, int *kept,
                    cz_error *err)
{
    int R = t->R, rc;
    *kept = 0;
    for (int r = 0; r < R; r++) {
        if (!t->recv[r])
            continue;
        /* Same exact lower bound as phase 1: a rank that lost nothing keeps its largest task. */
        double big = t->lose[r] ? 0 : t->mmax[r];
        for (int s = 0; s < nspan; s++)
            big = fmax(big, moved_in_max(t, span[3 * s], span[3 * s + 1], span[3 * s + 2], r));
        if (t->ew[r] + fmax(big, t->msum[r] / t->plan->tp) > *cur_max * (1 + 1e-12))
            return CZ_OK;
    }
    memcpy(t->mk0, t->mk, (size_t)R * sizeof *t->mk);
    for (int r = 0; r < R; r++)
        if (t->recv[r] || t->lose[r]) {
            t->work += t->np_stage;
            if ((rc = rank_makespan(t, r, &t->mk[r], err)))
                return rc;
        }
    double nmax, nsq;
    objective(t, &nmax, &nsq);
    if (accept_move(nmax, nsq, *cur_max, *cur_sq)) {
        *cur_max = nmax;
        *cur_sq = nsq;
        *kept = 1;
        /* Exact totals of the changed ranks; bumping versions invalidates phase-1 memos. */
        for (int r = 0; r < R; r++)
            if (t->recv[r] || t->lose[r]) {
                t->version[r]++;
                t->msum[r] = t->mmax[r] = 0;
            }
        for (size_t i = 0; i < t->plan->nparams; i++) {
            const cz_plan_param *p = &t->plan->params[i];
            int o = p->dp_owner;
            if (p->stage == t->stage && p->def.kind == CZ_KIND_MATRIX &&
                (t->recv[o] || t->lose[o])) {
                t->msum[o] += p->cost;
                t->mmax[o] = fmax(t->mmax[o], p->cost);
            }
        }
    } else {
        memcpy(t->mk, t->mk0, (size_t)R * sizeof *t->mk);
    }
    return CZ_OK;
}

static void flags_clear(tpa *t)
{
    memset(t->recv, 0, (size_t)t->R * sizeof *t->recv);
    memset(t->lose, 0, (size_t)t->R * sizeof *t->lose);
}

static void totals_save(const tpa *t, double *ew, double *msum)
{
    memcpy(ew, t->ew, (size_t)t->R * sizeof *ew);
    memcpy(msum, t->msum, (size_t)t->R * sizeof *msum);
}

static void totals_restore(tpa *t, const double *ew, const double *msum)
{
    memcpy(t->ew, ew, (size_t)t->R * sizeof *ew);
    memcpy(t->msum, msum, (size_t)t->R * sizeof *msum);
}

static int budget_left(tpa *t)
{
    return t->work < TPAWARE_WORK_BUDGET && time_left(t);
}

/* Phase 2a: every push of every cut by 2..K boundaries, or by one where it drags other cuts
 * (a plain one-boundary shift is phase 1's). One sweep; *improved when a move was kept. */
static int push_moves(tpa *t, double *cur_max, double *cur_sq, int *improved, cz_error *err)
{
    int R = t->R, rc;
    for (int bi = 0; bi < t->nb && budget_left(t); bi++) {
        int *c = &t->cut[bi * (R + 1)], np = t->first[bi + 1] - t->first[bi];
        for (int r = 1; r < R; r++)
            for (int d = -TPAWARE_MAX_SHIFT; d <= TPAWARE_MAX_SHIFT; d++) {
                int nc = c[r] + d, lo, hi, kept;
                if (d == 0 || nc < 0 || nc > np || !budget_left(t))
                    continue;
                push_cut(c, R, r, nc, t->nc1);
                if ((d == 1 || d == -1) && t->nc1[r - 1] == c[r - 1] &&
                    (r + 1 >= R || t->nc1[r + 1] == c[r + 1]))
                    continue;
                if (!within_bound(t, bi, c, t->nc1))
                    continue;
                changed_span(c, t->nc1, R, &lo, &hi);
                memcpy(t->oc1, c, (size_t)(R + 1) * sizeof *c);
                totals_save(t, t->ew0, t->msum0);
                flags_clear(t);
                apply_cuts(t, bi, t->nc1);
                int span[3] = {bi, lo, hi};
                if ((rc = evaluate(t, span, 1, cur_max, cur_sq, &kept, err)))
                    return rc;
                if (kept) {
                    *improved = 1;
                } else {
                    apply_cuts(t, bi, t->oc1);
                    totals_restore(t, t->ew0, t->msum0);
                }
            }
    }
    return CZ_OK;
}

/* Does a push from cut vector c to n on bucket bi hand a matrix away from rank a? */
static int gives_matrix(const tpa *t, int bi, const int *c, const int *n, int a)
{
    int lo, hi;
    changed_span(c, n, t->R, &lo, &hi);
    for (int k = lo; k < hi; k++) {
        const cz_plan_param *p = &t->plan->params[t->order[t->first[bi] + k]];
        if (p->dp_owner == a && p->def.kind == CZ_KIND_MATRIX && owner_at(n, t->R, k) != a)
            return 1;
    }
    return 0;
}

/* Does the second push fit a compound move: it takes from the busiest rank a or from a rank
 * that the first push fed, and feeds only a or ranks below the current maximum? */
static int partner_ok(const tpa *t, int bi, const int *c, const int *n, int a, double cur_max)
{
    int lo, hi, takes = 0;
    changed_span(c, n, t->R, &lo, &hi);
    for (int k = lo; k < hi; k++) {
        const cz_plan_param *p = &t->plan->params[t->order[t->first[bi] + k]];
        int from = p->dp_owner, to = owner_at(n, t->R, k);
        if (from == to)
            continue;
        if (to != a && t->mk[to] >= cur_max * (1 - 1e-12))
            return 0;
        takes |= from == a || t->recv1[from];
    }
    return takes;
}

/* Phase 2b: the first push hands at least one matrix away from the busiest rank (lowest index
 * on ties), the second is any push that passes partner_ok; both are kept together or not at
 * all. Stops at the first kept move. */
static int compound_moves(tpa *t, double *cur_max, double *cur_sq, int *improved, cz_error *err)
{
    int R = t->R, rc, a = 0;
    for (int r = 1; r < R; r++)
        if (t->mk[r] > t->mk[a])
            a = r;
    for (int b1 = 0; b1 < t->nb && budget_left(t); b1++) {
        int np1 = t->first[b1 + 1] - t->first[b1];
        for (int r1 = 1; r1 < R; r1++)
            for (int d1 = -TPAWARE_MAX_SHIFT; d1 <= TPAWARE_MAX_SHIFT; d1++) {
                int *c1 = &t->cut[b1 * (R + 1)], lo1, hi1;
                int n1 = c1[r1] + d1;
                if (d1 == 0 || n1 < 0 || n1 > np1 || !budget_left(t))
                    continue;
                push_cut(c1, R, r1, n1, t->nc1);
                if (!gives_matrix(t, b1, c1, t->nc1, a) || !within_bound(t, b1, c1, t->nc1))
                    continue;
                changed_span(c1, t->nc1, R, &lo1, &hi1);
                memcpy(t->oc1, c1, (size_t)(R + 1) * sizeof *c1);
                totals_save(t, t->ew0, t->msum0);
                flags_clear(t);
                apply_cuts(t, b1, t->nc1);
                memcpy(t->recv1, t->recv, (size_t)R * sizeof *t->recv);
                memcpy(t->lose1, t->lose, (size_t)R * sizeof *t->lose);
                totals_save(t, t->ew1, t->msum1);
                int kept = 0;
                for (int b2 = 0; b2 < t->nb && !kept && budget_left(t); b2++) {
                    int np2 = t->first[b2 + 1] - t->first[b2];
                    int *c2 = &t->cut[b2 * (R + 1)];
                    for (int r2 = 1; r2 < R && !kept; r2++) {
                        if (b2 == b1 && r2 == r1)
                            continue;
                        for (int d2 = -TPAWARE_MAX_SHIFT; d2 <= TPAWARE_MAX_SHIFT && !kept; d2++) {
                            int n2 = c2[r2] + d2, lo2, hi2;
                            if (d2 == 0 || n2 < 0 || n2 > np2 || !budget_left(t))
                                continue;
                            push_cut(c2, R, r2, n2, t->nc2);
                            if (!partner_ok(t, b2, c2, t->nc2, a, *cur_max) ||
                                !within_bound(t, b2, c2, t->nc2))
                                continue;
                            changed_span(c2, t->nc2, R, &lo2, &hi2);
                            memcpy(t->oc2, c2, (size_t)(R + 1) * sizeof *c2);
                            apply_cuts(t, b2, t->nc2);
                            int span[6] = {b1, lo1, hi1, b2, lo2, hi2};
                            if ((rc = evaluate(t, span, 2, cur_max, cur_sq, &kept, err)))
                                return rc;
                            if (!kept) {
                                apply_cuts(t, b2, t->oc2);
                                totals_restore(t, t->ew1, t->msum1);
                                memcpy(t->recv, t->recv1, (size_t)R * sizeof *t->recv);
                                memcpy(t->lose, t->lose1, (size_t)R * sizeof *t->lose);
                            }
                        }
                    }
                }
                if (kept) {
                    *improved = 1;
                    return CZ_OK;
                }
                apply_cuts(t, b1, t->oc1);
                totals_restore(t, t->ew0, t->msum0);
            }
    }
    return CZ_OK;
}

#define TPAWARE_CHAIN_LEN 8

/* Exact matrix totals of the flagged ranks, recomputed after a kept move; the version bump
 * invalidates phase 1's memos of those ranks. */
static void totals_refresh(tpa *t, const int *flag)
{
    for (int r = 0; r < t->R; r++)
        if (flag[r]) {
            t->version[r]++;
            t->msum[r] = t->mmax[r] = 0;
        }
    for (size_t i = 0; i < t->plan->nparams; i++) {
        const cz_plan_param *p = &t->plan->params[i];
        int o = p->dp_owner;
        if (p->stage == t->stage && p->def.kind == CZ_KIND_MATRIX && flag[o]) {
            t->msum[o] += p->cost;
            t->mmax[o] = fmax(t->mmax[o], p->cost);
        }
    }
}

/* Does the push from c to n on bucket bi hand away one of rank a's largest matrices (cost
 * within 1e-9 of big), and feed only ranks other than a below the maximum? */
static int chain_step_ok(const tpa *t, int bi, const int *c, const int *n, int a, double big,
                         double cur_max)
{
    int lo, hi, gives = 0;
    changed_span(c, n, t->R, &lo, &hi);
    for (int k = lo; k < hi; k++) {
        const cz_plan_param *p = &t->plan->params[t->order[t->first[bi] + k]];
        int from = p->dp_owner, to = owner_at(n, t->R, k);
        if (from == to)
            continue;
        if (to == a || t->mk[to] >= cur_max * (1 - 1e-12))
            return 0;
        gives |= from == a && p->def.kind == CZ_KIND_MATRIX && p->cost >= big * (1 - 1e-9);
    }
    return gives;
}

/* Phase 2c, an ejection chain: when the busiest rank a holds more of its largest matrices than
 * its TP slots take in one group, handing one away changes nothing (its makespan is a step
 * function of that count) while the receiver gets worse, so every single or paired move is
 * refused. The chain hands away one of a's largest matrices per step, each time to the
 * partner whose makespan grows least (fixed order on ties), up to TPAWARE_CHAIN_LEN steps, and
 * is kept as a whole at the first step where the phase-1 rule accepts it. */
static int chain_moves(tpa *t, double *cur_max, double *cur_sq, int *improved, cz_error *err)
{
    int R = t->R, rc = CZ_OK, a = 0, steps = 0, started = 0, kept = 0;
    for (int r = 1; r < R; r++)
        if (t->mk[r] > t->mk[a])
            a = r;
    int *hist_b = malloc(TPAWARE_CHAIN_LEN * sizeof *hist_b);
    int *hist_c = malloc((size_t)TPAWARE_CHAIN_LEN * (R + 1) * sizeof *hist_c);
    int *chg = calloc((size_t)R, sizeof *chg);
    double *mks = malloc((size_t)R * sizeof *mks), *mkc = malloc((size_t)R * sizeof *mkc);
    if (!hist_b || !hist_c || !chg || !mks || !mkc) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory in the tpaware DP search");
        goto done;
    }
    memcpy(mks, t->mk, (size_t)R * sizeof *mks);
    totals_save(t, t->ew1, t->msum1);
    started = 1;
    double big = t->mmax[a];
    for (; steps < TPAWARE_CHAIN_LEN && budget_left(t); steps++) {
        int best_b = -1, best_r = 0, best_n = 0;
        double best_score = INFINITY;
        for (int bi = 0; bi < t->nb && budget_left(t); bi++) {
            int *c = &t->cut[bi * (R + 1)], np = t->first[bi + 1] - t->first[bi];
            for (int r = 1; r < R; r++)
                for (int d = -TPAWARE_MAX_SHIFT; d <= TPAWARE_MAX_SHIFT; d++) {
                    int nc = c[r] + d;
                    if (d == 0 || nc < 0 || nc > np || !budget_left(t))
                        continue;
                    push_cut(c, R, r, nc, t->nc1);
                    if (!chain_step_ok(t, bi, c, t->nc1, a, big, *cur_max) ||
                        !within_bound(t, bi, c, t->nc1))
                        continue;
                    memcpy(t->oc1, c, (size_t)(R + 1) * sizeof *c);
                    memcpy(mkc, t->mk, (size_t)R * sizeof *mkc);
                    totals_save(t, t->ew0, t->msum0);
                    flags_clear(t);
                    apply_cuts(t, bi, t->nc1);
                    double score = 0;
                    for (int q = 0; q < R && rc == CZ_OK; q++)
                        if (t->recv[q]) {
                            t->work += t->np_stage;
                            rc = rank_makespan(t, q, &t->mk[q], err);
                            score = fmax(score, t->mk[q]);
                        }
                    apply_cuts(t, bi, t->oc1);
                    totals_restore(t, t->ew0, t->msum0);
                    memcpy(t->mk, mkc, (size_t)R * sizeof *mkc);
                    if (rc)
                        goto done;
                    if (score < *cur_max * (1 - 1e-12) && score < best_score) {
                        best_score = score;
                        best_b = bi;
                        best_r = r;
                        best_n = nc;
                    }
                }
        }
        if (best_b < 0)
            break;
        int *c = &t->cut[best_b * (R + 1)];
        hist_b[steps] = best_b;
        memcpy(&hist_c[steps * (R + 1)], c, (size_t)(R + 1) * sizeof *c);
        push_cut(c, R, best_r, best_n, t->nc1);
        flags_clear(t);
        apply_cuts(t, best_b, t->nc1);
        for (int q = 0; q < R && rc == CZ_OK; q++)
            if (t->recv[q] || t->lose[q]) {
                chg[q] = 1;
                t->work += t->np_stage;
                rc = rank_makespan(t, q, &t->mk[q], err);
            }
        if (rc) {
            steps++;
            goto done;
        }
        double nmax, nsq;
        objective(t, &nmax, &nsq);
        if (accept_move(nmax, nsq, *cur_max, *cur_sq)) {
            *cur_max = nmax;
            *cur_sq = nsq;
            *improved = 1;
            totals_refresh(t, chg);
            kept = 1;
            goto done;
        }
    }
done:
    if (started && !kept) { /* a failure, or a chain never accepted: undo its steps */
        while (steps-- > 0)
            apply_cuts(t, hist_b[steps], &hist_c[steps * (R + 1)]);
        totals_restore(t, t->ew1, t->msum1);
        memcpy(t->mk, mks, (size_t)R * sizeof *mks);
    }
    free(hist_b);
    free(hist_c);
    free(chg);
    free(mks);
    free(mkc);
    return rc;
}

/* The search state's arrays for one stage of plan over R DP ranks; -1 when one could not be
 * allocated (tpa_free releases whatever was). */
static int tpa_alloc(tpa *t, const cz_plan *plan, int R)
{
    t->dpl = calloc((size_t)R, sizeof *t->dpl);
    t->cut = malloc(((plan->nbuckets + 1) * (size_t)(R + 1)) * sizeof *t->cut);
    t->ew = calloc((size_t)R, sizeof *t->ew);
    t->mk = calloc((size_t)R, sizeof *t->mk);
    t->msum = calloc((size_t)R, sizeof *t->msum);
    t->mmax = calloc((size_t)R, sizeof *t->mmax);
    t->version = calloc((size_t)R, sizeof *t->version);
    size_t nmoves = (plan->nbuckets + 1) * (size_t)R * 2;
    t->memo_vf = malloc(nmoves * sizeof *t->memo_vf);
    t->memo_vt = malloc(nmoves * sizeof *t->memo_vt);
    t->memo_mf = malloc(nmoves * sizeof *t->memo_mf);
    t->memo_mt = malloc(nmoves * sizeof *t->memo_mt);
    t->tasks = malloc((plan->nparams + 1) * sizeof *t->tasks);
    t->slot_load = calloc((size_t)plan->tp, sizeof *t->slot_load);
    t->recv = calloc((size_t)R, sizeof *t->recv);
    t->lose = calloc((size_t)R, sizeof *t->lose);
    t->recv1 = calloc((size_t)R, sizeof *t->recv1);
    t->lose1 = calloc((size_t)R, sizeof *t->lose1);
    t->ew0 = calloc((size_t)R, sizeof *t->ew0);
    t->msum0 = calloc((size_t)R, sizeof *t->msum0);
    t->mk0 = calloc((size_t)R, sizeof *t->mk0);
    t->ew1 = calloc((size_t)R, sizeof *t->ew1);
    t->msum1 = calloc((size_t)R, sizeof *t->msum1);
    t->nc1 = calloc((size_t)R + 1, sizeof *t->nc1);
    t->nc2 = calloc((size_t)R + 1, sizeof *t->nc2);
    t->oc1 = calloc((size_t)R + 1, sizeof *t->oc1);
    t->oc2 = calloc((size_t)R + 1, sizeof *t->oc2);
    if (!t->cut || !t->ew || !t->mk || !t->msum || !t->mmax || !t->tasks || !t->slot_load ||
        !t->version || !t->memo_vf || !t->memo_vt || !t->memo_mf || !t->memo_mt || !t->recv ||
        !t->lose || !t->recv1 || !t->lose1 || !t->ew0 || !t->msum0 || !t->mk0 || !t->ew1 ||
        !t->msum1 || !t->nc1 || !t->nc2 || !t->oc1 || !t->oc2 || !t->dpl)
        return -1;
    for (size_t i = 0; i < nmoves; i++)
        t->memo_vf[i] = t->memo_vt[i] = -1;
    return 0;
}

static void tpa_free(tpa *t)
{
    free(t->dpl);
    free(t->bucket);
    free(t->first);
    free(t->order);
    free(t->cut);
    free(t->ew);
    free(t->mk);
    free(t->msum);
    free(t->mmax);
    free(t->version);
    free(t->memo_vf);
    free(t->memo_vt);
    free(t->memo_mf);
    free(t->memo_mt);
    free(t->tasks);
    free(t->slot_load);
    free(t->recv);
    free(t->lose);
    free(t->recv1);
    free(t->lose1);
    free(t->ew0);
    free(t->msum0);
    free(t->mk0);
    free(t->ew1);
    free(t->msum1);
    free(t->nc1);
    free(t->nc2);
    free(t->oc1);
    free(t->oc2);
}

/* Each rank's loads under the plan's owners (DP load, elementwise share, matrix sum and
 * largest), counting the stage's parameters in *n. */
static int tpa_loads(tpa *t, int *n, cz_error *err)
{
    const cz_plan *plan = t->plan;
    int R = t->R;
    *n = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->stage != t->stage)
            continue;
        if (p->dp_owner < 0 || p->dp_owner >= R)
            return cz__error_set(err, CZ_EINTERNAL,
                                 "tpaware needs an atomic starting partition; parameter '%s' has "
                                 "DP owner %d",
                                 p->def.name ? p->def.name : "?", p->dp_owner);
        (*n)++;
        t->dpl[p->dp_owner] += p->cost;
        if (p->def.kind != CZ_KIND_MATRIX) {
            t->ew[p->dp_owner] += p->cost / plan->tp;
        } else {
            t->msum[p->dp_owner] += p->cost;
            t->mmax[p->dp_owner] = fmax(t->mmax[p->dp_owner], p->cost);
        }
    }
    return CZ_OK;
}

/* The stage's buckets (t owns the index's arrays from here) and each bucket's cut indices from
 * the owners, which must be monotone along each bucket. */
static int tpa_cuts(tpa *t, int n, cz_error *err)
{
    const cz_plan *plan = t->plan;
    int R = t->R, rc = CZ_OK;
    cz_stage_buckets sb;
    int sbrc = cz__stage_buckets_build(&sb, plan, t->stage);
    t->bucket = sb.bucket;
    t->first = sb.first;
    t->order = sb.order;
    t->nb = sb.nb;
    t->np_stage = sb.n;
    if (sbrc != CZ_OK)
        return cz__error_set(err, CZ_ENOMEM, "out of memory in the tpaware DP search");
    /* Layout gives every parameter a bucket, so the index holds the whole stage. */
    CZ_ASSERT(sb.n == n, err);
    for (int bi = 0; bi < t->nb; bi++) {
        int *c = &t->cut[bi * (R + 1)];
        int np = t->first[bi + 1] - t->first[bi];
        c[0] = 0;
        for (int r = 1; r <= R; r++) {
            c[r] = np;
            for (int k = 0; k < np; k++)
                if (plan->params[t->order[t->first[bi] + k]].dp_owner >= r) {
                    c[r] = k;
                    break;
                }
        }
        for (int k = 0; k < np; k++) {
            int o = plan->params[t->order[t->first[bi] + k]].dp_owner;
            if (k < c[o] || k >= c[o + 1])
                return cz__error_set(err, CZ_EINTERNAL,
                                     "tpaware needs contiguous ranges; bucket %d has owners out of "
                                     "rank order",
                                     t->bucket[bi]);
        }
    }
    return rc;
}

/* The moves: single shifts, then rounds of pushes, chains and compound moves (each tried when
 * the one before found nothing), each gain followed by single shifts again. */
static int search_moves(tpa *t, double *cur_max, double *cur_sq, int *stage_changed, cz_error *err)
{
    int rc;
    if ((rc = single_moves(t, cur_max, cur_sq, stage_changed, err)))
        return rc;
    for (int round = 0; round < TPAWARE_MAX_ROUNDS; round++) {
        int improved = 0;
        if ((rc = push_moves(t, cur_max, cur_sq, &improved, err)))
            return rc;
        if (!improved && (rc = chain_moves(t, cur_max, cur_sq, &improved, err)))
            return rc;
        if (!improved && (rc = compound_moves(t, cur_max, cur_sq, &improved, err)))
            return rc;
        if (!improved)
            break;
        *stage_changed = 1;
        if ((rc = single_moves(t, cur_max, cur_sq, stage_changed, err)))
            return rc;
    }
    return CZ_OK;
}

/* One stage: the state from the plan's owners, the search, the rebalance, and the cuts kept
 * only for a gain. */
static int search_stage(cz_plan *plan, int stage, double search_deadline, double deadline,
                        int *changed, int *timed_out, cz_error *err)
{
    int rc = CZ_OK, R = plan->dp, stage_changed = 0, n = 0, saved = 0;
    tpa t;
    memset(&t, 0, sizeof t);
    t.plan = plan;
    t.stage = stage;
    t.R = R;
    t.deadline = search_deadline;
    int *start_owner = malloc((plan->nparams + 1) * sizeof *start_owner);
    if (tpa_alloc(&t, plan, R) != 0 || !start_owner) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory in the tpaware DP search");
        goto done;
    }
    if ((rc = tpa_loads(&t, &n, err)) != CZ_OK || (rc = tpa_cuts(&t, n, err)) != CZ_OK)
        goto done;
    for (int r = 0; r < R; r++)
        if ((rc = rank_makespan(&t, r, &t.mk[r], err)))
            goto done;
    double cur_max, cur_sq;
    objective(&t, &cur_max, &cur_sq);
    /* The starting point: restored unless the search gains (below), and on an error, so that
     * a failed call leaves the plan's owners consistent with its ranges. */
    double start_max = cur_max, start_dpmax = dp_load_max(&t);
    for (int k = 0; k < n; k++)
        start_owner[k] = plan->params[t.order[k]].dp_owner;
    saved = 1;
    if ((rc = search_moves(&t, &cur_max, &cur_sq, &stage_changed, err)))
        goto done;
    *timed_out |= t.timed_out;
    if (stage_changed && cur_max < start_max * (1 - 1e-12)) {
        t.deadline = deadline;
        t.timed_out = 0;
        if ((rc = dp_rebalance(&t, cur_max, &stage_changed, err)))
            goto done;
        *timed_out |= t.timed_out;
    }
    /* Keep the search's cuts only for a measurable gain, or where they cost no DP balance. */
    if (stage_changed &&
        (cur_max < start_max * (1 - TPAWARE_MIN_GAIN) ||
         (cur_max < start_max * (1 - 1e-12) && dp_load_max(&t) <= start_dpmax * (1 + 1e-12)))) {
        write_ranges(&t);
        *changed = 1;
        saved = 0;
    }
done:
    if (saved) /* no gain, or an error: every owner as it came in */
        for (int k = 0; k < n; k++)
            plan->params[t.order[k]].dp_owner = start_owner[k];
    free(start_owner);
    tpa_free(&t);
    return rc;
}

int cz__dp_partition_tpaware(cz_plan *plan, cz_error *err)
{
    if (plan->dp < 2)
        return CZ_OK;
    int changed = 0, timed_out = 0;
    double limit = plan->settings.tpaware_time_limit_s;
    double now = cz__cpu_seconds();
    double deadline = now + (limit > 0 ? limit : INFINITY);
    double search_deadline = now + (limit > 0 ? TPAWARE_SEARCH_SHARE * limit : INFINITY);
    for (int st = 0; st < plan->pp; st++) {
        int rc = search_stage(plan, st, search_deadline, deadline, &changed, &timed_out, err);
        if (rc)
            return rc;
    }
    if (timed_out)
        cz__plan_solver_note(plan,
                             "the tpaware search stopped at its time limit (%g CPU s, "
                             "--tpaware-time-limit); it kept the best cuts found by then, so the "
                             "plan may depend on the machine's speed.",
                             limit);
    /* A caller that already built schedules gets them consistent with the new owners. */
    if (changed && plan->nschedules > 0)
        return cz__tp_schedule_build(plan, err);
    return CZ_OK;
}
