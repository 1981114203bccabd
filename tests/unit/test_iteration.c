/* The iteration around the optimizer step (planner/lib/iteration.c): the forward FLOPs of a
 * parameter, and the overlapped iteration's event model on models of two and three buckets
 * whose every event is worked out by hand in the comments. */
#include "cz_types.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_forward_flops)
{
    /* A TP-split matrix: 2 x local elements x tokens (2 sequences of 128). */
    cz_param_def w = {.name = "decoder.layers.0.mlp.linear_fc1.weight",
                      .ndim = 2,
                      .shape = {1024, 512},
                      .tp_dim = 0,
                      .block_dim = -1};
    ck_assert_double_eq(cz__iter_forward_flops(&w, 512 * 512, 2, 128, 2), 2.0 * 262144 * 256);
    /* QKV with blocks Q 256, K 128, V 128 rows over hidden 512: plus the causal scores and
     * values, 2 b s^2 d_q / TP = 2 x 2 x 128^2 x 256 / 2. */
    int64_t blocks[3] = {256, 128, 128};
    cz_param_def qkv = {.name = "decoder.layers.0.self_attention.linear_qkv.weight",
                        .ndim = 2,
                        .shape = {512, 512},
                        .tp_dim = 0,
                        .block_dim = 0,
                        .nblocks = 3,
                        .block_sizes = blocks};
    double lin = 2.0 * 131072 * 256, att = 2.0 * 2 * 128.0 * 128 * 256 / 2;
    ck_assert_double_eq(cz__iter_forward_flops(&qkv, 256 * 512, 2, 128, 2), lin + att);
    /* Without blocks d_q is the hidden size (the columns). */
    qkv.nblocks = 0;
    qkv.block_dim = -1;
    qkv.block_sizes = NULL;
    ck_assert_double_eq(cz__iter_forward_flops(&qkv, 256 * 512, 2, 128, 2), lin + 2 * att);
    /* An embedding is a lookup, a norm elementwise: no matmul FLOPs. */
    cz_param_def emb = {.name = "embedding.word_embeddings.weight", .ndim = 2, .shape = {100, 8}};
    cz_param_def norm = {.name = "decoder.final_layernorm.weight", .ndim = 1, .shape = {8}};
    ck_assert_double_eq(cz__iter_forward_flops(&emb, 800, 1, 128, 1), 0.0);
    ck_assert_double_eq(cz__iter_forward_flops(&norm, 8, 1, 128, 1), 0.0);
}
END_TEST

/* One DP rank, one micro-batch, three buckets (bucket 0 = the last layers, the first the
 * backward completes), pipelined, groups listed in the order their inputs become ready. Per
 * bucket: forward 1, backward 2, reduce-scatter 1, all-gather 1. Elementwise 0.5 in bucket 0; group
 * 0 needs bucket 0, group 1 bucket 2 (gather 0.5, compute 1, scatter 0.5 each); bucket 1 has no
 * group and no elementwise work. backward B0 [3, 5] (after the forward, 3), B1 [5, 7]; RS0 [5, 6];
 * G0 [6, 6.5]; RS1 [7, 8]; at 7 the compute stream runs what became ready during B1 first:
 * elementwise 0 [7, 7.5], C0 [7.5, 8.5], then B2 [8.5, 10.5] (backward delayed by 1.5); S0 [8.5,
 * 9]; AG0 [9, 10]; RS2 [10.5, 11.5], AG1 [11.5, 12.5] (behind it on the DP channel); G1 [11.5, 12],
 *   C1 [12, 13], S1 [13, 13.5], AG2 [13.5, 14.5]; the next forward starts with bucket 2:
 *   F2 [14.5, 15.5], F1 [15.5, 16.5], F0 [16.5, 17.5]. The iteration: 17.5 - 3 = 14.5 against
 *   9 of passes; the first forward chunk waits 14.5 - 10.5 = 4 after backward.
 * That is the compute stream first come, first served (passes_first 0). With the passes first
 * (simulate's rule) backward runs undisturbed, B2 [7, 9], RS2 [9, 10]; bucket 1 (no work) is
 * updated at 9, so AG1 [10, 11] follows RS2; elementwise 0 [9, 9.5], C0 [9.5, 10.5], G1
 * [10, 10.5], C1 [10.5, 11.5], S0 [10.5, 11], S1 [11.5, 12]; AG0 [11, 12], AG2 [12, 13];
 * F2 [13, 14] .. F0 [15, 16]: the iteration 13, the first chunk waiting 4. */
START_TEST(test_overlap_three_buckets)
{
    double fwd[3] = {1, 1, 1}, bwd[3] = {2, 2, 2}, rs[3] = {1, 1, 1}, ag[3] = {1, 1, 1};
    double elem[3] = {0.5, 0, 0};
    unsigned char touches[6] = {1, 0, 0, 0, 0, 1}; /* group 0: bucket 0; group 1: bucket 2 */
    cz_iter_group groups[2] = {{0, 0.5, 1, 0.5}, {2, 0.5, 1, 0.5}};
    cz_iter_rank rank = {2, groups, elem, touches};
    cz_iter_model m = {3, 1, 1, 1, fwd, bwd, rs, ag, &rank, 0, 0, 0};
    cz_iter_timeline tl;
    cz_error err;
    int rc = cz__iter_overlap(&m, &tl, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_double_eq_tol(tl.passes_s, 9.0, 1e-12);
    ck_assert_double_eq_tol(tl.bwd_end_s, 10.5, 1e-12);
    ck_assert_double_eq_tol(tl.bwd_delay_s, 1.5, 1e-12);
    ck_assert_double_eq_tol(tl.first_wait_s, 4.0, 1e-12);
    ck_assert_double_eq_tol(tl.iter_s, 14.5, 1e-12);
    /* The plan listing the groups the other way round changes nothing: a rank runs its groups
     * in the order their inputs become ready, not in the plan's (run in the plan's order,
     * group 0 here would hold the other back until the end of backward). */
    cz_iter_group swapped[2] = {groups[1], groups[0]};
    unsigned char swapped_touches[6] = {0, 0, 1, 1, 0, 0};
    rank.groups = swapped;
    rank.touches = swapped_touches;
    rc = cz__iter_overlap(&m, &tl, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_double_eq_tol(tl.bwd_delay_s, 1.5, 1e-12);
    ck_assert_double_eq_tol(tl.iter_s, 14.5, 1e-12);
    rank.groups = groups;
    rank.touches = touches;
    m.passes_first = 1;
    rc = cz__iter_overlap(&m, &tl, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_double_eq_tol(tl.bwd_end_s, 9.0, 1e-12);
    ck_assert_double_eq_tol(tl.bwd_delay_s, 0.0, 1e-12);
    ck_assert_double_eq_tol(tl.first_wait_s, 4.0, 1e-12);
    ck_assert_double_eq_tol(tl.iter_s, 13.0, 1e-12);
    m.passes_first = 0;
    /* Faster collectives shorten only what waits on them: with free ones, group 1 starts
     * at the end of backward: C1 [10.5, 11.5], F2 from 11.5, the iteration 11.5 + 3 - 3. */
    double zero[3] = {0, 0, 0};
    groups[1].gather_s = groups[1].scatter_s = groups[0].gather_s = groups[0].scatter_s = 0;
    m.rs_s = m.ag_s = zero;
    rc = cz__iter_overlap(&m, &tl, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_double_eq_tol(tl.iter_s, 11.5, 1e-12);
    ck_assert_double_eq_tol(tl.first_wait_s, 1.0, 1e-12);
    /* The passes first: the same 11.5 (the optimizer's 2.5 after B2 [7, 9] instead of between
     * B1 and B2), the first chunk waiting 11.5 - 9. */
    m.passes_first = 1;
    rc = cz__iter_overlap(&m, &tl, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_double_eq_tol(tl.iter_s, 11.5, 1e-12);
    ck_assert_double_eq_tol(tl.first_wait_s, 2.5, 1e-12);
}
END_TEST

/* Two DP ranks, two micro-batches, two buckets, synchronous compute (scatter 0). Rank 0 has
 * one group over both buckets (gather 1, compute 2); rank 1 elementwise work 1 in bucket 0.
 *   the last backward starts after 2 forwards and 1 backward, 2 x 2 + 1 x 4 = 8: B0 [8, 10],
 *   B1 [10, 12] on both ranks; RS0 [10, 11]; RS1 [12, 13]; rank 1: elementwise 0 [12, 13]
 *   (after B1); rank 0: G [13, 14], C [14, 16]; AG0 and AG1 both wait for rank 0's group:
 *   [16, 17], [17, 18]; the next forward: F1 [18, 19], F0 [19, 20] on both ranks. The
 *   iteration: 20 - 2 = 18 against 12 of passes; nothing runs between backward chunks. */
START_TEST(test_overlap_two_ranks)
{
    double fwd[2] = {1, 1}, bwd[2] = {2, 2}, rs[2] = {1, 1}, ag[2] = {1, 1};
    double elem0[2] = {0, 0}, elem1[2] = {1, 0};
    unsigned char touches[2] = {1, 1};
    cz_iter_group g = {1, 1, 2, 0};
    cz_iter_rank ranks[2] = {{1, &g, elem0, touches}, {0, NULL, elem1, NULL}};
    cz_iter_model m = {2, 2, 0, 2, fwd, bwd, rs, ag, ranks, 1, 0, 0};
    cz_iter_timeline tl;
    cz_error err;
    int rc = cz__iter_overlap(&m, &tl, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_double_eq_tol(tl.passes_s, 12.0, 1e-12);
    ck_assert_double_eq_tol(tl.bwd_end_s, 12.0, 1e-12);
    ck_assert_double_eq_tol(tl.bwd_delay_s, 0.0, 1e-12);
    ck_assert_double_eq_tol(tl.first_wait_s, 6.0, 1e-12);
    ck_assert_double_eq_tol(tl.iter_s, 18.0, 1e-12);
    /* Invalid models are refused. */
    m.micro_batches = 0;
    ck_assert_int_eq(cz__iter_overlap(&m, &tl, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "micro-batches"));
}
END_TEST

/* The order of the all-gathers: one rank, two buckets, no micro-groups, forward 1 and backward
 * 1 per bucket, reduce-scatters 1, all-gathers 2. B0 [2, 3], B1 [3, 4], RS0 [3, 4], RS1
 * [4, 5]; both all-gathers are ready at 5 (AG0 since 4).
 *   ready order: AG0 [5, 7], AG1 [7, 9]; F1 [9, 10], F0 [10, 11]: the iteration 9, 5 exposed;
 *   forward order: AG1 [5, 7] (the first layers', needed first), AG0 [7, 9] under F1 [7, 8];
 *   F0 [9, 10]: the iteration 8, 4 exposed: the DP bound, 6 of collectives less the window
 *   B1 + F1 = 2. */
START_TEST(test_gather_order)
{
    double fwd[2] = {1, 1}, bwd[2] = {1, 1}, rs[2] = {1, 1}, ag[2] = {2, 2}, elem[2] = {0, 0};
    cz_iter_rank rank = {0, NULL, elem, NULL};
    cz_iter_model m = {2, 1, 1, 1, fwd, bwd, rs, ag, &rank, 1, 0, 0};
    cz_iter_timeline tl;
    cz_error err;
    int rc = cz__iter_overlap(&m, &tl, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_double_eq_tol(tl.passes_s, 4.0, 1e-12);
    ck_assert_double_eq_tol(tl.iter_s, 9.0, 1e-12);
    ck_assert_double_eq_tol(tl.first_wait_s, 5.0, 1e-12);
    ck_assert_double_eq_tol(tl.dp_bound_s, 4.0, 1e-12);
    m.ag_forward_order = 1;
    rc = cz__iter_overlap(&m, &tl, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_double_eq_tol(tl.iter_s, 8.0, 1e-12);
    ck_assert_double_eq_tol(tl.first_wait_s, 3.0, 1e-12);
    ck_assert_double_eq_tol(tl.iter_s - tl.passes_s, tl.dp_bound_s, 1e-12);
}
END_TEST

/* Deferred updates (the executor's bucket-wise step without early updates) on the three-bucket
 * model of test_overlap_three_buckets, the passes first: B0 [3, 5], B1 [5, 7], B2 [7, 9]; RS0
 * [5, 6], RS1 [7, 8], RS2 [9, 10]; every update waits for the last one, 10: elementwise 0
 * [10, 10.5], G0 [10, 10.5] (the plan's order: group 0 first), G1 [10.5, 11], C0 [10.5, 11.5],
 * S0 [11.5, 12], C1 [11.5, 12.5], S1 [12.5, 13]; every all-gather waits for the last update,
 * 13: in ready order AG0 [13, 14], AG1 [14, 15], AG2 [15, 16]; F2 [16, 17] .. F0 [18, 19]: the
 * iteration 16 (early: 13), the first chunk waiting 16 - 9 = 7. In forward order AG2 [13, 14],
 * AG1 [14, 15], AG0 [15, 16]: F2 [14, 15], F1 [15, 16], F0 [16, 17], the iteration 14, the
 * wait 5. */
START_TEST(test_deferred_updates)
{
    double fwd[3] = {1, 1, 1}, bwd[3] = {2, 2, 2}, rs[3] = {1, 1, 1}, ag[3] = {1, 1, 1};
    double elem[3] = {0.5, 0, 0};
    unsigned char touches[6] = {1, 0, 0, 0, 0, 1};
    cz_iter_group groups[2] = {{0, 0.5, 1, 0.5}, {2, 0.5, 1, 0.5}};
    cz_iter_rank rank = {2, groups, elem, touches};
    cz_iter_model m = {3, 1, 1, 1, fwd, bwd, rs, ag, &rank, 1, 0, 1};
    cz_iter_timeline tl;
    cz_error err;
    int rc = cz__iter_overlap(&m, &tl, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_double_eq_tol(tl.passes_s, 9.0, 1e-12);
    ck_assert_double_eq_tol(tl.bwd_end_s, 9.0, 1e-12);
    ck_assert_double_eq_tol(tl.iter_s, 16.0, 1e-12);
    ck_assert_double_eq_tol(tl.first_wait_s, 7.0, 1e-12);
    m.ag_forward_order = 1;
    rc = cz__iter_overlap(&m, &tl, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_double_eq_tol(tl.iter_s, 14.0, 1e-12);
    ck_assert_double_eq_tol(tl.first_wait_s, 5.0, 1e-12);
    /* The same model with early updates: test_overlap_three_buckets' 13. */
    m.ag_forward_order = 0;
    m.deferred = 0;
    rc = cz__iter_overlap(&m, &tl, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    ck_assert_double_eq_tol(tl.iter_s, 13.0, 1e-12);
}
END_TEST

static Suite *iteration_suite(void)
{
    Suite *s = suite_create("iteration");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_forward_flops);
    tcase_add_test(tc, test_overlap_three_buckets);
    tcase_add_test(tc, test_overlap_two_ranks);
    tcase_add_test(tc, test_gather_order);
    tcase_add_test(tc, test_deferred_updates);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(iteration_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
