/*
 * Plan validation: recompute every invariant of a plan (DESIGN.md section 3) against the model
 * and cluster it claims to be made for, and report every violation found, each with a JSON path
 * into the plan file, rather than stopping at the first: a user fixing a hand-edited or foreign
 * plan wants the whole list.
 *
 * Two kinds of checks: structural rules checked directly (alignment, no overlap, reverse fill
 * order, range coverage, atomicity, schedule membership, group loads) and recomputation against
 * the planner's own code (cost model, bucket layout of a fresh plan with the same settings,
 * metrics), so that a plan that is self-consistent but disagrees with this build is caught too.
 */
#include "cz_types.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CZ_VALIDATE_RTOL 1e-9

typedef struct {
    json_t *out;
    int checks;
    int oom;
    int unsafe;  /* a structural violation makes the metrics recomputation unsafe to run */
    int foreign; /* parameters differ from the model's: layout comparisons would only echo it */
    char path[256];
} vctx;

static void at(vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void at(vctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->path, sizeof c->path, fmt, ap);
    va_end(ap);
}

static void viol(vctx *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void viol(vctx *c, const char *code, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *v = json_pack("{s:s, s:s, s:s}", "code", code, "path", c->path, "message", msg);
    if (!v || json_array_append_new(c->out, v) != 0)
        c->oom = 1;
}

static int close_rel(double a, double b)
{
    if (isnan(a) || isnan(b))
        return 0;
    return fabs(a - b) <= CZ_VALIDATE_RTOL * fmax(fabs(a), fabs(b));
}

static const char *kind_name(cz_param_kind k)
{
    return k == CZ_KIND_MATRIX ? "matrix" : "elementwise";
}

static const char *strategy_name(const cz_plan *p)
{
    const char *n = cz_dp_strategy_name(p->settings.dp);
    return n ? n : "?";
}

/* ---- inputs and topology ---------------------------------------------------------------- */

static void check_str(vctx *c, const char *what, const char *found, const char *expected)
{
    c->checks++;
    if (!found || !expected || strcmp(found, expected) != 0)
        viol(c, "inputs", "%s is '%s' but the given file has '%s'", what, found ? found : "(none)",
             expected ? expected : "(none)");
}

static void check_inputs(vctx *c, const cz_plan *p, const cz_model *m, const cz_cluster *cl)
{
    at(c, "$.inputs.model.name");
    check_str(c, "model name", p->model_name, m->name);
    at(c, "$.inputs.model.sha256");
    check_str(c, "model SHA-256", p->model_sha256, m->sha256);
    at(c, "$.inputs.cluster.name");
    check_str(c, "cluster name", p->cluster_name, cl->name);
    at(c, "$.inputs.cluster.sha256");
    check_str(c, "cluster SHA-256", p->cluster_sha256, cl->sha256);
    at(c, "$.dtype");
    c->checks++;
    if (p->dtype != m->dtype)
        viol(c, "inputs", "plan dtype is %s but the model's is %s", cz_dtype_name(p->dtype),
             cz_dtype_name(m->dtype));

    const struct {
        const char *key;
        int found, expected;
    } topo[] = {{"dp", p->dp, cl->dp}, {"tp", p->tp, cl->tp}, {"pp", p->pp, cl->pp}};
    for (size_t i = 0; i < sizeof topo / sizeof topo[0]; i++) {
        at(c, "$.topology.%s", topo[i].key);
        c->checks++;
        if (topo[i].found != topo[i].expected) {
            viol(c, "topology", "plan has %s = %d but the cluster has %d", topo[i].key,
                 topo[i].found, topo[i].expected);
            c->unsafe = 1;
        }
    }
}

/* ---- parameters ------------------------------------------------------------------------- */

static int same_blocks(const cz_plan_param *q, const cz_param_def *d)
{
    if (q->nblocks != d->nblocks || (d->nblocks > 0 && q->block_dim != d->block_dim))
        return 0;
    for (int b = 0; b < d->nblocks; b++)
        if (!q->block_sizes || !d->block_sizes || q->block_sizes[b] != d->block_sizes[b])
            return 0;
    return 1;
}

/* Whether the plan's parameter is the model's parameter (so that its cost is comparable). */
static int same_def(const cz_plan_param *q, const cz_param_def *d)
{
    return q->name && d->name && !strcmp(q->name, d->name) && q->ndim == d->ndim &&
           q->shape[0] == d->shape[0] && q->shape[1] == d->shape[1] && q->tp_dim == d->tp_dim &&
           q->kind == d->kind && same_blocks(q, d);
}

static const char *blocks_text(char *buf, size_t n, int nblocks, int dim, const int64_t *sizes)
{
    if (nblocks <= 0 || !sizes) {
        snprintf(buf, n, "none");
        return buf;
    }
    size_t len = (size_t)snprintf(buf, n, "dim %d [", dim);
    for (int b = 0; b < nblocks && len < n; b++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", b ? ", " : "", (long long)sizes[b]);
    if (len < n)
        snprintf(buf + len, n - len, "]");
    return buf;
}

static void check_param_identity(vctx *c, const cz_plan *p, const cz_model *m)
{
    size_t n = p->nparams < m->nparams ? p->nparams : m->nparams;
    at(c, "$.params");
    c->checks++;
    if (p->nparams != m->nparams) {
        viol(c, "param.count", "plan has %zu parameters but the model has %zu", p->nparams,
             m->nparams);
        c->unsafe = 1;
    }
    for (size_t i = 0; i < n; i++) {
        const cz_plan_param *q = &p->params[i];
        const cz_param_def *d = &m->params[i];
        at(c, "$.params[%zu].id", i);
        c->checks++;
        if (q->id != (int)i) {
            viol(c, "param.id", "id is %d, expected its index %zu", q->id, i);
            c->unsafe = 1;
        }
        at(c, "$.params[%zu].name", i);
        check_str(c, "parameter name", q->name, d->name);
        at(c, "$.params[%zu].shape", i);
        c->checks++;
        if (q->ndim != d->ndim || q->shape[0] != d->shape[0] || q->shape[1] != d->shape[1])
            viol(c, "param.shape",
                 "'%s' has shape %lldx%lld (%dD) but the model has %lldx%lld (%dD)", d->name,
                 (long long)q->shape[0], (long long)q->shape[1], q->ndim, (long long)d->shape[0],
                 (long long)d->shape[1], d->ndim);
        at(c, "$.params[%zu].tp_dim", i);
        c->checks++;
        if (q->tp_dim != d->tp_dim)
            viol(c, "param.tp_dim", "'%s' has tp_dim %d but the model has %d", d->name, q->tp_dim,
                 d->tp_dim);
        at(c, "$.params[%zu].optimizer", i);
        c->checks++;
        if (q->kind != d->kind)
            viol(c, "param.optimizer", "'%s' is %s but the model says %s", d->name,
                 kind_name(q->kind), kind_name(d->kind));
        at(c, "$.params[%zu].blocks", i);
        c->checks++;
        if (!same_blocks(q, d)) {
            char qb[160], db[160];
            viol(c, "param.blocks", "'%s' has blocks %s but the model has %s", d->name,
                 blocks_text(qb, sizeof qb, q->nblocks, q->block_dim, q->block_sizes),
                 blocks_text(db, sizeof db, d->nblocks, d->block_dim, d->block_sizes));
        }
        if (!same_def(q, d))
            c->foreign = 1;
    }
}

/* local_shape = shape split tp ways along tp_dim; numel = local element count. */
static void check_param_local(vctx *c, const cz_plan *p)
{
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        int64_t want[2] = {q->shape[0], q->shape[1]};
        at(c, "$.params[%zu].local_shape", i);
        c->checks++;
        if (q->tp_dim == 0 || q->tp_dim == 1) {
            if (p->tp <= 0 || want[q->tp_dim] % p->tp != 0) {
                viol(c, "param.local_shape",
                     "'%s': dimension %d of size %lld is not divisible by tp = %d", q->name,
                     q->tp_dim, (long long)want[q->tp_dim], p->tp);
                continue;
            }
            want[q->tp_dim] /= p->tp;
        } else if (q->tp_dim != -1) {
            viol(c, "param.tp_dim", "'%s': tp_dim %d is not -1, 0 or 1", q->name, q->tp_dim);
            continue;
        }
        if (q->local_shape[0] != want[0] || q->local_shape[1] != want[1])
            viol(c, "param.local_shape",
                 "'%s': local shape is %lldx%lld, expected %lldx%lld (shape / tp along tp_dim %d)",
                 q->name, (long long)q->local_shape[0], (long long)q->local_shape[1],
                 (long long)want[0], (long long)want[1], q->tp_dim);
        at(c, "$.params[%zu].numel", i);
        c->checks++;
        if (q->numel != want[0] * want[1]) {
            viol(c, "param.numel", "'%s': numel is %lld, expected %lld local elements", q->name,
                 (long long)q->numel, (long long)(want[0] * want[1]));
            c->unsafe = 1;
        }
    }
}

static void check_param_costs(vctx *c, const cz_plan *p, const cz_model *m, const cz_cluster *cl)
{
    size_t n = p->nparams < m->nparams ? p->nparams : m->nparams;
    for (size_t i = 0; i < n; i++) {
        if (!same_def(&p->params[i], &m->params[i]))
            continue; /* already reported; another parameter's cost is no useful comparison */
        double want = cz_cost_param(&m->params[i], &p->settings, cl, m->dtype);
        at(c, "$.params[%zu].cost", i);
        c->checks++;
        if (!close_rel(p->params[i].cost, want))
            viol(c, "param.cost", "'%s': cost is %.17g but the cost model gives %.17g (%s)",
                 p->params[i].name, p->params[i].cost, want, cz_unit_name(p->settings.unit));
    }
}

/* ---- bucket layout ---------------------------------------------------------------------- */

/* Rules checked directly, without the planner's layout code. */
static void check_layout_rules(vctx *c, const cz_plan *p)
{
    for (size_t b = 0; b < p->nbuckets; b++) {
        const cz_plan_bucket *k = &p->buckets[b];
        at(c, "$.buckets[%zu].id", b);
        c->checks++;
        if (k->id != (int)b)
            viol(c, "bucket.id", "bucket id is %d, expected its index %zu", k->id, b);
        at(c, "$.buckets[%zu].size", b);
        c->checks++;
        if (k->size < 0 || (p->dp > 0 && k->size % p->dp != 0))
            viol(c, "bucket.size", "size %lld is not a non-negative multiple of dp = %d",
                 (long long)k->size, p->dp);
        at(c, "$.buckets[%zu].stage", b);
        c->checks++;
        if (k->stage < 0 || k->stage >= (p->pp > 0 ? p->pp : 1)) {
            viol(c, "bucket.stage", "stage %d is outside [0, %d)", k->stage, p->pp);
            c->unsafe = 1;
        }
        /* Buckets of one stage follow each other in the stage's buffer. */
        int64_t want_off = 0;
        if (b > 0 && p->buckets[b - 1].stage == k->stage)
            want_off = p->buckets[b - 1].offset + p->buckets[b - 1].size;
        at(c, "$.buckets[%zu].offset", b);
        c->checks++;
        if (b > 0 && p->buckets[b - 1].stage > k->stage)
            viol(c, "bucket.order", "bucket of stage %d follows one of stage %d", k->stage,
                 p->buckets[b - 1].stage);
        else if (k->offset != want_off)
            viol(c, "bucket.offset",
                 "offset is %lld, expected %lld (buckets of a stage are contiguous)",
                 (long long)k->offset, (long long)want_off);
    }

    /* Walk each stage's parameters in fill order (reverse id): positions must increase, start
     * aligned, and not overlap. */
    int pp = p->pp > 0 ? p->pp : 1;
    for (int s = 0; s < pp; s++) {
        long prev_b = -1;
        int64_t prev_end = 0;
        size_t prev_i = 0;
        for (size_t j = p->nparams; j-- > 0;) {
            const cz_plan_param *q = &p->params[j];
            if (q->stage != s)
                continue;
            at(c, "$.params[%zu].bucket", j);
            c->checks++;
            if (q->bucket < 0 || (size_t)q->bucket >= p->nbuckets) {
                viol(c, "param.bucket", "'%s': bucket %d does not exist (%zu buckets)", q->name,
                     q->bucket, p->nbuckets);
                c->unsafe = 1;
                continue;
            }
            const cz_plan_bucket *k = &p->buckets[q->bucket];
            if (k->stage != s) {
                viol(c, "param.bucket", "'%s' (stage %d) is in bucket %d of stage %d", q->name, s,
                     q->bucket, k->stage);
                c->unsafe = 1;
                continue;
            }
            at(c, "$.params[%zu].offset", j);
            c->checks += 3;
            if (q->offset < 0 || q->numel < 0 || q->offset + q->numel > k->size) {
                viol(c, "param.offset", "'%s': [%lld, %lld) is not inside bucket %d of size %lld",
                     q->name, (long long)q->offset, (long long)(q->offset + q->numel), q->bucket,
                     (long long)k->size);
                c->unsafe = 1;
            }
            if (p->bucket_align > 0 && q->offset % p->bucket_align != 0)
                viol(c, "param.offset", "'%s': offset %lld is not a multiple of the alignment %lld",
                     q->name, (long long)q->offset, (long long)p->bucket_align);
            if (q->bucket < prev_b)
                viol(c, "bucket.order",
                     "'%s' is in bucket %d but '%s', registered after it, is in later bucket %ld "
                     "(buckets fill in reverse order)",
                     q->name, q->bucket, p->params[prev_i].name, prev_b);
            else if (q->bucket == prev_b && q->offset < prev_end)
                viol(c, "param.offset",
                     "'%s' at %lld overlaps or precedes '%s' (ends at %lld), registered after it "
                     "(reverse fill order)",
                     q->name, (long long)q->offset, p->params[prev_i].name, (long long)prev_end);
            if (q->bucket != prev_b)
                prev_end = 0;
            prev_b = q->bucket;
            prev_end = q->offset + q->numel;
            prev_i = j;
        }
    }
}

/* Compare against the layout of a fresh plan with the same model, cluster and settings. */
static void check_layout_reference(vctx *c, const cz_plan *p, const cz_model *m,
                                   const cz_cluster *cl)
{
    cz_plan *ref = NULL;
    cz_error e;
    cz_error_clear(&e);
    at(c, "$.buckets");
    c->checks++;
    if (cz_plan_init(&ref, m, cl, &p->settings, &e) != CZ_OK ||
        cz_buckets_layout(ref, &e) != CZ_OK) {
        viol(c, "bucket.layout", "cannot lay out the model's buckets for comparison: %s",
             e.message);
        goto done;
    }
    at(c, "$.buckets_config.size");
    c->checks += 2;
    if (p->bucket_size != ref->bucket_size)
        viol(c, "bucket.layout", "bucket size is %lld but the cluster gives %lld",
             (long long)p->bucket_size, (long long)ref->bucket_size);
    at(c, "$.buckets_config.align");
    if (p->bucket_align != ref->bucket_align)
        viol(c, "bucket.layout", "bucket alignment is %lld but the cluster gives %lld",
             (long long)p->bucket_align, (long long)ref->bucket_align);
    at(c, "$.buckets");
    c->checks++;
    if (p->nbuckets != ref->nbuckets)
        viol(c, "bucket.layout", "plan has %zu buckets but the layout rules give %zu", p->nbuckets,
             ref->nbuckets);
    size_t nb = p->nbuckets < ref->nbuckets ? p->nbuckets : ref->nbuckets;
    for (size_t b = 0; b < nb; b++) {
        const cz_plan_bucket *x = &p->buckets[b], *y = &ref->buckets[b];
        at(c, "$.buckets[%zu]", b);
        c->checks++;
        if (x->stage != y->stage || x->offset != y->offset || x->size != y->size)
            viol(c, "bucket.layout",
                 "bucket is stage %d offset %lld size %lld but the layout rules give stage %d "
                 "offset %lld size %lld",
                 x->stage, (long long)x->offset, (long long)x->size, y->stage, (long long)y->offset,
                 (long long)y->size);
    }
    size_t n = p->nparams < ref->nparams ? p->nparams : ref->nparams;
    for (size_t i = 0; i < n; i++) {
        const cz_plan_param *x = &p->params[i], *y = &ref->params[i];
        at(c, "$.params[%zu].stage", i);
        c->checks++;
        if (x->stage != y->stage)
            viol(c, "param.stage", "'%s' is in stage %d but the stage assignment gives %d", x->name,
                 x->stage, y->stage);
        at(c, "$.params[%zu].bucket", i);
        c->checks++;
        if (x->bucket != y->bucket || x->offset != y->offset)
            viol(c, "bucket.layout",
                 "'%s' is at bucket %d offset %lld but the layout rules give bucket %d offset %lld",
                 x->name, x->bucket, (long long)x->offset, y->bucket, (long long)y->offset);
    }
done:
    cz_plan_free(ref);
}

/* ---- DP ranges and ownership -------------------------------------------------------------- */

static void check_ranges(vctx *c, const cz_plan *p)
{
    for (size_t b = 0; b < p->nbuckets; b++) {
        const cz_plan_bucket *k = &p->buckets[b];
        at(c, "$.buckets[%zu].ranges", b);
        c->checks++;
        if (!k->ranges) {
            viol(c, "bucket.ranges", "bucket has no ranges, expected %d", p->dp);
            c->unsafe = 1;
            continue;
        }
        for (int r = 0; r < p->dp; r++) {
            int64_t s = k->ranges[2 * r], e = k->ranges[2 * r + 1];
            int64_t want = r == 0 ? 0 : k->ranges[2 * r - 1];
            at(c, "$.buckets[%zu].ranges[%d]", b, r);
            c->checks += 2;
            if (s != want)
                viol(c, "bucket.ranges", "range of DP rank %d starts at %lld, expected %lld (%s)",
                     r, (long long)s, (long long)want,
                     r == 0 ? "ranges cover the bucket from 0" : "ranges are contiguous");
            if (e < s)
                viol(c, "bucket.ranges", "range of DP rank %d is [%lld, %lld): end before start", r,
                     (long long)s, (long long)e);
            if (r == p->dp - 1 && e != k->size)
                viol(c, "bucket.ranges", "last range ends at %lld but the bucket's size is %lld",
                     (long long)e, (long long)k->size);
        }
    }
}

/* The DP rank whose range of bucket k holds position x, or -1. */
static int range_rank(const cz_plan *p, const cz_plan_bucket *k, int64_t x)
{
    for (int r = 0; r < p->dp; r++)
        if (x >= k->ranges[2 * r] && x < k->ranges[2 * r + 1])
            return r;
    return -1;
}

static int param_in_range(const cz_plan *p, const cz_plan_param *q, int r)
{
    const cz_plan_bucket *k = &p->buckets[q->bucket];
    return q->offset >= k->ranges[2 * r] && q->offset + q->numel <= k->ranges[2 * r + 1];
}

static int param_intersects(const cz_plan *p, const cz_plan_param *q, int r)
{
    const cz_plan_bucket *k = &p->buckets[q->bucket];
    return q->offset < k->ranges[2 * r + 1] && q->offset + q->numel > k->ranges[2 * r] &&
           q->numel > 0;
}

static int param_placed(const cz_plan *p, const cz_plan_param *q)
{
    return q->bucket >= 0 && (size_t)q->bucket < p->nbuckets && p->buckets[q->bucket].ranges &&
           q->offset >= 0 && q->offset + q->numel <= p->buckets[q->bucket].size;
}

static void check_ownership(vctx *c, const cz_plan *p)
{
    int even = p->settings.dp == CZ_DP_EVEN;
    int atomic = !even && p->settings.dp != CZ_DP_LAYERWISE;
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        at(c, "$.params[%zu].dp_owner", i);
        c->checks++;
        if (q->dp_owner < -1 || q->dp_owner >= p->dp || (q->dp_owner == -1 && !even)) {
            viol(c, "param.dp_owner", "'%s': dp_owner %d is outside [0, %d)%s", q->name,
                 q->dp_owner, p->dp, even ? " and not -1" : " (-1 only under the even strategy)");
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
        int last = range_rank(p, k, q->offset + q->numel - 1);
        if (first >= 0 && first == last) {
            viol(c, "atomicity",
                 "'%s' [%lld, %lld) of bucket %d lies in DP rank %d's range but its dp_owner is %d "
                 "(range [%lld, %lld))",
                 q->name, (long long)q->offset, (long long)(q->offset + q->numel), q->bucket, first,
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
                 q->name, (long long)q->offset, (long long)(q->offset + q->numel), q->bucket, who,
                 q->bucket, strategy_name(p));
        }
    }
}

/* ---- TP schedules ------------------------------------------------------------------------ */

/* Whether DP rank r of stage s must schedule parameter q. */
static int expected_on(const cz_plan *p, const cz_plan_param *q, int s, int r)
{
    if (q->kind != CZ_KIND_MATRIX || q->stage != s)
        return 0;
    if (p->settings.dp == CZ_DP_EVEN)
        return param_placed(p, q) && param_intersects(p, q, r);
    return q->dp_owner == r;
}

static void check_schedules(vctx *c, const cz_plan *p)
{
    int pp = p->pp > 0 ? p->pp : 1;
    size_t want_n = (size_t)pp * (size_t)(p->dp > 0 ? p->dp : 0);
    int nslots = (p->tp == 1 || p->settings.tp == CZ_TP_SC) ? 1 : p->tp;
    int *seen_g = malloc((p->nparams ? p->nparams : 1) * sizeof *seen_g);
    int *seen_t = malloc((p->nparams ? p->nparams : 1) * sizeof *seen_t);
    int *seen_s = malloc((p->nparams ? p->nparams : 1) * sizeof *seen_s);
    double *load = malloc((size_t)(nslots > 0 ? nslots : 1) * sizeof *load);
    int *pos = malloc((size_t)(nslots > 0 ? nslots : 1) * sizeof *pos);
    if (!seen_g || !seen_t || !seen_s || !load || !pos) {
        c->oom = 1;
        goto done;
    }
    at(c, "$.tp_schedule");
    c->checks++;
    if (p->nschedules != want_n) {
        viol(c, "schedule.count",
             "plan has %zu rank schedules, expected one per (stage, DP rank): %zu", p->nschedules,
             want_n);
        c->unsafe = 1;
    }
    for (size_t k = 0; k < p->nschedules && k < want_n; k++) {
        const cz_rank_schedule *rs = &p->schedules[k];
        int s = (int)(k / (size_t)p->dp), r = (int)(k % (size_t)p->dp);
        at(c, "$.tp_schedule[%zu].dp_rank", k);
        c->checks++;
        if (rs->stage != s || rs->dp_rank != r) {
            viol(c, "schedule.rank",
                 "schedule is for stage %d DP rank %d, expected stage %d DP rank %d (stage-major "
                 "order)",
                 rs->stage, rs->dp_rank, s, r);
            c->unsafe = 1;
        }
        for (size_t i = 0; i < p->nparams; i++)
            seen_g[i] = -1;
        for (int g = 0; g < rs->ngroups; g++) {
            const cz_plan_group *gr = &rs->groups[g];
            at(c, "$.tp_schedule[%zu].groups[%d].id", k, g);
            c->checks++;
            if (gr->id != g)
                viol(c, "schedule.group", "group id is %d, expected its index %d", gr->id, g);
            at(c, "$.tp_schedule[%zu].groups[%d].slots", k, g);
            c->checks++;
            if (gr->nslots != nslots) {
                viol(c, "schedule.slots", "group has %d slots, expected %d (%s)", gr->nslots,
                     nslots, nslots == 1 ? "one slot under sc or tp = 1" : "one per TP rank");
                c->unsafe = 1;
                continue;
            }
            for (int x = 0; x < nslots; x++)
                load[x] = 0.0, pos[x] = 0;
            for (int t = 0; t < gr->ntasks; t++) {
                int pid = gr->task_param[t], slot = gr->task_slot[t];
                c->checks++;
                if (slot < 0 || slot >= nslots) {
                    at(c, "$.tp_schedule[%zu].groups[%d].slots", k, g);
                    viol(c, "schedule.slots", "task %d is on slot %d of %d", t, slot, nslots);
                    c->unsafe = 1;
                    continue;
                }
                at(c, "$.tp_schedule[%zu].groups[%d].slots[%d][%d]", k, g, slot, pos[slot]);
                pos[slot]++;
                if (pid < 0 || (size_t)pid >= p->nparams) {
                    viol(c, "schedule.param", "parameter id %d does not exist (%zu parameters)",
                         pid, p->nparams);
                    c->unsafe = 1;
                    continue;
                }
                const cz_plan_param *q = &p->params[pid];
                load[slot] += q->cost;
                c->checks += 2;
                if (q->kind != CZ_KIND_MATRIX) {
                    viol(c, "schedule.elementwise",
                         "'%s' (id %d) is elementwise and must not be scheduled", q->name, pid);
                    continue;
                }
                if (seen_g[pid] >= 0) {
                    viol(c, "schedule.duplicate",
                         "'%s' (id %d) is scheduled again; first in "
                         "$.tp_schedule[%zu].groups[%d].slots[%d][%d]",
                         q->name, pid, k, seen_g[pid], seen_s[pid], seen_t[pid]);
                    continue;
                }
                seen_g[pid] = g, seen_s[pid] = slot, seen_t[pid] = pos[slot] - 1;
                if (!expected_on(p, q, s, r))
                    viol(c, "schedule.foreign",
                         "'%s' (id %d, stage %d, dp_owner %d) does not belong to stage %d DP rank "
                         "%d",
                         q->name, pid, q->stage, q->dp_owner, s, r);
            }
            for (int x = 0; x < nslots; x++) {
                at(c, "$.tp_schedule[%zu].groups[%d].load[%d]", k, g, x);
                c->checks++;
                if (!gr->load || !close_rel(gr->load[x], load[x]))
                    viol(c, "schedule.load", "slot load is %.17g but its tasks' costs sum to %.17g",
                         gr->load ? gr->load[x] : NAN, load[x]);
            }
        }
        at(c, "$.tp_schedule[%zu]", k);
        for (size_t i = 0; i < p->nparams; i++) {
            const cz_plan_param *q = &p->params[i];
            if (!expected_on(p, q, s, r))
                continue;
            c->checks++;
            if (seen_g[i] < 0)
                viol(c, "schedule.missing",
                     "matrix parameter '%s' ($.params[%zu]) of DP rank %d is in no micro-group of "
                     "its schedule",
                     q->name, i, r);
        }
    }
done:
    free(seen_g);
    free(seen_t);
    free(seen_s);
    free(load);
    free(pos);
}

/* ---- metrics ---------------------------------------------------------------------------- */

static void cmp_scalar(vctx *c, const char *path, double found, double want)
{
    at(c, "%s", path);
    c->checks++;
    if (!close_rel(found, want))
        viol(c, "metrics", "stored value %.17g, recomputed %.17g", found, want);
}

static void cmp_array(vctx *c, const char *path, const double *found, const double *want, size_t n)
{
    if (!want)
        return;
    if (!found) {
        at(c, "%s", path);
        c->checks++;
        viol(c, "metrics", "missing; expected %zu values", n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        at(c, "%s[%zu]", path, i);
        c->checks++;
        if (!close_rel(found[i], want[i]))
            viol(c, "metrics", "stored value %.17g, recomputed %.17g", found[i], want[i]);
    }
}

static void check_metrics(vctx *c, const cz_plan *p, const cz_cluster *cl)
{
    /* The planner's own metrics code on a shallow copy: it reads params, buckets and schedules
     * and writes only the copy's metrics. */
    cz_plan tmp = *p;
    cz_error e;
    cz_error_clear(&e);
    memset(&tmp.metrics, 0, sizeof tmp.metrics);
    at(c, "$.metrics");
    c->checks++;
    if (cz_plan_metrics_compute(&tmp, cl, &e) != CZ_OK) {
        viol(c, "metrics", "cannot recompute the metrics: %s", e.message);
        goto done;
    }
    const cz_plan_metrics *f = &p->metrics, *w = &tmp.metrics;
    size_t nr = (size_t)p->pp * (size_t)p->dp, ng = nr * (size_t)p->tp;
    cmp_array(c, "$.metrics.dp.load", f->dp_load, w->dp_load, nr);
    cmp_scalar(c, "$.metrics.dp.imbalance", f->dp_imbalance, w->dp_imbalance);
    cmp_array(c, "$.metrics.tp.gpu_load", f->gpu_load, w->gpu_load, ng);
    cmp_array(c, "$.metrics.tp.rank_makespan", f->rank_makespan, w->rank_makespan, nr);
    cmp_scalar(c, "$.metrics.tp.makespan", f->tp_makespan, w->tp_makespan);
    cmp_scalar(c, "$.metrics.tp.imbalance", f->tp_imbalance, w->tp_imbalance);
    cmp_scalar(c, "$.metrics.total_cost", f->total_cost, w->total_cost);
    cmp_scalar(c, "$.metrics.max_task_cost", f->max_task_cost, w->max_task_cost);
    cmp_scalar(c, "$.metrics.lower_bound", f->lower_bound, w->lower_bound);
    cmp_array(c, "$.metrics.memory", f->memory, w->memory, ng);
    cmp_scalar(c, "$.metrics.predicted_step_s", f->predicted_step_s, w->predicted_step_s);
done:
    cz_plan_metrics_free(&tmp.metrics);
}

int cz_plan_validate(const cz_plan *plan, const cz_model *model, const cz_cluster *cluster,
                     json_t **violations_out, cz_error *err)
{
    vctx c = {0};
    *violations_out = NULL;
    if (!plan || !model || !cluster)
        return cz_error_set(err, CZ_EINVALID, "validate: plan, model and cluster are required");
    c.out = json_array();
    if (!c.out)
        return cz_error_set(err, CZ_ENOMEM, "validate: out of memory");

    check_inputs(&c, plan, model, cluster);
    check_param_identity(&c, plan, model);
    check_param_local(&c, plan);
    check_param_costs(&c, plan, model, cluster);
    check_layout_rules(&c, plan);
    if (!c.unsafe && !c.foreign)
        check_layout_reference(&c, plan, model, cluster);
    check_ranges(&c, plan);
    check_ownership(&c, plan);
    check_schedules(&c, plan);
    /* The metrics code indexes by ranks, buckets and param ids: only run it on a plan whose
     * structure is sound, so that a broken plan yields violations, not a crash. */
    if (!c.unsafe)
        check_metrics(&c, plan, cluster);

    if (c.oom) {
        json_decref(c.out);
        return cz_error_set(err, CZ_ENOMEM, "validate: out of memory");
    }
    *violations_out = c.out;
    return c.checks;
}
