/* Megatron-LM's current layer-wise rule (megatron_layerwise.c): dealings and bucket sizes worked
 * out by hand from LayerWiseDistributedOptimizer._compute_per_buffer_param_layout, including the
 * example Megatron documents for its soft minimum bucket size (pull request 5415). */
#include "cz_test_util.h"

#include <check.h>
#include <jansson.h>
#include <math.h>

#define U 4096 /* elements of a 64 x 64 matrix */

static void layout(const int64_t *numel, const double *cost, size_t n, int dp, int64_t bucket,
                   int *shard, int64_t *sizes, size_t *nb)
{
    cz_error err;
    ck_assert_msg(cz__megatron_lw_layout(numel, cost, n, dp, bucket, shard, sizes, nb, &err) ==
                      CZ_OK,
                  "%s", err.message);
}

START_TEST(shard_divisor)
{
    /* lcm(64, lcm(dp, 128) / dp) */
    ck_assert_int_eq((int)cz__megatron_lw_shard_divisor(1), 128);
    ck_assert_int_eq((int)cz__megatron_lw_shard_divisor(2), 64);
    ck_assert_int_eq((int)cz__megatron_lw_shard_divisor(3), 128);
    ck_assert_int_eq((int)cz__megatron_lw_shard_divisor(5), 128);
    ck_assert_int_eq((int)cz__megatron_lw_shard_divisor(32), 64);
    ck_assert_int_eq((int)cz__megatron_lw_shard_divisor(256), 64);
    ck_assert_double_eq(cz__megatron_ns_cost(256, 16), 256.0 * 16 * 16);
    ck_assert_double_eq(cz__megatron_ns_cost(16, 256), 256.0 * 16 * 16);
}
END_TEST

START_TEST(documented_soft_minimum)
{
    /* Megatron's own example: 128 equal expert matrices 2688 x 1856, dp 32, bucket_size about
     * 100 matrices. A hard threshold would cut 100 + 28 (160 slots); as a soft minimum the
     * bucket absorbs the 28 that still fit into the fourth row: one bucket, 128 slots, no
     * padding. Equal costs keep backprop order, so matrix i goes to shard i mod 32. */
    enum { N = 128 };
    int64_t numel[N], sizes[N];
    double cost[N];
    int shard[N];
    size_t nb = 0;
    for (int i = 0; i < N; i++) {
        numel[i] = 2688 * 1856;
        cost[i] = cz__megatron_ns_cost(2688, 1856);
    }
    layout(numel, cost, N, 32, 100 * numel[0], shard, sizes, &nb);
    ck_assert_int_eq((int)nb, 1);
    ck_assert_int_eq(sizes[0], N * numel[0]);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(shard[i], i % 32);
}
END_TEST

START_TEST(cost_order_cap_and_floor)
{
    /* Backprop order a 64x64, b 128x64, c 64x64, d 256x64, e 64x64 (U = 4096 elements; costs
     * in 64^3: 1, 2, 1, 4, 1); dp 2, bucket_size 3U.
     * Cutting (estimate: each on the least-filled shard in backprop order): a [1,0]; b: 1U < 3U,
     * [1,2]; c: threshold max(3U, trunc(2 * 2U * 0.9)) = 3.6U > 3U, [2,2]; d: 4U >= 3.6U and
     * 2U + 4U > 2U, close {a, b, c}; e: 4U < trunc(2 * 4U * 0.9) = 7.2U, stays with d.
     * Bucket {a, b, c}: cap 4U / 2 * 1.3 = 2.6U; b -> 0; a does not fit on 0 (3U) -> 1; c -> 1.
     * Size 2 x 2U. Bucket {d, e}: cap 3.25U; d fits nowhere -> least filled, 0; e -> 1. Size
     * 2 x 4U. */
    int64_t numel[5] = {U, 2 * U, U, 4 * U, U}, sizes[5];
    double cost[5];
    int shard[5];
    size_t nb = 0;
    const int64_t shape[5][2] = {{64, 64}, {128, 64}, {64, 64}, {256, 64}, {64, 64}};
    for (int i = 0; i < 5; i++)
        cost[i] = cz__megatron_ns_cost(shape[i][0], shape[i][1]);
    layout(numel, cost, 5, 2, 3 * U, shard, sizes, &nb);
    ck_assert_int_eq((int)nb, 2);
    ck_assert_int_eq(sizes[0], 4 * U);
    ck_assert_int_eq(sizes[1], 8 * U);
    const int want[5] = {1, 0, 1, 0, 1};
    for (int i = 0; i < 5; i++)
        ck_assert_msg(shard[i] == want[i], "param %d on shard %d, expected %d", i, shard[i],
                      want[i]);
}
END_TEST

START_TEST(load_carried_across_buckets)
{
    /* Backprop order p 64x64 (cost 1 in 64^3), q 256x16 (0.25), r 256x16, s 64x64, t 64x64,
     * each U elements; dp 2, bucket_size 2U: buckets {p, q}, {r, s}, {t} (each time 2U is
     * reached and the next one would add a row).
     * {p, q}: p -> 0, q cannot join it under cap 1.3U -> 1; loads [1, 0.25].
     * {r, s}: s is costlier, goes first, to the shard with less load so far: 1 (a per-bucket
     * load would send it to 0); r -> 0; loads [1.25, 1.25].
     * {t}: cap 0.65U, fits nowhere -> least filled, 0. Every bucket is 2 x U. */
    int64_t numel[5] = {U, U, U, U, U}, sizes[5];
    const int64_t shape[5][2] = {{64, 64}, {256, 16}, {256, 16}, {64, 64}, {64, 64}};
    double cost[5];
    int shard[5];
    size_t nb = 0;
    for (int i = 0; i < 5; i++)
        cost[i] = cz__megatron_ns_cost(shape[i][0], shape[i][1]);
    layout(numel, cost, 5, 2, 2 * U, shard, sizes, &nb);
    ck_assert_int_eq((int)nb, 3);
    for (int b = 0; b < 3; b++)
        ck_assert_int_eq(sizes[b], 2 * U);
    const int want[5] = {0, 1, 0, 1, 0};
    for (int i = 0; i < 5; i++)
        ck_assert_msg(shard[i] == want[i], "param %d on shard %d, expected %d", i, shard[i],
                      want[i]);
}
END_TEST

START_TEST(alignment_and_single_bucket)
{
    /* Three 10 x 10 matrices, dp 2, no bucket size: one bucket, cap 300 / 2 * 1.3 = 195.
     * x -> 0, y -> 1, z fits nowhere (128 + 100 = 228 > 195) -> least filled, 0 (tie: first).
     * Shard 0 holds x at 0 and z at 128 (64-aligned): 228, padded to 256; bucket 512. */
    int64_t numel[3] = {100, 100, 100}, sizes[3];
    double cost[3] = {1000, 1000, 1000};
    int shard[3];
    size_t nb = 0;
    layout(numel, cost, 3, 2, 0, shard, sizes, &nb);
    ck_assert_int_eq((int)nb, 1);
    ck_assert_int_eq(sizes[0], 512);
    ck_assert_int_eq(shard[0], 0);
    ck_assert_int_eq(shard[1], 1);
    ck_assert_int_eq(shard[2], 0);
}
END_TEST

START_TEST(zero1_buckets)
{
    /* 100, 30 and 200 elements, dp 2, bucket_size 150: 100, then 30 at 128 -> 158 >= 150,
     * padded to 256 (lcm(2, 128) = 128); then 200 alone, padded to 256. */
    int64_t numel[3] = {100, 30, 200}, sizes[3];
    size_t nb = 0;
    cz__megatron_zero1_buckets(numel, 3, 2, 150, sizes, &nb);
    ck_assert_int_eq((int)nb, 2);
    ck_assert_int_eq(sizes[0], 256);
    ck_assert_int_eq(sizes[1], 256);
}
END_TEST

/* norm (elementwise, 128), w1 64x64, w2 64x64, w3 128x64 (matrices), dp 2, TP 1. */
static cz_plan *small_plan(cz_layerwise_order order, cz_cluster **cluster, cz_model **model)
{
    cz_model *m = czt_model_new("small", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "norm", 128, 0, -1, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "w1", 64, 64, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "w2", 64, 64, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "w3", 128, 64, -1, CZ_KIND_MATRIX, -1);
    cz_cluster *c = czt_cluster_new(2, 1, 1);
    cz_settings s;
    cz_settings_init(&s);
    s.dp = CZ_DP_LAYERWISE;
    s.tp = CZ_TP_SC;
    s.layerwise_order = order;
    cz_plan *plan = NULL;
    cz_error err;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    if (model)
        *model = m;
    else
        cz_model_free(m);
    *cluster = c;
    return plan;
}

START_TEST(plan_owners)
{
    /* Backprop order w3, w2, w1 in one bucket (the default bucket size is far larger): by cost
     * w3 (128 * 64^2) -> 0, then w2 and w1 (64^3 each, backprop order) -> 1 (cap 4U / 2 * 1.3
     * = 2.6U leaves no room on 0 after 2U), and w1 -> 1. The norm is under ZeRO-1: its owner
     * is the even slice holding its first element. */
    cz_cluster *c = NULL;
    cz_model *m = NULL;
    cz_plan *plan = small_plan(CZ_LAYERWISE_MEGATRON_AUG26, &c, &m);
    ck_assert_int_eq(plan->params[3].dp_owner, 0);
    ck_assert_int_eq(plan->params[2].dp_owner, 1);
    ck_assert_int_eq(plan->params[1].dp_owner, 1);
    const cz_plan_bucket *b = &plan->buckets[plan->params[0].bucket];
    int want = plan->params[0].offset < b->ranges[1] ? 0 : 1;
    ck_assert_int_eq(plan->params[0].dp_owner, want);
    /* The per-rank loads count the matrices whole and the norm as an even ZeRO-1 slice. */
    const cz_plan_param *q = plan->params;
    ck_assert_double_eq_tol(plan->metrics.dp_load[0], q[3].cost + q[0].cost / 2, 1e-18);
    ck_assert_double_eq_tol(plan->metrics.dp_load[1], q[2].cost + q[1].cost + q[0].cost / 2, 1e-18);
    /* and the plan passes validation */
    cz_error err;
    json_t *viol = NULL;
    ck_assert_int_gt(cz__plan_validate_json(plan, m, c, &viol, &err), 0);
    ck_assert_int_eq((int)json_array_size(viol), 0);
    json_decref(viol);
    cz_model_free(m);
    cz_plan_free(plan);
    cz_cluster_free(c);
}
END_TEST

START_TEST(simulate_costs)
{
    /* Megatron's buckets here: the matrices, one layer-wise bucket of 2 shards of 2U (w3 | w2 +
     * w1), and the norm, one ZeRO-1 bucket of 128. Each is reduce-scattered and all-gathered
     * over DP 2 inside a node (100 GB/s, 5 us): per bucket 5 us + slice * 2 bytes / 100 GB/s.
     * The norm's update is split evenly between the two DP ranks. */
    cz_cluster *c = NULL;
    cz_plan *plan = small_plan(CZ_LAYERWISE_MEGATRON_AUG26, &c, NULL);
    cz_sim_result *r = NULL;
    cz_error err;
    ck_assert_msg(cz_plan_simulate(&r, plan, c, NULL, &err) == CZ_OK, "%s", err.message);
    double bw = 100e9, lat = 5e-6;
    double want = (lat + 2.0 * U * 2 / bw) + (lat + 64.0 * 2 / bw);
    ck_assert_double_eq_tol(r->grad_sync_s, want, 1e-15);
    ck_assert_double_eq_tol(r->param_sync_s, want, 1e-15);
    const cz_plan_param *p = &plan->params[0];
    cz_param_def def = {.name = p->def.name,
                        .ndim = p->def.ndim,
                        .shape = {p->def.shape[0], p->def.shape[1]},
                        .tp_dim = p->def.tp_dim,
                        .kind = p->def.kind,
                        .block_dim = p->def.block_dim,
                        .layer = p->def.layer};
    double norm_s = cz__cost_param_seconds(&def, &plan->settings, c, plan->dtype);
    ck_assert_double_gt(norm_s, 0.0);
    ck_assert_double_eq_tol(r->tl_elementwise[0], norm_s / 2, 1e-18);
    cz_sim_result_free(r);

    /* The first rule all-reduces the whole planner bucket instead and gives the norm whole to
     * one rank. */
    cz_cluster_free(c);
    cz_plan *first = small_plan(CZ_LAYERWISE_MEGATRON, &c, NULL);
    ck_assert_msg(cz_plan_simulate(&r, first, c, NULL, &err) == CZ_OK, "%s", err.message);
    ck_assert_double_gt(r->grad_sync_s, want);
    cz_sim_result_free(r);
    cz_plan_free(first);
    cz_plan_free(plan);
    cz_cluster_free(c);
}
END_TEST

START_TEST(names)
{
    cz_layerwise_order o = CZ_LAYERWISE_PINGPONG;
    ck_assert_int_eq(cz_layerwise_order_parse("megatron-aug26", &o), CZ_OK);
    ck_assert_int_eq(o, CZ_LAYERWISE_MEGATRON_AUG26);
    ck_assert_str_eq(cz_layerwise_order_name(CZ_LAYERWISE_MEGATRON_AUG26), "megatron-aug26");
    ck_assert_str_eq(cz_layerwise_order_name(CZ_LAYERWISE_MEGATRON), "megatron");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("megatron_layerwise");
    TCase *tc = tcase_create("rule");
    tcase_add_test(tc, shard_divisor);
    tcase_add_test(tc, documented_soft_minimum);
    tcase_add_test(tc, cost_order_cap_and_floor);
    tcase_add_test(tc, load_carried_across_buckets);
    tcase_add_test(tc, alignment_and_single_bucket);
    tcase_add_test(tc, zero1_buckets);
    tcase_add_test(tc, plan_owners);
    tcase_add_test(tc, simulate_costs);
    tcase_add_test(tc, names);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
