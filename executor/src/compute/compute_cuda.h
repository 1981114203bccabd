/*
 * compute_cuda.h — the "cuda" compute backend's extra entry points (cuda/compute_cuda.c), for
 * the NCCL data plane and the plugin's entry (plugin.c). Plain C: a CUDA stream or event crosses
 * this header as void *. Only the plugin includes it; the executor reaches the backend through
 * gpu_plugin.h.
 */
#ifndef CZ_COMPUTE_CUDA_H
#define CZ_COMPUTE_CUDA_H

#include "gpu_plugin.h"

/* Device allocations go through cz__cuda_malloc, which counts them for the GPU check
 * (cz_gpu_api.alloc_count): a step must make none. Returns the cudaError_t as an int. */
typedef enum cz_cuda_memory {
    CZ_CUDA_MEM_DEVICE,  /* cudaMalloc */
    CZ_CUDA_MEM_MANAGED, /* cudaMallocManaged (global) */
    CZ_CUDA_MEM_MAPPED,  /* cudaHostAlloc, mapped */
} cz_cuda_memory;
int cz__cuda_malloc(void **p, size_t bytes, cz_cuda_memory kind);
/* The device allocations cz__cuda_malloc has made since the plugin was loaded. */
uint64_t cz__cuda_alloc_count(void);
/* Lends the plugin the executor's allocator (the entry, once). */
void cz__cuda_memory_init(const cz_gpu_host *h);

/* Opens the backend on the current CUDA device: creates (or adopts) the stream, the cuBLAS
 * handle and its workspace, and the device scratch. CZ_EUNSUPPORTED when no device is
 * present, with the CUDA runtime's reason. */
int cz__compute_cuda_open(cz_compute *c, const cz_cuda_options *o, cz_error *err);
/* Releases what open created (cz__compute_close calls it for a cuda backend). */
void cz__compute_cuda_close(cz_compute *c);

/* The backend's stream (a cudaStream_t) and the cudaEvent_t behind an event. */
void *cz__cuda_stream(cz_compute *c);
void *cz__cuda_event(cz_event *e);

/* The first failure of an op that returns nothing (kernel launches, cuBLAS calls), reported
 * once: CZ_OK when there was none. */
int cz__cuda_take_error(cz_compute *c, cz_error *err);

/* A watcher polled while the host waits on the device (event_sync, download): a data plane
 * registers one so that a peer's failure or a timeout ends the wait with an error (NCCL:
 * ncclCommGetAsyncError, then ncclCommAbort) instead of hanging. Returns CZ_EINVALID when
 * all CZ_CUDA_MAX_WATCHERS slots are taken. The planes: world, DP, TP, and one sub-plane per
 * cooperative width (powers of two up to TP 512 make 9). */
#define CZ_CUDA_MAX_WATCHERS 16
/* waited_s: seconds this host wait has lasted so far (for a timeout). */
typedef int (*cz_cuda_watch_fn)(void *ctx, double waited_s, cz_error *err);
int cz__cuda_watch(cz_compute *c, cz_cuda_watch_fn fn, void *ctx);
void cz__cuda_unwatch(cz_compute *c, void *ctx);
/* Waits for a CUDA event (a cudaEvent_t) on the host, polling the watchers. */
int cz__cuda_host_wait(cz_compute *c, void *event, cz_error *err);

/* Only the cuBLAS calls of ns_batched (same shapes, same GEMMs and SYRKs, no kernels): the
 * micro-benchmark's reference for what the GEMMs alone reach. */
int cz__cuda_ns_gemms(cz_compute *c, float *x, int batch, int64_t rows, int64_t cols,
                      const cz_ns_coeffs *k, int steps, float *work, cz_error *err);

/* ---- the linear-algebra ops (cuda/compute_cuda_linalg.c; SOAP and Shampoo) ---- */
typedef struct cz_cuda_linalg cz_cuda_linalg;
/* Creates the cuSOLVER handle on stream (a cudaStream_t), its devInfo and the mapped failure
 * flag (at open). *out is set even on failure, for close. */
int cz__cuda_linalg_open(cz_compute *c, void *stream, cz_cuda_linalg **out, cz_error *err);
void cz__cuda_linalg_close(cz_cuda_linalg *la);
/* The first solver failure flagged on the device (devInfo != 0) that the host can see, as an
 * error, once: call it right after a host wait on the stream (cz__cuda_host_wait does). */
int cz__cuda_linalg_take_error(cz_cuda_linalg *la, cz_error *err);
/* For compute_cuda_linalg.c: the backend's linear-algebra state, its cuBLAS handle (a
 * cublasHandle_t), and the sticky failure of an op that returns nothing. */
cz_cuda_linalg *cz__cuda_linalg_of(cz_compute *c);
void *cz__cuda_blas(cz_compute *c);
void cz__cuda_note(cz_compute *c, int rc, const cz_error *e);
/* Notes a kernel launch's status (krc from the kernel wrappers) as cz__cuda_note does. */
void cz__cuda_note_launch(cz_compute *c, int krc, const char *what);
/* The ops themselves, for the backend's table (compute.h documents each). */
void cz__cuda_gemm(cz_compute *c, int transa, int transb, int64_t m, int64_t n, int64_t k,
                   float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                   float beta, float *cm, int64_t ldc);
void cz__cuda_tile_copy(cz_compute *c, float *dst, int64_t ldd, const float *src, int64_t lds,
                        int64_t rows, int64_t cols);
int cz__cuda_syevd(cz_compute *c, float *a, float *w, int64_t n, float *work, cz_error *err);
void cz__cuda_eig_root_scale(cz_compute *c, float *dst, const float *q, const float *w, int64_t n,
                             float root, float eps);
void cz__cuda_axpby(cz_compute *c, float *y, const float *x, int64_t n, float a, float b);
void cz__cuda_sq_accum(cz_compute *c, float *acc, const float *x, int64_t n, float a, float b);
void cz__cuda_graft_div(cz_compute *c, float *dst, const float *x, const float *acc, int64_t n,
                        float inv_bias, float eps);
void cz__cuda_scale_ratio(cz_compute *c, float *x, int64_t n, const double *num, const double *den);
int cz__cuda_qr(cz_compute *c, float *a, int64_t n, float *work, cz_error *err);
void cz__cuda_basis_sort(cz_compute *c, float *q, float *mq, int64_t n, float *v, int64_t rows,
                         int64_t cols, int side, float *work);
int cz__cuda_linalg_work(cz_compute *c, int64_t n, int64_t vn, cz_linalg_work *out, cz_error *err);

/* The calibration measurements (cuda/calibrate.c; gpu_plugin.h documents them). */
int cz__cuda_time_gemm(int64_t m, int64_t n, int64_t k, int batch, int bf16, int reps, double *sec,
                       cz_error *err);
int cz__cuda_time_launch(int reps, double *sec, cz_error *err);
int cz__cuda_time_copy(size_t bytes, int to_device, int pinned, int reps, double *sec,
                       cz_error *err);

/* True when a CUDA device is usable (the gpu tests skip otherwise). */
int cz__cuda_device_present(char *why, size_t len);

#endif /* CZ_COMPUTE_CUDA_H */
