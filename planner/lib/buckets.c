/*
 * Gradient bucket layout, as Megatron builds it: per pipeline stage, parameters fill the buffer
 * in reverse registration order (gradients become ready from the last layer backwards); each
 * parameter's local shard starts at a multiple of `align` elements; a bucket closes as soon as it
 * holds at least `size` elements (the parameter that crosses the size stays in it); each bucket is
 * padded at its end to a multiple of dp so that an even reduce-scatter is possible.
 *
 * In the split layout (the paper's reference code) each stage has two buffers, bucketed
 * separately: the elementwise parameters' first, then the matrix parameters'. With expert
 * groups (Megatron-Core's expert parallelism) the routed experts of each EP rank have a buffer of
 * their own, after the dense one, padded to multiples of the expert-DP size: the expert
 * parameters of a split-layout plan stay whole in it (the reference code has no experts).
 *
 * Alignment is relative to the bucket's start: offsets in the plan are bucket-relative, so a
 * bucket is self-contained (its start in the stage buffer is a multiple of dp, not of align).
 */
#include "cz_algorithms.h"

#include <stdbool.h>
#include <stdlib.h>

/* *out = v rounded up to a multiple of m (v >= 0); false when that does not fit in int64_t.
 * The layout also runs on plans read from files (validate recomputes it), whose sizes only the
 * reader bounds, so every step is checked instead of trusting the model loader's limits. */
static bool round_up(int64_t v, int64_t m, int64_t *out)
{
    if (m <= 1) {
        *out = v;
        return true;
    }
    int64_t r = v % m;
    if (r == 0) {
        *out = v;
        return true;
    }
    return !__builtin_add_overflow(v, m - r, out);
}

static int layout_overflow(const cz_plan *plan, int stage, const cz_plan_param *p, cz_error *err)
{
    return cz__error_set(err, CZ_EINVALID,
                         "the gradient buffer of pipeline stage %d exceeds 2^63 elements at "
                         "parameter %s (%lld elements, bucket align %lld, dp %d)",
                         stage, p->def.name ? p->def.name : "?", (long long)p->numel,
                         (long long)plan->bucket_align, plan->dp);
}

/* Which parameters a layout pass takes, and how it marks its buckets: the dense buffer's (of
 * one kind in the split layout), or the expert buffer of one EP rank. */
typedef struct pass_filter {
    int kind;        /* -1: every kind */
    int elementwise; /* the buckets' mark */
    int expert;      /* 0: dense parameters; 1: the experts of EP rank ep_rank */
    int ep_rank;
} pass_filter;

static bool pass_takes(const pass_filter *f, const cz_plan_param *p)
{
    if (p->expert != f->expert || (f->expert && p->ep_rank != f->ep_rank))
        return false;
    return f->kind < 0 || (int)p->def.kind == f->kind;
}

static int bucket_push(cz_plan *plan, size_t *cap, int stage, int64_t offset, int64_t size,
                       const pass_filter *f, cz_error *err)
{
    if (plan->nbuckets == *cap) {
        size_t ncap = *cap ? 2 * *cap : 8;
        cz_plan_bucket *nb = realloc(plan->buckets, ncap * sizeof *nb);
        if (!nb)
            return cz__error_set(err, CZ_ENOMEM, "out of memory laying out buckets");
        plan->buckets = nb;
        *cap = ncap;
    }
    cz_plan_bucket *b = &plan->buckets[plan->nbuckets];
    b->id = (int)plan->nbuckets;
    b->stage = stage;
    b->offset = offset;
    b->size = size;
    b->elementwise = f->elementwise;
    b->expert = f->expert;
    b->ep_rank = f->expert ? f->ep_rank : 0;
    b->ranges = calloc(2 * (size_t)cz_plan_bucket_nranks(plan, b), sizeof *b->ranges);
    if (!b->ranges)
        return cz__error_set(err, CZ_ENOMEM, "out of memory laying out buckets");
    plan->nbuckets++;
    return CZ_OK;
}

/* Lays out the parameters of one stage that the filter takes into buckets from *start on, in
 * reverse registration order, each padded to a multiple of the size of the group that
 * partitions it (DP, or expert-DP for an expert buffer). */
static int layout_pass(cz_plan *plan, size_t *cap, int stage, const pass_filter *f,
                       const cz_domain_index *ix, int64_t *start, cz_error *err)
{
    int rc = CZ_OK;
    int64_t nranks = f->expert ? plan->edp : plan->dp;
    int64_t size = plan->bucket_size > 0 ? plan->bucket_size : 1;
    int64_t align = plan->bucket_align > 0 ? plan->bucket_align : 1;
    int64_t used = 0; /* elements used in the open bucket */
    int open = 0;
    const cz_plan_param *last = NULL;
    /* The buffer's own parameters only (the index keeps them in registration order). */
    int d = cz__domain_index_of(ix, stage, f->expert, f->ep_rank);
    int lo = d >= 0 ? ix->pfirst[d] : 0, hi = d >= 0 ? ix->pfirst[d + 1] : 0;
    for (int j = hi; j-- > lo;) {
        cz_plan_param *p = &plan->params[ix->params[j]];
        if (p->stage != stage || !pass_takes(f, p))
            continue;
        int64_t off, padded;
        last = p;
        if (!round_up(used, align, &off) || __builtin_add_overflow(off, p->numel, &used))
            return layout_overflow(plan, stage, p, err);
        p->offset = off;
        p->bucket = (int)plan->nbuckets;
        open = 1;
        if (used >= size) {
            if (!round_up(used, nranks, &padded) || *start > INT64_MAX - padded)
                return layout_overflow(plan, stage, p, err);
            if ((rc = bucket_push(plan, cap, stage, *start, padded, f, err)) != CZ_OK)
                return rc;
            *start += padded;
            used = 0;
            open = 0;
        }
    }
    if (open) {
        int64_t padded;
        if (!round_up(used, nranks, &padded) || *start > INT64_MAX - padded)
            return layout_overflow(plan, stage, last, err);
        if ((rc = bucket_push(plan, cap, stage, *start, padded, f, err)) != CZ_OK)
            return rc;
        *start += padded;
    }
    return CZ_OK;
}

int cz__buckets_layout(cz_plan *plan, cz_error *err)
{
    int rc = CZ_OK;
    size_t cap = 0;
    for (size_t i = 0; i < plan->nbuckets; i++)
        free(plan->buckets[i].ranges);
    free(plan->buckets);
    plan->buckets = NULL;
    plan->nbuckets = 0;
    cz_domain_index ix;
    if ((rc = cz__domain_index_build(&ix, plan, err)) != CZ_OK)
        return rc;
    for (int stage = 0; stage < plan->pp; stage++) {
        int64_t start = 0; /* the next bucket's start in the stage's buffer */
        if (plan->settings.layout == CZ_LAYOUT_SPLIT) {
            /* The reference code's DDP allocates the ordinary (dense) buffer first, then the
             * matrix-optimizer buffer; each is bucketed on its own, so a bucket never mixes the
             * two. Here the two follow each other in the stage's buffer. */
            pass_filter ew = {CZ_KIND_ELEMENTWISE, 1, 0, 0}, mx = {CZ_KIND_MATRIX, 0, 0, 0};
            if ((rc = layout_pass(plan, &cap, stage, &ew, &ix, &start, err)) != CZ_OK ||
                (rc = layout_pass(plan, &cap, stage, &mx, &ix, &start, err)) != CZ_OK)
                goto done;
        } else {
            pass_filter all = {-1, 0, 0, 0};
            if ((rc = layout_pass(plan, &cap, stage, &all, &ix, &start, err)) != CZ_OK)
                goto done;
        }
        /* Megatron-Core's DDP gives the expert-parallel parameters a buffer of their own (its
         * BufferKey has is_expert_parallel), bucketed with the same bucket size and reduced over
         * the expert-data-parallel group; each EP rank holds the buffer of its own experts. */
        for (int e = 0; cz_plan_has_experts(plan) && e < plan->ep; e++) {
            pass_filter ex = {-1, 0, 1, e};
            int64_t estart = 0;
            if ((rc = layout_pass(plan, &cap, stage, &ex, &ix, &estart, err)) != CZ_OK)
                goto done;
        }
    }
    /* What every partitioner relies on: each parameter lies inside a bucket of its own stage. */
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        CZ_ASSERT_GOTO(p->bucket >= 0 && (size_t)p->bucket < plan->nbuckets, err, rc, done);
        const cz_plan_bucket *b = &plan->buckets[p->bucket];
        CZ_ASSERT_GOTO(b->stage == p->stage && b->size >= 0, err, rc, done);
        CZ_ASSERT_GOTO(p->offset >= 0 && p->offset <= b->size - p->numel, err, rc, done);
    }
done:
    cz__domain_index_free(&ix);
    return rc;
}
