/*
 * binding.h — the job's buffers bound to the executor (binding.c; the object is
 * cz_exec_binding in executor_impl.h) and their staging into the fp32 flat copies a step runs
 * on. The public binding calls (cz_executor_bind_*) are in canzona_exec.h.
 */
#ifndef CZ_BINDING_H
#define CZ_BINDING_H

#include "executor_impl.h"

#include <stdbool.h>
#include <stddef.h>

/* The binding's tables (per parameter), at create, once its dtype (the plan's or the
 * config's) and host_staged (the backend's answer) are set. cz__binding_free releases them
 * and the staging copies. */
int cz__binding_init(cz_executor *ex, cz_error *err);
void cz__binding_free(cz_executor *ex);

/* Staging into the fp32 flat copies (gradients; parameters for fp32, or until the master copy
 * is loaded) and out of them (parameters), of every held parameter or of parameter i. */
void cz__binding_stage_in(cz_executor *ex);
void cz__binding_stage_out(cz_executor *ex);
void cz__binding_stage_in_param(cz_executor *ex, size_t i, bool params);
void cz__binding_stage_out_param(cz_executor *ex, size_t i);

/* Every held parameter bound; at the first step agreed across ranks (collective then). */
int cz__binding_check(cz_executor *ex, cz_error *err);

/* The fp32 flat buffers a step runs on: the staging copies, or the job's own. */
static inline float *cz__binding_params(const cz_exec_binding *b)
{
    return b->staged ? b->stage_params : (float *)b->flat_params;
}

static inline float *cz__binding_grads(const cz_exec_binding *b)
{
    return b->staged ? b->stage_grads : (float *)b->flat_grads;
}

#endif /* CZ_BINDING_H */
