/*
 * The TP tasks of a plan (docs/PLANNER.md, "Block and cooperative tasks"): which pieces of each
 * matrix parameter the micro-group scheduler may place, and what each costs on a slot under
 * every width it may take.
 *
 * A task is a whole matrix (block -1) or, under settings.split_blocks, one block of a blocked
 * matrix: the blocks (fused Q/K/V, gate/up) are orthogonalized separately anyway, so nothing
 * ties them to one TP rank. Width 1 is Canzona's hosted task; a width k > 1 is cooperative
 * Newton-Schulz over k aligned slots (Muon only, --tp rollback only, k divides tp, the task's
 * long side has at least k rows or columns, and the task is one matrix: a block, or a matrix
 * without blocks, since the blocks of a whole multi-block matrix are separate Newton-Schulz runs).
 */
#include "cz_algorithms.h"

#include <math.h>
#include <stdlib.h>

bool cz_plan_has_split_tasks(const cz_plan *plan)
{
    for (size_t k = 0; k < plan->nschedules; k++) {
        const cz_rank_schedule *rs = &plan->schedules[k];
        for (int g = 0; g < rs->ngroups; g++) {
            const cz_plan_group *gr = &rs->groups[g];
            for (int t = 0; t < gr->ntasks; t++)
                if (cz_group_task_block(gr, t) >= 0 || cz_group_task_width(gr, t) > 1)
                    return true;
        }
    }
    return false;
}

/* Widths a task may take under the settings: 1, then (cooperative) the divisors of tp from 2
 * up, or only the forced one. */
static int widths_of(const cz_settings *s, int tp, int *w)
{
    int n = 0;
    w[n++] = 1;
    if (s->coop == 0 || tp <= 1 || s->tp != CZ_TP_ROLLBACK || s->optimizer != CZ_OPTIM_MUON)
        return n;
    for (int k = 2; k <= tp && n < CZ_MAX_WIDTHS; k++)
        if (tp % k == 0 && (s->coop == CZ_COOP_AUTO || s->coop == k))
            w[n++] = k;
    return n;
}

int cz_task_table_build(cz_plan *plan, const cz_cluster *c, cz_error *err)
{
    cz_task_table *tt = &plan->tasks;
    const cz_settings *s = &plan->settings;
    tt->nwidths = widths_of(s, plan->tp, tt->widths);
    size_t n = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_param_def *d = &plan->params[i].def;
        if (d->kind == CZ_KIND_MATRIX)
            n += s->split_blocks && d->nblocks > 0 ? (size_t)d->nblocks : 1;
    }
    tt->first = malloc((plan->nparams + 1) * sizeof *tt->first);
    tt->block = malloc((n + 1) * sizeof *tt->block);
    tt->cost = malloc((n + 1) * (size_t)tt->nwidths * sizeof *tt->cost);
    if (!tt->first || !tt->block || !tt->cost)
        return cz_error_set(err, CZ_ENOMEM, "out of memory listing %zu TP tasks", n);
    tt->ntasks = n;
    size_t t = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        const cz_param_def *d = &p->def;
        tt->first[i] = (int)t;
        if (d->kind != CZ_KIND_MATRIX)
            continue;
        int nb = s->split_blocks && d->nblocks > 0 ? d->nblocks : 1;
        for (int b = 0; b < nb; b++, t++) {
            int block = nb > 1 || (s->split_blocks && d->nblocks > 0) ? b : -1;
            double *cw = &tt->cost[t * (size_t)tt->nwidths];
            tt->block[t] = block;
            /* Hosted whole: exactly the parameter's cost, so that whole-task plans are what
             * they always were. */
            cw[0] = block < 0 ? p->cost : cz_cost_block(d, block, s, c, plan->dtype);
            int64_t r0, c0, rows, cols;
            cz_task_region(d, block, &r0, &c0, &rows, &cols);
            int64_t longside = rows > cols ? rows : cols;
            bool one_matrix = block >= 0 || d->nblocks <= 0;
            for (int w = 1; w < tt->nwidths; w++) {
                int k = tt->widths[w];
                cw[w] = one_matrix && d->ndim == 2 && longside >= k
                            ? cz_cost_coop(rows, cols, k, s, c, plan->dtype)
                            : INFINITY;
            }
        }
    }
    tt->first[plan->nparams] = (int)t;
    return CZ_OK;
}
