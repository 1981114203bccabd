/* Optimizer math: Newton-Schulz on hand-checked inputs, Muon blocks and transposes, AdamW and
 * momentum against hand arithmetic. */
#include "cz_exec_testing.h"
#include "canzona_exec.h"
#include "cz_format.h"
#include "exec_fixture.h"

#include <check.h>
#include <math.h>

static cz_compute cpu;

static void setup(void)
{
    ck_assert_int_eq(cz__compute_open(&cpu, "cpu", NULL), 0);
}

static cz_muon_hparams hp(const char *coeffs, int steps)
{
    cz_muon_hparams h = {0};
    h.lr = 0.1f;
    h.momentum = 0.95f;
    h.eps = 1e-7f;
    h.scale_coeff = 0.2f;
    h.ns_steps = steps;
    h.coeffs = *cz__ns_coeffs_find(coeffs);
    return h;
}

START_TEST(ns_diag_one_step)
{
    /* diag(3, 4): ||G||_F = 5, so X = diag(0.6, 0.8) (eps 1e-7 in the norm); one quintic step
     * maps each singular value s to 3.4445 s - 4.7750 s^3 + 2.0315 s^5. */
    float x[4] = {3, 0, 0, 4}, out[4];
    cz_plan_param p = {
        .def.name = "d", .def.ndim = 2, .def.shape = {2, 2}, .def.tp_dim = -1, .def.block_dim = -1};
    cz_muon_hparams h = hp("jordan", 1);
    h.scale_coeff = 1.0f / sqrtf(2.0f); /* cancel the sqrt(max(m, n)) scale */
    const cz_plan_param *ps[1] = {&p};
    const float *in[1] = {x};
    float *o[1] = {out};
    ck_assert_int_eq(cz__muon_orthogonalize(&cpu, &h, ps, in, o, 1, NULL), 0);
    ck_assert_double_eq_tol(out[0], 1.1932694447530552, 2e-6);
    ck_assert_double_eq_tol(out[3], 0.9764819450078069, 2e-6);
    ck_assert_double_eq_tol(out[1], 0.0, 1e-7);
    ck_assert_double_eq_tol(out[2], 0.0, 1e-7);
}
END_TEST

/* max |X X^T - I| of an r x c row-major matrix. */
static double gram_dev(const float *x, int r, int c, double scale)
{
    double worst = 0;
    for (int i = 0; i < r; i++)
        for (int j = 0; j < r; j++) {
            double s = 0;
            for (int k = 0; k < c; k++)
                s += (double)x[i * c + k] * x[j * c + k];
            s /= scale * scale;
            double d = fabs(s - (i == j ? 1.0 : 0.0));
            if (d > worst)
                worst = d;
        }
    return worst;
}

START_TEST(ns_orthogonalizes)
{
    /* A well-conditioned 8 x 16 input (identity block plus small noise). */
    enum { R = 8, C = 16 };
    float g[R * C], out[R * C];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            g[i * C + j] = (i == j ? 1.0f : 0.0f) + 0.1f * fx_val((uint64_t)(i * C + j));
    cz_plan_param p = {
        .def.name = "m", .def.ndim = 2, .def.shape = {R, C}, .def.tp_dim = -1, .def.block_dim = -1};
    const cz_plan_param *ps[1] = {&p};
    const float *in[1] = {g};
    float *o[1] = {out};
    double scale = 0.2 * sqrt((double)C);
    cz_muon_hparams cubic = hp("cubic", 40);
    ck_assert_int_eq(cz__muon_orthogonalize(&cpu, &cubic, ps, in, o, 1, NULL), 0);
    ck_assert_double_lt(gram_dev(out, R, C, scale), 1e-4);
    /* The quintic trades exactness for speed: singular values end in about [0.7, 1.2]. */
    cz_muon_hparams quintic = hp("jordan", 5);
    ck_assert_int_eq(cz__muon_orthogonalize(&cpu, &quintic, ps, in, o, 1, NULL), 0);
    ck_assert_double_lt(gram_dev(out, R, C, scale), 0.5);
}
END_TEST

START_TEST(ns_tall_and_blocks)
{
    /* A 6 x 2 matrix in blocks of 2 and 4 rows: block 0 = diag(3, 4) (1 step values), block 1
     * is tall (4 x 2) and must come out with orthonormal columns. */
    float g[12] = {3, 0, 0, 4, 1, 0.5f, -0.25f, 1, 0.5f, 0.5f, 0, -1}, out[12];
    cz_plan_param p = {.def.name = "qkv",
                       .def.ndim = 2,
                       .def.shape = {6, 2},
                       .def.tp_dim = 0,
                       .def.block_dim = 0,
                       .def.nblocks = 2,
                       .def.block_sizes = (int64_t[]){2, 4}};
    const cz_plan_param *ps[1] = {&p};
    const float *in[1] = {g};
    float *o[1] = {out};
    cz_muon_hparams h = hp("cubic", 60);
    ck_assert_int_eq(cz__muon_orthogonalize(&cpu, &h, ps, in, o, 1, NULL), 0);
    /* Block 0 is diag(3, 4): its polar factor is the identity, scaled by 0.2*sqrt(2). */
    double s0 = 0.2 * sqrt(2.0);
    ck_assert_double_eq_tol(out[0], s0, 1e-5);
    ck_assert_double_eq_tol(out[3], s0, 1e-5);
    ck_assert_double_eq_tol(out[1], 0.0, 1e-6);
    double s1 = 0.2 * 2.0; /* sqrt(max(4, 2)) */
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            double dot = 0;
            for (int i = 0; i < 4; i++)
                dot += (double)out[4 + i * 2 + a] * out[4 + i * 2 + b];
            ck_assert_double_eq_tol(dot / (s1 * s1), a == b ? 1.0 : 0.0, 1e-4);
        }
}
END_TEST

START_TEST(ns_batched_equals_single)
{
    /* Two same-shape matrices orthogonalized in one call equal each done alone. */
    enum { N = 3 * 5 };
    float g1[N], g2[N], a1[N], a2[N], b1[N], b2[N];
    for (int i = 0; i < N; i++) {
        g1[i] = fx_val((uint64_t)i);
        g2[i] = fx_val((uint64_t)(100 + i));
    }
    cz_plan_param p = {
        .def.name = "m", .def.ndim = 2, .def.shape = {3, 5}, .def.tp_dim = -1, .def.block_dim = -1};
    cz_muon_hparams h = hp("jordan", 5);
    const cz_plan_param *ps[2] = {&p, &p};
    const float *in[2] = {g1, g2};
    float *o[2] = {a1, a2};
    ck_assert_int_eq(cz__muon_orthogonalize(&cpu, &h, ps, in, o, 2, NULL), 0);
    float *o1[1] = {b1}, *o2[1] = {b2};
    ck_assert_int_eq(cz__muon_orthogonalize(&cpu, &h, ps, in, o1, 1, NULL), 0);
    ck_assert_int_eq(cz__muon_orthogonalize(&cpu, &h, ps, in + 1, o2, 1, NULL), 0);
    for (int i = 0; i < N; i++) {
        ck_assert_float_eq(a1[i], b1[i]);
        ck_assert_float_eq(a2[i], b2[i]);
    }
}
END_TEST

START_TEST(ns_batch_cap)
{
    /* The cut of a same-shape run: 8 blocks of 1024 x 1024 a call (batch 1 Mi + work 3 Mi
     * floats each, 32 Mi floats in all), 4 of 1024 x 3072, one of a block whose own need
     * exceeds the cap, and the whole run of small ones. */
    ck_assert_int_eq(cz__muon_batch_cap(1024, 1024), 8);
    ck_assert_int_eq(cz__muon_batch_cap(1024, 3072), 4);
    ck_assert_int_eq(cz__muon_batch_cap(4096, 12288), 1);
    ck_assert_int_eq(cz__muon_batch_cap(8, 16), CZ_MUON_BATCH_FLOATS / (8 * 16 * 2 + 2 * 8 * 8));
    /* 20 matrices of 1024 x 1024 and 3 of 16 x 8: calls of 8, 8, 4 and one of 3 (transposed
     * to 8 x 16); the buffers are those of the largest call, not of the 20. */
    enum { N = 23 };
    cz_plan_param big = {.def.name = "w",
                         .def.ndim = 2,
                         .def.shape = {1024, 1024},
                         .def.tp_dim = -1,
                         .def.block_dim = -1};
    cz_plan_param small = big;
    small.def.shape[0] = 16, small.def.shape[1] = 8;
    const cz_plan_param *ps[N];
    for (int i = 0; i < N; i++)
        ps[i] = i < 20 ? &big : &small;
    cz_muon_prep mp;
    ck_assert_int_eq(cz__muon_prepare(&mp, ps, N, NULL), 0);
    ck_assert_int_eq(mp.nblk, N);
    int ends[8], ncalls = 0;
    for (int s = 0; s < mp.nblk && ncalls < 8; s = ends[ncalls++])
        ends[ncalls] = cz__muon_batch_end(&mp, s);
    ck_assert_int_eq(ncalls, 4);
    int sizes[4] = {ends[0], ends[1] - ends[0], ends[2] - ends[1], ends[3] - ends[2]};
    int want_big[3] = {8, 8, 4}, k = 0;
    for (int c = 0; c < 4; c++) /* the small run sorts first or last: its call is the 3 */
        if (sizes[c] != 3)
            ck_assert_int_eq(sizes[c], want_big[k++]);
    ck_assert_int_eq(k, 3);
    ck_assert_int_eq(mp.batch_n, 8 * 1024 * 1024);
    ck_assert_int_eq(mp.work_n, 8 * 3 * 1024 * 1024);
    cz__muon_prep_free(&mp);
}
END_TEST

/* Cooperative Newton-Schulz as the k members compute it (cz__muon_coop_run's order of
 * operations), the all-reduces done here by hand: the sums of the members' sums of squares,
 * and per iteration of their packed Gram rows panel by panel, each member unpacking a panel
 * and, in the A(AX) form, computing those rows of A X before the next panel is summed. k uneven
 * slices along the long side of a wide and of a tall matrix give the single-process update up
 * to rounding, for `panels` row panels of the Gram and the coefficient set coeffs. Returns how many
 * members' slices took the A(AX) form (narrower than the short side, ns_coop.h), so that each case
 * can check which form it exercised. */
static int coop_case_coeffs(int64_t rows, int64_t cols, int k, int panels, const char *coeffs)
{
    enum { MAXN = 48 * 24, MAXA = 24 };
    float g[MAXN], want[MAXN], got[MAXN];
    int64_t n = rows * cols;
    ck_assert_int_le(n, MAXN);
    ck_assert_int_le(rows < cols ? rows : cols, MAXA);
    for (int64_t i = 0; i < n; i++)
        g[i] = fx_val((uint64_t)(i + 5));
    cz_plan_param p = {.def.name = "m",
                       .def.ndim = 2,
                       .def.shape = {rows, cols},
                       .def.tp_dim = -1,
                       .def.block_dim = -1};
    cz_muon_hparams h = hp(coeffs, 5);
    const cz_plan_param *ps[1] = {&p};
    const float *in[1] = {g};
    float *o[1] = {want};
    ck_assert_int_eq(cz__muon_orthogonalize(&cpu, &h, ps, in, o, 1, NULL), 0);

    bool tall = rows > cols;
    int64_t a = tall ? cols : rows, len = tall ? rows : cols;
    static float part[8][MAXN], x[8][MAXN], gram[8][MAXA * (MAXA + 1) / 2],
        sum[MAXA * (MAXA + 1) / 2], full[8][MAXA * MAXA], y[8][MAXN], bm[8][MAXA * MAXA];
    int64_t pr[8], pc[8], st[8];
    double sq[8], total = 0.0;
    int aax = 0;
    for (int j = 0; j < k; j++) {
        int64_t nn;
        cz_coop_slice(len, k, j, &st[j], &nn);
        pr[j] = tall ? nn : rows, pc[j] = tall ? cols : nn;
        aax += cz_ns_coop_use_aax(a, nn);
        /* The member's slice, contiguous, as the gather leaves it. */
        for (int64_t i = 0; i < pr[j]; i++)
            for (int64_t c = 0; c < pc[j]; c++)
                part[j][i * pc[j] + c] = g[(tall ? st[j] + i : i) * cols + (tall ? c : st[j] + c)];
        cpu.ops->sumsq(&cpu, part[j], pr[j] * pc[j], &sq[j]);
        total += sq[j];
    }
    for (int j = 0; j < k; j++)
        cpu.ops->block_load_sq(&cpu, x[j], part[j], pc[j], pr[j], pc[j], tall, h.eps, &total);
    for (int s = 0; s < h.ns_steps; s++) {
        /* Every member's panels first (as the executor posts them), then the sums in order. */
        int64_t off = 0;
        for (int q = 0; q < panels; q++) {
            int64_t r0 = cz_coop_panel_row(a, panels, q), r1 = cz_coop_panel_row(a, panels, q + 1);
            int64_t pl = cz_ns_panel_len(a, r0, r1);
            for (int j = 0; j < k; j++) {
                int64_t nj = tall ? pr[j] : pc[j];
                cpu.ops->ns_gram_rows(&cpu, x[j], 1, a, nj, r0, r1, full[j], gram[j] + off);
            }
            off += pl;
        }
        ck_assert_int_eq(off, cz_ns_packed_len(a));
        memset(sum, 0, sizeof sum);
        for (int j = 0; j < k; j++)
            for (int64_t e = 0; e < off; e++)
                sum[e] += gram[j][e];
        off = 0;
        for (int q = 0; q < panels; q++) {
            int64_t r0 = cz_coop_panel_row(a, panels, q), r1 = cz_coop_panel_row(a, panels, q + 1);
            for (int j = 0; j < k; j++) {
                int64_t nj = tall ? pr[j] : pc[j];
                cpu.ops->ns_unpack_rows(&cpu, full[j], sum + off, 1, a, r0, r1);
                if (cz_ns_coop_use_aax(a, nj))
                    cpu.ops->ns_poly_rows(&cpu, x[j], full[j], y[j], 1, a, nj, r0, r1);
            }
            off += cz_ns_panel_len(a, r0, r1);
        }
        cz_ns_triple t = cz__ns_coeffs_at(&h.coeffs, s);
        for (int j = 0; j < k; j++)
            cpu.ops->ns_poly_end(&cpu, x[j], full[j], y[j], bm[j], 1, a, tall ? pr[j] : pc[j], &t);
    }
    float scale = cz__muon_scale(&h, rows, cols);
    for (int j = 0; j < k; j++) {
        float *dst = got + (tall ? st[j] * cols : st[j]);
        cpu.ops->block_store(&cpu, dst, cols, x[j], pr[j], pc[j], tall, scale);
    }
    float big = 0.0f, diff = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        big = fabsf(want[i]) > big ? fabsf(want[i]) : big;
        diff = fabsf(want[i] - got[i]) > diff ? fabsf(want[i] - got[i]) : diff;
    }
    ck_assert_msg(diff <= 1e-5f * big, "%lld x %lld, k %d, %d panels: max diff %g of %g",
                  (long long)rows, (long long)cols, k, panels, (double)diff, (double)big);
    return aax;
}

static int coop_case_panels(int64_t rows, int64_t cols, int k, int panels)
{
    return coop_case_coeffs(rows, cols, k, panels, "jordan");
}

/* coop_case_panels with one panel (how plans without a panel count run), two, and the most the
 * plan may record without an empty panel (min(CZ_COOP_MAX_PANELS, (a + 1) / 2): a row holds
 * at most a of the a (a + 1) / 2 packed elements); every run must agree with the single
 * process. */
static int coop_case(int64_t rows, int64_t cols, int k)
{
    int64_t a = rows < cols ? rows : cols, most = (a + 1) / 2;
    int aax = coop_case_panels(rows, cols, k, 1);
    if (a >= 3)
        ck_assert_int_eq(coop_case_panels(rows, cols, k, 2), aax);
    ck_assert_int_eq(coop_case_panels(rows, cols, k,
                                      (int)(most < CZ_COOP_MAX_PANELS ? most : CZ_COOP_MAX_PANELS)),
                     aax);
    return aax;
}

START_TEST(coop_ops_equal_single)
{
    /* wide: column slices of 15, 16, 16, all at least a = 10: the standard form */
    ck_assert_int_eq(coop_case(10, 47, 3), 0);
    ck_assert_int_eq(coop_case(47, 10, 3), 0); /* tall: row slices, transposed into the batch */
    ck_assert_int_eq(coop_case(12, 40, 4), 4); /* slices of 10 < a = 12: A(AX) on every member */
    ck_assert_int_eq(coop_case(16, 2, 4), 0);  /* slices of 4 against a = 2: standard */
    /* k = 2: slices of 20 < a = 24 (A(AX)), then of 24 = a (standard: not cheaper) */
    ck_assert_int_eq(coop_case(24, 40, 2), 2);
    ck_assert_int_eq(coop_case(48, 24, 2), 0);
    /* k = 4 over a 24 x 48: slices of 12 < 24 (A(AX)); k = 2 over 11 x 21: slices of 10 and
     * 11 against a = 11, one member in each form, whose updates must still agree. */
    ck_assert_int_eq(coop_case(24, 48, 4), 4);
    ck_assert_int_eq(coop_case(11, 21, 2), 1);
    /* A table (one triple per iteration) in both forms: each iteration ends with its row. */
    ck_assert_int_eq(coop_case_coeffs(10, 47, 3, 2, "polar_express"), 0);
    ck_assert_int_eq(coop_case_coeffs(12, 40, 4, 2, "polar_express"), 4);
}
END_TEST

/* The packed Gram (ns_coop.h): upper triangle row by row, packed and back (the lower
 * triangle mirrored) one row panel at a time for a batch of two matrices of each size; the
 * panels, back to back, are the whole packed triangle in order. */
START_TEST(coop_pack_round_trip)
{
    enum { MAXA = 7 };
    static const int64_t sizes[] = {1, 2, 7};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++)
        for (int panels = 1; panels <= sizes[t]; panels++) {
            int64_t a = sizes[t], pl = cz_ns_packed_len(a);
            ck_assert_int_eq(pl, a * (a + 1) / 2);
            /* Two a x a matrices back to back, as a batch. */
            float full[2 * MAXA * MAXA], back[2 * MAXA * MAXA], packed[2 * MAXA * (MAXA + 1) / 2];
            /* Symmetric inputs whose lower triangle carries a marker the packing must not
             * read. */
            for (int m = 0; m < 2; m++)
                for (int64_t i = 0; i < a; i++)
                    for (int64_t j = 0; j < a; j++)
                        full[m * a * a + i * a + j] =
                            i <= j ? (float)(100 * m + 10 * i + j) : -1.0f;
            memset(back, 0, sizeof back);
            int64_t e = 0;
            for (int q = 0; q < panels; q++) {
                int64_t r0 = cz_coop_panel_row(a, panels, q),
                        r1 = cz_coop_panel_row(a, panels, q + 1);
                ck_assert_int_le(r0, r1); /* past (a + 1) / 2 panels some are empty */
                cz__ns_rows_pack(packed + 2 * cz_coop_packed_before(a, r0), full, 2, a, r0, r1);
                /* Matrix m's rows r0 .. r1-1, each from (i, i) to (i, a - 1). */
                for (int m = 0; m < 2; m++)
                    for (int64_t i = r0; i < r1; i++)
                        for (int64_t j = i; j < a; j++)
                            ck_assert_float_eq(packed[e++], (float)(100 * m + 10 * i + j));
                cz__ns_rows_unpack(back, packed + 2 * cz_coop_packed_before(a, r0), 2, a, r0, r1);
                ck_assert_int_eq(e, 2 * cz_coop_packed_before(a, r1));
            }
            ck_assert_int_eq(e, 2 * pl);
            for (int m = 0; m < 2; m++)
                for (int64_t i = 0; i < a; i++)
                    for (int64_t j = 0; j < a; j++) {
                        int64_t lo = i < j ? i : j, hi = i < j ? j : i;
                        ck_assert_float_eq(back[m * a * a + i * a + j],
                                           (float)(100 * m + 10 * lo + hi));
                    }
        }
}
END_TEST

/* The panel boundaries (cz_format.h): equal shares of the packed triangle. a = 16 in 2
 * panels, 136 packed elements: the second starts at the first row whose offset
 * 16 i - i (i - 1) / 2 reaches 68: row 4 has 58 before it, row 5 has 70, so row 5. */
START_TEST(coop_panel_rule)
{
    ck_assert_int_eq(cz_coop_panel_row(16, 2, 0), 0);
    ck_assert_int_eq(cz_coop_panel_row(16, 2, 1), 5);
    ck_assert_int_eq(cz_coop_panel_row(16, 2, 2), 16);
    /* Each boundary is the first row whose packed offset reaches its share, and no panel is
     * empty while P <= (a + 1) / 2. */
    for (int64_t a = 1; a <= 300; a += 7)
        for (int P = 1; P <= CZ_COOP_MAX_PANELS && P <= (a + 1) / 2; P++) {
            int64_t total = a * (a + 1) / 2;
            for (int p = 1; p < P; p++) {
                int64_t r = cz_coop_panel_row(a, P, p), want = (total * p + P - 1) / P;
                ck_assert_int_ge(cz_coop_packed_before(a, r), want);
                ck_assert_int_lt(cz_coop_packed_before(a, r - 1), want);
                ck_assert_int_lt(cz_coop_panel_row(a, P, p - 1), r);
            }
            ck_assert_int_lt(cz_coop_panel_row(a, P, P - 1), a);
        }
}
END_TEST

/* The form rule: A(AX) exactly when the slice is narrower than the short side. */
START_TEST(coop_form_rule)
{
    ck_assert_int_eq(cz_ns_coop_use_aax(4096, 1536), 1);
    ck_assert_int_eq(cz_ns_coop_use_aax(4096, 4095), 1);
    ck_assert_int_eq(cz_ns_coop_use_aax(4096, 4096), 0); /* equal cost: the standard form */
    ck_assert_int_eq(cz_ns_coop_use_aax(4096, 6144), 0);
}
END_TEST

START_TEST(adamw_hand)
{
    cz_adamw_hparams h = {
        .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    float p = 1.0f, m = 0.0f, v = 0.0f, g = 0.5f;
    /* m = 0.05, v = 0.0125, m^ = 0.5, v^ = 0.25: p = 1*(1 - 0.01) - 0.1*0.5/0.5 = 0.89. */
    cz_adamw_args a;
    cz__adamw_args_make(&a, &h, 1);
    cz__cpu_adamw(&p, &g, &m, &v, 1, &a);
    ck_assert_double_eq_tol(m, 0.05, 1e-7);
    ck_assert_double_eq_tol(v, 0.0125, 1e-7);
    ck_assert_double_eq_tol(p, 0.89, 1e-6);
    /* m = 0.02, v = 0.015, m^ = 0.02/0.19, v^ = 0.015/0.0975. */
    g = -0.25f;
    cz__adamw_args_make(&a, &h, 2);
    cz__cpu_adamw(&p, &g, &m, &v, 1, &a);
    ck_assert_double_eq_tol(m, 0.02, 1e-7);
    ck_assert_double_eq_tol(v, 0.015, 1e-7);
    ck_assert_double_eq_tol(p, 0.8542630578558273, 1e-6);
}
END_TEST

START_TEST(momentum_and_update)
{
    cz_muon_hparams h = hp("jordan", 5);
    float g[2] = {1.0f, -2.0f}, buf[2] = {0.5f, 0.0f}, in[2];
    cz__cpu_momentum(g, buf, in, 2, h.momentum, h.nesterov);
    ck_assert_float_eq_tol(buf[0], 1.475f, 1e-6f); /* 0.95*0.5 + 1 */
    ck_assert_float_eq_tol(in[0], 1.475f, 1e-6f);
    h.nesterov = 1;
    cz__cpu_momentum(g, buf, in, 2, h.momentum, h.nesterov);
    /* buf = 0.95*1.475 + 1 = 2.40125; in = 1 + 0.95*2.40125 = 3.2811875 */
    ck_assert_float_eq_tol(buf[0], 2.40125f, 1e-5f);
    ck_assert_float_eq_tol(in[0], 3.2811875f, 1e-5f);
    float p[1] = {2.0f}, u[1] = {0.5f};
    cz__cpu_apply_update(p, u, 1, 0.1f, 0.5f); /* 2*(1 - 0.05) - 0.05 */
    ck_assert_float_eq_tol(p[0], 1.85f, 1e-6f);
}
END_TEST

START_TEST(coeff_names)
{
    ck_assert_ptr_nonnull(cz__ns_coeffs_find("jordan"));
    ck_assert_double_eq(cz__ns_coeffs_find("cubic")->row[0].a, 1.5);
    ck_assert_ptr_null(cz__ns_coeffs_find("nope"));
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.muon.ns_coeffs = "nope";
    cz_muon_hparams h;
    cz_error err;
    ck_assert_int_eq(cz__muon_hparams_from_config(&h, &cfg, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "known: jordan, cubic"));
}
END_TEST

/* NorMuon's op against hand arithmetic in double: a 3 x 4 matrix by rows and by columns, v at
 * a stride (a column of the tensor of one column per unit), two steps from v = 0. */
START_TEST(normuon_op_hand)
{
    const float beta2 = 0.8f, eps = 1e-3f;
    for (int per_col = 0; per_col < 2; per_col++) {
        float x[12], v[8] = {0};
        double ref[12], rv[4] = {0}, *work = cpu.ops->alloc(&cpu, 9 * sizeof(double));
        int n = per_col ? 4 : 3, len = per_col ? 3 : 4;
        for (int step = 0; step < 2; step++) {
            for (int k = 0; k < 12; k++)
                x[k] = (float)(0.1 * (k % 5) - 0.17 * step + 0.05 * k), ref[k] = x[k];
            cpu.ops->normuon(&cpu, x, 3, 4, per_col, v, 2, beta2, eps, work);
            double before = 0, after = 0, d[4];
            for (int i = 0; i < n; i++) {
                double s = 0;
                for (int j = 0; j < len; j++) {
                    double e = ref[per_col ? j * 4 + i : i * 4 + j];
                    s += e * e;
                }
                before += s;
                rv[i] = beta2 * rv[i] + (1 - beta2) * s / len;
                d[i] = 1 / (sqrt(rv[i]) + eps);
                after += s * d[i] * d[i];
                ck_assert_double_eq_tol(v[2 * i], rv[i], 1e-6 * rv[i]);
            }
            double f = sqrt(before) / sqrt(after);
            for (int r = 0; r < 3; r++)
                for (int c = 0; c < 4; c++) {
                    double want = ref[r * 4 + c] * d[per_col ? c : r] * f;
                    ck_assert_double_eq_tol(x[r * 4 + c], want, 1e-5 * fabs(want) + 1e-7);
                }
            for (int i = 0; i < 4; i++) /* between the strided entries: untouched */
                ck_assert_float_eq(v[2 * i + 1], 0.0f);
        }
        cpu.ops->release(&cpu, work);
    }
    /* A zero update stays zero (the norm after is clamped, not divided by). */
    float z[6] = {0}, zv[3] = {0};
    double *work = cpu.ops->alloc(&cpu, 7 * sizeof(double));
    cpu.ops->normuon(&cpu, z, 3, 2, 0, zv, 1, 0.95f, 1e-8f, work);
    for (int k = 0; k < 6; k++)
        ck_assert_float_eq(z[k], 0.0f);
    cpu.ops->release(&cpu, work);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_optim");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, ns_diag_one_step);
    tcase_add_test(tc, ns_orthogonalizes);
    tcase_add_test(tc, ns_tall_and_blocks);
    tcase_add_test(tc, ns_batched_equals_single);
    tcase_add_test(tc, ns_batch_cap);
    tcase_add_test(tc, coop_ops_equal_single);
    tcase_add_test(tc, coop_pack_round_trip);
    tcase_add_test(tc, coop_form_rule);
    tcase_add_test(tc, coop_panel_rule);
    tcase_add_test(tc, adamw_hand);
    tcase_add_test(tc, momentum_and_update);
    tcase_add_test(tc, normuon_op_hand);
    tcase_add_test(tc, coeff_names);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
