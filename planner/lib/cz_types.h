/*
 * cz_types.h — the planner's internal data structures, shared by the planner modules, the CLI
 * and the executor (which reads plans). Not installed; library users see only canzona.h.
 *
 * Conventions:
 *  - Shapes are [rows, cols]; a 1-D parameter has ndim 1 and shape[1] == 1.
 *  - tp_dim: -1 replicated across TP, 0 rows split (column-parallel, vocab-parallel),
 *    1 columns split (row-parallel).
 *  - Everything measured in elements is int64_t; costs are double in the plan's cost unit.
 *  - Per-rank arrays are indexed stage-major: [stage * dp + dp_rank], and per-GPU arrays
 *    [(stage * dp + dp_rank) * tp + tp_rank].
 */
#ifndef CZ_TYPES_H
#define CZ_TYPES_H

#include "canzona.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct cz_param_def {
    char *name;
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* full, unsharded shape */
    int tp_dim;       /* -1, 0 or 1 */
    cz_param_kind kind;
    int block_dim; /* dimension the blocks split, -1 when the matrix is one block */
    int nblocks;   /* 0 when not blocked */
    int64_t *block_sizes;
    int layer; /* index of the repeat block iteration it came from; -1 outside any */
} cz_param_def;

/* The model's optional "megatron" record: the hyper-parameters that Megatron-Core checks
 * against the TP size and that the parameter shapes alone do not show. 0 = not recorded. */
typedef struct cz_megatron_info {
    int64_t num_attention_heads, num_query_groups;
    int64_t vocab_size;                   /* the tokenizer's (config.json's) vocabulary */
    int64_t make_vocab_size_divisible_by; /* Megatron's option of that name */
    int64_t tensor_model_parallel_size;   /* the TP size the padding was computed for */
    int64_t padded_vocab_size;            /* rows of the embedding and output layer */
} cz_megatron_info;

struct cz_model {
    char *name;
    char *source;    /* path it was loaded from */
    char sha256[65]; /* of the canonical JSON content (sorted keys, compact) */
    cz_dtype dtype;
    int nlayers; /* number of repeat iterations seen (for pipeline stage assignment) */
    size_t nparams;
    cz_param_def *params; /* forward (registration) order, repeat blocks expanded */
    cz_megatron_info megatron;
};

typedef struct cz_device {
    char *name;
    double matmul_tflops; /* effective dense bf16 rate, TFLOP/s */
    double mem_gbps;      /* effective memory bandwidth, GB/s */
    double memory_gib;
} cz_device;

typedef struct cz_links {
    double intra_node_gbps; /* per-GPU bandwidth inside a node, GB/s */
    double inter_node_gbps; /* per-GPU bandwidth across nodes, GB/s */
    double latency_us;      /* per-message latency */
} cz_links;

struct cz_cluster {
    char *name;
    char *source;
    char sha256[65];
    int gpus, dp, tp, pp, gpus_per_node;
    cz_device device;
    cz_links links;
    int64_t bucket_size;  /* 0 = Megatron default max(4e7, 1e6*dp) */
    int64_t bucket_align; /* default 64 */
};

typedef struct cz_plan_param {
    int id; /* index in forward order */
    char *name;
    int ndim;
    int64_t shape[2];
    int64_t local_shape[2]; /* per TP rank */
    int tp_dim;
    cz_param_kind kind;
    int block_dim, nblocks;
    int64_t *block_sizes;
    int layer;
    int stage;      /* pipeline stage */
    int bucket;     /* bucket id */
    int64_t offset; /* start of the local shard relative to its bucket's start */
    int64_t numel;  /* local elements */
    double cost;    /* total work for this parameter across its TP group, cost unit */
    int dp_owner;   /* -1 only under the even strategy */
} cz_plan_param;

typedef struct cz_plan_bucket {
    int id;
    int stage;
    int64_t offset;  /* start in the stage's whole local buffer */
    int64_t size;    /* including padding */
    int64_t *ranges; /* 2*dp values: [start, end) per DP rank, relative to bucket start */
} cz_plan_bucket;

/* One micro-group: tasks (param ids) each assigned to a slot (TP rank that hosts it). */
typedef struct cz_plan_group {
    int id;
    int nslots; /* tp, or 1 under sc and when tp == 1 */
    int ntasks;
    int *task_param; /* param ids, in execution order */
    int *task_slot;  /* slot of each task */
    double *load;    /* nslots values: summed task cost per slot */
} cz_plan_group;

typedef struct cz_rank_schedule {
    int stage;
    int dp_rank;
    int ngroups;
    cz_plan_group *groups;
} cz_rank_schedule;

typedef struct cz_plan_metrics {
    double *dp_load;         /* pp*dp: summed cost owned by each DP rank */
    double dp_imbalance;     /* max/mean of dp_load (per stage, worst stage) */
    double *gpu_load;        /* pp*dp*tp: optimizer work per GPU under the TP schedule */
    double *rank_makespan;   /* pp*dp: sum over groups of the largest slot load, plus the
                                elementwise share of one TP rank */
    double tp_makespan;      /* max of rank_makespan */
    double tp_imbalance;     /* max/mean of gpu_load */
    double total_cost;       /* sum of all parameter costs */
    double max_task_cost;    /* largest single task (matrix cost, or elementwise cost / tp) */
    double lower_bound;      /* max(total_cost / (dp*tp*pp), max_task_cost) */
    double *memory;          /* pp*dp*tp: optimizer-state bytes per GPU */
    double predicted_step_s; /* compute makespan converted to seconds on the cluster's device */
} cz_plan_metrics;

struct cz_plan {
    char *generator;         /* "canzona" */
    char *generator_version; /* CZ_VERSION */
    char *model_name, *model_sha256;
    char *cluster_name, *cluster_sha256;
    /* $.content_sha256 as read from a file ("" when the file had none, or the plan was built
     * in memory), and whether the file's content matched it: 1 yes, -1 no, 0 not checked. */
    char content_sha256[65];
    int content_hash_ok;
    cz_dtype dtype;
    cz_settings settings;
    double capacity_used;  /* the micro-group capacity actually used (cost unit) */
    int dp_fell_back;      /* 1 when alpha's result lost to anchored and anchored was kept */
    int dp_numel_cuts;     /* 1 when alpha with cost loads kept the element-load cuts because
                              they balanced at least as well and gave a shorter makespan */
    double plan_seconds;   /* wall time spent building the plan (not written to the file) */
    int solver_status;     /* CZ_SOLVE_*: worst outcome over the plan's ILP solves */
    double solver_gap;     /* largest relative MIP gap left by a solve (0 when all optimal) */
    double solver_seconds; /* wall time spent in the ILP solves */
    char solver_note[256]; /* a warning for the user (time-outs, fallbacks); "" when none */
    int solver_status_dp, solver_status_tp; /* the same per phase: DP partition, micro-groups */
    double solver_gap_dp, solver_gap_tp;
    int dp, tp, pp, gpus_per_node;
    int64_t bucket_size, bucket_align;
    size_t nparams;
    cz_plan_param *params; /* forward order, id == index */
    size_t nbuckets;
    cz_plan_bucket *buckets; /* per stage in the order they are filled (reverse param order) */
    size_t nschedules;       /* pp*dp, stage-major */
    cz_rank_schedule *schedules;
    cz_plan_metrics metrics;
};

/* ---- model limits (model_io.c), shared by the importer so that it writes only what loads ---- */
/* Parameters after repeat expansion: bounds the expansion of a hostile file. */
#define CZ_MODEL_MAX_PARAMS ((size_t)1 << 22)
/* Elements of the whole model, 2^50 (about 1.1e15): far above any model trained today, and
 * low enough that every offset, padded bucket and sum of them stays far below 2^63 (at most
 * 2^22 parameters, each padded by less than 2^31 elements). */
#define CZ_MODEL_MAX_ELEMENTS ((int64_t)1 << 50)
/* Longest parameter name in bytes: names become file names (NAME.npy) in the executor's
 * --dump-dir and --init-dir, and file names stop at 255 bytes. */
#define CZ_PARAM_NAME_MAX 200
/* NULL when name is safe as a file name inside a folder, else why not ("contains '/'", ...):
 * empty, longer than CZ_PARAM_NAME_MAX, a '/' or '\\', a control character, or a leading '.'
 * (which also covers "." and ".."). */
const char *cz_param_name_problem(const char *name);

/* ---- error helpers (error.c) ---- */
/* Fills err (if not NULL) with code and a printf-style message; returns code. */
int cz_error_set(cz_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- allocation helpers (error.c): abort-free; return NULL on failure ---- */
char *cz_strdup(const char *s);

/* ---- cost model (cost.c) ---- */
/* Bytes per element of a dtype. */
int cz_dtype_bytes(cz_dtype d);
/* Total optimizer work for one parameter across its TP group, in the settings' unit:
 * a matrix parameter is updated once, whole (sum over its blocks); an elementwise one is
 * updated shard by shard on every TP rank (replicated ones redundantly). */
double cz_cost_param(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                     cz_dtype dtype);
/* The same in seconds on the cluster's device, whatever the settings' unit. */
double cz_cost_param_seconds(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                             cz_dtype dtype);
/* Optimizer-state bytes for a parameter: for a matrix, held by its host (full size); for an
 * elementwise parameter, held by each TP rank for its local shard. */
double cz_state_bytes(const cz_param_def *p, const cz_settings *s, int tp);
/* FLOPs of one optimizer step on a whole m x n matrix (Muon/SOAP/Shampoo), no blocks. */
double cz_matrix_flops(int64_t m, int64_t n, const cz_settings *s);

/* How a TP group runs Muon's Newton-Schulz on a TP-split matrix (Megatron-LM's tp_mode). */
typedef enum cz_muon_tp_mode {
    CZ_MUON_TP_DUPLICATED = 0, /* all-gather the shards, whole-matrix NS on every TP rank */
    CZ_MUON_TP_BLOCKWISE = 1,  /* NS on each TP-local shard alone: no communication, and a
                                  different update (each shard orthogonalized separately) */
    CZ_MUON_TP_DISTRIBUTED = 2 /* NS on the shards, each iteration all-reducing the partial Gram
                                  matrix of the unsplit dimension over TP */
} cz_muon_tp_mode;
const char *cz_muon_tp_mode_name(cz_muon_tp_mode v);
int cz_muon_tp_mode_parse(const char *name, cz_muon_tp_mode *out);

/* One TP rank's share of a matrix's Muon update under a TP mode. */
typedef struct cz_muon_tp_work {
    double seconds;       /* compute on one TP rank */
    double gram_bytes;    /* bytes of each Gram all-reduce (distributed) */
    int grams;            /* number of Gram all-reduces (ns_steps per Gram, distributed) */
    int scalar_allreduce; /* all-reduces of the norm (one float each, distributed) */
} cz_muon_tp_work;
/* Under duplicated, seconds is the whole matrix's time (cz_cost_param_seconds) and there is no
 * all-reduce; replicated matrices (tp_dim < 0) and tp 1 are the same in every mode. */
cz_muon_tp_work cz_cost_muon_tp(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                                cz_dtype dtype, cz_muon_tp_mode mode);

/* ---- cluster_io.c ---- */
/* Sizes from the command line that override a cluster file's; 0 keeps the file's value. */
typedef struct cz_cluster_sizes {
    int dp, tp, pp;      /* DP, when 0, becomes GPUs / (TP x PP) as in Megatron-LM */
    int nodes;           /* GPUs = nodes x gpus_per_node */
    int gpus_per_node;   /* also decides which traffic crosses nodes */
    int64_t bucket_size; /* gradient bucket size in elements; CZ_BUCKETS_MEGATRON: Megatron's
                            default max(4e7, 1e6 x DP) even when the file sets one */
} cz_cluster_sizes;
#define CZ_BUCKETS_MEGATRON (-1)
#define CZ_BUCKETS_PAPER ((int64_t)400000000) /* the bucket size of the paper's scripts */
/* cz_cluster_load with sizes written into the file's JSON before it is checked and hashed (so
 * the hash is that of a file holding these sizes). sizes may be NULL. */
int cz_cluster_load_sized(cz_cluster **out, const char *path, const cz_cluster_sizes *sizes,
                          cz_error *err);

/* ---- Megatron-Core's rules (megatron_rules.c) ---- */
/* Megatron's padded vocabulary: vocab rounded up to a multiple of divisible_by * tp. */
int64_t cz_megatron_padded_vocab(int64_t vocab, int64_t divisible_by, int64_t tp);
/* Megatron-Core's attention rules: num_attention_heads and num_query_groups each a multiple of
 * tp. where names the input in the message (a file), the keys name the two counts in it. */
int cz_megatron_check_heads(const char *where, const char *heads_key, int64_t heads,
                            const char *groups_key, int64_t groups, int64_t tp, cz_error *err);
/* Checks a model's megatron record against a TP size: the attention rules, and that the
 * recorded padded vocabulary is what Megatron pads to at this TP. cluster names the cluster
 * file in messages (NULL: none). CZ_OK when the model records nothing. */
int cz_model_check_megatron(const cz_model *m, int tp, const char *cluster, cz_error *err);

/* ---- Megatron-LM's current layer-wise rule (megatron_layerwise.c) ---- */
/* Newton-Schulz cost Megatron balances by: max(m, n) * min(m, n)^2. */
double cz_megatron_ns_cost(int64_t m, int64_t n);
/* lcm(64, lcm(dp, 128) / dp): the multiple a layer-wise shard is padded to. */
int64_t cz_megatron_lw_shard_divisor(int dp);
/* Megatron's layer-wise buffer layout of n Muon parameters given in backprop order (element
 * counts and Newton-Schulz costs): shard[i] is the DP rank that owns parameter i; the padded size
 * of each bucket goes to bucket_sizes (room for n), their count to *nbuckets. bucket_size <= 0
 * keeps one bucket. */
int cz_megatron_lw_layout(const int64_t *numel, const double *cost, size_t n, int dp,
                          int64_t bucket_size, int *shard, int64_t *bucket_sizes, size_t *nbuckets,
                          cz_error *err);
/* Megatron's ZeRO-1 (DistributedOptimizer) buckets of n parameters in backprop order. */
int cz_megatron_zero1_buckets(const int64_t *numel, size_t n, int dp, int64_t bucket_size,
                              int64_t *bucket_sizes, size_t *nbuckets);
/* Whether a parameter name is one of Megatron-Core's expert-parallel parameters. */
int cz_megatron_is_expert(const char *name);
/* One pipeline stage under the current rule: owner[id] (when owner is not NULL) for its Muon
 * (matrix) parameters, and the sizes of all its buckets (the layer-wise Muon buckets, then the
 * ZeRO-1 buckets of the other parameters; room for nparams + 1). */
int cz_megatron_lw_stage(const cz_plan *plan, int stage, int *owner, int64_t *bucket_sizes,
                         size_t *nbuckets, cz_error *err);

/* ---- plan construction (planner.c, buckets.c, dp_partition.c, microgroups.c, metrics.c) ---- */
/* Allocates an empty plan and fills params (shapes, local shapes, cost, stage) from the model. */
int cz_plan_init(cz_plan **out, const cz_model *m, const cz_cluster *c, const cz_settings *s,
                 cz_error *err);
/* Lays out the gradient buckets (Megatron order, alignment, size, DP padding). */
int cz_buckets_layout(cz_plan *plan, cz_error *err);
/* Fills every bucket's ranges and every param's dp_owner following settings.dp. */
int cz_dp_partition(cz_plan *plan, cz_error *err);
/* Builds the micro-group schedule of every DP rank following settings.tp. */
int cz_tp_schedule_build(cz_plan *plan, cz_error *err);
/* Computes plan->metrics from the plan's params, buckets and schedules. */
int cz_plan_metrics_compute(cz_plan *plan, const cz_cluster *c, cz_error *err);
/* Frees the metrics arrays only. */
void cz_plan_metrics_free(cz_plan_metrics *m);
/* Frees the schedules only (sets nschedules to 0). */
void cz_plan_schedules_free(cz_plan *plan);

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
/* Fills *out (malloc'ed, pp*dp*tp entries in the per-GPU order of cz_types.h) for a plan. */
int cz_plan_memory(const cz_plan *plan, cz_memory_gpu **out, cz_error *err);
/* Index of the GPU with the largest total. */
size_t cz_memory_worst(const cz_memory_gpu *g, size_t n);
/* Compares the busiest GPU with the cluster's device.memory_gib: above the capacity it fails
 * with CZ_EINVALID (the numbers, the GPU and what to do) unless allow is set; above
 * CZ_MEMORY_WARN_FRACTION, or above the capacity with allow, it writes a warning (else ""). */
int cz_plan_memory_check(const cz_plan *plan, const cz_cluster *cluster, int allow, char *warning,
                         size_t n, cz_error *err);

/* ---- ilp_dp.c, ilp_microgroups.c, dp_tpaware.c ---- */
/* Outcome of an ILP solve, ordered from best to worst (a plan keeps the worst it saw). */
enum {
    CZ_SOLVE_NONE = 0,     /* no solver ran */
    CZ_SOLVE_OPTIMAL = 1,  /* proved optimal */
    CZ_SOLVE_FEASIBLE = 2, /* time limit hit; the best integer solution is kept (gap > 0) */
    CZ_SOLVE_TIMEOUT = 3,  /* time limit hit before any integer solution: greedy kept */
    CZ_SOLVE_FAILED = 4    /* the solver failed (numerics); greedy kept */
};
const char *cz_solve_status_name(int status);
/* Re-solves the DP partition of every stage exactly (GLPK MIP: minimize the largest per-rank
 * load under the alpha slice bound, see docs/SOLVERS.md), warm-started from the ranges and
 * owners already in the plan (the greedy result). Replaces them only when strictly better.
 * Fills solver_status/gap/seconds/note. Runs within settings.time_limit_s. */
int cz_dp_partition_ilp(cz_plan *plan, cz_error *err);
/* Re-solves every DP rank's micro-group schedule (GLPK MIP: tasks may move between at most
 * as many groups as the greedy made, slot loads within the capacity; minimize the sum of group
 * makespans), warm-started from the schedule in the plan. Replaces a rank's groups only when
 * strictly better. Within settings.time_limit_s for all ranks together. */
int cz_microgroups_ilp(cz_plan *plan, cz_error *err);
/* TP-aware DP strategy: starting from the ranges in the plan (alpha's), moves cut points one
 * parameter boundary at a time while the largest TP makespan of a DP rank (ties: the sum of
 * squares) decreases, scoring ranks with cz_tp_schedule_build. Leaves improved ranges and
 * owners; rebuilds the schedules only when the plan already had some. Deterministic. */
int cz_dp_partition_tpaware(cz_plan *plan, cz_error *err);
/* Sends a progress report to the handler installed by cz_set_progress_handler, if any. */
void cz_progress_report(const cz_progress *p);
/* Monotonic clock in seconds (for time limits and progress only, never for output). */
double cz_clock_seconds(void);

/* ---- param_order.c ---- */
/* Sorts n parameter ids into buffer order: by bucket, then offset, then id. Returns CZ_OK or
 * CZ_ENOMEM (ids untouched). */
int cz_params_sort_by_position(const cz_plan *plan, int *ids, int n);

/* ---- hashing (sha256.c) ---- */
void cz_sha256_hex(const void *data, size_t len, char out[65]);

/* The message every layer gives for a parameter over CZ_MAX_BLOCKS (name, nblocks, limit). */
#define CZ_BLOCKS_LIMIT_FMT "'%s' has %d blocks; canzona supports at most %d per parameter"

/* ---- plan content hash (plan_io.c) ---- */
struct json_t;
/* SHA-256 of a plan file's JSON value without its "content_sha256" member: compact, keys
 * sorted, reals with 17 significant digits (docs/FORMATS.md). plan is not modified. */
int cz_plan_json_content_hash(const struct json_t *plan, char out[65], cz_error *err);
/* CZ_OK when the plan was read from a file whose recorded content hash matches its content;
 * otherwise an error telling the user to re-run `canzona plan`. For consumers that have no
 * model to check the plan against (the executor). */
int cz_plan_check_content_hash(const cz_plan *plan, const char *path, cz_error *err);

/* ---- structural plan checks (plan_structure.c) ---- */
/* Where violations go: validate lists all of them; the executor refuses on the first. */
typedef struct cz_plan_checks {
    struct json_t *out; /* array of {"code", "path", "message"} */
    int checks;         /* checks performed */
    int oom;
    int unsafe;  /* a structural violation makes index-based recomputation unsafe to run */
    int foreign; /* parameters differ from the model's (validate only) */
    char path[256];
} cz_plan_checks;
void cz_plan_checks_at(cz_plan_checks *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void cz_plan_checks_fail(cz_plan_checks *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Every rule a plan must satisfy that needs no model or cluster: ids, local shapes and element
 * counts, blocks, bucket layout rules (contiguity, alignment, reverse fill order, no overlap),
 * DP ranges, atomic ownership, schedule membership and slot loads. Shared by `canzona
 * validate` and the executor's plan check, so that the executor refuses every plan validate
 * refuses for a structural reason. Safe on any plan the reader accepts. */
void cz_plan_check_structure(cz_plan_checks *c, const cz_plan *plan);
/* Whether two stored costs agree to validate's relative tolerance (1e-9); NaN never does. */
int cz_close_rel(double a, double b);

/* ---- simulate.c, render.c ---- */
/* Kinds of collective for the alpha-beta formulas of the simulator (see docs/SIMULATOR.md). */
typedef enum cz_coll_kind {
    CZ_COLL_REDUCE_SCATTER = 0, /* ring: n-1 steps, each moves the largest slice */
    CZ_COLL_ALL_GATHER = 1,     /* ring: n-1 steps, each moves the largest slice */
    CZ_COLL_ALL_REDUCE = 2,     /* ring: 2(n-1) steps, 2(n-1)/n of the buffer */
    CZ_COLL_ALL_TO_ALL = 3,     /* pairwise: n-1 steps, a rank's larger of sent/received */
    CZ_COLL_ROOTED_GROUP = 4    /* n concurrent rooted ring reduces (or broadcasts), one per
                                   owner: n-1 steps, bytes = the busiest ring link's load */
} cz_coll_kind;

/* How an uneven reduce-scatter / all-gather over DP (slices of unequal length) is run:
 * ROOTED as a group of one rooted ring reduce (broadcast) per owner, whose busiest link carries
 * the bucket minus one slice; PADDED as an ordinary ring collective with every slice padded to
 * the largest, n-1 steps of the largest slice. Equal slices cost the same either way. */
typedef enum cz_sim_uneven { CZ_SIM_UNEVEN_ROOTED = 0, CZ_SIM_UNEVEN_PADDED = 1 } cz_sim_uneven;

typedef struct cz_sim_options {
    cz_sim_uneven uneven;    /* default ROOTED */
    cz_muon_tp_mode muon_tp; /* under the sc TP strategy with Muon; default DUPLICATED */
} cz_sim_options;

/* Seconds of one uneven DP collective with slice lengths len[0..n-1] (elements). */
double cz_sim_uneven_seconds(const int64_t *len, int n, double elem_bytes, double gbps,
                             double latency_us, cz_sim_uneven model);

/* Seconds of one collective over n ranks. bytes: for the ring collectives the largest
 * per-rank slice (reduce-scatter, all-gather) or the whole buffer (all-reduce); for the
 * all-to-all the largest amount one rank sends or receives. 0 when n <= 1 or bytes <= 0. */
double cz_sim_collective_seconds(cz_coll_kind kind, int n, double bytes, double gbps,
                                 double latency_us);
/* 1 when the world ranks first, first+stride, ..., first+(n-1)*stride sit on more than one
 * node of gpus_per_node consecutive ranks (so the group runs at the inter-node rate). */
int cz_sim_group_spans_nodes(int first, int stride, int n, int gpus_per_node);

typedef struct cz_sim_span {
    double start, end; /* seconds after the gradients are synchronized (or cost units) */
} cz_sim_span;

/* Result of simulating one optimizer step of a plan (cz_plan_simulate). All durations are in
 * seconds, or in the plan's cost unit when no cluster was given (communication is then 0). */
typedef struct cz_sim_result {
    int pipelined;         /* 1: asynchronous micro-group pipeline; 0: synchronous compute */
    double grad_sync_s;    /* gradient reduce-scatter (all-reduce under layerwise), all buckets */
    double frag_gather_s;  /* even (ZeRO-1) only: gathering fragmented matrices over DP */
    double local_s;        /* elementwise + matrix updates incl. TP collectives, slowest GPU */
    double param_sync_s;   /* parameter all-gather over DP, all buckets */
    double optimizer_s;    /* optimizer-step latency: frag_gather + local + param_sync */
    double step_s;         /* grad_sync + optimizer_s, worst pipeline stage */
    double compute_s;      /* busiest GPU's compute-stream busy time */
    double tp_comm_s;      /* TP collective time of the critical DP rank */
    double comm_s;         /* all collective time on the critical GPU (sum, exposed or not) */
    double exposed_comm_s; /* step_s minus the critical GPU's compute busy time */
    int critical_stage, critical_dp, critical_tp; /* the GPU whose work finishes last */
    int ngpus;
    double *gpu_busy; /* per GPU compute busy time, [(stage*dp + d)*tp + t] */
    /* Timeline of the critical DP rank (times relative to the end of gradient sync, plus the
     * fragment gather under even). */
    int tl_tp, tl_groups;
    double *tl_elementwise;  /* tl_tp values: end of the elementwise updates (start is 0) */
    cz_sim_span *tl_gather;  /* tl_groups spans (a collective: same on every TP rank) */
    cz_sim_span *tl_scatter; /* tl_groups spans; zero length under synchronous compute */
    cz_sim_span *tl_compute; /* tl_groups * tl_tp spans, [g * tl_tp + t] */
} cz_sim_result;

/* Simulates one optimizer step of plan on cluster (event model of docs/SIMULATOR.md). With
 * cluster NULL, task times are the plan's costs and communication is free (cost-proportional
 * timeline). The plan's topology must match the cluster's (CZ_EMISMATCH otherwise); the even
 * partition is supported with the sc TP strategy only (CZ_EUNSUPPORTED otherwise). opt may be
 * NULL (defaults). */
int cz_plan_simulate(cz_sim_result **out, const cz_plan *plan, const cz_cluster *cluster,
                     const cz_sim_options *opt, cz_error *err);
void cz_sim_result_free(cz_sim_result *r);

/* Options of cz_plan_render_svg. */
typedef struct cz_render_options {
    int width;                /* pixels; default 1200 when 0 */
    const char *cluster_name; /* shown in the title; NULL = the plan's cluster name */
    int sim_in_seconds;       /* 1: sim was run on a cluster (seconds); 0: cost-proportional */
} cz_render_options;

/* Renders the plan as a self-contained SVG document: a verdict on what bounds the step, the
 * per-GPU load bars (aggregated where they would be under 3 px), with sim from a cluster the
 * step's phases, and the pipeline timeline of sim's critical DP rank. sim may be NULL (no
 * timeline). *out is a NUL-terminated string owned by the caller (free()). */
int cz_plan_render_svg(char **out, const cz_plan *plan, const cz_sim_result *sim,
                       const cz_render_options *opt, cz_error *err);
/* The same SVG inside one HTML page with tables of the settings, per-rank loads and the
 * costliest parameters. */
int cz_plan_render_html(char **out, const cz_plan *plan, const cz_sim_result *sim,
                        const cz_render_options *opt, cz_error *err);
/* ---- import_hf.c ---- */
#include <jansson.h>
/* Builds a canzona.model/1 description (a new jansson object owned by the caller, released
 * with json_decref) from a Hugging Face config.json. Supported model_type values (or, when
 * model_type is absent, architectures[0]): llama, mistral, qwen2, qwen3 (dense), qwen2_moe,
 * qwen3_moe, mixtral. Parameters follow Megatron-Core naming (TE fused layer norms, fused QKV
 * and gate/up with blocks, experts as whole matrices); layers are written as one repeat block
 * when they are all alike, else one repeat block of 1 per layer. name may be NULL: then the
 * config's _name_or_path basename (lowercased), else the file's basename without .json and
 * .config. Errors name the file and the JSON key: CZ_EIO, CZ_EPARSE, CZ_EINVALID (missing or
 * wrongly typed field), CZ_EUNSUPPORTED (unknown architecture or feature), CZ_ENOMEM. */
/* Reads the optional "megatron" record of a model description (root) into m->megatron and
 * checks it against itself and against m's parameters (called by cz_model_load). */
int cz_model_megatron_read(const char *file, const json_t *root, cz_model *m, cz_error *err);

int cz_import_hf(json_t **out_model, const char *config_path, const char *name, cz_dtype dtype,
                 cz_error *err);
/* Validates and expands a parsed model description exactly as cz_model_load does a file's
 * (messages name path, which need not be a file); sha may be NULL (then computed from root). */
int cz_model_from_json(cz_model **out, const json_t *root, const char *path, const char *sha,
                       cz_error *err);
/* Options of cz_import_hf_opts; initialize with cz_import_hf_options_init. */
typedef struct cz_import_hf_options {
    const char *name;       /* NULL: derived as cz_import_hf describes */
    cz_dtype dtype;         /* default bf16 */
    int tp_size;            /* the job's tensor-parallel size; default 1 */
    int vocab_divisible_by; /* Megatron's make_vocab_size_divisible_by; default 128 */
    int split_qkv;          /* 1 (default, Megatron's): QKV declared as blocks Q, K, V */
    int split_gate_up;      /* 1 (default): linear_fc1 declared as blocks gate, up; Megatron
                               orthogonalizes the fused matrix whole (0) */
} cz_import_hf_options;
void cz_import_hf_options_init(cz_import_hf_options *o);
/* cz_import_hf with the job's TP size and vocabulary padding: the vocabulary is padded as
 * Megatron-LM pads it (to a multiple of vocab_divisible_by * tp_size), the model records the
 * head counts and the padding in its "megatron" object, and hyper-parameters that Megatron-Core
 * cannot split across tp_size ranks are refused (CZ_EINVALID naming the key and the rule).
 * cz_import_hf is this function with the defaults. */
int cz_import_hf_opts(json_t **out_model, const char *config_path, const cz_import_hf_options *o,
                      cz_error *err);
/* Formats a model description as the bundled files are written: 2-space indentation, one
 * parameter per line, key order preserved, trailing newline. *out is malloc'ed (free()). */
int cz_model_json_format(char **out, const json_t *model, cz_error *err);

/* ---- analysis: validate.c, inspect.c, plan_diff.c ---- */
struct json_t; /* jansson's json_t */
/* Recomputes every invariant of the plan (listed by violation code in docs/ANALYSIS.md, "What is
 * checked") against the model and cluster it
 * claims to be made for. On success *violations_out is a new JSON array (caller owns it) of
 * {"code", "path", "message"} objects, one per violation, empty when the plan is valid, and the
 * return value is the number of checks performed (>= 0). Returns a negative CZ_E* code on
 * failure (out of memory, missing arguments). */
int cz_plan_validate(const cz_plan *plan, const cz_model *model, const cz_cluster *cluster,
                     struct json_t **violations_out, cz_error *err);
/* Builds a readable analysis of a plan as a new JSON object (caller owns *report_out):
 * topology, settings, per-rank and per-GPU loads and memory, imbalance figures, the top_n
 * busiest ranks with their largest parameters, micro-group statistics and the parameters that
 * dominate the lower bound. Uses the plan's stored metrics. */
int cz_plan_inspect(const cz_plan *plan, int top_n, struct json_t **report_out, cz_error *err);
/* Compares plan b against plan a. Plans of different models (inputs.model.sha256) or topologies
 * are refused with CZ_EMISMATCH unless force is set, in which case parameters are matched by
 * name. *report_out (caller owns) holds settings, metric and per-rank deltas, the moved
 * parameters (largest first; at most limit listed, all counted; limit < 0 lists all), each
 * plan's busiest rank with what bounds its makespan and the parameters whose part of it
 * changed, largest effect first ("makespan", the same limit), and "identical". */
int cz_plan_diff(const cz_plan *a, const cz_plan *b, int force, int limit,
                 struct json_t **report_out, cz_error *err);

#endif /* CZ_TYPES_H */
