/* canzona compare — builds every DP x TP strategy that makes sense for one model and cluster and
 * prints balance, simulated step time and planning time in one table. */
#include "cli_util.h"
#include "commands.h"
#include "cz_types.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { OPT_REPEATS = 2000, OPT_PROGRESS };

/* A build that takes longer than this is not repeated for the median: its time is dominated
 * by the work, not by noise, and repeating it would multiply a slow row (an ILP solve up to
 * its time limit) for nothing. */
#define CMP_REPEAT_MAX_S 1.0

/* Every row runs the ILP phases it has within this, unless --time-limit says otherwise: the
 * library's 60 s per phase would make one table take minutes. */
#define COMPARE_TIME_LIMIT_S 10.0

static void compare_help(FILE *f)
{
    fprintf(f,
            "usage: canzona compare --model MODEL.json --cluster CLUSTER.json [--json]\n"
            "                       [--repeats N] [planning settings]\n"
            "\n"
            "Plans the model on the cluster with every strategy combination and prints one row\n"
            "each: even+sc, layerwise+sc with Megatron's first and current (aug26) rules in\n"
            "each of Megatron's Muon TP modes (duplicated, blockwise*, distributed,\n"
            "layer_sharded; * = NOT the same update: each TP shard orthogonalized alone),\n"
            "anchored x {sc, none, single,\n"
            "slot, rollback},\n"
            "alpha (cost loads) x the same, alpha (element loads, as the reference code) x the\n"
            "same, tpaware+rollback, joint+rollback (the default), and alpha+rollback with the\n"
            "ILP solver. Rows whose\n"
            "strategy or solver this build does not support are skipped with a note.\n"
            "Columns: DP imbalance (max/mean DP load), TP makespan / lower bound, the simulated\n"
            "step and optimizer-step latency in ms (canzona simulate's model, docs/SIMULATOR.md),\n"
            "and the planning time: wall clock, median of N builds (one build for the ILP\n"
            "row and for any row whose first build takes over 1 s). Below the table, a\n"
            "recommendation: the row with the fastest simulated step, how much faster it is\n"
            "than the next best row and than the even+sc (ZeRO-1) baseline; blockwise Muon\n"
            "rows are never recommended (they compute a different update).\n"
            "With --iteration (or its workload options), the columns iter ms, ovl-iter ms and\n"
            "ovl x: the training iteration with the step after the passes and overlapped\n"
            "bucket by bucket (docs/SIMULATOR.md, \"The iteration\"; '-' where not modelled).\n"
            "--dp, --tp, --alpha-loads and --solver are set per row; the other planning settings\n"
            "apply to every row.\n"
            "With --layout fsdp the table is instead the job as canzona's ZeRO-1 plan, as a fully\n"
            "sharded plan and as FSDP2 with torch.optim.Muon by hand, side by side (canzona\n"
            "simulate --layout fsdp's table).\n"
            "\n"
            "options:\n"
            "  -m, --model FILE      model description (canzona.model/1)\n"
            "  -c, --cluster FILE    cluster shape (canzona.cluster/1)\n"
            "      --repeats N       builds per row for the planning time (default 3, 1 .. 99)\n"
            "      --progress        report each row on standard error as it starts (the\n"
            "                        default when standard error is a terminal)\n"
            "      --json            print JSON instead of a table\n"
            "  -h, --help            this help\n");
    cz_cli_device_help(f, 1);
    cz_cli_settings_help(f, COMPARE_TIME_LIMIT_S);
}

typedef struct cmp_row {
    char label[48];
    cz_dp_strategy dp;
    cz_tp_strategy tp;
    int numel_loads;
    cz_solver solver;
    cz_layerwise_order order;
    cz_muon_tp_mode muon_tp;
    int skipped;
    char note[1024];
    double dp_imbalance, mk_over_lb, step_s, optimizer_s, plan_s;
    int builds; /* builds the planning time is the median of */
    /* With the iteration: the simulation's scalars (its arrays are not kept: NULL), which
     * cz__sim_iteration_json reads. */
    cz_sim_result iter;
} cmp_row;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Fills the table of combinations to try. Returns the count. */
static int rows_init(cmp_row *rows)
{
    static const cz_tp_strategy tps[5] = {CZ_TP_SC, CZ_TP_NONE, CZ_TP_SINGLE, CZ_TP_SLOT,
                                          CZ_TP_ROLLBACK};
    int n = 0;
    rows[n++] = (cmp_row){.label = "even+sc", .dp = CZ_DP_EVEN, .tp = CZ_TP_SC};
    /* Megatron's layer-wise rules, each in Megatron's three Muon TP modes; "*" marks blockwise,
     * which orthogonalizes each TP shard alone: a different update. */
    static const cz_layerwise_order orders[2] = {CZ_LAYERWISE_MEGATRON,
                                                 CZ_LAYERWISE_MEGATRON_AUG26};
    static const char *const mode_tag[4] = {"", "(blockwise*)", "(distributed)", "(layer_sharded)"};
    for (int o = 0; o < 2; o++)
        for (int k = 0; k < 4; k++) {
            cmp_row *r = &rows[n++];
            *r = (cmp_row){.dp = CZ_DP_LAYERWISE,
                           .tp = CZ_TP_SC,
                           .order = orders[o],
                           .muon_tp = (cz_muon_tp_mode)k};
            snprintf(r->label, sizeof r->label, "layerwise%s+sc%s", o ? "(aug26)" : "",
                     mode_tag[k]);
        }
    for (int v = 0; v < 3; v++) {
        for (int k = 0; k < 5; k++) {
            cmp_row *r = &rows[n++];
            *r = (cmp_row){
                .dp = v == 0 ? CZ_DP_ANCHORED : CZ_DP_ALPHA, .tp = tps[k], .numel_loads = v == 2};
            snprintf(r->label, sizeof r->label, "%s%s+%s", v == 0 ? "anchored" : "alpha",
                     v == 0 ? "" : (v == 1 ? "(cost)" : "(numel)"), cz_tp_strategy_name(tps[k]));
        }
    }
    rows[n++] = (cmp_row){.label = "tpaware+rollback", .dp = CZ_DP_TPAWARE, .tp = CZ_TP_ROLLBACK};
    /* The default plan, beside the paper's alpha rows above. */
    rows[n++] = (cmp_row){.label = "joint+rollback", .dp = CZ_DP_JOINT, .tp = CZ_TP_ROLLBACK};
    rows[n++] = (cmp_row){.label = "alpha+rollback(ilp)",
                          .dp = CZ_DP_ALPHA,
                          .tp = CZ_TP_ROLLBACK,
                          .solver = CZ_SOLVER_ILP};
    return n;
}

/* Builds and simulates one row. Returns 0 (row filled or skipped with a note) or 1. */
static int row_run(cmp_row *r, const cz_model *model, const cz_cluster *cluster,
                   const cz_settings *base, const cz_sim_options *simbase, int repeats)
{
    cz_settings s = *base;
    s.dp = r->dp;
    s.tp = r->tp;
    s.alpha_numel_loads = r->numel_loads;
    s.solver = r->solver;
    if (r->dp == CZ_DP_LAYERWISE)
        s.layerwise_order = r->order;
    cz_cli_row_layout(&s);
    cz_sim_options simopt = *simbase;
    simopt.muon_tp = r->muon_tp;
    if (r->muon_tp != CZ_MUON_TP_DUPLICATED && s.optimizer != CZ_OPTIM_MUON) {
        r->skipped = 1;
        snprintf(r->note, sizeof r->note, "Megatron's TP modes are modelled for Muon only");
        return 0;
    }
    double times[100];
    cz_plan *plan = NULL;
    cz_sim_result *sim = NULL;
    cz_error err;
    cz_error_clear(&err);
    int rc = 1;
    /* The ILP row is built once: its time is the solver's search up to the time limit. */
    int want = r->solver == CZ_SOLVER_ILP ? 1 : repeats, done_n = 0;
    for (int i = 0; i < want; i++) {
        cz_plan_free(plan);
        plan = NULL;
        double t0 = cz__clock_seconds();
        int b = cz_plan_build(&plan, model, cluster, &s, &err);
        times[i] = cz__clock_seconds() - t0;
        if (b == CZ_EUNSUPPORTED || b == CZ_ETIMEOUT) {
            r->skipped = 1;
            snprintf(r->note, sizeof r->note, "%s", err.message);
            rc = 0;
            goto done;
        }
        if (b != CZ_OK) {
            fprintf(stderr, "canzona compare: %s: %s\n", r->label, err.message);
            goto done;
        }
        done_n++;
        if (times[i] > CMP_REPEAT_MAX_S)
            break;
    }
    qsort(times, (size_t)done_n, sizeof times[0], cmp_double);
    r->builds = done_n;
    r->plan_s = done_n % 2 ? times[done_n / 2] : 0.5 * (times[done_n / 2 - 1] + times[done_n / 2]);
    r->dp_imbalance = plan->metrics.dp_imbalance;
    r->mk_over_lb =
        plan->metrics.lower_bound > 0 ? plan->metrics.tp_makespan / plan->metrics.lower_bound : 1.0;
    if (cz_plan_simulate(&sim, plan, cluster, &simopt, &err) != CZ_OK) {
        fprintf(stderr, "canzona compare: %s: simulating: %s\n", r->label, err.message);
        goto done;
    }
    r->step_s = sim->step_s;
    r->optimizer_s = sim->optimizer_s;
    r->iter = *sim;
    r->iter.gpu_busy = r->iter.tl_elementwise = NULL;
    r->iter.tl_gather = r->iter.tl_scatter = r->iter.tl_compute = NULL;
    r->iter.tl_coop = NULL;
    rc = 0;
done:
    cz_sim_result_free(sim);
    cz_plan_free(plan);
    return rc;
}

/* The recommendation: the row with the fastest simulated step (ties: the faster planning,
 * then table order), the best row with a slower step (rows with the same step are listed as
 * ties, not as the runner-up) and the even+sc baseline; -1 where there is none. Blockwise Muon
 * rows compute a different update, so they are never recommended nor the runner-up. */
typedef struct cmp_pick {
    int best, next, base;
} cmp_pick;

static int row_before(const cmp_row *x, const cmp_row *y)
{
    if (x->step_s != y->step_s)
        return x->step_s < y->step_s;
    return x->plan_s < y->plan_s;
}

static int same_step(const cmp_row *x, const cmp_row *y)
{
    return fabs(x->step_s - y->step_s) <= 1e-9 * fmax(x->step_s, y->step_s);
}

static int comparable(const cmp_row *r)
{
    return !r->skipped && r->muon_tp != CZ_MUON_TP_BLOCKWISE;
}

static cmp_pick pick_rows(const cmp_row *rows, int n)
{
    cmp_pick p = {-1, -1, -1};
    for (int i = 0; i < n; i++) {
        if (!comparable(&rows[i]))
            continue;
        if (rows[i].dp == CZ_DP_EVEN && rows[i].tp == CZ_TP_SC &&
            rows[i].muon_tp == CZ_MUON_TP_DUPLICATED)
            p.base = i;
        if (p.best < 0 || row_before(&rows[i], &rows[p.best]))
            p.best = i;
    }
    for (int i = 0; p.best >= 0 && i < n; i++)
        if (comparable(&rows[i]) && !same_step(&rows[i], &rows[p.best]) &&
            (p.next < 0 || row_before(&rows[i], &rows[p.next])))
            p.next = i;
    return p;
}

static void print_recommendation(const cmp_row *rows, int n, cmp_pick p)
{
    if (p.best < 0) {
        printf("no recommendation: every row was skipped\n");
        return;
    }
    const cmp_row *b = &rows[p.best];
    printf("recommended: %s, simulated step %.3f ms", b->label, b->step_s * 1e3);
    int ties = 0;
    for (int i = 0; i < n; i++)
        if (i != p.best && comparable(&rows[i]) && same_step(&rows[i], b))
            printf("%s%s", ties++ ? ", " : " (the same step: ", rows[i].label);
    if (ties)
        printf(", planned slower or later in the table)");
    if (p.next >= 0) {
        const cmp_row *x = &rows[p.next];
        printf("; %.1f%% faster than the next best (%s, %.3f ms)",
               100.0 * (x->step_s - b->step_s) / x->step_s, x->label, x->step_s * 1e3);
    }
    if (p.base >= 0 && !same_step(&rows[p.base], b) && b->step_s > 0)
        printf("; %.2fx faster than %s (%.3f ms)", rows[p.base].step_s / b->step_s,
               rows[p.base].label, rows[p.base].step_s * 1e3);
    printf("\n");
}

static json_t *recommendation_json(const cmp_row *rows, cmp_pick p)
{
    if (p.best < 0)
        return json_null();
    const cmp_row *b = &rows[p.best];
    json_t *o = json_pack("{s:s, s:f}", "name", b->label, "step_s", b->step_s);
    if (o && p.next >= 0)
        json_object_set_new(o, "next_best",
                            json_pack("{s:s, s:f, s:f}", "name", rows[p.next].label, "step_s",
                                      rows[p.next].step_s, "step_saving",
                                      (rows[p.next].step_s - b->step_s) / rows[p.next].step_s));
    if (o && p.base >= 0 && b->step_s > 0)
        json_object_set_new(o, "baseline",
                            json_pack("{s:s, s:f, s:f}", "name", rows[p.base].label, "step_s",
                                      rows[p.base].step_s, "speedup",
                                      rows[p.base].step_s / b->step_s));
    return o;
}

static int print_json(const cmp_row *rows, int n, const cz_model *m, const cz_cluster *c,
                      int repeats)
{
    json_t *arr = json_array(), *skipped = json_array(), *top = NULL;
    int rc = 1; /* every goto done below is out of memory */
    for (int i = 0; arr && skipped && i < n; i++) {
        const cmp_row *r = &rows[i];
        json_t *o =
            r->skipped
                ? json_pack("{s:s, s:s}", "name", r->label, "note", r->note)
                : json_pack("{s:s, s:s, s:s, s:s, s:b, s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:i}",
                            "name", r->label, "dp", cz_dp_strategy_name(r->dp), "tp",
                            cz_tp_strategy_name(r->tp), "muon_tp", cz_muon_tp_mode_name(r->muon_tp),
                            "same_update", r->muon_tp != CZ_MUON_TP_BLOCKWISE, "alpha_loads",
                            r->numel_loads ? "numel" : "cost", "solver", cz_solver_name(r->solver),
                            "dp_imbalance", r->dp_imbalance, "makespan_over_lower_bound",
                            r->mk_over_lb, "step_s", r->step_s, "optimizer_s", r->optimizer_s,
                            "plan_seconds", r->plan_s, "builds", r->builds);
        if (o && !r->skipped && r->iter.iteration) {
            json_t *it = cz__sim_iteration_json(&r->iter);
            if (!it || json_object_set_new(o, "iteration", it)) {
                json_decref(o);
                o = NULL;
            }
        }
        if (json_array_append_new(r->skipped ? skipped : arr, o))
            goto done;
    }
    top = arr && skipped
              ? json_pack("{s:s, s:s, s:i, s:o, s:o, s:o}", "model", m->name, "cluster", c->name,
                          "repeats", repeats, "rows", arr, "skipped", skipped, "recommendation",
                          recommendation_json(rows, pick_rows(rows, n)))
              : NULL;
    arr = skipped = NULL;
    if (!top)
        goto done;
    json_dumpf(top, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    printf("\n");
    rc = 0;
done:
    json_decref(top);
    json_decref(arr);
    json_decref(skipped);
    if (rc)
        fprintf(stderr, "canzona compare: out of memory\n");
    return rc;
}

static void print_table(const cmp_row *rows, int n, const cz_model *m, const cz_cluster *c,
                        int repeats)
{
    /* The expert grid, when the cluster gives one (the plans' experts follow it). */
    if (cz_cluster_ep(c) > 1 || cz_cluster_etp(c) != c->tp)
        printf("model %s, cluster %s (DP %d x TP %d x PP %d; EP %d x ETP %d)\n\n", m->name, c->name,
               c->dp, c->tp, c->pp, cz_cluster_ep(c), cz_cluster_etp(c));
    else
        printf("model %s, cluster %s (DP %d x TP %d x PP %d)\n\n", m->name, c->name, c->dp, c->tp,
               c->pp);
    int iter = 0;
    for (int i = 0; i < n; i++)
        iter |= !rows[i].skipped && rows[i].iter.iteration;
    printf("%-35s %8s %8s %11s %11s %11s %6s", "strategy", "DP-imb", "mk/LB", "step ms", "opt ms",
           "plan ms", "builds");
    if (iter)
        printf(" %11s %11s %6s", "iter ms", "ovl-iter ms", "ovl x");
    printf("\n");
    for (int i = 0; i < n; i++) {
        const cmp_row *r = &rows[i];
        if (r->skipped)
            continue;
        printf("%-35s %8.4f %8.4f %11.3f %11.3f %11.3f %6d", r->label, r->dp_imbalance,
               r->mk_over_lb, r->step_s * 1e3, r->optimizer_s * 1e3, r->plan_s * 1e3, r->builds);
        if (iter && r->iter.iter_overlap)
            printf(" %11.3f %11.3f %6.3f", r->iter.iter_s * 1e3, r->iter.iter_overlap_s * 1e3,
                   r->iter.iter_overlap_s > 0 ? r->iter.iter_s / r->iter.iter_overlap_s : 1.0);
        else if (iter)
            printf(" %11.3f %11s %6s", r->iter.iter_s * 1e3, "-", "-");
        printf("\n");
    }
    printf("\nplanning time: median of %d build%s (1 for the ILP row and for builds over 1 s); "
           "step/opt: simulated (docs/SIMULATOR.md)\n",
           repeats, repeats == 1 ? "" : "s");
    if (iter)
        printf("iter: the training iteration (%d micro-batch%s of %d x %d tokens, passes at %.1f "
               "TFLOP/s) with the step after the passes; ovl-iter: with the step overlapped "
               "bucket by bucket ('-': not modelled for the row, canzona simulate --iteration "
               "says why); the recommendation stays by step\n",
               rows[0].iter.micro_batches, rows[0].iter.micro_batches == 1 ? "" : "es",
               rows[0].iter.micro_batch_size, rows[0].iter.seq_len, rows[0].iter.pass_tflops);
    printf("* blockwise orthogonalizes each TP shard on its own: cheaper, and not the same update "
           "as the other rows\n");
    for (int i = 0; i < n; i++)
        if (rows[i].skipped)
            printf("skipped %s: %s\n", rows[i].label, rows[i].note);
    print_recommendation(rows, n, pick_rows(rows, n));
}

typedef struct compare_args {
    const char *model_path, *cluster_path, *calibration;
    int json, repeats, progress;
    cz_sim_options simopt;
} compare_args;

static int compare_option(void *state, int opt, const char *value)
{
    compare_args *a = state;
    switch (opt) {
    case 'm':
        a->model_path = value;
        return 0;
    case 'c':
        a->cluster_path = value;
        return 0;
    case 'j':
        a->json = 1;
        return 0;
    case OPT_REPEATS:
        return cz_cli_parse_int("compare", "repeats", value, 1, 99, &a->repeats);
    case OPT_PROGRESS:
        a->progress = 2; /* forced: one line per row, also when not a terminal */
        return 0;
    case CZ_OPT_CALIBRATION:
        a->calibration = value;
        return 0;
    }
    return cz_cli_sim_apply("compare", opt, value, &a->simopt);
}

int cz_cmd_compare(int argc, char **argv)
{
    static const struct option own[] = {
        {"model", required_argument, NULL, 'm'},
        {"cluster", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"repeats", required_argument, NULL, OPT_REPEATS},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"help", no_argument, NULL, 'h'},
        CZ_CLI_CALIBRATION_OPTION,
        CZ_CLI_SIM_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    compare_args a = {
        .repeats = 3, .progress = isatty(STDERR_FILENO), .simopt = CZ_SIM_OPTIONS_INIT};
    cz_settings settings;
    cz_settings_init(&settings);
    cz_cluster_sizes sizes = {0};
    settings.time_limit_s = COMPARE_TIME_LIMIT_S;
    const cz_cli_spec spec = {.name = "compare",
                              .shortopts = "m:c:h",
                              .own = own,
                              .help = compare_help,
                              .apply = compare_option,
                              .state = &a,
                              .settings = &settings,
                              .sizes = &sizes,
                              .operands = -1};
    int rc = cz_cli_parse(&spec, argc, argv);
    if (rc != CZ_CLI_CONTINUE)
        return rc;
    rc = 1;
    const char *model_path = a.model_path, *cluster_path = a.cluster_path;
    int json = a.json, repeats = a.repeats, progress = a.progress;
    cz_model *model = NULL;
    cz_cluster *cluster = NULL;
    cmp_row rows[32];
    if (cz_cli_require_inputs("compare", argc, argv, optind, model_path, cluster_path))
        return 2;
    if (cz_cli_load_inputs("compare", model_path, cluster_path, &sizes, a.calibration, &model,
                           &cluster))
        goto done;
    /* The fully sharded layout is compared with the job's ZeRO-1 plan, not the strategy grid
     * (its owners are chosen over the whole shard group, under no DP strategy). */
    if (settings.layout == CZ_LAYOUT_FSDP) {
        rc = cz_cli_fsdp_table("compare", model, cluster, &settings, NULL, json);
        goto done;
    }
    int n = rows_init(rows);
    for (int i = 0; i < n; i++) {
        /* On a terminal one self-overwriting line; forced, one line per row. */
        if (progress) {
            char line[256];
            snprintf(line, sizeof line, "canzona compare: [%d/%d] %.47s%s", i + 1, n, rows[i].label,
                     rows[i].solver == CZ_SOLVER_ILP ? " (ILP solve, up to the time limit)" : "");
            fprintf(stderr, progress == 2 ? "%s\n" : "\r%-78s", line);
            fflush(stderr);
        }
        if (row_run(&rows[i], model, cluster, &settings, &a.simopt, repeats))
            goto done;
    }
    if (progress == 1)
        fprintf(stderr, "\r%-78s\r", "");
    if (json)
        rc = print_json(rows, n, model, cluster, repeats);
    else {
        print_table(rows, n, model, cluster, repeats);
        rc = 0;
    }
done:
    cz_model_free(model);
    cz_cluster_free(cluster);
    return rc;
}
