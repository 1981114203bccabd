/*
 * The structural rules of a plan: everything a plan must satisfy that needs neither the model
 * nor the cluster it was made for. `canzona validate` runs them (and then compares the plan with
 * the model and cluster), and so does the executor's plan check before it runs a plan: one
 * checker, so that the executor refuses every plan validate refuses for a structural reason.
 * What only the model can tell (a matrix turned elementwise, blocks reordered, tp_dim changed) is
 * protected by the plan's content hash instead (plan_io.c).
 *
 * Every check is safe on any plan the reader accepts and on hand-built ones: indices are checked
 * before use, and sums and products of the int64 values a file may hold saturate instead of
 * overflowing.
 */
#include "cz_format.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cz_plan_checks vctx;
#define at cz__plan_checks_at
#define viol cz__plan_checks_fail

#define close_rel cz__close_rel

static const char *strategy_name(const cz_plan *p)
{
    const char *n = cz_dp_strategy_name(p->settings.dp);
    return n ? n : "?";
}

#define sat_add cz__i64_sat_add

/* End of a parameter's elements in its bucket (saturated). */
static int64_t param_end(const cz_plan_param *q)
{
    return sat_add(q->offset, q->numel);
}

/* ---- expert groups ---------------------------------------------------------------------- */

static const char *param_name_at(const void *ctx, size_t i)
{
    return ((const cz_plan *)ctx)->params[i].def.name;
}

/* A slice (cz_plan.slice) holds one EP rank's experts of one stage: which EP rank Megatron-Core
 * gives each expert needs all of a layer's experts, so that rule is the whole plan's (validate,
 * and canzona plan before it split the plan); here every expert is a routed expert's parameter
 * and of the slice's own EP rank. */
static int check_slice_experts(vctx *c, const cz_plan *p)
{
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        size_t len;
        long index;
        at(c, "$.params[%zu].ep_rank", i);
        c->checks++;
        if (q->expert &&
            (q->ep_rank != p->slice.ep_rank || !cz__expert_of_name(q->def.name, &len, &index))) {
            viol(c, "param.ep_rank",
                 "'%s' (an expert of EP rank %d) is in the slice of EP rank %d, or is not a "
                 "routed expert",
                 q->def.name, q->ep_rank, p->slice.ep_rank);
            c->unsafe = 1;
        }
    }
    return 0;
}

/* A plan with expert groups: the consumer must know them (c->expert_groups), the expert grid must
 * cover the stage's ranks as Megatron-Core's does, and every routed expert must sit in the
 * expert buffer of the EP rank Megatron-Core gives it (expert e of a layer's E on EP rank
 * e / (E / ep)), every other parameter in the dense buffer. 0 when the rest may be checked. */
static int check_expert_groups(vctx *c, const cz_plan *p)
{
    bool on = p->ep != 0 || p->etp != 0 || p->edp != 0;
    at(c, "$.topology");
    c->checks++;
    if (!on) {
        for (size_t i = 0; i < p->nparams; i++)
            if (p->params[i].expert) {
                at(c, "$.params[%zu].ep_rank", i);
                viol(c, "param.ep_rank",
                     "'%s' is an expert of EP rank %d, but the plan has no expert groups "
                     "($.topology has no ep)",
                     p->params[i].def.name, p->params[i].ep_rank);
                c->unsafe = 1;
                return -1;
            }
        return 0;
    }
    if (!c->expert_groups) {
        at(c, "$.topology.ep");
        viol(c, "topology.expert_groups",
             "the plan has expert groups (EP %d, ETP %d, expert-DP %d: the routed experts in "
             "buffers of their own, partitioned over the expert-data-parallel group), which this "
             "consumer does not run; re-plan with --ep-size 1 and --etp-size equal to the TP size "
             "(%d) to keep the experts in the dense buffer",
             p->ep, p->etp, p->edp, p->tp);
        c->unsafe = 1;
        return -1;
    }
    if (p->ep < 1 || p->etp < 1 || p->edp < 1 ||
        (int64_t)p->ep * p->etp * p->edp != (int64_t)p->tp * p->dp) {
        viol(c, "topology.expert_groups",
             "ETP %d x EP %d x expert-DP %d does not cover the %d x %d ranks of TP x DP: "
             "Megatron-Core lays the expert grid over the same ranks of a stage as the dense one",
             p->etp, p->ep, p->edp, p->tp, p->dp);
        c->unsafe = 1;
        return -1;
    }
    if (p->slice.on)
        return check_slice_experts(c, p);
    size_t n = p->nparams ? p->nparams : 1;
    int *experts = malloc(n * sizeof *experts), *index = malloc(n * sizeof *index);
    cz_error e;
    int rc = 0;
    if (!experts || !index) {
        c->oom = 1;
        rc = -1;
        goto done;
    }
    at(c, "$.params");
    c->checks++;
    if (cz__experts_scan(p->nparams, param_name_at, p, experts, index, "the plan", &e) != CZ_OK) {
        viol(c, "param.ep_rank", "%s", e.message);
        goto done;
    }
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        at(c, "$.params[%zu].ep_rank", i);
        c->checks++;
        if (!experts[i] && q->expert) {
            viol(c, "param.ep_rank",
                 "'%s' has an EP rank but is not a routed expert (Megatron-Core names "
                 "...mlp.experts.local_experts.<e>.*); it belongs to the dense buffer",
                 q->def.name);
            c->unsafe = 1;
        } else if (experts[i] && !q->expert) {
            viol(c, "param.ep_rank",
                 "'%s' is expert %d of %d but has no EP rank: in a plan with expert groups every "
                 "routed expert is in the expert buffer of its EP rank",
                 q->def.name, index[i], experts[i]);
            c->unsafe = 1;
        } else if (experts[i] && experts[i] % p->ep != 0) {
            viol(c, "param.ep_rank",
                 "'%s': its layer has %d experts, which EP %d does not divide (Megatron-Core: "
                 "num_moe_experts %% ep_size == 0)",
                 q->def.name, experts[i], p->ep);
            c->unsafe = 1;
        } else if (experts[i] && q->ep_rank != index[i] / (experts[i] / p->ep)) {
            viol(c, "param.ep_rank",
                 "'%s' is expert %d of %d, which Megatron-Core places on EP rank %d of %d "
                 "(experts %d per rank); the plan says EP rank %d",
                 q->def.name, index[i], experts[i], index[i] / (experts[i] / p->ep), p->ep,
                 experts[i] / p->ep, q->ep_rank);
            c->unsafe = 1;
        }
    }
done:
    free(experts);
    free(index);
    return rc;
}

/* ---- parameters ------------------------------------------------------------------------- */

/* Ids equal indices, and stages exist: the layout walk below visits parameters stage by stage,
 * so one of a stage that does not exist would escape every bucket check. */
static void check_param_ids(vctx *c, const cz_plan *p)
{
    int pp = p->pp > 0 ? p->pp : 1;
    for (size_t i = 0; i < p->nparams; i++) {
        at(c, "$.params[%zu].id", i);
        c->checks++;
        if (p->params[i].id != (int)i) {
            viol(c, "param.id", "id is %d, expected its index %zu", p->params[i].id, i);
            c->unsafe = 1;
        }
        at(c, "$.params[%zu].stage", i);
        c->checks++;
        if (p->params[i].stage < 0 || p->params[i].stage >= pp) {
            viol(c, "param.stage", "'%s': stage %d is outside [0, %d)", p->params[i].def.name,
                 p->params[i].stage, pp);
            c->unsafe = 1;
        }
    }
}

/* Blocks split one dimension of a 2-D matrix into parts that add up to it; the executor shards
 * them one by one, so their number is bounded. */
static void check_param_blocks(vctx *c, const cz_plan *p)
{
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        if (q->def.nblocks == 0)
            continue;
        at(c, "$.params[%zu].blocks", i);
        c->checks++;
        if (q->def.nblocks < 0 || q->def.nblocks > CZ_MAX_BLOCKS) {
            viol(c, "param.blocks", CZ_BLOCKS_LIMIT_FMT, q->def.name, q->def.nblocks,
                 CZ_MAX_BLOCKS);
            c->unsafe = 1;
            continue;
        }
        if (q->def.ndim != 2 || q->def.kind != CZ_KIND_MATRIX || q->def.block_dim < 0 ||
            q->def.block_dim > 1 || !q->def.block_sizes) {
            viol(c, "param.blocks",
                 "'%s': blocks are allowed only on 2-D matrix parameters, along dimension 0 or 1",
                 q->def.name);
            c->unsafe = 1;
            continue;
        }
        int64_t sum = 0;
        int small = -1;
        for (int b = 0; b < q->def.nblocks; b++) {
            if (q->def.block_sizes[b] < 1 && small < 0)
                small = b;
            sum = sat_add(sum, q->def.block_sizes[b]);
        }
        if (small >= 0)
            viol(c, "param.blocks", "'%s': block %d has size %lld; sizes must be >= 1", q->def.name,
                 small, (long long)q->def.block_sizes[small]);
        else if (sum != q->def.shape[q->def.block_dim])
            viol(c, "param.blocks", "'%s': block sizes add up to %lld, not to shape[%d] = %lld",
                 q->def.name, (long long)sum, q->def.block_dim,
                 (long long)q->def.shape[q->def.block_dim]);
    }
}

/* Heads divide the shape and the blocks, and every TP rank of the parameter's group holds whole
 * heads (cz__heads_problem): the executor's per-head Muon relies on it. */
static void check_param_heads(vctx *c, const cz_plan *p)
{
    char why[512];
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        if (q->def.head_size <= 0)
            continue;
        at(c, "$.params[%zu].heads", i);
        c->checks++;
        if (cz__heads_problem(&q->def, cz_plan_param_tp(p, q), why, sizeof why)) {
            viol(c, "param.heads", "%s", why);
            c->unsafe = 1;
        }
    }
}

/* local_shape = shape split tp ways along tp_dim; numel = local element count. */
static void check_param_local(vctx *c, const cz_plan *p)
{
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        int64_t want[2] = {q->def.shape[0], q->def.shape[1]};
        int tp = cz_plan_param_tp(p, q); /* an expert is split over ETP */
        const char *group = q->expert ? "etp" : "tp";
        at(c, "$.params[%zu].local_shape", i);
        c->checks++;
        if (q->def.tp_dim == 0 || q->def.tp_dim == 1) {
            if (tp <= 0 || want[q->def.tp_dim] % tp != 0) {
                viol(c, "param.local_shape",
                     "'%s': dimension %d of size %lld is not divisible by %s = %d", q->def.name,
                     q->def.tp_dim, (long long)want[q->def.tp_dim], group, tp);
                continue;
            }
            want[q->def.tp_dim] /= tp;
        } else if (q->def.tp_dim != -1) {
            viol(c, "param.tp_dim", "'%s': tp_dim %d is not -1, 0 or 1", q->def.name,
                 q->def.tp_dim);
            continue;
        }
        if (q->local_shape[0] != want[0] || q->local_shape[1] != want[1])
            viol(c, "param.local_shape",
                 "'%s': local shape is %lldx%lld, expected %lldx%lld (shape / %s along tp_dim %d)",
                 q->def.name, (long long)q->local_shape[0], (long long)q->local_shape[1],
                 (long long)want[0], (long long)want[1], group, q->def.tp_dim);
        at(c, "$.params[%zu].numel", i);
        c->checks++;
        int64_t local;
        /* The reader lets every dimension up to INT64_MAX through: the product may not fit. */
        if (__builtin_mul_overflow(want[0], want[1], &local)) {
            viol(c, "param.numel", "'%s': the local shape %lldx%lld holds more than %lld elements",
                 q->def.name, (long long)want[0], (long long)want[1], (long long)INT64_MAX);
            c->unsafe = 1;
        } else if (q->numel != local) {
            viol(c, "param.numel", "'%s': numel is %lld, expected %lld local elements", q->def.name,
                 (long long)q->numel, (long long)local);
            c->unsafe = 1;
        }
    }
}

/* ---- bucket layout ---------------------------------------------------------------------- */

/* Which buffer of its stage a bucket is in, in the order of the stage's buffers: the dense one
 * (0), then the expert buffer of each EP rank (1 + its EP rank). */
static long buffer_key(const cz_plan_bucket *k)
{
    return k->expert ? 1 + (long)k->ep_rank : 0;
}

/* Each bucket's id, size, buffer, stage, order and offset. */
static void check_bucket_rules(vctx *c, const cz_plan *p)
{
    for (size_t b = 0; b < p->nbuckets; b++) {
        const cz_plan_bucket *k = &p->buckets[b];
        at(c, "$.buckets[%zu].id", b);
        c->checks++;
        if (k->id != (int)b)
            viol(c, "bucket.id", "bucket id is %d, expected its index %zu", k->id, b);
        int nr = cz_plan_bucket_nranks(p, k);
        at(c, "$.buckets[%zu].size", b);
        c->checks++;
        if (k->size < 0 || (nr > 0 && k->size % nr != 0))
            viol(c, "bucket.size", "size %lld is not a non-negative multiple of %s = %d",
                 (long long)k->size, k->expert ? "edp" : "dp", nr);
        at(c, "$.buckets[%zu].ep_rank", b);
        c->checks++;
        if (k->expert && (!cz_plan_has_experts(p) || k->ep_rank < 0 || k->ep_rank >= p->ep)) {
            viol(c, "bucket.buffer", "an expert buffer's bucket of EP rank %d in a plan with %s",
                 k->ep_rank, cz_plan_has_experts(p) ? "fewer EP ranks" : "no expert groups");
            c->unsafe = 1;
            continue;
        }
        at(c, "$.buckets[%zu].stage", b);
        c->checks++;
        if (k->stage < 0 || k->stage >= (p->pp > 0 ? p->pp : 1)) {
            viol(c, "bucket.stage", "stage %d is outside [0, %d)", k->stage, p->pp);
            c->unsafe = 1;
        }
        /* Buckets of one stage's buffer follow each other in it: the dense buffer, then each
         * EP rank's expert buffer, each from offset 0. */
        const cz_plan_bucket *prev = b > 0 ? &p->buckets[b - 1] : NULL;
        int same = prev && prev->stage == k->stage;
        int64_t want_off = 0;
        if (same && buffer_key(prev) == buffer_key(k))
            want_off = sat_add(prev->offset, prev->size);
        at(c, "$.buckets[%zu].offset", b);
        c->checks++;
        if (prev && prev->stage > k->stage)
            viol(c, "bucket.order", "bucket of stage %d follows one of stage %d", k->stage,
                 prev->stage);
        else if (same && buffer_key(prev) > buffer_key(k))
            viol(c, "bucket.order",
                 "a bucket of the %s buffer follows one of the expert buffer of EP rank %d (a "
                 "stage's dense buffer comes first, then its expert buffers by EP rank)",
                 k->expert ? "expert" : "dense", prev->ep_rank);
        else if (k->offset != want_off)
            viol(c, "bucket.offset",
                 "offset is %lld, expected %lld (buckets of a stage's buffer are contiguous)",
                 (long long)k->offset, (long long)want_off);
    }
}

/* The split layout: per stage the elementwise buffer's buckets, then the matrix buffer's; a
 * unified plan has no elementwise buckets. */
static void check_split_buffers(vctx *c, const cz_plan *p)
{
    int split = p->settings.layout == CZ_LAYOUT_SPLIT;
    for (size_t b = 0; b < p->nbuckets; b++) {
        const cz_plan_bucket *k = &p->buckets[b];
        at(c, "$.buckets[%zu].buffer", b);
        c->checks++;
        if (k->elementwise && k->expert)
            viol(c, "bucket.buffer",
                 "a bucket of an expert buffer marked elementwise (experts "
                 "stay whole in their buffer, in every layout)");
        else if (k->elementwise && !split)
            viol(c, "bucket.buffer", "an elementwise-buffer bucket in a plan whose layout is %s",
                 cz_layout_name(p->settings.layout) ? cz_layout_name(p->settings.layout) : "?");
        else if (k->elementwise && b > 0 && p->buckets[b - 1].stage == k->stage &&
                 !p->buckets[b - 1].elementwise)
            viol(c, "bucket.buffer",
                 "an elementwise-buffer bucket follows a matrix-buffer bucket of stage %d (the "
                 "split layout puts a stage's elementwise buffer first)",
                 k->stage);
    }
}

/* Walk each stage's parameters in fill order (reverse id), each buffer on its own: positions
 * must increase, start aligned, and not overlap. The dense passes first (one, or one per kind
 * in the split layout), then one per EP rank's expert buffer. */
static void check_param_placement(vctx *c, const cz_plan *p)
{
    int split = p->settings.layout == CZ_LAYOUT_SPLIT;
    int pp = p->pp > 0 ? p->pp : 1, dense = split ? 2 : 1;
    int ep = cz_plan_has_experts(p) ? p->ep : 0;
    for (int pass = 0; pass < (dense + ep) * pp; pass++) {
        int s = pass % pp, which = pass / pp;
        int want_kind = which < dense && split ? which : -1, want_ep = which - dense;
        long prev_b = -1;
        int64_t prev_end = 0;
        size_t prev_i = 0;
        for (size_t j = p->nparams; j-- > 0;) {
            const cz_plan_param *q = &p->params[j];
            if (q->stage != s || (want_kind >= 0 && (int)q->def.kind != want_kind))
                continue;
            if (want_ep >= 0 ? !q->expert || q->ep_rank != want_ep : q->expert)
                continue;
            at(c, "$.params[%zu].bucket", j);
            c->checks++;
            if (q->bucket < 0 || (size_t)q->bucket >= p->nbuckets) {
                viol(c, "param.bucket", "'%s': bucket %d does not exist (%zu buckets)", q->def.name,
                     q->bucket, p->nbuckets);
                c->unsafe = 1;
                continue;
            }
            const cz_plan_bucket *k = &p->buckets[q->bucket];
            if (k->stage != s) {
                viol(c, "param.bucket", "'%s' (stage %d) is in bucket %d of stage %d", q->def.name,
                     s, q->bucket, k->stage);
                c->unsafe = 1;
                continue;
            }
            if (k->expert != q->expert || (q->expert && k->ep_rank != q->ep_rank)) {
                if (q->expert)
                    viol(c, "param.bucket",
                         "'%s' (an expert of EP rank %d) is in bucket %d, which is not of that "
                         "EP rank's expert buffer",
                         q->def.name, q->ep_rank, q->bucket);
                else
                    viol(c, "param.bucket",
                         "'%s' (a dense parameter) is in bucket %d of the expert buffer of EP "
                         "rank %d",
                         q->def.name, q->bucket, k->ep_rank);
                c->unsafe = 1;
                continue;
            }
            /* The executor runs AdamW on the pieces of the elementwise buffer and the matrix
             * pipeline on whole owned matrices: a parameter in the other buffer breaks both. */
            if (split && !q->expert && k->elementwise != (q->def.kind == CZ_KIND_ELEMENTWISE)) {
                viol(c, "param.bucket", "'%s' (%s) is in bucket %d of the %s buffer", q->def.name,
                     cz__kind_name(q->def.kind) ? cz__kind_name(q->def.kind) : "?", q->bucket,
                     k->elementwise ? "elementwise" : "matrix");
                c->unsafe = 1;
                continue;
            }
            at(c, "$.params[%zu].offset", j);
            c->checks += 3;
            if (q->offset < 0 || q->numel < 0 || param_end(q) > k->size) {
                viol(c, "param.offset", "'%s': [%lld, %lld) is not inside bucket %d of size %lld",
                     q->def.name, (long long)q->offset, (long long)param_end(q), q->bucket,
                     (long long)k->size);
                c->unsafe = 1;
            }
            if (p->bucket_align > 0 && q->offset % p->bucket_align != 0)
                viol(c, "param.offset", "'%s': offset %lld is not a multiple of the alignment %lld",
                     q->def.name, (long long)q->offset, (long long)p->bucket_align);
            if (q->bucket < prev_b)
                viol(c, "bucket.order",
                     "'%s' is in bucket %d but '%s', registered after it, is in later bucket %ld "
                     "(buckets fill in reverse order)",
                     q->def.name, q->bucket, p->params[prev_i].def.name, prev_b);
            else if (q->bucket == prev_b && q->offset < prev_end)
                viol(c, "param.offset",
                     "'%s' at %lld overlaps or precedes '%s' (ends at %lld), registered after it "
                     "(reverse fill order)",
                     q->def.name, (long long)q->offset, p->params[prev_i].def.name,
                     (long long)prev_end);
            if (q->bucket != prev_b)
                prev_end = 0;
            prev_b = q->bucket;
            prev_end = param_end(q);
            prev_i = j;
        }
    }
}

/* Rules checked directly, without the planner's layout code. */
static void check_layout_rules(vctx *c, const cz_plan *p)
{
    check_bucket_rules(c, p);
    check_split_buffers(c, p);
    check_param_placement(c, p);
}

/* ---- DP ranges and ownership -------------------------------------------------------------- */

static void check_ranges(vctx *c, const cz_plan *p)
{
    for (size_t b = 0; b < p->nbuckets; b++) {
        const cz_plan_bucket *k = &p->buckets[b];
        int nr = cz_plan_bucket_nranks(p, k);
        const char *who = k->expert ? "expert-DP rank" : "DP rank";
        at(c, "$.buckets[%zu].ranges", b);
        c->checks++;
        if (!k->ranges) {
            viol(c, "bucket.ranges", "bucket has no ranges, expected %d", nr);
            c->unsafe = 1;
            continue;
        }
        for (int r = 0; r < nr; r++) {
            int64_t s = k->ranges[2 * r], e = k->ranges[2 * r + 1];
            int64_t want = r == 0 ? 0 : k->ranges[2 * r - 1];
            at(c, "$.buckets[%zu].ranges[%d]", b, r);
            c->checks += 2;
            if (s != want)
                viol(c, "bucket.ranges", "range of %s %d starts at %lld, expected %lld (%s)", who,
                     r, (long long)s, (long long)want,
                     r == 0 ? "ranges cover the bucket from 0" : "ranges are contiguous");
            if (e < s)
                viol(c, "bucket.ranges", "range of %s %d is [%lld, %lld): end before start", who, r,
                     (long long)s, (long long)e);
            if (r == nr - 1 && e != k->size)
                viol(c, "bucket.ranges", "last range ends at %lld but the bucket's size is %lld",
                     (long long)e, (long long)k->size);
            /* ZeRO-1's slices: every rank the same share of the elementwise buffer. */
            if (k->elementwise && p->dp > 0 && e - s != k->size / p->dp) {
                c->checks++;
                viol(c, "bucket.ranges",
                     "range of DP rank %d in the elementwise buffer is [%lld, %lld), expected "
                     "the even slice [%lld, %lld)",
                     r, (long long)s, (long long)e, (long long)(k->size / p->dp * r),
                     (long long)(k->size / p->dp * (r + 1)));
            }
        }
    }
}

/* The DP rank whose range of bucket k holds position x, or -1. */
static int range_rank(const cz_plan *p, const cz_plan_bucket *k, int64_t x)
{
    for (int r = 0; r < cz_plan_bucket_nranks(p, k); r++)
        if (x >= k->ranges[2 * r] && x < k->ranges[2 * r + 1])
            return r;
    return -1;
}

static int param_in_range(const cz_plan *p, const cz_plan_param *q, int r)
{
    const cz_plan_bucket *k = &p->buckets[q->bucket];
    return q->offset >= k->ranges[2 * r] && param_end(q) <= k->ranges[2 * r + 1];
}

static int param_intersects(const cz_plan *p, const cz_plan_param *q, int r)
{
    const cz_plan_bucket *k = &p->buckets[q->bucket];
    return q->offset < k->ranges[2 * r + 1] && param_end(q) > k->ranges[2 * r] && q->numel > 0;
}

/* In a bucket with ranges, inside it, and the bucket of its own kind (an expert's ranges are one
 * per expert-DP rank, a dense parameter's one per DP rank). */
static int param_placed(const cz_plan *p, const cz_plan_param *q)
{
    return q->bucket >= 0 && (size_t)q->bucket < p->nbuckets && p->buckets[q->bucket].ranges &&
           p->buckets[q->bucket].expert == q->expert && q->offset >= 0 &&
           param_end(q) <= p->buckets[q->bucket].size;
}

static void check_ownership(vctx *c, const cz_plan *p)
{
    int even = p->settings.dp == CZ_DP_EVEN;
    int atomic = !even && p->settings.dp != CZ_DP_LAYERWISE;
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        at(c, "$.params[%zu].dp_owner", i);
        c->checks++;
        if (!even && cz_plan_param_fragmented(p, q)) {
            /* The split layout's elementwise buffer: every rank updates its piece. */
            if (q->dp_owner != -1) {
                viol(c, "param.dp_owner",
                     "'%s': dp_owner is %d, expected -1 (an elementwise parameter of the split "
                     "layout is cut between the DP ranks' even slices)",
                     q->def.name, q->dp_owner);
                c->unsafe = 1;
            }
            continue;
        }
        int nr = q->expert ? p->edp : p->dp; /* an expert's owner is an expert-DP rank */
        if (q->dp_owner < -1 || q->dp_owner >= nr || (q->dp_owner == -1 && !even)) {
            viol(c, "param.dp_owner", "'%s': dp_owner %d is outside [0, %d)%s", q->def.name,
                 q->dp_owner, nr,
                 even ? " and not -1"
                      : " (-1 only under the even strategy and for the split layout's "
                        "elementwise parameters)");
            c->unsafe = 1;
            continue;
        }
        if (!param_placed(p, q) || (!atomic && !(even && q->dp_owner >= 0)))
            continue;
        c->checks++;
        if (param_in_range(p, q, q->dp_owner))
            continue;
        const cz_plan_bucket *k = &p->buckets[q->bucket];
        int first = range_rank(p, k, q->offset);
        int last = range_rank(p, k, sat_add(param_end(q), -1));
        if (first >= 0 && first == last) {
            viol(c, "atomicity",
                 "'%s' [%lld, %lld) of bucket %d lies in DP rank %d's range but its dp_owner is %d "
                 "(range [%lld, %lld))",
                 q->def.name, (long long)q->offset, (long long)param_end(q), q->bucket, first,
                 q->dp_owner, (long long)k->ranges[2 * q->dp_owner],
                 (long long)k->ranges[2 * q->dp_owner + 1]);
        } else {
            at(c, "$.params[%zu]", i);
            char who[64];
            if (first >= 0 && last >= 0)
                snprintf(who, sizeof who, "the ranges of DP ranks %d..%d", first, last);
            else
                snprintf(who, sizeof who, "a position no DP range covers");
            viol(c, "atomicity",
                 "'%s' [%lld, %lld) of bucket %d spans %s (see $.buckets[%d].ranges); under %s "
                 "every parameter lies wholly in its dp_owner's range",
                 q->def.name, (long long)q->offset, (long long)param_end(q), q->bucket, who,
                 q->bucket, strategy_name(p));
        }
    }
}

/* ---- TP schedules ------------------------------------------------------------------------ */

/* Where a task is being checked: rank schedule k (stage s, DP rank r — for an expert schedule
 * (expert 1) its expert-DP rank, e its EP rank), group g, task t; root names the schedule array
 * in paths. */
typedef struct task_at {
    size_t k;
    int s, r, g, t, nslots;
    int expert, e;
    const char *root;
} task_at;

/* Whether the rank of w must schedule parameter q. */
static int expected_on(const cz_plan *p, const cz_plan_param *q, const task_at *w)
{
    if (q->def.kind != CZ_KIND_MATRIX || q->stage != w->s || q->expert != w->expert ||
        (w->expert && q->ep_rank != w->e))
        return 0;
    if (p->settings.dp == CZ_DP_EVEN)
        return param_placed(p, q) && param_intersects(p, q, w->r);
    return q->dp_owner == w->r;
}

/* "DP rank 3" or "the expert rank of EP rank 1, expert-DP rank 0", for messages. */
static const char *rank_text(char *buf, size_t n, const task_at *w)
{
    if (w->expert)
        snprintf(buf, n, "the expert rank of EP rank %d, expert-DP rank %d", w->e, w->r);
    else
        snprintf(buf, n, "DP rank %d", w->r);
    return buf;
}

/* Scratch of the schedule check: per parameter where it was first scheduled in the rank being
 * checked (group, slot, position; group -1: not yet) and which of its blocks were (all bits: the
 * whole matrix); per slot the summed cost and the position of the next task. */
typedef struct sched_seen {
    int *g, *t, *s;
    uint64_t *b;
    double *load;
    int *pos;
    int *touched; /* the parameters whose g was set in this rank, to reset after it */
    size_t ntouched;
} sched_seen;

/* A cooperative task's shape: a 2-D matrix whose long side gives every member a slice, and a
 * Gram panel count the executor can run. 0 when the task may be used further. */
static int check_coop_shape(vctx *c, const cz_plan_group *gr, const cz_plan_param *q,
                            const task_at *w, int block, int width)
{
    int pid = gr->task_param[w->t];
    c->checks++;
    /* Each member holds a slice of the long side: a slice must not be empty. */
    int64_t r0, c0, rows, cols;
    cz_task_region(&q->def, block, &r0, &c0, &rows, &cols);
    int64_t longside = rows > cols ? rows : cols;
    if (q->def.ndim != 2 || longside < width) {
        viol(c, "schedule.coop",
             "'%s' (id %d)%s: a cooperative task of width %d needs a 2-D matrix "
             "whose long side has at least %d rows or columns; it is %lldx%lld",
             q->def.name, pid, block >= 0 ? " (a block of it)" : "", width, width, (long long)rows,
             (long long)cols);
        c->unsafe = 1;
        return -1;
    }
    /* Every panel is a run of the Gram's rows, and the executor holds CZ_COOP_MAX_PANELS
     * all-reduce requests per batch. */
    c->checks++;
    int panels = cz_group_task_panels(gr, w->t);
    int64_t a = rows < cols ? rows : cols;
    int64_t most = a < CZ_COOP_MAX_PANELS ? a : CZ_COOP_MAX_PANELS;
    if (panels > most) {
        viol(c, "schedule.coop", "'%s' (id %d)%s: %d Gram panels; a %lldx%lld task has 1 to %lld",
             q->def.name, pid, block >= 0 ? " (a block of it)" : "", panels, (long long)rows,
             (long long)cols, (long long)most);
        c->unsafe = 1;
        return -1;
    }
    return 0;
}

/* What a task may be: a matrix of the plan, a block it has, split or cooperative only under
 * Muon, a cooperative task one matrix of a fitting shape, panels only when cooperative. 0 when
 * the task may be counted as scheduled. */
static int check_task_kind(vctx *c, const cz_plan *p, const cz_plan_group *gr,
                           const cz_plan_param *q, const task_at *w, int block, int width)
{
    int pid = gr->task_param[w->t];
    c->checks += 3;
    if (q->def.kind != CZ_KIND_MATRIX) {
        viol(c, "schedule.elementwise", "'%s' (id %d) is elementwise and must not be scheduled",
             q->def.name, pid);
        return -1;
    }
    if (block >= q->def.nblocks || (block >= 0 && !q->def.block_sizes)) {
        viol(c, "schedule.block", "'%s' (id %d) has %d blocks; the task names block %d",
             q->def.name, pid, q->def.nblocks, block);
        c->unsafe = 1;
        return -1;
    }
    if ((block >= 0 || width > 1) && p->settings.optimizer != CZ_OPTIM_MUON) {
        viol(c, "schedule.split",
             "'%s' (id %d): block and cooperative tasks run under Muon only; the "
             "plan's optimizer is %s",
             q->def.name, pid, cz_optimizer_name(p->settings.optimizer));
        c->unsafe = 1;
        return -1;
    }
    if (cz_task_is_local(&q->def, width)) {
        /* A per-head matrix's task over several slots is TP-local: it must be one whose every
         * member holds the whole heads it computes (the whole group, heads along tp_dim). */
        c->checks++;
        int tp = cz_plan_param_tp(p, q);
        if (!cz_task_local_fits(&q->def, block, width, tp) || gr->task_slot[w->t] != 0) {
            viol(c, "schedule.local",
                 "'%s' (id %d)%s: a per-head matrix's task of width %d is TP-local, which needs "
                 "all %d TP slots from slot 0, the heads along the TP dimension (heads dim %d, "
                 "tp_dim %d) and one block or a matrix without blocks",
                 q->def.name, pid, block >= 0 ? " (a block of it)" : "", width, tp, q->def.head_dim,
                 q->def.tp_dim);
            c->unsafe = 1;
            return -1;
        }
        return 0;
    }
    if (width > 1 && (block < 0 && q->def.nblocks > 0)) {
        viol(c, "schedule.coop",
             "'%s' (id %d): a cooperative task is one matrix (a block, or a matrix "
             "without blocks); this one is the whole of %d blocks",
             q->def.name, pid, q->def.nblocks);
        c->unsafe = 1;
        return -1;
    }
    if (width > 1)
        return check_coop_shape(c, gr, q, w, block, width);
    if (cz_group_task_panels(gr, w->t) != 1) {
        c->checks++;
        viol(c, "schedule.coop",
             "'%s' (id %d): a hosted task records %d Gram panels (only a cooperative "
             "task's Gram is all-reduced in panels)",
             q->def.name, pid, cz_group_task_panels(gr, w->t));
    }
    return 0;
}

/* One task of a group: its slots, its parameter, what it may be, that it is scheduled once and
 * on its owner's rank; adds its cost to its slots' loads. */
static void check_task(vctx *c, const cz_plan *p, const cz_plan_group *gr, const task_at *w,
                       sched_seen *seen)
{
    int t = w->t, pid = gr->task_param[t], slot = gr->task_slot[t];
    int width = cz_group_task_width(gr, t);
    int block = cz_group_task_block(gr, t);
    double cost = gr->task_cost ? gr->task_cost[t] : NAN;
    c->checks++;
    if (slot < 0 || slot >= w->nslots || width < 1 || w->nslots % width != 0 || slot % width != 0) {
        at(c, "$.%s[%zu].groups[%d].slots", w->root, w->k, w->g);
        viol(c, "schedule.slots",
             "task %d is on slot %d with width %d of %d slots (a cooperative task "
             "spans an aligned set of slots, its width dividing their number)",
             t, slot, width, w->nslots);
        c->unsafe = 1;
        return;
    }
    at(c, "$.%s[%zu].groups[%d].slots[%d][%d]", w->root, w->k, w->g, slot, seen->pos[slot]);
    for (int x = slot; x < slot + width; x++)
        seen->pos[x]++;
    if (pid < 0 || (size_t)pid >= p->nparams) {
        viol(c, "schedule.param", "parameter id %d does not exist (%zu parameters)", pid,
             p->nparams);
        c->unsafe = 1;
        return;
    }
    const cz_plan_param *q = &p->params[pid];
    if (!gr->task_cost || !(block >= 0 || width > 1))
        cost = q->cost;
    for (int x = slot; x < slot + width; x++)
        seen->load[x] += cost;
    if (check_task_kind(c, p, gr, q, w, block, width) != 0)
        return;
    /* Each matrix is scheduled whole once, or block by block, each block once. */
    uint64_t bit = block < 0 ? ~(uint64_t)0 : (uint64_t)1 << block;
    if (seen->g[pid] >= 0 && (seen->b[pid] & bit)) {
        viol(c, "schedule.duplicate",
             "'%s' (id %d)%s is scheduled again; first in "
             "$.%s[%zu].groups[%d].slots[%d][%d]",
             q->def.name, pid, block >= 0 ? " (a block of it)" : "", w->root, w->k, seen->g[pid],
             seen->s[pid], seen->t[pid]);
        return;
    }
    if (seen->g[pid] < 0) {
        seen->g[pid] = w->g, seen->s[pid] = slot, seen->t[pid] = seen->pos[slot] - 1;
        seen->touched[seen->ntouched++] = pid;
    }
    seen->b[pid] |= bit;
    if (!expected_on(p, q, w)) {
        char who[96];
        viol(c, "schedule.foreign",
             "'%s' (id %d, stage %d, dp_owner %d%s) does not belong to stage %d %s", q->def.name,
             pid, q->stage, q->dp_owner, q->expert ? ", an expert" : "", w->s,
             rank_text(who, sizeof who, w));
    }
}

/* One micro-group: its id and slot count, each task, and each slot's recorded load. */
static void check_group(vctx *c, const cz_plan *p, const cz_plan_group *gr, task_at w,
                        sched_seen *seen)
{
    at(c, "$.%s[%zu].groups[%d].id", w.root, w.k, w.g);
    c->checks++;
    if (gr->id != w.g)
        viol(c, "schedule.group", "group id is %d, expected its index %d", gr->id, w.g);
    at(c, "$.%s[%zu].groups[%d].slots", w.root, w.k, w.g);
    c->checks++;
    if (gr->nslots != w.nslots) {
        viol(c, "schedule.slots", "group has %d slots, expected %d (%s)", gr->nslots, w.nslots,
             w.nslots == 1
                 ? (w.expert ? "one slot under sc or etp = 1" : "one slot under sc or tp = 1")
                 : (w.expert ? "one per ETP rank" : "one per TP rank"));
        c->unsafe = 1;
        return;
    }
    for (int x = 0; x < w.nslots; x++)
        seen->load[x] = 0.0, seen->pos[x] = 0;
    for (w.t = 0; w.t < gr->ntasks; w.t++)
        check_task(c, p, gr, &w, seen);
    for (int x = 0; x < w.nslots; x++) {
        at(c, "$.%s[%zu].groups[%d].load[%d]", w.root, w.k, w.g, x);
        c->checks++;
        if (!gr->load || !close_rel(gr->load[x], seen->load[x]))
            viol(c, "schedule.load", "slot load is %.17g but its tasks' costs sum to %.17g",
                 gr->load ? gr->load[x] : NAN, seen->load[x]);
    }
}

/* Every matrix the rank owns is in its schedule, whole or every block of it: the n parameters
 * of ids (the rank's own, from the owner index), or with ids NULL every parameter it must
 * schedule. */
static void check_rank_coverage(vctx *c, const cz_plan *p, const task_at *w, const sched_seen *seen,
                                const int *ids, size_t n)
{
    char who[96];
    at(c, "$.%s[%zu]", w->root, w->k);
    rank_text(who, sizeof who, w);
    for (size_t j = 0; j < (ids ? n : p->nparams); j++) {
        size_t i = ids ? (size_t)ids[j] : j;
        const cz_plan_param *q = &p->params[i];
        if (!expected_on(p, q, w))
            continue;
        c->checks++;
        int nb = q->def.nblocks > 0 && q->def.nblocks <= 64 ? q->def.nblocks : 0;
        uint64_t all = nb == 64 ? ~(uint64_t)0 : ((uint64_t)1 << nb) - 1;
        if (seen->g[i] < 0)
            viol(c, "schedule.missing",
                 "matrix parameter '%s' ($.params[%zu]) of %s is in no micro-group of its "
                 "schedule",
                 q->def.name, i, who);
        else if (seen->b[i] != ~(uint64_t)0 && (seen->b[i] & all) != all)
            viol(c, "schedule.missing",
                 "matrix parameter '%s' ($.params[%zu]) of %s is scheduled block by block, but "
                 "not all of its %d blocks are",
                 q->def.name, i, who, nb);
    }
}

/* Which rank schedule parameter q must be in under an atomic strategy: its (stage, DP rank)'s,
 * or for an expert its (stage, EP rank, expert-DP rank)'s index; -1 for none (elementwise, or
 * an owner outside the grid, which check_ownership reports). */
static long owner_key(const cz_plan *p, const cz_plan_param *q, int expert)
{
    if (q->def.kind != CZ_KIND_MATRIX || q->expert != expert || q->stage < 0 || q->stage >= p->pp ||
        q->dp_owner < 0)
        return -1;
    if (!expert)
        return q->dp_owner < p->dp ? (long)q->stage * p->dp + q->dp_owner : -1;
    if (q->ep_rank < 0 || q->ep_rank >= p->ep || q->dp_owner >= p->edp)
        return -1;
    return (long)cz_plan_expert_rank(p, q->stage, q->ep_rank, q->dp_owner);
}

/* The parameters each rank schedule must hold, indexed once (first[k] .. first[k + 1] - 1 of
 * ids), so that checking every rank's coverage costs the parameters once rather than once per
 * rank (147,456 schedules x 30,428 parameters at 131,072 GPUs). */
typedef struct owner_index {
    size_t *first;
    int *ids;
} owner_index;

static int owner_index_build(owner_index *x, const cz_plan *p, int expert, size_t n)
{
    x->first = calloc(n + 2, sizeof *x->first);
    x->ids = malloc((p->nparams ? p->nparams : 1) * sizeof *x->ids);
    if (!x->first || !x->ids)
        return -1;
    for (size_t i = 0; i < p->nparams; i++) {
        long k = owner_key(p, &p->params[i], expert);
        if (k >= 0 && (size_t)k < n)
            x->first[k + 2]++;
    }
    for (size_t k = 2; k < n + 2; k++)
        x->first[k] += x->first[k - 1];
    for (size_t i = 0; i < p->nparams; i++) {
        long k = owner_key(p, &p->params[i], expert);
        if (k >= 0 && (size_t)k < n)
            x->ids[x->first[k + 1]++] = (int)i;
    }
    return 0;
}

/* One rank schedule (whole-plan index k, at w): its rank, its groups, its coverage. ids/nids:
 * the parameters it must hold, or NULL to look through them all. */
static void check_rank_schedule(vctx *c, const cz_plan *p, const cz_rank_schedule *rs, task_at w,
                                sched_seen *seen, const int *ids, size_t nids)
{
    int expert = w.expert;
    at(c, "$.%s[%zu].%s", w.root, w.k, expert ? "edp_rank" : "dp_rank");
    c->checks++;
    if (rs->stage != w.s || rs->dp_rank != w.r || (expert && rs->ep_rank != w.e)) {
        if (expert)
            viol(c, "schedule.rank",
                 "schedule is for stage %d EP rank %d expert-DP rank %d, expected stage %d "
                 "EP rank %d expert-DP rank %d (stage-major, EP rank fastest)",
                 rs->stage, rs->ep_rank, rs->dp_rank, w.s, w.e, w.r);
        else
            viol(c, "schedule.rank",
                 "schedule is for stage %d DP rank %d, expected stage %d DP rank %d "
                 "(stage-major order)",
                 rs->stage, rs->dp_rank, w.s, w.r);
        c->unsafe = 1;
    }
    for (w.g = 0; w.g < rs->ngroups; w.g++)
        check_group(c, p, &rs->groups[w.g], w, seen);
    check_rank_coverage(c, p, &w, seen, ids, nids);
    for (size_t j = 0; j < seen->ntouched; j++)
        seen->g[seen->touched[j]] = -1, seen->b[seen->touched[j]] = 0;
    seen->ntouched = 0;
}

/* The schedules: one per (stage, DP rank) in stage-major order over the TP slots, or (expert 1)
 * one per expert rank in the order of cz_plan_expert_rank over the ETP slots; then each rank's
 * groups and its coverage. A slice has its rank's one. */
static void check_schedules(vctx *c, const cz_plan *p, int expert)
{
    int pp = p->pp > 0 ? p->pp : 1;
    size_t per_stage = expert ? (size_t)cz_plan_expert_ranks(p) : (size_t)(p->dp > 0 ? p->dp : 0);
    size_t want_n = p->slice.on ? 1 : (size_t)pp * per_stage;
    int group = expert ? p->etp : p->tp;
    int nslots = (group == 1 || p->settings.tp == CZ_TP_SC) ? 1 : group;
    size_t np = p->nparams ? p->nparams : 1, ns = (size_t)(nslots > 0 ? nslots : 1);
    size_t n = expert ? p->nexpert_schedules : p->nschedules;
    const cz_rank_schedule *all = expert ? p->expert_schedules : p->schedules;
    const char *root = expert ? "expert_schedule" : "tp_schedule";
    /* The owner index serves atomic plans; under even a parameter may belong to several ranks,
     * and a slice has a rank or two: both look through the parameters. */
    bool indexed = !p->slice.on && p->settings.dp != CZ_DP_EVEN;
    owner_index ox = {0};
    sched_seen seen = {malloc(np * sizeof *seen.g),       malloc(np * sizeof *seen.t),
                       malloc(np * sizeof *seen.s),       malloc(np * sizeof *seen.b),
                       malloc(ns * sizeof *seen.load),    malloc(ns * sizeof *seen.pos),
                       malloc(np * sizeof *seen.touched), 0};
    if (!seen.g || !seen.t || !seen.s || !seen.b || !seen.load || !seen.pos || !seen.touched ||
        (indexed && owner_index_build(&ox, p, expert, want_n) != 0)) {
        c->oom = 1;
        goto done;
    }
    for (size_t i = 0; i < p->nparams; i++)
        seen.g[i] = -1, seen.b[i] = 0;
    at(c, "$.%s", root);
    c->checks++;
    if (n != want_n) {
        if (p->slice.on)
            viol(c, "schedule.count", "slice has %zu %s schedules, expected its rank's one", n,
                 expert ? "expert rank" : "rank");
        else if (expert)
            viol(c, "schedule.count",
                 "plan has %zu expert rank schedules, expected one per (stage, EP rank, "
                 "expert-DP rank): %zu",
                 n, want_n);
        else
            viol(c, "schedule.count",
                 "plan has %zu rank schedules, expected one per (stage, DP rank): %zu", n, want_n);
        c->unsafe = 1;
    }
    for (size_t k = 0; k < n && k < want_n; k++) {
        const cz_plan_slice *sl = &p->slice;
        /* A slice's schedule is named by its index in the whole plan, as validate names it. */
        size_t kk = !sl->on  ? k
                    : expert ? cz_plan_expert_rank(p, sl->stage, sl->ep_rank, sl->edp_rank)
                             : (size_t)sl->stage * per_stage + (size_t)sl->dp_rank;
        size_t x = kk % (per_stage ? per_stage : 1);
        task_at w = {.k = kk,
                     .s = (int)(kk / (per_stage ? per_stage : 1)),
                     .r = expert ? (int)(x / (size_t)p->ep) : (int)x,
                     .nslots = nslots,
                     .expert = expert,
                     .e = expert ? (int)(x % (size_t)p->ep) : 0,
                     .root = root};
        check_rank_schedule(c, p, &all[k], w, &seen, indexed ? ox.ids + ox.first[k] : NULL,
                            indexed ? ox.first[k + 1] - ox.first[k] : 0);
    }
done:
    free(ox.first);
    free(ox.ids);
    free(seen.g);
    free(seen.t);
    free(seen.s);
    free(seen.b);
    free(seen.load);
    free(seen.pos);
    free(seen.touched);
}

void cz__plan_check_structure(cz_plan_checks *c, const cz_plan *plan)
{
    /* A fully sharded plan has no buckets or ranges: its own rules after the parameters'. */
    if (cz_plan_is_fsdp(plan)) {
        check_param_ids(c, plan);
        check_param_local(c, plan);
        check_param_blocks(c, plan);
        check_param_heads(c, plan);
        cz__fsdp_check_structure(c, plan);
        return;
    }
    /* First, so that a consumer that does not know expert groups reports that and stops. */
    if (check_expert_groups(c, plan) != 0)
        return;
    check_param_ids(c, plan);
    check_param_local(c, plan);
    check_param_blocks(c, plan);
    check_param_heads(c, plan);
    check_layout_rules(c, plan);
    check_ranges(c, plan);
    check_ownership(c, plan);
    check_schedules(c, plan, 0);
    if (cz_plan_has_experts(plan))
        check_schedules(c, plan, 1);
}
