/*
 * cz_format.h — the plan-format library's one header for the rest of the project (planner/lib,
 * the CLI, the executor, tools and tests): the model, cluster and plan types, their readers'
 * limits, the release functions, the structural check, errors and invariants, the enums' names
 * and sizes, the file and hash utilities. Everything here is in libcanzona-format (jansson
 * only); nothing here is installed: programs outside the project see canzona.h.
 *
 * It includes cz_error.h (cz__error_set, cz__strdup) and cz_assert.h (CZ_ASSERT): include this
 * header, not those. What is only for the format's own files (the strict JSON getters, the
 * Megatron record reader, the parameter-name rule) is in format_internal.h.
 * docs/ARCHITECTURE.md has the layers.
 *
 * Conventions:
 *  - Shapes are [rows, cols]; a 1-D parameter has ndim 1 and shape[1] == 1.
 *  - tp_dim: -1 replicated across TP, 0 rows split (column-parallel, vocab-parallel),
 *    1 columns split (row-parallel).
 *  - Everything measured in elements is int64_t; costs are double in the plan's cost unit.
 *  - Per-rank arrays are indexed stage-major: [stage * dp + dp_rank], and per-GPU arrays
 *    [(stage * dp + dp_rank) * tp + tp_rank].
 */
#ifndef CZ_FORMAT_H
#define CZ_FORMAT_H

#include "canzona_format.h"
#include "cz_assert.h"
#include "cz_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_t; /* jansson's json_t: the few functions that take one are for JSON producers */

/* ---- names and sizes of the enums (settings.c) ----
 * The name and parse functions in canzona.h, and these, read one table per enum
 * (format_internal.h); nothing else spells these names. */
/* Bytes per element of a dtype. */
int cz__dtype_bytes(cz_dtype d);
/* "matrix" or "elementwise"; NULL for a value outside the enum. */
const char *cz__kind_name(cz_param_kind v);

/* Outcome of an ILP solve, ordered from best to worst (a plan keeps the worst it saw, and its
 * file records it). */
enum {
    CZ_SOLVE_NONE = 0,     /* no solver ran */
    CZ_SOLVE_OPTIMAL = 1,  /* proved optimal */
    CZ_SOLVE_FEASIBLE = 2, /* time limit hit; the best integer solution is kept (gap > 0) */
    CZ_SOLVE_TIMEOUT = 3,  /* time limit hit before any integer solution: greedy kept */
    CZ_SOLVE_FAILED = 4    /* the solver failed (numerics); greedy kept */
};
const char *cz__solve_status_name(int status);

typedef struct cz_param_def {
    char *name;
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* full, unsharded shape */
    int tp_dim;       /* -1, 0 or 1 */
    cz_param_kind kind;
    int block_dim; /* dimension the blocks split, -1 when the matrix is one block */
    int nblocks;   /* 0 when not blocked */
    int64_t *block_sizes;
    /* Per-head Muon ("heads": {"dim", "size"}): the matrix is head_size-wide heads along
     * head_dim (the blocks' dimension when it has blocks), each orthogonalized on its own.
     * head_size 0: no heads. Stored as a size, not a list, so any number of heads costs
     * nothing (heads.c). */
    int head_dim;
    int64_t head_size;
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

/* The device model (docs/SIMULATOR.md, "The device model"): the kinds a cluster file may name in
 * "device.kind" (docs/FORMATS.md section 2.2), whose per-call costs the cost model then charges.
 * NONE, a file without the key: the flat model of effective rates only, as before. */
typedef enum cz_device_kind {
    CZ_DEVICE_KIND_NONE = 0,
    CZ_DEVICE_KIND_H100 = 1,
    CZ_DEVICE_KIND_H200 = 2,
    CZ_DEVICE_KIND_B200 = 3,
    CZ_DEVICE_KIND_GB300 = 4
} cz_device_kind;
/* "H100", "H200", "B200", "GB300"; NULL for NONE or a value outside the enum. */
const char *cz__device_kind_name(cz_device_kind k);

/* GEMM input precisions the device model tells apart: bf16 inputs with fp32 accumulation (the
 * executor's bf16 Newton-Schulz, Megatron's "medium" matmul precision), and fp32 without TF32
 * (the executor's fp32 Newton-Schulz and every cooperative task's GEMMs). */
typedef enum cz_gemm_prec { CZ_GEMM_BF16 = 0, CZ_GEMM_FP32 = 1 } cz_gemm_prec;

/* What the device model charges besides FLOPs and bytes. on == 0 (no device.kind, no
 * calibration): nothing, and the flat model's formulas are evaluated as before, so that plans of
 * such clusters stay byte for byte what they were. Every number's source: docs/SIMULATOR.md. */
typedef struct cz_device_costs {
    int on;
    double gemm_tflops[2]; /* large-GEMM rate by cz_gemm_prec, TFLOP/s */
    double gemm_call_s[2]; /* fixed cost of one cuBLAS call in a stream of dependent ops */
    double launch_s;       /* one elementwise kernel, launched back to back */
    double nccl_call_s;    /* fixed cost of one NCCL call (its kernel's launch) */
    double torch_op_s;     /* one PyTorch eager op (Megatron-LM's optimizers) */
} cz_device_costs;

typedef struct cz_device {
    char *name;
    double matmul_tflops; /* effective dense bf16 rate, TFLOP/s */
    double mem_gbps;      /* effective memory bandwidth, GB/s */
    double memory_gib;
    cz_device_kind kind;   /* "device.kind"; NONE when absent */
    cz_device_costs costs; /* the kind's defaults, or a calibration's (cz_cluster_calibrate) */
} cz_device;

/* Fills *out with the device model of kind k on a device whose effective bf16 rate is
 * matmul_tflops (device_kinds.c; every figure's source is in docs/SIMULATOR.md). NONE: off. */
void cz__device_kind_costs(cz_device_kind k, double matmul_tflops, cz_device_costs *out);
/* One iteration of the executor's Newton-Schulz in its general form, as cz__ns_plan issues it
 * (executor/src/compute/ns_plan.c; tests/unit/test_device_model.c checks these against it): three
 * GEMMs, and four elementwise kernels in bf16 (three conversions and B = A), two in fp32. */
#define CZ_NS_GEMMS_PER_ITERATION 3
#define CZ_NS_EW_KERNELS_BF16 4
#define CZ_NS_EW_KERNELS_FP32 2
/* The fixed costs of *out from a measured launch and Newton-Schulz iteration (bf16, fp32): the
 * GEMM calls are what the iteration leaves after its elementwise launches; an NCCL call is one
 * launch; a PyTorch op at least one op of the bf16 iteration. The rates are left alone. */
void cz__device_costs_from_ns(double launch_s, double ns_bf16_s, double ns_fp32_s,
                              cz_device_costs *out);

/* ---- Newton-Schulz coefficient sets (ns_coeffs.c) ----
 * Muon's iteration X = a X + (b A + c A A) X, A = X X^T, with one (a, b, c) per iteration: a
 * set is one triple repeated every iteration ("jordan", "cubic") or a table of rows, row t for
 * iteration t, which then fixes the iteration count ("polar_express": 5 rows). */
#define CZ_NS_MAX_ROWS 16   /* rows of a table */
#define CZ_NS_MAX_STEPS 100 /* iterations the executor accepts */
typedef struct cz_ns_triple {
    double a, b, c;
} cz_ns_triple;
typedef struct cz_ns_coeffs {
    const char *name; /* the built-in set's name; NULL for a table read from text */
    int rows;         /* 1: row[0] for every iteration; more: row[t] for iteration t */
    cz_ns_triple row[CZ_NS_MAX_ROWS];
} cz_ns_coeffs;
/* The triple of iteration t (0-based): a table's row t (its last row past its end, which the
 * step-count check rules out), a single triple's for every t. */
static inline cz_ns_triple cz__ns_coeffs_at(const cz_ns_coeffs *k, int t)
{
    return k->row[t < k->rows ? t : k->rows - 1];
}
/* A built-in set by name (NULL: "jordan", the default); NULL when unknown. */
const cz_ns_coeffs *cz__ns_coeffs_find(const char *name);
/* Comma-separated list of the built-in names, for messages. */
const char *cz__ns_coeffs_names(void);
/* A built-in name (NULL: "jordan"), or a table as text: rows "a,b,c" separated by ';' (spaces
 * allowed, a trailing ';' too), one row per iteration; a single row is one triple repeated.
 * CZ_EINVALID with a message naming the row and entry at fault. */
int cz__ns_coeffs_parse(const char *text, cz_ns_coeffs *out, cz_error *err);
/* CZ_OK when ns_steps (0 .. CZ_NS_MAX_STEPS) agrees with k: any count for a single triple,
 * exactly its row count for a table; else CZ_EINVALID saying which count to set (text: the
 * set as the user wrote it, for the message). */
int cz__ns_coeffs_check_steps(const cz_ns_coeffs *k, int ns_steps, const char *text, cz_error *err);
/* Room for any set's canonical text. */
#define CZ_NS_TEXT_MAX (CZ_NS_MAX_ROWS * 3 * 26)
/* The canonical text of k into buf (CZ_NS_TEXT_MAX bytes): a built-in set's name, else its rows
 * "a,b,c" (%.17g, exact) separated by ';', which cz__ns_coeffs_parse reads back to k. */
void cz__ns_coeffs_format(const cz_ns_coeffs *k, char *buf);

/* ---- calibration files (calibration_io.c; docs/FORMATS.md section 8) ---- */
#define CZ_CALIBRATION_SCHEMA "canzona.calibration/1"
#define CZ_CALIBRATION_SCHEMA_2 "canzona.calibration/2"
/* A collective a calibration measured (version 2): op, group size, whether it crossed nodes. */
typedef enum cz_cal_op {
    CZ_CAL_ALL_REDUCE = 0,
    CZ_CAL_ALL_GATHER = 1,
    CZ_CAL_REDUCE_SCATTER = 2,
    CZ_CAL_ALL_TO_ALL = 3
} cz_cal_op;
typedef struct cz_cal_gemm {
    int64_t m, n, k;
    int batch;
    cz_gemm_prec prec;
    double seconds;
} cz_cal_gemm;
typedef struct cz_cal_coll {
    cz_cal_op op;
    int ranks;
    int inter_node; /* 1: the group spanned nodes */
    double bytes;   /* each rank's buffer: the all-reduce's whole, the gather's or scatter's
                       slice, the all-to-all's largest per-rank send */
    double seconds;
} cz_cal_coll;
/* What one calibration file holds, read strictly (cz__calibration_load). */
typedef struct cz_calibration {
    int version;       /* 1 or 2 */
    char *source;      /* path it was read from */
    char sha256[65];   /* of its canonical JSON content, as the other inputs' hashes */
    char *device_name; /* "NVIDIA H200" */
    char *measured_at; /* UTC, ISO 8601 */
    size_t ngemm;
    cz_cal_gemm *gemm;
    double launch_s;          /* launch_overhead_s */
    double ns_iteration_s[2]; /* ns_iteration_overhead_s by cz_gemm_prec (bf16, fp32) */
    size_t ncoll;
    cz_cal_coll *coll; /* version 2 only: ordered by (op, inter_node, ranks, bytes) */
} cz_calibration;
/* Reads and checks a calibration file: every key, type, range and the consistency of each
 * GEMM's tflops with its seconds; errors name the file, the JSON path and what was expected. */
int cz__calibration_load(cz_calibration **out, const char *path, cz_error *err);
/* The same from JSON text (name is used in messages). */
int cz__calibration_parse(cz_calibration **out, const char *text, size_t len, const char *name,
                          cz_error *err);
void cz__calibration_free(cz_calibration *cal);
/* "all_reduce", "all_gather", "reduce_scatter", "all_to_all"; NULL outside the enum. */
const char *cz__cal_op_name(cz_cal_op op);

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
    int ep, etp; /* expert model- and expert tensor-parallel sizes ("ep", "etp"; absent: 1 and
                    tp, Megatron-Core's defaults). 0 in a cluster built in memory by a caller
                    that predates them reads as those defaults (cz_cluster_ep, cz_cluster_etp) */
    cz_device device;
    cz_links links;
    int64_t bucket_size;  /* 0 = Megatron default max(4e7, 1e6*dp) */
    int64_t bucket_align; /* default 64 */
    /* The calibration whose measurements device.costs holds (cz_cluster_calibrate), owned;
     * NULL when none was given. Plans record its identity (cz_plan.calibration_*). */
    cz_calibration *calibration;
};

typedef struct cz_plan_param {
    int id; /* index in forward order */
    /* The model's parameter as the plan sees it: name, full shape, tp_dim, blocks and layer as
     * the model declares them, and kind as the plan's optimizer decided it (AdamW turns every
     * matrix elementwise). The plan owns def.name and def.block_sizes. The cost model and the
     * memory model read this directly. */
    cz_param_def def;
    int64_t local_shape[2]; /* per TP rank */
    int stage;              /* pipeline stage */
    int bucket;             /* bucket id */
    int64_t offset;         /* start of the local shard relative to its bucket's start */
    int64_t numel;          /* local elements */
    double cost;            /* total work for this parameter across its TP group, cost unit */
    int dp_owner;           /* -1 under the even strategy, and for the elementwise parameters
                               of a split-layout plan (cut between DP ranks:
                               cz_plan_param_fragmented); for an expert parameter, its owner in
                               the expert-data-parallel group (0 .. edp - 1) */
    /* Expert parallelism (a plan with expert groups, cz_plan_has_experts): 1 for a routed
     * expert's parameter, which lives in the expert buffer of EP rank ep_rank, is split over
     * ETP (local_shape) and owned within the expert-DP group; 0 (and ep_rank 0) for every
     * other parameter, and for all of them in a plan without expert groups. */
    int expert;
    int ep_rank;
    /* A fully sharded plan (cz_plan_is_fsdp): the GPU of the stage's shard group that owns and
     * updates the whole matrix, dp_rank * tp + tp_rank (dp_owner is then its DP rank), -1 for an
     * elementwise parameter (every GPU updates its own shard); and the rows of the TP-local
     * shard each DP rank holds, torch.chunk's ceil(local rows / dp) (cz__fsdp_rows: the last
     * ranks hold fewer or none). 0 and 0 in every other plan. */
    int owner;
    int64_t shard_rows;
} cz_plan_param;

typedef struct cz_plan_bucket {
    int id;
    int stage;
    int64_t offset;  /* start in the stage's whole local buffer */
    int64_t size;    /* including padding */
    int64_t *ranges; /* 2*dp values: [start, end) per DP rank, relative to bucket start */
    int elementwise; /* split layout: 1 for a bucket of the evenly sliced elementwise buffer
                        (ranges = even slices; its parameters have dp_owner -1), 0 for one of
                        the matrix buffer; always 0 in the unified layout */
    int expert;      /* 1: a bucket of the expert buffer of EP rank ep_rank (ranges: one per
                        expert-DP rank; offset within that buffer); 0 (and ep_rank 0): the
                        stage's dense buffer */
    int ep_rank;
    /* Read from a split folder's slice only (cz_plan.slice.on; unused otherwise, -1 where a
     * folder written before it lacks it): the bucket's place in the bucket-wise step's
     * all-gather order (cz_gather_key_raise over every rank's schedules, which a slice does not
     * hold), as an index of the slice's buckets. */
    int64_t gather_key;
} cz_plan_bucket;

/* One micro-group: tasks, each a matrix parameter or one block of it, hosted by one slot (TP
 * rank) or computed cooperatively by k aligned slots. The task order is the execution order of
 * every slot and a global one: each slot runs the tasks it takes part in in this order, so the
 * all-reduces of cooperative tasks that share slots are posted in the same order everywhere. */
typedef struct cz_plan_group {
    int id;
    int nslots; /* tp, or 1 under sc and when tp == 1 */
    int ntasks;
    int *task_param;   /* param ids, in execution order */
    int *task_slot;    /* the hosting slot; a cooperative task's first slot */
    int *task_block;   /* -1: the whole matrix (all its blocks); b >= 0: block b only */
    int *task_width;   /* 1: hosted on task_slot; k > 1: cooperative on slots task_slot ..
                          task_slot + k - 1 (task_slot % k == 0, k divides nslots) */
    int *task_panels;  /* a cooperative task's Gram row panels, 1 .. min(CZ_COOP_MAX_PANELS,
                          a), as the planner chose them (cz__coop_best_panels); 1 for a hosted
                          task. NULL, or a value <= 0, reads as 1 (cz_group_task_panels) */
    double *task_cost; /* the load the task puts on each slot it occupies (cost unit) */
    double *load;      /* nslots values: summed task cost per slot */
} cz_plan_group;

/* The micro-groups of one DP rank's TP group (plan->schedules), or of one expert rank's ETP
 * group (plan->expert_schedules: dp_rank is the expert-DP rank, ep_rank the EP rank). */
typedef struct cz_rank_schedule {
    int stage;
    int dp_rank;
    int ngroups;
    cz_plan_group *groups;
    int ep_rank;
} cz_rank_schedule;

typedef struct cz_plan_metrics {
    double *dp_load;          /* pp*dp: summed cost owned by each DP rank */
    double dp_imbalance;      /* max/mean of dp_load (per stage, worst stage) */
    double *gpu_load;         /* pp*dp*tp: optimizer work per GPU under the TP schedule */
    double *rank_makespan;    /* pp*dp: sum over groups of the largest slot load, plus the
                                 elementwise share of one TP rank */
    double tp_makespan;       /* max of rank_makespan */
    double tp_imbalance;      /* max/mean of gpu_load */
    double total_cost;        /* sum of all parameter costs */
    double max_task_cost;     /* largest single task (matrix cost, or elementwise cost / tp) */
    double lower_bound;       /* the atomic lower bound (planner/lib/lower_bound.c): the
                                 largest of the largest task, each stage's load over its GPUs,
                                 each EP group's over its GPUs and two pigeonhole terms; a bound
                                 on plans that keep matrices whole and hosted (the plan file's
                                 "lower_bound", in every version) */
    double average_load;      /* total_cost / (dp*tp*pp) */
    double split_lower_bound; /* the bound under the plan's task freedom (block tasks, the
                                 cooperative widths its settings allow; tp_tasks.c,
                                 cz__task_lower_bound); equals lower_bound without that freedom */
    double *memory;           /* pp*dp*tp: optimizer-state bytes per GPU */
    double predicted_step_s;  /* compute makespan converted to seconds on the cluster's device */
    /* A plan with expert groups: per expert rank (stage-major, cz_plan_expert_rank) the summed
     * cost of the expert parameters it owns and its ETP group's makespan (the sum over its
     * micro-groups of the largest slot load, plus its elementwise share of one ETP rank);
     * expert_imbalance is max/mean of expert_load over a stage's expert ranks (the worst
     * stage). A GPU runs its DP rank's schedule and then its expert rank's: tp_makespan is the
     * largest sum of the two over GPUs. NULL / 0 without expert groups. */
    double *expert_load;
    double *expert_rank_makespan;
    double expert_imbalance;
} cz_plan_metrics;

/* The TP tasks of a plan's matrix parameters and their cost under each width, built from the
 * cluster by cz__plan_init (memory only: not in plan files, empty in a plan read from one).
 * Parameter i's tasks are first[i] .. first[i + 1] - 1: its blocks under settings.split_blocks,
 * else the whole matrix (block -1). Task t costs cost[t * nwidths + w] on each slot it occupies
 * under width widths[w]; widths[0] is 1 (hosted) and a width the task cannot take is INFINITY. */
#define CZ_MAX_WIDTHS 16
typedef struct cz_task_table {
    int nwidths;
    int widths[CZ_MAX_WIDTHS];
    size_t ntasks;
    int *first; /* nparams + 1 */
    int *block; /* ntasks */
    double *cost;
    int *panels;       /* like cost, or NULL (all 1): the Gram panel count a cooperative width's
                          cost is for (cz__coop_best_panels), which the scheduler records */
    double *dp_weight; /* nparams or NULL: the DP load of each parameter when alpha balances the
                          slot time its tasks need at the split lower bound (cz__task_weigh);
                          NULL: the cost unit as usual */
    int dp_water;      /* with dp_weight: 1 places each bucket's cuts by water-filling where that
                          reaches the least largest load, 0 by the greedy fill (dp_partition.c) */
    int dp_fill;       /* 1: alpha deals each stage by the slot-fill partition (dp_fill.c) */
    double *dp_base;   /* pp * dp * tp or NULL: under the joint strategy, each GPU's makespan
                          on the side not dealt again, which the other side's fill starts
                          from (dp_partition.c) */
    int dp_side;       /* with dp_base: 1 cz__dp_partition deals the dense buffers only, 2 the
                          expert buffers only */
} cz_task_table;

/* Frees the table's arrays and zeroes it (objects_free.c, as the other release functions). */
void cz__task_table_free(cz_task_table *tt);

/* Which rank's part of a plan a slice holds (cz_plan.slice); all 0 in a whole plan. */
typedef struct cz_plan_slice {
    int on;
    int world_rank, stage, dp_rank, ep_rank, edp_rank;
    int *global_ids; /* per parameter of the slice, its id in the whole plan (ascending) */
} cz_plan_slice;

struct cz_plan {
    char *generator;         /* "canzona" */
    char *generator_version; /* CZ_VERSION */
    char *model_name, *model_sha256;
    char *cluster_name, *cluster_sha256;
    /* The calibration the plan's costs were made with ($.inputs.calibration, written only when
     * one was given, so that other plans stay byte for byte what they were): its device name,
     * when it was measured and its content hash; all NULL without one. */
    char *calibration_device, *calibration_measured_at, *calibration_sha256;
    /* The plan's own copy of settings.ns_coeffs (which points to it), canonical
     * (cz__ns_coeffs_format); NULL for jordan, the default, which files do not record. */
    char *ns_coeffs;
    /* $.content_sha256 as read from a file ("" when the file had none, or the plan was built
     * in memory), and whether the file's content matched it: 1 yes, -1 no, 0 not checked. */
    char content_sha256[65];
    int content_hash_ok;
    /* The schema version of the file it was read from (1: canzona.plan/1, 2: canzona.plan/2);
     * 0 for a plan built in memory. validate compares it with the plan's tasks. */
    int schema_version;
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
    cz_task_table tasks;
    /* Expert groups (Megatron-Core's expert parallelism, docs/PLANNER.md): EP, ETP and the
     * expert-DP size edp = tp * dp / (etp * ep) when the plan gives routed experts buffers of
     * their own (EP > 1 or ETP != TP, and the model has experts); all 0 otherwise. The expert
     * schedules are one per expert rank, pp * ep * edp in the order of cz_plan_expert_rank. */
    int ep, etp, edp;
    size_t nexpert_schedules;
    cz_rank_schedule *expert_schedules;
    /* A plan read from a split plan folder for one rank (cz__plan_read_slice): on = 1, and the
     * plan holds only that rank's part: the parameters of its stage's dense buffer and of its EP
     * rank's expert buffer (ids renumbered 0 .. nparams - 1 in forward order), those buffers'
     * buckets (renumbered likewise), its DP rank's schedule (schedules[0]) and its expert rank's
     * (expert_schedules[0]); no metrics. content_sha256 is the whole plan's. */
    cz_plan_slice slice;
};

/* Whether the plan has expert groups (buffers of their own for the routed experts). */
static inline int cz_plan_has_experts(const cz_plan *plan)
{
    return plan->ep > 0 && plan->etp > 0 && plan->edp > 0;
}

/* Expert ranks per stage (ep * edp), 0 without expert groups. */
static inline int cz_plan_expert_ranks(const cz_plan *plan)
{
    return cz_plan_has_experts(plan) ? plan->ep * plan->edp : 0;
}

/* The index of expert rank (stage, EP rank e, expert-DP rank d) in per-expert-rank arrays:
 * stage-major, then d, then e, so that expert rank x of a stage holds the stage's GPUs
 * x * etp .. x * etp + etp - 1 (Megatron-Core's rank order: ETP fastest, then EP, then
 * expert-DP), as DP rank r holds GPUs r * tp .. r * tp + tp - 1. */
static inline size_t cz_plan_expert_rank(const cz_plan *plan, int stage, int e, int d)
{
    return ((size_t)stage * (size_t)plan->edp + (size_t)d) * (size_t)plan->ep + (size_t)e;
}

/* The expert rank (an index as above) and ETP rank of GPU g (in the per-GPU order). */
static inline size_t cz_plan_gpu_expert_rank(const cz_plan *plan, size_t g, int *etp_rank)
{
    size_t per_stage = (size_t)plan->dp * (size_t)plan->tp, stage = g / per_stage;
    size_t local = g % per_stage;
    if (etp_rank)
        *etp_rank = (int)(local % (size_t)plan->etp);
    return stage * (size_t)plan->ep * (size_t)plan->edp + local / (size_t)plan->etp;
}

/* The size of the tensor-parallel group that splits parameter p: ETP for an expert of a plan
 * with expert groups, TP otherwise. */
static inline int cz_plan_param_tp(const cz_plan *plan, const cz_plan_param *p)
{
    return p->expert && plan->etp > 0 ? plan->etp : plan->tp;
}

/* Whether parameter p is updated in pieces, each DP rank the part of it in its range (ZeRO-1),
 * instead of whole by one owner: every parameter under the even strategy, and the elementwise
 * parameters of a split-layout plan (they live in the evenly sliced buffer). */
static inline int cz_plan_param_fragmented(const cz_plan *plan, const cz_plan_param *p)
{
    return plan->settings.dp == CZ_DP_EVEN || (plan->settings.layout != CZ_LAYOUT_UNIFIED &&
                                               p->def.kind == CZ_KIND_ELEMENTWISE && !p->expert);
}

/* Whether the plan is fully sharded (settings.layout fsdp, docs/PLANNER.md "Fully sharded"):
 * no buckets, one schedule per stage over the GPUs of cz_plan_fsdp_slots. */
static inline int cz_plan_is_fsdp(const cz_plan *plan)
{
    return plan->settings.layout == CZ_LAYOUT_FSDP;
}

/* HSDP (settings.replicate R > 1): the DP ranks are R replicas of S = dp / R shard ranks, DP
 * rank d = replica * S + shard rank (the replicate mesh dimension outermost, as torch's
 * init_device_mesh((R, S)) lays it out); FSDP2 shards every parameter over S. R = 1: plain
 * FSDP, S = dp. The reader and the planner keep dp a multiple of R. */
static inline int cz_plan_fsdp_replicas(const cz_plan *plan)
{
    return plan->settings.replicate > 1 ? plan->settings.replicate : 1;
}

static inline int cz_plan_fsdp_shard(const cz_plan *plan)
{
    return plan->dp / cz_plan_fsdp_replicas(plan);
}

/* The slots a fully sharded stage's matrices are scheduled over, each a GPU: one replica's
 * shard group (S * tp GPUs, every replica running the same schedule) when the replicas compute
 * redundantly, all dp * tp GPUs of the stage when each matrix is updated once. */
static inline int cz_plan_fsdp_slots(const cz_plan *plan)
{
    int partitioned =
        cz_plan_fsdp_replicas(plan) > 1 && plan->settings.hsdp == CZ_HSDP_PARTITIONED;
    return (partitioned ? plan->dp : cz_plan_fsdp_shard(plan)) * plan->tp;
}

/* ---- FSDP2's dim-0 sharding (fsdp_shards.c) ----
 * fully_shard splits each (TP-local) parameter along dim 0 with torch.chunk: every DP rank gets
 * ceil(rows / dp) rows, the last ranks fewer, and ranks past the rows none (7 rows over 4 ranks:
 * 2, 2, 2, 1; 5 rows: 2, 2, 1, 0; 2 rows over 4: 1, 1, 0, 0). */
/* The chunk size, ceil(rows / dp); 0 for rows or dp below 1. */
int64_t cz__fsdp_chunk_rows(int64_t rows, int dp);
/* The rows DP rank r holds: min(chunk, rows - r * chunk), never below 0. */
int64_t cz__fsdp_rows(int64_t rows, int dp, int r);
/* Whether every DP rank holds the same rows (rows a multiple of dp): FSDP2 then pads nothing. */
int cz__fsdp_even(int64_t rows, int dp);

/* a + b and a * b clamped to the int64 range. The simulator and the structural check run on a
 * plan as read, before anything has checked that its offsets fit its buckets, so their sums
 * and byte counts saturate instead of overflowing (the reader's CZ_PLAN_MAX_ELEMENTS makes
 * that rare; these make it safe): a position past every bucket still compares as such. */
static inline int64_t cz__i64_sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

static inline int64_t cz__i64_sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return (a > 0) == (b > 0) ? INT64_MAX : INT64_MIN;
    return r;
}

/* Where parameter p's elements end in its bucket, offset + numel saturated at INT64_MAX: the
 * reader takes each up to INT64_MAX (validate reports a numel that disagrees with the local
 * shape), so the consumers of a plan as read compare ends without overflowing. */
static inline int64_t cz_plan_param_end(const cz_plan_param *p)
{
    return cz__i64_sat_add(p->offset, p->numel);
}

/* How many DP ranks partition bucket k (the length of its ranges, in [start, end) pairs): the
 * DP size, or the expert-DP size for a bucket of an expert buffer. */
static inline int cz_plan_bucket_nranks(const cz_plan *plan, const cz_plan_bucket *k)
{
    return k->expert ? plan->edp : plan->dp;
}

/* A task's block, width and per-slot cost; a group built without the split-task arrays (by a
 * caller that predates them) holds whole matrices hosted at their parameter's cost. */
static inline int cz_group_task_block(const cz_plan_group *g, int t)
{
    return g->task_block ? g->task_block[t] : -1;
}
static inline int cz_group_task_width(const cz_plan_group *g, int t)
{
    return g->task_width ? g->task_width[t] : 1;
}
/* One panel, the whole Gram at once, is how a plan that records no count ran. */
static inline int cz_group_task_panels(const cz_plan_group *g, int t)
{
    return g->task_panels && g->task_panels[t] > 0 ? g->task_panels[t] : 1;
}

/* The schedule of DP rank dp_rank of stage `stage`, or of expert rank (stage, EP rank e,
 * expert-DP rank d); NULL when the plan has none (outside the grid, or a slice of another
 * rank). The executor reads its rank's schedules through these, so that a slice and a whole
 * plan read alike. */
static inline const cz_rank_schedule *cz_plan_rank_schedule(const cz_plan *plan, int stage,
                                                            int dp_rank)
{
    if (plan->slice.on)
        return plan->nschedules == 1 && plan->slice.stage == stage && plan->slice.dp_rank == dp_rank
                   ? &plan->schedules[0]
                   : NULL;
    size_t k = (size_t)stage * (size_t)plan->dp + (size_t)dp_rank;
    return stage >= 0 && dp_rank >= 0 && dp_rank < plan->dp && k < plan->nschedules
               ? &plan->schedules[k]
               : NULL;
}
static inline const cz_rank_schedule *cz_plan_expert_schedule(const cz_plan *plan, int stage, int e,
                                                              int d)
{
    if (plan->slice.on)
        return plan->nexpert_schedules == 1 && plan->slice.stage == stage &&
                       plan->slice.ep_rank == e && plan->slice.edp_rank == d
                   ? &plan->expert_schedules[0]
                   : NULL;
    if (!cz_plan_has_experts(plan) || stage < 0 || e < 0 || e >= plan->ep || d < 0 ||
        d >= plan->edp)
        return NULL;
    size_t x = cz_plan_expert_rank(plan, stage, e, d);
    return x < plan->nexpert_schedules ? &plan->expert_schedules[x] : NULL;
}

/* Whether the plan has any block or cooperative task (schema canzona.plan/2; plan_io.c). */
bool cz__plan_has_split_tasks(const cz_plan *plan);
/* The schema the plan's content needs (plan_io.c): "canzona.plan/3" with expert groups,
 * "canzona.plan/2" with a block or cooperative task, "canzona.plan/1" otherwise. */
const char *cz__plan_schema_needed(const cz_plan *plan);
/* CZ_OK when a plan read from path says the schema its content needs (one built in memory
 * always); otherwise an error naming the file, $.schema, what it says and what was expected.
 * canzona validate reports the same as its plan.schema rule; the executor refuses it. */
int cz__plan_check_schema(const cz_plan *plan, const char *path, cz_error *err);

/* Release functions for the parts of a plan (objects_free.c; cz_plan_free in canzona.h frees
 * the whole). Each accepts a partially built object. */
/* Frees the metrics arrays only. */
void cz__plan_metrics_free(cz_plan_metrics *m);
/* Frees the schedules only, the expert schedules too (sets nschedules and nexpert_schedules
 * to 0). */
void cz__plan_schedules_free(cz_plan *plan);
/* Frees a rank schedule's groups (rs itself is the caller's). */
void cz__rank_schedule_free_groups(cz_rank_schedule *rs);

/* The region of the full (unsharded) matrix d that a task of block `block` covers: the whole
 * matrix for -1, else block b's rows (block_dim 0) or columns (block_dim 1). */
static inline void cz_task_region(const cz_param_def *d, int block, int64_t *r0, int64_t *c0,
                                  int64_t *rows, int64_t *cols)
{
    *r0 = 0, *c0 = 0;
    *rows = d->shape[0];
    *cols = d->ndim == 1 ? 1 : d->shape[1];
    if (block < 0 || block >= d->nblocks || !d->block_sizes)
        return;
    /* Saturating: a plan file's sizes are only checked to add up to the shape by the
     * structural check, and the library's readers of a plan run before it (simulate, render). */
    int64_t off = 0;
    for (int b = 0; b < block; b++)
        off = d->block_sizes[b] > INT64_MAX - off ? INT64_MAX : off + d->block_sizes[b];
    if (d->block_dim == 0)
        *r0 = off, *rows = d->block_sizes[block];
    else
        *c0 = off, *cols = d->block_sizes[block];
}

/* Index ranges (along the TP dimension) that TP rank r of tp holds of a parameter, in storage
 * order: one range for a plain split, one per block when the blocks split the TP dimension
 * (Megatron cuts each block). Returns the number of ranges written to lo/hi (at most max).
 * Replicated, or tp 1: the whole of dimension 0 (shard_ranges.c). */
int cz__shard_ranges(const cz_plan_param *p, int tp, int r, int64_t *lo, int64_t *hi, int max);

/* The bucket-wise step's all-gather order (executor/src/core/bucket_step.c) rests on one key
 * per bucket: its own index, raised to the readiness of every micro-group, of any rank, that
 * has a task of one of its parameters (a group's readiness: the highest bucket index among
 * its tasks). key[] starts at each bucket's index; this raises it for one group whose tasks'
 * buckets are bucket[0 .. n). The executor applies it to a whole plan's schedules and
 * `canzona plan --split` to the plan it cuts, so that a slice's keys are the whole plan's. */
static inline void cz_gather_key_raise(int64_t *key, const int64_t *bucket, int n)
{
    int64_t ready = -1;
    for (int t = 0; t < n; t++)
        ready = bucket[t] > ready ? bucket[t] : ready;
    for (int t = 0; t < n; t++)
        key[bucket[t]] = ready > key[bucket[t]] ? ready : key[bucket[t]];
}

/* ---- per-head matrices (heads.c) ---- */
/* Whether d's heads are what Muon orthogonalizes: d declares heads and the optimizer is Muon
 * (SOAP and Shampoo precondition the declared blocks; docs/FORMATS.md, "heads"). */
static inline bool cz_param_per_head(const cz_param_def *d, bool muon)
{
    return muon && d->head_size > 0 && d->ndim == 2;
}

/* The independent matrices ("units") that Muon orthogonalizes inside the task of block `block`
 * of d (-1: the whole matrix): its heads when per_head, else the declared blocks of a whole
 * matrix, else the task's region alone. Counted without a list, so a matrix of any number of
 * heads needs no per-head memory. */
static inline int64_t cz_task_units(const cz_param_def *d, int block, bool per_head)
{
    int64_t r0, c0, rows, cols;
    cz_task_region(d, block, &r0, &c0, &rows, &cols);
    if (per_head && d->head_size > 0)
        return (d->head_dim == 0 ? rows : cols) / d->head_size;
    return block < 0 && d->nblocks > 0 && d->block_sizes ? d->nblocks : 1;
}

/* Unit j (below cz_task_units) of that task, as a region of the full matrix. */
static inline void cz_task_unit(const cz_param_def *d, int block, bool per_head, int64_t j,
                                int64_t *r0, int64_t *c0, int64_t *rows, int64_t *cols)
{
    cz_task_region(d, block, r0, c0, rows, cols);
    if (per_head && d->head_size > 0) {
        if (d->head_dim == 0)
            *r0 += j * d->head_size, *rows = d->head_size;
        else
            *c0 += j * d->head_size, *cols = d->head_size;
    } else if (block < 0 && d->nblocks > 0 && d->block_sizes) {
        cz_task_region(d, (int)j, r0, c0, rows, cols);
    }
}

/* Why d's heads are malformed, or cut by a TP split `tp` ways (1: only the shape), in buf
 * ("'NAME': ...", a sentence a user can act on), or NULL when they are fine or d has none:
 * the size must divide shape[dim], every declared block (heads lie inside blocks, along the
 * blocks' dimension), and, split along the TP dimension, every TP rank's share of each block,
 * so that a TP rank holds whole heads. The model loader, the planner, the structural check
 * and the executor share it. */
const char *cz__heads_problem(const cz_param_def *d, int tp, char *buf, size_t cap);

/* Whether a task of block `block` of d may be cooperative over k slots: it is one matrix (a
 * block, or a matrix without blocks, and no heads), 2-D, and its long side gives every member a
 * row or column.
 * The planner's task table and validate's check of a forced width share this rule. */
static inline bool cz_task_coop_fits(const cz_param_def *d, int block, int k)
{
    int64_t r0, c0, rows, cols;
    cz_task_region(d, block, &r0, &c0, &rows, &cols);
    /* A per-head matrix's task is many matrices, which one cooperative Newton-Schulz is not. */
    return (block >= 0 || d->nblocks <= 0) && d->ndim == 2 && d->head_size <= 0 &&
           (rows > cols ? rows : cols) >= k;
}

/* Whether a task of block `block` of d over k slots of a TP group of `tp` ranks is TP-local:
 * d is per-head with its heads along the TP dimension (so every TP rank holds whole heads of
 * each block: cz__heads_problem), the task is one region whose TP shares are rectangles (a
 * block, or a matrix without blocks), and it spans the whole group, member j being TP rank j,
 * which computes the heads of its own share with no exchange. A per-head matrix never has a
 * cooperative task (cz_task_coop_fits), so on it a width above 1 means exactly this. */
static inline bool cz_task_local_fits(const cz_param_def *d, int block, int k, int tp)
{
    return k > 1 && k == tp && d->head_size > 0 && d->ndim == 2 && d->tp_dim >= 0 &&
           d->tp_dim == d->head_dim && (block >= 0 || d->nblocks <= 0);
}

/* Whether a task of width k on d is a TP-local one (else hosted or cooperative). */
static inline bool cz_task_is_local(const cz_param_def *d, int k)
{
    return k > 1 && d->head_size > 0;
}

/* Member j's part [*start, *start + *n) of a cooperative task's long side of length len, split
 * k ways. The long side is the rows when rows > cols, else the columns: Muon works on the
 * short x long orientation. */
static inline void cz_coop_slice(int64_t len, int k, int j, int64_t *start, int64_t *n)
{
    *start = (int64_t)j * len / k;
    *n = (int64_t)(j + 1) * len / k - *start;
}

/* Bytes one cooperative Newton-Schulz iteration all-reduces among its members for a short side
 * of a: the upper triangle of the a x a fp32 Gram, a (a + 1) / 2 values (the executor's packed
 * layout, executor/src/optim/ns_coop.h). The cost model and the simulator both charge it. */
static inline double cz_coop_gram_bytes(double a)
{
    return 2.0 * a * (a + 1.0);
}

/* Row panels of a cooperative task's Gram. Every Newton-Schulz iteration the executor computes
 * the a x a Gram's upper triangle in `panels` row panels and all-reduces each panel while it
 * computes the next ones and, in the A(AX) form, the rows of A X that the panels already summed
 * give (cz__muon_coop_run): the all-reduce hides behind that computation instead of stalling every
 * member. More panels hide more of it but pay one all-reduce latency each, which nothing hides
 * on a small matrix over many ranks, so no count of a alone suits every task: the planner
 * chooses it per task (cz__coop_best_panels, the least cost) and records it in the plan
 * (cz_group_task_panels, "panels" in a task object), so that the cost model, the simulator,
 * validate and every member agree. A count is 1 .. min(CZ_COOP_MAX_PANELS, a). */
#define CZ_COOP_MAX_PANELS 8

/* Packed elements of the Gram's upper triangle before row i: i a - i (i - 1) / 2. */
static inline int64_t cz_coop_packed_before(int64_t a, int64_t i)
{
    return i * a - i * (i - 1) / 2;
}

/* First row of panel p of `panels` (p = panels gives a). Panels hold about equal shares of the
 * packed triangle (equal all-reduce bytes): panel p starts at the smallest row whose packed
 * offset reaches p / panels of the a (a + 1) / 2 elements, so early panels have fewer, longer
 * rows. */
static inline int64_t cz_coop_panel_row(int64_t a, int panels, int p)
{
    if (p <= 0)
        return 0;
    if (p >= panels)
        return a;
    int64_t want = (a * (a + 1) / 2 * p + panels - 1) / panels, lo = 0, hi = a;
    while (lo < hi) { /* smallest i in [0, a] with packed_before(i) >= want */
        int64_t mid = lo + (hi - lo) / 2;
        if (cz_coop_packed_before(a, mid) >= want)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* ---- model limits (model_io.c), shared by the importer so that it writes only what loads ---- */
/* Parameters after repeat expansion: bounds the expansion of a hostile file. 2^18 = 262,144 is
 * over five times the largest public MoE (Kimi K2, about 47,000 after expansion) and keeps the
 * worst accepted file to about a second of loading; at 2^22 a 829-byte config made the importer
 * work for 5 s (22 s under the sanitizers, a fuzzer time-out). */
#define CZ_MODEL_MAX_PARAMS ((size_t)1 << 18)
/* Parameters a model's "params" array expands to, counted before anything is built (repeat
 * blocks multiplied out, malformed entries as one); saturates at CZ_MODEL_MAX_PARAMS + 1. */
size_t cz__model_count_params_json(const struct json_t *params);
/* Elements of the whole model, 2^50 (about 1.1e15): far above any model trained today, and
 * low enough that every offset, padded bucket and sum of them stays far below 2^63 (at most
 * 2^18 parameters, each padded by less than 2^31 elements). */
#define CZ_MODEL_MAX_ELEMENTS ((int64_t)1 << 50)
/* The largest element count, offset, size or dimension a plan file may hold, each and (for a
 * whole plan) summed over its parameters and over its buckets: 2^52, four times a model's limit,
 * so that a plan of any model the loader accepts fits with its bucket padding. The reader
 * refuses more, naming the field: the consumers of a plan as read (inspect, simulate and its
 * Megatron baselines, render) sum and multiply these values, and values near INT64_MAX
 * overflowed there one site after another (the plan fuzzer's finds). */
#define CZ_PLAN_MAX_ELEMENTS ((int64_t)1 << 52)
/* Longest parameter name in bytes: names become file names (NAME.npy) in the executor's
 * --dump-dir and --init-dir, and file names stop at 255 bytes. */
#define CZ_PARAM_NAME_MAX 200
/* Validates and expands a parsed model description exactly as cz_model_load does a file's
 * (messages name path, which need not be a file); sha may be NULL (then computed from root). */
int cz__model_from_json(cz_model **out, const struct json_t *root, const char *path,
                        const char *sha, cz_error *err);

/* ---- Megatron-Core's rules on a model (megatron_rules.c) ---- */
/* Greatest common divisor of two non-negative integers (gcd(a, 0) = a). */
int64_t cz__gcd64(int64_t a, int64_t b);
/* Megatron's padded vocabulary: vocab rounded up to a multiple of divisible_by * tp. */
int64_t cz__megatron_padded_vocab(int64_t vocab, int64_t divisible_by, int64_t tp);
/* Megatron-Core's attention rules: num_attention_heads and num_query_groups each a multiple of
 * tp. where names the input in the message (a file), the keys name the two counts in it. */
int cz__megatron_check_heads(const char *where, const char *heads_key, int64_t heads,
                             const char *groups_key, int64_t groups, int64_t tp, cz_error *err);
/* Checks a model's megatron record against a TP size: the attention rules, and that the
 * recorded padded vocabulary is what Megatron pads to at this TP. cluster names the cluster
 * file in messages (NULL: none). CZ_OK when the model records nothing. */
int cz__model_check_megatron(const cz_model *m, int tp, const char *cluster, cz_error *err);

/* ---- Megatron-Core's expert parallelism (megatron_experts.c) ---- */
static inline int cz_cluster_ep(const cz_cluster *c)
{
    return c->ep > 0 ? c->ep : 1;
}
static inline int cz_cluster_etp(const cz_cluster *c)
{
    return c->etp > 0 ? c->etp : c->tp;
}
/* Whether parameter `name` is one of a MoE layer's routed experts (shared experts are not):
 * 1 with *layer_len the length of the name's prefix that identifies its layer (through
 * "mlp.experts.") and *index its expert number (-1 when the name gives none), else 0. */
int cz__expert_of_name(const char *name, size_t *layer_len, long *index);
/* The name of item i of a caller's list. */
typedef const char *(*cz_name_at)(const void *ctx, size_t i);
/* Per parameter of a list of n names: experts[i] the number of experts of its MoE layer and
 * index[i] its expert number, or 0 and -1 for a dense parameter. A layer's experts are the
 * parameters whose names share the layer prefix; their numbers must cover 0 .. E - 1
 * (CZ_EINVALID naming where, the layer and the missing number). */
int cz__experts_scan(size_t n, cz_name_at name_at, const void *ctx, int *experts, int *index,
                     const char *where, cz_error *err);
int cz__model_experts(const cz_model *m, int *experts, int *index, cz_error *err);
/* Megatron-Core's rule on the expert grid: ETP x EP x PP divides the world (TP x DP x PP), so
 * that within a stage ETP x EP x expert-DP covers the ranks of TP x DP. where names the input. */
int cz__megatron_check_expert_grid(const char *where, int tp, int dp, int pp, int ep, int etp,
                                   cz_error *err);
/* The cluster's expert grid, and the model against it: the number of experts of every MoE layer
 * a multiple of EP, EP > 1 only for a model with experts, no expert bias with ETP > 1. */
int cz__model_check_experts(const cz_model *m, const cz_cluster *c, cz_error *err);
/* A rank layout: the dense grid TP x DP x PP and the expert grid ETP x EP x expert-DP x PP over
 * the same world, each axis varying faster than the next (Megatron-Core's order
 * "tp-cp-ep-dp-pp", context parallelism 1). */
typedef struct cz_grid {
    int tp, dp, pp, ep, etp;
} cz_grid;
static inline int cz_grid_edp(const cz_grid *g)
{
    int64_t e = (int64_t)g->etp * g->ep;
    return e > 0 && ((int64_t)g->tp * g->dp) % e == 0 ? (int)((int64_t)g->tp * g->dp / e) : 0;
}
typedef enum cz_group_kind {
    CZ_GROUP_TP = 0,
    CZ_GROUP_DP = 1,
    CZ_GROUP_PP = 2,
    CZ_GROUP_ETP = 3, /* expert tensor-parallel */
    CZ_GROUP_EP = 4,  /* expert model-parallel */
    CZ_GROUP_EDP = 5  /* expert data-parallel: the ranks an expert buffer is reduced over */
} cz_group_kind;
/* The global ranks of the group of `kind` that holds `rank`, in group order, into out (room for
 * the group's size): what Megatron-Core's RankGenerator.get_ranks gives. Returns the size, 0 for
 * a rank outside the world or a grid whose ETP x EP does not divide TP x DP. */
int cz__megatron_group(const cz_grid *g, cz_group_kind kind, int rank, int *out);

/* ---- cluster_io.c ---- */
/* Sizes from the command line that override a cluster file's; 0 keeps the file's value. */
typedef struct cz_cluster_sizes {
    int ep, etp;         /* expert model- and expert tensor-parallel sizes */
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
int cz__cluster_load_sized(cz_cluster **out, const char *path, const cz_cluster_sizes *sizes,
                           cz_error *err);

/* The message every layer gives for a parameter over CZ_MAX_BLOCKS (name, nblocks, limit). */
#define CZ_BLOCKS_LIMIT_FMT "'%s' has %d blocks; canzona supports at most %d per parameter"

/* ---- plan content hash (plan_io.c) ---- */
/* SHA-256 of a plan file's JSON value without its "content_sha256" member: compact, keys
 * sorted, reals with 17 significant digits (docs/FORMATS.md). plan is not modified. */
int cz__plan_json_content_hash(const struct json_t *plan, char out[65], cz_error *err);
/* CZ_OK when the plan was read from a file whose recorded content hash matches its content;
 * otherwise an error telling the user to re-run `canzona plan`. For consumers that have no
 * model to check the plan against (the executor). */
int cz__plan_check_content_hash(const cz_plan *plan, const char *path, cz_error *err);

/* ---- split plan folders (plan_slice_write.c, plan_slice_read.c; docs/FORMATS.md section 9) ----
 * `canzona plan --split DIR` writes the plan cut into the pieces one rank reads; the executor
 * given DIR reads only its rank's. */
#define CZ_PLAN_HEADER_SCHEMA "canzona.plan-header/1"
/* One record of a stage's schedule index: "%019zu %019zu\n", the line's offset and length. */
#define CZ_SLICE_INDEX_RECORD 40
/* Cuts the plan file plan_path (as canzona plan wrote it: its content must match its hash) into
 * the folder dir (created when missing; each file written atomically). */
int cz__plan_split_write(const char *plan_path, const char *dir, cz_error *err);
/* Reads world rank world_rank's part of the split plan folder dir: one parse of the header, of
 * the rank's slice file and of its two schedule lines, each checked against its own content
 * hash and the header's plan hash; errors name the file, the JSON path and the rank. */
int cz__plan_read_slice(cz_plan **out, const char *dir, int world_rank, cz_error *err);
/* Whether path names a folder (a split plan) rather than a plan file. */
bool cz__plan_path_is_folder(const char *path);

/* ---- the structural check (plan_structure.c) ---- */
/* Where violations go: validate lists all of them; the executor refuses on the first. */
typedef struct cz_plan_checks {
    struct json_t *out; /* array of {"code", "path", "message"} */
    int checks;         /* checks performed */
    int oom;
    int unsafe;  /* a structural violation makes index-based recomputation unsafe to run */
    int foreign; /* parameters differ from the model's (validate only) */
    char path[256];
    /* 1: the caller checks, or runs, plans with expert groups (validate). 0 — a zeroed struct,
     * as every caller that predates them has (the executor today) — makes a plan with expert
     * groups a violation of its own (topology.expert_groups), the first one reported, so that
     * such a caller refuses the plan with a message instead of reading its expert buffers'
     * ranges as if they had one pair per DP rank. */
    int expert_groups;
} cz_plan_checks;
void cz__plan_checks_at(cz_plan_checks *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void cz__plan_checks_fail(cz_plan_checks *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Every rule a plan must satisfy that needs no model or cluster: ids, local shapes and element
 * counts, blocks, bucket layout rules (contiguity, alignment, reverse fill order, no overlap),
 * DP ranges, atomic ownership, schedule membership and slot loads. Shared by `canzona
 * validate` and the executor's plan check, so that the executor refuses every plan validate
 * refuses for a structural reason. Safe on any plan the reader accepts. */
void cz__plan_check_structure(cz_plan_checks *c, const cz_plan *plan);
/* The structural rules of a fully sharded plan (fsdp_structure.c), which
 * cz__plan_check_structure runs in place of the bucket rules: parameter ids, local shapes,
 * blocks and heads as in every plan; no buckets; each parameter's shard rows by torch.chunk's
 * rule; each matrix owned by one GPU of its stage's shard group and hosted there in exactly one
 * group of the stage's one schedule; elementwise parameters unowned; slot loads. */
void cz__fsdp_check_structure(cz_plan_checks *c, const cz_plan *plan);
/* Whether two stored costs agree to validate's relative tolerance (1e-9); NaN never does. */
int cz__close_rel(double a, double b);

/* ---- the plan against its model (plan_model_check.c) ----
 * What the structural check cannot see: whether the plan's parameters are the model's. Shared
 * by `canzona validate` (every difference, its own codes) and canzona-bench (the first). */
enum {
    CZ_PARAM_DIFF_NAME = 1u << 0,
    CZ_PARAM_DIFF_SHAPE = 1u << 1, /* ndim or either side of the full shape */
    CZ_PARAM_DIFF_TP_DIM = 1u << 2,
    CZ_PARAM_DIFF_KIND = 1u << 3,   /* the optimizer: matrix or elementwise */
    CZ_PARAM_DIFF_BLOCKS = 1u << 4, /* their number, dimension or sizes */
    CZ_PARAM_DIFF_HEADS = 1u << 5,  /* per-head or not, the heads' dimension or size */
};
/* The CZ_PARAM_DIFF_* bits in which plan parameter q differs from model parameter d; 0 when it
 * is d (a missing name differs from every name). */
unsigned cz__plan_param_diff(const cz_plan_param *q, const cz_param_def *d);
/* A parameter's heads for a message, in buf: "none" or "dim D size S". Returns buf. */
const char *cz__heads_text(char *buf, size_t cap, const cz_param_def *d);
/* A parameter's blocks for a message, in buf (cap bytes, truncated to fit): "none", or
 * "dim D [s0, s1, ...]". Returns buf. */
const char *cz__blocks_text(char *buf, size_t cap, int nblocks, int dim, const int64_t *sizes);
/* CZ_OK when the plan is the model's: the same parameters in the same order (name, shape, TP
 * dimension, optimizer, blocks), the same dtype, and the model's SHA-256 where the plan records
 * it; else CZ_EMISMATCH naming the first difference (with its JSON path for a parameter's
 * field). For a consumer that runs the plan and refuses a foreign one at once. */
int cz__plan_check_model(const cz_plan *plan, const cz_model *model, cz_error *err);

/* ---- files (file_io.c) ----
 * Reading: only regular files and pipes (FIFOs, `<(cmd)`) are read, with a size cap that is
 * checked before reading (regular files) or while reading (pipes), so that a device such as
 * /dev/zero or a huge file fails at once with a message instead of after gigabytes.
 *
 * Writing (cz__file_write): one policy for every output of the CLI and the libraries:
 *  - "-" is standard output;
 *  - a new path or an existing regular file is replaced atomically (a temporary file in the
 *    same folder, synced, then renamed over it), keeping the existing file's permission bits;
 *    the signals that end a process are held back while the temporary file exists;
 *  - a symbolic link is followed: its final target is written (atomically, in the target's own
 *    folder when the target is a regular file or does not exist), the link itself stays; a
 *    link the kernel's fs.protected_symlinks would not follow (another user's, in a sticky
 *    world-writable folder) is refused;
 *  - a character device (/dev/null, a terminal) or a FIFO is written in place, never replaced;
 *  - a read-only regular file, a folder, a socket or a block device is refused with the reason.
 */
/* Reads the whole of path into a malloc'ed buffer with a NUL after the last byte (*len does not
 * count it). Files larger than max bytes are refused (CZ_EINVALID) before they are read; so are
 * folders and devices (CZ_EIO, "not a regular file"). */
int cz__file_read_all(const char *path, size_t max, char **out, size_t *len, cz_error *err);

/* Writes len bytes to path under the policy above. Messages name path and the reason. */
int cz__file_write(const char *path, const void *data, size_t len, cz_error *err);

/* Refuses (CZ_EINVALID, naming both paths) an output that is the same file as one of the n
 * inputs: same device and inode, so a second path, a hard link or a symbolic link to an input
 * is caught too. NULL entries and an output of "-" or one that does not exist yet pass. what
 * names the inputs in the message (e.g. "the model"), one per input. */
int cz__file_check_output(const char *output, const char *const *inputs, const char *const *what,
                          size_t n, cz_error *err);

#endif /* CZ_FORMAT_H */
