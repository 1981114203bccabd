/*
 * Harness: the calibration reader (cz__calibration_parse) and what a calibration becomes.
 *
 * Any input must be read or refused with a message, never crash, leak or overflow. A
 * calibration that reads is applied to the fixture cluster (it may still be refused: a GEMM
 * table that fits no rate); one that applies must give a device model of finite, non-negative
 * costs, and the fixture model planned on that cluster must validate with no violation (the
 * plan records the calibration; validate recomputes every cost with it) and simulate.
 */
#include "fuzz_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static cz_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    model = fz_fixture_model("tests/data/model_tiny.json");
    return 0;
}

static int finite_costs(const cz_device_costs *k)
{
    double v[] = {k->gemm_tflops[0], k->gemm_tflops[1], k->gemm_call_s[0], k->gemm_call_s[1],
                  k->launch_s,       k->nccl_call_s,    k->torch_op_s};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (!isfinite(v[i]) || v[i] < 0)
            return 0;
    return k->gemm_tflops[0] > 0 && k->gemm_tflops[1] > 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cz_calibration *cal = NULL;
    cz_cluster *cluster = NULL;
    cz_plan *plan = NULL;
    cz_sim_result *sim = NULL;
    cz_error err;
    cz_error_clear(&err);
    int rc = cz__calibration_parse(&cal, (const char *)data, size, "calibration.json", &err);
    if (rc != CZ_OK) {
        if (cal)
            fz_fail("cz__calibration_parse failed (%d) but returned a calibration", rc);
        if (!err.message[0])
            fz_fail("cz__calibration_parse failed (%d) without a message", rc);
        return 0;
    }
    cluster = fz_fixture_cluster("plans/clusters/cpu-4-dp2-tp2.json");
    rc = cz__cluster_apply_calibration(cluster, cal, &err); /* takes cal */
    if (rc != CZ_OK) {
        if (!err.message[0])
            fz_fail("applying a calibration failed (%d) without a message", rc);
        goto out;
    }
    if (!finite_costs(&cluster->device.costs))
        fz_fail("a calibration that applies gave a device model of non-finite costs");
    plan = fz_plan_validated(model, cluster, "calibration");
    if (!plan)
        goto out;
    rc = cz_plan_simulate(&sim, plan, cluster, NULL, &err);
    if (rc != CZ_OK)
        fz_fail("simulating a fresh plan on its calibrated cluster failed: %s", err.message);
    if (!isfinite(sim->step_s) || sim->step_s < 0)
        fz_fail("the simulated step of a calibrated plan is %g", sim->step_s);
out:
    cz_sim_result_free(sim);
    cz_plan_free(plan);
    cz_cluster_free(cluster);
    return 0;
}
