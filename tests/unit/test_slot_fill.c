/* Slot packing (slot_pack.c), the packed TP schedule of --coop auto (microgroups.c) and the
 * slot-fill DP partition (dp_fill.c), on task tables written by hand: per-slot costs in
 * arbitrary units, widths {1, 2} (or {1, 2, 4, 8}), no cost model involved. */
#include "cz_algorithms.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EQ(a, b) ck_assert_double_eq_tol((a), (b), 1e-9 * fabs(b) + 1e-12)

/* A table of n single-task parameters with nw widths; cost[i * nw + w] per slot. */
static cz_task_table table_of(int n, int nw, const int *widths, const double *cost)
{
    cz_task_table tt;
    memset(&tt, 0, sizeof tt);
    tt.nwidths = nw;
    memcpy(tt.widths, widths, (size_t)nw * sizeof *widths);
    tt.ntasks = (size_t)n;
    tt.first = malloc(((size_t)n + 1) * sizeof *tt.first);
    tt.block = malloc(((size_t)n + 1) * sizeof *tt.block);
    tt.cost = malloc(((size_t)n * nw + 1) * sizeof *tt.cost);
    for (int i = 0; i <= n; i++)
        tt.first[i] = i;
    for (int i = 0; i < n; i++)
        tt.block[i] = -1;
    memcpy(tt.cost, cost, (size_t)n * nw * sizeof *cost);
    return tt;
}

static const int W8[4] = {1, 2, 4, 8};
static const int W2[2] = {1, 2};
/* A block of 8 hosted, 5 per slot over 2, 3.5 over 4, 2.5 over 8; a matrix of 3.5 hosted,
 * 2.3, 1.75, 1.7 (the shapes of Qwen3-8B's 4096 x 12288 blocks and 4096 x 4096 matrices at
 * 256 GPUs, rounded). */
static const double BIG[4] = {8.0, 5.0, 3.5, 2.5};
static const double MID[4] = {3.5, 2.3, 1.75, 1.7};

/* Costs of nbig BIG blocks followed by nmid MID matrices, widths W8. */
static cz_task_table blocks_then_matrices(int nbig, int nmid)
{
    double c[64];
    ck_assert(nbig + nmid <= 16);
    for (int i = 0; i < nbig + nmid; i++)
        memcpy(&c[i * 4], i < nbig ? BIG : MID, sizeof BIG);
    return table_of(nbig + nmid, 4, W8, c);
}

START_TEST(place_least_slot_time)
{
    cz_task_table tt = table_of(1, 4, W8, BIG);
    double load[8] = {0};
    int w = -1, s = -1;
    /* Within 6 hosted (8) does not fit; over 2 slots spends 10, over 4 14, over 8 20. */
    ck_assert(cz__slot_place(&tt, 8, load, tt.cost, 6.0, &w, &s));
    ck_assert_int_eq(tt.widths[w], 2);
    ck_assert_int_eq(s, 0);
    EQ(load[0], 5.0);
    EQ(load[1], 5.0);
    EQ(load[2], 0.0);
    /* Within 9 hosted fits and spends least. */
    double fresh[8] = {0};
    ck_assert(cz__slot_place(&tt, 8, fresh, tt.cost, 9.0, &w, &s));
    ck_assert_int_eq(tt.widths[w], 1);
    cz__task_table_free(&tt);
}
END_TEST

START_TEST(place_counts_gaps_and_fits_best)
{
    cz_task_table tt = table_of(1, 4, W8, MID);
    /* Pairs 0-1, 2-3, 4-5 at 5, 6-7 empty. Within 6: hosted on 6 (3.5: the first of the two
     * equal empty slots). */
    double load[8] = {5, 5, 5, 5, 5, 5, 0, 0};
    int w = -1, s = -1;
    ck_assert(cz__slot_place(&tt, 8, load, tt.cost, 6.0, &w, &s));
    ck_assert_int_eq(tt.widths[w], 1);
    ck_assert_int_eq(s, 6);
    /* Slots 0-3 at 5, 4-7 at 1, within 7: hosted on slot 4 (1 + 3.5) spends 3.5, over the pair
     * 4-5 4.6, over a half 7, over all eight 13.6 plus the gap of 16 it strands on 4-7. */
    double l2[8] = {5, 5, 5, 5, 1, 1, 1, 1};
    ck_assert(cz__slot_place(&tt, 8, l2, &tt.cost[0], 7.0, &w, &s));
    ck_assert_int_eq(tt.widths[w], 1);
    ck_assert_int_eq(s, 4);
    EQ(l2[4], 4.5);
    /* A gap counts: slots at {3, 0}, a task of 2 hosted or 1.2 per slot over 2. Over 2 it
     * would start at 3 and strand 3 on slot 1: 2.4 + 3 = 5.4 spent against 2 hosted, which
     * goes to slot 0 (best fit: 3 + 2 = 5 <= 5), not to the empty slot 1. */
    double c2[2] = {2.0, 1.2};
    cz_task_table t2 = table_of(1, 2, W2, c2);
    double l3[2] = {3, 0};
    ck_assert(cz__slot_place(&t2, 2, l3, t2.cost, 5.0, &w, &s));
    ck_assert_int_eq(t2.widths[w], 1);
    ck_assert_int_eq(s, 0);
    EQ(l3[0], 5.0);
    EQ(l3[1], 0.0);
    cz__task_table_free(&t2);
    cz__task_table_free(&tt);
}
END_TEST

START_TEST(place_nothing_fits)
{
    cz_task_table tt = table_of(1, 4, W8, BIG);
    double load[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    int w = -7, s = -7;
    /* The cheapest per slot is 2.5 (over 8): 1 + 2.5 > 3. */
    ck_assert(!cz__slot_place(&tt, 8, load, tt.cost, 3.0, &w, &s));
    ck_assert_int_eq(w, -7);
    for (int j = 0; j < 8; j++)
        EQ(load[j], 1.0);
    cz__task_table_free(&tt);
}
END_TEST

/* The rank schedule --coop auto builds for the given tasks (all in one rank). */
static double schedule_of(const cz_task_table *tt, int n, int tp, cz_rank_schedule *rs)
{
    cz_settings s;
    cz_settings_init(&s);
    s.optimizer = CZ_OPTIM_MUON;
    s.tp = CZ_TP_ROLLBACK;
    s.coop = CZ_COOP_AUTO;
    cz_costed *p = malloc((size_t)n * sizeof *p);
    double *load = malloc((size_t)tp * sizeof *load), cap;
    for (int i = 0; i < n; i++)
        p[i].id = i, p[i].cost = tt->cost[(size_t)i * tt->nwidths];
    cz_error err;
    memset(rs, 0, sizeof *rs);
    int rc = cz__tp_schedule_tasks(rs, tt, p, n, &s, tp, load, &cap, &err);
    ck_assert_msg(rc == CZ_OK, "%s", err.message);
    double span = 0.0;
    for (int g = 0; g < rs->ngroups; g++) {
        double mx = 0.0;
        for (int j = 0; j < rs->groups[g].nslots; j++)
            mx = fmax(mx, rs->groups[g].load[j]);
        span += mx;
    }
    free(p);
    free(load);
    return span;
}

START_TEST(packed_beats_lpt)
{
    /* Two slots, tasks 3, 3, 2, 2, 2 (over 2 slots 10 each: never worth it). Rollback sorts
     * them and takes the least-loaded slot each time: 3 | 3, 5 | 5, 7 | 5 = 7. The packed
     * schedule reaches the total / 2 = 6: 3 + 3 on one slot, 2 + 2 + 2 on the other. */
    const double c[10] = {3, 10, 3, 10, 2, 10, 2, 10, 2, 10};
    cz_task_table tt = table_of(5, 2, W2, c);
    cz_rank_schedule rs;
    EQ(schedule_of(&tt, 5, 2, &rs), 6.0);
    ck_assert_int_eq(rs.ngroups, 1);
    const cz_plan_group *g = &rs.groups[0];
    int slot3 = -1;
    for (int k = 0; k < g->ntasks; k++) {
        ck_assert_int_eq(cz_group_task_width(g, k), 1);
        if (g->task_param[k] < 2) {
            if (slot3 < 0)
                slot3 = g->task_slot[k];
            ck_assert_int_eq(g->task_slot[k], slot3); /* the two 3s share a slot */
        } else {
            ck_assert_int_eq(g->task_slot[k], 1 - slot3);
        }
    }
    cz__rank_schedule_free_groups(&rs);
    cz__task_table_free(&tt);
}
END_TEST

START_TEST(packed_widths_and_slots_together)
{
    /* Eight slots, four blocks and two matrices (BIG, MID). Blocks over two slots each fill
     * all eight at 5; each matrix then goes over four slots on top: 5 + 1.75 = 6.75. Nothing
     * does better: hosted blocks cost 8, two blocks over four slots share a half (7), and with
     * every slot at 5 the cheapest matrix takes 1.7 over all eight, the other then 1.75 more. */
    cz_task_table tt = blocks_then_matrices(4, 2);
    cz_rank_schedule rs;
    ck_assert(fabs(schedule_of(&tt, 6, 8, &rs) - 6.75) < 1e-5);
    int four = 0, two = 0;
    for (int g = 0; g < rs.ngroups; g++)
        for (int k = 0; k < rs.groups[g].ntasks; k++) {
            int w = cz_group_task_width(&rs.groups[g], k);
            two += w == 2 && rs.groups[g].task_param[k] < 4;
            four += w == 4 && rs.groups[g].task_param[k] >= 4;
        }
    ck_assert_int_eq(two, 4);
    ck_assert_int_eq(four, 2);
    cz__rank_schedule_free_groups(&rs);
    cz__task_table_free(&tt);
}
END_TEST

/* cz__dp_fill_cuts on nb buckets (first: nb + 1 starts) of tt's n single-task matrix
 * parameters, in id order, at DP dp x TP tp, each rank busy for base[r] first (NULL: idle), the
 * bisection started from the plan's split lower bound (own_bound false, alpha's slot-fill
 * variant) or from the domain's own bound (true, the joint strategy), bucket by bucket or
 * (by_rank) rank by rank: the cuts (nb x (dp + 1)) and the target. */
static void fill_buckets(const cz_task_table *tt, int n, int nb, const int *first, int dp, int tp,
                         const double *base, bool own_bound, bool by_rank, int *cutj, double *T)
{
    cz_plan plan;
    cz_plan_param params[16];
    int ids[16];
    ck_assert(n <= 16);
    memset(&plan, 0, sizeof plan);
    memset(params, 0, sizeof params);
    cz_settings_init(&plan.settings);
    plan.dp = dp;
    plan.tp = tp;
    plan.pp = 1;
    plan.nparams = (size_t)n;
    plan.params = params;
    plan.tasks = *tt;
    for (int i = 0; i < n; i++) {
        params[i].id = ids[i] = i;
        params[i].def.kind = CZ_KIND_MATRIX;
        params[i].cost = tt->cost[(size_t)i * tt->nwidths];
    }
    cz_dp_buckets b = {
        nb, first, ids, dp, tp, base, own_bound ? 0.0 : cz__task_lower_bound(&plan, tt), by_rank};
    cz_error err;
    ck_assert_msg(cz__dp_fill_cuts(&plan, &b, cutj, T, NULL, &err) == CZ_OK, "%s", err.message);
}

static void fill_bucket(const cz_task_table *tt, int n, int dp, int tp, const double *base,
                        bool own_bound, int *cutj, double *T)
{
    int first[2] = {0, n};
    fill_buckets(tt, n, 1, first, dp, tp, base, own_bound, false, cutj, T);
}

static void fill_one_bucket(const cz_task_table *tt, int n, int dp, int tp, int *cutj, double *T)
{
    fill_bucket(tt, n, dp, tp, NULL, false, cutj, T);
}

START_TEST(fill_cuts_at_least_target)
{
    /* One bucket 3, 3, 2, 2, 2, 3, 3, 2, 2, 2 on DP 2 x TP 2: 24 over four slots, so no
     * target below 6. At 6 rank 0 takes the first five (3 + 3 | 2 + 2 + 2) and rank 1 the
     * rest; the bisection ends within 1e-4 of 6, where the cuts are the same. */
    double c[20];
    for (int i = 0; i < 10; i++) {
        c[2 * i] = (i % 5) < 2 ? 3.0 : 2.0;
        c[2 * i + 1] = 10.0;
    }
    cz_task_table tt = table_of(10, 2, W2, c);
    int cutj[3];
    double T = 0.0;
    fill_one_bucket(&tt, 10, 2, 2, cutj, &T);
    ck_assert(T >= 6.0 && T <= 6.0 * (1 + 2e-4));
    ck_assert_int_eq(cutj[0], 0);
    ck_assert_int_eq(cutj[1], 5);
    ck_assert_int_eq(cutj[2], 10);
    cz__task_table_free(&tt);
}
END_TEST

START_TEST(fill_cuts_over_base)
{
    /* Six hosted tasks of 1 on DP 3 x TP 1. Idle, the domain's own bound is 6 / 3 = 2 and the
     * fill reaches it, two tasks a rank. With rank 0 busy for 2 first (the joint strategy's
     * other buffer), the bound is (6 + 2) / 3 = 2.67, but below 3 rank 0 takes nothing and
     * ranks 1 and 2 two each: 3 is the least target, rank 0 one task, rank 1 three, rank 2
     * two. */
    static const int W1[1] = {1};
    const double c[6] = {1, 1, 1, 1, 1, 1}, base[3] = {2, 0, 0};
    cz_task_table tt = table_of(6, 1, W1, c);
    int cutj[4];
    double T = 0.0;
    fill_bucket(&tt, 6, 3, 1, NULL, true, cutj, &T);
    ck_assert(T >= 2.0 && T <= 2.0 * (1 + 2e-4));
    ck_assert_int_eq(cutj[1], 2);
    ck_assert_int_eq(cutj[2], 4);
    fill_bucket(&tt, 6, 3, 1, base, true, cutj, &T);
    ck_assert(T >= 3.0 && T <= 3.0 * (1 + 2e-4));
    ck_assert_int_eq(cutj[0], 0);
    ck_assert_int_eq(cutj[1], 1);
    ck_assert_int_eq(cutj[2], 4);
    ck_assert_int_eq(cutj[3], 6);
    cz__task_table_free(&tt);
}
END_TEST

START_TEST(fill_blocks_then_matrices)
{
    /* One bucket: four blocks (BIG) then four matrices (MID), DP 2 x TP 8. At 5 rank 0 takes
     * the four blocks over pairs (every slot at 5, no room left: a matrix adds at least 1.7)
     * and rank 1 the four matrices hosted at 3.5. Below 5 a block must go over four slots at
     * 3.5, so each rank holds two, and no matrix fits on top of rank 1's (3.5 + 1.7 > 5):
     * 5 is the least target, with the cut after the fourth block. */
    cz_task_table tt = blocks_then_matrices(4, 4);
    int cutj[3];
    double T = 0.0;
    fill_one_bucket(&tt, 8, 2, 8, cutj, &T);
    ck_assert(T >= 5.0 && T <= 5.0 * (1 + 2e-4));
    ck_assert_int_eq(cutj[1], 4);
    cz__task_table_free(&tt);
}
END_TEST

START_TEST(fill_by_rank_interleaves_buckets)
{
    /* Three buckets of 1, 4, 1, 4 (an expert's fc2 and fc1, as the Kimi-K2-like experts) on
     * DP 8 x TP 1: 30 over 8 ranks, largest 4, so no target below 4. Bucket by bucket at 4 the
     * first bucket takes one matrix per rank (ranks 0-3), and each later fc1 needs a rank
     * without one that no earlier cut has passed: the third bucket's last fc2 finds none, and
     * the least target is 5 (an fc1 and an fc2). Rank by rank, rank 0 takes the three buckets'
     * first fc2s, ranks 1, 2 and 3 one fc1 each, rank 4 the second fc2s, ranks 5-7 the last
     * fc1s: the target is 4. */
    static const int W1[1] = {1};
    double c[12];
    for (int i = 0; i < 12; i++)
        c[i] = i % 2 == 0 ? 1.0 : 4.0;
    cz_task_table tt = table_of(12, 1, W1, c);
    const int first[4] = {0, 4, 8, 12};
    int cutj[3 * 9];
    double T = 0.0;
    fill_buckets(&tt, 12, 3, first, 8, 1, NULL, true, false, cutj, &T);
    ck_assert_msg(T >= 5.0 && T <= 5.0 * (1 + 2e-4), "bucket by bucket: %g", T);
    fill_buckets(&tt, 12, 3, first, 8, 1, NULL, true, true, cutj, &T);
    ck_assert_msg(T >= 4.0 && T <= 4.0 * (1 + 2e-4), "rank by rank: %g", T);
    /* Rank r's first parameter in each bucket (its range ends at rank r + 1's). */
    static const int want[3][9] = {
        {0, 1, 2, 2, 2, 3, 4, 4, 4}, {0, 1, 1, 2, 2, 3, 3, 4, 4}, {0, 1, 1, 1, 2, 3, 3, 3, 4}};
    for (int o = 0; o < 3; o++)
        for (int r = 0; r <= 8; r++)
            ck_assert_msg(cutj[o * 9 + r] == want[o][r], "bucket %d rank %d: %d, expected %d", o, r,
                          cutj[o * 9 + r], want[o][r]);
    cz__task_table_free(&tt);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("slot_fill");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, place_least_slot_time);
    tcase_add_test(tc, place_counts_gaps_and_fits_best);
    tcase_add_test(tc, place_nothing_fits);
    tcase_add_test(tc, packed_beats_lpt);
    tcase_add_test(tc, packed_widths_and_slots_together);
    tcase_add_test(tc, fill_cuts_at_least_target);
    tcase_add_test(tc, fill_blocks_then_matrices);
    tcase_add_test(tc, fill_cuts_over_base);
    tcase_add_test(tc, fill_by_rank_interleaves_buckets);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
