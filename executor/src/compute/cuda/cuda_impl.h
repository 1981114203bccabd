/*
 * cuda_impl.h — the cuda backend's state, shared by its files (compute_cuda.c: the table, the
 * elementwise ops, Newton-Schulz, open and close; compute_cuda_linalg.c: the solver ops;
 * cuda_state.c: the accessors and the sticky failure both use). Private to cuda/.
 */
#ifndef CZ_CUDA_IMPL_H
#define CZ_CUDA_IMPL_H

#include "compute_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

struct cz_event {
    cudaEvent_t ev;
    int recorded;
};

struct cz_runs {
    int64_t *dev; /* (dst, src, len) triples */
    int64_t n;
    int64_t max_len; /* the longest run: the kernels' grid */
};

typedef struct cuda_impl {
    int device;
    cudaStream_t stream;
    int own_stream;
    cublasHandle_t blas;
    void *blas_ws;
    double *norm_sq;  /* block_load's sum of squares */
    cudaEvent_t done; /* download's completion */
    cudaEvent_t job;  /* step_begin, step_end: the job's default streams against ours */
    int managed;
    cz_ns_precision prec;
    cz_cuda_linalg *la; /* cuSOLVER and the solver-failure flag (compute_cuda_linalg.c) */
    cz_ns_sym_mode sym; /* the symmetric form: by cz__ns_use_syrk, or forced (canzona-bench) */
    int sticky;         /* first failure of an op without a status */
    cz_error sticky_err;
    struct {
        cz_cuda_watch_fn fn;
        void *ctx;
    } watch[CZ_CUDA_MAX_WATCHERS];
} cuda_impl;

static inline cuda_impl *impl_of(cz_compute *c)
{
    return c->impl;
}

#endif /* CZ_CUDA_IMPL_H */
