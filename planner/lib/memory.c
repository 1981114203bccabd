/* Model-state memory per GPU: what a Megatron-LM job with the distributed optimizer holds for
 * the plan's parameters, compared with the device's memory.
 *
 * Every GPU of a pipeline stage holds the stage's whole parameter buffer and gradient buffer
 * (its TP shards, bucket padding included). Megatron-LM accumulates and reduces bf16 gradients
 * in fp32 unless told otherwise (--accumulate-allreduce-grads-in-fp32 is switched on for bf16),
 * so the gradient buffer is fp32 for bf16 and follows the parameter type for fp16 and fp32.
 * The optimizer keeps an fp32 master copy of the elements its DP rank owns (none when the
 * parameters are fp32 already), and the optimizer state that the plan's metrics count
 * (metrics.memory: matrix-optimizer state on each matrix's host, AdamW moments of owned
 * shards). Activations, workspaces and communication buffers come on top and are not known
 * to the planner; the warning threshold leaves room for them. With expert groups a GPU also holds
 * the expert buffer of its EP rank and owns the part of it its expert-DP rank updates. */
#include "cz_algorithms.h"

#include <stdlib.h>

static double share_owned(const cz_plan *plan, const cz_plan_param *p, int r)
{
    if (!cz_plan_param_fragmented(plan, p))
        return p->dp_owner == r ? 1.0 : 0.0;
    /* even, or split layout's elementwise buffer: the part inside rank r's slice */
    if (p->bucket < 0 || (size_t)p->bucket >= plan->nbuckets || p->numel <= 0)
        return 0.0;
    const int64_t *rg = plan->buckets[p->bucket].ranges;
    if (!rg)
        return 0.0;
    int64_t lo = p->offset > rg[2 * r] ? p->offset : rg[2 * r];
    int64_t end = cz_plan_param_end(p);
    int64_t hi = end < rg[2 * r + 1] ? end : rg[2 * r + 1];
    return hi > lo ? (double)(hi - lo) / (double)p->numel : 0.0;
}

/* A fully sharded plan (FSDP2): a GPU holds its DP rank's dim-0 shard of every TP-local
 * parameter of its stage (torch.chunk rows, cz__fsdp_rows) as parameters, gradients (fp32 for
 * bf16, as above: FSDP2's reduce_dtype fp32) and fp32 master copy alike, and the optimizer
 * state metrics.memory counts (each owned matrix's whole, its share of the elementwise ones).
 * The owner's gathered matrices are transient buffers of the optimizer step, not counted. */
static void fsdp_memory(const cz_plan *plan, cz_memory_gpu *g, double pbytes, double gbytes,
                        double mbytes)
{
    size_t per_stage = (size_t)plan->dp * (size_t)plan->tp;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->stage < 0 || p->stage >= plan->pp || p->local_shape[0] <= 0)
            continue;
        double row = (double)p->numel / (double)p->local_shape[0];
        int shard = cz_plan_fsdp_shard(plan); /* HSDP: each replica holds the same shards */
        for (int r = 0; r < plan->dp; r++) {
            double elems = (double)cz__fsdp_rows(p->local_shape[0], shard, r % shard) * row;
            for (int t = 0; t < plan->tp; t++) {
                cz_memory_gpu *x = &g[(size_t)p->stage * per_stage + (size_t)r * plan->tp + t];
                x->params += elems * pbytes;
                x->grads += elems * gbytes;
                x->master += elems * mbytes;
            }
        }
    }
    for (size_t k = 0; k < per_stage * (size_t)plan->pp; k++) {
        g[k].state = plan->metrics.memory ? plan->metrics.memory[k] : 0.0;
        g[k].total = g[k].params + g[k].grads + g[k].master + g[k].state;
    }
}

int cz__plan_memory(const cz_plan *plan, cz_memory_gpu **out, cz_error *err)
{
    if (!plan || !out)
        return cz__error_set(err, CZ_EINVALID, "cz__plan_memory: plan and out are needed");
    *out = NULL;
    int dp = plan->dp, tp = plan->tp, pp = plan->pp, rc = CZ_OK;
    if (dp < 1 || tp < 1 || pp < 1)
        return cz__error_set(err, CZ_EINVALID, "cz__plan_memory: the plan has no topology");
    size_t ngpus = (size_t)dp * (size_t)tp * (size_t)pp;
    /* With expert groups a GPU holds its stage's dense buffer and its EP rank's expert buffer,
     * and owns elements of both: its DP rank's and its expert rank's. */
    size_t ep = cz_plan_has_experts(plan) ? (size_t)plan->ep : 0;
    size_t nx = (size_t)pp * (size_t)cz_plan_expert_ranks(plan);
    cz_memory_gpu *g = calloc(ngpus, sizeof *g);
    double *buffer = calloc((size_t)pp, sizeof *buffer);
    double *ebuffer = calloc((size_t)pp * ep + 1, sizeof *ebuffer);
    double *master = calloc((size_t)pp * (size_t)dp, sizeof *master);
    double *emaster = calloc(nx + 1, sizeof *emaster);
    cz_rank_window win = {0};
    if (!g || !buffer || !ebuffer || !master || !emaster ||
        cz__rank_window_init(&win, plan, err) != CZ_OK) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory computing the memory per GPU");
        goto done;
    }
    double pbytes = cz__dtype_bytes(plan->dtype);
    double gbytes = plan->dtype == CZ_DTYPE_FP16 ? 2.0 : 4.0;
    double mbytes = plan->dtype == CZ_DTYPE_FP32 ? 0.0 : 4.0;
    if (cz_plan_is_fsdp(plan)) {
        fsdp_memory(plan, g, pbytes, gbytes, mbytes);
        *out = g;
        g = NULL;
        goto done;
    }
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        if (bk->stage < 0 || bk->stage >= pp)
            continue;
        if (!bk->expert)
            buffer[bk->stage] += (double)bk->size;
        else if (bk->ep_rank >= 0 && (size_t)bk->ep_rank < ep)
            ebuffer[(size_t)bk->stage * ep + (size_t)bk->ep_rank] += (double)bk->size;
    }
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->stage < 0 || p->stage >= pp ||
            (p->expert && (p->ep_rank < 0 || !ep || (size_t)p->ep_rank >= ep)))
            continue;
        int n = p->expert ? plan->edp : dp;
        int lo = p->dp_owner, hi = p->dp_owner + 1;
        if (cz_plan_param_fragmented(plan, p))
            cz__rank_window_of(&win, p, &lo, &hi);
        if (lo < 0 || hi > n)
            continue;
        for (int r = lo; r < hi; r++) {
            double owned = share_owned(plan, p, r) * (double)p->numel;
            if (p->expert)
                emaster[cz_plan_expert_rank(plan, p->stage, p->ep_rank, r)] += owned;
            else
                master[(size_t)p->stage * dp + r] += owned;
        }
    }
    for (size_t k = 0; k < ngpus; k++) {
        size_t rank = k / (size_t)tp, stage = rank / (size_t)dp;
        double buf = buffer[stage], own = master[rank];
        if (ep) {
            size_t x = cz_plan_gpu_expert_rank(plan, k, NULL);
            buf += ebuffer[stage * ep + x % ep];
            own += emaster[x];
        }
        g[k].params = buf * pbytes;
        g[k].grads = buf * gbytes;
        g[k].master = own * mbytes;
        g[k].state = plan->metrics.memory ? plan->metrics.memory[k] : 0.0;
        g[k].total = g[k].params + g[k].grads + g[k].master + g[k].state;
    }
    *out = g;
    g = NULL;
done:
    cz__rank_window_free(&win);
    free(g);
    free(buffer);
    free(ebuffer);
    free(master);
    free(emaster);
    return rc;
}

size_t cz__memory_worst(const cz_memory_gpu *g, size_t n)
{
    size_t w = 0;
    for (size_t k = 1; k < n; k++)
        if (g[k].total > g[w].total)
            w = k;
    return w;
}

#define GIB (1024.0 * 1024.0 * 1024.0)

int cz__plan_memory_check(const cz_plan *plan, const cz_cluster *cluster, int allow, char *warning,
                          size_t n, cz_error *err)
{
    if (warning && n)
        warning[0] = '\0';
    if (!plan || !cluster)
        return cz__error_set(err, CZ_EINVALID,
                             "cz__plan_memory_check: plan and cluster are needed");
    cz_memory_gpu *g = NULL;
    int rc = cz__plan_memory(plan, &g, err);
    if (rc != CZ_OK)
        return rc;
    size_t ngpus = (size_t)plan->dp * (size_t)plan->tp * (size_t)plan->pp;
    size_t w = cz__memory_worst(g, ngpus);
    double cap = cluster->device.memory_gib * GIB, frac = cap > 0 ? g[w].total / cap : 0.0;
    int tp = plan->tp, dp = plan->dp;
    char what[512];
    snprintf(what, sizeof what,
             "GPU %zu (stage %zu, DP rank %zu, TP rank %zu) needs %.2f GiB for parameters, "
             "gradients and optimizer state (%.2f + %.2f + fp32 master %.2f + state %.2f GiB), "
             "%.0f%% of the %g GiB of device.memory_gib in %s",
             w, w / (size_t)tp / (size_t)dp, w / (size_t)tp % (size_t)dp, w % (size_t)tp,
             g[w].total / GIB, g[w].params / GIB, g[w].grads / GIB, g[w].master / GIB,
             g[w].state / GIB, 100.0 * frac, cluster->device.memory_gib,
             cluster->source ? cluster->source
             : cluster->name ? cluster->name
                             : "the cluster");
    free(g);
    if (frac > 1.0 && !allow)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: more than the device holds; use more GPUs (larger DP, TP or PP) "
                             "or a device with more memory, or pass --allow-oversubscribed-memory "
                             "to plan anyway",
                             what);
    if (warning && n && frac > 1.0)
        snprintf(warning, n, "%s: more than the device holds (planned anyway, as asked)", what);
    else if (warning && n && frac > CZ_MEMORY_WARN_FRACTION)
        snprintf(warning, n,
                 "%s: above %.0f%%, the rest may not hold activations, workspaces and "
                 "communication buffers",
                 what, 100.0 * CZ_MEMORY_WARN_FRACTION);
    return CZ_OK;
}
