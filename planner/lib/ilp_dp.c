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

#define YCOL(k, r) (2 + (k) * (R - 1) + ((r) - 1))

/* The stage's rows, built as triplets: rows 1 .. nmono are the monotonicity rows, then R load
 * rows, then nlen range-length rows with upper bounds len_ub. */
typedef struct stage_rows {
    triplets t;
    int row;       /* rows so far */
    int nmono;     /* monotonicity rows (first) */
    int load_row0; /* first load row */
    int len_row0;  /* first length row */
    int nlen;
    double *len_ub; /* nb * R + 1 upper bounds of the length rows */
} stage_rows;

/* y[k][r] <= y[k+1][r] along each bucket, and y[k][r+1] <= y[k][r]. */
static int add_monotone_rows(stage_rows *m, const stage_view *v, int R)
{
    int rc = CZ_OK;
    for (int bi = 0; bi < v->nb; bi++)
        for (int k = v->first[bi]; k + 1 < v->first[bi + 1]; k++)
            for (int r = 1; r < R; r++) {
                m->row++;
                if ((rc = trip_add(&m->t, m->row, YCOL(k, r), 1.0)) != CZ_OK ||
                    (rc = trip_add(&m->t, m->row, YCOL(k + 1, r), -1.0)) != CZ_OK)
                    return rc;
            }
    for (int k = 0; k < v->n; k++)
        for (int r = 1; r + 1 < R; r++) {
            m->row++;
            if ((rc = trip_add(&m->t, m->row, YCOL(k, r + 1), 1.0)) != CZ_OK ||
                (rc = trip_add(&m->t, m->row, YCOL(k, r), -1.0)) != CZ_OK)
                return rc;
        }
    m->nmono = m->row;
    return rc;
}

/* Loads: sum_k c_k (y[k][r] - y[k][r+1]) - z <= 0, the y[k][0] = 1 term moved right. */
static int add_load_rows(stage_rows *m, const cz_plan *plan, const stage_view *v, double scale)
{
    int R = plan->dp, rc;
    m->load_row0 = m->row + 1;
    for (int r = 0; r < R; r++) {
        m->row++;
        if ((rc = trip_add(&m->t, m->row, 1, -1.0)) != CZ_OK)
            return rc;
        for (int k = 0; k < v->n; k++) {
            double c = plan->params[v->order[k]].cost / scale;
            if (c == 0)
                continue;
            if (r >= 1 && (rc = trip_add(&m->t, m->row, YCOL(k, r), c)) != CZ_OK)
                return rc;
            if (r + 1 < R && (rc = trip_add(&m->t, m->row, YCOL(k, r + 1), -c)) != CZ_OK)
                return rc;
        }
    }
    return CZ_OK;
}

/* Range lengths, in units of the bucket size, only where alpha constrains them. */
static int add_length_rows(stage_rows *m, const cz_plan *plan, const stage_view *v)
{
    int R = plan->dp, rc;
    m->len_row0 = m->row + 1;
    m->len_ub = malloc((size_t)(v->nb * R + 1) * sizeof *m->len_ub);
    if (!m->len_ub)
        return CZ_ENOMEM;
    for (int bi = 0; bi < v->nb; bi++) {
        double S = (double)plan->buckets[v->bucket[bi]].size;
        double bound = bucket_len_bound(plan, v, bi);
        if (bound >= S)
            continue;
        for (int r = 0; r < R; r++) {
            m->row++;
            m->len_ub[m->nlen++] = bound / S - (r == 0 ? 1.0 : 0.0);
            for (int k = v->first[bi]; k < v->first[bi + 1]; k++) {
                double span = (double)(cut_pos(plan, v, bi, k + 1) - cut_pos(plan, v, bi, k)) / S;
                if (r >= 1 && (rc = trip_add(&m->t, m->row, YCOL(k, r), span)) != CZ_OK)
                    return rc;
                if (r + 1 < R && (rc = trip_add(&m->t, m->row, YCOL(k, r + 1), -span)) != CZ_OK)
                    return rc;
            }
        }
    }
    return CZ_OK;
}

/* Columns (z, then the binaries y), the rows' bounds and the matrix into P. */
static void load_problem(glp_prob *P, const cz_plan *plan, const stage_view *v, const stage_rows *m,
                         int ncols, double total, double scale)
{
    int R = plan->dp;
    glp_set_obj_dir(P, GLP_MIN);
    glp_add_cols(P, ncols);
    /* No rank can do better than the largest parameter: a bound the LP relaxation misses. */
    double maxcost = 0;
    for (int k = 0; k < v->n; k++)
        maxcost = fmax(maxcost, plan->params[v->order[k]].cost);
    glp_set_col_bnds(P, 1, GLP_LO, maxcost / scale, 0.0);
    glp_set_obj_coef(P, 1, 1.0);
    for (int j = 2; j <= ncols; j++)
        glp_set_col_kind(P, j, GLP_BV);
    glp_add_rows(P, m->row);
    for (int i = 1; i <= m->nmono; i++)
        glp_set_row_bnds(P, i, GLP_UP, 0.0, 0.0);
    for (int r = 0; r < R; r++)
        glp_set_row_bnds(P, m->load_row0 + r, GLP_UP, 0.0, r == 0 ? -total / scale : 0.0);
    for (int i = 0; i < m->nlen; i++)
        glp_set_row_bnds(P, m->len_row0 + i, GLP_UP, 0.0, m->len_ub[i]);
    glp_load_matrix(P, m->t.n, m->t.ia, m->t.ja, m->t.ar);
}

/* Reads the solver's outcome into the plan: its partition when it found one strictly better
 * than the greedy's (ties keep the greedy ranges, which favour even slices), a note otherwise.
 * owner and load are scratch. */
static int take_result(cz_plan *plan, const stage_view *v, glp_prob *P, const cz_mip_result *res,
                       double greedy_z, int stage, double time_limit_s, int *owner, double *load,
                       cz_error *err)
{
    int R = plan->dp;
    if (res->status == CZ_SOLVE_TIMEOUT) {
        cz__plan_solver_note(plan,
                             "stage %d: DP ILP hit the %.3g s time limit before any solution; kept "
                             "the greedy partition.",
                             stage, time_limit_s);
        return CZ_OK;
    }
    if (res->status != CZ_SOLVE_OPTIMAL && res->status != CZ_SOLVE_FEASIBLE) {
        cz__plan_solver_note(plan, "stage %d: DP ILP failed (GLPK); kept the greedy partition.",
                             stage);
        return CZ_OK;
    }
    for (int k = 0; k < v->n; k++) {
        int o = 0;
        for (int r = 1; r < R; r++)
            o += glp_mip_col_val(P, YCOL(k, r)) > 0.5;
        owner[k] = o;
    }
    double z = partition_value(plan, v, owner, load);
    if (z < 0)
        return cz__error_set(err, CZ_EINTERNAL,
                             "stage %d: the DP ILP returned a partition that is not contiguous "
                             "or breaks the alpha bound",
                             stage);
    if (greedy_z < 0 || z < greedy_z * (1 - 1e-9))
        write_partition(plan, v, owner);
    if (res->status == CZ_SOLVE_FEASIBLE)
        cz__plan_solver_note(plan,
                             "stage %d: DP ILP hit the %.3g s time limit; kept the best "
                             "solution found (gap %.2g%%).",
                             stage, time_limit_s, 100.0 * (isnan(res->gap) ? 1.0 : res->gap));
    return CZ_OK;
}

/* One stage: the rows, the problem, a warm start from the greedy partition when it meets the
 * ILP's range bound, the solve, and its result. */
static int solve_stage(cz_plan *plan, int stage, double time_limit_s, cz_error *err)
{
    int R = plan->dp;
    int rc = CZ_OK;
    stage_view v;
    stage_rows m = {0};
    glp_prob *P = NULL;
    int *owner = NULL, *greedy = NULL;
    double *warm = NULL, *load = NULL;

    if ((rc = cz__stage_buckets_build(&v, plan, stage)) != CZ_OK || v.n == 0)
        goto done;
    owner = malloc((size_t)v.n * sizeof *owner);
    greedy = malloc((size_t)v.n * sizeof *greedy);
    load = malloc((size_t)R * sizeof *load);
    int ncols = 1 + v.n * (R - 1);
    warm = calloc((size_t)ncols + 1, sizeof *warm);
    if (!owner || !greedy || !load || !warm) {
        rc = CZ_ENOMEM;
        goto done;
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
    if ((rc = add_monotone_rows(&m, &v, R)) != CZ_OK ||
        (rc = add_load_rows(&m, plan, &v, scale)) != CZ_OK ||
        (rc = add_length_rows(&m, plan, &v)) != CZ_OK)
        goto done;
    P = glp_create_prob();
    load_problem(P, plan, &v, &m, ncols, total, scale);

    const double *warm_arg = NULL;
    if (greedy_z >= 0) {
        warm[1] = greedy_z / scale;
        for (int k = 0; k < v.n; k++)
            for (int r = 1; r < R; r++)
                warm[YCOL(k, r)] = greedy[k] >= r ? 1.0 : 0.0;
        warm_arg = warm;
    } else {
        cz__plan_solver_note(plan,
                             "stage %d: the greedy partition breaks the alpha range bound of the "
                             "ILP, so it could not warm-start the solver.",
                             stage);
    }
    cz_mip_result res;
    if ((rc = cz__mip_solve(P, warm_arg, time_limit_s, "dp-ilp", scale, &plan->settings, &res,
                            err)) != CZ_OK)
        goto done;
    cz__plan_solver_record(plan, 0, &res);
    rc = take_result(plan, &v, P, &res, greedy_z, stage, time_limit_s, owner, load, err);
done:
    /* The row builders and the stage walk report only their code: name the failure here. */
    if (rc == CZ_ENOMEM)
        cz__error_set(err, rc, "out of memory building the DP ILP of stage %d", stage);
    if (P)
        glp_delete_prob(P);
    trip_free(&m.t);
    free(m.len_ub);
    cz__stage_buckets_free(&v);
    free(owner);
    free(greedy);
    free(warm);
    free(load);
    return rc;
}

int cz__dp_partition_ilp(cz_plan *plan, cz_error *err)
{
    cz_dp_strategy s = plan->settings.dp;
    if (s == CZ_DP_TPAWARE) {
        /* The ILP minimizes the summed load; run on tpaware's result it would undo the TP
         * makespan tpaware optimized, so tpaware keeps its own cuts. */
        cz__plan_solver_note(plan, "the DP ILP does not apply to tpaware; kept tpaware's cuts.");
        return CZ_OK;
    }
    if (s == CZ_DP_JOINT) {
        /* The ILP minimizes the largest summed DP load; the joint cut is chosen for the
         * makespans of the ranks' TP packings, which the summed load does not see. */
        cz__plan_solver_note(plan, "the DP ILP minimizes the summed DP load, which the joint cut "
                                   "does not follow; kept the joint cuts (--dp alpha --solver "
                                   "ilp solves the DP partition exactly).");
        return CZ_OK;
    }
    if (s != CZ_DP_ALPHA && s != CZ_DP_ANCHORED) {
        cz__plan_solver_note(plan,
                             "the DP ILP needs an atomic, contiguous strategy (alpha, anchored); "
                             "kept %s.",
                             cz_dp_strategy_name(s));
        return CZ_OK;
    }
    if (plan->dp < 2)
        return CZ_OK;
    for (size_t i = 0; i < plan->nparams; i++)
        if (plan->params[i].dp_owner < 0 || plan->params[i].dp_owner >= plan->dp)
            return cz__error_set(err, CZ_EINTERNAL,
                                 "param %zu (%s) has DP owner %d before the DP ILP; expected "
                                 "0..%d",
                                 i, plan->params[i].def.name ? plan->params[i].def.name : "?",
                                 plan->params[i].dp_owner, plan->dp - 1);
    double t0 = cz__clock_seconds();
    for (int st = 0; st < plan->pp; st++) {
        double left = plan->settings.time_limit_s - (cz__clock_seconds() - t0);
        double share = fmax(0.001, left / (plan->pp - st));
        int rc = solve_stage(plan, st, share, err);
        if (rc)
            return rc;
    }
    return CZ_OK;
}
