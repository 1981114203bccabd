/* Executor create/bind/step on hand-built plans with the one-process "self" communicator:
 * every refusal names what differs, and one step equals the optimizer math on whole tensors. */
#include "cz_exec_testing.h"
#include "canzona_exec.h"
#include "cz_format.h"
#include "exec_fixture.h"

#include <check.h>
#include <math.h>

static const fx_param PARAMS[] = {
    {"emb", 2, 8, 4, 0, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
    {"qkv", 2, 6, 4, 0, CZ_KIND_MATRIX, 0, 2, {2, 4}},
    {"proj", 2, 4, 6, 1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"norm", 1, 4, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
    {"extra", 2, 3, 5, -1, CZ_KIND_MATRIX, 0, 0, {0}},
};
#define NP ((int)(sizeof PARAMS / sizeof PARAMS[0]))

static cz_exec_config self_cfg(void)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    return cfg;
}

/* Creates over the plan and expects failure with code and a message fragment. */
static void expect_refusal(cz_plan *pl, const cz_exec_config *cfg, int code, const char *frag)
{
    cz_executor *ex = NULL;
    cz_error err;
    cz_error_clear(&err);
    int rc = cz_executor_create_from_plan(&ex, pl, cfg, &err);
    ck_assert_int_eq(rc, code);
    ck_assert_ptr_null(ex);
    ck_assert_msg(strstr(err.message, frag), "message '%s' lacks '%s'", err.message, frag);
}

START_TEST(refusals)
{
    cz_exec_config cfg = self_cfg();
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    /* A pipeline-parallel plan needs a schedule per (stage, DP rank), as validate checks,
     * before the executor indexes them (the pipeline itself runs under mpi: bench.sh pp). */
    pl->pp = 2;
    expect_refusal(pl, &cfg, CZ_EINVALID, "expected one per (stage, DP rank): 2");
    pl->pp = 0;
    expect_refusal(pl, &cfg, CZ_EINVALID, "pp = 0: each must be >= 1");
    pl->pp = 1;
    pl->settings.dp = CZ_DP_EVEN;
    expect_refusal(pl, &cfg, CZ_EUNSUPPORTED, "'even'");
    pl->settings.dp = CZ_DP_LAYERWISE;
    expect_refusal(pl, &cfg, CZ_EUNSUPPORTED, "'layerwise'");
    pl->settings.dp = CZ_DP_ALPHA;
    pl->params[2].dp_owner = -1;
    expect_refusal(pl, &cfg, CZ_EINVALID, "'proj': dp_owner -1 is outside [0, 1)");
    pl->params[2].dp_owner = 0;
    pl->buckets[0].ranges[1] -= 1;
    expect_refusal(pl, &cfg, CZ_EINVALID, "last range ends at 98 but the bucket's size is 99");
    pl->buckets[0].ranges[1] += 1;
    /* offset + numel overflows int64: refused, never wrapped into the range. */
    int64_t off2 = pl->params[2].offset;
    pl->params[2].offset = INT64_MAX - 4;
    expect_refusal(pl, &cfg, CZ_EINVALID,
                   "'proj': [9223372036854775803, 9223372036854775807) is not inside bucket 0");
    pl->params[2].offset = off2;
    /* Every range fits an MPI count but the third starts past INT_MAX: the all-gather's
     * displacement would overflow. */
    int64_t *rg = pl->buckets[0].ranges, size0 = pl->buckets[0].size;
    cz_rank_schedule *sc0 = pl->schedules;
    cz_rank_schedule three[3] = {sc0[0], {.dp_rank = 1}, {.dp_rank = 2}};
    pl->dp = 3;
    pl->nschedules = 3;
    pl->schedules = three;
    pl->buckets[0].ranges =
        (int64_t[6]){0, 99, 99, INT64_C(2147483700), INT64_C(2147483700), INT64_C(2147484000)};
    pl->buckets[0].size = INT64_C(2147484000);
    expect_refusal(pl, &cfg, CZ_EUNSUPPORTED, "ranges[2] starts at element 2147483700");
    pl->dp = 1;
    pl->nschedules = 1;
    pl->schedules = sc0;
    pl->buckets[0].ranges = rg;
    pl->buckets[0].size = size0;
    pl->params[1].local_shape[0] = 3;
    expect_refusal(pl, &cfg, CZ_EINVALID, "'qkv': local shape is 3x4, expected 6x4");
    pl->params[1].local_shape[0] = 6;
    /* Hand-built plans skip the reader: stages and block sizes are checked again. */
    pl->params[3].stage = 1;
    expect_refusal(pl, &cfg, CZ_EINVALID, "plan $.params[3].stage: 'norm': stage 1 is outside");
    pl->params[3].stage = 0;
    pl->params[1].def.block_sizes[0] = 0;
    expect_refusal(pl, &cfg, CZ_EINVALID, "'qkv': block 0 has size 0; sizes must be >= 1");
    pl->params[1].def.block_sizes[0] = 3;
    expect_refusal(pl, &cfg, CZ_EINVALID, "'qkv': block sizes add up to 7, not to shape[0] = 6");
    pl->params[1].def.block_sizes[0] = 2;
    pl->schedules[0].groups[0].ntasks = 1;
    expect_refusal(pl, &cfg, CZ_EINVALID,
                   "matrix parameter 'proj' ($.params[2]) of DP rank 0 is in no micro-group");
    pl->schedules[0].groups[0].ntasks = 3;
    pl->dp = 2;
    pl->nschedules = 1;
    free(pl->buckets[0].ranges);
    pl->buckets[0].ranges = calloc(4, sizeof(int64_t));
    pl->buckets[0].ranges[1] = pl->buckets[0].ranges[2] = pl->buckets[0].ranges[3] =
        pl->buckets[0].size;
    expect_refusal(pl, &cfg, CZ_EINVALID,
                   "plan $.buckets[0].size: size 99 is not a non-negative "
                   "multiple of dp = 2 [bucket.size] (and ");
    cz_plan_free(pl);

    pl = fx_plan(PARAMS, NP, 1);
    cfg.tp_rank = 1;
    expect_refusal(pl, &cfg, CZ_EMISMATCH, "out of range for the plan's dp = 1, tp = 1");
    cfg = self_cfg();
    cfg.version = 99;
    expect_refusal(pl, &cfg, CZ_EUNSUPPORTED, "cz_exec_config version 99");
    cfg = self_cfg();
    cfg.backend = "cuda";
    expect_refusal(pl, &cfg, CZ_EUNSUPPORTED, "compute backend 'cuda'");
    cfg = self_cfg();
    cfg.muon.ns_coeffs = "quartic";
    expect_refusal(pl, &cfg, CZ_EINVALID, "'quartic'");
    cz_plan_free(pl);

    /* A tp = 2 plan needs two ranks; the self communicator has one. */
    cfg = self_cfg();
    pl = fx_plan(PARAMS, NP, 2);
    expect_refusal(pl, &cfg, CZ_EMISMATCH, "has 1 ranks but the plan needs dp*tp*pp = 1*2*1 = 2");
    cz_plan_free(pl);
}
END_TEST

START_TEST(bind_refusals)
{
    cz_exec_config cfg = self_cfg();
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    cz_executor *ex = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), 0);
    size_t n = cz_executor_buffer_numel(ex);
    ck_assert_uint_eq(n, 32 + 24 + 24 + 4 + 15);
    float *P = calloc(n + 1, sizeof(float)), *G = calloc(n + 1, sizeof(float));
    ck_assert_int_eq(cz_executor_step(ex, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "no buffers bound"));
    ck_assert_int_eq(cz_executor_bind_buffers(ex, P, G, n + 1, &err), CZ_EMISMATCH);
    ck_assert_ptr_nonnull(strstr(err.message, "hold 100 elements but the plan's buckets need 99"));
    ck_assert_int_eq(cz_executor_bind_param(ex, "nope", P, G, 1, 1, &err), CZ_EMISMATCH);
    ck_assert_ptr_nonnull(strstr(err.message, "no parameter named 'nope'"));
    ck_assert_int_eq(cz_executor_bind_param(ex, "proj", P, G, 6, 4, &err), CZ_EMISMATCH);
    ck_assert_ptr_nonnull(strstr(err.message, "buffer shape [6, 4]"));
    ck_assert_ptr_nonnull(strstr(err.message, "is [4, 6]"));
    ck_assert_int_eq(cz_executor_bind_param(ex, "proj", P, G, 4, 6, &err), 0);
    ck_assert_int_eq(cz_executor_step(ex, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "'emb' is not bound"));
    ck_assert_int_eq(cz_executor_bind_buffers(ex, P, G, n, &err), CZ_EINVALID);
    cz_executor_free(ex);
    cz_plan_free(pl);
    free(P);
    free(G);
}
END_TEST

static void fill_grads(const cz_plan *pl, float *G, uint64_t salt)
{
    for (size_t i = 0; i < pl->nparams; i++) {
        const cz_plan_param *p = &pl->params[i];
        for (int64_t k = 0; k < p->numel; k++)
            G[p->offset + k] = fx_val(salt + i * 1000 + (uint64_t)k);
    }
}

static void fill(const cz_plan *pl, float *P, float *G, uint64_t salt)
{
    for (size_t i = 0; i < pl->nparams; i++) {
        const cz_plan_param *p = &pl->params[i];
        for (int64_t k = 0; k < p->numel; k++)
            P[p->offset + k] = 0.5f * fx_val(i * 1000 + (uint64_t)k);
    }
    fill_grads(pl, G, salt);
}

START_TEST(one_step_matches_math)
{
    cz_exec_config cfg = self_cfg();
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    cz_executor *ex = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), 0);
    size_t n = cz_executor_buffer_numel(ex);
    float *P = calloc(n, sizeof(float)), *G = calloc(n, sizeof(float));
    float *P0 = calloc(n, sizeof(float)), *G0 = calloc(n, sizeof(float));
    fill(pl, P, G, 7);
    memcpy(P0, P, n * sizeof(float));
    memcpy(G0, G, n * sizeof(float));
    ck_assert_int_eq(cz_executor_bind_buffers(ex, P, G, n, &err), 0);
    ck_assert_int_eq(cz_executor_step(ex, &err), 0);

    /* Reference: AdamW (t = 1) on elementwise; Muon on matrices from a zero momentum buffer
     * (Nesterov is on by default: input = g + mu*g). */
    cz_compute cpu;
    cz__compute_open(&cpu, "cpu", NULL);
    cz_adamw_hparams ah;
    cz__adamw_hparams_from_config(&ah, &cfg);
    cz_muon_hparams mh;
    ck_assert_int_eq(cz__muon_hparams_from_config(&mh, &cfg, NULL), 0);
    for (int i = 0; i < NP; i++) {
        const cz_plan_param *p = &pl->params[i];
        float *want = malloc((size_t)p->numel * sizeof(float));
        memcpy(want, P0 + p->offset, (size_t)p->numel * sizeof(float));
        if (p->def.kind == CZ_KIND_ELEMENTWISE) {
            float *m = calloc((size_t)p->numel, sizeof(float));
            float *v = calloc((size_t)p->numel, sizeof(float));
            cz_adamw_args aa;
            cz__adamw_args_make(&aa, &ah, 1);
            cz__cpu_adamw(want, G0 + p->offset, m, v, p->numel, &aa);
            free(m);
            free(v);
        } else {
            float *u = malloc((size_t)p->numel * sizeof(float));
            float *buf = calloc((size_t)p->numel, sizeof(float));
            float *gin = malloc((size_t)p->numel * sizeof(float));
            ck_assert(mh.nesterov);
            cz__cpu_momentum(G0 + p->offset, buf, gin, p->numel, mh.momentum, mh.nesterov);
            const cz_plan_param *ps[1] = {p};
            const float *in[1] = {gin};
            float *o[1] = {u};
            ck_assert_int_eq(cz__muon_orthogonalize(&cpu, &mh, ps, in, o, 1, NULL), 0);
            cz__cpu_apply_update(want, u, p->numel, mh.lr, mh.weight_decay);
            free(u);
            free(buf);
            free(gin);
        }
        for (int64_t k = 0; k < p->numel; k++)
            ck_assert_float_eq(P[p->offset + k], want[k]);
        /* The step changed the parameter. */
        ck_assert(fabsf(P[p->offset] - P0[p->offset]) > 1e-6f);
        free(want);
    }
    cz_exec_timings t;
    cz_executor_timings(ex, &t);
    ck_assert_int_eq(t.steps, 1);
    ck_assert(t.total >= t.matrix);
    cz_executor_free(ex);
    cz_plan_free(pl);
    free(P), free(G), free(P0), free(G0);
}
END_TEST

START_TEST(per_param_binding_equals_flat)
{
    cz_exec_config cfg = self_cfg();
    cfg.muon.nesterov = 1;
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    cz_executor *a = NULL, *b = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&a, pl, &cfg, &err), 0);
    ck_assert_int_eq(cz_executor_create_from_plan(&b, pl, &cfg, &err), 0);
    size_t n = cz_executor_buffer_numel(a);
    float *P = calloc(n, sizeof(float)), *G = calloc(n, sizeof(float));
    float *sp[NP], *sg[NP];
    fill(pl, P, G, 11);
    ck_assert_int_eq(cz_executor_bind_buffers(a, P, G, n, &err), 0);
    for (int i = 0; i < NP; i++) {
        const cz_plan_param *p = &pl->params[i];
        sp[i] = malloc((size_t)p->numel * sizeof(float));
        sg[i] = malloc((size_t)p->numel * sizeof(float));
        memcpy(sp[i], P + p->offset, (size_t)p->numel * sizeof(float));
        ck_assert_int_eq(cz_executor_bind_param(b, p->def.name, sp[i], sg[i], p->local_shape[0],
                                                p->def.ndim == 1 ? 1 : p->local_shape[1], &err),
                         0);
    }
    for (int step = 0; step < 3; step++) {
        fill_grads(pl, G, 100 + (uint64_t)step);
        for (int i = 0; i < NP; i++)
            memcpy(sg[i], G + pl->params[i].offset, (size_t)pl->params[i].numel * sizeof(float));
        ck_assert_int_eq(cz_executor_step(a, &err), 0);
        ck_assert_int_eq(cz_executor_step(b, &err), 0);
    }
    for (int i = 0; i < NP; i++) {
        for (int64_t k = 0; k < pl->params[i].numel; k++)
            ck_assert_float_eq(sp[i][k], P[pl->params[i].offset + k]);
        free(sp[i]);
        free(sg[i]);
    }
    cz_executor_free(a);
    cz_executor_free(b);
    cz_plan_free(pl);
    free(P), free(G);
}
END_TEST

START_TEST(nan_gradient_refused)
{
    cz_exec_config cfg = self_cfg();
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    cz_executor *ex = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), 0);
    size_t n = cz_executor_buffer_numel(ex);
    float *P = calloc(n, sizeof(float)), *G = calloc(n, sizeof(float));
    fill(pl, P, G, 3);
    G[pl->params[2].offset + 5] = NAN;
    G[pl->params[4].offset] = INFINITY;
    float before = P[pl->params[0].offset];
    ck_assert_int_eq(cz_executor_bind_buffers(ex, P, G, n, &err), 0);
    ck_assert_int_eq(cz_executor_step(ex, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "gradient of 'proj' holds NaN or Inf"));
    ck_assert_float_eq(P[pl->params[0].offset], before);
    cz_executor_free(ex);
    cz_plan_free(pl);
    free(P), free(G);
}
END_TEST

/* Steps after the first allocate nothing: every allocation of the executor (host tables,
 * backend memory, communication requests) goes through the counting allocator. */
START_TEST(steps_allocate_nothing)
{
    cz_exec_config cfg = self_cfg();
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    cz_executor *flat = NULL, *pp = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&flat, pl, &cfg, &err), 0);
    ck_assert_int_eq(cz_executor_create_from_plan(&pp, pl, &cfg, &err), 0);
    size_t n = cz_executor_buffer_numel(flat);
    float *P = calloc(n, sizeof(float)), *G = calloc(n, sizeof(float));
    float *P2 = calloc(n, sizeof(float)), *G2 = calloc(n, sizeof(float));
    fill(pl, P, G, 5);
    ck_assert_int_eq(cz_executor_bind_buffers(flat, P, G, n, &err), 0);
    for (int i = 0; i < NP; i++) {
        const cz_plan_param *p = &pl->params[i];
        ck_assert_int_eq(cz_executor_bind_param(pp, p->def.name, P2 + p->offset, G2 + p->offset,
                                                p->local_shape[0],
                                                p->def.ndim == 1 ? 1 : p->local_shape[1], &err),
                         0);
    }
    ck_assert_int_eq(cz_executor_step(flat, &err), 0);
    ck_assert_int_eq(cz_executor_step(pp, &err), 0);
    uint64_t before = cz__exec_alloc_count();
    ck_assert_uint_gt(before, 0);
    for (int s = 0; s < 3; s++) {
        fill_grads(pl, G, 20 + (uint64_t)s);
        fill_grads(pl, G2, 20 + (uint64_t)s);
        ck_assert_int_eq(cz_executor_step(flat, &err), 0);
        ck_assert_int_eq(cz_executor_step(pp, &err), 0);
    }
    ck_assert_uint_eq(cz__exec_alloc_count(), before);
    cz_executor_free(flat);
    cz_executor_free(pp);
    cz_plan_free(pl);
    free(P), free(G), free(P2), free(G2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_executor");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, bind_refusals);
    tcase_add_test(tc, one_step_matches_math);
    tcase_add_test(tc, per_param_binding_equals_flat);
    tcase_add_test(tc, nan_gradient_refused);
    tcase_add_test(tc, steps_allocate_nothing);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
