/*
 * cz_algorithms.h — how a plan is made: the cost model, Megatron's rules, bucket layout, the DP
 * partitioners, the TP micro-group schedulers, the exact (ILP) solvers and the metrics they are
 * judged by, with the progress reports and clocks of the long solves.
 */
#ifndef CZ_ALGORITHMS_H
#define CZ_ALGORITHMS_H

#include "cz_format.h"
#include "cz_order.h"

/* ---- the device model's cost terms (device_model.c; docs/SIMULATOR.md, "The device model") ----
 * One function per term, shared by the planner's cost model and the simulator. With the device
 * model off (c->device.costs.on == 0: no device.kind, no calibration) each term is the flat
 * model's expression exactly: FLOPs over device.matmul_tflops, bytes over device.mem_gbps, no
 * fixed cost. */
/* One GEMM call C (m x n) = A (m x k) B (k x n) on `batch` matrices (one strided-batched call),
 * inputs of precision prec (outputs fp32), accumulating into C when accumulate: the call's fixed
 * cost plus the larger of FLOPs / rate and bytes moved / memory bandwidth (a roofline). */
double cz__dm_gemm_seconds(const cz_cluster *c, double m, double n, double k, int batch,
                           cz_gemm_prec prec, int accumulate);
/* One fp32 SYRK per matrix (cuBLAS has no batched SYRK): the n x n upper triangle of A A^T with
 * A n x k, n^2 k FLOPs (half a GEMM's), `batch` calls. */
double cz__dm_syrk_seconds(const cz_cluster *c, double n, double k, int batch, int accumulate);
/* Memory traffic alone: bytes / memory bandwidth (the kernels' launches counted apart). */
double cz__dm_bytes_seconds(const cz_cluster *c, double bytes);
/* One elementwise kernel moving `bytes`: a launch plus bytes / memory bandwidth. */
double cz__dm_kernel_seconds(const cz_cluster *c, double bytes);
/* The executor's Newton-Schulz precision for a job's dtype (cz__compute_open_for in
 * executor/src/compute/compute.c: bf16 for bf16 parameters, fp32 for fp32; an fp16 job, which the
 * executor does not take, is modelled as bf16). */
cz_gemm_prec cz__dm_ns_prec(cz_dtype dtype);
/* Whether the executor takes the symmetric form (SYRK) for rows x cols matrices: fp32 from
 * 4096 rows (cz__ns_use_syrk, executor/src/compute/ns_plan.h, CZ_NS_SYRK_MIN_ROWS_CUDA); never
 * bf16. */
int cz__dm_use_syrk(int64_t rows, cz_gemm_prec prec);
/* What one Newton-Schulz iteration of `batch` same-shape matrices launches in the executor
 * (cz__ns_plan): GEMM calls (one strided-batched call each), SYRK calls (one per matrix) and
 * elementwise kernels (one batched launch each). */
typedef struct cz_ns_kernels {
    int gemm_calls, syrk_calls, ew_kernels, sym;
} cz_ns_kernels;
cz_ns_kernels cz__dm_ns_kernels(int64_t rows, int64_t cols, int batch, cz_gemm_prec prec);
/* Seconds of `steps` Newton-Schulz iterations of `batch` same-shape m x n matrices as the
 * executor runs them (one ns_batched call, what canzona-bench ns times), op by op as
 * cz__dm_ns_kernels counts them. Without the device model: the flat model's
 * steps (4 a^2 b + 2 a^3) FLOPs per matrix at the matmul rate. */
double cz__dm_ns_iterations_seconds(const cz_cluster *c, int64_t m, int64_t n, int batch, int steps,
                                    cz_gemm_prec prec);
/* The same plus each matrix's kernels around the iterations (its norm, scaled load and store:
 * cz__muon_run): the executor's Muon on the batch but for momentum and update. */
double cz__dm_ns_seconds(const cz_cluster *c, int64_t m, int64_t n, int batch, int steps,
                         cz_gemm_prec prec);
/* The same as Megatron-LM runs it (emerging_optimizers' newton_schulz under PyTorch eager, bf16
 * "medium" precision): each op a PyTorch op; `batch` > 1 is the batched (3-D) form. */
double cz__dm_torch_ns_seconds(const cz_cluster *c, int64_t m, int64_t n, int batch, int steps);
/* One PyTorch matmul op (addmm, baddbmm, @) in bf16, bf16 output: an op plus the roofline. */
double cz__dm_torch_gemm_seconds(const cz_cluster *c, double m, double n, double k, int batch,
                                 int accumulate);
/* One PyTorch eager elementwise op moving `bytes` (0 fixed cost without the device model). */
double cz__dm_torch_op_seconds(const cz_cluster *c, double bytes);
/* A collective of `bytes` (the conventions of cz__sim_collective_seconds) among n ranks, inside
 * a node or across nodes: the calibration's measurement of that op, size of group and scope
 * where it has one (interpolated in bytes, or the alpha-beta curve moved through the nearest
 * measured point), else alpha_beta(bytes) plus the fixed cost of one NCCL call. */
typedef double (*cz_alpha_beta_fn)(double bytes, const void *ctx);
double cz__dm_collective_seconds(const cz_cluster *c, cz_cal_op op, int n, int inter_node,
                                 double bytes, cz_alpha_beta_fn alpha_beta, const void *ctx);
/* The fixed cost of one NCCL call (0 without the device model). */
double cz__dm_call_seconds(const cz_cluster *c);
/* The executor's host work of one optimizer step beyond its phases (step.c, grad_stats): one
 * sum-of-squares kernel per owned shard, the copy of their results to the host (one launch and
 * the wait for it), and one 16-byte all-reduce of the control plane over the world (a tree's
 * latency: 2 log2(world) messages). 0 without the device model. */
double cz__dm_step_host_seconds(const cz_cluster *c, int owned_shards, int world,
                                double latency_us);
/* Makes the cluster's device model the calibration's (takes ownership of cal, also on failure):
 * the bf16 and fp32 GEMM rates fitted to its GEMM table (seconds against FLOPs with a free
 * intercept, least relative error), its launch, its Newton-Schulz iteration's GEMM calls and its
 * collectives. CZ_EINVALID naming the file when a precision has fewer than two GEMM sizes. */
int cz__cluster_apply_calibration(cz_cluster *c, cz_calibration *cal, cz_error *err);
/* The least-squares fit of t = intercept + FLOPs / rate over the calibration's GEMMs of one
 * precision (what cz__cluster_apply_calibration uses); CZ_EINVALID when it cannot be fitted. */
int cz__calibration_fit_gemm(const cz_calibration *cal, cz_gemm_prec prec, double *tflops,
                             double *intercept_s, cz_error *err);

/* ---- cost model (cost.c) ---- */
/* Total optimizer work for one parameter across its TP group, in the settings' unit:
 * a matrix parameter is updated once, whole (sum over its blocks); an elementwise one is
 * updated shard by shard on every TP rank (replicated ones redundantly). */
double cz__cost_param(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                      cz_dtype dtype);
/* The same in seconds on the cluster's device, whatever the settings' unit. */
double cz__cost_param_seconds(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                              cz_dtype dtype);
/* Optimizer-state bytes for a parameter: for a matrix, held by its host (full size); for an
 * elementwise parameter, held by each TP rank for its local shard. */
double cz__state_bytes(const cz_param_def *p, const cz_settings *s, int tp);

/* The cost of a hosted task: block `block` of matrix d on one slot (-1: the whole matrix,
 * cz__cost_param), in the settings' unit. */
double cz__cost_block(const cz_param_def *d, int block, const cz_settings *s, const cz_cluster *c,
                      cz_dtype dtype);
/* Seconds of one all-reduce of `bytes` among a cooperative task's members: the cost model's ring
 * (cz__cost_allreduce_seconds) or the simulator's (cz__sim_collective_seconds on the links the
 * members share), so that both charge the same pipeline on their own links. */
typedef double (*cz_coop_allreduce_fn)(double bytes, const void *ctx);
/* One member's share of a cooperative Newton-Schulz task (cost.c, cz__coop_time_of): its FLOPs,
 * the seconds of its computation alone (Gram panels, polynomial, elementwise traffic), the
 * communication those leave exposed (the waits of the pipelined Gram all-reduces, plus the
 * norm's all-reduce) and their sum, the time the member is occupied. */
typedef struct cz_coop_time {
    double flops;    /* matmul FLOPs: ns_steps (Gram panels + polynomial) */
    double ew_flops; /* elementwise FLOPs of the slice */
    double compute;  /* seconds of computation alone */
    double exposed;  /* seconds of communication no computation hides */
    double total;    /* compute + exposed */
    double comm;     /* seconds of all its all-reduces, hidden or not */
} cz_coop_time;
/* The pipeline of an m x n matrix over k members in `panels` Gram row panels (1 ..
 * min(CZ_COOP_MAX_PANELS, a); clamped into that range) on the cluster's device, each all-reduce
 * costed by allreduce(bytes, ctx). */
cz_coop_time cz__coop_time_of(int64_t m, int64_t n, int k, int panels, const cz_settings *s,
                              const cz_cluster *c, cz_dtype dtype, cz_coop_allreduce_fn allreduce,
                              const void *ctx);
/* The load on each of k slots computing one m x n matrix by cooperative Newton-Schulz (Muon) in
 * `panels` Gram row panels: compute / k, the redundant a^3 products where they are cheaper than
 * A (A X_j), and the communication the pipelined Gram all-reduces leave exposed (cz__coop_time_of
 * with the ring of cz__cost_allreduce_seconds), in the settings' unit (time: the total; FLOPs: the
 * FLOPs plus the exposed seconds at the matmul rate; the element unit has no measure of
 * communication). validate checks a task's recorded cost with the plan's recorded count. */
double cz__cost_coop_panels(int64_t m, int64_t n, int k, int panels, const cz_settings *s,
                            const cz_cluster *c, cz_dtype dtype);
/* The panel count the planner records for a cooperative task: of 1 .. min(CZ_COOP_MAX_PANELS,
 * a), leaving out counts that would leave a panel empty, the one whose cz__cost_coop_panels is
 * least, ties to fewer panels; 1 in the element unit. */
int cz__coop_best_panels(int64_t m, int64_t n, int k, const cz_settings *s, const cz_cluster *c,
                         cz_dtype dtype);
/* cz__cost_coop_panels at cz__coop_best_panels: the cost the task table and the width choice see.
 */
double cz__cost_coop(int64_t m, int64_t n, int k, const cz_settings *s, const cz_cluster *c,
                     cz_dtype dtype);
/* Seconds of one all-reduce of `bytes` among k ranks of a TP group (a ring on its links). */
double cz__cost_allreduce_seconds(double bytes, int k, const cz_cluster *c);

/* One TP rank's share of a matrix's Muon update under a TP mode. */
typedef struct cz_muon_tp_work {
    double seconds;       /* compute on one TP rank */
    double gram_bytes;    /* bytes of each Gram all-reduce (distributed) */
    int grams;            /* number of Gram all-reduces (ns_steps per Gram, distributed) */
    int scalar_allreduce; /* all-reduces of the norm (one float each, distributed) */
} cz_muon_tp_work;
/* Under duplicated, seconds is the whole matrix's time (cz__cost_param_seconds) and there is no
 * all-reduce; replicated matrices (tp_dim < 0) and tp 1 are the same in every mode. */
cz_muon_tp_work cz__cost_muon_tp(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                                 cz_dtype dtype, cz_muon_tp_mode mode);

/* ---- Megatron-LM's Muon on sharded matrices, as its code runs it (megatron_muon.c) ---- */
/* Which group of the domain (the plan's TP group: GTP x TP ranks, TP innermost) a collective
 * runs over. */
typedef enum cz_mg_group { CZ_MG_DOMAIN = 0, CZ_MG_TP = 1, CZ_MG_GTP = 2 } cz_mg_group;
typedef struct cz_mg_coll {
    cz_cal_op op;
    cz_mg_group group;
    int n;        /* ranks */
    double bytes; /* cz__sim_collective_seconds's convention */
    int count;
} cz_mg_coll;
#define CZ_MG_MAX_COLL 6
/* One matrix parameter under one of Megatron's modes on one rank of its domain. */
typedef struct cz_megatron_work {
    double compute_s; /* duplicated, distributed, blockwise: this rank's ops for the matrix */
    int ncoll;        /* and its collectives, each on the matrix's path (one stream) */
    cz_mg_coll coll[CZ_MG_MAX_COLL];
    int routed;         /* sharded over the domain (layer-sharded exchanges it to a home) */
    double lpt_cost;    /* layer-sharded homes' balance: max(M, N) min(M, N)^2 */
    double shard_bytes; /* one rank's fp32 momentum of it */
    double local_elems; /* one rank's elements of it */
    double param_ops_s; /* the step's ops on the local shard (weight decay, momentum, update) */
} cz_megatron_work;
/* Fills *w for parameter p (a matrix) under mode with gtp of the plan's TP ranks sharding dim 0
 * (Megatron's gtp_remat; 1: plain TP). CZ_EINVALID when gtp does not divide the TP size. */
int cz__megatron_muon_work(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                           cz_muon_tp_mode mode, int gtp, cz_megatron_work *w, cz_error *err);
/* Megatron's layer-sharded homes (_assign_ns_homes): n matrices by cost, largest first (ties in
 * order), each to the first least-loaded of `bins` homes; bin_cost gets the loads. CZ_ENOMEM. */
int cz__megatron_ns_homes(const double *cost, int n, int bins, int *home, double *bin_cost);

/* ---- Megatron-LM's current layer-wise rule (megatron_layerwise.c) ---- */
/* Newton-Schulz cost Megatron balances by: max(m, n) * min(m, n)^2. */
double cz__megatron_ns_cost(int64_t m, int64_t n);
/* lcm(64, lcm(dp, 128) / dp): the multiple a layer-wise shard is padded to. */
int64_t cz__megatron_lw_shard_divisor(int dp);
/* Megatron's layer-wise buffer layout of n Muon parameters given in backprop order (element
 * counts and Newton-Schulz costs): shard[i] is the DP rank that owns parameter i; the padded size
 * of each bucket goes to bucket_sizes (room for n), their count to *nbuckets. bucket_size <= 0
 * keeps one bucket. */
int cz__megatron_lw_layout(const int64_t *numel, const double *cost, size_t n, int dp,
                           int64_t bucket_size, int *shard, int64_t *bucket_sizes, size_t *nbuckets,
                           cz_error *err);
/* Megatron's ZeRO-1 (DistributedOptimizer) buckets of n parameters in backprop order. */
int cz__megatron_zero1_buckets(const int64_t *numel, size_t n, int dp, int64_t bucket_size,
                               int64_t *bucket_sizes, size_t *nbuckets);
/* Whether a parameter name is one of Megatron-Core's expert-parallel parameters. */
int cz__megatron_is_expert(const char *name);
/* One pipeline stage under the current rule: owner[id] (when owner is not NULL) for its Muon
 * (matrix) parameters, and the sizes of all its buckets (the layer-wise Muon buckets, then the
 * ZeRO-1 buckets of the other parameters; room for nparams + 1). */
int cz__megatron_lw_stage(const cz_plan *plan, int stage, int *owner, int64_t *bucket_sizes,
                          size_t *nbuckets, cz_error *err);
/* The same for one domain of a plan with expert groups: ep_rank < 0 the stage's dense buffer
 * (what cz__megatron_lw_stage lays out), ep_rank >= 0 the expert buffer of that EP rank over its
 * expert-DP group. */
int cz__megatron_lw_domain(const cz_plan *plan, int stage, int ep_rank, int *owner,
                           int64_t *bucket_sizes, size_t *nbuckets, cz_error *err);

/* ---- plan construction (planner.c, buckets.c, dp_partition.c, microgroups.c, metrics.c) ---- */
/* Allocates an empty plan and fills params (shapes, local shapes, cost, stage) from the model. */
int cz__plan_init(cz_plan **out, const cz_model *m, const cz_cluster *c, const cz_settings *s,
                  cz_error *err);
/* Fills plan->tasks (tp_tasks.c) from the plan's parameters and settings and the cluster. */
int cz__task_table_build(cz_plan *plan, const cz_cluster *c, cz_error *err);
/* The same into a table of the caller's (freed with cz__task_table_free). */
int cz__task_table_fill(cz_task_table *tt, const cz_plan *plan, const cz_cluster *c, cz_error *err);
/* The split lower bound (tp_tasks.c): the least T such that every task fits on a slot at some
 * width whose per-slot cost is at most T, and the slot time so spent (k times the per-slot
 * cost of a width-k task, each task at its least under T), plus the elementwise work, fits in
 * GPUs x T. tt NULL or empty: every matrix one hosted task at its recorded cost. */
double cz__task_lower_bound(const cz_plan *plan, const cz_task_table *tt);
/* The least slot time (width x per-slot cost) a task with per-width costs cw can take with a
 * per-slot cost within tau; INFINITY when none is. */
double cz__task_least_slot_time(const cz_task_table *tt, const double *cw, double tau);
/* Fills plan->tasks.dp_weight: each parameter's slot time at factor x the split lower bound. */
int cz__task_weigh(cz_plan *plan, double factor, cz_error *err);
/* Places a task with per-width costs cw (tt's widths) on the slots whose loads are load[0 ..
 * nslots) without exceeding T (slot_pack.c): true with the width index and first slot chosen,
 * the run's loads raised; false, loads untouched, when nothing fits. */
bool cz__slot_place(const cz_task_table *tt, int nslots, double *load, const double *cw, double T,
                    int *width, int *slot);
/* One domain's buckets as a DP partition deals them (a stage's dense buffer over its DP ranks,
 * or an EP rank's experts over its expert-DP ranks): nb buckets in processing order, bucket o's
 * parameter ids (ascending offset) at ids[first[o] .. first[o + 1]), dealt over nranks ranks of
 * slots TP (or ETP) slots each; base NULL, or per rank the time its GPUs are already busy
 * (under the joint strategy, the other buffer's makespan on the rank's busiest GPU); lo the
 * bisection's start, cz__task_lower_bound of the plan (computed once per partition, not once
 * per domain). */
typedef struct cz_dp_buckets {
    int nb;
    const int *first;
    const int *ids;
    int nranks;
    int slots;
    const double *base;
    double lo;
    bool by_rank; /* deal rank by rank from every bucket's next parameter (dp_fill.c) */
} cz_dp_buckets;
/* The slot-fill partition (dp_fill.c): cuts of every bucket, cutj[o (nranks + 1) + r] = index
 * of rank r's first parameter in bucket o (cutj[.. + nranks] = the bucket's parameter count), at
 * the least target every rank's slots hold (base included), returned in *target. Needs
 * plan->tasks. */
int cz__dp_fill_cuts(const cz_plan *plan, const cz_dp_buckets *b, int *cutj, double *target,
                     double *bound, cz_error *err);
/* Lays out the gradient buckets (Megatron order, alignment, size, DP padding). */
int cz__buckets_layout(cz_plan *plan, cz_error *err);
/* Fills every bucket's ranges and every param's dp_owner following settings.dp; for tpaware,
 * alpha's partition, the starting point of cz__dp_partition_tpaware (which cz_plan_build runs). */
int cz__dp_partition(cz_plan *plan, cz_error *err);
/* Builds the micro-group schedule of every DP rank following settings.tp. */
int cz__tp_schedule_build(cz_plan *plan, cz_error *err);
/* The schedule of one DP rank's matrix parameters under s->tp, s->capacity (0: automatic, as
 * microgroups.c describes), s->split_blocks and s->coop: params holds the rank's n parameters
 * {param id, cost} in forward order; tt is the plan's task table (their blocks and widths; NULL
 * or empty: every parameter one hosted task at its given cost); load (tp values) is scratch.
 * Groups are appended to rs->groups (rs zeroed by the caller, freed with
 * cz__rank_schedule_free_groups, also after a failure); *capacity is the capacity used (0 when
 * n == 0). The entry point for a caller that scores task sets without a plan (tpaware). */
int cz__tp_schedule_tasks(cz_rank_schedule *rs, const cz_task_table *tt, cz_costed *params, int n,
                          const cz_settings *s, int tp, double *load, double *capacity,
                          cz_error *err);
/* The DP ranks that hold a part of a parameter (rank_index.c): its owner, or for a fragmented
 * parameter the ranks whose ranges of its bucket it may intersect, found by binary search where
 * the bucket's ranges are in order. */
typedef struct cz_rank_window {
    const cz_plan *plan;
    unsigned char *ordered; /* per bucket: ranges contiguous from 0 and rank-ordered */
} cz_rank_window;
int cz__rank_window_init(cz_rank_window *w, const cz_plan *plan, cz_error *err);
void cz__rank_window_free(cz_rank_window *w);
/* Ranks [*lo, *hi) of p's bucket that may hold a part of p (every rank of a bucket whose ranges
 * are out of order; none when p has no bucket): a superset of those whose range intersects it. */
void cz__rank_window_of(const cz_rank_window *w, const cz_plan_param *p, int *lo, int *hi);
/* The parameters and buckets of each buffer a partition deals (rank_index.c), so that work per
 * buffer does not walk the whole plan: domain d = stage * per_stage + (0: the dense buffer;
 * 1 + e: EP rank e's expert buffer); its parameter ids (ascending) are params[pfirst[d] ..
 * pfirst[d + 1]), its bucket ids buckets[bfirst[d] .. bfirst[d + 1]). */
typedef struct cz_domain_index {
    int n, per_stage;
    int *pfirst, *params;
    int *bfirst, *buckets;
} cz_domain_index;
int cz__domain_index_build(cz_domain_index *ix, const cz_plan *plan, cz_error *err);
void cz__domain_index_free(cz_domain_index *ix);
/* Domain of (stage, dense or expert EP rank), -1 when there is none. */
int cz__domain_index_of(const cz_domain_index *ix, int stage, int expert, int ep_rank);
/* ---- the fully sharded layout (fsdp_plan.c, fsdp_metrics.c) ---- */
/* Every parameter's shard rows (torch.chunk over DP) and, per stage, the matrices' owners and
 * micro-groups over the dp * tp GPUs of the shard group (one schedule per stage). */
int cz__fsdp_schedule_build(cz_plan *plan, cz_error *err);
/* plan->metrics of a fully sharded plan (cz__plan_metrics_compute calls it for one). */
int cz__fsdp_metrics_compute(cz_plan *plan, const cz_cluster *c, cz_error *err);
/* ---- lower_bound.c ---- */
/* The atomic lower bound and its terms (each proved in docs/PLANNER.md, "The lower bound"). */
typedef struct cz_lower_bound {
    double value;            /* the largest term: metrics.lower_bound */
    double largest_task;     /* the largest whole task */
    double stage_load;       /* max over stages: the stage's cost / its GPUs */
    double expert_group;     /* max over (stage, EP rank): its experts' cost / its GPUs */
    double shared_gpu;       /* max over stages and EP groups of G GPUs: the G-th plus the
                                (G + 1)-th largest task (two of the G + 1 largest share a GPU) */
    double dense_with_group; /* max over stages: min over EP groups of (the stage's largest
                                dense task + the group's experts) / the group's GPUs */
} cz_lower_bound;
int cz__plan_lower_bound(const cz_plan *plan, cz_lower_bound *out, cz_error *err);

/* ---- metrics.c ---- */
/* Computes plan->metrics from the plan's params, buckets and schedules. */
int cz__plan_metrics_compute(cz_plan *plan, const cz_cluster *c, cz_error *err);
/* The part of each GPU's load (metrics.tp.gpu_load) that its expert rank's work makes, into out
 * (pp * dp * tp values, the per-GPU order): all zero without expert groups. */
int cz__plan_expert_gpu_load(const cz_plan *plan, double *out, cz_error *err);

/* ---- memory.c ---- */
/* Model-state bytes on one GPU under a plan (see memory.c for what each part counts). */
typedef struct cz_memory_gpu {
    double params; /* the stage's parameter buffer (local shards, bucket padding) */
    double grads;  /* the gradient buffer: fp32 for bf16 (Megatron's default), else the dtype */
    double master; /* fp32 master copy of the elements the GPU's DP rank owns (0 for fp32) */
    double state;  /* optimizer state, metrics.memory */
    double total;
} cz_memory_gpu;
/* plan warns when the busiest GPU's model states exceed this fraction of device.memory_gib. */
#define CZ_MEMORY_WARN_FRACTION 0.80
/* Fills *out (malloc'ed, pp*dp*tp entries in the per-GPU order of cz_format.h) for a plan. */
int cz__plan_memory(const cz_plan *plan, cz_memory_gpu **out, cz_error *err);
/* Index of the GPU with the largest total. */
size_t cz__memory_worst(const cz_memory_gpu *g, size_t n);
/* Compares the busiest GPU with the cluster's device.memory_gib: above the capacity it fails
 * with CZ_EINVALID (the numbers, the GPU and what to do) unless allow is set; above
 * CZ_MEMORY_WARN_FRACTION, or above the capacity with allow, it writes a warning (else ""). */
int cz__plan_memory_check(const cz_plan *plan, const cz_cluster *cluster, int allow, char *warning,
                          size_t n, cz_error *err);

/* ---- ilp_dp.c, ilp_microgroups.c, dp_tpaware.c ---- */
/* Re-solves the DP partition of every stage exactly (GLPK MIP: minimize the largest per-rank
 * load under the alpha slice bound, see docs/SOLVERS.md), warm-started from the ranges and
 * owners already in the plan (the greedy result). Replaces them only when strictly better.
 * Fills solver_status/gap/seconds/note. Runs within settings.time_limit_s. */
int cz__dp_partition_ilp(cz_plan *plan, cz_error *err);
/* Re-solves every DP rank's micro-group schedule (GLPK MIP: tasks may move between at most
 * as many groups as the greedy made, slot loads within the capacity; minimize the sum of group
 * makespans), warm-started from the schedule in the plan. Replaces a rank's groups only when
 * strictly better. Within settings.time_limit_s for all ranks together. */
int cz__microgroups_ilp(cz_plan *plan, cz_error *err);
/* TP-aware DP strategy: starting from the ranges in the plan (alpha's), moves cut points while
 * the largest TP makespan of a DP rank (ties: the sum of squares, at no cost in DP balance)
 * decreases, scoring ranks with cz__tp_schedule_build, then hands parameters back towards DP
 * balance under the makespan reached. A stage keeps alpha's cuts unless its makespan fell
 * measurably or at no DP cost. Leaves improved ranges and owners; rebuilds the schedules only
 * when the plan already had some. Deterministic unless settings.tpaware_time_limit_s (CPU
 * seconds of the calling thread) stops the search. */
int cz__dp_partition_tpaware(cz_plan *plan, cz_error *err);
/* Sends a progress report to s->progress with its payload, if a callback is set. */
void cz__progress_report(const cz_settings *s, const cz_progress *p);
/* Monotonic clock in seconds (for time limits and progress only, never for output). */
double cz__clock_seconds(void);
/* CPU seconds used by the calling thread: a time limit on it does not tighten when other
 * processes load the machine. */
double cz__cpu_seconds(void);

#endif /* CZ_ALGORITHMS_H */
