/* The executor on a plan made by the planner and read back from a file (dp = tp = 1, the
 * "self" communicator): real bucket layout with padding, every parameter bound by name, two
 * steps equal to the optimizer math on whole tensors. */
#include "canzona.h" /* cz_plan_build: the test plans in-process */
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "cz_format.h"
#include "exec_fixture.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char cluster_path[256], plan_path[256];

static void write_inputs(void)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(cluster_path, sizeof cluster_path, "%s/cz_exec_c1_%d.json", dir, (int)getpid());
    snprintf(plan_path, sizeof plan_path, "%s/cz_exec_p1_%d.json", dir, (int)getpid());
    FILE *f = fopen(cluster_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"schema\": \"canzona.cluster/1\", \"name\": \"one\", \"gpus\": 1, \"dp\": 1, "
          "\"tp\": 1, \"pp\": 1, \"gpus_per_node\": 1, \"device\": {\"name\": \"cpu\", "
          "\"matmul_tflops\": 0.5, \"mem_gbps\": 40, \"memory_gib\": 16}, \"links\": "
          "{\"intra_node_gbps\": 10, \"inter_node_gbps\": 10, \"latency_us\": 2}}",
          f);
    fclose(f);
}

START_TEST(planned_steps)
{
    char model_path[512];
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    snprintf(model_path, sizeof model_path, "%s/plans/models/test-small.json", src);
    write_inputs();
    cz_error err;
    cz_model *model = NULL;
    cz_cluster *cluster = NULL;
    cz_plan *built = NULL;
    cz_settings s;
    cz_settings_init(&s);
    ck_assert_msg(cz_model_load(&model, model_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_cluster_load(&cluster, cluster_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_build(&built, model, cluster, &s, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_write(built, plan_path, &err) == 0, "%s", err.message);

    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cz_executor *ex = NULL;
    ck_assert_msg(cz_executor_create(&ex, plan_path, &cfg, &err) == 0, "%s", err.message);
    const cz_plan *plan = ex->plan;
    ck_assert_uint_eq(plan->nparams, 20);
    size_t np = plan->nparams;
    float **p = calloc(np, sizeof *p), **g = calloc(np, sizeof *g),
          **want = calloc(np, sizeof *want);
    float **s1 = calloc(np, sizeof *s1), **s2 = calloc(np, sizeof *s2);
    for (size_t i = 0; i < np; i++) {
        const cz_plan_param *q = &plan->params[i];
        size_t n = (size_t)q->numel;
        p[i] = malloc(n * sizeof(float));
        g[i] = malloc(n * sizeof(float));
        want[i] = malloc(n * sizeof(float));
        s1[i] = calloc(n, sizeof(float));
        s2[i] = calloc(n, sizeof(float));
        for (size_t k = 0; k < n; k++)
            p[i][k] = want[i][k] = 0.05f * fx_val(i * 1000003 + k);
        ck_assert_msg(cz_executor_bind_param(ex, q->def.name, p[i], g[i], q->local_shape[0],
                                             q->def.ndim == 1 ? 1 : q->local_shape[1], &err) == 0,
                      "%s", err.message);
    }
    cz_compute cpu;
    cz__compute_open(&cpu, "cpu", NULL);
    for (int step = 1; step <= 2; step++) {
        for (size_t i = 0; i < np; i++) {
            const cz_plan_param *q = &plan->params[i];
            for (int64_t k = 0; k < q->numel; k++)
                g[i][k] = fx_val((uint64_t)step << 40 | (i * 1000003 + (uint64_t)k));
            if (q->def.kind == CZ_KIND_ELEMENTWISE) {
                cz_adamw_args aa;
                cz__adamw_args_make(&aa, cz__adamw_hparams_of(&ex->elem_opt), step);
                cz__cpu_adamw(want[i], g[i], s1[i], s2[i], q->numel, &aa);
            } else {
                float *in = malloc((size_t)q->numel * sizeof(float));
                float *u = malloc((size_t)q->numel * sizeof(float));
                const cz_muon_hparams *mh = cz__muon_hparams_of(&ex->matrix_opt);
                cz__cpu_momentum(g[i], s1[i], in, q->numel, mh->momentum, mh->nesterov);
                const cz_plan_param *ps[1] = {q};
                const float *ins[1] = {in};
                float *outs[1] = {u};
                ck_assert_int_eq(cz__muon_orthogonalize(&cpu, mh, ps, ins, outs, 1, NULL), 0);
                cz__cpu_apply_update(want[i], u, q->numel, mh->lr, mh->weight_decay);
                free(in);
                free(u);
            }
        }
        ck_assert_msg(cz_executor_step(ex, &err) == 0, "%s", err.message);
    }
    for (size_t i = 0; i < np; i++) {
        for (int64_t k = 0; k < plan->params[i].numel; k++)
            ck_assert_float_eq(p[i][k], want[i][k]);
        free(p[i]), free(g[i]), free(want[i]), free(s1[i]), free(s2[i]);
    }
    free(p), free(g), free(want), free(s1), free(s2);
    cz_executor_free(ex);
    cz_plan_free(built);
    cz_cluster_free(cluster);
    cz_model_free(model);
    unlink(cluster_path);
    unlink(plan_path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_planned");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, planned_steps);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
