/* The bucket-wise step (cz_executor_bucket_ready, step_finish, bucket_wait) on one process:
 * its bookkeeping, its results against cz_executor_step bit for bit (fp32, bf16, per-parameter
 * binding, clipping, any declaration order), its refusals, and early updates (the micro-groups
 * run inside bucket_ready, in readiness order, the same bits). */
#include "cz_exec_testing.h"
#include "canzona_exec.h"
#include "cz_format.h"
#include "exec_fixture.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>

static const fx_param PARAMS[] = {
    {"emb", 2, 8, 4, 0, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
    {"qkv", 2, 6, 4, 0, CZ_KIND_MATRIX, 0, 2, {2, 4}},
    {"proj", 2, 4, 6, 1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"norm", 1, 4, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
};
#define NP ((int)(sizeof PARAMS / sizeof PARAMS[0]))

static cz_exec_config self_cfg(void)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    return cfg;
}

/* fx_plan's one bucket cut into one bucket per parameter, in fill order (the last parameter,
 * filled first, in bucket 0: backward order). The flat layout is unchanged. */
static cz_plan *bucketed_plan(void)
{
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    if (!pl)
        return NULL;
    free(pl->buckets[0].ranges);
    free(pl->buckets);
    pl->nbuckets = (size_t)NP;
    pl->buckets = calloc((size_t)NP, sizeof *pl->buckets);
    for (int i = 0; i < NP; i++) {
        cz_plan_param *p = &pl->params[i];
        int b = NP - 1 - i;
        cz_plan_bucket *bk = &pl->buckets[b];
        bk->id = b;
        bk->offset = p->offset;
        bk->size = p->numel;
        bk->ranges = calloc(2, sizeof(int64_t));
        bk->ranges[1] = p->numel;
        p->bucket = b;
        p->offset = 0;
    }
    return pl;
}

/* The bucketed plan with one micro-group per matrix, in plan order qkv (bucket 2) then proj
 * (bucket 1): readiness order is the other one. */
static cz_plan *two_group_plan(void)
{
    cz_plan *pl = bucketed_plan();
    if (!pl)
        return NULL;
    cz_rank_schedule *rs = &pl->schedules[0];
    cz_plan_group *old = &rs->groups[0], *gs = calloc(2, sizeof *gs);
    ck_assert_int_eq(old->ntasks, 2);
    for (int g = 0; g < 2; g++) {
        gs[g].id = g;
        gs[g].nslots = 1;
        gs[g].ntasks = 1;
        gs[g].task_param = calloc(1, sizeof(int));
        gs[g].task_slot = calloc(1, sizeof(int));
        gs[g].load = calloc(1, sizeof(double));
        gs[g].task_param[0] = old->task_param[g];
    }
    free(old->task_param), free(old->task_slot), free(old->task_block), free(old->task_width);
    free(old->task_panels), free(old->task_cost), free(old->load);
    free(rs->groups);
    rs->groups = gs;
    rs->ngroups = 2;
    return pl;
}

static void fill_grads(float *G, size_t n, int s)
{
    for (size_t k = 0; k < n; k++)
        G[k] = fx_val(1000003 * (uint64_t)(s + 1) + k);
}

/* Whether two files hold the same bytes. */
static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    int ca = 0, cb = 0;
    while (same && ca == cb && ca != EOF) {
        ca = fgetc(fa);
        cb = fgetc(fb);
    }
    same = same && ca == cb;
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

/* One bucket-wise step, the buckets declared in `order`, waited for in forward order. */
static int ovl_step(cz_executor *ex, const int *order, cz_error *err)
{
    int rc;
    for (int k = 0; k < NP; k++)
        if ((rc = cz_executor_bucket_ready(ex, (size_t)order[k], err)) != CZ_OK)
            return rc;
    if ((rc = cz_executor_step_finish(ex, err)) != CZ_OK)
        return rc;
    for (int b = NP; b-- > 0;)
        if ((rc = cz_executor_bucket_wait(ex, (size_t)b, err)) != CZ_OK)
            return rc;
    return CZ_OK;
}

START_TEST(bookkeeping)
{
    cz_plan *pl = bucketed_plan();
    cz_exec_config cfg = self_cfg();
    cz_executor *ex = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), 0);
    ck_assert_uint_eq(cz_executor_bucket_count(ex), (size_t)NP);
    ck_assert_uint_eq(cz_executor_bucket_count(NULL), 0);
    for (int i = 0; i < NP; i++) {
        ck_assert_int_eq(cz_executor_param_bucket(ex, (size_t)i), NP - 1 - i);
        ck_assert_int_eq(cz_executor_bucket_held(ex, (size_t)i), 1);
    }
    ck_assert_int_eq(cz_executor_param_bucket(ex, (size_t)NP), -1);
    ck_assert_int_eq(cz_executor_bucket_held(ex, (size_t)NP), 0);
    ck_assert_int_eq(cz_executor_bucket_held(NULL, 0), 0);
    cz_executor_free(ex);
    cz_plan_free(pl);
}
END_TEST

/* fp32 flat, bf16 flat and fp32 per-parameter executors, each driven bucket-wise (declared in
 * a different order every step, clipping on), against plain steps: equal bits every step. */
START_TEST(same_bits_as_the_step)
{
    static const int orders[3][NP] = {{0, 1, 2, 3}, {3, 1, 0, 2}, {2, 3, 1, 0}};
    cz_plan *pl = bucketed_plan();
    cz_exec_config c32 = self_cfg(), c16 = self_cfg();
    c32.max_grad_norm = c16.max_grad_norm = 0.5f; /* below the norms: clipping is active */
    c16.dtype = CZ_DTYPE_BF16;
    enum { PLAIN, OVL, PLAIN16, OVL16, PLAINPP, OVLPP, NEX };
    cz_executor *ex[NEX] = {0};
    cz_error err;
    for (int e = 0; e < NEX; e++)
        ck_assert_int_eq(cz_executor_create_from_plan(
                             &ex[e], pl, (e == PLAIN16 || e == OVL16) ? &c16 : &c32, &err),
                         0);
    size_t n = cz_executor_buffer_numel(ex[PLAIN]);
    float *P[NEX], *G[NEX];
    for (int e = 0; e < NEX; e++) {
        P[e] = calloc(n, sizeof(float)); /* bf16 executors use the first half, as uint16_t */
        G[e] = calloc(n, sizeof(float));
        for (size_t k = 0; k < n; k++) {
            uint16_t v = cz__bf16_from_f32(0.5f * fx_val(k));
            if (e == PLAIN16 || e == OVL16)
                ((uint16_t *)P[e])[k] = v;
            else
                P[e][k] = cz__f32_from_bf16(v);
        }
    }
    ck_assert_int_eq(cz_executor_bind_buffers(ex[PLAIN], P[PLAIN], G[PLAIN], n, &err), 0);
    ck_assert_int_eq(cz_executor_bind_buffers(ex[OVL], P[OVL], G[OVL], n, &err), 0);
    ck_assert_int_eq(
        cz_executor_bind_typed(ex[PLAIN16], P[PLAIN16], G[PLAIN16], n, CZ_DTYPE_BF16, &err), 0);
    ck_assert_int_eq(cz_executor_bind_typed(ex[OVL16], P[OVL16], G[OVL16], n, CZ_DTYPE_BF16, &err),
                     0);
    for (int e = PLAINPP; e <= OVLPP; e++)
        for (int i = 0; i < NP; i++) {
            const cz_plan_param *p = &pl->params[i];
            int64_t off = pl->buckets[p->bucket].offset + p->offset;
            ck_assert_int_eq(cz_executor_bind_param(ex[e], p->def.name, P[e] + off, G[e] + off,
                                                    p->local_shape[0],
                                                    p->def.ndim == 1 ? 1 : p->local_shape[1], &err),
                             0);
        }
    for (int s = 0; s < 3; s++) {
        for (int e = 0; e < NEX; e++) {
            fill_grads(G[e], n, s);
            if (e == PLAIN16 || e == OVL16)
                for (size_t k = 0; k < n; k++)
                    ((uint16_t *)G[e])[k] = cz__bf16_from_f32(G[e][k]);
        }
        for (int e = 0; e < NEX; e += 2) {
            ck_assert_msg(cz_executor_step(ex[e], &err) == 0, "%s", err.message);
            ck_assert_msg(ovl_step(ex[e + 1], orders[s], &err) == 0, "%s", err.message);
            ck_assert_msg(memcmp(P[e], P[e + 1], n * sizeof(float)) == 0,
                          "executor %d: parameters differ after step %d", e + 1, s + 1);
            ck_assert(cz_executor_grad_norm(ex[e]) == cz_executor_grad_norm(ex[e + 1]));
            ck_assert_double_gt(cz_executor_grad_norm(ex[e]), 0.5);
        }
    }
    ck_assert(memcmp(P[PLAIN], P[PLAINPP], n * sizeof(float)) == 0);
    for (int e = 0; e < NEX; e++) {
        cz_executor_free(ex[e]);
        free(P[e]), free(G[e]);
    }
    cz_plan_free(pl);
}
END_TEST

/* Refusals: a bad index, a bucket declared twice, a step, a checkpoint or another finish while
 * a bucket-wise step is open, a bucket never declared (then the executor stays usable and
 * nothing changed); bucket_wait with nothing outstanding returns at once. */
START_TEST(refusals)
{
    static const int order[NP] = {0, 1, 2, 3};
    cz_plan *pl = bucketed_plan();
    cz_exec_config cfg = self_cfg();
    cz_executor *ex = NULL, *ref = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), 0);
    ck_assert_int_eq(cz_executor_create_from_plan(&ref, pl, &cfg, &err), 0);
    size_t n = cz_executor_buffer_numel(ex);
    float *P = calloc(n, sizeof(float)), *G = calloc(n, sizeof(float));
    float *Pr = calloc(n, sizeof(float)), *Gr = calloc(n, sizeof(float));
    float *P0 = calloc(n, sizeof(float));
    for (size_t k = 0; k < n; k++)
        P[k] = Pr[k] = P0[k] = 0.5f * fx_val(k);
    /* Unbound: the first call says so. */
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 0, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "no buffers bound"));
    ck_assert_int_eq(cz_executor_bind_buffers(ex, P, G, n, &err), 0);
    ck_assert_int_eq(cz_executor_bind_buffers(ref, Pr, Gr, n, &err), 0);
    fill_grads(G, n, 0);
    ck_assert_int_eq(cz_executor_bucket_ready(ex, (size_t)NP, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "bucket 4 does not exist (the plan has 4 buckets"));
    ck_assert_int_eq(cz_executor_bucket_wait(ex, (size_t)NP, &err), CZ_EINVALID);
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 2, &err), 0);
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 2, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "bucket 2 was already declared ready in step 1"));
    ck_assert_int_eq(cz_executor_step(ex, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "a bucket-wise step is in progress"));
    /* The checkpoint goes into a folder of this test's own. */
    char dir[] = "/tmp/cz_overlap_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/state.safetensors", dir);
    ck_assert_int_eq(cz_executor_save_state(ex, path, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "save_state: a bucket-wise step is in progress"));
    /* Nothing outstanding: the parameters are the job's already. */
    ck_assert_int_eq(cz_executor_bucket_wait(ex, 1, &err), 0);
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 0, &err), 0);
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 3, &err), 0);
    /* Bucket 1 never declared: refused, nothing changed. */
    ck_assert_int_eq(cz_executor_step_finish(ex, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "step 1: bucket 1 was not declared ready"));
    ck_assert_ptr_nonnull(strstr(err.message, "no parameter was changed"));
    ck_assert(memcmp(P, P0, n * sizeof(float)) == 0);
    /* The highest-numbered bucket never declared (the last one a check of the buckets up to
     * the count could miss): refused the same way. */
    for (int b = 0; b < NP - 1; b++)
        ck_assert_int_eq(cz_executor_bucket_ready(ex, (size_t)b, &err), 0);
    ck_assert_int_eq(cz_executor_step_finish(ex, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "step 1: bucket 3 was not declared ready"));
    ck_assert(memcmp(P, P0, n * sizeof(float)) == 0);
    /* A finish with no bucket declared at all: every bucket missing, bucket 0 named. */
    ck_assert_int_eq(cz_executor_step_finish(ex, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "step 1: bucket 0 was not declared ready"));
    /* A step cancelled after two buckets: nothing changed, and cancel without a step is a
     * no-op. */
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 3, &err), 0);
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 1, &err), 0);
    ck_assert_int_eq(cz_executor_step_cancel(ex, &err), 0);
    ck_assert_int_eq(cz_executor_step_cancel(ex, &err), 0);
    ck_assert(memcmp(P, P0, n * sizeof(float)) == 0);
    /* Then whole steps run, as the plain executor's (the failed ones counted no step). */
    for (int s = 0; s < 2; s++) {
        fill_grads(G, n, s);
        fill_grads(Gr, n, s);
        ck_assert_msg(ovl_step(ex, order, &err) == 0, "%s", err.message);
        ck_assert_int_eq(cz_executor_step(ref, &err), 0);
        ck_assert(memcmp(P, Pr, n * sizeof(float)) == 0);
    }
    cz_exec_timings t;
    cz_executor_timings(ex, &t);
    ck_assert_int_eq(t.steps, 2);
    /* All-gathers left outstanding are completed by the next plain step, and by save_state. */
    fill_grads(G, n, 2);
    fill_grads(Gr, n, 2);
    for (int k = 0; k < NP; k++)
        ck_assert_int_eq(cz_executor_bucket_ready(ex, (size_t)order[k], &err), 0);
    ck_assert_int_eq(cz_executor_step_finish(ex, &err), 0);
    ck_assert_int_eq(cz_executor_save_state(ex, path, &err), 0);
    ck_assert_int_eq(cz_executor_step(ref, &err), 0);
    ck_assert(memcmp(P, Pr, n * sizeof(float)) == 0);
    fill_grads(G, n, 3);
    fill_grads(Gr, n, 3);
    for (int k = 0; k < NP; k++)
        ck_assert_int_eq(cz_executor_bucket_ready(ex, (size_t)order[k], &err), 0);
    ck_assert_int_eq(cz_executor_step_finish(ex, &err), 0);
    ck_assert_int_eq(cz_executor_step(ex, &err), 0); /* completes the gathers, then steps */
    ck_assert_int_eq(cz_executor_step(ref, &err), 0);
    ck_assert_int_eq(cz_executor_step(ref, &err), 0);
    ck_assert(memcmp(P, Pr, n * sizeof(float)) == 0);
    /* Freed with a bucket-wise step's gathers outstanding: nothing leaks (ASan build). */
    for (int k = 0; k < NP; k++)
        ck_assert_int_eq(cz_executor_bucket_ready(ex, (size_t)order[k], &err), 0);
    ck_assert_int_eq(cz_executor_step_finish(ex, &err), 0);
    unlink(path);
    rmdir(dir);
    cz_executor_free(ex);
    cz_executor_free(ref);
    cz_plan_free(pl);
    free(P), free(G), free(Pr), free(Gr), free(P0);
}
END_TEST

/* Early updates: each group runs inside the bucket_ready that posts its last bucket (readiness
 * order: proj, then qkv), and each bucket's all-gather is posted once every group with a
 * parameter in it has run, whatever order the buckets are declared in; the parameters equal
 * the plain step's bit for bit, flat fp32 and bf16. */
START_TEST(early_updates_same_bits)
{
    static const int orders[3][NP] = {{0, 1, 2, 3}, {3, 1, 0, 2}, {2, 3, 1, 0}};
    /* After each declaration of orders[s]: the groups run so far. */
    static const int early[3][NP] = {{0, 1, 2, 2}, {0, 0, 1, 2}, {0, 0, 0, 2}};
    /* And the all-gathers posted (bucket b's once the buckets up to the highest of any group
     * with a parameter in b are: here b's own). */
    static const size_t gathers[3][NP] = {{1, 2, 3, 4}, {0, 0, 2, 4}, {0, 0, 0, 4}};
    cz_plan *pl = two_group_plan();
    cz_exec_config c32 = self_cfg(), c16 = self_cfg();
    c32.check_finite = c16.check_finite = 0;
    c16.dtype = CZ_DTYPE_BF16;
    enum { PLAIN, EARLY, PLAIN16, EARLY16, NEX };
    cz_executor *ex[NEX] = {0};
    cz_error err;
    for (int e = 0; e < NEX; e++) {
        ck_assert_int_eq(cz_executor_create_from_plan(&ex[e], pl, e >= PLAIN16 ? &c16 : &c32, &err),
                         0);
        if (e % 2)
            ck_assert_msg(cz_executor_set_early_updates(ex[e], 1, &err) == 0, "%s", err.message);
    }
    size_t n = cz_executor_buffer_numel(ex[PLAIN]);
    float *P[NEX], *G[NEX];
    for (int e = 0; e < NEX; e++) {
        P[e] = calloc(n, sizeof(float));
        G[e] = calloc(n, sizeof(float));
        for (size_t k = 0; k < n; k++) {
            uint16_t v = cz__bf16_from_f32(0.5f * fx_val(k));
            if (e >= PLAIN16)
                ((uint16_t *)P[e])[k] = v;
            else
                P[e][k] = cz__f32_from_bf16(v);
        }
        ck_assert_int_eq(cz_executor_bind_typed(ex[e], P[e], G[e], n,
                                                e >= PLAIN16 ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32, &err),
                         0);
    }
    for (int s = 0; s < 3; s++) {
        for (int e = 0; e < NEX; e++) {
            fill_grads(G[e], n, s);
            if (e >= PLAIN16)
                for (size_t k = 0; k < n; k++)
                    ((uint16_t *)G[e])[k] = cz__bf16_from_f32(G[e][k]);
        }
        for (int e = 0; e < NEX; e += 2) {
            ck_assert_msg(cz_executor_step(ex[e], &err) == 0, "%s", err.message);
            for (int k = 0; k < NP; k++) {
                ck_assert_msg(cz_executor_bucket_ready(ex[e + 1], (size_t)orders[s][k], &err) == 0,
                              "%s", err.message);
                ck_assert_int_eq(cz_executor_early_groups(ex[e + 1]), early[s][k]);
                ck_assert_uint_eq(cz__bucket_step_gathers_posted(ex[e + 1]), gathers[s][k]);
            }
            ck_assert_msg(cz_executor_step_finish(ex[e + 1], &err) == 0, "%s", err.message);
            for (int b = NP; b-- > 0;)
                ck_assert_int_eq(cz_executor_bucket_wait(ex[e + 1], (size_t)b, &err), 0);
            ck_assert_msg(memcmp(P[e], P[e + 1], n * sizeof(float)) == 0,
                          "executor %d: parameters differ after step %d", e + 1, s + 1);
            ck_assert(cz_executor_grad_norm(ex[e]) == cz_executor_grad_norm(ex[e + 1]));
            ck_assert_int_eq(cz_executor_early_groups(ex[e]), 0);
        }
    }
    /* The checkpoints of the two are the same bytes (the early executor's all-gathers are
     * completed by save_state). */
    char dir[] = "/tmp/cz_early_XXXXXX", pa[64], pb[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(pa, sizeof pa, "%s/plain.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/early.safetensors", dir);
    ck_assert_int_eq(cz_executor_save_state(ex[PLAIN], pa, &err), 0);
    ck_assert_msg(cz_executor_save_state(ex[EARLY], pb, &err) == 0, "%s", err.message);
    ck_assert(same_file(pa, pb));
    unlink(pa);
    unlink(pb);
    rmdir(dir);
    /* Off again: every group runs at step_finish, the same bits still. */
    ck_assert_int_eq(cz_executor_set_early_updates(ex[EARLY], 0, &err), 0);
    fill_grads(G[PLAIN], n, 3);
    fill_grads(G[EARLY], n, 3);
    ck_assert_int_eq(cz_executor_step(ex[PLAIN], &err), 0);
    ck_assert_int_eq(ovl_step(ex[EARLY], orders[0], &err), 0);
    ck_assert_int_eq(cz_executor_early_groups(ex[EARLY]), 0);
    ck_assert(memcmp(P[PLAIN], P[EARLY], n * sizeof(float)) == 0);
    for (int e = 0; e < NEX; e++) {
        cz_executor_free(ex[e]);
        free(P[e]), free(G[e]);
    }
    cz_plan_free(pl);
}
END_TEST

/* What an executor whose state moved in a step that did not complete refuses: save_state
 * (which would write a step count that matches none of its tensors: `path` is not created),
 * the plain step and the bucket-wise one, each saying to restore a checkpoint. */
static void expect_poisoned(cz_executor *ex, const char *path)
{
    cz_error err;
    ck_assert_int_eq(cz_executor_save_state(ex, path, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "save_state: the optimizer state matches no step") &&
                      strstr(err.message, "restore a checkpoint (cz_executor_load_state)"),
                  "%s", err.message);
    ck_assert_int_eq(access(path, F_OK), -1);
    ck_assert_int_eq(cz_executor_step(ex, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "step: the optimizer state matches no step"), "%s",
                  err.message);
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 0, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "bucket_ready: the optimizer state matches no step"), "%s",
                  err.message);
    ck_assert_int_eq(cz_executor_step_cancel(ex, &err), 0); /* nothing open */
}

/* Early updates' elementwise update of a bucket covers the whole of this rank's range: a
 * bucket whose range ends with a one-element AdamW parameter ("gain", filled last), updated
 * inside bucket_ready, equals the plain step bit for bit, its last element included. */
START_TEST(early_updates_whole_bucket)
{
    static const fx_param ps[] = {
        {"gain", 1, 1, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
        {"w", 2, 4, 4, 0, CZ_KIND_MATRIX, 0, 0, {0}},
    };
    cz_plan *pl = fx_plan(ps, 2, 1);
    ck_assert_int_eq(pl->params[0].offset, 16); /* the bucket's last element */
    ck_assert_int_eq(pl->buckets[0].size, 17);
    cz_exec_config cfg = self_cfg();
    cfg.check_finite = 0;
    cz_executor *plain = NULL, *early = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&plain, pl, &cfg, &err), 0);
    ck_assert_int_eq(cz_executor_create_from_plan(&early, pl, &cfg, &err), 0);
    ck_assert_msg(cz_executor_set_early_updates(early, 1, &err) == 0, "%s", err.message);
    size_t n = cz_executor_buffer_numel(plain);
    ck_assert_uint_eq(n, 17);
    float P[2][17], G[2][17], P0[17];
    for (size_t k = 0; k < n; k++)
        P[0][k] = P[1][k] = P0[k] = 0.5f * fx_val(k);
    ck_assert_int_eq(cz_executor_bind_buffers(plain, P[0], G[0], n, &err), 0);
    ck_assert_int_eq(cz_executor_bind_buffers(early, P[1], G[1], n, &err), 0);
    for (int s = 0; s < 2; s++) {
        fill_grads(G[0], n, s);
        fill_grads(G[1], n, s);
        ck_assert_int_eq(cz_executor_step(plain, &err), 0);
        ck_assert_msg(cz_executor_bucket_ready(early, 0, &err) == 0, "%s", err.message);
        /* Everything ran inside bucket_ready: the group, the elementwise pieces, the
         * all-gather. */
        ck_assert_int_eq(cz_executor_early_groups(early), 1);
        ck_assert_uint_eq(cz__bucket_step_gathers_posted(early), 1);
        ck_assert_msg(cz_executor_step_finish(early, &err) == 0, "%s", err.message);
        ck_assert_int_eq(cz_executor_bucket_wait(early, 0, &err), 0);
        ck_assert_msg(P[0][16] != P0[16], "the plain step left 'gain' unchanged");
        ck_assert_msg(memcmp(P[0], P[1], sizeof P[0]) == 0,
                      "step %d: the early step's bucket differs from the plain step's (last "
                      "element %a against %a)",
                      s + 1, (double)P[1][16], (double)P[0][16]);
    }
    cz_executor_free(plain);
    cz_executor_free(early);
    cz_plan_free(pl);
}
END_TEST

/* What early updates refuse: the NaN/Inf check, clipping (at the switch and after it), a
 * switch inside a step; and what a refused step says once they ran: the missing bucket, a
 * cancel, both naming what changed. */
START_TEST(early_updates_refusals)
{
    cz_plan *pl = two_group_plan();
    cz_exec_config cfg = self_cfg();
    cz_executor *ex = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), 0);
    ck_assert_int_eq(cz_executor_set_early_updates(NULL, 1, &err), CZ_EINVALID);
    ck_assert_int_eq(cz_executor_set_early_updates(ex, 1, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "the NaN/Inf check is on (check_finite = 1)"));
    cz_executor_free(ex);
    cfg.check_finite = 0;
    cfg.max_grad_norm = 1.0f;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), 0);
    ck_assert_int_eq(cz_executor_set_early_updates(ex, 1, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "clipping is on (max_grad_norm = 1)"));
    ck_assert_int_eq(cz_executor_set_max_grad_norm(ex, 0.0f, &err), 0);
    ck_assert_int_eq(cz_executor_set_early_updates(ex, 1, &err), 0);
    ck_assert_int_eq(cz_executor_set_max_grad_norm(ex, 1.0f, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "early updates are on"));
    size_t n = cz_executor_buffer_numel(ex);
    float *P = calloc(n, sizeof(float)), *G = calloc(n, sizeof(float));
    float *P0 = calloc(n, sizeof(float));
    for (size_t k = 0; k < n; k++)
        P[k] = P0[k] = 0.5f * fx_val(k);
    ck_assert_int_eq(cz_executor_bind_buffers(ex, P, G, n, &err), 0);
    /* The state before any step, to restore below. */
    char dir[] = "/tmp/cz_poison_XXXXXX", start[64], later[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(start, sizeof start, "%s/start.safetensors", dir);
    snprintf(later, sizeof later, "%s/later.safetensors", dir);
    ck_assert_int_eq(cz_executor_save_state(ex, start, &err), 0);
    fill_grads(G, n, 0);
    /* Buckets 0 and 1 declared: proj's group ran, inside the step no switch. */
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 0, &err), 0);
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 1, &err), 0);
    ck_assert_int_eq(cz_executor_early_groups(ex), 1);
    ck_assert_int_eq(cz_executor_set_early_updates(ex, 0, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "a bucket-wise step is in progress"));
    /* Buckets 0 and 1's all-gathers are posted; a wait inside the step leaves them to it. */
    ck_assert_uint_eq(cz__bucket_step_gathers_posted(ex), 2);
    ck_assert_int_eq(cz_executor_bucket_wait(ex, 0, &err), 0);
    ck_assert_int_eq(cz_executor_step_finish(ex, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "bucket 2 was not declared ready"));
    ck_assert_ptr_nonnull(strstr(err.message, "early updates had changed 1 micro-groups and the "
                                              "elementwise parameters of 2 buckets of this rank"));
    ck_assert(memcmp(P, P0, n * sizeof(float)) != 0);
    /* The state now matches no step: a save, a step and a bucket-wise step are refused, saying
     * so, until a checkpoint is loaded (issue 39). */
    expect_poisoned(ex, later);
    ck_assert_msg(cz_executor_load_state(ex, start, &err) == 0, "%s", err.message);
    memcpy(P, P0, n * sizeof(float)); /* the job restores its own parameters */
    /* A cancel after an early group says what moved, and poisons the state as well. */
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 0, &err), 0);
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 1, &err), 0);
    ck_assert_int_eq(cz_executor_step_cancel(ex, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "step 1 was cancelled, but early updates had changed "
                                              "1 micro-groups"));
    expect_poisoned(ex, later);
    ck_assert_msg(cz_executor_load_state(ex, start, &err) == 0, "%s", err.message);
    memcpy(P, P0, n * sizeof(float));
    /* Without any early group run, a cancel changes nothing and says nothing, and the state
     * stays usable: saved, then a whole step. */
    ck_assert_int_eq(cz_executor_bucket_ready(ex, 3, &err), 0);
    ck_assert_int_eq(cz_executor_step_cancel(ex, &err), 0);
    ck_assert_msg(cz_executor_save_state(ex, later, &err) == 0, "%s", err.message);
    ck_assert(same_file(start, later));
    ck_assert_int_eq(ovl_step(ex, (const int[]){0, 1, 2, 3}, &err), 0);
    ck_assert(memcmp(P, P0, n * sizeof(float)) != 0);
    unlink(start);
    unlink(later);
    rmdir(dir);
    cz_executor_free(ex);
    cz_plan_free(pl);
    free(P), free(G), free(P0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_overlap");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, bookkeeping);
    tcase_add_test(tc, same_bits_as_the_step);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, early_updates_same_bits);
    tcase_add_test(tc, early_updates_refusals);
    tcase_add_test(tc, early_updates_whole_bucket);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
