/* Every size a SOAP or Shampoo step hands the solver ops was asked of linalg_work when the
 * executor was created.
 *
 * The cuda backend sizes cuSOLVER's workspaces by exact n, queried in linalg_work at create
 * time, and refuses a syevd or qr of an n it never sized ("cuda solver called for n = 16, which
 * linalg_work never sized"). The cpu backend sizes by formula, so a CPU run cannot see a size
 * that was missed. This test runs the cpu backend behind a wrapper that behaves as the cuda
 * backend does: linalg_work records each n, and syevd, qr and basis_sort fail on an n it did
 * not record. The plans are the GPU test's: a square matrix, a wide one whose long side is
 * above SOAP's max_precond_dim (only its rows are rotated), a two-block matrix, and, under
 * Shampoo with 32-wide tiles, a 16 x 40 matrix cut into 16 x 32 and 16 x 8 tiles. */
#include "exec_fixture.h"
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "cz_format.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

enum { MAXN = 64 };
static int64_t sized[MAXN];
static int nsized, unsized_calls, solver_calls;
static int64_t first_unsized;

static bool was_sized(int64_t n)
{
    for (int i = 0; i < nsized; i++)
        if (sized[i] == n)
            return true;
    return false;
}

static int check_n(int64_t n, cz_error *err)
{
    solver_calls++;
    if (was_sized(n))
        return CZ_OK;
    if (!unsized_calls++)
        first_unsized = n;
    return cz__error_set(err, CZ_EINTERNAL,
                         "solver called for n = %lld, which linalg_work never sized", (long long)n);
}

static int t_linalg_work(cz_compute *c, int64_t n, int64_t vn, cz_linalg_work *out, cz_error *err)
{
    if (!was_sized(n) && nsized < MAXN)
        sized[nsized++] = n;
    return cz__compute_cpu_ops.linalg_work(c, n, vn, out, err);
}

static int t_syevd(cz_compute *c, float *a, float *w, int64_t n, float *work, cz_error *err)
{
    int rc = check_n(n, err);
    return rc ? rc : cz__compute_cpu_ops.syevd(c, a, w, n, work, err);
}

static int t_qr(cz_compute *c, float *a, int64_t n, float *work, cz_error *err)
{
    int rc = check_n(n, err);
    return rc ? rc : cz__compute_cpu_ops.qr(c, a, n, work, err);
}

static void t_basis_sort(cz_compute *c, float *q, float *mq, int64_t n, float *v, int64_t rows,
                         int64_t cols, int side, float *work)
{
    cz_error e;
    if (!check_n(n, &e))
        cz__compute_cpu_ops.basis_sort(c, q, mq, n, v, rows, cols, side, work);
}

static cz_compute_ops exact;

static void setup(void)
{
    exact = cz__compute_cpu_ops;
    exact.name = "cpu-exact-sizes";
    exact.linalg_work = t_linalg_work;
    exact.syevd = t_syevd;
    exact.qr = t_qr;
    exact.basis_sort = t_basis_sort;
    ck_assert_int_eq(cz__compute_register(&exact), 0);
    nsized = unsized_calls = solver_calls = 0;
}

static const fx_param PARAMS[] = {
    {"square", 2, 12, 12, -1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"wide", 2, 16, 40, -1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"qkv", 2, 24, 12, -1, CZ_KIND_MATRIX, 0, 2, {12, 12}},
    {"norm", 1, 24, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
};

/* 12 steps with refreshes every 5 on the exact-size backend. */
static void run(cz_optimizer opt)
{
    cz_plan *pl = fx_plan(PARAMS, 4, 1);
    ck_assert_ptr_nonnull(pl);
    pl->settings.optimizer = opt;
    pl->settings.precondition_frequency = 5;
    pl->settings.max_precond_dim = 32;
    size_t n = (size_t)pl->buckets[0].size;
    float *P = calloc(n, sizeof(float)), *G = calloc(n, sizeof(float));
    ck_assert(P && G);
    for (size_t i = 0; i < n; i++)
        P[i] = 0.1f * fx_val(i);
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.backend = "cpu-exact-sizes";
    cfg.comm = "self";
    cfg.shampoo.max_dim = 32;
    cz_executor *ex = NULL;
    cz_error err;
    ck_assert_msg(cz_executor_create_from_plan(&ex, pl, &cfg, &err) == 0, "%s", err.message);
    ck_assert_int_eq(cz_executor_bind_buffers(ex, P, G, n, &err), 0);
    for (int s = 0; s < 12; s++) {
        for (size_t i = 0; i < n; i++)
            G[i] = 0.01f * fx_val(1000003u * (uint64_t)s + i);
        int rc = cz_executor_step(ex, &err);
        ck_assert_msg(rc == 0, "%s step %d: %s", cz_optimizer_name(opt), s, err.message);
    }
    ck_assert_msg(unsized_calls == 0, "%s: %d solver calls of an unsized n (first n = %lld)",
                  cz_optimizer_name(opt), unsized_calls, (long long)first_unsized);
    ck_assert_int_gt(solver_calls, 0);
    cz_executor_free(ex);
    cz_plan_free(pl);
    free(P);
    free(G);
}

START_TEST(soap_sizes_every_side)
{
    setup();
    run(CZ_OPTIM_SOAP);
    /* The wide matrix's 16 rows are rotated, its 40 columns (> 32) are not. */
    ck_assert(was_sized(12) && was_sized(16));
    ck_assert(!was_sized(40));
}
END_TEST

START_TEST(shampoo_sizes_every_tile_side)
{
    setup();
    run(CZ_OPTIM_SHAMPOO);
    /* 16 x 40 in tiles of 32: 16 x 32 and 16 x 8, each side factored. */
    ck_assert(was_sized(8) && was_sized(12) && was_sized(16) && was_sized(32));
}
END_TEST

START_TEST(factored_sides_rule)
{
    int64_t s[2];
    ck_assert_int_eq(cz__la_factored_sides(16, 40, 32, s), 1);
    ck_assert_int_eq(s[0], 16);
    ck_assert_int_eq(cz__la_factored_sides(40, 16, 32, s), 1);
    ck_assert_int_eq(s[0], 16);
    ck_assert_int_eq(cz__la_factored_sides(16, 8, 32, s), 2);
    ck_assert(s[0] == 16 && s[1] == 8);
    ck_assert_int_eq(cz__la_factored_sides(12, 12, 32, s), 1); /* one size, asked once */
    ck_assert_int_eq(cz__la_factored_sides(64, 40, 32, s), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("solver_sizes");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, factored_sides_rule);
    if (cz__compute_cpu_ops.syevd) { /* LAPACKE: SOAP and Shampoo run on the cpu backend */
        tcase_add_test(tc, soap_sizes_every_side);
        tcase_add_test(tc, shampoo_sizes_every_tile_side);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
