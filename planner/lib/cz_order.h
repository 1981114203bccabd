/* Orders the planner sorts things into. Each has one definition here, so that every algorithm
 * and report that ranks or walks the same things agrees on ties. */
#ifndef CZ_ORDER_H
#define CZ_ORDER_H

#include "canzona.h"

#include <stddef.h>

/* Anything ranked by a cost: parameters, tasks, slots, groups, ranks (id = its index). */
typedef struct cz_costed {
    int id;
    double cost;
} cz_costed;

/* Sorts v by decreasing cost, equal costs by increasing id, so that every ranking is
 * deterministic (the greedy schedulers, the layer-wise rule and the reports depend on it). */
void cz__costed_sort(cz_costed *v, size_t n);

/* The parameters of one pipeline stage that have a bucket, grouped by bucket in bucket order,
 * each bucket's in offset order: the walk every DP partitioner makes along the buffer. */
typedef struct cz_stage_buckets {
    int nb;      /* buckets in the stage that hold a parameter */
    int *bucket; /* nb: plan bucket index of each */
    int *first;  /* nb + 1: start of each bucket's parameters in order[] */
    int *order;  /* n parameter ids */
    int n;
} cz_stage_buckets;

/* Fills *v for stage; on CZ_ENOMEM *v holds what was allocated, so cz__stage_buckets_free it
 * either way. */
int cz__stage_buckets_build(cz_stage_buckets *v, const cz_plan *plan, int stage);
void cz__stage_buckets_free(cz_stage_buckets *v);

#endif
