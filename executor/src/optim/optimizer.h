/*
 * optimizer.h — the optimizer seam: cz_optimizer_ops, what an optimizer is to the executor
 * (its configuration, its state, its step on a rank's pieces and on a host's batch of a
 * micro-group, the tensors it saves in a checkpoint), and its dispatch (optimizer.c), which
 * maps the plan's optimizer to its implementation: muon.c, soap.c and shampoo.c for the matrix
 * parameters, adamw.c for the elementwise ones. The executor's core (executor.c, step.c,
 * pipeline.c, checkpoint.c) knows optimizers only through this table.
 *
 * An optimizer touches data only through the compute ops (compute.h) and owns its state:
 * backend memory allocated at create (shard_add, group_add, work_create), never in a step.
 */
#ifndef CZ_OPTIMIZER_H
#define CZ_OPTIMIZER_H

#include "canzona_exec.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "ns_coop.h"
#include "shard.h"

#include <stdbool.h>
#include <stdint.h>

/* Versioned like the compute ops: an implementation fills a cz_optimizer_ops of this version
 * and the registry refuses another (the tables are built with the library; the check catches
 * a table left behind when the layout changes). */
#define CZ_OPTIMIZER_OPS_VERSION 5

/* An optimizer of an executor (an instance of a table; canzona.h's cz_optimizer is the plan's
 * name for one). */
typedef struct cz_optim cz_optim;
/* An optimizer's own layout of the parts it computes in one micro-group (group_add). */
typedef struct cz_opt_group cz_opt_group;

/* A piece of a parameter this rank updates in place: the elements [off, off + len) of the
 * flat parameter and gradient buffers, the piece at lo of the parameter's local shard (the
 * whole shard, lo 0, unless a split layout cuts the parameter between DP ranks). */
typedef struct cz_opt_shard {
    const cz_plan_param *p;
    int64_t off, lo, len;
} cz_opt_shard;

/* A part of a matrix this rank computes in a micro-group (cz_exec_part: a whole matrix, a
 * block, or a cooperative member's slice), with its gradient reassembled at `in` (part-sized,
 * contiguous, backend memory; the optimizer may overwrite it) and its update to be written
 * at `out` (the same shape). */
typedef struct cz_opt_part {
    cz_exec_part x;
    const cz_plan_param *p;
    float *in, *out;
} cz_opt_part;

/* The sub-planes of the schedule's cooperative widths, split from the TP plane at create
 * (pipeline.c): the members of a task of width widths[i] all-reduce over planes[i] with the
 * CZ_COOP_MAX_PANELS requests reqs[i], recording `ready` before each. */
typedef struct cz_coop_planes {
    int n;
    const int *widths;
    cz_plane *planes;
    cz_comm_req *(*reqs)[CZ_COOP_MAX_PANELS];
    cz_event *ready;
} cz_coop_planes;

/* Called between an optimizer's batches so that communication in flight keeps moving (MPI
 * progresses only inside MPI calls). */
typedef struct cz_opt_progress {
    void (*fn)(void *ctx);
    void *ctx;
} cz_opt_progress;

/* A learning rate and a decoupled weight decay. */
typedef struct cz_opt_rates {
    float lr, wd;
} cz_opt_rates;

/* What values a state tensor can hold, as a checkpoint load checks them: every tensor is
 * finite; a second moment or a sum of squares is >= 0 everywhere; a Gram factor (a sum of
 * G G^T) has a diagonal >= 0. */
typedef enum cz_state_values {
    CZ_STATE_FINITE = 0,
    CZ_STATE_NONNEG = 1,
    CZ_STATE_GRAM = 2,
} cz_state_values;

/* Where a tensor of the state lives among the ranks, which tells a checkpoint how to gather
 * and scatter it. */
typedef enum cz_state_place {
    /* Laid out as the parameter: each rank that updates a piece of it (cz_opt_shard) keeps
     * that piece of its TP shard (AdamW's moments). */
    CZ_STATE_SHARDED = 0,
    /* The full matrix, cut into the parts of its tasks: each rank that holds a part keeps
     * that rectangle (Muon's momentum), or the rectangle of the tensor that state_rect maps
     * the part to (NorMuon's second moment: one value per line of each unit). */
    CZ_STATE_PARTS = 1,
    /* Whole, on each rank that holds the matrix's (whole-matrix) task (SOAP's and Shampoo's
     * state). */
    CZ_STATE_HOSTED = 2,
} cz_state_place;

/* One tensor of an optimizer's state as a checkpoint names it: "<param name>.<suffix>",
 * fp32, rows x cols (ndim 1: rows elements, cols 1). */
typedef struct cz_state_tensor {
    char suffix[64];
    cz_state_place place;
    int ndim;
    int64_t rows, cols;
    cz_state_values values;
    /* HOSTED only: the file holds this tensor plus the rows x cols rectangle at (r0, c0) of
     * the parameter's addend (state_addend: Shampoo's weight-decay part of its momentum, which
     * the ranks keep beside their shards); on load the addend restarts at zero. */
    bool plus_addend;
    int64_t r0, c0;
} cz_state_tensor;

typedef struct cz_optimizer_ops {
    int version;        /* CZ_OPTIMIZER_OPS_VERSION */
    cz_optimizer id;    /* the plan's name for it (canzona.h) */
    cz_param_kind kind; /* the parameters it updates */
    const char *name;   /* for messages */

    /* ---- configuration ---- */
    /* Reads and checks its settings (cz_exec_config, the plan's settings), checks that the
     * compute backend has what it needs, and sets o->impl. */
    int (*create)(cz_optim *o, const cz_exec_config *cfg, cz_error *err);
    /* Releases its state and o->impl, however far create and the state calls got. */
    void (*destroy)(cz_optim *o);
    /* Its rate and decoupled weight decay for the following steps. */
    void (*set_lr)(cz_optim *o, float lr);
    void (*set_weight_decay)(cz_optim *o, float wd);

    /* ---- state, at create ---- */
    /* A piece of one of its parameters that this rank updates (every such piece, in
     * parameter order). NULL: it keeps nothing per piece. */
    int (*shard_add)(cz_optim *o, const cz_opt_shard *s, cz_error *err);
    /* The n parts this rank computes in one micro-group, in the group's order: sets *out to
     * its layout of the group (what step_group gets). NULL: it has no matrix parts. */
    int (*group_add)(cz_optim *o, const cz_opt_part *parts, int n, const cz_coop_planes *cp,
                     cz_opt_group **out, cz_error *err);
    /* After every piece and group: allocates the work buffers its steps need, as large as the
     * largest piece or group asks (Muon: the Newton-Schulz batch, its work, the cooperative
     * Grams and sums; SOAP, Shampoo: the largest block's or tile's solver work). */
    int (*work_create)(cz_optim *o, cz_error *err);

    /* ---- the step; t is the step's number, from 1 ---- */
    /* Its update of its pieces in the flat buffers P and G (backend memory) that start in
     * [lo, hi) (one bucket's range of this rank; 0, INT64_MAX: all), or the part of a matrix
     * update that is elementwise on them and comes before any part's update is applied
     * (Shampoo's weight decay in its momentum). NULL: none. */
    int (*step_shards)(cz_optim *o, float *P, const float *G, int64_t t, int64_t lo, int64_t hi,
                       cz_error *err);
    /* Writes the update of every part of a micro-group from its gradient: the host's batch. */
    int (*step_group)(cz_optim *o, cz_opt_group *g, int64_t t, const cz_opt_progress *pr,
                      cz_error *err);
    /* The rate and weight decay step t's part updates are applied with, p = p (1 - lr wd) -
     * lr u (the pipeline applies them to every shard). */
    cz_opt_rates (*apply_rates)(const cz_optim *o, int64_t t);

    /* ---- checkpoints ---- */
    /* The tensors of p's state, from the settings and the plan alone (every rank lists them,
     * holding any or none): writes the first max to out (out NULL: counts only) and returns
     * their count, in the file's order. */
    int64_t (*state_tensors)(const cz_optim *o, const cz_plan_param *p, cz_state_tensor *out,
                             int64_t max);
    /* This rank's buffer (backend memory) of tensor k of parameter `param`: SHARDED its piece,
     * PARTS the part at `part`, HOSTED the whole; NULL where it keeps none. */
    float *(*state_buffer)(cz_optim *o, int param, int64_t k, const cz_block *part);
    /* This rank's addend of a plus_addend tensor of `param` (its shard's numel floats, backend
     * memory); NULL: none. */
    float *(*state_addend)(cz_optim *o, int param);

    /* ---- version 2: rates per parameter (torch's parameter groups) ---- */
    /* Its rate and decoupled weight decay as set (create, set_lr, set_weight_decay). */
    cz_opt_rates (*rates)(const cz_optim *o);
    /* True: it takes a rate and a decay per parameter from cz_optim.param_rates (its pieces'
     * in step_shards; the pipeline applies its part updates with each part's parameter's);
     * false: one of each for all its parameters (its update depends on them beyond the final
     * p (1 - lr wd) - lr u: SOAP's and Shampoo's). */
    bool per_param_rates;

    /* ---- version 3: momentum coefficients changed between steps (torch's schedulers) ---- */
    /* Its momentum coefficients for the following steps, checked by the caller to lie in
     * [0, 1): Muon's mu (m2 unused), AdamW's beta1 and beta2. NULL: fixed at create. */
    void (*set_momentum)(cz_optim *o, float m1, float m2);

    /* ---- version 4: PARTS tensors not laid out as the parameter (NorMuon's) ---- */
    /* The rectangle of tensor k of `param` that the part at `part` (a rectangle of the
     * parameter) keeps, which is what its state_buffer holds. NULL, or *out = *part: the
     * tensor is laid out as the parameter (Muon's momentum). */
    void (*state_rect)(const cz_optim *o, int param, int64_t k, const cz_block *part,
                       cz_block *out);

    /* ---- version 5: in-place updates ---- */
    /* True: step_group is correct when a part's out is its in (one buffer for the gradients
     * and the updates): it reads every element of a part's input before it writes that
     * element's update, and no element after (Muon: the momentum overwrites the gradient in
     * place, and each batched Newton-Schulz call loads its blocks, which are disjoint, before
     * it stores them). The pipeline then keeps one buffer for both on a plane of one rank. */
    bool update_in_place;
} cz_optimizer_ops;

/* Its table, its own state, and what it works with. */
struct cz_optim {
    const cz_optimizer_ops *ops;
    void *impl;
    cz_compute *compute;
    const cz_plan *plan;
    /* Indexed by param id: each parameter's rate and decay (the executor's table, kept equal
     * to the optimizer's own where uniform); set only for an optimizer with per_param_rates,
     * else NULL. */
    const cz_opt_rates *param_rates;
};

/* ---- the dispatch (optimizer.c) ---- */
/* Refuses a plan whose matrix optimizer has no implementation here (AdamW-only plans). */
int cz__optimizer_plan_check(const cz_plan *plan, cz_error *err);
/* Whether the matrix optimizer the plan names updates in place (update_in_place); false when
 * this version has none of that name. */
bool cz__optimizer_updates_in_place(const cz_plan *plan);
/* Refuses a fully sharded plan (or configuration) whose optimizers the fully sharded step does
 * not run yet: other than Muon or SOAP (+ AdamW), or NorMuon. */
int cz__optimizer_fsdp_check(const cz_plan *plan, const cz_exec_config *cfg, cz_error *err);
/* Opens the implementation that updates the plan's parameters of `kind` (the matrix optimizer
 * the plan names; AdamW for the elementwise parameters) and creates it from cfg. */
int cz__optimizer_open(cz_optim *o, cz_param_kind kind, const cz_plan *plan, cz_compute *c,
                       const cz_exec_config *cfg, cz_error *err);
/* Destroys an optimizer opened (or half opened) by cz__optimizer_open; NULL ops: nothing. */
void cz__optimizer_close(cz_optim *o);

#endif /* CZ_OPTIMIZER_H */
