/* One GLPK branch-and-cut run: LP relaxation, then branch and cut with the greedy solution
 * injected as the first incumbent, under a wall-clock limit, reporting progress and the gap. */
#include "ilp_glpk.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct mip_cb {
    const double *warm;
    int warm_done;
    const char *phase;
    double obj_scale;
    double t0, last_report;
    double gap;                  /* last gap GLPK computed; DBL_MAX while there is no incumbent */
    const cz_settings *settings; /* where the progress reports go */
} mip_cb;

static void mip_callback(glp_tree *T, void *info)
{
    mip_cb *cb = info;
    /* The warm start must go in through the heuristic hook: GLPK has no other way to take a
     * known integer solution, and only with the presolver off do the columns match ours. */
    if (glp_ios_reason(T) == GLP_IHEUR && cb->warm && !cb->warm_done) {
        cb->warm_done = 1;
        glp_ios_heur_sol(T, cb->warm);
    }
    if (glp_ios_best_node(T) != 0)
        cb->gap = glp_ios_mip_gap(T);
    double now = cz__clock_seconds();
    if (now - cb->t0 >= 1.0 && now - cb->last_report >= 1.0) {
        cb->last_report = now;
        glp_prob *P = glp_ios_get_prob(T);
        int best = glp_ios_best_node(T);
        cz_progress p = {
            .phase = cb->phase,
            .elapsed_s = now - cb->t0,
            .best_bound = best ? glp_ios_node_bound(T, best) * cb->obj_scale : NAN,
            .incumbent = glp_mip_status(P) == GLP_FEAS ? glp_mip_obj_val(P) * cb->obj_scale : NAN,
            .gap = cb->gap == DBL_MAX ? NAN : cb->gap};
        cz__progress_report(cb->settings, &p);
    }
}

static int ms_left(double t0, double limit_s)
{
    double left = limit_s - (cz__clock_seconds() - t0);
    if (left <= 0.001)
        return 1;
    if (left > 2.0e6)
        return 2000000000;
    return (int)(left * 1000.0);
}

int cz__mip_solve(glp_prob *P, const double *warm, double time_limit_s, const char *phase,
                  double obj_scale, const cz_settings *settings, cz_mip_result *res, cz_error *err)
{
    (void)err;
    double t0 = cz__clock_seconds();
    int old_out = glp_term_out(GLP_OFF);
    memset(res, 0, sizeof *res);
    res->status = CZ_SOLVE_FAILED;
    res->gap = NAN;

    glp_smcp smcp;
    glp_init_smcp(&smcp);
    smcp.msg_lev = GLP_MSG_OFF;
    smcp.presolve = GLP_OFF;
    smcp.tm_lim = ms_left(t0, time_limit_s);
    int rc = glp_simplex(P, &smcp);
    if (rc == GLP_ETMLIM ||
        (rc == 0 && glp_get_status(P) != GLP_OPT && cz__clock_seconds() - t0 >= time_limit_s)) {
        res->status = CZ_SOLVE_TIMEOUT;
        goto done;
    }
    if (rc != 0 || glp_get_status(P) != GLP_OPT)
        goto done;

    mip_cb cb = {.warm = warm,
                 .phase = phase,
                 .settings = settings,
                 .obj_scale = obj_scale,
                 .t0 = t0,
                 .last_report = t0,
                 .gap = DBL_MAX};
    glp_iocp iocp;
    glp_init_iocp(&iocp);
    iocp.msg_lev = GLP_MSG_OFF;
    iocp.presolve = GLP_OFF;
    iocp.tm_lim = ms_left(t0, time_limit_s);
    iocp.cb_func = mip_callback;
    iocp.cb_info = &cb;
    /* Best-local-bound backtracking keeps the reported gap honest on a time-out. */
    iocp.bt_tech = GLP_BT_BLB;
    iocp.br_tech = GLP_BR_DTH;
    rc = glp_intopt(P, &iocp);
    int st = glp_mip_status(P);
    if (rc == 0 && st == GLP_OPT) {
        res->status = CZ_SOLVE_OPTIMAL;
        res->gap = 0.0;
        res->obj = glp_mip_obj_val(P);
    } else if ((rc == GLP_ETMLIM || rc == GLP_ESTOP) && st == GLP_FEAS) {
        res->status = CZ_SOLVE_FEASIBLE;
        res->gap = cb.gap == DBL_MAX ? NAN : cb.gap;
        res->obj = glp_mip_obj_val(P);
    } else if (rc == GLP_ETMLIM || rc == GLP_ESTOP) {
        res->status = CZ_SOLVE_TIMEOUT;
    }

done:
    res->seconds = cz__clock_seconds() - t0;
    glp_term_out(old_out);
    return CZ_OK;
}

void cz__plan_solver_record(cz_plan *plan, int phase, const cz_mip_result *res)
{
    int *status = phase == 0 ? &plan->solver_status_dp : &plan->solver_status_tp;
    double *gap = phase == 0 ? &plan->solver_gap_dp : &plan->solver_gap_tp;
    if (res->status > plan->solver_status)
        plan->solver_status = res->status;
    if (res->status > *status)
        *status = res->status;
    if (!isnan(res->gap)) {
        plan->solver_gap = fmax(plan->solver_gap, res->gap);
        *gap = fmax(*gap, res->gap);
    }
    plan->solver_seconds += res->seconds;
}

void cz__plan_solver_note(cz_plan *plan, const char *fmt, ...)
{
    size_t used = strlen(plan->solver_note);
    if (used + 2 >= sizeof plan->solver_note)
        return;
    if (used > 0) {
        plan->solver_note[used++] = ' ';
        plan->solver_note[used] = '\0';
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(plan->solver_note + used, sizeof plan->solver_note - used, fmt, ap);
    va_end(ap);
}
