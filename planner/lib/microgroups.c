/*
 * TP micro-group scheduling: per (stage, DP rank), the matrix parameters the rank updates become
 * compute tasks; each task gets a host TP rank (slot) inside a micro-group. R = tp slots per
 * group (one under sc or when tp == 1).
 *
 *  sc        every TP rank updates every matrix: one-slot groups in forward order, chunked so a
 *            group's summed cost stays within the capacity (at least one task per group).
 *  none      forward order, chunks of R tasks, task k of a chunk on slot k.
 *  single    cost-sorted (descending, ties by id), chunks of R, task k on slot k.
 *  slot      streaming longest-processing-time in forward order: each task to the least-loaded
 *            slot (ties: lowest slot); the group closes once its largest slot reaches C.
 *  rollback  greedy rollback (Canzona): tasks by cost descending (ties by id) join the open group;
 *            after each addition the group is LPT-assigned to R slots; if the mean slot load or
 *            the LPT makespan exceeds C, the last task is rolled back, the group emitted and a new
 *            one started with that task (a task larger than C forms a group alone).
 *
 * Capacity C: settings.capacity when > 0. Otherwise, per rank, with T the rank's total matrix
 * cost and L its largest task: for sc and slot C = max(L, T / (4 tp)), about four micro-groups so
 * that the gather of one group can hide behind the compute of another, never below the largest
 * task. For rollback, the candidates C_k = max(L, T / (k tp)) for k = 4, 3, 2 and C_1 = T (one
 * group) are each scheduled, and the largest k whose makespan is within 5% of the best candidate's
 * is kept: a group's collectives synchronize its TP ranks, so every extra group adds one "largest
 * slot" to the makespan, and when L is close to T / tp (few, large matrices per rank) forcing four
 * groups can cost far more than the overlap it buys. plan->capacity_used is the largest C used
 * over all ranks.
 *
 * Under the even baseline a rank updates every matrix its range touches (each touching rank
 * gathers and updates it redundantly); under every other strategy exactly the matrices it owns.
 */
#include "cz_algorithms.h"

#include <stdlib.h>
#include <string.h>

/* Slack on capacity comparisons, so that summation order cannot split equal-cost groups. */
#define CZ_CAP_SLACK (1.0 + 1e-12)

typedef cz_costed task;

typedef struct {
    cz_rank_schedule *rs;
    int cap;
    int nslots;
} group_sink;

static int group_emit(group_sink *gs, const task *tasks, const int *slots, int n, cz_error *err)
{
    cz_rank_schedule *rs = gs->rs;
    if (rs->ngroups == gs->cap) {
        int ncap = gs->cap ? 2 * gs->cap : 8;
        cz_plan_group *ng = realloc(rs->groups, (size_t)ncap * sizeof *ng);
        if (!ng)
            return cz_error_set(err, CZ_ENOMEM, "out of memory building micro-groups");
        rs->groups = ng;
        gs->cap = ncap;
    }
    cz_plan_group *g = &rs->groups[rs->ngroups];
    memset(g, 0, sizeof *g);
    g->id = rs->ngroups;
    g->nslots = gs->nslots;
    g->ntasks = n;
    g->task_param = malloc(((size_t)n + 1) * sizeof *g->task_param);
    g->task_slot = malloc(((size_t)n + 1) * sizeof *g->task_slot);
    g->load = calloc((size_t)gs->nslots, sizeof *g->load);
    rs->ngroups++; /* counted now so that a failure below still frees the group */
    if (!g->task_param || !g->task_slot || !g->load)
        return cz_error_set(err, CZ_ENOMEM, "out of memory building micro-groups");
    for (int k = 0; k < n; k++) {
        g->task_param[k] = tasks[k].id;
        g->task_slot[k] = slots[k];
        g->load[slots[k]] += tasks[k].cost;
    }
    return CZ_OK;
}

static int least_loaded(const double *load, int nslots)
{
    int best = 0;
    for (int s = 1; s < nslots; s++)
        if (load[s] < load[best])
            best = s;
    return best;
}

static int schedule_chunks(group_sink *gs, const task *tasks, int n, int *slots, cz_error *err)
{
    int rc = CZ_OK;
    for (int start = 0; start < n && rc == CZ_OK; start += gs->nslots) {
        int len = n - start < gs->nslots ? n - start : gs->nslots;
        for (int k = 0; k < len; k++)
            slots[k] = k;
        rc = group_emit(gs, tasks + start, slots, len, err);
    }
    return rc;
}

static int schedule_sc(group_sink *gs, const task *tasks, int n, double C, int *slots,
                       cz_error *err)
{
    int rc = CZ_OK, start = 0;
    double sum = 0.0;
    for (int k = 0; k < n; k++)
        slots[k] = 0;
    for (int k = 0; k < n && rc == CZ_OK; k++) {
        if (k > start && sum + tasks[k].cost > C * CZ_CAP_SLACK) {
            rc = group_emit(gs, tasks + start, slots, k - start, err);
            start = k;
            sum = 0.0;
        }
        sum += tasks[k].cost;
    }
    if (rc == CZ_OK && n > start)
        rc = group_emit(gs, tasks + start, slots, n - start, err);
    return rc;
}

static int schedule_slot(group_sink *gs, const task *tasks, int n, double C, int *slots,
                         double *load, cz_error *err)
{
    int rc = CZ_OK, start = 0;
    for (int s = 0; s < gs->nslots; s++)
        load[s] = 0.0;
    for (int k = 0; k < n && rc == CZ_OK; k++) {
        int s = least_loaded(load, gs->nslots);
        slots[k - start] = s;
        load[s] += tasks[k].cost;
        double max = 0.0;
        for (int t = 0; t < gs->nslots; t++)
            if (load[t] > max)
                max = load[t];
        if (max >= C / CZ_CAP_SLACK) {
            rc = group_emit(gs, tasks + start, slots, k + 1 - start, err);
            start = k + 1;
            for (int t = 0; t < gs->nslots; t++)
                load[t] = 0.0;
        }
    }
    if (rc == CZ_OK && n > start)
        rc = group_emit(gs, tasks + start, slots, n - start, err);
    return rc;
}

/* Greedy rollback over tasks sorted by descending cost into groups of nslots slots. With gs NULL
 * it only computes the makespan the groups would have (sum of each group's largest slot). */
static int schedule_rollback(group_sink *gs, int nslots, const task *tasks, int n, double C,
                             int *slots, double *load, double *makespan_out, cz_error *err)
{
    int rc = CZ_OK, start = 0;
    double sum = 0.0, makespan = 0.0, total = 0.0;
    for (int k = 1; k < n; k++)
        CZ_ASSERT(tasks[k - 1].cost >= tasks[k].cost, err);
    for (int s = 0; s < nslots; s++)
        load[s] = 0.0;
    /* Tasks arrive in descending cost order, so the LPT assignment of the group grown by one
     * task is the previous assignment plus the new task on the least-loaded slot. */
    for (int k = 0; k < n && rc == CZ_OK; k++) {
        int s = least_loaded(load, nslots);
        double grown = load[s] + tasks[k].cost;
        double span = grown > makespan ? grown : makespan;
        double mean = (sum + tasks[k].cost) / nslots;
        if (k > start && (mean > C * CZ_CAP_SLACK || span > C * CZ_CAP_SLACK)) {
            /* Roll back task k: emit the group as it stood before it, start anew with it. */
            if (gs)
                rc = group_emit(gs, tasks + start, slots, k - start, err);
            total += makespan;
            start = k;
            for (int t = 0; t < nslots; t++)
                load[t] = 0.0;
            sum = makespan = 0.0;
            s = 0;
            grown = span = tasks[k].cost;
        }
        slots[k - start] = s;
        load[s] = grown;
        sum += tasks[k].cost;
        makespan = span;
    }
    if (rc == CZ_OK && n > start && gs)
        rc = group_emit(gs, tasks + start, slots, n - start, err);
    if (makespan_out)
        *makespan_out = total + makespan;
    return rc;
}

/* The automatic rollback capacity of a rank (see the file comment). */
static double rollback_auto_capacity(const task *tasks, int n, double total, double largest,
                                     int nslots, int *slots, double *load)
{
    double cap[4], span[4], best = 0.0;
    for (int k = 1; k <= 4; k++) {
        double c = k == 1 ? total : total / ((double)k * nslots);
        cap[k - 1] = c > largest ? c : largest;
        schedule_rollback(NULL, nslots, tasks, n, cap[k - 1], slots, load, &span[k - 1], NULL);
        if (k == 1 || span[k - 1] < best)
            best = span[k - 1];
    }
    for (int k = 4; k > 1; k--)
        if (span[k - 1] <= best * 1.05)
            return cap[k - 1];
    return cap[0];
}

/* Does the parameter's local shard intersect DP rank r's range of its bucket? */
static bool touches(const cz_plan *plan, const cz_plan_param *p, int r)
{
    if (p->bucket < 0 || (size_t)p->bucket >= plan->nbuckets)
        return false;
    const int64_t *rg = plan->buckets[p->bucket].ranges;
    int64_t lo = rg[2 * r], hi = rg[2 * r + 1];
    return p->offset < hi && p->offset + p->numel > lo;
}

int cz_tp_schedule_tasks(cz_rank_schedule *rs, cz_costed *tasks, int n, const cz_settings *s,
                         int tp, int *slots, double *load, double *capacity, cz_error *err)
{
    cz_tp_strategy strategy = s->tp;
    int nslots = (strategy == CZ_TP_SC || tp <= 1) ? 1 : tp;
    double total = 0.0, largest = 0.0;
    *capacity = 0.0;
    if (n == 0)
        return CZ_OK;
    for (int k = 0; k < n; k++) {
        total += tasks[k].cost;
        if (tasks[k].cost > largest)
            largest = tasks[k].cost;
    }
    double C = s->capacity;
    if (!(C > 0.0) && strategy == CZ_TP_ROLLBACK) {
        cz_costed_sort(tasks, (size_t)n);
        C = rollback_auto_capacity(tasks, n, total, largest, nslots, slots, load);
    } else if (!(C > 0.0)) {
        C = total / (4.0 * tp);
        if (largest > C)
            C = largest;
    }
    *capacity = C;
    group_sink gs = {rs, 0, nslots};
    switch (strategy) {
    case CZ_TP_SC:
        return schedule_sc(&gs, tasks, n, C, slots, err);
    case CZ_TP_NONE:
        return schedule_chunks(&gs, tasks, n, slots, err);
    case CZ_TP_SINGLE:
        cz_costed_sort(tasks, (size_t)n);
        return schedule_chunks(&gs, tasks, n, slots, err);
    case CZ_TP_SLOT:
        return schedule_slot(&gs, tasks, n, C, slots, load, err);
    case CZ_TP_ROLLBACK:
        cz_costed_sort(tasks, (size_t)n);
        return schedule_rollback(&gs, nslots, tasks, n, C, slots, load, NULL, err);
    }
    return cz_error_set(err, CZ_EINVALID, "TP strategy %d is unknown", (int)strategy);
}

int cz_tp_schedule_build(cz_plan *plan, cz_error *err)
{
    int rc = CZ_OK, dp = plan->dp, tp = plan->tp;
    int nslots = (plan->settings.tp == CZ_TP_SC || tp <= 1) ? 1 : tp;
    task *tasks = malloc((plan->nparams + 1) * sizeof *tasks);
    int *slots = malloc((plan->nparams + 1) * sizeof *slots);
    double *load = calloc((size_t)nslots, sizeof *load);
    cz_plan_schedules_free(plan);
    plan->capacity_used = 0.0;
    if (!tasks || !slots || !load) {
        rc = cz_error_set(err, CZ_ENOMEM, "out of memory building micro-groups");
        goto done;
    }
    plan->schedules = calloc((size_t)plan->pp * (size_t)dp, sizeof *plan->schedules);
    if (!plan->schedules) {
        rc = cz_error_set(err, CZ_ENOMEM, "out of memory building micro-groups");
        goto done;
    }
    plan->nschedules = (size_t)plan->pp * (size_t)dp;
    for (int stage = 0; stage < plan->pp; stage++) {
        for (int r = 0; r < dp; r++) {
            cz_rank_schedule *rs = &plan->schedules[(size_t)stage * dp + r];
            rs->stage = stage;
            rs->dp_rank = r;
            int n = 0;
            for (size_t i = 0; i < plan->nparams; i++) {
                const cz_plan_param *p = &plan->params[i];
                if (p->stage != stage || p->def.kind != CZ_KIND_MATRIX)
                    continue;
                bool mine =
                    plan->settings.dp == CZ_DP_EVEN ? touches(plan, p, r) : p->dp_owner == r;
                if (!mine)
                    continue;
                tasks[n].id = p->id;
                tasks[n].cost = p->cost;
                n++;
            }
            double C;
            rc = cz_tp_schedule_tasks(rs, tasks, n, &plan->settings, tp, slots, load, &C, err);
            if (rc != CZ_OK)
                goto done;
            if (C > plan->capacity_used)
                plan->capacity_used = C;
        }
    }
done:
    free(tasks);
    free(slots);
    free(load);
    return rc;
}
