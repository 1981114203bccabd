/*
 * Megatron-LM's current layer-wise rule (--dp layerwise --layerwise-order megatron-aug26), as
 * LayerWiseDistributedOptimizer._compute_per_buffer_param_layout lays out its buffer since
 * August 2026 (NVIDIA/Megatron-LM pull requests 4509, 5415 and 6379):
 *
 *  - Only Muon's parameters are in the layer-wise buffer; every other parameter sits in an
 *    ordinary ZeRO-1 buffer, sliced evenly. Expert parameters form a buffer of their own (over
 *    the DP group when they share the dense gradient buffer, else one per EP rank over its
 *    expert-DP group).
 *  - The buffer is walked in backprop order and cut into buckets. bucket_size is a soft minimum:
 *    once the bucket holds at least max(bucket_size, trunc(dp * largest * 0.9)) elements it
 *    closes before the next parameter unless that parameter still fits, by an estimate that
 *    places parameters in backprop order on the least-filled shard, below the bucket's current
 *    padded height.
 *  - Within a bucket, parameters are taken by Newton-Schulz cost max(M,N) * min(M,N)^2 of the
 *    TP-local shape, most expensive first (a stable sort: ties keep backprop order), and each goes
 *    to the shard with the least cost accumulated so far, counted across all buckets of the
 *    buffer, among the shards where it still fits under 1.3 x (bucket elements / dp); when no
 *    shard has room it goes to the least-filled one.
 *  - Every parameter starts at a multiple of 64 elements within its shard; a shard is padded to a
 *    multiple of lcm(64, lcm(dp, 128) / dp), and the bucket is dp such shards, reduce-scattered
 *    and all-gathered like a ZeRO-1 bucket.
 */
#include "cz_types.h"

#include <stdlib.h>
#include <string.h>

#define LW_ALIGN 64
#define LW_PADDING_FLOOR 0.9
#define LW_NUMEL_EPSILON 0.3

static int64_t lcm64(int64_t a, int64_t b)
{
    return a / cz__gcd64(a, b) * b;
}

/* Sizes are bounded by the model loader (each below 2^40 elements), so these sums stay far from
 * overflow. */
static int64_t round_up(int64_t v, int64_t m)
{
    return m > 1 && v % m ? v + (m - v % m) : v;
}

int64_t cz__megatron_lw_shard_divisor(int dp)
{
    return lcm64(LW_ALIGN, lcm64(dp, 128) / dp);
}

double cz__megatron_ns_cost(int64_t m, int64_t n)
{
    double big = (double)(m > n ? m : n), small = (double)(m > n ? n : m);
    return big * small * small;
}

/* id: index into the caller's arrays; equal costs keep that order, as Python's stable sorted()
 * does. */
typedef cz_costed lw_item;

static int argmin64(const int64_t *v, int n)
{
    int best = 0;
    for (int s = 1; s < n; s++)
        if (v[s] < v[best])
            best = s;
    return best;
}

/* Packs items [lo, hi) into dp shards; returns the bucket's padded size. */
static int64_t lw_emit(const int64_t *numel, const double *cost, size_t lo, size_t hi, int dp,
                       int *shard, double *loads, int64_t *cursor, lw_item *items)
{
    int64_t total = 0;
    size_t n = hi - lo;
    for (size_t k = 0; k < n; k++) {
        items[k] = (lw_item){(int)(lo + k), cost[lo + k]};
        total += numel[lo + k];
    }
    cz__costed_sort(items, n);
    for (int s = 0; s < dp; s++)
        cursor[s] = 0;
    /* The cap is a float in Megatron (total / dp * 1.3) compared with integer positions. */
    double cap = (double)total / dp * (1.0 + LW_NUMEL_EPSILON);
    for (size_t k = 0; k < n; k++) {
        int i = items[k].id, best = -1;
        for (int s = 0; s < dp; s++)
            if ((double)(round_up(cursor[s], LW_ALIGN) + numel[i]) <= cap &&
                (best < 0 || loads[s] < loads[best]))
                best = s;
        if (best < 0)
            best = argmin64(cursor, dp);
        cursor[best] = round_up(cursor[best], LW_ALIGN) + numel[i];
        loads[best] += cost[i];
        shard[i] = best;
    }
    int64_t most = cursor[0];
    for (int s = 1; s < dp; s++)
        most = cursor[s] > most ? cursor[s] : most;
    return cz__i64_sat_mul(dp, round_up(most, cz__megatron_lw_shard_divisor(dp)));
}

int cz__megatron_lw_layout(const int64_t *numel, const double *cost, size_t n, int dp,
                           int64_t bucket_size, int *shard, int64_t *bucket_sizes, size_t *nbuckets,
                           cz_error *err)
{
    int rc = CZ_OK;
    *nbuckets = 0;
    if (dp < 1)
        return cz__error_set(err, CZ_EINVALID, "dp must be >= 1, got %d", dp);
    double *loads = calloc((size_t)dp, sizeof *loads);
    int64_t *cursor = calloc((size_t)dp, sizeof *cursor);
    int64_t *est = calloc((size_t)dp, sizeof *est);
    lw_item *items = malloc((n + 1) * sizeof *items);
    if (!loads || !cursor || !est || !items) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory in Megatron's layer-wise layout");
        goto done;
    }
    int64_t divisor = cz__megatron_lw_shard_divisor(dp), chunk = 0, largest = 0;
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (bucket_size > 0 && i > start) {
            /* Element counts come from a plan as read (each at most CZ_PLAN_MAX_ELEMENTS):
             * dp times the largest can pass INT64_MAX, and the cast of a larger double is
             * undefined. */
            double fl = (double)dp * (double)largest * LW_PADDING_FLOOR;
            int64_t floor = fl < 0x1p62 ? (int64_t)fl : INT64_MAX;
            int64_t threshold = bucket_size > floor ? bucket_size : floor;
            int64_t most = est[0];
            for (int s = 1; s < dp; s++)
                most = est[s] > most ? est[s] : most;
            int64_t least = est[argmin64(est, dp)];
            int absorbs = round_up(least, LW_ALIGN) + numel[i] <= round_up(most, divisor);
            if (chunk >= threshold && !absorbs) {
                bucket_sizes[(*nbuckets)++] =
                    lw_emit(numel, cost, start, i, dp, shard, loads, cursor, items);
                start = i;
                chunk = largest = 0;
                for (int s = 0; s < dp; s++)
                    est[s] = 0;
            }
        }
        int s = argmin64(est, dp);
        est[s] = round_up(est[s], LW_ALIGN) + numel[i];
        chunk += numel[i];
        largest = numel[i] > largest ? numel[i] : largest;
    }
    if (n > start)
        bucket_sizes[(*nbuckets)++] =
            lw_emit(numel, cost, start, n, dp, shard, loads, cursor, items);
done:
    free(loads);
    free(cursor);
    free(est);
    free(items);
    return rc;
}

int cz__megatron_zero1_buckets(const int64_t *numel, size_t n, int dp, int64_t bucket_size,
                               int64_t *bucket_sizes, size_t *nbuckets)
{
    /* Megatron's DistributedOptimizer buffer: parameters in backprop order, each starting at a
     * multiple of 64, a bucket closing once it holds bucket_size elements, its end padded to a
     * multiple of lcm(dp, 128) so that it slices evenly. */
    int64_t end_divisor = lcm64(dp, 128), used = 0;
    *nbuckets = 0;
    for (size_t i = 0; i < n; i++) {
        used = round_up(used, LW_ALIGN) + numel[i];
        if ((bucket_size > 0 && used >= bucket_size) || i + 1 == n) {
            bucket_sizes[(*nbuckets)++] = round_up(used, end_divisor);
            used = 0;
        }
    }
    return CZ_OK;
}

int cz__megatron_is_expert(const char *name)
{
    /* Megatron-Core's MoE experts (mlp.experts.*) are expert-parallel parameters; shared
     * experts (mlp.shared_experts.*) are not. */
    return name && strstr(name, "mlp.experts.") != NULL;
}

/* The parameters of one stage's buffer (Muon or not, expert or not) in backprop order: with
 * ep_rank < 0 the stage's dense buffer, whose experts (when they share it: EP 1, ETP = TP) form
 * Megatron's expert buffer of the DP group; with ep_rank >= 0 the expert buffer of that EP rank,
 * dealt over its expert-DP group. */
static size_t stage_buffer(const cz_plan *plan, int stage, int ep_rank, int muon, int expert,
                           int *ids)
{
    size_t n = 0;
    for (size_t k = plan->nparams; k-- > 0;) {
        const cz_plan_param *p = &plan->params[k];
        if (p->stage != stage || (p->def.kind == CZ_KIND_MATRIX) != muon)
            continue;
        if (ep_rank < 0 ? p->expert || cz__megatron_is_expert(p->def.name) != expert
                        : !p->expert || p->ep_rank != ep_rank || !expert)
            continue;
        ids[n++] = (int)k;
    }
    return n;
}

int cz__megatron_lw_stage(const cz_plan *plan, int stage, int *owner, int64_t *bucket_sizes,
                          size_t *nbuckets, cz_error *err)
{
    return cz__megatron_lw_domain(plan, stage, -1, owner, bucket_sizes, nbuckets, err);
}

int cz__megatron_lw_domain(const cz_plan *plan, int stage, int ep_rank, int *owner,
                           int64_t *bucket_sizes, size_t *nbuckets, cz_error *err)
{
    int rc = CZ_OK;
    int ranks = ep_rank >= 0 ? plan->edp : plan->dp;
    size_t cap = plan->nparams + 1;
    int *ids = malloc(cap * sizeof *ids), *shard = malloc(cap * sizeof *shard);
    int64_t *numel = malloc(cap * sizeof *numel);
    double *cost = malloc(cap * sizeof *cost);
    *nbuckets = 0;
    if (!ids || !shard || !numel || !cost) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory in Megatron's layer-wise layout");
        goto done;
    }
    /* Buffers in Megatron's order does not matter here: each is laid out on its own. */
    for (int buf = 0; buf < 4; buf++) {
        int muon = buf < 2, expert = buf % 2;
        size_t n = stage_buffer(plan, stage, ep_rank, muon, expert, ids), nb = 0;
        if (n == 0)
            continue;
        for (size_t k = 0; k < n; k++) {
            const cz_plan_param *p = &plan->params[ids[k]];
            numel[k] = p->numel;
            cost[k] = p->def.ndim == 2 ? cz__megatron_ns_cost(p->local_shape[0], p->local_shape[1])
                                       : (double)p->numel;
        }
        if (muon) {
            rc = cz__megatron_lw_layout(numel, cost, n, ranks, plan->bucket_size, shard,
                                        bucket_sizes + *nbuckets, &nb, err);
            if (rc != CZ_OK)
                goto done;
            for (size_t k = 0; owner && k < n; k++)
                owner[ids[k]] = shard[k];
        } else {
            cz__megatron_zero1_buckets(numel, n, ranks, plan->bucket_size, bucket_sizes + *nbuckets,
                                       &nb);
        }
        *nbuckets += nb;
    }
done:
    free(ids);
    free(shard);
    free(numel);
    free(cost);
    return rc;
}
