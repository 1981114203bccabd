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
#define CZ_PLAN_SCHEMA "canzona.plan/1"
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
} cz_settings;

#define CZ_SETTINGS_VERSION 1

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

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* CANZONA_H */
