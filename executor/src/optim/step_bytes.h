/*
 * step_bytes.h — the device bytes one optimizer step reads and writes, pass by pass, for one GPU
 * of a plan (step_bytes.c): plain C from the plan and the executor's own layouts (the
 * pipeline's run maps, cz__exec_pipeline_probe; the Newton-Schulz batches, ns_workload.h), so
 * that a GPU's step time can be set against what its memory bandwidth allows
 * (`canzona-bench --dry-run`, docs/PERF.md section 7).
 */
#ifndef CZ_STEP_BYTES_H
#define CZ_STEP_BYTES_H

#include "cz_format.h"

#include <stdint.h>

/* The step's passes over device memory, in the order a step runs them. */
typedef enum cz_step_pass {
    CZ_PASS_STAGE_IN,     /* the job's gradients widened to the fp32 copy (bf16 jobs) */
    CZ_PASS_RS_NARROW,    /* each bucket narrowed to the bf16 wire */
    CZ_PASS_RS_WIRE,      /* the reduce-scatter's send and receive buffers */
    CZ_PASS_RS_AVERAGE,   /* my range widened (bf16 wire) and scaled by 1 / DP */
    CZ_PASS_GRAD_NORM,    /* the sum of squares of every owned shard */
    CZ_PASS_ELEMENTWISE,  /* AdamW over the owned elementwise pieces */
    CZ_PASS_GATHER_PACK,  /* micro-group gathers: my shards into the send buffers */
    CZ_PASS_UNPACK,       /* received shards (and replicated parts) into full gradients */
    CZ_PASS_MOMENTUM,     /* Muon's momentum over every part I compute */
    CZ_PASS_NS_LOAD,      /* normalise (sum of squares, then copy) into the batch */
    CZ_PASS_NS_GEMM,      /* the iterations' GEMM operands, read once and written once */
    CZ_PASS_NS_STORE,     /* the orthogonalised blocks, scaled, into the full updates */
    CZ_PASS_SCATTER_PACK, /* each TP rank's shard of my updates into the send buffers */
    CZ_PASS_APPLY,        /* p = p (1 - lr wd) - lr u over my shards */
    CZ_PASS_AG_NARROW,    /* my range narrowed to the bf16 wire */
    CZ_PASS_AG_WIRE,      /* the all-gather's buffers */
    CZ_PASS_AG_WIDEN,     /* the other ranks' ranges widened back */
    CZ_PASS_MASTER_OUT,   /* the fp32 master copy rewritten into the job's bf16 parameters */
    CZ_NPASSES
} cz_step_pass;

typedef struct cz_step_bytes {
    int64_t read[CZ_NPASSES], write[CZ_NPASSES];
    int64_t total_read, total_write;
    /* Elements behind the figures: the rank's buffer, its DP ranges, the parts it computes. */
    int64_t buffer, ranges, hosted, ns_elems;
} cz_step_bytes;

/* A pass's name, for tables. */
const char *cz__step_pass_name(cz_step_pass p);

/* The bytes of one steady-state step (the master copy loaded) of GPU (dp_rank, tp_rank) for a
 * job of `dtype` (fp32 or bf16, flat buffers; a bf16 job is staged through fp32 copies and
 * sends bf16 over the DP wire) with `ns_steps` Newton-Schulz iterations. Dense one-stage plans
 * with Muon and AdamW, without cooperative tasks; anything else is refused (CZ_EUNSUPPORTED,
 * saying what). Gradient clipping, QK-clip and NorMuon are not counted. */
int cz__step_bytes(const cz_plan *plan, int dp_rank, int tp_rank, cz_dtype dtype, int ns_steps,
                   cz_step_bytes *out, cz_error *err);

#endif /* CZ_STEP_BYTES_H */
