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
    int rc;
    if ((rc = CZ_CU(err, cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking))) != CZ_OK)
        return rc;
    for (int i = 0; i <= t->n; i++)
        if ((rc = CZ_CU(err, cudaEventCreate(&t->ev[i]))) != CZ_OK)
            return rc; /* the caller's timer_close destroys what was created */
    return CZ_OK;
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
    int rc;
    if ((rc = CZ_CU(err, cudaEventSynchronize(t->ev[t->n]))) != CZ_OK)
        return rc;
    for (int i = 0; i < t->n; i++) {
        float ms = 0;
        if ((rc = CZ_CU(err, cudaEventElapsedTime(&ms, t->ev[i], t->ev[i + 1]))) != CZ_OK)
            return rc;
        v[i] = 1e-3 * (double)ms;
    }
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
    int rc;
    if (bf16 && (rc = CZ_CU(err, cz__cuda_malloc((void **)&tmp, n * sizeof(float),
                                                 CZ_CUDA_MEM_DEVICE))) != CZ_OK)
        goto done;
    float *f32 = bf16 ? tmp : dst;
    if ((rc = CZ_CU(err, cudaMemcpy(f32, host, n * sizeof(float), cudaMemcpyHostToDevice))) !=
        CZ_OK)
        goto done;
    if (bf16 && (rc = CZ_CU(err, cz__k_f32_to_bf16(s, dst, f32, (int64_t)n))) != CZ_OK)
        goto done;
    rc = CZ_CU(err, cudaStreamSynchronize(s));
done:
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
    int rc;
    if ((rc = timer_open(&t, reps, err)) != CZ_OK ||
        (rc = CZ_CU(err, cz__cuda_malloc(&a, na * es, CZ_CUDA_MEM_DEVICE))) != CZ_OK ||
        (rc = CZ_CU(err, cz__cuda_malloc(&b, nb * es, CZ_CUDA_MEM_DEVICE))) != CZ_OK ||
        (rc = CZ_CU(err, cz__cuda_malloc((void **)&c, nc * sizeof(float), CZ_CUDA_MEM_DEVICE))) !=
            CZ_OK)
        goto done;
    if ((rc = fill(a, na, bf16, t.stream, err)) != CZ_OK ||
        (rc = fill(b, nb, bf16, t.stream, err)) != CZ_OK ||
        (rc = CZ_BLAS(err, cublasCreate(&h))) != CZ_OK ||
        (rc = CZ_BLAS(err, cublasSetStream(h, t.stream))) != CZ_OK ||
        (rc = gemm_once(h, m, n, k, batch, bf16, a, b, c, err)) != CZ_OK)
        goto done;
    for (int i = 0; i < t.n; i++)
        if ((rc = CZ_CU(err, cudaEventRecord(t.ev[i], t.stream))) != CZ_OK ||
            (rc = gemm_once(h, m, n, k, batch, bf16, a, b, c, err)) != CZ_OK)
            goto done;
    if ((rc = CZ_CU(err, cudaEventRecord(t.ev[t.n], t.stream))) != CZ_OK)
        goto done;
    rc = timer_median(&t, sec, err);
done:;
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
    int rc;
    if ((rc = timer_open(&t, reps, err)) != CZ_OK ||
        (rc = CZ_CU(err, cz__cuda_malloc((void **)&x, sizeof(float), CZ_CUDA_MEM_DEVICE))) != CZ_OK)
        goto done;
    for (int i = 0; i < PER; i++)
        if ((rc = CZ_CU(err, cz__k_scale(t.stream, x, x, 1, 1.0f))) != CZ_OK)
            goto done;
    for (int r = 0; r < t.n; r++) {
        if ((rc = CZ_CU(err, cudaEventRecord(t.ev[r], t.stream))) != CZ_OK)
            goto done;
        for (int i = 0; i < PER; i++)
            if ((rc = CZ_CU(err, cz__k_scale(t.stream, x, x, 1, 1.0f))) != CZ_OK)
                goto done;
    }
    if ((rc = CZ_CU(err, cudaEventRecord(t.ev[t.n], t.stream))) != CZ_OK ||
        (rc = timer_median(&t, sec, err)) != CZ_OK)
        goto done;
    *sec /= PER;
done:;
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
    int rc;
    if ((rc = CZ_CU(err, cudaMemcpy(dst, src, bytes, kind))) != CZ_OK)
        return rc;
    for (int i = 0; i < n; i++) {
        double t0 = cz__exec_now();
        if ((rc = CZ_CU(err, cudaMemcpy(dst, src, bytes, kind))) != CZ_OK)
            return rc;
        v[i] = cz__exec_now() - t0;
    }
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    *sec = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return CZ_OK;
}

static int time_pinned(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, int reps,
                       double *sec, cz_error *err)
{
    timer t;
    int rc;
    if ((rc = timer_open(&t, reps, err)) != CZ_OK ||
        (rc = CZ_CU(err, cudaMemcpyAsync(dst, src, bytes, kind, t.stream))) != CZ_OK)
        goto done;
    for (int i = 0; i < t.n; i++)
        if ((rc = CZ_CU(err, cudaEventRecord(t.ev[i], t.stream))) != CZ_OK ||
            (rc = CZ_CU(err, cudaMemcpyAsync(dst, src, bytes, kind, t.stream))) != CZ_OK)
            goto done;
    if ((rc = CZ_CU(err, cudaEventRecord(t.ev[t.n], t.stream))) != CZ_OK)
        goto done;
    rc = timer_median(&t, sec, err);
done:
    timer_close(&t);
    return rc;
}

int cz__cuda_time_copy(size_t bytes, int to_device, int pinned, int reps, double *sec,
                       cz_error *err)
{
    void *dev = NULL, *host = NULL;
    bytes = bytes ? bytes : 1;
    int rc;
    if ((rc = CZ_CU(err, cz__cuda_malloc(&dev, bytes, CZ_CUDA_MEM_DEVICE))) != CZ_OK)
        goto done;
    if (pinned) {
        if ((rc = CZ_CU(err, cz__cuda_malloc(&host, bytes, CZ_CUDA_MEM_MAPPED))) != CZ_OK)
            goto done;
    } else if (!(host = malloc(bytes))) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of host memory for a copy of %zu bytes", bytes);
        goto done;
    }
    memset(host, 1, bytes); /* the pages exist before the copies are timed */
    enum cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    void *dst = to_device ? dev : host, *src = to_device ? host : dev;
    rc = (pinned ? time_pinned : time_pageable)(dst, src, bytes, kind, reps, sec, err);
done:;
    cz_error e;
    if (dev)
        teardown(CZ_CU(&e, cudaFree(dev)));
    if (host && pinned)
        teardown(CZ_CU(&e, cudaFreeHost(host)));
    else
        free(host);
    return rc;
}
