/* canzona — the planner CLI: dispatches to one subcommand per file (cmd_*.c). */
#include "canzona.h"
#include "commands.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"plan", cz_cmd_plan, "solve DP partition and TP micro-groups; write a plan file"},
    {"inspect", cz_cmd_inspect, "balance report of a plan: loads, imbalance, busiest ranks"},
    {"diff", cz_cmd_diff, "compare two plans: settings, metrics, moved parameters"},
    {"validate", cz_cmd_validate, "check every invariant of a plan against its model and cluster"},
    {"import-hf", cz_cmd_import_hf, "write a model description from a Hugging Face config.json"},
    {"simulate", cz_cmd_simulate, "estimate one optimizer step: baselines vs Canzona"},
    {"render", cz_cmd_render, "draw a plan's per-GPU loads and pipeline timeline (SVG/HTML)"},
    {"compare", cz_cmd_compare, "plan with every strategy; balance, simulated step, plan time"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: canzona <command> [options]\n"
               "       canzona --help | --version\n\n"
               "Plans load-balanced distributed matrix optimizers (Muon, SOAP, Shampoo) for\n"
               "Megatron-style DP x TP (x PP) training, and analyses the plans.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'canzona <command> --help' describes a command's options.\n");
}

/* A report written to a full device or a closed pipe fails only when the buffered text is
 * flushed, after the command has returned: check it here, or the command would exit 0 with
 * its output lost. */
static int finish(int rc)
{
    int saved = fflush(stdout) != 0 ? errno : 0;
    bool failed = ferror(stdout) != 0;
    if (fclose(stdout) != 0 && !saved) {
        saved = errno;
        failed = true;
    }
    if (!failed)
        return rc;
    fprintf(stderr, "canzona: cannot write to standard output: %s\n",
            saved ? strerror(saved) : "a write failed");
    return rc ? rc : 1;
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        /* 'canzona help plan' is 'canzona plan --help', as git does it. */
        if (argc > 2 && !strcmp(argv[1], "help")) {
            for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (!strcmp(argv[2], commands[i].name)) {
                    char help_opt[] = "--help";
                    char *sub_argv[] = {argv[2], help_opt, NULL};
                    return commands[i].run(2, sub_argv);
                }
            fprintf(stderr, "canzona help: unknown command '%s'\n\n", argv[2]);
            usage(stderr);
            return 2;
        }
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("canzona %s (plan format %s)\n", cz_version(NULL, NULL, NULL), CZ_PLAN_SCHEMA);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "canzona: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}

int main(int argc, char **argv)
{
    return finish(run(argc, argv));
}
