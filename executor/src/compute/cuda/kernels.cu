// The CUDA backend's kernels: grid-stride loops over elementwise.h's per-element functions.
// Reductions (sum of squares) go through one block-level tree per block and one double
// atomicAdd per block, so their summation order differs from the CPU's; the sum is only used
// for the norm and the finiteness flag, where that does not matter.
#include "kernels.h"

#include "check.h"
#include "grid.cuh"

#include "../elementwise.h"
#include "../launch.h"

#include <cuda_runtime.h>

namespace
{

// One block per run; the block's threads stride through the run.
// Kernels over run lists: grid y walks the runs, grid x a run's elements
// (cz_launch_runs_grid).
__global__ void copy_runs_kernel(float *dst, const float *src, const int64_t *runs, int64_t nruns)
{
    for (int64_t r = blockIdx.y; r < nruns; r += gridDim.y) {
        int64_t d = runs[3 * r], s = runs[3 * r + 1], len = runs[3 * r + 2];
        for (int64_t j = first_index(); j < len; j += grid_stride())
            dst[d + j] = src[s + j];
    }
}

__global__ void f32_to_bf16_kernel(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = first_index(); i < n; i += grid_stride())
        dst[i] = cz_ew_bf16_from_f32(src[i]);
}

__global__ void bf16_to_f32_kernel(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t i = first_index(); i < n; i += grid_stride())
        dst[i] = cz_ew_f32_from_bf16(src[i]);
}

__global__ void scale_kernel(float *dst, const float *src, int64_t n, float alpha)
{
    for (int64_t i = first_index(); i < n; i += grid_stride())
        dst[i] = cz_ew_scale(src[i], alpha);
}

// Sum of squares of a rows x cols block with row stride ld (a vector is 1 x n).
__global__ void sumsq_kernel(const float *x, int64_t ld, int64_t rows, int64_t cols, double *out)
{
    __shared__ double part[CZ_CUDA_THREADS];
    double s = 0.0;
    int64_t n = rows * cols;
    for (int64_t i = first_index(); i < n; i += grid_stride())
        s += cz_ew_sq(x[(i / cols) * ld + i % cols]);
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(out, part[0]);
}

__global__ void momentum_kernel(const float *g, float *buf, float *in, int64_t n, float mu,
                                int nesterov)
{
    for (int64_t i = first_index(); i < n; i += grid_stride())
        in[i] = cz_ew_momentum(g[i], &buf[i], mu, nesterov);
}

// dst (contiguous, transposed when transpose) = src block * scale; scale is *sq turned into
// the normalising factor when sq is given.
__global__ void block_copy_kernel(float *dst, const float *src, int64_t ld, int64_t rows,
                                  int64_t cols, int transpose, float scale, const double *sq,
                                  float eps)
{
    float f = sq ? cz_ew_norm_inv(*sq, eps) : scale;
    int64_t n = rows * cols;
    for (int64_t i = first_index(); i < n; i += grid_stride()) {
        int64_t r = i / cols, c = i % cols;
        float v = cz_ew_scale(src[r * ld + c], f);
        if (transpose)
            dst[c * rows + r] = v;
        else
            dst[r * cols + c] = v;
    }
}

// The rows x cols block at dst (row stride ld) = scale * src (contiguous, transposed back when
// transpose).
__global__ void block_store_kernel(float *dst, int64_t ld, const float *src, int64_t rows,
                                   int64_t cols, int transpose, float scale)
{
    int64_t n = rows * cols;
    for (int64_t i = first_index(); i < n; i += grid_stride()) {
        int64_t r = i / cols, c = i % cols;
        float v = transpose ? src[c * rows + r] : src[r * cols + c];
        dst[r * ld + c] = cz_ew_scale(v, scale);
    }
}

__global__ void apply_update_kernel(float *p, const float *u, int64_t n, float keep, float lr)
{
    for (int64_t i = first_index(); i < n; i += grid_stride())
        p[i] = cz_ew_update(p[i], u[i], keep, lr);
}

// One block per run, as copy_runs: p[dst + j] updated from u[src + j].
__global__ void apply_runs_kernel(float *p, const float *u, const int64_t *runs, int64_t nruns,
                                  float keep, float lr)
{
    for (int64_t r = blockIdx.y; r < nruns; r += gridDim.y) {
        int64_t d = runs[3 * r], s = runs[3 * r + 1], len = runs[3 * r + 2];
        for (int64_t j = first_index(); j < len; j += grid_stride())
            p[d + j] = cz_ew_update(p[d + j], u[s + j], keep, lr);
    }
}

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, int64_t n, float b1,
                             float b2, float c1, float c2, float lr, float eps, float keep)
{
    for (int64_t i = first_index(); i < n; i += grid_stride())
        p[i] = cz_ew_adamw(p[i], g[i], &m[i], &v[i], b1, b2, c1, c2, lr, eps, keep);
}

// blockIdx.y = matrix of the batch.
__global__ void axpby_batched_kernel(float *c, int64_t cs, const float *a, int64_t as, int64_t len,
                                     float alpha, float beta)
{
    float *ci = c + blockIdx.y * cs;
    const float *ai = a + blockIdx.y * as;
    for (int64_t j = first_index(); j < len; j += grid_stride())
        ci[j] = alpha * ai[j] + (beta != 0.0f ? beta * ci[j] : 0.0f);
}

/* Column-major n x n: element (row i, col j) at i + j n; the lower one (i > j) gets the upper
 * one's value. Reads only the upper triangle and writes only the lower one, so no element is
 * both read and written. */
__global__ void symfill_batched_kernel(float *c, int64_t cs, int64_t n)
{
    float *ci = c + blockIdx.y * cs;
    for (int64_t e = first_index(); e < n * n; e += grid_stride()) {
        int64_t i = e % n, j = e / n;
        if (i > j)
            ci[e] = ci[j + i * n];
    }
}

/* Offset of row i's first packed element (i, i) in a packed a x a upper triangle: ns_coop.h's
 * layout, the same formula as cz_coop_packed_before (cz_plan_types.h, host-only C). */
__device__ __forceinline__ int64_t packed_before(int64_t a, int64_t i)
{
    return i * a - i * (i - 1) / 2;
}

/* Panel kernels loop over the batch in grid.y, so that any batch fits the grid's y limit. */
constexpr int max_grid_y = CZ_CUDA_MAX_GRID_Y;

/* One thread per element of the panel's h x w rectangle of full (rows r0 .. r1-1, columns
 * r0 .. a-1): the (i, j) with j >= i go to their packed place, the few left of the diagonal
 * idle. Reads and writes run along rows, so both are coalesced, and no inverse of the packed
 * index is needed. */
__global__ void ns_pack_rows_kernel(float *out, const float *full, int64_t a, int64_t r0,
                                    int64_t r1, int batch)
{
    int64_t w = a - r0, n = (r1 - r0) * w, base = packed_before(a, r0);
    int64_t pl = packed_before(a, r1) - base;
    for (int64_t m = blockIdx.y; m < batch; m += gridDim.y) {
        float *o = out + m * pl;
        const float *f = full + m * a * a;
        for (int64_t e = first_index(); e < n; e += grid_stride()) {
            int64_t i = r0 + e / w, j = r0 + e % w;
            if (j >= i)
                o[packed_before(a, i) - base + (j - i)] = f[i * a + j];
        }
    }
}

/* One thread per element of full that the panel writes, each written once: first rows r0 ..
 * r1-1 from column r0 on (h x w), then rows r1 .. a-1 in columns r0 .. r1-1 ((a - r1) x h).
 * Element (p, q) reads packed (min, max), which lies in the panel because min(p, q) is one of
 * its rows. Threads run along full's rows, so the writes are coalesced and the mirrored reads
 * are the scattered side (neighbouring rows read neighbouring packed elements, from cache). */
__global__ void ns_unpack_rows_kernel(float *full, const float *in, int64_t a, int64_t r0,
                                      int64_t r1, int batch)
{
    int64_t h = r1 - r0, w = a - r0, top = h * w, n = top + (a - r1) * h;
    int64_t base = packed_before(a, r0), pl = packed_before(a, r1) - base;
    for (int64_t m = blockIdx.y; m < batch; m += gridDim.y) {
        float *f = full + m * a * a;
        const float *s = in + m * pl;
        for (int64_t e = first_index(); e < n; e += grid_stride()) {
            int64_t p, q;
            if (e < top) {
                p = r0 + e / w;
                q = r0 + e % w;
            } else {
                p = r1 + (e - top) / h;
                q = r0 + (e - top) % h;
            }
            int64_t i = p < q ? p : q, j = p < q ? q : p;
            f[p * a + q] = s[packed_before(a, i) - base + (j - i)];
        }
    }
}

__global__ void to_bf16_batched_kernel(uint16_t *c, int64_t cs, const float *a, int64_t as,
                                       int64_t len)
{
    uint16_t *ci = c + blockIdx.y * cs;
    const float *ai = a + blockIdx.y * as;
    for (int64_t j = first_index(); j < len; j += grid_stride())
        ci[j] = cz_ew_bf16_from_f32(ai[j]);
}

// Batched launches put the matrix index in grid.y (at most 65535 matrices per launch).
dim3 batched_grid(int64_t len, int batch)
{
    return dim3((unsigned)blocks(len), (unsigned)batch, 1);
}

/* A panel's rows are checked here rather than trusted: a wrong r0/r1 would write outside the
 * matrix. */
int panel_rows_bad(int64_t a, int64_t r0, int64_t r1)
{
    return r0 < 0 || r1 < r0 || r1 > a;
}

dim3 runs_grid(int64_t nruns, int64_t max_len)
{
    int x, y;
    cz_launch_runs_grid(nruns, max_len, CZ_CUDA_THREADS, &x, &y);
    return dim3((unsigned)x, (unsigned)y, 1);
}

dim3 panel_grid(int64_t len, int batch)
{
    return dim3((unsigned)blocks(len), (unsigned)(batch < max_grid_y ? batch : max_grid_y), 1);
}

// NorMuon (compute.h's normuon), three kernels on one stream. First, one block per line (a
// row, or a column when per_col): the line's sum of squares (a block tree in double), then
// its EMA and its divisor's inverse, ss in work[i] and d in work[n + i].
__global__ void normuon_lines_kernel(const float *x, int64_t n, int64_t len, int64_t line,
                                     int64_t step, float *v, int64_t vs, float beta2, float eps,
                                     double *work)
{
    __shared__ double part[CZ_CUDA_THREADS];
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        double s = 0.0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
            s += cz_ew_sq(x[i * line + j * step]);
        part[threadIdx.x] = s;
        __syncthreads();
        for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
            if (threadIdx.x < w)
                part[threadIdx.x] += part[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            double ss = part[0];
            v[i * vs] = cz_ew_normuon_v(v[i * vs], len > 0 ? ss / (double)len : 0.0, beta2);
            work[i] = ss;
            work[n + i] = cz_ew_normuon_d(v[i * vs], eps);
        }
        __syncthreads();
    }
}

// Second, one block: the norms before and after the division from the lines' sums, and the
// rescale factor into work[2 n].
__global__ void normuon_factor_kernel(int64_t n, double *work)
{
    __shared__ double before[CZ_CUDA_THREADS], after[CZ_CUDA_THREADS];
    double b = 0.0, a = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        b += work[i];
        a += work[i] * work[n + i] * work[n + i];
    }
    before[threadIdx.x] = b;
    after[threadIdx.x] = a;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            before[threadIdx.x] += before[threadIdx.x + w];
            after[threadIdx.x] += after[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        work[2 * n] = cz_ew_normuon_rescale(before[0], after[0]);
}

// Third, every element: x *= d(line) * factor.
__global__ void normuon_apply_kernel(float *x, int64_t rows, int64_t cols, int per_col,
                                     const double *work)
{
    int64_t n = per_col ? cols : rows, total = rows * cols;
    double f = work[2 * n];
    for (int64_t e = first_index(); e < total; e += grid_stride()) {
        int64_t i = per_col ? e % cols : e / cols;
        x[e] = cz_ew_scale(x[e], (float)(work[n + i] * f));
    }
}

} // namespace

extern "C" {

int cz__k_copy_runs(void *stream, float *dst, const float *src, const int64_t *runs, int64_t nruns,
                    int64_t max_len)
{
    if (nruns <= 0)
        return 0;
    copy_runs_kernel<<<runs_grid(nruns, max_len), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(
        dst, src, runs, nruns);
    return launched();
}

int cz__k_f32_to_bf16(void *stream, uint16_t *dst, const float *src, int64_t n)
{
    if (n <= 0)
        return 0;
    f32_to_bf16_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(dst, src, n);
    return launched();
}

int cz__k_bf16_to_f32(void *stream, float *dst, const uint16_t *src, int64_t n)
{
    if (n <= 0)
        return 0;
    bf16_to_f32_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(dst, src, n);
    return launched();
}

int cz__k_scale(void *stream, float *dst, const float *src, int64_t n, float alpha)
{
    if (n <= 0)
        return 0;
    scale_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(dst, src, n, alpha);
    return launched();
}

static int block_sumsq(void *stream, const float *x, int64_t ld, int64_t rows, int64_t cols,
                       double *out)
{
    int rc = CZ_CU_RC(cudaMemsetAsync(out, 0, sizeof(double), as_stream(stream)));
    if (rc)
        return rc;
    if (rows * cols <= 0)
        return 0;
    sumsq_kernel<<<blocks(rows * cols), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(x, ld, rows, cols,
                                                                                 out);
    return launched();
}

int cz__k_sumsq(void *stream, const float *x, int64_t n, double *out)
{
    return block_sumsq(stream, x, n > 0 ? n : 1, 1, n, out);
}

int cz__k_momentum(void *stream, const float *g, float *buf, float *in, int64_t n, float mu,
                   int nesterov)
{
    if (n <= 0)
        return 0;
    momentum_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(g, buf, in, n, mu,
                                                                          nesterov);
    return launched();
}

int cz__k_block_load(void *stream, float *dst, const float *src, int64_t ld, int64_t rows,
                     int64_t cols, int transpose, float eps, double *sq)
{
    int rc = block_sumsq(stream, src, ld, rows, cols, sq);
    if (rc)
        return rc;
    return cz__k_block_load_sq(stream, dst, src, ld, rows, cols, transpose, eps, sq);
}

int cz__k_block_store(void *stream, float *dst, int64_t ld, const float *src, int64_t rows,
                      int64_t cols, int transpose, float scale)
{
    if (rows * cols <= 0)
        return 0;
    block_store_kernel<<<blocks(rows * cols), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(
        dst, ld, src, rows, cols, transpose, scale);
    return launched();
}

int cz__k_apply_update(void *stream, float *p, const float *u, int64_t n, float lr, float wd)
{
    if (n <= 0)
        return 0;
    apply_update_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(
        p, u, n, cz__ew_keep(lr, wd), lr);
    return launched();
}

int cz__k_apply_runs(void *stream, float *p, const float *u, const int64_t *runs, int64_t nruns,
                     int64_t max_len, float lr, float wd)
{
    if (nruns <= 0)
        return 0;
    apply_runs_kernel<<<runs_grid(nruns, max_len), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(
        p, u, runs, nruns, cz__ew_keep(lr, wd), lr);
    return launched();
}

int cz__k_block_load_sq(void *stream, float *dst, const float *src, int64_t ld, int64_t rows,
                        int64_t cols, int transpose, float eps, const double *sq)
{
    if (rows * cols <= 0)
        return 0;
    block_copy_kernel<<<blocks(rows * cols), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(
        dst, src, ld, rows, cols, transpose, 1.0f, sq, eps);
    return launched();
}

int cz__k_adamw(void *stream, float *p, const float *g, float *m, float *v, int64_t n, float b1,
                float b2, float c1, float c2, float lr, float eps, float wd)
{
    if (n <= 0)
        return 0;
    adamw_kernel<<<blocks(n), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(
        p, g, m, v, n, b1, b2, c1, c2, lr, eps, cz__ew_keep(lr, wd));
    return launched();
}

int cz__k_axpby_batched(void *stream, float *c, int64_t c_stride, const float *a, int64_t a_stride,
                        int64_t len, int batch, float alpha, float beta)
{
    if (len <= 0 || batch <= 0)
        return 0;
    if (batch > 65535)
        return (int)cudaErrorInvalidConfiguration;
    axpby_batched_kernel<<<batched_grid(len, batch), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(
        c, c_stride, a, a_stride, len, alpha, beta);
    return launched();
}

int cz__k_symfill_batched(void *stream, float *c, int64_t c_stride, int64_t n, int batch)
{
    if (n <= 1 || batch <= 0)
        return 0;
    if (batch > 65535)
        return (int)cudaErrorInvalidConfiguration;
    symfill_batched_kernel<<<batched_grid(n * n, batch), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(
        c, c_stride, n);
    return launched();
}

int cz__k_ns_pack_rows(void *stream, float *out, const float *full, int64_t a, int64_t r0,
                       int64_t r1, int batch)
{
    if (panel_rows_bad(a, r0, r1))
        return (int)cudaErrorInvalidValue;
    if (r1 == r0 || batch <= 0)
        return 0;
    ns_pack_rows_kernel<<<panel_grid((r1 - r0) * (a - r0), batch), CZ_CUDA_THREADS, 0,
                          as_stream(stream)>>>(out, full, a, r0, r1, batch);
    return launched();
}

int cz__k_ns_unpack_rows(void *stream, float *full, const float *in, int64_t a, int64_t r0,
                         int64_t r1, int batch)
{
    if (panel_rows_bad(a, r0, r1))
        return (int)cudaErrorInvalidValue;
    if (r1 == r0 || batch <= 0)
        return 0;
    int64_t h = r1 - r0;
    ns_unpack_rows_kernel<<<panel_grid(h * (a - r0) + (a - r1) * h, batch), CZ_CUDA_THREADS, 0,
                            as_stream(stream)>>>(full, in, a, r0, r1, batch);
    return launched();
}

int cz__k_to_bf16_batched(void *stream, uint16_t *c, int64_t c_stride, const float *a,
                          int64_t a_stride, int64_t len, int batch)
{
    if (len <= 0 || batch <= 0)
        return 0;
    if (batch > 65535)
        return (int)cudaErrorInvalidConfiguration;
    to_bf16_batched_kernel<<<batched_grid(len, batch), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(
        c, c_stride, a, a_stride, len);
    return launched();
}

int cz__k_normuon(void *stream, float *x, int64_t rows, int64_t cols, int per_col, float *v,
                  int64_t vs, float beta2, float eps, double *work)
{
    int64_t n = per_col ? cols : rows, len = per_col ? rows : cols;
    if (n <= 0)
        return 0;
    int64_t line = per_col ? 1 : cols, step = per_col ? cols : 1;
    int grid = (int)(n < CZ_CUDA_MAX_BLOCKS ? n : CZ_CUDA_MAX_BLOCKS);
    normuon_lines_kernel<<<grid, CZ_CUDA_THREADS, 0, as_stream(stream)>>>(x, n, len, line, step, v,
                                                                          vs, beta2, eps, work);
    int rc = launched();
    if (rc)
        return rc;
    normuon_factor_kernel<<<1, CZ_CUDA_THREADS, 0, as_stream(stream)>>>(n, work);
    if ((rc = launched()) != 0 || rows * cols <= 0)
        return rc;
    normuon_apply_kernel<<<blocks(rows * cols), CZ_CUDA_THREADS, 0, as_stream(stream)>>>(
        x, rows, cols, per_col, work);
    return launched();
}

const char *cz__k_error_string(int rc)
{
    return cudaGetErrorString(static_cast<cudaError_t>(rc));
}

} // extern "C"
