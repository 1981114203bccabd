/* linalg_plan.c: the column-major cuBLAS and cuSOLVER calls the CUDA backend makes for the
 * seam's row-major gemm, syevd and qr, and its workspace layouts. Each derived call is executed
 * here through the CPU's column-major cblas and LAPACKE, with exactly the parameters the CUDA
 * backend passes, and compared with the cpu backend's op on random cases; so a wrong transpose,
 * dimension, leading dimension, triangle or eigenvector layout fails here without a GPU. */
#include "cz_exec_testing.h"
#include "canzona_exec.h"
#include "cz_format.h"

#include <cblas.h>
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if __has_include(<lapacke.h>)
#include <lapacke.h>
#define HAVE_LAPACKE_H 1
#endif

static uint64_t rng = 88172645463325252ull;

static float urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int irand(int lo, int hi)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (int)(rng % (uint64_t)(hi - lo + 1));
}

static double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double d = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        d = e > d || isnan(e) ? e : d;
    }
    return d;
}

static void transpose(float *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++) {
            float t = a[i * n + j];
            a[i * n + j] = a[j * n + i];
            a[j * n + i] = t;
        }
}

START_TEST(gemm_hand_worked)
{
    /* C (2 x 3) = A^T B with A 4 x 2 (ld 5) and B 4 x 3 (ld 6), C ld 7: cuBLAS computes C^T
     * (3 x 2) = B^T A, i.e. its A is B read column-major (3 x 4 with ld 6, op T) and its B is A
     * read column-major (2 x 4 with ld 5, already A^T: op N). */
    cz_la_gemm g;
    ck_assert_int_eq(cz__la_gemm_plan(&g, 1, 0, 2, 3, 4, 5, 6, 7), 0);
    ck_assert_int_eq(g.swap_ab, 1);
    ck_assert_int_eq(g.ta, 0);
    ck_assert_int_eq(g.tb, 1);
    ck_assert_int_eq(g.m, 3);
    ck_assert_int_eq(g.n, 2);
    ck_assert_int_eq(g.k, 4);
    ck_assert_int_eq(g.lda, 6);
    ck_assert_int_eq(g.ldb, 5);
    ck_assert_int_eq(g.ldc, 7);
    /* Beyond cuBLAS's int: refused rather than truncated. */
    ck_assert_int_eq(cz__la_gemm_plan(&g, 0, 0, (int64_t)1 << 31, 1, 1, 1, 1, 1), -1);
}
END_TEST

START_TEST(gemm_random_against_cpu)
{
    cz_compute c;
    ck_assert_int_eq(cz__compute_open(&c, "cpu", NULL), 0);
    for (int trial = 0; trial < 200; trial++) {
        int ta = trial & 1, tb = (trial >> 1) & 1;
        int64_t m = irand(1, 9), n = irand(1, 9), k = irand(1, 9);
        /* Row-major shapes of the stored operands and padded row strides. */
        int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
        int64_t lda = ac + irand(0, 3), ldb = bc + irand(0, 3), ldc = n + irand(0, 3);
        float alpha = urand(), beta = trial % 3 ? urand() : 0.0f;
        float *a = malloc(sizeof(float) * (size_t)(ar * lda));
        float *b = malloc(sizeof(float) * (size_t)(br * ldb));
        float *c1 = malloc(sizeof(float) * (size_t)(m * ldc));
        float *c2 = malloc(sizeof(float) * (size_t)(m * ldc));
        for (int64_t i = 0; i < ar * lda; i++)
            a[i] = urand();
        for (int64_t i = 0; i < br * ldb; i++)
            b[i] = urand();
        for (int64_t i = 0; i < m * ldc; i++)
            c1[i] = c2[i] = urand();
        c.ops->gemm(&c, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c1, ldc);
        cz_la_gemm g;
        ck_assert_int_eq(cz__la_gemm_plan(&g, ta, tb, m, n, k, lda, ldb, ldc), 0);
        cblas_sgemm(CblasColMajor, g.ta ? CblasTrans : CblasNoTrans,
                    g.tb ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, alpha, g.swap_ab ? b : a,
                    g.lda, g.swap_ab ? a : b, g.ldb, beta, c2, g.ldc);
        ck_assert_msg(max_abs_diff(c1, c2, m * ldc) <= 1e-5,
                      "trial %d (ta %d tb %d %lldx%lldx%lld)", trial, ta, tb, (long long)m,
                      (long long)n, (long long)k);
        free(a), free(b), free(c1), free(c2);
    }
    cz__compute_close(&c);
}
END_TEST

#ifdef HAVE_LAPACKE_H
START_TEST(syevd_random_against_cpu)
{
    cz_compute c;
    ck_assert_int_eq(cz__compute_open(&c, "cpu", NULL), 0);
    if (!c.ops->syevd) {
        cz__compute_close(&c);
        return;
    }
    for (int trial = 0; trial < 60; trial++) {
        int64_t n = irand(1, 12);
        /* Not symmetric on purpose: the two triangles differ, so only the call that reads
         * the cpu backend's triangle gives its result. */
        float *m0 = malloc(sizeof(float) * (size_t)(n * n)),
              *a1 = malloc(sizeof(float) * (size_t)(n * n));
        float *a2 = malloc(sizeof(float) * (size_t)(n * n));
        float *w1 = malloc(sizeof(float) * (size_t)n), *w2 = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n * n; i++)
            m0[i] = urand();
        memcpy(a1, m0, sizeof(float) * (size_t)(n * n));
        memcpy(a2, m0, sizeof(float) * (size_t)(n * n));
        cz_linalg_work lw;
        ck_assert_int_eq(cz__compute_linalg_work(&c, n, n * n, &lw, NULL), 0);
        float *work = malloc(sizeof(float) * (size_t)lw.syevd);
        cz_error err;
        ck_assert_int_eq(c.ops->syevd(&c, a1, w1, n, work, &err), 0);

        cz_la_syevd p;
        ck_assert_int_eq(cz__la_syevd_plan(&p, n), 0);
        ck_assert_int_eq(
            LAPACKE_ssyevd(LAPACK_COL_MAJOR, 'V', p.upper ? 'U' : 'L', p.n, a2, p.lda, w2), 0);
        if (p.transpose_out)
            transpose(a2, n);
        ck_assert_msg(max_abs_diff(w1, w2, n) <= 1e-6, "eigenvalues, trial %d n %lld", trial,
                      (long long)n);
        ck_assert_msg(max_abs_diff(a1, a2, n * n) <= 1e-6, "eigenvectors, trial %d n %lld", trial,
                      (long long)n);
        /* The seam's promise, checked directly: column j is an eigenvector of the triangle
         * read (the row-major lower one) with eigenvalue w[j]. */
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < n; i++) {
                double s = 0;
                for (int64_t k = 0; k < n; k++) {
                    double sym = i >= k ? m0[i * n + k] : m0[k * n + i];
                    s += sym * a2[k * n + j];
                }
                ck_assert_double_le(fabs(s - (double)w2[j] * a2[i * n + j]), 1e-4);
            }
        free(m0), free(a1), free(a2), free(w1), free(w2), free(work);
    }
    cz__compute_close(&c);
}
END_TEST

START_TEST(qr_random_against_cpu)
{
    cz_compute c;
    ck_assert_int_eq(cz__compute_open(&c, "cpu", NULL), 0);
    if (!c.ops->qr) {
        cz__compute_close(&c);
        return;
    }
    for (int trial = 0; trial < 60; trial++) {
        int64_t n = irand(1, 12);
        float *m0 = malloc(sizeof(float) * (size_t)(n * n)),
              *a1 = malloc(sizeof(float) * (size_t)(n * n));
        float *a2 = malloc(sizeof(float) * (size_t)(n * n)),
              *tau = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n * n; i++)
            m0[i] = urand();
        memcpy(a1, m0, sizeof(float) * (size_t)(n * n));
        memcpy(a2, m0, sizeof(float) * (size_t)(n * n));
        cz_linalg_work lw;
        ck_assert_int_eq(cz__compute_linalg_work(&c, n, n * n, &lw, NULL), 0);
        float *work = malloc(sizeof(float) * (size_t)lw.qr);
        cz_error err;
        ck_assert_int_eq(c.ops->qr(&c, a1, n, work, &err), 0);

        cz_la_qr p;
        ck_assert_int_eq(cz__la_qr_plan(&p, n), 0);
        if (p.transpose_in)
            transpose(a2, n);
        ck_assert_int_eq(LAPACKE_sgeqrf(LAPACK_COL_MAJOR, p.m, p.n, a2, p.lda, tau), 0);
        ck_assert_int_eq(LAPACKE_sorgqr(LAPACK_COL_MAJOR, p.m, p.n, p.k, a2, p.lda, tau), 0);
        if (p.transpose_out)
            transpose(a2, n);
        ck_assert_msg(max_abs_diff(a1, a2, n * n) <= 1e-6, "trial %d n %lld", trial, (long long)n);
        /* Q^T M is upper triangular (Q is M's own Q, not its transpose's). */
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < i; j++) {
                double r = 0;
                for (int64_t k = 0; k < n; k++)
                    r += (double)a2[k * n + i] * m0[k * n + j];
                ck_assert_double_le(fabs(r), 1e-4);
            }
        free(m0), free(a1), free(a2), free(tau), free(work);
    }
    cz__compute_close(&c);
}
END_TEST
#endif

/* Every region of a layout starts 256-byte aligned inside the caller's buffer, the regions do
 * not overlap, and the last one ends inside total, whatever the buffer's float offset. */
static void check_layout(const cz_la_layout *l, const int64_t *len, int nreg)
{
    float *buf = malloc(sizeof(float) * (size_t)(l->total + 2 * CZ_LA_ALIGN));
    for (int shift = 0; shift < CZ_LA_ALIGN; shift++) {
        float *work = buf + shift, *base = cz__la_base(work);
        ck_assert_int_ge(base - work, 0);
        ck_assert_int_lt(base - work, CZ_LA_ALIGN);
        for (int r = 0; r < nreg; r++) {
            ck_assert_int_eq((uintptr_t)(base + l->off[r]) % (CZ_LA_ALIGN * sizeof(float)), 0);
            ck_assert(base + l->off[r] + len[r] <= work + l->total);
            if (r + 1 < nreg)
                ck_assert_int_le(l->off[r] + len[r], l->off[r + 1]);
        }
    }
    free(buf);
}

START_TEST(layouts)
{
    for (int trial = 0; trial < 50; trial++) {
        int64_t n = irand(1, 300), vn = irand(1, 100000), lw1 = irand(0, 5000),
                lw2 = irand(0, 5000);
        cz_la_layout l;
        cz__la_syevd_layout(&l, lw1);
        int64_t s[1] = {lw1};
        check_layout(&l, s, 1);
        cz__la_qr_layout(&l, n, lw1, lw2);
        int64_t q[2] = {n, lw1 > lw2 ? lw1 : lw2};
        check_layout(&l, q, 2);
        cz__la_sort_layout(&l, n, vn);
        int64_t o[3] = {2 * n, n, n * n > vn ? n * n : vn};
        check_layout(&l, o, 3);
    }
}
END_TEST

static int desc_cmp(const void *x, const void *y)
{
    const double *a = x, *b = y;
    return a[0] > b[0] ? -1 : a[0] < b[0] ? 1 : (a[1] > b[1]) - (a[1] < b[1]);
}

START_TEST(sort_order_is_a_stable_descending_sort)
{
    /* The place of each column (the count of columns that sort before it), as both backends
     * compute it, is a stable descending sort; with NaN estimates it is still a permutation. */
    for (int trial = 0; trial < 100; trial++) {
        int n = irand(1, 40);
        double est[40], pairs[80];
        int perm[40], seen[40] = {0};
        for (int j = 0; j < n; j++) {
            est[j] = (double)irand(-4, 4); /* many ties */
            if (trial % 10 == 9 && j % 7 == 3)
                est[j] = NAN;
            pairs[2 * j] = est[j], pairs[2 * j + 1] = j;
        }
        for (int j = 0; j < n; j++) {
            int place = 0;
            for (int k = 0; k < n; k++)
                place += cz_ew_sorts_before(est[k], k, est[j], j);
            ck_assert_int_lt(place, n);
            ck_assert_int_eq(seen[place]++, 0);
            perm[place] = j;
        }
        if (trial % 10 == 9)
            continue; /* NaN: only the permutation property is promised */
        qsort(pairs, (size_t)n, 2 * sizeof(double), desc_cmp);
        for (int j = 0; j < n; j++)
            ck_assert_int_eq(perm[j], (int)pairs[2 * j + 1]);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("linalg_plan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, gemm_hand_worked);
    tcase_add_test(tc, gemm_random_against_cpu);
#ifdef HAVE_LAPACKE_H
    tcase_add_test(tc, syevd_random_against_cpu);
    tcase_add_test(tc, qr_random_against_cpu);
#endif
    tcase_add_test(tc, layouts);
    tcase_add_test(tc, sort_order_is_a_stable_descending_sort);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
