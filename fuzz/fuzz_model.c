/*
 * Harness: the model loader (cz_model_load).
 *
 * Any input must load or be refused with a message, never crash, leak or overflow. A model
 * that loads and is small enough to plan quickly is then planned on the bundled tiny cluster
 * (dp 2, tp 2, pp 2) with the default settings, and the plan must pass `validate` against that
 * model and cluster with no violation: the planner must never write a plan its own checker
 * refuses. The planner may refuse a model (e.g. a dimension tp does not divide), but never with
 * CZ_EINTERNAL.
 *
 * Models that expand to more than FZ_MODEL_FAST_PARAMS parameters, yet within the loader's
 * bound, are skipped (see fz_model_is_slow).
 */
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>

/* Larger models are only loaded: planning them would slow the fuzzer down to little gain. */
#define FZ_PLAN_MAX_PARAMS 64

static cz_cluster *cluster;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    cluster = fz_fixture_cluster("tests/data/cluster_tiny.json");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cz_model *model = NULL;
    cz_plan *plan = NULL;
    cz_error err;
    cz_error_clear(&err);
    json_t *doc = json_loadb((const char *)data, size, 0, NULL);
    int slow = fz_model_is_slow(doc);
    json_decref(doc);
    if (slow)
        return 0;
    const char *path = fz_input_path(0, data, size);
    int rc = cz_model_load(&model, path, &err);
    if (rc != CZ_OK) {
        if (model)
            fz_fail("cz_model_load failed (%d) but returned a model", rc);
        if (!err.message[0])
            fz_fail("cz_model_load failed (%d) without a message", rc);
        goto out;
    }
    if (model->nparams == 0 || model->nparams > FZ_PLAN_MAX_PARAMS)
        goto out;
    plan = fz_plan_validated(model, cluster, "model");
out:
    cz_plan_free(plan);
    cz_model_free(model);
    return 0;
}
