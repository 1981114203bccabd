/*
 * The metrics of a fully sharded plan (cz__plan_metrics_compute calls this for settings.layout
 * fsdp; the fields keep the meanings of cz_format.h, counted over the shard group):
 *
 * Under HSDP (settings.replicate > 1) a GPU's shard rank is its DP rank modulo the shard size;
 * with the replicas computing redundantly every replica's GPU o carries slot o's matrices.
 *
 *   gpu_load     the matrices a GPU owns, plus its share of every elementwise parameter of its
 *                stage: the rows of the TP-local shard its DP rank holds under torch.chunk
 *                (cz__fsdp_rows) over the local rows, of the parameter's per-TP-rank cost;
 *   dp.load      a DP rank's GPUs' loads summed;
 *   makespan     per stage, the sum over its micro-groups of the largest slot load (every
 *                group's all-to-alls span the whole shard group, so each waits for its slowest
 *                GPU) plus the largest elementwise share; every DP rank of the stage has that
 *                rank_makespan, and tp.makespan is the largest over stages;
 *   lower_bound  the atomic bound of lower_bound.c, elementwise parameters counted in the loads
 *                but no tasks (they are cut between GPUs);
 *   memory       the optimizer state of the matrices a GPU owns, whole (the owner keeps it),
 *                plus its row share of every elementwise parameter's state;
 *   predicted_step_s  the makespan in seconds on the cluster's device (0 without a cluster).
 */
#include "cz_algorithms.h"

#include <stdlib.h>

static double ratio_max_mean(const double *v, size_t n)
{
    double max = 0.0, sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
        max = v[i] > max ? v[i] : max;
    }
    return n > 0 && sum > 0.0 ? max / (sum / (double)n) : 1.0;
}

/* DP rank r's share of parameter p's TP-local rows: its shard rank's (r modulo the shard
 * size; every replica holds the same shards under HSDP). */
static double row_share(const cz_plan *plan, const cz_plan_param *p, int r)
{
    int64_t rows = p->local_shape[0];
    int shard = cz_plan_fsdp_shard(plan);
    return rows > 0 ? (double)cz__fsdp_rows(rows, shard, r % shard) / (double)rows : 0.0;
}

int cz__fsdp_metrics_compute(cz_plan *plan, const cz_cluster *c, cz_error *err)
{
    int rc = CZ_OK, dp = plan->dp, tp = plan->tp, pp = plan->pp;
    size_t per_stage = (size_t)dp * (size_t)tp, ngpus = per_stage * (size_t)pp;
    /* The schedule's slots: the whole stage, or (HSDP, redundant) one replica's GPUs, whose
     * loads every replica repeats. */
    size_t slots = (size_t)cz_plan_fsdp_slots(plan);
    size_t nranks = (size_t)dp * (size_t)pp;
    cz_plan_metrics *m = &plan->metrics;
    cz__plan_metrics_free(m);
    m->dp_load = calloc(nranks, sizeof *m->dp_load);
    m->rank_makespan = calloc(nranks, sizeof *m->rank_makespan);
    m->gpu_load = calloc(ngpus, sizeof *m->gpu_load);
    m->memory = calloc(ngpus, sizeof *m->memory);
    double *ew = calloc(ngpus, sizeof *ew), *ew_s = calloc(ngpus, sizeof *ew_s);
    double *sec = calloc(plan->nparams + 1, sizeof *sec);
    double *slot_s = calloc(slots + 1, sizeof *slot_s);
    if (!m->dp_load || !m->rank_makespan || !m->gpu_load || !m->memory || !ew || !ew_s || !sec ||
        !slot_s) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory computing plan metrics");
        goto done;
    }
    m->total_cost = m->max_task_cost = 0.0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        sec[i] = c ? cz__cost_param_seconds(&p->def, &plan->settings, c, plan->dtype) : 0.0;
        m->total_cost += p->cost;
        if (p->stage < 0 || p->stage >= pp)
            continue;
        double state = cz__state_bytes(&p->def, &plan->settings, tp);
        size_t base = (size_t)p->stage * per_stage;
        if (p->def.kind == CZ_KIND_MATRIX) {
            m->max_task_cost = p->cost > m->max_task_cost ? p->cost : m->max_task_cost;
            for (size_t g = (size_t)p->owner; p->owner >= 0 && g < per_stage; g += slots) {
                m->gpu_load[base + g] += p->cost;
                m->memory[base + g] += state;
            }
            continue;
        }
        for (int r = 0; r < dp; r++) {
            double share = row_share(plan, p, r);
            for (int t = 0; t < tp && share > 0.0; t++) {
                size_t g = base + (size_t)r * (size_t)tp + (size_t)t;
                ew[g] += share * p->cost / tp;
                ew_s[g] += share * sec[i] / tp;
                m->memory[g] += share * state;
            }
        }
    }
    m->tp_makespan = m->predicted_step_s = 0.0;
    for (int s = 0; s < pp; s++) {
        double span = 0.0, span_s = 0.0, ew_max = 0.0, ew_max_s = 0.0;
        const cz_rank_schedule *rs = (size_t)s < plan->nschedules ? &plan->schedules[s] : NULL;
        for (int g = 0; rs && g < rs->ngroups; g++) {
            const cz_plan_group *gr = &rs->groups[g];
            double max = 0.0, max_s = 0.0;
            for (size_t k = 0; k < slots; k++)
                slot_s[k] = 0.0;
            for (int k = 0; k < gr->nslots; k++)
                max = gr->load[k] > max ? gr->load[k] : max;
            for (int t = 0; t < gr->ntasks; t++)
                if (gr->task_slot[t] >= 0 && (size_t)gr->task_slot[t] < slots &&
                    gr->task_param[t] >= 0 && (size_t)gr->task_param[t] < plan->nparams)
                    slot_s[gr->task_slot[t]] += sec[gr->task_param[t]];
            for (size_t k = 0; k < slots; k++)
                max_s = slot_s[k] > max_s ? slot_s[k] : max_s;
            span += max;
            span_s += max_s;
        }
        for (size_t k = 0; k < per_stage; k++) {
            size_t g = (size_t)s * per_stage + k;
            m->gpu_load[g] += ew[g];
            m->dp_load[(size_t)s * (size_t)dp + k / (size_t)tp] += m->gpu_load[g];
            ew_max = ew[g] > ew_max ? ew[g] : ew_max;
            ew_max_s = ew_s[g] > ew_max_s ? ew_s[g] : ew_max_s;
        }
        for (int r = 0; r < dp; r++)
            m->rank_makespan[(size_t)s * (size_t)dp + (size_t)r] = span + ew_max;
        if (span + ew_max > m->tp_makespan)
            m->tp_makespan = span + ew_max;
        if (span_s + ew_max_s > m->predicted_step_s)
            m->predicted_step_s = span_s + ew_max_s;
    }
    m->dp_imbalance = 1.0;
    for (int s = 0; s < pp; s++) {
        double r = ratio_max_mean(m->dp_load + (size_t)s * (size_t)dp, (size_t)dp);
        if (s == 0 || r > m->dp_imbalance)
            m->dp_imbalance = r;
    }
    m->tp_imbalance = ratio_max_mean(m->gpu_load, ngpus);
    cz_lower_bound lb;
    if ((rc = cz__plan_lower_bound(plan, &lb, err)) != CZ_OK)
        goto done;
    m->lower_bound = m->split_lower_bound = lb.value;
    /* Over the GPUs the work is spread on: redundant HSDP replicas each carry all of it. */
    m->average_load = m->total_cost / (double)(slots * (size_t)pp > 0 ? slots * (size_t)pp : 1);
done:
    free(ew);
    free(ew_s);
    free(sec);
    free(slot_s);
    if (rc != CZ_OK)
        cz__plan_metrics_free(m);
    return rc;
}
