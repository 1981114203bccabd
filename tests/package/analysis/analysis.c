/*
 * A program that does what `canzona import-hf`, `plan`, `validate`, `inspect`, `diff`,
 * `simulate` and `render` do, through canzona.h alone (built with the public include folder
 * only and linked with libcanzona.so, which exports nothing else). It writes what the CLI
 * would print into OUTDIR, where analysis.sh compares it with the CLI's output, and checks the
 * reports' values and the error paths itself.
 *
 * Usage: analysis CONFIG.json CLUSTER.json OTHER_MODEL.json OUTDIR
 */
#include <canzona.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "analysis: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Writes text followed by a newline (as the CLI's JSON output ends). */
static int write_text(const char *dir, const char *name, const char *text, int newline)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    if (newline)
        fputc('\n', f);
    return fclose(f);
}

static int write_report(const char *dir, const char *name, const cz_report *r, cz_error *err)
{
    char *text = NULL;
    int rc = cz_report_json(r, 1, &text, err);
    if (rc == CZ_OK)
        rc = write_text(dir, name, text, 1) ? CZ_EIO : CZ_OK;
    cz_free(text);
    return rc;
}

static double number(const cz_report *r, const char *path)
{
    double v = NAN;
    cz_error err;
    if (cz_report_number(r, path, &v, &err) != CZ_OK) {
        fprintf(stderr, "analysis: %s\n", err.message);
        failures++;
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: analysis CONFIG.json CLUSTER.json OTHER_MODEL.json OUTDIR\n");
        return 2;
    }
    const char *config = argv[1], *cluster_path = argv[2], *other_path = argv[3], *dir = argv[4];
    cz_error err;
    cz_error_clear(&err);
    char *model_text = NULL, *svg = NULL, *html = NULL;
    cz_model *model = NULL, *other = NULL;
    cz_cluster *cluster = NULL;
    cz_plan *built = NULL, *plan = NULL, *plan2 = NULL;
    cz_report *valid = NULL, *foreign = NULL, *insp = NULL, *diff = NULL, *diff2 = NULL,
              *simr = NULL;
    cz_sim_result *sim = NULL;
    int rc;

    /* import-hf, then plan from the text without a file in between. */
    cz_import_hf_options io;
    cz_import_hf_options_init(&io);
    io.tp_size = 2;
    if ((rc = cz_model_import_hf(&model_text, config, &io, &err)) ||
        (rc = write_text(dir, "model.json", model_text, 0) ? CZ_EIO : CZ_OK) ||
        (rc = cz_model_parse(&model, model_text, "imported", &err)) ||
        (rc = cz_cluster_load(&cluster, cluster_path, &err)) ||
        (rc = cz_model_load(&other, other_path, &err)))
        goto fail;
    cz_settings s;
    cz_settings_init(&s);
    char path[4096];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    /* The analyses read the plan back, as the CLI does (validate then also checks the file's
     * content hash). */
    if ((rc = cz_plan_build(&built, model, cluster, &s, &err)) ||
        (rc = cz_plan_write(built, path, &err)) || (rc = cz_plan_read(&plan, path, &err)))
        goto fail;

    /* validate: the plan is valid for its model, and not for another one. */
    if ((rc = cz_plan_validate(&valid, plan, model, cluster, &err)) ||
        (rc = write_report(dir, "validate.json", valid, &err)) ||
        (rc = cz_plan_validate(&foreign, plan, other, cluster, &err)))
        goto fail;
    CHECK(number(valid, "valid") == 1);
    CHECK(number(valid, "checks") > 100);
    CHECK(number(foreign, "valid") == 0);
    const char *code = cz_report_string(foreign, "violations.0.code");
    CHECK(code && !strcmp(code, "inputs"));

    /* inspect with the cluster's memory headroom. */
    cz_inspect_options insp_opt;
    cz_inspect_options_init(&insp_opt);
    insp_opt.cluster = cluster;
    if ((rc = cz_plan_inspect(&insp, plan, &insp_opt, &err)) ||
        (rc = write_report(dir, "inspect.json", insp, &err)))
        goto fail;
    double headroom = number(insp, "memory_per_gpu.headroom_gib");
    CHECK(headroom > 0 && headroom < 16);

    /* diff: a plan against itself is identical; against alpha 0, it is not. */
    cz_diff_options dopt;
    cz_diff_options_init(&dopt);
    s.alpha = 0.0;
    cz_plan_free(built);
    built = NULL;
    snprintf(path, sizeof path, "%s/plan2.json", dir);
    if ((rc = cz_plan_diff(&diff, plan, plan, &dopt, &err)) ||
        (rc = cz_plan_build(&built, model, cluster, &s, &err)) ||
        (rc = cz_plan_write(built, path, &err)) || (rc = cz_plan_read(&plan2, path, &err)) ||
        (rc = cz_plan_diff(&diff2, plan, plan2, &dopt, &err)) ||
        (rc = write_report(dir, "diff.json", diff2, &err)))
        goto fail;
    CHECK(number(diff, "identical") == 1);
    CHECK(number(diff2, "identical") == 0);

    /* simulate: the step is its phases' sum, and the busiest GPU is the critical one's. */
    cz_sim_options so;
    cz_sim_options_init(&so);
    if ((rc = cz_plan_simulate(&sim, plan, cluster, &so, &err)) ||
        (rc = cz_sim_result_report(&simr, sim, &err)))
        goto fail;
    double step = number(simr, "step_s");
    CHECK(number(simr, "in_seconds") == 1);
    CHECK(step > 0 &&
          fabs(step - number(simr, "grad_sync_s") - number(simr, "optimizer_s")) <= 1e-9 * step);
    CHECK(number(simr, "gpu_busy.3") >= 0);

    /* render: SVG and HTML, as `canzona render` writes them. */
    cz_render_options ro;
    cz_render_options_init(&ro);
    if ((rc = cz_plan_render(&svg, plan, cluster, &ro, &err)) ||
        (rc = write_text(dir, "render.svg", svg, 0) ? CZ_EIO : CZ_OK))
        goto fail;
    ro.format = CZ_RENDER_HTML;
    if ((rc = cz_plan_render(&html, plan, NULL, &ro, &err)))
        goto fail;
    CHECK(!strncmp(svg, "<?xml", 5) && strstr(svg, "<svg"));
    CHECK(!strncmp(html, "<!DOCTYPE html>", 15));

    /* Errors are return codes with a message, never an exit. */
    double v = 0;
    cz_error_clear(&err);
    CHECK(cz_report_number(valid, "no.such.key", &v, &err) == CZ_EINVALID &&
          strstr(err.message, "no.such.key"));
    CHECK(cz_report_string(valid, "checks") == NULL);
    char *none = NULL;
    CHECK(cz_model_import_hf(&none, "no-such-config.json", NULL, &err) == CZ_EIO && !none &&
          strstr(err.message, "no-such-config.json"));
    cz_model *bad = NULL;
    CHECK(cz_model_parse(&bad, "{\"schema\": ", "text", &err) == CZ_EPARSE && !bad);
    ro.width = 10;
    CHECK(cz_plan_render(&none, plan, NULL, &ro, &err) == CZ_EINVALID && !none);
    rc = CZ_OK;
    goto out;
fail:
    fprintf(stderr, "analysis: %s\n", err.message);
out:
    cz_free(model_text);
    cz_free(svg);
    cz_free(html);
    cz_report_free(valid);
    cz_report_free(foreign);
    cz_report_free(insp);
    cz_report_free(diff);
    cz_report_free(diff2);
    cz_report_free(simr);
    cz_sim_result_free(sim);
    cz_plan_free(built);
    cz_plan_free(plan);
    cz_plan_free(plan2);
    cz_cluster_free(cluster);
    cz_model_free(model);
    cz_model_free(other);
    return rc || failures ? 1 : 0;
}
