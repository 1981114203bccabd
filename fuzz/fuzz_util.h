/*
 * fuzz_util.h — helpers shared by the libFuzzer harnesses in fuzz/.
 *
 * The loaders under test take file paths, so each input is handed to them as a file: an
 * anonymous in-memory file (memfd) reached through /proc/self/fd, so that fuzzing never writes
 * to a disk folder. Outputs the harnesses write themselves (plans, models written back) go to
 * one private folder made under $TMPDIR and removed at exit.
 */
#ifndef CZ_FUZZ_UTIL_H
#define CZ_FUZZ_UTIL_H

#include "cz_types.h"

#include <stddef.h>
#include <stdint.h>

/* Puts data into the harness's input file (slot 0 or 1: two inputs may be alive at once) and
 * returns its path. Aborts when no such file can be made: the harness cannot run at all. */
const char *fz_input_path(int slot, const uint8_t *data, size_t size);

/* Path of a file inside this process's private scratch folder (made on first use). */
const char *fz_scratch_path(const char *name);

/* Path of a file in the source tree (CZ_FUZZ_TREE in the environment, else the tree the
 * harness was configured from). */
const char *fz_tree_path(const char *rel);

/* Loads a bundled model / cluster; aborts on failure (a broken fixture, not a finding). */
cz_model *fz_fixture_model(const char *rel);
cz_cluster *fz_fixture_cluster(const char *rel);

/* 1 when a model description (a parsed canzona.model/1 document) expands, repeat blocks
 * included, to more than FZ_MODEL_FAST_PARAMS parameters but not more than the loader's own
 * bound (CZ_MODEL_MAX_PARAMS in planner/format/cz_format.h, 2^18), which it refuses before
 * expanding. The loader accepts such models, but at several seconds each under the sanitizers
 * they would only slow the fuzzer down (and trip its time-out) on work that is linear in the
 * count: the harnesses skip them. */
#define FZ_MODEL_FAST_PARAMS ((size_t)1 << 16)
int fz_model_is_slow(const json_t *model);

/* The bundled models and clusters the seed plans are made from (see run.sh). Loaded once. */
void fz_fixtures_load(void);
/* The fixture model and cluster a plan names by SHA-256 (inputs.*.sha256); either is NULL
 * when no fixture has that hash. */
void fz_fixtures_find(const cz_plan *plan, const cz_model **model, const cz_cluster **cluster);
/* A fixture cluster with the plan's topology (dp, tp, pp), or NULL. */
const cz_cluster *fz_fixture_cluster_like(const cz_plan *plan);

/* Reports a broken property with the context given and aborts, so that libFuzzer records the
 * input as a crash. */
void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Prints the violations of a validate report (at most max of them) to stderr. */
void fz_print_violations(const json_t *violations, size_t max);

/* Plans model on cluster with the default settings and checks the planner's promise: it may
 * refuse (the plan is then NULL), never with CZ_EINTERNAL, and a plan it builds passes validate
 * with no violation. `what` names the fuzzed input ("model", "cluster") in the report. Returns
 * the plan (the caller frees it) or NULL. */
cz_plan *fz_plan_validated(const cz_model *model, const cz_cluster *cluster, const char *what);

/* The structure-aware JSON mutator (fuzz_json_mutator.c): one to three edits of the tree
 * (fz_json_edit, seeded by *s), or the whole input as a JSON document edited and written back
 * (fz_json_mutate; libFuzzer's byte mutator one call in four and for what does not parse). */
void fz_json_edit(json_t *root, uint64_t *s);
size_t fz_json_mutate(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

#endif
