/* Shard layout: hand-checked packs for row, column and blocked splits; round trips. */
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "cz_format.h"
#include "exec_fixture.h"

#include <check.h>

static float full[64], shard[64], back[64];

static cz_plan_param mkp(int64_t r, int64_t c, int tp_dim, int tp, int nb, const int64_t *bs,
                         int bdim)
{
    cz_plan_param p = {0};
    p.def.name = "w";
    p.def.ndim = 2;
    p.def.shape[0] = r;
    p.def.shape[1] = c;
    p.def.tp_dim = tp_dim;
    p.local_shape[0] = tp_dim == 0 ? r / tp : r;
    p.local_shape[1] = tp_dim == 1 ? c / tp : c;
    p.numel = p.local_shape[0] * p.local_shape[1];
    p.def.nblocks = nb;
    p.def.block_dim = nb ? bdim : -1;
    p.def.block_sizes = (int64_t *)bs;
    return p;
}

static void fill(int n)
{
    for (int i = 0; i < n; i++)
        full[i] = (float)i;
}

START_TEST(rows_split)
{
    cz_plan_param p = mkp(4, 3, 0, 2, 0, NULL, 0);
    fill(12);
    cz__shard_pack(&p, 2, 1, full, shard);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(shard[i], (float)(6 + i));
}
END_TEST

START_TEST(cols_split)
{
    cz_plan_param p = mkp(2, 4, 1, 2, 0, NULL, 0);
    fill(8);
    cz__shard_pack(&p, 2, 1, full, shard);
    const float want[4] = {2, 3, 6, 7};
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(shard[i], want[i]);
}
END_TEST

START_TEST(blocked_rows)
{
    /* Blocks of 2 and 4 rows over tp 2: rank 1 holds row 1 (block 0) and rows 4, 5. */
    const int64_t bs[2] = {2, 4};
    cz_plan_param p = mkp(6, 2, 0, 2, 2, bs, 0);
    fill(12);
    cz__shard_pack(&p, 2, 1, full, shard);
    const float want[6] = {2, 3, 8, 9, 10, 11};
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(shard[i], want[i]);
    int64_t lo[4], hi[4];
    ck_assert_int_eq(cz__shard_ranges(&p, 2, 0, lo, hi, 4), 2);
    ck_assert_int_eq(lo[0], 0);
    ck_assert_int_eq(hi[0], 1);
    ck_assert_int_eq(lo[1], 2);
    ck_assert_int_eq(hi[1], 4);
}
END_TEST

START_TEST(blocked_cols)
{
    /* 2 x 6, column blocks 2 and 4, tp 2: rank 0 holds columns 0, 2, 3 of each row. */
    const int64_t bs[2] = {2, 4};
    cz_plan_param p = mkp(2, 6, 1, 2, 2, bs, 1);
    fill(12);
    cz__shard_pack(&p, 2, 0, full, shard);
    const float want[6] = {0, 2, 3, 6, 8, 9};
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(shard[i], want[i]);
}
END_TEST

START_TEST(round_trips)
{
    const int64_t bs3[3] = {4, 2, 2};
    struct {
        cz_plan_param p;
        int tp;
    } cases[] = {
        {mkp(8, 4, 0, 2, 0, NULL, 0), 2},  {mkp(4, 8, 1, 4, 0, NULL, 0), 4},
        {mkp(8, 6, 0, 2, 3, bs3, 0), 2},   {mkp(6, 8, 1, 2, 3, bs3, 1), 2},
        {mkp(8, 4, -1, 2, 0, NULL, 0), 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cz_plan_param *p = &cases[c].p;
        int n = (int)(p->def.shape[0] * p->def.shape[1]);
        for (int i = 0; i < n; i++)
            full[i] = fx_val((uint64_t)i);
        for (int i = 0; i < n; i++)
            back[i] = 0.0f;
        ck_assert_int_eq(cz__shard_check(p, cases[c].tp, NULL), 0);
        for (int r = 0; r < cases[c].tp; r++) {
            cz__shard_pack(p, cases[c].tp, r, full, shard);
            cz__shard_unpack(p, cases[c].tp, r, shard, back);
        }
        for (int i = 0; i < n; i++)
            ck_assert_float_eq(back[i], full[i]);
    }
}
END_TEST

/* The index maps the step replays (cz__shard_runs through the CPU backend's copy_runs) move
 * exactly what cz__shard_pack and cz__shard_unpack move, at any offsets. */
START_TEST(runs_equal_pack)
{
    const int64_t bs3[3] = {4, 2, 2};
    struct {
        cz_plan_param p;
        int tp;
    } cases[] = {
        {mkp(8, 4, 0, 2, 0, NULL, 0), 2},  {mkp(4, 8, 1, 4, 0, NULL, 0), 4},
        {mkp(8, 6, 0, 2, 3, bs3, 0), 2},   {mkp(6, 8, 1, 2, 3, bs3, 1), 2},
        {mkp(8, 4, -1, 2, 0, NULL, 0), 2},
    };
    cz_compute cpu;
    ck_assert_int_eq(cz__compute_open(&cpu, "cpu", NULL), 0);
    enum { OFF_F = 3, OFF_S = 5 };
    static float fbuf[OFF_F + 64], sbuf[OFF_S + 64], want[64], fback[OFF_F + 64];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cz_plan_param *p = &cases[c].p;
        int n = (int)(p->def.shape[0] * p->def.shape[1]);
        for (int i = 0; i < n; i++)
            fbuf[OFF_F + i] = fx_val((uint64_t)(i + 77));
        memset(fback, 0, sizeof fback);
        for (int r = 0; r < cases[c].tp; r++) {
            cz_run_list pack = {0}, unpack = {0};
            ck_assert_int_eq(cz__shard_runs(p, cases[c].tp, r, OFF_F, OFF_S, 0, &pack, NULL), 0);
            ck_assert_int_eq(cz__shard_runs(p, cases[c].tp, r, OFF_F, OFF_S, 1, &unpack, NULL), 0);
            cz_runs *rp = cpu.ops->runs_create(&cpu, pack.v, pack.n);
            cz_runs *ru = cpu.ops->runs_create(&cpu, unpack.v, unpack.n);
            ck_assert_ptr_nonnull(rp);
            ck_assert_ptr_nonnull(ru);
            cpu.ops->copy_runs(&cpu, sbuf, fbuf, rp);
            cz__shard_pack(p, cases[c].tp, r, fbuf + OFF_F, want);
            for (int64_t i = 0; i < p->numel; i++)
                ck_assert_float_eq(sbuf[OFF_S + i], want[i]);
            cpu.ops->copy_runs(&cpu, fback, sbuf, ru);
            cpu.ops->runs_free(&cpu, rp);
            cpu.ops->runs_free(&cpu, ru);
            cz__run_list_free(&pack);
            cz__run_list_free(&unpack);
        }
        for (int i = 0; i < n; i++)
            ck_assert_float_eq(fback[OFF_F + i], fbuf[OFF_F + i]);
    }
    cz__compute_close(&cpu);
}
END_TEST

/* Regions (a block, a cooperative slice, any rectangle): every TP rank's shard inside the
 * region, moved shard -> message -> region by the runs of cz__region_runs, rebuilds the region
 * of the full matrix exactly once (replicated: every rank's message is the whole region), and
 * the message -> shard runs write back exactly the shard elements inside the region. Checked
 * against the full matrix, element by element, through cz__shard_pack. */
START_TEST(region_runs_cover_region)
{
    const int64_t bs3[3] = {4, 2, 2};
    struct {
        cz_plan_param p;
        int tp;
    } cases[] = {
        {mkp(8, 4, 0, 2, 0, NULL, 0), 2},  {mkp(4, 8, 1, 4, 0, NULL, 0), 4},
        {mkp(8, 6, 0, 2, 3, bs3, 0), 2},   {mkp(6, 8, 1, 2, 3, bs3, 1), 2},
        {mkp(8, 4, -1, 2, 0, NULL, 0), 2}, {mkp(8, 6, 0, 2, 3, bs3, 0), 1},
    };
    /* Regions: whole, a row band cutting shards, a column band, an interior rectangle. */
    const cz_block regs[] = {{0, 0, 8, 8}, {1, 0, 5, 8}, {0, 1, 8, 2}, {3, 1, 2, 3}};
    cz_compute cpu;
    ck_assert_int_eq(cz__compute_open(&cpu, "cpu", NULL), 0);
    static float f[64], sh[64], msg[64], region[64], shback[64];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cz_plan_param *p = &cases[c].p;
        int tp = cases[c].tp;
        int64_t rows = p->def.shape[0], cols = p->def.shape[1];
        for (int i = 0; i < rows * cols; i++)
            f[i] = fx_val((uint64_t)(i + 31));
        for (size_t q = 0; q < sizeof regs / sizeof regs[0]; q++) {
            cz_block b = regs[q];
            b.rows = b.r0 + b.rows > rows ? rows - b.r0 : b.rows;
            b.cols = b.c0 + b.cols > cols ? cols - b.c0 : b.cols;
            int64_t total = 0;
            for (int i = 0; i < 64; i++)
                region[i] = -1.0f;
            for (int r = 0; r < tp; r++) {
                int64_t n = cz__shard_region_numel(p, tp, r, &b);
                total += n;
                cz_run_list pack = {0}, unpack = {0}, back = {0};
                ck_assert_int_eq(cz__region_runs(p, tp, r, &b, 0, 0, 1, 1, &pack, NULL), 0);
                ck_assert_int_eq(cz__region_runs(p, tp, r, &b, 0, 0, 0, 0, &unpack, NULL), 0);
                ck_assert_int_eq(cz__region_runs(p, tp, r, &b, 0, 0, 1, 0, &back, NULL), 0);
                cz_runs *rp = cpu.ops->runs_create(&cpu, pack.v, pack.n);
                cz_runs *ru = cpu.ops->runs_create(&cpu, unpack.v, unpack.n);
                cz_runs *rb = cpu.ops->runs_create(&cpu, back.v, back.n);
                cz__shard_pack(p, tp, r, f, sh);
                cpu.ops->copy_runs(&cpu, msg, sh, rp);
                cpu.ops->copy_runs(&cpu, region, msg, ru);
                /* Back into a zeroed shard: exactly the elements inside the region return. */
                memset(shback, 0, sizeof shback);
                cpu.ops->copy_runs(&cpu, shback, msg, rb);
                static float fsh[64];
                memset(fsh, 0, sizeof fsh);
                cz__shard_unpack(p, tp, r, shback, fsh);
                int64_t inside = 0;
                for (int64_t i = 0; i < rows; i++)
                    for (int64_t j = 0; j < cols; j++) {
                        bool in = i >= b.r0 && i < b.r0 + b.rows && j >= b.c0 && j < b.c0 + b.cols;
                        if (fsh[i * cols + j] != 0.0f) {
                            ck_assert(in);
                            ck_assert_float_eq(fsh[i * cols + j], f[i * cols + j]);
                            inside++;
                        }
                    }
                ck_assert_int_eq(inside, n);
                cpu.ops->runs_free(&cpu, rp);
                cpu.ops->runs_free(&cpu, ru);
                cpu.ops->runs_free(&cpu, rb);
                cz__run_list_free(&pack);
                cz__run_list_free(&unpack);
                cz__run_list_free(&back);
            }
            ck_assert_int_eq(total, (p->def.tp_dim < 0 ? tp : 1) * b.rows * b.cols);
            for (int64_t i = 0; i < b.rows; i++)
                for (int64_t j = 0; j < b.cols; j++)
                    ck_assert_float_eq(region[i * b.cols + j], f[(b.r0 + i) * cols + b.c0 + j]);
        }
    }
    cz__compute_close(&cpu);
}
END_TEST

START_TEST(check_refuses)
{
    cz_error err;
    cz_plan_param p = mkp(6, 4, 0, 4, 0, NULL, 0);
    p.local_shape[0] = 1;
    ck_assert_int_eq(cz__shard_check(&p, 4, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "not divisible by tp = 4"));
    cz_plan_param q = mkp(8, 4, 1, 2, 0, NULL, 0);
    q.local_shape[1] = 4;
    ck_assert_int_eq(cz__shard_check(&q, 2, &err), CZ_EMISMATCH);
    ck_assert_ptr_nonnull(strstr(err.message, "local_shape [8, 4]"));
    const int64_t bs[2] = {3, 5};
    cz_plan_param b = mkp(8, 4, 0, 2, 2, bs, 0);
    ck_assert_int_eq(cz__shard_check(&b, 2, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "block 0 size 3"));
    /* A shape whose element count overflows int64 (a hand-edited plan) is refused, not
     * multiplied (signed overflow is undefined behaviour). */
    cz_plan_param h = mkp(1, 8, -1, 1, 0, NULL, 0);
    h.def.shape[0] = h.local_shape[0] = INT64_C(1) << 62;
    h.numel = 8;
    ck_assert_int_eq(cz__shard_check(&h, 1, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "shape [4611686018427387904, 8] has more than"));
    const int64_t huge[2] = {INT64_MAX, INT64_MAX};
    cz_plan_param hb = mkp(8, 4, -1, 1, 2, huge, 0);
    ck_assert_int_eq(cz__shard_check(&hb, 1, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "block 0 size 9223372036854775807 does not fit"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_shard");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, rows_split);
    tcase_add_test(tc, cols_split);
    tcase_add_test(tc, blocked_rows);
    tcase_add_test(tc, blocked_cols);
    tcase_add_test(tc, round_trips);
    tcase_add_test(tc, region_runs_cover_region);
    tcase_add_test(tc, runs_equal_pack);
    tcase_add_test(tc, check_refuses);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
