/*
 * bucket_step.h — the bucket-wise step's object (bucket_step.c owns it: made at the first
 * bucket-wise call, freed with the executor) and what other files of the executor ask of it.
 * The public entry points (cz_executor_bucket_ready, step_finish, step_cancel, bucket_wait,
 * set_early_updates) are in canzona_exec.h.
 */
#ifndef CZ_BUCKET_STEP_H
#define CZ_BUCKET_STEP_H

#include "executor_impl.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct cz_bucket_step cz_bucket_step;

/* Releases ex->bws: first its requests (a collective still in flight completes in req_free),
 * then its reduce-scatter ranges and tables. Nothing when there is none. */
void cz__bucket_step_free(cz_executor *ex);

/* Whether early updates are on (cz_executor_set_early_updates). */
bool cz__bucket_step_early(const cz_executor *ex);

/* How many of the last bucket-wise step's parameter all-gathers are posted (tests: early
 * updates post some inside the step). */
size_t cz__bucket_step_gathers_posted(const cz_executor *ex);

#endif /* CZ_BUCKET_STEP_H */
