/*
 * Harness: the cluster loader (cz_cluster_load).
 *
 * Any input must load or be refused with a message, never crash, leak or overflow. A cluster
 * that loads with at most FZ_PLAN_MAX_GPUS GPUs is then used to plan the bundled tiny model
 * with the default settings; the plan must validate against that model and cluster with no
 * violation, and simulating it on the cluster must succeed.
 */
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>

#define FZ_PLAN_MAX_GPUS 64

static cz_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    model = fz_fixture_model("tests/data/model_tiny.json");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cz_cluster *cluster = NULL;
    cz_plan *plan = NULL;
    cz_sim_result *sim = NULL;
    cz_error err;
    cz_error_clear(&err);
    const char *path = fz_input_path(0, data, size);
    int rc = cz_cluster_load(&cluster, path, &err);
    if (rc != CZ_OK) {
        if (cluster)
            fz_fail("cz_cluster_load failed (%d) but returned a cluster", rc);
        if (!err.message[0])
            fz_fail("cz_cluster_load failed (%d) without a message", rc);
        goto out;
    }
    if (cluster->gpus > FZ_PLAN_MAX_GPUS)
        goto out;
    plan = fz_plan_validated(model, cluster, "cluster");
    if (!plan)
        goto out;
    rc = cz_plan_simulate(&sim, plan, cluster, NULL, &err);
    if (rc != CZ_OK)
        fz_fail("simulating a fresh plan on its own cluster failed: %s", err.message);
out:
    cz_sim_result_free(sim);
    cz_plan_free(plan);
    cz_cluster_free(cluster);
    return 0;
}
