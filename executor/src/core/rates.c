/* Learning rates and weight decays: the optimizers' own (set_lr, set_weight_decay), one per
 * parameter (set_param_rates: torch's parameter groups), the clipping threshold, and the
 * step's check that every rank set the same. The table ex->rates.param holds every parameter's
 * values whatever way they were set, so that the check and the optimizers that take rates
 * per parameter read one place; an optimizer that takes one rate for all its parameters keeps
 * it in its own settings, which the table mirrors. */
#include "alloc.h"
#include "bucket_step.h"
#include "canzona_exec.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "optimizer.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int check_rate(const char *what, float v, cz_error *err)
{
    if (!(v >= 0.0f) || !isfinite(v))
        return cz__error_set(err, CZ_EINVALID, "%s = %g; expected a finite value >= 0", what,
                             (double)v);
    return CZ_OK;
}

static cz_optim *optim_of(cz_executor *ex, cz_param_kind kind)
{
    return kind == CZ_KIND_MATRIX ? &ex->matrix_opt : &ex->elem_opt;
}

/* Whether every matrix parameter's rates are the matrix optimizer's own: the pipeline then
 * applies a micro-group's updates in one call instead of one per part. */
static void note_uniform(cz_executor *ex)
{
    cz_opt_rates r = ex->matrix_opt.ops->rates(&ex->matrix_opt);
    ex->rates.matrix_uniform = true;
    for (size_t i = 0; i < ex->plan->nparams; i++)
        if (ex->plan->params[i].def.kind == CZ_KIND_MATRIX &&
            (ex->rates.param[i].lr != r.lr || ex->rates.param[i].wd != r.wd))
            ex->rates.matrix_uniform = false;
    ex->rates.changed = true;
}

/* Every parameter of kind to its optimizer's own values. */
static void fill_kind(cz_executor *ex, cz_param_kind kind)
{
    cz_optim *o = optim_of(ex, kind);
    cz_opt_rates r = o->ops->rates(o);
    for (size_t i = 0; i < ex->plan->nparams; i++)
        if (ex->plan->params[i].def.kind == kind)
            ex->rates.param[i] = r;
}

int cz__exec_rates_init(cz_executor *ex, cz_error *err)
{
    size_t n = ex->plan->nparams ? ex->plan->nparams : 1;
    ex->rates.param = cz__exec_calloc(n, sizeof *ex->rates.param);
    if (!ex->rates.param)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's tables");
    fill_kind(ex, CZ_KIND_MATRIX);
    fill_kind(ex, CZ_KIND_ELEMENTWISE);
    for (int k = 0; k < 2; k++) {
        cz_optim *o = k ? &ex->elem_opt : &ex->matrix_opt;
        o->param_rates = o->ops->per_param_rates ? ex->rates.param : NULL;
    }
    note_uniform(ex);
    return CZ_OK;
}

int cz_executor_set_lr(cz_executor *ex, float matrix_lr, float adamw_lr, cz_error *err)
{
    int rc;
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "set_lr: executor is NULL");
    if ((rc = check_rate("set_lr: muon_lr", matrix_lr, err)) != CZ_OK ||
        (rc = check_rate("set_lr: adamw_lr", adamw_lr, err)) != CZ_OK)
        return rc;
    ex->matrix_opt.ops->set_lr(&ex->matrix_opt, matrix_lr);
    ex->elem_opt.ops->set_lr(&ex->elem_opt, adamw_lr);
    for (size_t i = 0; i < ex->plan->nparams; i++)
        ex->rates.param[i].lr =
            ex->plan->params[i].def.kind == CZ_KIND_MATRIX ? matrix_lr : adamw_lr;
    note_uniform(ex);
    return CZ_OK;
}

int cz_executor_set_weight_decay(cz_executor *ex, float matrix_wd, float adamw_wd, cz_error *err)
{
    int rc;
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "set_weight_decay: executor is NULL");
    if ((rc = check_rate("set_weight_decay: muon_wd", matrix_wd, err)) != CZ_OK ||
        (rc = check_rate("set_weight_decay: adamw_wd", adamw_wd, err)) != CZ_OK)
        return rc;
    ex->matrix_opt.ops->set_weight_decay(&ex->matrix_opt, matrix_wd);
    ex->elem_opt.ops->set_weight_decay(&ex->elem_opt, adamw_wd);
    for (size_t i = 0; i < ex->plan->nparams; i++)
        ex->rates.param[i].wd =
            ex->plan->params[i].def.kind == CZ_KIND_MATRIX ? matrix_wd : adamw_wd;
    note_uniform(ex);
    return CZ_OK;
}

/* The values of an optimizer that takes one rate for all its parameters must be one: the
 * first of its parameters and the first that differs, for the message. */
static int check_one_rate(const cz_executor *ex, cz_param_kind kind, const float *lr,
                          const float *wd, cz_error *err)
{
    const cz_optim *o = kind == CZ_KIND_MATRIX ? &ex->matrix_opt : &ex->elem_opt;
    const cz_plan *plan = ex->plan;
    size_t first = plan->nparams;
    if (o->ops->per_param_rates)
        return CZ_OK;
    for (size_t i = 0; i < plan->nparams; i++) {
        if (plan->params[i].def.kind != kind)
            continue;
        if (first == plan->nparams) {
            first = i;
            continue;
        }
        if (lr[i] != lr[first] || wd[i] != wd[first])
            return cz__error_set(err, CZ_EUNSUPPORTED,
                                 "set_param_rates: %s takes one learning rate and weight decay "
                                 "for all its parameters, but '%s' has lr %g, weight decay %g "
                                 "and '%s' lr %g, weight decay %g (put them in one group)",
                                 o->ops->name, plan->params[first].def.name, (double)lr[first],
                                 (double)wd[first], plan->params[i].def.name, (double)lr[i],
                                 (double)wd[i]);
    }
    return CZ_OK;
}

int cz_executor_set_param_rates(cz_executor *ex, const float *lr, const float *wd, size_t n,
                                cz_error *err)
{
    int rc;
    if (!ex || !lr || !wd)
        return cz__error_set(err, CZ_EINVALID, "set_param_rates: executor, lr and wd are needed");
    const cz_plan *plan = ex->plan;
    if (n != plan->nparams)
        return cz__error_set(err, CZ_EMISMATCH,
                             "set_param_rates: %zu values; the plan has %zu parameters "
                             "(cz_executor_param_count)",
                             n, plan->nparams);
    for (size_t i = 0; i < n; i++) {
        char what[160];
        snprintf(what, sizeof what, "set_param_rates: the learning rate of '%s'",
                 plan->params[i].def.name);
        if ((rc = check_rate(what, lr[i], err)) != CZ_OK)
            return rc;
        snprintf(what, sizeof what, "set_param_rates: the weight decay of '%s'",
                 plan->params[i].def.name);
        if ((rc = check_rate(what, wd[i], err)) != CZ_OK)
            return rc;
    }
    if ((rc = check_one_rate(ex, CZ_KIND_MATRIX, lr, wd, err)) != CZ_OK ||
        (rc = check_one_rate(ex, CZ_KIND_ELEMENTWISE, lr, wd, err)) != CZ_OK)
        return rc;
    /* An optimizer's own values follow its first parameter's: those of the one-rate
     * optimizers, and the uniform fast path of the others when their parameters agree. */
    bool seen[2] = {false, false};
    for (size_t i = 0; i < n; i++) {
        cz_param_kind k = plan->params[i].def.kind;
        ex->rates.param[i] = (cz_opt_rates){lr[i], wd[i]};
        if (!seen[k]) {
            cz_optim *o = optim_of(ex, k);
            o->ops->set_lr(o, lr[i]);
            o->ops->set_weight_decay(o, wd[i]);
            seen[k] = true;
        }
    }
    note_uniform(ex);
    return CZ_OK;
}

size_t cz_executor_param_count(const cz_executor *ex)
{
    return ex ? ex->plan->nparams : 0;
}

const char *cz_executor_param_name(const cz_executor *ex, size_t i)
{
    return ex && i < ex->plan->nparams ? ex->plan->params[i].def.name : NULL;
}

int cz_executor_set_momentum(cz_executor *ex, float muon_momentum, float adamw_beta1,
                             float adamw_beta2, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "set_momentum: executor is NULL");
    const float v[3] = {muon_momentum, adamw_beta1, adamw_beta2};
    static const char *const names[3] = {"muon_momentum", "adamw_beta1", "adamw_beta2"};
    for (int k = 0; k < 3; k++)
        if (!(v[k] >= 0.0f && v[k] < 1.0f))
            return cz__error_set(err, CZ_EINVALID, "set_momentum: %s = %g; expected 0 <= %s < 1",
                                 names[k], (double)v[k], names[k]);
    cz_optim *m = &ex->matrix_opt, *e = &ex->elem_opt;
    if (!m->ops->set_momentum || !e->ops->set_momentum)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "set_momentum: %s takes its momentum coefficients only at create",
                             m->ops->set_momentum ? e->ops->name : m->ops->name);
    m->ops->set_momentum(m, muon_momentum, 0.0f);
    e->ops->set_momentum(e, adamw_beta1, adamw_beta2);
    memcpy(ex->rates.momentum, v, sizeof v);
    ex->rates.changed = true;
    return CZ_OK;
}

int cz_executor_set_max_grad_norm(cz_executor *ex, float max_grad_norm, cz_error *err)
{
    int rc;
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "set_max_grad_norm: executor is NULL");
    if ((rc = check_rate("set_max_grad_norm: max_grad_norm", max_grad_norm, err)) != CZ_OK)
        return rc;
    if (cz__bucket_step_early(ex) && max_grad_norm > 0.0f)
        return cz__error_set(err, CZ_EINVALID,
                             "set_max_grad_norm: early updates are on "
                             "(cz_executor_set_early_updates), and clipping needs the global "
                             "norm before any update; turn them off first");
    ex->cfg.max_grad_norm = max_grad_norm;
    ex->rates.changed = true;
    return CZ_OK;
}
