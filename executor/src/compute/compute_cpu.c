/* The "cpu" compute backend: host memory, fp32, OpenBLAS for the Newton-Schulz products and
 * plain loops for everything elementwise. A batched call loops over cblas_sgemm; the batched
 * interface is what a GPU backend maps to strided-batched GEMM. The host reference kernels
 * (cz__cpu_momentum, cz__cpu_apply_update, cz__cpu_adamw) are this backend's own loops. */
#include "elementwise.h"
#include "alloc.h"
#include "compute.h"
#include "compute_cpu.h"
#include "cz_format.h"
#include "ns_coop.h"
#include "ns_plan.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The stream is the calling thread: every op has finished when it returns, so an event is
 * complete as soon as it is recorded and syncing on it never waits. */
struct cz_event {
    int recorded;
};

struct cz_runs {
    size_t n;
    cz_copy_run v[];
};

void cz__cpu_momentum(const float *g, float *buf, float *in, int64_t n, float mu, int nesterov)
{
    for (int64_t i = 0; i < n; i++)
        in[i] = cz_ew_momentum(g[i], &buf[i], mu, nesterov);
}

void cz__cpu_apply_update(float *p, const float *u, int64_t n, float lr, float wd)
{
    float keep = cz__ew_keep(lr, wd);
    for (int64_t i = 0; i < n; i++)
        p[i] = cz_ew_update(p[i], u[i], keep, lr);
}

void cz__cpu_adamw(float *p, const float *g, float *m, float *v, int64_t n, const cz_adamw_args *a)
{
    float keep = cz__ew_keep(a->lr, a->weight_decay);
    for (int64_t i = 0; i < n; i++)
        p[i] = cz_ew_adamw(p[i], g[i], &m[i], &v[i], a->beta1, a->beta2, a->bias1, a->bias2, a->lr,
                           a->eps, keep);
}

uint16_t cz__bf16_from_f32(float f)
{
    return cz_ew_bf16_from_f32(f);
}

float cz__f32_from_bf16(uint16_t b)
{
    return cz_ew_f32_from_bf16(b);
}

static void cpu_convert(cz_compute *c, void *dst, cz_dtype dt, const void *src, cz_dtype st,
                        int64_t n)
{
    (void)c;
    if (dt == st) {
        memcpy(dst, src, (size_t)n * (size_t)cz__dtype_bytes(dt));
    } else if (dt == CZ_DTYPE_BF16) {
        uint16_t *d = dst;
        const float *s = src;
        for (int64_t i = 0; i < n; i++)
            d[i] = cz__bf16_from_f32(s[i]);
    } else {
        float *d = dst;
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            d[i] = cz__f32_from_bf16(s[i]);
    }
}

static void *cpu_alloc(cz_compute *c, size_t bytes)
{
    (void)c;
    return cz__exec_calloc(1, bytes);
}

static void cpu_release(cz_compute *c, void *p)
{
    (void)c;
    cz__exec_free(p);
}

static cz_event *cpu_event_create(cz_compute *c)
{
    (void)c;
    return cz__exec_calloc(1, sizeof(cz_event));
}

static void cpu_event_free(cz_compute *c, cz_event *e)
{
    (void)c;
    cz__exec_free(e);
}

static void cpu_event_record(cz_compute *c, cz_event *e)
{
    (void)c;
    e->recorded = 1;
}

static int cpu_event_sync(cz_compute *c, cz_event *e, cz_error *err)
{
    (void)c;
    if (!e->recorded)
        return cz__error_set(err, CZ_EINTERNAL, "waiting on a compute event never recorded");
    return CZ_OK;
}

static int cpu_download(cz_compute *c, void *host, const void *src, size_t bytes, cz_error *err)
{
    (void)c;
    (void)err;
    memcpy(host, src, bytes);
    return CZ_OK;
}

static int cpu_upload(cz_compute *c, void *dst, const void *host, size_t bytes, cz_error *err)
{
    (void)c;
    (void)err;
    memcpy(dst, host, bytes);
    return CZ_OK;
}

static cz_runs *cpu_runs_create(cz_compute *c, const cz_copy_run *runs, size_t n)
{
    (void)c;
    cz_runs *r = cz__exec_malloc(sizeof *r + n * sizeof r->v[0]);
    if (!r)
        return NULL;
    r->n = n;
    if (n)
        memcpy(r->v, runs, n * sizeof r->v[0]);
    return r;
}

static void cpu_runs_free(cz_compute *c, cz_runs *r)
{
    (void)c;
    cz__exec_free(r);
}

static void cpu_copy_runs(cz_compute *c, float *dst, const float *src, const cz_runs *r)
{
    (void)c;
    for (size_t k = 0; k < r->n; k++)
        memcpy(dst + r->v[k].dst, src + r->v[k].src, (size_t)r->v[k].len * sizeof(float));
}

static void cpu_scale(cz_compute *c, float *dst, const float *src, int64_t n, float alpha)
{
    (void)c;
    for (int64_t i = 0; i < n; i++)
        dst[i] = cz_ew_scale(src[i], alpha);
}

static void cpu_sumsq(cz_compute *c, const float *x, int64_t n, double *out)
{
    (void)c;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += cz_ew_sq(x[i]);
    *out = s;
}

static void cpu_momentum(cz_compute *c, const float *g, float *buf, float *in, int64_t n, float mu,
                         int nesterov)
{
    (void)c;
    cz__cpu_momentum(g, buf, in, n, mu, nesterov);
}

static void cpu_block_load_sq(cz_compute *c, float *dst, const float *src, int64_t ld, int64_t rows,
                              int64_t cols, int transpose, float eps, const double *sq)
{
    (void)c;
    float inv = cz_ew_norm_inv(*sq, eps);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float v = cz_ew_scale(src[i * ld + j], inv);
            if (transpose)
                dst[j * rows + i] = v;
            else
                dst[i * cols + j] = v;
        }
}

static void cpu_block_load(cz_compute *c, float *dst, const float *src, int64_t ld, int64_t rows,
                           int64_t cols, int transpose, float eps)
{
    double sq = 0.0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            sq += cz_ew_sq(src[i * ld + j]);
    cpu_block_load_sq(c, dst, src, ld, rows, cols, transpose, eps, &sq);
}

static void cpu_block_store(cz_compute *c, float *dst, int64_t ld, const float *src, int64_t rows,
                            int64_t cols, int transpose, float scale)
{
    (void)c;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float v = transpose ? src[j * rows + i] : src[i * cols + j];
            dst[i * ld + j] = cz_ew_scale(v, scale);
        }
}

/* NorMuon's normalization (compute.h): work[i] the line's sum of squares, work[n + i] its
 * divisor's inverse; the two norms from the lines' sums. */
static void cpu_normuon(cz_compute *c, float *x, int64_t rows, int64_t cols, int per_col, float *v,
                        int64_t vs, float beta2, float eps, double *work)
{
    (void)c;
    int64_t n = per_col ? cols : rows, len = per_col ? rows : cols;
    int64_t step = per_col ? cols : 1, line = per_col ? 1 : cols;
    double before = 0.0, after = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double ss = 0.0;
        for (int64_t j = 0; j < len; j++)
            ss += cz_ew_sq(x[i * line + j * step]);
        v[i * vs] = cz_ew_normuon_v(v[i * vs], len > 0 ? ss / (double)len : 0.0, beta2);
        work[i] = ss;
        work[n + i] = cz_ew_normuon_d(v[i * vs], eps);
        before += ss;
        after += ss * work[n + i] * work[n + i];
    }
    double f = cz_ew_normuon_rescale(before, after);
    for (int64_t i = 0; i < n; i++) {
        float k = (float)(work[n + i] * f);
        for (int64_t j = 0; j < len; j++)
            x[i * line + j * step] = cz_ew_scale(x[i * line + j * step], k);
    }
}

/* The lower triangle of the row-major r x r m from its upper one. */
static void mirror_upper(float *m, int r)
{
    for (int i = 1; i < r; i++)
        for (int j = 0; j < i; j++)
            m[(size_t)i * r + j] = m[(size_t)j * r + i];
}

int cz__cpu_ns(float *x, int batch, int64_t rows, int64_t cols, const cz_ns_coeffs *k, int steps,
               float *work, int sym, cz_error *err)
{
    if (rows > cols || rows > INT32_MAX || cols > INT32_MAX)
        return cz__error_set(err, CZ_EINTERNAL,
                             "Newton-Schulz called on a %lld x %lld matrix (needs rows <= cols)",
                             (long long)rows, (long long)cols);
    int r = (int)rows, n = (int)cols;
    for (int i = 0; i < batch; i++) {
        float *X = x + (size_t)i * (size_t)(r * (int64_t)n);
        float *A = work + (size_t)i * (size_t)(2 * (int64_t)r * r + (int64_t)r * n);
        float *B = A + (size_t)r * r;
        float *Y = B + (size_t)r * r;
        for (int s = 0; s < steps; s++) {
            cz_ns_triple t = cz__ns_coeffs_at(k, s);
            float a = (float)t.a, b = (float)t.b, cc = (float)t.c;
            if (sym) {
                /* ns_plan.h's symmetric form: A = X X^T and A A = A A^T as SYRKs on the upper
                 * triangle, each mirrored before the next product reads the whole matrix. */
                cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, r, n, 1.0f, X, n, 0.0f, A, r);
                mirror_upper(A, r);
                for (size_t j = 0; j < (size_t)r * r; j++)
                    B[j] = b * A[j];
                if (cc != 0.0f) {
                    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, r, r, cc, A, r, 1.0f, B,
                                r);
                    mirror_upper(B, r);
                }
            } else {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r, r, n, 1.0f, X, n, X, n,
                            0.0f, A, r);
                for (size_t j = 0; j < (size_t)r * r; j++)
                    B[j] = b * A[j];
                if (cc != 0.0f)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, r, r, cc, A, r, A, r,
                                1.0f, B, r);
            }
            for (size_t j = 0; j < (size_t)r * n; j++)
                Y[j] = a * X[j];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, n, r, 1.0f, B, r, X, n, 1.0f,
                        Y, n);
            memcpy(X, Y, (size_t)r * n * sizeof(float));
        }
    }
    return CZ_OK;
}

static int cpu_ns_batched(cz_compute *c, float *x, int batch, int64_t rows, int64_t cols,
                          const cz_ns_coeffs *k, int steps, float *work, cz_error *err)
{
    (void)c;
    int sym = cz__ns_use_syrk(CZ_NS_TARGET_CPU, rows, cols, batch, CZ_NS_FP32);
    return cz__cpu_ns(x, batch, rows, cols, k, steps, work, sym, err);
}

static void cpu_apply_update(cz_compute *c, float *p, const float *u, int64_t n, float lr, float wd)
{
    (void)c;
    cz__cpu_apply_update(p, u, n, lr, wd);
}

/* A = X X^T per matrix, in the form ns_batched would pick for the member's slice, into work
 * and from there packed: SYRK computes only the upper triangle, which is all packing reads. */
/* Rows r0 .. r1-1 of X X^T from column r0 on (one GEMM; the block left of the diagonal is
 * not needed, the lower part of the diagonal block is computed and dropped), packed. */
static void cpu_ns_gram_rows(cz_compute *c, const float *x, int batch, int64_t rows, int64_t cols,
                             int64_t r0, int64_t r1, float *full, float *out)
{
    (void)c;
    int h = (int)(r1 - r0), w = (int)(rows - r0), n = (int)cols;
    for (int i = 0; i < batch; i++) {
        const float *X = x + (size_t)i * (size_t)(rows * cols) + (size_t)(r0 * cols);
        float *A = full + (size_t)i * (size_t)(rows * rows) + (size_t)(r0 * rows + r0);
        if (h <= 0)
            continue;
        if (n == 0) /* an empty slice adds nothing to the sum */
            for (int r = 0; r < h; r++)
                memset(A + (size_t)r * (size_t)rows, 0, (size_t)w * sizeof(float));
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, h, w, n, 1.0f, X, n, X, n, 0.0f, A,
                        (int)rows);
    }
    cz__ns_rows_pack(out, full, batch, rows, r0, r1);
}

static void cpu_ns_unpack_rows(cz_compute *c, float *full, const float *in, int batch, int64_t rows,
                               int64_t r0, int64_t r1)
{
    (void)c;
    cz__ns_rows_unpack(full, in, batch, rows, r0, r1);
}

static void cpu_ns_poly_rows(cz_compute *c, const float *x, const float *full, float *y, int batch,
                             int64_t rows, int64_t cols, int64_t r0, int64_t r1)
{
    (void)c;
    int h = (int)(r1 - r0), r = (int)rows, n = (int)cols;
    if (h <= 0 || n == 0)
        return;
    for (int i = 0; i < batch; i++) {
        size_t xs = (size_t)i * (size_t)(rows * cols), as = (size_t)i * (size_t)(rows * rows);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, h, n, r, 1.0f,
                    full + as + (size_t)(r0 * rows), r, x + xs, n, 0.0f,
                    y + xs + (size_t)(r0 * cols), n);
    }
}

/* The rest of the iteration, with A complete: A(AX) X = a X + b Y, then X += c A Y (no Z
 * buffer); standard B = b A + c A A, Y = a X + B X, X = Y. */
static void cpu_ns_poly_end(cz_compute *c, float *x, const float *full, float *y, float *bm,
                            int batch, int64_t rows, int64_t cols, const cz_ns_triple *k)
{
    (void)c;
    int r = (int)rows, n = (int)cols;
    float ka = (float)k->a, kb = (float)k->b, kc = (float)k->c;
    int aax = cz_ns_coop_use_aax(rows, cols);
    if (n == 0)
        return;
    for (int i = 0; i < batch; i++) {
        float *X = x + (size_t)i * (size_t)(rows * cols),
              *Y = y + (size_t)i * (size_t)(rows * cols);
        const float *A = full + (size_t)i * (size_t)(rows * rows);
        if (aax) {
            for (size_t j = 0; j < (size_t)r * n; j++)
                X[j] = ka * X[j] + kb * Y[j];
            if (kc != 0.0f)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, n, r, kc, A, r, Y, n,
                            1.0f, X, n);
            continue;
        }
        float *B = bm + (size_t)i * (size_t)(rows * rows);
        for (size_t j = 0; j < (size_t)r * r; j++)
            B[j] = kb * A[j];
        if (kc != 0.0f)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, r, r, kc, A, r, A, r, 1.0f, B,
                        r);
        for (size_t j = 0; j < (size_t)r * n; j++)
            Y[j] = ka * X[j];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, n, r, 1.0f, B, r, X, n, 1.0f, Y,
                    n);
        memcpy(X, Y, (size_t)r * n * sizeof(float));
    }
}

static void cpu_apply_runs(cz_compute *c, float *p, const float *u, const cz_runs *r, float lr,
                           float wd)
{
    (void)c;
    for (size_t k = 0; k < r->n; k++)
        cz__cpu_apply_update(p + r->v[k].dst, u + r->v[k].src, r->v[k].len, lr, wd);
}

static void cpu_adamw(cz_compute *c, float *p, const float *g, float *m, float *v, int64_t n,
                      const cz_adamw_args *a)
{
    (void)c;
    cz__cpu_adamw(p, g, m, v, n, a);
}

/* compute_cpu_linalg.c */
void cz__cpu_gemm(cz_compute *c, int transa, int transb, int64_t m, int64_t n, int64_t k,
                  float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                  float *cm, int64_t ldc);
void cz__cpu_tile_copy(cz_compute *c, float *dst, int64_t ldd, const float *src, int64_t lds,
                       int64_t rows, int64_t cols);
int cz__cpu_syevd(cz_compute *c, float *a, float *w, int64_t n, float *work, cz_error *err);
void cz__cpu_eig_root_scale(cz_compute *c, float *dst, const float *q, const float *w, int64_t n,
                            float root, float eps);
void cz__cpu_axpby(cz_compute *c, float *y, const float *x, int64_t n, float a, float b);
void cz__cpu_sq_accum(cz_compute *c, float *acc, const float *x, int64_t n, float a, float b);
void cz__cpu_graft_div(cz_compute *c, float *dst, const float *x, const float *acc, int64_t n,
                       float inv_bias, float eps);
void cz__cpu_scale_ratio(cz_compute *c, float *x, int64_t n, const double *num, const double *den);
int cz__cpu_qr(cz_compute *c, float *a, int64_t n, float *work, cz_error *err);
void cz__cpu_basis_sort(cz_compute *c, float *q, float *mq, int64_t n, float *v, int64_t rows,
                        int64_t cols, int side, float *work);
int cz__cpu_linalg_work(cz_compute *c, int64_t n, int64_t vn, cz_linalg_work *out, cz_error *err);

/* The calling thread is the stream: the job's writes are done before a step starts, and the
 * step's before it returns. */
static void cpu_order_nothing(cz_compute *c)
{
    (void)c;
}

const cz_compute_ops cz__compute_cpu_ops = {
    .version = CZ_COMPUTE_OPS_VERSION,
    .kind = CZ_BACKEND_CPU,
    .caps = CZ_COMPUTE_CAP_HOST_MEMORY,
    .name = "cpu",
    .alloc = cpu_alloc,
    .release = cpu_release,
    .event_create = cpu_event_create,
    .event_free = cpu_event_free,
    .event_record = cpu_event_record,
    .event_sync = cpu_event_sync,
    .download = cpu_download,
    .runs_create = cpu_runs_create,
    .runs_free = cpu_runs_free,
    .copy_runs = cpu_copy_runs,
    .convert = cpu_convert,
    .scale = cpu_scale,
    .sumsq = cpu_sumsq,
    .momentum = cpu_momentum,
    .block_load = cpu_block_load,
    .ns_batched = cpu_ns_batched,
    .block_store = cpu_block_store,
    .apply_update = cpu_apply_update,
    .adamw = cpu_adamw,
    .gemm = cz__cpu_gemm,
    .tile_copy = cz__cpu_tile_copy,
#ifdef CZ_HAVE_LAPACKE
    .syevd = cz__cpu_syevd,
    .qr = cz__cpu_qr,
#endif
    .basis_sort = cz__cpu_basis_sort,
    .eig_root_scale = cz__cpu_eig_root_scale,
    .axpby = cz__cpu_axpby,
    .sq_accum = cz__cpu_sq_accum,
    .graft_div = cz__cpu_graft_div,
    .scale_ratio = cz__cpu_scale_ratio,
    .linalg_work = cz__cpu_linalg_work,
    .upload = cpu_upload,
    .block_load_sq = cpu_block_load_sq,
    .ns_gram_rows = cpu_ns_gram_rows,
    .ns_unpack_rows = cpu_ns_unpack_rows,
    .ns_poly_rows = cpu_ns_poly_rows,
    .ns_poly_end = cpu_ns_poly_end,
    .apply_runs = cpu_apply_runs,
    .close = cpu_order_nothing,
    .step_begin = cpu_order_nothing,
    .step_end = cpu_order_nothing,
    .normuon = cpu_normuon,
};
