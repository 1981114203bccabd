/* The step's device-byte model (step_bytes.c) against a hand count for test-small on
 * cpu-4-dp2-tp2 (DP2 x TP2, Muon, the planner's default settings).
 *
 * test-small's parameters (plans/models/test-small.json) and each TP rank's local elements at
 * TP 2 (tp_dim 0 or 1 halves a tensor, null keeps it whole):
 *   embedding 1024 x 256, elementwise, tp 0:            131072
 *   per layer (2 layers):
 *     linear_qkv.layer_norm_weight 256, elementwise:       256
 *     linear_qkv 512 x 256, matrix, tp 0 (blocks 256/128/128 rows): 65536
 *     q_layernorm 64, k_layernorm 64, elementwise:      64 + 64
 *     linear_proj 256 x 256, matrix, tp 1:                32768
 *     linear_fc1.layer_norm_weight 256, elementwise:       256
 *     linear_fc1 1024 x 256, matrix, tp 0 (blocks 512/512): 131072
 *     linear_fc2 256 x 512, matrix, tp 1:                 65536
 *     = 295552 per layer, 591104 for both
 *   final_layernorm 256, elementwise:                      256
 *   extra 64 x 256, matrix, replicated:                  16384
 *   output_layer 1024 x 256, elementwise, tp 0:         131072
 *   buffer per TP rank: 131072 + 591104 + 256 + 16384 + 131072 = 869888 elements.
 * Elementwise elements per TP rank: 131072 + 131072 + 2 (256 + 64 + 64 + 256) + 256 = 263680.
 * Matrix elements, whole (every matrix is computed once, by one GPU): per layer 131072 + 65536
 * + 262144 + 131072 = 589824, both layers 1179648 TP-split, plus extra's 16384 replicated:
 * 1196032.
 * fp32 job: 4 bytes an element everywhere. Per GPU, the reduce-scatter sends its whole buffer
 * (reads 4 x 869888 = 3479552 bytes) and the all-gather receives it (writes 3479552); summed over
 * the two DP ranks of a TP rank, their receive (send) ranges are the buffer once, as are the
 * average's read and write (scale from the scratch: 3479552 each) and the gradient norm (each
 * element owned by one DP rank: 3479552 read). AdamW reads p, g, m, v and writes p, m, v: over
 * the two DP ranks 16 x 263680 = 4218880 read, 12 x 263680 = 3164160 written, per TP rank.
 * Over all four GPUs: the gathers pack every TP-split matrix element once (1179648, read and
 * written as 4718592 bytes) and unpack it, plus extra from the host's own copy (1196032:
 * 4784128 bytes); momentum reads g, buf and writes buf, input over every computed element
 * (8 x 1196032 = 9568256 each); the scatters pack each TP rank's shard of every update, extra
 * whole for both TP ranks (1179648 + 2 x 16384 = 1212416: 4849664 bytes each way), and the
 * update reads p and u and writes p over the same (9699328 read, 4849664 written).
 * Newton-Schulz, r x c blocks with r <= c: per layer 256x256 (qkv's q), 128x256 twice (k, v),
 * 256x256 (proj), 256x512 twice (fc1's gate and up, transposed), 256x512 (fc2); extra 64x256:
 * sum r c = 1196032, sum r^2 = 724992. The load reads a block twice and writes it (8 x 1196032
 * = 9568256, 4784128), the store reads and writes it once (4784128 each); each of 5 iterations
 * reads 3 r c + 4 r^2 and writes 2 r^2 + r c floats: 5 x 4 x (3 x 1196032 + 4 x 724992) =
 * 129761280 read, 5 x 4 x (2 x 724992 + 1196032) = 52920320 written. */
#include "cz_exec_testing.h"

#include "canzona.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *path_of(const char *dir, const char *name, char *buf, size_t cap)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    snprintf(buf, cap, "%s/plans/%s/%s.json", src ? src : ".", dir, name);
    return buf;
}

static cz_plan *plan_on(const char *cluster)
{
    char a[1024], b[1024];
    cz_error err = {0};
    cz_model *m = NULL;
    cz_cluster *cl = NULL;
    cz_plan *plan = NULL;
    cz_settings st;
    cz_settings_init(&st);
    ck_assert_msg(cz_model_load(&m, path_of("models", "test-small", a, sizeof a), &err) == CZ_OK,
                  "%s", err.message);
    ck_assert_msg(cz_cluster_load(&cl, path_of("clusters", cluster, b, sizeof b), &err) == CZ_OK,
                  "%s", err.message);
    ck_assert_msg(cz_plan_build(&plan, m, cl, &st, &err) == CZ_OK, "%s", err.message);
    cz_cluster_free(cl);
    cz_model_free(m);
    return plan;
}

static cz_plan *small_plan(void)
{
    return plan_on("cpu-4-dp2-tp2");
}

#define BUF 869888LL
#define ELEM 263680LL
#define SPLIT 1179648LL
#define REPL 16384LL

START_TEST(hand_count_fp32)
{
    cz_plan *plan = small_plan();
    cz_error err = {0};
    cz_step_bytes all;
    memset(&all, 0, sizeof all);
    for (int t = 0; t < 2; t++) {
        cz_step_bytes tp_sum;
        memset(&tp_sum, 0, sizeof tp_sum);
        for (int d = 0; d < 2; d++) {
            cz_step_bytes b;
            ck_assert_msg(cz__step_bytes(plan, d, t, CZ_DTYPE_FP32, 5, &b, &err) == CZ_OK, "%s",
                          err.message);
            ck_assert_int_eq(b.buffer, BUF);
            ck_assert_int_eq(b.read[CZ_PASS_RS_WIRE], 4 * BUF);
            ck_assert_int_eq(b.write[CZ_PASS_AG_WIRE], 4 * BUF);
            /* fp32 flat buffers: no staging, no narrowing, no master copy. */
            ck_assert_int_eq(b.read[CZ_PASS_STAGE_IN] + b.read[CZ_PASS_RS_NARROW] +
                                 b.read[CZ_PASS_AG_NARROW] + b.read[CZ_PASS_AG_WIDEN] +
                                 b.read[CZ_PASS_MASTER_OUT],
                             0);
            int64_t tr = 0, tw = 0;
            for (int p = 0; p < CZ_NPASSES; p++) {
                tp_sum.read[p] += b.read[p];
                tp_sum.write[p] += b.write[p];
                all.read[p] += b.read[p];
                all.write[p] += b.write[p];
                tr += b.read[p];
                tw += b.write[p];
            }
            ck_assert_int_eq(tr, b.total_read);
            ck_assert_int_eq(tw, b.total_write);
        }
        ck_assert_int_eq(tp_sum.write[CZ_PASS_RS_WIRE], 4 * BUF);
        ck_assert_int_eq(tp_sum.read[CZ_PASS_AG_WIRE], 4 * BUF);
        ck_assert_int_eq(tp_sum.read[CZ_PASS_RS_AVERAGE], 4 * BUF);
        ck_assert_int_eq(tp_sum.write[CZ_PASS_RS_AVERAGE], 4 * BUF);
        ck_assert_int_eq(tp_sum.read[CZ_PASS_GRAD_NORM], 4 * BUF);
        ck_assert_int_eq(tp_sum.read[CZ_PASS_ELEMENTWISE], 16 * ELEM);
        ck_assert_int_eq(tp_sum.write[CZ_PASS_ELEMENTWISE], 12 * ELEM);
    }
    ck_assert_int_eq(all.read[CZ_PASS_GATHER_PACK], 4 * SPLIT);
    ck_assert_int_eq(all.write[CZ_PASS_GATHER_PACK], 4 * SPLIT);
    ck_assert_int_eq(all.read[CZ_PASS_UNPACK], 4 * (SPLIT + REPL));
    ck_assert_int_eq(all.read[CZ_PASS_MOMENTUM], 8 * (SPLIT + REPL));
    ck_assert_int_eq(all.write[CZ_PASS_MOMENTUM], 8 * (SPLIT + REPL));
    ck_assert_int_eq(all.read[CZ_PASS_SCATTER_PACK], 4 * (SPLIT + 2 * REPL));
    ck_assert_int_eq(all.read[CZ_PASS_APPLY], 8 * (SPLIT + 2 * REPL));
    ck_assert_int_eq(all.write[CZ_PASS_APPLY], 4 * (SPLIT + 2 * REPL));
    ck_assert_int_eq(all.read[CZ_PASS_NS_LOAD], 9568256);
    ck_assert_int_eq(all.write[CZ_PASS_NS_LOAD], 4784128);
    ck_assert_int_eq(all.read[CZ_PASS_NS_STORE], 4784128);
    ck_assert_int_eq(all.read[CZ_PASS_NS_GEMM], 129761280);
    ck_assert_int_eq(all.write[CZ_PASS_NS_GEMM], 52920320);
    cz_plan_free(plan);
}
END_TEST

/* A bf16 job: gradients widened in (2 bytes read, 4 written an element), each bucket narrowed to
 * the wire (4, 2), the collectives in bf16 (2 an element), the master copy narrowed out (4, 2);
 * Newton-Schulz's GEMM operands in bf16, half the fp32 figure. */
START_TEST(hand_count_bf16)
{
    cz_plan *plan = small_plan();
    cz_error err = {0};
    cz_step_bytes b, f;
    ck_assert_msg(cz__step_bytes(plan, 1, 0, CZ_DTYPE_BF16, 5, &b, &err) == CZ_OK, "%s",
                  err.message);
    ck_assert_msg(cz__step_bytes(plan, 1, 0, CZ_DTYPE_FP32, 5, &f, &err) == CZ_OK, "%s",
                  err.message);
    ck_assert_int_eq(b.read[CZ_PASS_STAGE_IN], 2 * BUF);
    ck_assert_int_eq(b.write[CZ_PASS_STAGE_IN], 4 * BUF);
    ck_assert_int_eq(b.read[CZ_PASS_RS_NARROW], 4 * BUF);
    ck_assert_int_eq(b.write[CZ_PASS_RS_NARROW], 2 * BUF);
    ck_assert_int_eq(b.read[CZ_PASS_RS_WIRE], 2 * BUF);
    ck_assert_int_eq(b.write[CZ_PASS_AG_WIRE], 2 * BUF);
    ck_assert_int_eq(b.read[CZ_PASS_MASTER_OUT], 4 * BUF);
    ck_assert_int_eq(b.write[CZ_PASS_MASTER_OUT], 2 * BUF);
    /* My range narrowed, the other rank's widened: together the buffer. */
    ck_assert_int_eq(b.read[CZ_PASS_AG_NARROW] / 4 + b.read[CZ_PASS_AG_WIDEN] / 2, BUF);
    ck_assert_int_eq(2 * b.read[CZ_PASS_NS_GEMM], f.read[CZ_PASS_NS_GEMM]);
    ck_assert_int_eq(b.read[CZ_PASS_APPLY], f.read[CZ_PASS_APPLY]);
    cz_plan_free(plan);
}
END_TEST

/* On cpu-1 (DP1 x TP1) nothing leaves the GPU: no micro-group packs (the unpack reads every
 * matrix element from the gradients, the apply every update from full_u: SPLIT + REPL each) and
 * no DP exchange. */
START_TEST(one_rank_planes)
{
    cz_plan *plan = plan_on("cpu-1");
    cz_error err = {0};
    for (int k = 0; k < 2; k++) {
        cz_step_bytes b;
        cz_dtype dt = k ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32;
        ck_assert_msg(cz__step_bytes(plan, 0, 0, dt, 5, &b, &err) == CZ_OK, "%s", err.message);
        ck_assert_int_eq(b.read[CZ_PASS_GATHER_PACK] + b.write[CZ_PASS_GATHER_PACK], 0);
        ck_assert_int_eq(b.read[CZ_PASS_SCATTER_PACK] + b.write[CZ_PASS_SCATTER_PACK], 0);
        ck_assert_int_eq(b.read[CZ_PASS_UNPACK], 4 * (SPLIT + REPL));
        ck_assert_int_eq(b.write[CZ_PASS_UNPACK], 4 * (SPLIT + REPL));
        ck_assert_int_eq(b.read[CZ_PASS_APPLY], 8 * (SPLIT + REPL));
        ck_assert_int_eq(b.write[CZ_PASS_APPLY], 4 * (SPLIT + REPL));
        /* Nor the DP exchanges: a bf16 job stages in and writes the master copy out, nothing
         * more over the buckets. */
        for (int p = CZ_PASS_RS_NARROW; p <= CZ_PASS_RS_AVERAGE; p++)
            ck_assert_int_eq(b.read[p] + b.write[p], 0);
        for (int p = CZ_PASS_AG_NARROW; p <= CZ_PASS_AG_WIDEN; p++)
            ck_assert_int_eq(b.read[p] + b.write[p], 0);
        ck_assert_int_eq(b.read[CZ_PASS_STAGE_IN], k ? 2 * b.buffer : 0);
        ck_assert_int_eq(b.write[CZ_PASS_MASTER_OUT], k ? 2 * b.buffer : 0);
    }
    cz_plan_free(plan);
}
END_TEST

/* What the model does not cover is refused by name. */
START_TEST(refusals)
{
    cz_plan *plan = small_plan();
    cz_error err = {0};
    cz_step_bytes b;
    ck_assert_int_eq(cz__step_bytes(plan, 2, 0, CZ_DTYPE_FP32, 5, &b, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "not in the plan's DP2 x TP2"));
    plan->settings.optimizer = CZ_OPTIM_SOAP;
    ck_assert_int_eq(cz__step_bytes(plan, 0, 0, CZ_DTYPE_FP32, 5, &b, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "Muon"));
    cz_plan_free(plan);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("step_bytes");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, hand_count_fp32);
    tcase_add_test(tc, hand_count_bf16);
    tcase_add_test(tc, one_rank_planes);
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
