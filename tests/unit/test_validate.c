/* cz__plan_validate_json: a valid hand-built plan passes; each corruption is found at its path. */
#include "cz_analysis.h"
#include "cz_hand_plan.h"
#include "cz_types.h"

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static cz_model *model;
static cz_cluster *cluster;
static cz_plan *plan;

/* The hand plan made valid: costs from the cost model, loads and metrics recomputed. */
static void setup(void)
{
    model = hand_model();
    cluster = hand_cluster();
    plan = hand_plan();
    for (size_t i = 0; i < plan->nparams; i++)
        plan->params[i].cost =
            cz__cost_param(&model->params[i], &plan->settings, cluster, model->dtype);
    hand_group_loads(plan);
    cz_error e;
    ck_assert_int_eq(cz__plan_metrics_compute(plan, cluster, &e), CZ_OK);
}

static void teardown(void)
{
    cz_plan_free(plan);
    cz_model_free(model);
    cz_cluster_free(cluster);
}

static json_t *run_validate(int *checks)
{
    json_t *v = NULL;
    cz_error e;
    cz_error_clear(&e);
    int rc = cz__plan_validate_json(plan, model, cluster, &v, &e);
    ck_assert_msg(rc >= 0, "validate failed: %s", e.message);
    ck_assert_ptr_nonnull(v);
    if (checks)
        *checks = rc;
    return v;
}

/* Whether a violation with this code and exact path was reported. */
static int has(json_t *v, const char *code, const char *path)
{
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
    {
        if (!strcmp(json_string_value(json_object_get(x, "code")), code) &&
            !strcmp(json_string_value(json_object_get(x, "path")), path))
            return 1;
    }
    return 0;
}

static void expect(const char *code, const char *path)
{
    json_t *v = run_validate(NULL);
    char *dump = json_dumps(v, JSON_INDENT(1));
    ck_assert_msg(has(v, code, path), "expected %s at %s, got %s", code, path, dump);
    free(dump);
    json_decref(v);
}

START_TEST(valid_plan_passes)
{
    int checks = 0;
    json_t *v = run_validate(&checks);
    char *dump = json_dumps(v, JSON_INDENT(1));
    ck_assert_msg(json_array_size(v) == 0, "violations on a valid plan: %s", dump);
    free(dump);
    /* 6 params x >= 10 checks each, plus buckets, ranges, schedules and metrics. */
    ck_assert_int_gt(checks, 100);
    json_decref(v);
}
END_TEST

START_TEST(coverage_broken)
{
    plan->buckets[0].ranges[3] = 894; /* last range stops short of the bucket's end (896) */
    expect("bucket.ranges", "$.buckets[0].ranges[1]");
}
END_TEST

START_TEST(overlapping_ranges)
{
    plan->buckets[0].ranges[2] = 500; /* rank 1 starts before rank 0 ends (576) */
    expect("bucket.ranges", "$.buckets[0].ranges[1]");
}
END_TEST

START_TEST(param_across_boundary)
{
    /* Cut bucket 0 at 320: l1.fc [64, 576) now straddles ranks 0 and 1. */
    plan->buckets[0].ranges[1] = 320;
    plan->buckets[0].ranges[2] = 320;
    json_t *v = run_validate(NULL);
    ck_assert(has(v, "atomicity", "$.params[4]"));
    ck_assert_uint_eq(json_array_size(v), 1);
    json_decref(v);
}
END_TEST

START_TEST(owner_changed)
{
    plan->params[2].dp_owner = 0; /* l0.proj lies in rank 1's range */
    expect("atomicity", "$.params[2].dp_owner");
    expect("schedule.foreign", "$.tp_schedule[1].groups[0].slots[0][0]");
    expect("schedule.missing", "$.tp_schedule[0]");
}
END_TEST

START_TEST(param_dropped_from_schedule)
{
    cz_plan_group *g = &plan->schedules[0].groups[0];
    g->ntasks = 1; /* l0.qkv (slot 1) dropped */
    g->load[1] = 0.0;
    expect("schedule.missing", "$.tp_schedule[0]");
}
END_TEST

START_TEST(param_scheduled_twice)
{
    cz_plan_group *g = &plan->schedules[0].groups[0];
    g->task_param = realloc(g->task_param, 3 * sizeof *g->task_param);
    g->task_slot = realloc(g->task_slot, 3 * sizeof *g->task_slot);
    g->task_param[2] = 4; /* l1.fc again, second task of slot 1 */
    g->task_slot[2] = 1;
    g->ntasks = 3;
    g->load[1] += plan->params[4].cost;
    json_t *v = run_validate(NULL);
    ck_assert(has(v, "schedule.duplicate", "$.tp_schedule[0].groups[0].slots[1][1]"));
    json_decref(v);
}
END_TEST

START_TEST(elementwise_scheduled)
{
    cz_plan_group *g = &plan->schedules[1].groups[0];
    g->task_param[1] = 3; /* l0.norm on slot 1 */
    g->task_slot[1] = 1;
    g->ntasks = 2;
    expect("schedule.elementwise", "$.tp_schedule[1].groups[0].slots[1][0]");
}
END_TEST

START_TEST(wrong_group_load)
{
    /* Metrics computed from the stored loads may follow; only the load itself is certain. */
    plan->schedules[1].groups[0].load[0] *= 1.001;
    expect("schedule.load", "$.tp_schedule[1].groups[0].load[0]");
}
END_TEST

START_TEST(wrong_hash)
{
    plan->model_sha256[10] = 'f';
    json_t *v = run_validate(NULL);
    ck_assert(has(v, "inputs", "$.inputs.model.sha256"));
    ck_assert_uint_eq(json_array_size(v), 1);
    json_decref(v);
    cluster->sha256[0] = '0';
    expect("inputs", "$.inputs.cluster.sha256");
}
END_TEST

START_TEST(wrong_topology)
{
    cluster->dp = 4; /* the plan says dp = 2 */
    cluster->gpus = 8;
    expect("topology", "$.topology.dp");
}
END_TEST

START_TEST(wrong_metric)
{
    plan->metrics.tp_makespan *= 1.01;
    plan->metrics.dp_load[1] += 1.0;
    json_t *v = run_validate(NULL);
    ck_assert(has(v, "metrics", "$.metrics.tp.makespan"));
    ck_assert(has(v, "metrics", "$.metrics.dp.load[1]"));
    ck_assert_uint_eq(json_array_size(v), 2);
    json_decref(v);
}
END_TEST

START_TEST(metric_within_tolerance)
{
    plan->metrics.tp_makespan *= 1.0 + 1e-12;
    json_t *v = run_validate(NULL);
    ck_assert_uint_eq(json_array_size(v), 0);
    json_decref(v);
}
END_TEST

START_TEST(wrong_local_shape)
{
    plan->params[1].local_shape[0] = 32; /* 32x16 split rows over tp 2 is 16x16 */
    json_t *v = run_validate(NULL);
    ck_assert(has(v, "param.local_shape", "$.params[1].local_shape"));
    ck_assert_uint_eq(json_array_size(v), 1);
    json_decref(v);
}
END_TEST

START_TEST(wrong_cost)
{
    plan->params[2].cost *= 1.000001;
    expect("param.cost", "$.params[2].cost");
}
END_TEST

START_TEST(wrong_shape_and_offset)
{
    plan->params[3].def.shape[0] = 17;
    plan->params[5].offset = 32; /* misaligned, and overlaps l1.fc at 64 */
    expect("param.shape", "$.params[3].shape");
    expect("param.offset", "$.params[5].offset");
}
END_TEST

START_TEST(schedule_count_and_slots)
{
    plan->schedules[1].groups[0].nslots = 1;
    expect("schedule.slots", "$.tp_schedule[1].groups[0].slots");
    plan->nschedules = 1;
    expect("schedule.count", "$.tp_schedule");
    plan->nschedules = 2;
}
END_TEST

START_TEST(bad_ids_do_not_crash)
{
    plan->schedules[0].groups[0].task_param[0] = 99;
    plan->params[0].bucket = 7;
    plan->params[1].dp_owner = 5;
    expect("schedule.param", "$.tp_schedule[0].groups[0].slots[0][0]");
    expect("param.bucket", "$.params[0].bucket");
    expect("param.dp_owner", "$.params[1].dp_owner");
}
END_TEST

START_TEST(other_model_no_cascade)
{
    model->params[4].shape[0] = 128; /* the model's l1.fc is now 128x16 */
    json_t *v = run_validate(NULL);
    char *dump = json_dumps(v, JSON_INDENT(1));
    ck_assert_msg(has(v, "param.shape", "$.params[4].shape"), "%s", dump);
    /* Its cost is not compared with another parameter's, nor the layout recomputed. */
    ck_assert_msg(json_array_size(v) == 1, "%s", dump);
    free(dump);
    json_decref(v);
}
END_TEST

/* Every plan the planner builds for the hand model, under every strategy, validates clean. */
START_TEST(built_plans_validate)
{
    const cz_dp_strategy dps[] = {CZ_DP_EVEN, CZ_DP_ANCHORED, CZ_DP_LAYERWISE, CZ_DP_ALPHA};
    const cz_tp_strategy tps[] = {CZ_TP_SC, CZ_TP_NONE, CZ_TP_SINGLE, CZ_TP_SLOT, CZ_TP_ROLLBACK};
    for (size_t i = 0; i < sizeof dps / sizeof dps[0]; i++)
        for (size_t j = 0; j < sizeof tps / sizeof tps[0]; j++) {
            cz_settings s;
            cz_settings_init(&s);
            s.dp = dps[i];
            s.tp = tps[j];
            cz_plan *built = NULL;
            cz_error e;
            cz_error_clear(&e);
            ck_assert_msg(cz_plan_build(&built, model, cluster, &s, &e) == CZ_OK, "%s", e.message);
            json_t *v = NULL;
            ck_assert_int_gt(cz__plan_validate_json(built, model, cluster, &v, &e), 0);
            char *dump = json_dumps(v, JSON_INDENT(1));
            ck_assert_msg(json_array_size(v) == 0, "dp %s tp %s: %s", cz_dp_strategy_name(s.dp),
                          cz_tp_strategy_name(s.tp), dump);
            free(dump);
            json_decref(v);
            cz_plan_free(built);
        }
}
END_TEST

/* The hand model planned with the split layout: its elementwise buffer comes first. */
static cz_plan *split_plan(cz_dp_strategy dp, cz_tp_strategy tp)
{
    cz_settings s;
    cz_settings_init(&s);
    s.dp = dp;
    s.tp = tp;
    s.layout = CZ_LAYOUT_SPLIT;
    cz_plan *built = NULL;
    cz_error e;
    cz_error_clear(&e);
    ck_assert_msg(cz_plan_build(&built, model, cluster, &s, &e) == CZ_OK, "%s", e.message);
    return built;
}

/* Validates p, expecting a violation with this code at this path (NULL: none at all). */
static void expect_on(cz_plan *p, const char *code, const char *path)
{
    json_t *v = NULL;
    cz_error e;
    cz_error_clear(&e);
    ck_assert_int_gt(cz__plan_validate_json(p, model, cluster, &v, &e), 0);
    char *dump = json_dumps(v, JSON_INDENT(1));
    if (code)
        ck_assert_msg(has(v, code, path), "expected %s at %s, got %s", code, path, dump);
    else
        ck_assert_msg(json_array_size(v) == 0, "violations: %s", dump);
    free(dump);
    json_decref(v);
}

/* Split-layout plans validate clean: per stage the evenly sliced elementwise buffer (its
 * parameters without an owner), then the matrix buffer partitioned by the strategy. */
START_TEST(split_plans_validate)
{
    const cz_dp_strategy dps[] = {CZ_DP_ANCHORED, CZ_DP_ALPHA};
    const cz_tp_strategy tps[] = {CZ_TP_SC, CZ_TP_NONE, CZ_TP_SINGLE, CZ_TP_SLOT, CZ_TP_ROLLBACK};
    for (size_t i = 0; i < sizeof dps / sizeof dps[0]; i++)
        for (size_t j = 0; j < sizeof tps / sizeof tps[0]; j++) {
            cz_plan *p = split_plan(dps[i], tps[j]);
            expect_on(p, NULL, NULL);
            /* out 64 @0, l0.norm 16 @64, embed 64 @128: one bucket of 192, slices of 96 */
            ck_assert_int_eq(p->buckets[0].elementwise, 1);
            ck_assert_int_eq(p->buckets[0].size, 192);
            ck_assert_int_eq(p->buckets[0].ranges[1], 96);
            for (size_t b = 1; b < p->nbuckets; b++)
                ck_assert_int_eq(p->buckets[b].elementwise, 0);
            for (size_t k = 0; k < p->nparams; k++) {
                const cz_plan_param *q = &p->params[k];
                ck_assert_int_eq(p->buckets[q->bucket].elementwise,
                                 q->def.kind == CZ_KIND_ELEMENTWISE);
                if (q->def.kind == CZ_KIND_ELEMENTWISE)
                    ck_assert_int_eq(q->dp_owner, -1);
                else
                    ck_assert_int_ge(q->dp_owner, 0);
            }
            cz_plan_free(p);
        }
}
END_TEST

/* Each rule of the split layout, broken once. */
START_TEST(split_rules)
{
    cz_plan *p = split_plan(CZ_DP_ALPHA, CZ_TP_ROLLBACK);
    /* an elementwise parameter of the split layout given an owner */
    p->params[3].dp_owner = 0;
    expect_on(p, "param.dp_owner", "$.params[3].dp_owner");
    p->params[3].dp_owner = -1;
    /* a slice of the elementwise buffer that is not the even one */
    p->buckets[0].ranges[1] = p->buckets[0].ranges[2] = 64;
    expect_on(p, "bucket.ranges", "$.buckets[0].ranges[0]");
    p->buckets[0].ranges[1] = p->buckets[0].ranges[2] = 96;
    /* the elementwise buffer's bucket marked as the matrix buffer's */
    p->buckets[0].elementwise = 0;
    expect_on(p, "param.bucket", "$.params[5].bucket");
    p->buckets[0].elementwise = 1;
    expect_on(p, NULL, NULL);
    cz_plan_free(p);
    /* an elementwise-buffer bucket in a unified plan */
    plan->buckets[1].elementwise = 1;
    expect("bucket.buffer", "$.buckets[1].buffer");
}
END_TEST

/* The split layout's buffer order: a stage's elementwise buffer comes before its matrix
 * buffer (the executor's AdamW pieces and matrix ranges are laid out that way). Here the
 * elementwise bucket is moved behind the matrix buckets, every bucket keeping its parameters
 * and the offsets staying contiguous: only the buffer-order rule of the structural check
 * (what the executor runs too) reports it. */
START_TEST(split_buffer_order)
{
    cz_plan *p = split_plan(CZ_DP_ALPHA, CZ_TP_ROLLBACK);
    size_t n = p->nbuckets;
    ck_assert_uint_ge(n, 2);
    ck_assert_int_eq(p->buckets[0].elementwise, 1);
    cz_plan_bucket e = p->buckets[0];
    memmove(&p->buckets[0], &p->buckets[1], (n - 1) * sizeof *p->buckets);
    p->buckets[n - 1] = e;
    int64_t off = 0;
    for (size_t b = 0; b < n; b++) {
        p->buckets[b].id = (int)b;
        p->buckets[b].offset = off;
        off += p->buckets[b].size;
    }
    for (size_t k = 0; k < p->nparams; k++)
        p->params[k].bucket = p->params[k].bucket == 0 ? (int)n - 1 : p->params[k].bucket - 1;
    char path[64];
    snprintf(path, sizeof path, "$.buckets[%zu].buffer", n - 1);
    expect_on(p, "bucket.buffer", path);
    cz_plan_checks c = {0};
    c.out = json_array();
    cz__plan_check_structure(&c, p);
    char *text = json_dumps(c.out, JSON_COMPACT);
    ck_assert_msg(json_array_size(c.out) == 1 &&
                      strstr(text, "follows a matrix-buffer bucket of stage 0"),
                  "%s", text);
    free(text);
    json_decref(c.out);
    cz_plan_free(p);
}
END_TEST

/* tpaware, the exact solvers and the baselines need the unified buffer; the error says so. */
START_TEST(split_refuses_other_strategies)
{
    const cz_dp_strategy dps[] = {CZ_DP_EVEN, CZ_DP_LAYERWISE, CZ_DP_TPAWARE, CZ_DP_ALPHA};
    for (size_t i = 0; i < sizeof dps / sizeof dps[0]; i++) {
        cz_settings s;
        cz_settings_init(&s);
        s.dp = dps[i];
        s.layout = CZ_LAYOUT_SPLIT;
        if (dps[i] == CZ_DP_ALPHA)
            s.solver = CZ_SOLVER_ILP;
        cz_plan *built = NULL;
        cz_error e;
        cz_error_clear(&e);
        ck_assert_int_eq(cz_plan_build(&built, model, cluster, &s, &e), CZ_EUNSUPPORTED);
        ck_assert_ptr_null(built);
        ck_assert_msg(strstr(e.message, "split buffer layout") &&
                          strstr(e.message, "--layout unified"),
                      "%s", e.message);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("validate");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, valid_plan_passes);
    tcase_add_test(tc, coverage_broken);
    tcase_add_test(tc, overlapping_ranges);
    tcase_add_test(tc, param_across_boundary);
    tcase_add_test(tc, owner_changed);
    tcase_add_test(tc, param_dropped_from_schedule);
    tcase_add_test(tc, param_scheduled_twice);
    tcase_add_test(tc, elementwise_scheduled);
    tcase_add_test(tc, wrong_group_load);
    tcase_add_test(tc, wrong_hash);
    tcase_add_test(tc, wrong_topology);
    tcase_add_test(tc, wrong_metric);
    tcase_add_test(tc, metric_within_tolerance);
    tcase_add_test(tc, wrong_local_shape);
    tcase_add_test(tc, wrong_cost);
    tcase_add_test(tc, wrong_shape_and_offset);
    tcase_add_test(tc, schedule_count_and_slots);
    tcase_add_test(tc, bad_ids_do_not_crash);
    tcase_add_test(tc, other_model_no_cascade);
    tcase_add_test(tc, built_plans_validate);
    tcase_add_test(tc, split_plans_validate);
    tcase_add_test(tc, split_rules);
    tcase_add_test(tc, split_buffer_order);
    tcase_add_test(tc, split_refuses_other_strategies);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
