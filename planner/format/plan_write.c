/* Writing plan files (canzona.plan/1 to /4).
 *
 * The writer emits every object in a fixed key order through the streaming writer of
 * json_stream.h, which produces the file exactly as jansson's dump with JSON_PRESERVE_ORDER |
 * JSON_INDENT(1) | JSON_REAL_PRECISION(17) did and, in the same pass, the content hash of
 * docs/FORMATS.md section 5 (compact, keys sorted): identical plans give byte-identical files,
 * reals use 17 significant digits so they read back exactly, and the hash is the one the
 * reader recomputes from the parsed file. plan_seconds is not written (it would break
 * determinism).
 *
 * Micro-group tasks: a cz_plan_group keeps its tasks flat (in execution order); the file lists
 * them per slot ("slots"[k] = the tasks slot k takes part in, in execution order): a whole
 * matrix hosted by the slot as its parameter id, a block or cooperative task as an object
 * {"param", "block" (absent: the whole matrix), "width" (absent: 1), "panels" (a cooperative
 * task's Gram row panels, written whenever width > 1; absent: 1, how plans written before the
 * key ran), "cost"}, listed in every slot of a cooperative task. Version 2 of the schema
 * (CZ_PLAN_SCHEMA_SPLIT) is written only for plans that have block or cooperative tasks, and
 * version 3 (CZ_PLAN_SCHEMA_EXPERT) only for plans with expert groups, each of whose additions
 * is written only there (topology ep/etp/edp, a parameter's and a bucket's ep_rank, the expert
 * buffer's buckets, "expert_schedule", metrics.expert): every other plan stays byte for byte
 * what earlier versions wrote. Version 4 (CZ_PLAN_SCHEMA_FSDP) is the fully sharded layout's:
 * no buckets_config and no buckets, each parameter's "shard_rows" and "owner" in place of its
 * bucket and offset, and one "fsdp_schedule" entry per stage over the shard group's dp*tp slots
 * in place of "tp_schedule". */
#include "json_stream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct writer {
    cz_jstream js;
    cz_error *err;
    const char *path;
    const cz_plan *plan; /* what the tasks' parameters are (a TP-local task has no panels) */
    int rc;              /* the writer's own first failure (the stream keeps its own) */
} writer;

static void w_fail(writer *w, int code, const char *fmt, const char *what)
{
    if (w->rc == CZ_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, fmt, what);
        w->rc = cz__error_set(w->err, code, "%s: %s", w->path, msg);
    }
    cz__jw_fail(&w->js, code, "");
}

static void w_real(writer *w, const char *key, double x, const char *what)
{
    if (!isfinite(x)) {
        w_fail(w, CZ_EINTERNAL, "%s is not a finite number (a planner bug)", what);
        return;
    }
    cz__jw_real(&w->js, key, x);
}

static void w_reals(writer *w, const char *key, const double *xs, size_t n, const char *what)
{
    if (n && !xs) {
        w_fail(w, CZ_EINTERNAL, "%s was not computed (a planner bug)", what);
        return;
    }
    cz__jw_begin_array(&w->js, key);
    for (size_t i = 0; i < n && w->js.rc == CZ_OK; i++)
        w_real(w, NULL, xs[i], what);
    cz__jw_end(&w->js);
}

static void w_ints(writer *w, const char *key, const int64_t *v, int n)
{
    cz__jw_begin_array(&w->js, key);
    for (int i = 0; i < n; i++)
        cz__jw_int(&w->js, NULL, v[i]);
    cz__jw_end(&w->js);
}

static void w_str(writer *w, const char *key, const char *s, const char *what)
{
    if (!s) {
        w_fail(w, CZ_EINTERNAL, "%s is not set (a planner bug)", what);
        return;
    }
    cz__jw_string(&w->js, key, s);
}

static void w_status(writer *w, const char *key, int status)
{
    if (status < CZ_SOLVE_NONE || status > CZ_SOLVE_FAILED) {
        w_fail(w, CZ_EINTERNAL, "%s is unknown (a planner bug)", "a solver status");
        return;
    }
    cz__jw_string(&w->js, key, cz__solve_status_names[status]);
}

/* Only plans made with the ILP solver carry this object; the solve time is left out so that a
 * plan whose solves finished is as reproducible as a greedy one. */
static void write_solver_result(writer *w, const cz_plan *p)
{
    cz__jw_begin_object(&w->js, "solver_result");
    w_status(w, "status", p->solver_status);
    w_real(w, "gap", p->solver_gap, "solver_result.gap");
    w_status(w, "status_dp", p->solver_status_dp);
    w_real(w, "gap_dp", p->solver_gap_dp, "solver_result.gap_dp");
    w_status(w, "status_tp", p->solver_status_tp);
    w_real(w, "gap_tp", p->solver_gap_tp, "solver_result.gap_tp");
    cz__jw_string(&w->js, "note", p->solver_note);
    cz__jw_end(&w->js);
}

static void write_settings(writer *w, const cz_plan *p)
{
    const cz_settings *s = &p->settings;
    if (s->seed > (uint64_t)INT64_MAX) {
        w_fail(w, CZ_EINVALID, "%s: the seed does not fit a JSON integer (max 2^63-1)", "settings");
        return;
    }
    cz__jw_begin_object(&w->js, "settings");
    w_str(w, "optimizer", cz_optimizer_name(s->optimizer), "settings.optimizer");
    w_str(w, "unit", cz_unit_name(s->unit), "settings.unit");
    w_str(w, "dp_strategy", cz_dp_strategy_name(s->dp), "settings.dp_strategy");
    w_real(w, "alpha", s->alpha, "settings.alpha");
    cz__jw_string(&w->js, "alpha_loads", cz__alpha_loads_names[s->alpha_numel_loads != 0]);
    w_str(w, "layerwise_order", cz_layerwise_order_name(s->layerwise_order),
          "settings.layerwise_order");
    w_str(w, "tp_strategy", cz_tp_strategy_name(s->tp), "settings.tp_strategy");
    w_real(w, "capacity", s->capacity, "settings.capacity");
    w_real(w, "capacity_used", p->capacity_used, "capacity_used");
    w_str(w, "solver", cz_solver_name(s->solver), "settings.solver");
    w_real(w, "time_limit_s", s->time_limit_s, "settings.time_limit_s");
    cz__jw_int(&w->js, "seed", (int64_t)s->seed);
    cz__jw_int(&w->js, "ns_steps", s->ns_steps);
    cz__jw_int(&w->js, "max_precond_dim", s->max_precond_dim);
    cz__jw_int(&w->js, "precondition_frequency", s->precondition_frequency);
    cz__jw_bool(&w->js, "dp_fell_back", p->dp_fell_back);
    cz__jw_bool(&w->js, "dp_numel_cuts", p->dp_numel_cuts);
    /* Only split-layout plans name their layout, so unified plans stay byte for byte what
     * earlier versions wrote, and an earlier reader refuses a split plan by its unknown key
     * instead of running it as a unified one. */
    if (s->layout != CZ_LAYOUT_UNIFIED)
        w_str(w, "layout", cz_layout_name(s->layout), "settings.layout");
    /* Likewise only when set: a plan made with them is a version 2 plan where they had effect. */
    if (s->split_blocks)
        cz__jw_bool(&w->js, "split_blocks", true);
    if (s->coop) {
        char buf[16];
        cz__jw_string(&w->js, "coop", cz_coop_name(s->coop, buf));
    }
    /* HSDP, in fully sharded plans only (plain FSDP plans stay what earlier versions wrote). */
    if (s->layout == CZ_LAYOUT_FSDP && s->replicate > 1) {
        cz__jw_int(&w->js, "replicate", s->replicate);
        w_str(w, "hsdp_compute", cz_hsdp_compute_name(s->hsdp), "settings.hsdp");
    }
    /* Likewise: a plan made with jordan's coefficients stays what earlier versions wrote. */
    if (s->ns_coeffs)
        cz__jw_string(&w->js, "ns_coeffs", s->ns_coeffs);
    cz__jw_end(&w->js);
}

static void write_param(writer *w, const cz_plan_param *q, bool fsdp)
{
    cz__jw_begin_object(&w->js, NULL);
    cz__jw_int(&w->js, "id", q->id);
    w_str(w, "name", q->def.name, "a parameter name");
    w_ints(w, "shape", q->def.shape, q->def.ndim);
    w_ints(w, "local_shape", q->local_shape, q->def.ndim);
    if (q->def.tp_dim < 0)
        cz__jw_null(&w->js, "tp_dim");
    else
        cz__jw_int(&w->js, "tp_dim", q->def.tp_dim);
    w_str(w, "optimizer", cz__kind_name(q->def.kind), "a parameter's optimizer kind");
    if (q->def.nblocks > 0) {
        cz__jw_begin_object(&w->js, "blocks");
        cz__jw_int(&w->js, "dim", q->def.block_dim);
        w_ints(w, "sizes", q->def.block_sizes, q->def.nblocks);
        cz__jw_end(&w->js);
    }
    if (q->def.head_size > 0) {
        cz__jw_begin_object(&w->js, "heads");
        cz__jw_int(&w->js, "dim", q->def.head_dim);
        cz__jw_int(&w->js, "size", q->def.head_size);
        cz__jw_end(&w->js);
    }
    cz__jw_int(&w->js, "layer", q->def.layer);
    cz__jw_int(&w->js, "stage", q->stage);
    if (!fsdp) {
        cz__jw_int(&w->js, "bucket", q->bucket);
        cz__jw_int(&w->js, "offset", q->offset);
    }
    cz__jw_int(&w->js, "numel", q->numel);
    w_real(w, "cost", q->cost, "a parameter cost");
    if (fsdp) {
        cz__jw_int(&w->js, "shard_rows", q->shard_rows);
        cz__jw_int(&w->js, "owner", q->owner);
    }
    cz__jw_int(&w->js, "dp_owner", q->dp_owner);
    if (q->expert)
        cz__jw_int(&w->js, "ep_rank", q->ep_rank);
    cz__jw_end(&w->js);
}

static void write_bucket(writer *w, const cz_plan_bucket *b, int dp, cz_layout layout)
{
    /* An expert buffer's bucket names its buffer and EP rank; its ranges are one per expert-DP
     * rank (the caller's dp). */
    cz__jw_begin_object(&w->js, NULL);
    cz__jw_int(&w->js, "id", b->id);
    cz__jw_int(&w->js, "stage", b->stage);
    cz__jw_int(&w->js, "offset", b->offset);
    cz__jw_int(&w->js, "size", b->size);
    if (!b->ranges)
        w_fail(w, CZ_EINTERNAL, "%s has no ranges (a planner bug)", "a bucket");
    cz__jw_begin_array(&w->js, "ranges");
    for (int r = 0; b->ranges && r < dp; r++)
        w_ints(w, NULL, &b->ranges[2 * r], 2);
    cz__jw_end(&w->js);
    if (b->expert) {
        cz__jw_string(&w->js, "buffer", cz__bucket_buffer_names[CZ_BUFFER_EXPERT]);
        cz__jw_int(&w->js, "ep_rank", b->ep_rank);
    } else if (layout != CZ_LAYOUT_UNIFIED) {
        cz__jw_string(&w->js, "buffer", cz__bucket_buffer_names[b->elementwise != 0]);
    }
    cz__jw_end(&w->js);
}

/* The tasks slot k takes part in, in execution order. */
static void write_slot(writer *w, const cz_plan_group *g, int k)
{
    cz__jw_begin_array(&w->js, NULL);
    for (int t = 0; t < g->ntasks; t++) {
        int width = cz_group_task_width(g, t), block = cz_group_task_block(g, t);
        if (k < g->task_slot[t] || k >= g->task_slot[t] + width)
            continue;
        if (width == 1 && block < 0) {
            cz__jw_int(&w->js, NULL, g->task_param[t]);
            continue;
        }
        cz__jw_begin_object(&w->js, NULL);
        cz__jw_int(&w->js, "param", g->task_param[t]);
        if (block >= 0)
            cz__jw_int(&w->js, "block", block);
        if (width > 1)
            cz__jw_int(&w->js, "width", width);
        if (width > 1 && !cz_task_is_local(&w->plan->params[g->task_param[t]].def, width))
            cz__jw_int(&w->js, "panels", cz_group_task_panels(g, t));
        w_real(w, "cost", g->task_cost ? g->task_cost[t] : NAN, "a task's cost");
        cz__jw_end(&w->js);
    }
    cz__jw_end(&w->js);
}

static void write_group(writer *w, const cz_plan_group *g)
{
    for (int t = 0; t < g->ntasks; t++)
        if (g->task_slot[t] < 0 || cz_group_task_width(g, t) < 1 ||
            g->task_slot[t] + cz_group_task_width(g, t) > g->nslots) {
            w_fail(w, CZ_EINTERNAL, "%s has a task outside its slots (a planner bug)",
                   "a micro-group");
            return;
        }
    cz__jw_begin_object(&w->js, NULL);
    cz__jw_int(&w->js, "id", g->id);
    cz__jw_begin_array(&w->js, "slots");
    if (g->nslots == 1) {
        write_slot(w, g, 0);
    } else {
        /* Each slot's list in one pass over the tasks per slot would be O(slots x tasks); a
         * group has at most a few hundred tasks over at most 64 slots, which stays small. */
        for (int k = 0; k < g->nslots && w->js.rc == CZ_OK; k++)
            write_slot(w, g, k);
    }
    cz__jw_end(&w->js);
    w_reals(w, "load", g->load, (size_t)g->nslots, "a micro-group load");
    cz__jw_end(&w->js);
}

/* The DP ranks' schedules ("tp_schedule"), or the expert ranks' ("expert_schedule", each
 * naming its EP and expert-DP rank). */
static void write_schedules(writer *w, const cz_plan *p, int expert)
{
    size_t n = expert ? p->nexpert_schedules : p->nschedules;
    const cz_rank_schedule *all = expert ? p->expert_schedules : p->schedules;
    bool fsdp = cz_plan_is_fsdp(p);
    cz__jw_begin_array(&w->js, expert ? "expert_schedule" : fsdp ? "fsdp_schedule" : "tp_schedule");
    for (size_t i = 0; i < n && w->js.rc == CZ_OK; i++) {
        const cz_rank_schedule *rs = &all[i];
        cz__jw_begin_object(&w->js, NULL);
        cz__jw_int(&w->js, "stage", rs->stage);
        if (expert) {
            cz__jw_int(&w->js, "ep_rank", rs->ep_rank);
            cz__jw_int(&w->js, "edp_rank", rs->dp_rank);
        } else if (!fsdp) {
            cz__jw_int(&w->js, "dp_rank", rs->dp_rank);
        }
        cz__jw_begin_array(&w->js, "groups");
        for (int g = 0; g < rs->ngroups && w->js.rc == CZ_OK; g++)
            write_group(w, &rs->groups[g]);
        cz__jw_end(&w->js);
        cz__jw_end(&w->js);
    }
    cz__jw_end(&w->js);
}

static void write_metrics(writer *w, const cz_plan *p, bool split)
{
    const cz_plan_metrics *m = &p->metrics;
    size_t ranks = (size_t)p->pp * (size_t)p->dp, gpus = ranks * (size_t)p->tp;
    cz__jw_begin_object(&w->js, "metrics");
    cz__jw_begin_object(&w->js, "dp");
    w_reals(w, "load", m->dp_load, ranks, "metrics.dp.load");
    w_real(w, "imbalance", m->dp_imbalance, "metrics.dp.imbalance");
    cz__jw_end(&w->js);
    cz__jw_begin_object(&w->js, "tp");
    w_real(w, "makespan", m->tp_makespan, "metrics.tp.makespan");
    w_real(w, "imbalance", m->tp_imbalance, "metrics.tp.imbalance");
    w_reals(w, "rank_makespan", m->rank_makespan, ranks, "metrics.tp.rank_makespan");
    w_reals(w, "gpu_load", m->gpu_load, gpus, "metrics.tp.gpu_load");
    cz__jw_end(&w->js);
    if (cz_plan_has_experts(p)) {
        size_t xr = (size_t)p->pp * (size_t)cz_plan_expert_ranks(p);
        cz__jw_begin_object(&w->js, "expert");
        w_reals(w, "load", m->expert_load, xr, "metrics.expert.load");
        w_real(w, "imbalance", m->expert_imbalance, "metrics.expert.imbalance");
        w_reals(w, "rank_makespan", m->expert_rank_makespan, xr, "metrics.expert.rank_makespan");
        cz__jw_end(&w->js);
    }
    w_real(w, "lower_bound", m->lower_bound, "metrics.lower_bound");
    /* The bounds of the split freedom only in version 2, so that version 1 files stay as they
     * were (a reader of one derives them: docs/FORMATS.md, "metrics"). */
    if (split) {
        w_real(w, "average_load", m->average_load, "metrics.average_load");
        w_real(w, "split_lower_bound", m->split_lower_bound, "metrics.split_lower_bound");
    }
    w_real(w, "total_cost", m->total_cost, "metrics.total_cost");
    w_real(w, "max_task_cost", m->max_task_cost, "metrics.max_task_cost");
    w_reals(w, "memory", m->memory, gpus, "metrics.memory");
    w_real(w, "predicted_step_s", m->predicted_step_s, "metrics.predicted_step_s");
    cz__jw_end(&w->js);
}

static void write_plan(writer *w, const cz_plan *p, char hash[65])
{
    bool split = cz__plan_has_split_tasks(p), experts = cz_plan_has_experts(p);
    bool fsdp = cz_plan_is_fsdp(p);
    size_t per_stage = fsdp ? 1 : (size_t)p->dp;
    if (fsdp && (experts || split || p->nbuckets)) {
        w_fail(w, CZ_EINTERNAL, "%s has expert groups, split tasks or buckets (a planner bug)",
               "a fully sharded plan");
        return;
    }
    if (p->dp < 1 || p->tp < 1 || p->pp < 1 || p->nschedules != (size_t)p->pp * per_stage ||
        p->nexpert_schedules != (size_t)p->pp * (size_t)cz_plan_expert_ranks(p)) {
        w_fail(w, CZ_EINTERNAL, "%s does not match its topology (a planner bug)",
               "the plan's schedule count");
        return;
    }
    cz__jw_begin_object(&w->js, NULL);
    cz__jw_string(&w->js, "schema", cz__plan_schema_needed(p));
    cz__jw_begin_object(&w->js, "generator");
    cz__jw_string(&w->js, "name", p->generator ? p->generator : "canzona");
    cz__jw_string(&w->js, "version", p->generator_version ? p->generator_version : CZ_VERSION);
    cz__jw_end(&w->js);
    cz__jw_begin_object(&w->js, "inputs");
    cz__jw_begin_object(&w->js, "model");
    w_str(w, "name", p->model_name, "the model name");
    w_str(w, "sha256", p->model_sha256, "the model hash");
    cz__jw_end(&w->js);
    cz__jw_begin_object(&w->js, "cluster");
    w_str(w, "name", p->cluster_name, "the cluster name");
    w_str(w, "sha256", p->cluster_sha256, "the cluster hash");
    cz__jw_end(&w->js);
    if (p->calibration_sha256) {
        /* Only when one was given: every other plan stays byte for byte what it was. */
        cz__jw_begin_object(&w->js, "calibration");
        w_str(w, "device", p->calibration_device, "the calibration's device");
        w_str(w, "measured_at", p->calibration_measured_at, "the calibration's measurement time");
        w_str(w, "sha256", p->calibration_sha256, "the calibration hash");
        cz__jw_end(&w->js);
    }
    cz__jw_end(&w->js);
    write_settings(w, p);
    if (p->settings.solver == CZ_SOLVER_ILP)
        write_solver_result(w, p);
    cz__jw_begin_object(&w->js, "topology");
    cz__jw_int(&w->js, "dp", p->dp);
    cz__jw_int(&w->js, "tp", p->tp);
    cz__jw_int(&w->js, "pp", p->pp);
    cz__jw_int(&w->js, "gpus_per_node", p->gpus_per_node);
    if (experts) {
        cz__jw_int(&w->js, "ep", p->ep);
        cz__jw_int(&w->js, "etp", p->etp);
        cz__jw_int(&w->js, "edp", p->edp);
    }
    cz__jw_end(&w->js);
    w_str(w, "dtype", cz_dtype_name(p->dtype), "the dtype");
    if (!fsdp) {
        cz__jw_begin_object(&w->js, "buckets_config");
        cz__jw_int(&w->js, "size", p->bucket_size);
        cz__jw_int(&w->js, "align", p->bucket_align);
        cz__jw_end(&w->js);
    }
    cz__jw_begin_array(&w->js, "params");
    for (size_t i = 0; i < p->nparams && w->js.rc == CZ_OK; i++)
        write_param(w, &p->params[i], fsdp);
    cz__jw_end(&w->js);
    if (!fsdp) {
        cz__jw_begin_array(&w->js, "buckets");
        for (size_t i = 0; i < p->nbuckets && w->js.rc == CZ_OK; i++)
            write_bucket(w, &p->buckets[i], cz_plan_bucket_nranks(p, &p->buckets[i]),
                         p->settings.layout);
        cz__jw_end(&w->js);
    }
    write_schedules(w, p, 0);
    if (experts)
        write_schedules(w, p, 1);
    write_metrics(w, p, split);
    /* The hash covers everything above; consumers without the model (the executor) recompute
     * it on load to refuse a plan edited since. */
    cz__jw_end_with_hash(&w->js, CZ_CONTENT_KEY, hash);
}

int cz_plan_write(const cz_plan *plan, const char *path, cz_error *err)
{
    writer w = {.err = err, .path = path, .plan = plan, .rc = CZ_OK};
    char hash[65];
    size_t n = 0;
    cz__jw_init(&w.js);
    write_plan(&w, plan, hash);
    /* Files end with a newline, as text files should. */
    cz__jw_newline(&w.js);
    char *text = NULL;
    int rc;
    if ((rc = w.rc) != CZ_OK)
        goto done;
    if (w.js.rc != CZ_OK) {
        rc = cz__error_set(err, w.js.rc, "%s: %s while formatting the plan", path, w.js.why);
        goto done;
    }
    if (!(text = cz__jw_take(&w.js, &n))) {
        rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory while formatting the plan", path);
        goto done;
    }
    rc = cz__file_write(path, text, n, err);
done:
    free(text);
    cz__jw_free(&w.js);
    return rc;
}
