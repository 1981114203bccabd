/* canzona inspect — a readable balance report of a plan: per-rank and per-GPU loads, imbalance
 * against the lower bound, the busiest ranks and what makes them busy. */
#include "cli_util.h"
#include "commands.h"
#include "cz_types.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void inspect_help(FILE *f)
{
    fprintf(
        f,
        "usage: canzona inspect PLAN.json|DIR [--cluster CLUSTER.json] [--json] [--top N] [--all]\n"
        "                       [--startup [--read-gbps X] [--fs-gbps Y]]\n"
        "\n"
        "Prints the plan's topology and settings; a table per DP rank (load, share of the\n"
        "mean, owned parameters and matrices, TP makespan, micro-groups, min..max load and\n"
        "optimizer-state memory over its TP ranks); imbalance figures (DP and GPU max/mean,\n"
        "makespan, average load, lower bound, atomic lower bound max(total/GPUs, largest\n"
        "task, and the stage, EP-group and shared-GPU terms where one is larger), the\n"
        "makespan over each); the N\n"
        "busiest ranks with their largest parameters and each one's share of the rank's\n"
        "load; micro-group statistics per DP rank; and the matrices heavier than an\n"
        "average GPU's load, which no partition can split. Costs are in the plan's unit.\n"
        "It also shows the busiest GPU's model states (parameter and gradient buffers, fp32\n"
        "master copy, optimizer state) and, with --cluster, the headroom left on the device.\n"
        "A plan with block or cooperative tasks (canzona.plan/2) also gets their counts and\n"
        "list: name[block], width, a cooperative task's Gram panels, the TP slots each\n"
        "spans and its cost per slot. A plan with expert groups (canzona.plan/3) also gets\n"
        "a table per expert rank (EP rank and expert-DP rank: owned expert cost, share of\n"
        "the mean, owned experts, ETP makespan, micro-groups) and the GPU whose DP and\n"
        "expert ranks together set the makespan.\n"
        "\n"
        "options:\n"
        "  -c, --cluster FILE  the cluster (same DP, TP and PP as the plan) whose\n"
        "                 device.memory_gib the model states are compared with\n"
        "      --json     print the same content as JSON (always includes every GPU)\n"
        "  -n, --top N    busiest ranks and parameters per rank to list (default 3)\n"
        "  -a, --all      also print the full per-GPU table and every dominating matrix\n"
        "      --startup  print instead the start-up model: the bytes each rank's\n"
        "                 cz_executor_create reads and its estimated time, for the plan\n"
        "                 file and, when PLAN is the folder of canzona plan --split, for\n"
        "                 its parts (docs/PERF.md section 16)\n"
        "      --read-gbps X  a rank's read bandwidth in the model, GB/s (default 2)\n"
        "      --fs-gbps Y    the file system's aggregate bandwidth, GB/s (default 100)\n"
        "  -h, --help     this help\n");
}

static const char *rank_label(char *buf, size_t n, json_t *o, int pp)
{
    if (pp > 1)
        snprintf(buf, n, "%d/%d", cz_cli_jint(o, "stage"), cz_cli_jint(o, "dp_rank"));
    else
        snprintf(buf, n, "%d", cz_cli_jint(o, "dp_rank"));
    return buf;
}

/* A task's name: the parameter's, with [b] for block b. */
static const char *task_label(char *buf, size_t n, json_t *o)
{
    int block = json_object_get(o, "block") ? cz_cli_jint(o, "block") : -1;
    if (block >= 0)
        snprintf(buf, n, "%s[%d]", cz_cli_jstr(o, "name"), block);
    else
        snprintf(buf, n, "%s", cz_cli_jstr(o, "name"));
    return buf;
}

/* A plan with expert groups: the expert ranks' table, the busiest ones and the GPU that sets the
 * makespan with its DP rank's and its expert rank's micro-groups. */
static void print_experts(json_t *r, int pp, cz_cost_unit u)
{
    json_t *ex = json_object_get(r, "experts"), *o;
    if (!json_is_object(ex))
        return;
    char a[64], b[64], lab[48];
    size_t i;
    printf("\nexpert groups: EP %d x ETP %d x expert-DP %d per stage, expert load max/mean %.4f\n",
           cz_cli_jint(ex, "ep"), cz_cli_jint(ex, "etp"), cz_cli_jint(ex, "edp"),
           cz_cli_jnum(ex, "imbalance"));
    printf("%-14s %13s %6s %6s %13s %6s\n", pp > 1 ? "stage/EP/eDP" : "EP/expert-DP", "expert load",
           "/mean", "params", "ETP makespan", "groups");
    json_array_foreach(json_object_get(ex, "ranks"), i, o)
    {
        if (pp > 1)
            snprintf(lab, sizeof lab, "%d/%d/%d", cz_cli_jint(o, "stage"),
                     cz_cli_jint(o, "ep_rank"), cz_cli_jint(o, "edp_rank"));
        else
            snprintf(lab, sizeof lab, "%d/%d", cz_cli_jint(o, "ep_rank"),
                     cz_cli_jint(o, "edp_rank"));
        printf("%-14s %13s %6.3f %6d %13s %6d\n", lab,
               cz_cli_format_cost(a, sizeof a, cz_cli_jnum(o, "load"), u),
               cz_cli_jnum(o, "share_of_mean"), cz_cli_jint(o, "params"),
               cz_cli_format_cost(b, sizeof b, cz_cli_jnum(o, "makespan"), u),
               cz_cli_jint(o, "groups"));
    }
    json_t *g = json_object_get(ex, "busiest_gpu");
    if (json_is_object(g))
        printf("busiest GPU %d (stage %d, DP rank %d, TP rank %d; EP rank %d, expert-DP rank %d, "
               "ETP rank %d): %s = dense %s + experts %s\n",
               cz_cli_jint(g, "gpu"), cz_cli_jint(g, "stage"), cz_cli_jint(g, "dp_rank"),
               cz_cli_jint(g, "tp_rank"), cz_cli_jint(g, "ep_rank"), cz_cli_jint(g, "edp_rank"),
               cz_cli_jint(g, "etp_rank"),
               cz_cli_format_cost(a, sizeof a, cz_cli_jnum(g, "makespan"), u),
               cz_cli_format_cost(b, sizeof b, cz_cli_jnum(g, "dense_makespan"), u),
               cz_cli_format_cost(lab, sizeof lab, cz_cli_jnum(g, "expert_makespan"), u));
}

/* A fully sharded plan's micro-groups: each spans the stage's whole shard group. */
static void print_fsdp(json_t *f, cz_cost_unit u)
{
    size_t i, j;
    json_t *st, *o;
    char a[64], b[64], c[64];
    if (!json_is_object(f))
        return;
    printf("\nfully sharded: %d GPUs per schedule; %d parameters sharded unevenly by "
           "torch.chunk, %d with fewer rows than %s ranks (the last ranks hold none)\n",
           cz_cli_jint(f, "shard_group_gpus"), cz_cli_jint(f, "uneven_params"),
           cz_cli_jint(f, "short_params"), cz_cli_jint(f, "replicas") > 1 ? "shard" : "DP");
    json_array_foreach(json_object_get(f, "stages"), i, st)
    {
        printf("  stage %d: at most %d tasks on one GPU\n  %6s %6s %6s %6s %13s %13s  %s\n",
               cz_cli_jint(st, "stage"), cz_cli_jint(st, "tasks_per_gpu_max"), "group", "tasks",
               "shapes", "owners", "slot min", "slot max", "largest task");
        json_array_foreach(json_object_get(st, "groups"), j, o)
        {
            json_t *big = json_object_get(o, "largest_task");
            printf("  %6d %6d %6d %6d %13s %13s  %s (%s)\n", cz_cli_jint(o, "id"),
                   cz_cli_jint(o, "tasks"), cz_cli_jint(o, "shapes"), cz_cli_jint(o, "owners"),
                   cz_cli_format_cost(a, sizeof a, cz_cli_jnum(o, "slot_load_min"), u),
                   cz_cli_format_cost(b, sizeof b, cz_cli_jnum(o, "slot_load_max"), u),
                   cz_cli_jstr(big, "name"),
                   cz_cli_format_cost(c, sizeof c, cz_cli_jnum(big, "cost"), u));
        }
    }
}

static void print_text(const cz_plan *p, json_t *r, int all)
{
    cz_cost_unit u = p->settings.unit;
    json_t *s = json_object_get(r, "settings"), *sum = json_object_get(r, "summary");
    char a[64], b[64], c[64], lab[32], lab2[512];
    int pp = p->pp;
    size_t i;
    json_t *o;

    printf("plan      model %s, cluster %s\n", cz_cli_jstr(r, "model"), cz_cli_jstr(r, "cluster"));
    json_t *cal = json_object_get(r, "calibration");
    if (cal)
        printf("costs     calibrated on %s, measured %s (calibration %.12s...)\n",
               cz_cli_jstr(cal, "device"), cz_cli_jstr(cal, "measured_at"),
               cz_cli_jstr(cal, "sha256"));
    printf("topology  %d GPUs = DP %d x TP %d x PP %d, %d per node\n", p->dp * p->tp * p->pp, p->dp,
           p->tp, p->pp, p->gpus_per_node);
    printf("settings  optimizer %s, unit %s, dp %s", cz_cli_jstr(s, "optimizer"),
           cz_cli_jstr(s, "unit"), cz_cli_jstr(s, "dp"));
    if (p->settings.dp == CZ_DP_ALPHA || p->settings.dp == CZ_DP_TPAWARE)
        printf(" (alpha %g)", p->settings.alpha);
    printf(", tp %s (capacity %s), solver %s, seed %llu\n", cz_cli_jstr(s, "tp"),
           cz_cli_format_cost(a, sizeof a, p->capacity_used, u), cz_cli_jstr(s, "solver"),
           (unsigned long long)p->settings.seed);
    if (cz_plan_is_fsdp(p) && cz_plan_fsdp_replicas(p) > 1)
        printf("layout    fsdp, HSDP: %d replicas of %d shard ranks, every parameter Shard(0) "
               "over the shard ranks (torch.chunk rows), no buckets; %s: each matrix owned by "
               "one GPU of %s (%d GPUs)\n",
               cz_plan_fsdp_replicas(p), cz_plan_fsdp_shard(p),
               cz_hsdp_compute_name(p->settings.hsdp),
               p->settings.hsdp == CZ_HSDP_PARTITIONED
                   ? "the whole stage, its update sent to every replica"
                   : "each replica, every replica updating every matrix",
               cz_plan_fsdp_slots(p));
    else if (cz_plan_is_fsdp(p))
        printf("layout    fsdp: every parameter Shard(0) over DP %d as FSDP2's fully_shard "
               "(torch.chunk rows), no buckets; each matrix owned by one GPU of its stage's "
               "%d-GPU shard group\n",
               p->dp, p->dp * p->tp);
    if (p->settings.layout == CZ_LAYOUT_SPLIT)
        printf("layout    split: matrix parameters in a buffer of their own; elementwise "
               "parameters in an evenly sliced buffer, cut between DP ranks (not counted "
               "below)\n");
    if (p->settings.ns_coeffs) /* only plans made with another set than jordan's */
        printf("muon      Newton-Schulz coefficients %s: %d iterations priced\n",
               p->settings.ns_coeffs, p->settings.ns_steps);
    printf("params    %d (%d matrix), %d buckets; costs in %s\n", cz_cli_jint(sum, "params"),
           cz_cli_jint(sum, "matrices"), cz_cli_jint(sum, "buckets"), cz_cli_jstr(r, "unit"));
    if (p->dp_fell_back)
        printf("note      alpha's partition lost to anchored; anchored was kept\n");

    printf("\n%-8s %13s %6s %6s %8s %13s %6s %27s %21s\n", pp > 1 ? "stage/dp" : "DP rank", "load",
           "/mean", "params", "matrices", "TP makespan", "groups", "GPU load min..max",
           "opt-state min..max");
    json_array_foreach(json_object_get(r, "dp_ranks"), i, o)
    {
        char l1[64], l2[64], range[160], mem[160];
        snprintf(range, sizeof range, "%s..%s",
                 cz_cli_format_cost(l1, sizeof l1, cz_cli_jnum(o, "gpu_load_min"), u),
                 cz_cli_format_cost(l2, sizeof l2, cz_cli_jnum(o, "gpu_load_max"), u));
        char g1[32], g2[32];
        snprintf(mem, sizeof mem, "%s..%s GiB",
                 cz_cli_format_gib(g1, sizeof g1, cz_cli_jnum(o, "memory_gib_min")),
                 cz_cli_format_gib(g2, sizeof g2, cz_cli_jnum(o, "memory_gib_max")));
        printf("%-8s %13s %6.3f %6d %8d %13s %6d %27s %21s\n", rank_label(lab, sizeof lab, o, pp),
               cz_cli_format_cost(a, sizeof a, cz_cli_jnum(o, "load"), u),
               cz_cli_jnum(o, "share_of_mean"), cz_cli_jint(o, "params"),
               cz_cli_jint(o, "matrices"),
               cz_cli_format_cost(b, sizeof b, cz_cli_jnum(o, "makespan"), u),
               cz_cli_jint(o, "groups"), range, mem);
    }
    if (all) {
        printf("\n%-8s %7s %13s %12s\n", "stage/dp", "TP rank", "load", "opt-state");
        json_array_foreach(json_object_get(r, "gpus"), i, o)
        {
            snprintf(lab, sizeof lab, "%d/%d", cz_cli_jint(o, "stage"), cz_cli_jint(o, "dp_rank"));
            printf("%-8s %7d %13s %8.3f GiB\n", lab, cz_cli_jint(o, "tp_rank"),
                   cz_cli_format_cost(a, sizeof a, cz_cli_jnum(o, "load"), u),
                   cz_cli_jnum(o, "memory_gib"));
        }
    }

    printf("\nimbalance\n");
    printf("  DP load max/mean          %.4f\n", cz_cli_jnum(sum, "dp_imbalance"));
    printf("  GPU load max/mean         %.4f\n", cz_cli_jnum(sum, "tp_imbalance"));
    printf("  TP makespan               %s\n",
           cz_cli_format_cost(a, sizeof a, cz_cli_jnum(sum, "tp_makespan"), u));
    double avg = cz_cli_jnum(sum, "average_load"), slb = cz_cli_jnum(sum, "split_lower_bound");
    double lb = cz_cli_jnum(sum, "lower_bound"), mk = cz_cli_jnum(sum, "tp_makespan");
    printf("  average load              %s (total/GPUs)\n",
           cz_cli_format_cost(a, sizeof a, avg, u));
    printf("  lower bound               %s (%s)\n", cz_cli_format_cost(a, sizeof a, slb, u),
           slb < lb ? "with the block and cooperative tasks allowed" : "= the atomic lower bound");
    double per_gpu = cz_cli_jnum(sum, "total_cost") / (p->dp * p->tp * p->pp);
    json_t *lbt = json_object_get(sum, "lower_bound_terms");
    double largest = cz_cli_jnum(lbt, "largest_task");
    double terms4[4] = {cz_cli_jnum(lbt, "stage_load"), cz_cli_jnum(lbt, "expert_group"),
                        cz_cli_jnum(lbt, "shared_gpu"), cz_cli_jnum(lbt, "dense_with_group")};
    char terms[256];
    cz_cli_bound_terms(terms, sizeof terms, per_gpu > largest ? per_gpu : largest, terms4, u);
    printf("  atomic lower bound        %s = max(total/GPUs %s, largest task %s%s)\n",
           cz_cli_format_cost(a, sizeof a, lb, u), cz_cli_format_cost(b, sizeof b, per_gpu, u),
           cz_cli_format_cost(c, sizeof c, cz_cli_jnum(sum, "max_task_cost"), u), terms);
    printf("  makespan / average load   %.4f\n", avg > 0 ? mk / avg : 0.0);
    printf("  makespan / lower bound    %.4f\n", slb > 0 ? mk / slb : 0.0);
    printf("  makespan / atomic lower bound %.4f\n", cz_cli_jnum(sum, "makespan_over_lower_bound"));
    printf("  predicted optimizer step  %s\n",
           cz_cli_format_cost(a, sizeof a, cz_cli_jnum(sum, "predicted_step_s"), CZ_UNIT_TIME));

    json_t *mem = json_object_get(r, "memory_per_gpu");
    if (json_is_object(mem)) {
        printf("\nmemory of the busiest GPU (%d: stage %d, DP rank %d, TP rank %d)\n",
               cz_cli_jint(mem, "gpu"), cz_cli_jint(mem, "stage"), cz_cli_jint(mem, "dp_rank"),
               cz_cli_jint(mem, "tp_rank"));
        printf("  parameters %.2f + gradients %.2f + fp32 master %.2f + optimizer state %.2f = "
               "%.2f GiB\n",
               cz_cli_jnum(mem, "params_gib"), cz_cli_jnum(mem, "grads_gib"),
               cz_cli_jnum(mem, "master_gib"), cz_cli_jnum(mem, "state_gib"),
               cz_cli_jnum(mem, "total_gib"));
        if (json_object_get(mem, "device_gib"))
            printf("  device %.2f GiB: headroom %.2f GiB (%.1f%% used; plan warns above %.0f%%)\n",
                   cz_cli_jnum(mem, "device_gib"), cz_cli_jnum(mem, "headroom_gib"),
                   100.0 * cz_cli_jnum(mem, "used_fraction"), 100.0 * CZ_MEMORY_WARN_FRACTION);
        else
            printf("  (--cluster FILE compares it with the device's memory)\n");
    }

    print_experts(r, pp, u);

    json_t *busiest = json_object_get(r, "busiest");
    printf("\nbusiest ranks (by TP makespan)\n");
    json_array_foreach(busiest, i, o)
    {
        printf("  DP rank %s: makespan %s, load %s\n", rank_label(lab, sizeof lab, o, pp),
               cz_cli_format_cost(a, sizeof a, cz_cli_jnum(o, "makespan"), u),
               cz_cli_format_cost(b, sizeof b, cz_cli_jnum(o, "load"), u));
        size_t j;
        json_t *q;
        json_array_foreach(json_object_get(o, "params"), j, q)
        {
            printf("    %13s %6.1f%%  %-11s %s\n",
                   cz_cli_format_cost(a, sizeof a, cz_cli_jnum(q, "cost"), u),
                   100.0 * cz_cli_jnum(q, "share_of_rank"), cz_cli_jstr(q, "kind"),
                   cz_cli_jstr(q, "name"));
        }
    }

    print_fsdp(json_object_get(r, "fsdp"), u);
    if (json_array_size(json_object_get(r, "microgroups")))
        printf("\nmicro-groups\n  %-8s %6s %6s %13s %13s  %s\n", pp > 1 ? "stage/dp" : "DP rank",
               "groups", "tasks", "slot min", "slot max", "largest task");
    json_array_foreach(json_object_get(r, "microgroups"), i, o)
    {
        json_t *big = json_object_get(o, "largest_task");
        printf("  %-8s %6d %6d %13s %13s  ", rank_label(lab, sizeof lab, o, pp),
               cz_cli_jint(o, "groups"), cz_cli_jint(o, "tasks"),
               cz_cli_format_cost(a, sizeof a, cz_cli_jnum(o, "slot_load_min"), u),
               cz_cli_format_cost(b, sizeof b, cz_cli_jnum(o, "slot_load_max"), u));
        if (json_is_object(big) && json_object_get(big, "width"))
            printf("%s (%s%s)\n", task_label(lab2, sizeof lab2, big),
                   cz_cli_format_cost(c, sizeof c, cz_cli_jnum(big, "cost"), u),
                   cz_cli_jint(big, "width") > 1 ? " per slot" : "");
        else if (json_is_object(big))
            printf("%s (%s)\n", cz_cli_jstr(big, "name"),
                   cz_cli_format_cost(c, sizeof c, cz_cli_jnum(big, "cost"), u));
        else
            printf("-\n");
    }

    json_t *tasks = json_object_get(r, "tasks");
    if (json_is_object(tasks)) {
        printf("\nblock and cooperative tasks (canzona.plan/2)\n  %d whole matrices, %d block "
               "tasks, %d cooperative tasks",
               cz_cli_jint(tasks, "whole"), cz_cli_jint(tasks, "blocks"),
               cz_cli_jint(tasks, "cooperative"));
        json_array_foreach(json_object_get(tasks, "widths"), i, o)
            printf("%swidth %d: %d", i == 0 ? " (" : ", ", cz_cli_jint(o, "width"),
                   cz_cli_jint(o, "tasks"));
        printf("%s\n", json_array_size(json_object_get(tasks, "widths")) ? ")" : "");
        json_t *tl = json_object_get(tasks, "list");
        printf("  %13s %5s %6s %7s %8s %6s  %s\n", "cost/slot", "width", "panels", "slots",
               pp > 1 ? "stage/dp" : "DP rank", "group", "task");
        size_t shown_tasks = all ? json_array_size(tl) : 10;
        json_array_foreach(tl, i, o)
        {
            if (i >= shown_tasks) {
                printf("  ... %zu more (--all or --json lists them)\n",
                       json_array_size(tl) - shown_tasks);
                break;
            }
            json_t *sl = json_object_get(o, "slots");
            char slots[32];
            snprintf(slots, sizeof slots, "%d-%d", (int)json_integer_value(json_array_get(sl, 0)),
                     (int)json_integer_value(json_array_get(sl, 1)));
            /* Only a cooperative task's Gram is all-reduced, in panels. */
            char panels[16] = "-";
            if (cz_cli_jint(o, "width") > 1)
                snprintf(panels, sizeof panels, "%d", cz_cli_jint(o, "panels"));
            printf("  %13s %5d %6s %7s %8s %6d  %s\n",
                   cz_cli_format_cost(a, sizeof a, cz_cli_jnum(o, "cost"), u),
                   cz_cli_jint(o, "width"), panels,
                   cz_cli_jint(o, "width") > 1 ? slots : strchr(slots, '-') + 1,
                   rank_label(lab, sizeof lab, o, pp), cz_cli_jint(o, "group"),
                   task_label(lab2, sizeof lab2, o));
        }
    }

    json_t *dom = json_object_get(r, "dominating"), *dl = json_object_get(dom, "params");
    printf("\nmatrices heavier than the average GPU load %s (they bound the makespan from below)\n",
           cz_cli_format_cost(a, sizeof a, cz_cli_jnum(dom, "average_gpu_load"), u));
    if (json_array_size(dl) == 0)
        printf("  none\n");
    /* Models repeat layers: a long list says little more than its head; --all prints it. */
    size_t shown = all ? json_array_size(dl) : 10;
    json_array_foreach(dl, i, o)
    {
        if (i >= shown) {
            printf("  ... %zu more (--all or --json lists them)\n", json_array_size(dl) - shown);
            break;
        }
        printf("  %13s %8.2f x average  %s\n",
               cz_cli_format_cost(a, sizeof a, cz_cli_jnum(o, "cost"), u),
               cz_cli_jnum(o, "over_average"), cz_cli_jstr(o, "name"));
    }
}

typedef struct inspect_args {
    int as_json, all, top, startup;
    const char *cluster_path;
    cz_startup_model model;
} inspect_args;

/* A bandwidth in GB/s: a positive finite number. */
static int parse_gbps(const char *opt, const char *value, double *out)
{
    char *end = NULL;
    double v = strtod(value, &end);
    if (!end || end == value || *end || !(v > 0) || v > 1e9) {
        fprintf(stderr,
                "canzona inspect: --%s: expected a bandwidth in GB/s above 0, found "
                "\"%s\"\n",
                opt, value);
        return 2;
    }
    *out = v;
    return 0;
}

/* The start-up model's report (--startup): each form's bytes per rank and estimated time. */
static void print_form(const char *name, const cz_startup_form *f, long gpus)
{
    printf("%-7s a rank reads %.3f MB (rank %ld) to %.3f MB (rank %ld): %.3f s to %.3f s; all %ld "
           "ranks %.1f GB: start-up %.3f s\n",
           name, f->min_bytes / 1e6, f->min_rank, f->max_bytes / 1e6, f->max_rank, f->min_rank_s,
           f->max_rank_s, gpus, f->total_bytes / 1e9, f->cluster_s);
}

static void form_json(json_t *o, const char *key, const cz_startup_form *f)
{
    json_object_set_new(o, key,
                        json_pack("{s:f, s:I, s:f, s:I, s:f, s:f, s:f, s:f}", "min_bytes",
                                  f->min_bytes, "min_rank", (json_int_t)f->min_rank, "max_bytes",
                                  f->max_bytes, "max_rank", (json_int_t)f->max_rank, "total_bytes",
                                  f->total_bytes, "min_rank_s", f->min_rank_s, "max_rank_s",
                                  f->max_rank_s, "cluster_s", f->cluster_s));
}

static void print_startup(const cz_startup_report *r, int as_json)
{
    const cz_startup_model *m = &r->model;
    if (as_json) {
        json_t *o = json_pack("{s:I, s:{s:f, s:f, s:f, s:f}}", "gpus", (json_int_t)r->gpus, "model",
                              "parse_mb_s", m->parse_mb_s, "fixed_s", m->fixed_s, "read_gbps",
                              m->read_gbps, "fs_gbps", m->fs_gbps);
        if (o) {
            form_json(o, "whole", &r->whole);
            if (r->has_split)
                form_json(o, "split", &r->split);
            json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
            printf("\n");
        }
        json_decref(o);
        return;
    }
    printf("start-up of cz_executor_create on %ld ranks (docs/PERF.md section 16): a rank takes "
           "%.3f s + bytes / %.1f MB/s (parse and check) + bytes / %.2f GB/s (its read); the "
           "cluster at least all bytes / %.1f GB/s (the file system)\n",
           r->gpus, m->fixed_s, m->parse_mb_s, m->read_gbps, m->fs_gbps);
    print_form("whole", &r->whole, r->gpus);
    if (r->has_split)
        print_form("split", &r->split, r->gpus);
    else
        printf("split   (give the folder of canzona plan --split to see its parts)\n");
}

static int inspect_option(void *state, int opt, const char *value)
{
    inspect_args *a = state;
    switch (opt) {
    case 'c':
        a->cluster_path = value;
        return 0;
    case 'j':
        a->as_json = 1;
        return 0;
    case 'n':
        return cz_cli_parse_int("inspect", "top", value, 0, 1000000, &a->top);
    case 'a':
        a->all = 1;
        return 0;
    case 'S':
        a->startup = 1;
        return 0;
    case 'R':
        return parse_gbps("read-gbps", value, &a->model.read_gbps);
    case 'F':
        return parse_gbps("fs-gbps", value, &a->model.fs_gbps);
    }
    return 1;
}

int cz_cmd_inspect(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"top", required_argument, NULL, 'n'},
        {"all", no_argument, NULL, 'a'},
        {"cluster", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {"startup", no_argument, NULL, 'S'},
        {"read-gbps", required_argument, NULL, 'R'},
        {"fs-gbps", required_argument, NULL, 'F'},
        {NULL, 0, NULL, 0},
    };
    inspect_args a = {.top = 3};
    cz__startup_model_init(&a.model);
    const cz_cli_spec spec = {.name = "inspect",
                              .shortopts = "n:ac:h",
                              .own = opts,
                              .help = inspect_help,
                              .apply = inspect_option,
                              .state = &a,
                              .operands = 1,
                              .operands_what = "one plan file"};
    int rc = cz_cli_parse(&spec, argc, argv);
    if (rc != CZ_CLI_CONTINUE)
        return rc;
    rc = 1;
    const char *cluster_path = a.cluster_path;
    cz_plan *plan = NULL;
    cz_cluster *cluster = NULL;
    cz_report *report = NULL;
    cz_inspect_options io;
    cz_error err;
    cz_error_clear(&err);
    cz_inspect_options_init(&io);
    io.top_n = a.top;
    /* A split plan folder (canzona plan --split) is inspected through its whole plan. */
    const char *dir = cz__plan_path_is_folder(argv[optind]) ? argv[optind] : NULL;
    char whole[4200];
    snprintf(whole, sizeof whole, "%s/plan.json", dir ? dir : ".");
    const char *path = dir ? whole : argv[optind];
    if (cz_plan_read(&plan, path, &err) != CZ_OK ||
        (cluster_path && cz_cluster_load(&cluster, cluster_path, &err) != CZ_OK)) {
        fprintf(stderr, "canzona inspect: %s\n", err.message);
        goto done;
    }
    if (a.startup && cz_plan_is_fsdp(plan)) {
        /* The model is of cz_executor_create's start-up from bucketed plans; a fully sharded
         * plan's (no buckets, one schedule per stage) is not modelled. */
        fprintf(stderr, "canzona inspect: --startup models the executor's start-up from bucketed "
                        "plans; the start-up of a fully sharded plan (layout fsdp) is not "
                        "modelled yet\n");
        goto done;
    }
    if (a.startup) {
        cz_startup_report sr;
        if (cz__startup_report(plan, path, dir, &a.model, &sr, &err) != CZ_OK) {
            fprintf(stderr, "canzona inspect: %s\n", err.message);
            goto done;
        }
        print_startup(&sr, a.as_json);
        rc = 0;
        goto done;
    }
    io.cluster = cluster;
    if (cz_plan_inspect(&report, plan, &io, &err) != CZ_OK) {
        fprintf(stderr, "canzona inspect: %s: %s\n", argv[optind], err.message);
        goto done;
    }
    if (a.as_json) {
        json_dumpf(report->root, stdout,
                   JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
        printf("\n");
    } else {
        print_text(plan, report->root, a.all);
    }
    rc = 0;
done:
    cz_report_free(report);
    cz_plan_free(plan);
    cz_cluster_free(cluster);
    return rc;
}
