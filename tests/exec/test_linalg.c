/* The linear-algebra ops of the seam (compute ops version 2) on small cases worked by hand,
 * the optional-op check, and the refusals of SOAP's and Shampoo's settings. The ops that
 * need LAPACKE (syevd, qr) are checked when the build has them. */
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "cz_format.h"

#include <check.h>
#include <math.h>
#include <string.h>

START_TEST(optional_ops)
{
    cz_compute c;
    ck_assert_int_eq(cz__compute_open(&c, "cpu", NULL), 0);
    const char *missing = "unset";
    bool has = cz__compute_has_linalg(&c, &missing);
    ck_assert(has == (c.ops->syevd != NULL && c.ops->qr != NULL));
    /* A backend without one of them is told apart, naming it. */
    cz_compute_ops ops = *c.ops;
    ops.gemm = NULL;
    cz_compute d = {.ops = &ops};
    ck_assert(!cz__compute_has_linalg(&d, &missing));
    ck_assert_str_eq(missing, "gemm");
    /* A version-2 table has no linalg_work (the solver's workspace would be unknown). */
    if (has) {
        cz_compute_ops v2 = *c.ops;
        v2.version = 2;
        cz_compute e = {.ops = &v2};
        ck_assert(!cz__compute_has_linalg(&e, &missing));
        ck_assert_str_eq(missing, "linalg_work");
    }
    cz__compute_close(&c);
}
END_TEST

START_TEST(inverse_root_shift)
{
    /* Distributed Shampoo's epsilon: the eigenvalues are first shifted so the smallest is 0,
     * then eps is added. w = (-1, 3), eps = 1, root 2: (0 + 1, 4 + 1)^(-1/2) = (1, 1/sqrt 5).
     * Adding eps alone would give (0^(-1/2), 4^(-1/2)) = (inf, 0.5). */
    cz_compute c;
    ck_assert_int_eq(cz__compute_open(&c, "cpu", NULL), 0);
    float q[4] = {1, 0, 0, 1}, w[2] = {-1, 3}, x[4];
    c.ops->eig_root_scale(&c, x, q, w, 2, 2.0f, 1.0f);
    ck_assert_float_eq_tol(x[0], 1.0f, 1e-6f);
    ck_assert_float_eq_tol(x[3], 1.0f / sqrtf(5.0f), 1e-6f);
    ck_assert_float_eq(x[1], 0.0f);
    /* Already non-negative: no shift. */
    float w2[2] = {3, 8};
    c.ops->eig_root_scale(&c, x, q, w2, 2, 4.0f, 0.0f);
    ck_assert_float_eq_tol(x[0], powf(3.0f, -0.25f), 1e-6f);
    ck_assert_float_eq_tol(x[3], powf(8.0f, -0.25f), 1e-6f);
    cz__compute_close(&c);
}
END_TEST

START_TEST(elementwise_ops)
{
    cz_compute c;
    ck_assert_int_eq(cz__compute_open(&c, "cpu", NULL), 0);
    float y[2] = {1, 2}, x[2] = {3, -4}, acc[2] = {1, 1}, d[2];
    c.ops->axpby(&c, y, x, 2, 0.5f, 2.0f); /* 0.5 + 6, 1 - 8 */
    ck_assert_float_eq(y[0], 6.5f);
    ck_assert_float_eq(y[1], -7.0f);
    c.ops->sq_accum(&c, acc, x, 2, 1.0f, 1.0f); /* 1 + 9, 1 + 16 */
    ck_assert_float_eq(acc[0], 10.0f);
    ck_assert_float_eq(acc[1], 17.0f);
    float a2[2] = {9, 16};
    c.ops->graft_div(&c, d, x, a2, 2, 1.0f, 0.0f); /* 3/3, -4/4 */
    ck_assert_float_eq(d[0], 1.0f);
    ck_assert_float_eq(d[1], -1.0f);
    double *nd = c.ops->alloc(&c, 2 * sizeof(double));
    nd[0] = 4.0, nd[1] = 1.0;
    c.ops->scale_ratio(&c, x, 2, &nd[0], &nd[1]); /* x *= 2 */
    ck_assert_float_eq(x[0], 6.0f);
    nd[1] = 0.0;
    c.ops->scale_ratio(&c, x, 2, &nd[0], &nd[1]); /* a zero norm gives zero, not inf */
    ck_assert_float_eq(x[0], 0.0f);
    c.ops->release(&c, nd);
    /* gemm with transposes and strides: C = A^T B with A 2x2 in a row of stride 3. */
    float A[6] = {1, 2, 99, 3, 4, 99}, B[4] = {1, 0, 0, 1}, C[4] = {0};
    c.ops->gemm(&c, 1, 0, 2, 2, 2, 1.0f, A, 3, B, 2, 0.0f, C, 2);
    ck_assert_float_eq(C[0], 1.0f);
    ck_assert_float_eq(C[1], 3.0f);
    ck_assert_float_eq(C[2], 2.0f);
    ck_assert_float_eq(C[3], 4.0f);
    float T[4];
    c.ops->tile_copy(&c, T, 2, A + 1, 3, 2, 2); /* {2, 99; 4, 99} */
    ck_assert_float_eq(T[0], 2.0f);
    ck_assert_float_eq(T[2], 4.0f);
    cz__compute_close(&c);
}
END_TEST

START_TEST(basis_sort_permutes)
{
    /* q = I, mq = diag(1, 3): est = (1, 3), so the columns swap, and v (2 x 3) is permuted
     * along side 0 (rows) the same way. */
    cz_compute c;
    ck_assert_int_eq(cz__compute_open(&c, "cpu", NULL), 0);
    float q[4] = {1, 0, 0, 1}, mq[4] = {1, 0, 0, 3}, v[6] = {1, 2, 3, 4, 5, 6};
    float work[64];
    cz_linalg_work lw;
    ck_assert_int_eq(cz__compute_linalg_work(&c, 2, 6, &lw, NULL), 0);
    ck_assert_int_le(lw.sort, 64);
    c.ops->basis_sort(&c, q, mq, 2, v, 2, 3, 0, work);
    ck_assert_float_eq(q[0], 0.0f);
    ck_assert_float_eq(q[1], 1.0f);
    ck_assert_float_eq(mq[2], 3.0f); /* row 1 of the swapped diag(1, 3) */
    ck_assert_float_eq(v[0], 4.0f);
    ck_assert_float_eq(v[3], 1.0f);
    /* Along side 1 (columns) of a 3 x 2 v. */
    float q2[4] = {1, 0, 0, 1}, mq2[4] = {1, 0, 0, 3}, v2[6] = {1, 2, 3, 4, 5, 6};
    c.ops->basis_sort(&c, q2, mq2, 2, v2, 3, 2, 1, work);
    ck_assert_float_eq(v2[0], 2.0f);
    ck_assert_float_eq(v2[1], 1.0f);
    cz__compute_close(&c);
}
END_TEST

START_TEST(lapack_ops)
{
    cz_compute c;
    ck_assert_int_eq(cz__compute_open(&c, "cpu", NULL), 0);
    if (!c.ops->syevd || !c.ops->qr) {
        cz__compute_close(&c);
        return; /* built without LAPACKE: nothing to check */
    }
    /* [[2, 1], [1, 2]]: eigenvalues 1 and 3, eigenvectors (1, -1) and (1, 1) / sqrt 2, as
     * columns. */
    float a[4] = {2, 1, 1, 2}, w[2], work[256];
    cz_error err;
    cz_linalg_work lw;
    ck_assert_int_eq(cz__compute_linalg_work(&c, 2, 4, &lw, NULL), 0);
    ck_assert_int_le(lw.syevd, 256);
    ck_assert_int_eq(c.ops->syevd(&c, a, w, 2, work, &err), 0);
    ck_assert_float_eq_tol(w[0], 1.0f, 1e-6f);
    ck_assert_float_eq_tol(w[1], 3.0f, 1e-6f);
    ck_assert_float_eq_tol(fabsf(a[0]), (float)M_SQRT1_2, 1e-6f);
    ck_assert_float_eq_tol(a[0] * a[2], -0.5f, 1e-6f); /* column 0 is (1, -1)/sqrt 2 */
    ck_assert_float_eq_tol(a[1] * a[3], 0.5f, 1e-6f);  /* column 1 is (1, 1)/sqrt 2 */
    /* QR of [[3, 1], [4, 2]]: Q orthonormal, Q^T A upper triangular. */
    float m[4] = {3, 1, 4, 2}, q[4];
    memcpy(q, m, sizeof q);
    ck_assert_int_le(lw.qr, 256);
    ck_assert_int_eq(c.ops->qr(&c, q, 2, work, &err), 0);
    ck_assert_float_eq_tol(q[0] * q[0] + q[2] * q[2], 1.0f, 1e-6f);
    ck_assert_float_eq_tol(q[0] * q[1] + q[2] * q[3], 0.0f, 1e-6f);
    float r10 = q[1] * m[0] + q[3] * m[2]; /* (Q^T A)[1][0] */
    ck_assert_float_eq_tol(r10, 0.0f, 1e-5f);
    ck_assert_float_eq_tol(fabsf(q[0]), 0.6f, 1e-6f);
    cz__compute_close(&c);
}
END_TEST

START_TEST(settings_refused)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cz_shampoo_hparams sh;
    cz_soap_hparams so;
    cz_error err;
    ck_assert_int_eq(cz__shampoo_hparams_from_config(&sh, &cfg, 10, &err), 0);
    ck_assert_float_eq(sh.lr, CZ_SHAMPOO_LR);
    ck_assert_int_eq(sh.start_step, 10);
    ck_assert_int_eq(sh.max_dim, 1024);
    ck_assert_int_eq(sh.grafting, CZ_GRAFT_ADAGRAD);
    cfg.shampoo.start_step = 5;
    ck_assert_int_eq(cz__shampoo_hparams_from_config(&sh, &cfg, 10, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "before the first preconditioner refresh"));
    cz_exec_config_init(&cfg);
    cfg.shampoo.beta2 = 0.0f;
    ck_assert_int_eq(cz__shampoo_hparams_from_config(&sh, &cfg, 10, &err), CZ_EINVALID);
    cz_exec_config_init(&cfg);
    cfg.shampoo.grafting = (cz_shampoo_grafting)7;
    ck_assert_int_eq(cz__shampoo_hparams_from_config(&sh, &cfg, 10, &err), CZ_EINVALID);
    cz_exec_config_init(&cfg);
    cfg.shampoo.grafting = CZ_GRAFT_ADAM;
    ck_assert_int_eq(cz__shampoo_hparams_from_config(&sh, &cfg, 10, &err), 0);
    ck_assert_float_eq(sh.graft_beta2, 0.999f);
    cz_exec_config_init(&cfg);
    ck_assert_int_eq(cz__soap_hparams_from_config(&so, &cfg, 10, 10000, &err), 0);
    ck_assert_float_eq(so.lr, CZ_SOAP_LR);
    ck_assert_float_eq(so.shampoo_beta, 0.95f);
    cfg.soap.eps = 0.0f;
    ck_assert_int_eq(cz__soap_hparams_from_config(&so, &cfg, 10, 10000, &err), CZ_EINVALID);
    cz_exec_config_init(&cfg);
    cfg.soap.beta1 = 1.0f;
    ck_assert_int_eq(cz__soap_hparams_from_config(&so, &cfg, 10, 10000, &err), CZ_EINVALID);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_linalg");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, optional_ops);
    tcase_add_test(tc, inverse_root_shift);
    tcase_add_test(tc, elementwise_ops);
    tcase_add_test(tc, basis_sort_permutes);
    tcase_add_test(tc, lapack_ops);
    tcase_add_test(tc, settings_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
