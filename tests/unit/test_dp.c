/* DP partitioning on tiny buckets, cut points computed by hand. */
#include "cz_test_util.h"

#include <check.h>

/* Five 1-D elementwise parameters of 1, 3, 2, 8, 4 elements (ids 0..4), tp 1, align 1, bucket
 * size 10, dp 2, unit numel (cost = elements). Reverse fill:
 *   bucket 0: id4 at 0 (4), id3 at 4 (8) -> 12 >= 10, size 12;
 *   bucket 1: id2 at 0 (2), id1 at 2 (3), id0 at 5 (1), size 6.
 * Total 18, global target T = 9 per rank. */
static cz_plan *five_params(cz_dp_strategy dp, double alpha)
{
    cz_model *m = czt_model_new("five", CZ_DTYPE_BF16, 0);
    int64_t sizes[5] = {1, 3, 2, 8, 4};
    for (int i = 0; i < 5; i++)
        czt_model_add(m, "p", sizes[i], 0, -1, CZ_KIND_ELEMENTWISE, -1);
    cz_cluster *c = czt_cluster_new(2, 1, 1);
    c->bucket_size = 10;
    c->bucket_align = 1;
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_NUMEL;
    s.dp = dp;
    s.alpha = alpha;
    cz_plan *plan = NULL;
    cz_error err;
    int rc = cz_plan_build(&plan, m, c, &s, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    cz_model_free(m);
    cz_cluster_free(c);
    return plan;
}

static void check_ranges(const cz_plan *plan, int b, int64_t r0e, int64_t r1e)
{
    const int64_t *rg = plan->buckets[b].ranges;
    ck_assert_int_eq((int)rg[0], 0);
    ck_assert_int_eq((int)rg[1], (int)r0e);
    ck_assert_int_eq((int)rg[2], (int)r0e);
    ck_assert_int_eq((int)rg[3], (int)r1e);
}

static void check_owners(const cz_plan *plan, const int *want)
{
    for (int i = 0; i < 5; i++)
        ck_assert_msg(plan->params[i].dp_owner == want[i], "param %d owner %d, expected %d", i,
                      plan->params[i].dp_owner, want[i]);
}

START_TEST(layout_as_expected)
{
    cz_plan *plan = five_params(CZ_DP_EVEN, 1.0);
    ck_assert_int_eq((int)plan->nbuckets, 2);
    ck_assert_int_eq((int)plan->buckets[0].size, 12);
    ck_assert_int_eq((int)plan->buckets[1].size, 6);
    ck_assert_int_eq((int)plan->params[3].offset, 4);
    ck_assert_int_eq((int)plan->params[0].offset, 5);
    cz_plan_free(plan);
}
END_TEST

START_TEST(even_slices)
{
    cz_plan *plan = five_params(CZ_DP_EVEN, 1.0);
    check_ranges(plan, 0, 6, 12);
    check_ranges(plan, 1, 3, 6);
    int want[5] = {-1, -1, -1, -1, -1};
    check_owners(plan, want);
    /* Rank 0 holds id4 (4), 2 of id3, id2 (2), 1 of id1: 9; rank 1 the rest: 9. */
    ck_assert_double_eq_tol(plan->metrics.dp_load[0], 9.0, 1e-12);
    ck_assert_double_eq_tol(plan->metrics.dp_load[1], 9.0, 1e-12);
    cz_plan_free(plan);
}
END_TEST

START_TEST(anchored_by_start)
{
    /* Bucket 0 (slice 6): starts 0 and 4 both in rank 0's slice -> rank 1 gets nothing.
     * Bucket 1 (slice 3): starts 0, 2 -> rank 0; 5 -> rank 1. */
    cz_plan *plan = five_params(CZ_DP_ANCHORED, 1.0);
    check_ranges(plan, 0, 12, 12);
    check_ranges(plan, 1, 5, 6);
    int want[5] = {1, 0, 0, 0, 0};
    check_owners(plan, want);
    ck_assert_double_eq(plan->metrics.dp_load[0], 17.0);
    ck_assert_double_eq(plan->metrics.dp_load[1], 1.0);
    ck_assert_double_eq_tol(plan->metrics.dp_imbalance, 17.0 / 9.0, 1e-12);
    cz_plan_free(plan);
}
END_TEST

START_TEST(alpha_one_balances_globally)
{
    /* Bucket 0 first (larger): targets 6, 6; boundaries 0, 4, 12 -> cut at 4; L = {4, 8}.
     * Bucket 1: deficits 5, 1 -> targets 5, 1; boundaries 0, 2, 5, 6 -> cut at 5; L = {9, 9}. */
    cz_plan *plan = five_params(CZ_DP_ALPHA, 1.0);
    check_ranges(plan, 0, 4, 12);
    check_ranges(plan, 1, 5, 6);
    int want[5] = {1, 0, 0, 1, 0};
    check_owners(plan, want);
    ck_assert_double_eq(plan->metrics.dp_load[0], 9.0);
    ck_assert_double_eq(plan->metrics.dp_load[1], 9.0);
    ck_assert_int_eq(plan->dp_fell_back, 0);
    cz_plan_free(plan);
}
END_TEST

START_TEST(alpha_zero_near_even)
{
    /* alpha = 0: each bucket cut at the boundary nearest its own half: bucket 0 at 4 (of 12),
     * bucket 1 at 2 (|2-3| < |5-3|). Loads 6 and 12, still better than anchored (17, 1). */
    cz_plan *plan = five_params(CZ_DP_ALPHA, 0.0);
    check_ranges(plan, 0, 4, 12);
    check_ranges(plan, 1, 2, 6);
    int want[5] = {1, 1, 0, 1, 0};
    check_owners(plan, want);
    ck_assert_double_eq(plan->metrics.dp_load[0], 6.0);
    ck_assert_double_eq(plan->metrics.dp_load[1], 12.0);
    ck_assert_int_eq(plan->dp_fell_back, 0);
    cz_plan_free(plan);
}
END_TEST

START_TEST(alpha_half)
{
    /* alpha = 0.5, bucket 1: targets 0.5*3 + 0.5*5 = 4 and 2; boundaries 0, 2, 5, 6: |5-4| <
     * |2-4| -> cut at 5, as alpha = 1. */
    cz_plan *plan = five_params(CZ_DP_ALPHA, 0.5);
    check_ranges(plan, 1, 5, 6);
    cz_plan_free(plan);
}
END_TEST

/* Z = 8x8 matrix (id 0), Y = 1x533 matrix (id 1), X = [400] elementwise (id 2); unit flops,
 * tp 1, dp 2, align 1. Reverse fill: X at 0, Y at 400, Z at 933; size 998, slice 499.
 * Costs: X 12*400 = 4800; Y 5*(4*533 + 2) + 5330 = 16000; Z 5*(2048 + 1024) + 640 = 16000.
 * Anchored: X, Y (start 400 < 499) -> rank 0 (20800), Z -> rank 1 (16000): max/mean 1.130.
 * Alpha with element loads: target 499 elements, nearest boundary 400 -> rank 0 gets only X
 * (4800), rank 1 Y + Z (32000): max/mean 1.739, worse -> anchored is kept. */
static cz_plan *fallback_case(int numel_loads)
{
    cz_model *m = czt_model_new("fb", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "Z", 8, 8, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "Y", 1, 533, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "X", 400, 0, -1, CZ_KIND_ELEMENTWISE, -1);
    cz_cluster *c = czt_cluster_new(2, 1, 1);
    c->bucket_align = 1;
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_FLOPS;
    s.dp = CZ_DP_ALPHA;
    s.alpha_numel_loads = numel_loads;
    cz_plan *plan = NULL;
    cz_error err;
    int rc = cz_plan_build(&plan, m, c, &s, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    cz_model_free(m);
    cz_cluster_free(c);
    return plan;
}

START_TEST(alpha_falls_back_to_anchored)
{
    cz_plan *plan = fallback_case(1);
    ck_assert_double_eq(plan->params[0].cost, 16000.0);
    ck_assert_double_eq(plan->params[1].cost, 16000.0);
    ck_assert_double_eq(plan->params[2].cost, 4800.0);
    ck_assert_int_eq((int)plan->buckets[0].size, 998);
    ck_assert_int_eq(plan->dp_fell_back, 1);
    check_ranges(plan, 0, 933, 998);
    ck_assert_int_eq(plan->params[0].dp_owner, 1);
    ck_assert_int_eq(plan->params[1].dp_owner, 0);
    ck_assert_int_eq(plan->params[2].dp_owner, 0);
    ck_assert_double_eq(plan->metrics.dp_load[0], 20800.0);
    cz_plan_free(plan);
}
END_TEST

START_TEST(alpha_cost_loads_no_fallback)
{
    /* In cost units: prefix 0, 4800, 20800, 36800; target 18400 -> cut at 933 (ties anchored,
     * which keeps alpha's result). */
    cz_plan *plan = fallback_case(0);
    ck_assert_int_eq(plan->dp_fell_back, 0);
    check_ranges(plan, 0, 933, 998);
    cz_plan_free(plan);
}
END_TEST

static cz_plan *layerwise(cz_layerwise_order order)
{
    /* Costs (numel) in forward order: 1, 3, 2, 8, 4, dp 2. */
    cz_model *m = czt_model_new("five", CZ_DTYPE_BF16, 0);
    int64_t sizes[5] = {1, 3, 2, 8, 4};
    for (int i = 0; i < 5; i++)
        czt_model_add(m, "p", sizes[i], 0, -1, CZ_KIND_ELEMENTWISE, -1);
    cz_cluster *c = czt_cluster_new(2, 1, 1);
    c->bucket_align = 1;
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_NUMEL;
    s.dp = CZ_DP_LAYERWISE;
    s.layerwise_order = order;
    cz_plan *plan = NULL;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, NULL), CZ_OK);
    cz_model_free(m);
    cz_cluster_free(c);
    return plan;
}

START_TEST(layerwise_pingpong)
{
    cz_plan *plan = layerwise(CZ_LAYERWISE_PINGPONG);
    int want[5] = {0, 1, 1, 0, 0};
    check_owners(plan, want);
    check_ranges(plan, 0, 9, 18); /* even slices of the 18-element bucket */
    cz_plan_free(plan);
}
END_TEST

START_TEST(layerwise_lpt)
{
    /* 8 -> r0, 4 -> r1, 3 -> r1 (4 < 8), 2 -> r1 (7 < 8), 1 -> r0 (8 < 9): loads 9, 9. */
    cz_plan *plan = layerwise(CZ_LAYERWISE_LPT);
    int want[5] = {0, 1, 1, 0, 1};
    want[0] = 0;
    check_owners(plan, want);
    ck_assert_double_eq(plan->metrics.dp_load[0], 9.0);
    ck_assert_double_eq(plan->metrics.dp_load[1], 9.0);
    cz_plan_free(plan);
}
END_TEST

/* ---- Megatron-LM's first released layer-wise rule (--layerwise-order megatron) ---- */

static cz_plan *megatron_plan(cz_model *m, int dp, int tp)
{
    cz_cluster *c = czt_cluster_new(dp, tp, 1);
    c->bucket_align = 1;
    cz_settings s;
    cz_settings_init(&s);
    ck_assert_int_eq(s.layerwise_order, CZ_LAYERWISE_MEGATRON); /* the default */
    s.unit = CZ_UNIT_NUMEL;
    s.dp = CZ_DP_LAYERWISE;
    cz_plan *plan = NULL;
    cz_error err;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    cz_model_free(m);
    cz_cluster_free(c);
    return plan;
}

static void check_owners_n(const cz_plan *plan, const int *want, int n)
{
    ck_assert_int_eq((int)plan->nparams, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(plan->params[i].dp_owner == want[i], "param %d (%s) owner %d, expected %d", i,
                      plan->params[i].def.name, plan->params[i].dp_owner, want[i]);
}

START_TEST(layerwise_megatron_documented)
{
    /* Megatron's own example: 4 ranks, p0..p9 in ascending size go to
     * [[p0, p7, p8], [p1, p6, p9], [p2, p5], [p3, p4]]. Here p_k has k + 1 elements and the
     * parameters are registered shuffled, so the sort, not the registration order, decides. */
    static const int size[10] = {7, 3, 10, 1, 5, 9, 2, 8, 4, 6};
    static const int rank_of_p[10] = {0, 1, 2, 3, 3, 2, 1, 0, 0, 1};
    cz_model *m = czt_model_new("ten", CZ_DTYPE_BF16, 0);
    for (int i = 0; i < 10; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", size[i] - 1);
        czt_model_add(m, name, size[i], 0, -1, CZ_KIND_ELEMENTWISE, -1);
    }
    cz_plan *plan = megatron_plan(m, 4, 1);
    int want[10];
    for (int i = 0; i < 10; i++)
        want[i] = rank_of_p[size[i] - 1];
    check_owners_n(plan, want, 10);
    cz_plan_free(plan);
}
END_TEST

START_TEST(layerwise_megatron_groups)
{
    /* Equal sizes keep the optimizer-group order (Muon, then AdamW 2-D, then AdamW 1-D), not the
     * registration order: the matrix w1 (64) goes before the bias b (64) registered earlier.
     * Sorted: norm 16, w1 64, b 64, emb 128, w2 1024, dealt to 0, 1, 2, 2, 1 (DP 3). */
    cz_model *m = czt_model_new("groups", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "emb", 16, 8, 0, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "b", 64, 0, -1, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "w1", 8, 8, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "w2", 32, 32, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "norm", 16, 0, -1, CZ_KIND_ELEMENTWISE, -1);
    cz_plan *plan = megatron_plan(m, 3, 1);
    int want[5] = {2, 2, 1, 1, 0};
    check_owners_n(plan, want, 5);
    cz_plan_free(plan);
}
END_TEST

START_TEST(layerwise_megatron_tp_local)
{
    /* Sizes are the TP-local ones: at TP 2 the column-parallel w [8, 8] holds 32 elements per
     * rank, fewer than the replicated v [40], so w is dealt first. */
    cz_model *m = czt_model_new("local", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "v", 40, 0, -1, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "w", 8, 8, 0, CZ_KIND_MATRIX, -1);
    cz_plan *plan = megatron_plan(m, 2, 2);
    int want[2] = {1, 0};
    check_owners_n(plan, want, 2);
    cz_plan_free(plan);
}
END_TEST

START_TEST(layerwise_megatron_experts)
{
    /* Experts are dealt with a counter of their own: dense y 4 -> 0, x 64 -> 1; experts
     * e0 16 -> 0, e1 16 -> 1. One shared counter would give y 0, e0 1, e1 1, x 0. */
    cz_model *m = czt_model_new("moe", CZ_DTYPE_BF16, 1);
    czt_model_add(m, "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight", 4, 4, -1,
                  CZ_KIND_MATRIX, 0);
    czt_model_add(m, "decoder.layers.0.x", 8, 8, -1, CZ_KIND_MATRIX, 0);
    czt_model_add(m, "decoder.layers.0.mlp.experts.local_experts.1.linear_fc1.weight", 4, 4, -1,
                  CZ_KIND_MATRIX, 0);
    czt_model_add(m, "decoder.layers.0.mlp.shared_experts.y", 2, 2, -1, CZ_KIND_MATRIX, 0);
    cz_plan *plan = megatron_plan(m, 2, 1);
    int want[4] = {0, 1, 1, 0};
    check_owners_n(plan, want, 4);
    cz_plan_free(plan);
}
END_TEST

START_TEST(tpaware_unsupported)
{
    /* tpaware (docs/SOLVERS.md) builds and is never worse than alpha on the TP makespan. */
    cz_model *m = czt_model_new("one", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "w", 4, 4, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "v", 8, 4, -1, CZ_KIND_MATRIX, -1);
    cz_cluster *c = czt_cluster_new(2, 1, 1);
    cz_settings s;
    cz_settings_init(&s);
    cz_plan *alpha = NULL, *plan = NULL;
    cz_error err;
    ck_assert_int_eq(cz_plan_build(&alpha, m, c, &s, &err), CZ_OK);
    s.dp = CZ_DP_TPAWARE;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, &err), CZ_OK);
    ck_assert_double_le(plan->metrics.tp_makespan, alpha->metrics.tp_makespan);
    ck_assert_int_eq(plan->settings.dp, CZ_DP_TPAWARE);
    cz_plan_free(alpha);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

/* 1-D elementwise parameters of the given element counts (forward order, layer[i] each), unit
 * numel, alpha 1, align 1, one bucket per stage. */
static cz_plan *numel_plan(const int64_t *sizes, const int *layer, int n, int nlayers, int dp,
                           int pp)
{
    cz_model *m = czt_model_new("hand", CZ_DTYPE_BF16, nlayers);
    for (int i = 0; i < n; i++)
        czt_model_add(m, "p", sizes[i], 0, -1, CZ_KIND_ELEMENTWISE, layer[i]);
    cz_cluster *c = czt_cluster_new(dp, 1, pp);
    c->bucket_size = 1000;
    c->bucket_align = 1;
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_NUMEL;
    s.dp = CZ_DP_ALPHA; /* the worked examples below are alpha's */
    cz_plan *plan = NULL;
    cz_error err;
    int rc = cz_plan_build(&plan, m, c, &s, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    cz_model_free(m);
    cz_cluster_free(c);
    return plan;
}

static void progress_never(const cz_progress *pr, void *payload)
{
    (void)pr;
    (*(int *)payload)++;
}

/* The progress callback belongs to one cz_plan_build call: a greedy build (no long solve) never
 * calls it, and the plan it returns does not keep the caller's callback or payload. */
START_TEST(progress_callback_is_per_call)
{
    cz_model *m = czt_model_new("one", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "w", 4, 4, -1, CZ_KIND_MATRIX, -1);
    cz_cluster *c = czt_cluster_new(2, 1, 1);
    cz_settings s;
    cz_settings_init(&s);
    ck_assert_ptr_null(s.progress);
    int calls = 0;
    s.progress = progress_never;
    s.progress_payload = &calls;
    cz_plan *plan = NULL;
    cz_error err;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, &err), CZ_OK);
    ck_assert_int_eq(calls, 0);
    ck_assert_ptr_null(plan->settings.progress);
    ck_assert_ptr_null(plan->settings.progress_payload);
    ck_assert_ptr_eq(s.progress_payload, &calls);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(alpha_tie_goes_to_earlier_boundary)
{
    /* Forward 1, 2, 1 elements; reverse fill: id2 at 0, id1 at 1, id0 at 3: prefix 0, 1, 3, 4.
     * T = 2, rank 0's target 2 lies exactly between boundaries 1 and 3 (distance 1 each): the
     * earlier one wins, so rank 0 holds id2 alone, ranges [0, 1) and [1, 4). (Anchored gives
     * 3 / 1, no better than alpha's 1 / 3, so alpha's cut stays.) */
    const int64_t sizes[3] = {1, 2, 1};
    const int layer[3] = {0, 0, 0};
    cz_plan *plan = numel_plan(sizes, layer, 3, 1, 2, 1);
    ck_assert_int_eq((int)plan->nbuckets, 1);
    ck_assert_int_eq(plan->dp_fell_back, 0);
    const int64_t *rg = plan->buckets[0].ranges;
    ck_assert_int_eq((int)rg[1], 1);
    ck_assert_int_eq((int)rg[2], 1);
    ck_assert_int_eq((int)rg[3], 4);
    ck_assert_int_eq(plan->params[2].dp_owner, 0);
    ck_assert_int_eq(plan->params[1].dp_owner, 1);
    ck_assert_int_eq(plan->params[0].dp_owner, 1);
    cz_plan_free(plan);
}
END_TEST

START_TEST(per_stage_dp_metrics)
{
    /* pp 2, dp 2, one layer per stage. Stage 0 (layer 0): 5 and 5 elements -> loads 5, 5.
     * Stage 1 (layer 1): forward 3, 1; reverse fill id3 (1) at 0, id2 (3) at 1, prefix 0, 1, 4;
     * T = 2, the boundary nearest 2 is 1 -> loads 1, 3 (anchored would give 4, 0). Worked by
     * hand: dp_load = {5, 5, 1, 3} (stage-major), dp_imbalance = the worst stage's max/mean =
     * 3 / 2. */
    const int64_t sizes[4] = {5, 5, 3, 1};
    const int layer[4] = {0, 0, 1, 1};
    cz_plan *plan = numel_plan(sizes, layer, 4, 2, 2, 2);
    ck_assert_int_eq(plan->params[0].stage, 0);
    ck_assert_int_eq(plan->params[3].stage, 1);
    const double want[4] = {5, 5, 1, 3};
    for (int r = 0; r < 4; r++)
        ck_assert_msg(plan->metrics.dp_load[r] == want[r], "dp_load[%d] = %g, expected %g", r,
                      plan->metrics.dp_load[r], want[r]);
    ck_assert_double_eq_tol(plan->metrics.dp_imbalance, 1.5, 1e-12);
    cz_plan_free(plan);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dp");
    TCase *tc = tcase_create("partition");
    tcase_add_test(tc, layout_as_expected);
    tcase_add_test(tc, even_slices);
    tcase_add_test(tc, anchored_by_start);
    tcase_add_test(tc, alpha_one_balances_globally);
    tcase_add_test(tc, alpha_zero_near_even);
    tcase_add_test(tc, alpha_half);
    tcase_add_test(tc, alpha_falls_back_to_anchored);
    tcase_add_test(tc, alpha_cost_loads_no_fallback);
    tcase_add_test(tc, layerwise_pingpong);
    tcase_add_test(tc, layerwise_lpt);
    tcase_add_test(tc, layerwise_megatron_documented);
    tcase_add_test(tc, layerwise_megatron_groups);
    tcase_add_test(tc, layerwise_megatron_tp_local);
    tcase_add_test(tc, layerwise_megatron_experts);
    tcase_add_test(tc, tpaware_unsupported);
    tcase_add_test(tc, alpha_tie_goes_to_earlier_boundary);
    tcase_add_test(tc, progress_callback_is_per_call);
    tcase_add_test(tc, per_stage_dp_metrics);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
