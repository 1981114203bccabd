/*
 * compute_cpu.h — the "cpu" compute backend (compute_cpu.c, compute_cpu_linalg.c): its table,
 * and its loops on host memory, which the tests and canzona-bench's single-process reference
 * call directly.
 */
#ifndef CZ_COMPUTE_CPU_H
#define CZ_COMPUTE_CPU_H

#include "adamw.h"
#include "compute.h"
#include "muon.h"

#include <stdint.h>

/* The cpu backend's table, for wrappers. */
extern const cz_compute_ops cz__compute_cpu_ops;

/* Reference kernels on host memory: the CPU backend's own loops (compute_cpu.c), also used by
 * the tests and by canzona-bench's single-process reference. */
/* buf = mu*buf + g; in = buf, or g + mu*buf with Nesterov. n elements; in may equal g. */
void cz__muon_momentum(const cz_muon_hparams *h, const float *g, float *buf, float *in, int64_t n);
/* The CPU backend's Newton-Schulz (its ns_batched) with the symmetric form forced on (sym = 1:
 * cblas_ssyrk for X X^T and A A, mirrored) or off (sym = 0: cblas_sgemm); ns_batched uses
 * cz__ns_use_syrk. For the tests and canzona-bench ns. */
int cz__cpu_ns(float *x, int batch, int64_t rows, int64_t cols, const cz_ns_coeffs *k, int steps,
               float *work, int sym, cz_error *err);
/* p = p*(1 - lr*wd) - lr*u over n elements. */
void cz__apply_update(float *p, const float *u, int64_t n, float lr, float wd);
/* One AdamW step (t >= 1) over n elements. */
void cz__adamw_step(const cz_adamw_hparams *h, int64_t t, float *p, const float *g, float *m,
                    float *v, int64_t n);
/* bf16 <-> fp32 on the host (round to nearest even; NaN stays NaN). */
uint16_t cz__bf16_from_f32(float f);
float cz__f32_from_bf16(uint16_t b);

#endif /* CZ_COMPUTE_CPU_H */
