/* ilp_glpk.h — one GLPK branch-and-cut run with a warm start, a time limit, progress reports
 * and a gap, shared by the ILP formulations (ilp_dp.c, ilp_microgroups.c). Internal. */
#ifndef CZ_ILP_GLPK_H
#define CZ_ILP_GLPK_H

#include "cz_types.h"

#include <glpk.h>

typedef struct cz_mip_result {
    int status;     /* CZ_SOLVE_* */
    double obj;     /* objective of the solution left in the problem (when OPTIMAL/FEASIBLE) */
    double gap;     /* relative gap: 0 when optimal, last known gap after a time-out */
    double seconds; /* wall time of the run */
} cz_mip_result;

/* Solves the minimization MIP P. warm (x[1..n] of P's columns, may be NULL) is offered to GLPK
 * as a heuristic solution; it must be integer feasible. obj_scale converts P's objective back to
 * the cost unit for the progress reports, which go to settings->progress. The solution is read with
 * glp_mip_col_val afterwards. */
int cz__mip_solve(glp_prob *P, const double *warm, double time_limit_s, const char *phase,
                  double obj_scale, const cz_settings *settings, cz_mip_result *res, cz_error *err);

/* Folds one solve's outcome into the plan's solver fields (worst status, largest gap), overall
 * and for its phase (0: DP partition, 1: micro-groups). */
void cz__plan_solver_record(cz_plan *plan, int phase, const cz_mip_result *res);

/* Appends a sentence to plan->solver_note (truncated to fit). */
void cz__plan_solver_note(cz_plan *plan, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif /* CZ_ILP_GLPK_H */
