/* Plan initialization (local shapes, TP divisibility, pipeline stages) and the bucket layout. */
#include "cz_test_util.h"

#include <check.h>

static cz_settings settings_numel(void)
{
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_NUMEL;
    return s;
}

START_TEST(three_params_by_hand)
{
    /* Forward order A [10,2] split rows over tp=2 (local 5x2 = 10), B [7] replicated, C [3,3]
     * replicated. Reverse fill with align 8, size 20, dp 4:
     *   bucket 0: C at 0 (9 elements), B at align(9) = 16 -> 23 >= 20 closes it, padded to 24;
     *   bucket 1: A at 0 (10 elements), end of the stage, padded to 12, starts at 24. */
    cz_model *m = czt_model_new("three", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "A", 10, 2, 0, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "B", 7, 0, -1, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "C", 3, 3, -1, CZ_KIND_MATRIX, -1);
    cz_cluster *c = czt_cluster_new(4, 2, 1);
    c->bucket_size = 20;
    c->bucket_align = 8;
    cz_settings s = settings_numel();
    cz_plan *plan = NULL;
    cz_error err;
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, &err), CZ_OK);
    ck_assert_int_eq(cz__buckets_layout(plan, &err), CZ_OK);
    ck_assert_int_eq((int)plan->nbuckets, 2);
    ck_assert_int_eq((int)plan->params[0].local_shape[0], 5);
    ck_assert_int_eq((int)plan->params[0].local_shape[1], 2);
    ck_assert_int_eq((int)plan->params[0].numel, 10);
    ck_assert_int_eq((int)plan->params[1].numel, 7);
    ck_assert_int_eq((int)plan->params[2].numel, 9);
    ck_assert_int_eq(plan->params[2].bucket, 0);
    ck_assert_int_eq((int)plan->params[2].offset, 0);
    ck_assert_int_eq(plan->params[1].bucket, 0);
    ck_assert_int_eq((int)plan->params[1].offset, 16);
    ck_assert_int_eq(plan->params[0].bucket, 1);
    ck_assert_int_eq((int)plan->params[0].offset, 0);
    ck_assert_int_eq((int)plan->buckets[0].offset, 0);
    ck_assert_int_eq((int)plan->buckets[0].size, 24);
    ck_assert_int_eq((int)plan->buckets[1].offset, 24);
    ck_assert_int_eq((int)plan->buckets[1].size, 12);
    ck_assert_int_eq(plan->buckets[1].id, 1);
    /* Costs across the TP group: A whole once (20), B replicated on both TP ranks (14). */
    ck_assert_double_eq(plan->params[0].cost, 20.0);
    ck_assert_double_eq(plan->params[1].cost, 14.0);
    ck_assert_double_eq(plan->params[2].cost, 9.0);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(default_bucket_size)
{
    cz_model *m = czt_model_new("one", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "w", 4, 4, -1, CZ_KIND_MATRIX, -1);
    cz_settings s = settings_numel();
    cz_plan *plan = NULL;
    cz_cluster *c = czt_cluster_new(4, 1, 1);
    c->bucket_align = 0;
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, NULL), CZ_OK);
    ck_assert_int_eq((int)plan->bucket_size, 40000000);
    ck_assert_int_eq((int)plan->bucket_align, 64);
    cz_plan_free(plan);
    c->dp = 64;
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, NULL), CZ_OK);
    ck_assert_int_eq((int)plan->bucket_size, 64000000);
    ck_assert_int_eq(cz__buckets_layout(plan, NULL), CZ_OK);
    ck_assert_int_eq((int)plan->nbuckets, 1);
    ck_assert_int_eq((int)plan->buckets[0].size, 64); /* 16 padded to a multiple of dp */
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(stages_and_bucket_ids)
{
    /* 3 layers over pp=2: layers 0,1 -> stage 0, layer 2 -> stage 1; the embedding before the
     * layers goes to stage 0, the head after them to stage 1. */
    cz_model *m = czt_model_new("pp", CZ_DTYPE_BF16, 3);
    czt_model_add(m, "emb", 8, 4, 0, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "l0", 4, 4, -1, CZ_KIND_MATRIX, 0);
    czt_model_add(m, "l1", 4, 4, -1, CZ_KIND_MATRIX, 1);
    czt_model_add(m, "l2", 4, 4, -1, CZ_KIND_MATRIX, 2);
    czt_model_add(m, "head", 8, 4, 0, CZ_KIND_ELEMENTWISE, -1);
    cz_cluster *c = czt_cluster_new(2, 1, 2);
    c->bucket_size = 16;
    c->bucket_align = 1;
    cz_settings s = settings_numel();
    cz_plan *plan = NULL;
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, NULL), CZ_OK);
    int want[5] = {0, 0, 0, 1, 1};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(plan->params[i].stage, want[i]);
    ck_assert_int_eq(cz__buckets_layout(plan, NULL), CZ_OK);
    /* Stage 0 (reverse: l1, l0, emb), each 16 or 32 >= 16: three buckets 0..2; stage 1 (head,
     * l2): buckets 3, 4. Offsets restart at 0 in stage 1's buffer. */
    ck_assert_int_eq((int)plan->nbuckets, 5);
    ck_assert_int_eq(plan->params[2].bucket, 0);
    ck_assert_int_eq(plan->params[1].bucket, 1);
    ck_assert_int_eq(plan->params[0].bucket, 2);
    ck_assert_int_eq(plan->params[4].bucket, 3);
    ck_assert_int_eq(plan->params[3].bucket, 4);
    ck_assert_int_eq(plan->buckets[2].stage, 0);
    ck_assert_int_eq((int)plan->buckets[2].offset, 32);
    ck_assert_int_eq(plan->buckets[3].stage, 1);
    ck_assert_int_eq((int)plan->buckets[3].offset, 0);
    ck_assert_int_eq((int)plan->buckets[4].offset, 32);
    cz_plan_free(plan);
    /* More stages than layers is refused. */
    c->pp = 4;
    cz_error err;
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, &err), CZ_EINVALID);
    ck_assert_ptr_null(plan);
    ck_assert_ptr_nonnull(strstr(err.message, "pp = 4"));
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(uneven_layers_first_stages_larger)
{
    cz_model *m = czt_model_new("pp", CZ_DTYPE_BF16, 5);
    for (int l = 0; l < 5; l++)
        czt_model_add(m, "w", 4, 4, -1, CZ_KIND_MATRIX, l);
    cz_cluster *c = czt_cluster_new(1, 1, 3);
    cz_settings s = settings_numel();
    cz_plan *plan = NULL;
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, NULL), CZ_OK);
    int want[5] = {0, 0, 1, 1, 2}; /* 5 layers / 3 stages: 2, 2, 1 */
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(plan->params[i].stage, want[i]);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(tp_divisibility)
{
    cz_model *m = czt_model_new("bad", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "proj", 6, 8, 0, CZ_KIND_MATRIX, -1);
    cz_cluster *c = czt_cluster_new(1, 4, 1);
    cz_settings s = settings_numel();
    cz_plan *plan = NULL;
    cz_error err;
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "proj"));
    ck_assert_ptr_nonnull(strstr(err.message, "test-model.json"));
    ck_assert_ptr_nonnull(strstr(err.message, "size 6"));
    ck_assert_ptr_nonnull(strstr(err.message, "tp = 4"));
    /* Divisible as a whole, but a block along the split dimension is not. */
    m->params[0].shape[0] = 8;
    int64_t sizes[2] = {2, 6};
    czt_model_blocks(m, 0, 0, 2, sizes);
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "block 0"));
    /* Blocks along the other dimension are fine. */
    m->params[0].block_dim = 1;
    m->params[0].block_sizes[0] = 3;
    m->params[0].block_sizes[1] = 5;
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, &err), CZ_OK);
    ck_assert_int_eq((int)plan->params[0].local_shape[0], 2);
    cz_plan_free(plan);
    /* Blocks must add up to their dimension. */
    m->params[0].block_sizes[1] = 4;
    ck_assert_int_eq(cz__plan_init(&plan, m, c, &s, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "sum to 7"));
    ck_assert_ptr_null(plan);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(settings_refused)
{
    cz_model *m = czt_model_new("one", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "w", 4, 4, -1, CZ_KIND_MATRIX, -1);
    cz_cluster *c = czt_cluster_new(1, 1, 1);
    cz_plan *plan = NULL;
    cz_error err;
    cz_settings s;
    cz_settings_init(&s);
    s.alpha = 1.5;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "alpha"));
    cz_settings_init(&s);
    s.ns_steps = 0;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, &err), CZ_EINVALID);
    cz_settings_init(&s);
    s.capacity = -1.0;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, &err), CZ_EINVALID);
    cz_settings_init(&s);
    s.tp = (cz_tp_strategy)9;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, &err), CZ_EINVALID);
    cz_settings_init(&s);
    s.dp = CZ_DP_TPAWARE;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, &err), CZ_OK);
    cz_plan_free(plan);
    plan = NULL;
    cz_settings_init(&s);
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, &err), CZ_OK);
    ck_assert_str_eq(plan->model_sha256, m->sha256);
    ck_assert_str_eq(plan->cluster_sha256, c->sha256);
    ck_assert_str_eq(plan->generator, "canzona");
    ck_assert(plan->plan_seconds >= 0.0);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("buckets");
    TCase *tc = tcase_create("layout");
    tcase_add_test(tc, three_params_by_hand);
    tcase_add_test(tc, default_bucket_size);
    tcase_add_test(tc, stages_and_bucket_ids);
    tcase_add_test(tc, uneven_layers_first_stages_larger);
    tcase_add_test(tc, tp_divisibility);
    tcase_add_test(tc, settings_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
