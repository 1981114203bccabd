/*
 * The fully sharded layout's plan (settings.layout fsdp; docs/PLANNER.md, "Fully sharded"):
 * FSDP2's fully_shard keeps every parameter as Shard(0) over the DP ranks and reduce-scatters
 * the gradients itself, so no bucket range ties a matrix to a DP rank. Any GPU of the stage's
 * shard group (its dp * tp GPUs) may own a matrix: the owner gathers the matrix's gradient
 * shards (one all-to-all(v) per micro-group over the shard group), runs the whole-matrix step
 * and sends the update's shards back.
 *
 * Per stage the matrices are one task list over dp * tp slots, scheduled by the same greedy
 * rollback as the TP micro-groups (microgroups.c, cz__tp_schedule_tasks): tasks by decreasing
 * cost, so that same-shape matrices (equal cost) sit next to each other and a group batches
 * them; each group is LPT-assigned to the slots. The capacity: --capacity when given; otherwise
 * the candidates C_k = max(largest, total / (k * GPUs)) for k = 4, 3, 2 and one group (C =
 * total), and the most groups whose makespan (the sum of the groups' largest slots, as every
 * group's all-to-alls span the whole shard group) is within CZ_FSDP_GROUPS_SLACK of the best
 * candidate's. The slack is tighter than the TP pipeline's 5%: a TP group is a few GPUs that
 * share a node, while every extra FSDP group adds a largest slot over hundreds of GPUs, and the
 * plan must stay at the atomic lower bound. The owner of a matrix is its slot: GPU dp_rank *
 * tp + tp_rank of the stage.
 *
 * HSDP (settings.replicate R > 1, DP = R replicas x S shard ranks; FSDP2 shards over S):
 * redundant, the slots are one replica's S * tp GPUs and every replica runs the same schedule
 * on its own (owner o stands for GPU o of each replica); partitioned, the slots are all dp * tp
 * GPUs of the stage, so each matrix is updated once, on one replica. cz_plan_fsdp_slots.
 */
#include "cz_algorithms.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CZ_FSDP_GROUPS_SLACK 1.02

/* The makespan of a stage's groups: each group's largest slot, summed. */
static double groups_span(const cz_rank_schedule *rs)
{
    double span = 0.0;
    for (int g = 0; g < rs->ngroups; g++) {
        double max = 0.0;
        for (int k = 0; k < rs->groups[g].nslots; k++)
            if (rs->groups[g].load[k] > max)
                max = rs->groups[g].load[k];
        span += max;
    }
    return span;
}

/* One schedule of the stage's tasks at capacity C into *rs (emptied first). */
static int schedule_at(cz_rank_schedule *rs, cz_costed *tasks, int n, const cz_settings *s,
                       int gpus, double C, double *load, cz_error *err)
{
    cz_settings at = *s;
    double used;
    at.capacity = C;
    cz__rank_schedule_free_groups(rs);
    return cz__tp_schedule_tasks(rs, NULL, tasks, n, &at, gpus, load, &used, err);
}

/* The stage's schedule (see the file comment); *capacity is the capacity kept. */
static int stage_schedule(cz_plan *plan, int stage, cz_costed *tasks, int n, double *load,
                          double *capacity, cz_error *err)
{
    cz_rank_schedule *rs = &plan->schedules[stage];
    int gpus = cz_plan_fsdp_slots(plan), rc = CZ_OK;
    double total = 0.0, largest = 0.0;
    for (int k = 0; k < n; k++) {
        total += tasks[k].cost;
        largest = tasks[k].cost > largest ? tasks[k].cost : largest;
    }
    *capacity = 0.0;
    if (n == 0)
        return CZ_OK;
    if (plan->settings.capacity > 0.0) {
        *capacity = plan->settings.capacity;
        return schedule_at(rs, tasks, n, &plan->settings, gpus, *capacity, load, err);
    }
    double cap[4], span[4], best = INFINITY;
    for (int k = 1; k <= 4; k++) {
        double c = k == 1 ? total : total / ((double)k * gpus);
        cap[k - 1] = c > largest ? c : largest;
        if ((rc = schedule_at(rs, tasks, n, &plan->settings, gpus, cap[k - 1], load, err)) != CZ_OK)
            return rc;
        span[k - 1] = groups_span(rs);
        best = span[k - 1] < best ? span[k - 1] : best;
    }
    int keep = 1;
    for (int k = 4; k > 1 && keep == 1; k--)
        if (span[k - 1] <= best * CZ_FSDP_GROUPS_SLACK)
            keep = k;
    *capacity = cap[keep - 1];
    return schedule_at(rs, tasks, n, &plan->settings, gpus, *capacity, load, err);
}

int cz__fsdp_schedule_build(cz_plan *plan, cz_error *err)
{
    int rc = CZ_OK, gpus = cz_plan_fsdp_slots(plan), shard = cz_plan_fsdp_shard(plan);
    cz_costed *tasks = malloc((plan->nparams + 1) * sizeof *tasks);
    double *load = malloc(((size_t)gpus + 1) * sizeof *load);
    cz__plan_schedules_free(plan);
    plan->schedules = calloc((size_t)plan->pp, sizeof *plan->schedules);
    if (!tasks || !load || !plan->schedules) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory scheduling the fully sharded plan");
        goto done;
    }
    plan->nschedules = (size_t)plan->pp;
    plan->capacity_used = 0.0;
    for (size_t i = 0; i < plan->nparams; i++) {
        cz_plan_param *q = &plan->params[i];
        q->bucket = -1;
        q->offset = 0;
        q->owner = q->dp_owner = -1;
        q->shard_rows = cz__fsdp_chunk_rows(q->local_shape[0], shard);
    }
    for (int s = 0; s < plan->pp; s++) {
        cz_rank_schedule *rs = &plan->schedules[s];
        rs->stage = s;
        rs->dp_rank = -1; /* the whole shard group */
        int n = 0;
        for (size_t i = 0; i < plan->nparams; i++)
            if (plan->params[i].stage == s && plan->params[i].def.kind == CZ_KIND_MATRIX)
                tasks[n++] = (cz_costed){(int)i, plan->params[i].cost};
        double capacity;
        if ((rc = stage_schedule(plan, s, tasks, n, load, &capacity, err)) != CZ_OK)
            goto done;
        if (capacity > plan->capacity_used)
            plan->capacity_used = capacity;
        for (int g = 0; g < rs->ngroups; g++) {
            const cz_plan_group *gr = &rs->groups[g];
            for (int t = 0; t < gr->ntasks; t++) {
                cz_plan_param *q = &plan->params[gr->task_param[t]];
                q->owner = gr->task_slot[t];
                q->dp_owner = gr->task_slot[t] / plan->tp;
            }
        }
    }
done:
    free(tasks);
    free(load);
    return rc;
}
