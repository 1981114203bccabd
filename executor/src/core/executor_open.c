/* cz_executor_create: reads the plan file, then creates the executor over it. Kept apart from
 * executor.c so that programs building plans in memory do not need the plan reader. */
#include "canzona_exec.h"
#include "cz_format.h"
#include "executor_impl.h"

#include <jansson.h>
#include <string.h>

/* Checks the file's "schema" first so a plan from another version gets a message about the
 * version rather than about whichever field moved. */
static int check_schema(const char *path, cz_error *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return cz__error_set(err, je.line > 0 ? CZ_EPARSE : CZ_EIO, "%s:%d:%d: %s", path, je.line,
                             je.column, je.text);
    int rc = CZ_OK;
    const char *schema = json_string_value(json_object_get(root, "schema"));
    if (!schema)
        rc = cz__error_set(err, CZ_EINVALID, "%s: $.schema: missing; expected \"%s\"", path,
                           CZ_PLAN_SCHEMA);
    else if (strcmp(schema, CZ_PLAN_SCHEMA) != 0 && strcmp(schema, CZ_PLAN_SCHEMA_SPLIT) != 0 &&
             strcmp(schema, CZ_PLAN_SCHEMA_EXPERT) != 0)
        rc = cz__error_set(err, CZ_EUNSUPPORTED,
                           "%s: $.schema is \"%s\"; this executor runs \"%s\", \"%s\" and "
                           "\"%s\" plans",
                           path, schema, CZ_PLAN_SCHEMA, CZ_PLAN_SCHEMA_SPLIT,
                           CZ_PLAN_SCHEMA_EXPERT);
    json_decref(root);
    return rc;
}

int cz_executor_create(cz_executor **out, const char *plan_path, const cz_exec_config *cfg,
                       cz_error *err)
{
    cz_plan *plan = NULL;
    int rc;
    if (!plan_path) {
        rc = cz__error_set(err, CZ_EINVALID, "no plan path given");
        goto done;
    }
    if ((rc = check_schema(plan_path, err)) != CZ_OK ||
        (rc = cz_plan_read(&plan, plan_path, err)) != CZ_OK)
        goto done;
    /* The executor has no model to check the plan against: the content hash recorded by
     * `canzona plan` stands for it. */
    if ((rc = cz__plan_check_content_hash(plan, plan_path, err)) != CZ_OK)
        goto done;
    /* A plan whose schema is not the one its content needs (a version 1 plan relabelled
     * version 2, its hash recomputed) is refused as canzona validate refuses it. */
    rc = cz__plan_check_schema(plan, plan_path, err);
done:
    if (rc != CZ_OK) {
        cz_plan_free(plan);
        plan = NULL;
    }
    /* A rank whose plan did not load goes on into create all the same, with its code: create
     * is collective, and the ranks agree there on whether every one of them succeeded, so a
     * rank that returned here would leave the others waiting in that agreement. */
    return cz__executor_create_impl(out, plan, plan, cfg, rc, err);
}
