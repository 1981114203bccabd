/* The executor's memory model (memory_model.c) against what the executor records
 * (cz_executor_memory_usage), kind by kind and to the byte, on the cpu backend (the same sizes,
 * in host memory): test-small on cpu-1, cpu-4-dp2-tp2 (also under synchronous compute),
 * cpu-4-dp4-tp1 and cpu-4-dp1-tp4 (also with one micro-group, whose pipeline has one set of
 * exchange buffers), every rank, fp32 and bf16, flat and per-parameter binding, bf16 with fp32
 * reduce-scatters; that a TP plane of one rank has no exchange buffers and a DP plane of one
 * rank no reduce-scatter scratch or bf16 wire; and on cpu-1 that a step leaves the record as it
 * was.
 *
 * A rank of a multi-rank plan is created in this one process over "callbacks" that do nothing:
 * creating and binding move no data between ranks (only the agreements, whose sums over one
 * rank are that rank's own values), so each rank's executor makes exactly the allocations it
 * makes in a real job, and the test needs no forked transport. */
#include "cz_exec_testing.h"

#include "canzona.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* capacity: the micro-group capacity (0: the planner's). */
static cz_plan *plan_of(const char *cluster, cz_tp_strategy tp, double capacity)
{
    char a[1024], b[1024];
    const char *src = getenv("CZ_SOURCE_DIR");
    cz_error err = {0};
    cz_model *m = NULL;
    cz_cluster *cl = NULL;
    cz_plan *plan = NULL;
    cz_settings st;
    cz_settings_init(&st);
    st.tp = tp;
    st.capacity = capacity;
    snprintf(a, sizeof a, "%s/plans/models/test-small.json", src ? src : ".");
    snprintf(b, sizeof b, "%s/plans/clusters/%s.json", src ? src : ".", cluster);
    ck_assert_msg(cz_model_load(&m, a, &err) == CZ_OK, "%s", err.message);
    ck_assert_msg(cz_cluster_load(&cl, b, &err) == CZ_OK, "%s", err.message);
    ck_assert_msg(cz_plan_build(&plan, m, cl, &st, &err) == CZ_OK, "%s", err.message);
    cz_cluster_free(cl);
    cz_model_free(m);
    return plan;
}

/* Collectives over one rank: the buffer already holds the result. */
static int cb_all_reduce(void *user, cz_comm_group g, void *buf, size_t count, cz_comm_dtype t,
                         cz_comm_op op)
{
    (void)user, (void)g, (void)buf, (void)count, (void)t, (void)op;
    return 0;
}

static int cb_broadcast(void *user, cz_comm_group g, void *buf, size_t count, cz_comm_dtype t,
                        int root)
{
    (void)user, (void)g, (void)buf, (void)count, (void)t, (void)root;
    return 0;
}

static int cb_exchange(void *user, cz_comm_group g, const cz_comm_transfer *t, int n)
{
    (void)user, (void)g, (void)t, (void)n;
    return 0;
}

/* Creates world rank `rank` of plan, binds it (flat or per parameter), and compares what it
 * recorded with the prediction for its (dp, tp) position. */
static void check_rank(const cz_plan *plan, int rank, cz_dtype dtype, bool per_param, bool fp32rs)
{
    int world = plan->dp * plan->tp;
    cz_comm_callbacks cb = {.version = CZ_COMM_CALLBACKS_VERSION,
                            .world_size = world,
                            .world_rank = rank,
                            .all_reduce = cb_all_reduce,
                            .broadcast = cb_broadcast,
                            .exchange = cb_exchange};
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    if (world == 1)
        cfg.comm = "self";
    else
        cfg.callbacks = &cb;
    cfg.dtype = dtype;
    cfg.grad_reduce_in_fp32 = fp32rs;
    cz_error err = {0};
    cz_executor *ex = NULL;
    ck_assert_msg(cz_executor_create_from_plan(&ex, plan, &cfg, &err) == CZ_OK, "%s", err.message);
    int d = cz_executor_dp_rank(ex), t = cz_executor_tp_rank(ex);
    size_t es = dtype == CZ_DTYPE_BF16 ? 2 : 4, n = cz_executor_buffer_numel(ex);
    char *P = calloc(n ? n : 1, es), *G = calloc(n ? n : 1, es);
    ck_assert_ptr_nonnull(P);
    ck_assert_ptr_nonnull(G);
    if (per_param) {
        for (size_t i = 0; i < plan->nparams; i++) {
            const cz_plan_param *p = &plan->params[i];
            int64_t rows = p->local_shape[0], cols = p->def.ndim == 1 ? 1 : p->local_shape[1];
            int64_t off = plan->buckets[cz__bucket_index(plan, p->bucket)].offset + p->offset;
            ck_assert_msg(cz_executor_bind_param_typed(ex, p->def.name, P + es * (size_t)off,
                                                       G + es * (size_t)off, rows, cols, dtype,
                                                       &err) == CZ_OK,
                          "%s", err.message);
        }
    } else {
        ck_assert_msg(cz_executor_bind_typed(ex, P, G, n, dtype, &err) == CZ_OK, "%s", err.message);
    }
    cz_exec_mem_usage got, want;
    cz_executor_memory_usage(ex, &got);
    cz_exec_mem_job job = {dtype, per_param || dtype != CZ_DTYPE_FP32, fp32rs, false};
    ck_assert_msg(cz__exec_memory_predict(plan, d, t, &job, &want, &err) == CZ_OK, "%s",
                  err.message);
    for (int k = 0; k < CZ_EXEC_MEM_NKINDS; k++)
        ck_assert_msg(got.bytes[k] == want.bytes[k],
                      "DP%d x TP%d, GPU (%d, %d), %s%s: %s recorded %lld bytes, predicted %lld",
                      plan->dp, plan->tp, d, t, cz_dtype_name(dtype),
                      per_param ? ", per parameter" : "", cz_exec_mem_kind_name(k),
                      (long long)got.bytes[k], (long long)want.bytes[k]);
    ck_assert_int_eq(got.model_states, want.model_states);
    ck_assert_int_eq(got.beyond, want.beyond);
    /* Each kind the plan has is there: nothing silently zero on both sides. */
    ck_assert_int_gt(got.bytes[CZ_EXEC_MEM_STATE], 0);
    ck_assert_int_gt(got.bytes[CZ_EXEC_MEM_NS], 0);
    ck_assert_int_gt(got.bytes[CZ_EXEC_MEM_FULL], 0);
    ck_assert_int_gt(got.bytes[CZ_EXEC_MEM_INDEX], 0);
    ck_assert_int_eq(got.bytes[CZ_EXEC_MEM_PARAMS] > 0, job.staged);
    /* The micro-group exchanges of a TP plane of one rank stay on the rank: no buffers. */
    ck_assert_int_eq(got.bytes[CZ_EXEC_MEM_EXCHANGE] == 0, plan->tp == 1);
    /* At TP 1 Muon updates in place: one full buffer, the largest group's matrices (counted
     * here by hand from the schedule: whole matrices, TP-local = whole at TP 1), not two. */
    if (plan->tp == 1) {
        const cz_rank_schedule *rs = cz_plan_rank_schedule(plan, 0, d);
        int64_t most = 0;
        for (int g = 0; rs && g < rs->ngroups; g++) {
            int64_t sum = 0;
            for (int k = 0; k < rs->groups[g].ntasks; k++)
                sum += plan->params[rs->groups[g].task_param[k]].numel;
            most = sum > most ? sum : most;
        }
        ck_assert_int_eq(got.bytes[CZ_EXEC_MEM_FULL], 4 * (most + 1));
    }
    /* Nor do the DP exchanges of a DP plane of one rank: no scratch, no bf16 copies. */
    ck_assert_int_eq(got.bytes[CZ_EXEC_MEM_DP] == 0, plan->dp == 1);
    /* A step allocates nothing: the record stays as create and bind left it (one process, where
     * the step's exchanges are real). */
    if (world == 1) {
        ck_assert_msg(cz_executor_step(ex, &err) == CZ_OK, "%s", err.message);
        cz_exec_mem_usage after;
        cz_executor_memory_usage(ex, &after);
        ck_assert_int_eq(memcmp(&after, &got, sizeof got), 0);
    }
    cz_executor_free(ex);
    free(P);
    free(G);
}

static void check_plan(cz_plan *plan)
{
    for (int r = 0; r < plan->dp * plan->tp; r++) {
        check_rank(plan, r, CZ_DTYPE_FP32, false, false);
        check_rank(plan, r, CZ_DTYPE_FP32, true, false);
        check_rank(plan, r, CZ_DTYPE_BF16, true, false);
        check_rank(plan, r, CZ_DTYPE_BF16, false, true);
    }
    cz_plan_free(plan);
}

static void check_cluster(const char *cluster, cz_tp_strategy tp)
{
    check_plan(plan_of(cluster, tp, 0));
}

START_TEST(cpu_1)
{
    check_cluster("cpu-1", CZ_TP_ROLLBACK);
}
END_TEST

START_TEST(dp2_tp2)
{
    check_cluster("cpu-4-dp2-tp2", CZ_TP_ROLLBACK);
    /* synchronous compute: every TP rank computes every task */
    check_cluster("cpu-4-dp2-tp2", CZ_TP_SC);
}
END_TEST

START_TEST(dp4_tp1)
{
    check_cluster("cpu-4-dp4-tp1", CZ_TP_ROLLBACK);
}
END_TEST

START_TEST(dp1_tp4)
{
    check_cluster("cpu-4-dp1-tp4", CZ_TP_ROLLBACK);
    /* A capacity above the whole model's cost: one micro-group, so one set of exchange
     * buffers (the plan must have one, or this case tests nothing new). */
    cz_plan *plan = plan_of("cpu-4-dp1-tp4", CZ_TP_ROLLBACK, 1e30);
    for (size_t s = 0; s < plan->nschedules; s++)
        ck_assert_int_eq(plan->schedules[s].ngroups, 1);
    check_plan(plan);
}
END_TEST

/* What the model does not cover is refused by name, not guessed. */
START_TEST(refusals)
{
    cz_plan *plan = plan_of("cpu-4-dp2-tp2", CZ_TP_ROLLBACK, 0);
    cz_exec_mem_usage u;
    cz_error err = {0};
    cz_exec_mem_job job = {CZ_DTYPE_FP32, false, false, false};
    ck_assert_int_eq(cz__exec_memory_predict(plan, 2, 0, &job, &u, &err), CZ_EINVALID);
    job.normuon = true;
    ck_assert_int_eq(cz__exec_memory_predict(plan, 0, 0, &job, &u, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "NorMuon"));
    job.normuon = false;
    plan->settings.optimizer = CZ_OPTIM_SOAP;
    ck_assert_int_eq(cz__exec_memory_predict(plan, 0, 0, &job, &u, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "SOAP"));
    cz_plan_free(plan);
    /* NULL executor: zeros */
    cz_executor_memory_usage(NULL, &u);
    ck_assert_int_eq(u.model_states + u.beyond, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memory");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, cpu_1);
    tcase_add_test(tc, dp2_tp2);
    tcase_add_test(tc, dp4_tp1);
    tcase_add_test(tc, dp1_tp4);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
