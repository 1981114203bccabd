/* canzona-bench internals: deterministic data and the single-process reference. */
#ifndef CZ_BENCH_H
#define CZ_BENCH_H

#include "canzona_exec.h"
#include "cz_format.h"
#include "cz_exec_testing.h"

#include <jansson.h>
#include <stdint.h>

/* Counter-based values in [-1, 1): a pure function of its key, so every rank can generate any
 * element of any tensor on its own. stream 0 = initial parameters, 1 = gradients. */
float cz_bench_value(uint64_t seed, int stream, int param, int64_t step, int dp_rank,
                     int64_t index);

/* Fills TP rank r's local shard of param p: element (i, j) of the shard gets
 * scale * value(..., full row-major index of that element). */
void cz_bench_fill_shard(const cz_plan_param *p, int tp, int r, uint64_t seed, int stream,
                         int64_t step, int dp_rank, float scale, float *shard);

#define CZ_BENCH_PARAM_SCALE 0.05f

/* The whole gradient of param p at step `step` averaged over dp DP replicas, as the DP
 * reduce-scatter of canzona-bench's generated gradients gives it, into g (double, the full
 * row-major matrix); buf is room for one replica's floats. For the single-process references. */
void cz_bench_mean_grad(const cz_plan_param *p, uint64_t seed, int64_t step, int dp, float *buf,
                        double *g);

/* Writes root to path (indented, keys sorted, a final newline) through a temporary file
 * renamed into place (bench_json.c). */
int cz_bench_write_json(const char *path, const json_t *root, cz_error *err);

/* canzona-bench --dry-run (step_model.c): the step's device bytes per pass, no device, no MPI. */
int cz_bench_dry_run_main(int argc, char **argv);
/* The executor's backend memory by kind (cz_exec_mem_usage) as a table on stdout, under
 * `title`, with the model states, what is beyond them and its share of the optimizer state
 * (bench_memory.c). */
void cz_bench_memory_print(const char *title, const cz_exec_mem_usage *u);
/* The same as a JSON object: bytes by kind, model_states, beyond. */
json_t *cz_bench_memory_json(const cz_exec_mem_usage *u);

#endif
