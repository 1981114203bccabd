/* The job's buffers bound to the executor (cz_executor_bind_buffers, bind_typed, bind_param,
 * bind_param_typed) and their staging: the step runs on fp32 flat buffers, the job's own when
 * they are fp32 and flat, else copies (backend memory, allocated at the first bind) that each
 * step stages the job's buffers into and out of. Gradients come in every step; parameters at
 * every step for fp32, and only at the first for bf16 (stage_params is then the fp32 master
 * copy). */
#include "alloc.h"
#include "binding.h"
#include "canzona_exec.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "fsdp_shard.h"

#include <string.h>

int cz__binding_init(cz_executor *ex, cz_error *err)
{
    cz_exec_binding *b = &ex->bind;
    size_t n = ex->plan->nparams ? ex->plan->nparams : 1;
    b->elem_bytes = cz__dtype_bytes(b->dtype);
    b->param_ptr = cz__exec_calloc(n, sizeof *b->param_ptr);
    b->grad_ptr = cz__exec_calloc(n, sizeof *b->grad_ptr);
    b->bound = cz__exec_calloc(n, sizeof *b->bound);
    if (!b->param_ptr || !b->grad_ptr || !b->bound)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's binding tables");
    return CZ_OK;
}

void cz__binding_free(cz_executor *ex)
{
    cz_exec_binding *b = &ex->bind;
    if (ex->compute.ops) {
        if (b->stage_params)
            ex->compute.ops->release(&ex->compute, b->stage_params);
        if (b->stage_grads)
            ex->compute.ops->release(&ex->compute, b->stage_grads);
    }
    cz__exec_free(b->param_ptr);
    cz__exec_free(b->grad_ptr);
    cz__exec_free(b->bound);
    memset(b, 0, sizeof *b);
}

static float *falloc(cz_executor *ex, cz_exec_mem_kind kind, size_t n)
{
    return cz__compute_alloc(&ex->compute, kind, (n > 0 ? n : 1) * sizeof(float));
}

static int alloc_staging(cz_executor *ex, cz_error *err)
{
    if (!ex->bind.stage_params)
        ex->bind.stage_params = falloc(ex, CZ_EXEC_MEM_PARAMS, ex->buffer_numel);
    if (!ex->bind.stage_grads)
        ex->bind.stage_grads = falloc(ex, CZ_EXEC_MEM_GRADS, ex->buffer_numel);
    if (!ex->bind.stage_params || !ex->bind.stage_grads)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for %zu-element staging buffers",
                             ex->buffer_numel);
    return CZ_OK;
}

static int check_dtype(const cz_executor *ex, const char *what, cz_dtype dtype, cz_error *err)
{
    if (dtype != ex->bind.dtype)
        return cz__error_set(err, CZ_EMISMATCH,
                             "%s: buffers of dtype %s but this executor binds %s (the plan's "
                             "dtype, or cz_exec_config.dtype)",
                             what, cz_dtype_name(dtype), cz_dtype_name(ex->bind.dtype));
    return CZ_OK;
}

int cz_executor_bind_typed(cz_executor *ex, void *params, void *grads, size_t numel, cz_dtype dtype,
                           cz_error *err)
{
    if (!ex || !params || !grads)
        return cz__error_set(err, CZ_EINVALID,
                             "bind_buffers: executor and buffers must be non-NULL");
    if (ex->bind.per_param)
        return cz__error_set(err, CZ_EINVALID,
                             "bind_buffers: parameters were already bound one by one");
    if (numel != ex->buffer_numel && cz_plan_is_fsdp(ex->plan))
        return cz__error_set(err, CZ_EMISMATCH,
                             "bind_buffers: buffers hold %zu elements but DP rank %d's FSDP2 "
                             "shards of its stage's parameters hold %zu (each parameter's rows "
                             "as torch.chunk cuts them along dim 0, in plan order)",
                             numel, ex->grid.dp_rank, ex->buffer_numel);
    if (numel != ex->buffer_numel)
        return cz__error_set(err, CZ_EMISMATCH,
                             "bind_buffers: buffers hold %zu elements but the plan's buckets need "
                             "%zu (sum of bucket sizes, padding included)",
                             numel, ex->buffer_numel);
    int rc;
    bool staged = dtype != CZ_DTYPE_FP32 || ex->bind.host_staged;
    if ((rc = check_dtype(ex, "bind_buffers", dtype, err)) != CZ_OK ||
        (staged && (rc = alloc_staging(ex, err)) != CZ_OK))
        return rc;
    ex->bind.staged = staged;
    ex->bind.master_loaded = false;
    ex->bind.flat_params = params;
    ex->bind.flat_grads = grads;
    return CZ_OK;
}

int cz_executor_bind_buffers(cz_executor *ex, float *param_buf, float *grad_buf, size_t numel,
                             cz_error *err)
{
    return cz_executor_bind_typed(ex, param_buf, grad_buf, numel, CZ_DTYPE_FP32, err);
}

int cz_executor_bind_param_typed(cz_executor *ex, const char *name, void *param, void *grad,
                                 int64_t rows, int64_t cols, cz_dtype dtype, cz_error *err)
{
    if (!ex || !name || !param || !grad)
        return cz__error_set(err, CZ_EINVALID,
                             "bind_param: executor, name and buffers must be non-NULL");
    if (ex->bind.flat_params)
        return cz__error_set(err, CZ_EINVALID, "bind_param('%s'): flat buffers are already bound",
                             name);
    const cz_plan *plan = ex->plan;
    size_t i = 0;
    while (i < plan->nparams && strcmp(plan->params[i].def.name, name) != 0)
        i++;
    if (i == plan->nparams)
        return cz__error_set(err, CZ_EMISMATCH, "bind_param: the plan has no parameter named '%s'",
                             name);
    const cz_plan_param *p = &plan->params[i];
    if (p->stage == ex->grid.stage && !cz__exec_holds(ex, p))
        return cz__error_set(err, CZ_EMISMATCH,
                             "bind_param('%s'): the routed expert is on EP rank %d but this rank "
                             "is EP rank %d of the plan's expert grid; bind only your EP rank's "
                             "experts",
                             name, p->ep_rank, ex->grid.ep_rank);
    if (p->stage != ex->grid.stage)
        return cz__error_set(err, CZ_EMISMATCH,
                             "bind_param('%s'): the parameter is in pipeline stage %d but this "
                             "rank runs stage %d (world rank / (dp * tp)); bind only your stage's "
                             "parameters",
                             name, p->stage, ex->grid.stage);
    int64_t lr = p->local_shape[0], lc = p->def.ndim == 1 ? 1 : p->local_shape[1];
    /* A fully sharded plan's gradient shard is FSDP2's: the rows torch.chunk gives this DP rank
     * (the step's first agreement then refuses it on every rank: this one has not bound it). */
    cz_block sh = cz__fsdp_shard_block(plan, p, ex->grid.dp_rank);
    if (cz_plan_is_fsdp(plan) && (rows != sh.rows || cols != sh.cols))
        return cz__error_set(
            err, CZ_EMISMATCH,
            "bind_param('%s'): shard shape [%lld, %lld] but DP rank %d of %d holds rows "
            "[%lld, %lld) of the [%lld, %lld] %s (FSDP2's torch.chunk "
            "along dim 0: ceil(%lld / %d) = %lld rows per rank, the last ranks "
            "fewer): expected [%lld, %lld]",
            name, (long long)rows, (long long)cols, ex->grid.dp_rank, ex->grid.dp, (long long)sh.r0,
            (long long)(sh.r0 + sh.rows), (long long)lr, (long long)lc,
            ex->grid.tp > 1 ? "TP shard of the parameter" : "parameter", (long long)lr, ex->grid.dp,
            (long long)p->shard_rows, (long long)sh.rows, (long long)sh.cols);
    if (!cz_plan_is_fsdp(plan) && (rows != lr || cols != lc))
        return cz__error_set(err, CZ_EMISMATCH,
                             "bind_param('%s'): buffer shape [%lld, %lld] but the plan's local "
                             "shape (full [%lld, %lld], tp_dim %d, tp %d) is [%lld, %lld]",
                             name, (long long)rows, (long long)cols, (long long)p->def.shape[0],
                             (long long)p->def.shape[1], p->def.tp_dim, ex->grid.tp, (long long)lr,
                             (long long)lc);
    int rc;
    if ((rc = check_dtype(ex, "bind_param", dtype, err)) != CZ_OK ||
        (rc = alloc_staging(ex, err)) != CZ_OK)
        return rc;
    ex->bind.per_param = ex->bind.staged = true;
    ex->bind.master_loaded = false;
    ex->bind.param_ptr[i] = param;
    ex->bind.grad_ptr[i] = grad;
    ex->bind.bound[i] = true;
    return CZ_OK;
}

int cz_executor_bind_param(cz_executor *ex, const char *name, float *param, float *grad,
                           int64_t rows, int64_t cols, cz_error *err)
{
    return cz_executor_bind_param_typed(ex, name, param, grad, rows, cols, CZ_DTYPE_FP32, err);
}

cz_dtype cz_executor_dtype(const cz_executor *ex)
{
    return ex ? ex->bind.dtype : CZ_DTYPE_FP32;
}

/* The job's buffers (per parameter, or flat of another dtype) into the fp32 flat
 * copies and back. Gradients come in every step; parameters at every step for fp32, and only
 * at the first for bf16 (stage_params is then the fp32 master copy). */
static void *job_param(const cz_exec_binding *b, size_t i, int64_t off)
{
    return b->per_param ? b->param_ptr[i] : (char *)b->flat_params + off * (int64_t)b->elem_bytes;
}

static void *job_grad(const cz_exec_binding *b, size_t i, int64_t off)
{
    return b->per_param ? b->grad_ptr[i] : (char *)b->flat_grads + off * (int64_t)b->elem_bytes;
}

/* One parameter's staging in (its gradient, and its parameter when `params`) and out. */
void cz__binding_stage_in_param(cz_executor *ex, size_t i, bool params)
{
    cz_compute *c = &ex->compute;
    cz_exec_binding *b = &ex->bind;
    int64_t off = ex->held.param_off[i], n = ex->held.param_numel[i];
    if (params)
        c->ops->convert(c, b->stage_params + off, CZ_DTYPE_FP32, job_param(b, i, off), b->dtype, n);
    c->ops->convert(c, b->stage_grads + off, CZ_DTYPE_FP32, job_grad(b, i, off), b->dtype, n);
}

void cz__binding_stage_out_param(cz_executor *ex, size_t i)
{
    cz_compute *c = &ex->compute;
    cz_exec_binding *b = &ex->bind;
    int64_t off = ex->held.param_off[i], n = ex->held.param_numel[i];
    c->ops->convert(c, job_param(b, i, off), b->dtype, b->stage_params + off, CZ_DTYPE_FP32, n);
}

void cz__binding_stage_in(cz_executor *ex)
{
    bool params = ex->bind.dtype == CZ_DTYPE_FP32 || !ex->bind.master_loaded;
    for (int k = 0; k < ex->held.nparams; k++)
        cz__binding_stage_in_param(ex, (size_t)ex->held.params[k], params);
    ex->bind.master_loaded = true;
}

void cz__binding_stage_out(cz_executor *ex)
{
    for (int k = 0; k < ex->held.nparams; k++)
        cz__binding_stage_out_param(ex, (size_t)ex->held.params[k]);
}

int cz__binding_check(cz_executor *ex, cz_error *err)
{
    int rc = CZ_OK;
    if (!ex->bind.flat_params && !ex->bind.per_param)
        rc = cz__error_set(err, CZ_EINVALID,
                           "step: no buffers bound (call bind_buffers or "
                           "bind_param first)");
    for (int k = 0; !rc && ex->bind.per_param && k < ex->held.nparams; k++)
        if (!ex->bind.bound[ex->held.params[k]])
            rc = cz__error_set(err, CZ_EINVALID, "step: parameter '%s' is not bound",
                               ex->plan->params[ex->held.params[k]].def.name);
    if (ex->bind.agreed)
        return rc;
    /* First step: every rank confirms its binding so that a rank that failed to bind cannot
     * leave the others waiting in a collective. */
    ex->phase = (cz_phase){"first step: checking every rank's buffers", ex->steps + 1};
    int64_t v = rc ? ex->ctrl.rank : INT64_MAX;
    cz_error tmp;
    int crc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, &v, 1, &tmp);
    if (rc)
        return rc;
    if (crc) {
        if (err)
            *err = tmp;
        return crc;
    }
    if (v != INT64_MAX)
        return cz__error_set(err, CZ_EINVALID, "step: rank %lld has not bound its buffers",
                             (long long)v);
    ex->bind.agreed = true;
    return CZ_OK;
}
