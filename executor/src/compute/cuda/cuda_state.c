/* The cuda backend's state as its files and the nccl plane reach it (cuda_impl.h): the status
 * of a CUDA or cuBLAS call as an error, the first failure of an op that returns nothing (kept
 * until an op that returns a status reports it), the stream, the cuBLAS handle, the solver
 * state, and the watchers a host wait polls. Apart from compute_cuda.c so that the solver ops
 * (compute_cuda_linalg.c) and the table that lists them do not depend on each other both
 * ways. */
#include "cuda_impl.h"

#include "alloc.h"
#include "cz_format.h"
#include "kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

int cz__cuda_status(int rc, const char *call, const char *file, int line, cz_error *err)
{
    if (rc == (int)cudaSuccess)
        return CZ_OK;
    return cz__error_set(err, CZ_EIO, "%s:%d: %s failed: %s (%s)", file, line, call,
                         cudaGetErrorString((cudaError_t)rc), cudaGetErrorName((cudaError_t)rc));
}

int cz__cublas_status(int rc, const char *call, const char *file, int line, cz_error *err)
{
    if (rc == (int)CUBLAS_STATUS_SUCCESS)
        return CZ_OK;
    return cz__error_set(err, CZ_EIO, "%s:%d: %s failed: %s", file, line, call,
                         cublasGetStatusString((cublasStatus_t)rc));
}

/* Keeps the first failure of an op that cannot return it. */
static void note(cz_compute *c, int rc, const cz_error *e)
{
    cuda_impl *h = impl_of(c);
    if (rc && !h->sticky) {
        h->sticky = rc;
        h->sticky_err = *e;
    }
}

void cz__cuda_note(cz_compute *c, int rc, const cz_error *e)
{
    note(c, rc, e);
}

void *cz__cuda_blas(cz_compute *c)
{
    return impl_of(c)->blas;
}

cz_cuda_linalg *cz__cuda_linalg_of(cz_compute *c)
{
    return impl_of(c)->la;
}

void cz__cuda_note_launch(cz_compute *c, int krc, const char *what)
{
    cz_error e;
    if (krc)
        note(c,
             cz__error_set(&e, CZ_EIO, "CUDA kernel %s failed to launch: %s", what,
                           cz__k_error_string(krc)),
             &e);
}

int cz__cuda_take_error(cz_compute *c, cz_error *err)
{
    cuda_impl *h = impl_of(c);
    int rc = h->sticky;
    if (rc && err)
        *err = h->sticky_err;
    h->sticky = 0;
    return rc;
}

void *cz__cuda_stream(cz_compute *c)
{
    return impl_of(c)->stream;
}

void *cz__cuda_event(cz_event *e)
{
    return e->ev;
}

int cz__cuda_watch(cz_compute *c, cz_cuda_watch_fn fn, void *ctx)
{
    cuda_impl *h = impl_of(c);
    for (int i = 0; i < CZ_CUDA_MAX_WATCHERS; i++)
        if (!h->watch[i].fn) {
            h->watch[i].fn = fn;
            h->watch[i].ctx = ctx;
            return CZ_OK;
        }
    return CZ_EINVALID;
}

void cz__cuda_unwatch(cz_compute *c, void *ctx)
{
    cuda_impl *h = impl_of(c);
    for (int i = 0; i < CZ_CUDA_MAX_WATCHERS; i++)
        if (h->watch[i].ctx == ctx)
            h->watch[i].fn = NULL, h->watch[i].ctx = NULL;
}
