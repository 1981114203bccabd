/* The GPU a step model is asked about: in the plan's grid, with a schedule the models cover.
 * One check for the byte model and the memory model, so that both refuse alike. */
#include "model_rank.h"

int cz__model_rank_check(const cz_plan *plan, int dp_rank, int tp_rank, const char *model,
                         cz_error *err)
{
    if (dp_rank < 0 || dp_rank >= plan->dp || tp_rank < 0 || tp_rank >= plan->tp)
        return cz__error_set(err, CZ_EINVALID, "GPU (%d, %d) is not in the plan's DP%d x TP%d",
                             dp_rank, tp_rank, plan->dp, plan->tp);
    const cz_rank_schedule *rs = cz_plan_rank_schedule(plan, 0, dp_rank);
    for (int g = 0; rs && g < rs->ngroups; g++)
        for (int t = 0; t < rs->groups[g].ntasks; t++)
            if (cz_group_task_width(&rs->groups[g], t) > 1)
                return cz__error_set(err, CZ_EUNSUPPORTED,
                                     "%s does not cover cooperative tasks (micro-group %d has one)",
                                     model, rs->groups[g].id);
    return rs ? CZ_OK
              : cz__error_set(err, CZ_EINVALID, "the plan has no schedule for DP rank %d", dp_rank);
}
