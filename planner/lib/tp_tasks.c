/*
 * The TP tasks of a plan (docs/PLANNER.md, "Block and cooperative tasks"): which pieces of each
 * matrix parameter the micro-group scheduler may place, and what each costs on a slot under
 * every width it may take.
 *
 * A task is a whole matrix (block -1) or, under settings.split_blocks, one block of a blocked
 * matrix: the blocks (fused Q/K/V, gate/up) are orthogonalized separately anyway, so nothing
 * ties them to one TP rank. A per-head matrix whose heads each TP rank holds whole has TP-local
 * tasks (local_tasks below), one per block, each over all TP slots. Width 1 is Canzona's hosted
 * task; a width k > 1 is cooperative Newton-Schulz over k aligned slots (Muon only, --tp rollback
 * only, k divides tp, the task's long side has at least k rows or columns, and the task is one
 * matrix: a block, or a matrix without blocks, since the blocks of a whole multi-block matrix are
 * separate Newton-Schulz runs).
 */
#include "cz_algorithms.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Widths a task may take under the settings: 1, then (cooperative) the divisors of tp from 2
 * up, or only the forced one. With expert groups the divisors of etp too: an expert's task may
 * take a width that divides its ETP group (the others cost INFINITY for it, and a dense task's
 * widths must divide TP). */
static int widths_of(const cz_settings *s, int tp, int etp, bool local, int *w)
{
    int n = 0, most = etp > tp ? etp : tp;
    w[n++] = 1;
    if (local && s->coop == 0)
        w[n++] = tp; /* the TP-local per-head tasks' one width */
    if (s->coop == 0 || most <= 1 || s->tp != CZ_TP_ROLLBACK || s->optimizer != CZ_OPTIM_MUON)
        return n;
    for (int k = 2; k <= most && n < CZ_MAX_WIDTHS; k++)
        if ((tp % k == 0 || (etp > 0 && etp % k == 0)) && (s->coop == CZ_COOP_AUTO || s->coop == k))
            w[n++] = k;
    return n;
}

int cz__task_table_build(cz_plan *plan, const cz_cluster *c, cz_error *err)
{
    return cz__task_table_fill(&plan->tasks, plan, c, err);
}

/* Whether parameter p's tasks are TP-local (cz_task_local_fits): a per-head Muon matrix with
 * its heads along the TP dimension, under --tp rollback (which places tasks over several slots)
 * without --coop (whose width choices do not know them), and not an expert. Each of its blocks
 * (or the matrix without blocks) is then one task over all TP slots, member j computing TP
 * rank j's whole heads: no gather, no scatter, and an even load by construction. */
static bool local_tasks(const cz_plan *plan, const cz_plan_param *p)
{
    const cz_settings *s = &plan->settings;
    return p->def.kind == CZ_KIND_MATRIX && !p->expert && plan->tp > 1 &&
           s->optimizer == CZ_OPTIM_MUON && s->tp == CZ_TP_ROLLBACK && s->coop == 0 &&
           cz_param_per_head(&p->def, true) && cz_task_local_fits(&p->def, 0, plan->tp, plan->tp);
}

int cz__task_table_fill(cz_task_table *tt, const cz_plan *plan, const cz_cluster *c, cz_error *err)
{
    const cz_settings *s = &plan->settings;
    bool any_local = false;
    for (size_t i = 0; i < plan->nparams && !any_local; i++)
        any_local = local_tasks(plan, &plan->params[i]);
    tt->nwidths = widths_of(s, plan->tp, plan->etp, any_local, tt->widths);
    /* An expert's cooperative members are ETP ranks: their all-reduces run on ETP's links. */
    cz_cluster ec = *c;
    ec.tp = plan->etp > 0 ? plan->etp : c->tp;
    /* Cooperative widths imply block tasks: a cooperative task is one Newton-Schulz run, and
     * the matrices that set the makespan at scale are blocked (gate/up, Q/K/V). */
    bool split = s->split_blocks || (tt->nwidths > 1 && s->coop != 0);
    size_t n = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_param_def *d = &plan->params[i].def;
        if (d->kind == CZ_KIND_MATRIX)
            n += (split || local_tasks(plan, &plan->params[i])) && d->nblocks > 0
                     ? (size_t)d->nblocks
                     : 1;
    }
    tt->first = malloc((plan->nparams + 1) * sizeof *tt->first);
    tt->block = malloc((n + 1) * sizeof *tt->block);
    tt->cost = malloc((n + 1) * (size_t)tt->nwidths * sizeof *tt->cost);
    tt->panels = malloc((n + 1) * (size_t)tt->nwidths * sizeof *tt->panels);
    if (!tt->first || !tt->block || !tt->cost || !tt->panels)
        return cz__error_set(err, CZ_ENOMEM, "out of memory listing %zu TP tasks", n);
    tt->ntasks = n;
    /* Every layer repeats the same few shapes, and each cooperative cost tries up to
     * CZ_COOP_MAX_PANELS pipelines (cz__coop_best_panels): those of a shape are computed once. */
    struct {
        int64_t rows, cols;
        int k, group, panels;
        double cost;
    } seen[64];
    int nseen = 0;
    size_t t = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        const cz_param_def *d = &p->def;
        tt->first[i] = (int)t;
        if (d->kind != CZ_KIND_MATRIX)
            continue;
        bool local = local_tasks(plan, p), bsplit = (split || local) && d->nblocks > 0;
        int nb = bsplit ? d->nblocks : 1;
        for (int b = 0; b < nb; b++, t++) {
            int block = bsplit ? b : -1;
            double *cw = &tt->cost[t * (size_t)tt->nwidths];
            int *pw = &tt->panels[t * (size_t)tt->nwidths];
            tt->block[t] = block;
            pw[0] = 1;
            if (local) {
                /* Only the local width: each slot computes its 1/tp of the heads. */
                for (int w = 0; w < tt->nwidths; w++)
                    pw[w] = 1, cw[w] = INFINITY;
                cw[1] = cz__cost_block(d, block, s, c, plan->dtype) / plan->tp;
                continue;
            }
            /* Hosted whole: exactly the parameter's cost, so that whole-task plans are what
             * they always were. */
            cw[0] = block < 0 ? p->cost : cz__cost_block(d, block, s, c, plan->dtype);
            int64_t r0, c0, rows, cols;
            cz_task_region(d, block, &r0, &c0, &rows, &cols);
            int group = cz_plan_param_tp(plan, p);
            const cz_cluster *cc = p->expert ? &ec : c;
            for (int w = 1; w < tt->nwidths; w++) {
                int k = tt->widths[w];
                pw[w] = 1, cw[w] = INFINITY;
                /* Without --coop the widths past 1 are the TP-local per-head tasks' only
                 * (widths_of): every other task is hosted whole. (A wide matrix beside a
                 * TP-local one was given a cooperative width the plan's settings then denied:
                 * found by fuzz_model.) */
                if (s->coop == 0 || group % k != 0 || !cz_task_coop_fits(d, block, k))
                    continue;
                int x = 0;
                while (x < nseen && !(seen[x].rows == rows && seen[x].cols == cols &&
                                      seen[x].k == k && seen[x].group == group))
                    x++;
                if (x < nseen) {
                    pw[w] = seen[x].panels, cw[w] = seen[x].cost;
                    continue;
                }
                pw[w] = cz__coop_best_panels(rows, cols, k, s, cc, plan->dtype);
                cw[w] = cz__cost_coop_panels(rows, cols, k, pw[w], s, cc, plan->dtype);
                if (nseen < (int)(sizeof seen / sizeof *seen)) {
                    seen[nseen].rows = rows, seen[nseen].cols = cols, seen[nseen].k = k;
                    seen[nseen].group = group;
                    seen[nseen].panels = pw[w], seen[nseen].cost = cw[w];
                    nseen++;
                }
            }
        }
    }
    tt->first[plan->nparams] = (int)t;
    return CZ_OK;
}

double cz__task_least_slot_time(const cz_task_table *tt, const double *cw, double tau)
{
    double best = INFINITY;
    for (int w = 0; w < tt->nwidths; w++)
        if (cw[w] <= tau && tt->widths[w] * cw[w] < best)
            best = tt->widths[w] * cw[w];
    return best;
}

static bool table_usable(const cz_plan *plan, const cz_task_table *tt)
{
    return tt && tt->first && tt->nwidths >= 1 && tt->first[plan->nparams] == (int)tt->ntasks;
}

/* The slot time all tasks need when none may exceed tau per slot, elementwise work included
 * (INFINITY when a task cannot meet tau). */
static double slot_time_within(const cz_plan *plan, const cz_task_table *tt, double tau)
{
    double sum = 0.0;
    bool table = table_usable(plan, tt);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->def.kind != CZ_KIND_MATRIX || !table) {
            if (p->def.kind == CZ_KIND_MATRIX && p->cost > tau)
                return INFINITY;
            sum += p->cost;
            continue;
        }
        for (int t = tt->first[i]; t < tt->first[i + 1]; t++)
            sum += cz__task_least_slot_time(tt, &tt->cost[(size_t)t * tt->nwidths], tau);
    }
    return sum;
}

static int double_asc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Why this bounds every plan with these tasks: the makespan of a DP rank is a sum over its
 * micro-groups of the busiest slot, so it is at least the total load of each of its GPUs; a
 * GPU that takes part in a task of width k carries its per-slot cost, so a schedule with
 * makespan T places every task at a width whose per-slot cost is at most T, spending at least
 * the least such slot time, and all of it together with the elementwise work fits in GPUs x T.
 * The slot time needed is a non-increasing step function of T that changes only at the tasks'
 * per-slot costs, so the least feasible T is found by a binary search over those costs. */
double cz__task_lower_bound(const cz_plan *plan, const cz_task_table *tt)
{
    double G = (double)plan->dp * (double)plan->tp * (double)plan->pp, lo = 0.0;
    if (!(G > 0.0))
        G = 1.0;
    bool table = table_usable(plan, tt);
    size_t nb = 0, cap = 1;
    /* The floor: every task must fit somewhere, every elementwise parameter is spread over
     * the TP ranks of one DP rank (the split layout's over all ranks: no floor). */
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->def.kind != CZ_KIND_MATRIX) {
            double a = plan->settings.layout == CZ_LAYOUT_SPLIT && !p->expert
                           ? 0.0
                           : p->cost / cz_plan_param_tp(plan, p);
            lo = a > lo ? a : lo;
        } else if (!table) {
            lo = p->cost > lo ? p->cost : lo;
            cap++;
        } else {
            for (int t = tt->first[i]; t < tt->first[i + 1]; t++) {
                const double *cw = &tt->cost[(size_t)t * tt->nwidths];
                double m = INFINITY;
                for (int w = 0; w < tt->nwidths; w++)
                    m = cw[w] < m ? cw[w] : m;
                lo = m > lo ? m : lo;
            }
            cap += (size_t)(tt->first[i + 1] - tt->first[i]) * (size_t)tt->nwidths;
        }
    }
    /* Breakpoints at or above the floor, the floor first. */
    double *b = malloc(cap * sizeof *b);
    if (!b) {
        double f = slot_time_within(plan, tt, INFINITY) / G;
        return f > lo ? f : lo; /* a weaker bound (every task at its least slot time) */
    }
    b[nb++] = lo;
    for (size_t i = 0; i < plan->nparams && table; i++)
        if (plan->params[i].def.kind == CZ_KIND_MATRIX)
            for (int t = tt->first[i]; t < tt->first[i + 1]; t++)
                for (int w = 0; w < tt->nwidths; w++) {
                    double v = tt->cost[(size_t)t * tt->nwidths + w];
                    if (isfinite(v) && v > lo)
                        b[nb++] = v;
                }
    qsort(b, nb, sizeof *b, double_asc);
    /* The first breakpoint j whose interval [b_j, b_j+1) holds a feasible T. */
    size_t l = 0, h = nb - 1;
    while (l < h) {
        size_t mid = l + (h - l) / 2;
        if (slot_time_within(plan, tt, b[mid]) <= G * b[mid + 1])
            h = mid;
        else
            l = mid + 1;
    }
    double f = slot_time_within(plan, tt, b[l]) / G;
    double T = f > b[l] ? f : b[l];
    free(b);
    return T;
}

int cz__task_weigh(cz_plan *plan, double factor, cz_error *err)
{
    cz_task_table *tt = &plan->tasks;
    if (!table_usable(plan, tt))
        return CZ_OK;
    double T = factor * cz__task_lower_bound(plan, tt);
    free(tt->dp_weight);
    tt->dp_weight = malloc((plan->nparams + 1) * sizeof *tt->dp_weight);
    if (!tt->dp_weight)
        return cz__error_set(err, CZ_ENOMEM, "out of memory weighing %zu parameters",
                             plan->nparams);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        double w = 0.0;
        for (int t = tt->first[i]; t < tt->first[i + 1]; t++) {
            const double *cw = &tt->cost[(size_t)t * tt->nwidths];
            double v = cz__task_least_slot_time(tt, cw, T * (1.0 + 1e-12));
            if (!isfinite(v))
                v = cz__task_least_slot_time(tt, cw, INFINITY);
            w += v;
        }
        tt->dp_weight[i] = p->def.kind == CZ_KIND_MATRIX ? w : p->cost;
    }
    return CZ_OK;
}
