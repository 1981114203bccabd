/* Planning settings: defaults and the names used on the command line and in plan files. */
#include "cz_types.h"

#include <string.h>

void cz_settings_init(cz_settings *s)
{
    memset(s, 0, sizeof *s);
    s->version = CZ_SETTINGS_VERSION;
    s->optimizer = CZ_OPTIM_MUON;
    s->unit = CZ_UNIT_TIME;
    s->dp = CZ_DP_ALPHA;
    s->alpha = 1.0;
    s->alpha_numel_loads = 0;
    s->layerwise_order = CZ_LAYERWISE_MEGATRON;
    s->tp = CZ_TP_ROLLBACK;
    s->capacity = 0.0;
    s->solver = CZ_SOLVER_GREEDY;
    s->time_limit_s = 60.0;
    s->seed = 0;
    s->ns_steps = 5;
    s->max_precond_dim = 10000;
    s->precondition_frequency = 10;
}

static const char *const dtype_names[] = {"bf16", "fp16", "fp32"};
static const char *const optimizer_names[] = {"muon", "soap", "shampoo", "adamw"};
static const char *const unit_names[] = {"numel", "flops", "time"};
static const char *const dp_names[] = {"even", "anchored", "layerwise", "alpha", "tpaware"};
static const char *const tp_names[] = {"sc", "none", "single", "slot", "rollback"};
static const char *const order_names[] = {"pingpong", "lpt", "megatron", "megatron-aug26"};
static const char *const solver_names[] = {"greedy", "ilp"};
static const char *const muon_tp_names[] = {"duplicated", "blockwise", "distributed"};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

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

NAME_FUNCS(cz_dtype, dtype, dtype_names)
NAME_FUNCS(cz_optimizer, optimizer, optimizer_names)
NAME_FUNCS(cz_cost_unit, unit, unit_names)
NAME_FUNCS(cz_dp_strategy, dp_strategy, dp_names)
NAME_FUNCS(cz_tp_strategy, tp_strategy, tp_names)
NAME_FUNCS(cz_layerwise_order, layerwise_order, order_names)
NAME_FUNCS(cz_solver, solver, solver_names)
NAME_FUNCS(cz_muon_tp_mode, muon_tp_mode, muon_tp_names)
