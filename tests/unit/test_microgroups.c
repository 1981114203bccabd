/* TP micro-groups on small hand-checked cases. */
#include "cz_test_util.h"

#include <check.h>

/* Five replicated matrices on dp 1, tp 2, unit numel (cost = rows * cols), forward costs
 * id0 4, id1 6, id2 2, id3 5, id4 3 (total 20). */
static cz_plan *five_tasks(cz_tp_strategy tp, double capacity, int tpsize)
{
    cz_model *m = czt_model_new("five", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "a", 2, 2, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "b", 2, 3, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "c", 1, 2, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "d", 1, 5, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "e", 1, 3, -1, CZ_KIND_MATRIX, -1);
    cz_cluster *c = czt_cluster_new(1, tpsize, 1);
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_NUMEL;
    /* Rollback's own groups: the joint strategy (the default) would take the packed one-group
     * schedule wherever it is shorter (microgroups.c). */
    s.dp = CZ_DP_ALPHA;
    s.tp = tp;
    s.capacity = capacity;
    cz_plan *plan = NULL;
    cz_error err;
    int rc = cz_plan_build(&plan, m, c, &s, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    cz_model_free(m);
    cz_cluster_free(c);
    ck_assert_int_eq((int)plan->nschedules, 1);
    return plan;
}

/* Checks group g: ntasks tasks (param, slot) pairs and per-slot loads. */
static void check_group(const cz_plan *plan, int g, int ntasks, const int *params, const int *slots,
                        int nslots, const double *load)
{
    const cz_rank_schedule *rs = &plan->schedules[0];
    ck_assert_int_lt(g, rs->ngroups);
    const cz_plan_group *grp = &rs->groups[g];
    ck_assert_int_eq(grp->id, g);
    ck_assert_int_eq(grp->ntasks, ntasks);
    ck_assert_int_eq(grp->nslots, nslots);
    for (int k = 0; k < ntasks; k++) {
        ck_assert_msg(grp->task_param[k] == params[k], "group %d task %d: param %d, want %d", g, k,
                      grp->task_param[k], params[k]);
        ck_assert_msg(grp->task_slot[k] == slots[k], "group %d task %d: slot %d, want %d", g, k,
                      grp->task_slot[k], slots[k]);
    }
    for (int s = 0; s < nslots; s++)
        ck_assert_double_eq(grp->load[s], load[s]);
}

START_TEST(rollback_fires)
{
    /* C = 8, tasks by cost: b6 d5 a4 e3 c2. {b,d} LPT {6,5}; adding a: LPT a->slot 1 {6,9},
     * makespan 9 > 8: roll back, emit {b,d}; new group a, e, c: LPT {4, 3+2}. */
    cz_plan *plan = five_tasks(CZ_TP_ROLLBACK, 8.0, 2);
    ck_assert_int_eq(plan->schedules[0].ngroups, 2);
    check_group(plan, 0, 2, (int[]){1, 3}, (int[]){0, 1}, 2, (double[]){6, 5});
    check_group(plan, 1, 3, (int[]){0, 4, 2}, (int[]){0, 1, 1}, 2, (double[]){4, 5});
    ck_assert_double_eq(plan->capacity_used, 8.0);
    ck_assert_double_eq(plan->metrics.rank_makespan[0], 11.0);
    ck_assert_double_eq(plan->metrics.tp_makespan, 11.0);
    ck_assert_double_eq(plan->metrics.gpu_load[0], 10.0);
    ck_assert_double_eq(plan->metrics.gpu_load[1], 10.0);
    ck_assert_double_eq(plan->metrics.lower_bound, 10.0); /* max(20 / 2, 6) */
    cz_plan_free(plan);
}
END_TEST

START_TEST(rollback_auto_capacity_keeps_groups_when_free)
{
    /* Automatic capacity, costs b6 d5 a4 e3 c2 (total 20, largest 6, tp 2): the candidates
     * C_4 = C_3 = C_2 = max(6, 20 / (k 2)) = 6 give {b, d} {a, e, c}: makespan 6 + 5 = 11; C_1 = 20
     * gives one group with LPT loads {11, 9}: also 11. Equal, so the most groups are kept. */
    cz_plan *plan = five_tasks(CZ_TP_ROLLBACK, 0.0, 2);
    ck_assert_double_eq(plan->capacity_used, 6.0);
    ck_assert_int_eq(plan->schedules[0].ngroups, 2);
    ck_assert_double_eq(plan->metrics.tp_makespan, 11.0);
    cz_plan_free(plan);
}
END_TEST

START_TEST(rollback_auto_capacity_one_group_when_cheaper)
{
    /* Costs 6 5 5 4 (total 20, tp 2). C = 6 (k = 2..4): {6 | 5} then {5 | 4}: 6 + 5 = 11.
     * C_1 = 20: one group, LPT {6 + 4, 5 + 5} = 10. 11 > 1.05 * 10, so one group is kept. */
    cz_model *m = czt_model_new("four", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "a", 1, 6, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "b", 1, 5, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "c", 1, 5, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "d", 1, 4, -1, CZ_KIND_MATRIX, -1);
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_NUMEL;
    s.dp = CZ_DP_ALPHA; /* rollback's automatic capacity, not the joint strategy's packing */
    cz_plan *plan = NULL;
    cz_error err;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(plan->schedules[0].ngroups, 1);
    ck_assert_double_eq(plan->capacity_used, 20.0);
    ck_assert_double_eq(plan->metrics.tp_makespan, 10.0);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(rollback_oversized_task_alone)
{
    /* C = 5: b (6 > C) alone; {d, a}: {5, 4}; adding e: {5, 7} > 5 -> roll back; {e, c}. */
    cz_plan *plan = five_tasks(CZ_TP_ROLLBACK, 5.0, 2);
    ck_assert_int_eq(plan->schedules[0].ngroups, 3);
    check_group(plan, 0, 1, (int[]){1}, (int[]){0}, 2, (double[]){6, 0});
    check_group(plan, 1, 2, (int[]){3, 0}, (int[]){0, 1}, 2, (double[]){5, 4});
    check_group(plan, 2, 2, (int[]){4, 2}, (int[]){0, 1}, 2, (double[]){3, 2});
    ck_assert_double_eq(plan->metrics.tp_makespan, 6.0 + 5.0 + 3.0);
    cz_plan_free(plan);
}
END_TEST

START_TEST(rollback_wide_groups)
{
    /* tp 4, C = 4: b6 alone (adding d gives makespan 6 > 4); d5 alone (adding a: 5 > 4);
     * {a, e}: LPT {4, 3, 0, 0} fits; {a, e, c}: {4, 3, 2, 0} fits, makespan exactly C. */
    cz_plan *plan = five_tasks(CZ_TP_ROLLBACK, 4.0, 4);
    ck_assert_int_eq(plan->schedules[0].ngroups, 3);
    check_group(plan, 0, 1, (int[]){1}, (int[]){0}, 4, (double[]){6, 0, 0, 0});
    check_group(plan, 1, 1, (int[]){3}, (int[]){0}, 4, (double[]){5, 0, 0, 0});
    check_group(plan, 2, 3, (int[]){0, 4, 2}, (int[]){0, 1, 2}, 4, (double[]){4, 3, 2, 0});
    cz_plan_free(plan);
}
END_TEST

START_TEST(none_chunks_in_order)
{
    cz_plan *plan = five_tasks(CZ_TP_NONE, 0.0, 2);
    ck_assert_int_eq(plan->schedules[0].ngroups, 3);
    check_group(plan, 0, 2, (int[]){0, 1}, (int[]){0, 1}, 2, (double[]){4, 6});
    check_group(plan, 1, 2, (int[]){2, 3}, (int[]){0, 1}, 2, (double[]){2, 5});
    check_group(plan, 2, 1, (int[]){4}, (int[]){0}, 2, (double[]){3, 0});
    ck_assert_double_eq(plan->metrics.tp_makespan, 6.0 + 5.0 + 3.0);
    /* Automatic capacity: max(largest 6, 20 / (4 * 2)) = 6. */
    ck_assert_double_eq(plan->capacity_used, 6.0);
    cz_plan_free(plan);
}
END_TEST

START_TEST(single_sorted_chunks)
{
    cz_plan *plan = five_tasks(CZ_TP_SINGLE, 0.0, 2);
    ck_assert_int_eq(plan->schedules[0].ngroups, 3);
    check_group(plan, 0, 2, (int[]){1, 3}, (int[]){0, 1}, 2, (double[]){6, 5});
    check_group(plan, 1, 2, (int[]){0, 4}, (int[]){0, 1}, 2, (double[]){4, 3});
    check_group(plan, 2, 1, (int[]){2}, (int[]){0}, 2, (double[]){2, 0});
    cz_plan_free(plan);
}
END_TEST

START_TEST(slot_streaming)
{
    /* C = 8, forward order: a4 -> s0; b6 -> s1; c2 -> s0 {6, 6}; d5 -> s0 (tie: lowest) {11, 6}
     * reaches C: close; e3 -> s0. */
    cz_plan *plan = five_tasks(CZ_TP_SLOT, 8.0, 2);
    ck_assert_int_eq(plan->schedules[0].ngroups, 2);
    check_group(plan, 0, 4, (int[]){0, 1, 2, 3}, (int[]){0, 1, 0, 0}, 2, (double[]){11, 6});
    check_group(plan, 1, 1, (int[]){4}, (int[]){0}, 2, (double[]){3, 0});
    cz_plan_free(plan);
}
END_TEST

START_TEST(sc_every_rank_everything)
{
    /* C = 8, forward: a4; +b6 = 10 > 8 -> close; b6 + c2 = 8 fits; +d5 closes; d5 + e3 = 8. */
    cz_plan *plan = five_tasks(CZ_TP_SC, 8.0, 2);
    ck_assert_int_eq(plan->schedules[0].ngroups, 3);
    check_group(plan, 0, 1, (int[]){0}, (int[]){0}, 1, (double[]){4});
    check_group(plan, 1, 2, (int[]){1, 2}, (int[]){0, 0}, 1, (double[]){8});
    check_group(plan, 2, 2, (int[]){3, 4}, (int[]){0, 0}, 1, (double[]){8});
    /* Every TP rank does all 20 and holds every matrix's state (Muon: 4 B per element). */
    ck_assert_double_eq(plan->metrics.gpu_load[0], 20.0);
    ck_assert_double_eq(plan->metrics.gpu_load[1], 20.0);
    ck_assert_double_eq(plan->metrics.tp_makespan, 20.0);
    ck_assert_double_eq(plan->metrics.memory[0], 80.0);
    ck_assert_double_eq(plan->metrics.memory[1], 80.0);
    cz_plan_free(plan);
}
END_TEST

START_TEST(tp1_one_slot)
{
    cz_plan *plan = five_tasks(CZ_TP_ROLLBACK, 8.0, 1);
    /* One slot: {b6} + d5 = 11 > 8 -> b alone; d5 (+a4 = 9 > 8) alone; a4 + e3 = 7, + c2 = 9. */
    ck_assert_int_eq(plan->schedules[0].ngroups, 4);
    check_group(plan, 0, 1, (int[]){1}, (int[]){0}, 1, (double[]){6});
    check_group(plan, 1, 1, (int[]){3}, (int[]){0}, 1, (double[]){5});
    check_group(plan, 2, 2, (int[]){0, 4}, (int[]){0, 0}, 1, (double[]){7});
    check_group(plan, 3, 1, (int[]){2}, (int[]){0}, 1, (double[]){2});
    ck_assert_double_eq(plan->metrics.tp_makespan, 20.0);
    cz_plan_free(plan);
}
END_TEST

START_TEST(even_schedules_touching_matrices)
{
    /* Under even every DP rank whose slice touches a matrix gathers and updates it. */
    cz_model *m = czt_model_new("even", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "a", 2, 2, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "b", 2, 3, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "n", 1, 0, -1, CZ_KIND_ELEMENTWISE, -1);
    cz_cluster *c = czt_cluster_new(2, 1, 1);
    c->bucket_align = 1;
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_NUMEL;
    s.dp = CZ_DP_EVEN;
    cz_plan *plan = NULL;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, NULL), CZ_OK);
    /* n at 0, b at 1..7, a at 7..11; size 12 (even), slices [0,6) [6,12): b touches both. */
    ck_assert_int_eq((int)plan->buckets[0].size, 12);
    ck_assert_int_eq(plan->schedules[0].ngroups > 0, 1);
    int seen[2][3] = {{0}};
    for (int r = 0; r < 2; r++)
        for (int g = 0; g < plan->schedules[r].ngroups; g++)
            for (int k = 0; k < plan->schedules[r].groups[g].ntasks; k++)
                seen[r][plan->schedules[r].groups[g].task_param[k]]++;
    ck_assert_int_eq(seen[0][1], 1);
    ck_assert_int_eq(seen[0][0], 0);
    ck_assert_int_eq(seen[1][1], 1);
    ck_assert_int_eq(seen[1][0], 1);
    /* Rank 0: b whole (6) + the 1-element n; rank 1: b (6) + a (4). */
    ck_assert_double_eq(plan->metrics.dp_load[0], 7.0);
    ck_assert_double_eq(plan->metrics.dp_load[1], 10.0);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(metrics_with_elementwise)
{
    /* dp 1, tp 2, unit flops, Muon: A 4x8 (3520), B [16] split (12*16 = 192), C 2x4 split
     * columns (5*(64 + 16) + 80 = 480). Automatic C = max(3520, 4000 / 8) = 3520: one group,
     * LPT A -> slot 0, C -> slot 1. */
    cz_model *m = czt_model_new("mix", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "A", 4, 8, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "B", 16, 0, 0, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "C", 2, 4, 1, CZ_KIND_MATRIX, -1);
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_FLOPS;
    cz_plan *plan = NULL;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, NULL), CZ_OK);
    ck_assert_double_eq(plan->capacity_used, 3520.0);
    ck_assert_int_eq(plan->schedules[0].ngroups, 1);
    check_group(plan, 0, 2, (int[]){0, 2}, (int[]){0, 1}, 2, (double[]){3520, 480});
    const cz_plan_metrics *mt = &plan->metrics;
    ck_assert_double_eq(mt->dp_load[0], 4192.0);
    ck_assert_double_eq(mt->dp_imbalance, 1.0);
    ck_assert_double_eq(mt->gpu_load[0], 3616.0); /* A + B / 2 */
    ck_assert_double_eq(mt->gpu_load[1], 576.0);  /* C + B / 2 */
    ck_assert_double_eq(mt->rank_makespan[0], 3616.0);
    ck_assert_double_eq(mt->tp_makespan, 3616.0);
    ck_assert_double_eq_tol(mt->tp_imbalance, 3616.0 / 2096.0, 1e-12);
    ck_assert_double_eq(mt->total_cost, 4192.0);
    ck_assert_double_eq(mt->max_task_cost, 3520.0);
    ck_assert_double_eq(mt->lower_bound, 3520.0);
    /* State: A 4*32 on its host, C 4*8 on its host, B 8 B * 8 local elements on both. */
    ck_assert_double_eq(mt->memory[0], 128.0 + 64.0);
    ck_assert_double_eq(mt->memory[1], 32.0 + 64.0);
    /* Seconds at 1 TFLOP/s, 1 GB/s: A 3200e-12 + 448e-9 dominates its group; B 352e-9 / 2. */
    ck_assert_double_eq_tol(mt->predicted_step_s, 3200e-12 + 448e-9 + 176e-9, 1e-18);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("microgroups");
    TCase *tc = tcase_create("strategies");
    tcase_add_test(tc, rollback_fires);
    tcase_add_test(tc, rollback_oversized_task_alone);
    tcase_add_test(tc, rollback_auto_capacity_keeps_groups_when_free);
    tcase_add_test(tc, rollback_auto_capacity_one_group_when_cheaper);
    tcase_add_test(tc, rollback_wide_groups);
    tcase_add_test(tc, none_chunks_in_order);
    tcase_add_test(tc, single_sorted_chunks);
    tcase_add_test(tc, slot_streaming);
    tcase_add_test(tc, sc_every_rank_everything);
    tcase_add_test(tc, tp1_one_slot);
    tcase_add_test(tc, even_schedules_touching_matrices);
    tcase_add_test(tc, metrics_with_elementwise);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
