// The CUDA backend's linear-algebra kernels (linalg_kernels.h): grid-stride loops over
// elementwise.h's per-element functions, as kernels.cu does for the other ops. Reductions that
// the CPU does in a fixed order (basis_sort's column estimates, eig_root_scale's minimum) run
// in the same order here, one column per thread, so the two backends differ only by the
// device's fused multiply-adds and pow.
#include "linalg_kernels.h"

#include "check.h"
#include "grid.cuh"

#include "../elementwise.h"
#include "../launch.h"

#include <cuda_runtime.h>

namespace
{

// Each unordered pair (r, c), r < c, is swapped by exactly one thread.
__global__ void transpose_sq_kernel(float *a, int64_t n)
{
    for (int64_t i = first_index(); i < n * n; i += grid_stride()) {
        int64_t r = i / n, c = i % n;
        if (c > r) {
            float t = a[r * n + c];
            a[r * n + c] = a[c * n + r];
            a[c * n + r] = t;
        }
    }
}

__global__ void axpby_kernel(float *y, const float *x, int64_t n, float a, float b)
{
    for (int64_t i = first_index(); i < n; i += grid_stride())
        y[i] = cz_ew_axpby(y[i], x[i], a, b);
}

__global__ void sq_accum_kernel(float *acc, const float *x, int64_t n, float a, float b)
{
    for (int64_t i = first_index(); i < n; i += grid_stride())
        acc[i] = cz_ew_sq_accum(acc[i], x[i], a, b);
}

__global__ void graft_div_kernel(float *dst, const float *x, const float *acc, int64_t n,
                                 float inv_bias, float eps)
{
    for (int64_t i = first_index(); i < n; i += grid_stride())
        dst[i] = cz_ew_graft_div(x[i], acc[i], inv_bias, eps);
}

__global__ void scale_ratio_kernel(float *x, int64_t n, const double *num, const double *den)
{
    float f = cz_ew_ratio(*num, *den);
    for (int64_t i = first_index(); i < n; i += grid_stride())
        x[i] *= f;
}

// Every block folds the minimum of w itself (n <= max_precond_dim reads, against n^2 / blocks
// elements of work each): no second kernel and no scratch for it.
__global__ void eig_root_scale_kernel(float *dst, const float *q, const float *w, int64_t n,
                                      float root, float eps)
{
    __shared__ float lo;
    if (threadIdx.x == 0) {
        float m = 0.0f;
        for (int64_t j = 0; j < n; j++)
            m = cz_ew_eig_min(m, w[j]);
        lo = m;
    }
    __syncthreads();
    for (int64_t i = first_index(); i < n * n; i += grid_stride()) {
        int64_t j = i % n;
        dst[i] = cz_ew_root_apply(q[i], cz_ew_root_scale(w[j], lo, eps, root));
    }
}

__global__ void sort_est_kernel(const float *q, const float *mq, int64_t n, double *est)
{
    for (int64_t j = first_index(); j < n; j += grid_stride()) {
        double e = 0.0;
        for (int64_t i = 0; i < n; i++)
            e += (double)q[i * n + j] * (double)mq[i * n + j];
        est[j] = e;
    }
}

__global__ void sort_place_kernel(const double *est, int64_t n, int *perm)
{
    for (int64_t j = first_index(); j < n; j += grid_stride()) {
        int64_t place = 0;
        for (int64_t k = 0; k < n; k++)
            place += cz_ew_sorts_before(est[k], k, est[j], j);
        perm[place] = (int)j;
    }
}

__global__ void permute_kernel(float *dst, const float *src, int64_t rows, int64_t cols,
                               const int *perm, int side)
{
    for (int64_t i = first_index(); i < rows * cols; i += grid_stride()) {
        int64_t r = i / cols, c = i % cols;
        dst[i] = side == 0 ? src[perm[r] * cols + c] : src[r * cols + perm[c]];
    }
}

__global__ void solver_info_kernel(const int *info, int *flag, int code, int n)
{
    int v = *info;
    if (v != 0 && flag[0] == 0) {
        flag[1] = v;
        flag[2] = n;
        __threadfence_system();
        flag[0] = code;
    }
}

} // namespace

extern "C" {

int cz__k_transpose_sq(void *stream, float *a, int64_t n)
{
    if (n <= 1)
        return 0;
    transpose_sq_kernel<<<blocks(n * n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(a, n);
    return launched();
}

int cz__k_axpby(void *stream, float *y, const float *x, int64_t n, float a, float b)
{
    if (n <= 0)
        return 0;
    axpby_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(y, x, n, a, b);
    return launched();
}

int cz__k_sq_accum(void *stream, float *acc, const float *x, int64_t n, float a, float b)
{
    if (n <= 0)
        return 0;
    sq_accum_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(acc, x, n, a, b);
    return launched();
}

int cz__k_graft_div(void *stream, float *dst, const float *x, const float *acc, int64_t n,
                    float inv_bias, float eps)
{
    if (n <= 0)
        return 0;
    graft_div_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(dst, x, acc, n, inv_bias,
                                                                           eps);
    return launched();
}

int cz__k_scale_ratio(void *stream, float *x, int64_t n, const double *num, const double *den)
{
    if (n <= 0)
        return 0;
    scale_ratio_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(x, n, num, den);
    return launched();
}

int cz__k_eig_root_scale(void *stream, float *dst, const float *q, const float *w, int64_t n,
                         float root, float eps)
{
    if (n <= 0)
        return 0;
    eig_root_scale_kernel<<<blocks(n * n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(dst, q, w, n,
                                                                                    root, eps);
    return launched();
}

int cz__k_sort_order(void *stream, const float *q, const float *mq, int64_t n, double *est,
                     int *perm)
{
    if (n <= 0)
        return 0;
    sort_est_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(q, mq, n, est);
    int rc = launched();
    if (rc)
        return rc;
    sort_place_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(est, n, perm);
    return launched();
}

int cz__k_permute(void *stream, float *dst, const float *src, int64_t rows, int64_t cols,
                  const int *perm, int side)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    permute_kernel<<<blocks(rows * cols), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(
        dst, src, rows, cols, perm, side);
    return launched();
}

int cz__k_solver_info(void *stream, const int *info, int *flag, int code, int n)
{
    solver_info_kernel<<<1, 1, 0, as_stream(stream)>>>(info, flag, code, n);
    return launched();
}

} // extern "C"
