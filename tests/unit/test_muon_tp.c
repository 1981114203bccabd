/* Megatron-LM's TP modes for Muon (cost.c cz__cost_muon_tp, simulate.c): costs worked out by hand
 * on the test cluster (1 TFLOP/s, 1 GB/s memory, 100 GB/s and 5 us inside a node). */
#include "cz_test_util.h"

#include <check.h>
#include <math.h>

/* w: 64 x 128, rows split over TP 2 (tp_dim 0): local shard 32 x 128, Muon, 5 NS steps, bf16
 * (14 bytes of elementwise traffic per element). */
static cz_model *one_matrix(void)
{
    cz_model *m = czt_model_new("one", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "w", 64, 128, 0, CZ_KIND_MATRIX, -1);
    return m;
}

static cz_param_def *def_of(cz_model *m)
{
    return &m->params[0];
}

START_TEST(costs_by_hand)
{
    cz_model *m = one_matrix();
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    /* duplicated: the whole 64 x 128 matrix, a = 64, b = 128:
     * 5 (4 * 64^2 * 128 + 2 * 64^3) FLOPs + 8192 * 14 bytes. */
    double dup = 5.0 * (4.0 * 64 * 64 * 128 + 2.0 * 64 * 64 * 64) / 1e12 + 8192.0 * 14 / 1e9;
    /* blockwise: the 32 x 128 shard alone, a = 32, b = 128. */
    double blk = 5.0 * (4.0 * 32 * 32 * 128 + 2.0 * 32 * 32 * 32) / 1e12 + 4096.0 * 14 / 1e9;
    /* distributed: the Gram is over the unsplit dimension K = 128 although it is the larger
     * one: 5 (4 K^2 L / tp + 2 K^3) with L = 64, tp 2; 5 Gram all-reduces of 128^2 bf16. */
    double dis = 5.0 * (4.0 * 128 * 128 * 32 + 2.0 * 128 * 128 * 128) / 1e12 + 4096.0 * 14 / 1e9;
    cz_muon_tp_work w = cz__cost_muon_tp(def_of(m), &s, c, CZ_DTYPE_BF16, CZ_MUON_TP_DUPLICATED);
    ck_assert_double_eq_tol(w.seconds, dup, 1e-15);
    ck_assert_int_eq(w.grams, 0);
    w = cz__cost_muon_tp(def_of(m), &s, c, CZ_DTYPE_BF16, CZ_MUON_TP_BLOCKWISE);
    ck_assert_double_eq_tol(w.seconds, blk, 1e-15);
    ck_assert_int_eq(w.grams, 0);
    w = cz__cost_muon_tp(def_of(m), &s, c, CZ_DTYPE_BF16, CZ_MUON_TP_DISTRIBUTED);
    ck_assert_double_eq_tol(w.seconds, dis, 1e-15);
    ck_assert_int_eq(w.grams, 5);
    ck_assert_double_eq(w.gram_bytes, 128.0 * 128 * 2);
    ck_assert_int_eq(w.scalar_allreduce, 1);

    /* Replicated (tp_dim -1): every mode runs the whole matrix on every rank. */
    def_of(m)->tp_dim = -1;
    w = cz__cost_muon_tp(def_of(m), &s, c, CZ_DTYPE_BF16, CZ_MUON_TP_DISTRIBUTED);
    ck_assert_double_eq_tol(w.seconds, dup, 1e-15);
    ck_assert_int_eq(w.grams, 0);

    /* Two 32-row blocks along the split dimension. As gate / up, every rank holds half of each
     * block (16 x 128): distributed is per block 5 (4 * 128^2 * 16 + 2 * 128^3) with 5 Grams
     * each of 128^2; blockwise is NS on each 16 x 128 slice. */
    def_of(m)->tp_dim = 0;
    int64_t blocks[2] = {32, 32};
    czt_model_blocks(m, 0, 0, 2, blocks);
    double slice = 2048.0 * 14 / 1e9;
    w = cz__cost_muon_tp(def_of(m), &s, c, CZ_DTYPE_BF16, CZ_MUON_TP_DISTRIBUTED);
    ck_assert_double_eq_tol(
        w.seconds, 2 * (5.0 * (4.0 * 128 * 128 * 16 + 2.0 * 128 * 128 * 128) / 1e12 + slice),
        1e-15);
    ck_assert_int_eq(w.grams, 10);
    ck_assert_double_eq(w.gram_bytes, 128.0 * 128 * 2);
    w = cz__cost_muon_tp(def_of(m), &s, c, CZ_DTYPE_BF16, CZ_MUON_TP_BLOCKWISE);
    ck_assert_double_eq_tol(
        w.seconds, 2 * (5.0 * (4.0 * 16 * 16 * 128 + 2.0 * 16 * 16 * 16) / 1e12 + slice), 1e-15);
    /* As a fused QKV of two query groups, each rank holds one whole group (32 x 128): 1 / tp of
     * the whole cost, no communication. */
    free(def_of(m)->name);
    def_of(m)->name = cz__strdup("decoder.layers.0.self_attention.linear_qkv.weight");
    double one_block = 5.0 * (4.0 * 32 * 32 * 128 + 2.0 * 32 * 32 * 32) / 1e12 + 4096.0 * 14 / 1e9;
    w = cz__cost_muon_tp(def_of(m), &s, c, CZ_DTYPE_BF16, CZ_MUON_TP_DISTRIBUTED);
    ck_assert_double_eq_tol(w.seconds, one_block, 1e-15);
    ck_assert_int_eq(w.grams, 0);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

static double ar(double bytes) /* all-reduce over 2 ranks in a node */
{
    return 2.0 * 5e-6 + bytes / 100e9;
}

START_TEST(simulated_by_hand)
{
    /* DP 1 (no DP sync), TP 2, anchored + sc: the update is the TP collective then the compute.
     * duplicated: all-gather of the 32 x 128 shards, fp32 on the wire (5 us + 16384 bytes /
     * 100 GB/s: Megatron gathers its fp32 main gradients, the executor its fp32 ones), then the
     * whole matrix; blockwise: the shard, no collective; distributed: 5 Gram all-reduces of
     * 32 KiB and one 4-byte norm all-reduce, then its compute. */
    cz_model *m = one_matrix();
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    s.dp = CZ_DP_ANCHORED;
    s.tp = CZ_TP_SC;
    cz_plan *plan = NULL;
    cz_error err;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    const cz_muon_tp_mode modes[3] = {CZ_MUON_TP_DUPLICATED, CZ_MUON_TP_BLOCKWISE,
                                      CZ_MUON_TP_DISTRIBUTED};
    const double comm[3] = {5e-6 + 16384.0 / 100e9, 0.0, 5 * ar(32768.0) + ar(4.0)};
    for (int k = 0; k < 3; k++) {
        cz_sim_options o = CZ_SIM_OPTIONS_INIT;
        o.muon_tp = modes[k];
        cz_sim_result *r = NULL;
        ck_assert_msg(cz_plan_simulate(&r, plan, c, &o, &err) == CZ_OK, "%s", err.message);
        double compute = cz__cost_muon_tp(def_of(m), &s, c, CZ_DTYPE_BF16, modes[k]).seconds;
        ck_assert_msg(fabs(r->local_s - (comm[k] + compute)) < 1e-15,
                      "mode %s: local %.12g, expected %.12g", cz_muon_tp_mode_name(modes[k]),
                      r->local_s, comm[k] + compute);
        ck_assert_double_eq_tol(r->tp_comm_s, comm[k], 1e-15);
        cz_sim_result_free(r);
    }
    cz_plan_free(plan);

    /* Only sc plans have a TP mode: Canzona's micro-groups are refused. */
    s.tp = CZ_TP_ROLLBACK;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    cz_sim_options o = CZ_SIM_OPTIONS_INIT;
    o.muon_tp = CZ_MUON_TP_BLOCKWISE;
    cz_sim_result *r = NULL;
    ck_assert_int_eq(cz_plan_simulate(&r, plan, c, &o, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "blockwise"));
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(names)
{
    cz_muon_tp_mode v = CZ_MUON_TP_DUPLICATED;
    ck_assert_int_eq(cz_muon_tp_mode_parse("distributed", &v), CZ_OK);
    ck_assert_int_eq(v, CZ_MUON_TP_DISTRIBUTED);
    ck_assert_int_eq(cz_muon_tp_mode_parse("sc", &v), CZ_EINVALID);
    ck_assert_str_eq(cz_muon_tp_mode_name(CZ_MUON_TP_BLOCKWISE), "blockwise");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("muon_tp");
    TCase *tc = tcase_create("modes");
    tcase_add_test(tc, costs_by_hand);
    tcase_add_test(tc, simulated_by_hand);
    tcase_add_test(tc, names);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
