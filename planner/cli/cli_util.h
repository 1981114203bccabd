/* Helpers shared by the CLI's subcommands: planning options and value formatting. */
#ifndef CZ_CLI_UTIL_H
#define CZ_CLI_UTIL_H

#include "canzona.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>

struct cz_cluster_sizes; /* cz_format.h */

/* Long options every command that builds plans accepts (see cz_cli_plan_options_help). The
 * values are >= 1000 so they never collide with short options. */
enum {
    CZ_OPT_OPTIMIZER = 1000,
    CZ_OPT_UNIT,
    CZ_OPT_DP,
    CZ_OPT_ALPHA,
    CZ_OPT_ALPHA_LOADS,
    CZ_OPT_LAYERWISE_ORDER,
    CZ_OPT_TP,
    CZ_OPT_CAPACITY,
    CZ_OPT_SOLVER,
    CZ_OPT_TIME_LIMIT,
    CZ_OPT_SEED,
    CZ_OPT_NS_STEPS,
    CZ_OPT_NS_COEFFS,
    CZ_OPT_MAX_PRECOND_DIM,
    CZ_OPT_PRECOND_FREQ,
    CZ_OPT_TPAWARE_TIME_LIMIT,
    CZ_OPT_LAYOUT,
    CZ_OPT_SPLIT_BLOCKS,
    CZ_OPT_COOP,
    CZ_OPT_DP_SIZE,
    CZ_OPT_TP_SIZE,
    CZ_OPT_PP_SIZE,
    CZ_OPT_NODES,
    CZ_OPT_GPUS_PER_NODE,
    CZ_OPT_BUCKET_SIZE,
    CZ_OPT_EP_SIZE,
    CZ_OPT_ETP_SIZE,
    CZ_OPT_LAST_SETTING
};

/* Options of the device model and the simulation, for the commands that take them (their own
 * long options: values from 3000 on, clear of the settings' and the commands' own). */
enum {
    CZ_OPT_CALIBRATION = 3000,
    CZ_OPT_SPLIT_DIR,
    CZ_OPT_OVERLAP_PARAM_GATHER,
    CZ_OPT_OVERLAP_GRAD_REDUCE,
    CZ_OPT_MUON_NS_BATCH_SIZE,
    CZ_OPT_GTP_SIZE,
    CZ_OPT_ITERATION,
    CZ_OPT_SEQ_LEN,
    CZ_OPT_MICRO_BATCH_SIZE,
    CZ_OPT_MICRO_BATCHES,
    CZ_OPT_PASS_EFFICIENCY,
    CZ_OPT_GATHER_ORDER,
    CZ_OPT_DEFERRED_UPDATES,
    CZ_OPT_EARLY_UPDATES,
    CZ_OPT_GRAD_REDUCE_IN_FP32,
    CZ_OPT_REPLICATE_SIZE,
    CZ_OPT_HSDP_COMPUTE
};
/* clang-format off */
#define CZ_CLI_CALIBRATION_OPTION {"calibration", required_argument, NULL, CZ_OPT_CALIBRATION}
/* --overlap-param-gather, --overlap-grad-reduce and --muon-ns-batch-size (simulate, compare). */
#define CZ_CLI_SIM_OPTIONS                                                         \
    {"overlap-param-gather", no_argument, NULL, CZ_OPT_OVERLAP_PARAM_GATHER},      \
    {"overlap-grad-reduce", no_argument, NULL, CZ_OPT_OVERLAP_GRAD_REDUCE},        \
    {"muon-ns-batch-size", required_argument, NULL, CZ_OPT_MUON_NS_BATCH_SIZE},    \
    {"iteration", no_argument, NULL, CZ_OPT_ITERATION},                            \
    {"seq-len", required_argument, NULL, CZ_OPT_SEQ_LEN},                          \
    {"micro-batch-size", required_argument, NULL, CZ_OPT_MICRO_BATCH_SIZE},        \
    {"micro-batches", required_argument, NULL, CZ_OPT_MICRO_BATCHES},              \
    {"pass-efficiency", required_argument, NULL, CZ_OPT_PASS_EFFICIENCY},          \
    {"gather-order", required_argument, NULL, CZ_OPT_GATHER_ORDER},                \
    {"deferred-updates", no_argument, NULL, CZ_OPT_DEFERRED_UPDATES},              \
    {"early-updates", no_argument, NULL, CZ_OPT_EARLY_UPDATES},                    \
    {"grad-reduce-in-fp32", no_argument, NULL, CZ_OPT_GRAD_REDUCE_IN_FP32}
/* clang-format on */
/* Applies one of CZ_CLI_SIM_OPTIONS to *o: 0, 2 after a usage error, 1 when opt is not one.
 * --iteration and each of the iteration's workload options turn the iteration on. */
int cz_cli_sim_apply(const char *cmd, int opt, const char *value, cz_sim_options *o);
/* Help lines of --calibration and, when sim, of CZ_CLI_SIM_OPTIONS. */
void cz_cli_device_help(FILE *f, int sim);
/* Makes cluster's device model the calibration file's (cz_cluster_calibrate); NULL path: nothing.
 * Prints "canzona <cmd>: <message>" on failure. Returns 0 or 1. */
int cz_cli_calibrate(const char *cmd, cz_cluster *cluster, const char *path);

/* getopt_long entries of the options that override the cluster file's sizes (and the bucket
 * size), for commands that take them without the other planning settings. */
/* clang-format off */
#define CZ_CLI_CLUSTER_SIZE_OPTIONS                                   \
    {"dp-size", required_argument, NULL, CZ_OPT_DP_SIZE},             \
    {"tp-size", required_argument, NULL, CZ_OPT_TP_SIZE},             \
    {"pp-size", required_argument, NULL, CZ_OPT_PP_SIZE},             \
    {"nodes", required_argument, NULL, CZ_OPT_NODES},                 \
    {"gpus-per-node", required_argument, NULL, CZ_OPT_GPUS_PER_NODE}, \
    {"bucket-size", required_argument, NULL, CZ_OPT_BUCKET_SIZE},     \
    {"ep-size", required_argument, NULL, CZ_OPT_EP_SIZE},             \
    {"etp-size", required_argument, NULL, CZ_OPT_ETP_SIZE}
/* clang-format on */

/* getopt_long entries for the options above, terminated by a zero entry; cz_cli_parse appends
 * them to a command's own table when its spec has settings. */
extern const struct option cz_cli_settings_options[];
#define CZ_CLI_SETTINGS_OPTION_COUNT 29

/* One subcommand's command line, for cz_cli_parse. */
typedef struct cz_cli_spec {
    const char *name;         /* "validate": messages start "canzona validate: " */
    const char *shortopts;    /* getopt's short options ("m:c:h") */
    const struct option *own; /* the command's long options, ending in a zero entry */
    void (*help)(FILE *f);    /* --help prints this to standard output */
    /* Applies one of the command's own options (getopt's value and optarg) to state: returns
     * 0, 2 after printing a usage error, or 1 when opt is not the command's (it then goes to
     * sizes and settings). Called first for every option, so a command may note a shared one. */
    int (*apply)(void *state, int opt, const char *value);
    void *state;
    cz_settings *settings;          /* not NULL: the planning settings options are accepted */
    struct cz_cluster_sizes *sizes; /* not NULL: the cluster-size options are accepted */
    int operands;                   /* >= 0: exactly this many operands; -1: the command checks */
    const char *operands_what;      /* in the usage error: "one plan file", "two plan files" */
} cz_cli_spec;

/* What cz_cli_parse returns when the command goes on (its operands are argv[optind ..]). */
#define CZ_CLI_CONTINUE (-1)

/* The prologue every getopt subcommand shares: reads argv with cz_cli_getopt over the command's
 * options (plus the settings or size options the spec asks for), prints the help on --help,
 * hands each option to spec->apply, then to the sizes and settings, and checks the operand
 * count ("canzona <cmd>: expected <what>, got N (see 'canzona <cmd> --help')"). Returns
 * CZ_CLI_CONTINUE, or the exit status: 0 after --help, 2 after a usage error. */
int cz_cli_parse(const cz_cli_spec *spec, int argc, char **argv);

/* Parses an integer option value in [lo, hi] into *out. Returns 0, or 2 after printing
 * "canzona <cmd>: --<opt> '<value>': expected an integer in [lo, hi]" to stderr. */
int cz_cli_parse_int(const char *cmd, const char *opt, const char *value, long lo, long hi,
                     int *out);

/* Applies one settings option to *s. Returns 0, or 2 after printing a usage error to stderr
 * prefixed with "canzona <cmd>: ". Returns 1 when `opt` is not a settings option. */
int cz_cli_settings_apply(const char *cmd, int opt, const char *value, cz_settings *s);

/* Prints the help lines of the settings options; time_limit_default is the command's own
 * --time-limit default, or 0 for the library's (cz_settings_init). */
void cz_cli_settings_help(FILE *f, double time_limit_default);

/* getopt_long for subcommand `cmd` with getopt's own messages replaced: an unknown option,
 * a missing or unexpected argument print "canzona <cmd>: ..." with the closest known long
 * option as a suggestion and a pointer to 'canzona <cmd> --help'; then '?' is returned. */
int cz_cli_getopt(const char *cmd, int argc, char **argv, const char *shortopts,
                  const struct option *longopts);

/* Applies one cluster-size option (--dp-size, --tp-size, --pp-size, --nodes, --gpus-per-node,
 * --bucket-size; part of cz_cli_settings_options) to *z. Returns 0, 2 after printing a usage error,
 * or 1 when `opt` is not a size option. */
int cz_cli_sizes_apply(const char *cmd, int opt, const char *value, struct cz_cluster_sizes *z);
/* Prints the help lines of the size options (cz_cli_settings_help includes them). */
void cz_cli_sizes_help(FILE *f);

/* Member accessors for the library's report objects (cz__plan_inspect_json, cz__plan_diff_json): a
 * missing member reads as 0 (numbers) or "?" (strings). */
double cz_cli_jnum(json_t *o, const char *key);
int cz_cli_jint(json_t *o, const char *key);
const char *cz_cli_jstr(json_t *o, const char *key);

/* Formats a cost in the unit with a readable scale ("12.3 ms", "4.56 TFLOP", "1.23 G elem");
 * an exact zero prints without decimals ("0 s", "0 FLOP", "0 elem"). */
const char *cz_cli_format_cost(char *buf, size_t n, double value, cz_cost_unit unit);
/* The atomic lower bound's structural terms (docs/PLANNER.md, "The lower bound") that exceed
 * base = max(total/GPUs, largest task), as ", NAME VALUE" for each, in buf ("" when none
 * does): the text `plan` and `inspect` append to "max(total/GPUs .., largest task ..". terms:
 * stage load, EP group, two tasks on one GPU, largest dense task with an EP group. */
const char *cz_cli_bound_terms(char *buf, size_t n, double base, const double terms[4],
                               cz_cost_unit unit);
/* Formats bytes as GiB/MiB. */
const char *cz_cli_format_bytes(char *buf, size_t n, double bytes);
/* A GiB figure without its unit ("12.34", or "1.234e+15" when huge). All three formatters fit
 * any double, unit included, in 32 bytes. */
const char *cz_cli_format_gib(char *buf, size_t n, double gib);

/* Usage checks shared by the commands that take --model and --cluster and no positional
 * argument: prints "canzona <cmd>: ..." and returns 2 on a stray argument or a missing path,
 * else 0. */
int cz_cli_require_inputs(const char *cmd, int argc, char **argv, int optind_now,
                          const char *model_path, const char *cluster_path);

/* Loads model and cluster (with the sizes given on the command line, which may be NULL, and
 * the calibration file, which may be NULL), printing any error as "canzona <cmd>: <message>".
 * Returns 0 or 1. */
int cz_cli_load_inputs(const char *cmd, const char *model_path, const char *cluster_path,
                       const struct cz_cluster_sizes *sizes, const char *calibration,
                       cz_model **model, cz_cluster **cluster);

/* The table commands (simulate, compare) build one plan per row: --layout split applies to
 * the rows it can take (greedy joint, alpha and anchored); the other rows keep the unified buffer.
 */
void cz_cli_row_layout(cz_settings *s);
/* simulate's and compare's table under --layout fsdp (fsdp_table.c): the job's ZeRO-1 plan
 * (when model is given), its fully sharded plan (given, or built from settings) and the FSDP2 +
 * torch.optim.Muon baseline, each with makespan over the lower bound and the simulated step.
 * Prints the table (JSON with json); 0, or 1 after printing the error prefixed by cmd. */
int cz_cli_fsdp_table(const char *cmd, const cz_model *model, const cz_cluster *cluster,
                      const cz_settings *settings, const cz_plan *given, int json);

#endif
