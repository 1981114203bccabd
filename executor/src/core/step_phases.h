/*
 * step_phases.h — the phases of a step (step.c) that the bucket-wise step (bucket_step.c)
 * builds on: the count of a step done, and the sequence from the
 * gradient statistics to every parameter updated (staging and the binding check: binding.h).
 * step.c depends on nothing of the bucket-wise step; what early updates already did reaches
 * the sequence as a cz_step_early.
 */
#ifndef CZ_STEP_PHASES_H
#define CZ_STEP_PHASES_H

#include "executor_impl.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A step done: counted, its timings (phases in *t, the total added) the last step's. */
void cz__step_count(cz_executor *ex, cz_exec_timings *t);

/* The elementwise optimizer's step on this rank's pieces in bucket b's range, unless done[b];
 * done[b] is set (once per bucket-wise step with early updates). */
int cz__step_elementwise_bucket(cz_executor *ex, float *P, const float *G, size_t b, bool *done,
                                cz_error *err);

/* What the early updates of a bucket-wise step did before its update sequence: the buckets
 * whose elementwise updates ran (elem_done, set as the sequence runs the others), the
 * micro-groups they ran (the pipeline's own count, pipeline.c), the end of a refusal's
 * message that says so, and whether they moved anything on this rank. */
typedef struct cz_step_early {
    bool *elem_done;
    const char *unchanged;
    bool moved;
} cz_step_early;

/* What follows the reduce-scatters, up to every parameter updated: the statistics (norm,
 * finiteness, clipping), the elementwise optimizer, the matrix pipeline; after early updates
 * (early non-NULL) only what they left. *t gets the phases' times, the reduce-scatter's
 * counted from t0. */
int cz__step_update_all(cz_executor *ex, float *P, float *G, const cz_step_early *early, double t0,
                        cz_exec_timings *t, cz_error *err);

#endif /* CZ_STEP_PHASES_H */
