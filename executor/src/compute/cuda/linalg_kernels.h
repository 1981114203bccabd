/*
 * linalg_kernels.h — the kernels of the CUDA backend's linear-algebra ops (compute ops version
 * 2: SOAP and Shampoo), implemented in linalg_kernels.cu, behind a C interface like kernels.h:
 * every launcher enqueues on `stream` (a cudaStream_t as void *) and returns the launch's
 * cudaError_t as an int. The per-element arithmetic is elementwise.h's, the functions the cpu
 * backend's loops (compute_cpu_linalg.c) call.
 */
#ifndef CZ_CUDA_LINALG_KERNELS_H
#define CZ_CUDA_LINALG_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The square n x n matrix a transposed in place. */
int cz__k_transpose_sq(void *stream, float *a, int64_t n);
int cz__k_axpby(void *stream, float *y, const float *x, int64_t n, float a, float b);
int cz__k_sq_accum(void *stream, float *acc, const float *x, int64_t n, float a, float b);
int cz__k_graft_div(void *stream, float *dst, const float *x, const float *acc, int64_t n,
                    float inv_bias, float eps);
/* x *= sqrt(*num / *den) (num, den device doubles), 0 when *den is 0. */
int cz__k_scale_ratio(void *stream, float *x, int64_t n, const double *num, const double *den);
/* dst = q diag((w - min(0, min w) + eps)^(-1/root)), n x n row-major. */
int cz__k_eig_root_scale(void *stream, float *dst, const float *q, const float *w, int64_t n,
                         float root, float eps);
/* SOAP's order: est[j] = column j of q . column j of mq (double), perm[place of j] = j. */
int cz__k_sort_order(void *stream, const float *q, const float *mq, int64_t n, double *est,
                     int *perm);
/* dst (rows x cols) = src with its rows (side 0) or columns (side 1) gathered through perm:
 * dst[i][j] = src[perm[i]][j] or src[i][perm[j]]. dst must not alias src. */
int cz__k_permute(void *stream, float *dst, const float *src, int64_t rows, int64_t cols,
                  const int *perm, int side);
/* After a solver call on an n x n matrix: when *info is not 0 and flag[0] is still 0, flag =
 * {code, *info, n} (flag[0] written last). flag is the device address of mapped host memory,
 * so the host reads it after any wait on the stream without a copy of its own. */
int cz__k_solver_info(void *stream, const int *info, int *flag, int code, int n);

#ifdef __cplusplus
}
#endif

#endif /* CZ_CUDA_LINALG_KERNELS_H */
