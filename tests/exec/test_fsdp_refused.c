/* cz_executor_create refuses a fully sharded plan (settings.layout fsdp, canzona.plan/4): the
 * planner makes, validates and simulates such plans, but this executor runs ZeRO-1 plans only,
 * and says so before it touches buckets such a plan has not. */
#include "canzona.h" /* cz_plan_build: the test plans in-process */
#include "canzona_exec.h"
#include "cz_format.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(fsdp_plan_refused)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    char model_path[512], cluster_path[256], plan_path[256];
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(model_path, sizeof model_path, "%s/plans/models/test-small.json", src);
    snprintf(cluster_path, sizeof cluster_path, "%s/cz_exec_fsdp_c_%d.json", dir, (int)getpid());
    snprintf(plan_path, sizeof plan_path, "%s/cz_exec_fsdp_p_%d.json", dir, (int)getpid());
    FILE *f = fopen(cluster_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"schema\": \"canzona.cluster/1\", \"name\": \"one\", \"gpus\": 1, \"dp\": 1, "
          "\"tp\": 1, \"pp\": 1, \"gpus_per_node\": 1, \"device\": {\"name\": \"cpu\", "
          "\"matmul_tflops\": 0.5, \"mem_gbps\": 40, \"memory_gib\": 16}, \"links\": "
          "{\"intra_node_gbps\": 10, \"inter_node_gbps\": 10, \"latency_us\": 2}}",
          f);
    fclose(f);
    cz_error err;
    cz_model *model = NULL;
    cz_cluster *cluster = NULL;
    cz_plan *plan = NULL;
    cz_settings s;
    cz_settings_init(&s);
    s.layout = CZ_LAYOUT_FSDP;
    ck_assert_msg(cz_model_load(&model, model_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_cluster_load(&cluster, cluster_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_build(&plan, model, cluster, &s, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_write(plan, plan_path, &err) == 0, "%s", err.message);

    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cz_executor *ex = (cz_executor *)&cfg; /* must be reset to NULL on failure */
    ck_assert_int_eq(cz_executor_create(&ex, plan_path, &cfg, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_null(ex);
    ck_assert_msg(strstr(err.message, "plan layout fsdp: this executor runs ZeRO-1 plans only"),
                  "%s", err.message);
    /* The plan in memory is refused the same way. */
    ex = (cz_executor *)&cfg;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, plan, &cfg, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_null(ex);
    ck_assert_ptr_nonnull(strstr(err.message, "plan layout fsdp"));
    unlink(plan_path);
    unlink(cluster_path);
    cz_plan_free(plan);
    cz_model_free(model);
    cz_cluster_free(cluster);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_fsdp_refused");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, fsdp_plan_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
