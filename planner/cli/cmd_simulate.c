/* canzona simulate — estimates one optimizer step of the baselines and of Canzona side by side
 * (or of one plan) with the event model of docs/SIMULATOR.md. */
#include "cli_util.h"
#include "commands.h"
#include "cz_types.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void simulate_help(FILE *f)
{
    fprintf(
        f,
        "usage: canzona simulate --model MODEL.json --cluster CLUSTER.json [--plan PLAN.json]\n"
        "                        [--json] [planning settings]\n"
        "\n"
        "Estimates one optimizer step (alpha-beta collectives; one compute and one\n"
        "communication stream per GPU; see docs/SIMULATOR.md) and prints, side by side:\n"
        "  sync-compute  the baseline: DP anchored (atomic) + TP sc (every TP rank gathers\n"
        "                and updates every matrix, no overlap: Megatron's duplicated mode)\n"
        "  lw-jan26-*    Megatron's first layer-wise rule (--layerwise-order megatron;\n"
        "                gradients all-reduced) + TP sc, in each of Megatron's Muon TP modes:\n"
        "                dup (duplicated), blk* (blockwise), dist (distributed), lsh\n"
        "                (layer_sharded, pull request 6683)\n"
        "  lw-aug26-*    Megatron's current layer-wise rule (megatron-aug26; its own buckets,\n"
        "                reduce-scattered) + TP sc, in the same three TP modes\n"
        "  async         asynchronous compute without load balancing: anchored + none\n"
        "  canzona       alpha-balanced DP + greedy-rollback micro-groups: alpha + rollback\n"
        "Rows marked * (blockwise) orthogonalize each TP shard separately: cheaper, and NOT the\n"
        "same update as the others. With --tp 1 the TP modes coincide.\n"
        "Columns (milliseconds): grad = gradient reduce-scatter (all-reduce for lw-jan26);\n"
        "update = elementwise updates + micro-group pipeline incl. exposed TP communication\n"
        "(slowest GPU); param = parameter all-gather over DP; opt = optimizer-step latency\n"
        "= update + param, from synchronized gradients to gathered parameters; step = grad +\n"
        "opt; comm = all collective time of the critical GPU, hidden or not. Speed-ups (x)\n"
        "are the baseline's time over the row's, for update, opt and step.\n"
        "With --iteration (or its workload options below), a second table gives the training\n"
        "iteration: forward and backward of every micro-batch, the step after them (iter)\n"
        "and overlapped bucket by bucket with the last backward and the next forward\n"
        "(ovl-iter); docs/SIMULATOR.md, \"The iteration\".\n"
        "\n"
        "options:\n"
        "  -m, --model FILE      model description (canzona.model/1)\n"
        "  -c, --cluster FILE    cluster shape with links (canzona.cluster/1)\n"
        "  -p, --plan FILE       simulate this plan only (--model is then optional and, when\n"
        "                        given, must be the plan's model)\n"
        "      --uneven MODEL    how uneven DP slices are synchronized: rooted (default; one\n"
        "                        rooted ring reduce/broadcast per owner, grouped) or padded\n"
        "                        (ring reduce-scatter/all-gather, slices padded to the largest)\n"
        "      --muon-tp MODE    for a single sc configuration or --plan: Megatron's Muon TP\n"
        "                        mode, duplicated (default), blockwise, distributed or\n"
        "                        layer_sharded\n"
        "      --gtp-size G      with --muon-tp: the TP group is Megatron's GTP x TP domain,\n"
        "                        G of its ranks sharding dim 0 (Megatron's gtp_remat; the\n"
        "                        TP size is then TP x G); default 1\n"
        "      --json            print JSON instead of a table\n"
        "  -h, --help            this help\n"
        "Giving --dp or --tp simulates that single configuration instead of the table.\n"
        "With --layout fsdp (or --plan of a fully sharded plan) the table is instead the job\n"
        "as canzona's ZeRO-1 plan (zero1), as a fully sharded plan (fsdp: FSDP2's own\n"
        "reduce-scatter and all-gather, one all-to-all(v) per micro-group to the owners and\n"
        "one back) and as FSDP2 with torch.optim.Muon by hand (fsdp2+muon: every matrix\n"
        "all-gathered whole and stepped on every GPU); docs/SIMULATOR.md, \"Fully sharded\".\n");
    cz_cli_device_help(f, 1);
    cz_cli_settings_help(f, 0);
}

typedef struct sim_row {
    const char *label;
    cz_dp_strategy dp;
    cz_tp_strategy tp;
    cz_layerwise_order order;
    cz_muon_tp_mode muon_tp;
    cz_layout layout;
    double dp_imbalance, mk_over_lb;
    cz_sim_result *sim;
} sim_row;

static double ratio(double base, double v)
{
    return v > 0 ? base / v : 1.0;
}

static json_t *row_json(const sim_row *r, const sim_row *base)
{
    const cz_sim_result *s = r->sim;
    return json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
        "s:f, s:b, s:f, s:f, s:f, s:s}",
        "name", r->label, "dp", cz_dp_strategy_name(r->dp), "tp", cz_tp_strategy_name(r->tp),
        "layerwise_order", r->dp == CZ_DP_LAYERWISE ? cz_layerwise_order_name(r->order) : "",
        "muon_tp", cz_muon_tp_mode_name(r->muon_tp), "same_update",
        r->muon_tp != CZ_MUON_TP_BLOCKWISE, "dp_imbalance", r->dp_imbalance,
        "makespan_over_lower_bound", r->mk_over_lb, "grad_sync_s", s->grad_sync_s, "frag_gather_s",
        s->frag_gather_s, "local_s", s->local_s, "param_sync_s", s->param_sync_s, "optimizer_s",
        s->optimizer_s, "step_s", s->step_s, "compute_s", s->compute_s, "tp_comm_s", s->tp_comm_s,
        "comm_s", s->comm_s, "exposed_comm_s", s->exposed_comm_s, "pipelined", s->pipelined,
        "update_speedup",
        ratio(base->sim->frag_gather_s + base->sim->local_s, s->frag_gather_s + s->local_s),
        "optimizer_speedup", ratio(base->sim->optimizer_s, s->optimizer_s), "step_speedup",
        ratio(base->sim->step_s, s->step_s), "layout", cz_layout_name(r->layout));
}

/* Cooperative tasks' exposed all-reduces and waits, in a row's JSON only when it has such
 * tasks, the step's host work only under the device model and the whole DP collectives only
 * under an overlap, so that the rows of every other plan are what they were. */
static json_t *row_json_coop(const sim_row *r, const sim_row *base)
{
    json_t *o = row_json(r, base);
    const cz_sim_result *s = r->sim;
    if (o && s->coop_tasks > 0 &&
        (json_object_set_new(o, "coop_tasks", json_integer(s->coop_tasks)) ||
         json_object_set_new(o, "coop_allreduce_s", json_real(s->coop_allreduce_s)) ||
         json_object_set_new(o, "coop_wait_s", json_real(s->coop_wait_s)))) {
        json_decref(o);
        return NULL;
    }
    json_t *w = o ? cz__sim_wire_json(s) : NULL;
    if (o && (!w || json_object_set_new(o, "wire", w))) {
        json_decref(o);
        return NULL;
    }
    /* Expert groups: the critical GPU's expert part of local_s. */
    if (o && s->experts && json_object_set_new(o, "expert_s", json_real(s->expert_s))) {
        json_decref(o);
        return NULL;
    }
    if (o && s->device_model && json_object_set_new(o, "host_s", json_real(s->host_s))) {
        json_decref(o);
        return NULL;
    }
    if (o && (s->overlap_grad_reduce || s->overlap_param_gather) &&
        (json_object_set_new(o, "grad_sync_total_s", json_real(s->grad_sync_total_s)) ||
         json_object_set_new(o, "param_sync_total_s", json_real(s->param_sync_total_s)))) {
        json_decref(o);
        return NULL;
    }
    if (o && s->iteration) {
        json_t *it = cz__sim_iteration_json(s);
        if (!it || json_object_set_new(o, "iteration", it)) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* The iteration's table (--iteration and its workload options): the passes, the iteration
 * with the step after them and with the step overlapped, per row. */
static void print_iteration(const sim_row *rows, int n)
{
    const cz_sim_result *s0 = rows[0].sim;
    printf("\niteration: %d micro-batch%s of %d x %d tokens per DP rank, forward and backward at "
           "%.1f TFLOP/s (%.2f x the bf16 GEMM rate); ms; with overlap, each bucket is reduced, "
           "updated and gathered as soon as the last backward has passed it\n\n",
           s0->micro_batches, s0->micro_batches == 1 ? "" : "es", s0->micro_batch_size, s0->seq_len,
           s0->pass_tflops, s0->pass_efficiency);
    printf("%-13s %9s %9s %9s %9s %9s %9s %9s %9s %7s\n", "strategy", "forward", "backward", "step",
           "iter", "ovl-step", "ovl-iter", "dp-bound", "1st-wait", "ovl x");
    for (int i = 0; i < n; i++) {
        const cz_sim_result *s = rows[i].sim;
        double passes = s->fwd_s + s->bwd_s;
        printf("%-13s %9.3f %9.3f %9.3f %9.3f", rows[i].label, s->fwd_s * 1e3, s->bwd_s * 1e3,
               (s->iter_s - passes) * 1e3, s->iter_s * 1e3);
        if (s->iter_overlap)
            printf(" %9.3f %9.3f %9.3f %9.3f %7.3f\n", (s->iter_overlap_s - passes) * 1e3,
                   s->iter_overlap_s * 1e3, s->dp_bound_s * 1e3, s->first_wait_s * 1e3,
                   s->iter_overlap_s > 0 ? s->iter_s / s->iter_overlap_s : 1.0);
        else
            printf(" %9s %9s %9s %9s %7s\n", "-", "-", "-", "-", "-");
    }
    printf("step = the iteration's time beyond the passes; dp-bound = the least ovl-step any "
           "order allows: the DP link's reduce-scatters and all-gathers beyond the last backward "
           "and the next forward (but their last-layer chunks); 1st-wait = from the end of "
           "backward to the next forward's first chunk (the first layers' bucket: reduced last, "
           "needed first); all-gathers in %s order; %s\n",
           s0->gather_forward_order ? "forward" : "ready",
           s0->deferred_updates ? "updates deferred to the end of backward (the executor's "
                                  "default; --early-updates for early ones)"
                                : "early updates (--early-updates: each micro-group once its "
                                  "buckets are reduced)");
    for (int i = 0; i < n; i++)
        if (!rows[i].sim->iter_overlap)
            printf("%s: overlap not modelled: %s\n", rows[i].label, rows[i].sim->iter_note);
}

static int print_rows(const sim_row *rows, int n, const char *model, const char *cluster, int json)
{
    const sim_row *base = &rows[0];
    if (json) {
        json_t *arr = json_array();
        for (int i = 0; arr && i < n; i++)
            if (json_array_append_new(arr, row_json_coop(&rows[i], base))) {
                json_decref(arr);
                arr = NULL;
            }
        json_t *o = arr ? json_pack("{s:s, s:s, s:s, s:o}", "model", model, "cluster", cluster,
                                    "baseline", base->label, "rows", arr)
                        : NULL;
        if (!o) {
            fprintf(stderr, "canzona simulate: out of memory\n");
            return 1;
        }
        json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
        printf("\n");
        json_decref(o);
        return 0;
    }
    printf("model %s, cluster %s; times in ms for one optimizer step, speed-ups vs %s\n\n", model,
           cluster, base->label);
    printf("%-13s %-27s %6s %6s %8s %8s %8s %8s %8s %8s %6s %6s %6s\n", "strategy", "dp+tp+mode",
           "DP-imb", "mk/LB", "grad", "update", "param", "opt", "step", "comm", "upd x", "opt x",
           "step x");
    for (int i = 0; i < n; i++) {
        const sim_row *r = &rows[i];
        const cz_sim_result *s = r->sim;
        char combo[40];
        snprintf(combo, sizeof combo, "%s+%s%s%s", cz_dp_strategy_name(r->dp),
                 cz_tp_strategy_name(r->tp), r->tp == CZ_TP_SC ? "+" : "",
                 r->tp == CZ_TP_SC ? cz_muon_tp_mode_name(r->muon_tp) : "");
        printf("%-13s %-27s %6.3f %6.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %6.2f %6.2f %6.2f\n",
               r->label, combo, r->dp_imbalance, r->mk_over_lb, s->grad_sync_s * 1e3,
               (s->frag_gather_s + s->local_s) * 1e3, s->param_sync_s * 1e3, s->optimizer_s * 1e3,
               s->step_s * 1e3, s->comm_s * 1e3,
               ratio(base->sim->frag_gather_s + base->sim->local_s, s->frag_gather_s + s->local_s),
               ratio(base->sim->optimizer_s, s->optimizer_s), ratio(base->sim->step_s, s->step_s));
    }
    /* The last row's (canzona's, or the one plan's) DP exchanges as the executor posts them. */
    const cz_sim_result *last = rows[n - 1].sim;
    printf("\nDP exchanges on the wire (%s, as the executor posts them; the most one GPU posts "
           "per step): gradients %s %lld bytes, parameters %s %lld bytes\n",
           rows[n - 1].label, cz_dtype_name(last->grad_wire), (long long)last->grad_sync_bytes,
           cz_dtype_name(last->param_wire), (long long)last->param_sync_bytes);
    if (last->tp_sync_bytes >= 0) {
        printf("Micro-group exchanges (fp32, as the executor sends them; the most one GPU sends "
               "per step): TP %lld bytes",
               (long long)last->tp_sync_bytes);
        if (last->etp_sync_bytes >= 0)
            printf(", expert TP %lld bytes", (long long)last->etp_sync_bytes);
        printf("\n");
    }
    for (int i = 0; i < n; i++) {
        const cz_sim_result *s = rows[i].sim;
        if (s->coop_tasks == 0)
            continue;
        printf("\n%s: %d cooperative task%s on the critical DP rank; its critical GPU (stage "
               "%d, DP rank %d, TP rank %d) waits %.3f ms on their Gram and norm all-reduces "
               "(what its computation does not hide; comm counts them whole) and %.3f ms for "
               "slower members\n",
               rows[i].label, s->coop_tasks, s->coop_tasks == 1 ? "" : "s", s->critical_stage,
               s->critical_dp, s->critical_tp, s->coop_allreduce_s * 1e3, s->coop_wait_s * 1e3);
    }
    /* Expert groups: every row's update holds the expert ranks' micro-groups after the DP
     * ranks' on each GPU, and grad and param the expert buffers' collectives. */
    for (int i = 0; i < n; i++)
        if (rows[i].sim->experts) {
            printf("\nexpert groups: each GPU runs its expert rank's micro-groups after its DP "
                   "rank's (update: the critical GPU's expert part");
            for (int j = i; j < n; j++)
                printf("%s %s %.3f", j == i ? ":" : ",", rows[j].label,
                       rows[j].sim->expert_s * 1e3);
            printf(" ms); grad and param include the expert buffers' collectives over the "
                   "expert-DP groups\n");
            break;
        }
    for (int i = 0; i < n; i++)
        if (rows[i].layout == CZ_LAYOUT_SPLIT) {
            printf("\nsplit buffer layout (matrix parameters in a buffer of their own, elementwise "
                   "ones evenly sliced) in the rows:");
            for (int j = i; j < n; j++)
                if (rows[j].layout == CZ_LAYOUT_SPLIT)
                    printf(" %s", rows[j].label);
            printf("\n");
            break;
        }
    const cz_sim_result *s0 = rows[0].sim;
    if (s0->device_model)
        printf("\ndevice model on (launches, cuBLAS, NCCL and PyTorch calls charged; same-shape "
               "matrices batched); the step includes %.3f ms of host work\n",
               s0->host_s * 1e3);
    if (s0->overlap_grad_reduce || s0->overlap_param_gather)
        printf("\noverlapped with the backward / next forward pass (hidden, not in the table): "
               "%s%s%s\n",
               s0->overlap_grad_reduce ? "gradient reduce-scatter but the last bucket" : "",
               s0->overlap_grad_reduce && s0->overlap_param_gather ? "; " : "",
               s0->overlap_param_gather ? "parameter all-gather but the first-needed bucket" : "");
    for (int i = 0; i < n; i++)
        if (rows[i].muon_tp == CZ_MUON_TP_BLOCKWISE) {
            printf("\n* blockwise orthogonalizes each TP shard on its own: cheaper, and not the "
                   "same update as the other rows.\n");
            break;
        }
    if (s0->iteration)
        print_iteration(rows, n);
    return 0;
}

static void row_fill(sim_row *r, const cz_plan *plan, cz_sim_result *sim, cz_muon_tp_mode mode)
{
    r->dp = plan->settings.dp;
    r->tp = plan->settings.tp;
    r->order = plan->settings.layerwise_order;
    r->muon_tp = mode;
    r->layout = plan->settings.layout;
    r->dp_imbalance = plan->metrics.dp_imbalance;
    /* Against the bound under the plan's task freedom (the atomic one for whole matrices). */
    double plan_bound = plan->metrics.split_lower_bound > 0 ? plan->metrics.split_lower_bound
                                                            : plan->metrics.lower_bound;
    r->mk_over_lb = plan_bound > 0 ? plan->metrics.tp_makespan / plan_bound : 1.0;
    r->sim = sim;
}

/* The table's rows: the paper's baseline, Megatron's two layer-wise rules in each of its Muon
 * TP modes, and the two asynchronous strategies. */
static const struct {
    const char *label;
    cz_dp_strategy dp;
    cz_tp_strategy tp;
    cz_layerwise_order order;
    cz_muon_tp_mode muon_tp;
} configs[] = {
    {"sync-compute", CZ_DP_ANCHORED, CZ_TP_SC, CZ_LAYERWISE_MEGATRON, CZ_MUON_TP_DUPLICATED},
    {"lw-jan26-dup", CZ_DP_LAYERWISE, CZ_TP_SC, CZ_LAYERWISE_MEGATRON, CZ_MUON_TP_DUPLICATED},
    {"lw-jan26-blk*", CZ_DP_LAYERWISE, CZ_TP_SC, CZ_LAYERWISE_MEGATRON, CZ_MUON_TP_BLOCKWISE},
    {"lw-jan26-dist", CZ_DP_LAYERWISE, CZ_TP_SC, CZ_LAYERWISE_MEGATRON, CZ_MUON_TP_DISTRIBUTED},
    {"lw-jan26-lsh", CZ_DP_LAYERWISE, CZ_TP_SC, CZ_LAYERWISE_MEGATRON, CZ_MUON_TP_LAYER_SHARDED},
    {"lw-aug26-dup", CZ_DP_LAYERWISE, CZ_TP_SC, CZ_LAYERWISE_MEGATRON_AUG26, CZ_MUON_TP_DUPLICATED},
    {"lw-aug26-blk*", CZ_DP_LAYERWISE, CZ_TP_SC, CZ_LAYERWISE_MEGATRON_AUG26, CZ_MUON_TP_BLOCKWISE},
    {"lw-aug26-dist", CZ_DP_LAYERWISE, CZ_TP_SC, CZ_LAYERWISE_MEGATRON_AUG26,
     CZ_MUON_TP_DISTRIBUTED},
    {"lw-aug26-lsh", CZ_DP_LAYERWISE, CZ_TP_SC, CZ_LAYERWISE_MEGATRON_AUG26,
     CZ_MUON_TP_LAYER_SHARDED},
    {"async", CZ_DP_ANCHORED, CZ_TP_NONE, CZ_LAYERWISE_MEGATRON, CZ_MUON_TP_DUPLICATED},
    {"canzona", CZ_DP_ALPHA, CZ_TP_ROLLBACK, CZ_LAYERWISE_MEGATRON, CZ_MUON_TP_DUPLICATED},
};
enum { NCONFIGS = sizeof configs / sizeof configs[0] };

typedef struct simulate_args {
    const char *model_path, *cluster_path, *plan_path, *calibration;
    int json;
    int single; /* --dp or --tp given: one row of that strategy instead of the table */
    int muon_tp_given;
    cz_sim_options simopt;
} simulate_args;

static int simulate_option(void *state, int opt, const char *value)
{
    simulate_args *a = state;
    switch (opt) {
    case 'm':
        a->model_path = value;
        return 0;
    case 'c':
        a->cluster_path = value;
        return 0;
    case 'p':
        a->plan_path = value;
        return 0;
    case 'j':
        a->json = 1;
        return 0;
    case 'u':
        if (!strcmp(value, "rooted")) {
            a->simopt.uneven = CZ_SIM_UNEVEN_ROOTED;
        } else if (!strcmp(value, "padded")) {
            a->simopt.uneven = CZ_SIM_UNEVEN_PADDED;
        } else {
            fprintf(stderr, "canzona simulate: --uneven '%s': expected rooted or padded\n", value);
            return 2;
        }
        return 0;
    case 't':
        if (cz_muon_tp_mode_parse(value, &a->simopt.muon_tp) != CZ_OK) {
            fprintf(stderr,
                    "canzona simulate: --muon-tp '%s': expected duplicated, blockwise, "
                    "distributed or layer_sharded\n",
                    value);
            return 2;
        }
        a->muon_tp_given = 1;
        return 0;
    case CZ_OPT_DP:
    case CZ_OPT_TP:
        a->single = 1;
        return 1; /* noted; the settings take the value */
    case CZ_OPT_CALIBRATION:
        a->calibration = value;
        return 0;
    case CZ_OPT_GTP_SIZE:
        return cz_cli_parse_int("simulate", "gtp-size", value, 1, 65536, &a->simopt.gtp);
    }
    return cz_cli_sim_apply("simulate", opt, value, &a->simopt);
}

int cz_cmd_simulate(int argc, char **argv)
{
    static const struct option own[] = {
        {"model", required_argument, NULL, 'm'},
        {"cluster", required_argument, NULL, 'c'},
        {"plan", required_argument, NULL, 'p'},
        {"json", no_argument, NULL, 'j'},
        {"uneven", required_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},
        {"muon-tp", required_argument, NULL, 't'},
        CZ_CLI_CALIBRATION_OPTION,
        CZ_CLI_SIM_OPTIONS,
        {"gtp-size", required_argument, NULL, CZ_OPT_GTP_SIZE},
        {NULL, 0, NULL, 0},
    };
    simulate_args a = {.simopt = CZ_SIM_OPTIONS_INIT};
    cz_settings settings;
    cz_settings_init(&settings);
    cz_cluster_sizes sizes = {0};
    const cz_cli_spec spec = {.name = "simulate",
                              .shortopts = "m:c:p:h",
                              .own = own,
                              .help = simulate_help,
                              .apply = simulate_option,
                              .state = &a,
                              .settings = &settings,
                              .sizes = &sizes,
                              .operands = -1};
    int rc = cz_cli_parse(&spec, argc, argv);
    if (rc != CZ_CLI_CONTINUE)
        return rc;
    rc = 1;
    const char *model_path = a.model_path, *cluster_path = a.cluster_path, *plan_path = a.plan_path;
    int json = a.json, single = a.single, nrows = 0, muon_tp_given = a.muon_tp_given;
    cz_sim_options simopt = a.simopt;
    cz_model *model = NULL;
    cz_cluster *cluster = NULL;
    cz_plan *plan = NULL;
    sim_row rows[NCONFIGS];
    memset(rows, 0, sizeof rows);
    cz_error err;
    cz_error_clear(&err);
    if (optind < argc) {
        fprintf(stderr,
                "canzona simulate: unexpected argument '%s' (see 'canzona simulate --help')\n",
                argv[optind]);
        return 2;
    }
    if (!cluster_path || (!model_path && !plan_path)) {
        fprintf(stderr, "canzona simulate: --cluster and --model (or --plan) are required (see "
                        "'canzona simulate --help')\n");
        return 2;
    }
    if (model_path) {
        if (cz_cli_load_inputs("simulate", model_path, cluster_path, &sizes, a.calibration, &model,
                               &cluster))
            goto done;
    } else if (cz__cluster_load_sized(&cluster, cluster_path, &sizes, &err) != CZ_OK) {
        fprintf(stderr, "canzona simulate: %s\n", err.message);
        goto done;
    } else if (cz_cli_calibrate("simulate", cluster, a.calibration)) {
        goto done;
    }

    if (plan_path) {
        if (cz_plan_read(&plan, plan_path, &err) != CZ_OK) {
            fprintf(stderr, "canzona simulate: %s\n", err.message);
            goto done;
        }
        if (model && plan->model_sha256 && strcmp(plan->model_sha256, model->sha256) != 0) {
            fprintf(stderr,
                    "canzona simulate: plan '%s' was made for model '%s' (sha256 %.12s...), not "
                    "for '%s' (sha256 %.12s...); re-plan or drop --model\n",
                    plan_path, plan->model_name ? plan->model_name : "?", plan->model_sha256,
                    model->name, model->sha256);
            goto done;
        }
        if (cz_plan_is_fsdp(plan)) {
            rc = cz_cli_fsdp_table("simulate", model, cluster, &plan->settings, plan, json);
            goto done;
        }
        cz_sim_result *sim = NULL;
        if (cz_plan_simulate(&sim, plan, cluster, &simopt, &err) != CZ_OK) {
            fprintf(stderr, "canzona simulate: %s: %s\n", plan_path, err.message);
            goto done;
        }
        rows[0].label = "plan";
        row_fill(&rows[0], plan, sim, simopt.muon_tp);
        nrows = 1;
    } else if (settings.layout == CZ_LAYOUT_FSDP) {
        rc = cz_cli_fsdp_table("simulate", model, cluster, &settings, NULL, json);
        goto done;
    } else {
        if (muon_tp_given && !single) {
            fprintf(stderr, "canzona simulate: --muon-tp applies to one configuration (--dp and "
                            "--tp sc) or to --plan; the table already shows every mode\n");
            goto done;
        }
        if (simopt.gtp > 1 && !single) {
            fprintf(stderr, "canzona simulate: --gtp-size describes Megatron's domain for one sc "
                            "configuration (--dp and --tp sc, with --muon-tp) or --plan; the "
                            "table's other rows have no GTP\n");
            goto done;
        }
        int n = single ? 1 : NCONFIGS;
        for (int i = 0; i < n; i++) {
            cz_settings s = settings;
            cz_sim_options o = simopt;
            /* Megatron's TP modes are Muon's; other optimizers show the duplicated rows. */
            if (!single && configs[i].muon_tp != CZ_MUON_TP_DUPLICATED &&
                settings.optimizer != CZ_OPTIM_MUON)
                continue;
            if (!single) {
                s.dp = configs[i].dp;
                s.tp = configs[i].tp;
                s.layerwise_order = configs[i].order;
                o.muon_tp = configs[i].muon_tp;
                cz_cli_row_layout(&s);
            }
            cz_sim_result *sim = NULL;
            if (cz_plan_build(&plan, model, cluster, &s, &err) != CZ_OK ||
                cz_plan_simulate(&sim, plan, cluster, &o, &err) != CZ_OK) {
                fprintf(stderr, "canzona simulate: %s+%s: %s\n", cz_dp_strategy_name(s.dp),
                        cz_tp_strategy_name(s.tp), err.message);
                goto done;
            }
            rows[nrows].label = single ? "plan" : configs[i].label;
            row_fill(&rows[nrows], plan, sim, o.muon_tp);
            nrows++;
            cz_plan_free(plan);
            plan = NULL;
        }
    }
    rc = print_rows(rows, nrows,
                    model ? model->name : (plan && plan->model_name ? plan->model_name : "?"),
                    cluster->name, json);
done:
    for (int i = 0; i < NCONFIGS; i++)
        cz_sim_result_free(rows[i].sim);
    cz_plan_free(plan);
    cz_model_free(model);
    cz_cluster_free(cluster);
    return rc;
}
