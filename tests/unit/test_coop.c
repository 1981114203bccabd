/* Block and cooperative tasks: the cooperative cost model, the ring all-reduce, the per-task
 * choice of --coop auto and --coop K, block tasks under --split-blocks and the bounds
 * (average load, split lower bound, atomic lower bound), on cases worked by hand.
 *
 * The test cluster (czt_cluster_new) runs 1 TFLOP/s and 1 GB/s of memory, 100 GB/s inside a
 * node (8 GPUs), 25 GB/s across, 5 us per message. Muon, 5 Newton-Schulz steps, bf16 (d = 2):
 * a hosted m x n matrix (a = min, b = max) costs 5 (4 a^2 b + 2 a^3) 1e-12 s of matmuls plus
 * 14 m n 1e-9 s of elementwise traffic (8 + 3 d bytes per element); cooperatively over k slots
 * each slot pays 5 (2 a^2 b / k + min(2 a^3 + 2 a^2 b / k, 4 a^2 b / k)) 1e-12 (the partial
 * Gram, then the polynomial as B = b A + c A A or, when b / k < a, as A (A X_j)) + 14 m n / k
 * 1e-9, five all-reduces of the upper triangle of the a x a fp32 Gram (a (a + 1) / 2 floats,
 * 2 a (a + 1) bytes) and one of the 8-byte norm. With b / k >= a the matmul part is the
 * standard form's 5 (4 a^2 b / k + 2 a^3) 1e-12. */
#include "cz_algorithms.h"
#include "cz_test_util.h"

#include <check.h>
#include <math.h>

#define EQ(a, b) ck_assert_double_eq_tol((a), (b), 1e-9 * fabs(b) + 1e-15)

/* 1000 x 64000: hosted 5 (4e6 64000 + 2e9) 1e-12 = 1.29 s + 14 * 64e6 1e-9 = 0.896 s. */
#define BIG_HOSTED 2.186
/* Over 2 slots: b / k = 32000 >= a, the standard form: 5 (2e6 32000 + 2e9 + 2e6 32000) 1e-12
 * = 0.65 s + 0.448 s; all-reduce of 2 * 1000 * 1001 = 2.002e6 bytes over 2: 2 messages
 * (1e-5 s) + 1 * 2.002e6 / 100e9 = 2.002e-5 s -> 3.002e-5 s, five of them 1.501e-4 s; the
 * norm's 1e-5 + 8e-11 s. Total 1.098 + 1.501e-4 + 1.000008e-5 s. */
#define COOP2_COMM (1.501e-4 + 1.000008e-5)
#define BIG_COOP2 (1.098 + COOP2_COMM)
/* 1000 x 16000 hosted: 5 (4e6 16000 + 2e9) 1e-12 = 0.33 s + 14 * 16e6 1e-9 = 0.224 s. */
#define MID_HOSTED 0.554
/* Over 2 slots: b / k = 8000 >= a: 5 (4e6 8000 + 2e9) 1e-12 = 0.17 s + 0.112 s + the same
 * all-reduces (a is the same). */
#define MID_COOP2 (0.282 + COOP2_COMM)

typedef struct {
    int64_t rows, cols;
} shape;

/* One DP rank, tp slots, Muon in seconds, the given matrices (no blocks). */
static cz_plan *plan_of(const shape *mats, int n, int tp, int coop, int split, cz_cluster **cout)
{
    cz_model *m = czt_model_new("coop", CZ_DTYPE_BF16, 0);
    char name[16];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "m%d", i);
        czt_model_add(m, name, mats[i].rows, mats[i].cols, -1, CZ_KIND_MATRIX, -1);
    }
    cz_cluster *c = czt_cluster_new(1, tp, 1);
    cz_settings s;
    cz_settings_init(&s);
    s.coop = coop;
    s.split_blocks = split;
    cz_plan *plan = NULL;
    cz_error err;
    int rc = cz_plan_build(&plan, m, c, &s, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    cz_model_free(m);
    if (cout)
        *cout = c;
    else
        cz_cluster_free(c);
    return plan;
}

/* The width, first slot and per-slot cost of parameter id's (only) task in the plan. */
static void task_of(const cz_plan *plan, int id, int *width, int *slot, double *cost)
{
    *width = 0;
    for (int g = 0; g < plan->schedules[0].ngroups; g++) {
        const cz_plan_group *gr = &plan->schedules[0].groups[g];
        for (int t = 0; t < gr->ntasks; t++)
            if (gr->task_param[t] == id) {
                *width = cz_group_task_width(gr, t);
                *slot = gr->task_slot[t];
                *cost = gr->task_cost ? gr->task_cost[t] : plan->params[id].cost;
            }
    }
    ck_assert_msg(*width > 0, "parameter %d has no task", id);
}

START_TEST(allreduce_ring)
{
    cz_cluster *c = czt_cluster_new(1, 4, 1);
    /* k = 4 inside a node: 2 (4 - 1) = 6 messages of 5 us = 3e-5 s, and 6 / 4 of 1e6 bytes
     * through 100 GB/s = 1.5e-5 s. */
    EQ(cz_cost_allreduce_seconds(1e6, 4, c), 4.5e-5);
    /* One rank: nothing to reduce. */
    ck_assert_double_eq(cz_cost_allreduce_seconds(1e6, 1, c), 0.0);
    /* A TP group wider than a node goes through the inter-node links: 3e-5 + 1.5e6 / 25e9. */
    c->tp = 16;
    EQ(cz_cost_allreduce_seconds(1e6, 4, c), 3e-5 + 6e-5);
    cz_cluster_free(c);
}
END_TEST

START_TEST(coop_cost_by_hand)
{
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    EQ(cz_cost_coop(1000, 64000, 2, &s, c, CZ_DTYPE_BF16), BIG_COOP2);
    /* The orientation does not matter: the slices run along the long side either way. */
    EQ(cz_cost_coop(64000, 1000, 2, &s, c, CZ_DTYPE_BF16), BIG_COOP2);
    EQ(cz_cost_coop(1000, 16000, 2, &s, c, CZ_DTYPE_BF16), MID_COOP2);
    cz_param_def d = {0};
    d.name = "p", d.ndim = 2, d.shape[0] = 1000, d.shape[1] = 64000, d.kind = CZ_KIND_MATRIX;
    d.block_dim = -1, d.tp_dim = -1;
    EQ(cz_cost_block(&d, -1, &s, c, CZ_DTYPE_BF16), BIG_HOSTED);
    /* In FLOPs, communication counts as the FLOPs the device could have done meanwhile:
     * 5 (4e6 32000 + 2e9) + 10 * 32e6 = 6.5032e11 FLOPs, plus (1.501e-4 + 1.000008e-5) s at
     * 1e12 FLOP/s. */
    s.unit = CZ_UNIT_FLOPS;
    EQ(cz_cost_coop(1000, 64000, 2, &s, c, CZ_DTYPE_BF16), 6.5032e11 + COOP2_COMM * 1e12);
    cz_cluster_free(c);
}
END_TEST

START_TEST(coop_cost_polynomial_form)
{
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    /* 1000 x 1500 over 2: slices of b / k = 750 < a = 1000, so A (A X_j) is the cheaper form:
     * per step the Gram 2e6 750 = 1.5e9, then min(2e9 + 1.5e9, 4e6 750 = 3e9) = 3e9 (the
     * standard form would take 3.5e9): 5 * 4.5e9 1e-12 = 0.0225 s; elementwise 14 * 750000
     * 1e-9 = 0.0105 s; the all-reduces as for BIG_COOP2 (a = 1000). */
    EQ(cz_cost_coop(1000, 1500, 2, &s, c, CZ_DTYPE_BF16), 0.0225 + 0.0105 + COOP2_COMM);
    /* 1000 x 4000 over 2: slices of 2000 >= a, the standard form: 2e6 2000 = 4e9, then
     * min(2e9 + 4e9, 4e6 2000 = 8e9) = 6e9: 5 * 1e10 1e-12 = 0.05 s; elementwise 14 * 2e6
     * 1e-9 = 0.028 s. */
    EQ(cz_cost_coop(1000, 4000, 2, &s, c, CZ_DTYPE_BF16), 0.05 + 0.028 + COOP2_COMM);
    /* In FLOPs the A (A X_j) case is 5 * 4.5e9 + 10 * 750000 = 2.25075e10 plus the
     * communication at 1e12 FLOP/s. */
    s.unit = CZ_UNIT_FLOPS;
    EQ(cz_cost_coop(1000, 1500, 2, &s, c, CZ_DTYPE_BF16), 2.25075e10 + COOP2_COMM * 1e12);
    cz_cluster_free(c);
}
END_TEST

START_TEST(split_pays_where_it_sets_the_makespan)
{
    /* One 1000 x 64000 matrix on two slots: hosted it keeps one slot busy 2.186 s while the
     * other idles; split over both it takes 1.098... s on each. Auto splits it. */
    cz_plan *plan = plan_of((shape[]){{1000, 64000}}, 1, 2, CZ_COOP_AUTO, 0, NULL);
    int w, slot;
    double cost;
    task_of(plan, 0, &w, &slot, &cost);
    ck_assert_int_eq(w, 2);
    ck_assert_int_eq(slot, 0);
    EQ(cost, BIG_COOP2);
    EQ(plan->metrics.tp_makespan, BIG_COOP2);
    /* Bounds: the average is the hosted cost over two GPUs; the atomic bound the hosted task;
     * the split bound the least T with the task within T per slot and its slot time (2 T at
     * width 2, BIG_COOP2 each) within 2 T: T = BIG_COOP2, met by the plan. */
    EQ(plan->metrics.average_load, BIG_HOSTED / 2);
    EQ(plan->metrics.lower_bound, BIG_HOSTED);
    EQ(plan->metrics.split_lower_bound, BIG_COOP2);
    ck_assert(cz_plan_has_split_tasks(plan));
    cz_plan_free(plan);
}
END_TEST

START_TEST(no_split_when_allreduce_costs_more)
{
    /* Two 1000 x 64000 matrices on two slots: hosted side by side, 2.186 s; both split, each
     * slot runs both halves, 2 * 1.09816... = 2.19632... s: the all-reduces and the redundant
     * a^3 products (b / k = 32000 >= a: A (A X_j) would cost more) cost more than the split
     * saves. Auto keeps them hosted. */
    cz_plan *plan = plan_of((shape[]){{1000, 64000}, {1000, 64000}}, 2, 2, CZ_COOP_AUTO, 0, NULL);
    int w, slot;
    double cost;
    for (int id = 0; id < 2; id++) {
        task_of(plan, id, &w, &slot, &cost);
        ck_assert_int_eq(w, 1);
    }
    EQ(plan->metrics.tp_makespan, BIG_HOSTED);
    /* Split bound: at T in [BIG_COOP2, BIG_HOSTED) both tasks must split, 4 BIG_COOP2 = 4.392...
     * of slot time > 2 * 2.186; from T = BIG_HOSTED they may stay hosted, 2 * 2.186 <= 2 T. */
    EQ(plan->metrics.split_lower_bound, BIG_HOSTED);
    ck_assert(!cz_plan_has_split_tasks(plan));
    cz_plan_free(plan);

    /* A small matrix on slow links: 8 x 8 hosted costs 5 (4 64 8 + 2 512) 1e-12 + 14 64 1e-9
     * = 9.1136e-7 s, while its six all-reduces alone take 6 * 2 * 5 us = 6e-5 s. */
    plan = plan_of((shape[]){{8, 8}}, 1, 2, CZ_COOP_AUTO, 0, NULL);
    task_of(plan, 0, &w, &slot, &cost);
    ck_assert_int_eq(w, 1);
    EQ(plan->metrics.tp_makespan, 9.1136e-7);
    EQ(plan->metrics.split_lower_bound, 9.1136e-7);
    cz_plan_free(plan);
}
END_TEST

START_TEST(split_only_the_small_task)
{
    /* Two 1000 x 64000 matrices and one 1000 x 16000 on two slots. Hosted: one slot carries a
     * big one and the small one, 2.186 + 0.554 = 2.74 s. All three split: 2 * 1.09816... +
     * 0.28216... = 2.47848... s. Best: the big ones hosted side by side and only the small one
     * split over both, 2.186 + 0.28216... = 2.46816... s, which no uniform target reaches (a
     * target that lets the big ones stay hosted lets the small one too); the descent from all
     * hosted finds it. */
    cz_plan *plan = plan_of((shape[]){{1000, 64000}, {1000, 64000}, {1000, 16000}}, 3, 2,
                            CZ_COOP_AUTO, 0, NULL);
    int w, slot;
    double cost;
    task_of(plan, 0, &w, &slot, &cost);
    ck_assert_int_eq(w, 1);
    task_of(plan, 1, &w, &slot, &cost);
    ck_assert_int_eq(w, 1);
    task_of(plan, 2, &w, &slot, &cost);
    ck_assert_int_eq(w, 2);
    EQ(cost, MID_COOP2);
    EQ(plan->metrics.tp_makespan, BIG_HOSTED + MID_COOP2);
    cz_plan_free(plan);
}
END_TEST

START_TEST(five_tasks_on_eight_slots)
{
    /* Five 1000 x 64000 matrices on eight slots. Over 8 slots (b / k = 8000 >= a, the
     * standard form) one costs per slot 5 (4e6 8000 + 2e9) 1e-12 = 0.17 s + 14 * 8e6 1e-9 =
     * 0.112 s, plus five all-reduces of 2.002e6 bytes over 8 (14 messages of 5 us = 7e-5 s and
     * 14 / 8 * 2.002e6 / 100e9 = 3.5035e-5 s: 1.05035e-4 s each, 5.25175e-4 s) and the norm's
     * (7e-5 + 1.4e-10 s): 0.28259517514 s. Over 4: 0.33 + 0.224 + 5 * (3e-5 + 3.003e-5) +
     * 3.00000012e-5 = 0.55433015000012 s. Hosted: 2.186 (five slots busy); all over 2: five
     * pairs for four, 2 * 1.09816... = 2.19632...; all over 4: 3 * 0.55433... = 1.66299...; all
     * over 8: 5 * 0.28259... = 1.41297... Best: four over a pair each and the fifth over all
     * eight, 1.09816... + 0.28259... = 1.38075..., reached by the descent from "all over 2"
     * (change one task to width 8), a start that scores worst of the uniform targets. */
    const double coop8 = 0.282 + 5.25175e-4 + 7e-5 + 1.4e-10;
    shape five[5];
    for (int i = 0; i < 5; i++)
        five[i] = (shape){1000, 64000};
    cz_plan *plan = plan_of(five, 5, 8, CZ_COOP_AUTO, 0, NULL);
    int w, slot, n2 = 0, n8 = 0;
    double cost;
    for (int id = 0; id < 5; id++) {
        task_of(plan, id, &w, &slot, &cost);
        n2 += w == 2;
        n8 += w == 8;
        EQ(cost, w == 2 ? BIG_COOP2 : coop8);
    }
    ck_assert_int_eq(n2, 4);
    ck_assert_int_eq(n8, 1);
    EQ(plan->metrics.tp_makespan, BIG_COOP2 + coop8);
    cz_plan_free(plan);
}
END_TEST

START_TEST(forced_width)
{
    /* --coop 2 on four slots: the big matrix takes width 2 on an aligned pair even though the
     * small 8 x 8 one is also forced (it can take 2: its long side has 8 >= 2 rows); a 1 x 1
     * matrix cannot be sliced in two and stays hosted. */
    cz_plan *plan = plan_of((shape[]){{1000, 64000}, {8, 8}, {1, 1}}, 3, 4, 2, 0, NULL);
    int w, slot;
    double cost;
    task_of(plan, 0, &w, &slot, &cost);
    ck_assert_int_eq(w, 2);
    ck_assert_int_eq(slot % 2, 0);
    EQ(cost, BIG_COOP2);
    task_of(plan, 1, &w, &slot, &cost);
    ck_assert_int_eq(w, 2);
    ck_assert_int_eq(slot % 2, 0);
    /* The forced split of the 8 x 8 matrix pays its all-reduces, 2 messages of 5 us each, six
     * of them: 6e-5 s, 66 times its hosted cost, which --coop auto would never pay. */
    ck_assert(cost > 6e-5);
    task_of(plan, 2, &w, &slot, &cost);
    ck_assert_int_eq(w, 1);
    cz_plan_free(plan);
}
END_TEST

START_TEST(blocks_on_different_slots)
{
    /* A fused matrix of two 1000 x 64000 blocks (2000 x 64000, blocks along dim 0) on two
     * slots. Whole, one slot carries both blocks: 2 * 2.186 = 4.372 s. As block tasks each
     * slot takes one: 2.186 s; the atomic bound stays the whole matrix, the split bound is
     * max(average 2.186, largest block 2.186). */
    cz_model *m = czt_model_new("fused", CZ_DTYPE_BF16, 0);
    int id = czt_model_add(m, "fc1", 2000, 64000, -1, CZ_KIND_MATRIX, -1);
    czt_model_blocks(m, id, 0, 2, (int64_t[]){1000, 1000});
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    cz_plan *plan = NULL;
    cz_error err;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    EQ(plan->metrics.tp_makespan, 2 * BIG_HOSTED);
    EQ(plan->metrics.split_lower_bound, 2 * BIG_HOSTED); /* no freedom: the atomic bound */
    cz_plan_free(plan);
    s.split_blocks = 1;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    const cz_plan_group *g = &plan->schedules[0].groups[0];
    ck_assert_int_eq(plan->schedules[0].ngroups, 1);
    ck_assert_int_eq(g->ntasks, 2);
    ck_assert_int_ne(g->task_slot[0], g->task_slot[1]);
    ck_assert_int_eq(g->task_block[0] + g->task_block[1], 1); /* blocks 0 and 1 */
    EQ(plan->metrics.tp_makespan, BIG_HOSTED);
    EQ(plan->metrics.lower_bound, 2 * BIG_HOSTED);
    EQ(plan->metrics.average_load, BIG_HOSTED);
    EQ(plan->metrics.split_lower_bound, BIG_HOSTED);
    cz_plan_free(plan);
    /* --coop implies block tasks: a cooperative task is one Newton-Schulz run, a block. */
    s.split_blocks = 0;
    s.coop = CZ_COOP_AUTO;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(plan->schedules[0].groups[0].ntasks, 2);
    EQ(plan->metrics.tp_makespan, BIG_HOSTED);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(split_bound_without_a_table)
{
    /* The bound of a plan read from a file (no task table) is rebuilt from the cluster and
     * equals the planner's; without a cluster it falls back to the average load. */
    cz_cluster *c = NULL;
    cz_plan *plan = plan_of((shape[]){{1000, 64000}}, 1, 2, CZ_COOP_AUTO, 0, &c);
    double want = plan->metrics.split_lower_bound;
    cz_task_table saved = plan->tasks;
    memset(&plan->tasks, 0, sizeof plan->tasks);
    cz_error err;
    ck_assert(cz_plan_metrics_compute(plan, c, &err) == CZ_OK);
    ck_assert_double_eq(plan->metrics.split_lower_bound, want);
    ck_assert(cz_plan_metrics_compute(plan, NULL, &err) == CZ_OK);
    EQ(plan->metrics.split_lower_bound, BIG_HOSTED / 2);
    plan->tasks = saved;
    cz_plan_free(plan);
    cz_cluster_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("coop");
    TCase *tc = tcase_create("coop");
    tcase_add_test(tc, allreduce_ring);
    tcase_add_test(tc, coop_cost_by_hand);
    tcase_add_test(tc, coop_cost_polynomial_form);
    tcase_add_test(tc, split_pays_where_it_sets_the_makespan);
    tcase_add_test(tc, no_split_when_allreduce_costs_more);
    tcase_add_test(tc, split_only_the_small_task);
    tcase_add_test(tc, five_tasks_on_eight_slots);
    tcase_add_test(tc, forced_width);
    tcase_add_test(tc, blocks_on_different_slots);
    tcase_add_test(tc, split_bound_without_a_table);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
