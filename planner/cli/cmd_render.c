/* canzona render — draws a plan as a self-contained SVG (or an HTML page with the SVG inline and
 * tables): per-GPU load bars and the micro-group pipeline of the DP rank that finishes last. */
#include "cli_util.h"
#include "commands.h"
#include "cz_types.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void render_help(FILE *f)
{
    fprintf(f,
            "usage: canzona render PLAN.json -o OUT.svg [--html] [--width W] [--cluster C]\n"
            "\n"
            "Draws what bounds the step, stated in a bold verdict under the title:\n"
            "(a) the optimizer work per GPU against the lower bound max(total / GPUs,\n"
            "largest task) and the mean, in the plan's cost unit: one bar per GPU (TP ranks\n"
            "side by side within each DP rank) while bars stay 3 px wide, else columns of\n"
            "DP ranks showing their busiest, mean and least busy GPU; the busiest GPU named\n"
            "and marked; DP-rank ticks. With --cluster, (b) the simulated step as gradient\n"
            "synchronization, optimizer update and parameter all-gather. Then the optimizer\n"
            "update of the DP rank that finishes last: gather / compute / scatter lanes, one\n"
            "box per micro-group labelled with its largest task. With --cluster times are\n"
            "the simulator's (docs/SIMULATOR.md); without it, task times are the plan's\n"
            "costs and communication is not drawn. A regular output file is\n"
            "written atomically (temporary file, then rename); a device or FIFO is written in\n"
            "place; a symbolic link is followed; '-' is standard output.\n"
            "\n"
            "options:\n"
            "  -o, --output FILE     where to write (required; '-' for standard output)\n"
            "      --html            write an HTML page: the SVG inline plus tables of the\n"
            "                        settings, per-rank loads and the costliest parameters\n"
            "  -w, --width W         drawing width in pixels, 400 .. 20000 (default 1200)\n"
            "  -c, --cluster FILE    cluster (canzona.cluster/1) for simulated times; must have\n"
            "                        the plan's DP x TP x PP\n"
            "      --calibration FILE\n"
            "                        with --cluster: the GPU's measurements the simulated times\n"
            "                        use (canzona.calibration/1 or /2)\n"
            "  -h, --help            this help\n");
}

typedef struct render_args {
    const char *output, *cluster_path, *calibration;
    int html, width;
} render_args;

static int render_option(void *state, int opt, const char *value)
{
    render_args *a = state;
    switch (opt) {
    case 'o':
        a->output = value;
        return 0;
    case 'H':
        a->html = 1;
        return 0;
    case 'w':
        return cz_cli_parse_int("render", "width", value, 400, 20000, &a->width);
    case 'c':
        a->cluster_path = value;
        return 0;
    case CZ_OPT_CALIBRATION:
        a->calibration = value;
        return 0;
    }
    return 1;
}

int cz_cmd_render(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"html", no_argument, NULL, 'H'},
        {"width", required_argument, NULL, 'w'},
        {"cluster", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        CZ_CLI_CALIBRATION_OPTION,
        {NULL, 0, NULL, 0},
    };
    render_args a = {.width = 1200};
    /* Its own operand check: its message predates the shared one. */
    const cz_cli_spec spec = {.name = "render",
                              .shortopts = "o:w:c:h",
                              .own = opts,
                              .help = render_help,
                              .apply = render_option,
                              .state = &a,
                              .operands = -1};
    int rc = cz_cli_parse(&spec, argc, argv);
    if (rc != CZ_CLI_CONTINUE)
        return rc;
    rc = 1;
    const char *output = a.output, *cluster_path = a.cluster_path, *plan_path = NULL;
    int html = a.html, width = a.width;
    cz_plan *plan = NULL;
    cz_cluster *cluster = NULL;
    char *doc = NULL;
    cz_render_options ro;
    cz_error err;
    cz_error_clear(&err);
    if (optind + 1 != argc) {
        fprintf(stderr, "canzona render: expected exactly one plan file (see 'canzona render "
                        "--help')\n");
        return 2;
    }
    plan_path = argv[optind];
    if (!output) {
        fprintf(stderr, "canzona render: -o OUT is required (see 'canzona render --help')\n");
        return 2;
    }
    if (a.calibration && !cluster_path) {
        fprintf(stderr, "canzona render: --calibration needs --cluster (the calibration is the "
                        "cluster's device's)\n");
        return 2;
    }
    const char *inputs[] = {plan_path, cluster_path, a.calibration},
               *what[] = {"the plan", "the cluster", "the calibration"};
    if (cz__file_check_output(output, inputs, what, a.calibration ? 3 : 2, &err) != CZ_OK ||
        cz_plan_read(&plan, plan_path, &err) != CZ_OK) {
        fprintf(stderr, "canzona render: %s\n", err.message);
        goto done;
    }
    if (cluster_path && cz_cluster_load(&cluster, cluster_path, &err) != CZ_OK) {
        fprintf(stderr, "canzona render: %s\n", err.message);
        goto done;
    }
    if (cluster && cz_cli_calibrate("render", cluster, a.calibration))
        goto done;
    cz_render_options_init(&ro);
    ro.width = width;
    ro.format = html ? CZ_RENDER_HTML : CZ_RENDER_SVG;
    if (cz_plan_render(&doc, plan, cluster, &ro, &err) != CZ_OK) {
        fprintf(stderr, "canzona render: %s: %s\n", plan_path, err.message);
        goto done;
    }
    if (cz__file_write(output, doc, strlen(doc), &err) != CZ_OK) {
        fprintf(stderr, "canzona render: %s\n", err.message);
        goto done;
    }
    rc = 0;
done:
    cz_free(doc);
    cz_cluster_free(cluster);
    cz_plan_free(plan);
    return rc;
}
