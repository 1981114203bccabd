/* bf16 parameters and gradients with an fp32 master copy, typed binding, memory space and
 * stream refusals, and the non-blocking step. */
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "cz_format.h"
#include "exec_fixture.h"

#include <check.h>
#include <math.h>

static const fx_param PARAMS[] = {
    {"emb", 2, 8, 4, 0, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
    {"qkv", 2, 6, 4, 0, CZ_KIND_MATRIX, 0, 2, {2, 4}},
    {"proj", 2, 4, 6, 1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"norm", 1, 4, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
};
#define NP ((int)(sizeof PARAMS / sizeof PARAMS[0]))

static cz_exec_config self_cfg(void)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    return cfg;
}

START_TEST(bf16_rounding)
{
    /* Round to nearest even at bf16's 8-bit significand; NaN stays NaN. */
    ck_assert_uint_eq(cz__bf16_from_f32(1.0f), 0x3f80);
    ck_assert_uint_eq(cz__bf16_from_f32(1.0f + 0x1p-8f), 0x3f80); /* tie -> even */
    ck_assert_uint_eq(cz__bf16_from_f32(1.0f + 0x1p-8f + 0x1p-16f), 0x3f81);
    ck_assert_uint_eq(cz__bf16_from_f32(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie -> even (up) */
    ck_assert_uint_eq(cz__bf16_from_f32(-2.0f), 0xc000);
    ck_assert(isnan(cz__f32_from_bf16(cz__bf16_from_f32(NAN))));
    ck_assert(isinf(cz__f32_from_bf16(cz__bf16_from_f32(INFINITY))));
    ck_assert_float_eq(cz__f32_from_bf16(0x3f81), 1.0f + 0x1p-7f);
}
END_TEST

/* A bf16 run keeps fp32 master weights: its bf16 parameters after every step are exactly the
 * fp32 executor's parameters, rounded, when the fp32 run is given the same (bf16-valued)
 * initial parameters and gradients. Flat and per-parameter bf16 bindings agree. */
START_TEST(bf16_master_copy)
{
    cz_exec_config c32 = self_cfg(), c16 = self_cfg();
    c16.dtype = CZ_DTYPE_BF16;
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    cz_executor *a = NULL, *b = NULL, *pp = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&a, pl, &c32, &err), 0);
    ck_assert_int_eq(cz_executor_create_from_plan(&b, pl, &c16, &err), 0);
    ck_assert_int_eq(cz_executor_create_from_plan(&pp, pl, &c16, &err), 0);
    ck_assert_int_eq(cz_executor_dtype(a), CZ_DTYPE_FP32);
    ck_assert_int_eq(cz_executor_dtype(b), CZ_DTYPE_BF16);
    size_t n = cz_executor_buffer_numel(a);
    float *P = calloc(n, sizeof(float)), *G = calloc(n, sizeof(float));
    uint16_t *Pb = calloc(n, 2), *Gb = calloc(n, 2), *Pp = calloc(n, 2), *Gp = calloc(n, 2);
    for (size_t k = 0; k < n; k++) {
        Pb[k] = Pp[k] = cz__bf16_from_f32(0.5f * fx_val(k));
        P[k] = cz__f32_from_bf16(Pb[k]);
    }
    /* fp32 buffers are refused by a bf16 executor, and the other way round. */
    ck_assert_int_eq(cz_executor_bind_buffers(b, P, G, n, &err), CZ_EMISMATCH);
    ck_assert_ptr_nonnull(strstr(err.message, "dtype fp32 but this executor binds bf16"));
    ck_assert_int_eq(cz_executor_bind_typed(a, Pb, Gb, n, CZ_DTYPE_BF16, &err), CZ_EMISMATCH);
    ck_assert_int_eq(cz_executor_bind_buffers(a, P, G, n, &err), 0);
    ck_assert_int_eq(cz_executor_bind_typed(b, Pb, Gb, n, CZ_DTYPE_BF16, &err), 0);
    for (int i = 0; i < NP; i++) {
        const cz_plan_param *p = &pl->params[i];
        ck_assert_int_eq(cz_executor_bind_param_typed(
                             pp, p->def.name, Pp + p->offset, Gp + p->offset, p->local_shape[0],
                             p->def.ndim == 1 ? 1 : p->local_shape[1], CZ_DTYPE_BF16, &err),
                         0);
    }
    int differs = 0;
    for (int s = 0; s < 4; s++) {
        for (size_t k = 0; k < n; k++) {
            Gb[k] = Gp[k] = cz__bf16_from_f32(fx_val(1000003 * (uint64_t)(s + 1) + k));
            G[k] = cz__f32_from_bf16(Gb[k]);
        }
        ck_assert_int_eq(cz_executor_step(a, &err), 0);
        ck_assert_int_eq(cz_executor_step(b, &err), 0);
        ck_assert_int_eq(cz_executor_step(pp, &err), 0);
        for (size_t k = 0; k < n; k++) {
            ck_assert_uint_eq(Pb[k], cz__bf16_from_f32(P[k]));
            ck_assert_uint_eq(Pp[k], Pb[k]);
            /* Without the master copy (bf16 read back every step) the run would drift. */
            differs += cz__f32_from_bf16(Pb[k]) != P[k];
        }
    }
    ck_assert_int_gt(differs, 0);
    ck_assert_double_eq_tol(cz_executor_grad_norm(b), cz_executor_grad_norm(a),
                            1e-12 * cz_executor_grad_norm(a));
    cz_executor_free(a);
    cz_executor_free(b);
    cz_executor_free(pp);
    cz_plan_free(pl);
    free(P), free(G), free(Pb), free(Gb), free(Pp), free(Gp);
}
END_TEST

START_TEST(space_and_dtype_refusals)
{
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    cz_executor *ex = NULL;
    cz_error err;
    cz_exec_config cfg = self_cfg();
    cfg.memory = CZ_EXEC_MEMORY_DEVICE;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "memory = device is not available"));
    cfg = self_cfg();
    int dummy;
    cfg.stream = &dummy;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "takes no stream"));
    cfg = self_cfg();
    cfg.dtype = CZ_DTYPE_FP16;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "parameter dtype fp16"));
    /* The plan's dtype is the default. */
    cfg = self_cfg();
    pl->dtype = CZ_DTYPE_BF16;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), 0);
    ck_assert_int_eq(cz_executor_dtype(ex), CZ_DTYPE_BF16);
    cz_executor_free(ex);
    cz_plan_free(pl);
}
END_TEST

START_TEST(async_step)
{
    cz_exec_config cfg = self_cfg();
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    cz_executor *a = NULL, *b = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&a, pl, &cfg, &err), 0);
    ck_assert_int_eq(cz_executor_create_from_plan(&b, pl, &cfg, &err), 0);
    size_t n = cz_executor_buffer_numel(a);
    float *Pa = calloc(n, sizeof(float)), *Ga = calloc(n, sizeof(float));
    float *Pb = calloc(n, sizeof(float)), *Gb = calloc(n, sizeof(float));
    for (size_t k = 0; k < n; k++)
        Pa[k] = Pb[k] = 0.5f * fx_val(k);
    ck_assert_int_eq(cz_executor_bind_buffers(a, Pa, Ga, n, &err), 0);
    ck_assert_int_eq(cz_executor_bind_buffers(b, Pb, Gb, n, &err), 0);
    ck_assert_int_eq(cz_executor_wait(b, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "no step was started"));
    for (int s = 0; s < 2; s++) {
        for (size_t k = 0; k < n; k++)
            Ga[k] = Gb[k] = fx_val(77 * (uint64_t)(s + 1) + k);
        ck_assert_int_eq(cz_executor_step(a, &err), 0);
        ck_assert_int_eq(cz_executor_step_async(b, &err), 0);
        ck_assert_int_eq(cz_executor_step_async(b, &err), CZ_EINVALID);
        ck_assert_ptr_nonnull(strstr(err.message, "not waited for"));
        ck_assert_int_eq(cz_executor_wait(b, &err), 0);
        for (size_t k = 0; k < n; k++)
            ck_assert_float_eq(Pa[k], Pb[k]);
    }
    /* A failing step reports its error at the wait. */
    Gb[pl->params[2].offset] = NAN;
    ck_assert_int_eq(cz_executor_step_async(b, &err), 0);
    cz_error_clear(&err);
    ck_assert_int_eq(cz_executor_wait(b, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "gradient of 'proj' holds NaN"));
    cz_executor_free(a);
    cz_executor_free(b);
    cz_plan_free(pl);
    free(Pa), free(Ga), free(Pb), free(Gb);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_dtype");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, bf16_rounding);
    tcase_add_test(tc, bf16_master_copy);
    tcase_add_test(tc, space_and_dtype_refusals);
    tcase_add_test(tc, async_step);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
