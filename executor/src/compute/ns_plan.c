/* The Newton-Schulz iteration as cuBLAS calls (see ns_plan.h for the layouts). */
#include "ns_plan.h"

#include <stddef.h>

void *cz__ns_operand_ptr(const cz_ns_operand *o, float *x, float *work, int i)
{
    size_t el = o->bf16 ? 2 : 4;
    return (char *)(o->buf == CZ_NS_BUF_X ? x : work) + o->off + (size_t)i * (size_t)o->stride * el;
}

int64_t cz__ns_work_floats(int64_t rows, int64_t cols, int batch)
{
    return (int64_t)batch * (2 * rows * rows + rows * cols);
}

double cz__ns_iter_flops(int64_t rows, int64_t cols, double c)
{
    double r = (double)rows, n = (double)cols;
    return 2.0 * r * r * n + (c != 0.0 ? 2.0 * r * r * r : 0.0) + 2.0 * r * r * n;
}

static cz_ns_operand opnd(cz_ns_buf buf, int64_t off, int64_t stride, int64_t ld, int bf16)
{
    return (cz_ns_operand){buf, off, stride, (int)ld, bf16};
}

static cz_ns_op gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                     cz_ns_operand a, cz_ns_operand b, cz_ns_operand c, int batch)
{
    return (cz_ns_op){.kind = CZ_NS_GEMM,
                      .transa = ta,
                      .transb = tb,
                      .m = (int)m,
                      .n = (int)n,
                      .k = (int)k,
                      .alpha = alpha,
                      .beta = beta,
                      .a = a,
                      .b = b,
                      .c = c,
                      .batch = batch,
                      .batched = batch > 1};
}

static cz_ns_op ew(cz_ns_op_kind kind, int64_t len, float alpha, float beta, cz_ns_operand a,
                   cz_ns_operand c, int batch)
{
    return (cz_ns_op){
        .kind = kind, .len = len, .alpha = alpha, .beta = beta, .a = a, .c = c, .batch = batch};
}

static cz_ns_op syrk(int trans, int64_t n, int64_t k, float alpha, float beta, cz_ns_operand a,
                     cz_ns_operand c, int batch)
{
    return (cz_ns_op){.kind = CZ_NS_SYRK,
                      .transa = trans,
                      .n = (int)n,
                      .k = (int)k,
                      .alpha = alpha,
                      .beta = beta,
                      .a = a,
                      .c = c,
                      .batch = batch,
                      .batched = 0};
}

static cz_ns_op symfill(int64_t n, cz_ns_operand c, int batch)
{
    return (cz_ns_op){.kind = CZ_NS_SYMFILL, .n = (int)n, .c = c, .batch = batch};
}

int cz__ns_use_syrk(cz_ns_target target, int64_t rows, int64_t cols, int batch,
                    cz_ns_precision prec)
{
    (void)cols;
    (void)batch;
    if (target == CZ_NS_TARGET_CPU)
        return rows >= CZ_NS_SYRK_MIN_ROWS_CPU;
    return prec == CZ_NS_FP32 && rows >= CZ_NS_SYRK_MIN_ROWS_CUDA;
}

int cz__ns_sym_resolve(cz_ns_sym_mode mode, cz_ns_target target, int64_t rows, int64_t cols,
                       int batch, cz_ns_precision prec)
{
    /* bf16 has no SYRK on the GPU: forcing it there falls back to the GEMMs. */
    if (target == CZ_NS_TARGET_CUDA && prec != CZ_NS_FP32)
        return 0;
    if (mode == CZ_NS_SYM_ON)
        return 1;
    if (mode == CZ_NS_SYM_OFF)
        return 0;
    return cz__ns_use_syrk(target, rows, cols, batch, prec);
}

int cz__ns_plan(cz_ns_op *ops, int64_t rows, int64_t cols, int batch, double a, double b, double c,
                cz_ns_precision prec, int sym)
{
    if (rows <= 0 || cols <= 0 || rows > cols || cols > INT32_MAX || batch < 1 ||
        (sym && prec != CZ_NS_FP32))
        return -1;
    int64_t r = rows, n = cols, rr = r * r, rn = r * n, w = 2 * rr + rn;
    float fa = (float)a, fb = (float)b, fc = (float)c;
    /* Byte offsets of the work regions of matrix 0. */
    int64_t A = 0, B = 4 * rr, Y = 8 * rr, Xh = 8 * rr, Ah = 8 * rr + 2 * rn;
    cz_ns_operand X32 = opnd(CZ_NS_BUF_X, 0, rn, n, 0);
    cz_ns_operand A32 = opnd(CZ_NS_BUF_WORK, A, w, r, 0);
    cz_ns_operand B32 = opnd(CZ_NS_BUF_WORK, B, w, r, 0);
    int k = 0;
    if (prec == CZ_NS_FP32 && sym) {
        cz_ns_operand Y32 = opnd(CZ_NS_BUF_WORK, Y, w, n, 0);
        ops[k++] = syrk(1, r, n, 1.0f, 0.0f, X32, A32, batch);
        ops[k++] = symfill(r, A32, batch);
        /* B = A, then B = c A A^T + b B: one SYRK on the upper triangle (cubic: B = b A). */
        ops[k++] = ew(CZ_NS_AXPBY, rr, fc != 0.0f ? 1.0f : fb, 0.0f, A32, B32, batch);
        if (fc != 0.0f) {
            ops[k++] = syrk(0, r, r, fc, fb, A32, B32, batch);
            ops[k++] = symfill(r, B32, batch);
        }
        ops[k++] = gemm(0, 0, n, r, r, 1.0f, 0.0f, X32, B32, Y32, batch);
        ops[k++] = ew(CZ_NS_AXPBY, rn, 1.0f, fa, Y32, X32, batch);
        return k;
    }
    if (prec == CZ_NS_FP32) {
        cz_ns_operand Y32 = opnd(CZ_NS_BUF_WORK, Y, w, n, 0);
        ops[k++] = gemm(1, 0, r, r, n, 1.0f, 0.0f, X32, X32, A32, batch);
        if (fc != 0.0f) {
            /* B = A, then B = c A A + b B in one GEMM. */
            ops[k++] = ew(CZ_NS_AXPBY, rr, 1.0f, 0.0f, A32, B32, batch);
            ops[k++] = gemm(0, 0, r, r, r, fc, fb, A32, A32, B32, batch);
        } else {
            ops[k++] = ew(CZ_NS_AXPBY, rr, fb, 0.0f, A32, B32, batch);
        }
        ops[k++] = gemm(0, 0, n, r, r, 1.0f, 0.0f, X32, B32, Y32, batch);
        ops[k++] = ew(CZ_NS_AXPBY, rn, 1.0f, fa, Y32, X32, batch);
        return k;
    }
    cz_ns_operand X16 = opnd(CZ_NS_BUF_WORK, Xh, 2 * w, n, 1);
    cz_ns_operand A16 = opnd(CZ_NS_BUF_WORK, Ah, 2 * w, r, 1);
    cz_ns_operand B16 = opnd(CZ_NS_BUF_WORK, A, 2 * w, r, 1); /* over A: dead by then */
    ops[k++] = ew(CZ_NS_TO_BF16, rn, 1.0f, 0.0f, X32, X16, batch);
    ops[k++] = gemm(1, 0, r, r, n, 1.0f, 0.0f, X16, X16, A32, batch);
    if (fc != 0.0f) {
        ops[k++] = ew(CZ_NS_TO_BF16, rr, 1.0f, 0.0f, A32, A16, batch);
        ops[k++] = ew(CZ_NS_AXPBY, rr, 1.0f, 0.0f, A32, B32, batch);
        ops[k++] = gemm(0, 0, r, r, r, fc, fb, A16, A16, B32, batch);
    } else {
        ops[k++] = ew(CZ_NS_AXPBY, rr, fb, 0.0f, A32, B32, batch);
    }
    ops[k++] = ew(CZ_NS_TO_BF16, rr, 1.0f, 0.0f, B32, B16, batch);
    ops[k++] = gemm(0, 0, n, r, r, 1.0f, fa, X16, B16, X32, batch);
    return k;
}
