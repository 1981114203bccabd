/*
 * kernels.h — the CUDA backend's kernels behind a C interface (implemented in kernels.cu, the
 * only CUDA C++ of the backend). Every launcher enqueues its kernel(s) on `stream` (a
 * cudaStream_t passed as void * so that C callers need no CUDA header) and returns the
 * cudaError_t of the launch as an int (0 = success). The per-element arithmetic is
 * elementwise.h's, the same functions the CPU backend's loops call.
 */
#ifndef CZ_CUDA_KERNELS_H
#define CZ_CUDA_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* runs: nruns (dst, src, len) triples in device memory (cz_copy_run's layout), the longest
 * max_len elements (the launch's grid, cz_launch_runs_grid). */
int cz__k_copy_runs(void *stream, float *dst, const float *src, const int64_t *runs, int64_t nruns,
                    int64_t max_len);
int cz__k_f32_to_bf16(void *stream, uint16_t *dst, const float *src, int64_t n);
int cz__k_bf16_to_f32(void *stream, float *dst, const uint16_t *src, int64_t n);
int cz__k_scale(void *stream, float *dst, const float *src, int64_t n, float alpha);
/* *out = sum of squares of x (double), n elements. */
int cz__k_sumsq(void *stream, const float *x, int64_t n, double *out);
int cz__k_momentum(void *stream, const float *g, float *buf, float *in, int64_t n, float mu,
                   int nesterov);
/* Normalises the rows x cols block at src (row stride ld) into dst; sq is one double of device
 * scratch for the block's sum of squares. */
int cz__k_block_load(void *stream, float *dst, const float *src, int64_t ld, int64_t rows,
                     int64_t cols, int transpose, float eps, double *sq);
int cz__k_block_store(void *stream, float *dst, int64_t ld, const float *src, int64_t rows,
                      int64_t cols, int transpose, float scale);
int cz__k_apply_update(void *stream, float *p, const float *u, int64_t n, float lr, float wd);
/* apply_update over nruns (dst in p, src in u, len) triples in device memory. */
int cz__k_apply_runs(void *stream, float *p, const float *u, const int64_t *runs, int64_t nruns,
                     int64_t max_len, float lr, float wd);
/* block_load with the sum of squares given (*sq, device memory): no reduction of its own. */
int cz__k_block_load_sq(void *stream, float *dst, const float *src, int64_t ld, int64_t rows,
                        int64_t cols, int transpose, float eps, const double *sq);
int cz__k_adamw(void *stream, float *p, const float *g, float *m, float *v, int64_t n, float b1,
                float b2, float c1, float c2, float lr, float eps, float wd);
/* For each of batch matrices i: c_i[j] = alpha a_i[j] + beta c_i[j] (beta 0: c not read). */
int cz__k_axpby_batched(void *stream, float *c, int64_t c_stride, const float *a, int64_t a_stride,
                        int64_t len, int batch, float alpha, float beta);
/* For each of batch column-major n x n matrices c_i: the lower triangle from the upper one
 * (after an upper-triangle SYRK). */
int cz__k_symfill_batched(void *stream, float *c, int64_t c_stride, int64_t n, int batch);
/* Cooperative Newton-Schulz's Gram panels (ns_coop.h): for each of batch row-major a x a
 * matrices full_i (a * a apart), rows r0 .. r1-1 of the upper triangle (row i's columns i ..
 * a-1) packed into out_i, cz_ns_panel_len(a, r0, r1) floats each, back to back. */
int cz__k_ns_pack_rows(void *stream, float *out, const float *full, int64_t a, int64_t r0,
                       int64_t r1, int batch);
/* The inverse into full_i: row i's columns i .. a-1 and, mirrored, column i's rows i+1 .. a-1,
 * for i in r0 .. r1-1; nothing else of full_i is touched. */
int cz__k_ns_unpack_rows(void *stream, float *full, const float *in, int64_t a, int64_t r0,
                         int64_t r1, int batch);
/* For each of batch matrices i: c_i (bf16) = a_i (fp32). */
int cz__k_to_bf16_batched(void *stream, uint16_t *c, int64_t c_stride, const float *a,
                          int64_t a_stride, int64_t len, int batch);
/* NorMuon's normalization of the contiguous rows x cols matrix x in place (compute.h's
 * normuon): v (n floats, stride vs) the lines' EMA, work 2 n + 1 doubles of device memory. */
int cz__k_normuon(void *stream, float *x, int64_t rows, int64_t cols, int per_col, float *v,
                  int64_t vs, float beta2, float eps, double *work);
/* The CUDA error string of a launcher's return value. */
const char *cz__k_error_string(int rc);

#ifdef __cplusplus
}
#endif

#endif /* CZ_CUDA_KERNELS_H */
