/* The column-major calls behind the CUDA backend's linear algebra, and its workspace layouts
 * (see linalg_plan.h). Always built: the CPU tests check it in every configuration. */
#include "linalg_plan.h"

#include <limits.h>

static int fits(int64_t v)
{
    return v >= 0 && v <= INT_MAX;
}

int cz__la_gemm_plan(cz_la_gemm *g, int transa, int transb, int64_t m, int64_t n, int64_t k,
                     int64_t lda, int64_t ldb, int64_t ldc)
{
    if (!fits(m) || !fits(n) || !fits(k) || !fits(lda) || !fits(ldb) || !fits(ldc))
        return -1;
    /* Row-major C (m x n, ld ldc) is column-major C^T (n x m): C^T = op(b)^T op(a)^T, and a
     * row-major operand read column-major is already transposed, so each keeps its own
     * transpose flag and leading dimension. */
    *g = (cz_la_gemm){
        .ta = transb ? 1 : 0,
        .tb = transa ? 1 : 0,
        .m = (int)n,
        .n = (int)m,
        .k = (int)k,
        .lda = (int)ldb,
        .ldb = (int)lda,
        .ldc = (int)ldc,
        .swap_ab = 1,
    };
    return 0;
}

int cz__la_syevd_plan(cz_la_syevd *s, int64_t n)
{
    if (!fits(n))
        return -1;
    *s = (cz_la_syevd){.n = (int)n, .lda = n > 0 ? (int)n : 1, .upper = 1, .transpose_out = 1};
    return 0;
}

int cz__la_qr_plan(cz_la_qr *q, int64_t n)
{
    if (!fits(n))
        return -1;
    *q = (cz_la_qr){.m = (int)n,
                    .n = (int)n,
                    .k = (int)n,
                    .lda = n > 0 ? (int)n : 1,
                    .transpose_in = 1,
                    .transpose_out = 1};
    return 0;
}

float *cz__la_base(float *work)
{
    uintptr_t a = (uintptr_t)work, m = CZ_LA_ALIGN * sizeof(float);
    return (float *)(void *)((a + m - 1) / m * m);
}

int64_t cz__la_round(int64_t n)
{
    return (n + CZ_LA_ALIGN - 1) / CZ_LA_ALIGN * CZ_LA_ALIGN;
}

/* The slack for aligning an only float-aligned start. */
#define CZ_LA_SLACK (CZ_LA_ALIGN - 1)

void cz__la_syevd_layout(cz_la_layout *l, int64_t lwork)
{
    *l = (cz_la_layout){.off = {0, 0, 0}, .total = CZ_LA_SLACK + lwork};
}

void cz__la_qr_layout(cz_la_layout *l, int64_t n, int64_t lwork_geqrf, int64_t lwork_orgqr)
{
    int64_t lw = lwork_geqrf > lwork_orgqr ? lwork_geqrf : lwork_orgqr;
    *l = (cz_la_layout){.off = {0, cz__la_round(n), 0}};
    l->total = CZ_LA_SLACK + l->off[1] + lw;
}

void cz__la_sort_layout(cz_la_layout *l, int64_t n, int64_t vn)
{
    int64_t copy = n * n > vn ? n * n : vn;
    *l = (cz_la_layout){.off = {0, cz__la_round(2 * n), 0}};
    l->off[2] = l->off[1] + cz__la_round(n);
    l->total = CZ_LA_SLACK + l->off[2] + copy;
}

int cz__la_factored_sides(int64_t rows, int64_t cols, int64_t max_dim, int64_t out[2])
{
    int n = 0;
    if (rows > 0 && rows <= max_dim)
        out[n++] = rows;
    if (cols > 0 && cols <= max_dim && !(n && out[0] == cols))
        out[n++] = cols;
    return n;
}
