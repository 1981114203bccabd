/*
 * cz_sim.h — between the files of the step simulator (cz_plan_simulate): the driver
 * (simulate.c: the context, each stage, the critical rank's timeline), the communication times
 * (sim_comm.c), one TP group's program (sim_program.c), Megatron's modes and the choice of a
 * rank's program (sim_megatron.c), the expert groups (sim_experts.c) and the iteration
 * (sim_iteration.c). The calls go one way: simulate.c to sim_experts.c and sim_iteration.c,
 * those to sim_megatron.c, it to sim_program.c, and every file to sim_comm.c, which calls none
 * of them (the lint's rule calls).
 */
#ifndef CZ_SIM_H
#define CZ_SIM_H

#include "cz_analysis.h"

#include <stdbool.h>
#include <stdint.h>

/* One task as the pipelined program runs it: on slots slot .. slot + width - 1, computing for
 * `compute` and, when cooperative, waiting `allreduce` on each of them for the all-reduces its
 * computation does not hide (comm: the time of all of them, hidden or not). */
typedef struct sim_task {
    int slot, width, index; /* index: the task's position in its micro-group */
    double compute, allreduce, comm;
    int local; /* a TP-local per-head task: multi-slot, but not cooperative */
} sim_task;

/* What one DP rank's TP group runs after the gradients are synchronized. */
typedef struct sim_prog {
    int ngroups;
    double *elem;    /* R: elementwise updates per TP rank */
    double *gather;  /* ngroups: collective durations */
    double *scatter; /* ngroups */
    double *compute; /* ngroups * R: synchronous compute's work per slot */
    /* Pipelined: the tasks of group g are tasks[first[g] .. first[g + 1] - 1], in execution
     * order, replayed by cz__sim_prog_run (a cooperative task waits for its slowest member). */
    int *first;
    sim_task *tasks;
    double *scratch; /* R */
    int ntasks, coop_tasks;
    double comm_s; /* sum of the TP collective durations (gathers and scatters) */
    /* R: the bytes each TP slot sends to the others in the gathers and scatters, as the
     * executor counts them (cz_exec_wire.tp_bytes); NULL for a program the executor does not
     * run (the even baseline, Megatron's modes). */
    double *sent;
} sim_prog;

typedef struct sim_ctx {
    const cz_plan *plan;
    const cz_cluster *cluster; /* NULL: cost-proportional, free communication */
    int R, D, P;
    int pipelined;
    double *sec;        /* per param: seconds (or cost) of its whole update across TP */
    double elem_bytes;  /* bytes per element of the matrix exchanges: 4, the executor's fp32 */
    double grad_bytes;  /* of the DP gradient reduce-scatter (grad_reduce_in_fp32: 4) */
    double param_bytes; /* of the DP parameter all-gather */
    double lat_us;
    int *bucket_index; /* per param: index into plan->buckets, -1 when none */
    cz_sim_uneven uneven;
    int megatron_aug26;    /* Megatron's current layer-wise rule: its own bucket layout */
    int zero1_elementwise; /* elementwise parameters updated under ZeRO-1 (even slices) */
    int64_t *lw_buckets;   /* scratch for the layout's bucket sizes (nparams + 1) */
    cz_muon_tp_mode muon_tp;
    cz_muon_tp_work *tpw; /* per param under blockwise / distributed: its Gram all-reduces */
    /* A plan with expert groups simulates its expert ranks with a copy of the context whose
     * "DP ranks" are the expert ranks (D = ep * edp, in cz_plan_expert_rank's order) and whose
     * TP groups are the ETP groups (R = etp); expert is 1 in that copy, 0 in the dense one. */
    int expert;
    int dm;            /* the cluster's device model is on: fixed costs, batching */
    int megatron;      /* sc plan under one of Megatron's modes as Megatron runs it */
    int gtp, ns_batch; /* Megatron's GTP shards of the TP group; layer-sharded batch size */
    int overlap_param, overlap_grad;
} sim_ctx;

/* Gradient and parameter synchronization over DP for one stage's buckets: the sums, and the
 * last bucket's of each (the last the backward pass fills, holding the first layers, which the
 * forward pass needs first: what Megatron's overlaps leave exposed). */
typedef struct dp_sync {
    double grad_s, param_s;           /* every bucket, one after the other */
    double last_grad_s, last_param_s; /* the stage's last bucket */
} dp_sync;

/* ---- sim_comm.c ---- */

/* The links of DP rank d's TP group on stage `stage` (inter-node when it spans nodes), and
 * whether it spans nodes; the same of the stage's DP groups (inter-node when any spans). */
double cz__sim_tp_gbps(const sim_ctx *cx, int stage, int d);
double cz__sim_dp_gbps(const sim_ctx *cx, int stage);
int cz__sim_tp_inter(const sim_ctx *cx, int stage, int d);
int cz__sim_dp_inter(const sim_ctx *cx, int stage);

/* A collective as the device model times it (the calibration's measurement or alpha-beta plus
 * one NCCL call); without the device model the alpha-beta formula alone. */
double cz__sim_coll_seconds(const sim_ctx *cx, cz_coll_kind kind, int n, double bytes, double gbps,
                            int inter);

/* The DP synchronization of stage `stage`'s dense buckets into *y; owned is scratch of D
 * entries; grad_b and param_b (NULL, or one value per dense bucket of the stage, zeroed by the
 * caller) receive each bucket's collectives, outside Megatron's own layout. */
int cz__sim_dp_sync_seconds(const sim_ctx *cx, int stage, dp_sync *y, int64_t *owned,
                            double *grad_b, double *param_b, cz_error *err);

/* ---- sim_program.c ---- */

/* A program's buffers for ngroups micro-groups on R GPUs (CZ_ENOMEM, nothing held, when they
 * cannot be had), and their release (the program zeroed). */
void cz__sim_prog_free(sim_prog *pg);
int cz__sim_prog_alloc(sim_prog *pg, int ngroups, int R);

/* Whether parameter p belongs to the ranks cx simulates, and *d turned into the rank of its
 * bucket's partition; the elements of p's local shard in DP rank d's range of its bucket; the
 * schedule of DP (or expert) rank d of the stage, NULL when the plan has none. */
bool cz__sim_in_side(const sim_ctx *cx, const cz_plan_param *p, int *d);
int64_t cz__sim_param_overlap(const sim_ctx *cx, const cz_plan_param *p, int d);
const cz_rank_schedule *cz__sim_find_schedule(const sim_ctx *cx, int stage, int d);

/* The elementwise work of DP rank d into pg->elem. */
void cz__sim_prog_elementwise(const sim_ctx *cx, sim_prog *pg, int stage, int d);

/* The program of DP rank d: the even (ZeRO-1) baseline's (*frag_s: its fragments' gather over
 * DP) and canzona's, from the rank's schedule. */
int cz__sim_prog_build_even(const sim_ctx *cx, sim_prog *pg, int stage, int d, double *frag_s);
int cz__sim_prog_build(const sim_ctx *cx, sim_prog *pg, int stage, int d, cz_error *err);
/* Raises *most to the most bytes one of pg's R slots sends in its exchanges (pg->sent); -1
 * (kept once set) when pg is a program the executor does not run. */
void cz__sim_prog_sent_most(const sim_prog *pg, int R, int64_t *most);

/* Runs one TP group's program (finish and busy: R entries; the timeline arrays and the
 * cooperative tasks' figures may be NULL). */
void cz__sim_prog_run(const sim_prog *pg, int R, int pipelined, double *finish, double *busy,
                      cz_sim_span *tl_gather, cz_sim_span *tl_scatter, cz_sim_span *tl_compute,
                      double *coop_ar, double *coop_comm, double *coop_wait, cz_sim_coop *tl_coop);

/* ---- sim_megatron.c ---- */

/* The program DP rank d of stage s runs: the even baseline's, Megatron's or canzona's. */
int cz__sim_build_rank(const sim_ctx *cx, sim_prog *pg, int s, int d, double *frag, cz_error *err);

/* ---- sim_experts.c ---- */

/* Stage s's expert groups, after the dense ranks (gpu_finish: the stage's D x R GPUs): the
 * expert buffers' synchronization added to *grad_s and *param_s, each expert rank's program,
 * and the stage's critical GPU moved where an expert rank ends later. */
int cz__sim_expert_stage(const sim_ctx *dense, cz_sim_result *r, int s, const double *gpu_finish,
                         double *finish, double *busy, int64_t *owned, double *grad_s,
                         double *param_s, double *frag_max, double *local, int *crit_d, int *crit_t,
                         double *expert_part, cz_error *err);

/* ---- sim_iteration.c ---- */

/* The iteration of a simulated step (cz_sim_options.iteration) into r. */
int cz__sim_iteration(const sim_ctx *cx, cz_sim_result *r, const cz_sim_options *o, int64_t *owned,
                      cz_error *err);

#endif
