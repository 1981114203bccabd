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
 *
 * A plan with expert groups schedules its experts the same way per expert rank (an EP rank's
 * expert-DP rank), over the ETP ranks that split them: the same-shape experts of a rank are
 * tasks of equal cost, which rollback batches into micro-groups across the ETP slots.
 *
 * Block and cooperative tasks (plan->tasks, tp_tasks.c): under --split-blocks a blocked matrix
 * enters as one task per block. A task of width k > 1 runs on an aligned set of k slots (slots
 * j k .. j k + k - 1) and adds its per-slot cost to each; rollback's LPT step puts it on the set
 * whose busiest slot is least loaded, and "cost" everywhere above is the per-slot cost (the
 * mean check counts k times it). The width of each task: --coop K gives every task that can
 * take it width K; --coop auto chooses per rank by the rollback makespan itself (widths_auto:
 * per-slot targets, then descents), so a split is kept only where it shortens the makespan, and
 * then tries the packed schedule (schedule_packed: widths and slots chosen together, one group),
 * kept where it is shorter still. Under the joint DP strategy (automatic capacity, no forced
 * width) every rank's rollback schedule is compared with the packed one, the model the joint
 * cut was made with, which is kept wherever it is shorter.
 */
#include "cz_algorithms.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The makespan a schedule of several micro-groups may cost over one of fewer: their gathers and
 * scatters overlap the compute of the others. */
#define CZ_GROUPS_SLACK 1.05
/* Slack on capacity comparisons, so that summation order cannot split equal-cost groups. */
#define CZ_CAP_SLACK (1.0 + 1e-12)

/* One task as the scheduler places it. */
typedef struct tp_task {
    int param, block, width, slot;
    double cost; /* on each slot it occupies */
    int tix;     /* index in the plan's task table, -1 without one */
    int group;   /* the group rollback put it in (schedule_rollback's scoring pass) */
} tp_task;

/* Decreasing per-slot cost; ties by parameter id, then block: the order of cz__costed_sort for
 * whole matrices. */
static int task_cmp(const void *a, const void *b)
{
    const tp_task *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost > y->cost ? -1 : 1;
    if (x->param != y->param)
        return x->param < y->param ? -1 : 1;
    return (x->block > y->block) - (x->block < y->block);
}

static void tasks_sort(tp_task *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, task_cmp);
}

typedef struct {
    cz_rank_schedule *rs;
    int cap;
    int nslots;
    const cz_task_table *tt; /* the panel counts of cooperative widths; NULL: none */
} group_sink;

/* The Gram panel count the table's cost of the task at its width is for (1 when hosted). */
static int task_panels_of(const cz_task_table *tt, const tp_task *t)
{
    if (t->width <= 1 || !tt || !tt->panels || t->tix < 0)
        return 1;
    for (int w = 0; w < tt->nwidths; w++)
        if (tt->widths[w] == t->width)
            return tt->panels[(size_t)t->tix * (size_t)tt->nwidths + (size_t)w];
    return 1;
}

static int group_emit(group_sink *gs, const tp_task *tasks, int n, cz_error *err)
{
    cz_rank_schedule *rs = gs->rs;
    if (rs->ngroups == gs->cap) {
        int ncap = gs->cap ? 2 * gs->cap : 8;
        cz_plan_group *ng = realloc(rs->groups, (size_t)ncap * sizeof *ng);
        if (!ng)
            return cz__error_set(err, CZ_ENOMEM, "out of memory building micro-groups");
        rs->groups = ng;
        gs->cap = ncap;
    }
    cz_plan_group *g = &rs->groups[rs->ngroups];
    memset(g, 0, sizeof *g);
    g->id = rs->ngroups;
    g->nslots = gs->nslots;
    g->ntasks = n;
    size_t m = (size_t)n + 1;
    g->task_param = malloc(m * sizeof *g->task_param);
    g->task_slot = malloc(m * sizeof *g->task_slot);
    g->task_block = malloc(m * sizeof *g->task_block);
    g->task_width = malloc(m * sizeof *g->task_width);
    g->task_panels = malloc(m * sizeof *g->task_panels);
    g->task_cost = malloc(m * sizeof *g->task_cost);
    g->load = calloc((size_t)gs->nslots, sizeof *g->load);
    rs->ngroups++; /* counted now so that a failure below still frees the group */
    if (!g->task_param || !g->task_slot || !g->task_block || !g->task_width || !g->task_panels ||
        !g->task_cost || !g->load)
        return cz__error_set(err, CZ_ENOMEM, "out of memory building micro-groups");
    for (int k = 0; k < n; k++) {
        const tp_task *t = &tasks[k];
        g->task_param[k] = t->param;
        g->task_slot[k] = t->slot;
        g->task_block[k] = t->block;
        g->task_width[k] = t->width;
        g->task_panels[k] = task_panels_of(gs->tt, t);
        g->task_cost[k] = t->cost;
        for (int x = t->slot; x < t->slot + t->width; x++)
            g->load[x] += t->cost;
    }
    return CZ_OK;
}

/* The first slot of the aligned set of `width` slots whose busiest slot is least loaded (ties:
 * the lowest set), and that slot's load in *busiest. Width 1: the least-loaded slot. */
static int least_loaded_set(const double *load, int nslots, int width, double *busiest)
{
    int best = 0;
    double bmax = 0.0;
    for (int j = 0; j + width <= nslots; j += width) {
        double mx = load[j];
        for (int x = j + 1; x < j + width; x++)
            if (load[x] > mx)
                mx = load[x];
        if (j == 0 || mx < bmax)
            best = j, bmax = mx;
    }
    *busiest = bmax;
    return best;
}

static int schedule_chunks(group_sink *gs, tp_task *tasks, int n, cz_error *err)
{
    int rc = CZ_OK;
    for (int start = 0; start < n && rc == CZ_OK; start += gs->nslots) {
        int len = n - start < gs->nslots ? n - start : gs->nslots;
        for (int k = 0; k < len; k++)
            tasks[start + k].slot = k;
        rc = group_emit(gs, tasks + start, len, err);
    }
    return rc;
}

static int schedule_sc(group_sink *gs, tp_task *tasks, int n, double C, cz_error *err)
{
    int rc, start = 0;
    double sum = 0.0;
    for (int k = 0; k < n; k++)
        tasks[k].slot = 0;
    for (int k = 0; k < n; k++) {
        if (k > start && sum + tasks[k].cost > C * CZ_CAP_SLACK) {
            if ((rc = group_emit(gs, tasks + start, k - start, err)) != CZ_OK)
                return rc;
            start = k;
            sum = 0.0;
        }
        sum += tasks[k].cost;
    }
    return n > start ? group_emit(gs, tasks + start, n - start, err) : CZ_OK;
}

static int schedule_slot(group_sink *gs, tp_task *tasks, int n, double C, double *load,
                         cz_error *err)
{
    int rc, start = 0;
    for (int s = 0; s < gs->nslots; s++)
        load[s] = 0.0;
    for (int k = 0; k < n; k++) {
        double unused;
        int s = least_loaded_set(load, gs->nslots, 1, &unused);
        tasks[k].slot = s;
        load[s] += tasks[k].cost;
        double max = 0.0;
        for (int t = 0; t < gs->nslots; t++)
            if (load[t] > max)
                max = load[t];
        if (max >= C / CZ_CAP_SLACK) {
            if ((rc = group_emit(gs, tasks + start, k + 1 - start, err)) != CZ_OK)
                return rc;
            start = k + 1;
            for (int t = 0; t < gs->nslots; t++)
                load[t] = 0.0;
        }
    }
    return n > start ? group_emit(gs, tasks + start, n - start, err) : CZ_OK;
}

/* Greedy rollback over tasks sorted by descending per-slot cost into groups of nslots slots.
 * With gs NULL it only computes the makespan the groups would have (sum of each group's largest
 * slot). *makespan_out is set on every return: INFINITY when the tasks are out of order (the
 * assertion's return, a planner bug), so a scoring caller with no error to report ranks that
 * schedule last instead of reading an undefined makespan. */
static int schedule_rollback(group_sink *gs, int nslots, tp_task *tasks, int n, double C,
                             double *load, double *makespan_out, cz_error *err)
{
    int rc = CZ_OK, start = 0, group = 0;
    double sum = 0.0, makespan = 0.0, total = 0.0;
    if (makespan_out)
        *makespan_out = INFINITY;
    for (int k = 1; k < n; k++)
        CZ_ASSERT(tasks[k - 1].cost >= tasks[k].cost, err);
    for (int s = 0; s < nslots; s++)
        load[s] = 0.0;
    /* Tasks arrive in descending cost order, so the LPT assignment of the group grown by one
     * task is the previous assignment plus the new task on the least-loaded slot (set). */
    for (int k = 0; k < n; k++) {
        int w = tasks[k].width;
        double busiest;
        int s = least_loaded_set(load, nslots, w, &busiest);
        double grown = busiest + tasks[k].cost;
        double span = grown > makespan ? grown : makespan;
        double add = w * tasks[k].cost;
        double mean = (sum + add) / nslots;
        if (k > start && (mean > C * CZ_CAP_SLACK || span > C * CZ_CAP_SLACK)) {
            /* Roll back task k: emit the group as it stood before it, start anew with it. */
            if (gs && (rc = group_emit(gs, tasks + start, k - start, err)) != CZ_OK)
                goto done;
            total += makespan;
            start = k;
            group++;
            for (int t = 0; t < nslots; t++)
                load[t] = 0.0;
            sum = makespan = 0.0;
            s = 0;
            grown = span = tasks[k].cost;
        }
        tasks[k].slot = s;
        tasks[k].group = group;
        for (int x = s; x < s + w; x++)
            load[x] += tasks[k].cost;
        sum += add;
        makespan = span;
    }
    if (n > start && gs)
        rc = group_emit(gs, tasks + start, n - start, err);
done:
    if (makespan_out)
        *makespan_out = total + makespan;
    return rc;
}

/* Total slot time and largest per-slot cost of a task list. */
static void tasks_totals(const tp_task *t, int n, double *total, double *largest)
{
    *total = 0.0, *largest = 0.0;
    for (int k = 0; k < n; k++) {
        *total += t[k].width * t[k].cost;
        if (t[k].cost > *largest)
            *largest = t[k].cost;
    }
}

/* The automatic rollback capacity of a rank (see the file comment), and the makespan it gives. */
static double rollback_auto_capacity(tp_task *tasks, int n, int nslots, double total,
                                     double largest, double *load, double *span_out)
{
    double cap[4], span[4], best = 0.0;
    for (int k = 1; k <= 4; k++) {
        double c = k == 1 ? total : total / ((double)k * nslots);
        cap[k - 1] = c > largest ? c : largest;
        schedule_rollback(NULL, nslots, tasks, n, cap[k - 1], load, &span[k - 1], NULL);
        if (k == 1 || span[k - 1] < best)
            best = span[k - 1];
    }
    for (int k = 4; k > 1; k--)
        if (span[k - 1] <= best * CZ_GROUPS_SLACK) {
            *span_out = span[k - 1];
            return cap[k - 1];
        }
    *span_out = span[0];
    return cap[0];
}

/* Sets every task's width (and per-slot cost) for the per-slot target tau: each task takes the
 * smallest width whose per-slot cost is within tau (the least slot time that meets it, since k
 * times the cooperative cost grows with k), or its cheapest width when none is; tau = INFINITY:
 * every task hosted. */
static void widths_choose(tp_task *t, int n, const cz_task_table *tt, double tau)
{
    int nw = tt->nwidths;
    for (int k = 0; k < n; k++) {
        const double *cw = &tt->cost[(size_t)t[k].tix * nw];
        int pick = -1;
        for (int w = 0; w < nw && pick < 0; w++)
            if (cw[w] <= tau * CZ_CAP_SLACK)
                pick = w;
        if (pick < 0) {
            pick = 0;
            for (int w = 1; w < nw; w++)
                if (cw[w] < cw[pick])
                    pick = w;
        }
        t[k].width = tt->widths[pick];
        t[k].cost = cw[pick];
    }
}

static int double_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Every task at the forced width where it can take it, else hosted. */
static void widths_force(tp_task *t, int n, const cz_task_table *tt, int width)
{
    int nw = tt->nwidths, at = 0;
    for (int w = 0; w < nw; w++)
        if (tt->widths[w] == width)
            at = w;
    for (int k = 0; k < n; k++) {
        const double *cw = &tt->cost[(size_t)t[k].tix * nw];
        bool ok = at > 0 && isfinite(cw[at]);
        t[k].width = ok ? width : 1;
        t[k].cost = ok ? cw[at] : cw[0];
    }
}

/* The rollback makespan of the tasks at their current widths (capacity C when given, else the
 * automatic one); sorts the tasks and leaves each one's slot and group as scheduled. */
static double widths_span(tp_task *t, int n, int nslots, double C, double *load)
{
    double span, total, largest;
    tasks_totals(t, n, &total, &largest);
    tasks_sort(t, n);
    if (C > 0.0)
        schedule_rollback(NULL, nslots, t, n, C, load, &span, NULL);
    else
        rollback_auto_capacity(t, n, nslots, total, largest, load, &span);
    return span;
}

/* widths_span for the descents: with the automatic capacity, the makespan of one group (LPT
 * over the slots), a quarter of the work of scoring every candidate capacity; the descents'
 * results are scored in full afterwards. */
static double widths_span_one(tp_task *t, int n, int nslots, double C, double *load)
{
    if (C > 0.0)
        return widths_span(t, n, nslots, C, load);
    double span, total, largest;
    tasks_totals(t, n, &total, &largest);
    tasks_sort(t, n);
    schedule_rollback(NULL, nslots, t, n, total > largest ? total : largest, load, &span, NULL);
    return span;
}

/* Whether task k occupies the busiest slot of its group: only such a task can shorten the
 * makespan (a sum over groups of their busiest slots) by changing its width. gmax holds each
 * group's busiest load, recomputed by the caller from the scheduled tasks. */
static bool on_busiest_slot(const tp_task *t, int k, const double *gload, int nslots,
                            const double *gmax)
{
    const double *gl = &gload[(size_t)t[k].group * nslots];
    for (int x = t[k].slot; x < t[k].slot + t[k].width; x++)
        if (gl[x] >= gmax[t[k].group] / CZ_CAP_SLACK)
            return true;
    return false;
}

/* Stage 2 of widths_auto (below) from the widths the tasks hold: returns the makespan reached.
 * Scratch: gload (n * nslots), gmax (n), cand (n). */
static double widths_descend(tp_task *t, int n, const cz_task_table *tt, int nslots, double C,
                             double *load, double *gload, double *gmax, int *cand)
{
    int nw = tt->nwidths;
    double best = widths_span_one(t, n, nslots, C, load);
    for (int round = 0; round < 4 * n; round++) {
        /* The scheduled loads per group, from the slots and groups widths_span left. */
        int ng = 0;
        for (int k = 0; k < n; k++)
            if (t[k].group + 1 > ng)
                ng = t[k].group + 1;
        memset(gload, 0, (size_t)ng * (size_t)nslots * sizeof *gload);
        for (int g = 0; g < ng; g++)
            gmax[g] = 0.0;
        for (int k = 0; k < n; k++)
            for (int x = t[k].slot; x < t[k].slot + t[k].width; x++) {
                double *v = &gload[(size_t)t[k].group * nslots + x];
                *v += t[k].cost;
                if (*v > gmax[t[k].group])
                    gmax[t[k].group] = *v;
            }
        int bw = -1, btix = -1, ncand = 0;
        double bspan = best * (1.0 - 1e-9);
        /* Candidates are named by their table index: scoring reorders the tasks. */
        for (int k = 0; k < n; k++)
            if (on_busiest_slot(t, k, gload, nslots, gmax))
                cand[ncand++] = t[k].tix;
        for (int c = 0; c < ncand; c++) {
            int tix = cand[c];
            const double *cw = &tt->cost[(size_t)tix * nw];
            for (int w = 0; w < nw; w++) {
                int k = 0;
                while (k < n && t[k].tix != tix)
                    k++;
                int w0 = t[k].width;
                double c0 = t[k].cost;
                if (tt->widths[w] == w0 || !isfinite(cw[w]))
                    continue;
                t[k].width = tt->widths[w];
                t[k].cost = cw[w];
                double span = widths_span_one(t, n, nslots, C, load);
                if (span < bspan)
                    bspan = span, bw = w, btix = tix;
                /* Put it back; scoring reordered the tasks, so find it again. */
                for (k = 0; k < n && t[k].tix != tix; k++)
                    ;
                t[k].width = w0;
                t[k].cost = c0;
            }
        }
        if (btix < 0)
            break;
        for (int k = 0; k < n; k++)
            if (t[k].tix == btix) {
                t[k].width = tt->widths[bw];
                t[k].cost = tt->cost[(size_t)btix * nw + bw];
            }
        best = widths_span_one(t, n, nslots, C, load);
    }
    return best;
}

/* The widths of a rank's tasks under --coop auto. Two stages:
 *  1. per-slot targets: tau = INFINITY (all hosted) and every distinct per-slot cost a task of
 *     the rank has under some width, from the largest down; widths_choose meets each target at
 *     the least slot time, and the rollback makespan scores it. A target is the makespan one is
 *     willing to pay per task, so this finds the uniform trades (split every task above tau, as
 *     little as it takes) that a one-task-at-a-time search cannot: with four 8 ms tasks on eight
 *     slots, splitting one lowers nothing, splitting all four over two slots each does;
 *  2. descents (ranks of at most CZ_AUTO_DESCENT_TASKS tasks) from all hosted and from the
 *     CZ_AUTO_STARTS best targets of stage 1: every task on a busiest slot of its group tries
 *     every other width, and the single change that shortens the makespan most is applied,
 *     until none shortens it by more than a relative 1e-9 (at most 4 n rounds). This catches
 *     what no uniform target reaches: one task too many on a slot (nine blocks for eight
 *     slots: split only the ninth), two large tasks and a small one on two slots (split only
 *     the small one), five equal tasks on eight slots (four over two slots each, the fifth
 *     over all eight).
 * The shortest result is kept (ties: the earliest start, all hosted first; without descents,
 * the larger target). A split whose all-reduces cost more than it saves lengthens the makespan
 * and is never kept. Scratch: allocated here; without memory the best target of stage 1
 * stands. */
#define CZ_AUTO_DESCENT_TASKS 64
#define CZ_AUTO_STARTS 4

/* A lower bound on the rank's makespan under any widths: no task below its cheapest per-slot
 * cost, and the least slot time of all tasks spread over the slots. Reaching it ends the
 * search early (the result cannot improve). */
static double rank_bound(const tp_task *t, int n, const cz_task_table *tt, int nslots)
{
    double largest = 0.0, slot_time = 0.0;
    for (int k = 0; k < n; k++) {
        const double *cw = &tt->cost[(size_t)t[k].tix * tt->nwidths];
        double least = INFINITY, cheapest = INFINITY;
        for (int w = 0; w < tt->nwidths; w++) {
            cheapest = cw[w] < cheapest ? cw[w] : cheapest;
            least = tt->widths[w] * cw[w] < least ? tt->widths[w] * cw[w] : least;
        }
        largest = cheapest > largest ? cheapest : largest;
        slot_time += least;
    }
    double spread = slot_time / nslots;
    return largest > spread ? largest : spread;
}

static void widths_auto(tp_task *t, int n, const cz_task_table *tt, int nslots, double C,
                        double *load)
{
    int nw = tt->nwidths, ntau = 0, nstart = 0;
    double *gload = NULL, *gmax = NULL, *tau = malloc(((size_t)n * nw + 1) * sizeof *tau);
    int *cand = NULL, *seen = NULL;
    tp_task *trial = NULL, *base = NULL;
    /* The best targets of stage 1, shortest first: start_tau[0 .. nstart - 1]. */
    double start_tau[CZ_AUTO_STARTS], start_span[CZ_AUTO_STARTS];
    widths_choose(t, n, tt, INFINITY);
    double best = widths_span(t, n, nslots, C, load), best_tau = INFINITY;
    double bound = rank_bound(t, n, tt, nslots) * (1.0 + 1e-9);
    if (!tau || nw < 2 || n == 0 || best <= bound)
        goto done;
    for (int k = 0; k < n; k++)
        for (int w = 0; w < nw; w++) {
            double v = tt->cost[(size_t)t[k].tix * nw + w];
            if (isfinite(v))
                tau[ntau++] = v;
        }
    qsort(tau, (size_t)ntau, sizeof *tau, double_desc);
    for (int i = 0; i < ntau; i++) {
        if (i > 0 && tau[i] >= tau[i - 1] / CZ_CAP_SLACK)
            continue; /* the same target as the one before */
        widths_choose(t, n, tt, tau[i]);
        double span = widths_span(t, n, nslots, C, load);
        if (span < best * (1.0 - 1e-12))
            best = span, best_tau = tau[i];
        /* Insert into the kept starts (stable: an equal span keeps the larger target). */
        int at = nstart;
        while (at > 0 && span < start_span[at - 1] * (1.0 - 1e-12))
            at--;
        if (at < CZ_AUTO_STARTS) {
            for (int j = (nstart < CZ_AUTO_STARTS ? nstart : CZ_AUTO_STARTS - 1); j > at; j--)
                start_span[j] = start_span[j - 1], start_tau[j] = start_tau[j - 1];
            start_span[at] = span, start_tau[at] = tau[i];
            if (nstart < CZ_AUTO_STARTS)
                nstart++;
        }
    }
    widths_choose(t, n, tt, best_tau);
    if (n > CZ_AUTO_DESCENT_TASKS || best <= bound)
        goto done;
    gload = malloc((size_t)n * (size_t)nslots * sizeof *gload);
    gmax = malloc((size_t)n * sizeof *gmax);
    cand = malloc((size_t)n * sizeof *cand);
    trial = malloc((size_t)n * sizeof *trial);
    base = malloc((size_t)n * sizeof *base);
    seen = malloc((size_t)(CZ_AUTO_STARTS + 1) * (size_t)n * sizeof *seen);
    if (!gload || !gmax || !cand || !trial || !base || !seen)
        goto done;
    /* Starts are taken from one fixed order (base), so that equal width choices (two targets
     * that split the same tasks) are recognized and descended once. */
    memcpy(base, t, (size_t)n * sizeof *t);
    best = INFINITY;
    for (int i = -1; i < nstart && !(best <= bound); i++) {
        int *w = &seen[(size_t)(i + 1) * n];
        memcpy(trial, base, (size_t)n * sizeof *t);
        widths_choose(trial, n, tt, i < 0 ? INFINITY : start_tau[i]);
        for (int k = 0; k < n; k++)
            w[k] = trial[k].width;
        bool again = false;
        for (int j = -1; j < i && !again; j++)
            again = memcmp(&seen[(size_t)(j + 1) * n], w, (size_t)n * sizeof *w) == 0;
        if (again)
            continue;
        widths_descend(trial, n, tt, nslots, C, load, gload, gmax, cand);
        double span = widths_span(trial, n, nslots, C, load);
        if (span < best * (1.0 - 1e-12)) {
            best = span;
            memcpy(t, trial, (size_t)n * sizeof *t);
        }
    }
done:
    free(tau);
    free(gload);
    free(gmax);
    free(cand);
    free(trial);
    free(base);
    free(seen);
}

/* Places every task (in t's order) by cz__slot_place within T; false when one does not fit. */
static bool packed_probe(tp_task *t, int n, const cz_task_table *tt, int nslots, double T,
                         double *load)
{
    for (int s = 0; s < nslots; s++)
        load[s] = 0.0;
    for (int k = 0; k < n; k++) {
        const double *cw = &tt->cost[(size_t)t[k].tix * tt->nwidths];
        int w, slot;
        if (!cz__slot_place(tt, nslots, load, cw, T, &w, &slot))
            return false;
        t[k].width = tt->widths[w];
        t[k].cost = cw[w];
        t[k].slot = slot;
    }
    return true;
}

/* The packed schedule under --coop auto: one group, the tasks by decreasing hosted cost, each
 * placed with its width by cz__slot_place at the least target T in [lo, hi] for which all fit
 * (bisection). It chooses widths and slots together, where rollback chooses the widths first
 * (widths_auto) and then places them by LPT; a rank dealt four 8 ms blocks and two 3.5 ms
 * matrices for eight slots is where that matters: the blocks over two slots each, the two
 * matrices over four slots each on top. Returns the makespan, INFINITY when nothing within hi
 * fits (t then undefined). */
static double schedule_packed(tp_task *t, int n, const cz_task_table *tt, int nslots, double lo,
                              double hi, double *load)
{
    /* Largest hosted cost first (ties: parameter, then block): tasks_sort on the width-1 costs. */
    for (int k = 0; k < n; k++)
        t[k].cost = tt->cost[(size_t)t[k].tix * tt->nwidths];
    tasks_sort(t, n);
    if (!packed_probe(t, n, tt, nslots, hi, load))
        return INFINITY;
    for (int it = 0; it < 40 && hi - lo > 1e-6 * hi; it++) {
        double mid = 0.5 * (lo + hi);
        if (packed_probe(t, n, tt, nslots, mid, load))
            hi = mid;
        else
            lo = mid;
    }
    packed_probe(t, n, tt, nslots, hi, load);
    double span = 0.0;
    for (int s = 0; s < nslots; s++)
        span = load[s] > span ? load[s] : span;
    return span;
}

/* Emits the packed schedule of the rank's tasks (sorted as rollback takes them) instead of
 * rollback's at capacity C when it is shorter: *taken then true and *capacity its makespan
 * (tasks then carry rollback's trial groups; rollback reassigns them when not taken). The
 * packed schedule is one group: where rollback's has several (so that gathers hide behind
 * compute), it must win by more than the 5% rollback's capacity choice pays for them, except
 * under the joint strategy (strict), whose DP cut gave the rank what the packing holds within
 * its target: there rollback's groups are kept only where they are no longer. */
static int packed_if_shorter(group_sink *gs, tp_task *tasks, int nt, const cz_task_table *tt,
                             int nslots, double C, double *load, double *capacity, bool strict,
                             bool *taken, cz_error *err)
{
    double span;
    *taken = false;
    int rc = schedule_rollback(NULL, nslots, tasks, nt, C, load, &span, err);
    if (rc != CZ_OK)
        return rc;
    tp_task *packed = malloc((size_t)nt * sizeof *packed);
    if (!packed)
        return cz__error_set(err, CZ_ENOMEM, "out of memory packing a rank's TP tasks");
    memcpy(packed, tasks, (size_t)nt * sizeof *packed);
    double lo = rank_bound(packed, nt, tt, nslots);
    double need = tasks[nt - 1].group > 0 && !strict ? span / CZ_GROUPS_SLACK : span * (1.0 - 1e-9);
    double ps = schedule_packed(packed, nt, tt, nslots, lo, need, load);
    if (ps < need) {
        *capacity = ps;
        *taken = true;
        rc = group_emit(gs, packed, nt, err);
    }
    free(packed);
    return rc;
}

/* Does the parameter's local shard intersect DP rank r's range of its bucket? */
static bool touches(const cz_plan *plan, const cz_plan_param *p, int r)
{
    if (p->bucket < 0 || (size_t)p->bucket >= plan->nbuckets)
        return false;
    const int64_t *rg = plan->buckets[p->bucket].ranges;
    int64_t lo = rg[2 * r], hi = rg[2 * r + 1];
    return p->offset < hi && cz_plan_param_end(p) > lo;
}

/* The tasks of the given parameters: one per entry of the task table (whole matrices or
 * blocks), or one per parameter at its given cost without a table. */
static tp_task *tasks_expand(const cz_task_table *tt, const cz_costed *params, int n, int *count)
{
    int m = 0;
    for (int k = 0; k < n; k++)
        m += tt ? tt->first[params[k].id + 1] - tt->first[params[k].id] : 1;
    tp_task *t = malloc(((size_t)m + 1) * sizeof *t);
    if (!t)
        return NULL;
    m = 0;
    for (int k = 0; k < n; k++) {
        int id = params[k].id;
        if (!tt) {
            t[m++] = (tp_task){id, -1, 1, 0, params[k].cost, -1, 0};
            continue;
        }
        for (int x = tt->first[id]; x < tt->first[id + 1]; x++) {
            /* A TP-local per-head task has no hosted cost, only its one width (tp_tasks.c). */
            const double *cw = &tt->cost[(size_t)x * tt->nwidths];
            int w = 0;
            while (!isfinite(cw[w]) && w + 1 < tt->nwidths)
                w++;
            t[m++] = (tp_task){id, tt->block[x], tt->widths[w], 0, cw[w], x, 0};
        }
    }
    *count = m;
    return t;
}

int cz__tp_schedule_tasks(cz_rank_schedule *rs, const cz_task_table *tt, cz_costed *params, int n,
                          const cz_settings *s, int tp, double *load, double *capacity,
                          cz_error *err)
{
    cz_tp_strategy strategy = s->tp;
    int nslots = (strategy == CZ_TP_SC || tp <= 1) ? 1 : tp;
    int nt = 0, rc = CZ_OK;
    *capacity = 0.0;
    if (n == 0)
        return CZ_OK;
    if (tt && !tt->first)
        tt = NULL; /* a plan read from a file: whole matrices at their recorded costs */
    tp_task *tasks = tasks_expand(tt, params, n, &nt);
    if (!tasks)
        return cz__error_set(err, CZ_ENOMEM, "out of memory listing a rank's TP tasks");
    double C = s->capacity, total, largest;
    if (tt && nslots > 1 && s->coop == CZ_COOP_AUTO && strategy == CZ_TP_ROLLBACK)
        widths_auto(tasks, nt, tt, nslots, C, load);
    else if (tt && nslots > 1 && s->coop > 1 && strategy == CZ_TP_ROLLBACK)
        widths_force(tasks, nt, tt, s->coop);
    tasks_totals(tasks, nt, &total, &largest);
    if (!(C > 0.0) && strategy == CZ_TP_ROLLBACK) {
        double span;
        tasks_sort(tasks, nt);
        C = rollback_auto_capacity(tasks, nt, nslots, total, largest, load, &span);
    } else if (!(C > 0.0)) {
        C = total / (4.0 * tp);
        if (largest > C)
            C = largest;
    }
    *capacity = C;
    group_sink gs = {rs, 0, nslots, tt};
    switch (strategy) {
    case CZ_TP_SC:
        rc = schedule_sc(&gs, tasks, nt, C, err);
        break;
    case CZ_TP_NONE:
        rc = schedule_chunks(&gs, tasks, nt, err);
        break;
    case CZ_TP_SINGLE:
        tasks_sort(tasks, nt);
        rc = schedule_chunks(&gs, tasks, nt, err);
        break;
    case CZ_TP_SLOT:
        rc = schedule_slot(&gs, tasks, nt, C, load, err);
        break;
    case CZ_TP_ROLLBACK:
        tasks_sort(tasks, nt);
        bool packed = false;
        /* Not under a forced width (--coop K), where the packed schedule would choose widths
         * itself, nor under a capacity the user gave (it bounds the gather buffers, which one
         * packed group would not). */
        bool joint = s->dp == CZ_DP_JOINT && (s->coop == 0 || s->coop == CZ_COOP_AUTO) &&
                     !(s->capacity > 0.0);
        if (tt && nslots > 1 && ((s->coop == CZ_COOP_AUTO && tt->nwidths > 1) || joint))
            rc = packed_if_shorter(&gs, tasks, nt, tt, nslots, C, load, capacity, joint, &packed,
                                   err);
        if (rc != CZ_OK)
            break;
        if (!packed)
            rc = schedule_rollback(&gs, nslots, tasks, nt, C, load, NULL, err);
        break;
    default:
        rc = cz__error_set(err, CZ_EINVALID, "TP strategy %d is unknown", (int)strategy);
    }
    free(tasks);
    return rc;
}

/* The matrix parameters each rank schedules, in id order: ids[first[k] .. first[k + 1]) for
 * rank schedule k, of the DP ranks (expert 0) or of the expert ranks (expert 1, in the order of
 * cz_plan_expert_rank). Built once (rank_index.c finds the ranks of each parameter) rather than
 * by asking every rank about every parameter. */
static int rank_params_index(const cz_plan *plan, int expert, int **first_out, int **ids_out,
                             cz_error *err)
{
    int rc = CZ_OK, dp = expert ? plan->edp : plan->dp;
    size_t per_stage = expert ? (size_t)cz_plan_expert_ranks(plan) : (size_t)dp;
    size_t nranks = (size_t)plan->pp * per_stage, total = 0;
    bool even = plan->settings.dp == CZ_DP_EVEN;
    int *first = calloc(nranks + 2, sizeof *first), *ids = NULL, *fill = NULL;
    cz_rank_window win = {0};
    if (!first || (rc = cz__rank_window_init(&win, plan, err)) != CZ_OK) {
        rc =
            rc != CZ_OK ? rc : cz__error_set(err, CZ_ENOMEM, "out of memory building micro-groups");
        goto done;
    }
    /* Two passes over the same walk: count, then place. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < plan->nparams; i++) {
            const cz_plan_param *p = &plan->params[i];
            if (p->def.kind != CZ_KIND_MATRIX || p->stage < 0 || p->stage >= plan->pp ||
                p->expert != expert || (expert && (p->ep_rank < 0 || p->ep_rank >= plan->ep)))
                continue;
            int lo = p->dp_owner, hi = p->dp_owner + 1;
            if (even)
                cz__rank_window_of(&win, p, &lo, &hi);
            else if (p->dp_owner < 0 || p->dp_owner >= dp)
                continue;
            for (int r = lo; r < hi; r++) {
                if (even && !touches(plan, p, r))
                    continue;
                size_t k = expert ? cz_plan_expert_rank(plan, p->stage, p->ep_rank, r)
                                  : (size_t)p->stage * (size_t)dp + (size_t)r;
                if (pass == 0)
                    first[k + 2]++;
                else
                    ids[fill[k]++] = p->id;
            }
        }
        if (pass == 1)
            break;
        for (size_t k = 0; k < nranks; k++)
            first[k + 2] += first[k + 1];
        total = (size_t)first[nranks + 1];
        ids = malloc((total + 1) * sizeof *ids);
        fill = malloc((nranks + 1) * sizeof *fill);
        if (!ids || !fill) {
            rc = cz__error_set(err, CZ_ENOMEM, "out of memory building micro-groups");
            goto done;
        }
        for (size_t k = 0; k < nranks; k++)
            fill[k] = first[k + 1];
    }
    memmove(first, first + 1, (nranks + 1) * sizeof *first);
    *first_out = first;
    *ids_out = ids;
    first = ids = NULL;
done:
    cz__rank_window_free(&win);
    free(first);
    free(ids);
    free(fill);
    return rc;
}

/* The schedules of one kind of rank (DP ranks over TP slots, or expert ranks over ETP slots). */
static int schedules_build(cz_plan *plan, int expert, cz_costed *params, double *load,
                           cz_error *err)
{
    int rc, *first = NULL, *ids = NULL;
    size_t n_per_stage = expert ? (size_t)cz_plan_expert_ranks(plan) : (size_t)plan->dp;
    size_t count = (size_t)plan->pp * n_per_stage;
    int slots = expert ? plan->etp : plan->tp;
    cz_rank_schedule *rs_all = NULL;
    if ((rc = rank_params_index(plan, expert, &first, &ids, err)) != CZ_OK)
        goto done;
    rs_all = calloc(count ? count : 1, sizeof *rs_all);
    if (!rs_all) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory building micro-groups");
        goto done;
    }
    if (expert) {
        plan->expert_schedules = rs_all;
        plan->nexpert_schedules = count;
    } else {
        plan->schedules = rs_all;
        plan->nschedules = count;
    }
    for (size_t k = 0; k < count; k++) {
        cz_rank_schedule *rs = &rs_all[k];
        size_t x = k % n_per_stage;
        rs->stage = (int)(k / n_per_stage);
        rs->dp_rank = expert ? (int)(x / (size_t)plan->ep) : (int)x;
        rs->ep_rank = expert ? (int)(x % (size_t)plan->ep) : 0;
        int n = 0;
        for (int j = first[k]; j < first[k + 1]; j++) {
            params[n].id = ids[j];
            params[n].cost = plan->params[ids[j]].cost;
            n++;
        }
        double C;
        if ((rc = cz__tp_schedule_tasks(rs, &plan->tasks, params, n, &plan->settings, slots, load,
                                        &C, err)) != CZ_OK)
            goto done;
        if (C > plan->capacity_used)
            plan->capacity_used = C;
    }
done:
    free(first);
    free(ids);
    return rc;
}

int cz__tp_schedule_build(cz_plan *plan, cz_error *err)
{
    int rc = CZ_OK, most = plan->etp > plan->tp ? plan->etp : plan->tp;
    cz_costed *params = malloc((plan->nparams + 1) * sizeof *params);
    double *load = calloc((size_t)(most > 0 ? most : 1), sizeof *load);
    cz__plan_schedules_free(plan);
    plan->capacity_used = 0.0;
    if (!params || !load) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory building micro-groups");
        goto done;
    }
    if ((rc = schedules_build(plan, 0, params, load, err)) != CZ_OK)
        goto done;
    /* The expert ranks' ETP groups schedule the experts they own, as the DP ranks' TP groups
     * schedule the dense matrices. */
    if (cz_plan_has_experts(plan) && (rc = schedules_build(plan, 1, params, load, err)) != CZ_OK)
        goto done;
done:
    free(params);
    free(load);
    return rc;
}
