/* The fully sharded step on the single-process self plane (docs/EXECUTOR.md, "The fully
 * sharded step"): at DP 1 a rank's FSDP2 shard of every parameter is the whole of it, so a
 * fully sharded plan of test-small must update every parameter exactly as the ZeRO-1 plan of
 * the same job does (Muon on the same whole matrices, AdamW on the same elements), bit for bit,
 * gradient norm included, with clipping on. A shard bound with the wrong shape is refused with
 * the parameter named, and the step then refuses to run. The exchanges between ranks:
 * tests/mpi/bench.sh fsdp. */
#include "canzona.h" /* cz_plan_build: the test plans in-process */
#include "canzona_exec.h"
#include "cz_format.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { STEPS = 3 };

static cz_plan *make_plan(cz_layout layout)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    char model_path[512], cluster_path[256];
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(model_path, sizeof model_path, "%s/plans/models/test-small.json", src);
    snprintf(cluster_path, sizeof cluster_path, "%s/cz_exec_fsdp_step_%d.json", dir, (int)getpid());
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
    s.layout = layout;
    ck_assert_msg(cz_model_load(&model, model_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_cluster_load(&cluster, cluster_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_build(&plan, model, cluster, &s, &err) == 0, "%s", err.message);
    unlink(cluster_path);
    cz_model_free(model);
    cz_cluster_free(cluster);
    return plan;
}

static int64_t cols_of(const cz_plan_param *p)
{
    return p->def.ndim == 1 ? 1 : p->def.shape[1];
}

/* A value of parameter i's element k: the initial parameters (step -1), step s's gradients. */
static float val(int i, int64_t k, int s)
{
    return (s < 0 ? 0.05f : 1.0f) * sinf(0.37f * (float)k + 1.3f * (float)i + 0.71f * (float)s);
}

/* Runs STEPS steps of plan on whole tensors bound per parameter (the same values for every
 * plan, by name), clipped at max_norm; *out: every parameter's values after them, in the
 * plan's order; norms: each step's gradient norm. */
static float **run(const cz_plan *plan, float max_norm, double *norms)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cfg.max_grad_norm = max_norm;
    cz_error err;
    cz_executor *ex = NULL;
    ck_assert_msg(cz_executor_create_from_plan(&ex, plan, &cfg, &err) == CZ_OK, "%s", err.message);
    size_t n = plan->nparams;
    float **P = calloc(n, sizeof *P), **G = calloc(n, sizeof *G);
    ck_assert(P && G);
    for (size_t i = 0; i < n; i++) {
        const cz_plan_param *p = &plan->params[i];
        int64_t numel = p->def.shape[0] * cols_of(p);
        P[i] = malloc((size_t)numel * sizeof(float));
        G[i] = malloc((size_t)numel * sizeof(float));
        ck_assert(P[i] && G[i]);
        for (int64_t k = 0; k < numel; k++)
            P[i][k] = val((int)i, k, -1);
        ck_assert_msg(cz_executor_bind_param(ex, p->def.name, P[i], G[i], p->def.shape[0],
                                             cols_of(p), &err) == CZ_OK,
                      "%s", err.message);
    }
    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < n; i++)
            for (int64_t k = 0; k < plan->params[i].def.shape[0] * cols_of(&plan->params[i]); k++)
                G[i][k] = val((int)i, k, s);
        ck_assert_msg(cz_executor_step(ex, &err) == CZ_OK, "%s", err.message);
        norms[s] = cz_executor_grad_norm(ex);
    }
    cz_executor_free(ex);
    for (size_t i = 0; i < n; i++)
        free(G[i]);
    free(G);
    return P;
}

static void free_params(const cz_plan *plan, float **P)
{
    for (size_t i = 0; i < plan->nparams; i++)
        free(P[i]);
    free(P);
}

START_TEST(fsdp_at_dp1_is_zero1)
{
    cz_plan *fsdp = make_plan(CZ_LAYOUT_FSDP), *zero1 = make_plan(CZ_LAYOUT_UNIFIED);
    ck_assert(cz_plan_is_fsdp(fsdp) && !cz_plan_is_fsdp(zero1));
    ck_assert_uint_eq(fsdp->nparams, zero1->nparams);
    double nf[STEPS], nz[STEPS];
    /* Clipped: the gradients' norm is far above 1 here. */
    float **a = run(fsdp, 1.0f, nf), **b = run(zero1, 1.0f, nz);
    int moved = 0;
    for (size_t i = 0; i < fsdp->nparams; i++) {
        const cz_plan_param *p = &fsdp->params[i];
        ck_assert_str_eq(p->def.name, zero1->params[i].def.name);
        int64_t numel = p->def.shape[0] * cols_of(p);
        ck_assert_msg(memcmp(a[i], b[i], (size_t)numel * sizeof(float)) == 0,
                      "'%s' differs from the ZeRO-1 plan's result", p->def.name);
        moved += a[i][0] != val((int)i, 0, -1);
    }
    ck_assert_int_eq(moved, (int)fsdp->nparams); /* every parameter was updated */
    for (int s = 0; s < STEPS; s++) {
        ck_assert(nf[s] > 1.0);
        ck_assert_msg(nf[s] == nz[s], "step %d: norm %.17g vs %.17g", s, nf[s], nz[s]);
    }
    free_params(fsdp, a);
    free_params(zero1, b);
    cz_plan_free(fsdp);
    cz_plan_free(zero1);
}
END_TEST

START_TEST(wrong_shard_refused)
{
    cz_plan *plan = make_plan(CZ_LAYOUT_FSDP);
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cz_error err;
    cz_executor *ex = NULL;
    ck_assert_msg(cz_executor_create_from_plan(&ex, plan, &cfg, &err) == CZ_OK, "%s", err.message);
    static float buf[1 << 20], gbuf[1 << 20];
    const cz_plan_param *p = &plan->params[2];
    ck_assert_int_eq(p->def.kind, CZ_KIND_MATRIX);
    /* One row too many for DP rank 0 of 1, which holds all of the parameter's rows. */
    ck_assert_int_eq(cz_executor_bind_param(ex, p->def.name, buf, gbuf, p->def.shape[0] + 1,
                                            p->def.shape[1], &err),
                     CZ_EMISMATCH);
    ck_assert_msg(strstr(err.message, p->def.name) && strstr(err.message, "FSDP2"), "%s",
                  err.message);
    /* Every other parameter bound right: the step refuses, naming the one left unbound. */
    for (size_t i = 0; i < plan->nparams; i++)
        if (i != 2)
            ck_assert_msg(cz_executor_bind_param(ex, plan->params[i].def.name, buf, gbuf,
                                                 plan->params[i].def.shape[0],
                                                 cols_of(&plan->params[i]), &err) == CZ_OK,
                          "%s", err.message);
    ck_assert_int_eq(cz_executor_step(ex, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "is not bound") && strstr(err.message, p->def.name), "%s",
                  err.message);
    cz_executor_free(ex);
    /* Flat buffers of another size than the rank's shards: refused with what they must hold. */
    ex = NULL;
    ck_assert_msg(cz_executor_create_from_plan(&ex, plan, &cfg, &err) == CZ_OK, "%s", err.message);
    size_t numel = cz_executor_buffer_numel(ex);
    ck_assert_uint_gt(numel, 0);
    ck_assert_int_eq(cz_executor_bind_buffers(ex, buf, gbuf, numel - 1, &err), CZ_EMISMATCH);
    ck_assert_msg(strstr(err.message, "FSDP2 shards of its stage's parameters hold"), "%s",
                  err.message);
    cz_executor_free(ex);
    cz_plan_free(plan);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_fsdp_step");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, fsdp_at_dp1_is_zero1);
    tcase_add_test(tc, wrong_shard_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
