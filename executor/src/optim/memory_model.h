/*
 * memory_model.h — the backend memory the executor allocates for one GPU of a plan, by kind
 * (cz_exec_mem_kind), predicted in plain C from the plan and the job's binding (memory_model.c),
 * without creating an executor or allocating backend memory: what cz_executor_memory_usage
 * records after create and the first bind (`canzona-bench --dry-run`, docs/EXECUTOR.md
 * "Memory"). tests/exec/test_memory.c holds the two equal, kind by kind.
 */
#ifndef CZ_MEMORY_MODEL_H
#define CZ_MEMORY_MODEL_H

#include "canzona_exec.h"
#include "cz_format.h"

#include <stdbool.h>

/* What of the job the bytes depend on besides the plan. */
typedef struct cz_exec_mem_job {
    cz_dtype dtype;           /* the bound buffers' dtype: fp32 or bf16 */
    bool staged;              /* the step runs on the executor's fp32 copies (a bf16 job, buffers
                                 bound per parameter, or a host-staged device backend) */
    bool grad_reduce_in_fp32; /* cz_exec_config.grad_reduce_in_fp32 (bf16 jobs) */
    bool normuon;             /* NorMuon is on (refused: its second moments are not counted) */
} cz_exec_mem_job;

/* The bytes of GPU (dp_rank, tp_rank) after create and the first bind. Dense one-stage plans
 * (not fully sharded) with Muon and AdamW, without cooperative tasks or NorMuon; anything else
 * is refused (CZ_EUNSUPPORTED, saying what). */
int cz__exec_memory_predict(const cz_plan *plan, int dp_rank, int tp_rank,
                            const cz_exec_mem_job *job, cz_exec_mem_usage *out, cz_error *err);

/* *out from per-kind bytes (model_states and beyond summed; executor.c). */
void cz__exec_mem_usage_of(const int64_t *bytes, cz_exec_mem_usage *out);

#endif /* CZ_MEMORY_MODEL_H */
