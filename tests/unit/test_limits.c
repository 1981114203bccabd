/* Sizes at the edge of int64_t: the bucket layout and the simulator's sums over a plan's
 * elements must refuse or saturate, never wrap (a wrapped sum gave negative bucket offsets and
 * near-zero DP times in release builds, and aborts under UBSan). */
#include "cz_hand_plan.h"
#include "cz_test_util.h"

#include <check.h>
#include <math.h>

/* Three parameters of 2^62 elements, one bucket each, laid out in reverse (c, b, a): b's
 * bucket would end at 2^63. */
START_TEST(bucket_offsets_beyond_int64_refused)
{
    cz_model *m = czt_model_new("huge", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "a", (int64_t)1 << 62, 1, -1, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "b", (int64_t)1 << 62, 1, -1, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "c", (int64_t)1 << 62, 1, -1, CZ_KIND_ELEMENTWISE, -1);
    cz_cluster *c = czt_cluster_new(2, 1, 1);
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_NUMEL;
    cz_plan *plan = NULL;
    cz_error err;
    cz_error_clear(&err);
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, &err), CZ_OK);
    ck_assert_int_eq(cz__buckets_layout(plan, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "exceeds 2^63 elements") &&
                      strstr(err.message, "parameter b "),
                  "message: %s", err.message);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

/* An alignment that pushes a valid offset past INT64_MAX. */
START_TEST(bucket_alignment_beyond_int64_refused)
{
    cz_model *m = czt_model_new("align", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "a", 8, 1, -1, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "b", INT64_MAX - 4, 1, -1, CZ_KIND_ELEMENTWISE, -1);
    cz_cluster *c = czt_cluster_new(2, 1, 1);
    c->bucket_size = INT64_MAX; /* one bucket: b at 0, a aligned after it */
    c->bucket_align = 64;
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_NUMEL;
    cz_plan *plan = NULL;
    cz_error err;
    cz_error_clear(&err);
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, &err), CZ_OK);
    ck_assert_int_eq(cz__buckets_layout(plan, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "exceeds 2^63 elements"), "message: %s", err.message);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

/* The hand plan under the layer-wise optimizer with rank 0 owning two parameters of bucket 0
 * whose sizes sum beyond INT64_MAX (the plan reader bounds each size, not the sum): the
 * parameter all-gather must take at least the time to move 2^62 elements, not wrap to a few
 * hundred elements. */
START_TEST(layerwise_owned_sum_saturates)
{
    cz_plan *p = hand_plan();
    cz_cluster *c = hand_cluster();
    p->settings.dp = CZ_DP_LAYERWISE;
    p->params[4].numel = INT64_MAX - 10; /* l1.fc, rank 0, bucket 0 */
    p->params[5].numel = INT64_MAX - 10; /* out, rank 0, bucket 0 */
    cz_sim_result *r = NULL;
    cz_error err;
    cz_error_clear(&err);
    ck_assert_int_eq(cz_plan_simulate(&r, p, c, NULL, &err), CZ_OK);
    double floor_s = (double)((int64_t)1 << 62) * 2.0 / (c->links.intra_node_gbps * 1e9);
    ck_assert_msg(isfinite(r->param_sync_s) && r->param_sync_s >= floor_s,
                  "param_sync_s %g, expected at least %g", r->param_sync_s, floor_s);
    cz_sim_result_free(r);
    cz_plan_free(p);
    cz_cluster_free(c);
}
END_TEST

/* offset + numel beyond INT64_MAX in a parameter's overlap with the DP ranges, under the even
 * partition (which gathers the fragments of every matrix a rank's slice touches): l1.fc starts
 * at 64 in rank 0's slice [0, 576), so rank 0 holds 512 of its elements and gathers the rest,
 * more than 2^62 elements. A wrapped end made the overlap empty and the matrix vanish. */
START_TEST(overlap_end_saturates)
{
    cz_plan *p = hand_plan();
    cz_cluster *c = hand_cluster();
    p->settings.dp = CZ_DP_EVEN;
    p->settings.tp = CZ_TP_SC;
    p->params[4].numel = INT64_MAX - 10; /* l1.fc at offset 64 of bucket 0 */
    cz_sim_result *r = NULL;
    cz_error err;
    cz_error_clear(&err);
    ck_assert_int_eq(cz_plan_simulate(&r, p, c, NULL, &err), CZ_OK);
    double floor_s = (double)((int64_t)1 << 62) * 2.0 / (c->links.intra_node_gbps * 1e9);
    ck_assert_msg(isfinite(r->frag_gather_s) && r->frag_gather_s >= floor_s,
                  "frag_gather_s %g, expected at least %g", r->frag_gather_s, floor_s);
    cz_sim_result_free(r);
    cz_plan_free(p);
    cz_cluster_free(c);
}
END_TEST

/* Slice lengths whose sum exceeds INT64_MAX. */
START_TEST(uneven_sum_beyond_int64)
{
    const int64_t len[3] = {INT64_MAX, INT64_MAX, 1};
    double t = cz__sim_uneven_seconds(len, 3, 2.0, 100.0, 0.0, CZ_SIM_UNEVEN_ROOTED);
    ck_assert_msg(isfinite(t) && t >= (double)INT64_MAX * 2.0 / 100e9, "t = %g", t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("limits");
    TCase *tc = tcase_create("int64");
    tcase_add_test(tc, bucket_offsets_beyond_int64_refused);
    tcase_add_test(tc, bucket_alignment_beyond_int64_refused);
    tcase_add_test(tc, layerwise_owned_sum_saturates);
    tcase_add_test(tc, overlap_end_saturates);
    tcase_add_test(tc, uneven_sum_beyond_int64);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
