/* Planning settings: defaults and the names used on the command line and in plan files. */
#include "format_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The defaults are CZ_SETTINGS_INIT (canzona.h): one set of values. Copied from a static
 * object, whose padding is zero, so that two initialized structs compare equal byte for byte. */
void cz_settings_init(cz_settings *s)
{
    static const cz_settings defaults = CZ_SETTINGS_INIT;
    memcpy(s, &defaults, sizeof *s);
}

/* Bytes per element of the training job's parameter and gradient type. */
int cz__dtype_bytes(cz_dtype d)
{
    return d == CZ_DTYPE_FP32 ? 4 : 2;
}

/* The one table of names per enum, in enum order: the CLI, the plan and model readers and
 * writers all use these (the readers through cz__json_get_enum, hence the NULL ends). */
const char *const cz__dtype_names[] = {"bf16", "fp16", "fp32", NULL};
const char *const cz__optimizer_names[] = {"muon", "soap", "shampoo", "adamw", NULL};
const char *const cz__unit_names[] = {"numel", "flops", "time", NULL};
const char *const cz__dp_strategy_names[] = {"even",    "anchored", "layerwise", "alpha",
                                             "tpaware", "joint",    NULL};
const char *const cz__tp_strategy_names[] = {"sc", "none", "single", "slot", "rollback", NULL};
const char *const cz__layerwise_order_names[] = {"pingpong", "lpt", "megatron", "megatron-aug26",
                                                 NULL};
const char *const cz__solver_names[] = {"greedy", "ilp", NULL};
const char *const cz__layout_names[] = {"unified", "split", "fsdp", NULL};
const char *const cz__hsdp_compute_names[] = {"redundant", "partitioned", "auto", NULL};
const char *const cz__muon_tp_mode_names[] = {"duplicated", "blockwise", "distributed",
                                              "layer_sharded", NULL};
const char *const cz__kind_names[] = {"matrix", "elementwise", NULL};
const char *const cz__bucket_buffer_names[] = {"matrix", "elementwise", "expert", NULL};
const char *const cz__alpha_loads_names[] = {"cost", "numel", NULL};
const char *const cz__solve_status_names[] = {"none",    "optimal", "feasible",
                                              "timeout", "failed",  NULL};

/* Entries before the NULL end. */
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])) - 1)

static const char *name_of(const char *const *names, int n, int v)
{
    return (v >= 0 && v < n) ? names[v] : NULL;
}

static int parse_name(const char *const *names, int n, const char *name, int *out)
{
    for (int i = 0; name && i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            *out = i;
            return CZ_OK;
        }
    }
    return CZ_EINVALID;
}

#define NAME_FUNCS(type, stem, table)                                                              \
    const char *cz_##stem##_name(type v)                                                           \
    {                                                                                              \
        return name_of(table, COUNT(table), (int)v);                                               \
    }                                                                                              \
    int cz_##stem##_parse(const char *name, type *out)                                             \
    {                                                                                              \
        int v = 0;                                                                                 \
        int rc = parse_name(table, COUNT(table), name, &v);                                        \
        if (rc == CZ_OK)                                                                           \
            *out = (type)v;                                                                        \
        return rc;                                                                                 \
    }

NAME_FUNCS(cz_dtype, dtype, cz__dtype_names)
NAME_FUNCS(cz_optimizer, optimizer, cz__optimizer_names)
NAME_FUNCS(cz_cost_unit, unit, cz__unit_names)
NAME_FUNCS(cz_dp_strategy, dp_strategy, cz__dp_strategy_names)
NAME_FUNCS(cz_tp_strategy, tp_strategy, cz__tp_strategy_names)
NAME_FUNCS(cz_layerwise_order, layerwise_order, cz__layerwise_order_names)
NAME_FUNCS(cz_solver, solver, cz__solver_names)
NAME_FUNCS(cz_layout, layout, cz__layout_names)
NAME_FUNCS(cz_hsdp_compute, hsdp_compute, cz__hsdp_compute_names)
NAME_FUNCS(cz_muon_tp_mode, muon_tp_mode, cz__muon_tp_mode_names)

const char *cz__kind_name(cz_param_kind v)
{
    return name_of(cz__kind_names, COUNT(cz__kind_names), (int)v);
}

const char *cz__solve_status_name(int status)
{
    return name_of(cz__solve_status_names, COUNT(cz__solve_status_names), status);
}

int cz_coop_parse(const char *name, int *out)
{
    if (!name)
        return CZ_EINVALID;
    if (strcmp(name, "off") == 0) {
        *out = 0;
        return CZ_OK;
    }
    if (strcmp(name, "auto") == 0) {
        *out = CZ_COOP_AUTO;
        return CZ_OK;
    }
    char *end = NULL;
    long k = strtol(name, &end, 10);
    if (end == name || *end || k < 2 || k > CZ_COOP_MAX)
        return CZ_EINVALID;
    *out = (int)k;
    return CZ_OK;
}

const char *cz_coop_name(int v, char *buf)
{
    if (v == 0)
        snprintf(buf, 16, "off");
    else if (v == CZ_COOP_AUTO)
        snprintf(buf, 16, "auto");
    else
        snprintf(buf, 16, "%d", v);
    return buf;
}
