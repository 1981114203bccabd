/* Tests of the model-state memory per GPU (cz__plan_memory) and of the check against the
 * device's memory (cz__plan_memory_check): parameter and gradient buffers, fp32 master copies
 * and optimizer state, by dtype, and the warning and refusal thresholds. */
#include "cz_test_util.h"
#include "cz_types.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* DP 2, TP 2: a vocab-parallel embedding [256, 64], a column-parallel matrix [128, 64] and a
 * replicated norm [64]. */
static cz_model *small_model(cz_dtype dtype)
{
    cz_model *m = czt_model_new("mem", dtype, 1);
    czt_model_add(m, "embedding", 256, 64, 0, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "layers.0.w", 128, 64, 0, CZ_KIND_MATRIX, 0);
    czt_model_add(m, "layers.0.norm", 64, 0, -1, CZ_KIND_ELEMENTWISE, 0);
    return m;
}

static cz_plan *build(const cz_model *m, const cz_cluster *c)
{
    cz_settings s;
    cz_settings_init(&s);
    cz_plan *p = NULL;
    cz_error err;
    ck_assert_msg(cz_plan_build(&p, m, c, &s, &err) == CZ_OK, "%s", err.message);
    return p;
}

static const struct {
    cz_dtype dtype;
    double param_bytes, grad_bytes, master_bytes;
} dtypes[] = {
    /* Megatron-LM accumulates bf16 gradients in fp32; fp32 parameters need no master copy. */
    {CZ_DTYPE_BF16, 2, 4, 4},
    {CZ_DTYPE_FP16, 2, 2, 4},
    {CZ_DTYPE_FP32, 4, 4, 0},
};

START_TEST(test_memory_parts)
{
    cz_model *m = small_model(dtypes[_i].dtype);
    cz_cluster *c = czt_cluster_new(2, 2, 1);
    cz_plan *p = build(m, c);
    cz_memory_gpu *g = NULL;
    cz_error err;
    ck_assert_int_eq(cz__plan_memory(p, &g, &err), CZ_OK);
    /* Local elements per TP rank: embedding 128 x 64 = 8192, matrix 64 x 64 = 4096, norm 64.
     * Each starts at a multiple of 64 and the single bucket (default size 4e7) is padded to a
     * multiple of DP: 8192 + 4096 + 64 = 12352 elements. */
    ck_assert_uint_eq(p->nbuckets, 1);
    ck_assert_int_eq(p->buckets[0].size, 12352);
    int64_t owned[2] = {0, 0};
    for (size_t i = 0; i < p->nparams; i++)
        owned[p->params[i].dp_owner] += p->params[i].numel;
    ck_assert_int_eq(owned[0] + owned[1], 12352);
    for (int k = 0; k < 4; k++) {
        int r = k / 2;
        ck_assert_double_eq(g[k].params, 12352 * dtypes[_i].param_bytes);
        ck_assert_double_eq(g[k].grads, 12352 * dtypes[_i].grad_bytes);
        ck_assert_double_eq(g[k].master, (double)owned[r] * dtypes[_i].master_bytes);
        ck_assert_double_eq(g[k].state, p->metrics.memory[k]);
        ck_assert_double_eq(g[k].total, g[k].params + g[k].grads + g[k].master + g[k].state);
    }
    /* The matrix's Muon momentum lies on its host only: the GPUs differ. */
    size_t w = cz__memory_worst(g, 4);
    for (size_t k = 0; k < 4; k++)
        ck_assert(g[k].total <= g[w].total);
    free(g);
    cz_plan_free(p);
    cz_cluster_free(c);
    cz_model_free(m);
}
END_TEST

/* Sets the cluster's memory so that the busiest GPU uses `fraction` of it. */
static void set_fraction(cz_cluster *c, const cz_plan *p, double fraction)
{
    cz_memory_gpu *g = NULL;
    cz_error err;
    ck_assert_int_eq(cz__plan_memory(p, &g, &err), CZ_OK);
    c->device.memory_gib = g[cz__memory_worst(g, 4)].total / GIB / fraction;
    free(g);
}

START_TEST(test_memory_thresholds)
{
    cz_model *m = small_model(CZ_DTYPE_BF16);
    cz_cluster *c = czt_cluster_new(2, 2, 1);
    cz_plan *p = build(m, c);
    char note[1024];
    cz_error err;

    set_fraction(c, p, 0.5);
    ck_assert_int_eq(cz__plan_memory_check(p, c, 0, note, sizeof note, &err), CZ_OK);
    ck_assert_str_eq(note, "");
    set_fraction(c, p, CZ_MEMORY_WARN_FRACTION - 0.01);
    ck_assert_int_eq(cz__plan_memory_check(p, c, 0, note, sizeof note, &err), CZ_OK);
    ck_assert_str_eq(note, "");
    set_fraction(c, p, CZ_MEMORY_WARN_FRACTION + 0.01);
    ck_assert_int_eq(cz__plan_memory_check(p, c, 0, note, sizeof note, &err), CZ_OK);
    ck_assert_ptr_nonnull(strstr(note, "above 80%"));
    ck_assert_ptr_nonnull(strstr(note, "test-cluster.json"));
    set_fraction(c, p, 0.999);
    ck_assert_int_eq(cz__plan_memory_check(p, c, 0, note, sizeof note, &err), CZ_OK);
    ck_assert_ptr_nonnull(strstr(note, "above 80%"));
    set_fraction(c, p, 1.02);
    ck_assert_int_eq(cz__plan_memory_check(p, c, 0, note, sizeof note, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "more than the device holds"));
    ck_assert_ptr_nonnull(strstr(err.message, "--allow-oversubscribed-memory"));
    ck_assert_ptr_nonnull(strstr(err.message, "102%"));
    ck_assert_int_eq(cz__plan_memory_check(p, c, 1, note, sizeof note, &err), CZ_OK);
    ck_assert_ptr_nonnull(strstr(note, "planned anyway"));

    cz_plan_free(p);
    cz_cluster_free(c);
    cz_model_free(m);
}
END_TEST

static Suite *memory_suite(void)
{
    Suite *s = suite_create("memory");
    TCase *t = tcase_create("memory");
    tcase_add_loop_test(t, test_memory_parts, 0, (int)(sizeof dtypes / sizeof dtypes[0]));
    tcase_add_test(t, test_memory_thresholds);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(memory_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
