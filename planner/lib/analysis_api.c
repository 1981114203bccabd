/*
 * analysis_api.c — the analysis functions of the public API (canzona.h): reports, option
 * defaults and the entry points that the CLI's validate, inspect, diff, simulate, render and
 * import-hf commands call. The work is done by validate.c, inspect.c, plan_diff.c, simulate.c,
 * render.c and import_hf.c; this file gives it the public conventions (opaque results with a
 * _free, options structs with an _init, no jansson type in the header).
 */
#include "cz_types.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void cz_free(void *p)
{
    free(p);
}

int cz__report_wrap(cz_report **out, json_t *root, int real_precision, cz_error *err)
{
    cz_report *r = root ? malloc(sizeof *r) : NULL;
    *out = NULL;
    if (!r) {
        json_decref(root);
        return cz__error_set(err, CZ_ENOMEM, "out of memory building a report");
    }
    r->root = root;
    r->real_precision = real_precision;
    *out = r;
    return CZ_OK;
}

void cz_report_free(cz_report *report)
{
    if (!report)
        return;
    json_decref(report->root);
    free(report);
}

int cz_report_json(const cz_report *report, int indent, char **out, cz_error *err)
{
    if (!out)
        return cz__error_set(err, CZ_EINVALID, "cz_report_json: out is required");
    *out = NULL;
    if (!report)
        return cz__error_set(err, CZ_EINVALID, "cz_report_json: report is required");
    size_t flags = JSON_PRESERVE_ORDER | (indent ? JSON_INDENT(2) : JSON_COMPACT);
    if (report->real_precision > 0)
        flags |= JSON_REAL_PRECISION(report->real_precision);
    *out = json_dumps(report->root, flags);
    return *out ? CZ_OK : cz__error_set(err, CZ_ENOMEM, "out of memory writing a report");
}

/* The value at a dotted path ("a.b.0.c"): object keys, or array indices in decimal. */
static json_t *report_at(const cz_report *report, const char *path)
{
    if (!report || !path)
        return NULL;
    json_t *v = report->root;
    char key[256];
    const char *p = path;
    while (v && *p) {
        size_t n = strcspn(p, ".");
        if (n == 0 || n >= sizeof key)
            return NULL;
        memcpy(key, p, n);
        key[n] = '\0';
        p += n + (p[n] == '.');
        if (json_is_object(v)) {
            v = json_object_get(v, key);
        } else if (json_is_array(v)) {
            char *end;
            errno = 0;
            unsigned long long i = strtoull(key, &end, 10);
            if (errno || *end || key[0] < '0' || key[0] > '9')
                return NULL;
            v = json_array_get(v, (size_t)i);
        } else {
            return NULL;
        }
    }
    return v;
}

int cz_report_number(const cz_report *report, const char *path, double *out, cz_error *err)
{
    json_t *v = report_at(report, path);
    if (json_is_number(v))
        *out = json_number_value(v);
    else if (json_is_boolean(v))
        *out = json_is_true(v);
    else
        return cz__error_set(err, CZ_EINVALID,
                             "report path '%s': %s; expected a number or a boolean",
                             path ? path : "(null)", v ? "not a number" : "no such value");
    return CZ_OK;
}

const char *cz_report_string(const cz_report *report, const char *path)
{
    return json_string_value(report_at(report, path));
}

int cz_plan_validate(cz_report **out, const cz_plan *plan, const cz_model *model,
                     const cz_cluster *cluster, cz_error *err)
{
    json_t *violations = NULL;
    if (!out)
        return cz__error_set(err, CZ_EINVALID, "cz_plan_validate: out is required");
    *out = NULL;
    int checks = cz__plan_validate_json(plan, model, cluster, &violations, err);
    if (checks < 0)
        return checks;
    json_t *root = json_pack("{s:b, s:i, s:o}", "valid", json_array_size(violations) == 0, "checks",
                             checks, "violations", violations);
    return cz__report_wrap(out, root, 0, err);
}

/* The options structs' defaults are their *_INIT macros (canzona.h): one set of values. Copied
 * from a static object, whose padding is zero, so that two initialized structs compare equal. */
void cz_inspect_options_init(cz_inspect_options *o)
{
    static const cz_inspect_options defaults = CZ_INSPECT_OPTIONS_INIT;
    memcpy(o, &defaults, sizeof *o);
}

/* A caller's options struct of another version than this build's (or one left zeroed). */
/* Where each version of the options structs below ends (cz__options_read): every one is still
 * at its version 1 but cz_import_hf_options, whose version 2 added ep_size. */
static const size_t inspect_ends[] = {sizeof(cz_inspect_options)};
static const size_t diff_ends[] = {sizeof(cz_diff_options)};
static const size_t render_ends[] = {sizeof(cz_render_options)};
static const size_t import_hf_ends[] = {CZ__OPTIONS_END(cz_import_hf_options, split_gate_up),
                                        CZ__OPTIONS_END(cz_import_hf_options, ep_size),
                                        sizeof(cz_import_hf_options)};
_Static_assert(sizeof inspect_ends / sizeof *inspect_ends == CZ_INSPECT_OPTIONS_VERSION &&
                   sizeof diff_ends / sizeof *diff_ends == CZ_DIFF_OPTIONS_VERSION &&
                   sizeof render_ends / sizeof *render_ends == CZ_RENDER_OPTIONS_VERSION &&
                   sizeof import_hf_ends / sizeof *import_hf_ends == CZ_IMPORT_HF_OPTIONS_VERSION,
               "a new options version needs its end here");

/* Adds "memory_per_gpu" to the report: the busiest GPU's model states and, with a cluster,
 * the headroom on its device. */
static int add_memory(json_t *report, const cz_plan *p, const cz_cluster *c, cz_error *err)
{
    const double gib = 1024.0 * 1024.0 * 1024.0;
    cz_memory_gpu *g = NULL;
    int rc = cz__plan_memory(p, &g, err);
    if (rc != CZ_OK)
        return rc;
    size_t tp = (size_t)p->tp, dp = (size_t)p->dp;
    size_t w = cz__memory_worst(g, tp * dp * (size_t)p->pp);
    json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f}", "gpu", (json_int_t)w,
                          "stage", (json_int_t)(w / tp / dp), "dp_rank", (json_int_t)(w / tp % dp),
                          "tp_rank", (json_int_t)(w % tp), "params_gib", g[w].params / gib,
                          "grads_gib", g[w].grads / gib, "master_gib", g[w].master / gib,
                          "state_gib", g[w].state / gib, "total_gib", g[w].total / gib);
    if (o && c) {
        double dev = c->device.memory_gib;
        json_object_set_new(o, "device_gib", json_real(dev));
        json_object_set_new(o, "headroom_gib", json_real(dev - g[w].total / gib));
        json_object_set_new(o, "used_fraction", json_real(dev > 0 ? g[w].total / gib / dev : 0));
    }
    free(g);
    if (!o || json_object_set_new(report, "memory_per_gpu", o))
        return cz__error_set(err, CZ_ENOMEM, "inspect: out of memory");
    return CZ_OK;
}

int cz_plan_inspect(cz_report **out, const cz_plan *plan, const cz_inspect_options *opt,
                    cz_error *err)
{
    cz_inspect_options o;
    json_t *root = NULL;
    if (!out || !plan)
        return cz__error_set(err, CZ_EINVALID, "cz_plan_inspect: out and plan are required");
    *out = NULL;
    cz_inspect_options_init(&o);
    int rc;
    if (opt && (rc = cz__options_read(&o, opt, inspect_ends, CZ_INSPECT_OPTIONS_VERSION,
                                      "cz_inspect_options", err)) != CZ_OK)
        return rc;
    const cz_cluster *c = o.cluster;
    if (c && (c->dp != plan->dp || c->tp != plan->tp || c->pp != plan->pp))
        return cz__error_set(err, CZ_EMISMATCH,
                             "%s has DP %d x TP %d x PP %d but the plan was made for DP %d x TP "
                             "%d x PP %d; give the cluster the plan was made for",
                             c->source ? c->source : c->name, c->dp, c->tp, c->pp, plan->dp,
                             plan->tp, plan->pp);
    if ((rc = cz__plan_inspect_json(plan, o.top_n, &root, err)) != CZ_OK ||
        (rc = add_memory(root, plan, c, err)) != CZ_OK) {
        json_decref(root);
        return rc;
    }
    return cz__report_wrap(out, root, 12, err);
}

void cz_diff_options_init(cz_diff_options *o)
{
    static const cz_diff_options defaults = CZ_DIFF_OPTIONS_INIT;
    memcpy(o, &defaults, sizeof *o);
}

int cz_plan_diff(cz_report **out, const cz_plan *a, const cz_plan *b, const cz_diff_options *opt,
                 cz_error *err)
{
    cz_diff_options o;
    json_t *root = NULL;
    if (!out)
        return cz__error_set(err, CZ_EINVALID, "cz_plan_diff: out is required");
    *out = NULL;
    cz_diff_options_init(&o);
    int rc;
    if (opt && (rc = cz__options_read(&o, opt, diff_ends, CZ_DIFF_OPTIONS_VERSION,
                                      "cz_diff_options", err)) != CZ_OK)
        return rc;
    if (o.limit < 0)
        return cz__error_set(err, CZ_EINVALID, "cz_plan_diff: limit %d; expected 0 (all) or more",
                             o.limit);
    /* The public 0 means "all", as validate's --limit; the internal function takes -1. */
    if ((rc = cz__plan_diff_json(a, b, o.force, o.limit == 0 ? -1 : o.limit, &root, err)) != CZ_OK)
        return rc;
    return cz__report_wrap(out, root, 12, err);
}

void cz_sim_options_init(cz_sim_options *o)
{
    static const cz_sim_options defaults = CZ_SIM_OPTIONS_INIT;
    memcpy(o, &defaults, sizeof *o);
}

json_t *cz__sim_wire_json(const cz_sim_result *r)
{
    /* -1 (not a program the executor runs) is null. */
    json_t *tp = r->tp_sync_bytes >= 0 ? json_integer(r->tp_sync_bytes) : json_null();
    json_t *etp = r->etp_sync_bytes >= 0 ? json_integer(r->etp_sync_bytes) : json_null();
    return json_pack("{s:s, s:I, s:s, s:I, s:o, s:o}", "grad_dtype", cz_dtype_name(r->grad_wire),
                     "grad_sync_bytes", (json_int_t)r->grad_sync_bytes, "param_dtype",
                     cz_dtype_name(r->param_wire), "param_sync_bytes",
                     (json_int_t)r->param_sync_bytes, "tp_sync_bytes", tp, "etp_sync_bytes", etp);
}

int cz_sim_result_report(cz_report **out, const cz_sim_result *r, cz_error *err)
{
    if (!out || !r)
        return cz__error_set(err, CZ_EINVALID, "cz_sim_result_report: out and result are required");
    *out = NULL;
    json_t *busy = json_array();
    for (int i = 0; busy && i < r->ngpus; i++)
        if (json_array_append_new(busy, json_real(r->gpu_busy[i]))) {
            json_decref(busy);
            busy = NULL;
        }
    json_t *root =
        busy
            ? json_pack("{s:b, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
                        "s:f, s:{s:i, s:i, s:i}, s:o}",
                        "in_seconds", r->in_seconds, "pipelined", r->pipelined, "step_s", r->step_s,
                        "grad_sync_s", r->grad_sync_s, "frag_gather_s", r->frag_gather_s, "local_s",
                        r->local_s, "param_sync_s", r->param_sync_s, "optimizer_s", r->optimizer_s,
                        "compute_s", r->compute_s, "tp_comm_s", r->tp_comm_s, "comm_s", r->comm_s,
                        "exposed_comm_s", r->exposed_comm_s, "critical", "stage", r->critical_stage,
                        "dp_rank", r->critical_dp, "tp_rank", r->critical_tp, "gpu_busy", busy)
            : NULL;
    json_t *wire = root ? cz__sim_wire_json(r) : NULL;
    if (root && (!wire || json_object_set_new(root, "wire", wire))) {
        json_decref(root);
        root = NULL;
    }
    /* Only for a plan with expert groups, so that other reports keep their keys. */
    if (root && r->experts && json_object_set_new(root, "expert_s", json_real(r->expert_s))) {
        json_decref(root);
        root = NULL;
    }
    if (root && r->iteration) {
        json_t *it = cz__sim_iteration_json(r);
        if (!it || json_object_set_new(root, "iteration", it)) {
            json_decref(root);
            root = NULL;
        }
    }
    return cz__report_wrap(out, root, 10, err);
}

void cz_render_options_init(cz_render_options *o)
{
    static const cz_render_options defaults = CZ_RENDER_OPTIONS_INIT;
    memcpy(o, &defaults, sizeof *o);
}

int cz_plan_render(char **out, const cz_plan *plan, const cz_cluster *cluster,
                   const cz_render_options *opt, cz_error *err)
{
    cz_render_options o;
    cz_sim_result *sim = NULL;
    if (!out || !plan)
        return cz__error_set(err, CZ_EINVALID, "cz_plan_render: out and plan are required");
    *out = NULL;
    cz_render_options_init(&o);
    int rc;
    if (opt && (rc = cz__options_read(&o, opt, render_ends, CZ_RENDER_OPTIONS_VERSION,
                                      "cz_render_options", err)) != CZ_OK)
        return rc;
    if (o.format != CZ_RENDER_SVG && o.format != CZ_RENDER_HTML)
        return cz__error_set(err, CZ_EINVALID, "cz_plan_render: format %d; expected SVG or HTML",
                             (int)o.format);
    /* A fully sharded plan has no bucketed step to simulate: its own simulation (sim_fsdp.c)
     * gives the step's figures, and the drawing its micro-groups. */
    cz_fsdp_sim fs;
    cz_svg_options so = {.width = o.width, .cluster_name = cluster ? cluster->name : NULL};
    if (cz_plan_is_fsdp(plan)) {
        if (cluster && (rc = cz__fsdp_simulate(plan, cluster, &fs, err)) != CZ_OK)
            return rc;
        so.fsdp = cluster ? &fs : NULL;
        so.sim_in_seconds = cluster != NULL;
    } else {
        if ((rc = cz_plan_simulate(&sim, plan, cluster, o.sim, err)) != CZ_OK)
            return rc;
        so.sim_in_seconds = sim->in_seconds;
    }
    rc = o.format == CZ_RENDER_HTML ? cz__plan_render_html(out, plan, sim, &so, err)
                                    : cz__plan_render_svg(out, plan, sim, &so, err);
    cz_sim_result_free(sim);
    return rc;
}

int cz_model_import_hf(char **out, const char *config_path, const cz_import_hf_options *opt,
                       cz_error *err)
{
    cz_import_hf_options o;
    json_t *model = NULL;
    if (!out || !config_path)
        return cz__error_set(err, CZ_EINVALID,
                             "cz_model_import_hf: out and config_path are required");
    *out = NULL;
    cz_import_hf_options_init(&o);
    int rc;
    if (opt && (rc = cz__options_read(&o, opt, import_hf_ends, CZ_IMPORT_HF_OPTIONS_VERSION,
                                      "cz_import_hf_options", err)) != CZ_OK)
        return rc;
    if ((rc = cz__import_hf_opts(&model, config_path, &o, err)) != CZ_OK)
        goto done;
    rc = cz__model_json_format(out, model, err);
done:
    json_decref(model);
    return rc;
}
