/* ILP solvers: the DP partition MIP and the micro-group MIP against brute force on small
 * hand-built plans, never worse than the starting (greedy) plan, and the time-out fallback. */
#include "cz_types.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33) % n;
}

/* A one-stage plan: params laid into buckets in id order (bucket[i] non-decreasing), each
 * param starting at a multiple of 4 elements, buckets padded to a multiple of dp. */
static cz_plan *plan_make(int n, int dp, int tp, const double *cost, const int64_t *numel,
                          const int *bucket, double alpha)
{
    cz_plan *p = calloc(1, sizeof *p);
    cz_settings_init(&p->settings);
    p->settings.dp = CZ_DP_ALPHA; /* the DP ILP refines alpha's cuts */
    p->settings.alpha = alpha;
    p->dp = dp;
    p->tp = tp;
    p->pp = 1;
    p->nparams = (size_t)n;
    p->params = calloc((size_t)n, sizeof *p->params);
    int nb = n ? bucket[n - 1] + 1 : 0;
    p->nbuckets = (size_t)nb;
    p->buckets = calloc((size_t)nb, sizeof *p->buckets);
    for (int b = 0; b < nb; b++) {
        p->buckets[b].id = b;
        p->buckets[b].ranges = calloc(2 * (size_t)dp, sizeof(int64_t));
    }
    int64_t pos = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && bucket[i] != bucket[i - 1]) {
            p->buckets[bucket[i - 1]].size = (pos + dp - 1) / dp * dp;
            pos = 0;
        }
        pos = (pos + 3) / 4 * 4;
        cz_plan_param *q = &p->params[i];
        q->id = i;
        q->def.ndim = 2;
        q->def.kind = CZ_KIND_MATRIX;
        q->def.tp_dim = -1;
        q->def.block_dim = -1;
        q->def.layer = -1;
        q->bucket = bucket[i];
        q->offset = pos;
        q->numel = numel[i];
        q->cost = cost[i];
        pos += numel[i];
    }
    if (n)
        p->buckets[bucket[n - 1]].size = (pos + dp - 1) / dp * dp;
    return p;
}

/* Ranges from owners, cutting at the start of the first param of each rank >= r. */
static void plan_set_owners(cz_plan *p, const int *owner)
{
    int R = p->dp;
    for (size_t i = 0; i < p->nparams; i++)
        p->params[i].dp_owner = owner[i];
    for (size_t b = 0; b < p->nbuckets; b++) {
        int64_t S = p->buckets[b].size;
        int64_t cut[16];
        cut[0] = 0;
        cut[R] = S;
        for (int r = 1; r < R; r++) {
            cut[r] = S;
            int first = 1;
            for (size_t i = 0; i < p->nparams; i++) {
                if (p->params[i].bucket != (int)b)
                    continue;
                if (owner[i] >= r) {
                    cut[r] = first ? 0 : p->params[i].offset;
                    break;
                }
                first = 0;
            }
        }
        for (int r = 0; r < R; r++) {
            p->buckets[b].ranges[2 * r] = cut[r];
            p->buckets[b].ranges[2 * r + 1] = cut[r + 1];
        }
    }
}

/* Anchored: the owner is the rank whose even slice holds the param's start. */
static void plan_set_anchored(cz_plan *p)
{
    int owner[4096];
    for (size_t i = 0; i < p->nparams; i++) {
        int64_t S = p->buckets[p->params[i].bucket].size;
        owner[i] = (int)(p->params[i].offset * p->dp / S);
    }
    plan_set_owners(p, owner);
}

static double plan_max_load(const cz_plan *p)
{
    double load[64] = {0};
    for (size_t i = 0; i < p->nparams; i++)
        load[p->params[i].dp_owner] += p->params[i].cost;
    double z = 0;
    for (int r = 0; r < p->dp; r++)
        z = fmax(z, load[r]);
    return z;
}

/* Coverage, order, atomicity: every range list tiles [0, size), each param inside its owner's. */
static void check_partition(const cz_plan *p)
{
    for (size_t b = 0; b < p->nbuckets; b++) {
        const int64_t *r = p->buckets[b].ranges;
        ck_assert_int_eq(r[0], 0);
        ck_assert_int_eq(r[2 * p->dp - 1], p->buckets[b].size);
        for (int k = 0; k < p->dp; k++) {
            ck_assert_int_le(r[2 * k], r[2 * k + 1]);
            if (k > 0)
                ck_assert_int_eq(r[2 * k], r[2 * k - 1]);
        }
    }
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        const int64_t *r = p->buckets[q->bucket].ranges;
        ck_assert_int_ge(q->dp_owner, 0);
        ck_assert_int_lt(q->dp_owner, p->dp);
        ck_assert_int_ge(q->offset, r[2 * q->dp_owner]);
        ck_assert_int_le(q->offset + q->numel, r[2 * q->dp_owner + 1]);
    }
}

/* ---- brute force over all cut placements ---- */
typedef struct bf_dp {
    const cz_plan *p;
    int owner[16];
    double best;
} bf_dp;

static double bf_len_bound(const cz_plan *p, int b)
{
    double S = (double)p->buckets[b].size, even = S / p->dp, maxspan = 0;
    int64_t prev = -1;
    for (size_t i = 0; i < p->nparams; i++) {
        if (p->params[i].bucket != b)
            continue;
        int64_t start = prev < 0 ? 0 : p->params[i].offset;
        if (prev >= 0)
            maxspan = fmax(maxspan, (double)(start - prev));
        prev = start;
    }
    maxspan = fmax(maxspan, S - (double)prev);
    return fmin(S, even + p->settings.alpha * (S - even) + maxspan);
}

static void bf_dp_rec(bf_dp *s, size_t i)
{
    const cz_plan *p = s->p;
    if (i == p->nparams) {
        double load[8] = {0};
        for (size_t j = 0; j < p->nparams; j++)
            load[s->owner[j]] += p->params[j].cost;
        for (size_t b = 0; b < p->nbuckets; b++) { /* range lengths under alpha */
            double len[8] = {0};
            int first = 1;
            for (size_t j = 0; j < p->nparams; j++) {
                if (p->params[j].bucket != (int)b)
                    continue;
                int64_t start = first ? 0 : p->params[j].offset, end = p->buckets[b].size;
                for (size_t k = j + 1; k < p->nparams; k++)
                    if (p->params[k].bucket == (int)b) {
                        end = p->params[k].offset;
                        break;
                    }
                len[s->owner[j]] += (double)(end - start);
                first = 0;
            }
            for (int r = 0; r < p->dp; r++)
                if (len[r] > bf_len_bound(p, (int)b) + 1e-9)
                    return;
        }
        double z = 0;
        for (int r = 0; r < p->dp; r++)
            z = fmax(z, load[r]);
        s->best = fmin(s->best, z);
        return;
    }
    int lo = (i > 0 && p->params[i - 1].bucket == p->params[i].bucket) ? s->owner[i - 1] : 0;
    for (int r = lo; r < p->dp; r++) {
        s->owner[i] = r;
        bf_dp_rec(s, i + 1);
    }
}

static double bf_dp_best(const cz_plan *p)
{
    bf_dp s = {.p = p, .best = INFINITY};
    bf_dp_rec(&s, 0);
    return s.best;
}

START_TEST(dp_hand_two_buckets)
{
    /* Bucket 0 holds costs 5,1 and bucket 1 holds 1,5; starting from everything on rank 0
     * (12 | 0), the optimum 6 | 6 needs the 5s on different ranks. */
    double cost[] = {5, 1, 1, 5};
    int64_t numel[] = {8, 8, 8, 8};
    int bucket[] = {0, 0, 1, 1};
    cz_plan *p = plan_make(4, 2, 1, cost, numel, bucket, 1.0);
    int owner[] = {0, 0, 0, 0};
    plan_set_owners(p, owner);
    cz_error err;
    ck_assert_int_eq(cz__dp_partition_ilp(p, &err), CZ_OK);
    ck_assert_double_eq_tol(plan_max_load(p), 6.0, 1e-12);
    ck_assert_int_ne(p->params[0].dp_owner, p->params[3].dp_owner);
    ck_assert_int_eq(p->solver_status, CZ_SOLVE_OPTIMAL);
    ck_assert_double_eq_tol(p->solver_gap, 0.0, 1e-12);
    check_partition(p);
    cz_plan_free(p);
}
END_TEST

START_TEST(dp_hand_alpha_bound)
{
    /* Six params of 10 elements, costs 1,1,1,1,1,10, two ranks. alpha = 1: 5 | 10 -> 10.
     * alpha = 0: range <= 30 + 10 = 40 elements = 4 params, so rank 0 takes 4 -> 11. */
    double cost[] = {1, 1, 1, 1, 1, 10};
    int64_t numel[] = {8, 8, 8, 8, 8, 8};
    int bucket[] = {0, 0, 0, 0, 0, 0};
    int owner[] = {0, 0, 0, 1, 1, 1};
    cz_error err;
    cz_plan *p = plan_make(6, 2, 1, cost, numel, bucket, 1.0);
    plan_set_owners(p, owner);
    ck_assert_int_eq(cz__dp_partition_ilp(p, &err), CZ_OK);
    ck_assert_double_eq_tol(plan_max_load(p), 10.0, 1e-12);
    ck_assert_int_eq(p->buckets[0].ranges[1], 40);
    cz_plan_free(p);

    p = plan_make(6, 2, 1, cost, numel, bucket, 0.0);
    plan_set_owners(p, owner);
    ck_assert_int_eq(cz__dp_partition_ilp(p, &err), CZ_OK);
    ck_assert_double_eq_tol(plan_max_load(p), 11.0, 1e-12);
    ck_assert_int_eq(p->buckets[0].ranges[1], 32);
    check_partition(p);
    cz_plan_free(p);
}
END_TEST

START_TEST(dp_random_equals_brute_force)
{
    rng_state = 12345;
    for (int trial = 0; trial < 60; trial++) {
        int n = 2 + (int)rnd(7), dp = 2 + (int)rnd(2);
        double cost[8];
        int64_t numel[8];
        int bucket[8], b = 0;
        for (int i = 0; i < n; i++) {
            numel[i] = 1 + rnd(40);
            cost[i] = (double)(1 + rnd(50)) * 1e-3; /* seconds-like magnitudes */
            if (i > 0 && rnd(3) == 0)
                b++;
            bucket[i] = b;
        }
        double alpha = (double)rnd(3) / 2.0;
        cz_plan *p = plan_make(n, dp, 1, cost, numel, bucket, alpha);
        plan_set_anchored(p);
        double start = plan_max_load(p);
        double best = bf_dp_best(p);
        cz_error err;
        ck_assert_int_eq(cz__dp_partition_ilp(p, &err), CZ_OK);
        ck_assert_int_eq(p->solver_status, CZ_SOLVE_OPTIMAL);
        ck_assert_msg(fabs(plan_max_load(p) - best) <= 1e-9 * best,
                      "trial %d: ILP %.9g, brute force %.9g", trial, plan_max_load(p), best);
        ck_assert_double_le(plan_max_load(p), start * (1 + 1e-12));
        check_partition(p);
        cz_plan_free(p);
    }
}
END_TEST

START_TEST(dp_never_worse_and_keeps_ties)
{
    /* Already optimal start (3 | 3): the plan must come back unchanged. */
    double cost[] = {1, 2, 2, 1};
    int64_t numel[] = {4, 4, 4, 4};
    int bucket[] = {0, 0, 0, 0};
    int owner[] = {0, 0, 1, 1};
    cz_plan *p = plan_make(4, 2, 1, cost, numel, bucket, 1.0);
    plan_set_owners(p, owner);
    cz_error err;
    ck_assert_int_eq(cz__dp_partition_ilp(p, &err), CZ_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(p->params[i].dp_owner, owner[i]);
    ck_assert_int_eq(p->buckets[0].ranges[1], 8);
    cz_plan_free(p);
}
END_TEST

START_TEST(dp_timeout_falls_back)
{
    enum { N = 600 };
    static double cost[N];
    static int64_t numel[N];
    static int bucket[N];
    rng_state = 99;
    for (int i = 0; i < N; i++) {
        numel[i] = 1000 + rnd(100000);
        cost[i] = (double)numel[i] * (1.0 + rnd(7));
        bucket[i] = i / 50;
    }
    cz_plan *p = plan_make(N, 8, 1, cost, numel, bucket, 1.0);
    plan_set_anchored(p);
    int before[N];
    for (int i = 0; i < N; i++)
        before[i] = p->params[i].dp_owner;
    double start = plan_max_load(p);
    p->settings.time_limit_s = 0.002;
    cz_error err;
    ck_assert_int_eq(cz__dp_partition_ilp(p, &err), CZ_OK);
    ck_assert_msg(p->solver_status == CZ_SOLVE_TIMEOUT || p->solver_status == CZ_SOLVE_FEASIBLE,
                  "status %s", cz__solve_status_name(p->solver_status));
    ck_assert_msg(strstr(p->solver_note, "time limit") != NULL, "note: '%s'", p->solver_note);
    ck_assert_double_le(plan_max_load(p), start);
    if (p->solver_status == CZ_SOLVE_TIMEOUT)
        for (int i = 0; i < N; i++)
            ck_assert_int_eq(p->params[i].dp_owner, before[i]);
    check_partition(p);
    cz_plan_free(p);
}
END_TEST

typedef struct progress_log {
    int calls;
    int phase_ok;
    int finite_reports;
    double last_elapsed, bound, incumbent;
} progress_log;

static void progress_record(const cz_progress *pr, void *payload)
{
    progress_log *log = payload;
    log->calls++;
    log->phase_ok = strcmp(pr->phase, "dp-ilp") == 0;
    log->last_elapsed = pr->elapsed_s;
    /* Bound and incumbent are NaN until the search has them (the warm start goes in at the
     * first heuristic call): keep the last report that had both. */
    if (!isnan(pr->best_bound) && !isnan(pr->incumbent)) {
        log->finite_reports++;
        log->bound = pr->best_bound;
        log->incumbent = pr->incumbent;
    }
}

START_TEST(dp_progress_reported)
{
    /* A solve that runs past a second reports progress, about once per second. */
    enum { N = 600 };
    static double cost[N];
    static int64_t numel[N];
    static int bucket[N];
    rng_state = 4242;
    for (int i = 0; i < N; i++) {
        numel[i] = 1000 + rnd(100000);
        cost[i] = (double)numel[i] * (1.0 + rnd(7)) * 1e-9;
        bucket[i] = i / 60;
    }
    cz_plan *p = plan_make(N, 8, 1, cost, numel, bucket, 1.0);
    plan_set_anchored(p);
    /* Long enough that the LP relaxation finishes and branching starts even on a loaded
     * 2-core CI machine, where the wall clock runs several times faster than our CPU time. */
    p->settings.time_limit_s = 6.0;
    progress_log log = {0};
    p->settings.progress = progress_record;
    p->settings.progress_payload = &log;
    cz_error err;
    int rc = cz__dp_partition_ilp(p, &err);
    ck_assert_int_eq(rc, CZ_OK);
    ck_assert_msg(p->solver_status == CZ_SOLVE_FEASIBLE, "status %s",
                  cz__solve_status_name(p->solver_status));
    ck_assert_int_ge(log.calls, 1);
    ck_assert_int_le(log.calls, 6);
    ck_assert(log.phase_ok);
    ck_assert_double_ge(log.last_elapsed, 1.0);
    /* Bound and incumbent are in the cost unit: near the mean load, bound below incumbent. */
    ck_assert_msg(log.finite_reports >= 1, "none of %d reports had a bound and an incumbent",
                  log.calls);
    ck_assert_double_le(log.bound, log.incumbent * (1 + 1e-9));
    double total = 0;
    for (int i = 0; i < N; i++)
        total += cost[i];
    ck_assert_double_ge(log.bound, total / 8 * (1 - 1e-6));
    ck_assert_double_le(log.incumbent, plan_max_load(p) * 1.5);
    cz_plan_free(p);
}
END_TEST

START_TEST(dp_rejects_non_atomic)
{
    double cost[] = {1, 2};
    int64_t numel[] = {4, 4};
    int bucket[] = {0, 0};
    cz_plan *p = plan_make(2, 2, 1, cost, numel, bucket, 1.0);
    plan_set_anchored(p);
    p->params[1].dp_owner = -1;
    cz_error err;
    ck_assert_int_eq(cz__dp_partition_ilp(p, &err), CZ_EINTERNAL);
    ck_assert_ptr_nonnull(strstr(err.message, "DP owner -1"));
    p->params[1].dp_owner = 1;
    p->settings.dp = CZ_DP_LAYERWISE;
    ck_assert_int_eq(cz__dp_partition_ilp(p, &err), CZ_OK);
    ck_assert_ptr_nonnull(strstr(p->solver_note, "kept layerwise"));
    cz_plan_free(p);
}
END_TEST

/* ---- micro-groups ---- */

/* One DP rank, tp slots; groups[g] lists task indices, slot[i] the slot of task i. */
static cz_plan *mg_make(int n, int tp, const double *cost, int ngroups, const int *group,
                        const int *slot, double capacity)
{
    int64_t numel[64];
    int bucket[64];
    for (int i = 0; i < n; i++) {
        numel[i] = 4;
        bucket[i] = 0;
    }
    cz_plan *p = plan_make(n, 1, tp, cost, numel, bucket, 1.0);
    int owner[64] = {0};
    plan_set_owners(p, owner);
    p->capacity_used = capacity;
    p->nschedules = 1;
    p->schedules = calloc(1, sizeof *p->schedules);
    cz_rank_schedule *rs = &p->schedules[0];
    rs->ngroups = ngroups;
    rs->groups = calloc((size_t)ngroups, sizeof *rs->groups);
    for (int g = 0; g < ngroups; g++) {
        cz_plan_group *gr = &rs->groups[g];
        gr->id = g;
        gr->nslots = tp;
        gr->task_param = malloc((size_t)n * sizeof(int));
        gr->task_slot = malloc((size_t)n * sizeof(int));
        gr->load = calloc((size_t)tp, sizeof(double));
        for (int i = 0; i < n; i++)
            if (group[i] == g) {
                gr->task_param[gr->ntasks] = i;
                gr->task_slot[gr->ntasks] = slot[i];
                gr->load[slot[i]] += cost[i];
                gr->ntasks++;
            }
    }
    return p;
}

static double mg_value(const cz_plan *p, const cz_rank_schedule *rs)
{
    double v = 0;
    for (int g = 0; g < rs->ngroups; g++) {
        double mx = 0, l[8] = {0};
        for (int t = 0; t < rs->groups[g].ntasks; t++)
            l[rs->groups[g].task_slot[t]] += p->params[rs->groups[g].task_param[t]].cost;
        for (int k = 0; k < rs->groups[g].nslots; k++) {
            ck_assert_double_eq_tol(l[k], rs->groups[g].load[k], 1e-12);
            mx = fmax(mx, l[k]);
        }
        v += mx;
    }
    return v;
}

/* Every task exactly once, slots in range. */
static void mg_check(const cz_plan *p, int n)
{
    int seen[64] = {0};
    const cz_rank_schedule *rs = &p->schedules[0];
    for (int g = 0; g < rs->ngroups; g++) {
        ck_assert_int_gt(rs->groups[g].ntasks, 0);
        for (int t = 0; t < rs->groups[g].ntasks; t++) {
            seen[rs->groups[g].task_param[t]]++;
            ck_assert_int_ge(rs->groups[g].task_slot[t], 0);
            ck_assert_int_lt(rs->groups[g].task_slot[t], p->tp);
        }
    }
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(seen[i], 1);
}

static void bf_mg_rec(const double *cost, int n, int G, int K, double cap, int t, double *load,
                      double *best)
{
    if (t == n) {
        double v = 0;
        for (int g = 0; g < G; g++) {
            double mx = 0;
            for (int k = 0; k < K; k++)
                mx = fmax(mx, load[g * K + k]);
            v += mx;
        }
        *best = fmin(*best, v);
        return;
    }
    for (int s = 0; s < G * K; s++) {
        if (load[s] + cost[t] > cap + 1e-12)
            continue;
        load[s] += cost[t];
        bf_mg_rec(cost, n, G, K, cap, t + 1, load, best);
        load[s] -= cost[t];
    }
}

START_TEST(mg_hand_moves_between_groups)
{
    /* Greedy: {5 | 4} and {3+1 | 2+1}: 5 + 4 = 9. Moving a 1 next to the 4 gives
     * {5 | 4+1} and {3 | 2+1}: 5 + 3 = 8 = total / 2, optimal. */
    double cost[] = {5, 4, 3, 2, 1, 1};
    int group[] = {0, 0, 1, 1, 1, 1};
    int slot[] = {0, 1, 0, 1, 0, 1};
    cz_plan *p = mg_make(6, 2, cost, 2, group, slot, 6.0);
    ck_assert_double_eq_tol(mg_value(p, &p->schedules[0]), 9.0, 1e-12);
    cz_error err;
    ck_assert_int_eq(cz__microgroups_ilp(p, &err), CZ_OK);
    ck_assert_double_eq_tol(mg_value(p, &p->schedules[0]), 8.0, 1e-12);
    ck_assert_int_eq(p->schedules[0].ngroups, 2);
    ck_assert_int_eq(p->solver_status, CZ_SOLVE_OPTIMAL);
    mg_check(p, 6);
    cz_plan_free(p);
}
END_TEST

START_TEST(mg_hand_capacity_binds)
{
    /* Tasks 3,2,2,1 on two slots, start {3 | -}, {2 | -}, {2 | 1}: 3 + 2 + 2 = 7. Without a
     * capacity one group {3+1 | 2+2} gives 4; with capacity 3 no slot may exceed 3 and the
     * best is {3 | 2+1}, {2 | -}: 5. */
    double cost[] = {3, 2, 2, 1};
    int group[] = {0, 1, 2, 2};
    int slot[] = {0, 0, 0, 1};
    cz_error err;
    cz_plan *p = mg_make(4, 2, cost, 3, group, slot, 3.0);
    ck_assert_double_eq_tol(mg_value(p, &p->schedules[0]), 7.0, 1e-12);
    ck_assert_int_eq(cz__microgroups_ilp(p, &err), CZ_OK);
    ck_assert_double_eq_tol(mg_value(p, &p->schedules[0]), 5.0, 1e-12);
    for (int g = 0; g < p->schedules[0].ngroups; g++)
        for (int k = 0; k < 2; k++)
            ck_assert_double_le(p->schedules[0].groups[g].load[k], 3.0);
    mg_check(p, 4);
    cz_plan_free(p);

    p = mg_make(4, 2, cost, 3, group, slot, 1e9);
    ck_assert_int_eq(cz__microgroups_ilp(p, &err), CZ_OK);
    ck_assert_double_eq_tol(mg_value(p, &p->schedules[0]), 4.0, 1e-12);
    ck_assert_int_eq(p->schedules[0].ngroups, 1);
    mg_check(p, 4);
    cz_plan_free(p);
}
END_TEST

START_TEST(mg_random_equals_brute_force)
{
    rng_state = 777;
    for (int trial = 0; trial < 40; trial++) {
        int n = 2 + (int)rnd(5), G = 1 + (int)rnd(3);
        if (G > n)
            G = n;
        double cost[8];
        int group[8], slot[8];
        double maxc = 0;
        for (int i = 0; i < n; i++) {
            cost[i] = (double)(1 + rnd(20));
            maxc = fmax(maxc, cost[i]);
            group[i] = i < G ? i : (int)rnd((uint32_t)G);
            slot[i] = (int)rnd(2);
        }
        /* A capacity the starting schedule meets (so it can warm-start) yet often binding. */
        double l[16] = {0}, need = 0;
        for (int i = 0; i < n; i++)
            l[group[i] * 2 + slot[i]] += cost[i];
        for (int s = 0; s < 2 * G; s++)
            need = fmax(need, l[s]);
        double cap = rnd(2) ? need : 1e9;
        cz_plan *p = mg_make(n, 2, cost, G, group, slot, cap);
        double start = mg_value(p, &p->schedules[0]);
        double best = INFINITY, load[16] = {0};
        bf_mg_rec(cost, n, G, 2, fmax(cap, maxc), 0, load, &best);
        cz_error err;
        ck_assert_int_eq(cz__microgroups_ilp(p, &err), CZ_OK);
        double v = mg_value(p, &p->schedules[0]);
        ck_assert_msg(fabs(v - best) <= 1e-9 * best, "trial %d: ILP %g, brute force %g", trial, v,
                      best);
        ck_assert_double_le(v, start);
        ck_assert_int_le(p->schedules[0].ngroups, G);
        mg_check(p, n);
        cz_plan_free(p);
    }
}
END_TEST

START_TEST(mg_timeout_falls_back)
{
    /* 60 tasks, 12 groups of 5, 4 slots: 2880 binaries; 1 ms is not enough for the LP. */
    enum { N = 60 };
    double cost[N];
    int group[N], slot[N];
    rng_state = 31337;
    for (int i = 0; i < N; i++) {
        cost[i] = (double)(1 + rnd(100));
        group[i] = i / 5;
        slot[i] = i % 4;
    }
    cz_plan *p = mg_make(N, 4, cost, 12, group, slot, 1e9);
    /* mg_make copies at most 64 tasks per group and tracks slots up to 8: within bounds. */
    double start = mg_value(p, &p->schedules[0]);
    int before[N];
    for (int i = 0; i < N; i++)
        before[i] = p->schedules[0].groups[i / 5].task_param[i % 5];
    p->settings.time_limit_s = 0.001;
    cz_error err;
    ck_assert_int_eq(cz__microgroups_ilp(p, &err), CZ_OK);
    ck_assert_msg(p->solver_status_tp == CZ_SOLVE_TIMEOUT ||
                      p->solver_status_tp == CZ_SOLVE_FEASIBLE,
                  "status %s", cz__solve_status_name(p->solver_status_tp));
    ck_assert_ptr_nonnull(strstr(p->solver_note, "time"));
    ck_assert_double_le(mg_value(p, &p->schedules[0]), start);
    if (p->solver_status_tp == CZ_SOLVE_TIMEOUT) {
        ck_assert_int_eq(p->schedules[0].ngroups, 12);
        for (int i = 0; i < N; i++)
            ck_assert_int_eq(p->schedules[0].groups[i / 5].task_param[i % 5], before[i]);
    }
    mg_check(p, N);
    cz_plan_free(p);
}
END_TEST

static Suite *ilp_suite(void)
{
    Suite *s = suite_create("ilp");
    TCase *tc = tcase_create("dp");
    /* Solves run against GLPK time limits of up to 2.5 s; Check's default 4 s per test is too
     * tight for a loaded 2-core machine under the sanitizers. */
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, dp_hand_two_buckets);
    tcase_add_test(tc, dp_hand_alpha_bound);
    tcase_add_test(tc, dp_random_equals_brute_force);
    tcase_add_test(tc, dp_never_worse_and_keeps_ties);
    tcase_add_test(tc, dp_timeout_falls_back);
    tcase_add_test(tc, dp_rejects_non_atomic);
    tcase_add_test(tc, dp_progress_reported);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("microgroups");
    tcase_set_timeout(tm, 120);
    tcase_add_test(tm, mg_hand_moves_between_groups);
    tcase_add_test(tm, mg_hand_capacity_binds);
    tcase_add_test(tm, mg_random_equals_brute_force);
    tcase_add_test(tm, mg_timeout_falls_back);
    suite_add_tcase(s, tm);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ilp_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
