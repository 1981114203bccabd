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

/* Where this rank stands in the plan's grid, fixed at create. Pipeline parallelism: the plan's
 * pp and this process's stage (world rank / (dp * tp), Megatron-Core's order with PP
 * outermost); a rank binds, steps and keeps optimizer state for its stage's buckets and
 * parameters only. Expert groups (cz_plan_has_experts; docs/EXECUTOR.md): this rank's place in
 * Megatron-Core's expert grid of its stage (local rank = dp_rank * tp + tp_rank = (edp_rank *
 * ep + ep_rank) * etp + etp_rank); its buffer is the stage's dense buckets, then its EP rank's
 * expert buckets from expert_base on. All 0 without expert groups. */
typedef struct cz_exec_grid {
    int dp, tp, dp_rank, tp_rank;
    int pp, stage;
    bool experts;
    int ep, etp, edp, ep_rank, etp_rank, edp_rank;
    int64_t expert_base;
    bool sc; /* synchronous compute: every TP rank updates every matrix */
    /* Every rank's place is its world rank's in check_grid's order (no job gave another), as
     * the ranks agreed: each rank then knows its planes' members without asking the others. */
    bool world_order;
} cz_exec_grid;

/* The data planes, split from world at create: DP and TP, with expert groups the expert-DP
 * and ETP planes, and for a fully sharded plan at TP above 1 its stage's shard group (closed:
 * ops NULL). */
typedef struct cz_exec_planes {
    cz_plane world, dp, tp, edp, etp, shard;
} cz_exec_planes;

/* This rank's share of the plan's buckets and parameters (cz__exec_holds_bucket, cz__exec_holds),
 * listed once at create, indices ascending, and where each parameter's local shard starts in
 * the flat buffers (its bucket's offset plus its own; a fully sharded plan's: its FSDP2 shards
 * in plan order) and how many elements of it this rank holds there (numel; a fully sharded
 * plan's: its shard's), indexed by param id. */
typedef struct cz_exec_held {
    int *buckets, *params;
    int nbuckets, nparams;
    int64_t *param_off, *param_numel;
} cz_exec_held;

/* The parameters this rank updates, every kind (ids ascending). A split-layout plan's
 * elementwise parameter is owned in part: the piece of it in my DP range (piece_lo, piece_len:
 * indexed by param id, relative to the parameter's start; 0 and numel for a whole one).
 * stats: backend memory, per owned parameter the sum of squares of its gradient; stats_host its
 * host copy, read back once per step. */
typedef struct cz_exec_owned {
    int *ids;
    int n;
    int64_t *piece_lo, *piece_len;
    double *stats, *stats_host;
} cz_exec_owned;

/* The job's buffers (binding.c): per parameter pointers to its local shard, or flat ones, of
 * dtype. Staging (per-parameter binding, a dtype other than fp32, or the cuda backend under a
 * host-driven plane: host_staged, cz__compute_open_for) runs the step on fp32 flat copies
 * (backend memory, allocated at bind); with bf16, stage_params is the fp32 master copy, loaded
 * at the first step. agreed: every rank confirmed its binding at the first step. */
typedef struct cz_exec_binding {
    cz_dtype dtype;
    size_t elem_bytes; /* of dtype */
    void **param_ptr, **grad_ptr;
    bool *bound;
    void *flat_params, *flat_grads; /* NULL when bound per parameter */
    bool per_param, staged, master_loaded, host_staged, agreed;
    float *stage_params, *stage_grads;
} cz_exec_binding;

/* Each parameter's rate and decoupled weight decay (indexed by param id; rates.c), which
 * optimizers with per-parameter rates read (cz_optim.param_rates); matrix_uniform: every matrix
 * parameter's are the matrix optimizer's own; momentum: the last cz_executor_set_momentum's
 * (matrix momentum, AdamW's beta1 and beta2; zeros before any), compared with the rates;
 * changed: since the ranks last compared them (create, the setters). */
typedef struct cz_exec_rates {
    cz_opt_rates *param;
    float momentum[3];
    bool matrix_uniform, changed;
} cz_exec_rates;

/* The step started by step_async: its result and message, for wait; active until waited for. */
typedef struct cz_exec_async {
    int rc;
    cz_error err;
    bool active;
} cz_exec_async;

/* Whether this rank's optimizer state matches no step: a step that moved it did not complete
 * (a cancel or a refusal after early updates had run on some rank, a failure after the first
 * update, a load that failed while distributing the file). why: what happened, for the
 * refusals of save_state and of every step until a load_state clears it (step.c). */
typedef struct cz_exec_poison {
    bool on;
    char why[256];
} cz_exec_poison;

/* The step's two clippings: the gradient norm of the last step, before max_grad_norm clipped
 * it, and QK-clip's description and maxima (qk_clip.c; NULL: none set). */
typedef struct cz_exec_clip {
    double grad_norm;
    struct cz_qk_clip *qk;
} cz_exec_clip;

/* The executor: what it was made of (plan, config), its backends, where this rank stands, the
 * parts it holds and updates, the job's buffers, its optimizers and pipelines, the bucket-wise
 * step (its own object), and the last step's figures. Each sub-object is created at create
 * (executor.c) or bind (binding.c) and freed with the executor; only the bucket-wise step's is
 * made at its first use, by bucket_step.c. */
struct cz_executor {
    const cz_plan *plan;
    cz_plan *owned_plan; /* non-NULL when created from a file */
    cz_exec_config cfg;  /* the caller's, of any version, read once at create (config.c) */
    cz_compute compute;
    const cz_comm_backend *comm; /* the comm backend the planes are of (comm.c) */
    cz_ctrl ctrl;                /* control plane over the world */
    cz_phase phase;              /* what this rank is doing, for the planes' reports (comm.h) */
    cz_exec_planes planes;
    cz_exec_grid grid;
    const cz_rank_schedule *schedule;        /* my DP rank's */
    const cz_rank_schedule *expert_schedule; /* my expert rank's (NULL: no expert groups) */
    size_t buffer_numel;
    cz_exec_held held;
    cz_exec_owned own;
    cz_exec_binding bind;
    float *scratch; /* backend: max bucket range, for the reduce-scatter */
    /* The DP exchanges' dtypes, bf16 buffers and posted bytes (wire.c). */
    struct cz_wire *wire;
    /* Compute events the DP collectives wait for: gradients staged, parameters updated. */
    cz_event *ev_grads, *ev_params;
    /* The optimizers (optimizer.h): the plan's matrix optimizer, and the elementwise one.
     * Each owns its state, backend memory allocated at create time. */
    cz_optim matrix_opt, elem_opt;
    cz_exec_rates rates;
    /* The micro-group pipelines (pipeline.c): my DP rank's schedule over TP, and my expert
     * rank's over ETP (NULL without expert groups). */
    struct cz_pipeline *pipe, *epipe;
    cz_exec_async async;
    /* The bucket-wise step (bucket_step.c), made at its first use (NULL before). bws_settle,
     * set with it, completes what such a step left in flight (its parameter all-gathers)
     * before the plain step, a checkpoint or a setter touches the state, and refuses while one
     * is open: a pointer, so that the plain step does not depend on the bucket-wise one. */
    struct cz_bucket_step *bws;
    int (*bws_settle)(cz_executor *ex, const char *what, cz_error *err);
    int64_t steps;
    cz_exec_poison poison;
    cz_exec_timings last;
    cz_exec_clip clip;
};

/* Whether this rank holds parameter p: of its stage, and for a routed expert of a plan with
 * expert groups, of its EP rank. */
static inline bool cz__exec_holds(const struct cz_executor *ex, const cz_plan_param *p)
{
    return p->stage == ex->grid.stage &&
           (!ex->grid.experts || !p->expert || p->ep_rank == ex->grid.ep_rank);
}

/* Whether bucket b is in this rank's buffer (its stage's dense buckets, its EP rank's expert
 * ones). */
static inline bool cz__exec_holds_bucket(const struct cz_executor *ex, const cz_plan_bucket *b)
{
    return b->stage == ex->grid.stage && (!b->expert || b->ep_rank == ex->grid.ep_rank);
}

/* Reads the plan at path for world rank world_rank into *out (executor_open.c: a plan file,
 * or the rank's part of a split plan folder). */
typedef int (*cz__plan_load_fn)(cz_plan **out, const char *path, int world_rank, cz_error *err);
/* Creates an executor over plan (borrowed), or with plan NULL over the plan load reads from
 * path (owned) once the communicator has opened: a split plan folder's part depends on the
 * world rank. A plan that does not load is a failed check: the ranks still meet to agree. */
int cz__executor_create_impl(cz_executor **out, const cz_plan *plan, const char *path,
                             cz__plan_load_fn load, const cz_exec_config *cfg, cz_error *err);
/* Plan checks the executor needs (pp, strategies, ranges bounding ownership, schedules). */
int cz__exec_plan_check(const cz_plan *plan, cz_error *err);
/* Fingerprint of the parts of a plan the ranks must agree on. */
uint64_t cz__exec_plan_fingerprint(const cz_plan *plan);
/* Precomputes the micro-group layouts of my DP rank's schedule, allocates the pipeline's
 * buffers, and hands the matrix optimizer the parts this rank holds, group by group
 * (group_add) (pipeline.c). */
int cz__exec_pipeline_init(cz_executor *ex, cz_error *err);
/* Testing only (pipeline.c): when true from before create to after free, a plane of one rank is
 * laid out and exchanged as a larger one is (the micro-group buffers and exchanges; the DP
 * scratch, bf16 copies and collectives, cz__wire_exchanged), so that a one-process test over
 * the self plane (exec.test_stream_order) still sees every exchange a multi-rank step makes.
 * False in every job. */
extern bool cz__exec_exchange_one_rank;
/* Whether a plane of n ranks exchanges nothing (n == 1, unless cz__exec_exchange_one_rank): the
 * one rule the pipeline, the DP wire and the models share (pipeline.c). */
bool cz__exec_plane_local(int n);
void cz__exec_pipeline_free(cz_executor *ex);
/* The elements one step of a pipeline moves, summed over the groups: packed into the gathers
 * (gather_pack), unpacked into full_g (from the gathers and, for replicated parts, from the
 * rank's own gradients; on a plane of one rank all from its own, nothing packed), packed into
 * the scatters (none on a plane of one rank), applied to the shards, and the parts this rank
 * computes (hosted). */
typedef struct cz_exec_pipeline_sizes {
    int64_t gather_pack, unpack, scatter_pack, apply, hosted;
    int64_t nhosted; /* the parts this rank computes (each with its own optimizer state) */
} cz_exec_pipeline_sizes;
/* The layouts and index maps that cz__exec_pipeline_init makes for schedule rs at TP rank
 * tp_rank of tp (sc: synchronous compute), param_off as the executor's held.param_off, made
 * through c's runs_create (and released through its runs_free) without a plane or an
 * optimizer, and the bytes of the buffers it would allocate added to c->mem by kind (none
 * allocated): what the kernels over run lists get, for tests and models of a plan. *out (NULL:
 * not wanted) gets what a step moves. */
int cz__exec_pipeline_probe(const cz_plan *plan, const cz_rank_schedule *rs, int tp, int tp_rank,
                            bool sc, const int64_t *param_off, cz_compute *c,
                            cz_exec_pipeline_sizes *out, cz_error *err);
/* Bytes pp (NULL: none) has sent to its plane's other ranks in micro-group gathers and scatters
 * since create (cz_exec_wire.tp_bytes, .etp_bytes). */
int64_t cz__exec_pipeline_sent(const struct cz_pipeline *pp);
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
/* The poisoned state (cz_exec_poison; step.c). _poison: this rank's state matches no step
 * since `why` (printf format; the first reason is kept). _poison_refuse: CZ_EINVALID saying so
 * when it does, for `what` (this rank alone: where every rank is poisoned alike).
 * _poison_agree: the same, collective over the control plane, so that every rank refuses when
 * any rank's state matches no step. */
void cz__exec_poison(cz_executor *ex, const char *why, ...) __attribute__((format(printf, 2, 3)));
int cz__exec_poison_refuse(const cz_executor *ex, const char *what, cz_error *err);
int cz__exec_poison_agree(cz_executor *ex, const char *what, cz_error *err);

#endif /* CZ_EXECUTOR_IMPL_H */
