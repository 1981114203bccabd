/* Megatron-Core's expert parallelism: which parameters are experts, where each expert lives, how
 * the ranks form the expert groups, and the rules a layout must follow. Read from Megatron-LM's
 * own code (NVIDIA/Megatron-LM, main of August 2026; docs/PLANNER.md, "Expert parallelism",
 * cites each rule):
 *
 *  - megatron/core/parallel_state.py, initialize_model_parallel: two RankGenerators over the
 *    same world with the order "tp-cp-ep-dp-pp" (the leftmost varies fastest), the dense one with
 *    sizes tp, dp, pp (ep 1) and the expert one with sizes etp (expert_tensor_parallel_size,
 *    default tp), ep (expert_model_parallel_size), expert-dp = world / (etp x ep x pp), pp.
 *    It raises "world_size (W) is not divisible by expert_tensor_model_pipeline_parallel size"
 *    unless etp x ep x pp divides the world, and asserts that both generators give the same
 *    pipeline groups: pp being the slowest axis of both, a stage holds the same consecutive ranks
 *    in the two grids, so within a stage etp x ep x expert-dp covers the ranks tp x dp does.
 *  - megatron/core/transformer/moe/moe_layer.py (BaseMoELayer): "assert num_moe_experts %
 *    ep_size == 0"; EP rank r holds the experts r x (E / ep) .. (r + 1) x (E / ep) - 1
 *    (local_expert_indices_offset = ep_rank x num_local_experts). megatron/training/
 *    arguments.py (validate_args) asserts the same ("Number of experts should be a multiple of
 *    expert model parallel_size") and that EP > 1 has experts; transformer_config.py refuses
 *    expert biases unless ETP is 1 ("Bias in Moe is only supported when ETP==1").
 *  - megatron/core/extensions/transformer_engine.py: an expert linear uses the expert process
 *    groups (allreduce = False) when EP > 1 or ETP != TP; DDP (distributed/
 *    distributed_data_parallel.py, param_and_grad_buffer.py group_params_for_buffers) then gives
 *    such parameters a buffer of their own, reduced over the expert-data-parallel group. With EP
 *    1 and ETP = TP the experts are ordinary parameters of the dense buffer. */
#include "format_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPERTS_KEY "mlp.experts."

/* Digits at s (at least one, no sign) as a non-negative int; -1 when none or too large. */
static long digits_at(const char *s, const char **end)
{
    long v = 0;
    const char *p = s;
    while (*p >= '0' && *p <= '9') {
        if (v > (LONG_MAX - 9) / 10)
            return -1;
        v = v * 10 + (*p - '0');
        p++;
    }
    *end = p;
    return p == s ? -1 : v;
}

int cz__expert_of_name(const char *name, size_t *layer_len, long *index)
{
    *layer_len = 0;
    *index = -1;
    if (!name)
        return 0;
    /* Shared experts (mlp.shared_experts.*) are dense parameters: the key needs the dot before
     * "mlp" or the start of the name. */
    const char *at = strstr(name, EXPERTS_KEY);
    while (at && at != name && at[-1] != '.')
        at = strstr(at + 1, EXPERTS_KEY);
    if (!at)
        return 0;
    const char *rest = at + strlen(EXPERTS_KEY), *end;
    *layer_len = (size_t)(rest - name);
    /* SequentialMLP: mlp.experts.local_experts.<e>.<...>, the names the model format uses. */
    if (!strncmp(rest, "local_experts.", 14)) {
        long e = digits_at(rest + 14, &end);
        if (e >= 0 && *end == '.')
            *index = e;
        return 1;
    }
    /* TEGroupedMLP: mlp.experts.linear_fc1.weight<e> (one tensor per expert). */
    const char *dot = strrchr(rest, '.');
    if (dot) {
        const char *p = dot + 1;
        while (*p && (*p < '0' || *p > '9'))
            p++;
        long e = *p ? digits_at(p, &end) : -1;
        if (e >= 0 && *end == '\0' && p > dot + 1)
            *index = e;
    }
    return 1;
}

typedef struct scan_item {
    const char *name;
    size_t klen; /* the layer prefix */
    long index;
    size_t id;
} scan_item;

/* By layer prefix, then position: the experts of one MoE layer together, whatever else the
 * model lists between them. */
static int scan_cmp(const void *a, const void *b)
{
    const scan_item *x = a, *y = b;
    int r = memcmp(x->name, y->name, x->klen < y->klen ? x->klen : y->klen);
    if (r)
        return r;
    if (x->klen != y->klen)
        return x->klen < y->klen ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int cz__experts_scan(size_t n, cz_name_at name_at, const void *ctx, int *experts, int *index,
                     const char *where, cz_error *err)
{
    int rc = CZ_OK;
    size_t m = 0;
    scan_item *it = malloc((n + 1) * sizeof *it);
    char *seen = NULL;
    if (!it)
        return cz__error_set(err, CZ_ENOMEM, "out of memory counting experts");
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        long e = -1;
        const char *name = name_at(ctx, i);
        experts[i] = 0;
        index[i] = -1;
        if (!cz__expert_of_name(name, &len, &e))
            continue;
        if (e < 0 || e > INT_MAX / 2) {
            rc = cz__error_set(err, CZ_EINVALID,
                               "%s: parameter '%s' is an expert parameter (it holds \"%s\") but "
                               "its name gives no expert number (Megatron-Core names "
                               "...mlp.experts.local_experts.<e>.<name> or "
                               "...mlp.experts.linear_fc1.weight<e>)",
                               where, name, EXPERTS_KEY);
            goto done;
        }
        it[m++] = (scan_item){name, len, e, i};
    }
    qsort(it, m, sizeof *it, scan_cmp);
    /* Each layer's experts are numbered 0 .. E - 1, every number used. */
    for (size_t a = 0, b; a < m; a = b) {
        long most = -1;
        for (b = a; b < m && scan_cmp(&(scan_item){it[a].name, it[a].klen, 0, 0},
                                      &(scan_item){it[b].name, it[b].klen, 0, 0}) == 0;
             b++)
            most = it[b].index > most ? it[b].index : most;
        int E = (int)most + 1, gap = -1;
        free(seen);
        seen = calloc((size_t)E, 1);
        if (!seen) {
            rc = cz__error_set(err, CZ_ENOMEM, "out of memory counting experts");
            goto done;
        }
        for (size_t j = a; j < b; j++) {
            seen[it[j].index] = 1;
            experts[it[j].id] = E;
            index[it[j].id] = (int)it[j].index;
        }
        for (int x = 0; x < E && gap < 0; x++)
            if (!seen[x])
                gap = x;
        if (gap >= 0) {
            rc = cz__error_set(err, CZ_EINVALID,
                               "%s: the experts of '%.*s' are numbered up to %d but expert %d has "
                               "no parameter; Megatron-Core numbers a layer's experts 0 to "
                               "num_moe_experts - 1",
                               where, (int)it[a].klen, it[a].name, E - 1, gap);
            goto done;
        }
    }
done:
    free(it);
    free(seen);
    return rc;
}

/* Rank r's coordinate on axis a of a grid whose axes (fastest first) have the given sizes. */
static int coord(int r, const int *sizes, int a)
{
    for (int i = 0; i < a; i++)
        r /= sizes[i];
    return r % sizes[a];
}

int cz__megatron_group(const cz_grid *g, cz_group_kind kind, int rank, int *out)
{
    /* The dense grid: tp, dp, pp; the expert grid: etp, ep, expert-dp, pp (order tp-cp-ep-dp-pp
     * with cp = 1, and ep = 1 on the dense grid). */
    int edp = cz_grid_edp(g);
    int dense[3] = {g->tp, g->dp, g->pp}, expert[4] = {g->etp, g->ep, edp, g->pp};
    const int *sizes = kind <= CZ_GROUP_PP ? dense : expert;
    int axis = kind == CZ_GROUP_TP    ? 0
               : kind == CZ_GROUP_DP  ? 1
               : kind == CZ_GROUP_PP  ? 2
               : kind == CZ_GROUP_ETP ? 0
               : kind == CZ_GROUP_EP  ? 1
               : kind == CZ_GROUP_EDP ? 2
                                      : -1;
    int world = g->tp * g->dp * g->pp;
    if (axis < 0 || rank < 0 || rank >= world || edp < 1)
        return 0;
    int stride = 1;
    for (int i = 0; i < axis; i++)
        stride *= sizes[i];
    int base = rank - coord(rank, sizes, axis) * stride;
    for (int i = 0; i < sizes[axis]; i++)
        out[i] = base + i * stride;
    return sizes[axis];
}

int cz__megatron_check_expert_grid(const char *where, int tp, int dp, int pp, int ep, int etp,
                                   cz_error *err)
{
    if (ep < 1 || etp < 1)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: ep (%d) and etp (%d) must be at least 1 (expert model-parallel "
                             "and expert tensor-parallel sizes)",
                             where, ep, etp);
    int64_t world = (int64_t)tp * dp * pp, grid = (int64_t)etp * ep * pp;
    if (world % grid != 0)
        return cz__error_set(
            err, CZ_EINVALID,
            "%s: ETP %d x EP %d x PP %d = %" PRId64 " does not divide the %" PRId64
            " GPUs (TP %d x DP %d x PP %d): Megatron-Core lays the expert grid (ETP x EP x "
            "expert-DP) over the same ranks of each pipeline stage as TP x DP, so ETP x EP must "
            "divide TP x DP = %" PRId64 " (parallel_state.py, initialize_model_parallel: "
            "\"world_size is not divisible by expert_tensor_model_pipeline_parallel size\")",
            where, etp, ep, pp, grid, world, tp, dp, pp, (int64_t)tp * dp);
    return CZ_OK;
}

static const char *model_name_at(const void *ctx, size_t i)
{
    return ((const cz_model *)ctx)->params[i].name;
}

int cz__model_experts(const cz_model *m, int *experts, int *index, cz_error *err)
{
    const char *mfile = m->source ? m->source : m->name ? m->name : "(in memory)";
    return cz__experts_scan(m->nparams, model_name_at, m, experts, index, mfile, err);
}

int cz__model_check_experts(const cz_model *m, const cz_cluster *c, cz_error *err)
{
    const char *mfile = m->source ? m->source : m->name ? m->name : "(in memory)";
    const char *cfile = c->source ? c->source : c->name ? c->name : "the cluster";
    int ep = c->ep > 0 ? c->ep : 1, etp = c->etp > 0 ? c->etp : c->tp;
    int rc = cz__megatron_check_expert_grid(cfile, c->tp, c->dp, c->pp, ep, etp, err);
    if (rc != CZ_OK)
        return rc;
    size_t n = m->nparams ? m->nparams : 1;
    int *experts = malloc(n * sizeof *experts), *index = malloc(n * sizeof *index);
    if (!experts || !index) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory counting experts");
        goto done;
    }
    /* With EP 1 and ETP = TP the experts are ordinary parameters of the dense buffer: no
     * placement depends on their numbers, and a hand-made model need not number them. */
    if (ep > 1 || etp != c->tp) {
        if ((rc = cz__model_experts(m, experts, index, err)) != CZ_OK)
            goto done;
    } else {
        for (size_t i = 0; i < m->nparams; i++) {
            size_t len;
            long e;
            experts[i] = cz__expert_of_name(m->params[i].name, &len, &e) ? ep : 0;
        }
    }
    int any = 0;
    for (size_t i = 0; i < m->nparams; i++) {
        const cz_param_def *d = &m->params[i];
        if (!experts[i])
            continue;
        any = 1;
        if (experts[i] % ep) {
            int ok[64], nok = 0;
            char list[256] = "";
            for (int k = 1; k <= experts[i] && nok < 64; k++)
                if (experts[i] % k == 0)
                    ok[nok++] = k;
            for (int k = 0, len = 0; k < nok && len < (int)sizeof list - 12; k++)
                len +=
                    snprintf(list + len, sizeof list - (size_t)len, "%s%d", k ? ", " : "", ok[k]);
            rc = cz__error_set(err, CZ_EINVALID,
                               "%s: the MoE layer of '%s' has %d experts, which EP %d (%s) does "
                               "not divide: Megatron-Core gives each EP rank the same number of "
                               "whole experts (moe_layer.py: num_moe_experts %% ep_size == 0); EP "
                               "sizes this model allows: %s",
                               mfile, d->name, experts[i], ep, cfile, list);
            goto done;
        }
        /* Row-parallel biases stay whole and column-parallel ones are split, which Megatron-Core
         * supports for experts only without expert tensor parallelism. */
        if (etp > 1 && d->ndim == 1 && strstr(d->name, "bias")) {
            rc = cz__error_set(err, CZ_EINVALID,
                               "%s: expert parameter '%s' is a bias, and %s has ETP %d: "
                               "Megatron-Core supports expert biases only with ETP 1 "
                               "(transformer_config.py: \"Bias in Moe is only supported when "
                               "ETP==1\")",
                               mfile, d->name, cfile, etp);
            goto done;
        }
    }
    if (!any && ep > 1)
        rc = cz__error_set(err, CZ_EINVALID,
                           "%s has EP %d, but model %s has no expert parameters (Megatron-Core "
                           "names ...mlp.experts.local_experts.<e>.*): expert parallelism needs "
                           "experts (arguments.py: \"num_experts must be non None to use expert "
                           "model parallelism\"); use ep 1",
                           cfile, ep, mfile);
done:
    free(experts);
    free(index);
    return rc;
}
