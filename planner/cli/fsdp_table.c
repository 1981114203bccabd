/* The fully sharded layout beside ZeRO-1 (canzona simulate and canzona compare with --layout
 * fsdp, or simulate --plan of a fully sharded plan): the same job planned as canzona's ZeRO-1
 * plan (the default joint DP cut and rollback micro-groups, unified buffer) and as a fully
 * sharded plan, and the FSDP2 + torch.optim.Muon baseline (every matrix all-gathered whole on
 * every GPU), with plan quality and the simulated step (docs/SIMULATOR.md, "Fully sharded"). */
#include "cli_util.h"
#include "cz_types.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct fsdp_row {
    const char *label;
    double mk, lb, grad, update, param, opt, step;
    int has_plan;
} fsdp_row;

static double over(double a, double b)
{
    return b > 0 ? a / b : 0.0;
}

static void print_table(const fsdp_row *r, int n, const cz_plan *fsdp, int json)
{
    const fsdp_row *base = &r[n - 1];
    if (json) {
        json_t *rows = json_array();
        for (int i = 0; rows && i < n; i++)
            json_array_append_new(
                rows,
                json_pack("{s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "name", r[i].label,
                          "makespan", r[i].mk, "lower_bound", r[i].lb, "makespan_over_lower_bound",
                          over(r[i].mk, r[i].lb), "grad_sync_s", r[i].grad, "update_s", r[i].update,
                          "param_sync_s", r[i].param, "optimizer_s", r[i].opt, "step_s", r[i].step,
                          "optimizer_speedup", over(base->opt, r[i].opt)));
        char *text = rows ? json_dumps(rows, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
        if (text)
            printf("%s\n", text);
        free(text);
        json_decref(rows);
        return;
    }
    printf("%-12s %9s %10s %10s %10s %10s %10s %7s\n", "layout", "mk/LB", "grad ms", "update ms",
           "param ms", "opt ms", "step ms", "opt x");
    for (int i = 0; i < n; i++) {
        char q[16] = "-";
        if (r[i].has_plan)
            snprintf(q, sizeof q, "%.4f", over(r[i].mk, r[i].lb));
        printf("%-12s %9s %10.3f %10.3f %10.3f %10.3f %10.3f %7.2f\n", r[i].label, q,
               1e3 * r[i].grad, 1e3 * r[i].update, 1e3 * r[i].param, 1e3 * r[i].opt,
               1e3 * r[i].step, over(base->opt, r[i].opt));
    }
    printf("zero1: canzona's ZeRO-1 plan (joint + rollback); fsdp: the fully sharded plan (%d "
           "micro-group%s per stage at most,\nowners over the %d-GPU shard group); fsdp2+muon: "
           "FSDP2 with every matrix all-gathered whole and stepped on every GPU.\n"
           "grad and param are the job's reduce-scatter and all-gather (FSDP2's own under fsdp); "
           "opt = update + param;\nopt x = the baseline's opt over the row's.\n",
           fsdp ? fsdp->schedules[0].ngroups : 0,
           fsdp && fsdp->schedules[0].ngroups == 1 ? "" : "s", fsdp ? fsdp->dp * fsdp->tp : 0);
}

int cz_cli_fsdp_table(const char *cmd, const cz_model *model, const cz_cluster *cluster,
                      const cz_settings *settings, const cz_plan *given, int json)
{
    cz_error err;
    cz_error_clear(&err);
    cz_plan *zero1 = NULL, *built = NULL;
    cz_sim_result *sim = NULL;
    cz_fsdp_sim fs;
    fsdp_row rows[3];
    int n = 0, rc = 1, failed = 1;
    const cz_plan *fsdp = given;
    if (!fsdp) {
        cz_settings s = *settings;
        s.layout = CZ_LAYOUT_FSDP;
        if (cz_plan_build(&built, model, cluster, &s, &err) != CZ_OK)
            goto done;
        fsdp = built;
    }
    /* The ZeRO-1 row needs the model: simulate --plan without --model shows the FSDP rows. */
    if (model) {
        cz_settings z = *settings;
        z.layout = CZ_LAYOUT_UNIFIED;
        if (cz_plan_build(&zero1, model, cluster, &z, &err) != CZ_OK ||
            cz_plan_simulate(&sim, zero1, cluster, NULL, &err) != CZ_OK)
            goto done;
        rows[n++] = (fsdp_row){"zero1",
                               zero1->metrics.tp_makespan,
                               zero1->metrics.lower_bound,
                               sim->grad_sync_s,
                               sim->frag_gather_s + sim->local_s,
                               sim->param_sync_s,
                               sim->optimizer_s,
                               sim->step_s,
                               1};
    }
    if (cz__fsdp_simulate(fsdp, cluster, &fs, &err) != CZ_OK)
        goto done;
    rows[n++] = (fsdp_row){"fsdp",
                           fsdp->metrics.tp_makespan,
                           fsdp->metrics.lower_bound,
                           fs.grad_s,
                           fs.update_s,
                           fs.param_s,
                           fs.opt_s,
                           fs.step_s,
                           1};
    rows[n++] = (fsdp_row){
        "fsdp2+muon",   0.0, 0.0, fs.grad_s, fs.base_opt_s - fs.param_s, fs.param_s, fs.base_opt_s,
        fs.base_step_s, 0};
    print_table(rows, n, fsdp, json);
    failed = rc = 0;
done:
    if (failed)
        fprintf(stderr, "canzona %s: %s\n", cmd, err.message);
    cz_sim_result_free(sim);
    cz_plan_free(zero1);
    cz_plan_free(built);
    return rc;
}
