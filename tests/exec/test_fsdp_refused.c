/* What the executor still refuses of a fully sharded plan (settings.layout fsdp,
 * canzona.plan/4), each with a message that says what to change (docs/EXECUTOR.md, "The fully
 * sharded step"): an optimizer other than Muon or SOAP, NorMuon, and on an executor that
 * runs such a plan the bucket-wise step, early updates and QK-clip. (The callbacks plane runs
 * it: test_callbacks.c, case fsdp.) (Its checkpoints: tests/mpi/checkpoint.sh fsdp.) The step
 * itself: test_fsdp_step.c and tests/mpi/bench.sh fsdp. */
#include "canzona.h" /* cz_plan_build: the test plans in-process */
#include "canzona_exec.h"
#include "cz_format.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fully sharded plan of test-small for a one-stage cluster of dp x tp GPUs (optimizer opt),
 * written to a file (*path, for cz_executor_create) and kept in memory (returned). */
static cz_plan *fsdp_plan(int dp, int tp, cz_optimizer opt, char *path, size_t cap)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    char model_path[512], cluster_path[256];
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(model_path, sizeof model_path, "%s/plans/models/test-small.json", src);
    snprintf(cluster_path, sizeof cluster_path, "%s/cz_exec_fsdp_c_%d.json", dir, (int)getpid());
    snprintf(path, cap, "%s/cz_exec_fsdp_p_%d_%d_%d_%d.json", dir, (int)getpid(), dp, tp, (int)opt);
    FILE *f = fopen(cluster_path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "{\"schema\": \"canzona.cluster/1\", \"name\": \"c\", \"gpus\": %d, \"dp\": %d, "
            "\"tp\": %d, \"pp\": 1, \"gpus_per_node\": %d, \"device\": {\"name\": \"cpu\", "
            "\"matmul_tflops\": 0.5, \"mem_gbps\": 40, \"memory_gib\": 16}, \"links\": "
            "{\"intra_node_gbps\": 10, \"inter_node_gbps\": 10, \"latency_us\": 2}}",
            dp * tp, dp, tp, dp * tp);
    fclose(f);
    cz_error err;
    cz_model *model = NULL;
    cz_cluster *cluster = NULL;
    cz_plan *plan = NULL;
    cz_settings s;
    cz_settings_init(&s);
    s.layout = CZ_LAYOUT_FSDP;
    s.optimizer = opt;
    ck_assert_msg(cz_model_load(&model, model_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_cluster_load(&cluster, cluster_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_build(&plan, model, cluster, &s, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_write(plan, path, &err) == 0, "%s", err.message);
    unlink(cluster_path);
    cz_model_free(model);
    cz_cluster_free(cluster);
    return plan;
}

/* create (from the file and from the plan in memory) fails with code and message. */
static void refused(const cz_plan *plan, const char *path, const cz_exec_config *cfg, int code,
                    const char *message)
{
    cz_error err;
    cz_executor *ex = (cz_executor *)cfg; /* must be reset to NULL on failure */
    ck_assert_int_eq(cz_executor_create(&ex, path, cfg, &err), code);
    ck_assert_ptr_null(ex);
    ck_assert_msg(strstr(err.message, message), "%s", err.message);
    ex = (cz_executor *)cfg;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, plan, cfg, &err), code);
    ck_assert_ptr_null(ex);
    ck_assert_msg(strstr(err.message, message), "%s", err.message);
}

START_TEST(tp_optimizer_and_normuon_refused)
{
    char path[512];
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    /* A TP 2 plan (2-D shards) is no longer refused for its TP: one process gets as far as
     * the grid, which needs two. */
    cz_plan *plan = fsdp_plan(1, 2, CZ_OPTIM_MUON, path, sizeof path);
    refused(plan, path, &cfg, CZ_EMISMATCH,
            "the world communicator has 1 ranks but the plan needs dp*tp*pp = 1*2*1 = 2");
    cz_plan_free(plan);
    unlink(path);
    plan = fsdp_plan(1, 1, CZ_OPTIM_SHAMPOO, path, sizeof path);
    refused(plan, path, &cfg, CZ_EUNSUPPORTED,
            "plan layout fsdp with optimizer 'shampoo': the fully sharded step runs Muon or SOAP "
            "(+ AdamW) only");
    cz_plan_free(plan);
    unlink(path);
    plan = fsdp_plan(1, 1, CZ_OPTIM_MUON, path, sizeof path);
    cfg.normuon.mode = CZ_NORMUON_ROW;
    refused(plan, path, &cfg, CZ_EUNSUPPORTED, "plan layout fsdp with normuon.mode = ");
    cz_plan_free(plan);
    unlink(path);
}
END_TEST

START_TEST(bucket_step_and_qk_clip_refused)
{
    char path[512];
    cz_plan *plan = fsdp_plan(1, 1, CZ_OPTIM_MUON, path, sizeof path);
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cz_error err;
    cz_executor *ex = NULL;
    ck_assert_msg(cz_executor_create(&ex, path, &cfg, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(cz_executor_step_finish(ex, &err), CZ_EUNSUPPORTED);
    ck_assert_msg(strstr(err.message, "step_finish: the plan's layout is fsdp, which has no "
                                      "buckets"),
                  "%s", err.message);
    ck_assert_int_eq(cz_executor_set_early_updates(ex, 1, &err), CZ_EUNSUPPORTED);
    ck_assert_msg(strstr(err.message, "set_early_updates: the plan's layout is fsdp"), "%s",
                  err.message);
    cz_qk_clip_spec spec = {0};
    ck_assert_int_eq(cz_executor_set_qk_clip(ex, &spec, &err), CZ_EUNSUPPORTED);
    ck_assert_msg(strstr(err.message, "QK-clip is not implemented for a fully sharded (fsdp)"),
                  "%s", err.message);
    cz_executor_free(ex);
    cz_plan_free(plan);
    unlink(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_fsdp_refused");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, tp_optimizer_and_normuon_refused);
    tcase_add_test(tc, bucket_step_and_qk_clip_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
