/* Micro-group scheduling of one DP rank as a mixed-integer program (GLPK).
 *
 * Given the rank's matrix tasks and G, the number of groups the greedy made, binary
 * a[t][g][k] puts task t in group g on slot (host TP rank) k. Minimize sum_g m_g with
 * m_g >= load(g, k) for every slot: each group's collectives synchronize its TP ranks, so a
 * rank's makespan is the sum of its groups' largest slot loads. Tasks may move between groups;
 * every slot load stays within the capacity max(C, largest task) so that the gather buffers
 * stay bounded as under the greedy (a task larger than C may exceed it, as the greedy lets a
 * lone oversized task form its own group). Groups (m_g non-increasing) and the slots of a group
 * (loads non-increasing) are interchangeable, so both are ordered to cut symmetric branches;
 * the greedy solution, relabelled the same way, is the warm start. */
#include "ilp_glpk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double schedule_value(const cz_plan *plan, const cz_rank_schedule *rs)
{
    double sum = 0;
    for (int g = 0; g < rs->ngroups; g++) {
        const cz_plan_group *gr = &rs->groups[g];
        double mx = 0;
        for (int k = 0; k < gr->nslots; k++) {
            double l = 0;
            for (int t = 0; t < gr->ntasks; t++)
                if (gr->task_slot[t] == k)
                    l += plan->params[gr->task_param[t]].cost;
            mx = fmax(mx, l);
        }
        sum += mx;
    }
    return sum;
}

/* Rebuilds rs->groups from gk[t] = g*K + k (tasks indexed like tasks[]). Groups come in order
 * of decreasing makespan, tasks by decreasing cost; each group's slots are dealt, largest
 * first, to the TP rank with the least work so far, which balances the per-GPU loads without
 * changing any group's makespan. */
static int schedule_rebuild(cz_plan *plan, cz_rank_schedule *rs, const cz_costed *tasks, int T,
                            const int *gk, int G, int K)
{
    int rc = CZ_ENOMEM;
    cz_plan_group *groups = calloc((size_t)G, sizeof *groups);
    cz_costed *gr = malloc((size_t)G * sizeof *gr);
    double *load = calloc((size_t)G * K, sizeof *load);
    double *tp_load = calloc((size_t)K, sizeof *tp_load);
    int *slot_map = malloc((size_t)G * K * sizeof *slot_map);
    cz_costed *sl = malloc((size_t)K * sizeof *sl);
    int ng = 0;
    if (!groups || !gr || !load || !tp_load || !slot_map || !sl)
        goto done;
    for (int t = 0; t < T; t++)
        load[gk[t]] += tasks[t].cost;
    for (int g = 0; g < G; g++) {
        gr[g].id = g;
        gr[g].cost = 0;
        for (int k = 0; k < K; k++)
            gr[g].cost = fmax(gr[g].cost, load[g * K + k]);
    }
    cz__costed_sort(gr, (size_t)G);
    for (int gi = 0; gi < G; gi++) {
        int g = gr[gi].id;
        int n = 0;
        for (int t = 0; t < T; t++)
            n += gk[t] / K == g;
        if (n == 0)
            continue;
        for (int k = 0; k < K; k++) {
            sl[k].id = k;
            sl[k].cost = load[g * K + k];
        }
        cz__costed_sort(sl, (size_t)K);
        int used[K];
        memset(used, 0, sizeof used);
        for (int s = 0; s < K; s++) {
            int best = -1;
            for (int h = 0; h < K; h++)
                if (!used[h] && (best < 0 || tp_load[h] < tp_load[best]))
                    best = h;
            used[best] = 1;
            slot_map[g * K + sl[s].id] = best;
            tp_load[best] += sl[s].cost;
        }
        cz_plan_group *out = &groups[ng];
        out->id = ng;
        out->nslots = K;
        out->ntasks = n;
        out->task_param = malloc((size_t)n * sizeof *out->task_param);
        out->task_slot = malloc((size_t)n * sizeof *out->task_slot);
        out->task_block = malloc((size_t)n * sizeof *out->task_block);
        out->task_width = malloc((size_t)n * sizeof *out->task_width);
        out->task_panels = malloc((size_t)n * sizeof *out->task_panels);
        out->task_cost = malloc((size_t)n * sizeof *out->task_cost);
        out->load = calloc((size_t)K, sizeof *out->load);
        ng++;
        if (!out->task_param || !out->task_slot || !out->task_block || !out->task_width ||
            !out->task_panels || !out->task_cost || !out->load)
            goto done;
        int i = 0;
        for (int t = 0; t < T; t++) { /* tasks[] is already in decreasing cost order */
            if (gk[t] / K != g)
                continue;
            out->task_param[i] = tasks[t].id;
            out->task_slot[i] = slot_map[gk[t]];
            out->task_block[i] = -1;
            out->task_width[i] = 1;
            out->task_panels[i] = 1;
            out->task_cost[i] = tasks[t].cost;
            out->load[slot_map[gk[t]]] += tasks[t].cost;
            i++;
        }
    }
    cz__rank_schedule_free_groups(rs);
    rs->groups = groups;
    rs->ngroups = ng;
    groups = NULL;
    rc = CZ_OK;
done:
    if (groups) {
        cz_rank_schedule unused = {.groups = groups, .ngroups = ng};
        cz__rank_schedule_free_groups(&unused);
    }
    free(gr);
    free(load);
    free(tp_load);
    free(slot_map);
    free(sl);
    (void)plan;
    return rc;
}

#define ACOL(t, g, k) (1 + G + ((t)*G + (g)) * K + (k))

/* The rank's tasks by decreasing cost (T of them), each with its greedy group and slot,
 * greedy_gk[t] = g * K + k. */
static void rank_tasks(const cz_plan *plan, const cz_rank_schedule *rs, int T, int K,
                       cz_costed *tasks, int *greedy_gk)
{
    int n = 0, G = rs->ngroups;
    for (int g = 0; g < G; g++)
        for (int i = 0; i < rs->groups[g].ntasks; i++) {
            tasks[n].id = rs->groups[g].task_param[i];
            tasks[n].cost = plan->params[tasks[n].id].cost;
            n++;
        }
    cz__costed_sort(tasks, (size_t)T);
    for (int t = 0; t < T; t++)
        for (int g = 0; g < G; g++)
            for (int i = 0; i < rs->groups[g].ntasks; i++)
                if (rs->groups[g].task_param[i] == tasks[t].id)
                    greedy_gk[t] = g * K + rs->groups[g].task_slot[i];
}

/* The greedy solution relabelled canonically (groups by decreasing makespan, each group's slots
 * by decreasing load), as the warm start warm[1 .. ncols]; 0 when a slot of it is over cap, so
 * that it is no feasible start. gload, gr and grank are scratch. */
static int warm_start(const cz_costed *tasks, const int *greedy_gk, int T, int G, int K, double cap,
                      double scale, double *warm, double *gload, cz_costed *gr, int *grank)
{
    int warm_ok = 1;
    for (int t = 0; t < T; t++)
        gload[greedy_gk[t]] += tasks[t].cost;
    for (int g = 0; g < G; g++) {
        gr[g].id = g;
        gr[g].cost = 0;
        for (int k = 0; k < K; k++) {
            gr[g].cost = fmax(gr[g].cost, gload[g * K + k]);
            if (gload[g * K + k] > cap * (1 + 1e-12))
                warm_ok = 0;
        }
    }
    cz__costed_sort(gr, (size_t)G);
    for (int gi = 0; gi < G; gi++)
        grank[gr[gi].id] = gi;
    for (int g = 0; g < G; g++) {
        cz_costed sl[K];
        for (int k = 0; k < K; k++) {
            sl[k].id = k;
            sl[k].cost = gload[g * K + k];
        }
        cz__costed_sort(sl, (size_t)K);
        int krank[K];
        for (int s = 0; s < K; s++)
            krank[sl[s].id] = s;
        for (int t = 0; t < T; t++)
            if (greedy_gk[t] / K == g)
                warm[ACOL(t, grank[g], krank[greedy_gk[t] % K])] = 1.0;
        warm[1 + grank[g]] = gr[grank[g]].cost / scale;
    }
    return warm_ok;
}

/* The problem into P: columns m_g and the binaries a[t][g][k], the rows (each task once, the
 * group makespans, the capacity, the two symmetry orders) and the matrix. */
static int load_problem(glp_prob *P, const cz_costed *tasks, int T, int G, int K, double cap,
                        double scale)
{
    int ncols = G + T * G * K, nrows = T + 2 * G * K + (G - 1) + G * (K - 1);
    size_t nz_cap = 5 * (size_t)T * G * K + (size_t)G * K + 2 * (size_t)G + 16;
    int *ia = malloc((nz_cap + 1) * sizeof *ia), *ja = malloc((nz_cap + 1) * sizeof *ja);
    double *ar = malloc((nz_cap + 1) * sizeof *ar);
    if (!ia || !ja || !ar) {
        free(ia);
        free(ja);
        free(ar);
        return CZ_ENOMEM;
    }
    glp_set_obj_dir(P, GLP_MIN);
    glp_add_cols(P, ncols);
    for (int g = 0; g < G; g++) {
        glp_set_col_bnds(P, 1 + g, GLP_LO, 0.0, 0.0);
        glp_set_obj_coef(P, 1 + g, 1.0);
    }
    for (int j = G + 1; j <= ncols; j++)
        glp_set_col_kind(P, j, GLP_BV);
    glp_add_rows(P, nrows);
    int nz = 0, row = 0;
#define NZ(r, c, v) (nz++, ia[nz] = (r), ja[nz] = (c), ar[nz] = (v))
    for (int t = 0; t < T; t++) { /* each task exactly once */
        row++;
        glp_set_row_bnds(P, row, GLP_FX, 1.0, 1.0);
        for (int g = 0; g < G; g++)
            for (int k = 0; k < K; k++)
                NZ(row, ACOL(t, g, k), 1.0);
    }
    for (int g = 0; g < G; g++) {
        for (int k = 0; k < K; k++) {
            row++; /* load(g,k) - m_g <= 0 */
            glp_set_row_bnds(P, row, GLP_UP, 0.0, 0.0);
            NZ(row, 1 + g, -1.0);
            for (int t = 0; t < T; t++)
                NZ(row, ACOL(t, g, k), tasks[t].cost / scale);
            row++; /* load(g,k) <= cap */
            if (isinf(cap))
                glp_set_row_bnds(P, row, GLP_FR, 0.0, 0.0);
            else
                glp_set_row_bnds(P, row, GLP_UP, 0.0, cap / scale);
            for (int t = 0; t < T; t++)
                NZ(row, ACOL(t, g, k), tasks[t].cost / scale);
        }
    }
    for (int g = 0; g + 1 < G; g++) { /* m_g >= m_{g+1} */
        row++;
        glp_set_row_bnds(P, row, GLP_LO, 0.0, 0.0);
        NZ(row, 1 + g, 1.0);
        NZ(row, 2 + g, -1.0);
    }
    for (int g = 0; g < G; g++) { /* load(g,k) >= load(g,k+1) */
        for (int k = 0; k + 1 < K; k++) {
            row++;
            glp_set_row_bnds(P, row, GLP_LO, 0.0, 0.0);
            for (int t = 0; t < T; t++) {
                NZ(row, ACOL(t, g, k), tasks[t].cost / scale);
                NZ(row, ACOL(t, g, k + 1), -tasks[t].cost / scale);
            }
        }
    }
#undef NZ
    glp_load_matrix(P, nz, ia, ja, ar);
    free(ia);
    free(ja);
    free(ar);
    return CZ_OK;
}

/* Reads the solver's outcome into the rank's schedule: the solution when it is strictly better
 * than the greedy's, a note otherwise. gk and gload are scratch. */
static int take_result(cz_plan *plan, cz_rank_schedule *rs, glp_prob *P, const cz_mip_result *res,
                       const cz_costed *tasks, int T, int K, double greedy_v, int *gk,
                       double *gload, cz_error *err)
{
    int G = rs->ngroups, rc;
    if (res->status == CZ_SOLVE_TIMEOUT) {
        cz__plan_solver_note(plan,
                             "stage %d, DP rank %d: micro-group ILP timed out before any "
                             "solution; kept the greedy groups.",
                             rs->stage, rs->dp_rank);
        return CZ_OK;
    }
    if (res->status != CZ_SOLVE_OPTIMAL && res->status != CZ_SOLVE_FEASIBLE) {
        cz__plan_solver_note(plan,
                             "stage %d, DP rank %d: micro-group ILP failed (GLPK); kept the greedy "
                             "groups.",
                             rs->stage, rs->dp_rank);
        return CZ_OK;
    }
    for (int t = 0; t < T; t++) {
        gk[t] = -1;
        for (int g = 0; g < G && gk[t] < 0; g++)
            for (int k = 0; k < K; k++)
                if (glp_mip_col_val(P, ACOL(t, g, k)) > 0.5) {
                    gk[t] = g * K + k;
                    break;
                }
        if (gk[t] < 0)
            return cz__error_set(err, CZ_EINTERNAL,
                                 "stage %d, DP rank %d: the micro-group ILP left task %d "
                                 "unassigned",
                                 rs->stage, rs->dp_rank, tasks[t].id);
    }
    for (int i = 0; i < G * K; i++)
        gload[i] = 0;
    for (int t = 0; t < T; t++)
        gload[gk[t]] += tasks[t].cost;
    double v = 0;
    for (int g = 0; g < G; g++) {
        double mx = 0;
        for (int k = 0; k < K; k++)
            mx = fmax(mx, gload[g * K + k]);
        v += mx;
    }
    if (v < greedy_v * (1 - 1e-9) && (rc = schedule_rebuild(plan, rs, tasks, T, gk, G, K)) != CZ_OK)
        return rc; /* out of memory: solve_rank names it */
    if (res->status == CZ_SOLVE_FEASIBLE && strlen(plan->solver_note) == 0)
        cz__plan_solver_note(plan, "micro-group ILP hit its time limit on some DP ranks; kept the "
                                   "best schedules found (largest gap is in the plan).");
    return CZ_OK;
}

/* One DP rank: its tasks, the warm start, the problem, the solve and its result. */
static int solve_rank(cz_plan *plan, cz_rank_schedule *rs, double time_limit_s, cz_error *err)
{
    int rc = CZ_OK;
    int G = rs->ngroups, K = rs->groups[0].nslots, T = 0;
    for (int g = 0; g < G; g++)
        T += rs->groups[g].ntasks;
    cz_costed *tasks = malloc((size_t)(T + 1) * sizeof *tasks);
    int *greedy_gk = malloc((size_t)(T + 1) * sizeof *greedy_gk);
    int *gk = malloc((size_t)(T + 1) * sizeof *gk);
    int ncols = G + T * G * K;
    double *warm = calloc((size_t)ncols + 1, sizeof *warm);
    double *gload = calloc((size_t)G * K, sizeof *gload);
    cz_costed *gr = malloc((size_t)G * sizeof *gr);
    int *grank = malloc((size_t)G * sizeof *grank);
    glp_prob *P = NULL;
    if (!tasks || !greedy_gk || !gk || !warm || !gload || !gr || !grank) {
        rc = CZ_ENOMEM;
        goto done;
    }
    rank_tasks(plan, rs, T, K, tasks, greedy_gk);
    double maxcost = T ? tasks[0].cost : 0;
    if (!(maxcost > 0))
        goto done;
    double cap = plan->capacity_used > 0 ? fmax(plan->capacity_used, maxcost) : INFINITY;
    double greedy_v = schedule_value(plan, rs);
    double scale = maxcost;
    int warm_ok = warm_start(tasks, greedy_gk, T, G, K, cap, scale, warm, gload, gr, grank);
    P = glp_create_prob();
    if ((rc = load_problem(P, tasks, T, G, K, cap, scale)) != CZ_OK)
        goto done;
    cz_mip_result res;
    if ((rc = cz__mip_solve(P, warm_ok ? warm : NULL, time_limit_s, "microgroups-ilp", scale,
                            &plan->settings, &res, err)) != CZ_OK)
        goto done;
    cz__plan_solver_record(plan, 1, &res);
    rc = take_result(plan, rs, P, &res, tasks, T, K, greedy_v, gk, gload, err);
done:
    /* The builders report only their code: name the failure here. */
    if (rc == CZ_ENOMEM)
        cz__error_set(err, rc, "out of memory building the micro-group ILP");
    if (P)
        glp_delete_prob(P);
    free(tasks);
    free(greedy_gk);
    free(gk);
    free(warm);
    free(gload);
    free(gr);
    free(grank);
    return rc;
}

int cz__microgroups_ilp(cz_plan *plan, cz_error *err)
{
    if (plan->settings.tp == CZ_TP_SC) {
        cz__plan_solver_note(plan, "the micro-group ILP does not apply to sc (no hosts); kept sc.");
        return CZ_OK;
    }
    size_t n = plan->nschedules;
    cz_costed *ord = malloc((n + 1) * sizeof *ord);
    if (!ord)
        return cz__error_set(err, CZ_ENOMEM, "out of memory ordering the micro-group ILP");
    /* The largest makespans decide tp.makespan: they get the solver's time first. */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        cz_rank_schedule *rs = &plan->schedules[i];
        if (rs->ngroups == 0 || rs->groups[0].nslots < 2)
            continue;
        ord[m].id = (int)i;
        ord[m].cost = schedule_value(plan, rs);
        m++;
    }
    cz__costed_sort(ord, m);
    double t0 = cz__clock_seconds();
    int rc = CZ_OK;
    for (size_t j = 0; j < m; j++) {
        double left = plan->settings.time_limit_s - (cz__clock_seconds() - t0);
        double share = fmax(0.001, left / (double)(m - j));
        if ((rc = solve_rank(plan, &plan->schedules[ord[j].id], share, err)))
            break;
    }
    free(ord);
    return rc;
}
