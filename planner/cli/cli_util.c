/* Planning options and value formatting shared by the CLI's subcommands. */
#include "cli_util.h"

#include "cz_types.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

const struct option cz_cli_settings_options[] = {
    {"optimizer", required_argument, NULL, CZ_OPT_OPTIMIZER},
    {"unit", required_argument, NULL, CZ_OPT_UNIT},
    {"dp", required_argument, NULL, CZ_OPT_DP},
    {"alpha", required_argument, NULL, CZ_OPT_ALPHA},
    {"alpha-loads", required_argument, NULL, CZ_OPT_ALPHA_LOADS},
    {"layerwise-order", required_argument, NULL, CZ_OPT_LAYERWISE_ORDER},
    {"tp", required_argument, NULL, CZ_OPT_TP},
    {"capacity", required_argument, NULL, CZ_OPT_CAPACITY},
    {"solver", required_argument, NULL, CZ_OPT_SOLVER},
    {"time-limit", required_argument, NULL, CZ_OPT_TIME_LIMIT},
    {"seed", required_argument, NULL, CZ_OPT_SEED},
    {"ns-steps", required_argument, NULL, CZ_OPT_NS_STEPS},
    {"ns-coeffs", required_argument, NULL, CZ_OPT_NS_COEFFS},
    {"max-precond-dim", required_argument, NULL, CZ_OPT_MAX_PRECOND_DIM},
    {"precondition-frequency", required_argument, NULL, CZ_OPT_PRECOND_FREQ},
    {"tpaware-time-limit", required_argument, NULL, CZ_OPT_TPAWARE_TIME_LIMIT},
    {"layout", required_argument, NULL, CZ_OPT_LAYOUT},
    {"split-blocks", no_argument, NULL, CZ_OPT_SPLIT_BLOCKS},
    {"coop", required_argument, NULL, CZ_OPT_COOP},
    {"replicate-size", required_argument, NULL, CZ_OPT_REPLICATE_SIZE},
    {"hsdp-compute", required_argument, NULL, CZ_OPT_HSDP_COMPUTE},
    CZ_CLI_CLUSTER_SIZE_OPTIONS,
    {NULL, 0, NULL, 0},
};
_Static_assert(sizeof cz_cli_settings_options / sizeof *cz_cli_settings_options ==
                   CZ_CLI_SETTINGS_OPTION_COUNT + 1,
               "CZ_CLI_SETTINGS_OPTION_COUNT must count cz_cli_settings_options");

static int bad_value(const char *cmd, const char *opt, const char *value, const char *expected)
{
    /* --dp and --tp name strategies; a number there is almost surely a size. */
    char *end = NULL;
    bool number = value && *value && (strtol(value, &end, 10), end && *end == '\0');
    bool strategy = !strcmp(opt, "dp") || !strcmp(opt, "tp");
    fprintf(stderr, "canzona %s: --%s '%s': expected %s%s%s%s\n", cmd, opt, value, expected,
            number && strategy ? " (a strategy name; for the " : "",
            number && strategy ? (opt[0] == 'd' ? "DP size use --dp-size" : "TP size use --tp-size")
                               : "",
            number && strategy ? ")" : "");
    return 2;
}

static int parse_double(const char *value, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_long(const char *value, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || end == value || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static const struct option cz_cli_size_options[] = {
    CZ_CLI_CLUSTER_SIZE_OPTIONS,
    {NULL, 0, NULL, 0},
};

/* The command's own options followed by the shared ones it takes; at most n entries with the
 * zero end, which every command's table fits (checked: a new option that overflows fails here
 * in any test of the command, not silently). */
static void options_table(struct option *out, size_t n, const cz_cli_spec *spec)
{
    const struct option *extra = spec->settings ? cz_cli_settings_options
                                 : spec->sizes  ? cz_cli_size_options
                                                : NULL;
    size_t k = 0;
    for (const struct option *o = spec->own; o->name; o++)
        if (k + 1 < n)
            out[k++] = *o;
    for (const struct option *o = extra; o && o->name; o++)
        if (k + 1 < n)
            out[k++] = *o;
    if (k + 1 >= n) {
        fprintf(stderr, "canzona %s: the option table is too long (a canzona bug)\n", spec->name);
        abort();
    }
    out[k] = (struct option){NULL, 0, NULL, 0};
}

/* A --ns-coeffs table sets the iteration count: --ns-steps, when given in any order, must
 * agree (the message is the planner's, which refuses the same for library callers). */
static int ns_steps_follow(const char *cmd, cz_settings *s, int steps_given)
{
    cz_ns_coeffs k;
    cz_error e;
    if (!s->ns_coeffs || cz__ns_coeffs_parse(s->ns_coeffs, &k, &e) != CZ_OK || k.rows < 2)
        return 0;
    if (!steps_given)
        s->ns_steps = k.rows;
    if (cz__ns_coeffs_check_steps(&k, s->ns_steps, s->ns_coeffs, &e) == CZ_OK)
        return 0;
    fprintf(stderr, "canzona %s: --ns-steps: %s\n", cmd, e.message);
    return 2;
}

int cz_cli_parse(const cz_cli_spec *spec, int argc, char **argv)
{
    struct option opts[64];
    options_table(opts, sizeof opts / sizeof *opts, spec);
    int opt, steps_given = 0;
    optind = 1;
    while ((opt = cz_cli_getopt(spec->name, argc, argv, spec->shortopts, opts)) != -1) {
        if (opt == 'h') {
            spec->help(stdout);
            return 0;
        }
        if (opt == '?')
            return 2;
        int r = spec->apply(spec->state, opt, optarg);
        if (r == 1 && spec->sizes)
            r = cz_cli_sizes_apply(spec->name, opt, optarg, spec->sizes);
        if (r == 1 && spec->settings) {
            r = cz_cli_settings_apply(spec->name, opt, optarg, spec->settings);
            steps_given |= opt == CZ_OPT_NS_STEPS;
        }
        if (r)
            return 2;
    }
    if (spec->settings && ns_steps_follow(spec->name, spec->settings, steps_given))
        return 2;
    if (spec->operands >= 0 && argc - optind != spec->operands) {
        fprintf(stderr, "canzona %s: expected %s, got %d (see 'canzona %s --help')\n", spec->name,
                spec->operands_what, argc - optind, spec->name);
        return 2;
    }
    return CZ_CLI_CONTINUE;
}

int cz_cli_parse_int(const char *cmd, const char *opt, const char *value, long lo, long hi,
                     int *out)
{
    long v = 0;
    if (parse_long(value, lo, hi, &v)) {
        fprintf(stderr, "canzona %s: --%s '%s': expected an integer in [%ld, %ld]\n", cmd, opt,
                value, lo, hi);
        return 2;
    }
    *out = (int)v;
    return 0;
}

int cz_cli_settings_apply(const char *cmd, int opt, const char *value, cz_settings *s)
{
    double d = 0;
    long l = 0;
    switch (opt) {
    case CZ_OPT_OPTIMIZER:
        return cz_optimizer_parse(value, &s->optimizer)
                   ? bad_value(cmd, "optimizer", value, "muon, soap, shampoo or adamw")
                   : 0;
    case CZ_OPT_UNIT:
        return cz_unit_parse(value, &s->unit)
                   ? bad_value(cmd, "unit", value, "numel, flops or time")
                   : 0;
    case CZ_OPT_DP:
        return cz_dp_strategy_parse(value, &s->dp)
                   ? bad_value(cmd, "dp", value,
                               "joint, alpha, tpaware, anchored, even or layerwise")
                   : 0;
    case CZ_OPT_ALPHA:
        if (parse_double(value, 0.0, 1.0, &d))
            return bad_value(cmd, "alpha", value, "a number in [0, 1]");
        s->alpha = d;
        return 0;
    case CZ_OPT_ALPHA_LOADS:
        if (!strcmp(value, "cost"))
            s->alpha_numel_loads = 0;
        else if (!strcmp(value, "numel"))
            s->alpha_numel_loads = 1;
        else
            return bad_value(cmd, "alpha-loads", value, "cost or numel");
        return 0;
    case CZ_OPT_LAYERWISE_ORDER:
        return cz_layerwise_order_parse(value, &s->layerwise_order)
                   ? bad_value(cmd, "layerwise-order", value,
                               "megatron, megatron-aug26, pingpong or lpt")
                   : 0;
    case CZ_OPT_TP:
        return cz_tp_strategy_parse(value, &s->tp)
                   ? bad_value(cmd, "tp", value, "sc, none, single, slot or rollback")
                   : 0;
    case CZ_OPT_CAPACITY:
        if (parse_double(value, 0.0, 1e300, &d))
            return bad_value(cmd, "capacity", value, "a non-negative number (0 = automatic)");
        s->capacity = d;
        return 0;
    case CZ_OPT_SOLVER:
        return cz_solver_parse(value, &s->solver) ? bad_value(cmd, "solver", value, "greedy or ilp")
                                                  : 0;
    case CZ_OPT_TIME_LIMIT:
        if (parse_double(value, 0.001, 1e6, &d))
            return bad_value(cmd, "time-limit", value, "a positive number of seconds");
        s->time_limit_s = d;
        return 0;
    case CZ_OPT_LAYOUT:
        return cz_layout_parse(value, &s->layout)
                   ? bad_value(cmd, "layout", value,
                               "unified (one gradient buffer), split (matrix parameters in a "
                               "buffer of their own, as the paper's reference code) or fsdp "
                               "(fully sharded, PyTorch FSDP2)")
                   : 0;
    case CZ_OPT_SPLIT_BLOCKS:
        s->split_blocks = 1;
        return 0;
    case CZ_OPT_REPLICATE_SIZE: {
        return cz_cli_parse_int(cmd, "replicate-size", value, 1, 1 << 20, &s->replicate);
    }
    case CZ_OPT_HSDP_COMPUTE:
        return cz_hsdp_compute_parse(value, &s->hsdp)
                   ? bad_value(
                         cmd, "hsdp-compute", value,
                         "redundant (every replica updates every matrix) or partitioned "
                         "(each matrix on one replica, its update sent to the others) or auto (the "
                         "shorter simulated step)")
                   : 0;
    case CZ_OPT_COOP:
        return cz_coop_parse(value, &s->coop)
                   ? bad_value(cmd, "coop", value,
                               "off, auto or a width from 2 to 1024 that divides the TP size")
                   : 0;
    case CZ_OPT_TPAWARE_TIME_LIMIT:
        if (parse_double(value, 0.001, 1e6, &d))
            return bad_value(cmd, "tpaware-time-limit", value, "CPU seconds from 0.001 to 1e6");
        s->tpaware_time_limit_s = d;
        return 0;
    case CZ_OPT_SEED:
        if (parse_long(value, 0, 0x7fffffffL, &l))
            return bad_value(cmd, "seed", value, "a non-negative integer");
        s->seed = (uint64_t)l;
        return 0;
    case CZ_OPT_NS_STEPS:
        if (parse_long(value, 1, 100, &l))
            return bad_value(cmd, "ns-steps", value, "an integer in [1, 100]");
        s->ns_steps = (int)l;
        return 0;
    case CZ_OPT_NS_COEFFS: {
        cz_ns_coeffs k;
        cz_error e;
        if (cz__ns_coeffs_parse(value, &k, &e) != CZ_OK) {
            fprintf(stderr, "canzona %s: --ns-coeffs: %s\n", cmd, e.message);
            return 2;
        }
        s->ns_coeffs = value; /* argv's: alive until the command ends */
        return 0;
    }
    case CZ_OPT_MAX_PRECOND_DIM:
        if (parse_long(value, 1, 1L << 30, &l))
            return bad_value(cmd, "max-precond-dim", value, "a positive integer");
        s->max_precond_dim = (int)l;
        return 0;
    case CZ_OPT_PRECOND_FREQ:
        if (parse_long(value, 1, 1L << 30, &l))
            return bad_value(cmd, "precondition-frequency", value, "a positive integer");
        s->precondition_frequency = (int)l;
        return 0;
    default:
        return 1;
    }
}

int cz_cli_sizes_apply(const char *cmd, int opt, const char *value, cz_cluster_sizes *z)
{
    if (opt == CZ_OPT_BUCKET_SIZE) {
        long v = 0;
        if (!strcmp(value, "paper"))
            z->bucket_size = CZ_BUCKETS_PAPER;
        else if (!strcmp(value, "megatron"))
            z->bucket_size = CZ_BUCKETS_MEGATRON;
        else if (parse_long(value, 1, 1L << 40, &v) == 0)
            z->bucket_size = v;
        else
            return bad_value(cmd, "bucket-size", value,
                             "a number of elements, paper (4e8) or megatron (max(4e7, 1e6 x DP))");
        return 0;
    }
    static const struct {
        int opt;
        const char *name;
    } names[] = {{CZ_OPT_DP_SIZE, "dp-size"},
                 {CZ_OPT_TP_SIZE, "tp-size"},
                 {CZ_OPT_PP_SIZE, "pp-size"},
                 {CZ_OPT_NODES, "nodes"},
                 {CZ_OPT_GPUS_PER_NODE, "gpus-per-node"},
                 {CZ_OPT_EP_SIZE, "ep-size"},
                 {CZ_OPT_ETP_SIZE, "etp-size"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (names[i].opt != opt)
            continue;
        int v = 0;
        if (cz_cli_parse_int(cmd, names[i].name, value, 1, 1 << 20, &v))
            return 2;
        int *field = opt == CZ_OPT_DP_SIZE    ? &z->dp
                     : opt == CZ_OPT_TP_SIZE  ? &z->tp
                     : opt == CZ_OPT_PP_SIZE  ? &z->pp
                     : opt == CZ_OPT_NODES    ? &z->nodes
                     : opt == CZ_OPT_EP_SIZE  ? &z->ep
                     : opt == CZ_OPT_ETP_SIZE ? &z->etp
                                              : &z->gpus_per_node;
        *field = v;
        return 0;
    }
    return 1;
}

void cz_cli_settings_help(FILE *f, double time_limit_default)
{
    cz_settings d;
    cz_settings_init(&d);
    if (!(time_limit_default > 0))
        time_limit_default = d.time_limit_s;
    fprintf(
        f,
        "planning settings:\n"
        "  --optimizer NAME      muon (default), soap, shampoo or adamw\n"
        "  --unit NAME           cost unit for loads: time (default; seconds on the cluster's\n"
        "                        device), flops, or numel (elements)\n"
        "  --dp NAME             DP strategy: joint (default; each rank's cuts chosen so that\n"
        "                        its matrices pack onto its TP (or ETP) slots within the\n"
        "                        least target, dense and expert buffers for each other; never\n"
        "                        worse than alpha), alpha (the paper's alpha-balanced cut),\n"
        "                        tpaware (alpha refined for the per-GPU makespan), anchored,\n"
        "                        even (ZeRO-1 slices, fragments parameters), layerwise (whole\n"
        "                        parameters dealt to ranks, all-reduce)\n"
        "  --alpha A             alpha in [0, 1] (default 1): 0 = even communication slices,\n"
        "                        1 = global compute balance\n"
        "  --alpha-loads KIND    count alpha's running loads in the cost unit (cost, default)\n"
        "                        or in elements (numel, as the paper's reference code)\n"
        "  --layerwise-order O   for --dp layerwise: megatron (default; Megatron-LM's first\n"
        "                        rule, Jan 2026: ascending TP-local size, ping-pong over DP\n"
        "                        ranks, gradients all-reduced), megatron-aug26 (its current\n"
        "                        rule: matrices only, backprop-order buckets, costliest\n"
        "                        Newton-Schulz first to the least-loaded rank, gradients\n"
        "                        reduce-scattered, other parameters under ZeRO-1), pingpong\n"
        "                        (forward order, ping-pong; not Megatron's) or lpt (largest\n"
        "                        first to the least-loaded rank)\n"
        "  --layout NAME         gradient buffer layout: unified (default; every parameter in\n"
        "                        one buffer, partitioned by --dp) or split (the paper's\n"
        "                        reference code: matrix parameters in a buffer of their own,\n"
        "                        partitioned by --dp joint, alpha or anchored; elementwise\n"
        "                        parameters in an evenly sliced ZeRO-1 buffer); in simulate's\n"
        "                        and compare's tables it applies to the joint, alpha and\n"
        "                        anchored rows; or fsdp (fully sharded as PyTorch FSDP2's\n"
        "                        fully_shard: every parameter Shard(0) over DP, no buckets;\n"
        "                        each matrix owned by one GPU of its stage's DP x TP shard\n"
        "                        group, chosen by cost; plan file canzona.plan/4)\n"
        "  --replicate-size R    HSDP under --layout fsdp: the DP ranks are R replicas of DP/R\n"
        "                        shard ranks (torch's mesh (R, DP/R), replicas outermost);\n"
        "                        FSDP2 shards over the shard ranks and the job averages the\n"
        "                        gradients over the replicas. Default 1 (plain FSDP)\n"
        "  --hsdp-compute MODE   with --replicate-size > 1: redundant (default; every replica\n"
        "                        updates every matrix over its own GPUs, no exchange between\n"
        "                        replicas) or partitioned (each matrix owned by one GPU of the\n"
        "                        whole stage, its update's shards sent to every replica) or\n"
        "                        auto (both planned and simulated on the cluster, the one with\n"
        "                        the shorter optimizer step kept; the plan records which)\n"
        "  --tp NAME             TP micro-group strategy: rollback (default; greedy rollback),\n"
        "                        slot, single, none, or sc (synchronous compute baseline)\n"
        "  --split-blocks        schedule every block of a blocked matrix (fused Q/K/V, gate/up)\n"
        "                        as its own TP task, so blocks of one matrix may run on\n"
        "                        different TP ranks (Muon; default: whole matrices)\n"
        "  --coop MODE           cooperative Newton-Schulz (Muon, --tp rollback): off (default),\n"
        "                        auto (the cost model splits a task over k TP ranks where that\n"
        "                        shortens the makespan, the all-reduces its pipelined Gram\n"
        "                        panels leave exposed included) or a width K (every task\n"
        "                        whose long side allows it runs on K ranks); implies\n"
        "                        --split-blocks\n"
        "  --capacity C          micro-group capacity in the cost unit; 0 (default) = automatic:\n"
        "                        max(largest task, rank's matrix cost / (4 * tp)) for sc\n"
        "                        and slot; rollback keeps the most groups (4, 3, 2 or 1) whose\n"
        "                        makespan is within 5%% of the best (docs/PLANNER.md)\n"
        "  --solver NAME         greedy (default) or ilp (GLPK; falls back to greedy on time-out)\n"
        "  --time-limit S        ILP time limit in seconds (default %g)\n"
        "  --tpaware-time-limit S  limit of the --dp tpaware search in CPU seconds\n"
        "                        (default %g); the best cuts found by then are kept\n"
        "  --seed N              recorded in the plan (ties are broken by parameter id)\n"
        "  --ns-steps N          Newton-Schulz iterations for Muon's cost (default 5, or the\n"
        "                        row count of a --ns-coeffs table, which it must then equal)\n"
        "  --ns-coeffs SET       Muon's Newton-Schulz coefficients: jordan (default), cubic,\n"
        "                        polar_express (5 rows) or rows 'a,b,c;a,b,c;...', one per\n"
        "                        iteration; recorded in the plan unless jordan\n"
        "  --max-precond-dim N   SOAP/Shampoo: largest side with a preconditioner (default 10000)\n"
        "  --precondition-frequency N  SOAP/Shampoo eigenbasis refresh period (default 10)\n",
        time_limit_default, d.tpaware_time_limit_s);
    cz_cli_sizes_help(f);
}

/* Edit distance (insertions, deletions, substitutions and swaps of neighbours) between a and
 * the first n characters of b; option names are short, longer ones are not compared. */
static size_t edit_distance(const char *a, const char *b, size_t n)
{
    size_t la = strlen(a), d[32][32];
    if (la >= 32 || n >= 32)
        return (size_t)-1;
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= n; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= n; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            best = d[i - 1][j] + 1 < best ? d[i - 1][j] + 1 : best;
            best = d[i][j - 1] + 1 < best ? d[i][j - 1] + 1 : best;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][n];
}

/* Prints why a long option is unknown: an abbreviation of several options lists them;
 * otherwise the closest option by edit distance is suggested when it is close enough to be a
 * likely typo. */
static void unknown_long(FILE *f, const char *cmd, const char *name, size_t n,
                         const struct option *longopts)
{
    int prefixed = 0;
    for (const struct option *o = longopts; o->name; o++)
        prefixed += n > 0 && !strncmp(o->name, name, n);
    if (prefixed > 1) {
        fprintf(f, "canzona %s: option '--%.*s' is ambiguous; possibilities:", cmd, (int)n, name);
        for (const struct option *o = longopts; o->name; o++)
            if (!strncmp(o->name, name, n))
                fprintf(f, " '--%s'", o->name);
        return;
    }
    fprintf(f, "canzona %s: unrecognized option '--%.*s'", cmd, (int)n, name);
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (const struct option *o = longopts; o->name; o++) {
        size_t d = edit_distance(o->name, name, n);
        if (d < best_d) {
            best_d = d;
            best = o->name;
        }
    }
    /* A name of one or two letters is too short to guess from; the help lists them all. */
    size_t max_d = n <= 2 ? 0 : (n <= 5 ? 1 : 2 + (n > 12));
    if (best && best_d <= max_d)
        fprintf(f, "; did you mean '--%s'?", best);
}

int cz_cli_getopt(const char *cmd, int argc, char **argv, const char *shortopts,
                  const struct option *longopts)
{
    char spec[128];
    /* A leading ':' makes getopt tell a missing argument (':') from an unknown option ('?'). */
    snprintf(spec, sizeof spec, ":%s", shortopts);
    opterr = 0;
    int c = getopt_long(argc, argv, spec, longopts, NULL);
    if (c != '?' && c != ':')
        return c;
    /* getopt has stepped past a long option it refused; a refused short option is optopt. */
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    int dashes = !strncmp(arg, "--", 2);
    const char *name = dashes ? arg + 2 : arg;
    size_t n = strcspn(name, "=");
    int is_long = dashes && optopt == 0;
    for (const struct option *o = longopts; dashes && !is_long && o->name; o++)
        is_long = o->val == optopt && !strncmp(o->name, name, n);
    if (is_long) {
        if (c == ':')
            fprintf(stderr, "canzona %s: option '--%.*s' requires an argument", cmd, (int)n, name);
        else if (optopt != 0)
            fprintf(stderr, "canzona %s: option '--%.*s' takes no argument", cmd, (int)n, name);
        else
            unknown_long(stderr, cmd, name, n, longopts);
    } else if (c == ':') {
        fprintf(stderr, "canzona %s: option '-%c' requires an argument", cmd, optopt);
    } else {
        fprintf(stderr, "canzona %s: unrecognized option '-%c'", cmd, optopt);
    }
    fprintf(stderr, " (see 'canzona %s --help')\n", cmd);
    return '?';
}

void cz_cli_sizes_help(FILE *f)
{
    fprintf(f,
            "\n"
            "cluster sizes (override the cluster file; the plan records the cluster so made):\n"
            "  --tp-size N           tensor-parallel size\n"
            "  --pp-size N           pipeline-parallel size\n"
            "  --dp-size N           data-parallel size; default: GPUs / (TP x PP), as\n"
            "                        Megatron-LM derives it\n"
            "  --nodes N             number of nodes: GPUs = N x GPUs per node\n"
            "  --gpus-per-node N     GPUs per node (also which traffic crosses nodes)\n"
            "  --ep-size N           expert model-parallel size (MoE models; default 1): EP N\n"
            "                        divides every MoE layer's experts, and expert parameters\n"
            "                        get a buffer of their own over the expert-DP group\n"
            "  --etp-size N          expert tensor-parallel size (default: the TP size);\n"
            "                        ETP x EP must divide TP x DP\n"
            "  --bucket-size B       gradient bucket size in elements, or a preset: paper\n"
            "                        (4e8, the paper's scripts) or megatron (Megatron's\n"
            "                        default max(4e7, 1e6 x DP), also when the file sets one)\n");
}

double cz_cli_jnum(json_t *o, const char *key)
{
    return json_number_value(json_object_get(o, key));
}

int cz_cli_jint(json_t *o, const char *key)
{
    return (int)json_integer_value(json_object_get(o, key));
}

const char *cz_cli_jstr(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "?";
}

/* Values this large print in exponent form: "%.3f" of 1e300 is 300 digits, which a summary
 * column's buffer would cut before the unit. */
#define CZ_CLI_PLAIN_MAX 1e9

const char *cz_cli_format_cost(char *buf, size_t n, double v, cz_cost_unit unit)
{
    static const char *const si[] = {"", "K", "M", "G", "T", "P", "E"};
    /* "0.000 us" reads as a rounded small value; a true zero is an empty rank or no change. */
    if (v == 0.0) {
        snprintf(buf, n, "0 %s",
                 unit == CZ_UNIT_TIME ? "s" : (unit == CZ_UNIT_FLOPS ? "FLOP" : "elem"));
        return buf;
    }
    const char *fmt = fabs(v) < CZ_CLI_PLAIN_MAX ? "%.3f %s%s" : "%.3e %s%s";
    if (unit == CZ_UNIT_TIME) {
        if (v >= 1.0 || !(fabs(v) < 1.0))
            snprintf(buf, n, fmt, v, "", "s");
        else if (v >= 1e-3)
            snprintf(buf, n, "%.3f ms", v * 1e3);
        else
            snprintf(buf, n, "%.3f us", v * 1e6);
        return buf;
    }
    int k = 0;
    while (fabs(v) >= 1000.0 && k < 6) {
        v /= 1000.0;
        k++;
    }
    fmt = fabs(v) < CZ_CLI_PLAIN_MAX ? "%.3f %s%s" : "%.3e %s%s";
    snprintf(buf, n, fmt, v, si[k], unit == CZ_UNIT_FLOPS ? "FLOP" : "elem");
    return buf;
}

const char *cz_cli_format_bytes(char *buf, size_t n, double bytes)
{
    const double gib = 1024.0 * 1024 * 1024;
    if (!(fabs(bytes) < CZ_CLI_PLAIN_MAX * gib))
        snprintf(buf, n, "%.3e GiB", bytes / gib);
    else if (bytes >= gib)
        snprintf(buf, n, "%.2f GiB", bytes / gib);
    else
        snprintf(buf, n, "%.2f MiB", bytes / (1024.0 * 1024));
    return buf;
}

const char *cz_cli_format_gib(char *buf, size_t n, double gib)
{
    snprintf(buf, n, fabs(gib) < CZ_CLI_PLAIN_MAX ? "%.2f" : "%.3e", gib);
    return buf;
}

int cz_cli_require_inputs(const char *cmd, int argc, char **argv, int optind_now,
                          const char *model_path, const char *cluster_path)
{
    if (optind_now < argc) {
        fprintf(stderr, "canzona %s: unexpected argument '%s' (see 'canzona %s --help')\n", cmd,
                argv[optind_now], cmd);
        return 2;
    }
    if (!model_path || !cluster_path) {
        fprintf(stderr,
                "canzona %s: --model and --cluster are required (see 'canzona %s --help')\n", cmd,
                cmd);
        return 2;
    }
    return 0;
}

int cz_cli_load_inputs(const char *cmd, const char *model_path, const char *cluster_path,
                       const cz_cluster_sizes *sizes, const char *calibration, cz_model **model,
                       cz_cluster **cluster)
{
    cz_error err;
    cz_error_clear(&err);
    *model = NULL;
    *cluster = NULL;
    int rc;
    if ((rc = cz_model_load(model, model_path, &err)) != CZ_OK ||
        (rc = cz__cluster_load_sized(cluster, cluster_path, sizes, &err)) != CZ_OK)
        goto done;
    if (calibration)
        rc = cz_cluster_calibrate(*cluster, calibration, &err);
done:
    if (rc == CZ_OK)
        return 0;
    fprintf(stderr, "canzona %s: %s\n", cmd, err.message);
    cz_model_free(*model);
    cz_cluster_free(*cluster);
    *model = NULL;
    *cluster = NULL;
    return 1;
}

void cz_cli_row_layout(cz_settings *s)
{
    if ((s->dp != CZ_DP_ALPHA && s->dp != CZ_DP_ANCHORED && s->dp != CZ_DP_JOINT) ||
        s->solver != CZ_SOLVER_GREEDY)
        s->layout = CZ_LAYOUT_UNIFIED;
}

int cz_cli_sim_apply(const char *cmd, int opt, const char *value, cz_sim_options *o)
{
    switch (opt) {
    case CZ_OPT_OVERLAP_PARAM_GATHER:
        o->overlap_param_gather = 1;
        return 0;
    case CZ_OPT_OVERLAP_GRAD_REDUCE:
        o->overlap_grad_reduce = 1;
        return 0;
    case CZ_OPT_MUON_NS_BATCH_SIZE:
        return cz_cli_parse_int(cmd, "muon-ns-batch-size", value, 1, 65536, &o->muon_ns_batch_size);
    case CZ_OPT_ITERATION:
        o->iteration = 1;
        return 0;
    case CZ_OPT_SEQ_LEN:
        o->iteration = 1;
        return cz_cli_parse_int(cmd, "seq-len", value, 1, 10485760, &o->seq_len);
    case CZ_OPT_MICRO_BATCH_SIZE:
        o->iteration = 1;
        return cz_cli_parse_int(cmd, "micro-batch-size", value, 1, 65536, &o->micro_batch_size);
    case CZ_OPT_MICRO_BATCHES:
        o->iteration = 1;
        return cz_cli_parse_int(cmd, "micro-batches", value, 1, 65536, &o->micro_batches);
    case CZ_OPT_PASS_EFFICIENCY:
        o->iteration = 1;
        if (parse_double(value, 0.0, 1.0, &o->pass_efficiency) || !(o->pass_efficiency > 0.0)) {
            fprintf(stderr,
                    "canzona %s: --pass-efficiency '%s': expected a fraction of the GEMM rate "
                    "in (0, 1], e.g. 0.6\n",
                    cmd, value);
            return 2;
        }
        return 0;
    case CZ_OPT_GATHER_ORDER:
        o->iteration = 1;
        if (!strcmp(value, "forward") || !strcmp(value, "ready")) {
            o->gather_forward_order = value[0] == 'f';
            return 0;
        }
        fprintf(stderr, "canzona %s: --gather-order '%s': expected forward or ready\n", cmd, value);
        return 2;
    case CZ_OPT_DEFERRED_UPDATES:
        o->iteration = 1;
        o->deferred_updates = 1;
        return 0;
    case CZ_OPT_EARLY_UPDATES:
        o->iteration = 1;
        o->deferred_updates = 0;
        return 0;
    case CZ_OPT_GRAD_REDUCE_IN_FP32:
        o->grad_reduce_in_fp32 = 1;
        return 0;
    }
    return 1;
}

void cz_cli_device_help(FILE *f, int sim)
{
    fprintf(f, "device model (docs/SIMULATOR.md, \"The device model\"):\n"
               "      --calibration FILE  the GPU's measurements (canzona.calibration/1 or /2,\n"
               "                        as canzona-bench calibrate writes them): GEMM rates,\n"
               "                        launch and Newton-Schulz costs, collectives; costs and\n"
               "                        simulation use them, and a plan records the file's hash\n");
    if (!sim)
        return;
    fprintf(f, "      --overlap-param-gather\n"
               "                        Megatron's overlap of the parameter all-gather with the\n"
               "                        next forward pass: only the bucket the forward pass needs\n"
               "                        first is exposed\n"
               "      --overlap-grad-reduce\n"
               "                        Megatron's overlap of the gradient reduce-scatter with\n"
               "                        the backward pass: only the last bucket filled is exposed\n"
               "      --muon-ns-batch-size N\n"
               "                        layer-sharded Muon: same-shape matrices per batched\n"
               "                        Newton-Schulz on a home (Megatron's option; default 1)\n"
               "      --grad-reduce-in-fp32\n"
               "                        a bf16 model's gradients reduce-scattered in fp32 (the\n"
               "                        executor's option, Megatron's): twice the bytes; default\n"
               "                        in bf16, as the executor's default (docs/SIMULATOR.md,\n"
               "                        \"What goes on the wire\")\n"
               "the iteration (docs/SIMULATOR.md, \"The iteration\"; any of these turns it on):\n"
               "      --iteration       also estimate the training iteration: forward and\n"
               "                        backward from each matrix's FLOPs (2 x elements x tokens\n"
               "                        forward, backward twice that, causal attention for\n"
               "                        linear_qkv), with the step after the passes and with\n"
               "                        the step overlapped: each bucket reduced, updated and\n"
               "                        gathered as soon as the last backward has passed it,\n"
               "                        the next forward waiting per bucket (dense models)\n"
               "      --seq-len N       tokens per sequence (default 4096)\n"
               "      --micro-batch-size N\n"
               "                        sequences per micro-batch (default 1)\n"
               "      --micro-batches N micro-batches per iteration, gradient accumulation\n"
               "                        (default 8; only the last one's backward can hide the\n"
               "                        step)\n"
               "      --pass-efficiency E\n"
               "                        the passes' rate as a fraction of the bf16 GEMM rate\n"
               "                        (the calibration's or device kind's, else the cluster's\n"
               "                        matmul_tflops), in (0, 1]; default 0.6\n"
               "      --gather-order ORDER\n"
               "                        with overlap, the order of the parameter all-gathers on\n"
               "                        the DP link: forward (default; after the ready reduce-\n"
               "                        scatters, the one the next forward needs first) or\n"
               "                        ready (every collective as it becomes ready)\n"
               "      --deferred-updates\n"
               "                        with overlap, every update waits for every bucket's\n"
               "                        reduce-scatter and every all-gather for every update:\n"
               "                        the executor's bucket-wise step without early updates\n"
               "                        (the default, as the executor's: its NaN/Inf check on)\n"
               "      --early-updates   with overlap, each micro-group as soon as its buckets\n"
               "                        are reduced, each bucket's all-gather once it is\n"
               "                        updated: the executor's early updates (NaN/Inf check\n"
               "                        and clipping off)\n");
}

int cz_cli_calibrate(const char *cmd, cz_cluster *cluster, const char *path)
{
    cz_error err;
    cz_error_clear(&err);
    if (!path)
        return 0;
    if (cz_cluster_calibrate(cluster, path, &err) == CZ_OK)
        return 0;
    fprintf(stderr, "canzona %s: %s\n", cmd, err.message);
    return 1;
}

const char *cz_cli_bound_terms(char *buf, size_t n, double base, const double terms[4],
                               cz_cost_unit unit)
{
    static const char *const names[4] = {"stage load/GPUs", "EP group's experts/GPUs",
                                         "two tasks on one GPU", "largest dense task + EP group"};
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < 4 && used < n; k++) {
        if (!(terms[k] > base * (1.0 + 1e-12)))
            continue;
        char v[64];
        int w = snprintf(buf + used, n - used, ", %s %s", names[k],
                         cz_cli_format_cost(v, sizeof v, terms[k], unit));
        if (w < 0)
            break;
        used += (size_t)w < n - used ? (size_t)w : n - used - 1;
    }
    return buf;
}
