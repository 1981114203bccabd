/*
 * Harness: the plan reader (cz_plan_read) and every consumer of a plan the reader accepts:
 * inspect, simulate (cost-proportional, and on a bundled cluster of the plan's topology with
 * both models of uneven collectives), render (SVG and HTML), validate (against the bundled
 * model and cluster the plan names, else against the tiny fixtures, which exercises the
 * mismatch reports), diff (against itself and, forced, against a reference plan) and the
 * writer.
 *
 * Properties beyond "no crash, leak or undefined behaviour":
 *  - a plan compared with itself is "identical";
 *  - a plan the reader accepts, written back with cz_plan_write, is read again, and the copy
 *    is identical to the original (diff), so that nothing a reader accepts is lost or altered
 *    by the writer;
 *  - that copy is cut into a split plan folder (cz__plan_split_write) and parts of it are read
 *    back (cz__plan_read_slice, the executor's reader of a folder): refusals carry a message,
 *    and the parts of a plan without structural violations read and check clean.
 * Consumers may refuse a plan they cannot handle (e.g. simulate refuses the even strategy
 * with a TP schedule), with a message, but never with CZ_EINTERNAL.
 */
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static cz_plan *reference;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_fixtures_load();
    cz_model *m = fz_fixture_model("tests/data/model_tiny.json");
    cz_cluster *c = fz_fixture_cluster("tests/data/cluster_tiny.json");
    cz_settings s;
    cz_settings_init(&s);
    cz_error e;
    cz_error_clear(&e);
    if (cz_plan_build(&reference, m, c, &s, &e) != CZ_OK)
        fz_fail("cannot build the reference plan: %s", e.message);
    cz_model_free(m);
    cz_cluster_free(c);
    return 0;
}

static void expect_handled(int rc, const char *what, const cz_error *err)
{
    if (rc == CZ_EINTERNAL)
        fz_fail("%s reported an internal error: %s", what, err->message);
    if (rc != CZ_OK && !err->message[0])
        fz_fail("%s failed (%d) without a message", what, rc);
}

static void render_both(const cz_plan *plan, const cz_sim_result *sim, int in_seconds)
{
    cz_svg_options ro = {.width = 0, .cluster_name = NULL, .sim_in_seconds = in_seconds};
    char *doc = NULL;
    cz_error err;
    cz_error_clear(&err);
    expect_handled(cz__plan_render_svg(&doc, plan, sim, &ro, &err), "render svg", &err);
    free(doc);
    doc = NULL;
    cz_error_clear(&err);
    expect_handled(cz__plan_render_html(&doc, plan, sim, &ro, &err), "render html", &err);
    free(doc);
}

static void simulate_and_render(const cz_plan *plan, const cz_cluster *cluster,
                                cz_sim_uneven uneven)
{
    cz_sim_result *sim = NULL;
    cz_sim_options so = CZ_SIM_OPTIONS_INIT;
    so.uneven = uneven;
    cz_error err;
    cz_error_clear(&err);
    int rc = cz_plan_simulate(&sim, plan, cluster, &so, &err);
    expect_handled(rc, "simulate", &err);
    if (rc == CZ_OK)
        render_both(plan, sim, cluster != NULL);
    else if (cz_plan_is_fsdp(plan)) /* drawn without the bucketed simulation */
        render_both(plan, NULL, 0);
    cz_sim_result_free(sim);
}

static void expect_identical(const cz_plan *a, const cz_plan *b, const char *what)
{
    json_t *rep = NULL;
    cz_error err;
    cz_error_clear(&err);
    if (cz__plan_diff_json(a, b, 0, -1, &rep, &err) != CZ_OK)
        fz_fail("%s: diff failed: %s", what, err.message);
    if (!json_is_true(json_object_get(rep, "identical"))) {
        char *text = json_dumps(rep, JSON_INDENT(1));
        fprintf(stderr, "%s\n", text ? text : "(diff report not printable)");
        free(text);
        json_decref(rep);
        fz_fail("%s: the plans differ", what);
    }
    json_decref(rep);
}

/* Whether the structural check finds nothing wrong with plan (a whole plan or a slice). */
static int structure_clean(const cz_plan *plan)
{
    cz_plan_checks c = {0};
    c.expert_groups = 1;
    c.out = json_array();
    if (!c.out)
        fz_fail("out of memory");
    cz__plan_check_structure(&c, plan);
    int clean = !c.oom && json_array_size(c.out) == 0;
    if (!clean && plan->slice.on)
        fz_print_violations(c.out, 3);
    json_decref(c.out);
    return clean;
}

/* The split plan folder of a plan as written (path): cut, then read back for a few world
 * ranks (the first and last of the world and of each stage). Refusals must come with a
 * message; and the parts of a plan without structural violations must read, and check,
 * clean. The folder is emptied afterwards. */
static void check_split(const cz_plan *plan, const char *path)
{
    const char *dir = fz_scratch_path("split");
    cz_error err;
    cz_error_clear(&err);
    int rc = cz__plan_split_write(path, dir, &err);
    int clean = structure_clean(plan);
    if (rc != CZ_OK)
        expect_handled(rc, "cz__plan_split_write", &err);
    long per_stage = (long)plan->dp * plan->tp, gpus = per_stage * plan->pp;
    for (int s = 0; rc == CZ_OK && s < plan->pp && s < 4; s++) {
        long ranks[2] = {s * per_stage, s * per_stage + per_stage - 1};
        for (int k = 0; k < 2 && ranks[k] < gpus; k++) {
            cz_plan *part = NULL;
            cz_error_clear(&err);
            int prc = cz__plan_read_slice(&part, dir, (int)ranks[k], &err);
            if (prc != CZ_OK)
                expect_handled(prc, "cz__plan_read_slice", &err);
            if (clean && prc != CZ_OK)
                fz_fail("world rank %ld's part of a plan without structural violations is "
                        "refused: %s",
                        ranks[k], err.message);
            if (clean && prc == CZ_OK && !structure_clean(part))
                fz_fail("world rank %ld's part of a plan without structural violations breaks a "
                        "structural rule",
                        ranks[k]);
            cz_plan_free(part);
        }
    }
    char f[4300];
    snprintf(f, sizeof f, "%s/header.json", dir);
    unlink(f);
    for (int s = 0; s < plan->pp; s++) {
        snprintf(f, sizeof f, "%s/stage-%d.parts", dir, s);
        unlink(f);
        snprintf(f, sizeof f, "%s/stage-%d.index", dir, s);
        unlink(f);
    }
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cz_plan *plan = NULL, *copy = NULL;
    json_t *report = NULL;
    cz_error err;
    cz_error_clear(&err);
    int rc = cz_plan_read(&plan, fz_input_path(0, data, size), &err);
    if (rc != CZ_OK) {
        if (plan)
            fz_fail("cz_plan_read failed (%d) but returned a plan", rc);
        expect_handled(rc, "cz_plan_read", &err);
        return 0;
    }

    cz_error_clear(&err);
    expect_handled(cz__plan_inspect_json(plan, 3, &report, &err), "inspect", &err);
    json_decref(report);
    report = NULL;

    simulate_and_render(plan, NULL, CZ_SIM_UNEVEN_ROOTED);
    const cz_cluster *like = fz_fixture_cluster_like(plan);
    if (like) {
        simulate_and_render(plan, like, CZ_SIM_UNEVEN_ROOTED);
        simulate_and_render(plan, like, CZ_SIM_UNEVEN_PADDED);
    }

    const cz_model *model;
    const cz_cluster *cluster;
    fz_fixtures_find(plan, &model, &cluster);
    if (!model || !cluster) {
        /* Not made from the fixtures: validate against the reference's inputs anyway. */
        static cz_model *tiny_model;
        static cz_cluster *tiny_cluster;
        if (!tiny_model) {
            tiny_model = fz_fixture_model("tests/data/model_tiny.json");
            tiny_cluster = fz_fixture_cluster("tests/data/cluster_tiny.json");
        }
        model = model ? model : tiny_model;
        cluster = cluster ? cluster : tiny_cluster;
    }
    cz_error_clear(&err);
    rc = cz__plan_validate_json(plan, model, cluster, &report, &err);
    if (rc < 0)
        expect_handled(rc, "validate", &err);
    json_decref(report);
    report = NULL;

    expect_identical(plan, plan, "a plan compared with itself");
    cz_error_clear(&err);
    expect_handled(cz__plan_diff_json(reference, plan, 1, 10, &report, &err), "diff --force", &err);
    json_decref(report);
    report = NULL;
    cz_error_clear(&err);
    expect_handled(cz__plan_diff_json(plan, reference, 1, -1, &report, &err), "diff --force", &err);
    json_decref(report);
    report = NULL;

    const char *out = fz_scratch_path("plan.json");
    cz_error_clear(&err);
    if (cz_plan_write(plan, out, &err) != CZ_OK)
        fz_fail("cz_plan_write failed on a plan the reader accepted: %s", err.message);
    cz_error_clear(&err);
    if (cz_plan_read(&copy, out, &err) != CZ_OK)
        fz_fail("a plan the reader accepted, written back, is refused: %s", err.message);
    expect_identical(plan, copy, "a plan written back and read again");

    check_split(copy, out);
    cz_plan_free(copy);
    cz_plan_free(plan);
    return 0;
}
