/*
 * Plan validation: recompute every invariant of a plan (the checks are listed by violation code
 * in docs/ANALYSIS.md, "What is checked") against the model
 * and cluster it claims to be made for, and report every violation found, each with a JSON path
 * into the plan file, rather than stopping at the first: a user fixing a hand-edited or foreign
 * plan wants the whole list.
 *
 * Two kinds of checks: structural rules (plan_structure.c, shared with the executor: alignment,
 * no overlap, reverse fill order, range coverage, atomicity, schedule membership, group loads)
 * and comparison with the model and cluster plus recomputation against
 * the planner's own code (cost model, bucket layout of a fresh plan with the same settings,
 * metrics), so that a plan that is self-consistent but disagrees with this build is caught too.
 */
#include "cz_analysis.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cz_plan_checks vctx;
#define at cz_plan_checks_at
#define viol cz_plan_checks_fail
#define close_rel cz_close_rel

/* ---- content hash ----------------------------------------------------------------------- */

/* A plan read from a file whose recorded content hash does not match was edited after it was
 * written: the executor refuses it, so validate says so too (and goes on listing the rest). */
static void check_content_hash(vctx *c, const cz_plan *p)
{
    if (p->content_hash_ok == 0)
        return; /* built in memory, or a file without a hash: checked against the model below */
    at(c, "$.content_sha256");
    c->checks++;
    if (p->content_hash_ok < 0)
        viol(c, "plan.content_hash",
             "plan content hash mismatch: the plan was edited after it was written; re-run "
             "canzona plan");
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
    if (q->def.nblocks != d->nblocks || (d->nblocks > 0 && q->def.block_dim != d->block_dim))
        return 0;
    for (int b = 0; b < d->nblocks; b++)
        if (!q->def.block_sizes || !d->block_sizes || q->def.block_sizes[b] != d->block_sizes[b])
            return 0;
    return 1;
}

/* Whether the plan's parameter is the model's parameter (so that its cost is comparable). */
static int same_def(const cz_plan_param *q, const cz_param_def *d)
{
    return q->def.name && d->name && !strcmp(q->def.name, d->name) && q->def.ndim == d->ndim &&
           q->def.shape[0] == d->shape[0] && q->def.shape[1] == d->shape[1] &&
           q->def.tp_dim == d->tp_dim && q->def.kind == d->kind && same_blocks(q, d);
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
        at(c, "$.params[%zu].name", i);
        check_str(c, "parameter name", q->def.name, d->name);
        at(c, "$.params[%zu].shape", i);
        c->checks++;
        if (q->def.ndim != d->ndim || q->def.shape[0] != d->shape[0] ||
            q->def.shape[1] != d->shape[1])
            viol(c, "param.shape",
                 "'%s' has shape %lldx%lld (%dD) but the model has %lldx%lld (%dD)", d->name,
                 (long long)q->def.shape[0], (long long)q->def.shape[1], q->def.ndim,
                 (long long)d->shape[0], (long long)d->shape[1], d->ndim);
        at(c, "$.params[%zu].tp_dim", i);
        c->checks++;
        if (q->def.tp_dim != d->tp_dim)
            viol(c, "param.tp_dim", "'%s' has tp_dim %d but the model has %d", d->name,
                 q->def.tp_dim, d->tp_dim);
        at(c, "$.params[%zu].optimizer", i);
        c->checks++;
        if (q->def.kind != d->kind)
            viol(c, "param.optimizer", "'%s' is %s but the model says %s", d->name,
                 cz_kind_name(q->def.kind), cz_kind_name(d->kind));
        at(c, "$.params[%zu].blocks", i);
        c->checks++;
        if (!same_blocks(q, d)) {
            char qb[160], db[160];
            viol(c, "param.blocks", "'%s' has blocks %s but the model has %s", d->name,
                 blocks_text(qb, sizeof qb, q->def.nblocks, q->def.block_dim, q->def.block_sizes),
                 blocks_text(db, sizeof db, d->nblocks, d->block_dim, d->block_sizes));
        }
        if (!same_def(q, d))
            c->foreign = 1;
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
                 p->params[i].def.name, p->params[i].cost, want, cz_unit_name(p->settings.unit));
    }
}

/* ---- bucket layout ---------------------------------------------------------------------- */

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
        else if (x->elementwise != y->elementwise)
            viol(c, "bucket.layout", "bucket is in the %s buffer but the layout rules give the %s",
                 x->elementwise ? "elementwise" : "matrix",
                 y->elementwise ? "elementwise" : "matrix");
    }
    size_t n = p->nparams < ref->nparams ? p->nparams : ref->nparams;
    for (size_t i = 0; i < n; i++) {
        const cz_plan_param *x = &p->params[i], *y = &ref->params[i];
        at(c, "$.params[%zu].stage", i);
        c->checks++;
        if (x->stage != y->stage)
            viol(c, "param.stage", "'%s' is in stage %d but the stage assignment gives %d",
                 x->def.name, x->stage, y->stage);
        at(c, "$.params[%zu].bucket", i);
        c->checks++;
        if (x->bucket != y->bucket || x->offset != y->offset)
            viol(c, "bucket.layout",
                 "'%s' is at bucket %d offset %lld but the layout rules give bucket %d offset %lld",
                 x->def.name, x->bucket, (long long)x->offset, y->bucket, (long long)y->offset);
    }
done:
    cz_plan_free(ref);
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
    if (cz_plan_has_split_tasks(p)) { /* stored only in version 2 plans */
        cmp_scalar(c, "$.metrics.average_load", f->average_load, w->average_load);
        cmp_scalar(c, "$.metrics.split_lower_bound", f->split_lower_bound, w->split_lower_bound);
    }
    cmp_array(c, "$.metrics.memory", f->memory, w->memory, ng);
    cmp_scalar(c, "$.metrics.predicted_step_s", f->predicted_step_s, w->predicted_step_s);
done:
    cz_plan_metrics_free(&tmp.metrics);
}

int cz_plan_validate_json(const cz_plan *plan, const cz_model *model, const cz_cluster *cluster,
                          json_t **violations_out, cz_error *err)
{
    vctx c = {0};
    *violations_out = NULL;
    if (!plan || !model || !cluster)
        return cz_error_set(err, CZ_EINVALID, "validate: plan, model and cluster are required");
    c.out = json_array();
    if (!c.out)
        return cz_error_set(err, CZ_ENOMEM, "validate: out of memory");

    check_content_hash(&c, plan);
    check_inputs(&c, plan, model, cluster);
    check_param_identity(&c, plan, model);
    check_param_costs(&c, plan, model, cluster);
    cz_plan_check_structure(&c, plan);
    if (!c.unsafe && !c.foreign)
        check_layout_reference(&c, plan, model, cluster);
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
