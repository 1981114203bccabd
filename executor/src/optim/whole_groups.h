/*
 * whole_groups.h — the micro-group layout of the optimizers whose plans have whole-matrix
 * tasks only (SOAP, Shampoo; whole_groups.c): per group, each matrix's state, gradient and
 * update, and the list of groups an optimizer frees at destroy.
 */
#ifndef CZ_WHOLE_GROUPS_H
#define CZ_WHOLE_GROUPS_H

#include "optimizer.h"

/* A matrix this rank computes in a micro-group: its optimizer's state, gradient and update. */
typedef struct cz_whole_part {
    void *state;
    const float *in;
    float *out;
} cz_whole_part;

/* One micro-group (what its cz_opt_group points to). */
typedef struct cz_whole_group cz_whole_group;
struct cz_whole_group {
    cz_whole_group *next;
    cz_whole_part *parts;
    int nparts;
};

/* Every group of an optimizer, in the order group_add made them. */
typedef struct cz_whole_groups {
    cz_whole_group *first, *last;
} cz_whole_groups;

/* Creates the state of p, which this rank computes whole, in the optimizer's own table (each
 * matrix once), and sets *state to it. */
typedef int (*cz_whole_state_fn)(cz_optim *o, const cz_plan_param *p, void **state, cz_error *err);

/* group_add for such an optimizer: appends a group of the n parts to l, creating each part's
 * state with create, and sets *out to it. */
int cz__whole_group_add(cz_whole_groups *l, cz_optim *o, const cz_opt_part *parts, int n,
                        cz_whole_state_fn create, cz_opt_group **out, cz_error *err);
/* Frees every group of l (not the states: the optimizer owns them). */
void cz__whole_groups_free(cz_whole_groups *l);

#endif
