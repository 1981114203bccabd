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
 */
#ifndef CANZONA_H
#define CANZONA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The libraries are compiled with hidden visibility; the functions declared here are the ones
 * libcanzona and libcanzona-exec export. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define CZ_VERSION "0.1.0"
#define CZ_MODEL_SCHEMA "canzona.model/1"
#define CZ_CLUSTER_SCHEMA "canzona.cluster/1"
/* Plans whose tasks are all whole matrices hosted by one TP rank are written as version 1, as
 * before; a plan with a block or cooperative task (--split-blocks, --coop) as version 2, which
 * earlier builds refuse by its schema. This build reads both. */
#define CZ_PLAN_SCHEMA "canzona.plan/1"
#define CZ_PLAN_SCHEMA_SPLIT "canzona.plan/2"
/* Most blocks (fused parts) one parameter may declare: the model loader, the planner, validate
 * and the executor all hold parameters to it. */
#define CZ_MAX_BLOCKS 64

/* Error codes. */
enum {
    CZ_OK = 0,
    CZ_EIO = -1,          /* a file could not be read or written */
    CZ_EPARSE = -2,       /* not valid JSON */
    CZ_EINVALID = -3,     /* valid JSON that breaks the format's rules */
    CZ_ENOMEM = -4,       /* out of memory */
    CZ_EMISMATCH = -5,    /* inputs that do not belong together (plan vs model, ranks) */
    CZ_EUNSUPPORTED = -6, /* a schema version or feature this build does not support */
    CZ_EINTERNAL = -7,    /* an invariant of our own broke: a bug, please report it */
    CZ_ETIMEOUT = -8      /* a solver hit its time limit */
};

/* An error report. Functions fill it on failure; a NULL pointer is allowed and ignored. */
typedef struct cz_error {
    int code;
    char message[1024];
} cz_error;

/* Clears an error report. */
void cz_error_clear(cz_error *err);

typedef enum cz_dtype { CZ_DTYPE_BF16 = 0, CZ_DTYPE_FP16 = 1, CZ_DTYPE_FP32 = 2 } cz_dtype;

/* How a parameter is optimized: matrix optimizer (Muon/SOAP/Shampoo) on whole matrices, or
 * elementwise (AdamW) on shards. */
typedef enum cz_param_kind { CZ_KIND_MATRIX = 0, CZ_KIND_ELEMENTWISE = 1 } cz_param_kind;

typedef enum cz_optimizer {
    CZ_OPTIM_MUON = 0,
    CZ_OPTIM_SOAP = 1,
    CZ_OPTIM_SHAMPOO = 2,
    CZ_OPTIM_ADAMW = 3
} cz_optimizer;

/* The unit in which loads are counted: elements, floating-point operations, or seconds on the
 * cluster's device. */
typedef enum cz_cost_unit { CZ_UNIT_NUMEL = 0, CZ_UNIT_FLOPS = 1, CZ_UNIT_TIME = 2 } cz_cost_unit;

typedef enum cz_dp_strategy {
    CZ_DP_EVEN = 0,      /* ZeRO-1 equal slices; fragments parameters (baseline, not run) */
    CZ_DP_ANCHORED = 1,  /* owner = rank whose even slice holds the parameter's start */
    CZ_DP_LAYERWISE = 2, /* whole parameters dealt to ranks by size; all-reduce instead */
    CZ_DP_ALPHA = 3,     /* alpha-balanced static partitioning (Canzona) */
    CZ_DP_TPAWARE = 4    /* alpha start, cut points refined to minimize the per-GPU makespan */
} cz_dp_strategy;

typedef enum cz_tp_strategy {
    CZ_TP_SC = 0,      /* synchronous compute: every TP rank updates every matrix */
    CZ_TP_NONE = 1,    /* original order, chunks of TP tasks */
    CZ_TP_SINGLE = 2,  /* cost-sorted, chunks of TP tasks */
    CZ_TP_SLOT = 3,    /* streaming least-loaded slot, close group at capacity */
    CZ_TP_ROLLBACK = 4 /* greedy rollback (Canzona) */
} cz_tp_strategy;

/* Order in which the layerwise baseline deals parameters. */
typedef enum cz_layerwise_order {
    CZ_LAYERWISE_PINGPONG = 0, /* ranks 0..R-1, R-1..0, ... in forward order (not Megatron's) */
    CZ_LAYERWISE_LPT = 1,      /* largest first to the least-loaded rank */
    CZ_LAYERWISE_MEGATRON = 2, /* Megatron-LM's first released layer-wise rule (default): per
                                  optimizer group in order, stably sorted by TP-local element
                                  count ascending, dealt 0..R-1, R-1..0, ...; experts dealt
                                  separately */
    CZ_LAYERWISE_MEGATRON_AUG26 = 3 /* Megatron-LM's current rule (Aug 2026): Muon parameters only,
                                       in backprop order, in buckets with a soft minimum size,
                                       longest Newton-Schulz cost first to the least-loaded rank
                                       under a 1.3x size cap; other parameters under ZeRO-1 */
} cz_layerwise_order;

typedef enum cz_solver { CZ_SOLVER_GREEDY = 0, CZ_SOLVER_ILP = 1 } cz_solver;

/* How a stage's gradient buffer is laid out. */
typedef enum cz_layout {
    CZ_LAYOUT_UNIFIED = 0, /* every parameter in one buffer, every bucket partitioned by --dp */
    CZ_LAYOUT_SPLIT = 1    /* the paper's reference code: matrix parameters in a buffer of their
                              own, partitioned by --dp; elementwise parameters in an evenly
                              sliced ZeRO-1 buffer, a parameter possibly cut between DP ranks */
} cz_layout;

/* Progress of a long-running solve (the ILP solvers), reported at most once per second once
 * the solve has run for a second. Values are in the plan's cost unit; NAN when not known yet. */
typedef struct cz_progress {
    const char *phase; /* "dp-ilp" or "microgroups-ilp" */
    double elapsed_s;  /* since this solve started */
    double best_bound; /* best proven bound on the objective */
    double incumbent;  /* objective of the best solution found so far */
    double gap;        /* relative gap between the two */
} cz_progress;
/* Receives the progress reports of one cz_plan_build call, on the calling thread, with the
 * payload given beside it in cz_settings. */
typedef void (*cz_progress_fn)(const cz_progress *progress, void *payload);

/* Planning settings. Initialize with cz_settings_init() and then change fields, so that fields
 * added in later versions keep their defaults. */
typedef struct cz_settings {
    int version;            /* CZ_SETTINGS_VERSION */
    cz_optimizer optimizer; /* default Muon */
    cz_cost_unit unit;      /* default time */
    cz_dp_strategy dp;      /* default alpha */
    double alpha;           /* default 1.0; 0 = even communication, 1 = global balance */
    int alpha_numel_loads;  /* 1 = count alpha's running loads in elements (reference code) */
    cz_layerwise_order layerwise_order;
    cz_tp_strategy tp;           /* default rollback */
    double capacity;             /* micro-group capacity C in the cost unit; 0 = automatic */
    cz_solver solver;            /* default greedy */
    double time_limit_s;         /* ILP time limit; default 60 */
    uint64_t seed;               /* tie-breaking seed, recorded in the plan; default 0 */
    int ns_steps;                /* Newton-Schulz iterations (Muon); default 5 */
    int max_precond_dim;         /* SOAP/Shampoo: sides larger than this get no factor; 10000 */
    int precondition_frequency;  /* SOAP/Shampoo: eigen refresh every N steps; default 10 */
    double tpaware_time_limit_s; /* limit of the --dp tpaware search in CPU seconds of the
                                  * calling thread; default 2; not recorded in plan files
                                  * (the plan records the cuts) */
    cz_progress_fn progress;     /* called during this build's long solves; NULL (default):
                                  * none. The library never prints; the CLI shows a line on
                                  * stderr. Not recorded in the plan (cleared in its copy). */
    void *progress_payload;      /* passed to progress as is */
    cz_layout layout;            /* default unified */
    int split_blocks;            /* 1: every block of a blocked matrix (fused Q/K/V, gate/up) is
                                  * its own TP task; 0 (default): whole matrices, as the paper */
    int coop;                    /* cooperative Newton-Schulz (Muon, rollback): 0 (default) off,
                                  * CZ_COOP_AUTO the cost model chooses per task, k > 1 every
                                  * task that can be is cooperative over k slots (k divides tp) */
} cz_settings;

#define CZ_COOP_AUTO (-1)

#define CZ_SETTINGS_VERSION 1
/* The defaults as an initializer: cz_settings s = CZ_SETTINGS_INIT; (the same values as
 * cz_settings_init). */
/* clang-format off */
#define CZ_SETTINGS_INIT                                                     \
    {CZ_SETTINGS_VERSION, CZ_OPTIM_MUON, CZ_UNIT_TIME, CZ_DP_ALPHA, 1.0, 0,   \
     CZ_LAYERWISE_MEGATRON, CZ_TP_ROLLBACK, 0.0, CZ_SOLVER_GREEDY, 60.0, 0, 5, \
     10000, 10, 2.0, NULL, NULL, CZ_LAYOUT_UNIFIED, 0, 0}
/* clang-format on */

/* Fills *s with the defaults. */
void cz_settings_init(cz_settings *s);

/* Names used on the command line and in plan files; NULL for an out-of-range value. */
const char *cz_dtype_name(cz_dtype v);
const char *cz_optimizer_name(cz_optimizer v);
const char *cz_unit_name(cz_cost_unit v);
const char *cz_dp_strategy_name(cz_dp_strategy v);
const char *cz_tp_strategy_name(cz_tp_strategy v);
const char *cz_layerwise_order_name(cz_layerwise_order v);
const char *cz_solver_name(cz_solver v);
const char *cz_layout_name(cz_layout v);
/* Parse a name; return 0 and set *out, or CZ_EINVALID when the name is unknown. */
int cz_dtype_parse(const char *name, cz_dtype *out);
int cz_optimizer_parse(const char *name, cz_optimizer *out);
int cz_unit_parse(const char *name, cz_cost_unit *out);
int cz_dp_strategy_parse(const char *name, cz_dp_strategy *out);
int cz_tp_strategy_parse(const char *name, cz_tp_strategy *out);
int cz_layerwise_order_parse(const char *name, cz_layerwise_order *out);
int cz_solver_parse(const char *name, cz_solver *out);
int cz_layout_parse(const char *name, cz_layout *out);
/* The --coop setting: "off" (0), "auto" (CZ_COOP_AUTO) or a width k from 2 to CZ_COOP_MAX.
 * cz_coop_name writes the name into buf (at least 16 bytes) and returns buf. */
#define CZ_COOP_MAX 1024
int cz_coop_parse(const char *name, int *out);
const char *cz_coop_name(int v, char *buf);

typedef struct cz_model cz_model;
typedef struct cz_cluster cz_cluster;
typedef struct cz_plan cz_plan;

/* Loads and validates a model description (canzona.model/1). */
int cz_model_load(cz_model **out, const char *path, cz_error *err);
void cz_model_free(cz_model *model);

/* Loads and validates a cluster shape (canzona.cluster/1); checks dp*tp*pp == gpus. */
int cz_cluster_load(cz_cluster **out, const char *path, cz_error *err);
void cz_cluster_free(cz_cluster *cluster);

/* Builds a plan for the model on the cluster. Deterministic for identical inputs. */
int cz_plan_build(cz_plan **out, const cz_model *model, const cz_cluster *cluster,
                  const cz_settings *settings, cz_error *err);

/* Writes the plan as JSON. A regular file (or a new path) is written atomically (temporary
 * file in the same folder, then rename), so that an existing file is either replaced whole or
 * left untouched; a symbolic link is followed; a character device or FIFO is written in place;
 * a read-only file is refused; "-" is standard output. */
int cz_plan_write(const cz_plan *plan, const char *path, cz_error *err);

/* Reads and validates a plan file (canzona.plan/1). */
int cz_plan_read(cz_plan **out, const char *path, cz_error *err);
void cz_plan_free(cz_plan *plan);

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
 * their defaults. A function given a struct of another version (or one left zeroed) refuses it
 * with CZ_EUNSUPPORTED. */

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
} cz_sim_options;
#define CZ_SIM_OPTIONS_VERSION 1
/* clang-format off */
#define CZ_SIM_OPTIONS_INIT {CZ_SIM_OPTIONS_VERSION, CZ_SIM_UNEVEN_ROOTED, CZ_MUON_TP_DUPLICATED}
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
 * and "gpu_busy" (per GPU, [(stage * dp + dp_rank) * tp + tp_rank]). */
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
} cz_import_hf_options;
#define CZ_IMPORT_HF_OPTIONS_VERSION 1
/* clang-format off */
#define CZ_IMPORT_HF_OPTIONS_INIT {CZ_IMPORT_HF_OPTIONS_VERSION, NULL, CZ_DTYPE_BF16, 1, 128, 1, 1}
/* clang-format on */
void cz_import_hf_options_init(cz_import_hf_options *o);
/* Writes the canzona.model/1 description of a Hugging Face config.json (Megatron-Core
 * parameter names; docs/FORMATS.md) as the text `canzona import-hf` prints; *out is released
 * with cz_free. Supported model_type values: llama, mistral, qwen2, qwen3, qwen2_moe,
 * qwen3_moe, mixtral. Errors name the file and the key: CZ_EIO, CZ_EPARSE, CZ_EINVALID,
 * CZ_EUNSUPPORTED. opt may be NULL (defaults). */
int cz_model_import_hf(char **out, const char *config_path, const cz_import_hf_options *opt,
                       cz_error *err);
/* Loads a model description from JSON text (such as cz_model_import_hf's) as cz_model_load
 * loads a file; name is used in messages in place of a file name. */
int cz_model_parse(cz_model **out, const char *json_text, const char *name, cz_error *err);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* CANZONA_H */
