/*
 * soap.h — SOAP on whole matrices (soap.c), as the reference implementation does it.
 */
#ifndef CZ_SOAP_H
#define CZ_SOAP_H

#include "canzona_exec.h"
#include "compute.h"
#include "cz_format.h"
#include "optimizer.h"

#include <stdint.h>

typedef struct cz_soap_hparams {
    float lr, weight_decay, beta1, beta2, shampoo_beta, eps;
    int freq, max_dim, bias_correction;
} cz_soap_hparams;
/* Default SOAP learning rate (the reference's). */
#define CZ_SOAP_LR 3e-3f
/* Reads and checks SOAP's settings; freq and max_dim are the plan's. */
int cz__soap_hparams_from_config(cz_soap_hparams *h, const cz_exec_config *cfg, int freq,
                                 int max_dim, cz_error *err);
/* One whole matrix's SOAP state (per plan block: Gram factors and eigenbases of the sides
 * <= max_dim, Adam's moments in the eigenbasis). Backend memory, allocated at create time. */
typedef struct cz_soap_state cz_soap_state;
int cz__soap_state_create(cz_compute *c, const cz_soap_hparams *h, const cz_plan_param *p,
                          cz_soap_state **out, int64_t *work_n, cz_error *err);
void cz__soap_state_free(cz_compute *c, cz_soap_state *s);
/* Call k (>= 1) of SOAP on the whole gradient g, writing u (full, backend memory) so that
 * p*(1 - lr*wd) - lr*u is the reference's update followed by its weight decay. The first
 * call only initialises the factors and eigenbases: u = 0, and the caller applies no weight
 * decay that step. */
int cz__soap_run(cz_compute *c, const cz_soap_hparams *h, cz_soap_state *s, const float *g,
                 float *u, int64_t k, float *work, cz_error *err);

/* The same for SOAP: per plan block, soap.<r0>_<c0>.{[GG_left, Q_left,][GG_right, Q_right,]
 * exp_avg, exp_avg_sq}, a side above max_dim without its factor and basis. */
int64_t cz__soap_state_tensors(const cz_soap_hparams *h, const cz_plan_param *p,
                               cz_state_tensor *out, int64_t max);
float *cz__soap_state_tensor(cz_soap_state *s, int64_t k);

/* SOAP as the executor runs it on the matrix parameters (optimizer.h): one state per whole
 * matrix on each rank that holds its task. */
extern const cz_optimizer_ops cz__soap_ops;

#endif /* CZ_SOAP_H */
