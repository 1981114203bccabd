/* The cpu backend's linear-algebra operations (compute ops version 2): cblas_sgemm for the
 * products, LAPACKE's ssyevd for symmetric eigendecompositions, plain loops for the rest.
 * Built without LAPACKE (CZ_HAVE_LAPACKE unset) the backend has no syevd, and the executor
 * refuses Shampoo plans with a message saying so. */
#include "elementwise.h"
#include "compute.h"
#include "cz_format.h"

#include <cblas.h>
#include <math.h>

#ifdef CZ_HAVE_LAPACKE
#include <lapacke.h>
#endif

static int64_t cpu_syevd_work(int64_t n)
{
    /* ssyevd with eigenvectors: lwork = 1 + 6n + 2n^2 floats, liwork = 3 + 5n integers (kept
     * in the same buffer; a lapack_int is as wide as a float). */
    return (1 + 6 * n + 2 * n * n) + (3 + 5 * n);
}

void cz__cpu_gemm(cz_compute *c, int transa, int transb, int64_t m, int64_t n, int64_t k,
                  float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                  float *cm, int64_t ldc)
{
    (void)c;
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                (int)ldb, beta, cm, (int)ldc);
}

void cz__cpu_tile_copy(cz_compute *c, float *dst, int64_t ldd, const float *src, int64_t lds,
                       int64_t rows, int64_t cols)
{
    (void)c;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            dst[i * ldd + j] = src[i * lds + j];
}

#ifdef CZ_HAVE_LAPACKE
static void transpose_sq(float *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++) {
            float t = a[i * n + j];
            a[i * n + j] = a[j * n + i];
            a[j * n + i] = t;
        }
}

int cz__cpu_syevd(cz_compute *c, float *a, float *w, int64_t n, float *work, cz_error *err)
{
    (void)c;
    lapack_int lwork = (lapack_int)(1 + 6 * n + 2 * n * n), liwork = (lapack_int)(3 + 5 * n);
    /* A symmetric matrix reads the same in either order: solve it column-major (the row-major
     * LAPACKE path would allocate a transposed copy every call). The eigenvectors come back
     * as the columns of a column-major matrix, i.e. the rows of ours: transpose in place. */
    lapack_int info =
        LAPACKE_ssyevd_work(LAPACK_COL_MAJOR, 'V', 'U', (lapack_int)n, a, (lapack_int)n, w, work,
                            lwork, (lapack_int *)(work + lwork), liwork);
    if (info != 0)
        return cz__error_set(err, CZ_EINTERNAL,
                             "ssyevd of a %lld x %lld preconditioner factor failed (info %d: %s)",
                             (long long)n, (long long)n, (int)info,
                             info > 0 ? "did not converge; the factor holds NaN/Inf or is badly "
                                        "scaled"
                                      : "bad argument");
    transpose_sq(a, n);
    return CZ_OK;
}
#endif

void cz__cpu_eig_root_scale(cz_compute *c, float *dst, const float *q, const float *w, int64_t n,
                            float root, float eps)
{
    (void)c;
    float lo = 0.0f;
    for (int64_t j = 0; j < n; j++)
        lo = cz_ew_eig_min(lo, w[j]);
    for (int64_t j = 0; j < n; j++) {
        double s = cz_ew_root_scale(w[j], lo, eps, root);
        for (int64_t i = 0; i < n; i++)
            dst[i * n + j] = cz_ew_root_apply(q[i * n + j], s);
    }
}

void cz__cpu_axpby(cz_compute *c, float *y, const float *x, int64_t n, float a, float b)
{
    (void)c;
    for (int64_t i = 0; i < n; i++)
        y[i] = cz_ew_axpby(y[i], x[i], a, b);
}

void cz__cpu_sq_accum(cz_compute *c, float *acc, const float *x, int64_t n, float a, float b)
{
    (void)c;
    for (int64_t i = 0; i < n; i++)
        acc[i] = cz_ew_sq_accum(acc[i], x[i], a, b);
}

void cz__cpu_graft_div(cz_compute *c, float *dst, const float *x, const float *acc, int64_t n,
                       float inv_bias, float eps)
{
    (void)c;
    for (int64_t i = 0; i < n; i++)
        dst[i] = cz_ew_graft_div(x[i], acc[i], inv_bias, eps);
}

void cz__cpu_scale_ratio(cz_compute *c, float *x, int64_t n, const double *num, const double *den)
{
    (void)c;
    float f = cz_ew_ratio(*num, *den);
    for (int64_t i = 0; i < n; i++)
        x[i] *= f;
}

static int64_t cpu_qr_work(int64_t n)
{
    /* tau (n) and a blocked workspace of 64 columns for sgeqrf and sorgqr. */
    return n + 64 * n;
}

static int64_t cpu_sort_work(int64_t n, int64_t vn)
{
    /* est as doubles (2n floats), the permutation (n ints), a copy of the largest operand. */
    return 3 * n + (n * n > vn ? n * n : vn);
}

#ifdef CZ_HAVE_LAPACKE
int cz__cpu_qr(cz_compute *c, float *a, int64_t n, float *work, cz_error *err)
{
    (void)c;
    /* Column-major in place (the row-major LAPACKE path allocates a copy). */
    transpose_sq(a, n);
    float *tau = work, *w = work + n;
    lapack_int ln = (lapack_int)n, lw = (lapack_int)(64 * n);
    lapack_int info = LAPACKE_sgeqrf_work(LAPACK_COL_MAJOR, ln, ln, a, ln, tau, w, lw);
    if (!info)
        info = LAPACKE_sorgqr_work(LAPACK_COL_MAJOR, ln, ln, ln, a, ln, tau, w, lw);
    if (info)
        return cz__error_set(err, CZ_EINTERNAL, "QR of a %lld x %lld eigenbasis failed (info %d)",
                             (long long)n, (long long)n, (int)info);
    transpose_sq(a, n);
    return CZ_OK;
}
#endif

void cz__cpu_basis_sort(cz_compute *c, float *q, float *mq, int64_t n, float *v, int64_t rows,
                        int64_t cols, int side, float *work)
{
    (void)c;
    double *est = (double *)(void *)work;
    int *perm = (int *)(void *)(work + 2 * n);
    float *tmp = work + 3 * n;
    for (int64_t j = 0; j < n; j++) {
        double e = 0.0;
        for (int64_t i = 0; i < n; i++)
            e += (double)q[i * n + j] * (double)mq[i * n + j];
        est[j] = e;
    }
    /* perm[place of j] = j, the place being the number of columns that sort before j (the
     * CUDA backend's order, computed the same way): O(n^2), once per refresh, next to an
     * O(n^3) QR. */
    for (int64_t j = 0; j < n; j++) {
        int64_t place = 0;
        for (int64_t k = 0; k < n; k++)
            place += cz_ew_sorts_before(est[k], k, est[j], j);
        perm[place] = (int)j;
    }
    float *mats[2] = {q, mq};
    for (int k = 0; k < 2; k++) {
        for (int64_t e = 0; e < n * n; e++)
            tmp[e] = mats[k][e];
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++)
                mats[k][i * n + j] = tmp[i * n + perm[j]];
    }
    if (!v)
        return;
    for (int64_t e = 0; e < rows * cols; e++)
        tmp[e] = v[e];
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            v[i * cols + j] = side == 0 ? tmp[perm[i] * cols + j] : tmp[i * cols + perm[j]];
}

int cz__cpu_linalg_work(cz_compute *c, int64_t n, int64_t vn, cz_linalg_work *out, cz_error *err)
{
    (void)c, (void)err;
    *out = (cz_linalg_work){
        .syevd = cpu_syevd_work(n), .qr = cpu_qr_work(n), .sort = cpu_sort_work(n, vn)};
    return CZ_OK;
}
