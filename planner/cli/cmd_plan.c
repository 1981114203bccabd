/* canzona plan — builds a plan from a model description and a cluster shape, writes it, and
 * prints a summary of the balance it achieves. */
#include "cli_util.h"
#include "commands.h"
#include "cz_types.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void plan_help(FILE *f)
{
    fprintf(
        f,
        "usage: canzona plan --model MODEL.json --cluster CLUSTER.json [-o PLAN.json] [options]\n"
        "\n"
        "Solves the DP partition of the gradient buckets (--dp; default joint) and the TP\n"
        "micro-groups for the model on the cluster, writes the plan and prints per-rank loads,\n"
        "imbalance, TP makespan against the average load (total cost / GPUs), the lower bound\n"
        "(under --split-blocks and --coop, the bound of the freedom they allow) and the atomic\n"
        "lower bound max(total cost / GPUs, largest task, and the stage, EP-group and\n"
        "shared-GPU terms where one is larger), and optimizer-state memory, with\n"
        "a note naming --coop auto when, with whole matrices, the largest task is more than\n"
        "1.3x the average load. A regular output file is written atomically (temporary file,\n"
        "then rename); a device or FIFO is written in place; a symbolic link is followed; an\n"
        "output that is one of the inputs is refused.\n"
        "\n"
        "options:\n"
        "  -m, --model FILE      model description (canzona.model/1)\n"
        "  -c, --cluster FILE    cluster shape (canzona.cluster/1)\n"
        "  -o, --output FILE     write the plan here; '-' writes it to standard output and the\n"
        "                        summary to standard error (without -o only the summary is\n"
        "                        printed)\n"
        "      --split DIR       also write the plan cut into the parts one rank reads\n"
        "                        (docs/FORMATS.md section 9): DIR/header.json, per stage and EP\n"
        "                        rank a slice, per stage its schedules and their index; the\n"
        "                        whole plan goes to DIR/plan.json unless -o names a file. Give\n"
        "                        the executor DIR instead of the plan file: each rank then reads\n"
        "                        its own part only\n"
        "      --allow-oversubscribed-memory\n"
        "                        write the plan even when a GPU's parameters, gradients and\n"
        "                        optimizer state exceed the cluster's device.memory_gib (the\n"
        "                        default refuses; above 80%% it warns)\n"
        "      --json            print the summary as JSON instead of text\n"
        "  -q, --quiet           print nothing but errors\n"
        "  -h, --help            this help\n");
    cz_cli_device_help(f, 0);
    cz_cli_settings_help(f, 0);
}

static double vmax(const double *v, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static double vmin(const double *v, size_t n)
{
    double m = n ? v[0] : 0;
    for (size_t i = 0; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

static double vmean(const double *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i];
    return n ? s / (double)n : 0;
}

/* Counts of the model's parameters by kind and its total element count. */
static void count_params(const cz_plan *p, size_t *matrices, double *elements)
{
    *matrices = 0;
    *elements = 0;
    for (size_t i = 0; i < p->nparams; i++) {
        *matrices += p->params[i].def.kind == CZ_KIND_MATRIX;
        *elements += (double)p->params[i].def.shape[0] * (double)p->params[i].def.shape[1];
    }
}

/* The expert ranks' table: each EP rank's expert-DP ranks, their owned expert cost, their ETP
 * group's makespan and micro-groups. */
static void print_expert_ranks(const cz_plan *p, FILE *out)
{
    const cz_plan_metrics *mt = &p->metrics;
    size_t nx = (size_t)p->pp * (size_t)cz_plan_expert_ranks(p);
    double mean = vmean(mt->expert_load, nx);
    char a[64], b[64];
    fprintf(out, "\n%-14s %14s %7s %14s %7s\n", p->pp > 1 ? "stage/EP/eDP" : "EP/expert-DP",
            "expert load", "/mean", "ETP makespan", "groups");
    for (size_t x = 0; x < nx; x++) {
        const cz_rank_schedule *rs = &p->expert_schedules[x];
        char rank[48];
        if (p->pp > 1)
            snprintf(rank, sizeof rank, "%d/%d/%d", rs->stage, rs->ep_rank, rs->dp_rank);
        else
            snprintf(rank, sizeof rank, "%d/%d", rs->ep_rank, rs->dp_rank);
        fprintf(out, "%-14s %14s %7.3f %14s %7d\n", rank,
                cz_cli_format_cost(a, sizeof a, mt->expert_load[x], p->settings.unit),
                mean > 0 ? mt->expert_load[x] / mean : 1.0,
                cz_cli_format_cost(b, sizeof b, mt->expert_rank_makespan[x], p->settings.unit),
                rs->ngroups);
    }
}

static void print_summary(const cz_plan *p, const cz_model *m, const cz_cluster *c,
                          const char *output, FILE *out)
{
    const cz_plan_metrics *mt = &p->metrics;
    const cz_settings *s = &p->settings;
    cz_cost_unit u = s->unit;
    size_t nranks = (size_t)p->pp * (size_t)p->dp, ngpus = nranks * (size_t)p->tp;
    char a[64], b[64], d[64];
    size_t matrices;
    double elements;
    count_params(p, &matrices, &elements);

    fprintf(out, "model    %s (%zu parameters: %zu matrix, %zu elementwise; %.3f B elements)\n",
            m->name, p->nparams, matrices, p->nparams - matrices, elements / 1e9);
    fprintf(out, "cluster  %s (%d GPUs = DP %d x TP %d x PP %d, %d per node)\n", c->name, c->gpus,
            p->dp, p->tp, p->pp, p->gpus_per_node);
    if (cz_plan_has_experts(p))
        fprintf(out,
                "experts  EP %d x ETP %d x expert-DP %d per stage: the routed experts in a buffer "
                "of their own per EP rank\n",
                p->ep, p->etp, p->edp);
    fprintf(out, "settings optimizer %s, unit %s, dp %s", cz_optimizer_name(s->optimizer),
            cz_unit_name(u), cz_dp_strategy_name(s->dp));
    if (s->dp == CZ_DP_ALPHA || s->dp == CZ_DP_TPAWARE)
        fprintf(out, " (alpha %g, %s loads)", s->alpha, s->alpha_numel_loads ? "element" : "cost");
    if (s->dp == CZ_DP_LAYERWISE)
        fprintf(out, " (%s order)", cz_layerwise_order_name(s->layerwise_order));
    fprintf(out, ", tp %s (capacity %s), solver %s\n", cz_tp_strategy_name(s->tp),
            cz_cli_format_cost(a, sizeof a, p->capacity_used, u), cz_solver_name(s->solver));
    if (cz_plan_is_fsdp(p)) {
        int most = 0;
        for (size_t k = 0; k < p->nschedules; k++)
            most = p->schedules[k].ngroups > most ? p->schedules[k].ngroups : most;
        int R = cz_plan_fsdp_replicas(p);
        if (R > 1)
            fprintf(out,
                    "layout   fsdp, HSDP: %d replicas of %d shard ranks; every parameter "
                    "Shard(0) over the %d shard\n"
                    "         ranks (torch.chunk rows), gradients averaged over the replicas by "
                    "the job; %s:\n"
                    "         %s\n",
                    R, cz_plan_fsdp_shard(p), cz_plan_fsdp_shard(p), cz_hsdp_compute_name(s->hsdp),
                    s->hsdp == CZ_HSDP_PARTITIONED
                        ? "each matrix owned by one GPU of the whole stage, its update sent "
                          "to every replica"
                        : "every replica updates every matrix over its own GPUs (the same "
                          "result on each)");
        fprintf(out,
                "layout   fsdp: every parameter Shard(0) over %d %s ranks (torch.chunk rows), "
                "no buckets;\n"
                "         each matrix owned by one of the %d GPUs of %s,\n"
                "         %d micro-group%s per stage at most, each one all-to-all(v) to the "
                "owners and one back\n",
                cz_plan_fsdp_shard(p), R > 1 ? "shard" : "DP", cz_plan_fsdp_slots(p),
                R > 1 && s->hsdp == CZ_HSDP_PARTITIONED ? "its stage (every replica)"
                : R > 1                                 ? "a replica of its stage"
                                                        : "its stage's shard group (DP x TP)",
                most, most == 1 ? "" : "s");
    } else {
        fprintf(out, "buckets  %zu (size %lld elements, align %lld)", p->nbuckets,
                (long long)p->bucket_size, (long long)p->bucket_align);
    }
    if (cz_plan_has_experts(p)) {
        size_t ex = 0;
        for (size_t b = 0; b < p->nbuckets; b++)
            ex += p->buckets[b].expert != 0;
        fprintf(out, "; %zu in the expert buffers", ex);
    }
    if (!cz_plan_is_fsdp(p) && s->layout == CZ_LAYOUT_SPLIT) {
        size_t ew = 0;
        for (size_t b = 0; b < p->nbuckets; b++)
            ew += p->buckets[b].elementwise != 0;
        fprintf(out,
                "; split layout: %zu in the evenly sliced elementwise buffer, %zu in the "
                "matrix buffer",
                ew, p->nbuckets - ew);
    }
    if (!cz_plan_is_fsdp(p))
        fprintf(out, "\n");
    if (p->dp_fell_back)
        fprintf(
            out,
            "note     alpha's partition was less balanced than anchored's; anchored was kept\n");
    if (p->dp_numel_cuts)
        fprintf(out,
                "note     alpha's cuts from element loads balanced the cost at least as well and "
                "gave a\n"
                "         shorter makespan than the cuts from cost loads; they were kept\n");

    fprintf(out, "\n%-8s %14s %7s %14s %7s %18s\n", p->pp > 1 ? "stage/dp" : "DP rank", "load",
            "/mean", "TP makespan", "groups", "opt-state max/GPU");
    double mean = vmean(mt->dp_load, nranks);
    for (size_t r = 0; r < nranks; r++) {
        char rank[48];
        if (p->pp > 1)
            snprintf(rank, sizeof rank, "%zu/%zu", r / (size_t)p->dp, r % (size_t)p->dp);
        else
            snprintf(rank, sizeof rank, "%zu", r);
        fprintf(
            out, "%-8s %14s %7.3f %14s %7d %18s\n", rank,
            cz_cli_format_cost(a, sizeof a, mt->dp_load[r], u),
            mean > 0 ? mt->dp_load[r] / mean : 1.0,
            cz_cli_format_cost(b, sizeof b, mt->rank_makespan[r], u),
            /* A fully sharded plan's groups are its stage's, over the whole shard group. */
            cz_plan_is_fsdp(p) ? p->schedules[r / (size_t)p->dp].ngroups : p->schedules[r].ngroups,
            cz_cli_format_bytes(d, sizeof d, vmax(mt->memory + r * (size_t)p->tp, (size_t)p->tp)));
    }

    if (cz_plan_has_experts(p))
        print_expert_ranks(p, out);

    double per_gpu = mt->total_cost / (double)ngpus;
    fprintf(out, "\nDP imbalance (max/mean load)   %.4f\n", mt->dp_imbalance);
    if (cz_plan_has_experts(p)) {
        fprintf(out, "expert imbalance (max/mean)    %.4f\n", mt->expert_imbalance);
        fprintf(out, "makespan (busiest GPU: DP + expert rank) %s\n",
                cz_cli_format_cost(a, sizeof a, mt->tp_makespan, u));
    } else {
        fprintf(out, "%s  %s\n",
                cz_plan_is_fsdp(p) ? "makespan (shard group)       "
                                   : "TP makespan (busiest DP rank)",
                cz_cli_format_cost(a, sizeof a, mt->tp_makespan, u));
    }
    fprintf(out, "average load (total/GPUs)      %s\n",
            cz_cli_format_cost(a, sizeof a, mt->average_load, u));
    fprintf(out, "lower bound                    %s (%s)\n",
            cz_cli_format_cost(a, sizeof a, mt->split_lower_bound, u),
            mt->split_lower_bound < mt->lower_bound ? "with the block and cooperative tasks allowed"
                                                    : "= the atomic lower bound");
    cz_lower_bound lb = {0};
    cz_error lb_err = {0};
    char terms[256] = "";
    if (cz__plan_lower_bound(p, &lb, &lb_err) == CZ_OK) {
        double t[4] = {lb.stage_load, lb.expert_group, lb.shared_gpu, lb.dense_with_group};
        cz_cli_bound_terms(terms, sizeof terms,
                           per_gpu > lb.largest_task ? per_gpu : lb.largest_task, t, u);
    }
    fprintf(out, "atomic lower bound             %s = max(total/GPUs %s, largest task %s%s)\n",
            cz_cli_format_cost(a, sizeof a, mt->lower_bound, u),
            cz_cli_format_cost(b, sizeof b, per_gpu, u),
            cz_cli_format_cost(d, sizeof d, mt->max_task_cost, u), terms);
    fprintf(out, "makespan / average load        %.4f\n",
            mt->average_load > 0 ? mt->tp_makespan / mt->average_load : 1.0);
    fprintf(out, "makespan / lower bound         %.4f\n",
            mt->split_lower_bound > 0 ? mt->tp_makespan / mt->split_lower_bound : 1.0);
    fprintf(out, "makespan / atomic lower bound  %.4f\n",
            mt->lower_bound > 0 ? mt->tp_makespan / mt->lower_bound : 1.0);
    fprintf(out, "GPU load imbalance (max/mean)  %.4f\n", mt->tp_imbalance);
    fprintf(out, "optimizer state per GPU        %s .. %s\n",
            cz_cli_format_bytes(a, sizeof a, vmin(mt->memory, ngpus)),
            cz_cli_format_bytes(b, sizeof b, vmax(mt->memory, ngpus)));
    fprintf(out, "predicted optimizer compute    %s per step\n",
            cz_cli_format_cost(a, sizeof a, mt->predicted_step_s, CZ_UNIT_TIME));
    /* With whole matrices the largest one is a floor no schedule goes under; past 1.3x the
     * average (the ratio docs/PERF.md aims at) the makespan ratios above read near 1 while
     * most GPUs idle, so say which flag removes the floor. Only where it applies (Muon,
     * rollback, TP > 1, a time or FLOP unit) and the user has not asked for it already. */
    if (!s->split_blocks && s->coop == 0 && s->optimizer == CZ_OPTIM_MUON &&
        s->unit != CZ_UNIT_NUMEL && s->tp == CZ_TP_ROLLBACK && p->tp > 1 && mt->average_load > 0 &&
        mt->max_task_cost > 1.3 * mt->average_load)
        fprintf(
            out,
            "note     the largest task (%s) is %.2fx the average load, and no plan of whole\n"
            "         matrices gets below it: --coop auto plans fused blocks as separate tasks\n"
            "         and lets GPUs of a TP group compute one matrix together (docs/PLANNER.md,\n"
            "         \"Block and cooperative tasks\")\n",
            cz_cli_format_cost(a, sizeof a, mt->max_task_cost, u),
            mt->max_task_cost / mt->average_load);
    if (s->solver == CZ_SOLVER_ILP)
        fprintf(out,
                "ILP solver                     %s, gap %.3g%% (DP %s, micro-groups %s), %.1f s\n",
                cz__solve_status_name(p->solver_status), 100.0 * p->solver_gap,
                cz__solve_status_name(p->solver_status_dp),
                cz__solve_status_name(p->solver_status_tp), p->solver_seconds);
    fprintf(out, "planning time                  %.2f ms\n", p->plan_seconds * 1e3);
    if (output)
        fprintf(out, "plan written to                %s\n",
                strcmp(output, "-") ? output : "standard output");
    else
        fprintf(out, "(no -o given: plan not written)\n");
}

/* One self-overwriting line on stderr while an ILP solve runs. */
static void plan_progress(const cz_progress *pr, void *payload)
{
    *(int *)payload = 1;
    fprintf(stderr, "\rcanzona plan: %s %.0f s, incumbent %.6g, bound %.6g, gap %.2f%%   ",
            pr->phase, pr->elapsed_s, pr->incumbent, pr->best_bound, 100.0 * pr->gap);
    fflush(stderr);
}

static json_t *array_of(const double *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_real(v[i]));
    return a;
}

/* The busiest GPU's model states against the device (see docs/PLANNER.md, Memory per GPU). */
static json_t *memory_json(const cz_plan *p, const cz_cluster *c)
{
    const double gib = 1024.0 * 1024.0 * 1024.0;
    cz_memory_gpu *g = NULL;
    cz_error err;
    if (cz__plan_memory(p, &g, &err) != CZ_OK)
        return NULL;
    size_t w = cz__memory_worst(g, (size_t)p->dp * (size_t)p->tp * (size_t)p->pp);
    double dev = c->device.memory_gib;
    json_t *o =
        json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "gpu", (json_int_t)w, "params_gib",
                  g[w].params / gib, "grads_gib", g[w].grads / gib, "master_gib", g[w].master / gib,
                  "state_gib", g[w].state / gib, "total_gib", g[w].total / gib, "device_gib", dev,
                  "used_fraction", dev > 0 ? g[w].total / gib / dev : 0.0);
    free(g);
    return o;
}

static int print_json_summary(const cz_plan *p, const cz_cluster *c, const char *output, FILE *out)
{
    const cz_plan_metrics *mt = &p->metrics;
    size_t nranks = (size_t)p->pp * (size_t)p->dp;
    json_t *o = json_pack(
        "{s:s, s:s, s:{s:i, s:i, s:i}, s:{s:s, s:s, s:s, s:f, s:s, s:f, s:b, s:b}, s:o, s:f, s:f, "
        "s:f, "
        "s:f, s:f, s:f, s:o, s:o, s:f, s:f, s:s?, s:s, s:f, s:f, s:{s:s, s:f, s:s, s:f}}",
        "model", p->model_name, "cluster", p->cluster_name, "topology", "dp", p->dp, "tp", p->tp,
        "pp", p->pp, "settings", "optimizer", cz_optimizer_name(p->settings.optimizer), "unit",
        cz_unit_name(p->settings.unit), "dp_strategy", cz_dp_strategy_name(p->settings.dp), "alpha",
        p->settings.alpha, "tp_strategy", cz_tp_strategy_name(p->settings.tp), "capacity_used",
        p->capacity_used, "dp_fell_back", p->dp_fell_back, "dp_numel_cuts", p->dp_numel_cuts,
        "dp_load", array_of(mt->dp_load, nranks), "dp_imbalance", mt->dp_imbalance, "tp_makespan",
        mt->tp_makespan, "tp_imbalance", mt->tp_imbalance, "lower_bound", mt->lower_bound,
        "makespan_over_lower_bound", mt->lower_bound > 0 ? mt->tp_makespan / mt->lower_bound : 1.0,
        "total_cost", mt->total_cost, "rank_makespan", array_of(mt->rank_makespan, nranks),
        "memory", array_of(mt->memory, nranks * (size_t)p->tp), "predicted_step_s",
        mt->predicted_step_s, "plan_seconds", p->plan_seconds, "output", output, "solver_status",
        cz__solve_status_name(p->solver_status), "solver_gap", p->solver_gap, "solver_seconds",
        p->solver_seconds, "solver_phases", "dp_status", cz__solve_status_name(p->solver_status_dp),
        "dp_gap", p->solver_gap_dp, "tp_status", cz__solve_status_name(p->solver_status_tp),
        "tp_gap", p->solver_gap_tp);
    json_t *settings = o ? json_object_get(o, "settings") : NULL;
    json_t *mem = o ? memory_json(p, c) : NULL;
    if (o && cz_plan_has_experts(p)) {
        size_t nx = (size_t)p->pp * (size_t)cz_plan_expert_ranks(p);
        json_t *ex =
            json_pack("{s:i, s:i, s:i, s:o, s:f, s:o}", "ep", p->ep, "etp", p->etp, "edp", p->edp,
                      "load", array_of(mt->expert_load, nx), "imbalance", mt->expert_imbalance,
                      "rank_makespan", array_of(mt->expert_rank_makespan, nx));
        if (!ex || json_object_set_new(o, "expert", ex)) {
            json_decref(o);
            json_decref(mem);
            fprintf(stderr, "canzona plan: out of memory\n");
            return 1;
        }
    }
    if (!o || !mem || json_object_set_new(o, "memory_per_gpu", mem) || !settings ||
        json_object_set_new(settings, "layout", json_string(cz_layout_name(p->settings.layout))) ||
        json_object_set_new(o, "average_load", json_real(mt->average_load)) ||
        json_object_set_new(o, "split_lower_bound", json_real(mt->split_lower_bound)) ||
        json_object_set_new(
            o, "makespan_over_average_load",
            json_real(mt->average_load > 0 ? mt->tp_makespan / mt->average_load : 1.0)) ||
        json_object_set_new(
            o, "makespan_over_split_lower_bound",
            json_real(mt->split_lower_bound > 0 ? mt->tp_makespan / mt->split_lower_bound : 1.0))) {
        json_decref(o);
        fprintf(stderr, "canzona plan: out of memory\n");
        return 1;
    }
    json_dumpf(o, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    fprintf(out, "\n");
    json_decref(o);
    return 0;
}

/* Whether any micro-group holds a cooperative task (width > 1). */
static int has_coop(const cz_plan *plan)
{
    for (size_t r = 0; r < plan->nschedules; r++)
        for (int g = 0; g < plan->schedules[r].ngroups; g++) {
            const cz_plan_group *grp = &plan->schedules[r].groups[g];
            for (int k = 0; k < grp->ntasks; k++)
                if (cz_group_task_width(grp, k) > 1 &&
                    !cz_task_is_local(&plan->params[grp->task_param[k]].def,
                                      cz_group_task_width(grp, k))) /* TP-local: no Gram */
                    return 1;
        }
    return 0;
}

typedef struct plan_args {
    const char *model_path, *cluster_path, *output, *calibration, *split;
    int json, quiet, allow_memory;
} plan_args;

static int plan_option(void *state, int opt, const char *value)
{
    plan_args *a = state;
    switch (opt) {
    case 'm':
        a->model_path = value;
        return 0;
    case 'c':
        a->cluster_path = value;
        return 0;
    case 'o':
        a->output = value;
        return 0;
    case 'j':
        a->json = 1;
        return 0;
    case 'q':
        a->quiet = 1;
        return 0;
    case 'M':
        a->allow_memory = 1;
        return 0;
    case CZ_OPT_CALIBRATION:
        a->calibration = value;
        return 0;
    case CZ_OPT_SPLIT_DIR:
        a->split = value;
        return 0;
    }
    return 1;
}

int cz_cmd_plan(int argc, char **argv)
{
    static const struct option own[] = {
        {"model", required_argument, NULL, 'm'},
        {"cluster", required_argument, NULL, 'c'},
        {"output", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, 'j'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"allow-oversubscribed-memory", no_argument, NULL, 'M'},
        {"split", required_argument, NULL, CZ_OPT_SPLIT_DIR},
        CZ_CLI_CALIBRATION_OPTION,
        {NULL, 0, NULL, 0},
    };
    plan_args a = {0};
    cz_settings settings;
    cz_settings_init(&settings);
    cz_cluster_sizes sizes = {0};
    const cz_cli_spec spec = {.name = "plan",
                              .shortopts = "m:c:o:qh",
                              .own = own,
                              .help = plan_help,
                              .apply = plan_option,
                              .state = &a,
                              .settings = &settings,
                              .sizes = &sizes,
                              .operands = -1};
    int rc = cz_cli_parse(&spec, argc, argv);
    if (rc != CZ_CLI_CONTINUE)
        return rc;
    rc = 1;
    const char *model_path = a.model_path, *cluster_path = a.cluster_path, *output = a.output;
    int json = a.json, quiet = a.quiet, allow_memory = a.allow_memory;
    char memory_note[1024];
    cz_model *model = NULL;
    cz_cluster *cluster = NULL;
    cz_plan *plan = NULL;
    cz_error err;
    cz_error_clear(&err);
    if (cz_cli_require_inputs("plan", argc, argv, optind, model_path, cluster_path))
        return 2;
    /* --split cuts the plan as written: it needs it in a file. */
    char split_plan[4096];
    if (a.split && output && !strcmp(output, "-")) {
        fprintf(stderr, "canzona plan: --split needs the plan in a file: give -o FILE, or leave -o "
                        "out to write DIR/plan.json\n");
        return 2;
    }
    if (a.split && !output) {
        if ((size_t)snprintf(split_plan, sizeof split_plan, "%s/plan.json", a.split) >=
            sizeof split_plan) {
            fprintf(stderr, "canzona plan: --split %s: path too long\n", a.split);
            return 2;
        }
        output = split_plan;
    }
    const char *inputs[] = {model_path, cluster_path, a.calibration},
               *what[] = {"the model", "the cluster", "the calibration"};
    if (cz__file_check_output(output, inputs, what, a.calibration ? 3 : 2, &err) != CZ_OK) {
        fprintf(stderr, "canzona plan: %s\n", err.message);
        goto done;
    }
    if (cz_cli_load_inputs("plan", model_path, cluster_path, &sizes, a.calibration, &model,
                           &cluster))
        goto done;
    int progress_shown = 0;
    if (!quiet && settings.solver == CZ_SOLVER_ILP) {
        settings.progress = plan_progress;
        settings.progress_payload = &progress_shown;
    }
    int built = cz_plan_build(&plan, model, cluster, &settings, &err);
    if (progress_shown)
        fprintf(stderr, "\n");
    if (built != CZ_OK) {
        fprintf(stderr, "canzona plan: %s\n", err.message);
        goto done;
    }
    if (plan->solver_note[0] && !quiet)
        fprintf(stderr, "canzona plan: warning: %s\n", plan->solver_note);
    if (!quiet && !cluster->device.costs.on && plan->dtype != CZ_DTYPE_FP32 && has_coop(plan))
        /* The flat model costs every GEMM at one rate; the executor's cooperative path runs
         * fp32 GEMMs (16x slower than bf16 on an H200) and an NCCL call per Gram panel. */
        fprintf(stderr,
                "canzona plan: warning: cooperative widths chosen by the flat model, which "
                "charges neither the fp32 GEMMs of the executor's cooperative Newton-Schulz "
                "nor its per-panel calls; with device.kind in %s or --calibration they are "
                "costed as they run (docs/PERF.md section 11)\n",
                cluster_path);
    if (cz__plan_memory_check(plan, cluster, allow_memory, memory_note, sizeof memory_note, &err)) {
        fprintf(stderr, "canzona plan: %s\n", err.message);
        goto done;
    }
    if (memory_note[0] && !quiet)
        fprintf(stderr, "canzona plan: warning: %s\n", memory_note);
    if (a.split && mkdir(a.split, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "canzona plan: --split %s: cannot create the folder: %s\n", a.split,
                strerror(errno));
        goto done;
    }
    if (output && cz_plan_write(plan, output, &err) != CZ_OK) {
        fprintf(stderr, "canzona plan: %s\n", err.message);
        goto done;
    }
    if (a.split && cz__plan_split_write(output, a.split, &err) != CZ_OK) {
        fprintf(stderr, "canzona plan: --split %s: %s\n", a.split, err.message);
        goto done;
    }
    rc = 0;
    if (quiet)
        goto done;
    /* With the plan on standard output, the summary goes to standard error. */
    FILE *out = output && !strcmp(output, "-") ? stderr : stdout;
    if (json)
        rc = print_json_summary(plan, cluster, output, out);
    else
        print_summary(plan, model, cluster, output, out);
done:
    cz_plan_free(plan);
    cz_model_free(model);
    cz_cluster_free(cluster);
    return rc;
}
