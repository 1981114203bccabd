/* The joint DP strategy (the default): cuts chosen with every rank's TP packing (dp_fill.c),
 * the packed one-group schedule kept where it is shorter than rollback's (microgroups.c), and
 * with expert groups the dense and expert cuts dealt over each other's makespans (planner.c).
 * The cases are the ones issue 43 measured: Qwen3-8B at DP8 x TP8 (alpha leaves three DP ranks
 * with nine fc1 matrices for eight TP slots) and Mixtral-8x7B on 256 GPUs with EP 8 (every
 * expert rank must hold exactly one fc1 and one fc2, so the dense matrices must be spread over
 * the GPUs, not packed onto the first ranks). */
#include "cz_types.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cz_error err;

static cz_plan *plan_with(const cz_model *m, const cz_cluster *c, cz_dp_strategy dp)
{
    cz_settings s;
    cz_settings_init(&s);
    s.dp = dp;
    cz_plan *p = NULL;
    ck_assert_msg(cz_plan_build(&p, m, c, &s, &err) == CZ_OK, "%s", err.message);
    return p;
}

/* The bundled model and cluster of these names (plans/models, plans/clusters). */
static void load_bundled(const char *model, const char *cluster, cz_model **m, cz_cluster **c)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_msg(src != NULL, "CZ_SOURCE_DIR is not set");
    char mp[1024], cp[1024];
    snprintf(mp, sizeof mp, "%s/plans/models/%s.json", src, model);
    snprintf(cp, sizeof cp, "%s/plans/clusters/%s.json", src, cluster);
    ck_assert_msg(cz_model_load(m, mp, &err) == CZ_OK, "%s", err.message);
    ck_assert_msg(cz_cluster_load(c, cp, &err) == CZ_OK, "%s", err.message);
}

static double over_bound(const cz_plan *p)
{
    return p->metrics.tp_makespan / p->metrics.lower_bound;
}

/* The plan passes every check canzona validate makes. */
static void check_valid(const cz_plan *p, const cz_model *m, const cz_cluster *c)
{
    json_t *v = NULL;
    ck_assert_int_gt(cz__plan_validate_json(p, m, c, &v, &err), 0);
    ck_assert_msg(json_array_size(v) == 0, "%zu violations, the first: %s", json_array_size(v),
                  json_array_size(v)
                      ? json_string_value(json_object_get(json_array_get(v, 0), "message"))
                      : "");
    json_decref(v);
}

START_TEST(dense_qwen3_8b_dp8_tp8)
{
    cz_model *m = NULL;
    cz_cluster *c = NULL;
    load_bundled("qwen3-8b", "h100-64-dp8-tp8", &m, &c);
    cz_settings s;
    cz_settings_init(&s);
    ck_assert_int_eq(s.dp, CZ_DP_JOINT); /* the default */
    cz_plan *joint = plan_with(m, c, CZ_DP_JOINT), *alpha = plan_with(m, c, CZ_DP_ALPHA);
    /* Measured: alpha 1.844, joint 1.118. No plan of these tasks gets below 1.098 of the
     * bound: under 20.06 ms a GPU holding an fc1 holds no other matrix (docs/PERF.md section
     * 15). */
    ck_assert_msg(over_bound(alpha) > 1.8, "alpha %.4f", over_bound(alpha));
    ck_assert_msg(over_bound(joint) < 1.12, "joint %.4f", over_bound(joint));
    check_valid(joint, m, c);
    /* Deterministic: the same inputs give the same owners. */
    cz_plan *again = plan_with(m, c, CZ_DP_JOINT);
    for (size_t i = 0; i < joint->nparams; i++)
        ck_assert_int_eq(joint->params[i].dp_owner, again->params[i].dp_owner);
    cz_plan_free(again);
    cz_plan_free(joint);
    cz_plan_free(alpha);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(experts_mixtral_256)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_msg(src != NULL, "CZ_SOURCE_DIR is not set");
    char hf[1024];
    snprintf(hf, sizeof hf, "%s/tests/data/hf/mixtral-8x7b.config.json", src);
    cz_import_hf_options o;
    cz_import_hf_options_init(&o);
    o.vocab_divisible_by = 1;
    char *text = NULL;
    ck_assert_msg(cz_model_import_hf(&text, hf, &o, &err) == CZ_OK, "%s", err.message);
    cz_model *m = NULL;
    cz_cluster *c = NULL;
    ck_assert_msg(cz_model_parse(&m, text, "mixtral-8x7b", &err) == CZ_OK, "%s", err.message);
    cz_free(text);
    const char *cluster =
        "{\"schema\": \"canzona.cluster/1\", \"name\": \"h100-256-tp1-ep8\", \"gpus\": 256, "
        "\"dp\": 256, \"tp\": 1, \"pp\": 1, \"ep\": 8, \"etp\": 1, \"gpus_per_node\": 8, "
        "\"device\": {\"name\": \"H100-SXM5-80GB\", \"matmul_tflops\": 600.0, "
        "\"mem_gbps\": 2800.0, \"memory_gib\": 80.0}, \"links\": {\"intra_node_gbps\": 360.0, "
        "\"inter_node_gbps\": 45.0, \"latency_us\": 5.0}}";
    ck_assert_msg(cz_cluster_parse(&c, cluster, "h100-256-tp1-ep8", &err) == CZ_OK, "%s",
                  err.message);
    cz_plan *joint = plan_with(m, c, CZ_DP_JOINT), *alpha = plan_with(m, c, CZ_DP_ALPHA);
    ck_assert(cz_plan_has_experts(joint));
    /* Measured: alpha 1.423 (two fc1 on one GPU of an EP rank), joint 1.101, which is
     * optimal: every GPU holds one fc1 and one fc2, and the GPU that gets the largest dense
     * matrix carries it on top (docs/PERF.md section 15). */
    ck_assert_msg(over_bound(alpha) > 1.4, "alpha %.4f", over_bound(alpha));
    ck_assert_msg(over_bound(joint) < 1.11, "joint %.4f", over_bound(joint));
    check_valid(joint, m, c);
    cz_plan_free(joint);
    cz_plan_free(alpha);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

/* The joint plan keeps alpha's cuts and schedule where alpha's plan has the shorter busiest GPU
 * (planner.c), so it is never worse than --dp alpha: here on the bundled dense models at
 * DP8 x TP8, where the two differ. */
START_TEST(never_worse_than_alpha)
{
    const char *models[] = {"qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-14b", "qwen3-32b"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        cz_model *m = NULL;
        cz_cluster *c = NULL;
        load_bundled(models[i], "h100-64-dp8-tp8", &m, &c);
        cz_plan *joint = plan_with(m, c, CZ_DP_JOINT), *alpha = plan_with(m, c, CZ_DP_ALPHA);
        ck_assert_msg(joint->metrics.tp_makespan <= alpha->metrics.tp_makespan * (1 + 1e-12),
                      "%s: joint %.6g > alpha %.6g", models[i], joint->metrics.tp_makespan,
                      alpha->metrics.tp_makespan);
        cz_plan_free(joint);
        cz_plan_free(alpha);
        cz_model_free(m);
        cz_cluster_free(c);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("joint");
    TCase *tc = tcase_create("joint"); /* CK_DEFAULT_TIMEOUT: 120 s x CZ_TEST_TIME_SCALE */
    tcase_add_test(tc, dense_qwen3_8b_dp8_tp8);
    tcase_add_test(tc, experts_mixtral_256);
    tcase_add_test(tc, never_worse_than_alpha);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
