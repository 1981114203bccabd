/* canzona diff — what changes between two plans of the same model and topology. */
#include "cli_util.h"
#include "commands.h"
#include "cz_types.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void diff_help(FILE *f)
{
    fprintf(f,
            "usage: canzona diff A.json B.json [--json] [--force] [--limit N]\n"
            "\n"
            "Compares plan B against plan A: settings and inputs that differ; the balance\n"
            "metrics (DP imbalance, GPU imbalance, TP makespan, lower bound, makespan/lower\n"
            "bound, total cost, predicted step) with their deltas B - A; the busiest rank of\n"
            "each plan, what bounds its makespan in A and in B (its largest task alone on a\n"
            "slot, or tasks stacked on a slot, against its TP slots) and the parameters whose\n"
            "part of it changed, largest effect first; per-rank DP load and TP makespan\n"
            "deltas; buckets whose DP ranges changed; and the parameters that moved (other DP\n"
            "owner, other micro-group, other TP host within the group), counted and listed,\n"
            "largest first. With block or cooperative tasks (canzona.plan/2) in either plan,\n"
            "the tasks of each rank matched by (parameter, block): matrices split into blocks\n"
            "or merged, tasks with another width (hosted or cooperative), tasks moved.\n"
            "Identical plans print \"no differences\".\n"
            "\n"
            "Plans of different models (inputs.model.sha256) or topologies are refused (exit 1)\n"
            "unless --force is given; forced, parameters are matched by name.\n"
            "\n"
            "exit status: 0 compared (with or without differences), 1 refused or unreadable,\n"
            "2 usage error\n"
            "\n"
            "options:\n"
            "      --json      print the comparison as JSON\n"
            "  -f, --force     compare plans of different models or topologies\n"
            "  -l, --limit N   list at most N moved parameters, and N changes per busiest\n"
            "                  rank (default 20, 0 = all; counts are always complete)\n"
            "  -h, --help      this help\n");
}

/* A cost delta with an explicit sign, scaled like cz_cli_format_cost. */
static const char *signed_cost(char *buf, size_t n, double v, cz_cost_unit u)
{
    if (n < 2)
        return buf;
    buf[0] = v < 0 ? '-' : (v > 0 ? '+' : ' ');
    cz_cli_format_cost(buf + 1, n - 1, fabs(v), u);
    return buf;
}

/* A JSON scalar as text for the settings table. */
static void scalar_text(char *buf, size_t n, json_t *v)
{
    if (json_is_string(v))
        snprintf(buf, n, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, n, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, n, "%g", json_real_value(v));
    else if (json_is_boolean(v))
        snprintf(buf, n, "%s", json_is_true(v) ? "true" : "false");
    else
        snprintf(buf, n, "-");
}

/* A setting's value as text: capacities are costs in the plan's unit (0 = automatic), the rest
 * print as they are stored. */
static void setting_text(char *buf, size_t n, const char *key, json_t *v, cz_cost_unit unit)
{
    int is_capacity = !strcmp(key, "capacity") || !strcmp(key, "capacity_used");
    if (is_capacity && json_is_number(v) && json_number_value(v) == 0 && !strcmp(key, "capacity"))
        snprintf(buf, n, "automatic");
    else if (is_capacity && json_is_number(v))
        cz_cli_format_cost(buf, n, json_number_value(v), unit);
    else
        scalar_text(buf, n, v);
}

/* -1 (no owner under even; not scheduled, as elementwise parameters) prints as "-". */
static void pair_text(char *buf, size_t n, json_t *pair)
{
    int x = (int)json_integer_value(json_array_get(pair, 0));
    int y = (int)json_integer_value(json_array_get(pair, 1));
    char sx[16] = "-", sy[16] = "-";
    if (x < 0 && y < 0) {
        snprintf(buf, n, "-");
        return;
    }
    if (x >= 0)
        snprintf(sx, sizeof sx, "%d", x);
    if (y >= 0)
        snprintf(sy, sizeof sy, "%d", y);
    snprintf(buf, n, "%s->%s", sx, sy);
}

/* One plan's reason for a rank's makespan, from a why_a / why_b object. */
static void print_why(const char *side, json_t *w, cz_cost_unit u)
{
    char x[64], y[64];
    json_t *big = json_object_get(w, "largest_task");
    const char *bound = cz_cli_jstr(w, "bound");
    int tasks = cz_cli_jint(w, "busiest_slot_tasks"), groups = cz_cli_jint(w, "groups");
    printf("  %s: ", side);
    if (!strcmp(bound, "elementwise work"))
        printf("elementwise work only");
    else if (!strcmp(bound, "its largest task"))
        printf("its largest task alone on the busiest slot: %s (%s)", cz_cli_jstr(big, "name"),
               cz_cli_format_cost(x, sizeof x, cz_cli_jnum(big, "cost"), u));
    else if (!strcmp(bound, "micro-groups in sequence"))
        printf("%d micro-groups in sequence, %d tasks on their busiest slots (largest %s, %s)",
               groups, tasks, cz_cli_jstr(big, "name"),
               cz_cli_format_cost(x, sizeof x, cz_cli_jnum(big, "cost"), u));
    else
        printf("%d tasks stacked on the busiest slot (largest %s, %s)", tasks,
               cz_cli_jstr(big, "name"),
               cz_cli_format_cost(x, sizeof x, cz_cli_jnum(big, "cost"), u));
    printf(" + elementwise %s; %d matrices on %d TP slot%s in %d group%s\n",
           cz_cli_format_cost(y, sizeof y, cz_cli_jnum(w, "elementwise"), u),
           cz_cli_jint(w, "matrices"), cz_cli_jint(w, "slots"),
           cz_cli_jint(w, "slots") == 1 ? "" : "s", groups, groups == 1 ? "" : "s");
}

/* The busiest ranks of both plans and the parameters whose part of their makespan changed. */
static void print_makespan(const cz_plan *pa, json_t *mk, cz_cost_unit u)
{
    char x[64], y[64], z[64];
    size_t i, q;
    json_t *o, *e;
    json_t *ma = json_object_get(mk, "a"), *mb = json_object_get(mk, "b");
    printf("\nmakespan  %s -> %s (%s): set by DP rank %d in A, DP rank %d in B",
           cz_cli_format_cost(x, sizeof x, cz_cli_jnum(ma, "makespan"), u),
           cz_cli_format_cost(y, sizeof y, cz_cli_jnum(mb, "makespan"), u),
           signed_cost(z, sizeof z, cz_cli_jnum(mb, "makespan") - cz_cli_jnum(ma, "makespan"), u),
           cz_cli_jint(ma, "dp_rank"), cz_cli_jint(mb, "dp_rank"));
    if (pa->pp > 1)
        printf(" (stages %d and %d)", cz_cli_jint(ma, "stage"), cz_cli_jint(mb, "stage"));
    printf("\n");
    json_array_foreach(json_object_get(mk, "ranks"), i, o)
    {
        const char *in = cz_cli_jstr(o, "busiest_in");
        char where[48] = "";
        if (pa->pp > 1)
            snprintf(where, sizeof where, "stage %d, ", cz_cli_jint(o, "stage"));
        printf("\n%sDP rank %d, busiest in %s: %s -> %s (%s)\n", where, cz_cli_jint(o, "dp_rank"),
               !strcmp(in, "both") ? "both" : (!strcmp(in, "a") ? "A" : "B"),
               cz_cli_format_cost(x, sizeof x, cz_cli_jnum(o, "makespan_a"), u),
               cz_cli_format_cost(y, sizeof y, cz_cli_jnum(o, "makespan_b"), u),
               signed_cost(z, sizeof z, cz_cli_jnum(o, "delta"), u));
        print_why("A", json_object_get(o, "why_a"), u);
        print_why("B", json_object_get(o, "why_b"), u);
        json_t *list = json_object_get(o, "list");
        int n = cz_cli_jint(o, "changes");
        if (!n) {
            printf("  no parameter's part of it changed\n");
            continue;
        }
        printf("  what changed its makespan, largest effect first:\n");
        printf("  %12s %11s %11s %11s  %s\n", "effect", "DP owner", "group", "TP host",
               "parameter");
        json_array_foreach(list, q, e)
        {
            char sd[32], sg[32], sh[32];
            pair_text(sd, sizeof sd, json_object_get(e, "dp_owner"));
            pair_text(sg, sizeof sg, json_object_get(e, "group"));
            pair_text(sh, sizeof sh, json_object_get(e, "tp_host"));
            printf("  %12s %11s %11s %11s  %s%s\n",
                   signed_cost(x, sizeof x, cz_cli_jnum(e, "effect"), u), sd, sg, sh,
                   cz_cli_jstr(e, "name"),
                   json_is_true(json_object_get(e, "moved"))
                       ? ""
                       : " (not moved: its slot became or stopped being the busiest)");
        }
        if ((int)json_array_size(list) < n)
            printf("  ... %d more (--limit)\n", n - (int)json_array_size(list));
        double rest = cz_cli_jnum(o, "unexplained");
        if (fabs(rest) > 1e-9 * fmax(cz_cli_jnum(o, "makespan_a"), cz_cli_jnum(o, "makespan_b")))
            printf("  %12s  not from whole parameters (even-partition elementwise shares)\n",
                   signed_cost(x, sizeof x, rest, u));
    }
}

/* The slots a task occupies, as "s" or "s-e". */
static const char *slots_text(char *buf, size_t n, int slot, int width)
{
    if (width > 1)
        snprintf(buf, n, "%d-%d", slot, slot + width - 1);
    else
        snprintf(buf, n, "%d", slot);
    return buf;
}

static int jat(json_t *pair, size_t i)
{
    return (int)json_integer_value(json_array_get(pair, i));
}

static double jreal(json_t *pair, size_t i)
{
    return json_real_value(json_array_get(pair, i));
}

/* Block and cooperative tasks matched by (parameter, block) in each rank: only for plans that
 * have them. */
static void print_tasks(json_t *r, cz_cost_unit u)
{
    json_t *t = json_object_get(r, "tasks"), *o;
    size_t i;
    if (!json_is_object(t))
        return;
    int total = cz_cli_jint(t, "split") + cz_cli_jint(t, "merged") +
                cz_cli_jint(t, "width_changed") + cz_cli_jint(t, "moved");
    printf("\ntasks     by (parameter, block) in each rank: %d split into blocks, %d merged into "
           "whole matrices, %d with another width, %d moved; %d with another cost\n",
           cz_cli_jint(t, "split"), cz_cli_jint(t, "merged"), cz_cli_jint(t, "width_changed"),
           cz_cli_jint(t, "moved"), cz_cli_jint(t, "cost_changed"));
    json_t *list = json_object_get(t, "list");
    json_array_foreach(list, i, o)
    {
        const char *change = cz_cli_jstr(o, "change");
        json_t *n = json_object_get(o, "tasks"), *w = json_object_get(o, "width"),
               *g = json_object_get(o, "group"), *sl = json_object_get(o, "slot"),
               *c = json_object_get(o, "cost"), *wk = json_object_get(o, "work");
        char x[64], y[64], s1[32], s2[32], what[256], name[320];
        int whole_side = !strcmp(change, "split") || !strcmp(change, "merged");
        if (!strcmp(change, "split"))
            snprintf(what, sizeof what, "whole -> %d blocks, slot time %s -> %s", jat(n, 1),
                     cz_cli_format_cost(x, sizeof x, jreal(wk, 0), u),
                     cz_cli_format_cost(y, sizeof y, jreal(wk, 1), u));
        else if (!strcmp(change, "merged"))
            snprintf(what, sizeof what, "%d blocks -> whole, slot time %s -> %s", jat(n, 0),
                     cz_cli_format_cost(x, sizeof x, jreal(wk, 0), u),
                     cz_cli_format_cost(y, sizeof y, jreal(wk, 1), u));
        else
            snprintf(what, sizeof what, "width %d -> %d, group %d -> %d, slots %s -> %s, %s -> %s",
                     jat(w, 0), jat(w, 1), jat(g, 0), jat(g, 1),
                     slots_text(s1, sizeof s1, jat(sl, 0), jat(w, 0)),
                     slots_text(s2, sizeof s2, jat(sl, 1), jat(w, 1)),
                     cz_cli_format_cost(x, sizeof x, jreal(c, 0), u),
                     cz_cli_format_cost(y, sizeof y, jreal(c, 1), u));
        int block = cz_cli_jint(o, "block");
        if (block >= 0 && !whole_side)
            snprintf(name, sizeof name, "%s[%d]", cz_cli_jstr(o, "name"), block);
        else
            snprintf(name, sizeof name, "%s", cz_cli_jstr(o, "name"));
        printf("  %-7s DP rank %d: %s  %s\n", change, cz_cli_jint(o, "dp_rank"), what, name);
    }
    if ((int)json_array_size(list) < total)
        printf("  ... %d more (--limit)\n", total - (int)json_array_size(list));
}

static void print_text(const cz_plan *pa, const cz_plan *pb, json_t *r)
{
    char x[64], y[64], z[64];
    size_t i;
    json_t *o;
    json_t *A = json_object_get(r, "a"), *B = json_object_get(r, "b");
    json_t *ta = json_object_get(A, "topology"), *tb = json_object_get(B, "topology");
    printf("A  %s on %s (DP %d x TP %d x PP %d), dp %s, tp %s\n", cz_cli_jstr(A, "model"),
           cz_cli_jstr(A, "cluster"), cz_cli_jint(ta, "dp"), cz_cli_jint(ta, "tp"),
           cz_cli_jint(ta, "pp"), cz_dp_strategy_name(pa->settings.dp),
           cz_tp_strategy_name(pa->settings.tp));
    printf("B  %s on %s (DP %d x TP %d x PP %d), dp %s, tp %s\n", cz_cli_jstr(B, "model"),
           cz_cli_jstr(B, "cluster"), cz_cli_jint(tb, "dp"), cz_cli_jint(tb, "tp"),
           cz_cli_jint(tb, "pp"), cz_dp_strategy_name(pb->settings.dp),
           cz_tp_strategy_name(pb->settings.tp));
    if (json_is_true(json_object_get(r, "identical"))) {
        printf("no differences\n");
        return;
    }
    if (!strcmp(cz_cli_jstr(r, "matched_by"), "name"))
        printf("(forced: parameters matched by name)\n");

    json_t *inputs = json_object_get(r, "inputs");
    if (json_array_size(inputs)) {
        printf("\ninputs\n");
        json_array_foreach(inputs, i, o) printf("  %-22s %s -> %s\n", cz_cli_jstr(o, "key"),
                                                cz_cli_jstr(o, "a"), cz_cli_jstr(o, "b"));
    }
    json_t *settings = json_object_get(r, "settings");
    if (json_array_size(settings)) {
        printf("\nsettings\n");
        json_array_foreach(settings, i, o)
        {
            char va[64], vb[64];
            const char *key = cz_cli_jstr(o, "key");
            setting_text(va, sizeof va, key, json_object_get(o, "a"), pa->settings.unit);
            setting_text(vb, sizeof vb, key, json_object_get(o, "b"), pb->settings.unit);
            printf("  %-22s %s -> %s\n", cz_cli_jstr(o, "key"), va, vb);
        }
    }

    /* Costs compare in one unit only; when the units differ, show raw numbers. */
    int same_unit = pa->settings.unit == pb->settings.unit;
    cz_cost_unit u = pa->settings.unit;
    printf("\n%-26s %14s %14s %14s %9s\n", "metric", "A", "B", "B - A", "relative");
    json_array_foreach(json_object_get(r, "metrics"), i, o)
    {
        const char *name = cz_cli_jstr(o, "name");
        int is_ratio = strstr(name, "imbalance") || strstr(name, "over");
        int is_time = !strcmp(name, "predicted_step_s");
        json_t *rel = json_object_get(o, "relative");
        char rs[32];
        if (json_is_number(rel))
            snprintf(rs, sizeof rs, "%+8.2f%%", 100.0 * json_number_value(rel));
        else
            snprintf(rs, sizeof rs, "%9s", "-");
        if (is_ratio || (!same_unit && !is_time))
            printf("%-26s %14.6g %14.6g %+14.6g %s\n", name, cz_cli_jnum(o, "a"),
                   cz_cli_jnum(o, "b"), cz_cli_jnum(o, "delta"), rs);
        else {
            cz_cost_unit mu = is_time ? CZ_UNIT_TIME : u;
            printf("%-26s %14s %14s %14s %s\n", name,
                   cz_cli_format_cost(x, sizeof x, cz_cli_jnum(o, "a"), mu),
                   cz_cli_format_cost(y, sizeof y, cz_cli_jnum(o, "b"), mu),
                   signed_cost(z, sizeof z, cz_cli_jnum(o, "delta"), mu), rs);
        }
    }

    json_t *mk = json_object_get(r, "makespan");
    if (json_is_object(mk) && same_unit)
        print_makespan(pa, mk, u);

    json_t *ranks = json_object_get(r, "ranks");
    if (json_is_array(ranks)) {
        printf("\n%-8s %14s %14s %14s %14s\n", pa->pp > 1 ? "stage/dp" : "DP rank", "load A",
               "load B - A", "makespan A", "makespan B - A");
        json_array_foreach(ranks, i, o)
        {
            char lab[32], w[64];
            if (pa->pp > 1)
                snprintf(lab, sizeof lab, "%d/%d", cz_cli_jint(o, "stage"),
                         cz_cli_jint(o, "dp_rank"));
            else
                snprintf(lab, sizeof lab, "%d", cz_cli_jint(o, "dp_rank"));
            printf("%-8s %14s %14s %14s %14s\n", lab,
                   cz_cli_format_cost(x, sizeof x, cz_cli_jnum(o, "dp_load_a"), u),
                   signed_cost(y, sizeof y, cz_cli_jnum(o, "dp_load_delta"), u),
                   cz_cli_format_cost(z, sizeof z, cz_cli_jnum(o, "makespan_a"), u),
                   signed_cost(w, sizeof w, cz_cli_jnum(o, "makespan_delta"), u));
        }
    } else {
        printf("\n(per-rank deltas omitted: the topologies differ)\n");
    }

    json_t *bk = json_object_get(r, "buckets");
    printf("\nbuckets   %d in A, %d in B, %d with other layout or DP ranges\n",
           cz_cli_jint(bk, "a"), cz_cli_jint(bk, "b"), cz_cli_jint(bk, "changed"));
    json_t *mv = json_object_get(r, "moved"), *list = json_object_get(mv, "list");
    printf("params    %d matched; %d moved: %d to another DP owner, %d to another micro-group, "
           "%d to another TP host; %d with another cost\n",
           cz_cli_jint(mv, "matched"), cz_cli_jint(mv, "any"), cz_cli_jint(mv, "dp_owner"),
           cz_cli_jint(mv, "group"), cz_cli_jint(mv, "tp_host"), cz_cli_jint(mv, "cost_changed"));
    if (json_array_size(list)) {
        printf("\n  %11s %11s %11s  %s\n", "DP owner", "group", "TP host", "parameter");
        json_array_foreach(list, i, o)
        {
            json_t *d = json_object_get(o, "dp_owner"), *g = json_object_get(o, "group"),
                   *h = json_object_get(o, "tp_host");
            char sd[32], sg[32], sh[32];
            pair_text(sd, sizeof sd, d);
            pair_text(sg, sizeof sg, g);
            pair_text(sh, sizeof sh, h);
            printf("  %11s %11s %11s  %s\n", sd, sg, sh, cz_cli_jstr(o, "name"));
        }
        if ((int)json_array_size(list) < cz_cli_jint(mv, "any"))
            printf("  ... %d more (--limit)\n",
                   cz_cli_jint(mv, "any") - (int)json_array_size(list));
    }
    print_tasks(r, u);
    int only_a = cz_cli_jint(r, "only_in_a_count"), only_b = cz_cli_jint(r, "only_in_b_count");
    if (only_a || only_b)
        printf("\nunmatched: %d parameters only in A, %d only in B\n", only_a, only_b);
}

typedef struct diff_args {
    int as_json, force, limit;
} diff_args;

static int diff_option(void *state, int opt, const char *value)
{
    diff_args *a = state;
    switch (opt) {
    case 'j':
        a->as_json = 1;
        return 0;
    case 'f':
        a->force = 1;
        return 0;
    case 'l':
        return cz_cli_parse_int("diff", "limit", value, 0, 100000000, &a->limit);
    }
    return 1;
}

int cz_cmd_diff(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"force", no_argument, NULL, 'f'},
        {"limit", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    diff_args args = {.limit = 20};
    const cz_cli_spec spec = {.name = "diff",
                              .shortopts = "fl:h",
                              .own = opts,
                              .help = diff_help,
                              .apply = diff_option,
                              .state = &args,
                              .operands = 2,
                              .operands_what = "two plan files"};
    int rc = cz_cli_parse(&spec, argc, argv);
    if (rc != CZ_CLI_CONTINUE)
        return rc;
    rc = 1;
    int as_json = args.as_json, force = args.force, limit = args.limit;
    cz_plan *a = NULL, *b = NULL;
    cz_report *report = NULL;
    cz_diff_options dopt;
    cz_error err;
    cz_error_clear(&err);
    if (cz_plan_read(&a, argv[optind], &err) != CZ_OK ||
        cz_plan_read(&b, argv[optind + 1], &err) != CZ_OK ||
        (cz_diff_options_init(&dopt), dopt.force = force, dopt.limit = limit,
         cz_plan_diff(&report, a, b, &dopt, &err)) != CZ_OK) {
        fprintf(stderr, "canzona diff: %s\n", err.message);
        goto done;
    }
    if (as_json) {
        json_dumpf(report->root, stdout,
                   JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
        printf("\n");
    } else {
        print_text(a, b, report->root);
    }
    rc = 0;
done:
    cz_report_free(report);
    cz_plan_free(a);
    cz_plan_free(b);
    return rc;
}
