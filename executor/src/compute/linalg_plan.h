/*
 * linalg_plan.h — the column-major cuBLAS and cuSOLVER calls that carry out the seam's
 * row-major linear-algebra ops (gemm, syevd, qr) on the CUDA backend, and how the backend
 * lays out the solver's workspace inside the caller's `work` buffer. Plain C, so that every
 * parameter the CUDA backend hands cuBLAS or cuSOLVER is decided here and checked on the CPU:
 * tests/exec/test_linalg_plan.c executes each derived column-major call through cblas and
 * LAPACKE and compares it with the cpu backend's row-major op on random cases.
 *
 * The one fact behind every mapping: a row-major matrix M with row stride ld, read column-major
 * with leading dimension ld, is M^T.
 */
#ifndef CZ_LINALG_PLAN_H
#define CZ_LINALG_PLAN_H

#include <stdint.h>

/* cublasSgemm(handle, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc) for the row-major
 * C = alpha op(a) op(b) + beta C: C^T = op(b)^T op(a)^T, so cuBLAS's A is the row-major b
 * (swap_ab = 1), its B the row-major a, and m, n trade places. ta/tb: 1 = CUBLAS_OP_T. */
typedef struct cz_la_gemm {
    int ta, tb;
    int m, n, k;
    int lda, ldb, ldc;
    int swap_ab; /* 1: pass the row-major b as cuBLAS's A and a as its B */
} cz_la_gemm;
/* 0, or -1 when a size does not fit cuBLAS's int (the call cannot be made). */
int cz__la_gemm_plan(cz_la_gemm *g, int transa, int transb, int64_t m, int64_t n, int64_t k,
                     int64_t lda, int64_t ldb, int64_t ldc);

/* cusolverDnSsyevd(handle, CUSOLVER_EIG_MODE_VECTOR, uplo, n, A, lda, W, work, lwork, info)
 * on the row-major symmetric n x n matrix in place. Read column-major it is its own transpose,
 * so no copy goes in; uplo names the triangle of the column-major view that the solver reads
 * (upper = the row-major lower triangle, as the cpu backend's LAPACKE call reads it, so the two
 * backends see the same half of a matrix a GEMM made not bitwise symmetric). The eigenvectors
 * come back as the columns of the column-major matrix, i.e. the rows of the row-major one: the
 * seam promises them in columns, so the backend transposes after (transpose_out). */
typedef struct cz_la_syevd {
    int n, lda;
    int upper; /* 1: CUBLAS_FILL_MODE_UPPER */
    int transpose_out;
} cz_la_syevd;
int cz__la_syevd_plan(cz_la_syevd *s, int64_t n);

/* cusolverDnSgeqrf(handle, m, n, A, lda, tau, ...) then cusolverDnSorgqr(handle, m, n, k, A,
 * lda, tau, ...) for the Q of the row-major n x n matrix: QR factors the matrix itself, not its
 * transpose, so the backend transposes before (transpose_in) and after (transpose_out). */
typedef struct cz_la_qr {
    int m, n, k, lda;
    int transpose_in, transpose_out;
} cz_la_qr;
int cz__la_qr_plan(cz_la_qr *q, int64_t n);

/* Workspace layouts inside the seam's float `work` buffer, whose start is only float-aligned
 * (it is an offset into a larger buffer). Each region starts on a CZ_LA_ALIGN-float (256-byte)
 * boundary counted from cz__la_base(work); the totals include the slack for that first
 * alignment. */
#define CZ_LA_ALIGN 64
/* work rounded up to the next 256-byte boundary. */
float *cz__la_base(float *work);
/* n floats rounded up to a multiple of CZ_LA_ALIGN. */
int64_t cz__la_round(int64_t n);
typedef struct cz_la_layout {
    int64_t off[3]; /* floats from cz__la_base(work) to each region */
    int64_t total;  /* floats the caller's work must hold */
} cz_la_layout;
/* syevd: [solver workspace: lwork floats]. */
void cz__la_syevd_layout(cz_la_layout *l, int64_t lwork);
/* qr: [tau: n][solver workspace: max(geqrf's, orgqr's lwork)]. */
void cz__la_qr_layout(cz_la_layout *l, int64_t n, int64_t lwork_geqrf, int64_t lwork_orgqr);
/* basis_sort: [est: n doubles][perm: n ints][copy: max(n*n, vn) floats]. */
void cz__la_sort_layout(cz_la_layout *l, int64_t n, int64_t vn);

/* The sizes a preconditioner's solver calls take for a rows x cols block or tile: every side
 * not longer than max_dim keeps a factor (SOAP leaves a longer side unrotated; Shampoo's tiles
 * are never longer), and syevd, qr and basis_sort are called with that side's n. Writes the
 * distinct sides to out, the rows' first; returns how many (0 to 2). The one rule by which the
 * optimizers ask linalg_work for every n their steps will use: a backend that sizes by exact n
 * (cuSOLVER's workspace queries) then has every one. */
int cz__la_factored_sides(int64_t rows, int64_t cols, int64_t max_dim, int64_t out[2]);

#endif /* CZ_LINALG_PLAN_H */
