/* canzona-bench --qk-clip: QK-clip on the plan's fused QKV parameters (every parameter named
 * ...linear_qkv.weight, one attention layer each in plan order, --qk-heads H:G; its rows as the
 * plan lays out the whole matrix: the declared blocks [Q, K, V] stacked when it has them, each
 * TP rank holding its share of each, else Megatron-Core's rows interleaved per query group,
 * each TP rank holding whole groups), per-head maxima generated for every step and
 * DP rank (each rank hands those of its TP rank's heads and its stage's layers, -inf for the
 * rest), and the reference's clip of a whole tensor after each step, from the same maxima and
 * the formula of docs/EXECUTOR.md. */
#include "bench_run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_qkv(const cz_plan_param *p)
{
    static const char suffix[] = "linear_qkv.weight";
    size_t n = strlen(p->def.name), k = sizeof suffix - 1;
    return p->def.ndim == 2 && n >= k && strcmp(p->def.name + n - k, suffix) == 0;
}

/* The attention layer of parameter i (its rank among the fused QKV parameters), or -1. */
static int layer_of(const cz_plan *plan, size_t i)
{
    if (!is_qkv(&plan->params[i]))
        return -1;
    int l = 0;
    for (size_t k = 0; k < i; k++)
        l += is_qkv(&plan->params[k]);
    return l;
}

static int layers(const cz_plan *plan)
{
    int n = 0;
    for (size_t i = 0; i < plan->nparams; i++)
        n += is_qkv(&plan->params[i]);
    return n;
}

/* The maximum logit DP rank dp hands for (layer, head) at step: uniform in [-tau/4, 3 tau/2),
 * so that about two heads in seven pass tau on each rank and the MAX over ranks decides. */
static float logit(const bench_opts *o, int64_t step, int dp, int layer, int head)
{
    uint64_t x = o->seed * 0x9e3779b97f4a7c15ULL + (uint64_t)step * 1000003u +
                 (uint64_t)dp * 7919u + (uint64_t)layer * 131u + (uint64_t)head;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    double u = (double)(x >> 11) / (double)(1ULL << 53);
    return (float)(o->qk_tau * (1.75 * u - 0.25));
}

/* Query group g's query rows [*q0, *q0 + per * d) and key rows [*k0, *k0 + d) of p's whole
 * matrix (d = head_dim, per = heads / groups). */
static void group_rows(const cz_plan_param *p, int heads, int groups, int g, int64_t *q0,
                       int64_t *k0)
{
    int64_t d = p->def.shape[0] / (heads + 2 * groups), per = heads / groups;
    if (p->def.nblocks == 3 && p->def.block_dim == 0) { /* [Q, K, V] */
        *q0 = g * per * d;
        *k0 = heads * d + g * d;
    } else { /* [q of group g, k_g, v_g] per group */
        *q0 = g * (per + 2) * d;
        *k0 = *q0 + per * d;
    }
}

int cz_bench_qk_setup(const bench_opts *o, const cz_plan *plan, cz_executor *ex, cz_error *err)
{
    if (o->qk_tau <= 0.0)
        return CZ_OK;
    int heads = o->qk_heads, groups = o->qk_groups, nl = layers(plan), rc = CZ_OK;
    if (nl == 0)
        return cz__error_set(err, CZ_EINVALID,
                             "--qk-clip: the plan has no fused QKV parameter (a name ending in "
                             "linear_qkv.weight) to clip");
    cz_qk_clip_rows *runs = calloc((size_t)nl * 2 * (size_t)groups, sizeof *runs);
    if (!runs)
        return cz__error_set(err, CZ_ENOMEM, "--qk-clip: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < plan->nparams && rc == CZ_OK; i++) {
        const cz_plan_param *p = &plan->params[i];
        int l = layer_of(plan, i);
        if (l < 0)
            continue;
        int64_t rows = p->def.shape[0];
        if (rows % (heads + 2 * groups) || groups % cz_plan_param_tp(plan, p)) {
            rc = cz__error_set(err, CZ_EINVALID,
                               "--qk-heads %d:%d: '%s' has %lld rows, not a multiple of heads + "
                               "2 x groups = %d, or its TP of %d does not divide the groups",
                               heads, groups, p->def.name, (long long)rows, heads + 2 * groups,
                               cz_plan_param_tp(plan, p));
            break;
        }
        int64_t d = rows / (heads + 2 * groups), per = heads / groups, q0, k0;
        for (int g = 0; g < groups; g++) {
            group_rows(p, heads, groups, g, &q0, &k0);
            runs[n++] = (cz_qk_clip_rows){p->def.name,        q0,           per * d, l,
                                          (int32_t)(g * per), (int32_t)per, 0.5f};
            runs[n++] =
                (cz_qk_clip_rows){p->def.name, k0, d, l, (int32_t)(g * per), (int32_t)per, 0.5f};
        }
    }
    cz_qk_clip_spec spec = {(float)o->qk_tau, nl, heads, runs, n};
    if (rc == CZ_OK)
        rc = cz_executor_set_qk_clip(ex, &spec, err);
    free(runs);
    return rc;
}

int cz_bench_qk_hand(const bench_opts *o, const cz_plan *plan, const bench_place *w,
                     cz_executor *ex, int64_t step, cz_error *err)
{
    if (o->qk_tau <= 0.0)
        return CZ_OK;
    int nl = layers(plan), heads = o->qk_heads, rc;
    float *v = malloc((size_t)nl * (size_t)heads * sizeof *v);
    if (!v)
        return cz__error_set(err, CZ_ENOMEM, "--qk-clip: out of memory");
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int l = layer_of(plan, i);
        if (l < 0)
            continue;
        /* Megatron splits the query groups over TP: this rank computes heads/TP of them. */
        int tp = cz_plan_param_tp(plan, p), mine = heads / tp;
        for (int h = 0; h < heads; h++)
            v[l * heads + h] = p->stage == w->stage && h / mine == w->tp_rank
                                   ? logit(o, step, w->dp_rank, l, h)
                                   : -INFINITY;
    }
    rc = cz_executor_qk_logits(ex, v, (size_t)nl * (size_t)heads, err);
    free(v);
    return rc;
}

void cz_bench_qk_reference(const bench_opts *o, const cz_plan *plan, const cz_plan_param *p,
                           int64_t step, float *w)
{
    int l = o->qk_tau > 0.0 ? layer_of(plan, (size_t)(p - plan->params)) : -1;
    if (l < 0)
        return;
    int heads = o->qk_heads, groups = o->qk_groups, per = heads / groups;
    int64_t cols = p->def.shape[1], d = p->def.shape[0] / (heads + 2 * groups);
    float tau = (float)o->qk_tau;
    for (int g = 0; g < groups; g++) {
        float s = -INFINITY; /* the group's largest maximum over every DP rank */
        for (int dp = 0; dp < plan->dp; dp++)
            for (int h = g * per; h < (g + 1) * per; h++)
                s = fmaxf(s, logit(o, step, dp, l, h));
        if (!(s > tau))
            continue;
        float f = (float)pow((double)tau / (double)s, 0.5);
        int64_t q0, k0;
        group_rows(p, heads, groups, g, &q0, &k0);
        for (int64_t k = q0 * cols; k < (q0 + per * d) * cols; k++)
            w[k] *= f;
        for (int64_t k = k0 * cols; k < (k0 + d) * cols; k++)
            w[k] *= f;
    }
}
