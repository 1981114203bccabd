/*
 * Plan inspection: turn a plan's stored assignment and metrics into the figures a user needs
 * to judge its balance before launching a job (who is busiest and why, how far from the lower
 * bound, which single matrices make a better balance impossible). Produces JSON only; the CLI
 * formats it, so that the text and --json outputs carry the same content.
 */
#include "cz_analysis.h"
#include "cz_json_build.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *unit_symbol(cz_cost_unit u)
{
    switch (u) {
    case CZ_UNIT_NUMEL:
        return "elements";
    case CZ_UNIT_FLOPS:
        return "FLOP";
    case CZ_UNIT_TIME:
        return "s";
    }
    return "?";
}

static double at_or_zero(const double *a, size_t i)
{
    return a ? a[i] : 0.0;
}

static json_t *settings_json(const cz_plan *p)
{
    const cz_settings *s = &p->settings;
    return json_pack("{s:s, s:s, s:s, s:f, s:b, s:s, s:s, s:f, s:f, s:s, s:I, s:b, s:s}",
                     "optimizer", cz__str_or_unknown(cz_optimizer_name(s->optimizer)), "unit",
                     cz__str_or_unknown(cz_unit_name(s->unit)), "dp",
                     cz__str_or_unknown(cz_dp_strategy_name(s->dp)), "alpha", s->alpha,
                     "alpha_numel_loads", s->alpha_numel_loads != 0, "layerwise_order",
                     cz__str_or_unknown(cz_layerwise_order_name(s->layerwise_order)), "tp",
                     cz__str_or_unknown(cz_tp_strategy_name(s->tp)), "capacity", s->capacity,
                     "capacity_used", p->capacity_used, "solver",
                     cz__str_or_unknown(cz_solver_name(s->solver)), "seed", (json_int_t)s->seed,
                     "dp_fell_back", p->dp_fell_back != 0, "layout",
                     cz__str_or_unknown(cz_layout_name(s->layout)));
}

/* Params a DP rank works on: those it owns, or under the even strategy (which owns nothing
 * whole) the matrices its schedule holds. Returned sorted by cost, largest first. */
static cz_costed *rank_params(const cz_plan *p, int s, int r, size_t *n_out)
{
    size_t n = 0;
    cz_costed *v = malloc((p->nparams ? p->nparams : 1) * sizeof *v);
    if (!v)
        return NULL;
    if (p->settings.dp != CZ_DP_EVEN) {
        for (size_t i = 0; i < p->nparams; i++)
            if (p->params[i].stage == s && p->params[i].dp_owner == r && !p->params[i].expert)
                v[n++] = (cz_costed){(int)i, p->params[i].cost};
    } else if ((size_t)(s * p->dp + r) < p->nschedules) {
        const cz_rank_schedule *rs = &p->schedules[s * p->dp + r];
        for (int g = 0; g < rs->ngroups; g++)
            for (int t = 0; t < rs->groups[g].ntasks && n < p->nparams; t++) {
                int id = rs->groups[g].task_param[t];
                if (id >= 0 && (size_t)id < p->nparams)
                    v[n++] = (cz_costed){id, p->params[id].cost};
            }
    }
    cz__costed_sort(v, n);
    *n_out = n;
    return v;
}

static json_t *param_ref(const cz_plan *p, int id, double cost)
{
    return json_pack("{s:i, s:s, s:f}", "id", id, "name",
                     cz__str_or_unknown(p->params[id].def.name), "cost", cost);
}

/* The load a task puts on each slot it occupies: a whole hosted matrix its parameter's cost,
 * a block or cooperative task its own. */
static double task_cost(const cz_plan *p, const cz_plan_group *g, int t)
{
    int id = g->task_param[t];
    if (g->task_cost && (cz_group_task_block(g, t) >= 0 || cz_group_task_width(g, t) > 1))
        return g->task_cost[t];
    return p->params[id].cost;
}

static int add_ranks(json_t *rep, const cz_plan *p)
{
    const cz_plan_metrics *m = &p->metrics;
    json_t *ranks = json_array(), *gpus = json_array(), *mg = json_array();
    if (cz__json_put(rep, "dp_ranks", ranks) || cz__json_put(rep, "gpus", gpus) ||
        cz__json_put(rep, "microgroups", mg))
        return -1;
    for (int s = 0; s < p->pp; s++) {
        double mean = 0.0;
        for (int r = 0; r < p->dp; r++)
            mean += at_or_zero(m->dp_load, (size_t)(s * p->dp + r));
        mean /= p->dp;
        for (int r = 0; r < p->dp; r++) {
            size_t k = (size_t)(s * p->dp + r);
            int owned = 0, matrices = 0;
            for (size_t i = 0; i < p->nparams; i++)
                if (p->params[i].stage == s && p->params[i].dp_owner == r && !p->params[i].expert) {
                    owned++;
                    matrices += p->params[i].def.kind == CZ_KIND_MATRIX;
                }
            /* A fully sharded plan's groups are its stages' (its "fsdp" report, inspect_fsdp.c). */
            const cz_rank_schedule *rs =
                !cz_plan_is_fsdp(p) && k < p->nschedules ? &p->schedules[k] : NULL;
            double lmin = INFINITY, lmax = -INFINITY, mmin = INFINITY, mmax = -INFINITY;
            for (int t = 0; t < p->tp; t++) {
                size_t gi = k * (size_t)p->tp + (size_t)t;
                double l = at_or_zero(m->gpu_load, gi), mem = at_or_zero(m->memory, gi) / GIB;
                lmin = fmin(lmin, l), lmax = fmax(lmax, l);
                mmin = fmin(mmin, mem), mmax = fmax(mmax, mem);
                if (cz__json_push(gpus,
                                  json_pack("{s:i, s:i, s:i, s:f, s:f}", "stage", s, "dp_rank", r,
                                            "tp_rank", t, "load", l, "memory_gib", mem)))
                    return -1;
            }
            double load = at_or_zero(m->dp_load, k);
            if (cz__json_push(ranks,
                              json_pack("{s:i, s:i, s:f, s:f, s:i, s:i, s:f, s:i, s:f, s:f, s:f, "
                                        "s:f}",
                                        "stage", s, "dp_rank", r, "load", load, "share_of_mean",
                                        mean > 0 ? load / mean : 0.0, "params", owned, "matrices",
                                        matrices, "makespan", at_or_zero(m->rank_makespan, k),
                                        "groups",
                                        rs ? rs->ngroups
                                        : cz_plan_is_fsdp(p) && (size_t)s < p->nschedules
                                            ? p->schedules[s].ngroups
                                            : 0,
                                        "gpu_load_min", lmin, "gpu_load_max", lmax,
                                        "memory_gib_min", mmin, "memory_gib_max", mmax)))
                return -1;

            /* Micro-group statistics of this rank; a block or cooperative task counts at its
             * own cost (per slot it occupies). */
            int tasks = 0, big = -1, bigb = -1, bigw = 1;
            double smin = INFINITY, smax = -INFINITY, bigc = -INFINITY;
            for (int g = 0; rs && g < rs->ngroups; g++) {
                const cz_plan_group *gr = &rs->groups[g];
                for (int x = 0; gr->load && x < gr->nslots; x++)
                    smin = fmin(smin, gr->load[x]), smax = fmax(smax, gr->load[x]);
                for (int t = 0; t < gr->ntasks; t++) {
                    int id = gr->task_param[t];
                    tasks++;
                    if (id < 0 || (size_t)id >= p->nparams)
                        continue;
                    double c = task_cost(p, gr, t);
                    if (c > bigc || (c == bigc && id < big))
                        big = id, bigc = c, bigb = cz_group_task_block(gr, t),
                        bigw = cz_group_task_width(gr, t);
                }
            }
            if (cz_plan_is_fsdp(p))
                continue;
            json_t *o =
                json_pack("{s:i, s:i, s:i, s:i, s:f, s:f}", "stage", s, "dp_rank", r, "groups",
                          rs ? rs->ngroups : 0, "tasks", tasks, "slot_load_min",
                          isinf(smin) ? 0.0 : smin, "slot_load_max", isinf(smax) ? 0.0 : smax);
            json_t *bt = big >= 0 ? param_ref(p, big, bigc) : json_null();
            if (!o || cz__json_push(mg, o) || cz__json_put(o, "largest_task", bt) ||
                (big >= 0 && (bigb >= 0 || bigw > 1) &&
                 (cz__json_put(bt, "block", json_integer(bigb)) ||
                  cz__json_put(bt, "width", json_integer(bigw)))))
                return -1;
        }
    }
    return 0;
}

static int add_busiest(json_t *rep, const cz_plan *p, int top_n)
{
    const cz_plan_metrics *m = &p->metrics;
    size_t nr = (size_t)p->pp * (size_t)p->dp;
    json_t *busiest = json_array();
    if (cz__json_put(rep, "busiest", busiest))
        return -1;
    cz_costed *order = malloc((nr ? nr : 1) * sizeof *order);
    if (!order)
        return -1;
    for (size_t k = 0; k < nr; k++)
        order[k] = (cz_costed){(int)k, at_or_zero(m->rank_makespan, k)};
    cz__costed_sort(order, nr);
    int rc = 0;
    for (size_t j = 0; j < nr && (int)j < top_n && rc == 0; j++) {
        int k = order[j].id, s = k / p->dp, r = k % p->dp;
        double load = at_or_zero(m->dp_load, (size_t)k);
        json_t *o = json_pack("{s:i, s:i, s:f, s:f}", "stage", s, "dp_rank", r, "makespan",
                              order[j].cost, "load", load);
        /* push and put take their value's reference even when they fail; the array is made
         * only once its parent is placed, so that a refused parent (json_pack refuses a
         * non-finite real) leaks nothing. */
        if (cz__json_push(busiest, o) || cz__json_put(o, "params", json_array())) {
            rc = -1;
            break;
        }
        json_t *ps = json_object_get(o, "params");
        size_t n = 0;
        cz_costed *v = rank_params(p, s, r, &n);
        if (!v) {
            rc = -1;
            break;
        }
        for (size_t i = 0; i < n && (int)i < top_n && rc == 0; i++) {
            json_t *q = param_ref(p, v[i].id, v[i].cost);
            if (!q || cz__json_push(ps, q) ||
                cz__json_put(q, "share_of_rank", json_real(load > 0 ? v[i].cost / load : 0.0)) ||
                cz__json_put(q, "kind", json_string(cz__kind_name(p->params[v[i].id].def.kind))))
                rc = -1;
        }
        free(v);
    }
    free(order);
    return rc;
}

/* A plan with expert groups: the grid, and per expert rank (an EP rank's expert-DP rank) its
 * owned expert cost, owned experts, ETP makespan and micro-groups, the busiest first as in
 * "busiest", and the GPU whose DP and expert ranks together make the makespan. */
static int add_experts(json_t *rep, const cz_plan *p, int top_n)
{
    if (!cz_plan_has_experts(p))
        return 0;
    const cz_plan_metrics *m = &p->metrics;
    size_t per = (size_t)cz_plan_expert_ranks(p), nx = (size_t)p->pp * per;
    size_t ngpus = (size_t)p->pp * (size_t)p->dp * (size_t)p->tp;
    json_t *ex = json_pack("{s:i, s:i, s:i, s:f}", "ep", p->ep, "etp", p->etp, "edp", p->edp,
                           "imbalance", m->expert_imbalance);
    json_t *ranks = json_array(), *busiest = json_array();
    if (cz__json_put(rep, "experts", ex) || cz__json_put(ex, "ranks", ranks) ||
        cz__json_put(ex, "busiest", busiest))
        return -1;
    int *owned = calloc(nx + 1, sizeof *owned);
    cz_costed *order = malloc((nx + 1) * sizeof *order);
    int rc = -1;
    if (!owned || !order)
        goto done;
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        if (q->expert && q->stage >= 0 && q->stage < p->pp && q->ep_rank >= 0 &&
            q->ep_rank < p->ep && q->dp_owner >= 0 && q->dp_owner < p->edp)
            owned[cz_plan_expert_rank(p, q->stage, q->ep_rank, q->dp_owner)]++;
    }
    for (size_t x = 0; x < nx; x++) {
        double mean = 0.0;
        size_t base = x / per * per;
        for (size_t y = base; y < base + per; y++)
            mean += at_or_zero(m->expert_load, y);
        mean /= (double)per;
        const cz_rank_schedule *rs = x < p->nexpert_schedules ? &p->expert_schedules[x] : NULL;
        double load = at_or_zero(m->expert_load, x);
        order[x] = (cz_costed){(int)x, at_or_zero(m->expert_rank_makespan, x)};
        if (cz__json_push(ranks,
                          json_pack("{s:i, s:i, s:i, s:f, s:f, s:i, s:f, s:i}", "stage",
                                    (int)(x / per), "ep_rank", (int)(x % per % p->ep), "edp_rank",
                                    (int)(x % per / p->ep), "load", load, "share_of_mean",
                                    mean > 0 ? load / mean : 0.0, "params", owned[x], "makespan",
                                    order[x].cost, "groups", rs ? rs->ngroups : 0)))
            goto done;
    }
    cz__costed_sort(order, nx);
    for (size_t j = 0; j < nx && (int)j < top_n; j++) {
        size_t x = (size_t)order[j].id;
        if (cz__json_push(busiest, json_pack("{s:i, s:i, s:i, s:f, s:f}", "stage", (int)(x / per),
                                             "ep_rank", (int)(x % per % p->ep), "edp_rank",
                                             (int)(x % per / p->ep), "makespan", order[j].cost,
                                             "load", at_or_zero(m->expert_load, x))))
            goto done;
    }
    /* The GPU that sets the makespan: its DP rank's groups, then its expert rank's. */
    size_t best = 0;
    double most = -1.0;
    for (size_t g = 0; g < ngpus; g++) {
        size_t r = g / (size_t)p->tp, x = cz_plan_gpu_expert_rank(p, g, NULL);
        double v = at_or_zero(m->rank_makespan, r) + at_or_zero(m->expert_rank_makespan, x);
        if (v > most)
            most = v, best = g;
    }
    int etp_rank = 0;
    size_t bx = cz_plan_gpu_expert_rank(p, best, &etp_rank), br = best / (size_t)p->tp;
    if (cz__json_put(ex, "busiest_gpu",
                     json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f}", "gpu",
                               (int)best, "stage", (int)(br / (size_t)p->dp), "dp_rank",
                               (int)(br % (size_t)p->dp), "tp_rank", (int)(best % (size_t)p->tp),
                               "ep_rank", (int)(bx % per % p->ep), "edp_rank",
                               (int)(bx % per / p->ep), "etp_rank", etp_rank, "dense_makespan",
                               at_or_zero(m->rank_makespan, br), "expert_makespan",
                               at_or_zero(m->expert_rank_makespan, bx), "makespan", most)))
        goto done;
    rc = 0;
done:
    free(owned);
    free(order);
    return rc;
}

/* Single matrices heavier than an average GPU's share: no partition can beat them. */
static int add_dominating(json_t *rep, const cz_plan *p)
{
    double total = 0.0;
    for (size_t i = 0; i < p->nparams; i++)
        total += p->params[i].cost;
    int gpus = p->dp * p->tp * p->pp;
    double avg = gpus > 0 ? total / gpus : 0.0;
    json_t *d = json_pack("{s:f, s:f}", "total_cost", total, "average_gpu_load", avg);
    /* As in add_busiest: the array only once d is placed (d is NULL for a non-finite total). */
    if (cz__json_put(rep, "dominating", d) || cz__json_put(d, "params", json_array()))
        return -1;
    json_t *list = json_object_get(d, "params");
    cz_costed *v = malloc((p->nparams ? p->nparams : 1) * sizeof *v);
    if (!v)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < p->nparams; i++)
        if (p->params[i].def.kind == CZ_KIND_MATRIX && p->params[i].cost > avg)
            v[n++] = (cz_costed){(int)i, p->params[i].cost};
    cz__costed_sort(v, n);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        json_t *q = param_ref(p, v[i].id, v[i].cost);
        if (!q || cz__json_push(list, q) ||
            cz__json_put(q, "over_average", json_real(avg > 0 ? v[i].cost / avg : 0.0)))
            rc = -1;
    }
    free(v);
    return rc;
}

/* Block and cooperative tasks (canzona.plan/2): how many of each, and every one of them,
 * largest first. Only in the report of a plan that has them. */
typedef struct split_task {
    int stage, dp_rank, group, id, block, width, panels, slot;
    double cost;
} split_task;

static int split_task_cmp(const void *a, const void *b)
{
    const split_task *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost > y->cost ? -1 : 1;
    if (x->stage != y->stage)
        return x->stage - y->stage;
    if (x->dp_rank != y->dp_rank)
        return x->dp_rank - y->dp_rank;
    if (x->group != y->group)
        return x->group - y->group;
    if (x->id != y->id)
        return x->id - y->id;
    return x->block - y->block;
}

static int add_tasks(json_t *rep, const cz_plan *p)
{
    if (!cz__plan_has_split_tasks(p))
        return 0;
    size_t n = 0, cap = 0;
    int whole = 0, blocks = 0, coop = 0;
    split_task *v = NULL;
    int rc = -1;
    /* Widths are at most the slot count, itself at most tp (the reader's bound). */
    int *by_width = calloc((size_t)p->tp + 1, sizeof *by_width);
    if (!by_width)
        return -1;
    for (size_t k = 0; k < p->nschedules; k++) {
        const cz_rank_schedule *rs = &p->schedules[k];
        for (int g = 0; g < rs->ngroups; g++) {
            const cz_plan_group *gr = &rs->groups[g];
            for (int t = 0; t < gr->ntasks; t++) {
                int id = gr->task_param[t], b = cz_group_task_block(gr, t);
                int w = cz_group_task_width(gr, t);
                if (id < 0 || (size_t)id >= p->nparams)
                    continue;
                if (b < 0 && w == 1) {
                    whole++;
                    continue;
                }
                blocks += b >= 0;
                coop += w > 1;
                if (w > 1 && w <= p->tp)
                    by_width[w]++;
                if (n == cap) {
                    size_t nc = cap ? 2 * cap : 64;
                    split_task *nv = realloc(v, nc * sizeof *v);
                    if (!nv)
                        goto done;
                    v = nv, cap = nc;
                }
                v[n++] = (split_task){.stage = rs->stage,
                                      .dp_rank = rs->dp_rank,
                                      .group = g,
                                      .id = id,
                                      .block = b,
                                      .width = w,
                                      .panels = cz_group_task_panels(gr, t),
                                      .slot = gr->task_slot[t],
                                      .cost = task_cost(p, gr, t)};
            }
        }
    }
    if (n > 1)
        qsort(v, n, sizeof *v, split_task_cmp);
    json_t *o = json_pack("{s:i, s:i, s:i}", "whole", whole, "blocks", blocks, "cooperative", coop);
    json_t *widths = json_array(), *list = json_array();
    if (cz__json_put(rep, "tasks", o) || cz__json_put(o, "widths", widths) ||
        cz__json_put(o, "list", list))
        goto done;
    for (int w = 2; w <= p->tp; w++)
        if (by_width[w] &&
            cz__json_push(widths, json_pack("{s:i, s:i}", "width", w, "tasks", by_width[w])))
            goto done;
    for (size_t i = 0; i < n; i++) {
        const split_task *x = &v[i];
        json_t *q = json_pack("{s:i, s:i, s:i, s:i, s:s, s:i, s:i, s:i, s:[i, i], s:f}", "stage",
                              x->stage, "dp_rank", x->dp_rank, "group", x->group, "id", x->id,
                              "name", cz__str_or_unknown(p->params[x->id].def.name), "block",
                              x->block, "width", x->width, "panels", x->panels, "slots", x->slot,
                              x->slot + x->width - 1, "cost", x->cost);
        if (cz__json_push(list, q))
            goto done;
    }
    rc = 0;
done:
    free(v);
    free(by_width);
    return rc;
}

int cz__plan_inspect_json(const cz_plan *plan, int top_n, json_t **report_out, cz_error *err)
{
    *report_out = NULL;
    if (!plan)
        return cz__error_set(err, CZ_EINVALID, "inspect: no plan given");
    if (plan->dp <= 0 || plan->tp <= 0 || plan->pp <= 0)
        return cz__error_set(err, CZ_EINVALID,
                             "inspect: plan topology dp=%d tp=%d pp=%d is not positive", plan->dp,
                             plan->tp, plan->pp);
    const cz_plan_metrics *m = &plan->metrics;
    int rc = CZ_ENOMEM; /* what every goto done below means, until the report is whole */
    int matrices = 0;
    for (size_t i = 0; i < plan->nparams; i++)
        matrices += plan->params[i].def.kind == CZ_KIND_MATRIX;
    int gpus = plan->dp * plan->tp * plan->pp;
    double mean_gpu = 0.0;
    for (int g = 0; g < gpus; g++)
        mean_gpu += at_or_zero(m->gpu_load, (size_t)g);
    mean_gpu /= gpus;

    json_t *rep = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:{s:i, s:i, s:i, s:i, s:i}}", "model",
        cz__str_or_unknown(plan->model_name), "model_sha256",
        cz__str_or_unknown(plan->model_sha256), "cluster", cz__str_or_unknown(plan->cluster_name),
        "cluster_sha256", cz__str_or_unknown(plan->cluster_sha256), "unit",
        unit_symbol(plan->settings.unit), "topology", "dp", plan->dp, "tp", plan->tp, "pp",
        plan->pp, "gpus", gpus, "gpus_per_node", plan->gpus_per_node);
    /* Only for a plan made with one, so that other reports are what they were. */
    if (rep && plan->calibration_sha256 &&
        cz__json_put(rep, "calibration",
                     json_pack("{s:s, s:s, s:s}", "device",
                               cz__str_or_unknown(plan->calibration_device), "measured_at",
                               cz__str_or_unknown(plan->calibration_measured_at), "sha256",
                               plan->calibration_sha256)))
        goto done;
    if (!rep || cz__json_put(rep, "settings", settings_json(plan)))
        goto done;
    json_t *sum = json_pack(
        "{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "params",
        (int)plan->nparams, "matrices", matrices, "buckets", (int)plan->nbuckets, "total_cost",
        m->total_cost, "max_task_cost", m->max_task_cost, "mean_gpu_load", mean_gpu, "dp_imbalance",
        m->dp_imbalance, "tp_imbalance", m->tp_imbalance, "tp_makespan", m->tp_makespan,
        "lower_bound", m->lower_bound, "makespan_over_lower_bound",
        m->lower_bound > 0 ? m->tp_makespan / m->lower_bound : 0.0, "predicted_step_s",
        m->predicted_step_s);
    /* The bounds of block and cooperative tasks (docs/PLANNER.md): the average load and the
     * split lower bound, against which the makespan reads. */
    if (!sum || cz__json_put(sum, "average_load", json_real(m->average_load)) ||
        cz__json_put(sum, "split_lower_bound", json_real(m->split_lower_bound)) ||
        cz__json_put(sum, "makespan_over_average_load",
                     json_real(m->average_load > 0 ? m->tp_makespan / m->average_load : 0.0)) ||
        cz__json_put(
            sum, "makespan_over_split_lower_bound",
            json_real(m->split_lower_bound > 0 ? m->tp_makespan / m->split_lower_bound : 0.0))) {
        json_decref(sum);
        goto done;
    }
    /* The lower bound's terms (lower_bound.c), so that a reader sees which one binds. */
    cz_lower_bound lb;
    if (cz__plan_lower_bound(plan, &lb, err) != CZ_OK) {
        json_decref(sum);
        goto done;
    }
    if (cz__json_put(sum, "lower_bound_terms",
                     json_pack("{s:f, s:f, s:f, s:f, s:f}", "largest_task", lb.largest_task,
                               "stage_load", lb.stage_load, "expert_group", lb.expert_group,
                               "shared_gpu", lb.shared_gpu, "dense_with_group",
                               lb.dense_with_group))) {
        json_decref(sum);
        goto done;
    }
    if (cz__json_put(rep, "summary", sum) || add_ranks(rep, plan) ||
        add_busiest(rep, plan, top_n > 0 ? top_n : 0) || add_dominating(rep, plan) ||
        add_experts(rep, plan, top_n > 0 ? top_n : 0))
        goto done;
    /* Block and cooperative tasks, after everything else, only for a plan that has them; the
     * shard group's micro-groups and shards only for a fully sharded plan. */
    if (add_tasks(rep, plan) || (cz_plan_is_fsdp(plan) && cz__fsdp_inspect_json(rep, plan)))
        goto done;
    *report_out = rep;
    rep = NULL;
    rc = CZ_OK;
done:
    json_decref(rep);
    return rc == CZ_OK ? CZ_OK : cz__error_set(err, CZ_ENOMEM, "inspect: out of memory");
}
