/* Block and cooperative tasks: the cooperative cost model and its pipelined Gram all-reduces,
 * the ring all-reduce, the per-task choice of --coop auto and --coop K, block tasks under
 * --split-blocks and the bounds (average load, split lower bound, atomic lower bound), on cases
 * worked by hand.
 *
 * The test cluster (czt_cluster_new) runs 1 TFLOP/s and 1 GB/s of memory, 100 GB/s inside a
 * node (8 GPUs), 25 GB/s across, 5 us per message. Muon, 5 Newton-Schulz steps, bf16 (d = 2):
 * a hosted m x n matrix (a = min, b = max) costs 5 (4 a^2 b + 2 a^3) 1e-12 s of matmuls plus
 * 14 m n 1e-9 s of elementwise traffic (8 + 3 d bytes per element).
 *
 * Cooperatively over k slots (slices of s = b / k) each slot, per iteration, computes the Gram's
 * upper triangle in P row panels (the task's count: cz__coop_time_of and cz__cost_coop_panels take
 * it, cz__cost_coop charges the least-cost one, cz__coop_best_panels), panel p (rows r_p .. r_{p+1}
 * - 1, h_p of
 * them) one GEMM of 2 h_p (a - r_p) s FLOPs, posting each panel's all-reduce (4 bytes per packed
 * element) on one channel as soon as it is computed; then the polynomial: A(AX) when s < a (the
 * rows of Y of panel p, 2 h_p a s, once panel p is summed; then Z, 2 a^2 s), else the standard
 * form once every panel is in (2 a^3 + 2 a^2 s). The slot pays 5 iterations, 14 m n / k 1e-9 s
 * of elementwise traffic, and one norm all-reduce of 8 bytes.
 *
 * Every a = 1000 case below is cheapest at P = 8 (coop_best_panels says why), so cz__cost_coop
 * is its P = 8 cost. For a = 1000, P = 8: the packed triangle has 500500 elements, 62562.5 per
 * panel, so panel p starts at the first row whose packed offset i a - i (i - 1) / 2 reaches
 * ceil(62562.5 p): rows 0, 65, 135, 210, 294, 388, 501, 647, 1000 (h = 65, 70, 75, 84, 94, 113,
 * 146, 353). The panels hold 62920, 63035, 62100, 62874, 61993, 62828, 62269, 62481 elements, i.e.
 * 251680, 252140, 248400, 251496, 247972, 251312, 249076, 249924 bytes (2002000 = 2 a (a + 1) in
 * all), and sum_p h_p (a - r_p) = 65 1000 + 70 935 + 75 865 + 84 790 + 94 706 + 113 612 + 146 499 +
 * 353 353 = 594668, so the Gram costs 1189336 s FLOPs per slot (the full product: 2 a^2 s =
 * 2000000 s). Over k = 2 an all-reduce of B bytes takes 2 messages, 1e-5 s, plus B / 100 GB/s:
 * 1.25e-5 s or so, while every Gram panel below takes at least 2 64875 s FLOPs (panel 2;
 * s >= 750 here: 97 us): each all-reduce ends before the next panel, and only the last one,
 * 1e-5 + 249924 / 1e11 = 1.249924e-5 s, is left when the Gram ends. The standard form waits for
 * it every iteration: 5 x 1.249924e-5 = 6.24962e-5 s, plus the norm's 1e-5 + 8 / 1e11 =
 * 1.000008e-5 s. */
#include "cz_algorithms.h"
#include "cz_analysis.h"
#include "cz_test_util.h"

#include <check.h>
#include <jansson.h>
#include <math.h>

#define EQ(a, b) ck_assert_double_eq_tol((a), (b), 1e-9 * fabs(b) + 1e-15)

/* 1000 x 64000: hosted 5 (4e6 64000 + 2e9) 1e-12 = 1.29 s + 14 * 64e6 1e-9 = 0.896 s. */
#define BIG_HOSTED 2.186
/* Exposed communication of a = 1000 over 2 slots in the standard form (above). */
#define COOP2_EXPOSED (6.24962e-5 + 1.000008e-5)
/* 1000 x 64000 over 2 slots: s = 32000 >= a, the standard form. Per iteration the Gram
 * 594668 * 2 * 32000 = 3.8058752e10 FLOPs and the polynomial 2e9 + 2e6 32000 = 6.6e10:
 * 5 * 1.04058752e11 1e-12 = 0.52029376 s; elementwise 14 * 32e6 1e-9 = 0.448 s; compute
 * 0.96829376 s, plus the exposed 7.249628e-5 s = 0.96836625628 s. */
#define BIG_COOP2 (0.96829376 + COOP2_EXPOSED)
/* 1000 x 16000 over 2 slots: s = 8000, the standard form: Gram 594668 * 2 * 8000 = 9.514688e9
 * and polynomial 2e9 + 2e6 8000 = 1.8e10 per iteration, 5 * 2.7514688e10 1e-12 = 0.13757344 s;
 * elementwise 14 * 8e6 1e-9 = 0.112 s; the same exposed communication (a is the same). */
#define MID_COOP2 (0.24957344 + COOP2_EXPOSED)
/* 1000 x 2000: hosted 5 (4e6 2000 + 2e9) 1e-12 = 0.05 s + 14 * 2e6 1e-9 = 0.028 s. */
#define WIDE_HOSTED 0.078
/* Over 2 slots: s = 1000 = a, still the standard form: Gram 594668 * 2 * 1000 = 1.189336e9 and
 * polynomial 2e9 + 2e9 per iteration, 5 * 5.189336e9 1e-12 = 0.02594668 s; elementwise 14 * 1e6
 * 1e-9 = 0.014 s; exposed as above (the smallest panel, 2 64875 1000 FLOPs, takes 130 us). */
#define WIDE_COOP2 (0.03994668 + COOP2_EXPOSED)
/* 1000 x 1500: hosted 5 (4e6 1500 + 2e9) 1e-12 = 0.04 s + 14 * 1.5e6 1e-9 = 0.021 s. */
#define SMALL_HOSTED 0.061
/* Over 2 slots: s = 750 < a, the A(AX) form. Per iteration the Gram 594668 * 2 * 750 =
 * 8.92002e8, Y 2e6 750 = 1.5e9 (panel by panel: 2 h_p 1000 750 = 9.75e7 for panel 0 and more
 * for the others) and Z 1.5e9: 5 * 3.892002e9 1e-12 = 0.01946001 s; elementwise 14 * 750000
 * 1e-9 = 0.0105 s. Nothing waits: the last panel's all-reduce (1.249924e-5 s) starts when the
 * Gram ends and runs while Y's rows of panels 0 .. 6 compute (panel 0's alone take 97.5 us),
 * each earlier all-reduce ended during the Gram. Only the norm's 1.000008e-5 s is exposed. */
#define SMALL_COOP2 (0.02996001 + 1.000008e-5)

typedef struct {
    int64_t rows, cols;
} shape;

/* One DP rank, tp slots, Muon in seconds, the given matrices (no blocks). */
static cz_plan *plan_of(const shape *mats, int n, int tp, int coop, int split, cz_cluster **cout)
{
    cz_model *m = czt_model_new("coop", CZ_DTYPE_BF16, 0);
    char name[16];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "m%d", i);
        czt_model_add(m, name, mats[i].rows, mats[i].cols, -1, CZ_KIND_MATRIX, -1);
    }
    cz_cluster *c = czt_cluster_new(1, tp, 1);
    cz_settings s;
    cz_settings_init(&s);
    s.coop = coop;
    s.split_blocks = split;
    cz_plan *plan = NULL;
    cz_error err;
    int rc = cz_plan_build(&plan, m, c, &s, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    cz_model_free(m);
    if (cout)
        *cout = c;
    else
        cz_cluster_free(c);
    return plan;
}

/* The width, first slot and per-slot cost of parameter id's (only) task in the plan. */
static void task_of(const cz_plan *plan, int id, int *width, int *slot, double *cost)
{
    *width = 0;
    for (int g = 0; g < plan->schedules[0].ngroups; g++) {
        const cz_plan_group *gr = &plan->schedules[0].groups[g];
        for (int t = 0; t < gr->ntasks; t++)
            if (gr->task_param[t] == id) {
                *width = cz_group_task_width(gr, t);
                *slot = gr->task_slot[t];
                *cost = gr->task_cost ? gr->task_cost[t] : plan->params[id].cost;
            }
    }
    ck_assert_msg(*width > 0, "parameter %d has no task", id);
}

/* The Gram panel count the plan records for parameter id's (only) task. */
static int panels_of(const cz_plan *plan, int id)
{
    for (int g = 0; g < plan->schedules[0].ngroups; g++) {
        const cz_plan_group *gr = &plan->schedules[0].groups[g];
        for (int t = 0; t < gr->ntasks; t++)
            if (gr->task_param[t] == id)
                return cz_group_task_panels(gr, t);
    }
    ck_abort_msg("parameter %d has no task", id);
    return 0;
}

START_TEST(allreduce_ring)
{
    cz_cluster *c = czt_cluster_new(1, 4, 1);
    /* k = 4 inside a node: 2 (4 - 1) = 6 messages of 5 us = 3e-5 s, and 6 / 4 of 1e6 bytes
     * through 100 GB/s = 1.5e-5 s. */
    EQ(cz__cost_allreduce_seconds(1e6, 4, c), 4.5e-5);
    /* One rank: nothing to reduce. */
    ck_assert_double_eq(cz__cost_allreduce_seconds(1e6, 1, c), 0.0);
    /* A TP group wider than a node goes through the inter-node links: 3e-5 + 1.5e6 / 25e9. */
    c->tp = 16;
    EQ(cz__cost_allreduce_seconds(1e6, 4, c), 3e-5 + 6e-5);
    cz_cluster_free(c);
}
END_TEST

START_TEST(coop_cost_by_hand)
{
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    EQ(cz__cost_coop(1000, 64000, 2, &s, c, CZ_DTYPE_BF16), BIG_COOP2);
    /* The orientation does not matter: the slices run along the long side either way. */
    EQ(cz__cost_coop(64000, 1000, 2, &s, c, CZ_DTYPE_BF16), BIG_COOP2);
    EQ(cz__cost_coop(1000, 16000, 2, &s, c, CZ_DTYPE_BF16), MID_COOP2);
    cz_param_def d = {0};
    d.name = "p", d.ndim = 2, d.shape[0] = 1000, d.shape[1] = 64000, d.kind = CZ_KIND_MATRIX;
    d.block_dim = -1, d.tp_dim = -1;
    EQ(cz__cost_block(&d, -1, &s, c, CZ_DTYPE_BF16), BIG_HOSTED);
    EQ(cz__cost_coop(1000, 2000, 2, &s, c, CZ_DTYPE_BF16), WIDE_COOP2);
    d.shape[1] = 2000;
    EQ(cz__cost_block(&d, -1, &s, c, CZ_DTYPE_BF16), WIDE_HOSTED);
    d.shape[1] = 1500;
    EQ(cz__cost_block(&d, -1, &s, c, CZ_DTYPE_BF16), SMALL_HOSTED);
    /* In FLOPs, the exposed communication counts as the FLOPs the device could have done
     * meanwhile: 5 * 1.04058752e11 + 10 * 32e6 = 5.2061376e11 FLOPs, plus 7.249628e-5 s at
     * 1e12 FLOP/s. */
    s.unit = CZ_UNIT_FLOPS;
    EQ(cz__cost_coop(1000, 64000, 2, &s, c, CZ_DTYPE_BF16), 5.2061376e11 + COOP2_EXPOSED * 1e12);
    cz_cluster_free(c);
}
END_TEST

START_TEST(coop_cost_polynomial_form)
{
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    /* 1000 x 1500 over 2: slices of b / k = 750 < a = 1000, the A(AX) form, whose rows of Y
     * hide every Gram all-reduce (SMALL_COOP2): 0.02996001 + 1.000008e-5 s. */
    EQ(cz__cost_coop(1000, 1500, 2, &s, c, CZ_DTYPE_BF16), SMALL_COOP2);
    /* 1000 x 4000 over 2: slices of 2000 >= a, the standard form: Gram 594668 * 2 * 2000 =
     * 2.378672e9 and polynomial 2e9 + 2e6 2000 = 6e9 per iteration, 5 * 8.378672e9 1e-12 =
     * 0.04189336 s; elementwise 14 * 2e6 1e-9 = 0.028 s; the last panel's all-reduce exposed
     * every iteration (COOP2_EXPOSED). */
    EQ(cz__cost_coop(1000, 4000, 2, &s, c, CZ_DTYPE_BF16), 0.06989336 + COOP2_EXPOSED);
    /* In FLOPs the A(AX) case is 5 * 3.892002e9 + 10 * 750000 = 1.946751e10 plus the norm's
     * all-reduce at 1e12 FLOP/s. */
    s.unit = CZ_UNIT_FLOPS;
    EQ(cz__cost_coop(1000, 1500, 2, &s, c, CZ_DTYPE_BF16), 1.946751e10 + 1.000008e-5 * 1e12);
    cz_cluster_free(c);
}
END_TEST

/* An all-reduce of `bytes` at *(double *)ctx seconds per byte, without latency. */
static double per_byte(double bytes, const void *ctx)
{
    return bytes * *(const double *)ctx;
}

/* cz__cost_coop is cz__cost_coop_panels at the count cz__coop_best_panels returns, the least over
 * 1 .. min(8, a) (counts that would leave a panel empty aside). */
static void assert_best_is_least(int64_t m, int64_t n, int k, const cz_settings *s,
                                 const cz_cluster *c)
{
    int64_t a = m < n ? m : n;
    int best = cz__coop_best_panels(m, n, k, s, c, CZ_DTYPE_BF16);
    double at_best = cz__cost_coop_panels(m, n, k, best, s, c, CZ_DTYPE_BF16);
    ck_assert_int_ge(best, 1);
    ck_assert_int_le(best, a < CZ_COOP_MAX_PANELS ? a : CZ_COOP_MAX_PANELS);
    ck_assert_double_eq(cz__cost_coop(m, n, k, s, c, CZ_DTYPE_BF16), at_best);
    for (int p = 1; p <= CZ_COOP_MAX_PANELS && p <= (a + 1) / 2; p++)
        ck_assert_msg(cz__cost_coop_panels(m, n, k, p, s, c, CZ_DTYPE_BF16) >= at_best,
                      "%lldx%lld over %d: %d panels cost less than the best, %d", (long long)m,
                      (long long)n, k, p, best);
}

START_TEST(coop_best_panels)
{
    cz_settings s;
    cz_settings_init(&s);
    /* More panels than one pays where the computation hides the all-reduces: 1000 x 64000
     * over 2 (the standard form, BIG_COOP2) is cheapest at 8. Every all-reduce but the last
     * (about 12.5 us each over 2 inside a node) ends while the next panel computes (97 us and
     * more), so an extra panel adds no exposed latency; meanwhile more panels skip more of the
     * Gram below the diagonal (sum_p h_p (a - r_p): 1e6 row-column pairs at P = 1, 594668 at
     * P = 8) and shrink the last panel, the one all-reduce the polynomial waits for (2002000 B
     * at P = 1, 249924 B at P = 8). One panel: Gram 2e6 32000 = 6.4e10 and polynomial 6.6e10
     * FLOPs per iteration, 5 * 1.3e11 1e-12 = 0.65 s, + 0.448 s elementwise, + 5 (1e-5 +
     * 2002000 / 1e11) = 1.501e-4 s exposed, + the norm's 1.000008e-5 s: 1.09816010008 s, against
     * 0.96836625628 s at 8. */
    cz_cluster *c2 = czt_cluster_new(1, 2, 1);
    ck_assert_int_eq(cz__coop_best_panels(1000, 64000, 2, &s, c2, CZ_DTYPE_BF16), 8);
    EQ(cz__cost_coop_panels(1000, 64000, 2, 1, &s, c2, CZ_DTYPE_BF16), 1.09816010008);
    EQ(cz__cost_coop_panels(1000, 64000, 2, 8, &s, c2, CZ_DTYPE_BF16), BIG_COOP2);
    EQ(cz__cost_coop(1000, 64000, 2, &s, c2, CZ_DTYPE_BF16), BIG_COOP2);
    /* One panel where nothing hides the latencies: 64 x 4096 over 8 (s = 512 >= a = 64, the
     * standard form). An all-reduce over 8 costs 14 messages of 5 us, 70 us, while the whole
     * Gram computes in 2 64^2 512 = 4194304 FLOPs, 4.2 us: the panels' all-reduces queue on the
     * channel and the polynomial waits for them all, so each panel past the first adds about
     * 70 us per iteration and saves under 4.2 us of Gram. At P = 1: computation 5 (4194304 +
     * 2 64^3 + 2 64^2 512 = 8912896) FLOPs, 4.456448e-5 s, + 32768 elements of 14 B at 1 GB/s,
     * 4.58752e-4 s; exposed 5 (7e-5 + 14 / 8 8320 / 1e11) = 3.50728e-4 s + the norm's 7.000014e-5
     * s: 9.2404462e-4 s. */
    cz_cluster *c8 = czt_cluster_new(1, 8, 1);
    ck_assert_int_eq(cz__coop_best_panels(64, 4096, 8, &s, c8, CZ_DTYPE_BF16), 1);
    EQ(cz__cost_coop(64, 4096, 8, &s, c8, CZ_DTYPE_BF16), 9.2404462e-4);
    ck_assert(cz__cost_coop_panels(64, 4096, 8, 2, &s, c8, CZ_DTYPE_BF16) > 9.2404462e-4 + 6e-5);
    /* The best is the least, in time and in FLOPs, on shapes on both sides of the turn. */
    static const int64_t shapes[][3] = {
        {1000, 64000, 2}, {1000, 1500, 2}, {1000, 2000, 2}, {64, 4096, 8}, {256, 4096, 8},
        {1024, 4096, 8},  {4096, 1024, 4}, {16, 24, 2},     {8, 8, 2},     {3, 5000, 8}};
    for (int unit = 0; unit < 2; unit++) {
        s.unit = unit ? CZ_UNIT_FLOPS : CZ_UNIT_TIME;
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
            assert_best_is_least(shapes[i][0], shapes[i][1], (int)shapes[i][2], &s,
                                 shapes[i][2] == 2 ? c2 : c8);
    }
    /* The element unit has no communication to hide: one panel. */
    s.unit = CZ_UNIT_NUMEL;
    ck_assert_int_eq(cz__coop_best_panels(1000, 64000, 2, &s, c2, CZ_DTYPE_BF16), 1);
    cz_cluster_free(c2);
    cz_cluster_free(c8);
}
END_TEST

START_TEST(coop_pipeline_by_hand)
{
    /* The counts are given: a = 16, P = 2: 136 packed elements, 68 each; row i starts at 16 i - i
     * (i - 1) / 2, 58 at i = 4 and 70 at i = 5, so panel 1 starts at row 5: panel 0 is rows 0-4 (70
     * elements, 280 B), panel 1 rows 5-15 (66 elements, 264 B). */
    ck_assert_int_eq(cz_coop_panel_row(16, 2, 0), 0);
    ck_assert_int_eq(cz_coop_panel_row(16, 2, 1), 5);
    ck_assert_int_eq(cz_coop_panel_row(16, 2, 2), 16);
    ck_assert_int_eq(cz_coop_packed_before(16, 5), 70);
    ck_assert_int_eq(cz_coop_packed_before(16, 16), 136);
    /* 1 TFLOP/s, 1 GB/s of memory; all-reduces at 5e-12 s per byte: 1.4e-9 s (panel 0),
     * 1.32e-9 s (panel 1), 4e-11 s (the norm). */
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    double fast = 5e-12, slow = 1e-11;
    /* 16 x 24 over 2: s = 12 < 16, A(AX). FLOPs per iteration: Gram panel 0 2 5 16 12 = 1920,
     * panel 1 2 11 11 12 = 2904 (4824, not 2 a^2 s = 6144); Y rows 2 5 16 12 = 1920 and
     * 2 11 16 12 = 4224; Z 2 256 12 = 6144: 17112 FLOPs, 1.7112e-8 s. The clocks (ns):
     *   G0 tc 1.92; its all-reduce 1.92 .. 3.32 = done0
     *   G1 tc 4.824; its all-reduce 4.824 .. 6.144 = done1
     *   Y0 max(4.824, 3.32) + 1.92 = 6.744; Y1 max(6.744, 6.144) + 4.224 = 10.968; Z 17.112.
     * Nothing waits: the exposed time is the norm's 4e-11 s. Elementwise: 192 elements of the
     * slice, 14 B each, 2688 B at 1 GB/s = 2.688e-6 s. */
    cz_coop_time t = cz__coop_time_of(16, 24, 2, 2, &s, c, CZ_DTYPE_BF16, per_byte, &fast);
    EQ(t.flops, 5 * 17112.0);
    EQ(t.ew_flops, 1920.0);
    EQ(t.compute, 5 * 1.7112e-8 + 2.688e-6);
    EQ(t.exposed, 4e-11);
    EQ(t.total, t.compute + t.exposed);
    EQ(t.comm, 5 * (1.4e-9 + 1.32e-9) + 4e-11);
    /* At 1e-11 s per byte (2.8 and 2.64 ns): done0 = 1.92 + 2.8 = 4.72, done1 = max(4.824,
     * 4.72) + 2.64 = 7.464; Y0 ends 6.744, Y1 waits for done1: 7.464 + 4.224 = 11.688, Z
     * 17.832. 0.72 ns exposed per iteration: 5 0.72e-9 + the norm's 8e-11 = 3.68e-9 s. */
    t = cz__coop_time_of(16, 24, 2, 2, &s, c, CZ_DTYPE_BF16, per_byte, &slow);
    EQ(t.compute, 5 * 1.7112e-8 + 2.688e-6);
    EQ(t.exposed, 3.68e-9);
    /* 16 x 64 over 2: s = 32 >= 16, the standard form. Gram panels 2 5 16 32 = 5120 and
     * 2 11 11 32 = 7744 FLOPs; then 2 16^3 + 2 16^2 32 = 24576: 37440 FLOPs, 3.744e-8 s. At
     * 5e-12 s per byte: G0 5.12 ns, done0 6.52; G1 tc 12.864, its all-reduce 12.864 .. 14.184;
     * the polynomial needs both panels: 14.184 + 24.576 = 38.76. The last panel's all-reduce,
     * 1.32 ns, is exposed in every iteration: 5 1.32e-9 + 4e-11 = 6.64e-9 s. Elementwise: 512
     * elements, 7168 B, 7.168e-6 s. */
    t = cz__coop_time_of(16, 64, 2, 2, &s, c, CZ_DTYPE_BF16, per_byte, &fast);
    EQ(t.flops, 5 * 37440.0);
    EQ(t.compute, 5 * 3.744e-8 + 7.168e-6);
    EQ(t.exposed, 6.64e-9);
    /* All-reduces that cost nothing: the total is the compute exactly. */
    double zero = 0.0;
    t = cz__coop_time_of(16, 64, 2, 2, &s, c, CZ_DTYPE_BF16, per_byte, &zero);
    ck_assert_double_eq(t.exposed, 0.0);
    ck_assert_double_eq(t.total, t.compute);
    cz_cluster_free(c);
}
END_TEST

START_TEST(split_pays_where_it_sets_the_makespan)
{
    /* One 1000 x 64000 matrix on two slots: hosted it keeps one slot busy 2.186 s while the
     * other idles; split over both it takes 0.96836... s on each. Auto splits it. */
    cz_plan *plan = plan_of((shape[]){{1000, 64000}}, 1, 2, CZ_COOP_AUTO, 0, NULL);
    int w, slot;
    double cost;
    task_of(plan, 0, &w, &slot, &cost);
    ck_assert_int_eq(w, 2);
    ck_assert_int_eq(slot, 0);
    ck_assert_int_eq(panels_of(plan, 0), 8); /* the count its cost is for (coop_best_panels) */
    EQ(cost, BIG_COOP2);
    EQ(plan->metrics.tp_makespan, BIG_COOP2);
    /* Bounds: the average is the hosted cost over two GPUs, 1.093 s, which the plan beats: the
     * split Gram computes the upper triangle's panels only (594668 of 1e6 row-column pairs),
     * while the hosted cost counts the whole X X^T. The atomic bound is the hosted task; the
     * split bound the least T with the task within T per slot and its slot time (2 T at width
     * 2, BIG_COOP2 each) within 2 T: T = BIG_COOP2, met by the plan. */
    EQ(plan->metrics.average_load, BIG_HOSTED / 2);
    EQ(plan->metrics.lower_bound, BIG_HOSTED);
    EQ(plan->metrics.split_lower_bound, BIG_COOP2);
    ck_assert(cz__plan_has_split_tasks(plan));
    cz_plan_free(plan);

    /* For the same reason two of them on two slots split too: each slot runs both halves,
     * 2 * 0.96836... = 1.93673... s, against 2.186 s hosted side by side (before the Gram went
     * in panels, 2 * 1.09816... s lost to 2.186 s and this was the case that stayed hosted). */
    plan = plan_of((shape[]){{1000, 64000}, {1000, 64000}}, 2, 2, CZ_COOP_AUTO, 0, NULL);
    for (int id = 0; id < 2; id++) {
        task_of(plan, id, &w, &slot, &cost);
        ck_assert_int_eq(w, 2);
    }
    EQ(plan->metrics.tp_makespan, 2 * BIG_COOP2);
    cz_plan_free(plan);
}
END_TEST

START_TEST(no_split_when_it_costs_more)
{
    /* Two 1000 x 2000 matrices on two slots: hosted side by side, 0.078 s; both split, each
     * slot runs both halves, 2 * 0.04001917628 = 0.08003835256 s: at s = b / k = a the
     * redundant 2 a^3 of A A on both members (and the exposed all-reduces) cost more than the
     * split saves on X X^T and B X. Auto keeps them hosted. */
    cz_plan *plan = plan_of((shape[]){{1000, 2000}, {1000, 2000}}, 2, 2, CZ_COOP_AUTO, 0, NULL);
    int w, slot;
    double cost;
    for (int id = 0; id < 2; id++) {
        task_of(plan, id, &w, &slot, &cost);
        ck_assert_int_eq(w, 1);
    }
    EQ(plan->metrics.tp_makespan, WIDE_HOSTED);
    /* Split bound: at T in [WIDE_COOP2, WIDE_HOSTED) both tasks must split, 4 WIDE_COOP2 =
     * 0.16007... of slot time > 2 T; from T = WIDE_HOSTED they may stay hosted, 2 * 0.078 <=
     * 2 T. */
    EQ(plan->metrics.split_lower_bound, WIDE_HOSTED);
    ck_assert(!cz__plan_has_split_tasks(plan));
    cz_plan_free(plan);

    /* A small matrix on slow links: 8 x 8 hosted costs 5 (4 64 8 + 2 512) 1e-12 + 14 64 1e-9
     * = 9.1136e-7 s, while split (at its best count, one panel: nothing to hide the latencies,
     * and more panels only add more) its six all-reduces alone take 6 * 2 * 5 us = 6e-5 s. */
    plan = plan_of((shape[]){{8, 8}}, 1, 2, CZ_COOP_AUTO, 0, NULL);
    task_of(plan, 0, &w, &slot, &cost);
    ck_assert_int_eq(w, 1);
    EQ(plan->metrics.tp_makespan, 9.1136e-7);
    EQ(plan->metrics.split_lower_bound, 9.1136e-7);
    cz_plan_free(plan);
}
END_TEST

START_TEST(split_only_the_small_task)
{
    /* Two 1000 x 2000 matrices and one 1000 x 1500 on two slots. Hosted: one slot carries a
     * wide one and the small one, 0.078 + 0.061 = 0.139 s. All three split: 2 * 0.04001917628 +
     * 0.02997001008 = 0.11000836264 s. Best: the wide ones hosted side by side and only the
     * small one split over both, 0.078 + 0.02997001008 = 0.10797001008 s, which no uniform
     * target reaches (a target that lets the wide ones stay hosted, 0.078, lets the small one
     * too, 0.061; below it the wide ones split); the descent from all hosted finds it. */
    cz_plan *plan =
        plan_of((shape[]){{1000, 2000}, {1000, 2000}, {1000, 1500}}, 3, 2, CZ_COOP_AUTO, 0, NULL);
    int w, slot;
    double cost;
    task_of(plan, 0, &w, &slot, &cost);
    ck_assert_int_eq(w, 1);
    task_of(plan, 1, &w, &slot, &cost);
    ck_assert_int_eq(w, 1);
    task_of(plan, 2, &w, &slot, &cost);
    ck_assert_int_eq(w, 2);
    EQ(cost, SMALL_COOP2);
    EQ(plan->metrics.tp_makespan, WIDE_HOSTED + SMALL_COOP2);
    cz_plan_free(plan);
}
END_TEST

START_TEST(five_tasks_on_eight_slots)
{
    /* Five 1000 x 64000 matrices on eight slots. Over 8 slots (s = 8000 >= a, the standard
     * form) one costs per slot the compute of MID_COOP2, 0.13757344 s + 14 * 8e6 1e-9 =
     * 0.112 s, and the last panel's all-reduce over 8 every iteration (14 messages of 5 us =
     * 7e-5 s and 14 / 8 * 249924 / 100e9 = 4.37367e-6 s: 7.437367e-5 s, five of them
     * 3.7186835e-4 s; every panel takes over 1 ms) and the norm's (7e-5 + 1.4e-10 s):
     * 0.25001530849 s. Over 4 (s = 16000): Gram 594668 * 2 * 16000 = 1.9029376e10 and
     * polynomial 2e9 + 3.2e10 per iteration, 0.26514688 s, + 14 * 16e6 1e-9 = 0.224 s + 5 * (3e-5
     * + 1.5 * 249924 / 1e11) + 3.000012e-5 = 0.48934562442 s. Hosted: 2.186 (five slots busy);
     * all over 2: five pairs for four, 2 * 0.96836... = 1.93673...; all over 4: 3 * 0.48934... =
     * 1.46803...; all over 8: 5 * 0.25001... = 1.25007... Best: four over a pair each and the
     * fifth over all eight, 0.96836... + 0.25001... = 1.21838..., reached by the descent from
     * "all over 2" (change one task to width 8), a start that scores worst of the uniform
     * targets. */
    const double coop8 = 0.24957344 + 3.7186835e-4 + 7e-5 + 1.4e-10;
    shape five[5];
    for (int i = 0; i < 5; i++)
        five[i] = (shape){1000, 64000};
    cz_plan *plan = plan_of(five, 5, 8, CZ_COOP_AUTO, 0, NULL);
    int w, slot, n2 = 0, n8 = 0;
    double cost;
    for (int id = 0; id < 5; id++) {
        task_of(plan, id, &w, &slot, &cost);
        n2 += w == 2;
        n8 += w == 8;
        EQ(cost, w == 2 ? BIG_COOP2 : coop8);
    }
    ck_assert_int_eq(n2, 4);
    ck_assert_int_eq(n8, 1);
    EQ(plan->metrics.tp_makespan, BIG_COOP2 + coop8);
    cz_plan_free(plan);
}
END_TEST

START_TEST(forced_width)
{
    /* --coop 2 on four slots: the big matrix takes width 2 on an aligned pair even though the
     * small 8 x 8 one is also forced (it can take 2: its long side has 8 >= 2 rows); a 1 x 1
     * matrix cannot be sliced in two and stays hosted. */
    cz_plan *plan = plan_of((shape[]){{1000, 64000}, {8, 8}, {1, 1}}, 3, 4, 2, 0, NULL);
    int w, slot;
    double cost;
    task_of(plan, 0, &w, &slot, &cost);
    ck_assert_int_eq(w, 2);
    ck_assert_int_eq(slot % 2, 0);
    EQ(cost, BIG_COOP2);
    task_of(plan, 1, &w, &slot, &cost);
    ck_assert_int_eq(w, 2);
    ck_assert_int_eq(slot % 2, 0);
    /* The forced split of the 8 x 8 matrix pays its all-reduces, 2 messages of 5 us each, six
     * of them (one panel, its best count: nothing hides them): 6e-5 s, 66 times its hosted
     * cost, which --coop auto would never pay. */
    ck_assert(cost > 6e-5);
    ck_assert_int_eq(panels_of(plan, 1), 1);
    ck_assert_int_eq(panels_of(plan, 0), 8);
    task_of(plan, 2, &w, &slot, &cost);
    ck_assert_int_eq(w, 1);
    cz_plan_free(plan);
}
END_TEST

START_TEST(blocks_on_different_slots)
{
    /* A fused matrix of two 1000 x 64000 blocks (2000 x 64000, blocks along dim 0) on two
     * slots. Whole, one slot carries both blocks: 2 * 2.186 = 4.372 s. As block tasks each
     * slot takes one: 2.186 s; the atomic bound stays the whole matrix, the split bound is
     * max(average 2.186, largest block 2.186). */
    cz_model *m = czt_model_new("fused", CZ_DTYPE_BF16, 0);
    int id = czt_model_add(m, "fc1", 2000, 64000, -1, CZ_KIND_MATRIX, -1);
    czt_model_blocks(m, id, 0, 2, (int64_t[]){1000, 1000});
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    cz_plan *plan = NULL;
    cz_error err;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    EQ(plan->metrics.tp_makespan, 2 * BIG_HOSTED);
    EQ(plan->metrics.split_lower_bound, 2 * BIG_HOSTED); /* no freedom: the atomic bound */
    cz_plan_free(plan);
    s.split_blocks = 1;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    const cz_plan_group *g = &plan->schedules[0].groups[0];
    ck_assert_int_eq(plan->schedules[0].ngroups, 1);
    ck_assert_int_eq(g->ntasks, 2);
    ck_assert_int_ne(g->task_slot[0], g->task_slot[1]);
    ck_assert_int_eq(g->task_block[0] + g->task_block[1], 1); /* blocks 0 and 1 */
    EQ(plan->metrics.tp_makespan, BIG_HOSTED);
    EQ(plan->metrics.lower_bound, 2 * BIG_HOSTED);
    EQ(plan->metrics.average_load, BIG_HOSTED);
    EQ(plan->metrics.split_lower_bound, BIG_HOSTED);
    cz_plan_free(plan);
    /* --coop implies block tasks: a cooperative task is one Newton-Schulz run, a block. Both
     * blocks split (as two such matrices do, split_pays_where_it_sets_the_makespan): each slot
     * runs both halves, 2 * 0.96836... s. */
    s.split_blocks = 0;
    s.coop = CZ_COOP_AUTO;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    int tasks = 0, blocks = 0;
    for (int k = 0; k < plan->schedules[0].ngroups; k++) {
        const cz_plan_group *gk = &plan->schedules[0].groups[k];
        for (int t = 0; t < gk->ntasks; t++, tasks++) {
            ck_assert_int_eq(cz_group_task_width(gk, t), 2);
            blocks += cz_group_task_block(gk, t);
        }
    }
    ck_assert_int_eq(tasks, 2);
    ck_assert_int_eq(blocks, 1); /* blocks 0 and 1 */
    EQ(plan->metrics.tp_makespan, 2 * BIG_COOP2);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

/* Validates plan against m and c: the number of violations with this code (all when NULL). */
static int violations(const cz_plan *plan, const cz_model *m, const cz_cluster *c, const char *code)
{
    json_t *v = NULL;
    cz_error err;
    ck_assert_int_gt(cz__plan_validate_json(plan, m, c, &v, &err), 0);
    int n = 0;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
    {
        n += !code || !strcmp(json_string_value(json_object_get(x, "code")), code);
    }
    json_decref(v);
    return n;
}

START_TEST(validate_recorded_panels)
{
    /* validate checks a cooperative task's cost at the count the plan records, not at the one
     * the planner would choose: the planner's 8 panels for 1000 x 64000 over 2 validate; the
     * count alone set to 1 makes the cost disagree; with the cost and metrics of one panel
     * (1.09816010008 s, coop_best_panels), the plan is what a plan without the key means, and
     * validates again. A count above min(8, a) is structural (the executor's requests). */
    cz_model *m = czt_model_new("coop", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "m0", 1000, 64000, -1, CZ_KIND_MATRIX, -1);
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    s.coop = CZ_COOP_AUTO;
    cz_plan *plan = NULL;
    cz_error err;
    ck_assert_msg(cz_plan_build(&plan, m, c, &s, &err) == CZ_OK, "%s", err.message);
    cz_plan_group *g = &plan->schedules[0].groups[0];
    ck_assert_int_eq(g->ntasks, 1);
    ck_assert_int_eq(cz_group_task_panels(g, 0), 8);
    ck_assert_int_eq(violations(plan, m, c, NULL), 0);
    g->task_panels[0] = 1;
    ck_assert_int_eq(violations(plan, m, c, "schedule.task_cost"), 1);
    g->task_cost[0] = cz__cost_coop_panels(1000, 64000, 2, 1, &s, c, CZ_DTYPE_BF16);
    EQ(g->task_cost[0], 1.09816010008);
    g->load[0] = g->load[1] = g->task_cost[0];
    ck_assert(cz__plan_metrics_compute(plan, c, &err) == CZ_OK);
    ck_assert_int_eq(violations(plan, m, c, NULL), 0);
    g->task_panels[0] = 9;
    ck_assert_int_eq(violations(plan, m, c, "schedule.coop"), 1);
    cz_plan_free(plan);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(split_bound_without_a_table)
{
    /* The bound of a plan read from a file (no task table) is rebuilt from the cluster and
     * equals the planner's; without a cluster it falls back to the average load with each
     * matrix at 3/4 of its cost (a cooperative run never does less than 3/4 of its hosted
     * matmuls): 0.75 * 2.186 / 2 = 0.81975 s, under the plan's 0.96836... s. */
    cz_cluster *c = NULL;
    cz_plan *plan = plan_of((shape[]){{1000, 64000}}, 1, 2, CZ_COOP_AUTO, 0, &c);
    double want = plan->metrics.split_lower_bound;
    cz_task_table saved = plan->tasks;
    memset(&plan->tasks, 0, sizeof plan->tasks);
    cz_error err;
    ck_assert(cz__plan_metrics_compute(plan, c, &err) == CZ_OK);
    ck_assert_double_eq(plan->metrics.split_lower_bound, want);
    ck_assert(cz__plan_metrics_compute(plan, NULL, &err) == CZ_OK);
    EQ(plan->metrics.split_lower_bound, 0.75 * BIG_HOSTED / 2);
    ck_assert(plan->metrics.split_lower_bound <= plan->metrics.tp_makespan);
    plan->tasks = saved;
    cz_plan_free(plan);
    cz_cluster_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("coop");
    TCase *tc = tcase_create("coop");
    tcase_add_test(tc, allreduce_ring);
    tcase_add_test(tc, coop_cost_by_hand);
    tcase_add_test(tc, coop_cost_polynomial_form);
    tcase_add_test(tc, coop_pipeline_by_hand);
    tcase_add_test(tc, coop_best_panels);
    tcase_add_test(tc, validate_recorded_panels);
    tcase_add_test(tc, split_pays_where_it_sets_the_makespan);
    tcase_add_test(tc, no_split_when_it_costs_more);
    tcase_add_test(tc, split_only_the_small_task);
    tcase_add_test(tc, five_tasks_on_eight_slots);
    tcase_add_test(tc, forced_width);
    tcase_add_test(tc, blocks_on_different_slots);
    tcase_add_test(tc, split_bound_without_a_table);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
