/*
 * Plan comparison: what changes between two plans of the same model and cluster shape (two
 * strategies, two settings, two planner versions): settings, balance metrics, per-rank loads,
 * and which parameters moved to another DP rank, micro-group or TP host. Plans of different
 * models or topologies are refused unless forced, because their ranks and parameter ids do
 * not correspond; forced, parameters are matched by name.
 */
#include "cz_analysis.h"
#include "cz_json_build.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static json_t *side_json(const cz_plan *p)
{
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:{s:i, s:i, s:i}}", "model", cz__str_or_unknown(p->model_name),
        "model_sha256", cz__str_or_unknown(p->model_sha256), "cluster",
        cz__str_or_unknown(p->cluster_name), "cluster_sha256",
        cz__str_or_unknown(p->cluster_sha256), "topology", "dp", p->dp, "tp", p->tp, "pp", p->pp);
    /* The expert grid only for a plan that has one, so that other reports stay as they were. */
    json_t *t = o ? json_object_get(o, "topology") : NULL;
    if (t && cz_plan_has_experts(p) &&
        (cz__json_put(t, "ep", json_integer(p->ep)) ||
         cz__json_put(t, "etp", json_integer(p->etp)) ||
         cz__json_put(t, "edp", json_integer(p->edp)))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Whether the two plans have the same expert grid (none in both counts as the same). */
static int same_experts(const cz_plan *a, const cz_plan *b)
{
    return a->ep == b->ep && a->etp == b->etp && a->edp == b->edp;
}

/* The settings as a flat object, so that the two plans' values compare key by key. */
static json_t *settings_flat(const cz_plan *p)
{
    const cz_settings *s = &p->settings;
    char coop[16];
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:o, s:b, s:s, s:s, s:o, s:o, s:s, s:o, s:I, s:i, s:i, "
                  "s:i, s:b, s:I, s:I, s:s}",
                  "optimizer", cz__str_or_unknown(cz_optimizer_name(s->optimizer)), "unit",
                  cz__str_or_unknown(cz_unit_name(s->unit)), "dp",
                  cz__str_or_unknown(cz_dp_strategy_name(s->dp)), "alpha", cz__json_num(s->alpha),
                  "alpha_numel_loads", s->alpha_numel_loads != 0, "layerwise_order",
                  cz__str_or_unknown(cz_layerwise_order_name(s->layerwise_order)), "tp",
                  cz__str_or_unknown(cz_tp_strategy_name(s->tp)), "capacity",
                  cz__json_num(s->capacity), "capacity_used", cz__json_num(p->capacity_used),
                  "solver", cz__str_or_unknown(cz_solver_name(s->solver)), "time_limit_s",
                  cz__json_num(s->time_limit_s), "seed", (json_int_t)s->seed, "ns_steps",
                  s->ns_steps, "max_precond_dim", s->max_precond_dim, "precondition_frequency",
                  s->precondition_frequency, "dp_fell_back", p->dp_fell_back != 0, "bucket_size",
                  (json_int_t)p->bucket_size, "bucket_align", (json_int_t)p->bucket_align, "layout",
                  cz__str_or_unknown(cz_layout_name(s->layout)));
    if (o &&
        (json_object_set_new(o, "split_blocks", json_boolean(s->split_blocks)) ||
         json_object_set_new(o, "coop", json_string(cz_coop_name(s->coop, coop))) ||
         json_object_set_new(o, "ns_coeffs", json_string(s->ns_coeffs ? s->ns_coeffs : "jordan")) ||
         json_object_set_new(o, "replicate", json_integer(cz_plan_fsdp_replicas(p))) ||
         json_object_set_new(o, "hsdp_compute",
                             json_string(cz__str_or_unknown(cz_hsdp_compute_name(s->hsdp)))))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int add_settings(json_t *rep, const cz_plan *a, const cz_plan *b, int *ndiff)
{
    json_t *sa = settings_flat(a), *sb = settings_flat(b), *list = json_array();
    int rc = -1;
    if (!sa || !sb || cz__json_put(rep, "settings", list))
        goto done;
    const char *key;
    json_t *va;
    json_object_foreach(sa, key, va) /* jansson keeps insertion order: deterministic */
    {
        json_t *vb = json_object_get(sb, key);
        if (json_equal(va, vb))
            continue;
        (*ndiff)++;
        if (cz__json_push(list, json_pack("{s:s, s:O, s:O}", "key", key, "a", va, "b", vb)))
            goto done;
    }
    rc = 0;
done:
    json_decref(sa);
    json_decref(sb);
    return rc;
}

static int add_inputs(json_t *rep, const cz_plan *a, const cz_plan *b, int *ndiff)
{
    const struct {
        const char *key, *va, *vb;
    } f[] = {{"model", a->model_name, b->model_name},
             {"model_sha256", a->model_sha256, b->model_sha256},
             {"cluster", a->cluster_name, b->cluster_name},
             {"cluster_sha256", a->cluster_sha256, b->cluster_sha256}};
    json_t *list = json_array();
    if (cz__json_put(rep, "inputs", list))
        return -1;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!strcmp(cz__str_or_unknown(f[i].va), cz__str_or_unknown(f[i].vb)))
            continue;
        (*ndiff)++;
        if (cz__json_push(list,
                          json_pack("{s:s, s:s, s:s}", "key", f[i].key, "a",
                                    cz__str_or_unknown(f[i].va), "b", cz__str_or_unknown(f[i].vb))))
            return -1;
    }
    return 0;
}

static double ratio(const cz_plan *p)
{
    return p->metrics.lower_bound > 0 ? p->metrics.tp_makespan / p->metrics.lower_bound : 0.0;
}

/* Whether two figures differ. Plain != would call equal infinities different (their
 * difference is NaN) and treat NaN as a change even against itself. */
static int differs(double x, double y)
{
    if (isnan(x) || isnan(y))
        return isnan(x) != isnan(y);
    return x != y;
}

static int add_metrics(json_t *rep, const cz_plan *a, const cz_plan *b, int *ndiff)
{
    const struct {
        const char *name;
        double va, vb;
    } f[] = {
        {"dp_imbalance", a->metrics.dp_imbalance, b->metrics.dp_imbalance},
        {"tp_imbalance", a->metrics.tp_imbalance, b->metrics.tp_imbalance},
        {"tp_makespan", a->metrics.tp_makespan, b->metrics.tp_makespan},
        {"lower_bound", a->metrics.lower_bound, b->metrics.lower_bound},
        {"makespan_over_lower_bound", ratio(a), ratio(b)},
        {"total_cost", a->metrics.total_cost, b->metrics.total_cost},
        {"predicted_step_s", a->metrics.predicted_step_s, b->metrics.predicted_step_s},
        {"expert_imbalance", a->metrics.expert_imbalance, b->metrics.expert_imbalance},
    };
    json_t *list = json_array();
    if (cz__json_put(rep, "metrics", list))
        return -1;
    /* The expert ranks' balance only where a plan has expert groups (the last entry). */
    size_t nf = sizeof f / sizeof f[0] - !(cz_plan_has_experts(a) || cz_plan_has_experts(b));
    for (size_t i = 0; i < nf; i++) {
        double d = f[i].vb - f[i].va;
        if (differs(f[i].va, f[i].vb))
            (*ndiff)++;
        json_t *o = json_pack("{s:s}", "name", f[i].name);
        if (!o || cz__json_push(list, o) || cz__json_put(o, "a", cz__json_num(f[i].va)) ||
            cz__json_put(o, "b", cz__json_num(f[i].vb)) ||
            cz__json_put(o, "delta", cz__json_num(d)) ||
            cz__json_put(o, "relative", f[i].va != 0.0 ? cz__json_num(d / f[i].va) : json_null()))
            return -1;
    }
    return 0;
}

static double arr(const double *v, size_t i)
{
    return v ? v[i] : 0.0;
}

/* Per expert rank: owned expert cost and ETP makespan in A and B (plans with the same expert
 * grid; a report of plans without expert groups has no "expert_ranks"). */
static int add_expert_ranks(json_t *rep, const cz_plan *a, const cz_plan *b, int *ndiff)
{
    if (!cz_plan_has_experts(a) && !cz_plan_has_experts(b))
        return 0;
    if (!same_experts(a, b) || a->pp != b->pp)
        return cz__json_put(rep, "expert_ranks", json_null());
    json_t *list = json_array();
    if (cz__json_put(rep, "expert_ranks", list))
        return -1;
    size_t per = (size_t)cz_plan_expert_ranks(a), nx = (size_t)a->pp * per;
    for (size_t x = 0; x < nx; x++) {
        double la = arr(a->metrics.expert_load, x), lb = arr(b->metrics.expert_load, x);
        double ma = arr(a->metrics.expert_rank_makespan, x);
        double mb = arr(b->metrics.expert_rank_makespan, x);
        if (differs(la, lb) || differs(ma, mb))
            (*ndiff)++;
        json_t *o =
            json_pack("{s:i, s:i, s:i}", "stage", (int)(x / per), "ep_rank",
                      (int)(x % per % (size_t)a->ep), "edp_rank", (int)(x % per / (size_t)a->ep));
        if (!o || cz__json_push(list, o) || cz__json_put(o, "load_a", cz__json_num(la)) ||
            cz__json_put(o, "load_b", cz__json_num(lb)) ||
            cz__json_put(o, "load_delta", cz__json_num(lb - la)) ||
            cz__json_put(o, "makespan_a", cz__json_num(ma)) ||
            cz__json_put(o, "makespan_b", cz__json_num(mb)) ||
            cz__json_put(o, "makespan_delta", cz__json_num(mb - ma)))
            return -1;
    }
    return 0;
}

static int add_ranks(json_t *rep, const cz_plan *a, const cz_plan *b, int *ndiff)
{
    if (a->dp != b->dp || a->pp != b->pp)
        return cz__json_put(rep, "ranks", json_null());
    json_t *list = json_array();
    if (cz__json_put(rep, "ranks", list))
        return -1;
    for (int s = 0; s < a->pp; s++)
        for (int r = 0; r < a->dp; r++) {
            size_t k = (size_t)(s * a->dp + r);
            double la = arr(a->metrics.dp_load, k), lb = arr(b->metrics.dp_load, k);
            double ma = arr(a->metrics.rank_makespan, k), mb = arr(b->metrics.rank_makespan, k);
            if (differs(la, lb) || differs(ma, mb))
                (*ndiff)++;
            json_t *o = json_pack("{s:i, s:i}", "stage", s, "dp_rank", r);
            if (!o || cz__json_push(list, o) || cz__json_put(o, "dp_load_a", cz__json_num(la)) ||
                cz__json_put(o, "dp_load_b", cz__json_num(lb)) ||
                cz__json_put(o, "dp_load_delta", cz__json_num(lb - la)) ||
                cz__json_put(o, "makespan_a", cz__json_num(ma)) ||
                cz__json_put(o, "makespan_b", cz__json_num(mb)) ||
                cz__json_put(o, "makespan_delta", cz__json_num(mb - ma)))
                return -1;
        }
    return 0;
}

/* Number of buckets whose layout or DP ranges differ (all of them when the counts differ). */
static int add_buckets(json_t *rep, const cz_plan *a, const cz_plan *b, int *ndiff)
{
    int changed = 0;
    if (a->nbuckets != b->nbuckets || a->dp != b->dp || !same_experts(a, b)) {
        changed = (int)(a->nbuckets > b->nbuckets ? a->nbuckets : b->nbuckets);
    } else {
        for (size_t i = 0; i < a->nbuckets; i++) {
            const cz_plan_bucket *x = &a->buckets[i], *y = &b->buckets[i];
            int nr = cz_plan_bucket_nranks(a, x);
            int same = x->stage == y->stage && x->offset == y->offset && x->size == y->size &&
                       x->expert == y->expert && x->ep_rank == y->ep_rank && x->ranges &&
                       y->ranges &&
                       !memcmp(x->ranges, y->ranges, 2 * (size_t)nr * sizeof *x->ranges);
            changed += !same;
        }
    }
    *ndiff += changed;
    return cz__json_put(rep, "buckets",
                        json_pack("{s:i, s:i, s:i}", "a", (int)a->nbuckets, "b", (int)b->nbuckets,
                                  "changed", changed));
}

/* Where each parameter is scheduled: group index and slot (TP host) of its first occurrence. */
static int locate(const cz_plan *p, int **grp, int **slot)
{
    size_t n = p->nparams ? p->nparams : 1;
    *grp = malloc(n * sizeof **grp);
    *slot = malloc(n * sizeof **slot);
    if (!*grp || !*slot)
        return -1;
    for (size_t i = 0; i < p->nparams; i++)
        (*grp)[i] = (*slot)[i] = -1;
    /* The DP ranks' schedules, then the expert ranks': each parameter is in one of them. */
    for (int side = 0; side < 2; side++) {
        size_t n = side ? p->nexpert_schedules : p->nschedules;
        const cz_rank_schedule *all = side ? p->expert_schedules : p->schedules;
        for (size_t k = 0; k < n; k++)
            for (int g = 0; g < all[k].ngroups; g++) {
                const cz_plan_group *gr = &all[k].groups[g];
                for (int t = 0; t < gr->ntasks; t++) {
                    int id = gr->task_param[t];
                    if (id >= 0 && (size_t)id < p->nparams && (*grp)[id] < 0)
                        (*grp)[id] = g, (*slot)[id] = gr->task_slot[t];
                }
            }
    }
    return 0;
}

/* Where every parameter of A and of B is scheduled (group, slot; -1 when not scheduled). */
typedef struct places {
    int *ga, *sa, *gb, *sb;
} places;

static void places_free(places *pl)
{
    free(pl->ga);
    free(pl->sa);
    free(pl->gb);
    free(pl->sb);
}

/* B's parameters sorted by name, for matching A's by name without a global sort context. */
typedef struct {
    const char *name;
    int index;
} named;

static int by_name(const void *x, const void *y)
{
    const named *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

/* Index in b of the parameter matching a's parameter i, or -1. */
static int match(const cz_plan *a, const cz_plan *b, size_t i, const named *b_sorted, int by_id)
{
    if (by_id)
        return i < b->nparams ? (int)i : -1;
    const char *name = cz__str_or_unknown(a->params[i].def.name);
    size_t lo = 0, hi = b->nparams;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(b_sorted[mid].name, name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < b->nparams && !strcmp(b_sorted[lo].name, name) ? b_sorted[lo].index : -1;
}

/* B's parameters sorted by name (malloc'ed; NULL when out of memory). */
static named *names_sorted(const cz_plan *b)
{
    named *v = malloc((b->nparams ? b->nparams : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (size_t j = 0; j < b->nparams; j++)
        v[j] = (named){cz__str_or_unknown(b->params[j].def.name), (int)j};
    qsort(v, b->nparams, sizeof *v, by_name);
    return v;
}

static int add_params(json_t *rep, const cz_plan *a, const cz_plan *b, const named *b_sorted,
                      const places *pl, int by_id, int limit, int *ndiff)
{
    int rc = -1;
    int *hit = NULL;
    const int *ga = pl->ga, *sa = pl->sa, *gb = pl->gb, *sb = pl->sb;
    /* The moved parameters (id: index in a, cost: the work it moves) and each one's match in b. */
    cz_costed *mv = NULL;
    int *jof = NULL;
    size_t nb = b->nparams ? b->nparams : 1;
    hit = calloc(nb, sizeof *hit);
    mv = malloc((a->nparams ? a->nparams : 1) * sizeof *mv);
    jof = malloc((a->nparams ? a->nparams : 1) * sizeof *jof);
    if (!hit || !mv || !jof)
        goto done;

    json_t *moved = json_object(), *list = json_array(), *only_a = json_array(),
           *only_b = json_array();
    if (cz__json_put(rep, "moved", moved) || cz__json_put(moved, "list", list) ||
        cz__json_put(rep, "only_in_a", only_a) || cz__json_put(rep, "only_in_b", only_b))
        goto done;
    int n_owner = 0, n_host = 0, n_group = 0, n_any = 0, n_cost = 0, n_matched = 0;
    int listed_a = 0;
    for (size_t i = 0; i < a->nparams; i++) {
        const cz_plan_param *x = &a->params[i];
        int j = match(a, b, i, b_sorted, by_id);
        if (j < 0) {
            (*ndiff)++;
            if ((limit < 0 || listed_a++ < limit) &&
                cz__json_push(only_a, json_string(cz__str_or_unknown(x->def.name))))
                goto done;
            continue;
        }
        hit[j] = 1;
        n_matched++;
        const cz_plan_param *y = &b->params[j];
        int owner = x->dp_owner != y->dp_owner, group = ga[i] != gb[j], host = sa[i] != sb[j];
        n_owner += owner, n_group += group, n_host += host;
        n_cost += x->cost != y->cost;
        if (!(owner || group || host))
            continue;
        jof[i] = j;
        mv[n_any++] = (cz_costed){(int)i, fmax(x->cost, y->cost)};
    }
    /* Largest first: the moves that shift the most work lead, not the layer norms that come
     * first in parameter order. */
    cz__costed_sort(mv, (size_t)n_any);
    for (int k = 0; k < n_any && (limit < 0 || k < limit); k++) {
        int i = mv[k].id, j = jof[i];
        const cz_plan_param *x = &a->params[i], *y = &b->params[j];
        if (cz__json_push(list,
                          json_pack("{s:i, s:i, s:s, s:[i,i], s:[i,i], s:[i,i], s:o, s:o}", "id_a",
                                    i, "id_b", j, "name", cz__str_or_unknown(x->def.name),
                                    "dp_owner", x->dp_owner, y->dp_owner, "group", ga[i], gb[j],
                                    "tp_host", sa[i], sb[j], "cost_a", cz__json_num(x->cost),
                                    "cost_b", cz__json_num(y->cost))))
            goto done;
    }
    int listed_b = 0, n_only_b = 0;
    for (size_t j = 0; j < b->nparams; j++) {
        if (hit[j])
            continue;
        n_only_b++;
        (*ndiff)++;
        if ((limit < 0 || listed_b++ < limit) &&
            cz__json_push(only_b, json_string(cz__str_or_unknown(b->params[j].def.name))))
            goto done;
    }
    *ndiff += n_any + n_cost;
    if (cz__json_put(moved, "matched", json_integer(n_matched)) ||
        cz__json_put(moved, "any", json_integer(n_any)) ||
        cz__json_put(moved, "dp_owner", json_integer(n_owner)) ||
        cz__json_put(moved, "group", json_integer(n_group)) ||
        cz__json_put(moved, "tp_host", json_integer(n_host)) ||
        cz__json_put(moved, "cost_changed", json_integer(n_cost)) ||
        cz__json_put(rep, "only_in_a_count", json_integer((json_int_t)a->nparams - n_matched)) ||
        cz__json_put(rep, "only_in_b_count", json_integer(n_only_b)))
        goto done;
    rc = 0;
done:
    free(mv);
    free(jof);
    free(hit);
    return rc;
}

/* ---- tasks keyed by (parameter, block) ------------------------------------------------- */

/* One scheduled task of a plan, keyed by its rank schedule, A's parameter index and block. */
typedef struct task_key {
    int k, i, block; /* schedule index, parameter (A's index), block (-1: whole) */
    int width, group, slot;
    double cost;
} task_key;

static int task_key_cmp(const void *x, const void *y)
{
    const task_key *a = x, *b = y;
    if (a->k != b->k)
        return (a->k > b->k) - (a->k < b->k);
    if (a->i != b->i)
        return (a->i > b->i) - (a->i < b->i);
    return (a->block > b->block) - (a->block < b->block);
}

/* Every task of p, with its parameter mapped to A's index through amap (-1: unmatched, left
 * out), sorted by key. */
static task_key *tasks_keyed(const cz_plan *p, const int *amap, size_t *n_out)
{
    size_t n = 0;
    for (size_t k = 0; k < p->nschedules; k++)
        for (int g = 0; g < p->schedules[k].ngroups; g++)
            n += (size_t)(p->schedules[k].groups[g].ntasks > 0 ? p->schedules[k].groups[g].ntasks
                                                               : 0);
    task_key *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return NULL;
    n = 0;
    for (size_t k = 0; k < p->nschedules; k++)
        for (int g = 0; g < p->schedules[k].ngroups; g++) {
            const cz_plan_group *gr = &p->schedules[k].groups[g];
            for (int t = 0; t < gr->ntasks; t++) {
                int id = gr->task_param[t], b = cz_group_task_block(gr, t);
                int w = cz_group_task_width(gr, t);
                if (id < 0 || (size_t)id >= p->nparams || amap[id] < 0)
                    continue;
                double cost =
                    gr->task_cost && (w > 1 || b >= 0) ? gr->task_cost[t] : p->params[id].cost;
                v[n++] = (task_key){(int)k, amap[id], b, w, g, gr->task_slot[t], cost};
            }
        }
    qsort(v, n, sizeof *v, task_key_cmp);
    *n_out = n;
    return v;
}

/* One entry of the task list: x and y the tasks in A and B (for split and merged: the first
 * of each side's na and nb tasks, whose slot time, width x cost summed, is work_a and work_b). */
static json_t *task_change(const cz_plan *a, const char *change, const task_key *x,
                           const task_key *y, int na, int nb, double work_a, double work_b)
{
    return json_pack("{s:i, s:i, s:i, s:s, s:i, s:s, s:[i,i], s:[i,i], s:[i,i], s:[i,i], s:[o,o], "
                     "s:[o,o]}",
                     "stage", a->dp > 0 ? x->k / a->dp : 0, "dp_rank", a->dp > 0 ? x->k % a->dp : 0,
                     "id_a", x->i, "name", cz__str_or_unknown(a->params[x->i].def.name), "block",
                     x->block == y->block ? x->block : -1, "change", change, "tasks", na, nb,
                     "width", x->width, y->width, "group", x->group, y->group, "slot", x->slot,
                     y->slot, "cost", cz__json_num(x->cost), cz__json_num(y->cost), "work",
                     cz__json_num(work_a), cz__json_num(work_b));
}

static double slot_time(const task_key *t, size_t n)
{
    double w = 0.0;
    for (size_t i = 0; i < n; i++)
        w += t[i].width * t[i].cost;
    return w;
}

/* "tasks": only when A or B has block or cooperative tasks. Tasks of a rank are matched by
 * (parameter, block): one scheduled whole in one plan and block by block in the other is
 * "split" (whole in A, blocks in B) or "merged"; a matched task whose width differs is "width"
 * (hosted <-> cooperative, or another k); one in another group or on another first slot,
 * "moved". The list is in rank, parameter and block order, bounded by limit. */
static int add_tasks(json_t *rep, const cz_plan *a, const cz_plan *b, const named *b_sorted,
                     int by_id, int limit, int *ndiff)
{
    if (!cz__plan_has_split_tasks(a) && !cz__plan_has_split_tasks(b))
        return 0;
    if (a->dp != b->dp || a->pp != b->pp)
        return cz__json_put(rep, "tasks", json_null());
    int rc = -1, n_split = 0, n_merged = 0, n_width = 0, n_moved = 0, n_cost = 0, listed = 0;
    size_t na = 0, nb = 0;
    int *ida = malloc((a->nparams ? a->nparams : 1) * sizeof *ida);
    int *idb = malloc((b->nparams ? b->nparams : 1) * sizeof *idb);
    task_key *ta = NULL, *tb = NULL;
    json_t *o = json_object(), *list = json_array();
    if (!ida || !idb || cz__json_put(rep, "tasks", o) || cz__json_put(o, "list", list))
        goto done;
    for (size_t j = 0; j < b->nparams; j++)
        idb[j] = -1;
    for (size_t i = 0; i < a->nparams; i++) {
        ida[i] = (int)i;
        int j = match(a, b, i, b_sorted, by_id);
        if (j >= 0)
            idb[j] = (int)i;
    }
    ta = tasks_keyed(a, ida, &na);
    tb = tasks_keyed(b, idb, &nb);
    if (!ta || !tb)
        goto done;
    /* Walk both sorted lists one (rank, parameter) at a time. */
    for (size_t x = 0, y = 0; x < na || y < nb;) {
        const task_key *kx = x < na ? &ta[x] : NULL, *ky = y < nb ? &tb[y] : NULL;
        /* The smaller (rank, parameter) of the two heads. */
        int first_a = kx && (!ky || kx->k < ky->k || (kx->k == ky->k && kx->i <= ky->i));
        task_key head = first_a ? *kx : *ky;
        size_t x1 = x, y1 = y;
        while (x1 < na && ta[x1].k == head.k && ta[x1].i == head.i)
            x1++;
        while (y1 < nb && tb[y1].k == head.k && tb[y1].i == head.i)
            y1++;
        int wa = x1 > x && ta[x].block<0, wb = y1> y && tb[y].block < 0;
        if (x1 > x && y1 > y && wa != wb) {
            /* Whole in one plan, block by block in the other. */
            int split = wa;
            n_split += split, n_merged += !split;
            if ((limit < 0 || listed++ < limit) &&
                cz__json_push(list,
                              task_change(a, split ? "split" : "merged", &ta[x], &tb[y],
                                          (int)(x1 - x), (int)(y1 - y), slot_time(&ta[x], x1 - x),
                                          slot_time(&tb[y], y1 - y))))
                goto done;
        } else {
            for (size_t p = x, q = y; p < x1 || q < y1;) {
                const task_key *u = p < x1 ? &ta[p] : NULL, *v = q < y1 ? &tb[q] : NULL;
                if (u && v && u->block == v->block) {
                    const char *change = u->width != v->width                         ? "width"
                                         : u->group != v->group || u->slot != v->slot ? "moved"
                                                                                      : NULL;
                    n_width += u->width != v->width;
                    n_moved += change && u->width == v->width;
                    n_cost += u->cost != v->cost;
                    if (change && (limit < 0 || listed++ < limit) &&
                        cz__json_push(list, task_change(a, change, u, v, 1, 1, u->width * u->cost,
                                                        v->width * v->cost)))
                        goto done;
                    p++, q++;
                } else if (u && (!v || u->block < v->block)) {
                    p++; /* a task of one plan only: the schedule checks' business */
                } else {
                    q++;
                }
            }
        }
        x = x1, y = y1;
    }
    *ndiff += n_split + n_merged + n_width + n_moved + n_cost;
    if (cz__json_put(o, "split", json_integer(n_split)) ||
        cz__json_put(o, "merged", json_integer(n_merged)) ||
        cz__json_put(o, "width_changed", json_integer(n_width)) ||
        cz__json_put(o, "moved", json_integer(n_moved)) ||
        cz__json_put(o, "cost_changed", json_integer(n_cost)))
        goto done;
    rc = 0;
done:
    free(ida);
    free(idb);
    free(ta);
    free(tb);
    return rc;
}

/* What sets one rank's TP makespan in one plan. */
typedef struct rank_why {
    int matrices, groups, slots; /* matrix tasks of its schedule, micro-groups, TP slots */
    int crit_tasks;              /* tasks on the busiest slot of each group, summed */
    int largest;                 /* param id of its largest matrix task, -1 when none */
    double largest_cost, elementwise;
} rank_why;

/* Each parameter's part of the TP makespan of rank k (stage * dp + DP rank) in plan p, into
 * c[p->nparams]: an elementwise parameter its cost / tp on its owner, a matrix its cost when it
 * sits on the busiest slot of its micro-group (the first such slot). The parts add up to the
 * makespan the plan's metrics give, except for the even partition's elementwise shares (no
 * whole owner), which are left to the caller's remainder. */
static void rank_parts(const cz_plan *p, size_t k, double *c, rank_why *w)
{
    int stage = (int)(k / (size_t)p->dp), d = (int)(k % (size_t)p->dp);
    memset(w, 0, sizeof *w);
    w->largest = -1;
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *x = &p->params[i];
        c[i] = 0.0;
        if (x->def.kind != CZ_KIND_MATRIX && x->stage == stage && x->dp_owner == d && !x->expert) {
            c[i] = x->cost / p->tp;
            w->elementwise += c[i];
        }
    }
    for (size_t r = 0; r < p->nschedules; r++) {
        const cz_rank_schedule *rs = &p->schedules[r];
        /* A fully sharded plan's stage schedule spans every DP rank of the stage. */
        if (rs->stage != stage || (rs->dp_rank != d && !cz_plan_is_fsdp(p)))
            continue;
        for (int g = 0; g < rs->ngroups; g++) {
            const cz_plan_group *gr = &rs->groups[g];
            int crit = 0;
            for (int sl = 1; gr->load && sl < gr->nslots; sl++)
                if (gr->load[sl] > gr->load[crit])
                    crit = sl;
            w->groups++;
            w->slots = gr->nslots > w->slots ? gr->nslots : w->slots;
            for (int t = 0; t < gr->ntasks; t++) {
                int id = gr->task_param[t], slot = gr->task_slot[t];
                if (id < 0 || (size_t)id >= p->nparams)
                    continue;
                /* A block or cooperative task: its own cost, on every slot it occupies. */
                int width = cz_group_task_width(gr, t);
                double cost = gr->task_cost && (width > 1 || cz_group_task_block(gr, t) >= 0)
                                  ? gr->task_cost[t]
                                  : p->params[id].cost;
                w->matrices++;
                if (w->largest < 0 || cost > w->largest_cost)
                    w->largest = id, w->largest_cost = cost;
                if (crit >= slot && crit < slot + width) {
                    c[id] += cost;
                    w->crit_tasks++;
                }
            }
        }
    }
}

static json_t *why_json(const cz_plan *p, const rank_why *w, double makespan)
{
    /* One task alone on the busiest slot of the only group: the task is the bound (it is then
     * also the rank's largest). Otherwise tasks stack on a slot, micro-groups run one after
     * the other (each adding its busiest slot), or there is only elementwise work. */
    const char *bound = w->matrices == 0     ? "elementwise work"
                        : w->groups > 1      ? "micro-groups in sequence"
                        : w->crit_tasks == 1 ? "its largest task"
                                             : "tasks stacked on a slot";
    json_t *o = json_pack("{s:o, s:i, s:i, s:i, s:i, s:o, s:s}", "makespan", cz__json_num(makespan),
                          "matrices", w->matrices, "groups", w->groups, "slots", w->slots,
                          "busiest_slot_tasks", w->crit_tasks, "elementwise",
                          cz__json_num(w->elementwise), "bound", bound);
    if (o &&
        cz__json_put(o, "largest_task",
                     w->largest >= 0 ? json_pack("{s:s, s:o}", "name",
                                                 cz__str_or_unknown(p->params[w->largest].def.name),
                                                 "cost", cz__json_num(w->largest_cost))
                                     : json_null()))
        return json_decref(o), NULL;
    return o;
}

static size_t busiest_rank(const cz_plan *p)
{
    size_t best = 0, n = (size_t)p->pp * (size_t)p->dp;
    for (size_t k = 1; p->metrics.rank_makespan && k < n; k++)
        if (p->metrics.rank_makespan[k] > p->metrics.rank_makespan[best])
            best = k;
    return best;
}

/* A change of one parameter's part of a rank's makespan. */
typedef struct part_change {
    int i, j; /* in A, in B; -1 when only in the other */
    double effect;
} part_change;

static int by_effect(const void *x, const void *y)
{
    const part_change *a = x, *b = y;
    double ea = fabs(a->effect), eb = fabs(b->effect);
    if (ea != eb)
        return ea < eb ? 1 : -1;
    int ia = a->i >= 0 ? a->i : a->j, ib = b->i >= 0 ? b->i : b->j;
    return (ia > ib) - (ia < ib);
}

/* One busiest rank: its makespan in both plans, what bounds it in each and the parameters
 * whose part of it changed, largest effect first. Their effects add up to the makespan
 * delta (the remainder, reported, is the even partition's elementwise shares or metrics the
 * schedule does not reproduce). */
static json_t *busiest_json(const cz_plan *a, const cz_plan *b, const named *b_sorted, int by_id,
                            int limit, size_t k, const char *busiest_in, const places *pl)
{
    const int *ga = pl->ga, *sa = pl->sa, *gb = pl->gb, *sb = pl->sb;
    json_t *o = NULL, *list = NULL;
    int ok = 0; /* every goto done before the end is out of memory: NULL is returned */
    double *ca = calloc(a->nparams ? a->nparams : 1, sizeof *ca);
    double *cb = calloc(b->nparams ? b->nparams : 1, sizeof *cb);
    int *hit = calloc(b->nparams ? b->nparams : 1, sizeof *hit);
    part_change *ch = malloc((a->nparams + b->nparams + 1) * sizeof *ch);
    if (!ca || !cb || !hit || !ch)
        goto done;
    rank_why wa, wb;
    rank_parts(a, k, ca, &wa);
    rank_parts(b, k, cb, &wb);
    size_t n = 0;
    double explained = 0.0;
    for (size_t i = 0; i < a->nparams; i++) {
        int j = match(a, b, i, b_sorted, by_id);
        double e = (j >= 0 ? cb[j] : 0.0) - ca[i];
        if (j >= 0)
            hit[j] = 1;
        if (e != 0.0)
            ch[n++] = (part_change){(int)i, j, e};
    }
    for (size_t j = 0; j < b->nparams; j++)
        if (!hit[j] && cb[j] != 0.0)
            ch[n++] = (part_change){-1, (int)j, cb[j]};
    qsort(ch, n, sizeof *ch, by_effect);
    for (size_t q = 0; q < n; q++)
        explained += ch[q].effect;
    double ma = arr(a->metrics.rank_makespan, k), mb = arr(b->metrics.rank_makespan, k);
    o = json_pack("{s:i, s:i, s:s}", "stage", (int)(k / (size_t)a->dp), "dp_rank",
                  (int)(k % (size_t)a->dp), "busiest_in", busiest_in);
    list = json_array();
    if (!o || !list || cz__json_put(o, "makespan_a", cz__json_num(ma)) ||
        cz__json_put(o, "makespan_b", cz__json_num(mb)) ||
        cz__json_put(o, "delta", cz__json_num(mb - ma)) ||
        cz__json_put(o, "why_a", why_json(a, &wa, ma)) ||
        cz__json_put(o, "why_b", why_json(b, &wb, mb)) ||
        cz__json_put(o, "changes", json_integer((json_int_t)n)) ||
        cz__json_put(o, "unexplained", cz__json_num(mb - ma - explained)))
        goto done;
    json_t *l = list;
    list = NULL;
    if (cz__json_put(o, "list", l))
        goto done;
    for (size_t q = 0; q < n && (limit < 0 || q < (size_t)limit); q++) {
        int i = ch[q].i, j = ch[q].j;
        const char *name =
            cz__str_or_unknown(i >= 0 ? a->params[i].def.name : b->params[j].def.name);
        json_t *e = json_pack(
            "{s:s, s:o, s:[i,i], s:[i,i], s:[i,i], s:b}", "name", name, "effect",
            cz__json_num(ch[q].effect), "dp_owner", i >= 0 ? a->params[i].dp_owner : -1,
            j >= 0 ? b->params[j].dp_owner : -1, "group", i >= 0 ? ga[i] : -1, j >= 0 ? gb[j] : -1,
            "tp_host", i >= 0 ? sa[i] : -1, j >= 0 ? sb[j] : -1, "moved",
            i < 0 || j < 0 || a->params[i].dp_owner != b->params[j].dp_owner || ga[i] != gb[j] ||
                sa[i] != sb[j]);
        if (cz__json_push(l, e))
            goto done;
    }
    ok = 1;
done:
    if (!ok) {
        json_decref(o);
        o = NULL;
    }
    json_decref(list);
    free(ca);
    free(cb);
    free(hit);
    free(ch);
    return o;
}

/* "makespan": which rank is busiest in each plan and, for each (B's first), why its makespan
 * changed. null when the topologies differ (ranks do not correspond). */
static int add_makespan(json_t *rep, const cz_plan *a, const cz_plan *b, const named *b_sorted,
                        const places *pl, int by_id, int limit)
{
    if (a->dp != b->dp || a->pp != b->pp || a->tp != b->tp)
        return cz__json_put(rep, "makespan", json_null());
    /* cz__json_put() takes each new value over (jansson releases it when the set fails). */
    json_t *o = json_object(), *ranks;
    if (cz__json_put(rep, "makespan", o) || cz__json_put(o, "ranks", ranks = json_array()))
        return -1;
    size_t ka = busiest_rank(a), kb = busiest_rank(b);
    if (cz__json_put(o, "a",
                     json_pack("{s:i, s:i, s:o}", "stage", (int)(ka / (size_t)a->dp), "dp_rank",
                               (int)(ka % (size_t)a->dp), "makespan",
                               cz__json_num(a->metrics.tp_makespan))) ||
        cz__json_put(o, "b",
                     json_pack("{s:i, s:i, s:o}", "stage", (int)(kb / (size_t)b->dp), "dp_rank",
                               (int)(kb % (size_t)b->dp), "makespan",
                               cz__json_num(b->metrics.tp_makespan))) ||
        cz__json_push(
            ranks, busiest_json(a, b, b_sorted, by_id, limit, kb, ka == kb ? "both" : "b", pl)) ||
        (ka != kb && cz__json_push(ranks, busiest_json(a, b, b_sorted, by_id, limit, ka, "a", pl))))
        return -1;
    return 0;
}

int cz__plan_diff_json(const cz_plan *a, const cz_plan *b, int force, int limit,
                       json_t **report_out, cz_error *err)
{
    *report_out = NULL;
    if (!a || !b)
        return cz__error_set(err, CZ_EINVALID, "diff: two plans are required");
    /* Two fully sharded plans compare as any two plans (their owners' DP ranks, groups and
     * slots: GPUs of the shard group); a fully sharded plan and a bucketed one have no ranks,
     * buckets or slots in common. */
    if (cz_plan_is_fsdp(a) != cz_plan_is_fsdp(b))
        return cz__error_set(err, CZ_EMISMATCH,
                             "diff: plan %s has layout fsdp and the other not: their owners, "
                             "groups and slots do not correspond; put the two layouts of one job "
                             "side by side with canzona compare --layout fsdp",
                             cz_plan_is_fsdp(a) ? "A" : "B");
    int same_model =
        !strcmp(cz__str_or_unknown(a->model_sha256), cz__str_or_unknown(b->model_sha256));
    int same_topo = a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && same_experts(a, b);
    if (!force && !same_model)
        return cz__error_set(err, CZ_EMISMATCH,
                             "the plans are for different models: A is '%s' (sha256 %s), B is '%s' "
                             "(sha256 %s); use --force to compare parameters by name",
                             cz__str_or_unknown(a->model_name), cz__str_or_unknown(a->model_sha256),
                             cz__str_or_unknown(b->model_name),
                             cz__str_or_unknown(b->model_sha256));
    if (!force && !same_topo)
        return cz__error_set(err, CZ_EMISMATCH,
                             "the plans have different topologies: A is dp=%d tp=%d pp=%d ep=%d "
                             "etp=%d, B is dp=%d tp=%d pp=%d ep=%d etp=%d (ep and etp 0: no expert "
                             "groups); use --force to compare anyway",
                             a->dp, a->tp, a->pp, a->ep, a->etp, b->dp, b->tp, b->pp, b->ep,
                             b->etp);
    int by_id = same_model && a->nparams == b->nparams;
    int ndiff = 0;
    named *b_sorted = names_sorted(b);
    places pl = {0};
    json_t *rep = json_object();
    /* Every value of the report is finite or null (cz__json_num) and every string is the
     * plans' own, so the one way a part fails is an allocation: the message names the part. */
    const char *part = "index";
#define CZ_DIFF_PART(name, call) (part = (name), (call))
    if (!b_sorted || !rep || locate(a, &pl.ga, &pl.sa) || locate(b, &pl.gb, &pl.sb) ||
        CZ_DIFF_PART("a", cz__json_put(rep, "a", side_json(a))) ||
        CZ_DIFF_PART("b", cz__json_put(rep, "b", side_json(b))) ||
        CZ_DIFF_PART("matched_by",
                     cz__json_put(rep, "matched_by", json_string(by_id ? "id" : "name"))) ||
        CZ_DIFF_PART("inputs", add_inputs(rep, a, b, &ndiff)) ||
        CZ_DIFF_PART("settings", add_settings(rep, a, b, &ndiff)) ||
        CZ_DIFF_PART("metrics", add_metrics(rep, a, b, &ndiff)) ||
        CZ_DIFF_PART("ranks", add_ranks(rep, a, b, &ndiff)) ||
        CZ_DIFF_PART("expert_ranks", add_expert_ranks(rep, a, b, &ndiff)) ||
        CZ_DIFF_PART("buckets", add_buckets(rep, a, b, &ndiff)) ||
        CZ_DIFF_PART("params", add_params(rep, a, b, b_sorted, &pl, by_id, limit, &ndiff)) ||
        CZ_DIFF_PART("makespan", add_makespan(rep, a, b, b_sorted, &pl, by_id, limit)) ||
        CZ_DIFF_PART("tasks", add_tasks(rep, a, b, b_sorted, by_id, limit, &ndiff)) ||
        CZ_DIFF_PART("identical", cz__json_put(rep, "identical", json_boolean(ndiff == 0)))) {
#undef CZ_DIFF_PART
        free(b_sorted);
        places_free(&pl);
        json_decref(rep);
        return cz__error_set(err, CZ_ENOMEM,
                             "diff: out of memory while building the report's \"%s\" part "
                             "(plans of %zu and %zu parameters)",
                             part, a->nparams, b->nparams);
    }
    free(b_sorted);
    places_free(&pl);
    *report_out = rep;
    return CZ_OK;
}
