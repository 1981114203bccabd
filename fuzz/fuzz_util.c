/* Helpers shared by the harnesses (see fuzz_util.h). */
#define _GNU_SOURCE /* memfd_create */
#include "fuzz_util.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef CZ_FUZZ_SOURCE_DIR
#error "CZ_FUZZ_SOURCE_DIR must name the source tree (set by fuzz/CMakeLists.txt)"
#endif

static int input_fd[2] = {-1, -1};
static char input_name[2][64];
static char scratch_dir[4096];
static char scratch_names[16][64];
static int nscratch;

void fz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("FUZZ PROPERTY BROKEN: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

const char *fz_input_path(int slot, const uint8_t *data, size_t size)
{
    if (slot < 0 || slot > 1)
        fz_fail("fz_input_path: slot %d out of range", slot);
    if (input_fd[slot] < 0) {
        input_fd[slot] = memfd_create("cz-fuzz-input", MFD_CLOEXEC);
        if (input_fd[slot] < 0)
            fz_fail("memfd_create failed: cannot hand inputs to the loaders");
        snprintf(input_name[slot], sizeof input_name[slot], "/proc/self/fd/%d", input_fd[slot]);
    }
    if (ftruncate(input_fd[slot], 0) != 0)
        fz_fail("ftruncate of the input file failed");
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(input_fd[slot], data + done, size - done, (off_t)done);
        if (w <= 0)
            fz_fail("writing the input file failed");
        done += (size_t)w;
    }
    return input_name[slot];
}

static void scratch_remove(void)
{
    char path[4200];
    for (int i = 0; i < nscratch; i++) {
        snprintf(path, sizeof path, "%s/%s", scratch_dir, scratch_names[i]);
        unlink(path);
    }
    if (scratch_dir[0])
        rmdir(scratch_dir);
}

const char *fz_scratch_path(const char *name)
{
    static char path[4200];
    if (!scratch_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(scratch_dir, sizeof scratch_dir, "%s/cz-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(scratch_dir))
            fz_fail("cannot make a scratch folder under %s", tmp && *tmp ? tmp : "/tmp");
        atexit(scratch_remove);
    }
    int known = 0;
    for (int i = 0; i < nscratch; i++)
        known |= strcmp(scratch_names[i], name) == 0;
    if (!known) {
        if (nscratch == (int)(sizeof scratch_names / sizeof scratch_names[0]) ||
            strlen(name) >= sizeof scratch_names[0])
            fz_fail("fz_scratch_path: too many or too long names");
        strcpy(scratch_names[nscratch++], name);
    }
    snprintf(path, sizeof path, "%s/%s", scratch_dir, name);
    return path;
}

const char *fz_tree_path(const char *rel)
{
    static char path[4200];
    const char *root = getenv("CZ_FUZZ_TREE");
    snprintf(path, sizeof path, "%s/%s", root && *root ? root : CZ_FUZZ_SOURCE_DIR, rel);
    return path;
}

cz_model *fz_fixture_model(const char *rel)
{
    cz_model *m = NULL;
    cz_error e;
    cz_error_clear(&e);
    if (cz_model_load(&m, fz_tree_path(rel), &e) != CZ_OK)
        fz_fail("fixture model %s does not load: %s", rel, e.message);
    return m;
}

cz_cluster *fz_fixture_cluster(const char *rel)
{
    cz_cluster *c = NULL;
    cz_error e;
    cz_error_clear(&e);
    if (cz_cluster_load(&c, fz_tree_path(rel), &e) != CZ_OK)
        fz_fail("fixture cluster %s does not load: %s", rel, e.message);
    return c;
}

void fz_print_violations(const json_t *violations, size_t max)
{
    size_t i;
    const json_t *v;
    json_array_foreach(violations, i, v)
    {
        if (i == max) {
            fprintf(stderr, "  ... %zu more\n", json_array_size(violations) - max);
            break;
        }
        fprintf(stderr, "  %s at %s: %s\n", json_string_value(json_object_get(v, "code")),
                json_string_value(json_object_get(v, "path")),
                json_string_value(json_object_get(v, "message")));
    }
}

cz_plan *fz_plan_validated(const cz_model *model, const cz_cluster *cluster, const char *what)
{
    cz_plan *plan = NULL;
    json_t *violations = NULL;
    cz_error err;
    cz_error_clear(&err);
    cz_settings s;
    cz_settings_init(&s);
    int rc = cz_plan_build(&plan, model, cluster, &s, &err);
    if (rc == CZ_EINTERNAL)
        fz_fail("cz_plan_build reported an internal error: %s", err.message);
    if (rc != CZ_OK)
        return NULL;
    rc = cz__plan_validate_json(plan, model, cluster, &violations, &err);
    if (rc < 0)
        fz_fail("cz__plan_validate_json failed on a fresh plan: %s", err.message);
    if (json_array_size(violations) > 0) {
        fprintf(stderr, "validate refuses the plan the planner built for this %s:\n", what);
        fz_print_violations(violations, 20);
        fz_fail("a freshly built plan does not validate");
    }
    json_decref(violations);
    return plan;
}

/* Must match the inputs fuzz/run.sh plans the seed plans from. */
static const char *const fixture_models[] = {
    "tests/data/model_tiny.json", "plans/models/test-small.json", "plans/models/test-moe.json"};
static const char *const fixture_clusters[] = {
    "tests/data/cluster_tiny.json",       "plans/clusters/cpu-4-dp1-tp4.json",
    "plans/clusters/cpu-4-dp2-tp2.json",  "plans/clusters/cpu-4-dp4-tp1.json",
    "plans/clusters/h100-8-dp8-tp1.json", "plans/clusters/cpu-4-dp4-ep2.json"};
#define FZ_NMODELS (sizeof fixture_models / sizeof fixture_models[0])
#define FZ_NCLUSTERS (sizeof fixture_clusters / sizeof fixture_clusters[0])
static cz_model *models[FZ_NMODELS];
static cz_cluster *clusters[FZ_NCLUSTERS];

void fz_fixtures_load(void)
{
    for (size_t i = 0; i < FZ_NMODELS; i++)
        if (!models[i])
            models[i] = fz_fixture_model(fixture_models[i]);
    for (size_t i = 0; i < FZ_NCLUSTERS; i++)
        if (!clusters[i])
            clusters[i] = fz_fixture_cluster(fixture_clusters[i]);
}

void fz_fixtures_find(const cz_plan *plan, const cz_model **model, const cz_cluster **cluster)
{
    *model = NULL;
    *cluster = NULL;
    for (size_t i = 0; i < FZ_NMODELS; i++)
        if (plan->model_sha256 && strcmp(models[i]->sha256, plan->model_sha256) == 0)
            *model = models[i];
    for (size_t i = 0; i < FZ_NCLUSTERS; i++)
        if (plan->cluster_sha256 && strcmp(clusters[i]->sha256, plan->cluster_sha256) == 0)
            *cluster = clusters[i];
}

const cz_cluster *fz_fixture_cluster_like(const cz_plan *plan)
{
    /* A plan with expert groups needs a cluster of the same expert grid to be simulated. */
    for (size_t i = 0; i < FZ_NCLUSTERS; i++)
        if (clusters[i]->dp == plan->dp && clusters[i]->tp == plan->tp &&
            clusters[i]->pp == plan->pp &&
            (!cz_plan_has_experts(plan) ||
             (cz_cluster_ep(clusters[i]) == plan->ep && cz_cluster_etp(clusters[i]) == plan->etp)))
            return clusters[i];
    return NULL;
}

int fz_model_is_slow(const json_t *model)
{
    const json_t *params = json_object_get(model, "params");
    if (!json_is_array(params))
        return 0;
    /* The loader's own count: models it refuses for their size are not slow, just refused. */
    size_t n = cz__model_count_params_json(params);
    return n > FZ_MODEL_FAST_PARAMS && n <= CZ_MODEL_MAX_PARAMS;
}
