/* cz__plan_inspect_json and cz__plan_diff_json on the hand-built plan with hand-set costs and
 * metrics. */
#include "cz_hand_plan.h"
#include "cz_types.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Costs: embed 2, l0.qkv 30, l0.proj 40, l0.norm 1, l1.fc 100, out 2 (total 175).
 * Rank 0 owns out, l1.fc, l0.qkv: load 132; rank 1 owns l0.norm, l0.proj, embed: load 43.
 * Rank 0 group slots [l1.fc] [l0.qkv]: loads 100, 30; rank 1 [l0.proj] []: 40, 0.
 * Per-GPU loads add each rank's elementwise share (2 per TP rank on rank 0, 1.5 on rank 1):
 * 102, 32, 41.5, 1.5; rank makespans 102 and 41.5. Lower bound max(175 / 4, 100) = 100. */
static const double costs[HAND_NPARAMS] = {2, 30, 40, 1, 100, 2};

static cz_plan *costed_plan(void)
{
    cz_plan *p = hand_plan();
    for (int i = 0; i < HAND_NPARAMS; i++)
        p->params[i].cost = costs[i];
    hand_group_loads(p);
    cz_plan_metrics *m = &p->metrics;
    m->dp_load = calloc(2, sizeof(double));
    m->rank_makespan = calloc(2, sizeof(double));
    m->gpu_load = calloc(4, sizeof(double));
    m->memory = calloc(4, sizeof(double));
    m->dp_load[0] = 132, m->dp_load[1] = 43;
    m->rank_makespan[0] = 102, m->rank_makespan[1] = 41.5;
    const double gl[4] = {102, 32, 41.5, 1.5}, mem[4] = {2147483648.0, 1073741824.0, 0, 0};
    for (int g = 0; g < 4; g++)
        m->gpu_load[g] = gl[g], m->memory[g] = mem[g];
    m->dp_imbalance = 132 / 87.5;
    m->tp_makespan = 102;
    m->tp_imbalance = 102 / 44.25;
    m->total_cost = 175;
    m->max_task_cost = 100;
    m->lower_bound = 100;
    m->predicted_step_s = 102e-6;
    return p;
}

static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_number(v), "no number '%s'", key);
    return json_number_value(v);
}

static const char *str(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_string(v), "no string '%s'", key);
    return json_string_value(v);
}

START_TEST(inspect_busiest_and_dominating)
{
    cz_plan *p = costed_plan();
    json_t *r = NULL;
    cz_error e;
    ck_assert_int_eq(cz__plan_inspect_json(p, 2, &r, &e), CZ_OK);

    json_t *sum = json_object_get(r, "summary");
    ck_assert_double_eq_tol(num(sum, "makespan_over_lower_bound"), 1.02, 1e-12);
    ck_assert_double_eq_tol(num(sum, "mean_gpu_load"), 44.25, 1e-12);
    ck_assert_int_eq((int)num(sum, "matrices"), 3);

    json_t *busiest = json_object_get(r, "busiest");
    ck_assert_uint_eq(json_array_size(busiest), 2);
    json_t *b0 = json_array_get(busiest, 0);
    ck_assert_int_eq((int)num(b0, "dp_rank"), 0);
    ck_assert_double_eq(num(b0, "makespan"), 102);
    json_t *ps = json_object_get(b0, "params");
    ck_assert_uint_eq(json_array_size(ps), 2); /* top 2 of its three params */
    ck_assert_str_eq(str(json_array_get(ps, 0), "name"), "l1.fc");
    ck_assert_double_eq_tol(num(json_array_get(ps, 0), "share_of_rank"), 100.0 / 132.0, 1e-12);
    ck_assert_str_eq(str(json_array_get(ps, 1), "name"), "l0.qkv");
    ck_assert_int_eq((int)num(json_array_get(busiest, 1), "dp_rank"), 1);

    json_t *ranks = json_object_get(r, "dp_ranks");
    ck_assert_uint_eq(json_array_size(ranks), 2);
    json_t *r1 = json_array_get(ranks, 1);
    ck_assert_double_eq_tol(num(r1, "share_of_mean"), 43 / 87.5, 1e-12);
    ck_assert_int_eq((int)num(r1, "params"), 3);
    ck_assert_int_eq((int)num(r1, "matrices"), 1);
    ck_assert_double_eq(num(json_array_get(ranks, 0), "memory_gib_max"), 2.0);
    ck_assert_double_eq(num(json_array_get(ranks, 0), "gpu_load_min"), 32.0);

    json_t *mg = json_array_get(json_object_get(r, "microgroups"), 0);
    ck_assert_int_eq((int)num(mg, "groups"), 1);
    ck_assert_double_eq(num(mg, "slot_load_min"), 30);
    ck_assert_double_eq(num(mg, "slot_load_max"), 100);
    ck_assert_str_eq(str(json_object_get(mg, "largest_task"), "name"), "l1.fc");

    /* Average per-GPU load 43.75: only l1.fc (100) dominates; l0.proj (40) does not. */
    json_t *dom = json_object_get(r, "dominating");
    ck_assert_double_eq(num(dom, "average_gpu_load"), 43.75);
    json_t *dl = json_object_get(dom, "params");
    ck_assert_uint_eq(json_array_size(dl), 1);
    ck_assert_str_eq(str(json_array_get(dl, 0), "name"), "l1.fc");
    ck_assert_double_eq_tol(num(json_array_get(dl, 0), "over_average"), 100 / 43.75, 1e-12);
    ck_assert_str_eq(str(r, "unit"), "s");
    json_decref(r);
    cz_plan_free(p);
}
END_TEST

START_TEST(diff_identical)
{
    cz_plan *a = costed_plan(), *b = costed_plan();
    json_t *r = NULL;
    cz_error e;
    ck_assert_int_eq(cz__plan_diff_json(a, b, 0, 10, &r, &e), CZ_OK);
    ck_assert(json_is_true(json_object_get(r, "identical")));
    ck_assert_int_eq((int)num(json_object_get(r, "moved"), "any"), 0);
    ck_assert_uint_eq(json_array_size(json_object_get(r, "settings")), 0);
    json_decref(r);
    cz_plan_free(a);
    cz_plan_free(b);
}
END_TEST

/* Metrics the reader accepts can be huge (a makespan of 1e308 over a tiny lower bound makes
 * an infinite ratio): inf - inf is NaN, and a plan compared with itself was reported as
 * different (found by fuzz_plan). */
START_TEST(diff_identical_with_infinite_metrics)
{
    cz_plan *a = costed_plan(), *b = costed_plan();
    for (int i = 0; i < 2; i++) {
        cz_plan *p = i ? b : a;
        p->metrics.tp_makespan = 1e308;
        p->metrics.lower_bound = 1e-300;
        p->metrics.predicted_step_s = NAN;
    }
    json_t *r = NULL;
    cz_error e;
    ck_assert_int_eq(cz__plan_diff_json(a, b, 0, 10, &r, &e), CZ_OK);
    ck_assert(json_is_true(json_object_get(r, "identical")));
    json_decref(r);
    b->metrics.tp_makespan = 1e307;
    ck_assert_int_eq(cz__plan_diff_json(a, b, 0, 10, &r, &e), CZ_OK);
    ck_assert(json_is_false(json_object_get(r, "identical")));
    json_decref(r);
    cz_plan_free(a);
    cz_plan_free(b);
}
END_TEST

START_TEST(diff_lists_moved_params)
{
    cz_plan *a = costed_plan(), *b = costed_plan();
    /* B: l1.fc and l0.qkv swap hosts on rank 0; l0.norm changes owner; tp strategy slot. */
    cz_plan_group *g = &b->schedules[0].groups[0];
    g->task_slot[0] = 1, g->task_slot[1] = 0;
    hand_group_loads(b);
    b->params[3].dp_owner = 0;
    b->settings.tp = CZ_TP_SLOT;
    b->metrics.tp_makespan = 110;
    b->metrics.rank_makespan[0] = 110;
    json_t *r = NULL;
    cz_error e;
    ck_assert_int_eq(cz__plan_diff_json(a, b, 0, -1, &r, &e), CZ_OK);
    ck_assert(json_is_false(json_object_get(r, "identical")));
    ck_assert_str_eq(str(r, "matched_by"), "id");
    json_t *mv = json_object_get(r, "moved");
    ck_assert_int_eq((int)num(mv, "any"), 3);
    ck_assert_int_eq((int)num(mv, "tp_host"), 2);
    ck_assert_int_eq((int)num(mv, "dp_owner"), 1);
    ck_assert_int_eq((int)num(mv, "group"), 0);
    json_t *list = json_object_get(mv, "list");
    /* Largest moved work first (100, 30, 1), not parameter order. */
    ck_assert_uint_eq(json_array_size(list), 3);
    ck_assert_str_eq(str(json_array_get(list, 0), "name"), "l1.fc");
    ck_assert_str_eq(str(json_array_get(list, 1), "name"), "l0.qkv");
    ck_assert_str_eq(str(json_array_get(list, 2), "name"), "l0.norm");
    json_t *host = json_object_get(json_array_get(list, 1), "tp_host");
    ck_assert_int_eq((int)json_integer_value(json_array_get(host, 0)), 1);
    ck_assert_int_eq((int)json_integer_value(json_array_get(host, 1)), 0);

    json_t *st = json_object_get(r, "settings");
    ck_assert_uint_eq(json_array_size(st), 1);
    ck_assert_str_eq(str(json_array_get(st, 0), "key"), "tp");
    ck_assert_str_eq(str(json_array_get(st, 0), "a"), "rollback");
    ck_assert_str_eq(str(json_array_get(st, 0), "b"), "slot");

    json_t *mt = json_object_get(r, "metrics");
    int found = 0;
    for (size_t i = 0; i < json_array_size(mt); i++) {
        json_t *x = json_array_get(mt, i);
        if (!strcmp(str(x, "name"), "tp_makespan")) {
            ck_assert_double_eq(num(x, "delta"), 8);
            found = 1;
        } else if (!strcmp(str(x, "name"), "makespan_over_lower_bound")) {
            ck_assert_double_eq_tol(num(x, "delta"), 0.08, 1e-12);
        } else {
            ck_assert_double_eq(num(x, "delta"), 0);
        }
    }
    ck_assert(found);
    json_t *rk = json_array_get(json_object_get(r, "ranks"), 0);
    ck_assert_double_eq(num(rk, "makespan_delta"), 8);
    ck_assert_double_eq(num(rk, "dp_load_delta"), 0);
    json_decref(r);

    /* The limit bounds the list, not the counts. */
    ck_assert_int_eq(cz__plan_diff_json(a, b, 0, 1, &r, &e), CZ_OK);
    mv = json_object_get(r, "moved");
    ck_assert_int_eq((int)num(mv, "any"), 3);
    ck_assert_uint_eq(json_array_size(json_object_get(mv, "list")), 1);
    ck_assert_str_eq(str(json_array_get(json_object_get(mv, "list"), 0), "name"), "l1.fc");
    json_decref(r);
    cz_plan_free(a);
    cz_plan_free(b);
}
END_TEST

/* Rank makespans as the metrics compute them from the schedules: elementwise cost / tp on the
 * owner plus the busiest slot of each group. For the costed plan: rank 0 = out 1 + l1.fc 100,
 * rank 1 = embed 1 + l0.norm 0.5 + l0.proj 40. */
static void consistent_makespans(cz_plan *p, double r0, double r1)
{
    p->metrics.rank_makespan[0] = r0, p->metrics.rank_makespan[1] = r1;
    p->metrics.tp_makespan = r0 > r1 ? r0 : r1;
}

static json_t *change(json_t *rank, size_t i)
{
    return json_array_get(json_object_get(rank, "list"), i);
}

static int pair_at(json_t *o, const char *key, size_t i)
{
    return (int)json_integer_value(json_array_get(json_object_get(o, key), i));
}

START_TEST(diff_explains_busiest_rank)
{
    cz_plan *a = costed_plan(), *b = costed_plan();
    consistent_makespans(a, 101, 41.5);
    /* B: l0.qkv joins l1.fc on slot 0 of rank 0 (stacked: 130), out moves to rank 1. */
    b->schedules[0].groups[0].task_slot[1] = 0;
    hand_group_loads(b);
    b->params[5].dp_owner = 1;
    consistent_makespans(b, 130, 42.5);
    json_t *r = NULL;
    cz_error e;
    ck_assert_int_eq(cz__plan_diff_json(a, b, 0, -1, &r, &e), CZ_OK);
    json_t *mk = json_object_get(r, "makespan");
    ck_assert_int_eq((int)num(json_object_get(mk, "a"), "dp_rank"), 0);
    ck_assert_int_eq((int)num(json_object_get(mk, "b"), "dp_rank"), 0);
    json_t *ranks = json_object_get(mk, "ranks");
    ck_assert_uint_eq(json_array_size(ranks), 1);
    json_t *r0 = json_array_get(ranks, 0);
    ck_assert_str_eq(str(r0, "busiest_in"), "both");
    ck_assert_double_eq(num(r0, "delta"), 29);
    json_t *wa = json_object_get(r0, "why_a"), *wb = json_object_get(r0, "why_b");
    ck_assert_str_eq(str(wa, "bound"), "its largest task");
    ck_assert_str_eq(str(json_object_get(wa, "largest_task"), "name"), "l1.fc");
    ck_assert_int_eq((int)num(wa, "busiest_slot_tasks"), 1);
    ck_assert_str_eq(str(wb, "bound"), "tasks stacked on a slot");
    ck_assert_int_eq((int)num(wb, "busiest_slot_tasks"), 2);
    ck_assert_int_eq((int)num(wb, "matrices"), 2);
    ck_assert_int_eq((int)num(wb, "slots"), 2);
    ck_assert_double_eq(num(wa, "elementwise"), 1);
    ck_assert_double_eq(num(wb, "elementwise"), 0);
    /* Largest effect first; the effects add up to the delta. */
    ck_assert_int_eq((int)num(r0, "changes"), 2);
    ck_assert_str_eq(str(change(r0, 0), "name"), "l0.qkv");
    ck_assert_double_eq(num(change(r0, 0), "effect"), 30);
    ck_assert_int_eq(pair_at(change(r0, 0), "tp_host", 0), 1);
    ck_assert_int_eq(pair_at(change(r0, 0), "tp_host", 1), 0);
    ck_assert_str_eq(str(change(r0, 1), "name"), "out");
    ck_assert_double_eq(num(change(r0, 1), "effect"), -1);
    ck_assert_int_eq(pair_at(change(r0, 1), "dp_owner", 1), 1);
    ck_assert_double_eq_tol(num(r0, "unexplained"), 0, 1e-12);
    json_decref(r);

    /* B': l1.fc moves to slot 1 of rank 1 instead: the busiest rank changes. Rank 1 becomes
     * busiest (l1.fc 100 + 1.5 elementwise), l0.proj stops counting (its slot is no longer the
     * busiest) without moving; rank 0 keeps only l0.qkv (30 + 1). */
    cz_plan_free(b);
    b = costed_plan();
    cz_plan_group *g0 = &b->schedules[0].groups[0], *g1 = &b->schedules[1].groups[0];
    g0->task_param[0] = 1, g0->task_slot[0] = 1, g0->ntasks = 1;
    g1->task_param[1] = 4, g1->task_slot[1] = 1, g1->ntasks = 2;
    b->params[4].dp_owner = 1;
    hand_group_loads(b);
    consistent_makespans(b, 31, 101.5);
    ck_assert_int_eq(cz__plan_diff_json(a, b, 0, 1, &r, &e), CZ_OK);
    ranks = json_object_get(json_object_get(r, "makespan"), "ranks");
    ck_assert_uint_eq(json_array_size(ranks), 2);
    json_t *rb = json_array_get(ranks, 0), *ra = json_array_get(ranks, 1);
    ck_assert_str_eq(str(rb, "busiest_in"), "b");
    ck_assert_int_eq((int)num(rb, "dp_rank"), 1);
    ck_assert_double_eq(num(rb, "delta"), 60);
    ck_assert_int_eq((int)num(rb, "changes"), 2);
    ck_assert_uint_eq(json_array_size(json_object_get(rb, "list")), 1); /* --limit 1 */
    ck_assert_str_eq(str(change(rb, 0), "name"), "l1.fc");
    ck_assert_double_eq(num(change(rb, 0), "effect"), 100);
    ck_assert(json_is_true(json_object_get(change(rb, 0), "moved")));
    ck_assert_double_eq_tol(num(rb, "unexplained"), 0, 1e-12);
    ck_assert_str_eq(str(ra, "busiest_in"), "a");
    ck_assert_int_eq((int)num(ra, "dp_rank"), 0);
    ck_assert_double_eq(num(ra, "delta"), -70);
    ck_assert_str_eq(str(change(ra, 0), "name"), "l1.fc");
    ck_assert_double_eq(num(change(ra, 0), "effect"), -100);
    json_decref(r);

    ck_assert_int_eq(cz__plan_diff_json(a, b, 0, -1, &r, &e), CZ_OK);
    rb = json_array_get(json_object_get(json_object_get(r, "makespan"), "ranks"), 0);
    ck_assert_str_eq(str(change(rb, 1), "name"), "l0.proj");
    ck_assert_double_eq(num(change(rb, 1), "effect"), -40);
    ck_assert(json_is_false(json_object_get(change(rb, 1), "moved")));
    ra = json_array_get(json_object_get(json_object_get(r, "makespan"), "ranks"), 1);
    ck_assert_str_eq(str(change(ra, 1), "name"), "l0.qkv");
    ck_assert_double_eq(num(change(ra, 1), "effect"), 30);
    ck_assert(json_is_false(json_object_get(change(ra, 1), "moved")));
    json_decref(r);
    cz_plan_free(a);
    cz_plan_free(b);
}
END_TEST

START_TEST(diff_refuses_other_model)
{
    cz_plan *a = costed_plan(), *b = costed_plan();
    b->model_sha256[0] = 'c';
    free(b->params[2].def.name);
    b->params[2].def.name = cz__strdup("l0.renamed");
    json_t *r = NULL;
    cz_error e;
    cz_error_clear(&e);
    ck_assert_int_eq(cz__plan_diff_json(a, b, 0, 10, &r, &e), CZ_EMISMATCH);
    ck_assert_ptr_null(r);
    ck_assert_ptr_nonnull(strstr(e.message, a->model_sha256));
    ck_assert_ptr_nonnull(strstr(e.message, b->model_sha256));

    ck_assert_int_eq(cz__plan_diff_json(a, b, 1, 10, &r, &e), CZ_OK);
    ck_assert_str_eq(str(r, "matched_by"), "name");
    ck_assert(json_is_false(json_object_get(r, "identical")));
    ck_assert_int_eq((int)num(r, "only_in_a_count"), 1);
    ck_assert_int_eq((int)num(r, "only_in_b_count"), 1);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(r, "only_in_a"), 0)),
                     "l0.proj");
    ck_assert_int_eq((int)num(json_object_get(r, "moved"), "matched"), 5);
    json_decref(r);

    /* A different topology is refused too. */
    b->model_sha256[0] = 'a';
    b->tp = 4;
    ck_assert_int_eq(cz__plan_diff_json(a, b, 0, 10, &r, &e), CZ_EMISMATCH);
    ck_assert_ptr_nonnull(strstr(e.message, "tp=4"));
    cz_plan_free(a);
    cz_plan_free(b);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("inspect_diff");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, inspect_busiest_and_dominating);
    tcase_add_test(tc, diff_identical);
    tcase_add_test(tc, diff_identical_with_infinite_metrics);
    tcase_add_test(tc, diff_lists_moved_params);
    tcase_add_test(tc, diff_explains_busiest_rank);
    tcase_add_test(tc, diff_refuses_other_model);
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
