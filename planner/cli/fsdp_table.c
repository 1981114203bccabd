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
    printf("%-16s %9s %10s %10s %10s %10s %10s %7s\n", "layout", "mk/LB", "grad ms", "update ms",
           "param ms", "opt ms", "step ms", "opt x");
    for (int i = 0; i < n; i++) {
        char q[16] = "-";
        if (r[i].has_plan)
            snprintf(q, sizeof q, "%.4f", over(r[i].mk, r[i].lb));
        printf("%-16s %9s %10.3f %10.3f %10.3f %10.3f %10.3f %7.2f\n", r[i].label, q,
               1e3 * r[i].grad, 1e3 * r[i].update, 1e3 * r[i].param, 1e3 * r[i].opt,
               1e3 * r[i].step, over(base->opt, r[i].opt));
    }
    printf("zero1: canzona's ZeRO-1 plan (joint + rollback); fsdp: the fully sharded plan (%d "
           "micro-group%s per stage at most,\nowners over the %d-GPU shard group); fsdp2+muon: "
           "FSDP2 with every matrix all-gathered whole and stepped on every GPU.\n"
           "grad and param are the job's reduce-scatter and all-gather (FSDP2's own under fsdp); "
           "opt = update + param;\nopt x = the baseline's opt over the row's.\n",
           fsdp ? fsdp->schedules[0].ngroups : 0,
           fsdp && fsdp->schedules[0].ngroups == 1 ? "" : "s", fsdp ? cz_plan_fsdp_slots(fsdp) : 0);
    if (fsdp && cz_plan_fsdp_replicas(fsdp) > 1)
        printf("HSDP, %d replicas of %d shard ranks: grad adds the job's all-reduce over the "
               "replicas; hsdp redundant: every\nreplica updates every matrix over its own %d "
               "GPUs; hsdp partitioned: each matrix on one GPU of the stage, its update's\n"
               "shards sent to every replica (the first hsdp row is the plan's own mode).\n",
               cz_plan_fsdp_replicas(fsdp), cz_plan_fsdp_shard(fsdp),
               cz_plan_fsdp_shard(fsdp) * fsdp->tp);
}

/* The fully sharded row of plan p; label names it. */
static int fsdp_row_of(const cz_plan *p, const cz_cluster *cluster, const char *label,
                       fsdp_row *row, cz_fsdp_sim *fs, cz_error *err)
{
    int rc = cz__fsdp_simulate(p, cluster, fs, err);
    if (rc == CZ_OK)
        *row = (fsdp_row){label,
                          p->metrics.tp_makespan,
                          p->metrics.lower_bound,
                          fs->grad_s,
                          fs->update_s,
                          fs->param_s,
                          fs->opt_s,
                          fs->step_s,
                          1};
    return rc;
}

int cz_cli_fsdp_table(const char *cmd, const cz_model *model, const cz_cluster *cluster,
                      const cz_settings *settings, const cz_plan *given, int json)
{
    cz_error err;
    cz_error_clear(&err);
    cz_plan *zero1 = NULL, *built = NULL, *other = NULL;
    cz_sim_result *sim = NULL;
    cz_fsdp_sim fs, fs_other;
    fsdp_row rows[4];
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
        z.replicate = 1; /* ZeRO-1 over all the DP ranks */
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
    int hsdp = cz_plan_fsdp_replicas(fsdp) > 1;
    bool partitioned = hsdp && fsdp->settings.hsdp == CZ_HSDP_PARTITIONED;
    if (fsdp_row_of(fsdp, cluster,
                    !hsdp         ? "fsdp"
                    : partitioned ? "hsdp partitioned"
                                  : "hsdp redundant",
                    &rows[n++], &fs, &err) != CZ_OK)
        goto done;
    /* HSDP: the other mode beside it, planned from the model (simulate both, then choose). */
    if (hsdp && model) {
        cz_settings o = fsdp->settings;
        o.ns_coeffs = settings->ns_coeffs;
        o.hsdp = partitioned ? CZ_HSDP_REDUNDANT : CZ_HSDP_PARTITIONED;
        if (cz_plan_build(&other, model, cluster, &o, &err) != CZ_OK ||
            fsdp_row_of(other, cluster, partitioned ? "hsdp redundant" : "hsdp partitioned",
                        &rows[n++], &fs_other, &err) != CZ_OK)
            goto done;
    }
    rows[n++] = (fsdp_row){hsdp ? "hsdp2+muon" : "fsdp2+muon",
                           0.0,
                           0.0,
                           fs.grad_s,
                           fs.base_opt_s - fs.param_s,
                           fs.param_s,
                           fs.base_opt_s,
                           fs.base_step_s,
                           0};
    print_table(rows, n, fsdp, json);
    failed = rc = 0;
done:
    if (failed)
        fprintf(stderr, "canzona %s: %s\n", cmd, err.message);
    cz_sim_result_free(sim);
    cz_plan_free(zero1);
    cz_plan_free(built);
    cz_plan_free(other);
    return rc;
}
