/*
 * canzona_exec.h — public interface of libcanzona-exec, the Canzona plan executor.
 *
 * A training job creates one executor per process from a plan file (written by `canzona plan`),
 * binds its flat parameter and gradient buffers (or each parameter by name), and calls
 * cz_executor_step() once per optimizer step, after the backward pass has filled the gradients.
 * The step runs the plan: uneven reduce-scatter of the gradients over the data-parallel (DP)
 * group following the plan's bucket ranges, AdamW on the owned elementwise shards, the
 * asynchronous micro-group pipeline over the tensor-parallel (TP) group for the owned matrix
 * parameters (the plan's matrix optimizer, Muon, SOAP or Shampoo, on each task the plan
 * assigns a TP rank: a whole matrix, one of its blocks, or with Muon a slice of a matrix that
 * several TP ranks orthogonalize together), and the uneven all-gather of the updated
 * parameters over DP. See docs/EXECUTOR.md for the buffer layouts.
 *
 * Process grid: world rank = dp_rank * tp + tp_rank (TP innermost, as Megatron lays it out).
 *
 * Errors: every function returning int returns 0 (CZ_OK) or a negative CZ_E* code from
 * canzona_format.h and fills the cz_error passed in (NULL allowed) with a message a user can act
 * on. Collective functions (create, step) agree on failure across all ranks: when one rank fails,
 * every rank returns an error, so no rank is left waiting in a collective.
 *
 * Ownership: the executor returned by cz_executor_create belongs to the caller and is released
 * with cz_executor_free. Bound buffers stay owned by the caller and must outlive the executor
 * (or the next bind). Strings in cz_exec_config are only read during create.
 *
 * Threads: one executor is driven by one thread at a time (any thread, one call after another:
 * the calls on one executor are not synchronized, and cz_executor_step_async/wait must not be
 * split across threads that run at once). The caller's callbacks (comm "callbacks") are called
 * on the thread that called into the executor. Distinct executors in one process hold no state
 * in common but the process-wide pieces below, so with comm "self" or "callbacks" they may be
 * driven by different threads at the same time (the GPU and NCCL libraries are loaded once,
 * under a lock). With comm "mpi", and "nccl" over its MPI control plane, every MPI wait goes
 * through the MPI watchdog, whose registry of channels and whose "a stall was diagnosed" state
 * are process-wide and not thread-safe, as MPI's progress is process-wide: every such executor
 * of a process must be driven from one thread at a time (MPI_THREAD_FUNNELED or SERIALIZED
 * use), and a stall reported by one leaves the others' MPI communicators unusable too.
 *
 * Version: this library shares the planner's: cz_version() (canzona_format.h, which both
 * libraries export) reports the version it was built as, CZ_VERSION_MAJOR/MINOR/PATCH the one a
 * program was compiled against; libcanzona and libcanzona-exec of one build report the same.
 *
 * This header includes canzona_format.h (the plan files, errors, settings: what both libraries
 * export), not the planner's canzona.h: a job sees exactly what libcanzona-exec exports.
 */
#ifndef CANZONA_EXEC_H
#define CANZONA_EXEC_H

#include "canzona_format.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The libraries are compiled with hidden visibility; the functions declared here are the ones
 * libcanzona-exec exports. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* Version 9: normuon (NorMuon's settings, cz_normuon_config). Version 8: grad_reduce_in_fp32 (bf16
 * jobs reduce-scatter bf16 gradients by default). Version 7: each optimizer's settings in a struct
 * of its own (muon, adamw, soap, shampoo, each with its version); version 6: lr = 0 means a rate of
 * 0 (CZ_EXEC_LR_DEFAULT is the default), and the caller's communication (callbacks). Every version
 * from 1 up is accepted: versions 1 to 6 (one flat struct, whose fields each version appended,
 * docs/EXECUTOR.md lists them) are read in their own layout and converted, the fields a version
 * lacks taking their defaults, and a version 1 to 5 config's lr = 0 meaning the default as it did
 * then. */
#define CZ_EXEC_CONFIG_VERSION 9

/* cz_exec_config.lr's default: the matrix optimizer's own default rate (a negative value no
 * rate can take). */
#define CZ_EXEC_LR_DEFAULT (-1.0f)

/* ---- the caller's communication (comm "callbacks") ----
 *
 * A job that owns its process groups (torch.distributed, a launcher of its own) hands the
 * executor a few host collectives as callbacks instead of MPI communicators. The control plane
 * (the plan fingerprints, the agreement on every failure, the gradient norm's and the NaN
 * check's sums, the NCCL unique id under comm "nccl") is built on all_reduce over the world
 * group; with comm "callbacks" the data plane is too:
 *   - the uneven reduce-scatter of a bucket's gradients: one all_reduce (sum) of the bucket
 *     on the DP group, of which each rank keeps its range (twice the traffic of a true
 *     reduce-scatter; the host libraries this backend is for, gloo among them, have no uneven
 *     reduce-scatter), in CZ_COMM_BF16 for a bf16 job (each pairwise sum rounded to bf16, as
 *     torch's gloo and NCCL add bf16) unless grad_reduce_in_fp32, else CZ_COMM_FP32;
 *   - the uneven all-gather of the updated parameters: one broadcast per DP rank of its range,
 *     CZ_COMM_BF16 for a bf16 job;
 *   - the micro-group gathers and scatters: one exchange (a batch of sends and receives, each
 *     rank's matching its peers') per micro-group and direction on the TP group;
 *   - the cooperative Newton-Schulz sums: all_reduce on sub-groups of the TP group that the
 *     executor forms itself (their sums travel through exchange on the TP group).
 * Every callback is blocking: it returns once its buffers may be read or reused. Every rank of
 * a group calls a group's callbacks in the same order (as NCCL requires of its calls). Each
 * returns 0 on success and anything else on failure; the executor then reports CZ_EIO naming
 * the operation, with last_error's text when given, and every rank returns an error (a failure
 * in a collective the other ranks are in must end in the caller's library, e.g. its timeout:
 * the executor cannot unblock a callback). Buffers are host memory (the cpu backend's); ranks
 * are ranks of the group named. */
#define CZ_COMM_CALLBACKS_VERSION 1

/* Element types and reductions of the callbacks. */
typedef enum cz_comm_dtype {
    CZ_COMM_FP32 = 0,
    CZ_COMM_BF16 = 1,
    CZ_COMM_FP64 = 2,
    CZ_COMM_INT64 = 3,
} cz_comm_dtype;
typedef enum cz_comm_op { CZ_COMM_SUM = 0, CZ_COMM_MIN = 1 } cz_comm_op;
/* The groups a callback runs on: the world (every rank, ranks as world_rank), and the job's DP
 * and TP groups when has_groups is 1 (ranks as dp_rank and tp_rank). */
typedef enum cz_comm_group { CZ_COMM_WORLD = 0, CZ_COMM_DP = 1, CZ_COMM_TP = 2 } cz_comm_group;

/* One transfer of an exchange: count elements of dtype at buf sent to (send = 1) or received
 * from (send = 0) the group's rank peer. */
typedef struct cz_comm_transfer {
    void *buf;
    size_t count;
    cz_comm_dtype dtype;
    int peer;
    int send;
} cz_comm_transfer;

typedef struct cz_comm_callbacks {
    int version; /* CZ_COMM_CALLBACKS_VERSION */
    void *user;  /* passed to every callback */
    int world_size, world_rank;
    /* 1: the callbacks also run on CZ_COMM_DP and CZ_COMM_TP, the job's groups (each rank's DP
     * group joins the ranks of its tp_rank, ordered by dp_rank; TP the ranks of its dp_rank);
     * 0: the executor forms DP and TP over the world's exchange and all_reduce. */
    int has_groups;
    /* has_groups: this rank's groups' sizes and its ranks in them (create compares them with
     * the plan's dp and tp and with its grid position). */
    int dp_size, dp_rank, tp_size, tp_rank;
    /* In-place element-wise reduction of count elements over the group's ranks. */
    int (*all_reduce)(void *user, cz_comm_group group, void *buf, size_t count, cz_comm_dtype dtype,
                      cz_comm_op op);
    /* count elements from the group's rank root to every rank's buf. */
    int (*broadcast)(void *user, cz_comm_group group, void *buf, size_t count, cz_comm_dtype dtype,
                     int root);
    /* n transfers posted together and completed before it returns (at most one send to and
     * one receive from each peer; none to itself). */
    int (*exchange)(void *user, cz_comm_group group, const cz_comm_transfer *t, int n);
    /* Optional (NULL): the text of the last failure, for the executor's message. */
    const char *(*last_error)(void *user);
} cz_comm_callbacks;

/* How Muon scales the orthogonalized update of an m x n block (rows x cols as stored). */
typedef enum cz_muon_scaling {
    /* scale_coeff * sqrt(max(m, n)) (0.2 by default): the update's RMS matches AdamW's, so
     * AdamW-sized learning rates apply (Moonlight; torch.optim.Muon "match_rms_adamw"). */
    CZ_MUON_SCALE_RMS = 0,
    /* sqrt(max(1, m / n)): Keller Jordan's original Muon and torch.optim.Muon's default. */
    CZ_MUON_SCALE_SHAPE = 1,
} cz_muon_scaling;

/* Where the buffers a job binds live. */
typedef enum cz_exec_memory {
    CZ_EXEC_MEMORY_HOST = 0,   /* host memory (the cpu backend) */
    CZ_EXEC_MEMORY_DEVICE = 1, /* the backend's device memory (GPU backends) */
} cz_exec_memory;

/* Shampoo's grafting: the diagonal method whose per-block step size Shampoo's direction takes
 * (Distributed Shampoo's grafting_config). */
typedef enum cz_shampoo_grafting {
    CZ_GRAFT_NONE = 0,
    CZ_GRAFT_ADAGRAD = 1, /* default */
    CZ_GRAFT_RMSPROP = 2,
    CZ_GRAFT_ADAM = 3,
} cz_shampoo_grafting;

/* Muon's settings (cz_exec_config.muon). */
typedef struct cz_muon_config {
    int version;             /* CZ_MUON_CONFIG_VERSION */
    float momentum;          /* mu, default 0.95 */
    int nesterov;            /* 1 (default, as every public Muon) = input g + mu*buf; 0 = buf */
    int ns_steps;            /* Newton-Schulz iterations, default 5 */
    const char *ns_coeffs;   /* Newton-Schulz coefficients: "jordan" (default: 3.4445,
                              * -4.7750, 2.0315), "cubic", "polar_express" (a table of 5), or
                              * rows "a,b,c" separated by ';', one per iteration; a table of
                              * n > 1 rows needs ns_steps = n (cz_exec_ns_coeffs_steps) */
    float ns_eps;            /* added to the Frobenius norm, default 1e-7 */
    float scale_coeff;       /* rms scaling: scale_coeff*sqrt(max(m, n)), default 0.2 */
    cz_muon_scaling scaling; /* default CZ_MUON_SCALE_RMS */
} cz_muon_config;
#define CZ_MUON_CONFIG_VERSION 1
#define CZ_MUON_CONFIG_INIT                                                                        \
    {CZ_MUON_CONFIG_VERSION, 0.95f, 1, 5, "jordan", 1e-7f, 0.2f, CZ_MUON_SCALE_RMS}

/* AdamW's settings, the elementwise parameters' (cz_exec_config.adamw). */
typedef struct cz_adamw_config {
    int version;        /* CZ_ADAMW_CONFIG_VERSION */
    float lr;           /* default 3e-4 */
    float beta1;        /* default 0.9 */
    float beta2;        /* default 0.95 */
    float eps;          /* default 1e-8 */
    float weight_decay; /* decoupled, default 0.01 */
} cz_adamw_config;
#define CZ_ADAMW_CONFIG_VERSION 1
#define CZ_ADAMW_CONFIG_INIT {CZ_ADAMW_CONFIG_VERSION, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.01f}

/* SOAP's settings (plans made with --optimizer soap; cz_exec_config.soap), the reference's
 * (Vyas et al., nikhilvyas/SOAP) semantics and defaults. cz_exec_config's lr (the default
 * 3e-3) and weight_decay are SOAP's; precondition_frequency and max_precond_dim are the
 * plan's. */
typedef struct cz_soap_config {
    int version;         /* CZ_SOAP_CONFIG_VERSION */
    float beta1;         /* Adam's first moment, default 0.95 */
    float beta2;         /* Adam's second moment, default 0.95 */
    float shampoo_beta;  /* Gram factor EMA; -1 (default) = beta2 */
    float eps;           /* default 1e-8 */
    int bias_correction; /* default 1 */
} cz_soap_config;
#define CZ_SOAP_CONFIG_VERSION 1
#define CZ_SOAP_CONFIG_INIT {CZ_SOAP_CONFIG_VERSION, 0.95f, 0.95f, -1.0f, 1e-8f, 1}

/* Shampoo's settings (plans made with --optimizer shampoo; cz_exec_config.shampoo), Distributed
 * Shampoo's semantics and defaults (docs/EXECUTOR.md, "Shampoo"). cz_exec_config's lr (the
 * default 0.01) and weight_decay (decoupled) are Shampoo's; the refresh interval is the plan's
 * precondition_frequency. */
typedef struct cz_shampoo_config {
    int version;                  /* CZ_SHAMPOO_CONFIG_VERSION */
    float beta1;                  /* filtered-gradient EMA, default 0.9 (0 = none) */
    float beta2;                  /* factor EMA, default 1.0 (a sum: AdaGrad-like) */
    float eps;                    /* added after the eigenvalue shift, default 1e-12 */
    float momentum;               /* default 0 */
    int nesterov;                 /* default 0 */
    int start_step;               /* first preconditioned step, whose inverse roots are computed
                                     then (and at every multiple of the frequency after it); -1
                                     (default) = the plan's precondition_frequency */
    int max_dim;                  /* blocks sides longer than this; 0 (default) = 1024 */
    int bias_correction;          /* of the filtered gradient and the factors, default 1 */
    cz_shampoo_grafting grafting; /* default CZ_GRAFT_ADAGRAD */
    float graft_beta2;            /* RMSprop/Adam grafting; -1 (default) = 0.99 / 0.999 */
    float graft_eps;              /* default 1e-10 */
} cz_shampoo_config;
#define CZ_SHAMPOO_CONFIG_VERSION 1
#define CZ_SHAMPOO_CONFIG_INIT                                                                     \
    {CZ_SHAMPOO_CONFIG_VERSION, 0.9f,  1.0f,  1e-12f, 0.0f, 0, -1, 0, 1,                           \
     CZ_GRAFT_ADAGRAD,          -1.0f, 1e-10f}

/* NorMuon (Dion's NorMuon, microsoft/dion dion/normuon.py; docs/EXECUTOR.md, "NorMuon"): after
 * Newton-Schulz, every unit Muon orthogonalizes (a matrix, a declared block, a head) keeps a
 * second-moment EMA v per line, v = beta2 v + (1 - beta2) mean(U^2) over the line, each line of
 * U is divided by sqrt(v) + eps, and U is rescaled to its Frobenius norm before; Muon's scale
 * and update follow. A line is a row of the unit as stored (Dion's, mean over dim -1) or a
 * column (mean over dim -2). */
typedef enum cz_normuon_mode {
    CZ_NORMUON_NONE = 0, /* plain Muon (default) */
    CZ_NORMUON_ROW = 1,  /* one v per row: Dion's definition */
    CZ_NORMUON_COL = 2,  /* one v per column: the same along the other dimension */
} cz_normuon_mode;

/* NorMuon's settings (cz_exec_config.normuon), read with a Muon plan only. */
typedef struct cz_normuon_config {
    int version;          /* CZ_NORMUON_CONFIG_VERSION */
    cz_normuon_mode mode; /* default CZ_NORMUON_NONE */
    float beta2;          /* the EMA's coefficient, in [0, 1); default 0.95 (Dion's) */
    float eps;            /* added to sqrt(v), > 0; default 1e-8 (Dion's) */
} cz_normuon_config;
#define CZ_NORMUON_CONFIG_VERSION 1
#define CZ_NORMUON_CONFIG_INIT {CZ_NORMUON_CONFIG_VERSION, CZ_NORMUON_NONE, 0.95f, 1e-8f}

/* Executor configuration. Initialize with cz_exec_config_init() (or CZ_EXEC_CONFIG_INIT) and
 * then change fields, so that fields added in later versions keep their defaults. Each
 * optimizer's struct inside carries its own version, which the executor checks as it checks
 * this one's (1 up to the library's own; the outer version fixes the layout). */
typedef struct cz_exec_config {
    int version; /* CZ_EXEC_CONFIG_VERSION */

    /* Compute backend: "cpu" (host memory, OpenBLAS, fp32 math), or "cuda" in a build with
     * CUDA (device memory, cuBLAS; needs memory = CZ_EXEC_MEMORY_DEVICE and the CUDA device
     * selected before create; see docs/EXECUTOR.md, GPU path). Default "cpu". */
    const char *backend;
    /* Communication backend: "mpi", "self" (one process, dp = tp = 1), "callbacks" (the
     * caller's: cz_comm_callbacks, field callbacks), or "nccl" (with the cuda backend, and MPI
     * initialized or callbacks given: its control plane; a build with NCCL). NULL (default)
     * picks "callbacks" when callbacks is set, else "mpi" when the library was built with MPI
     * and MPI is initialized, else "self". */
    const char *comm;

    /* This process's place in the grid; -1 (default) derives both from the rank in the world
     * communicator: dp_rank = rank / tp, tp_rank = rank % tp. */
    int dp_rank, tp_rank;

    /* Optional communicators, each a pointer to an MPI_Comm owned by the caller (the executor
     * duplicates them and never frees the originals). world_comm NULL = MPI_COMM_WORLD.
     * dp_comm/tp_comm NULL = split from world_comm (DP joins equal tp_rank, TP equal dp_rank);
     * when given, their rank order must be the dp_rank/tp_rank order. With comm "nccl",
     * dp_comm/tp_comm point to the job's ncclComm_t instead (borrowed, never destroyed, but
     * aborted when the executor detects an NCCL failure), and world_comm stays an MPI_Comm
     * (the control plane, and the bootstrap of the world NCCL communicator). (Every version
     * starts with the fields up to here, in this order.) */
    const void *world_comm, *dp_comm, *tp_comm;

    /* The plan's matrix optimizer's (Muon's, SOAP's or Shampoo's) learning rate and weight
     * decay, which cz_executor_set_lr and set_weight_decay change: one pair for whichever the
     * plan names, so they stay here rather than in the optimizers' structs. */
    float lr;           /* CZ_EXEC_LR_DEFAULT (default) = the optimizer's default: for Muon the
                           scaling's, 1e-3 for rms (an AdamW learning rate, as Moonlight), 0.02
                           for shape (as Keller Jordan's Muon); SOAP 3e-3; Shampoo 0.01. 0 is a
                           rate of 0 (a warm-up's first step); other negative values are
                           refused. (Before version 6, 0 meant the default.) */
    float weight_decay; /* decoupled, default 0.01 */

    /* 1 (default) = check the owned gradient shards for NaN/Inf after the reduce-scatter. */
    int check_finite;
    /* > 0: when the global gradient norm exceeds it, every gradient is scaled by
     * max_grad_norm / (norm + 1e-6) before the updates (as torch's clip_grad_norm_).
     * 0 (default) = no clipping. */
    float max_grad_norm;
    /* Where bound buffers live; default host (the only space of the cpu backend). */
    cz_exec_memory memory;
    /* dtype of the parameters and gradients the job binds: -1 (default) = the plan's (the
     * model's dtype), or CZ_DTYPE_FP32 / CZ_DTYPE_BF16. Optimizer state, Newton-Schulz and
     * the executor's master copy of bf16 parameters are fp32. */
    int dtype;
    /* Opaque stream of the backend the step is ordered on (a cudaStream_t for a GPU backend);
     * NULL (default) = the backend's own. The cpu backend's stream is the calling thread and
     * takes only NULL. The job's side of the ordering (GPU backends):
     *   - with the job's stream given, the step runs on it, after whatever the job issued there
     *     before the call, and the job's later work on it comes after the step;
     *   - with NULL, the step runs on a stream of the backend's own, and each step starts after
     *     what the job issued before it on the legacy default stream (stream 0) and on the
     *     calling thread's per-thread default stream, and the job's later work on those two
     *     streams waits for the step's end (events; the host does not wait);
     *   - work the job issues on any other stream must be ordered by the job: hand that stream
     *     in, or synchronize it before the step and after it (cz_executor_wait).
     * The host may read the bound buffers only after cz_executor_wait (or a synchronize). */
    void *stream;

    /* comm "nccl": seconds that creating an NCCL communicator (the world one over MPI, the
     * DP/TP splits), or one host wait on NCCL work, may last before the executor aborts the
     * communicator and returns an error on every rank instead of hanging (a peer that died or
     * never arrived). 0 (default) = the environment's CZ_NCCL_TIMEOUT_S when set, else 300. */
    double nccl_timeout_s;
    /* comm "mpi" (and the MPI control plane under "nccl"): seconds that one wait of an MPI
     * collective or transfer may go without completing. Then every live rank asks the others
     * which are still there, returns CZ_ETIMEOUT with a message naming the step, the operation
     * and the rank(s) it waited for, and the communicators cannot be used any more (free the
     * executor and end the job with MPI_Abort: MPI_Finalize would wait for the stopped rank).
     * 0 (default) = the environment's CZ_MPI_TIMEOUT_S when set, else 1800. */
    double mpi_timeout_s;
    /* The caller's host collectives (above), read during create and kept (with their user
     * pointer) until cz_executor_free: the whole communication with comm "callbacks", the
     * control plane under comm "nccl" (instead of MPI). With comm "callbacks", world_comm must
     * be NULL and dp_comm/tp_comm too (has_groups says whether the callbacks run on the job's
     * DP and TP groups). NULL (default): none. */
    const cz_comm_callbacks *callbacks;

    /* Each optimizer's own settings (read for the optimizer the plan names, and AdamW's for
     * the elementwise parameters). */
    cz_muon_config muon;
    cz_adamw_config adamw;
    cz_soap_config soap;
    cz_shampoo_config shampoo;

    /* ---- version 8 ---- */
    /* The dtype of the DP gradient reduce-scatter of a bf16 job (docs/EXECUTOR.md, "On the
     * wire"): 0 (default) = bf16, the job's gradients as they are, each pairwise sum rounded
     * to bf16 (Megatron-LM's default); 1 = fp32, the gradients widened first and summed in
     * fp32 (Megatron-LM's --grad-reduce-in-fp32: twice the bytes, no rounding of the sum). The
     * parameters are all-gathered in bf16 either way (each rank's range rounded from the fp32
     * master copy, what the job receives anyway). An fp32 job's exchanges are fp32. */
    int grad_reduce_in_fp32;

    /* ---- version 9 ---- */
    /* NorMuon on a Muon plan's matrices (above); default off. */
    cz_normuon_config normuon;
} cz_exec_config;

/* The defaults above as an initializer: cz_exec_config c = CZ_EXEC_CONFIG_INIT; (the values
 * cz_exec_config_init writes), in the fields' order. */
/* clang-format off */
#define CZ_EXEC_CONFIG_INIT                                                                     \
    {CZ_EXEC_CONFIG_VERSION, "cpu", NULL, -1, -1, NULL, NULL, NULL,                             \
     CZ_EXEC_LR_DEFAULT, 0.01f, 1, 0.0f, CZ_EXEC_MEMORY_HOST, -1, NULL, 0.0, 0.0, NULL,         \
     CZ_MUON_CONFIG_INIT, CZ_ADAMW_CONFIG_INIT, CZ_SOAP_CONFIG_INIT, CZ_SHAMPOO_CONFIG_INIT, 0,   \
     CZ_NORMUON_CONFIG_INIT}
/* clang-format on */

/* Fills *cfg with the defaults above (CZ_EXEC_CONFIG_INIT's values). */
void cz_exec_config_init(cz_exec_config *cfg);

/* The iteration count a Newton-Schulz coefficient set (cz_muon_config.ns_coeffs: a name or a
 * table as text; NULL is "jordan") implies: its row count for a table of several rows, 0 for a
 * single triple (which repeats for any ns_steps). CZ_EINVALID, with a message naming the row
 * and entry at fault, when coeffs is neither. */
int cz_exec_ns_coeffs_steps(const char *coeffs, int *steps, cz_error *err);

/* Seconds spent in each phase of one step (wall clock on this process). */
typedef struct cz_exec_timings {
    double reduce_scatter; /* gradient reduce-scatter over DP (plus the NaN/Inf check) */
    double elementwise;    /* AdamW on owned elementwise shards */
    double matrix;         /* micro-group pipeline: gathers, the matrix optimizer, scatters,
                              local updates */
    double all_gather;     /* parameter all-gather over DP */
    double total;          /* the whole cz_executor_step call */
    int64_t steps;         /* steps run so far */
} cz_exec_timings;

typedef struct cz_executor cz_executor;

/* Creates an executor from a plan file. Collective over the world communicator when the comm
 * backend is "mpi" or "nccl": every rank must call it, and all return an error if any rank
 * fails. Runs plan schemas canzona.plan/1, /2 and /3 (CZ_PLAN_SCHEMA, CZ_PLAN_SCHEMA_SPLIT: the
 * split buffer layout, CZ_PLAN_SCHEMA_EXPERT: expert groups) and checks the plan's content
 * hash. Reads cfg (NULL: the defaults) once, of any version from 1 to CZ_EXEC_CONFIG_VERSION
 * (see there), and never again. Refuses (CZ_EUNSUPPORTED) a config version outside that range,
 * other schema versions, the `even` and `layerwise` DP baselines, AdamW-only plans
 * (--optimizer adamw), SOAP and Shampoo plans on a compute backend without their linear algebra,
 * (CZ_EINVALID) plans that break a structural rule, Megatron-Core's expert rules included (experts
 * divisible by EP, ETP x EP x expert-DP covering the stage's TP x DP, each expert on the EP rank
 * Megatron-Core gives it), and (CZ_EMISMATCH) a world that is not dp*tp*pp ranks, ranks out of
 * range, communicator sizes that differ from the plan's dp/tp, and ranks given different plans.
 * World rank = (stage * dp + dp_rank) * tp + tp_rank (Megatron-Core's order): with pp > 1 each rank
 * binds, steps and keeps the optimizer state of its own stage's buffer only (cz_executor_pp_rank,
 * cz_executor_buffer_numel); with expert groups that buffer is the stage's dense buckets followed
 * by the rank's EP rank's expert buckets, its experts reduced over the expert-DP group and computed
 * over ETP (the expert grid: stage-local rank = (edp_rank * ep + ep_rank) * etp + etp_rank). On
 * success *out owns the plan and all optimizer state; free with cz_executor_free. */
int cz_executor_create(cz_executor **out, const char *plan_path, const cz_exec_config *cfg,
                       cz_error *err);

/* The same from a plan already in memory (e.g. built with cz_plan_build). The executor
 * borrows the plan: it must stay alive and unchanged until cz_executor_free. */
int cz_executor_create_from_plan(cz_executor **out, const cz_plan *plan, const cz_exec_config *cfg,
                                 cz_error *err);

/* Number of elements of the flat local buffer the plan expects: the sum of the sizes of this
 * rank's stage's dense buckets (all of them when pp = 1) and, with expert groups, of its EP
 * rank's expert buckets, which follow them. */
size_t cz_executor_buffer_numel(const cz_executor *ex);

/* Typed binding: as the two calls below, for buffers of the executor's dtype
 * (cz_executor_dtype; CZ_EMISMATCH for another). With bf16 the executor keeps an fp32 master
 * copy of the parameters: the job's bf16 parameters are read at the first step only and
 * rewritten (rounded to nearest even) from the master copy after every step; gradients are
 * read every step. */
int cz_executor_bind_typed(cz_executor *ex, void *params, void *grads, size_t numel, cz_dtype dtype,
                           cz_error *err);
int cz_executor_bind_param_typed(cz_executor *ex, const char *name, void *param, void *grad,
                                 int64_t rows, int64_t cols, cz_dtype dtype, cz_error *err);
/* The dtype of the parameters and gradients this executor binds. */
cz_dtype cz_executor_dtype(const cz_executor *ex);

/* Binds flat local parameter and gradient buffers of numel fp32 elements each; numel must
 * equal cz_executor_buffer_numel (CZ_EMISMATCH otherwise). Parameter p's local shard lives
 * at bucket(p).offset + p.offset. The buffers stay owned by the caller. Grads are consumed
 * by the step (their content after a step is unspecified). */
int cz_executor_bind_buffers(cz_executor *ex, float *params, float *grads, size_t numel,
                             cz_error *err);

/* Binds one parameter by name: param and grad point to its local shard, rows x cols
 * row-major (a 1-D parameter passes cols = 1). Refuses an unknown name, a parameter of another
 * pipeline stage, a routed expert of another EP rank, or a shape that differs from the plan's
 * local shape. The flat buffers of cz_executor_bind_buffers must not be bound as well; every
 * parameter this rank holds must be bound before the first step. */
int cz_executor_bind_param(cz_executor *ex, const char *name, float *param, float *grad,
                           int64_t rows, int64_t cols, cz_error *err);

/* Non-blocking step: cz_executor_step_async starts a step on the backend's stream and
 * cz_executor_wait waits for it and returns its result (the same as cz_executor_step's).
 * Bound buffers must not be touched in between. One step at a time: a second start before
 * the wait, or a wait without a start, is refused (CZ_EINVALID). The cpu backend's stream is
 * the calling thread, so there the whole step runs inside cz_executor_step_async. */
int cz_executor_step_async(cz_executor *ex, cz_error *err);
int cz_executor_wait(cz_executor *ex, cz_error *err);

/* Runs one optimizer step. Collective over the world communicator. Returns CZ_EINVALID
 * naming the parameter when an owned gradient holds NaN or Inf (on every rank; no parameter
 * is changed then), CZ_EINVALID when buffers are not bound. A step that fails after its first
 * update leaves a state that matches no step; so does a bucket-wise step cancelled or refused
 * after early updates moved some rank's state (cz_executor_step_cancel). Then this executor is
 * poisoned: cz_executor_step (on every rank, before any update), the bucket-wise step and
 * cz_executor_save_state return CZ_EINVALID "... the optimizer state matches no step (why);
 * restore a checkpoint (cz_executor_load_state) first", until a cz_executor_load_state
 * succeeds. */
int cz_executor_step(cz_executor *ex, cz_error *err);

/* The bucket-wise step: cz_executor_step cut where the job's passes can run beside it, so that
 * each bucket's gradient reduce-scatter travels under the rest of the backward pass and each
 * bucket's parameter all-gather under the next forward, bucket by bucket (docs/EXECUTOR.md,
 * "The bucket-wise step"). Its results are cz_executor_step's bit for bit: the same
 * collectives, the same 1/DP averaging, the same statistics, clipping and updates.
 *
 *   for each bucket b, in any order, once its gradients are final (the last micro-batch's
 *   backward has passed every parameter of b):  cz_executor_bucket_ready(ex, b)
 *   cz_executor_step_finish(ex)          after the backward pass
 *   cz_executor_bucket_wait(ex, b)       before the next forward first reads a parameter of b
 *
 * bucket_ready stages bucket b's gradients (bf16 or per-parameter binding: that bucket's
 * parameters only; the job must not change them afterwards in this step) and posts its
 * reduce-scatter without waiting for it. Reduce-scatters are posted in bucket order, the one
 * order every rank follows: a bucket declared before a lower-numbered one of this rank waits
 * for it (the plan numbers buckets in backward order, bucket 0 holding the last layers, so a
 * backward pass declares them in that order). Every bucket this rank holds
 * (cz_executor_bucket_held) must be declared exactly once per step: a second declaration, an
 * index out of range or a bucket of another stage is refused (CZ_EINVALID, nothing posted).
 * step_finish (collective) first agrees across ranks that every rank declared every bucket:
 * when one did not, every rank returns CZ_EINVALID naming the lowest missing bucket and rank,
 * with no parameter changed and nothing left in flight (no hang); else it waits for the
 * reduce-scatters, runs the norm, the NaN/Inf check, clipping and both optimizers exactly as
 * cz_executor_step, posts every bucket's all-gather (the first layers' bucket first) and
 * returns without waiting for them. bucket_wait completes bucket b's all-gather and writes its
 * parameters to the job's buffers (bf16 or per-parameter binding); a bucket with nothing
 * outstanding, or a call between a bucket_ready and its step_finish, returns at once. Whatever is
 * still outstanding is completed by the next step's first call (bucket_ready, step_finish or
 * cz_executor_step), save_state, load_state and cz_executor_free. cz_executor_step, save_state and
 * load_state between a bucket_ready and its step_finish are refused. On the cpu backend under comm
 * "mpi" the collectives progress inside the executor's calls (each bucket_ready gives the ones in
 * flight a turn); under "nccl" they run on the plane's stream; under "self" and "callbacks" each
 * completes when it is posted (no overlap, the same results). The timings (cz_executor_timings) are
 * those of step_finish, plus early updates' in `matrix`. The tables are allocated at the first
 * bucket_ready (about this rank's share of the buffer, 1/DP of it, in backend memory), never again.
 */
size_t cz_executor_bucket_count(const cz_executor *ex);
/* 1 when bucket b is in this rank's buffer (its pipeline stage's, and for an expert bucket its
 * EP rank's): the buckets it must declare each step. */
int cz_executor_bucket_held(const cz_executor *ex, size_t bucket);
/* The bucket of the plan's parameter i (plan order, as cz_executor_param_name); -1 when out of
 * range. A job counts its parameters' final gradients per bucket with it. */
int64_t cz_executor_param_bucket(const cz_executor *ex, size_t i);
int cz_executor_bucket_ready(cz_executor *ex, size_t bucket, cz_error *err);
int cz_executor_step_finish(cz_executor *ex, cz_error *err);
int cz_executor_bucket_wait(cz_executor *ex, size_t bucket, cz_error *err);
/* Abandons the open bucket-wise step (collective over the world: every rank calls it, with an
 * open step or not, e.g. when the job found a fault of its own after some buckets were
 * declared): completes the reduce-scatters posted and those not yet posted (their data unused),
 * updates nothing more and counts no step; the gradients bound are unspecified after it. When
 * early updates had already moved some rank's parameters and optimizer state, every rank
 * returns CZ_EINVALID saying which ("... restore a checkpoint") and the executor is poisoned
 * (cz_executor_step): save_state and the steps are refused until a load_state. Else, and
 * without an open step on any rank: CZ_OK. */
int cz_executor_step_cancel(cz_executor *ex, cz_error *err);

/* Early updates in the bucket-wise step (docs/EXECUTOR.md, "Early updates"), off by default.
 * On, bucket_ready also runs every micro-group whose buckets are all posted: it waits for their
 * reduce-scatters and runs the group's gathers, matrix optimizer, scatters and updates there
 * (on the cpu backend in the calling thread; on a GPU on the executor's stream, without the
 * job's streams waiting for them), in the order of the groups' highest bucket; step_finish
 * runs the rest. The parameters are those of the plain step bit for bit. Only a step that
 * cannot be refused or rescaled after its first update can start early, so it needs
 * check_finite = 0 and max_grad_norm = 0 (CZ_EINVALID otherwise, and set_max_grad_norm > 0
 * is refused while they are on), and Muon or SOAP (CZ_EUNSUPPORTED for Shampoo). Any rank may
 * declare its buckets in any order: the collectives, micro-groups and all-gathers run in one
 * sequence fixed by the plan (each bucket's reduce-scatter, then what falls due after it),
 * the same on every rank, and the results are the same bits. A bucket_ready may then wait
 * inside for its DP and TP peers to reach the same point of that sequence, so a job whose
 * backward runs collectives of its own between declarations (TP all-reduces) must declare
 * in the same order on the ranks of a TP group, as a backward pass does. Every rank must
 * declare every bucket: a rank missing one leaves its DP peers waiting for its
 * reduce-scatter (the MPI watchdog, CZ_MPI_TIMEOUT_S, reports it).
 * Collective: every rank calls it with the same value (CZ_EMISMATCH on every rank
 * otherwise), outside a step. */
int cz_executor_set_early_updates(cz_executor *ex, int on, cz_error *err);
/* The micro-groups this rank updated early in its open or last bucket-wise step. */
int cz_executor_early_groups(const cz_executor *ex);

/* Global L2 norm of the averaged gradient of the last step, before clipping: every rank
 * sums the squares of the shards it owns (a tensor replicated over TP counted once) and the
 * sums are all-reduced. The same value on every rank; NaN before the first step. */
double cz_executor_grad_norm(const cz_executor *ex);

/* Learning rates and weight decays for the following steps (schedules): muon_lr and muon_wd
 * are the plan's matrix optimizer's (Muon's, SOAP's or Shampoo's: the one the plan names),
 * adamw_lr and adamw_wd AdamW's; each optimizer keeps its own, and sets it for every one of
 * its parameters (replacing cz_executor_set_param_rates's). Not collective, but every rank
 * must set the same values before the same step (the step compares them). Refuses
 * (CZ_EINVALID) negative or non-finite values. */
int cz_executor_set_lr(cz_executor *ex, float muon_lr, float adamw_lr, cz_error *err);
int cz_executor_set_weight_decay(cz_executor *ex, float muon_wd, float adamw_wd, cz_error *err);

/* Per-parameter learning rates and weight decays for the following steps (torch's parameter
 * groups): lr[i] and wd[i] are those of the plan's parameter i (plan order: the model's, as
 * cz_executor_param_name lists them; n must be cz_executor_param_count). They replace what the
 * executor had for those parameters, cz_exec_config's and set_lr/set_weight_decay's (which in
 * turn set every parameter of their optimizer). Muon and AdamW take a rate and a decay per
 * parameter; SOAP and Shampoo one of each for all their parameters (CZ_EUNSUPPORTED naming the
 * first that differs). Refuses (CZ_EINVALID, naming the parameter) negative or non-finite
 * values; nothing is changed then. Not collective, but every rank must set the same values
 * before the same step: the step compares them across ranks (with the gradient norm's
 * reduction, no extra collective) and returns CZ_EMISMATCH on every rank, no parameter
 * changed, when they differ. The arrays are copied. */
int cz_executor_set_param_rates(cz_executor *ex, const float *lr, const float *wd, size_t n,
                                cz_error *err);
/* The number of the plan's parameters, and the name of parameter i (NULL when out of range;
 * owned by the executor). */
size_t cz_executor_param_count(const cz_executor *ex);
const char *cz_executor_param_name(const cz_executor *ex, size_t i);
/* Momentum coefficients for the following steps (torch's OneCycleLR and CyclicLR cycle them):
 * muon_momentum is Muon's mu (cz_exec_config.muon.momentum), adamw_beta1 and adamw_beta2
 * AdamW's betas (AdamW's bias correction takes the current beta to the power of the step's
 * number, as torch's). CZ_EINVALID for a value outside [0, 1); CZ_EUNSUPPORTED when the plan's
 * matrix optimizer is SOAP or Shampoo (theirs are fixed at create). Not collective; every rank
 * the same (compared as the rates are). */
int cz_executor_set_momentum(cz_executor *ex, float muon_momentum, float adamw_beta1,
                             float adamw_beta2, cz_error *err);
/* Gradient clipping for the following steps: max_grad_norm as cz_exec_config's (0 = none).
 * CZ_EINVALID for a negative or non-finite value. Every rank the same (compared as the rates
 * are). */
int cz_executor_set_max_grad_norm(cz_executor *ex, float max_grad_norm, cz_error *err);

/* QK-clip (MuonClip, Kimi K2; docs/EXECUTOR.md, "QK-clip"): after a step's updates, the query
 * and key rows of every attention head whose largest pre-softmax logit in the step's forward
 * exceeded tau are scaled so that the logit would have been tau. The job describes once which
 * rows of which parameters belong to which heads (cz_qk_clip_rows), then hands every step the
 * per-head maxima of its forward (cz_executor_qk_logits); the step MAX-reduces them over every
 * rank, scales the master copy of the rows this rank owns, and the parameter all-gather takes
 * the result to every replica.
 *
 * One run of rows: rows [row0, row0 + rows) of the whole (unsharded) parameter `param`, as
 * the plan lays it out (declared blocks that split the TP dimension stacked, each TP rank
 * holding its share of every block), are scaled by eta^power, where eta = tau / S when S > tau and
 * 1 otherwise, and S is the largest of the layer's query-head maxima head0 .. head0 + heads - 1.
 * Standard attention: each head's query rows and key rows with its own head and power 1/2 each;
 * grouped-query attention (Megatron-LM's rule): a group's query rows and its key rows with the
 * group's heads, 1/2 each; multi-head latent attention: a head's non-rotary query rows and its key
 * rows of linear_kv_up_proj 1/2 each, its rotary query rows power 1, the shared rotary key
 * untouched. */
typedef struct cz_qk_clip_rows {
    const char *param;    /* a matrix parameter of the plan, by name */
    int64_t row0, rows;   /* of the whole parameter, dim 0 */
    int32_t layer;        /* 0 .. nlayers - 1 */
    int32_t head0, heads; /* query heads of the layer, within 0 .. heads_per_layer - 1 */
    float power;          /* finite, > 0 */
} cz_qk_clip_rows;

typedef struct cz_qk_clip_spec {
    float tau;               /* the logit bound, finite and > 0 (Kimi K2: 100) */
    int32_t nlayers;         /* attention layers of the whole model (every stage's) */
    int32_t heads_per_layer; /* query heads of each layer (all TP ranks' together) */
    const cz_qk_clip_rows *rows;
    size_t nrows;
} cz_qk_clip_spec;

/* Sets (spec) or clears (NULL) the QK-clip description for the following steps. Checks every
 * run against the plan and the spec (CZ_EINVALID naming the run: an unknown or non-matrix
 * parameter, an expert's, rows outside the parameter, a head range outside the layer, runs of
 * one parameter that overlap, a power or tau that is not finite and positive); nothing is
 * changed then. Refused with early updates on (CZ_EUNSUPPORTED): their all-gathers may leave
 * before the step has the maxima. Not collective; every rank must set the same description
 * (the step compares a fingerprint of it). The arrays and names are copied. */
int cz_executor_set_qk_clip(cz_executor *ex, const cz_qk_clip_spec *spec, cz_error *err);
/* The next step's per-head maxima: n = nlayers * heads_per_layer floats, layer-major, this
 * rank's largest pre-softmax logit of each head in the step's forward, -INFINITY for a head
 * it did not compute (another TP rank's, another stage's). Copied; the next step reduces them
 * (MAX over every rank) and clips. CZ_EINVALID, nothing kept, without a description, for
 * another n, or for a NaN or +Inf value. A step where some ranks handed maxima and others did
 * not (or were refused) is refused on every rank, no parameter changed, naming the lowest such
 * rank; a step where none did clips nothing. */
int cz_executor_qk_logits(cz_executor *ex, const float *max_logits, size_t n, cz_error *err);
/* The number of (layer, head) pairs whose reduced maximum exceeded tau in the last step: the
 * same on every rank; 0 when that step clipped nothing, -1 for NULL. */
int64_t cz_executor_qk_clipped(const cz_executor *ex);

/* Optimizer-state checkpoints: every parameter's optimizer state as full, unsharded fp32
 * tensors in one safetensors file, with the step count (the bias corrections') in the
 * metadata: "<name>.momentum" (Muon), "<name>.exp_avg" and "<name>.exp_avg_sq" (AdamW),
 * "<name>.soap.<r0>_<c0>.<field>" (SOAP, per block) and "<name>.shampoo.<r0>_<c0>.<field>"
 * (Shampoo, per tile); docs/EXECUTOR.md lists the fields. Collective over the world
 * communicator: every rank calls it; only rank 0 uses path (others may pass NULL). Save
 * gathers the state on rank 0 and writes the file atomically (temporary file in the same
 * folder, then rename: a crash leaves the previous file whole). Load reads it on rank 0,
 * checks every tensor against the plan (CZ_EMISMATCH for a missing, extra or misshapen
 * tensor; CZ_EINVALID for a value the state cannot hold) and distributes it, so a checkpoint
 * saved under one plan loads under any plan of the same model and optimizer settings (another
 * DP/TP shape, strategy, or block and cooperative tasks). The state is the backend's memory
 * (device memory for a GPU backend): it moves through the backend's download and upload and
 * the data plane, with rank 0 holding the whole file in host memory. Not between
 * cz_executor_step_async and cz_executor_wait. The parameters themselves are the job's to
 * save. CZ_EUNSUPPORTED with a compute backend that cannot upload to its memory. Save refuses
 * (CZ_EINVALID, every rank, nothing written) a poisoned executor, whose state matches no step
 * (cz_executor_step): its file would carry a step count none of its tensors has. A load that
 * succeeds clears that condition; one that fails while distributing the tensors (some of them
 * then the file's) sets it. */
int cz_executor_save_state(cz_executor *ex, const char *path, cz_error *err);
int cz_executor_load_state(cz_executor *ex, const char *path, cz_error *err);

/* Copies the timings of the last step into *out: host times. On a GPU backend the step returns
 * with work still queued on the device; a job that wants the device's time synchronizes
 * (cudaStreamSynchronize on its stream) and times that itself. */
void cz_executor_timings(const cz_executor *ex, cz_exec_timings *out);

/* What this rank's DP exchanges put on the wire (docs/EXECUTOR.md, "On the wire"): their
 * dtypes, and the bytes of the buffers it posted since create, counted as it posts each
 * collective: a reduce-scatter's input (the bucket, every rank's range) and an all-gather's
 * buffer (the bucket), in the exchange's dtype, over the DP and expert-DP planes. What
 * `canzona simulate` reports as grad_sync_bytes and param_sync_bytes for one step. */
typedef struct cz_exec_wire {
    cz_dtype grad_dtype, param_dtype; /* of the reduce-scatters and the all-gathers */
    int64_t grad_bytes, param_bytes;  /* posted since create */
    /* The micro-group exchanges (always fp32): the bytes this rank sent since create to the
     * other ranks of its TP plane (tp_bytes: its DP rank's schedule) and of its expert-TP plane
     * (etp_bytes: its expert rank's), in gathers and scatters (under sc, its shards' all-gather
     * counted once per receiving rank); a cooperative task's Gram all-reduces are not counted.
     * What `canzona simulate` reports as tp_sync_bytes and etp_sync_bytes for one step. */
    int64_t tp_bytes, etp_bytes;
} cz_exec_wire;
void cz_executor_wire(const cz_executor *ex, cz_exec_wire *out);

/* What the executor allocates in backend memory (device memory on a GPU backend, host memory on
 * the cpu backend), by what it is for (docs/EXECUTOR.md, "Memory"). The first three are model
 * states, what a job's optimizer holds anyway: the executor's fp32 copies of the parameters (the
 * master copy of a bf16 job, or the flat copy of buffers bound per parameter or staged through
 * the host) and of the gradients, and the optimizers' state. The rest is what the executor
 * needs beyond them. */
typedef enum cz_exec_mem_kind {
    CZ_EXEC_MEM_PARAMS,   /* fp32 parameter copy: the master copy, or the staging copy */
    CZ_EXEC_MEM_GRADS,    /* fp32 gradient copy (bf16 jobs, per-parameter or staged binding) */
    CZ_EXEC_MEM_STATE,    /* optimizer state: momentum, Adam moments, SOAP/Shampoo factors */
    CZ_EXEC_MEM_DP,       /* the reduce-scatter's scratch and the bf16 wire buffers */
    CZ_EXEC_MEM_EXCHANGE, /* micro-group gather and scatter send/receive buffers (two sets,
                             one for a single micro-group, none on a plane of one rank) */
    CZ_EXEC_MEM_FULL,     /* the pipeline's full-gradient and full-update buffers */
    CZ_EXEC_MEM_NS,       /* Newton-Schulz batch, work, Gram panels and sums */
    CZ_EXEC_MEM_SOLVER,   /* SOAP's and Shampoo's linear-algebra work */
    CZ_EXEC_MEM_INDEX,    /* index maps: the pipeline's run lists, 24 bytes a run */
    CZ_EXEC_MEM_OTHER,    /* per-parameter statistics, the bucket-wise step's ranges, and
                             checkpoints' bounce buffers */
    CZ_EXEC_MEM_NKINDS
} cz_exec_mem_kind;
/* Room for kinds later versions may add: the struct's size stays the same, so a program built
 * against this header calls a newer library safely and reads the first nkinds entries. */
#define CZ_EXEC_MEM_MAX_KINDS 16
/* Bytes by kind (bytes[k] for k < nkinds, the kinds this library records; zeros after);
 * model_states = params + grads + state, beyond = the rest. */
typedef struct cz_exec_mem_usage {
    int64_t bytes[CZ_EXEC_MEM_MAX_KINDS];
    int nkinds; /* CZ_EXEC_MEM_NKINDS of the library that filled it */
    int64_t model_states, beyond;
} cz_exec_mem_usage;
/* A kind's name ("params", "grads", "state", "dp", "exchange", "full", "ns", "solver",
 * "index", "other"; "?" out of range). */
const char *cz_exec_mem_kind_name(int kind);
/* The bytes this rank's executor allocated in backend memory since create, by kind: at create,
 * at the first bind (the fp32 copies), at the first bucket-wise step (its ranges) and at each
 * checkpoint (a bounce buffer, released after it; allocations are summed, releases not
 * subtracted). A step allocates nothing. Run lists count their entries (the cpu backend keeps
 * them as they are, in host memory; the cuda backend cuts long runs into pieces, so its maps can
 * be larger). Zeros for NULL. */
void cz_executor_memory_usage(const cz_executor *ex, cz_exec_mem_usage *out);

/* This process's DP and TP rank within its stage, and its pipeline stage (after create; -1 for
 * NULL). */
int cz_executor_dp_rank(const cz_executor *ex);
int cz_executor_tp_rank(const cz_executor *ex);
int cz_executor_pp_rank(const cz_executor *ex);

/* Releases the executor, its state and its duplicated communicators. Accepts NULL. Not
 * collective in this version, but call it on every rank. */
void cz_executor_free(cz_executor *ex);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* CANZONA_EXEC_H */
