/*
 * adamw.h — AdamW's settings and the per-step scalars of the compute seam's adamw op
 * (adamw.c).
 */
#ifndef CZ_ADAMW_H
#define CZ_ADAMW_H

#include "canzona_exec.h"
#include "compute.h"
#include "optimizer.h"

#include <stdint.h>

typedef struct cz_adamw_hparams {
    float lr, beta1, beta2, eps, weight_decay;
} cz_adamw_hparams;

/* AdamW as the executor runs it on the elementwise parameters (optimizer.h). */
extern const cz_optimizer_ops cz__adamw_ops;
/* The settings an AdamW optimizer of cz__adamw_ops runs with (tests: the reference). */
const cz_adamw_hparams *cz__adamw_hparams_of(const cz_optim *o);

void cz__adamw_hparams_from_config(cz_adamw_hparams *h, const cz_exec_config *cfg);
/* The AdamW arguments of step t (>= 1). */
void cz__adamw_args_make(cz_adamw_args *a, const cz_adamw_hparams *h, int64_t t);

#endif /* CZ_ADAMW_H */
