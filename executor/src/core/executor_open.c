/* cz_executor_create: reads the plan (a plan file, or this rank's part of a split plan folder
 * written by canzona plan --split), then creates the executor over it. Kept apart from
 * executor.c so that programs building plans in memory do not need the plan reader. */
#include "canzona_exec.h"
#include "cz_format.h"
#include "executor_impl.h"

/* Called by create once the communicator is open, with this process's world rank. One parse
 * per file: the reader checks $.schema first, so that a plan of another version gets a message
 * about the version rather than about whichever field moved. */
static int load_plan(cz_plan **out, const char *path, int world_rank, cz_error *err)
{
    cz_plan *plan = NULL;
    int rc;
    if ((rc = cz__plan_path_is_folder(path) ? cz__plan_read_slice(&plan, path, world_rank, err)
                                            : cz_plan_read(&plan, path, err)) != CZ_OK)
        goto done;
    /* The executor has no model to check the plan against: the content hash recorded by
     * `canzona plan` stands for it (a slice's pieces are each checked against theirs). */
    if ((rc = cz__plan_check_content_hash(plan, path, err)) != CZ_OK)
        goto done;
    /* A plan whose schema is not the one its content needs (a version 1 plan relabelled
     * version 2, its hash recomputed) is refused as canzona validate refuses it. */
    rc = cz__plan_check_schema(plan, path, err);
done:
    if (rc != CZ_OK) {
        cz_plan_free(plan);
        plan = NULL;
    }
    *out = plan;
    return rc;
}

int cz_executor_create(cz_executor **out, const char *plan_path, const cz_exec_config *cfg,
                       cz_error *err)
{
    return cz__executor_create_impl(out, NULL, plan_path, load_plan, cfg, err);
}
