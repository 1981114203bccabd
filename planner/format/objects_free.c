/* Release functions for the planner's objects. Each accepts NULL and partially built objects. */
#include "cz_format.h"

#include <stdlib.h>
#include <string.h>

void cz_model_free(cz_model *model)
{
    if (!model)
        return;
    for (size_t i = 0; i < model->nparams; i++) {
        free(model->params[i].name);
        free(model->params[i].block_sizes);
    }
    free(model->params);
    free(model->name);
    free(model->source);
    free(model);
}

void cz_cluster_free(cz_cluster *cluster)
{
    if (!cluster)
        return;
    free(cluster->name);
    free(cluster->source);
    free(cluster->device.name);
    cz__calibration_free(cluster->calibration);
    free(cluster);
}

void cz__plan_metrics_free(cz_plan_metrics *m)
{
    if (!m)
        return;
    free(m->dp_load);
    free(m->gpu_load);
    free(m->rank_makespan);
    free(m->memory);
    free(m->expert_load);
    free(m->expert_rank_makespan);
    m->dp_load = m->gpu_load = m->rank_makespan = m->memory = NULL;
    m->expert_load = m->expert_rank_makespan = NULL;
}

void cz__task_table_free(cz_task_table *tt)
{
    free(tt->first);
    free(tt->block);
    free(tt->cost);
    free(tt->panels);
    free(tt->dp_weight);
    free(tt->dp_base);
    memset(tt, 0, sizeof *tt);
}

void cz__rank_schedule_free_groups(cz_rank_schedule *rs)
{
    for (int g = 0; g < rs->ngroups; g++) {
        free(rs->groups[g].task_param);
        free(rs->groups[g].task_slot);
        free(rs->groups[g].task_block);
        free(rs->groups[g].task_width);
        free(rs->groups[g].task_panels);
        free(rs->groups[g].task_cost);
        free(rs->groups[g].load);
    }
    free(rs->groups);
    rs->groups = NULL;
    rs->ngroups = 0;
}

void cz__plan_schedules_free(cz_plan *plan)
{
    if (!plan)
        return;
    for (size_t i = 0; plan->schedules && i < plan->nschedules; i++)
        cz__rank_schedule_free_groups(&plan->schedules[i]);
    free(plan->schedules);
    plan->schedules = NULL;
    plan->nschedules = 0;
    for (size_t i = 0; plan->expert_schedules && i < plan->nexpert_schedules; i++)
        cz__rank_schedule_free_groups(&plan->expert_schedules[i]);
    free(plan->expert_schedules);
    plan->expert_schedules = NULL;
    plan->nexpert_schedules = 0;
}

void cz_plan_free(cz_plan *plan)
{
    if (!plan)
        return;
    for (size_t i = 0; i < plan->nparams; i++) {
        free(plan->params[i].def.name);
        free(plan->params[i].def.block_sizes);
    }
    free(plan->params);
    for (size_t i = 0; i < plan->nbuckets; i++)
        free(plan->buckets[i].ranges);
    free(plan->buckets);
    cz__plan_schedules_free(plan);
    cz__plan_metrics_free(&plan->metrics);
    cz__task_table_free(&plan->tasks);
    free(plan->generator);
    free(plan->generator_version);
    free(plan->model_name);
    free(plan->model_sha256);
    free(plan->cluster_name);
    free(plan->cluster_sha256);
    free(plan->calibration_device);
    free(plan->calibration_measured_at);
    free(plan->calibration_sha256);
    free(plan->ns_coeffs);
    free(plan->slice.global_ids);
    free(plan);
}
