/* Block and cooperative tasks in the plans the executor checks (issue 13): a plan of them as
 * `canzona plan --split-blocks --coop 2` builds it passes; edits that make a task inconsistent
 * (a width that does not divide the slots, a misaligned first slot, a block out of range, a
 * cooperative whole multi-block matrix, a block twice or missing, a block task under another
 * optimizer) are refused by cz__exec_plan_check, and by cz_executor_create before anything is
 * allocated, with a message naming the task. The cooperative parts of a task are its region
 * sliced along the long side. */
#include "canzona.h" /* cz_plan_build: the test plans in-process */
#include "canzona_exec.h"
#include "cz_format.h"
#include "cz_exec_testing.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cz_model *model;
static cz_cluster *cluster;
static cz_plan *plan;

static void build(int split, int coop, cz_optimizer opt)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    char mp[512], cp[512];
    snprintf(mp, sizeof mp, "%s/plans/models/test-small.json", src);
    snprintf(cp, sizeof cp, "%s/plans/clusters/cpu-4-dp1-tp4.json", src);
    cz_error err;
    cz_settings s;
    cz_settings_init(&s);
    s.split_blocks = split;
    s.coop = coop;
    s.optimizer = opt;
    ck_assert_msg(cz_model_load(&model, mp, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_cluster_load(&cluster, cp, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_build(&plan, model, cluster, &s, &err) == 0, "%s", err.message);
}

static void teardown(void)
{
    cz_plan_free(plan);
    cz_model_free(model);
    cz_cluster_free(cluster);
    plan = NULL;
    model = NULL;
    cluster = NULL;
}

/* The first task of the plan's schedule with the given width (and, when block_min >= 0, a block
 * of at least that index); *g and *t locate it. */
static void find_task(int width, int block_min, cz_plan_group **g, int *t)
{
    cz_rank_schedule *rs = &plan->schedules[0];
    for (int gi = 0; gi < rs->ngroups; gi++)
        for (int k = 0; k < rs->groups[gi].ntasks; k++)
            if (cz_group_task_width(&rs->groups[gi], k) == width &&
                (block_min < 0 || cz_group_task_block(&rs->groups[gi], k) >= block_min)) {
                *g = &rs->groups[gi];
                *t = k;
                return;
            }
    ck_abort_msg("no task of width %d and block >= %d in the plan", width, block_min);
}

/* cz__exec_plan_check refuses with code rc and a message holding want (and, through
 * cz_executor_create_from_plan, so does the executor). */
static void refused(int rc, const char *want)
{
    cz_error err;
    int got = cz__exec_plan_check(plan, &err);
    ck_assert_msg(got == rc, "expected code %d, got %d (%s)", rc, got, got ? err.message : "");
    ck_assert_msg(strstr(err.message, want), "'%s' not in: %s", want, err.message);
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cz_executor *ex = NULL;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, plan, &cfg, &err), rc);
    ck_assert_ptr_null(ex);
    ck_assert_msg(strstr(err.message, want), "'%s' not in: %s", want, err.message);
}

START_TEST(built_plan_passes)
{
    build(1, 2, CZ_OPTIM_MUON);
    cz_error err;
    ck_assert_msg(cz__exec_plan_check(plan, &err) == 0, "%s", err.message);
    cz_plan_group *g;
    int t;
    find_task(2, 0, &g, &t);
    /* Its two parts: the block's region sliced along its long side, each on its own slot. */
    cz_exec_part parts[4];
    ck_assert_int_eq(cz__task_parts(plan, g, t, parts, 4), 2);
    const cz_exec_part *a = &parts[0], *b = &parts[1];
    ck_assert_int_eq(a->slot, g->task_slot[t]);
    ck_assert_int_eq(b->slot, g->task_slot[t] + 1);
    bool tall = a->region.rows > a->region.cols;
    if (tall) {
        ck_assert_int_eq(a->part.rows + b->part.rows, a->region.rows);
        ck_assert_int_eq(b->part.r0, a->part.r0 + a->part.rows);
        ck_assert_int_eq(a->part.cols, a->region.cols);
    } else {
        ck_assert_int_eq(a->part.cols + b->part.cols, a->region.cols);
        ck_assert_int_eq(b->part.c0, a->part.c0 + a->part.cols);
        ck_assert_int_eq(a->part.rows, a->region.rows);
    }
    teardown();
}
END_TEST

START_TEST(width_not_dividing)
{
    build(1, 2, CZ_OPTIM_MUON);
    cz_plan_group *g;
    int t;
    find_task(2, -1, &g, &t);
    g->task_width[t] = 3;
    g->task_slot[t] = 0;
    refused(CZ_EINVALID, "width 3");
    teardown();
}
END_TEST

START_TEST(misaligned_slot)
{
    build(1, 2, CZ_OPTIM_MUON);
    cz_plan_group *g;
    int t;
    find_task(2, -1, &g, &t);
    g->task_slot[t] = 1;
    refused(CZ_EINVALID, "slot 1 with width 2");
    teardown();
}
END_TEST

START_TEST(block_out_of_range)
{
    build(1, 0, CZ_OPTIM_MUON);
    cz_plan_group *g;
    int t;
    find_task(1, 0, &g, &t);
    g->task_block[t] = 9;
    refused(CZ_EINVALID, "block 9");
    teardown();
}
END_TEST

START_TEST(coop_whole_blocked_matrix)
{
    build(1, 2, CZ_OPTIM_MUON);
    cz_plan_group *g;
    int t;
    find_task(2, 0, &g, &t); /* a block of a blocked matrix, cooperative */
    g->task_block[t] = -1;
    refused(CZ_EINVALID, "cooperative task");
    teardown();
}
END_TEST

START_TEST(block_twice)
{
    build(1, 0, CZ_OPTIM_MUON);
    cz_plan_group *g;
    int t;
    find_task(1, 1, &g, &t); /* block 1 of something: make it block 0 again */
    g->task_block[t] = 0;
    refused(CZ_EINVALID, plan->params[g->task_param[t]].def.name);
    teardown();
}
END_TEST

START_TEST(block_task_under_soap)
{
    build(1, 0, CZ_OPTIM_MUON);
    plan->settings.optimizer = CZ_OPTIM_SOAP;
    refused(CZ_EINVALID, "Muon only");
    plan->settings.optimizer = CZ_OPTIM_SHAMPOO;
    refused(CZ_EINVALID, "Muon only");
    teardown();
}
END_TEST

/* canzona-bench ns's per-GPU Newton-Schulz work counts a block task as its one block: over the
 * four GPUs, a --split-blocks plan has exactly the blocks of a whole-matrix plan, with the same
 * FLOPs; cooperative tasks (not ns_batched work) are left out. */
static void workload_totals(int *blocks, double *flops)
{
    *blocks = 0, *flops = 0.0;
    for (int t = 0; t < plan->tp; t++) {
        cz_ns_workload w;
        cz_error err;
        ck_assert_msg(cz__ns_workload_make(&w, plan, 0, t, 5, 2.0, &err) == 0, "%s", err.message);
        *blocks += w.nblocks;
        *flops += w.flops;
        cz__ns_workload_free(&w);
    }
}

START_TEST(ns_workload_of_block_tasks)
{
    int wb, sb, cb;
    double wf, sf, cf;
    build(0, 0, CZ_OPTIM_MUON);
    workload_totals(&wb, &wf);
    teardown();
    build(1, 0, CZ_OPTIM_MUON);
    workload_totals(&sb, &sf);
    teardown();
    build(1, 2, CZ_OPTIM_MUON);
    workload_totals(&cb, &cf);
    teardown();
    /* test-small: 2 layers x (qkv 3 + proj 1 + fc1 2 + fc2 1) + extra 1. */
    ck_assert_int_eq(wb, 15);
    ck_assert_int_eq(sb, 15);
    ck_assert_double_eq_tol(sf, wf, 1e-6 * wf);
    ck_assert_int_lt(cb, 15);
}
END_TEST

/* Per-head Muon (plans/models/test-heads.json: 4 Q and 2 KV heads of 32, the projection's 128
 * columns in heads of 32) at DP2 x TP2: every per-head matrix's tasks are TP-local, they pass
 * the executor's check, and each GPU's Newton-Schulz work has its own heads only, all of one
 * oriented shape (32 x 128) in one ns_batched call per micro-group: per layer 2 Q + 1 K + 1 V
 * heads of the QKV and 2 of the projection. A local task of the whole blocked QKV is refused. */
START_TEST(per_head_local_tasks_batched)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    char mp[512], cp[512];
    snprintf(mp, sizeof mp, "%s/plans/models/test-heads.json", src);
    snprintf(cp, sizeof cp, "%s/plans/clusters/cpu-4-dp2-tp2.json", src);
    cz_error err;
    cz_settings s;
    cz_settings_init(&s);
    ck_assert_msg(cz_model_load(&model, mp, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_cluster_load(&cluster, cp, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_build(&plan, model, cluster, &s, &err) == 0, "%s", err.message);
    ck_assert_msg(cz__exec_plan_check(plan, &err) == 0, "%s", err.message);
    int heads_layers = 0;
    for (int d = 0; d < plan->dp; d++)
        for (int t = 0; t < plan->tp; t++) {
            cz_ns_workload w;
            ck_assert_msg(cz__ns_workload_make(&w, plan, d, t, 5, 2.0315, &err) == 0, "%s",
                          err.message);
            int per_head = 0;
            for (int b = 0; b < w.nbatches; b++)
                if (w.batches[b].rows == 32 && w.batches[b].cols == 128) {
                    ck_assert_int_eq(w.batches[b].count, 6); /* one layer's heads per group */
                    per_head++;
                }
            heads_layers += per_head;
            cz__ns_workload_free(&w);
        }
    /* 2 layers, each owned by one DP rank, computed by both of its TP ranks. */
    ck_assert_int_eq(heads_layers, 4);
    cz_plan_group *g = NULL;
    int t = -1;
    find_task(2, 0, &g, &t); /* a block of the per-head QKV, TP-local */
    ck_assert(cz_task_is_local(&plan->params[g->task_param[t]].def, 2));
    g->task_block[t] = -1; /* the whole blocked matrix: its TP shares are not one rectangle */
    refused(CZ_EINVALID, "is TP-local, which needs");
    teardown();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_plan_tasks");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, built_plan_passes);
    tcase_add_test(tc, width_not_dividing);
    tcase_add_test(tc, misaligned_slot);
    tcase_add_test(tc, block_out_of_range);
    tcase_add_test(tc, coop_whole_blocked_matrix);
    tcase_add_test(tc, block_twice);
    tcase_add_test(tc, block_task_under_soap);
    tcase_add_test(tc, ns_workload_of_block_tasks);
    tcase_add_test(tc, per_head_local_tasks_batched);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
