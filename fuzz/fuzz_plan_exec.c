/*
 * Harness: the executor's plan check against `validate`, fed by a structure-aware mutator.
 *
 * Property: a plan the executor accepts is one `validate` accepts, for every rule that does
 * not need the model: if cz__exec_plan_check (what cz_executor_create runs on a plan after
 * reading it) accepts a plan and validate, run against the bundled model and cluster the plan
 * was made from, reports a structural violation (overlapping parameters, ranges, atomicity,
 * bucket layout rules, schedule membership: FZ_STRUCTURAL below), the harness aborts and
 * libFuzzer keeps the plan. Violations that only a model or cluster can reveal (shapes, kinds,
 * blocks, tp_dim, costs, loads, metrics, the bucket layout the planner would make) are left
 * out: the executor has no model, and such edits are for the plan's content hash to catch.
 *
 * Inputs come from the structure-aware JSON mutator (fuzz_json_mutator.c), so that nearly
 * every edited plan passes the JSON parser and the reader's type checks and reaches the checks
 * that matter.
 *
 * Content hash: plans record a hash of their content that the executor checks on load. The
 * mutator recomputes it after most edits (rehash_plan() in fuzz_json_mutator.c), so edited
 * plans reach the structural checks instead of stopping at the hash.
 */
#include "canzona_exec.h"
#include "cz_format.h"
#include "cz_exec_testing.h"
#include "fuzz_util.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Validate's codes for rules that hold whatever the model: the executor must refuse a plan
 * that breaks any of them. */
static const char *const FZ_STRUCTURAL[] = {"param.id",
                                            "param.local_shape",
                                            "param.numel",
                                            "param.bucket",
                                            "param.offset",
                                            "param.dp_owner",
                                            "bucket.id",
                                            "bucket.size",
                                            "bucket.stage",
                                            "bucket.order",
                                            "bucket.offset",
                                            "bucket.ranges",
                                            "atomicity",
                                            "schedule.count",
                                            "schedule.rank",
                                            "schedule.group",
                                            "schedule.slots",
                                            "schedule.param",
                                            "schedule.elementwise",
                                            "schedule.duplicate",
                                            "schedule.foreign",
                                            "schedule.missing",
                                            NULL};

static int is_structural(const char *code)
{
    for (int i = 0; code && FZ_STRUCTURAL[i]; i++)
        if (strcmp(code, FZ_STRUCTURAL[i]) == 0)
            return 1;
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_fixtures_load();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cz_plan *plan = NULL;
    json_t *violations = NULL;
    cz_error err;
    cz_error_clear(&err);
    if (cz_plan_read(&plan, fz_input_path(0, data, size), &err) != CZ_OK)
        return 0;
    cz_error_clear(&err);
    int exec_rc = cz__exec_plan_check(plan, &err);
    if (exec_rc == CZ_EINTERNAL)
        fz_fail("cz__exec_plan_check reported an internal error: %s", err.message);
    const cz_model *model;
    const cz_cluster *cluster;
    fz_fixtures_find(plan, &model, &cluster);
    if (exec_rc != CZ_OK || !model || !cluster)
        goto out; /* refused by the executor, or not made from the fixtures */
    cz_error_clear(&err);
    if (cz__plan_validate_json(plan, model, cluster, &violations, &err) < 0)
        fz_fail("validate failed: %s", err.message);
    size_t i, nstruct = 0;
    const json_t *v;
    json_array_foreach(violations, i, v)
    {
        nstruct += is_structural(json_string_value(json_object_get(v, "code")));
    }
    if (nstruct > 0) {
        fprintf(stderr, "the executor accepts this plan, but validate reports:\n");
        fz_print_violations(violations, 20);
        fz_fail("the executor accepts a plan with %zu structural violation(s)", nstruct);
    }
out:
    json_decref(violations);
    cz_plan_free(plan);
    return 0;
}
