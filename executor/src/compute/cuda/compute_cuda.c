/* The "cuda" compute backend: device memory, one stream (the job's or its own), one cuBLAS
 * handle with its own workspace bound to that stream, the kernels of kernels.cu for everything
 * elementwise, and the Newton-Schulz iteration as the cuBLAS calls ns_plan.c lays out
 * (strided-batched for same-shape matrices, one GEMM for a single matrix). Cooperative
 * Newton-Schulz's row panels are strided-batched GEMMs and the panel pack/unpack kernels.
 *
 * Every op is enqueued on the stream and returns at once; the host waits only in event_sync
 * and download (the step's one read-back, the finiteness verdict). Ops that return nothing
 * keep their first failure (a launch or cuBLAS status) and the next op that returns a status
 * reports it. Host waits poll the registered watchers (the NCCL plane's asynchronous-error
 * check), so a failed peer ends a wait with an error instead of a hang.
 *
 * All device memory is allocated in alloc, runs_create and at open (the cuBLAS workspace and a
 * one-double scratch for block norms), i.e. at create/bind time; a step allocates nothing. */
#include "compute_cuda.h"
#include "cuda_impl.h"
#include "alloc.h"
#include "clock.h"

#include "check.h"
#include "kernels.h"
#include "launch.h"
#include "ns_coop.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

/* cuBLAS's recommended workspace for Hopper (32 MiB); per handle, i.e. per stream. */
#define CZ_CUBLAS_WORKSPACE (32u << 20)
/* The most matrices of one batched elementwise launch (grid.y). */
#define CZ_NS_MAX_BATCH 65535

_Static_assert(sizeof(cz_copy_run) == 3 * sizeof(int64_t), "runs are passed as int64 triples");

int cz__cuda_host_wait(cz_compute *c, void *event, cz_error *err)
{
    cuda_impl *h = impl_of(c);
    double t0 = cz__exec_now();
    for (;;) {
        int q = CZ_CU_RC(cudaEventQuery((cudaEvent_t)event));
        if (q == (int)cudaSuccess)
            break;
        if (q != (int)cudaErrorNotReady)
            return CZ_CU(err, q);
        for (int i = 0; i < CZ_CUDA_MAX_WATCHERS; i++)
            if (h->watch[i].fn) {
                int rc = h->watch[i].fn(h->watch[i].ctx, cz__exec_now() - t0, err);
                if (rc)
                    return rc;
            }
        sched_yield();
    }
    /* The stream has passed the event: a solver failure flagged before it is visible now. */
    int rc;
    if ((rc = cz__cuda_take_error(c, err)) != CZ_OK)
        return rc;
    return cz__cuda_linalg_take_error(h->la, err);
}

int cz__cuda_device_present(char *why, size_t len)
{
    int n = 0, driver = 0;
    int rc = CZ_CU_RC(cudaGetDeviceCount(&n));
    if (rc == (int)cudaSuccess && n > 0)
        return 1;
    /* Without a driver the runtime's own words ("driver version is insufficient") mislead. */
    if (CZ_CU_RC(cudaDriverGetVersion(&driver)) != (int)cudaSuccess)
        driver = 0;
    if (why && len)
        snprintf(why, len, "%s",
                 !driver ? "no NVIDIA driver is installed (libcuda.so.1 was not found)"
                 : rc    ? cudaGetErrorString((cudaError_t)rc)
                         : "the CUDA runtime reports 0 devices");
    return 0;
}

static void *cuda_alloc(cz_compute *c, size_t bytes)
{
    cuda_impl *h = impl_of(c);
    void *p = NULL;
    cz_error e;
    if (bytes == 0)
        bytes = 1;
    int rc = CZ_CU(
        &e, cz__cuda_malloc(&p, bytes, h->managed ? CZ_CUDA_MEM_MANAGED : CZ_CUDA_MEM_DEVICE));
    if (rc)
        return NULL; /* the caller reports out of memory */
    /* Zero-filled, and ready before alloc returns (create/bind time, so waiting is fine). */
    if ((rc = CZ_CU(&e, cudaMemsetAsync(p, 0, bytes, h->stream))) != CZ_OK ||
        (rc = CZ_CU(&e, cudaStreamSynchronize(h->stream))) != CZ_OK) {
        cz__cuda_note(c, rc, &e);
        rc = CZ_CU(&e, cudaFree(p));
        cz__cuda_note(c, rc, &e);
        return NULL;
    }
    return p;
}

static void cuda_release(cz_compute *c, void *p)
{
    cz_error e;
    cz__cuda_note(c, CZ_CU(&e, cudaFree(p)), &e);
}

static cz_event *cuda_event_create(cz_compute *c)
{
    cz_event *ev = cz__exec_calloc(1, sizeof *ev);
    cz_error e;
    if (!ev)
        return NULL;
    int rc = CZ_CU(&e, cudaEventCreateWithFlags(&ev->ev, cudaEventDisableTiming));
    if (rc) {
        cz__cuda_note(c, rc, &e);
        cz__exec_free(ev);
        return NULL;
    }
    return ev;
}

static void cuda_event_free(cz_compute *c, cz_event *ev)
{
    cz_error e;
    if (!ev)
        return;
    cz__cuda_note(c, CZ_CU(&e, cudaEventDestroy(ev->ev)), &e);
    cz__exec_free(ev);
}

static void cuda_event_record(cz_compute *c, cz_event *ev)
{
    cz_error e;
    cz__cuda_note(c, CZ_CU(&e, cudaEventRecord(ev->ev, impl_of(c)->stream)), &e);
    ev->recorded = 1;
}

/* Records the backend's own event after everything issued so far and waits for it. */
static int wait_issued(cz_compute *c, cz_error *err)
{
    cuda_impl *h = impl_of(c);
    int rc;
    if ((rc = CZ_CU(err, cudaEventRecord(h->done, h->stream))) != CZ_OK)
        return rc;
    return cz__cuda_host_wait(c, h->done, err);
}

static int cuda_event_sync(cz_compute *c, cz_event *ev, cz_error *err)
{
    if (!ev->recorded)
        return cz__error_set(err, CZ_EINTERNAL, "waiting on a compute event never recorded");
    /* Host-staged (a host-driven plane syncs before touching managed buffers): wait for every
     * op issued so far, not only those before the event. The plane is about to write buffers
     * that ops issued after the event may still read (the reduce-scatter scratch that the
     * previous bucket's scale reads), which an in-order CPU stream never has in flight. */
    if (impl_of(c)->managed)
        return wait_issued(c, err);
    return cz__cuda_host_wait(c, ev->ev, err);
}

static int cuda_download(cz_compute *c, void *host, const void *src, size_t bytes, cz_error *err)
{
    cuda_impl *h = impl_of(c);
    /* Wait (polling the watchers) before the copy: a copy to pageable host memory blocks the
     * host inside the CUDA call, where a hung collective could not be noticed. */
    int rc;
    if ((rc = cz__cuda_take_error(c, err)) != CZ_OK || (rc = wait_issued(c, err)) != CZ_OK ||
        (rc = CZ_CU(err, cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, h->stream))) !=
            CZ_OK)
        return rc;
    return wait_issued(c, err);
}

/* download's inverse, for checkpoints (outside a step). */
static int cuda_upload(cz_compute *c, void *dst, const void *host, size_t bytes, cz_error *err)
{
    int rc;
    if ((rc = cz__cuda_take_error(c, err)) != CZ_OK || (rc = wait_issued(c, err)) != CZ_OK ||
        (rc = CZ_CU(err, cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice,
                                         impl_of(c)->stream))) != CZ_OK)
        return rc;
    return wait_issued(c, err);
}

/* The runs cut into pieces first (cz_launch_split_runs): the kernels' grid gives every run
 * as many blocks, so a long run among short ones needs cutting to spread over the card. */
static cz_runs *cuda_runs_create(cz_compute *c, const cz_copy_run *runs, size_t n)
{
    cz_runs *r = cz__exec_calloc(1, sizeof *r);
    int64_t total = 0, *pieces = NULL;
    cz_error e;
    int rc = CZ_OK;
    if (!r)
        return NULL;
    for (size_t i = 0; i < n; i++)
        total += runs[i].len;
    int64_t piece = cz_launch_run_piece(total);
    r->n = cz_launch_split_runs((const int64_t *)(const void *)runs, (int64_t)n, piece, NULL);
    if (!(pieces = cz__exec_malloc((size_t)(r->n ? r->n : 1) * sizeof *runs))) {
        rc = CZ_ENOMEM;
        goto done;
    }
    cz_launch_split_runs((const int64_t *)(const void *)runs, (int64_t)n, piece, pieces);
    for (int64_t i = 0; i < r->n; i++)
        if (pieces[3 * i + 2] > r->max_len)
            r->max_len = pieces[3 * i + 2];
    size_t bytes = (size_t)(r->n ? r->n : 1) * sizeof *runs;
    /* On the backend's stream: a non-blocking stream does not wait for cudaMemcpy's (legacy)
     * one, and the step's kernels read the map there. From pageable memory the copy has
     * taken the host buffer when the call returns, so the pieces may be freed. */
    if ((rc = CZ_CU(&e, cz__cuda_malloc((void **)&r->dev, bytes, CZ_CUDA_MEM_DEVICE))) != CZ_OK ||
        (r->n && (rc = CZ_CU(&e, cudaMemcpyAsync(r->dev, pieces, bytes, cudaMemcpyHostToDevice,
                                                 impl_of(c)->stream))) != CZ_OK))
        cz__cuda_note(c, rc, &e);
done:
    cz__exec_free(pieces);
    if (rc == CZ_OK)
        return r;
    if (r->dev)
        cz__cuda_note(c, CZ_CU(&e, cudaFree(r->dev)), &e);
    cz__exec_free(r);
    return NULL;
}

static void cuda_runs_free(cz_compute *c, cz_runs *r)
{
    cz_error e;
    if (!r)
        return;
    cz__cuda_note(c, CZ_CU(&e, cudaFree(r->dev)), &e);
    cz__exec_free(r);
}

static void cuda_copy_runs(cz_compute *c, float *dst, const float *src, const cz_runs *r)
{
    cz__cuda_note_launch(c, cz__k_copy_runs(impl_of(c)->stream, dst, src, r->dev, r->n, r->max_len),
                         "copy_runs");
}

static void cuda_convert(cz_compute *c, void *dst, cz_dtype dt, const void *src, cz_dtype st,
                         int64_t n)
{
    cuda_impl *h = impl_of(c);
    cz_error e;
    if (dt == st) {
        /* Default: the job's device memory or the backend's managed memory (UVA tells). */
        size_t bytes = (size_t)n * (size_t)cz__dtype_bytes(dt);
        cz__cuda_note(c, CZ_CU(&e, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, h->stream)),
                      &e);
    } else if (dt == CZ_DTYPE_BF16) {
        cz__cuda_note_launch(c, cz__k_f32_to_bf16(h->stream, dst, src, n), "f32_to_bf16");
    } else {
        cz__cuda_note_launch(c, cz__k_bf16_to_f32(h->stream, dst, src, n), "bf16_to_f32");
    }
}

static void cuda_scale(cz_compute *c, float *dst, const float *src, int64_t n, float alpha)
{
    cz__cuda_note_launch(c, cz__k_scale(impl_of(c)->stream, dst, src, n, alpha), "scale");
}

static void cuda_sumsq(cz_compute *c, const float *x, int64_t n, double *out)
{
    cz__cuda_note_launch(c, cz__k_sumsq(impl_of(c)->stream, x, n, out), "sumsq");
}

static void cuda_momentum(cz_compute *c, const float *g, float *buf, float *in, int64_t n, float mu,
                          int nesterov)
{
    cz__cuda_note_launch(c, cz__k_momentum(impl_of(c)->stream, g, buf, in, n, mu, nesterov),
                         "momentum");
}

static void cuda_block_load(cz_compute *c, float *dst, const float *src, int64_t ld, int64_t rows,
                            int64_t cols, int transpose, float eps)
{
    cuda_impl *h = impl_of(c);
    cz__cuda_note_launch(
        c, cz__k_block_load(h->stream, dst, src, ld, rows, cols, transpose, eps, h->norm_sq),
        "block_load");
}

static void cuda_block_store(cz_compute *c, float *dst, int64_t ld, const float *src, int64_t rows,
                             int64_t cols, int transpose, float scale)
{
    cz__cuda_note_launch(
        c, cz__k_block_store(impl_of(c)->stream, dst, ld, src, rows, cols, transpose, scale),
        "block_store");
}

static void cuda_normuon(cz_compute *c, float *x, int64_t rows, int64_t cols, int per_col, float *v,
                         int64_t vs, float beta2, float eps, double *work)
{
    cz__cuda_note_launch(
        c, cz__k_normuon(impl_of(c)->stream, x, rows, cols, per_col, v, vs, beta2, eps, work),
        "normuon");
}

static void cuda_apply_update(cz_compute *c, float *p, const float *u, int64_t n, float lr,
                              float wd)
{
    cz__cuda_note_launch(c, cz__k_apply_update(impl_of(c)->stream, p, u, n, lr, wd),
                         "apply_update");
}

static void cuda_adamw(cz_compute *c, float *p, const float *g, float *m, float *v, int64_t n,
                       const cz_adamw_args *a)
{
    cz__cuda_note_launch(c,
                         cz__k_adamw(impl_of(c)->stream, p, g, m, v, n, a->beta1, a->beta2,
                                     a->bias1, a->bias2, a->lr, a->eps, a->weight_decay),
                         "adamw");
}

static void cuda_block_load_sq(cz_compute *c, float *dst, const float *src, int64_t ld,
                               int64_t rows, int64_t cols, int transpose, float eps,
                               const double *sq)
{
    cz__cuda_note_launch(
        c, cz__k_block_load_sq(impl_of(c)->stream, dst, src, ld, rows, cols, transpose, eps, sq),
        "block_load_sq");
}

static void cuda_apply_runs(cz_compute *c, float *p, const float *u, const cz_runs *r, float lr,
                            float wd)
{
    cz__cuda_note_launch(
        c, cz__k_apply_runs(impl_of(c)->stream, p, u, r->dev, r->n, r->max_len, lr, wd),
        "apply_runs");
}

/* Cooperative Newton-Schulz in row panels (compute.h's version-5 ops, ns_coop.h).
 * Matrices are `batch` back to back: X and Y rows x cols (stride xs = rows cols), A and B rows x
 * rows (stride rows^2), all row-major. cuBLAS is column-major, where a row-major m x n matrix
 * with row stride ld is its n x m transpose with the same ld; so row-major C = A B is issued as
 * C^T = B^T A^T, gemm(N, N, m = C's columns, n = C's rows, k, B, ld B, A, ld A, C, ld C). Each
 * call states its column-major form. None needs A to be symmetric. */

/* This member's rows r0 .. r1-1 of X X^T (from column r0 on) into full, then packed to out. */
static void cuda_ns_gram_rows(cz_compute *c, const float *x, int batch, int64_t rows, int64_t cols,
                              int64_t r0, int64_t r1, float *full, float *out)
{
    cuda_impl *h = impl_of(c);
    cz_error e;
    const float one = 1.0f, zero = 0.0f;
    int64_t ph = r1 - r0, pw = rows - r0;
    if (batch <= 0 || ph <= 0)
        return;
    if (cols == 0) { /* a member with an empty slice adds nothing to the sum */
        size_t n = (size_t)batch * (size_t)cz_ns_panel_len(rows, r0, r1);
        cz__cuda_note(c, CZ_CU(&e, cudaMemsetAsync(out, 0, n * sizeof(float), h->stream)), &e);
        return;
    }
    /* G = X[r0:r1] X[r0:rows]^T, row-major ph x pw at full + r0 rows + r0 (ld rows). Column-major:
     * G^T (pw x ph, ld rows) = S^T P with S = X[r0:rows]^T (cols x pw, ld cols) and P =
     * X[r0:r1]^T (cols x ph, ld cols), both at x + r0 cols: gemm(T, N, m = pw, n = ph, k = cols,
     * x + r0 cols, ld cols, x + r0 cols, ld cols, full + r0 rows + r0, ld rows). */
    const float *xr = x + r0 * cols;
    cz__cuda_note(c,
                  CZ_BLAS(&e, cublasSgemmStridedBatched(
                                  h->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)pw, (int)ph, (int)cols,
                                  &one, xr, (int)cols, rows * cols, xr, (int)cols, rows * cols,
                                  &zero, full + r0 * rows + r0, (int)rows, rows * rows, batch)),
                  &e);
    cz__cuda_note_launch(c, cz__k_ns_pack_rows(h->stream, out, full, rows, r0, r1, batch),
                         "ns_pack_rows");
}

static void cuda_ns_unpack_rows(cz_compute *c, float *full, const float *in, int batch,
                                int64_t rows, int64_t r0, int64_t r1)
{
    cz__cuda_note_launch(c, cz__k_ns_unpack_rows(impl_of(c)->stream, full, in, rows, r0, r1, batch),
                         "ns_unpack_rows");
}

static void cuda_ns_poly_rows(cz_compute *c, const float *x, const float *full, float *y, int batch,
                              int64_t rows, int64_t cols, int64_t r0, int64_t r1)
{
    cuda_impl *h = impl_of(c);
    cz_error e;
    const float one = 1.0f, zero = 0.0f;
    int64_t ph = r1 - r0, xs = rows * cols;
    if (batch <= 0 || cols <= 0 || ph <= 0)
        return;
    /* Y[r0:r1] (ph x cols) = A[r0:r1] (ph x rows, ld rows) X. Column-major: Y[r0:r1]^T (cols x
     * ph, ld cols) = X^T (cols x rows, ld cols) A[r0:r1]^T (rows x ph, ld rows): gemm(N, N,
     * m = cols, n = ph, k = rows, x, ld cols, full + r0 rows, ld rows, y + r0 cols, ld cols). */
    cz__cuda_note(c,
                  CZ_BLAS(&e, cublasSgemmStridedBatched(
                                  h->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)cols, (int)ph, (int)rows,
                                  &one, x, (int)cols, xs, full + r0 * rows, (int)rows, rows * rows,
                                  &zero, y + r0 * cols, (int)cols, xs, batch)),
                  &e);
}

/* The elementwise steps run over the whole batch as one vector: x, y, full and bm are each
 * contiguous, so no per-matrix stride (nor grid.y limit) is involved. */
static void cuda_ns_poly_end(cz_compute *c, float *x, const float *full, float *y, float *bm,
                             int batch, int64_t rows, int64_t cols, const cz_ns_triple *k)
{
    cuda_impl *h = impl_of(c);
    cz_error e;
    const float one = 1.0f, kc = (float)k->c;
    int64_t xs = rows * cols, as = rows * rows, xn = xs * batch;
    if (batch <= 0 || rows <= 0 || cols <= 0)
        return;
    if (cz_ns_coop_use_aax(rows, cols)) {
        /* y holds Y = A X: X = a X + b Y; X += c A Y. */
        cz__cuda_note_launch(
            c, cz__k_axpby_batched(h->stream, x, 0, y, 0, xn, 1, (float)k->b, (float)k->a),
            "axpby_batched");
        /* Column-major: X^T (cols x rows, ld cols) += c Y^T (cols x rows, ld cols) A^T (rows x
         * rows, ld rows): gemm(N, N, m = cols, n = rows, k = rows, c, y, ld cols, full, ld rows,
         * 1, x, ld cols). */
        if (kc != 0.0f)
            cz__cuda_note(c,
                          CZ_BLAS(&e, cublasSgemmStridedBatched(
                                          h->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)cols, (int)rows,
                                          (int)rows, &kc, y, (int)cols, xs, full, (int)rows, as,
                                          &one, x, (int)cols, xs, batch)),
                          &e);
        return;
    }
    /* B = b A; B += c A A; Y = a X; Y += B X; X = Y. */
    cz__cuda_note_launch(
        c, cz__k_axpby_batched(h->stream, bm, 0, full, 0, as * batch, 1, (float)k->b, 0.0f),
        "axpby_batched");
    /* Column-major: B^T (rows x rows, ld rows) += c A^T A^T: gemm(N, N, m = n = k = rows, c, full,
     * ld rows, full, ld rows, 1, bm, ld rows). */
    if (kc != 0.0f)
        cz__cuda_note(c,
                      CZ_BLAS(&e, cublasSgemmStridedBatched(h->blas, CUBLAS_OP_N, CUBLAS_OP_N,
                                                            (int)rows, (int)rows, (int)rows, &kc,
                                                            full, (int)rows, as, full, (int)rows,
                                                            as, &one, bm, (int)rows, as, batch)),
                      &e);
    cz__cuda_note_launch(c, cz__k_axpby_batched(h->stream, y, 0, x, 0, xn, 1, (float)k->a, 0.0f),
                         "axpby_batched");
    /* Column-major: Y^T (cols x rows, ld cols) += X^T (cols x rows, ld cols) B^T (rows x rows,
     * ld rows): gemm(N, N, m = cols, n = rows, k = rows, 1, x, ld cols, bm, ld rows, 1, y,
     * ld cols). */
    cz__cuda_note(
        c,
        CZ_BLAS(&e, cublasSgemmStridedBatched(h->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)cols,
                                              (int)rows, (int)rows, &one, x, (int)cols, xs, bm,
                                              (int)rows, as, &one, y, (int)cols, xs, batch)),
        &e);
    cz__cuda_note(c,
                  CZ_CU(&e, cudaMemcpyAsync(x, y, (size_t)xn * sizeof(float),
                                            cudaMemcpyDeviceToDevice, h->stream)),
                  &e);
}

static void *operand(const cz_ns_operand *o, float *x, float *work, int i)
{
    return cz__ns_operand_ptr(o, x, work, i);
}

static cudaDataType_t dtype_of(const cz_ns_operand *o)
{
    return o->bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* One op of the Newton-Schulz plan (see ns_plan.h). */
static int run_op(cz_compute *c, const cz_ns_op *op, float *x, float *work, cz_error *err)
{
    cuda_impl *h = impl_of(c);
    cublasOperation_t ta = op->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = op->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    switch (op->kind) {
    case CZ_NS_GEMM:
        if (op->batched)
            return CZ_BLAS(err, cublasGemmStridedBatchedEx(
                                    h->blas, ta, tb, op->m, op->n, op->k, &op->alpha,
                                    operand(&op->a, x, work, 0), dtype_of(&op->a), op->a.ld,
                                    op->a.stride, operand(&op->b, x, work, 0), dtype_of(&op->b),
                                    op->b.ld, op->b.stride, &op->beta, operand(&op->c, x, work, 0),
                                    dtype_of(&op->c), op->c.ld, op->c.stride, op->batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        for (int i = 0; i < op->batch; i++) {
            int rc =
                CZ_BLAS(err, cublasGemmEx(h->blas, ta, tb, op->m, op->n, op->k, &op->alpha,
                                          operand(&op->a, x, work, i), dtype_of(&op->a), op->a.ld,
                                          operand(&op->b, x, work, i), dtype_of(&op->b), op->b.ld,
                                          &op->beta, operand(&op->c, x, work, i), dtype_of(&op->c),
                                          op->c.ld, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            if (rc)
                return rc;
        }
        return CZ_OK;
    case CZ_NS_AXPBY:
        cz__cuda_note_launch(c,
                             cz__k_axpby_batched(h->stream, operand(&op->c, x, work, 0),
                                                 op->c.stride, operand(&op->a, x, work, 0),
                                                 op->a.stride, op->len, op->batch, op->alpha,
                                                 op->beta),
                             "axpby_batched");
        return CZ_OK;
    case CZ_NS_SYRK:
        /* No batched SYRK in cuBLAS: one call per matrix (cz__ns_use_syrk picks this form only
         * where one matrix fills the device). */
        for (int i = 0; i < op->batch; i++) {
            int rc = CZ_BLAS(err, cublasSsyrk(h->blas, CUBLAS_FILL_MODE_UPPER, ta, op->n, op->k,
                                              &op->alpha, operand(&op->a, x, work, i), op->a.ld,
                                              &op->beta, operand(&op->c, x, work, i), op->c.ld));
            if (rc)
                return rc;
        }
        return CZ_OK;
    case CZ_NS_SYMFILL:
        cz__cuda_note_launch(c,
                             cz__k_symfill_batched(h->stream, operand(&op->c, x, work, 0),
                                                   op->c.stride, op->n, op->batch),
                             "symfill_batched");
        return CZ_OK;
    case CZ_NS_TO_BF16:
        cz__cuda_note_launch(c,
                             cz__k_to_bf16_batched(h->stream, operand(&op->c, x, work, 0),
                                                   op->c.stride, operand(&op->a, x, work, 0),
                                                   op->a.stride, op->len, op->batch),
                             "to_bf16_batched");
        return CZ_OK;
    }
    return cz__error_set(err, CZ_EINTERNAL, "Newton-Schulz plan op of unknown kind %d",
                         (int)op->kind);
}

static int ns_run(cz_compute *c, float *x, int batch, int64_t rows, int64_t cols,
                  const cz_ns_coeffs *k, int steps, float *work, int gemms_only, cz_error *err)
{
    cuda_impl *h = impl_of(c);
    cz_ns_op ops[CZ_NS_MAX_OPS];
    int rc;
    if ((rc = cz__cuda_take_error(c, err)) != CZ_OK)
        return rc;
    for (int b0 = 0; b0 < batch; b0 += CZ_NS_MAX_BATCH) {
        int nb = batch - b0 < CZ_NS_MAX_BATCH ? batch - b0 : CZ_NS_MAX_BATCH;
        int sym = cz__ns_sym_resolve(h->sym, CZ_NS_TARGET_CUDA, rows, cols, nb, h->prec);
        float *xb = x + (size_t)b0 * (size_t)(rows * cols);
        float *wb = work + (size_t)cz__ns_work_floats(rows, cols, b0);
        int n = 0;
        for (int s = 0; s < steps; s++) {
            /* The plan carries the iteration's triple: made again for each row of a table. */
            if (s == 0 || k->rows > 1) {
                cz_ns_triple t = cz__ns_coeffs_at(k, s);
                n = cz__ns_plan(ops, rows, cols, nb, t.a, t.b, t.c, h->prec, sym);
            }
            if (n < 0)
                return cz__error_set(err, CZ_EINTERNAL,
                                     "Newton-Schulz called on %d matrices of %lld x %lld (needs "
                                     "0 < rows <= cols <= %d)",
                                     nb, (long long)rows, (long long)cols, INT32_MAX);
            for (int q = 0; q < n; q++)
                if ((!gemms_only || ops[q].kind == CZ_NS_GEMM || ops[q].kind == CZ_NS_SYRK) &&
                    (rc = run_op(c, &ops[q], xb, wb, err)) != CZ_OK)
                    return rc;
        }
    }
    return cz__cuda_take_error(c, err);
}

static int cuda_ns_batched(cz_compute *c, float *x, int batch, int64_t rows, int64_t cols,
                           const cz_ns_coeffs *k, int steps, float *work, cz_error *err)
{
    return ns_run(c, x, batch, rows, cols, k, steps, work, 0, err);
}

int cz__cuda_ns_gemms(cz_compute *c, float *x, int batch, int64_t rows, int64_t cols,
                      const cz_ns_coeffs *k, int steps, float *work, cz_error *err)
{
    return ns_run(c, x, batch, rows, cols, k, steps, work, 1, err);
}

/* The job writes its gradients and reads its parameters on its own stream. When it handed
 * that stream in, the step is on it and nothing more is needed. Otherwise the step runs on a
 * non-blocking stream of the backend's, which no implicit rule orders against the job's work:
 * each step starts after what the job issued on the legacy default stream and on the calling
 * thread's per-thread default stream (either is "the default stream" of a CUDA program,
 * depending on how it was compiled), and the job's later work there waits for the step's end.
 * Events, no host wait. */
static void order_job(cz_compute *c, int end)
{
    cuda_impl *h = impl_of(c);
    cz_error e;
    if (!h->own_stream)
        return;
    const cudaStream_t job[2] = {cudaStreamLegacy, cudaStreamPerThread};
    for (int i = 0; i < 2; i++) {
        cudaStream_t from = end ? h->stream : job[i], to = end ? job[i] : h->stream;
        int rc;
        /* A failure becomes the backend's sticky failure, which the step reports; the other
         * default stream is still ordered (this runs at a step's ends and returns nothing). */
        if ((rc = CZ_CU(&e, cudaEventRecord(h->job, from))) != CZ_OK ||
            (rc = CZ_CU(&e, cudaStreamWaitEvent(to, h->job, 0))) != CZ_OK)
            cz__cuda_note(c, rc, &e);
    }
}

static void cuda_step_begin(cz_compute *c)
{
    order_job(c, 0);
}

static void cuda_step_end(cz_compute *c)
{
    order_job(c, 1);
}

static const cz_compute_ops cz_compute_cuda_ops = {
    .version = CZ_COMPUTE_OPS_VERSION,
    .kind = CZ_BACKEND_CUDA,
    .caps = 0,
    .name = "cuda",
    .alloc = cuda_alloc,
    .release = cuda_release,
    .event_create = cuda_event_create,
    .event_free = cuda_event_free,
    .event_record = cuda_event_record,
    .event_sync = cuda_event_sync,
    .download = cuda_download,
    .runs_create = cuda_runs_create,
    .runs_free = cuda_runs_free,
    .copy_runs = cuda_copy_runs,
    .convert = cuda_convert,
    .scale = cuda_scale,
    .sumsq = cuda_sumsq,
    .momentum = cuda_momentum,
    .block_load = cuda_block_load,
    .ns_batched = cuda_ns_batched,
    .block_store = cuda_block_store,
    .apply_update = cuda_apply_update,
    .adamw = cuda_adamw,
    .gemm = cz__cuda_gemm,
    .tile_copy = cz__cuda_tile_copy,
    .syevd = cz__cuda_syevd,
    .eig_root_scale = cz__cuda_eig_root_scale,
    .axpby = cz__cuda_axpby,
    .sq_accum = cz__cuda_sq_accum,
    .graft_div = cz__cuda_graft_div,
    .scale_ratio = cz__cuda_scale_ratio,
    .qr = cz__cuda_qr,
    .basis_sort = cz__cuda_basis_sort,
    .linalg_work = cz__cuda_linalg_work,
    .upload = cuda_upload,
    .block_load_sq = cuda_block_load_sq,
    .ns_gram_rows = cuda_ns_gram_rows,
    .ns_unpack_rows = cuda_ns_unpack_rows,
    .ns_poly_rows = cuda_ns_poly_rows,
    .ns_poly_end = cuda_ns_poly_end,
    .apply_runs = cuda_apply_runs,
    .close = cz__compute_cuda_close,
    .step_begin = cuda_step_begin,
    .step_end = cuda_step_end,
    .normuon = cuda_normuon,
};

/* Teardown: the statuses are checked, but there is no caller left to report them to. */
static void teardown(int rc)
{
    (void)rc;
}

void cz__compute_cuda_close(cz_compute *c)
{
    cuda_impl *h = c->impl;
    cz_error e;
    if (!h)
        return;
    if (h->stream)
        teardown(CZ_CU(&e, cudaStreamSynchronize(h->stream)));
    cz__cuda_linalg_close(h->la);
    if (h->blas)
        teardown(CZ_BLAS(&e, cublasDestroy(h->blas)));
    if (h->blas_ws)
        teardown(CZ_CU(&e, cudaFree(h->blas_ws)));
    if (h->norm_sq)
        teardown(CZ_CU(&e, cudaFree(h->norm_sq)));
    if (h->done)
        teardown(CZ_CU(&e, cudaEventDestroy(h->done)));
    if (h->job)
        teardown(CZ_CU(&e, cudaEventDestroy(h->job)));
    if (h->own_stream && h->stream)
        teardown(CZ_CU(&e, cudaStreamDestroy(h->stream)));
    cz__exec_free(h);
    c->impl = NULL;
}

int cz__compute_cuda_open(cz_compute *c, const cz_cuda_options *o, cz_error *err)
{
    cz_cuda_options defaults = {0};
    char why[256];
    if (!o)
        o = &defaults;
    c->ops = NULL;
    c->impl = NULL;
    if (!cz__cuda_device_present(why, sizeof why))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "compute backend 'cuda': no usable CUDA device (%s)", why);
    cuda_impl *h = cz__exec_calloc(1, sizeof *h);
    if (!h)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the cuda backend");
    c->impl = h;
    h->managed = o->managed;
    h->prec = o->ns_precision;
    h->sym = o->ns_sym;
    int rc;
    if ((rc = CZ_CU(err, cudaGetDevice(&h->device))) != CZ_OK)
        goto done;
    if (h->managed) {
        /* The host-staged planes touch managed buffers from the host while kernels run. */
        int concurrent = 0;
        if ((rc = CZ_CU(err, cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess,
                                                    h->device))) != CZ_OK)
            goto done;
        if (!concurrent) {
            rc = cz__error_set(err, CZ_EUNSUPPORTED,
                               "compute backend 'cuda' with a host-driven data plane (mpi, self) "
                               "needs a device with concurrent managed access (Linux, Pascal or "
                               "newer); use comm 'nccl'");
            goto done;
        }
    }
    if (o->stream) {
        h->stream = (cudaStream_t)o->stream;
    } else {
        if ((rc = CZ_CU(err, cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking))) !=
            CZ_OK)
            goto done;
        h->own_stream = 1;
    }
    if ((rc = CZ_BLAS(err, cublasCreate(&h->blas))) != CZ_OK ||
        (rc = CZ_BLAS(err, cublasSetStream(h->blas, h->stream))) != CZ_OK ||
        (rc = CZ_CU(err, cz__cuda_malloc(&h->blas_ws, CZ_CUBLAS_WORKSPACE, CZ_CUDA_MEM_DEVICE))) !=
            CZ_OK ||
        (rc = CZ_BLAS(err, cublasSetWorkspace(h->blas, h->blas_ws, CZ_CUBLAS_WORKSPACE))) != CZ_OK)
        goto done;
    if ((rc = CZ_CU(err, cz__cuda_malloc((void **)&h->norm_sq, sizeof(double),
                                         CZ_CUDA_MEM_DEVICE))) != CZ_OK ||
        (rc = CZ_CU(err, cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming))) != CZ_OK ||
        (rc = CZ_CU(err, cudaEventCreateWithFlags(&h->job, cudaEventDisableTiming))) != CZ_OK ||
        (rc = cz__cuda_linalg_open(c, h->stream, &h->la, err)) != CZ_OK)
        goto done;
    c->ops = &cz_compute_cuda_ops;
done:
    if (rc != CZ_OK)
        cz__compute_cuda_close(c);
    return rc;
}
