/* Measurements for the GPU check's calibration file (gpu_plugin.h: time_gemm, time_launch,
 * time_copy): what the cost model needs to know about this device that no datasheet says.
 * Every time is the median of `reps` calls timed one by one with CUDA events on a stream of
 * its own, after one warm-up call. Nothing here runs inside a step. */
#include "compute_cuda.h"
#include "clock.h"

#include "check.h"
#include "kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

/* Reps beyond this are not kept (a median of 64 is plenty). */
#define MAX_REPS 64

typedef struct timer {
    cudaStream_t stream;
    cudaEvent_t ev[MAX_REPS + 1];
    int n;
} timer;

static void teardown(int rc)
{
    (void)rc;
}

static int timer_open(timer *t, int reps, cz_error *err)
{
    *t = (timer){.n = reps < 1 ? 1 : reps > MAX_REPS ? MAX_REPS : reps};
    int rc = CZ_CU(err, cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking));
    for (int i = 0; !rc && i <= t->n; i++)
        rc = CZ_CU(err, cudaEventCreate(&t->ev[i]));
    return rc;
}

static void timer_close(timer *t)
{
    cz_error e;
    for (int i = 0; i <= t->n; i++)
        if (t->ev[i])
            teardown(CZ_CU(&e, cudaEventDestroy(t->ev[i])));
    if (t->stream)
        teardown(CZ_CU(&e, cudaStreamDestroy(t->stream)));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of the intervals between consecutive events, in seconds. */
static int timer_median(timer *t, double *sec, cz_error *err)
{
    double v[MAX_REPS];
    int rc = CZ_CU(err, cudaEventSynchronize(t->ev[t->n]));
    for (int i = 0; !rc && i < t->n; i++) {
        float ms = 0;
        rc = CZ_CU(err, cudaEventElapsedTime(&ms, t->ev[i], t->ev[i + 1]));
        v[i] = 1e-3 * (double)ms;
    }
    if (rc)
        return rc;
    qsort(v, (size_t)t->n, sizeof v[0], cmp_double);
    *sec = t->n % 2 ? v[t->n / 2] : 0.5 * (v[t->n / 2 - 1] + v[t->n / 2]);
    return CZ_OK;
}

/* Fills n floats of device memory with values in [-1, 1) (random-looking data: a GEMM on
 * zeros runs faster than on real operands), as bf16 when bf16. */
static int fill(void *dst, size_t n, int bf16, cudaStream_t s, cz_error *err)
{
    float *host = malloc(n * sizeof(float)), *tmp = NULL;
    if (!host)
        return cz__error_set(err, CZ_ENOMEM, "out of host memory for a calibration operand");
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        host[i] = (float)((double)(x >> 11) * 0x1p-52 - 1.0);
    }
    int rc = bf16
                 ? CZ_CU(err, cz__cuda_malloc((void **)&tmp, n * sizeof(float), CZ_CUDA_MEM_DEVICE))
                 : CZ_OK;
    float *f32 = bf16 ? tmp : dst;
    if (!rc)
        rc = CZ_CU(err, cudaMemcpy(f32, host, n * sizeof(float), cudaMemcpyHostToDevice));
    if (!rc && bf16)
        rc = CZ_CU(err, cz__k_f32_to_bf16(s, dst, f32, (int64_t)n));
    if (!rc)
        rc = CZ_CU(err, cudaStreamSynchronize(s));
    if (tmp)
        teardown(CZ_CU(err, cudaFree(tmp)));
    free(host);
    return rc;
}

/* One (strided-batched) GEMM, column-major, C = A B, no transposes. */
static int gemm_once(cublasHandle_t h, int64_t m, int64_t n, int64_t k, int batch, int bf16,
                     const void *a, const void *b, float *c, cz_error *err)
{
    const float one = 1.0f, zero = 0.0f;
    cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    return CZ_BLAS(err, cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)m, (int)n,
                                                   (int)k, &one, a, in, (int)m, (long long)(m * k),
                                                   b, in, (int)k, (long long)(k * n), &zero, c,
                                                   CUDA_R_32F, (int)m, (long long)(m * n), batch,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

int cz__cuda_time_gemm(int64_t m, int64_t n, int64_t k, int batch, int bf16, int reps, double *sec,
                       cz_error *err)
{
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0 || m > 65536 || n > 65536 || k > 65536)
        return cz__error_set(err, CZ_EINVALID,
                             "time_gemm: %lld x %lld x %lld (batch %d) is out "
                             "of the measured range",
                             (long long)m, (long long)n, (long long)k, batch);
    size_t es = bf16 ? 2 : 4, na = (size_t)(m * k) * (size_t)batch;
    size_t nb = (size_t)(k * n) * (size_t)batch, nc = (size_t)(m * n) * (size_t)batch;
    void *a = NULL, *b = NULL;
    float *c = NULL;
    cublasHandle_t h = NULL;
    timer t;
    int rc = timer_open(&t, reps, err);
    if (!rc)
        rc = CZ_CU(err, cz__cuda_malloc(&a, na * es, CZ_CUDA_MEM_DEVICE));
    if (!rc)
        rc = CZ_CU(err, cz__cuda_malloc(&b, nb * es, CZ_CUDA_MEM_DEVICE));
    if (!rc)
        rc = CZ_CU(err, cz__cuda_malloc((void **)&c, nc * sizeof(float), CZ_CUDA_MEM_DEVICE));
    if (!rc)
        rc = fill(a, na, bf16, t.stream, err);
    if (!rc)
        rc = fill(b, nb, bf16, t.stream, err);
    if (!rc)
        rc = CZ_BLAS(err, cublasCreate(&h));
    if (!rc)
        rc = CZ_BLAS(err, cublasSetStream(h, t.stream));
    if (!rc)
        rc = gemm_once(h, m, n, k, batch, bf16, a, b, c, err);
    for (int i = 0; !rc && i < t.n; i++) {
        rc = CZ_CU(err, cudaEventRecord(t.ev[i], t.stream));
        if (!rc)
            rc = gemm_once(h, m, n, k, batch, bf16, a, b, c, err);
    }
    if (!rc)
        rc = CZ_CU(err, cudaEventRecord(t.ev[t.n], t.stream));
    if (!rc)
        rc = timer_median(&t, sec, err);
    cz_error e;
    if (h)
        teardown(CZ_BLAS(&e, cublasDestroy(h)));
    if (a)
        teardown(CZ_CU(&e, cudaFree(a)));
    if (b)
        teardown(CZ_CU(&e, cudaFree(b)));
    if (c)
        teardown(CZ_CU(&e, cudaFree(c)));
    timer_close(&t);
    return rc;
}

/* Launches of a one-element kernel back to back: the launch's own cost, which every small op
 * of a step pays (the median over reps of the time of 100 launches, divided by 100). */
int cz__cuda_time_launch(int reps, double *sec, cz_error *err)
{
    enum { PER = 100 };
    float *x = NULL;
    timer t;
    int rc = timer_open(&t, reps, err);
    if (!rc)
        rc = CZ_CU(err, cz__cuda_malloc((void **)&x, sizeof(float), CZ_CUDA_MEM_DEVICE));
    for (int i = 0; !rc && i < PER; i++)
        rc = CZ_CU(err, cz__k_scale(t.stream, x, x, 1, 1.0f));
    for (int r = 0; !rc && r < t.n; r++) {
        rc = CZ_CU(err, cudaEventRecord(t.ev[r], t.stream));
        for (int i = 0; !rc && i < PER; i++)
            rc = CZ_CU(err, cz__k_scale(t.stream, x, x, 1, 1.0f));
    }
    if (!rc)
        rc = CZ_CU(err, cudaEventRecord(t.ev[t.n], t.stream));
    if (!rc)
        rc = timer_median(&t, sec, err);
    if (!rc)
        *sec /= PER;
    cz_error e;
    if (x)
        teardown(CZ_CU(&e, cudaFree(x)));
    timer_close(&t);
    return rc;
}

/* Pageable copies go through the driver's staging buffers with the host taking part, so they
 * are timed on the host clock around a synchronous cudaMemcpy; pinned ones with events. */
static int time_pageable(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                         int reps, double *sec, cz_error *err)
{
    double v[MAX_REPS];
    int n = reps < 1 ? 1 : reps > MAX_REPS ? MAX_REPS : reps;
    int rc = CZ_CU(err, cudaMemcpy(dst, src, bytes, kind));
    for (int i = 0; !rc && i < n; i++) {
        double t0 = cz__exec_now();
        rc = CZ_CU(err, cudaMemcpy(dst, src, bytes, kind));
        v[i] = cz__exec_now() - t0;
    }
    if (rc)
        return rc;
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    *sec = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return CZ_OK;
}

static int time_pinned(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, int reps,
                       double *sec, cz_error *err)
{
    timer t;
    int rc = timer_open(&t, reps, err);
    if (!rc)
        rc = CZ_CU(err, cudaMemcpyAsync(dst, src, bytes, kind, t.stream));
    for (int i = 0; !rc && i < t.n; i++) {
        rc = CZ_CU(err, cudaEventRecord(t.ev[i], t.stream));
        if (!rc)
            rc = CZ_CU(err, cudaMemcpyAsync(dst, src, bytes, kind, t.stream));
    }
    if (!rc)
        rc = CZ_CU(err, cudaEventRecord(t.ev[t.n], t.stream));
    if (!rc)
        rc = timer_median(&t, sec, err);
    timer_close(&t);
    return rc;
}

int cz__cuda_time_copy(size_t bytes, int to_device, int pinned, int reps, double *sec,
                       cz_error *err)
{
    void *dev = NULL, *host = NULL;
    bytes = bytes ? bytes : 1;
    int rc = CZ_CU(err, cz__cuda_malloc(&dev, bytes, CZ_CUDA_MEM_DEVICE));
    if (!rc && pinned)
        rc = CZ_CU(err, cz__cuda_malloc(&host, bytes, CZ_CUDA_MEM_MAPPED));
    else if (!rc && !(host = malloc(bytes)))
        rc = cz__error_set(err, CZ_ENOMEM, "out of host memory for a copy of %zu bytes", bytes);
    if (!rc)
        memset(host, 1, bytes); /* the pages exist before the copies are timed */
    enum cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    void *dst = to_device ? dev : host, *src = to_device ? host : dev;
    if (!rc)
        rc = (pinned ? time_pinned : time_pageable)(dst, src, bytes, kind, reps, sec, err);
    cz_error e;
    if (dev)
        teardown(CZ_CU(&e, cudaFree(dev)));
    if (host && pinned)
        teardown(CZ_CU(&e, cudaFreeHost(host)));
    else
        free(host);
    return rc;
}
