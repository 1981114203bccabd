/* The DP partition as a mixed-integer program (GLPK), per pipeline stage.
 *
 * Within a bucket the parameters, in offset order, are owned by non-decreasing DP ranks (the
 * ranges are contiguous and rank-ordered, every parameter whole in one range). Binary
 * y[i][r] (r = 1..R-1) says "parameter i is owned by a rank >= r"; it is monotone in i along
 * each bucket and in r, and x[i][r] = y[i][r] - y[i][r+1] (y[i][0] = 1, y[i][R] = 0) is the
 * ownership. Minimize z subject to sum_i cost_i x[i][r] <= z for every rank r.
 *
 * Alpha bounds each range's length: with the cut between parameters i-1 and i placed at the
 * start of i (the first range starts at 0, the last ends at the bucket size S), rank r's range
 * has length sum_i span_i x[i][r], span_i being the distance to the next parameter's start.
 * We require length <= even + alpha (S - even) + maxspan, even = S/R and maxspan the largest
 * span of the bucket: alpha = 1 leaves the ranges free, alpha = 0 keeps every range within
 * one parameter of the even slice, which the nearest-boundary cut placement always meets. */
#include "ilp_glpk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct triplets {
    int n, cap;
    int *ia, *ja;
    double *ar;
} triplets;

static int trip_add(triplets *t, int row, int col, double v)
{
    if (t->n + 2 > t->cap) {
        int cap = t->cap ? 2 * t->cap : 1024;
        int *ia = realloc(t->ia, (size_t)cap * sizeof *ia);
        if (!ia)
            return CZ_ENOMEM;
        t->ia = ia;
        int *ja = realloc(t->ja, (size_t)cap * sizeof *ja);
        if (!ja)
            return CZ_ENOMEM;
        t->ja = ja;
        double *ar = realloc(t->ar, (size_t)cap * sizeof *ar);
        if (!ar)
            return CZ_ENOMEM;
        t->ar = ar;
        t->cap = cap;
    }
    t->n++; /* GLPK arrays are 1-based: slot 0 stays unused */
    t->ia[t->n] = row;
    t->ja[t->n] = col;
    t->ar[t->n] = v;
    return CZ_OK;
}

static void trip_free(triplets *t)
{
    free(t->ia);
    free(t->ja);
    free(t->ar);
}

typedef cz_stage_buckets stage_view;

static int64_t cut_pos(const cz_plan *plan, const stage_view *v, int bi, int k)
{
    if (k == v->first[bi])
        return 0;
    if (k == v->first[bi + 1])
        return plan->buckets[v->bucket[bi]].size;
    return plan->params[v->order[k]].offset;
}

static double bucket_len_bound(const cz_plan *plan, const stage_view *v, int bi)
{
    int R = plan->dp;
    double S = (double)plan->buckets[v->bucket[bi]].size;
    double maxspan = 0;
    for (int k = v->first[bi]; k < v->first[bi + 1]; k++) {
        double span = (double)(cut_pos(plan, v, bi, k + 1) - cut_pos(plan, v, bi, k));
        maxspan = fmax(maxspan, span);
    }
    double even = S / R;
    double a = fmin(1.0, fmax(0.0, plan->settings.alpha));
    return fmin(S, even + a * (S - even) + maxspan);
}

/* Largest per-rank load of owners[] (indexed like v->order); -1 when owners are not a valid
 * contiguous partition or break the length bound. */
static double partition_value(const cz_plan *plan, const stage_view *v, const int *owner,
                              double *load)
{
    int R = plan->dp;
    for (int r = 0; r < R; r++)
        load[r] = 0;
    for (int bi = 0; bi < v->nb; bi++) {
        double bound = bucket_len_bound(plan, v, bi);
        int prev = 0;
        double len[R];
        for (int r = 0; r < R; r++)
            len[r] = 0;
        for (int k = v->first[bi]; k < v->first[bi + 1]; k++) {
            if (owner[k] < prev || owner[k] >= R)
                return -1;
            prev = owner[k];
            load[owner[k]] += plan->params[v->order[k]].cost;
            len[owner[k]] += (double)(cut_pos(plan, v, bi, k + 1) - cut_pos(plan, v, bi, k));
        }
        for (int r = 0; r < R; r++)
            if (len[r] > bound * (1 + 1e-12))
                return -1;
    }
    double z = 0;
    for (int r = 0; r < R; r++)
        z = fmax(z, load[r]);
    return z;
}

static void write_partition(cz_plan *plan, const stage_view *v, const int *owner)
{
    int R = plan->dp;
    for (int k = 0; k < v->n; k++)
        plan->params[v->order[k]].dp_owner = owner[k];
    for (int bi = 0; bi < v->nb; bi++) {
        cz_plan_bucket *b = &plan->buckets[v->bucket[bi]];
        int64_t cut[R + 1];
        cut[0] = 0;
        cut[R] = b->size;
        for (int r = 1; r < R; r++) {
            cut[r] = b->size;
            for (int k = v->first[bi]; k < v->first[bi + 1]; k++) {
                if (owner[k] >= r) {
                    cut[r] = cut_pos(plan, v, bi, k);
                    break;
                }
            }
        }
        for (int r = 0; r < R; r++) {
            b->ranges[2 * r] = cut[r];
            b->ranges[2 * r + 1] = cut[r + 1];
        }
    }
}

#define YCOL(k, r) (2 + (k) * (R - 1) + ((r)-1))

static int solve_stage(cz_plan *plan, int stage, double time_limit_s, cz_error *err)
{
    int R = plan->dp;
    int rc = CZ_OK;
    stage_view v;
    triplets t = {0};
    glp_prob *P = NULL;
    int *owner = NULL, *greedy = NULL;
    double *warm = NULL, *load = NULL;

    rc = cz_stage_buckets_build(&v, plan, stage);
    if (rc)
        goto fail;
    if (v.n == 0)
        goto done;
    owner = malloc((size_t)v.n * sizeof *owner);
    greedy = malloc((size_t)v.n * sizeof *greedy);
    load = malloc((size_t)R * sizeof *load);
    int ncols = 1 + v.n * (R - 1);
    warm = calloc((size_t)ncols + 1, sizeof *warm);
    if (!owner || !greedy || !load || !warm) {
        rc = CZ_ENOMEM;
        goto fail;
    }
    double total = 0;
    for (int k = 0; k < v.n; k++) {
        greedy[k] = plan->params[v.order[k]].dp_owner;
        total += plan->params[v.order[k]].cost;
    }
    if (!(total > 0))
        goto done;
    double greedy_z = partition_value(plan, &v, greedy, load);
    /* Normalizing costs to a mean rank load of 1 keeps GLPK's tolerances meaningful whether
     * the unit is seconds (tiny) or FLOPs (huge). */
    double scale = total / R;

    P = glp_create_prob();
    glp_set_obj_dir(P, GLP_MIN);
    glp_add_cols(P, ncols);
    /* No rank can do better than the largest parameter: a bound the LP relaxation misses. */
    double maxcost = 0;
    for (int k = 0; k < v.n; k++)
        maxcost = fmax(maxcost, plan->params[v.order[k]].cost);
    glp_set_col_bnds(P, 1, GLP_LO, maxcost / scale, 0.0);
    glp_set_obj_coef(P, 1, 1.0);
    for (int j = 2; j <= ncols; j++)
        glp_set_col_kind(P, j, GLP_BV);

    int row = 0;
    /* Monotone along each bucket: y[k][r] <= y[k+1][r]. */
    for (int bi = 0; bi < v.nb; bi++) {
        for (int k = v.first[bi]; k + 1 < v.first[bi + 1]; k++) {
            for (int r = 1; r < R; r++) {
                row++;
                if ((rc = trip_add(&t, row, YCOL(k, r), 1.0)) ||
                    (rc = trip_add(&t, row, YCOL(k + 1, r), -1.0)))
                    goto fail;
            }
        }
    }
    /* Monotone in r: y[k][r+1] <= y[k][r]. */
    for (int k = 0; k < v.n; k++) {
        for (int r = 1; r + 1 < R; r++) {
            row++;
            if ((rc = trip_add(&t, row, YCOL(k, r + 1), 1.0)) ||
                (rc = trip_add(&t, row, YCOL(k, r), -1.0)))
                goto fail;
        }
    }
    int nmono = row;
    /* Loads: sum_k c_k (y[k][r] - y[k][r+1]) - z <= 0, the y[k][0] = 1 term moved right. */
    int load_row0 = row + 1;
    for (int r = 0; r < R; r++) {
        row++;
        if ((rc = trip_add(&t, row, 1, -1.0)))
            goto fail;
        for (int k = 0; k < v.n; k++) {
            double c = plan->params[v.order[k]].cost / scale;
            if (c == 0)
                continue;
            if (r >= 1 && (rc = trip_add(&t, row, YCOL(k, r), c)))
                goto fail;
            if (r + 1 < R && (rc = trip_add(&t, row, YCOL(k, r + 1), -c)))
                goto fail;
        }
    }
    /* Range lengths, in units of the bucket size, only where alpha constrains them. */
    int len_row0 = row + 1;
    int nlen = 0;
    double *len_ub = malloc((size_t)(v.nb * R + 1) * sizeof *len_ub);
    if (!len_ub) {
        rc = CZ_ENOMEM;
        goto fail;
    }
    for (int bi = 0; bi < v.nb; bi++) {
        double S = (double)plan->buckets[v.bucket[bi]].size;
        double bound = bucket_len_bound(plan, &v, bi);
        if (bound >= S)
            continue;
        for (int r = 0; r < R; r++) {
            row++;
            len_ub[nlen++] = bound / S - (r == 0 ? 1.0 : 0.0);
            for (int k = v.first[bi]; k < v.first[bi + 1]; k++) {
                double span = (double)(cut_pos(plan, &v, bi, k + 1) - cut_pos(plan, &v, bi, k)) / S;
                if (r >= 1 && (rc = trip_add(&t, row, YCOL(k, r), span)))
                    goto fail_len;
                if (r + 1 < R && (rc = trip_add(&t, row, YCOL(k, r + 1), -span)))
                    goto fail_len;
            }
        }
    }
    glp_add_rows(P, row);
    for (int i = 1; i <= nmono; i++)
        glp_set_row_bnds(P, i, GLP_UP, 0.0, 0.0);
    for (int r = 0; r < R; r++)
        glp_set_row_bnds(P, load_row0 + r, GLP_UP, 0.0, r == 0 ? -total / scale : 0.0);
    for (int i = 0; i < nlen; i++)
        glp_set_row_bnds(P, len_row0 + i, GLP_UP, 0.0, len_ub[i]);
    free(len_ub);
    glp_load_matrix(P, t.n, t.ia, t.ja, t.ar);

    const double *warm_arg = NULL;
    if (greedy_z >= 0) {
        warm[1] = greedy_z / scale;
        for (int k = 0; k < v.n; k++)
            for (int r = 1; r < R; r++)
                warm[YCOL(k, r)] = greedy[k] >= r ? 1.0 : 0.0;
        warm_arg = warm;
    } else {
        cz_plan_solver_note(plan,
                            "stage %d: the greedy partition breaks the alpha range bound of the "
                            "ILP, so it could not warm-start the solver.",
                            stage);
    }

    cz_mip_result res;
    if ((rc = cz_mip_solve(P, warm_arg, time_limit_s, "dp-ilp", scale, &plan->settings, &res, err)))
        goto fail;
    cz_plan_solver_record(plan, 0, &res);
    if (res.status == CZ_SOLVE_OPTIMAL || res.status == CZ_SOLVE_FEASIBLE) {
        for (int k = 0; k < v.n; k++) {
            int o = 0;
            for (int r = 1; r < R; r++)
                o += glp_mip_col_val(P, YCOL(k, r)) > 0.5;
            owner[k] = o;
        }
        double z = partition_value(plan, &v, owner, load);
        if (z < 0) {
            rc = cz_error_set(err, CZ_EINTERNAL,
                              "stage %d: the DP ILP returned a partition that is not contiguous "
                              "or breaks the alpha bound",
                              stage);
            goto fail;
        }
        /* Keep the greedy plan unless the solver really did better: ties keep the greedy's
         * ranges (which favour even slices). */
        if (greedy_z < 0 || z < greedy_z * (1 - 1e-9))
            write_partition(plan, &v, owner);
        if (res.status == CZ_SOLVE_FEASIBLE)
            cz_plan_solver_note(plan,
                                "stage %d: DP ILP hit the %.3g s time limit; kept the best "
                                "solution found (gap %.2g%%).",
                                stage, time_limit_s, 100.0 * (isnan(res.gap) ? 1.0 : res.gap));
    } else if (res.status == CZ_SOLVE_TIMEOUT) {
        cz_plan_solver_note(plan,
                            "stage %d: DP ILP hit the %.3g s time limit before any solution; kept "
                            "the greedy partition.",
                            stage, time_limit_s);
    } else {
        cz_plan_solver_note(plan, "stage %d: DP ILP failed (GLPK); kept the greedy partition.",
                            stage);
    }
    goto done;

fail_len:
    free(len_ub);
fail:
    if (rc == CZ_ENOMEM)
        cz_error_set(err, rc, "out of memory building the DP ILP of stage %d", stage);
done:
    if (P)
        glp_delete_prob(P);
    trip_free(&t);
    cz_stage_buckets_free(&v);
    free(owner);
    free(greedy);
    free(warm);
    free(load);
    return rc;
}

int cz_dp_partition_ilp(cz_plan *plan, cz_error *err)
{
    cz_dp_strategy s = plan->settings.dp;
    if (s == CZ_DP_TPAWARE) {
        /* The ILP minimizes the summed load; run on tpaware's result it would undo the TP
         * makespan tpaware optimized, so tpaware keeps its own cuts. */
        cz_plan_solver_note(plan, "the DP ILP does not apply to tpaware; kept tpaware's cuts.");
        return CZ_OK;
    }
    if (s != CZ_DP_ALPHA && s != CZ_DP_ANCHORED) {
        cz_plan_solver_note(plan,
                            "the DP ILP needs an atomic, contiguous strategy (alpha, anchored); "
                            "kept %s.",
                            cz_dp_strategy_name(s));
        return CZ_OK;
    }
    if (plan->dp < 2)
        return CZ_OK;
    for (size_t i = 0; i < plan->nparams; i++)
        if (plan->params[i].dp_owner < 0 || plan->params[i].dp_owner >= plan->dp)
            return cz_error_set(err, CZ_EINTERNAL,
                                "param %zu (%s) has DP owner %d before the DP ILP; expected "
                                "0..%d",
                                i, plan->params[i].def.name ? plan->params[i].def.name : "?",
                                plan->params[i].dp_owner, plan->dp - 1);
    double t0 = cz_clock_seconds();
    for (int st = 0; st < plan->pp; st++) {
        double left = plan->settings.time_limit_s - (cz_clock_seconds() - t0);
        double share = fmax(0.001, left / (plan->pp - st));
        int rc = solve_stage(plan, st, share, err);
        if (rc)
            return rc;
    }
    return CZ_OK;
}
