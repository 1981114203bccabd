/*
 * A plan against the model it claims to be made for, parameter by parameter (name, shape, TP
 * dimension, optimizer, blocks, heads). Written once for the two consumers that hold both files:
 * `canzona validate` (planner/lib/validate.c) lists every difference under its own violation
 * codes and goes on checking, and canzona-bench refuses the plan on the first difference
 * (cz__plan_check_model), because the executor it drives sees only the plan.
 */
#include "cz_format.h"

#include <stdio.h>
#include <string.h>

static bool same_blocks(const cz_plan_param *q, const cz_param_def *d)
{
    if (q->def.nblocks != d->nblocks || (d->nblocks > 0 && q->def.block_dim != d->block_dim))
        return false;
    for (int b = 0; b < d->nblocks; b++)
        if (!q->def.block_sizes || !d->block_sizes || q->def.block_sizes[b] != d->block_sizes[b])
            return false;
    return true;
}

unsigned cz__plan_param_diff(const cz_plan_param *q, const cz_param_def *d)
{
    unsigned diff = 0;
    if (!q->def.name || !d->name || strcmp(q->def.name, d->name) != 0)
        diff |= CZ_PARAM_DIFF_NAME;
    if (q->def.ndim != d->ndim || q->def.shape[0] != d->shape[0] || q->def.shape[1] != d->shape[1])
        diff |= CZ_PARAM_DIFF_SHAPE;
    if (q->def.tp_dim != d->tp_dim)
        diff |= CZ_PARAM_DIFF_TP_DIM;
    if (q->def.kind != d->kind)
        diff |= CZ_PARAM_DIFF_KIND;
    if (!same_blocks(q, d))
        diff |= CZ_PARAM_DIFF_BLOCKS;
    if (q->def.head_size != d->head_size || (d->head_size > 0 && q->def.head_dim != d->head_dim))
        diff |= CZ_PARAM_DIFF_HEADS;
    return diff;
}

const char *cz__blocks_text(char *buf, size_t cap, int nblocks, int dim, const int64_t *sizes)
{
    if (nblocks <= 0 || !sizes) {
        snprintf(buf, cap, "none");
        return buf;
    }
    size_t len = (size_t)snprintf(buf, cap, "dim %d [", dim);
    for (int b = 0; b < nblocks && len < cap; b++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", b ? ", " : "", (long long)sizes[b]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
    return buf;
}

const char *cz__heads_text(char *buf, size_t cap, const cz_param_def *d)
{
    if (d->head_size <= 0)
        snprintf(buf, cap, "none");
    else
        snprintf(buf, cap, "dim %d size %lld", d->head_dim, (long long)d->head_size);
    return buf;
}

/* The first difference of plan parameter i from the model's, named with its JSON path. */
static int check_param(const cz_plan_param *p, const cz_param_def *d, size_t i, cz_error *err)
{
    unsigned diff = cz__plan_param_diff(p, d);
    if (diff & (CZ_PARAM_DIFF_NAME | CZ_PARAM_DIFF_SHAPE))
        return cz__error_set(err, CZ_EMISMATCH,
                             "plan param %zu is '%s' [%lld, %lld] but the model has '%s' "
                             "[%lld, %lld]",
                             i, p->def.name, (long long)p->def.shape[0], (long long)p->def.shape[1],
                             d->name, (long long)d->shape[0], (long long)d->shape[1]);
    if (diff & CZ_PARAM_DIFF_TP_DIM)
        return cz__error_set(err, CZ_EMISMATCH,
                             "$.params[%zu].tp_dim: '%s' has tp_dim %d in the plan but %d in the "
                             "model",
                             i, d->name, p->def.tp_dim, d->tp_dim);
    if (diff & CZ_PARAM_DIFF_KIND)
        return cz__error_set(err, CZ_EMISMATCH,
                             "$.params[%zu].optimizer: '%s' is %s in the plan but %s in the model",
                             i, d->name, cz__kind_name(p->def.kind), cz__kind_name(d->kind));
    if (diff & CZ_PARAM_DIFF_BLOCKS) {
        char pb[160], mb[160];
        return cz__error_set(
            err, CZ_EMISMATCH,
            "$.params[%zu].blocks: '%s' has blocks %s in the plan but %s in the model", i, d->name,
            cz__blocks_text(pb, sizeof pb, p->def.nblocks, p->def.block_dim, p->def.block_sizes),
            cz__blocks_text(mb, sizeof mb, d->nblocks, d->block_dim, d->block_sizes));
    }
    if (diff & CZ_PARAM_DIFF_HEADS) {
        char ph[64], mh[64];
        return cz__error_set(err, CZ_EMISMATCH,
                             "$.params[%zu].heads: '%s' has heads %s in the plan but %s in the "
                             "model",
                             i, d->name, cz__heads_text(ph, sizeof ph, &p->def),
                             cz__heads_text(mh, sizeof mh, d));
    }
    return CZ_OK;
}

int cz__plan_check_model(const cz_plan *plan, const cz_model *model, cz_error *err)
{
    if (plan->nparams != model->nparams)
        return cz__error_set(err, CZ_EMISMATCH, "plan has %zu params, model '%s' has %zu",
                             plan->nparams, model->name, model->nparams);
    for (size_t i = 0; i < plan->nparams; i++) {
        int rc = check_param(&plan->params[i], &model->params[i], i, err);
        if (rc)
            return rc;
    }
    if (plan->dtype != model->dtype)
        return cz__error_set(err, CZ_EMISMATCH, "the plan's dtype is %s but the model's is %s",
                             cz_dtype_name(plan->dtype), cz_dtype_name(model->dtype));
    if (plan->model_sha256 && strcmp(plan->model_sha256, model->sha256) != 0)
        return cz__error_set(err, CZ_EMISMATCH,
                             "the plan was made for a model with sha256 %.12s..., %s has %.12s...",
                             plan->model_sha256, model->source ? model->source : "--model",
                             model->sha256);
    return CZ_OK;
}
