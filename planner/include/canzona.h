/*
 * canzona.h — public interface of libcanzona, the Canzona planner library.
 *
 * The planner turns a model description and a cluster shape (JSON files, see schemas/) into a
 * plan: which data-parallel rank owns each parameter (alpha-balanced, atomic partitioning of the
 * gradient buckets) and which tensor-parallel rank hosts each matrix update inside which
 * micro-group. All functions return 0 on success or a negative CZ_E* code; on failure the
 * cz_error passed in holds a message a user can act on (file, JSON path, what was expected).
 *
 * Ownership: every object returned through an out-parameter belongs to the caller and is
 * released with the matching *_free function (which accepts NULL).
 *
 * The plan format's part (versions, errors, settings, the model, cluster and plan files), which
 * libcanzona-exec exports too, is canzona_format.h, included here; this header adds the
 * planner's own functions: planning, calibration and the analyses. *
 * Threads: the library keeps no mutable global state, so its functions may run on several
 * threads at once over distinct objects; an object passed as const (a model, cluster or plan
 * being planned, validated, inspected or simulated) may be read by several threads at once,
 * and one changed or freed must not be in use by another thread. A build's progress callback
 * runs on the thread that called cz_plan_build. The ILP solver (--solver ilp) calls GLPK,
 * which keeps its environment per thread when GLPK was built with thread-local storage (the
 * Debian package the project builds with is); the CPU time limits are the calling thread's.
 *
 * Options structs (cz_settings, cz_inspect_options, ...) start with their version: a library
 * accepts every version from 1 to its own, reading the fields an older version has and taking
 * the defaults for the fields added after it, and refuses (CZ_EUNSUPPORTED, naming both
 * versions) a version above its own or below 1 (a struct left zeroed).
 */
#ifndef CANZONA_H
#define CANZONA_H

#include "canzona_format.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The libraries are compiled with hidden visibility; the functions declared here are the ones
 * libcanzona exports (libcanzona-exec exports those of canzona_format.h and canzona_exec.h). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* Makes the cluster's device model the one a calibration file measured (canzona.calibration/1
 * or /2; docs/FORMATS.md section 8): the GEMM rates fitted to its GEMM table, its launch and
 * Newton-Schulz iteration costs and, from version 2, its collectives (docs/SIMULATOR.md, "The
 * device model"). Plans built on the cluster afterwards record the calibration's device, time
 * of measurement and hash. Errors name the file, the JSON path and what was expected. */
int cz_cluster_calibrate(cz_cluster *cluster, const char *calibration_path, cz_error *err);

/* Builds a plan for the model on the cluster. Deterministic for identical inputs. */
int cz_plan_build(cz_plan **out, const cz_model *model, const cz_cluster *cluster,
                  const cz_settings *settings, cz_error *err);

/* ---- analysis: what `canzona validate`, `inspect`, `diff`, `simulate`, `render` and
 * `import-hf` do, for programs. ---- */

/* Frees a string the library allocated (a report's JSON text, a rendering, an imported model
 * description). Accepts NULL. */
void cz_free(void *p);

/* A report: the JSON document that `canzona validate --json`, `inspect --json`, `diff --json`
 * and `simulate --json` print, with the keys listed in docs/ANALYSIS.md and docs/SIMULATOR.md. */
typedef struct cz_report cz_report;
/* The report as JSON text, keys in the documented order; indented by 2 spaces when indent is
 * non-zero, else on one line. *out is released with cz_free. */
int cz_report_json(const cz_report *report, int indent, char **out, cz_error *err);
/* A number (or boolean, as 0/1) of the report at path: object keys and array indices joined
 * by dots, as "checks", "summary.dp_imbalance" or "violations.0.message". CZ_EINVALID naming
 * the path when it does not lead to a number. */
int cz_report_number(const cz_report *report, const char *path, double *out, cz_error *err);
/* A string of the report at path (as cz_report_number), valid while the report lives; NULL
 * when the path does not lead to a string. */
const char *cz_report_string(const cz_report *report, const char *path);
void cz_report_free(cz_report *report);

/* Recomputes every invariant of the plan against the model and cluster it claims to be made
 * for (the violation codes are listed in docs/ANALYSIS.md, "What is checked"). The report is
 * {"valid": bool, "checks": n, "violations": [{"code", "path", "message"}]}: a plan that breaks
 * rules is a successful validation with "valid" false. Fails only when it cannot check
 * (missing arguments, out of memory). */
int cz_plan_validate(cz_report **out, const cz_plan *plan, const cz_model *model,
                     const cz_cluster *cluster, cz_error *err);

/* Every options struct below, like cz_settings, starts with its version: initialize it with its
 * *_init function or its *_INIT macro, then change fields, so that fields added later keep
 * their defaults. A function given a struct of an older version reads the fields that version
 * has and takes the defaults for the rest; one of a version above this library's (or one left
 * zeroed) it refuses with CZ_EUNSUPPORTED. */

/* Options of cz_plan_inspect. */
typedef struct cz_inspect_options {
    int version; /* CZ_INSPECT_OPTIONS_VERSION */
    int top_n;   /* busiest DP ranks listed with their largest parameters; default 3 */
    const cz_cluster *cluster; /* NULL, or the plan's cluster: adds the device memory headroom
                                  (its DP x TP x PP must be the plan's: CZ_EMISMATCH) */
} cz_inspect_options;
#define CZ_INSPECT_OPTIONS_VERSION 1
/* clang-format off */
#define CZ_INSPECT_OPTIONS_INIT {CZ_INSPECT_OPTIONS_VERSION, 3, NULL}
/* clang-format on */
void cz_inspect_options_init(cz_inspect_options *o);
/* A readable analysis of a plan from its stored metrics: topology, settings, per-rank and
 * per-GPU loads, imbalance figures, the top_n busiest ranks and their largest parameters,
 * micro-group statistics, the parameters that dominate the lower bound, and the busiest GPU's
 * memory ("memory_per_gpu"). opt may be NULL (defaults). */
int cz_plan_inspect(cz_report **out, const cz_plan *plan, const cz_inspect_options *opt,
                    cz_error *err);

/* Options of cz_plan_diff. */
typedef struct cz_diff_options {
    int version; /* CZ_DIFF_OPTIONS_VERSION */
    int force;   /* 1: compare plans of different models or topologies, matching parameters by
                    name (otherwise refused with CZ_EMISMATCH); default 0 */
    int limit;   /* moved parameters and makespan changes listed (all are counted); 0 = all;
                    default 20 */
} cz_diff_options;
#define CZ_DIFF_OPTIONS_VERSION 1
/* clang-format off */
#define CZ_DIFF_OPTIONS_INIT {CZ_DIFF_OPTIONS_VERSION, 0, 20}
/* clang-format on */
void cz_diff_options_init(cz_diff_options *o);
/* Compares plan b against plan a: settings, metric and per-rank deltas, the moved parameters
 * (largest first), each plan's busiest rank with what bounds its makespan and the parameters
 * whose part of it changed (largest effect first), and "identical". opt may be NULL. */
int cz_plan_diff(cz_report **out, const cz_plan *a, const cz_plan *b, const cz_diff_options *opt,
                 cz_error *err);

/* How an uneven reduce-scatter / all-gather over DP (slices of unequal length) is run:
 * ROOTED as a group of one rooted ring reduce (broadcast) per owner, whose busiest link carries
 * the bucket minus one slice; PADDED as an ordinary ring collective with every slice padded to
 * the largest, n-1 steps of the largest slice. Equal slices cost the same either way. */
typedef enum cz_sim_uneven { CZ_SIM_UNEVEN_ROOTED = 0, CZ_SIM_UNEVEN_PADDED = 1 } cz_sim_uneven;

/* Options of cz_plan_simulate. */
typedef struct cz_sim_options {
    int version;             /* CZ_SIM_OPTIONS_VERSION */
    cz_sim_uneven uneven;    /* default ROOTED */
    cz_muon_tp_mode muon_tp; /* under the sc TP strategy with Muon; default DUPLICATED */
    /* Version 2. */
    int overlap_param_gather; /* 1: Megatron's --overlap-param-gather: each bucket's parameter
                                 all-gather runs under the next forward pass, which needs the
                                 first layers' bucket first: only that one is exposed; default 0 */
    int overlap_grad_reduce;  /* 1: Megatron's --overlap-grad-reduce: each bucket's gradient
                                 reduce-scatter runs under the backward pass as soon as the bucket
                                 is full: only the last one filled is exposed; default 0 */
    int muon_ns_batch_size;   /* layer_sharded: same-shape matrices per batched Newton-Schulz on
                                 a home (Megatron's --muon-ns-batch-size); default 1 */
    int gtp;                  /* Megatron's GTP weight shards (gtp_remat) within the plan's TP
                                 group, which is then Megatron's GTP x TP domain; default 1 */
    /* Version 3: the training iteration around the step (docs/SIMULATOR.md, "The iteration"),
     * with and without the step overlapped with the backward and the next forward pass. */
    int iteration;            /* 1: simulate the iteration too (needs a cluster); default 0 */
    int seq_len;              /* tokens per sequence; default 4096 */
    int micro_batch_size;     /* sequences per micro-batch; default 1 */
    int micro_batches;        /* micro-batches per iteration (gradient accumulation); default 8 */
    double pass_efficiency;   /* the forward and backward passes' rate as a fraction of the
                                 device's bf16 GEMM rate (0 < e <= 1); default 0.6 */
    int gather_forward_order; /* with overlap, 1 (default): the DP channel runs ready
                                 reduce-scatters first, then ready all-gathers in the order the
                                 next forward needs them; 0: all in the order they become ready */
    /* Version 4. */
    int deferred_updates; /* with overlap, 1 (default, as the executor's default: its NaN/Inf
                             check on): the updates wait for every reduce-scatter and the
                             all-gathers for every update (the bucket-wise step without early
                             updates); 0: each micro-group starts once its buckets are reduced,
                             each bucket's all-gather once it is updated (early updates, which
                             need the check and clipping off) */
    /* Version 5. */
    int grad_reduce_in_fp32; /* a plan of a 16-bit dtype: 1 = its gradients reduce-scattered in
                                fp32 (the executor's cz_exec_config.grad_reduce_in_fp32,
                                Megatron's --grad-reduce-in-fp32); default 0: in the plan's
                                dtype, as the executor's default (docs/SIMULATOR.md, "What goes
                                on the wire") */
} cz_sim_options;
#define CZ_SIM_OPTIONS_VERSION 5
/* clang-format off */
#define CZ_SIM_OPTIONS_INIT {CZ_SIM_OPTIONS_VERSION, CZ_SIM_UNEVEN_ROOTED, CZ_MUON_TP_DUPLICATED, \
                             0, 0, 1, 1, 0, 4096, 1, 8, 0.6, 1, 1, 0}
/* clang-format on */
void cz_sim_options_init(cz_sim_options *o);

/* The simulated optimizer step of one plan. */
typedef struct cz_sim_result cz_sim_result;
/* Simulates one optimizer step of plan on cluster (the event model of docs/SIMULATOR.md). With
 * cluster NULL, task times are the plan's costs and communication is free. The plan's topology
 * must match the cluster's (CZ_EMISMATCH); the even partition is supported with the sc TP
 * strategy only (CZ_EUNSUPPORTED). opt may be NULL (defaults). */
int cz_plan_simulate(cz_sim_result **out, const cz_plan *plan, const cz_cluster *cluster,
                     const cz_sim_options *opt, cz_error *err);
/* The step's phases as a report: "step_s", "grad_sync_s", "frag_gather_s", "local_s",
 * "param_sync_s", "optimizer_s", "compute_s", "tp_comm_s", "comm_s", "exposed_comm_s",
 * "critical" {"stage", "dp_rank", "tp_rank"}, "in_seconds" (false: in the plan's cost unit)
 * "gpu_busy" (per GPU, [(stage * dp + dp_rank) * tp + tp_rank]), "wire" {"grad_dtype",
 * "grad_sync_bytes", "param_dtype", "param_sync_bytes", "tp_sync_bytes", "etp_sync_bytes"}
 * (the executor's DP exchanges: the most bytes one GPU posts per step; its micro-group
 * exchanges: the most one GPU sends, null where the executor runs no such program;
 * docs/SIMULATOR.md, "What goes on the wire"); simulated with
 * cz_sim_options.iteration, "iteration" with the keys of docs/SIMULATOR.md, "The iteration". */
int cz_sim_result_report(cz_report **out, const cz_sim_result *result, cz_error *err);
void cz_sim_result_free(cz_sim_result *result);

typedef enum cz_render_format { CZ_RENDER_SVG = 0, CZ_RENDER_HTML = 1 } cz_render_format;
/* Options of cz_plan_render. */
typedef struct cz_render_options {
    int version;               /* CZ_RENDER_OPTIONS_VERSION */
    cz_render_format format;   /* default SVG */
    int width;                 /* drawing width in pixels, 400 .. 20000; default 1200 */
    const cz_sim_options *sim; /* how the step is simulated with a cluster; NULL: defaults */
} cz_render_options;
#define CZ_RENDER_OPTIONS_VERSION 1
/* clang-format off */
#define CZ_RENDER_OPTIONS_INIT {CZ_RENDER_OPTIONS_VERSION, CZ_RENDER_SVG, 1200, NULL}
/* clang-format on */
void cz_render_options_init(cz_render_options *o);
/* Draws what bounds the plan's step as a self-contained SVG document (or an HTML page with the
 * SVG inline and tables of the settings, per-rank loads and the costliest parameters): per-GPU
 * load bars, with cluster (NULL allowed) the simulated step's phases, and the micro-group
 * pipeline of the DP rank that finishes last. *out is NUL-terminated text released with
 * cz_free. opt may be NULL (defaults). */
int cz_plan_render(char **out, const cz_plan *plan, const cz_cluster *cluster,
                   const cz_render_options *opt, cz_error *err);

/* Options of cz_model_import_hf. */
typedef struct cz_import_hf_options {
    int version;            /* CZ_IMPORT_HF_OPTIONS_VERSION */
    const char *name;       /* NULL: the config's _name_or_path basename (lowercased), else the
                               file's basename without .json and .config */
    cz_dtype dtype;         /* default bf16 */
    int tp_size;            /* the job's tensor-parallel size; default 1 */
    int vocab_divisible_by; /* Megatron's make_vocab_size_divisible_by; default 128 */
    int split_qkv;          /* 1 (default, Megatron's): QKV declared as blocks Q, K, V */
    int split_gate_up;      /* 1 (default): linear_fc1 declared as blocks gate, up; Megatron
                               orthogonalizes the fused matrix whole (0) */
    int ep_size;            /* the job's expert model-parallel size; default 1: a config whose
                               routed experts it does not divide is refused (version 2) */
    int per_head;           /* CZ_PER_HEAD_*: which attention projections get "heads" (per-head
                               Muon; version 3); default none */
} cz_import_hf_options;
/* Per-head Muon in imported models (docs/FORMATS.md, "Per-head matrices"). */
enum {
    CZ_PER_HEAD_NONE = 0, /* no heads */
    CZ_PER_HEAD_QKV = 1,  /* the Q, K and V projections: linear_qkv (in each of its blocks);
                             MLA's linear_q(_up)_proj and linear_kv_up_proj */
    CZ_PER_HEAD_QKVO = 2, /* those and the output projection linear_proj (its columns) */
};
#define CZ_IMPORT_HF_OPTIONS_VERSION 3
/* clang-format off */
#define CZ_IMPORT_HF_OPTIONS_INIT {CZ_IMPORT_HF_OPTIONS_VERSION, NULL, CZ_DTYPE_BF16, 1, 128, 1, 1, 1, CZ_PER_HEAD_NONE}
/* clang-format on */
void cz_import_hf_options_init(cz_import_hf_options *o);
/* Writes the canzona.model/1 description of a Hugging Face config.json (Megatron-Core
 * parameter names; docs/FORMATS.md) as the text `canzona import-hf` prints; *out is released
 * with cz_free. Supported model_type values: llama, mistral, qwen2, qwen3, qwen2_moe,
 * qwen3_moe, mixtral, deepseek_v3 and kimi_k2 (DeepSeek-V3's architecture: multi-head latent
 * attention, shared experts, leading dense layers). Errors name the file and the key: CZ_EIO,
 * CZ_EPARSE, CZ_EINVALID,
 * CZ_EUNSUPPORTED. opt may be NULL (defaults). */
int cz_model_import_hf(char **out, const char *config_path, const cz_import_hf_options *opt,
                       cz_error *err);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* CANZONA_H */
