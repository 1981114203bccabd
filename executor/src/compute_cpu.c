/* The "cpu" compute backend: host memory, fp32, OpenBLAS. A batched call loops over
 * cblas_sgemm; the batched interface is what a GPU backend maps to strided-batched GEMM. */
#include "exec_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void *cpu_alloc(cz_compute *c, size_t bytes)
{
    (void)c;
    return malloc(bytes ? bytes : 1);
}

static void cpu_release(cz_compute *c, void *p)
{
    (void)c;
    free(p);
}

static int cpu_ns_batched(cz_compute *c, float *x, int batch, int64_t rows, int64_t cols,
                          const cz_ns_coeffs *k, int steps, float *work, cz_error *err)
{
    (void)c;
    if (rows > cols || rows > INT32_MAX || cols > INT32_MAX)
        return cz_error_set(err, CZ_EINTERNAL,
                            "Newton-Schulz called on a %lld x %lld matrix (needs rows <= cols)",
                            (long long)rows, (long long)cols);
    int r = (int)rows, n = (int)cols;
    float a = (float)k->a, b = (float)k->b, cc = (float)k->c;
    for (int i = 0; i < batch; i++) {
        float *X = x + (size_t)i * (size_t)(r * (int64_t)n);
        float *A = work + (size_t)i * (size_t)(2 * (int64_t)r * r + (int64_t)r * n);
        float *B = A + (size_t)r * r;
        float *Y = B + (size_t)r * r;
        for (int s = 0; s < steps; s++) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r, r, n, 1.0f, X, n, X, n, 0.0f, A,
                        r);
            for (size_t j = 0; j < (size_t)r * r; j++)
                B[j] = b * A[j];
            if (cc != 0.0f)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, r, r, cc, A, r, A, r,
                            1.0f, B, r);
            for (size_t j = 0; j < (size_t)r * n; j++)
                Y[j] = a * X[j];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, n, r, 1.0f, B, r, X, n, 1.0f,
                        Y, n);
            memcpy(X, Y, (size_t)r * n * sizeof(float));
        }
    }
    return CZ_OK;
}

static double cpu_norm(cz_compute *c, const float *x, int64_t n)
{
    (void)c;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s);
}

static const cz_compute_ops cz_compute_cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .release = cpu_release,
    .ns_batched = cpu_ns_batched,
    .norm = cpu_norm,
};

int cz_compute_open(cz_compute *c, const char *name, cz_error *err)
{
    c->ops = NULL;
    c->impl = NULL;
    if (!name || strcmp(name, "cpu") == 0) {
        c->ops = &cz_compute_cpu_ops;
        return CZ_OK;
    }
    return cz_error_set(err, CZ_EUNSUPPORTED,
                        "compute backend '%s' is not available in this build (known: cpu)", name);
}

void cz_compute_close(cz_compute *c)
{
    c->ops = NULL;
    c->impl = NULL;
}
