/* The cuda backend's linear-algebra ops (compute ops versions 2 and 3; SOAP and Shampoo):
 * cuBLAS for the products, cuSOLVER for the symmetric eigendecomposition (cusolverDnSsyevd)
 * and the QR (cusolverDnSgeqrf + cusolverDnSorgqr), linalg_kernels.cu for the rest. Every
 * parameter of a cuBLAS or cuSOLVER call comes from linalg_plan.c (checked on the CPU), which
 * maps the seam's row-major matrices onto the libraries' column-major ones.
 *
 * Nothing here waits for the device or allocates in a step:
 *   - cuSOLVER's workspace sizes are queried in linalg_work, which the optimizers call at
 *     create time for every side they will factor; the step looks its n up in that table, and
 *     the workspace itself lies in the caller's `work` buffer (linalg_plan.h's layouts).
 *   - basis_sort orders the columns on the device (one column per thread counts the columns
 *     that sort before it; n is at most max_precond_dim, so O(n^2) work is small next to the
 *     refresh's O(n^3) QR) and permutes by gathers: no read-back of the estimates.
 *   - the solvers' devInfo is not read after each call (that would be a host sync per call).
 *     A one-thread kernel after each call folds a non-zero devInfo into a flag in mapped host
 *     memory (the first failure wins), and the backend's host wait (cz__cuda_host_wait: the
 *     step's finiteness read, event_sync before a host-driven plane touches a buffer, and
 *     cz_executor_wait) reports it as the wait's error once the stream has passed it. So a
 *     failed solve is reported at the first host wait after it: in the same step with the
 *     mpi or self plane (they wait before sending the update), at cz_executor_wait or at the
 *     next step's finiteness read with nccl; the parameters that step updated then hold what
 *     the failed solve produced, as the error message says. A solve fails only on a factor
 *     holding NaN/Inf, which the finiteness check keeps out of the factors. */
#include "compute_cuda.h"
#include "alloc.h"

#include "check.h"
#include "kernels.h"
#include "linalg_kernels.h"
#include "linalg_plan.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <stdio.h>
#include <string.h>

/* The solver sizes of one n, queried at create time. */
typedef struct la_size {
    int64_t n;
    int syevd, geqrf, orgqr; /* lwork in floats */
} la_size;

enum { LA_SYEVD = 1, LA_GEQRF = 2, LA_ORGQR = 3 };

struct cz_cuda_linalg {
    cusolverDnHandle_t solver;
    int *info;          /* device: the solvers' devInfo */
    volatile int *flag; /* mapped host memory: {call, info, n} of the first failure */
    int *flag_dev;      /* its device address */
    la_size *sizes;
    int nsizes;
};

static const char *solver_status_name(cusolverStatus_t s)
{
    switch (s) {
    case CUSOLVER_STATUS_SUCCESS:
        return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED:
        return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED:
        return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE:
        return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH:
        return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_EXECUTION_FAILED:
        return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR:
        return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_NOT_SUPPORTED:
        return "CUSOLVER_STATUS_NOT_SUPPORTED";
    default:
        return "an unknown cusolverStatus_t";
    }
}

int cz__cusolver_status(int rc, const char *call, const char *file, int line, cz_error *err)
{
    if (rc == (int)CUSOLVER_STATUS_SUCCESS)
        return CZ_OK;
    return cz__error_set(err, CZ_EIO, "%s:%d: %s failed: %s (%d)", file, line, call,
                         solver_status_name((cusolverStatus_t)rc), rc);
}

static void *stream_of(cz_compute *c)
{
    return cz__cuda_stream(c);
}

int cz__cuda_linalg_open(cz_compute *c, void *stream, cz_cuda_linalg **out, cz_error *err)
{
    (void)c;
    cz_cuda_linalg *la = cz__exec_calloc(1, sizeof *la);
    *out = la;
    if (!la)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the cuda backend's solver");
    int *flag = NULL;
    int rc;
    /* On a failure *out holds what was made: the backend's close releases it. */
    if ((rc = CZ_SOLVER(err, cusolverDnCreate(&la->solver))) != CZ_OK ||
        (rc = CZ_SOLVER(err, cusolverDnSetStream(la->solver, (cudaStream_t)stream))) != CZ_OK ||
        (rc = CZ_CU(err, cz__cuda_malloc((void **)&la->info, sizeof(int), CZ_CUDA_MEM_DEVICE))) !=
            CZ_OK ||
        (rc = CZ_CU(err, cz__cuda_malloc((void **)&flag, 3 * sizeof(int), CZ_CUDA_MEM_MAPPED))) !=
            CZ_OK)
        return rc;
    memset(flag, 0, 3 * sizeof(int));
    la->flag = flag;
    return CZ_CU(err, cudaHostGetDevicePointer((void **)&la->flag_dev, flag, 0));
}

/* Teardown: the statuses are checked, but there is no caller left to report them to. */
static void teardown(int rc)
{
    (void)rc;
}

void cz__cuda_linalg_close(cz_cuda_linalg *la)
{
    cz_error e;
    if (!la)
        return;
    if (la->solver)
        teardown(CZ_SOLVER(&e, cusolverDnDestroy(la->solver)));
    if (la->info)
        teardown(CZ_CU(&e, cudaFree(la->info)));
    if (la->flag)
        teardown(CZ_CU(&e, cudaFreeHost((void *)la->flag)));
    cz__exec_free(la->sizes);
    cz__exec_free(la);
}

int cz__cuda_linalg_take_error(cz_cuda_linalg *la, cz_error *err)
{
    static const char *const what[] = {"", "ssyevd of a", "sgeqrf of a", "sorgqr of a"};
    if (!la || !la->flag || la->flag[0] == 0)
        return CZ_OK;
    int call = la->flag[0], info = la->flag[1], n = la->flag[2];
    la->flag[0] = 0;
    return cz__error_set(
        err, CZ_EINTERNAL,
        "cuSOLVER %s %d x %d matrix failed on the device (info %d: %s); the step that ran it "
        "has already applied its result",
        what[call >= LA_SYEVD && call <= LA_ORGQR ? call : 0], n, n, info,
        info > 0 ? "did not converge; the factor holds NaN/Inf or is badly scaled"
                 : "bad argument");
}

static la_size *size_of(cz_cuda_linalg *la, int64_t n)
{
    for (int i = 0; i < la->nsizes; i++)
        if (la->sizes[i].n == n)
            return &la->sizes[i];
    return NULL;
}

/* Queries cuSOLVER's workspace sizes for n (create time). The queries get real device
 * operands of the right size, freed right after: the API takes them, whether or not it
 * reads them. */
static int query(cz_cuda_linalg *la, int64_t n, la_size *out, cz_error *err)
{
    cz_la_syevd sp;
    cz_la_qr qp;
    if (cz__la_syevd_plan(&sp, n) || cz__la_qr_plan(&qp, n))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "a %lld x %lld preconditioner factor is beyond cuSOLVER's int sizes",
                             (long long)n, (long long)n);
    float *a = NULL, *w = NULL;
    size_t nn = (size_t)(n > 0 ? n * n : 1);
    *out = (la_size){.n = n};
    int rc;
    if ((rc = CZ_CU(err, cz__cuda_malloc((void **)&a, nn * sizeof(float), CZ_CUDA_MEM_DEVICE))) !=
            CZ_OK ||
        (rc = CZ_CU(err, cz__cuda_malloc((void **)&w, (size_t)(n > 0 ? n : 1) * sizeof(float),
                                         CZ_CUDA_MEM_DEVICE))) != CZ_OK)
        goto done;
    if ((rc = CZ_SOLVER(err, cusolverDnSsyevd_bufferSize(
                                 la->solver, CUSOLVER_EIG_MODE_VECTOR,
                                 sp.upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER, sp.n,
                                 a, sp.lda, w, &out->syevd))) != CZ_OK ||
        (rc = CZ_SOLVER(err, cusolverDnSgeqrf_bufferSize(la->solver, qp.m, qp.n, a, qp.lda,
                                                         &out->geqrf))) != CZ_OK)
        goto done;
    rc = CZ_SOLVER(
        err, cusolverDnSorgqr_bufferSize(la->solver, qp.m, qp.n, qp.k, a, qp.lda, w, &out->orgqr));
done:;
    cz_error e;
    if (a)
        teardown(CZ_CU(&e, cudaFree(a)));
    if (w)
        teardown(CZ_CU(&e, cudaFree(w)));
    return rc;
}

int cz__cuda_linalg_work(cz_compute *c, int64_t n, int64_t vn, cz_linalg_work *out, cz_error *err)
{
    cz_cuda_linalg *la = cz__cuda_linalg_of(c);
    la_size *s = size_of(la, n);
    if (!s) {
        la_size q;
        int rc = query(la, n, &q, err);
        if (rc)
            return rc;
        la_size *grown = cz__exec_malloc((size_t)(la->nsizes + 1) * sizeof *grown);
        if (!grown)
            return cz__error_set(err, CZ_ENOMEM, "out of memory for the solver's sizes");
        if (la->nsizes)
            memcpy(grown, la->sizes, (size_t)la->nsizes * sizeof *grown);
        grown[la->nsizes] = q;
        cz__exec_free(la->sizes);
        la->sizes = grown;
        s = &la->sizes[la->nsizes++];
    }
    cz_la_layout ls, lq, lo;
    cz__la_syevd_layout(&ls, s->syevd);
    cz__la_qr_layout(&lq, n, s->geqrf, s->orgqr);
    cz__la_sort_layout(&lo, n, vn);
    *out = (cz_linalg_work){.syevd = ls.total, .qr = lq.total, .sort = lo.total};
    return CZ_OK;
}

/* The sizes of an n that linalg_work did not see: a caller that skipped it. */
static int unsized(int64_t n, cz_error *err)
{
    return cz__error_set(err, CZ_EINTERNAL,
                         "cuda solver called for n = %lld, which linalg_work never sized at "
                         "create time",
                         (long long)n);
}

void cz__cuda_gemm(cz_compute *c, int transa, int transb, int64_t m, int64_t n, int64_t k,
                   float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                   float beta, float *cm, int64_t ldc)
{
    cz_la_gemm g;
    cz_error e;
    if (cz__la_gemm_plan(&g, transa, transb, m, n, k, lda, ldb, ldc)) {
        cz__cuda_note(c,
                      cz__error_set(&e, CZ_EUNSUPPORTED,
                                    "a %lld x %lld x %lld GEMM is beyond cuBLAS's int sizes",
                                    (long long)m, (long long)n, (long long)k),
                      &e);
        return;
    }
    const float *first = g.swap_ab ? b : a, *second = g.swap_ab ? a : b;
    cz__cuda_note(
        c,
        CZ_BLAS(&e, cublasSgemm((cublasHandle_t)cz__cuda_blas(c), g.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k, &alpha, first,
                                g.lda, second, g.ldb, &beta, cm, g.ldc)),
        &e);
}

void cz__cuda_tile_copy(cz_compute *c, float *dst, int64_t ldd, const float *src, int64_t lds,
                        int64_t rows, int64_t cols)
{
    cz_error e;
    if (rows <= 0 || cols <= 0)
        return;
    /* Default: device or managed memory (host-staged), told apart by UVA. */
    cz__cuda_note(
        c,
        CZ_CU(&e, cudaMemcpy2DAsync(dst, (size_t)ldd * sizeof(float), src,
                                    (size_t)lds * sizeof(float), (size_t)cols * sizeof(float),
                                    (size_t)rows, cudaMemcpyDefault, (cudaStream_t)stream_of(c))),
        &e);
}

/* The first failure so far: an op's launch or library status, or a solver's flagged devInfo
 * that has already become visible. */
static int pending(cz_compute *c, cz_error *err)
{
    int rc;
    if ((rc = cz__cuda_take_error(c, err)) != CZ_OK)
        return rc;
    return cz__cuda_linalg_take_error(cz__cuda_linalg_of(c), err);
}

int cz__cuda_syevd(cz_compute *c, float *a, float *w, int64_t n, float *work, cz_error *err)
{
    cz_cuda_linalg *la = cz__cuda_linalg_of(c);
    const la_size *s = size_of(la, n);
    cz_la_syevd p;
    if (!s || cz__la_syevd_plan(&p, n))
        return unsized(n, err);
    cz_la_layout l;
    cz__la_syevd_layout(&l, s->syevd);
    float *ws = cz__la_base(work) + l.off[0];
    int rc;
    if ((rc = pending(c, err)) != CZ_OK ||
        (rc = CZ_SOLVER(err,
                        cusolverDnSsyevd(la->solver, CUSOLVER_EIG_MODE_VECTOR,
                                         p.upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER,
                                         p.n, a, p.lda, w, ws, s->syevd, la->info))) != CZ_OK)
        return rc;
    cz__cuda_note_launch(c, cz__k_solver_info(stream_of(c), la->info, la->flag_dev, LA_SYEVD, p.n),
                         "solver_info");
    if (p.transpose_out)
        cz__cuda_note_launch(c, cz__k_transpose_sq(stream_of(c), a, n), "transpose_sq");
    return cz__cuda_take_error(c, err);
}

int cz__cuda_qr(cz_compute *c, float *a, int64_t n, float *work, cz_error *err)
{
    cz_cuda_linalg *la = cz__cuda_linalg_of(c);
    const la_size *s = size_of(la, n);
    cz_la_qr p;
    if (!s || cz__la_qr_plan(&p, n))
        return unsized(n, err);
    cz_la_layout l;
    cz__la_qr_layout(&l, n, s->geqrf, s->orgqr);
    float *base = cz__la_base(work), *tau = base + l.off[0], *ws = base + l.off[1];
    int rc;
    if ((rc = pending(c, err)) != CZ_OK)
        return rc;
    if (p.transpose_in)
        cz__cuda_note_launch(c, cz__k_transpose_sq(stream_of(c), a, n), "transpose_sq");
    if ((rc = CZ_SOLVER(err, cusolverDnSgeqrf(la->solver, p.m, p.n, a, p.lda, tau, ws, s->geqrf,
                                              la->info))) != CZ_OK)
        return rc;
    cz__cuda_note_launch(c, cz__k_solver_info(stream_of(c), la->info, la->flag_dev, LA_GEQRF, p.n),
                         "solver_info");
    if ((rc = CZ_SOLVER(err, cusolverDnSorgqr(la->solver, p.m, p.n, p.k, a, p.lda, tau, ws,
                                              s->orgqr, la->info))) != CZ_OK)
        return rc;
    cz__cuda_note_launch(c, cz__k_solver_info(stream_of(c), la->info, la->flag_dev, LA_ORGQR, p.n),
                         "solver_info");
    if (p.transpose_out)
        cz__cuda_note_launch(c, cz__k_transpose_sq(stream_of(c), a, n), "transpose_sq");
    return cz__cuda_take_error(c, err);
}

void cz__cuda_eig_root_scale(cz_compute *c, float *dst, const float *q, const float *w, int64_t n,
                             float root, float eps)
{
    cz__cuda_note_launch(c, cz__k_eig_root_scale(stream_of(c), dst, q, w, n, root, eps),
                         "eig_root_scale");
}

void cz__cuda_axpby(cz_compute *c, float *y, const float *x, int64_t n, float a, float b)
{
    cz__cuda_note_launch(c, cz__k_axpby(stream_of(c), y, x, n, a, b), "axpby");
}

void cz__cuda_sq_accum(cz_compute *c, float *acc, const float *x, int64_t n, float a, float b)
{
    cz__cuda_note_launch(c, cz__k_sq_accum(stream_of(c), acc, x, n, a, b), "sq_accum");
}

void cz__cuda_graft_div(cz_compute *c, float *dst, const float *x, const float *acc, int64_t n,
                        float inv_bias, float eps)
{
    cz__cuda_note_launch(c, cz__k_graft_div(stream_of(c), dst, x, acc, n, inv_bias, eps),
                         "graft_div");
}

void cz__cuda_scale_ratio(cz_compute *c, float *x, int64_t n, const double *num, const double *den)
{
    cz__cuda_note_launch(c, cz__k_scale_ratio(stream_of(c), x, n, num, den), "scale_ratio");
}

/* dst = src gathered through perm, by way of a copy of dst's old contents in tmp. */
static void permute(cz_compute *c, float *x, int64_t rows, int64_t cols, const int *perm, int side,
                    float *tmp)
{
    cz_error e;
    size_t bytes = (size_t)(rows * cols) * sizeof(float);
    int rc =
        CZ_CU(&e, cudaMemcpyAsync(tmp, x, bytes, cudaMemcpyDefault, (cudaStream_t)stream_of(c)));
    if (rc != CZ_OK) {
        cz__cuda_note(c, rc, &e); /* the sticky failure the step reports */
        return;
    }
    cz__cuda_note_launch(c, cz__k_permute(stream_of(c), x, tmp, rows, cols, perm, side), "permute");
}

void cz__cuda_basis_sort(cz_compute *c, float *q, float *mq, int64_t n, float *v, int64_t rows,
                         int64_t cols, int side, float *work)
{
    cz_la_layout l;
    cz__la_sort_layout(&l, n, rows * cols);
    float *base = cz__la_base(work);
    double *est = (double *)(void *)(base + l.off[0]);
    int *perm = (int *)(void *)(base + l.off[1]);
    float *tmp = base + l.off[2];
    cz__cuda_note_launch(c, cz__k_sort_order(stream_of(c), q, mq, n, est, perm), "sort_order");
    permute(c, q, n, n, perm, 1, tmp);
    permute(c, mq, n, n, perm, 1, tmp);
    if (v)
        permute(c, v, rows, cols, perm, side, tmp);
}
