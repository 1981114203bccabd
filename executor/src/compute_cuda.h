/*
 * compute_cuda.h — the "cuda" compute backend's extra entry points (cuda/compute_cuda.c), for
 * the executor and the NCCL data plane. Plain C: a CUDA stream or event crosses this header
 * as void *. Everything here exists only in builds with CZ_HAVE_CUDA.
 */
#ifndef CZ_COMPUTE_CUDA_H
#define CZ_COMPUTE_CUDA_H

#include "exec_internal.h"
#include "ns_plan.h"

typedef struct cz_cuda_options {
    /* The job's cudaStream_t to order the step on; NULL = a stream of the backend's own. */
    void *stream;
    /* Allocate with cudaMallocManaged instead of cudaMalloc, so that a host-driven data plane
     * (MPI) can read and write the executor's buffers: the host-staged combination of CUDA
     * compute with the MPI data plane. */
    int managed;
    /* Precision of the Newton-Schulz GEMMs. */
    cz_ns_precision ns_precision;
    /* The symmetric form of the Newton-Schulz products (ns_plan.h): CZ_NS_SYM_AUTO (0, the
     * executor's) = where cz_ns_use_syrk says it pays; OFF/ON force it (canzona-bench ns). */
    cz_ns_sym_mode ns_sym;
} cz_cuda_options;

/* Opens the backend on the current CUDA device: creates (or adopts) the stream, the cuBLAS
 * handle and its workspace, and the device scratch. CZ_EUNSUPPORTED when no device is
 * present, with the CUDA runtime's reason. */
int cz_compute_cuda_open(cz_compute *c, const cz_cuda_options *o, cz_error *err);
/* Releases what open created (cz_compute_close calls it for a cuda backend). */
void cz_compute_cuda_close(cz_compute *c);

/* The backend's stream (a cudaStream_t) and the cudaEvent_t behind an event. */
void *cz_cuda_stream(cz_compute *c);
void *cz_cuda_event(cz_event *e);

/* The first failure of an op that returns nothing (kernel launches, cuBLAS calls), reported
 * once: CZ_OK when there was none. */
int cz_cuda_take_error(cz_compute *c, cz_error *err);

/* A watcher polled while the host waits on the device (event_sync, download): a data plane
 * registers one so that a peer's failure or a timeout ends the wait with an error (NCCL:
 * ncclCommGetAsyncError, then ncclCommAbort) instead of hanging. Returns CZ_EINVALID when
 * all CZ_CUDA_MAX_WATCHERS slots are taken. */
#define CZ_CUDA_MAX_WATCHERS 8
/* waited_s: seconds this host wait has lasted so far (for a timeout). */
typedef int (*cz_cuda_watch_fn)(void *ctx, double waited_s, cz_error *err);
int cz_cuda_watch(cz_compute *c, cz_cuda_watch_fn fn, void *ctx);
void cz_cuda_unwatch(cz_compute *c, void *ctx);
/* Waits for a CUDA event (a cudaEvent_t) on the host, polling the watchers. */
int cz_cuda_host_wait(cz_compute *c, void *event, cz_error *err);

/* Only the cuBLAS calls of ns_batched (same shapes, same GEMMs and SYRKs, no kernels): the
 * micro-benchmark's reference for what the GEMMs alone reach. */
int cz_cuda_ns_gemms(cz_compute *c, float *x, int batch, int64_t rows, int64_t cols,
                     const cz_ns_coeffs *k, int steps, float *work, cz_error *err);

/* True when a CUDA device is usable (the gpu tests skip otherwise). */
int cz_cuda_device_present(char *why, size_t len);

#endif /* CZ_COMPUTE_CUDA_H */
