/*
 * ns_plan.h — the Newton-Schulz iteration of a batch of same-shape matrices as a list of GEMMs
 * and strided elementwise passes in cuBLAS's terms (column-major, transposes, leading
 * dimensions, strides, batch counts). Plain C, so that every parameter the CUDA backend hands
 * cuBLAS is decided here and checked on the CPU: tests/exec/test_ns_plan.c replays a plan with
 * column-major reference GEMMs and compares it with the CPU backend's row-major iteration.
 *
 * The matrices are row-major rows x cols (rows <= cols), stored back to back in X. A row-major
 * matrix M (ld = its cols) is, read column-major, M^T with the same ld; so
 *   A = X X^T  is  C(r x r) = op_T(Xcm) op_N(Xcm), k = cols;
 *   A A        is  C(r x r) = Acm Acm,            k = rows;
 *   Y = B X    is  Ycm(c x r) = Xcm Bcm,          k = rows.
 * Work layout per matrix i (stride w = 2 r^2 + r c floats, as the seam's ns_batched sizes it):
 *   fp32: [A: r^2 fp32][B: r^2 fp32][Y: r c fp32];
 *   bf16: [A: r^2 fp32, later B as bf16][B: r^2 fp32][Xh: r c bf16][Ah: r^2 bf16]
 * (bf16 needs no Y: the last GEMM reads bf16 copies and accumulates into X in place).
 *
 * Symmetric form (fp32 only; cz__ns_use_syrk decides where it pays): A = X X^T and the
 * polynomial's square A A = A A^T are symmetric, so each is one SYRK that computes one
 * triangle at half a GEMM's FLOPs:
 *   A = X X^T   SYRK upper (column-major), trans T, n = rows, k = cols;
 *   A A         SYRK upper, trans N, n = k = rows, on a B preset to b A (beta 1) or A (beta b),
 * each followed by a SYMFILL that copies the upper triangle over the lower one, since the
 * next product (A A^T reads the whole A; Y = B X is a GEMM) reads the full matrix. FLOPs per
 * iteration: r^2 c + r^3 + 2 r^2 c instead of 2 r^2 c + 2 r^3 + 2 r^2 c.
 */
#ifndef CZ_NS_PLAN_H
#define CZ_NS_PLAN_H

#include <stdint.h>

typedef enum cz_ns_precision {
    CZ_NS_FP32 = 0, /* fp32 GEMMs (TF32 tensor cores are not enabled) */
    CZ_NS_BF16 = 1, /* bf16 inputs, fp32 accumulation and output */
} cz_ns_precision;

typedef enum cz_ns_op_kind {
    CZ_NS_GEMM = 1, /* c = alpha op(a) op(b) + beta c, column-major */
    CZ_NS_AXPBY,    /* c[j] = alpha a[j] + beta c[j] over len elements (beta 0: c not read) */
    CZ_NS_TO_BF16,  /* c (bf16) = a (fp32), len elements, round to nearest even */
    CZ_NS_SYRK,     /* c = alpha op(a) op(a)^T + beta c, upper triangle of the n x n c only
                       (column-major; k = inner dimension; fp32) */
    CZ_NS_SYMFILL,  /* c's upper triangle copied over its lower one, n x n (column-major) */
} cz_ns_op_kind;

typedef enum cz_ns_buf {
    CZ_NS_BUF_X = 0,    /* the matrices being orthogonalized */
    CZ_NS_BUF_WORK = 1, /* the work buffer */
} cz_ns_buf;

/* One operand: matrix i of the batch starts at byte off + i * stride * element size. */
typedef struct cz_ns_operand {
    cz_ns_buf buf;
    int64_t off;    /* bytes from the buffer's start to matrix 0 */
    int64_t stride; /* elements from one matrix to the next */
    int ld;         /* leading dimension in elements (GEMM only) */
    int bf16;       /* element type: 1 = bf16, 0 = fp32 */
} cz_ns_operand;

typedef struct cz_ns_op {
    cz_ns_op_kind kind;
    int transa, transb; /* GEMM: 1 = transposed; SYRK: transa only */
    int m, n, k;        /* GEMM; SYRK, SYMFILL: n (and k) */
    int64_t len;        /* AXPBY, TO_BF16: elements per matrix */
    float alpha, beta;
    cz_ns_operand a, b, c;
    int batch;   /* matrices the op covers */
    int batched; /* GEMM: 1 = one strided-batched call, 0 = one call per matrix (SYRK: always 0,
                    cuBLAS has no batched SYRK) */
} cz_ns_op;

/* The most ops one iteration takes. */
#define CZ_NS_MAX_OPS 8

/* Writes the ops of ONE Newton-Schulz iteration (A = X X^T, B = b A + c A A, X = a X + B X)
 * of `batch` rows x cols matrices to ops; returns their count, or -1 when the shape is not
 * valid (rows > cols, a dimension <= 0 or above INT32_MAX, batch < 1) or sym is asked with
 * bf16. Same-shape matrices are one strided-batched GEMM when batch > 1, a plain GEMM when
 * batch = 1. sym = 1: the symmetric form above for both symmetric products. */
int cz__ns_plan(cz_ns_op *ops, int64_t rows, int64_t cols, int batch, double a, double b, double c,
                cz_ns_precision prec, int sym);

/* Where the symmetric form pays, per backend, shape and precision (1 = SYRK + SYMFILL).
 *   CPU (OpenBLAS, fp32): rows >= CZ_NS_SYRK_MIN_ROWS_CPU. Measured (docs/PERF.md 7.1): the
 *     SYRKs' fewer FLOPs win about 1.2-1.3x from 128 rows on; below, the mirror passes and
 *     SYRK's lower efficiency on small blocks cancel it (even at 64 rows, 0.74x at 32 x 96).
 *   CUDA: bf16 never (cuBLAS has SYRK for fp32/fp64 and complex types only: no bf16
 *     cublasSyrkEx, so the bf16 products stay tensor-core GemmEx); fp32 when
 *     rows >= CZ_NS_SYRK_MIN_ROWS_CUDA, where one matrix's SYRK fills the device by itself:
 *     cuBLAS has no batched SYRK, so below that a strided-batched GEMM of the batch beats a
 *     loop of small SYRKs. Measured on an H200 (docs/PERF.md section 7, canzona-bench ns
 *     --per-shape --sym on|off): 4096 x 4096 and 4096 x 12288 1.31x and 1.25x faster
 *     symmetric, 1024 x 4096 (a batch of 20) 1.23x slower; 1024 rows was the first guess.
 * The executor's default; canzona-bench ns forces either form to compare them. */
typedef enum cz_ns_target {
    CZ_NS_TARGET_CPU = 0,
    CZ_NS_TARGET_CUDA = 1,
} cz_ns_target;
#define CZ_NS_SYRK_MIN_ROWS_CPU 128
#define CZ_NS_SYRK_MIN_ROWS_CUDA 4096
int cz__ns_use_syrk(cz_ns_target target, int64_t rows, int64_t cols, int batch,
                    cz_ns_precision prec);

/* Forcing the choice (canzona-bench ns, the tests): AUTO = cz__ns_use_syrk. */
typedef enum cz_ns_sym_mode {
    CZ_NS_SYM_AUTO = 0,
    CZ_NS_SYM_OFF = 1,
    CZ_NS_SYM_ON = 2,
} cz_ns_sym_mode;
int cz__ns_sym_resolve(cz_ns_sym_mode mode, cz_ns_target target, int64_t rows, int64_t cols,
                       int batch, cz_ns_precision prec);

/* The address of matrix i of operand o, given the buffers' bases: base + off + i * stride
 * elements of its type. What the CUDA backend hands cuBLAS and its kernels. */
void *cz__ns_operand_ptr(const cz_ns_operand *o, float *x, float *work, int i);

/* Floats of work the iteration needs for `batch` matrices (the seam's ns_batched size). */
int64_t cz__ns_work_floats(int64_t rows, int64_t cols, int batch);

/* FLOPs of one iteration of one matrix (2 m n k per GEMM), for the micro-benchmark. */
double cz__ns_iter_flops(int64_t rows, int64_t cols, double c);

#endif /* CZ_NS_PLAN_H */
