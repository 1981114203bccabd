/*
 * compute_cpu.h — the "cpu" compute backend (compute_cpu.c, compute_cpu_linalg.c): its table,
 * and its loops on host memory, which the tests and canzona-bench's single-process reference
 * call directly.
 */
#ifndef CZ_COMPUTE_CPU_H
#define CZ_COMPUTE_CPU_H

#include "compute.h"

#include <stdint.h>

/* The cpu backend's table, for wrappers. */
extern const cz_compute_ops cz__compute_cpu_ops;

/* Reference kernels on host memory: the CPU backend's own loops (compute_cpu.c), also used by
 * the tests and by canzona-bench's single-process reference. */
/* The momentum op: buf = mu*buf + g; in = buf, or g + mu*buf with Nesterov. n elements; in
 * may equal g. */
void cz__cpu_momentum(const float *g, float *buf, float *in, int64_t n, float mu, int nesterov);
/* The CPU backend's Newton-Schulz (its ns_batched) with the symmetric form forced on (sym = 1:
 * cblas_ssyrk for X X^T and A A, mirrored) or off (sym = 0: cblas_sgemm); ns_batched uses
 * cz__ns_use_syrk. For the tests and canzona-bench ns. */
int cz__cpu_ns(float *x, int batch, int64_t rows, int64_t cols, const cz_ns_coeffs *k, int steps,
               float *work, int sym, cz_error *err);
/* p = p*(1 - lr*wd) - lr*u over n elements. */
void cz__cpu_apply_update(float *p, const float *u, int64_t n, float lr, float wd);
/* The adamw op: one AdamW step over n elements with a step's arguments (cz__adamw_args_make). */
void cz__cpu_adamw(float *p, const float *g, float *m, float *v, int64_t n, const cz_adamw_args *a);
/* bf16 <-> fp32 on the host (round to nearest even; NaN stays NaN). */
uint16_t cz__bf16_from_f32(float f);
float cz__f32_from_bf16(uint16_t b);

#endif /* CZ_COMPUTE_CPU_H */
