/*
 * The atomic lower bound (metrics.lower_bound): no plan that keeps the same tasks whole and
 * hosted (each matrix updated by one GPU, each elementwise parameter's TP share by one GPU) can
 * have a busiest GPU below it. It is the largest of five terms, each proved in docs/PLANNER.md
 * ("The lower bound"):
 *
 *   largest task   no GPU finishes before its largest task;
 *   stage load     a stage's work stays on its dp * tp GPUs: (dense + expert) / (dp * tp);
 *   expert group   an EP rank's experts stay on its edp * etp GPUs: their sum / (edp * etp);
 *   shared GPU     with more tasks than GPUs in a stage (or EP group), two of its G + 1 largest
 *                  share a GPU: the G-th plus the (G + 1)-th largest;
 *   dense + group  the stage's largest dense task sits in some EP group, whose GPUs then carry
 *                  it and that group's experts: min over groups of (largest + experts) / GPUs.
 *
 * Without expert groups the last two reduce to the stage's terms. Elementwise parameters that
 * a plan cuts between DP ranks (the split layout's dense ones, the even baseline's, every one of
 * a fully sharded plan) count in the loads but are no tasks. A fully sharded plan's stage GPUs
 * are its shard group, so the same terms bound it.
 */
#include "cz_algorithms.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

/* A task cost with how many equal tasks it stands for (an elementwise parameter's TP shares). */
typedef struct weighted {
    double cost;
    int64_t count;
} weighted;

static int by_cost_desc(const void *a, const void *b)
{
    double x = ((const weighted *)a)->cost, y = ((const weighted *)b)->cost;
    return (x < y) - (x > y);
}

/* The g-th plus the (g + 1)-th largest of n weighted tasks (sorted here), 0 with at most g. */
static double shared_gpu(weighted *w, size_t n, int64_t g)
{
    qsort(w, n, sizeof *w, by_cost_desc);
    double gth = 0.0;
    int64_t seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (w[i].count <= 0)
            continue;
        int64_t before = seen;
        seen += w[i].count;
        if (before < g && seen >= g)
            gth = w[i].cost;
        if (seen >= g + 1)
            return gth + w[i].cost;
    }
    return 0.0;
}

/* Whether p is an expert parameter in an expert group (the metrics' rule). */
static bool in_expert_group(const cz_plan *plan, const cz_plan_param *p)
{
    return cz_plan_has_experts(plan) && p->expert && p->ep_rank >= 0 && p->ep_rank < plan->ep;
}

/* The task parameter p makes: its cost and multiplicity (count 0: no task, see the file
 * comment). */
static weighted task_of(const cz_plan *plan, const cz_plan_param *p)
{
    bool expert = in_expert_group(plan, p);
    int width = expert ? plan->etp : plan->tp;
    if (p->def.kind == CZ_KIND_MATRIX)
        return (weighted){p->cost, 1};
    bool cut =
        !expert && (plan->settings.layout != CZ_LAYOUT_UNIFIED || plan->settings.dp == CZ_DP_EVEN);
    if (cut || width <= 0)
        return (weighted){0.0, 0};
    return (weighted){p->cost / width, width};
}

/* Parameters bucketed by domain: one per stage (all of its tasks) and, with expert groups, one
 * per (stage, EP rank) after them (that group's expert tasks). */
typedef struct domains {
    size_t n;       /* pp, or pp * (1 + ep) */
    double *load;   /* per domain: summed cost */
    double *dense;  /* per stage: its largest dense task */
    double largest; /* the largest task of any parameter */
    size_t *first;  /* n + 1 offsets into task */
    weighted *task; /* the domains' tasks, domain by domain */
} domains;

/* The domain of the expert group (stage, EP rank e). */
static size_t group_index(const cz_plan *plan, int stage, int e)
{
    return (size_t)plan->pp + (size_t)stage * (size_t)plan->ep + (size_t)e;
}

/* The domain of p's expert group, or SIZE_MAX; p's stage is in range. */
static size_t group_domain(const cz_plan *plan, const cz_plan_param *p)
{
    return in_expert_group(plan, p) ? group_index(plan, p->stage, p->ep_rank) : SIZE_MAX;
}

/* Whether the metrics count p in its stage (a valid stage; an expert parameter of a plan with
 * expert groups only with a valid EP rank). */
static bool counted(const cz_plan *plan, const cz_plan_param *p)
{
    if (p->stage < 0 || p->stage >= plan->pp)
        return false;
    return !(p->expert && cz_plan_has_experts(plan) && !in_expert_group(plan, p));
}

static int domains_fill(domains *d, const cz_plan *plan, cz_error *err)
{
    d->n = (size_t)plan->pp * (cz_plan_has_experts(plan) ? 1u + (size_t)plan->ep : 1u);
    d->load = calloc(d->n, sizeof *d->load);
    d->dense = calloc((size_t)plan->pp, sizeof *d->dense);
    d->first = calloc(d->n + 1, sizeof *d->first);
    size_t *fill = calloc(d->n, sizeof *fill);
    d->task = calloc(2 * plan->nparams + 1, sizeof *d->task);
    int rc = CZ_OK;
    if (!d->load || !d->dense || !d->first || !fill || !d->task) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory computing the lower bound");
        goto done;
    }
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (!counted(plan, p))
            continue;
        size_t g = group_domain(plan, p);
        d->load[p->stage] += p->cost;
        d->first[p->stage + 1]++;
        if (g != SIZE_MAX) {
            d->load[g] += p->cost;
            d->first[g + 1]++;
        }
    }
    for (size_t k = 0; k < d->n; k++)
        d->first[k + 1] += d->first[k];
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        weighted t = task_of(plan, p);
        if (t.count > 0 && t.cost > d->largest)
            d->largest = t.cost;
        if (!counted(plan, p))
            continue;
        size_t g = group_domain(plan, p);
        if (g == SIZE_MAX && t.count > 0 && t.cost > d->dense[p->stage])
            d->dense[p->stage] = t.cost;
        d->task[d->first[p->stage] + fill[p->stage]++] = t;
        if (g != SIZE_MAX)
            d->task[d->first[g] + fill[g]++] = t;
    }
done:
    free(fill);
    return rc;
}

static void domains_free(domains *d)
{
    free(d->load);
    free(d->dense);
    free(d->first);
    free(d->task);
}

static void raise_to(double *term, double v)
{
    if (v > *term)
        *term = v;
}

int cz__plan_lower_bound(const cz_plan *plan, cz_lower_bound *out, cz_error *err)
{
    domains d = {0};
    *out = (cz_lower_bound){0};
    int rc = domains_fill(&d, plan, err);
    if (rc != CZ_OK)
        goto done;
    out->largest_task = d.largest;
    /* A fully sharded plan's tasks go to its schedule's slots: under HSDP with redundant
     * replicas one replica's GPUs carry all of them. */
    int64_t stage_gpus =
                cz_plan_is_fsdp(plan) ? cz_plan_fsdp_slots(plan) : (int64_t)plan->dp * plan->tp,
            group_gpus = 0;
    /* The group terms hold where the EP groups partition the stage's GPUs, as plans do. */
    if (cz_plan_has_experts(plan) && (int64_t)plan->ep * plan->edp * plan->etp == stage_gpus)
        group_gpus = (int64_t)plan->edp * plan->etp;
    for (int s = 0; s < plan->pp && stage_gpus > 0; s++) {
        weighted *w = d.task + d.first[s];
        size_t n = d.first[s + 1] - d.first[s];
        raise_to(&out->stage_load, d.load[s] / (double)stage_gpus);
        raise_to(&out->shared_gpu, shared_gpu(w, n, stage_gpus));
        if (group_gpus <= 0)
            continue;
        double fewest = INFINITY;
        for (int e = 0; e < plan->ep; e++) {
            size_t k = group_index(plan, s, e);
            double with_dense = (d.load[k] + d.dense[s]) / (double)group_gpus;
            if (with_dense < fewest)
                fewest = with_dense;
            raise_to(&out->expert_group, d.load[k] / (double)group_gpus);
            raise_to(&out->shared_gpu,
                     shared_gpu(d.task + d.first[k], d.first[k + 1] - d.first[k], group_gpus));
        }
        if (fewest < INFINITY)
            raise_to(&out->dense_with_group, fewest);
    }
    out->value = out->largest_task;
    raise_to(&out->value, out->stage_load);
    raise_to(&out->value, out->expert_group);
    raise_to(&out->value, out->shared_gpu);
    raise_to(&out->value, out->dense_with_group);
done:
    domains_free(&d);
    return rc;
}
