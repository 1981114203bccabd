/*
 * executor_impl.h — the executor object and what only the executor's core files share:
 * creation, the plan checks, the pipeline's entry points. It names no backend and no
 * optimizer: those are behind the seams (compute.h, comm.h, optimizer.h).
 */
#ifndef CZ_EXECUTOR_IMPL_H
#define CZ_EXECUTOR_IMPL_H

#include "canzona_exec.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "optimizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* This rank's share of the plan's buckets and parameters (cz__exec_holds_bucket, cz__exec_holds),
 * listed once at create. */
typedef struct cz_exec_held {
    int *buckets, *params;
    int nbuckets, nparams;
} cz_exec_held;

struct cz_executor {
    const cz_plan *plan;
    cz_plan *owned_plan; /* non-NULL when created from a file */
    cz_exec_config cfg;
    cz_compute compute;
    const cz_comm_backend *comm;      /* the comm backend the planes are of (comm.c) */
    cz_ctrl ctrl;                     /* control plane over the world */
    cz_plane world, dp_comm, tp_comm; /* data planes; dp and tp are split from world */
    int dp, tp, dp_rank, tp_rank;
    /* Pipeline parallelism: the plan's pp and this process's stage (world rank / (dp * tp),
     * Megatron-Core's order with PP outermost). A rank binds, steps and keeps optimizer state
     * for its stage's buckets and parameters only. */
    int pp, stage;
    /* Expert groups (cz_plan_has_experts; docs/EXECUTOR.md): this rank's place in
     * Megatron-Core's expert grid of its stage (local rank = dp_rank * tp + tp_rank = (edp_rank
     * * ep + ep_rank) * etp + etp_rank), the expert-DP and ETP planes, its expert rank's
     * schedule and pipeline. Its buffer is the stage's dense buckets, then its EP rank's expert
     * buckets from expert_base on. All 0 / NULL without expert groups. */
    bool experts;
    int ep, etp, edp, ep_rank, etp_rank, edp_rank;
    cz_plane edp_comm, etp_comm;
    const cz_rank_schedule *expert_schedule;
    struct cz_pipeline *epipe;
    int64_t expert_base;
    bool sc; /* synchronous compute: every TP rank updates every matrix */
    size_t buffer_numel;
    const cz_rank_schedule *schedule; /* my DP rank's */

    /* Bound buffers (of dtype): per param pointers to its local shard, or the flat ones. */
    cz_dtype dtype;
    void **param_ptr, **grad_ptr;
    bool *bound;
    void *flat_params, *flat_grads; /* NULL when bound per parameter */
    float *scratch;                 /* backend: max bucket range, for the reduce-scatter */

    /* Owned parameters, every kind (ids ascending). A split-layout plan's elementwise
     * parameter is owned in part: the piece of it in my DP range. */
    int *owned;
    int nowned;
    int64_t *piece_lo, *piece_len; /* indexed by param id: the owned piece, relative to the
                                      parameter's start (0 and numel for a whole one) */
    /* Indexed by param id: where its local shard starts in the flat buffers (its bucket's
     * offset plus its own), every parameter's, computed once at create. */
    int64_t *param_off;
    double *stats;      /* backend: per owned parameter, sum of squares of its gradient */
    double *stats_host; /* host copy, read back once per step */
    /* Compute events the DP collectives wait for: gradients staged, parameters updated. */
    cz_event *ev_grads, *ev_params;
    /* The optimizers (optimizer.h): the plan's matrix optimizer, and the elementwise one.
     * Each owns its state, backend memory allocated at create time. */
    cz_optim matrix_opt, elem_opt;
    /* Indexed by param id: each parameter's rate and decoupled weight decay (rates.c), which
     * optimizers with per-parameter rates read (cz_optim.param_rates). */
    cz_opt_rates *rates;
    bool matrix_rates_uniform; /* every matrix parameter's are the matrix optimizer's own */
    bool rates_changed;        /* since the ranks last compared them (create, the setters) */

    /* Per-parameter binding: staging copies of the flat layout. */
    /* Staging (per-parameter binding or a dtype other than fp32): the step runs on fp32 flat
     * copies. With bf16, stage_params is the fp32 master copy, loaded at the first step. */
    bool per_param, staged, master_loaded;
    /* The cuda backend under a host-driven plane: buffers are managed memory and the step
     * always stages the job's buffers through them (cz__compute_open_for). */
    bool host_staged;
    float *stage_params, *stage_grads; /* backend memory, allocated at bind */
    int async_rc;                      /* result of the step started by step_async */
    cz_error async_err;                /* and its message */
    bool async_active;                 /* a step was started and not yet waited for */
    bool bind_agreed;                  /* all ranks confirmed their binding at the first step */

    struct cz_pipeline *pipe; /* micro-group layouts and communication buffers */

    /* This rank's buckets (the stage's dense ones, its EP rank's expert ones) and parameters,
     * indices ascending: what a step stages, reduces and gathers. */
    cz_exec_held held;

    /* The bucket-wise step (bucket_step.c), made at its first use (NULL before). bws_settle,
     * set with it, completes what such a step left in flight (its parameter all-gathers)
     * before the plain step, a checkpoint or a setter touches the state, and refuses while one
     * is open: a pointer, so that the plain step does not depend on the bucket-wise one. */
    struct cz_bucket_step *bws;
    int (*bws_settle)(cz_executor *ex, const char *what, cz_error *err);

    int64_t steps;
    cz_exec_timings last;
    double grad_norm; /* of the last step, before clipping */
};

/* Whether this rank holds parameter p: of its stage, and for a routed expert of a plan with
 * expert groups, of its EP rank. */
static inline bool cz__exec_holds(const struct cz_executor *ex, const cz_plan_param *p)
{
    return p->stage == ex->stage && (!ex->experts || !p->expert || p->ep_rank == ex->ep_rank);
}

/* Whether bucket b is in this rank's buffer (its stage's dense buckets, its EP rank's expert
 * ones). */
static inline bool cz__exec_holds_bucket(const struct cz_executor *ex, const cz_plan_bucket *b)
{
    return b->stage == ex->stage && (!b->expert || b->ep_rank == ex->ep_rank);
}

/* Creates an executor over plan; takes ownership of `owned` (may be NULL, else == plan),
 * which is freed on failure too. A non-zero pre_rc is a failure that happened before (err
 * already describes it, e.g. the plan file did not load): the ranks still meet to agree. */
int cz__executor_create_impl(cz_executor **out, const cz_plan *plan, cz_plan *owned,
                             const cz_exec_config *cfg, int pre_rc, cz_error *err);
/* Plan checks the executor needs (pp, strategies, ranges bounding ownership, schedules). */
int cz__exec_plan_check(const cz_plan *plan, cz_error *err);
/* Fingerprint of the parts of a plan the ranks must agree on. */
uint64_t cz__exec_plan_fingerprint(const cz_plan *plan);
/* Precomputes the micro-group layouts of my DP rank's schedule, allocates the pipeline's
 * buffers, and hands the matrix optimizer the parts this rank holds, group by group
 * (group_add) (pipeline.c). */
int cz__exec_pipeline_init(cz_executor *ex, cz_error *err);
void cz__exec_pipeline_free(cz_executor *ex);
/* The per-parameter rates from the optimizers' own, at create, after the optimizers (rates.c). */
int cz__exec_rates_init(cz_executor *ex, cz_error *err);
/* Runs the micro-group pipeline of the owned matrix parameters on flat buffers P, G: in the
 * plan's order, or with `rest` (a bucket-wise step after early updates), the groups they left
 * in readiness order. */
int cz__exec_matrix_pipeline(cz_executor *ex, float *P, const float *G, bool rest, cz_error *err);
/* A micro-group's readiness: the highest bucket index among its tasks' parameters (its inputs
 * are all reduced once the buckets up to it are); -1 for a group without tasks (pipeline.c). */
int64_t cz__exec_group_ready(const cz_plan *plan, const cz_plan_group *g);
/* Early updates (pipeline.c): the groups of both pipelines in readiness order (each group's
 * highest bucket index, ascending). _next: the highest bucket the next group not yet run needs
 * (INT64_MAX: none left); _run: runs the groups not yet run whose buckets are all at most upto,
 * adding their number to *ran; _reset: none run (a new step). */
int64_t cz__exec_early_next(const cz_executor *ex);
int cz__exec_early_run(cz_executor *ex, float *P, const float *G, int64_t upto, int *ran,
                       cz_error *err);
void cz__exec_early_reset(cz_executor *ex);

#endif /* CZ_EXECUTOR_IMPL_H */
