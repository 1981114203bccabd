/* The CUDA backend's Newton-Schulz plan (ns_plan.c), on the CPU: the cuBLAS parameters of a
 * hand-worked shape (general and symmetric forms), the plan replayed with column-major
 * reference GEMMs and SYRKs (OpenBLAS) against the CPU backend's row-major iteration, in fp32
 * and with bf16 inputs, the decision where the symmetric form pays, and the CPU backend's own
 * symmetric form against its general one. */
#include "cz_exec_testing.h"
#include "canzona_exec.h"
#include "cz_format.h"

#include <cblas.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Replays a plan the way compute_cuda.c hands it to cuBLAS (the same operand addresses,
 * cz__ns_operand_ptr), with OpenBLAS column-major GEMMs;
 * bf16 operands are widened to fp32 first (exact), so the products are what a bf16 GEMM with
 * fp32 accumulation computes up to summation order. */
static const float *widen(const cz_ns_operand *o, float *x, float *work, int i, int64_t len,
                          float *tmp)
{
    if (!o->bf16)
        return cz__ns_operand_ptr(o, x, work, i);
    const uint16_t *h = cz__ns_operand_ptr(o, x, work, i);
    for (int64_t j = 0; j < len; j++)
        tmp[j] = cz_ew_f32_from_bf16(h[j]);
    return tmp;
}

static void replay(const cz_ns_op *ops, int nops, float *x, float *work, float *ta, float *tb)
{
    for (int q = 0; q < nops; q++) {
        const cz_ns_op *op = &ops[q];
        for (int i = 0; i < op->batch; i++) {
            if (op->kind == CZ_NS_SYRK) {
                /* cuBLAS leaves the lower triangle alone; NaN there makes a missing SYMFILL
                 * show in the result. */
                const float *A = cz__ns_operand_ptr(&op->a, x, work, i);
                float *C = cz__ns_operand_ptr(&op->c, x, work, i);
                ck_assert(!op->a.bf16 && !op->c.bf16);
                for (int jj = 0; jj < op->n; jj++)
                    for (int ii = jj + 1; ii < op->n; ii++)
                        C[ii + (int64_t)jj * op->c.ld] = NAN;
                cblas_ssyrk(CblasColMajor, CblasUpper, op->transa ? CblasTrans : CblasNoTrans,
                            op->n, op->k, op->alpha, A, op->a.ld, op->beta, C, op->c.ld);
                continue;
            }
            if (op->kind == CZ_NS_SYMFILL) {
                float *C = cz__ns_operand_ptr(&op->c, x, work, i);
                for (int jj = 0; jj < op->n; jj++)
                    for (int ii = jj + 1; ii < op->n; ii++)
                        C[ii + (int64_t)jj * op->n] = C[jj + (int64_t)ii * op->n];
                continue;
            }
            if (op->kind == CZ_NS_GEMM) {
                int64_t alen = (int64_t)op->a.ld * (op->transa ? op->m : op->k);
                int64_t blen = (int64_t)op->b.ld * (op->transb ? op->k : op->n);
                const float *A = widen(&op->a, x, work, i, alen, ta);
                const float *B = widen(&op->b, x, work, i, blen, tb);
                ck_assert(!op->c.bf16);
                float *C = cz__ns_operand_ptr(&op->c, x, work, i);
                cblas_sgemm(CblasColMajor, op->transa ? CblasTrans : CblasNoTrans,
                            op->transb ? CblasTrans : CblasNoTrans, op->m, op->n, op->k, op->alpha,
                            A, op->a.ld, B, op->b.ld, op->beta, C, op->c.ld);
            } else {
                ck_assert(!op->a.bf16);
                const float *a = cz__ns_operand_ptr(&op->a, x, work, i);
                if (op->kind == CZ_NS_TO_BF16) {
                    uint16_t *c = cz__ns_operand_ptr(&op->c, x, work, i);
                    for (int64_t j = 0; j < op->len; j++)
                        c[j] = cz_ew_bf16_from_f32(a[j]);
                } else {
                    float *c = cz__ns_operand_ptr(&op->c, x, work, i);
                    for (int64_t j = 0; j < op->len; j++)
                        c[j] = op->alpha * a[j] + (op->beta != 0.0f ? op->beta * c[j] : 0.0f);
                }
            }
        }
    }
}

START_TEST(hand_worked_fp32)
{
    /* Four 2 x 3 matrices, jordan coefficients: r = 2, c = 3, w = 2*4 + 6 = 14 floats. */
    cz_ns_op ops[CZ_NS_MAX_OPS];
    int n = cz__ns_plan(ops, 2, 3, 4, 3.4445, -4.7750, 2.0315, CZ_NS_FP32, 0);
    ck_assert_int_eq(n, 5);
    /* A = X X^T: Xcm is 3 x 2 (ld 3), so C(2x2) = Xcm^T Xcm, k = 3. */
    ck_assert_int_eq(ops[0].kind, CZ_NS_GEMM);
    ck_assert_int_eq(ops[0].transa, 1);
    ck_assert_int_eq(ops[0].transb, 0);
    ck_assert_int_eq(ops[0].m, 2);
    ck_assert_int_eq(ops[0].n, 2);
    ck_assert_int_eq(ops[0].k, 3);
    ck_assert_int_eq(ops[0].a.ld, 3);
    ck_assert_int_eq(ops[0].b.ld, 3);
    ck_assert_int_eq(ops[0].c.ld, 2);
    ck_assert_int_eq(ops[0].a.stride, 6);
    ck_assert_int_eq(ops[0].c.stride, 14);
    ck_assert_int_eq(ops[0].c.off, 0);
    ck_assert_int_eq(ops[0].batch, 4);
    ck_assert_int_eq(ops[0].batched, 1);
    /* B = A (4 elements per matrix), then B = c A A + b B: 2x2x2, A and B 16 bytes apart. */
    ck_assert_int_eq(ops[1].kind, CZ_NS_AXPBY);
    ck_assert_int_eq(ops[1].len, 4);
    ck_assert_int_eq(ops[1].c.off, 16);
    ck_assert_int_eq(ops[2].kind, CZ_NS_GEMM);
    ck_assert_int_eq(ops[2].m * 100 + ops[2].n * 10 + ops[2].k, 222);
    ck_assert(ops[2].alpha == 2.0315f && ops[2].beta == -4.7750f);
    /* Y = B X: Ycm (3 x 2) = Xcm (3 x 2, ld 3) Bcm (2 x 2, ld 2); Y at byte 32, ld 3. */
    ck_assert_int_eq(ops[3].transa + ops[3].transb, 0);
    ck_assert_int_eq(ops[3].m, 3);
    ck_assert_int_eq(ops[3].n, 2);
    ck_assert_int_eq(ops[3].k, 2);
    ck_assert_int_eq(ops[3].a.ld, 3);
    ck_assert_int_eq(ops[3].b.ld, 2);
    ck_assert_int_eq(ops[3].c.ld, 3);
    ck_assert_int_eq(ops[3].c.off, 32);
    /* X = a X + Y over 6 elements. */
    ck_assert_int_eq(ops[4].kind, CZ_NS_AXPBY);
    ck_assert_int_eq(ops[4].len, 6);
    ck_assert(ops[4].alpha == 1.0f && ops[4].beta == 3.4445f);
    ck_assert_int_eq(ops[4].c.buf, CZ_NS_BUF_X);
    /* One matrix: plain GEMMs; the cubic set (c = 0) has no A A product. */
    n = cz__ns_plan(ops, 2, 3, 1, 1.5, -0.5, 0.0, CZ_NS_FP32, 0);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(ops[0].batched, 0);
    ck_assert_int_eq(ops[1].kind, CZ_NS_AXPBY);
    ck_assert(ops[1].alpha == -0.5f && ops[1].beta == 0.0f);
    ck_assert_int_eq(ops[2].kind, CZ_NS_GEMM);
    ck_assert_int_eq(ops[2].m, 3);
    /* Invalid shapes are refused. */
    ck_assert_int_eq(cz__ns_plan(ops, 3, 2, 1, 1, 1, 1, CZ_NS_FP32, 0), -1);
    ck_assert_int_eq(cz__ns_plan(ops, 2, 3, 0, 1, 1, 1, CZ_NS_FP32, 0), -1);
    ck_assert_int_eq(cz__ns_work_floats(2, 3, 4), 56);
    ck_assert(cz__ns_iter_flops(2, 3, 1.0) == 2 * 4 * 3 + 2 * 8 + 2 * 4 * 3);
}
END_TEST

START_TEST(hand_worked_bf16)
{
    /* r = 2, c = 3: A at byte 0, B at 16, Xh at 32 (6 bf16 = 12 bytes), Ah at 44; the last
     * GEMM accumulates into X itself (beta = a). Everything stays inside w = 14 floats. */
    cz_ns_op ops[CZ_NS_MAX_OPS];
    int n = cz__ns_plan(ops, 2, 3, 4, 3.4445, -4.7750, 2.0315, CZ_NS_BF16, 0);
    ck_assert_int_eq(n, 7);
    ck_assert_int_eq(ops[0].kind, CZ_NS_TO_BF16);
    ck_assert_int_eq(ops[0].c.off, 32);
    ck_assert_int_eq(ops[0].c.stride, 28);
    ck_assert_int_eq(ops[1].a.bf16, 1);
    ck_assert_int_eq(ops[1].c.bf16, 0);
    ck_assert_int_eq(ops[2].kind, CZ_NS_TO_BF16);
    ck_assert_int_eq(ops[2].c.off, 44);
    ck_assert_int_eq(ops[2].c.off + 2 * ops[2].len, 52);
    ck_assert(52 <= 4 * 14);
    ck_assert_int_eq(ops[5].kind, CZ_NS_TO_BF16);
    ck_assert_int_eq(ops[5].c.off, 0);
    ck_assert_int_eq(ops[6].c.buf, CZ_NS_BUF_X);
    ck_assert(ops[6].beta == 3.4445f && ops[6].alpha == 1.0f);
    ck_assert_int_eq(ops[6].m, 3);
    ck_assert_int_eq(ops[6].b.ld, 2);
}
END_TEST

/* The plan replayed equals the CPU backend's iteration, for batched and single matrices, both
 * coefficient sets, several shapes. */
static void compare(int64_t r, int64_t c, int batch, const char *coeffs, cz_ns_precision prec,
                    int sym, double tol)
{
    const cz_ns_coeffs *k = cz__ns_coeffs_find(coeffs);
    int64_t nx = (int64_t)batch * r * c, nw = cz__ns_work_floats(r, c, batch);
    float *x0 = malloc((size_t)nx * sizeof(float)), *x1 = malloc((size_t)nx * sizeof(float));
    float *x2 = malloc((size_t)nx * sizeof(float)), *w = calloc((size_t)nw, sizeof(float));
    float *ta = malloc((size_t)(r * c + r * r) * sizeof(float));
    float *tb = malloc((size_t)(r * c + r * r) * sizeof(float));
    ck_assert(x0 && x1 && x2 && w && ta && tb);
    srand(7);
    for (int64_t i = 0; i < nx; i++)
        x0[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    /* Normalise each matrix (as block_load does) so the iteration converges. */
    for (int b = 0; b < batch; b++) {
        double sq = 0;
        for (int64_t i = 0; i < r * c; i++)
            sq += cz_ew_sq(x0[b * r * c + i]);
        for (int64_t i = 0; i < r * c; i++)
            x0[b * r * c + i] *= cz_ew_norm_inv(sq, 1e-7f);
    }
    memcpy(x1, x0, (size_t)nx * sizeof(float));
    memcpy(x2, x0, (size_t)nx * sizeof(float));
    cz_compute cpu;
    ck_assert_int_eq(cz__compute_open(&cpu, "cpu", NULL), 0);
    /* The reference is the CPU backend's general (GEMM) form, whatever the plan's. */
    ck_assert_int_eq(cz__cpu_ns(x1, batch, r, c, k, 5, w, 0, NULL), 0);
    cz_ns_op ops[CZ_NS_MAX_OPS];
    int n = cz__ns_plan(ops, r, c, batch, k->row[0].a, k->row[0].b, k->row[0].c, prec, sym);
    ck_assert_int_gt(n, 0);
    memset(w, 0, (size_t)nw * sizeof(float));
    for (int s = 0; s < 5; s++)
        replay(ops, n, x2, w, ta, tb);
    double num = 0, den = 0;
    for (int64_t i = 0; i < nx; i++) {
        num += ((double)x1[i] - x2[i]) * ((double)x1[i] - x2[i]);
        den += (double)x1[i] * x1[i];
    }
    double rel = sqrt(num / den);
    ck_assert_msg(rel <= tol, "%lldx%lld batch %d %s prec %d sym %d: rel. error %g > %g",
                  (long long)r, (long long)c, batch, coeffs, (int)prec, sym, rel, tol);
    if (getenv("CZ_VERBOSE"))
        printf("%lldx%lld batch %d %s prec %d sym %d: rel. error %g\n", (long long)r, (long long)c,
               batch, coeffs, (int)prec, sym, rel);
    free(x0), free(x1), free(x2), free(w), free(ta), free(tb);
    cz__compute_close(&cpu);
}

START_TEST(replay_matches_cpu)
{
    compare(4, 7, 3, "jordan", CZ_NS_FP32, 0, 1e-5);
    compare(5, 5, 1, "jordan", CZ_NS_FP32, 0, 1e-5);
    compare(3, 16, 2, "cubic", CZ_NS_FP32, 0, 1e-5);
    compare(16, 40, 2, "jordan", CZ_NS_FP32, 0, 1e-5);
    /* bf16 inputs: the rounding of each operand bounds the difference. */
    compare(16, 40, 2, "jordan", CZ_NS_BF16, 0, 3e-2);
    compare(3, 16, 2, "cubic", CZ_NS_BF16, 0, 3e-2);
    /* The symmetric form (SYRK + SYMFILL) against the general one. */
    compare(4, 7, 3, "jordan", CZ_NS_FP32, 1, 1e-5);
    compare(5, 5, 1, "jordan", CZ_NS_FP32, 1, 1e-5);
    compare(3, 16, 2, "cubic", CZ_NS_FP32, 1, 1e-5);
    compare(16, 40, 2, "jordan", CZ_NS_FP32, 1, 1e-5);
    compare(33, 70, 2, "jordan", CZ_NS_FP32, 1, 1e-5);
}
END_TEST

START_TEST(hand_worked_symmetric)
{
    /* 2 x 3, batch 4, jordan, fp32: X stride 6 (ld 3); work stride w = 2*4 + 6 = 14 floats,
     * A at byte 0, B at 16 (ld 2). */
    cz_ns_op ops[CZ_NS_MAX_OPS];
    int n = cz__ns_plan(ops, 2, 3, 4, 3.4445, -4.7750, 2.0315, CZ_NS_FP32, 1);
    ck_assert_int_eq(n, 7);
    /* A = X X^T: SYRK, trans T (column-major X^T is 3 x 2), n = 2, k = 3, one call per matrix. */
    ck_assert_int_eq(ops[0].kind, CZ_NS_SYRK);
    ck_assert_int_eq(ops[0].transa, 1);
    ck_assert_int_eq(ops[0].n, 2);
    ck_assert_int_eq(ops[0].k, 3);
    ck_assert_int_eq(ops[0].a.buf, CZ_NS_BUF_X);
    ck_assert_int_eq(ops[0].a.ld, 3);
    ck_assert_int_eq(ops[0].a.stride, 6);
    ck_assert_int_eq(ops[0].c.off, 0);
    ck_assert_int_eq(ops[0].c.ld, 2);
    ck_assert_int_eq(ops[0].c.stride, 14);
    ck_assert_float_eq(ops[0].alpha, 1.0f);
    ck_assert_float_eq(ops[0].beta, 0.0f);
    ck_assert_int_eq(ops[0].batch, 4);
    ck_assert_int_eq(ops[0].batched, 0);
    ck_assert_int_eq(ops[1].kind, CZ_NS_SYMFILL);
    ck_assert_int_eq(ops[1].n, 2);
    ck_assert_int_eq(ops[1].c.off, 0);
    /* B = A, then B = c A A^T + b B: SYRK trans N, n = k = 2, on B at byte 16. */
    ck_assert_int_eq(ops[2].kind, CZ_NS_AXPBY);
    ck_assert_int_eq(ops[2].len, 4);
    ck_assert_float_eq(ops[2].alpha, 1.0f);
    ck_assert_int_eq(ops[2].c.off, 16);
    ck_assert_int_eq(ops[3].kind, CZ_NS_SYRK);
    ck_assert_int_eq(ops[3].transa, 0);
    ck_assert_int_eq(ops[3].n, 2);
    ck_assert_int_eq(ops[3].k, 2);
    ck_assert_int_eq(ops[3].a.off, 0);
    ck_assert_int_eq(ops[3].a.ld, 2);
    ck_assert_int_eq(ops[3].c.off, 16);
    ck_assert_float_eq(ops[3].alpha, 2.0315f);
    ck_assert_float_eq(ops[3].beta, -4.7750f);
    ck_assert_int_eq(ops[4].kind, CZ_NS_SYMFILL);
    ck_assert_int_eq(ops[4].c.off, 16);
    /* Y = B X and X = a X + Y as in the general form (batched GEMM). */
    ck_assert_int_eq(ops[5].kind, CZ_NS_GEMM);
    ck_assert_int_eq(ops[5].m, 3);
    ck_assert_int_eq(ops[5].batched, 1);
    ck_assert_int_eq(ops[6].kind, CZ_NS_AXPBY);
    ck_assert_float_eq(ops[6].beta, 3.4445f);
    /* Cubic: no square, B = b A from the filled A. */
    n = cz__ns_plan(ops, 2, 3, 1, 1.5, -0.5, 0.0, CZ_NS_FP32, 1);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(ops[2].kind, CZ_NS_AXPBY);
    ck_assert_float_eq(ops[2].alpha, -0.5f);
    ck_assert_int_eq(ops[3].kind, CZ_NS_GEMM);
    /* No bf16 SYRK: refused. */
    ck_assert_int_eq(cz__ns_plan(ops, 2, 3, 1, 1, 1, 1, CZ_NS_BF16, 1), -1);
}
END_TEST

START_TEST(symmetric_decision)
{
    /* CPU: from 128 rows on, any batch. */
    ck_assert_int_eq(cz__ns_use_syrk(CZ_NS_TARGET_CPU, 127, 4096, 1, CZ_NS_FP32), 0);
    ck_assert_int_eq(cz__ns_use_syrk(CZ_NS_TARGET_CPU, 128, 128, 1, CZ_NS_FP32), 1);
    ck_assert_int_eq(cz__ns_use_syrk(CZ_NS_TARGET_CPU, 512, 1536, 8, CZ_NS_FP32), 1);
    /* CUDA: never in bf16 (no cuBLAS bf16 SYRK); fp32 from 4096 rows on (measured on an
     * H200: 1024 x 4096 slower symmetric, 4096 x 4096 faster). */
    ck_assert_int_eq(cz__ns_use_syrk(CZ_NS_TARGET_CUDA, 4096, 12288, 1, CZ_NS_BF16), 0);
    ck_assert_int_eq(cz__ns_use_syrk(CZ_NS_TARGET_CUDA, 1024, 4096, 20, CZ_NS_FP32), 0);
    ck_assert_int_eq(cz__ns_use_syrk(CZ_NS_TARGET_CUDA, 4095, 4096, 1, CZ_NS_FP32), 0);
    ck_assert_int_eq(cz__ns_use_syrk(CZ_NS_TARGET_CUDA, 4096, 4096, 4, CZ_NS_FP32), 1);
    /* Forcing: ON and OFF win, except that bf16 on CUDA has no symmetric form to force. */
    ck_assert_int_eq(cz__ns_sym_resolve(CZ_NS_SYM_ON, CZ_NS_TARGET_CPU, 4, 8, 1, CZ_NS_FP32), 1);
    ck_assert_int_eq(cz__ns_sym_resolve(CZ_NS_SYM_OFF, CZ_NS_TARGET_CPU, 512, 512, 1, CZ_NS_FP32),
                     0);
    ck_assert_int_eq(cz__ns_sym_resolve(CZ_NS_SYM_AUTO, CZ_NS_TARGET_CPU, 512, 512, 1, CZ_NS_FP32),
                     1);
    ck_assert_int_eq(cz__ns_sym_resolve(CZ_NS_SYM_ON, CZ_NS_TARGET_CUDA, 64, 64, 1, CZ_NS_FP32), 1);
    ck_assert_int_eq(cz__ns_sym_resolve(CZ_NS_SYM_ON, CZ_NS_TARGET_CUDA, 4096, 4096, 1, CZ_NS_BF16),
                     0);
}
END_TEST

/* The CPU backend's symmetric form (cblas_ssyrk, mirrored) against its general one, and
 * ns_batched routed by the decision: bit-for-bit one form or the other. */
static void cpu_forms(int64_t r, int64_t c, int batch, const char *coeffs, int want_sym)
{
    const cz_ns_coeffs *k = cz__ns_coeffs_find(coeffs);
    int64_t nx = (int64_t)batch * r * c, nw = cz__ns_work_floats(r, c, batch);
    float *x0 = malloc((size_t)nx * sizeof(float)), *xg = malloc((size_t)nx * sizeof(float));
    float *xs = malloc((size_t)nx * sizeof(float)), *xa = malloc((size_t)nx * sizeof(float));
    float *w = calloc((size_t)nw, sizeof(float));
    ck_assert(x0 && xg && xs && xa && w);
    srand(11);
    for (int64_t i = 0; i < nx; i++)
        x0[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.5f / sqrtf((float)(r * c));
    memcpy(xg, x0, (size_t)nx * sizeof(float));
    memcpy(xs, x0, (size_t)nx * sizeof(float));
    memcpy(xa, x0, (size_t)nx * sizeof(float));
    ck_assert_int_eq(cz__cpu_ns(xg, batch, r, c, k, 5, w, 0, NULL), 0);
    ck_assert_int_eq(cz__cpu_ns(xs, batch, r, c, k, 5, w, 1, NULL), 0);
    cz_compute cpu;
    ck_assert_int_eq(cz__compute_open(&cpu, "cpu", NULL), 0);
    ck_assert_int_eq(cpu.ops->ns_batched(&cpu, xa, batch, r, c, k, 5, w, NULL), 0);
    cz__compute_close(&cpu);
    double num = 0, den = 0;
    for (int64_t i = 0; i < nx; i++) {
        num += ((double)xs[i] - xg[i]) * ((double)xs[i] - xg[i]);
        den += (double)xg[i] * xg[i];
    }
    double rel = sqrt(num / den);
    ck_assert_msg(rel <= 1e-5, "%lldx%lld %s: symmetric vs general rel. error %g", (long long)r,
                  (long long)c, coeffs, rel);
    ck_assert(memcmp(xa, want_sym ? xs : xg, (size_t)nx * sizeof(float)) == 0);
    free(x0), free(xg), free(xs), free(xa), free(w);
}

START_TEST(cpu_symmetric_form)
{
    cpu_forms(130, 260, 2, "jordan", 1);
    cpu_forms(128, 128, 1, "cubic", 1);
    cpu_forms(127, 300, 1, "jordan", 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ns_plan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, hand_worked_fp32);
    tcase_add_test(tc, hand_worked_bf16);
    tcase_add_test(tc, replay_matches_cpu);
    tcase_add_test(tc, hand_worked_symmetric);
    tcase_add_test(tc, symmetric_decision);
    tcase_add_test(tc, cpu_symmetric_form);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
