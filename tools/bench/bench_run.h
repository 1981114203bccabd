/* canzona-bench's multi-rank run (mpirun): what its files share.
 *
 *   bench_main.c     main: parse, run (create, buffers, steps, counts), report
 *   bench_options.c  the options: --help, parsing, the agreement across ranks, the executor's
 *                    configuration from them
 *   bench_ranks.c    the bench's own collectives, bounded like the executor's, and how a rank
 *                    that stalls or is terminated ends the job
 *   bench_tensors.c  this rank's place in the plan and its tensors: initial parameters,
 *                    gradients (generated or from --grad-dir), the files written
 *   bench_verify.c   --verify: the replica check, the gather of the full parameters, the
 *                    single-process reference
 *
 * The program's shared functions are cz_bench_* (as the CLI's are cz_cli_*); nothing exports
 * them. */
#ifndef CZ_BENCH_RUN_H
#define CZ_BENCH_RUN_H

#include "bench.h"

#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>

/* ---- options (bench_options.c) ---- */
typedef struct bench_opts {
    const char *plan, *model, *init_dir, *dump_dir, *json, *ns_coeffs, *inject_nan;
    const char *create_from; /* --create-from: the executor's plan path (a split plan folder) */
    const char *grad_dir, *dump_grads, *load_state, *save_state;
    const char *backend, *comm; /* --backend cpu|cuda, --comm mpi|nccl */
    int steps, warmup, verify, nesterov, ns_steps, own_comms, bad_dp_comm, corrupt_replica;
    int dtype;               /* -1 = the executor's (the plan's) */
    int grad_reduce_in_fp32; /* --grad-reduce-in-fp32 */
    /* --overlap: the bucket-wise step; --delay-bucket, --skip-bucket, --repeat-bucket: one
     * bucket declared last, never (on the last rank), or twice (-1: none) */
    int overlap, delay_bucket, skip_bucket, repeat_bucket;
    /* --bucket-order: the order this rank declares its buckets in (0 backward, bucket 0 first;
     * 1 reverse; 2 rotated: from the middle one), on --order-rank only (-1: every rank);
     * --declare-nothing: the step (1-based, warm-up counted) in which rank 0 declares no bucket
     * (0: none); --end-after-stall: after a reported stall free the executor and finalize
     * MPI, as a job that ends itself would, instead of MPI_Abort */
    int bucket_order, order_rank, declare_nothing, end_after_stall;
    int early;         /* --early-updates: cz_executor_set_early_updates (with --overlap) */
    double compute_ms; /* --compute-ms: simulated backward compute per held bucket */
    int same_grads;    /* --same-grads: step 0's gradients in every step (generated once) */
    cz_muon_scaling scaling;
    uint64_t seed;
    cz_exec_config shampoo; /* only its shampoo_* and soap_* fields: --shampoo-*, --soap-* */
    double tolerance, lr, adamw_lr, wd, adamw_wd, momentum, scale_coeff, beta1, beta2, adamw_eps,
        max_grad_norm, update_tolerance, ns_eps;
    /* --qk-clip TAU (0: off) and --qk-heads H:G: QK-clip on the fused QKV parameters */
    double qk_tau;
    int qk_heads, qk_groups;
} bench_opts;

/* The usage text (--help). */
void cz_bench_usage(FILE *f);
/* Returns 0, 1 for --help, or 2 with the reason in msg. Prints nothing: main agrees on the
 * outcome across ranks first. */
int cz_bench_parse(int argc, char **argv, bench_opts *o, char *msg, size_t cap);
/* Option errors are agreed across ranks like every later failure, before any other
 * collective: a rank that stopped alone would leave the others waiting forever. Each rank
 * prints its own reason. Returns 1 when every rank parsed the same valid options (prc:
 * cz_bench_parse's outcome, msg its reason). */
int cz_bench_agree_options(const bench_opts *o, int prc, const char *msg);
/* The executor's configuration the options ask for (the communicators apart: main's). */
void cz_bench_config(const bench_opts *o, cz_exec_config *cfg);

/* ---- the bench's collectives and the job's end (bench_ranks.c) ---- */
/* This rank in MPI_COMM_WORLD: set once by cz_bench_ranks_open, read everywhere else. */
extern int cz_bench_rank;
/* MPI_Init, the SIGTERM message, the bound of every wait (CZ_MPI_TIMEOUT_S) and its report
 * channel. A failure to open the channel ends the job (cz_bench_stalled). */
void cz_bench_ranks_open(int *argc, char ***argv);
/* The channel closed, then MPI_Finalize. */
void cz_bench_ranks_close(void);
/* What the bench is doing (what: a string literal; step: 1-based, -1 outside the steps), named
 * by the report of one of its own waits that stalls. */
void cz_bench_set_phase(const char *what, long step);
/* The step this rank is in (1-based; -1 outside the steps), for the SIGTERM message. */
void cz_bench_set_step(long step);
/* A stalled rank: this rank's report, the other live ranks' time to print theirs, then the end
 * of the job (MPI_Abort). Does not return. */
void cz_bench_stalled(const cz_error *err);
/* After a call of the executor that failed: a stall there ends the job the same way. */
void cz_bench_stop_if_stalled(int rc, const cz_error *err);
/* The bench's own collectives on comm, each wait bounded; a stall ends the job. what names the
 * collective in the report. */
void cz_bench_wait(MPI_Request *r, MPI_Comm comm, const char *what);
void cz_bench_barrier(MPI_Comm comm, const char *what);
void cz_bench_allreduce(const void *in, void *out, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                        const char *what);
void cz_bench_split(MPI_Comm comm, int color, int key, MPI_Comm *out, const char *what);
/* Every rank learns whether any failed (rc != 0 on it); prints the local message. Returns 1 if
 * any failed. */
int cz_bench_any_failed(int rc, const cz_error *err, const char *what);

/* ---- this rank's place and tensors (bench_tensors.c) ---- */
/* This rank's place: its stage, DP and TP rank, and with expert groups its place in the
 * expert grid (local rank = dp_rank * tp + tp_rank = (edp_rank * ep + ep_rank) * etp +
 * etp_rank, Megatron-Core's order) and where its EP rank's expert buffer starts in its buffer
 * (after the stage's dense buckets). */
typedef struct bench_place {
    int stage, dp_rank, tp_rank;
    bool experts;
    int ep_rank, etp_rank, edp_rank;
    int64_t expert_base;
} bench_place;

bench_place cz_bench_place_make(const cz_plan *plan, int stage, int dp_rank, int tp_rank);
/* Elements of p's full tensor. */
int64_t cz_bench_full_numel(const cz_plan_param *p);
/* Whether p is a routed expert of a plan with expert groups. */
bool cz_bench_is_expert(const cz_plan *plan, const cz_plan_param *p);
/* Whether this rank holds p (its stage's, and its EP rank's expert). */
bool cz_bench_holds(const bench_place *w, const cz_plan_param *p);
/* Where this rank's shard of p starts in its buffer. */
int64_t cz_bench_param_offset_at(const cz_plan *plan, const bench_place *w, const cz_plan_param *p);
/* Initial full tensor of a parameter (malloc'ed into *out): from --init-dir or generated. */
int cz_bench_initial_full(const bench_opts *o, const cz_plan_param *p, float **out, cz_error *err);
/* This rank's parameter shards into P: those of its pipeline stage and EP rank. */
int cz_bench_fill_params(const bench_opts *o, const cz_plan *plan, const bench_place *w, float *P,
                         cz_error *err);
/* This rank's gradient shards of one step into G. */
int cz_bench_fill_grads(const bench_opts *o, const cz_plan *plan, const bench_place *w,
                        int64_t step, float *G, cz_error *err);
/* The full gradient of p that DP replica dp sees at step into out: --grad-dir's or generated. */
int cz_bench_full_grad(const bench_opts *o, const cz_plan_param *p, int64_t step, int dp,
                       float *out, cz_error *err);
/* The full gradient of p that a rank of DP rank `replica` (for a routed expert, of expert-DP
 * rank `replica`) holds at step into out (tmp: scratch of the same size). A dense parameter's
 * is its DP replica's (cz_bench_full_grad). A routed expert's is what a Megatron-Core job's
 * token dispatcher gives it: the tokens of the EP x ETP ranks of its expert-DP rank (local
 * ranks replica*EP*ETP up to (replica+1)*EP*ETP - 1 of the stage), each rank holding 1/TP of
 * its DP replica's tokens (sequence parallelism): so DP replica d's gradient counts with
 * weight (its ranks among those) / TP. Summed over expert-DP and scaled by 1/DP as the
 * executor reduces expert buckets, that is the mean over the DP replicas under every expert
 * grid, the dense parameters' average: runs at EP 1, 2 and 4 are one computation (before, each
 * expert-DP rank held one replica's gradient, and the average was expert-DP/DP of it: 1/EP
 * when ETP = TP). */
int cz_bench_rank_grad(const bench_opts *o, const cz_plan *plan, const cz_plan_param *p,
                       int64_t step, int replica, float *out, float *tmp, cz_error *err);
/* The DP replicas cz_bench_rank_grad sums for p at `replica`: the count, from *first on, and
 * each one's weight. */
int cz_bench_grad_sources(const cz_plan *plan, const cz_plan_param *p, int replica, int *first);
float cz_bench_grad_weight(const cz_plan *plan, const cz_plan_param *p, int replica, int dp);
/* Writes the generated gradients of every step and replica in --grad-dir's layout (rank 0). */
int cz_bench_dump_grads(const bench_opts *o, const cz_plan *plan, int total, cz_error *err);
/* Writes every parameter's full tensor (full[i]) as --dump-dir/<name>.npy (rank 0). */
int cz_bench_dump_params(const bench_opts *o, const cz_plan *plan, float *const *full,
                         cz_error *err);

/* ---- --verify (bench_verify.c) ---- */
/* After the parameter all-gather every DP replica must hold bit-identical parameters: P's n
 * elements against the other replicas' (collective over MPI_COMM_WORLD). */
int cz_bench_check_replicas(const cz_plan *plan, const bench_place *w, const float *P, size_t n,
                            cz_error *err);
/* Gathers every parameter's full tensor to world rank 0 (full[i], malloc'ed there; collective):
 * row holds the TP ranks of this rank's DP rank and stage, erow the ETP ranks of its expert
 * rank. */
int cz_bench_gather_full(const cz_plan *plan, const bench_place *w, MPI_Comm row, MPI_Comm erow,
                         const float *P, float **full, cz_error *err);
/* Single-process reference on rank 0: the same total_steps on whole tensors, compared with the
 * distributed run's parameters (dist) and gradient norms (ex_norms); prints every figure and
 * fails on one over the tolerance. *worst_update: the largest update error seen. */
int cz_bench_reference_compare(const bench_opts *o, const cz_plan *plan, const cz_exec_config *cfg,
                               int total_steps, float *const *dist, const double *ex_norms,
                               double *worst_update, cz_error *err);

/* ---- --qk-clip (bench_qk.c) ---- */
/* The QK-clip description of the plan's fused QKV parameters (...linear_qkv.weight, one
 * attention layer each, Megatron-Core's rows interleaved per query group) set on ex; nothing
 * without --qk-clip. */
int cz_bench_qk_setup(const bench_opts *o, const cz_plan *plan, cz_executor *ex, cz_error *err);
/* This rank's generated maxima of step (0-based) handed to ex: its DP rank's values for its TP
 * rank's heads of its stage's layers, -inf for the rest. */
int cz_bench_qk_hand(const bench_opts *o, const cz_plan *plan, const bench_place *w,
                     cz_executor *ex, int64_t step, cz_error *err);
/* The reference: p's whole tensor w after step, clipped with the MAX over every DP rank's
 * maxima, as the executor must. */
void cz_bench_qk_reference(const bench_opts *o, const cz_plan *plan, const cz_plan_param *p,
                           int64_t step, float *w);

#endif
