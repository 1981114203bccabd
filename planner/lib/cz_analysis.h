/*
 * cz_analysis.h — what is done with a plan once made: the structural checks shared with the
 * executor, the step simulator, the renderer, the Hugging Face importer, and validate, inspect
 * and diff.
 */
#ifndef CZ_ANALYSIS_H
#define CZ_ANALYSIS_H

#include "cz_algorithms.h"

/* ---- the simulator (simulate.c, sim_comm.c, ...: cz_sim.h), render.c ---- */
/* Kinds of collective for the alpha-beta formulas of the simulator (see docs/SIMULATOR.md). */
typedef enum cz_coll_kind {
    CZ_COLL_REDUCE_SCATTER = 0, /* ring: n-1 steps, each moves the largest slice */
    CZ_COLL_ALL_GATHER = 1,     /* ring: n-1 steps, each moves the largest slice */
    CZ_COLL_ALL_REDUCE = 2,     /* ring: 2(n-1) steps, 2(n-1)/n of the buffer */
    CZ_COLL_ALL_TO_ALL = 3,     /* pairwise: n-1 steps, a rank's larger of sent/received */
    CZ_COLL_ROOTED_GROUP = 4    /* n concurrent rooted ring reduces (or broadcasts), one per
                                   owner: n-1 steps, bytes = the busiest ring link's load */
} cz_coll_kind;

/* Seconds of one uneven DP collective with slice lengths len[0..n-1] (elements). */
double cz__sim_uneven_seconds(const int64_t *len, int n, double elem_bytes, double gbps,
                              double latency_us, cz_sim_uneven model);

/* Seconds of one collective over n ranks. bytes: for the ring collectives the largest
 * per-rank slice (reduce-scatter, all-gather) or the whole buffer (all-reduce); for the
 * all-to-all the largest amount one rank sends or receives. 0 when n <= 1 or bytes <= 0. */
double cz__sim_collective_seconds(cz_coll_kind kind, int n, double bytes, double gbps,
                                  double latency_us);
/* 1 when the world ranks first, first+stride, ..., first+(n-1)*stride sit on more than one
 * node of gpus_per_node consecutive ranks (so the group runs at the inter-node rate). */
int cz__sim_group_spans_nodes(int first, int stride, int n, int gpus_per_node);
/* The link rate of a group on cluster c: inter-node when it spans nodes, else intra-node; 0
 * without a cluster. */
double cz__sim_link_gbps(const cz_cluster *c, int spans_nodes);

typedef struct cz_sim_span {
    double start, end; /* seconds after the gradients are synchronized (or cost units) */
} cz_sim_span;

/* One cooperative task of the critical DP rank as simulated: task `task` of micro-group
 * `group` on TP ranks slot .. slot + width - 1, from start (its slowest member free) to end;
 * allreduce_s of that span its members wait on the Gram and norm all-reduces that the
 * computation does not hide (the pipelined Gram panels, cz__coop_time_of; drawn at its end). */
typedef struct cz_sim_coop {
    int group, task, slot, width;
    double start, end, allreduce_s;
} cz_sim_coop;

/* Result of simulating one optimizer step of a plan (cz_plan_simulate). All durations are in
 * seconds, or in the plan's cost unit when no cluster was given (communication is then 0). */
struct cz_sim_result {
    int in_seconds;   /* 1: simulated on a cluster; 0: in the plan's cost unit */
    int pipelined;    /* 1: asynchronous micro-group pipeline; 0: synchronous compute */
    int device_model; /* 1: the cluster's device model (fixed costs, batching) was on */
    int overlap_param_gather, overlap_grad_reduce; /* cz_sim_options' overlaps */
    double grad_sync_total_s, param_sync_total_s;  /* every bucket's, hidden or not */
    /* What the executor's DP exchanges put on the wire for the plan's buckets: their dtypes
     * (cz_sim_options.grad_reduce_in_fp32) and the most bytes one GPU posts per step, its
     * stage's dense buckets and its EP rank's expert ones, as cz_executor_wire counts them
     * (docs/SIMULATOR.md, "What goes on the wire"). */
    cz_dtype grad_wire, param_wire;
    int64_t grad_sync_bytes, param_sync_bytes;
    /* The micro-group exchanges (fp32): the most bytes one GPU sends per step to the others of
     * its TP group (its DP rank's schedule) and of its expert-TP group (its expert rank's), as
     * cz_exec_wire.tp_bytes and .etp_bytes count them; -1 where the executor runs no such
     * program (the even baseline, Megatron's modes; etp: a plan without experts). */
    int64_t tp_sync_bytes, etp_sync_bytes;
    double host_s;         /* the step's host work (cz__dm_step_host_seconds); 0 without the
                              device model */
    double grad_sync_s;    /* gradient reduce-scatter (all-reduce under layerwise), all buckets
                              (with overlap_grad_reduce: the exposed last one) */
    double frag_gather_s;  /* even (ZeRO-1) only: gathering fragmented matrices over DP */
    double local_s;        /* elementwise + matrix updates incl. TP collectives, slowest GPU */
    double param_sync_s;   /* parameter all-gather over DP, all buckets (with
                              overlap_param_gather: the exposed first-needed one) */
    double optimizer_s;    /* optimizer-step latency: frag_gather + host + local + param_sync */
    double step_s;         /* grad_sync + optimizer_s, worst pipeline stage */
    double compute_s;      /* busiest GPU's compute-stream busy time */
    double tp_comm_s;      /* TP collective time of the critical DP rank */
    double comm_s;         /* all collective time on the critical GPU (sum, exposed or not) */
    double exposed_comm_s; /* step_s minus the critical GPU's compute busy time */
    /* Cooperative tasks (canzona.plan/2) of the critical DP rank: how many, the time the
     * critical GPU waits on their Gram and norm all-reduces, the part that its computation
     * does not hide (tp_comm_s and comm_s count the all-reduces whole), and the time it waits
     * for their slower members. */
    int coop_tasks;
    double coop_allreduce_s, coop_wait_s;
    int critical_stage, critical_dp, critical_tp; /* the GPU whose work finishes last */
    /* A plan with expert groups (experts 1): the part of local_s the critical GPU spends in its
     * expert rank's micro-groups, after the last GPU of its ETP group finished the dense part;
     * grad_sync_s and param_sync_s include the expert buffers' collectives. */
    int experts;
    double expert_s;
    /* The iteration (cz_sim_options.iteration; docs/SIMULATOR.md, "The iteration"): the worst
     * stage's forward and backward passes of all micro-batches, the iteration without overlap
     * (the passes, then step_s) and, where overlap is modelled (iter_overlap 1; else
     * iter_note says why not), with it: cz_iter_timeline's figures. */
    int iteration, iter_overlap;
    int seq_len, micro_batch_size, micro_batches;
    double pass_efficiency, pass_tflops; /* the passes' rate in TFLOP/s */
    double fwd_s, bwd_s, iter_s;
    int gather_forward_order, deferred_updates;
    double iter_overlap_s, bwd_delay_s, first_wait_s, dp_bound_s;
    char iter_note[160];
    int ngpus;
    double *gpu_busy; /* per GPU compute busy time, [(stage*dp + d)*tp + t] */
    /* Timeline of the critical DP rank (times relative to the end of gradient sync, plus the
     * fragment gather under even). */
    int tl_tp, tl_groups;
    double *tl_elementwise;  /* tl_tp values: end of the elementwise updates (start is 0) */
    cz_sim_span *tl_gather;  /* tl_groups spans (a collective: same on every TP rank) */
    cz_sim_span *tl_scatter; /* tl_groups spans; zero length under synchronous compute */
    cz_sim_span *tl_compute; /* tl_groups * tl_tp spans, [g * tl_tp + t] */
    int tl_ncoop;            /* the critical DP rank's cooperative tasks (pipelined plans) */
    cz_sim_coop *tl_coop;
};

/* ---- iteration.c: the training iteration around the step (docs/SIMULATOR.md, "The
 * iteration") ---- */
/* Forward FLOPs one GPU spends on parameter d (local_numel elements of it on the GPU, TP size
 * tp) for one micro-batch of micro_batch_size sequences of seq_len tokens: 2 x elements x
 * tokens for a matrix (0 for 1-D parameters and embeddings), plus attention's causal score and
 * value products for Megatron's fused linear_qkv. Backward is twice this. */
double cz__iter_forward_flops(const cz_param_def *d, int64_t local_numel, int tp, double seq_len,
                              double micro_batch_size);

/* One micro-group of a DP rank as the overlapped iteration runs it: its TP gather, the
 * slowest TP rank's compute (the TP group moves in step), its scatter, and the last bucket (in
 * backward order) that holds one of its inputs. */
typedef struct cz_iter_group {
    int bucket;
    double gather_s, compute_s, scatter_s;
} cz_iter_group;

/* One DP rank: its micro-groups in the plan's order, its elementwise updates in each bucket
 * (nbuckets values) and which buckets each group has inputs in (touches[g * nbuckets + k],
 * 0 or 1; a bucket's all-gather waits for the scatters of every group with an input there). */
typedef struct cz_iter_rank {
    int ngroups;
    const cz_iter_group *groups;
    const double *elem_s;
    const unsigned char *touches;
} cz_iter_rank;

/* One pipeline stage's iteration: nbuckets buckets in backward order (bucket 0 is the first
 * the backward pass completes), per bucket one micro-batch's forward and backward compute on a
 * GPU and the DP reduce-scatter and all-gather; micro_batches per iteration; pipelined 0 under
 * synchronous compute (a group's gather waits for the previous group's compute). */
typedef struct cz_iter_model {
    int nbuckets, micro_batches, pipelined, nranks;
    const double *fwd_s, *bwd_s, *rs_s, *ag_s;
    const cz_iter_rank *ranks; /* nranks */
    int passes_first;     /* 1: a ready forward or backward chunk goes before optimizer work (the
                             optimizer's streams at low priority; simulate's choice); 0: the compute
                             stream runs everything in the order it becomes ready */
    int ag_forward_order; /* 1: the DP channel runs ready reduce-scatters first, then ready
                             all-gathers in the order the next forward needs them (the first
                             layers' first); 0: everything in the order it becomes ready */
    int deferred;         /* 1: every update waits for every reduce-scatter, every all-gather
                             for every rank's updates, the micro-groups in the plan's order (the
                             executor's bucket-wise step without early updates); 0: early */
} cz_iter_model;

/* What cz__iter_overlap finds (seconds from the iteration's start). */
typedef struct cz_iter_timeline {
    double passes_s;     /* micro_batches x (forward + backward): the passes alone */
    double bwd_end_s;    /* the last backward chunk's end on the latest rank */
    double bwd_delay_s;  /* bwd_end_s - passes_s: optimizer compute run between backward chunks */
    double first_wait_s; /* from a rank's backward end to its next forward's first chunk, the
                            worst rank: the first layers' bucket, reduced last, needed first */
    double iter_s;       /* the end of the next iteration's first forward micro-batch minus
                            that micro-batch's own forward: the iteration with overlap */
    double dp_bound_s;   /* a lower bound of iter_s - passes_s in any order: the DP channel's
                            collectives beyond the last backward and next forward but bucket
                            0's (the window they can run in) */
} cz_iter_timeline;

/* The overlapped iteration (docs/SIMULATOR.md, "The iteration"): one DP channel shared by the
 * stage's reduce-scatters and all-gathers, and per DP rank one compute stream (backward,
 * optimizer and next forward, none pre-empted: see passes_first) and one TP link.
 * A rank runs its micro-groups in the order their inputs become ready (by bucket; the plan's
 * order among groups of the same bucket), each after the previous one as in the step.
 * CZ_EINVALID for a model without ranks or micro-batches, CZ_ENOMEM. */
int cz__iter_overlap(const cz_iter_model *m, cz_iter_timeline *out, cz_error *err);

/* The iteration's figures of a result simulated with cz_sim_options.iteration, as the JSON
 * object "iteration" of the report and of `simulate --json` (docs/SIMULATOR.md, "The
 * iteration"); a new reference, NULL when out of memory. */
struct json_t *cz__sim_iteration_json(const cz_sim_result *r);
/* What the executor's DP exchanges post (grad_wire ... param_sync_bytes) as the JSON object
 * "wire" of the report and of canzona simulate's rows; NULL when out of memory. */
struct json_t *cz__sim_wire_json(const cz_sim_result *r);

/* cz_plan_simulate and cz_sim_result_free are declared in canzona.h. */

/* Options of cz__plan_render_svg. */
typedef struct cz_svg_options {
    int width;                /* pixels; default 1200 when 0 */
    const char *cluster_name; /* shown in the title; NULL = the plan's cluster name */
    int sim_in_seconds;       /* 1: sim was run on a cluster (seconds); 0: cost-proportional */
    const struct cz_fsdp_sim *fsdp; /* a fully sharded plan's simulated step on the cluster
                                     * (sim is NULL for such a plan); NULL without a cluster */
} cz_svg_options;

/* Renders the plan as a self-contained SVG document: a verdict on what bounds the step, the
 * per-GPU load bars (aggregated where they would be under 3 px), with sim from a cluster the
 * step's phases, and the pipeline timeline of sim's critical DP rank. sim may be NULL (no
 * timeline). A fully sharded plan draws its busiest stage's micro-groups instead of the
 * timeline. *out is a NUL-terminated string owned by the caller (free()). */
int cz__plan_render_svg(char **out, const cz_plan *plan, const cz_sim_result *sim,
                        const cz_svg_options *opt, cz_error *err);
/* The same SVG inside one HTML page with tables of the settings, per-rank loads and the
 * costliest parameters. */
int cz__plan_render_html(char **out, const cz_plan *plan, const cz_sim_result *sim,
                         const cz_svg_options *opt, cz_error *err);
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
int cz__import_hf(json_t **out_model, const char *config_path, const char *name, cz_dtype dtype,
                  cz_error *err);
/* cz__import_hf with the job's TP size and vocabulary padding: the vocabulary is padded as
 * Megatron-LM pads it (to a multiple of vocab_divisible_by * tp_size), the model records the
 * head counts and the padding in its "megatron" object, and hyper-parameters that Megatron-Core
 * cannot split across tp_size ranks are refused (CZ_EINVALID naming the key and the rule).
 * cz__import_hf is this function with the defaults. */
int cz__import_hf_opts(json_t **out_model, const char *config_path, const cz_import_hf_options *o,
                       cz_error *err);
/* Formats a model description as the bundled files are written: 2-space indentation, one
 * parameter per line, key order preserved, trailing newline. *out is malloc'ed (free()). */
int cz__model_json_format(char **out, const json_t *model, cz_error *err);

/* ---- analysis: validate.c, inspect.c, plan_diff.c ---- */
struct json_t; /* jansson's json_t */
/* Recomputes every invariant of the plan (listed by violation code in docs/ANALYSIS.md, "What is
 * checked") against the model and cluster it
 * claims to be made for. On success *violations_out is a new JSON array (caller owns it) of
 * {"code", "path", "message"} objects, one per violation, empty when the plan is valid, and the
 * return value is the number of checks performed (>= 0). Returns a negative CZ_E* code on
 * failure (out of memory, missing arguments). */
int cz__plan_validate_json(const cz_plan *plan, const cz_model *model, const cz_cluster *cluster,
                           struct json_t **violations_out, cz_error *err);
/* Builds a readable analysis of a plan as a new JSON object (caller owns *report_out):
 * topology, settings, per-rank and per-GPU loads and memory, imbalance figures, the top_n
 * busiest ranks with their largest parameters, micro-group statistics and the parameters that
 * dominate the lower bound. Uses the plan's stored metrics. */
int cz__plan_inspect_json(const cz_plan *plan, int top_n, struct json_t **report_out,
                          cz_error *err);
/* The simulated step of a fully sharded plan and of the FSDP2 + torch.optim.Muon baseline
 * (sim_fsdp.c; docs/SIMULATOR.md, "Fully sharded"), in seconds (the plan's cost units and free
 * communication without a cluster), of the stage that finishes last. */
typedef struct cz_fsdp_sim {
    double grad_s;    /* FSDP2's gradient reduce-scatter over DP (the job's) */
    double elem_s;    /* the busiest GPU's elementwise updates */
    double gather_s;  /* the micro-groups' all-to-alls of gradient shards to owners, summed */
    double compute_s; /* the micro-groups' busiest owners, summed */
    double scatter_s; /* the all-to-alls of update shards back, summed */
    double update_s;  /* the pipeline's end: elementwise, exchanges and owners' steps */
    double param_s;   /* FSDP2's parameter all-gather over DP */
    double opt_s;     /* update + param, as the ZeRO-1 rows of canzona simulate */
    double step_s;    /* grad + opt */
    double a2a_bytes; /* the most bytes one GPU sends or receives in one group's all-to-all */
    int groups, critical_stage;
    /* The baseline: every matrix all-gathered whole on every GPU and stepped there. */
    double base_gather_s, base_compute_s, base_opt_s, base_step_s;
} cz_fsdp_sim;
int cz__fsdp_simulate(const cz_plan *plan, const cz_cluster *c, cz_fsdp_sim *out, cz_error *err);
/* Adds "fsdp" to an inspect report of a fully sharded plan (inspect_fsdp.c): the shard group's
 * size, how many parameters FSDP2 shards unevenly or leaves some DP ranks empty of, and per
 * stage each micro-group's tasks, distinct shapes, owner GPUs, slot loads and largest task, and
 * the most tasks one GPU owns. 0, or -1 out of memory. */
int cz__fsdp_inspect_json(struct json_t *rep, const cz_plan *plan);
/* Compares plan b against plan a. Plans of different models (inputs.model.sha256) or topologies
 * are refused with CZ_EMISMATCH unless force is set, in which case parameters are matched by
 * name. *report_out (caller owns) holds settings, metric and per-rank deltas, the moved
 * parameters (largest first; at most limit listed, all counted; limit < 0 lists all), each
 * plan's busiest rank with what bounds its makespan and the parameters whose part of it
 * changed, largest effect first ("makespan", the same limit), and "identical". */
int cz__plan_diff_json(const cz_plan *a, const cz_plan *b, int force, int limit,
                       struct json_t **report_out, cz_error *err);

/* ---- the public report (analysis_api.c) ---- */
/* A cz_report owns one JSON document; real_precision is the significant digits its text
 * form gives reals (0: jansson's default). */
struct cz_report {
    struct json_t *root;
    int real_precision;
};
/* Wraps root (taking its reference) in a new report; on failure root is released and
 * CZ_ENOMEM returned. */
int cz__report_wrap(cz_report **out, struct json_t *root, int real_precision, cz_error *err);

/* ---- the start-up model (startup.c; docs/PERF.md section 16) ---- */
/* What cz_executor_create costs a rank per byte of plan it reads (jansson's parse, the reader,
 * the structural check on what was read): the whole DeepSeek-V3 plans of docs/PERF.md section
 * 15 took 1.08 s for 21.9 MB, 1.35 s for 27.0 MB and 2.19 s for 41.6 MB of CPU, 19 to 20 MB/s;
 * and what it costs whatever the plan (the smallest parts took 0.003 s). */
#define CZ_STARTUP_PARSE_MB_S 19.0
#define CZ_STARTUP_FIXED_S 0.003
typedef struct cz_startup_model {
    double parse_mb_s; /* bytes a rank reads, parses and checks per second, in MB */
    double fixed_s;    /* a rank's cost whatever it reads */
    double read_gbps;  /* one rank's read bandwidth from the file system, GB/s */
    double fs_gbps;    /* the file system's aggregate bandwidth, all ranks together, GB/s */
} cz_startup_model;
void cz__startup_model_init(cz_startup_model *m);
/* One form of the plan: the bytes a rank reads (least, most and the ranks that do), all ranks'
 * together, the estimated seconds of the least and most loaded ranks, and of the cluster's
 * start-up (the slowest rank, or all bytes over the file system's bandwidth). */
typedef struct cz_startup_form {
    double min_bytes, max_bytes, total_bytes;
    long min_rank, max_rank;
    double min_rank_s, max_rank_s, cluster_s;
} cz_startup_form;
typedef struct cz_startup_report {
    long gpus;
    cz_startup_model model;
    cz_startup_form whole; /* every rank reads the plan file */
    int has_split;
    cz_startup_form split; /* each rank reads its part of the split folder */
} cz_startup_report;
/* The report for the plan p read from plan_path, and with dir (NULL: none) its split folder's
 * (the bytes from the folder's index files). */
int cz__startup_report(const struct cz_plan *p, const char *plan_path, const char *dir,
                       const cz_startup_model *m, cz_startup_report *out, cz_error *err);

#endif /* CZ_ANALYSIS_H */
