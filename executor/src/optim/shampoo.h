/*
 * shampoo.h — Shampoo on whole matrices (shampoo.c), as Meta's Distributed Shampoo does it.
 */
#ifndef CZ_SHAMPOO_H
#define CZ_SHAMPOO_H

#include "canzona_exec.h"
#include "compute.h"
#include "cz_format.h"
#include "optimizer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct cz_shampoo_hparams {
    float lr, weight_decay, beta1, beta2, eps, momentum, graft_beta2, graft_eps;
    int nesterov, start_step, freq, max_dim, bias_correction;
    cz_shampoo_grafting grafting;
} cz_shampoo_hparams;
/* Default Shampoo learning rate (Distributed Shampoo's). */
#define CZ_SHAMPOO_LR 0.01f
/* Reads and checks Shampoo's settings; freq is the plan's precondition_frequency. */
int cz__shampoo_hparams_from_config(cz_shampoo_hparams *h, const cz_exec_config *cfg, int freq,
                                    cz_error *err);
/* The optimizer state of one whole matrix: its blocks (the plan's) cut into tiles whose sides
 * are at most max_dim, each with its factors L, R, their inverse roots and the diagonal
 * state. Backend memory, allocated at create time. */
typedef struct cz_shampoo_state cz_shampoo_state;
/* Allocates p's state; *work_n and *side_n grow to the work (floats) one cz__shampoo_run on
 * it needs. */
int cz__shampoo_state_create(cz_compute *c, const cz_shampoo_hparams *h, const cz_plan_param *p,
                             cz_shampoo_state **out, int64_t *work_n, cz_error *err);
void cz__shampoo_state_free(cz_compute *c, cz_shampoo_state *s);
/* Bytes of backend memory the state holds (for the memory figures). */
int64_t cz__shampoo_state_bytes(const cz_shampoo_state *s);
/* Writes step t's (t >= 1) Shampoo direction of the whole gradient g into u (both full,
 * row-major, backend memory): p then becomes p*(1 - lr*wd) - lr*u, or without momentum p -
 * lr*u after cz__shampoo_decay_momentum. work holds work_n floats, stats two backend doubles. */
int cz__shampoo_run(cz_compute *c, const cz_shampoo_hparams *h, cz_shampoo_state *s, const float *g,
                    float *u, int64_t t, float *work, double *stats, cz_error *err);
/* Whether step t (>= 1) computes the inverse roots: at the start step, then at every multiple
 * of the frequency after it (Distributed Shampoo's rule). */
bool cz__shampoo_refreshes(const cz_shampoo_hparams *h, int64_t t);
/* Distributed Shampoo adds the decoupled weight decay wd*p to the direction before its
 * momentum: M = mu*M + D + wd*p. The host keeps A = mu*A + D (cz__shampoo_run); the rest,
 * B = mu*B + wd*p, is elementwise, so each rank keeps it for the n elements p of its shard
 * (b, backend memory) and applies it here, before the host's part is applied as p - lr*u:
 * p -= lr*B, or with Nesterov p -= lr*(wd*p + mu*B). Only with momentum: without, the
 * reference's p - lr*(D + wd*p) is the plain decoupled form. */
void cz__shampoo_decay_momentum(cz_compute *c, const cz_shampoo_hparams *h, float *p, float *b,
                                int64_t n, float lr, float wd);

/* The checkpoint tensors of p's Shampoo state, from the settings alone (rank 0 names them
 * without hosting the state): writes the first max of them to out and returns their count.
 * Per tile, named by its origin: shampoo.<r0>_<c0>.{factor_left, factor_right, inv_root_left,
 * inv_root_right[, grafting][, filtered_grad][, momentum]}. */
int64_t cz__shampoo_state_tensors(const cz_shampoo_hparams *h, const cz_plan_param *p,
                                  cz_state_tensor *out, int64_t max);
/* The buffer of tensor k (in that order) of a state; NULL past the end. */
float *cz__shampoo_state_tensor(cz_shampoo_state *s, int64_t k);

/* Shampoo as the executor runs it on the matrix parameters (optimizer.h): one state per whole
 * matrix on each rank that holds its task. */
extern const cz_optimizer_ops cz__shampoo_ops;

#endif /* CZ_SHAMPOO_H */
