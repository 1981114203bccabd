/*
 * Data-parallel partitioning: per bucket, one contiguous range per DP rank, and each
 * parameter's owning DP rank.
 *
 * Every strategy picks dp-1 monotone cut points per bucket; rank r's range is
 * [cut_r, cut_{r+1}) with cut_0 = 0 and cut_dp = size (empty ranges allowed). Except for the
 * even baseline and the layerwise baseline, cuts lie at parameter starts or at the bucket end,
 * so a parameter is owned by the range holding its start and lies wholly inside it (atomicity).
 *
 *  even      cut_r = r size / dp; parameters are fragmented (dp_owner = -1).
 *  anchored  owner = rank whose even slice holds the parameter's start; cut_r = start of the
 *            first parameter owned by a rank >= r.
 *  alpha     alpha-balanced static partitioning (Canzona): per stage, buckets largest first
 *            (ties by id), running per-rank loads L, global target T = sum S / dp; rank r's
 *            target in bucket b is (1 - alpha) S_b / dp + alpha deficit_r / sum deficit S_b with
 *            deficit_r = max(0, T - L_r); cut r is the parameter boundary nearest to the running
 *            sum of targets, never before cut r-1 (ties: the earlier boundary). Loads are in
 *            elements (alpha_numel_loads, as the reference code) or in the cost unit. The result
 *            is kept only when its per-rank cost max/mean is no worse than anchored's (decided
 *            per stage); otherwise anchored is kept and plan->dp_fell_back is set. Under block
 *            and cooperative tasks the planner also runs alpha on effective loads
 *            (plan->tasks.dp_weight: minmax_cuts) and as the slot-fill partition
 *            (plan->tasks.dp_fill: dp_fill.c), which are judged by their makespans, not here.
 *
 *  joint     (the default) every domain dealt by the slot fill (dp_fill.c): each rank takes
 *            the next parameters of each bucket while its matrices still pack onto its TP (or
 *            ETP) slots within the least target T; the planner's later passes deal one side
 *            again over the other's makespans (plan->tasks.dp_base, dp_side; planner.c).
 *  layerwise whole parameters dealt to ranks: Megatron-LM's first released layer-wise rule
 *            (see megatron_stage), its current rule for the matrices with the rest under
 *            ZeRO-1 (megatron_layerwise.c), ping-pong in forward order, or longest processing
 *            time first; ranges stay the even slices: the first rule all-reduces gradients, and
 *            the current one reduce-scatters buckets of its own layout, which the simulator
 *            recomputes.
 *
 * In the split layout the buckets of the elementwise buffer keep the even slices under every
 * strategy and their parameters are fragmented (dp_owner = -1); the strategy partitions the
 * matrix buffer's buckets.
 *
 * A plan with expert groups has, per stage, the dense buffer dealt over the DP ranks and one
 * expert buffer per EP rank dealt over that rank's expert-DP group (dp_domain): the same
 * strategy, alpha's fallback to anchored decided per domain.
 */
#include "cz_algorithms.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Parameters of each bucket in ascending offset order. */
typedef struct {
    int *ids;   /* all parameter ids grouped by bucket */
    int *first; /* nbuckets + 1 starts into ids */
} bucket_index;

static void bucket_index_free(bucket_index *bi)
{
    free(bi->ids);
    free(bi->first);
}

static int bucket_index_build(bucket_index *bi, const cz_plan *plan, cz_error *err)
{
    size_t nb = plan->nbuckets;
    int rc = CZ_OK;
    cz_stage_buckets v = {0};
    bi->ids = malloc((plan->nparams + 1) * sizeof *bi->ids);
    bi->first = calloc(nb + 1, sizeof *bi->first);
    if (!bi->ids || !bi->first)
        return cz__error_set(err, CZ_ENOMEM, "out of memory indexing buckets");
    for (size_t i = 0; i < plan->nparams; i++) {
        int b = plan->params[i].bucket;
        if (b < 0 || (size_t)b >= nb)
            return cz__error_set(err, CZ_EINTERNAL,
                                 "parameter '%s' has no bucket (%d); lay out buckets first",
                                 plan->params[i].def.name, b);
        bi->first[b + 1]++;
    }
    for (size_t b = 0; b < nb; b++)
        bi->first[b + 1] += bi->first[b];
    /* The offset order within a bucket is the stage walk's (cz_stage_buckets), here keyed by
     * the plan's bucket index. */
    for (int stage = 0; stage < plan->pp; stage++) {
        if (cz__stage_buckets_build(&v, plan, stage) != CZ_OK) {
            rc = cz__error_set(err, CZ_ENOMEM, "out of memory indexing buckets");
            goto done;
        }
        for (int k = 0; k < v.nb; k++) {
            int b = v.bucket[k], n = v.first[k + 1] - v.first[k];
            /* Layout puts a bucket's parameters in the bucket's own stage, all of them. */
            CZ_ASSERT_GOTO(n == bi->first[b + 1] - bi->first[b], err, rc, done);
            memcpy(&bi->ids[bi->first[b]], &v.order[v.first[k]], (size_t)n * sizeof *bi->ids);
        }
        cz__stage_buckets_free(&v);
    }
done:
    cz__stage_buckets_free(&v);
    return rc;
}

/* What one partition deals: a stage's dense buffer over the DP ranks, or (a plan with expert
 * groups) the expert buffer of one EP rank over the expert-DP ranks. */
typedef struct dp_domain {
    int stage;
    int expert; /* 0: the dense buffer; 1: the experts of EP rank ep_rank */
    int ep_rank;
    int n;                     /* ranks: dp or edp */
    const cz_domain_index *ix; /* the plan's buffers */
    int d;                     /* this domain in ix */
    double fill_lo;            /* the slot fill's start (cz_dp_buckets.lo) */
} dp_domain;

/* The domain's parameter (or bucket) ids, ascending: ix->params (ix->buckets) from first to
 * last (excluded). */
static void domain_params(const dp_domain *dm, int *first, int *last)
{
    *first = dm->ix->pfirst[dm->d];
    *last = dm->ix->pfirst[dm->d + 1];
}

static void domain_buckets(const dp_domain *dm, int *first, int *last)
{
    *first = dm->ix->bfirst[dm->d];
    *last = dm->ix->bfirst[dm->d + 1];
}

static bool bucket_in(const cz_plan_bucket *b, const dp_domain *d)
{
    return b->stage == d->stage && b->expert == d->expert &&
           (!d->expert || b->ep_rank == d->ep_rank);
}

static bool param_in(const cz_plan_param *p, const dp_domain *d)
{
    return p->stage == d->stage && p->expert == d->expert &&
           (!d->expert || p->ep_rank == d->ep_rank);
}

/* Sets the bucket's ranges from cuts[0..n] and the owner of each of its parameters (the range
 * that holds its start); n is the size of the group that partitions the bucket. */
static int cuts_apply(cz_plan *plan, const bucket_index *bi, int b, const int64_t *cuts,
                      cz_error *err)
{
    cz_plan_bucket *bk = &plan->buckets[b];
    int dp = cz_plan_bucket_nranks(plan, bk);
    /* Every strategy's cuts cover the bucket in order; the executor and the validator take
     * ranges that do not as a broken plan. */
    CZ_ASSERT(cuts[0] == 0 && cuts[dp] == bk->size, err);
    for (int r = 0; r < dp; r++)
        CZ_ASSERT(cuts[r] <= cuts[r + 1], err);
    for (int r = 0; r < dp; r++) {
        bk->ranges[2 * r] = cuts[r];
        bk->ranges[2 * r + 1] = cuts[r + 1];
    }
    int r = 0;
    for (int k = bi->first[b]; k < bi->first[b + 1]; k++) {
        cz_plan_param *p = &plan->params[bi->ids[k]];
        while (r < dp - 1 && p->offset >= cuts[r + 1])
            r++;
        p->dp_owner = r;
    }
    return CZ_OK;
}

static void even_cuts(int64_t size, int dp, int64_t *cuts)
{
    for (int r = 0; r <= dp; r++)
        cuts[r] = size / dp * r;
    cuts[dp] = size;
}

static int anchored_bucket(cz_plan *plan, const bucket_index *bi, int b, int64_t *cuts,
                           cz_error *err)
{
    int dp = cz_plan_bucket_nranks(plan, &plan->buckets[b]);
    int64_t size = plan->buckets[b].size, slice = size / dp;
    for (int r = 0; r <= dp; r++)
        cuts[r] = size;
    cuts[0] = 0;
    /* Owners are monotone in the offset: walk backwards so cut_r ends at the first start. */
    for (int k = bi->first[b + 1]; k-- > bi->first[b];) {
        const cz_plan_param *p = &plan->params[bi->ids[k]];
        int owner = slice > 0 ? (int)(p->offset / slice) : 0;
        if (owner > dp - 1)
            owner = dp - 1;
        for (int r = 1; r <= owner; r++)
            if (p->offset < cuts[r])
                cuts[r] = p->offset;
    }
    return cuts_apply(plan, bi, b, cuts, err);
}

typedef struct {
    int id;
    int64_t size;
} bucket_order;

static int bucket_order_cmp(const void *a, const void *b)
{
    const bucket_order *x = a, *y = b;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* A parameter's DP load: its elements, its cost, or (plan->tasks.dp_weight, set by the
 * planner's effective-load variant under --coop) the slot time its tasks need at the split
 * lower bound, which counts the all-reduce time a split leaves exposed. */
static double weight_of(const cz_plan *plan, const cz_plan_param *p)
{
    if (plan->settings.alpha_numel_loads)
        return (double)p->numel;
    return plan->tasks.dp_weight ? plan->tasks.dp_weight[p->id] : p->cost;
}

/* Worst max/mean of per-rank owned cost over the domain's ranks (under the effective-load
 * variant, of the loads alpha balanced: plan->tasks.dp_weight). */
static double domain_imbalance(const cz_plan *plan, const dp_domain *dm, double *load)
{
    int dp = dm->n, lo, hi;
    for (int r = 0; r < dp; r++)
        load[r] = 0.0;
    domain_params(dm, &lo, &hi);
    for (int j = lo; j < hi; j++) {
        int i = dm->ix->params[j];
        const cz_plan_param *p = &plan->params[i];
        if (param_in(p, dm) && p->dp_owner >= 0 && p->dp_owner < dp)
            load[p->dp_owner] += plan->tasks.dp_weight ? plan->tasks.dp_weight[i] : p->cost;
    }
    double max = 0.0, sum = 0.0;
    for (int r = 0; r < dp; r++) {
        sum += load[r];
        if (load[r] > max)
            max = load[r];
    }
    return sum > 0.0 ? max / (sum / dp) : 1.0;
}

/* Fills ranks 0.. in order, each with as many of the bucket's parameters as keep its load
 * within M; true when all fit. */
static bool fill_within(const double *load, int dp, const double *prefix, int np, double M,
                        int *cutj)
{
    int j = 0;
    cutj[0] = 0;
    for (int r = 0; r < dp; r++) {
        int start = j;
        while (j < np && load[r] + prefix[j + 1] - prefix[start] <= M)
            j++;
        cutj[r + 1] = j;
    }
    return j == np;
}

static double cuts_max(const double *load, int dp, const double *prefix, const int *cutj)
{
    double mx = 0.0;
    for (int r = 0; r < dp; r++) {
        double v = load[r] + prefix[cutj[r + 1]] - prefix[cutj[r]];
        mx = v > mx ? v : mx;
    }
    return mx;
}

/* The effective-load variant's cuts of one bucket. The least possible largest rank load M over
 * monotone cuts at parameter boundaries comes from a binary search on the threshold, each probe
 * a greedy fill (exact for contiguous ranges). Filling greedily up to M piles the bucket onto
 * the first ranks that have room, though; so the cuts are first placed by water-filling (each
 * rank's share of the bucket is what lifts it to a common level, rounded to the nearest
 * boundary as alpha rounds) and the greedy fill is used only where that overshoots M (water:
 * the planner tries both, plan->tasks.dp_water). Scratch: alt (dp + 1). */
static void minmax_cuts(const double *load, int dp, const double *prefix, int np, int *cutj,
                        int *alt, bool water)
{
    double lo = 0.0, hi = 0.0;
    for (int r = 0; r < dp; r++) {
        lo = load[r] > lo ? load[r] : lo;
        hi = load[r] + prefix[np] > hi ? load[r] + prefix[np] : hi;
    }
    for (int it = 0; it < 100 && hi - lo > 1e-12 * hi; it++) {
        double mid = 0.5 * (lo + hi);
        if (fill_within(load, dp, prefix, np, mid, cutj))
            hi = mid;
        else
            lo = mid;
    }
    fill_within(load, dp, prefix, np, hi, cutj);
    cutj[dp] = np;
    if (!water)
        return;
    /* The water level: sum over ranks of max(0, level - load) = the bucket's weight. */
    double S = prefix[np], wl = 0.0, wh = 0.0;
    for (int r = 0; r < dp; r++)
        wh = load[r] + S > wh ? load[r] + S : wh;
    for (int it = 0; it < 100 && wh - wl > 1e-12 * wh; it++) {
        double mid = 0.5 * (wl + wh), fill = 0.0;
        for (int r = 0; r < dp; r++)
            fill += mid > load[r] ? mid - load[r] : 0.0;
        if (fill >= S)
            wh = mid;
        else
            wl = mid;
    }
    double pos = 0.0;
    alt[0] = 0;
    alt[dp] = np;
    for (int r = 1; r < dp; r++) {
        pos += wh > load[r - 1] ? wh - load[r - 1] : 0.0;
        int best = alt[r - 1];
        double bestd = fabs(prefix[best] - pos);
        for (int j = best + 1; j <= np; j++) {
            double d = fabs(prefix[j] - pos);
            if (d < bestd)
                best = j, bestd = d;
            else if (prefix[j] > pos)
                break;
        }
        alt[r] = best;
    }
    if (cuts_max(load, dp, prefix, alt) <= cuts_max(load, dp, prefix, cutj) * (1.0 + 1e-9))
        memcpy(cutj, alt, ((size_t)dp + 1) * sizeof *cutj);
}

/* Rank r's range of bucket b from cut indices into its parameters (np: past the last). */
static void cuts_of(const cz_plan *plan, const bucket_index *bi, int b, const int *cutj,
                    int64_t *cuts)
{
    int base = bi->first[b], np = bi->first[b + 1] - base;
    for (int r = 0; r <= cz_plan_bucket_nranks(plan, &plan->buckets[b]); r++)
        cuts[r] =
            cutj[r] < np ? plan->params[bi->ids[base + cutj[r]]].offset : plan->buckets[b].size;
    cuts[0] = 0;
}

static int bucket_id_cmp(const void *a, const void *b)
{
    const bucket_order *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* Under the joint strategy, the time each rank of the domain is busy with the other buffer's
 * work: the largest of plan->tasks.dp_base (per GPU) over its GPUs. DP rank r holds the stage's
 * GPUs r tp .. r tp + tp - 1; expert rank (d, e) the GPUs (d ep + e) etp .. + etp - 1
 * (cz_plan_expert_rank). */
static void domain_base(const cz_plan *plan, const dp_domain *dm, double *base)
{
    size_t stage_gpus = (size_t)plan->dp * (size_t)plan->tp;
    const double *other = plan->tasks.dp_base + (size_t)dm->stage * stage_gpus;
    size_t width = dm->expert ? (size_t)plan->etp : (size_t)plan->tp;
    for (int d = 0; d < dm->n; d++) {
        size_t x = dm->expert ? (size_t)d * (size_t)plan->ep + (size_t)dm->ep_rank : (size_t)d;
        base[d] = 0.0;
        for (size_t t = 0; t < width; t++)
            base[d] = other[x * width + t] > base[d] ? other[x * width + t] : base[d];
    }
}

/* The slot-fill partition of one domain (dp_fill.c). The fill is greedy in the order it deals
 * the buckets, so it deals them in two orders, largest first (alpha's order) and layout order,
 * each bucket by bucket and rank by rank (cz_dp_buckets.by_rank), and keeps the fill with the
 * lowest target (ties: the earlier of alpha's order, layout order, then the same by rank).
 * Qwen3-14B on 256 GPUs: 15.06 ms largest first, 14.81 ms in layout order; the Kimi-K2-like
 * experts on 1,024 GPUs reach their bound by rank only. order is sorted in place to the order
 * kept. */
/* Bucket orders (alpha's, layout) times dealing forms (bucket by bucket, rank by rank). */
#define FILL_VARIANTS 4
/* Rank by rank, every rank refuses the next parameter of every bucket it does not take: over
 * more buckets than this (DeepSeek-V3's expert buffers hold thousands) it would cost more than
 * the rest of the plan, and there the buckets are small against the domain, so bucket by
 * bucket leaves little to gain. */
#define FILL_BY_RANK_BUCKETS 64

static int fill_stage(cz_plan *plan, const bucket_index *bi, const dp_domain *dm,
                      bucket_order *order, size_t nb, int64_t *cuts, cz_error *err)
{
    int rc = CZ_OK, dp = dm->n;
    size_t nc = (nb + 1) * ((size_t)dp + 1);
    int *first = malloc((nb + 1) * sizeof *first);
    int *ids = malloc((plan->nparams + 1) * sizeof *ids);
    int *cutj = malloc(FILL_VARIANTS * nc * sizeof *cutj);
    bucket_order *layout = malloc((nb + 1) * sizeof *layout);
    double *base = plan->tasks.dp_base ? malloc((size_t)dp * sizeof *base) : NULL;
    double target[FILL_VARIANTS], lo = 0.0;
    if (!first || !ids || !cutj || !layout || (plan->tasks.dp_base && !base)) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory in the slot-fill partition");
        goto done;
    }
    if (base)
        domain_base(plan, dm, base);
    memcpy(layout, order, nb * sizeof *layout);
    qsort(layout, nb, sizeof *layout, bucket_id_cmp);
    for (int v = 0; v < FILL_VARIANTS; v++) {
        const bucket_order *ord = v % 2 == 0 ? order : layout;
        first[0] = 0;
        for (size_t o = 0; o < nb; o++) {
            int b = ord[o].id, n = bi->first[b + 1] - bi->first[b];
            memcpy(&ids[first[o]], &bi->ids[bi->first[b]], (size_t)n * sizeof *ids);
            first[o + 1] = first[o] + n;
        }
        cz_dp_buckets db = {(int)nb, first,       ids,   dp, dm->expert ? plan->etp : plan->tp,
                            base,    dm->fill_lo, v >= 2};
        /* Rank by rank only for 2 to FILL_BY_RANK_BUCKETS buckets (with one it is bucket by
         * bucket) and where bucket by bucket stayed above the bound the search starts from:
         * where either order reached it, no fill is shorter (the bound is the search's own,
         * so equal means within its tolerance). */
        if (v == 2 && (nb < 2 || nb > FILL_BY_RANK_BUCKETS || target[0] <= lo * (1.0 + 2e-4) ||
                       target[1] <= lo * (1.0 + 2e-4))) {
            target[2] = target[3] = INFINITY;
            break;
        }
        if ((rc = cz__dp_fill_cuts(plan, &db, &cutj[v * nc], &target[v], v == 0 ? &lo : NULL,
                                   err)) != CZ_OK)
            goto done;
    }
    int keep = 0;
    for (int v = 1; v < FILL_VARIANTS; v++)
        if (target[v] < target[keep] * (1.0 - 1e-9))
            keep = v;
    if (keep % 2 == 1)
        memcpy(order, layout, nb * sizeof *order);
    for (size_t o = 0; o < nb && rc == CZ_OK; o++) {
        cuts_of(plan, bi, order[o].id, &cutj[keep * nc + o * ((size_t)dp + 1)], cuts);
        rc = cuts_apply(plan, bi, order[o].id, cuts, err);
    }
done:
    free(first);
    free(ids);
    free(cutj);
    free(layout);
    free(base);
    return rc;
}

/* One bucket's cuts by alpha: each rank's target share of the bucket's weight S (prefix[np]) is
 * (1 - alpha) of an even share plus alpha of its deficit's share (how far its load is below
 * the mean T), each cut the parameter boundary nearest the running target. Scratch: target
 * (dp). */
static void alpha_cuts(const double *load, int dp, double T, double alpha, const double *prefix,
                       int np, double *target, int *cutj)
{
    double S = prefix[np], sumdef = 0.0;
    for (int r = 0; r < dp; r++) {
        double d = T - load[r];
        sumdef += d > 0.0 ? d : 0.0;
    }
    for (int r = 0; r < dp; r++) {
        double even = S / dp, d = T - load[r];
        double greedy = sumdef > 0.0 ? (d > 0.0 ? d : 0.0) / sumdef * S : even;
        target[r] = (1.0 - alpha) * even + alpha * greedy;
    }
    double pos = 0.0;
    cutj[0] = 0;
    cutj[dp] = np;
    for (int r = 1; r < dp; r++) {
        pos += target[r - 1];
        int best = cutj[r - 1];
        double bestd = fabs(prefix[best] - pos);
        /* Ties go to the earlier boundary; past pos distances only grow. */
        for (int j = best + 1; j <= np; j++) {
            double d = fabs(prefix[j] - pos);
            if (d < bestd) {
                best = j;
                bestd = d;
            } else if (prefix[j] > pos) {
                break;
            }
        }
        cutj[r] = best;
    }
}

/* Whether the domain is dealt by the slot-fill partition: every domain under the joint
 * strategy, the dense ones under alpha's slot-fill variant. */
static bool domain_fills(const cz_plan *plan, const dp_domain *dm)
{
    return plan->settings.dp == CZ_DP_JOINT || (plan->tasks.dp_fill && !dm->expert);
}

/* Alpha-balanced partitioning of one domain's buckets. Scratch: load (n), target (n),
 * prefix (nparams + 1), cutj (n + 1), cuts (n + 1). */
static int alpha_domain(cz_plan *plan, const bucket_index *bi, const dp_domain *dm, cz_error *err)
{
    int rc = CZ_OK, dp = dm->n;
    double alpha = plan->settings.alpha;
    size_t nb = 0;
    bucket_order *order = malloc((plan->nbuckets + 1) * sizeof *order);
    double *load = calloc((size_t)dp, sizeof *load);
    double *target = calloc((size_t)dp, sizeof *target);
    double *prefix = malloc((plan->nparams + 1) * sizeof *prefix);
    int *cutj = malloc(((size_t)dp + 1) * sizeof *cutj);
    int *altj = malloc(((size_t)dp + 1) * sizeof *altj);
    int64_t *cuts = malloc(((size_t)dp + 1) * sizeof *cuts);
    if (!order || !load || !target || !prefix || !cutj || !altj || !cuts) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory in alpha partitioning");
        goto done;
    }
    double total = 0.0;
    int blo, bhi;
    domain_buckets(dm, &blo, &bhi);
    for (int bj = blo; bj < bhi; bj++) {
        int b = dm->ix->buckets[bj];
        /* The split layout's elementwise buffer stays evenly sliced: it adds the same load to
         * every rank, so balancing the matrix buffer alone balances the sum. */
        if (!bucket_in(&plan->buckets[b], dm) || plan->buckets[b].elementwise)
            continue;
        order[nb].id = (int)b;
        order[nb].size = plan->buckets[b].size;
        nb++;
        for (int k = bi->first[b]; k < bi->first[b + 1]; k++)
            total += weight_of(plan, &plan->params[bi->ids[k]]);
    }
    qsort(order, nb, sizeof *order, bucket_order_cmp);
    /* The slot-fill variant of alpha packs the TP slots of DP ranks, and the expert buffers keep
     * alpha's cuts (it is judged by the makespan it gives, planner.c); the joint strategy fills
     * the expert ranks' ETP slots too. */
    if (domain_fills(plan, dm)) {
        rc = fill_stage(plan, bi, dm, order, nb, cuts, err);
        goto done;
    }
    double T = total / dp;
    for (size_t o = 0; o < nb; o++) {
        int b = order[o].id;
        int base = bi->first[b], np = bi->first[b + 1] - base;
        prefix[0] = 0.0;
        for (int j = 0; j < np; j++)
            prefix[j + 1] = prefix[j] + weight_of(plan, &plan->params[bi->ids[base + j]]);
        if (plan->tasks.dp_weight)
            minmax_cuts(load, dp, prefix, np, cutj, altj, plan->tasks.dp_water);
        else
            alpha_cuts(load, dp, T, alpha, prefix, np, target, cutj);
        cuts_of(plan, bi, b, cutj, cuts);
        if ((rc = cuts_apply(plan, bi, b, cuts, err)) != CZ_OK)
            goto done;
        for (int r = 0; r < dp; r++)
            load[r] += prefix[cutj[r + 1]] - prefix[cutj[r]];
    }
done:
    free(order);
    free(load);
    free(target);
    free(prefix);
    free(cutj);
    free(altj);
    free(cuts);
    return rc;
}

/* Megatron-LM's optimizer groups under its layer-wise optimizer: Muon's (matrix) parameters,
 * then AdamW's 2-D ones (embeddings, output layer, routers: weight decay), then AdamW's 1-D
 * ones (norms and biases: no weight decay). Expert parameters form groups of their own. */
typedef struct {
    int id;
    int group;
    int64_t numel;
} megatron_order;

static int megatron_order_cmp(const void *a, const void *b)
{
    const megatron_order *x = a, *y = b;
    if (x->numel != y->numel)
        return x->numel < y->numel ? -1 : 1;
    /* Python's sort is stable over the list built group by group in registration order. */
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Megatron-LM's first released layer-wise rule (megatron/core/optimizer/
 * layer_wise_optimizer.py as first released; kept there as the ping-pong fallback): all parameters
 * of all optimizer groups, in group order, sorted stably by their TP-local element count
 * ascending and dealt to DP ranks 0, 1, ..., R-1, R-1, ..., 0, 0, 1, ...; expert parameters are
 * dealt the same way with a counter of their own over the expert-data-parallel group: the DP
 * group when they share the dense buffer (EP 1, ETP = TP), else the expert-DP group of their EP
 * rank, whose buffer is a domain of its own. */
static int megatron_stage(cz_plan *plan, const dp_domain *dm, cz_error *err)
{
    int dp = dm->n;
    megatron_order *order = malloc((plan->nparams + 1) * sizeof *order);
    if (!order)
        return cz__error_set(err, CZ_ENOMEM, "out of memory in layerwise partitioning");
    size_t n = 0;
    int lo, hi;
    domain_params(dm, &lo, &hi);
    for (int j = lo; j < hi; j++) {
        int i = dm->ix->params[j];
        const cz_plan_param *p = &plan->params[i];
        if (!param_in(p, dm))
            continue;
        int group = p->def.kind == CZ_KIND_MATRIX ? 0 : p->def.ndim == 2 ? 1 : 2;
        order[n].id = (int)i;
        order[n].group = group + (cz__megatron_is_expert(p->def.name) ? 3 : 0);
        order[n].numel = p->numel;
        n++;
    }
    qsort(order, n, sizeof *order, megatron_order_cmp);
    int64_t dense = 0, expert = 0;
    for (size_t k = 0; k < n; k++) {
        int64_t *counter = order[k].group >= 3 ? &expert : &dense;
        int pos = (int)(*counter % (2 * (int64_t)dp));
        plan->params[order[k].id].dp_owner = pos < dp ? pos : 2 * dp - 1 - pos;
        (*counter)++;
    }
    free(order);
    return CZ_OK;
}

static int layerwise_domain(cz_plan *plan, const dp_domain *dm, cz_error *err)
{
    int dp = dm->n;
    if (plan->settings.layerwise_order == CZ_LAYERWISE_MEGATRON)
        return megatron_stage(plan, dm, err);
    if (plan->settings.layerwise_order == CZ_LAYERWISE_MEGATRON_AUG26) {
        /* Muon parameters get Megatron's owners; the others keep the owner of their first
         * element under the even slices (they are updated under ZeRO-1, fragmented). */
        int *owner = malloc((plan->nparams + 1) * sizeof *owner);
        int64_t *sizes = malloc((plan->nparams + 1) * sizeof *sizes);
        size_t nb = 0;
        int rc = owner && sizes
                     ? cz__megatron_lw_domain(plan, dm->stage, dm->expert ? dm->ep_rank : -1, owner,
                                              sizes, &nb, err)
                     : cz__error_set(err, CZ_ENOMEM, "out of memory in layerwise partitioning");
        for (size_t i = 0; rc == CZ_OK && i < plan->nparams; i++)
            if (param_in(&plan->params[i], dm) && plan->params[i].def.kind == CZ_KIND_MATRIX)
                plan->params[i].dp_owner = owner[i];
        free(owner);
        free(sizes);
        return rc;
    }
    int lo, hi;
    domain_params(dm, &lo, &hi);
    if (plan->settings.layerwise_order == CZ_LAYERWISE_PINGPONG) {
        int k = 0;
        for (int j = lo; j < hi; j++) {
            cz_plan_param *p = &plan->params[dm->ix->params[j]];
            if (!param_in(p, dm))
                continue;
            int pos = k % (2 * dp);
            p->dp_owner = pos < dp ? pos : 2 * dp - 1 - pos;
            k++;
        }
        return CZ_OK;
    }
    cz_costed *order = malloc((plan->nparams + 1) * sizeof *order);
    double *load = calloc((size_t)dp, sizeof *load);
    if (!order || !load) {
        free(order);
        free(load);
        return cz__error_set(err, CZ_ENOMEM, "out of memory in layerwise partitioning");
    }
    size_t n = 0;
    for (int j = lo; j < hi; j++) {
        int i = dm->ix->params[j];
        if (!param_in(&plan->params[i], dm))
            continue;
        order[n].id = i;
        order[n].cost = plan->params[i].cost;
        n++;
    }
    cz__costed_sort(order, n);
    for (size_t k = 0; k < n; k++) {
        int best = 0;
        for (int r = 1; r < dp; r++)
            if (load[r] < load[best])
                best = r;
        plan->params[order[k].id].dp_owner = best;
        load[best] += order[k].cost;
    }
    free(order);
    free(load);
    return CZ_OK;
}

/* Saves or restores the ranges and owners of one domain (for alpha's fallback). */
static void domain_snapshot(cz_plan *plan, const dp_domain *dm, int64_t *ranges, int *owners,
                            int restore)
{
    size_t k = 0;
    int lo, hi;
    domain_buckets(dm, &lo, &hi);
    for (int bj = lo; bj < hi; bj++) {
        int b = dm->ix->buckets[bj];
        if (!bucket_in(&plan->buckets[b], dm))
            continue;
        for (int r = 0; r < 2 * dm->n; r++, k++) {
            if (restore)
                plan->buckets[b].ranges[r] = ranges[k];
            else
                ranges[k] = plan->buckets[b].ranges[r];
        }
    }
    domain_params(dm, &lo, &hi);
    for (int j = lo; j < hi; j++) {
        int i = dm->ix->params[j];
        if (!param_in(&plan->params[i], dm))
            continue;
        if (restore)
            plan->params[i].dp_owner = owners[i];
        else
            owners[i] = plan->params[i].dp_owner;
    }
}

/* One domain under the plan's strategy (the even slices are in place already). */
static int partition_domain(cz_plan *plan, const bucket_index *bi, const dp_domain *dm,
                            double *load, int64_t *saved_ranges, int *saved_owners, cz_error *err)
{
    int rc = CZ_OK;
    cz_dp_strategy strategy = plan->settings.dp;
    if (strategy == CZ_DP_LAYERWISE)
        return layerwise_domain(plan, dm, err);
    if (strategy != CZ_DP_ALPHA && strategy != CZ_DP_TPAWARE && strategy != CZ_DP_JOINT)
        return CZ_OK;
    if (strategy == CZ_DP_JOINT)
        return alpha_domain(plan, bi, dm, err);
    /* tpaware's starting point is alpha's partition; cz_plan_build runs its search. */
    double anchored = domain_imbalance(plan, dm, load);
    domain_snapshot(plan, dm, saved_ranges, saved_owners, 0);
    if ((rc = alpha_domain(plan, bi, dm, err)) != CZ_OK)
        return rc;
    double alpha = domain_imbalance(plan, dm, load);
    /* A relative slack so that rounding noise on equal results keeps alpha's. The slot-fill
     * variant balances makespans, not summed loads: the planner judges it by the makespan it
     * gives (planner.c). */
    if (!domain_fills(plan, dm) && alpha > anchored * (1.0 + 1e-12)) {
        domain_snapshot(plan, dm, saved_ranges, saved_owners, 1);
        plan->dp_fell_back = 1;
    }
    return CZ_OK;
}

int cz__dp_partition(cz_plan *plan, cz_error *err)
{
    int rc = CZ_OK, dp = plan->dp;
    int most = plan->edp > dp ? plan->edp : dp; /* the largest group a domain has */
    cz_dp_strategy strategy = plan->settings.dp;
    bucket_index bi = {NULL, NULL};
    cz_domain_index ix = {0};
    int64_t *cuts = NULL, *saved_ranges = NULL;
    int *saved_owners = NULL;
    double *load = NULL;
    if (dp < 1)
        return cz__error_set(err, CZ_EINVALID, "dp must be >= 1, got %d", dp);
    plan->dp_fell_back = 0;
    if ((rc = bucket_index_build(&bi, plan, err)) != CZ_OK ||
        (rc = cz__domain_index_build(&ix, plan, err)) != CZ_OK)
        goto done;
    cuts = malloc(((size_t)most + 1) * sizeof *cuts);
    load = calloc((size_t)most, sizeof *load);
    saved_ranges = malloc((plan->nbuckets * 2 * (size_t)most + 1) * sizeof *saved_ranges);
    saved_owners = malloc((plan->nparams + 1) * sizeof *saved_owners);
    if (!cuts || !load || !saved_ranges || !saved_owners) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory in DP partitioning");
        goto done;
    }
    /* The joint strategy's later passes (plan->tasks.dp_base set) deal one side again, the
     * dense or the expert buffers, over the makespans the other side's schedules gave; the
     * other side keeps its cuts. */
    int side = strategy == CZ_DP_JOINT && plan->tasks.dp_base ? plan->tasks.dp_side : 0;
    for (size_t b = 0; b < plan->nbuckets; b++) {
        if ((side == 2 && !plan->buckets[b].expert) || (side == 1 && plan->buckets[b].expert))
            continue;
        if (strategy == CZ_DP_EVEN || strategy == CZ_DP_LAYERWISE || plan->buckets[b].elementwise) {
            even_cuts(plan->buckets[b].size, cz_plan_bucket_nranks(plan, &plan->buckets[b]), cuts);
            rc = cuts_apply(plan, &bi, (int)b, cuts, err);
        } else {
            rc = anchored_bucket(plan, &bi, (int)b, cuts, err);
        }
        if (rc != CZ_OK)
            goto done;
    }
    /* Fragmented parameters have no single owner. */
    for (size_t i = 0; i < plan->nparams; i++)
        if (cz_plan_param_fragmented(plan, &plan->params[i]))
            plan->params[i].dp_owner = -1;
    if (strategy == CZ_DP_EVEN)
        goto done;
    /* The slot fill's start: under alpha's slot-fill variant the plan's split lower bound, the
     * same for every domain; under the joint strategy 0, each domain's own bound (dp_fill.c). */
    double lo = (strategy != CZ_DP_JOINT && plan->tasks.dp_fill) || side == 0
                    ? cz__task_lower_bound(plan, &plan->tasks)
                    : 0.0;
    for (int stage = 0; stage < plan->pp; stage++) {
        dp_domain dense = {stage, 0, 0, dp, &ix, cz__domain_index_of(&ix, stage, 0, 0), lo};
        if (side != 2 && (rc = partition_domain(plan, &bi, &dense, load, saved_ranges, saved_owners,
                                                err)) != CZ_OK)
            goto done;
        for (int e = 0; side != 1 && cz_plan_has_experts(plan) && e < plan->ep; e++) {
            dp_domain ex = {stage, 1, e, plan->edp, &ix, cz__domain_index_of(&ix, stage, 1, e), lo};
            if ((rc = partition_domain(plan, &bi, &ex, load, saved_ranges, saved_owners, err)) !=
                CZ_OK)
                goto done;
        }
    }
done:
    bucket_index_free(&bi);
    cz__domain_index_free(&ix);
    free(cuts);
    free(load);
    free(saved_ranges);
    free(saved_owners);
    return rc;
}
