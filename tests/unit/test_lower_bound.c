/* The atomic lower bound (planner/lib/lower_bound.c; docs/PLANNER.md, "The lower bound"): its
 * terms on cases worked by hand (pipeline stages of unequal work, an MoE stage where expert
 * work dominates, a dense task that must share its EP group's GPU, elementwise TP shares, the
 * split layout), and the bound against the exact optimum of small random instances, found by
 * trying every placement of the tasks on the GPUs they may use. */
#include "cz_types.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXP 8

/* A plan with only what the bound reads: topology, settings and parameters. */
typedef struct mini {
    cz_plan plan;
    cz_plan_param params[MAXP];
} mini;

static void mini_init(mini *m, int dp, int tp, int pp, int ep, int edp, int etp)
{
    memset(m, 0, sizeof *m);
    m->plan.dp = dp;
    m->plan.tp = tp;
    m->plan.pp = pp;
    m->plan.ep = ep;
    m->plan.edp = edp;
    m->plan.etp = etp;
    m->plan.params = m->params;
    m->plan.settings.layout = CZ_LAYOUT_UNIFIED;
    m->plan.settings.dp = CZ_DP_ALPHA;
}

static void add(mini *m, cz_param_kind kind, double cost, int stage, int expert, int ep_rank)
{
    cz_plan_param *p = &m->params[m->plan.nparams++];
    p->id = (int)m->plan.nparams - 1;
    p->def.kind = kind;
    p->cost = cost;
    p->stage = stage;
    p->expert = expert;
    p->ep_rank = ep_rank;
}

static cz_lower_bound bound(const mini *m)
{
    cz_lower_bound lb;
    cz_error err;
    ck_assert_int_eq(cz__plan_lower_bound(&m->plan, &lb, &err), CZ_OK);
    return lb;
}

START_TEST(test_stages)
{
    /* PP2 x DP2: stage 0 holds three matrices of 4, stage 1 one of 1. The whole-cluster
     * average is 13 / 4 = 3.25 and the largest task 4, but stage 0's two GPUs carry 12 (6 each
     * at best), and two of its three matrices share a GPU: 8, which a plan reaches. */
    mini m;
    mini_init(&m, 2, 1, 2, 0, 0, 0);
    for (int i = 0; i < 3; i++)
        add(&m, CZ_KIND_MATRIX, 4.0, 0, 0, 0);
    add(&m, CZ_KIND_MATRIX, 1.0, 1, 0, 0);
    cz_lower_bound lb = bound(&m);
    ck_assert_double_eq(lb.largest_task, 4.0);
    ck_assert_double_eq(lb.stage_load, 6.0);
    ck_assert_double_eq(lb.shared_gpu, 8.0);
    ck_assert_double_eq(lb.expert_group, 0.0);
    ck_assert_double_eq(lb.value, 8.0);
}
END_TEST

START_TEST(test_experts_dominate)
{
    /* DP2 with EP2 (one GPU per EP group): EP rank 0 holds two experts of 5, EP rank 1 one of
     * 2; one dense matrix of 3. Average 7.5, largest task 5; EP rank 0's GPU must carry 10,
     * and a plan does (the dense matrix with EP rank 1's expert: 5). */
    mini m;
    mini_init(&m, 2, 1, 1, 2, 1, 1);
    add(&m, CZ_KIND_MATRIX, 5.0, 0, 1, 0);
    add(&m, CZ_KIND_MATRIX, 5.0, 0, 1, 0);
    add(&m, CZ_KIND_MATRIX, 2.0, 0, 1, 1);
    add(&m, CZ_KIND_MATRIX, 3.0, 0, 0, 0);
    cz_lower_bound lb = bound(&m);
    ck_assert_double_eq(lb.stage_load, 7.5);
    ck_assert_double_eq(lb.expert_group, 10.0);
    ck_assert_double_eq(lb.shared_gpu, 10.0); /* EP rank 0's two experts on its one GPU */
    ck_assert_double_eq(lb.dense_with_group, 5.0);
    ck_assert_double_eq(lb.value, 10.0);
}
END_TEST

START_TEST(test_dense_shares_a_group)
{
    /* DP2 with EP2, one expert of 6 per EP rank and a dense matrix of 8: wherever the dense
     * matrix goes it joins an expert, 14; every term but the last stays below. */
    mini m;
    mini_init(&m, 2, 1, 1, 2, 1, 1);
    add(&m, CZ_KIND_MATRIX, 6.0, 0, 1, 0);
    add(&m, CZ_KIND_MATRIX, 6.0, 0, 1, 1);
    add(&m, CZ_KIND_MATRIX, 8.0, 0, 0, 0);
    cz_lower_bound lb = bound(&m);
    ck_assert_double_eq(lb.stage_load, 10.0);
    ck_assert_double_eq(lb.shared_gpu, 12.0);
    ck_assert_double_eq(lb.dense_with_group, 14.0);
    ck_assert_double_eq(lb.value, 14.0);
    /* An expert-DP group of two GPUs per EP rank halves what each must carry: (6 + 8) / 2. */
    mini_init(&m, 4, 1, 1, 2, 2, 1);
    add(&m, CZ_KIND_MATRIX, 6.0, 0, 1, 0);
    add(&m, CZ_KIND_MATRIX, 6.0, 0, 1, 1);
    add(&m, CZ_KIND_MATRIX, 8.0, 0, 0, 0);
    lb = bound(&m);
    ck_assert_double_eq(lb.dense_with_group, 7.0);
    ck_assert_double_eq(lb.value, 8.0);
}
END_TEST

START_TEST(test_elementwise)
{
    /* TP2: an elementwise parameter of 6 is two TP shares of 3, each on its own GPU. DP1 x TP2
     * with it and a matrix of 3: three tasks of 3 on two GPUs, so two share one: 6. */
    mini m;
    mini_init(&m, 1, 2, 1, 0, 0, 0);
    add(&m, CZ_KIND_ELEMENTWISE, 6.0, 0, 0, 0);
    add(&m, CZ_KIND_MATRIX, 3.0, 0, 0, 0);
    cz_lower_bound lb = bound(&m);
    ck_assert_double_eq(lb.largest_task, 3.0);
    ck_assert_double_eq(lb.shared_gpu, 6.0);
    ck_assert_double_eq(lb.value, 6.0);
    /* The split layout cuts dense elementwise parameters between DP ranks: no task, load
     * only. The same under the even baseline. */
    m.plan.settings.layout = CZ_LAYOUT_SPLIT;
    lb = bound(&m);
    ck_assert_double_eq(lb.largest_task, 3.0);
    ck_assert_double_eq(lb.shared_gpu, 0.0);
    ck_assert_double_eq(lb.value, 4.5);
    m.plan.settings.layout = CZ_LAYOUT_UNIFIED;
    m.plan.settings.dp = CZ_DP_EVEN;
    ck_assert_double_eq(bound(&m).value, 4.5);
}
END_TEST

/* ---- the exact optimum of small instances ---- */

typedef struct task {
    double cost;
    int first, n; /* the GPUs it may use: first .. first + n - 1 */
} task;

static double best(const task *t, int nt, double *load, int k, double worst)
{
    if (k == nt)
        return worst;
    double opt = INFINITY;
    for (int g = t[k].first; g < t[k].first + t[k].n; g++) {
        load[g] += t[k].cost;
        double w = load[g] > worst ? load[g] : worst;
        if (w < opt) /* a branch already at opt cannot improve it */
            w = best(t, nt, load, k + 1, w);
        load[g] -= t[k].cost;
        if (w < opt)
            opt = w;
    }
    return opt;
}

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

START_TEST(test_against_optimum)
{
    /* Random instances of 1 or 2 stages of up to 4 GPUs, with or without two EP groups, with
     * up to 7 tasks (a TP share of an elementwise parameter is one): the bound never exceeds
     * the best placement, and reaches it on a good share of them. */
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    int tight = 0, cases = 300;
    for (int c = 0; c < cases; c++) {
        int pp = 1 + (int)(next(&rng) % 2), tp = 1 + (int)(next(&rng) % 2), dp = 2;
        int ep = next(&rng) % 2 ? 2 : 0;
        int g = dp * tp; /* GPUs per stage */
        mini m;
        mini_init(&m, dp, tp, pp, ep, ep ? dp / ep : 0, ep ? tp : 0);
        task t[16];
        int nt = 0, np = 2 + (int)(next(&rng) % 4);
        for (int i = 0; i < np; i++) {
            int stage = (int)(next(&rng) % (uint64_t)pp);
            int expert = ep && next(&rng) % 2, e = expert ? (int)(next(&rng) % 2) : 0;
            int matrix = next(&rng) % 4 != 0;
            double cost = (double)(1 + next(&rng) % 9);
            add(&m, matrix ? CZ_KIND_MATRIX : CZ_KIND_ELEMENTWISE, cost, stage, expert, e);
            int width = matrix ? 1 : tp, first = stage * g, n = g;
            if (expert) {
                n = g / ep;
                first += e * n;
            }
            for (int w = 0; w < width; w++)
                t[nt++] = (task){cost / width, first, n};
        }
        double load[8] = {0};
        double opt = best(t, nt, load, 0, 0.0);
        double lb = bound(&m).value;
        ck_assert_msg(lb <= opt * (1.0 + 1e-12), "case %d: bound %g above the optimum %g", c, lb,
                      opt);
        tight += lb >= opt * (1.0 - 1e-12);
    }
    ck_assert_int_gt(tight, cases / 2);
}
END_TEST

static Suite *lower_bound_suite(void)
{
    Suite *s = suite_create("lower_bound");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_stages);
    tcase_add_test(tc, test_experts_dominate);
    tcase_add_test(tc, test_dense_shares_a_group);
    tcase_add_test(tc, test_elementwise);
    tcase_add_test(tc, test_against_optimum);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(lower_bound_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
