/* canzona validate — recomputes every invariant of a plan against its model and cluster and
 * lists each violation with its JSON path in the plan file. */
#include "cli_util.h"
#include "commands.h"
#include "cz_types.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void validate_help(FILE *f)
{
    fprintf(f,
            "usage: canzona validate PLAN.json --model MODEL.json --cluster CLUSTER.json [--json]\n"
            "\n"
            "Checks that the plan belongs to the model and cluster (names, SHA-256, topology) and\n"
            "recomputes every invariant of the plan format: parameters (names, shapes, local\n"
            "shapes, tp_dim, optimizer kind, blocks, costs by the cost model), the bucket layout\n"
            "(reverse order, alignment, no overlap, DP padding, contiguity), the DP ranges\n"
            "(contiguous, rank-ordered, covering each bucket), atomicity (every parameter inside\n"
            "its dp_owner's range, except under even and layerwise and for the split layout's\n"
            "evenly sliced elementwise parameters), the TP schedules (every\n"
            "matrix of a DP rank in exactly one slot of one group, no elementwise parameter,\n"
            "slot counts, group loads) and the metrics (relative tolerance 1e-9). Every\n"
            "violation is reported, each with a JSON path such as $.buckets[2].ranges[3].\n"
            "\n"
            "exit status: 0 valid, 1 violations or unreadable inputs, 2 usage error\n"
            "\n"
            "options:\n"
            "  -m, --model FILE     the model description the plan was made for\n"
            "  -c, --cluster FILE   the cluster shape the plan was made for\n"
            "      --calibration FILE\n"
            "                       the calibration the plan was made with (its costs are the\n"
            "                       calibration's; the plan records its hash)\n"
            "      --json           print {\"valid\", \"checks\", \"violations\": [{code, path,\n"
            "                       message}]} instead of text\n"
            "  -l, --limit N        print at most N violations as text (default 50, 0 = all);\n"
            "                       the count and --json always cover all. Without --limit, a\n"
            "                       plan made for another model, cluster or calibration prints\n"
            "                       only the input mismatches ($.inputs), which every other\n"
            "                       violation follows from\n"
            "  -h, --help           this help\n");
    cz_cli_sizes_help(f);
}

/* A violation of the inputs rule: the plan names another model, cluster or calibration than the
 * one given. */
static int is_input_mismatch(json_t *v)
{
    const char *code = json_string_value(json_object_get(v, "code"));
    return code && !strcmp(code, "inputs");
}

/* limit: violations to print (0 = all; < 0 = not given: 50, or only the input mismatches when
 * there are any). */
static int print_report(const cz_report *report, int as_json, int limit)
{
    json_t *violations = json_object_get(report->root, "violations");
    int checks = cz_cli_jint(report->root, "checks");
    size_t n = json_array_size(violations);
    if (as_json) {
        json_dumpf(report->root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("\n");
        return n ? 1 : 0;
    }
    if (n == 0) {
        printf("plan OK: %d checks\n", checks);
        return 0;
    }
    size_t i, inputs = 0;
    json_t *v;
    json_array_foreach(violations, i, v) inputs += is_input_mismatch(v);
    /* Another model or cluster breaks hundreds of checks that all follow from the first lines:
     * show those lines and what to do rather than pages of consequences. */
    if (limit < 0 && inputs > 0) {
        json_array_foreach(violations, i, v) if (is_input_mismatch(v))
            printf("%s: %s [%s]\n", json_string_value(json_object_get(v, "path")),
                   json_string_value(json_object_get(v, "message")),
                   json_string_value(json_object_get(v, "code")));
        printf(
            "plan INVALID: made for another model, cluster or calibration than the one given (%zu "
            "violation%s in %d checks; --limit 0 or --json lists all)\n",
            n, n == 1 ? "" : "s", checks);
        return 1;
    }
    if (limit < 0)
        limit = 50;
    json_array_foreach(violations, i, v)
    {
        if (limit > 0 && i >= (size_t)limit) {
            printf("... %zu more violations (--limit 0 or --json lists all)\n", n - i);
            break;
        }
        printf("%s: %s [%s]\n", json_string_value(json_object_get(v, "path")),
               json_string_value(json_object_get(v, "message")),
               json_string_value(json_object_get(v, "code")));
    }
    printf("plan INVALID: %zu violation%s in %d checks\n", n, n == 1 ? "" : "s", checks);
    return 1;
}

typedef struct validate_args {
    const char *model_path, *cluster_path, *calibration;
    int as_json;
    int limit; /* -1: not given */
} validate_args;

static int validate_option(void *state, int opt, const char *value)
{
    validate_args *a = state;
    switch (opt) {
    case 'm':
        a->model_path = value;
        return 0;
    case 'c':
        a->cluster_path = value;
        return 0;
    case 'j':
        a->as_json = 1;
        return 0;
    case 'l':
        return cz_cli_parse_int("validate", "limit", value, 0, 100000000, &a->limit);
    case CZ_OPT_CALIBRATION:
        a->calibration = value;
        return 0;
    }
    return 1;
}

int cz_cmd_validate(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"cluster", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"limit", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        CZ_CLI_CALIBRATION_OPTION,
        {NULL, 0, NULL, 0},
    };
    validate_args a = {.limit = -1};
    cz_cluster_sizes sizes = {0};
    const cz_cli_spec spec = {.name = "validate",
                              .shortopts = "m:c:l:h",
                              .own = opts,
                              .help = validate_help,
                              .apply = validate_option,
                              .state = &a,
                              .sizes = &sizes,
                              .operands = 1,
                              .operands_what = "one plan file"};
    int rc = cz_cli_parse(&spec, argc, argv);
    if (rc != CZ_CLI_CONTINUE)
        return rc;
    const char *model_path = a.model_path, *cluster_path = a.cluster_path;
    rc = 1;
    cz_model *model = NULL;
    cz_cluster *cluster = NULL;
    cz_plan *plan = NULL;
    cz_report *report = NULL;
    cz_error err;
    cz_error_clear(&err);
    if (!model_path || !cluster_path) {
        fprintf(stderr, "canzona validate: --model and --cluster are required (see 'canzona "
                        "validate --help')\n");
        return 2;
    }
    if (cz_plan_read(&plan, argv[optind], &err) != CZ_OK) {
        fprintf(stderr, "canzona validate: %s\n", err.message);
        goto done;
    }
    if (cz_cli_load_inputs("validate", model_path, cluster_path, &sizes, a.calibration, &model,
                           &cluster))
        goto done;
    if (cz_plan_validate(&report, plan, model, cluster, &err) != CZ_OK) {
        fprintf(stderr, "canzona validate: %s\n", err.message);
        goto done;
    }
    rc = print_report(report, a.as_json, a.limit);
done:
    cz_report_free(report);
    cz_plan_free(plan);
    cz_model_free(model);
    cz_cluster_free(cluster);
    return rc;
}
