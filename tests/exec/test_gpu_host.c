/* Host-side logic of the GPU backends that needs no device: kernel grid sizes, the per-element
 * functions the kernels share with the CPU loops, and the backend selection (what is refused,
 * with which message) in this build, with or without CUDA. */
#include "cz_exec_testing.h"
#include "exec_fixture.h"
#include "canzona_exec.h"
#include "cz_format.h"

#include <check.h>
#include <math.h>
#include <string.h>

START_TEST(launch_blocks)
{
    ck_assert_int_eq(cz_launch_blocks(0, 256, 4096), 1);
    ck_assert_int_eq(cz_launch_blocks(1, 256, 4096), 1);
    ck_assert_int_eq(cz_launch_blocks(256, 256, 4096), 1);
    ck_assert_int_eq(cz_launch_blocks(257, 256, 4096), 2);
    /* 2^40 elements: capped, the grid-stride loop covers the rest. */
    ck_assert_int_eq(cz_launch_blocks((int64_t)1 << 40, 256, 4096), 4096);
    ck_assert_int_eq(cz_launch_blocks(4096 * 256, 256, 4096), 4096);
    ck_assert_int_eq(cz_launch_blocks(4096 * 256 + 1, 256, 4096), 4096);
}
END_TEST

START_TEST(launch_runs_grid)
{
    int x, y;
    /* One run as long as a whole matrix (TP 1): spread over blocks, not one block. */
    cz_launch_runs_grid(1, 4096 * 4096, 256, &x, &y);
    ck_assert_int_eq(y, 1);
    ck_assert_int_eq(x, 65536);
    cz_launch_runs_grid(3, (int64_t)151936 * 1024, 256, &x, &y);
    ck_assert_int_eq(y, 3);
    ck_assert_int_eq(x, 65536 / 3);
    /* Many short runs (row shards): a block or a few per run. */
    cz_launch_runs_grid(10000, 1000, 256, &x, &y);
    ck_assert_int_eq(y, 10000);
    ck_assert_int_eq(x, 4);
    cz_launch_runs_grid(10000, 100000, 256, &x, &y);
    ck_assert_int_eq(x, 6); /* capped: 6 x 10000 <= 65536 */
    /* More runs than the grid's y: y capped, x at least 1; the kernels' loops cover the rest. */
    cz_launch_runs_grid(1000000, 1, 256, &x, &y);
    ck_assert_int_eq(y, 65535);
    ck_assert_int_eq(x, 1);
    cz_launch_runs_grid(0, 0, 256, &x, &y);
    ck_assert_int_eq(y, 1);
    ck_assert_int_eq(x, 1);
}
END_TEST

START_TEST(per_element)
{
    /* Momentum: buf = 0.9 * 2 + 1 = 2.8; Nesterov input g + mu * buf = 1 + 2.52 = 3.52. */
    float buf = 2.0f;
    ck_assert_float_eq_tol(cz_ew_momentum(1.0f, &buf, 0.9f, 1), 3.52f, 1e-6f);
    ck_assert_float_eq_tol(buf, 2.8f, 1e-6f);
    buf = 2.0f;
    ck_assert_float_eq_tol(cz_ew_momentum(1.0f, &buf, 0.9f, 0), 2.8f, 1e-6f);
    /* Update with decoupled decay: 1 * (1 - 0.1 * 0.5) - 0.1 * 2 = 0.75. */
    ck_assert_float_eq_tol(cz_ew_update(1.0f, 2.0f, cz__ew_keep(0.1f, 0.5f), 0.1f), 0.75f, 1e-6f);
    /* AdamW, first step from zero moments: m = 0.1 g, v = 0.05 g^2, bias-corrected to g and
     * g^2, so p moves by lr * g / (|g| + eps) = lr * sign(g). */
    float m = 0, v = 0;
    float p = cz_ew_adamw(1.0f, -3.0f, &m, &v, 0.9f, 0.95f, 0.1f, 0.05f, 0.01f, 0.0f, 1.0f);
    ck_assert_float_eq_tol(p, 1.01f, 1e-6f);
    ck_assert_float_eq_tol(m, -0.3f, 1e-6f);
    ck_assert_float_eq_tol(v, 0.45f, 1e-6f);
    /* Normalisation factor and squares in double (no overflow for the largest float). */
    ck_assert_float_eq_tol(cz_ew_norm_inv(25.0, 0.0f), 0.2f, 1e-7f);
    ck_assert(isfinite(cz_ew_sq(3.0e38f)));
    ck_assert(!isfinite(cz_ew_sq(NAN)));
    /* bf16: round to nearest even, and back exactly. */
    ck_assert_uint_eq(cz_ew_bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);
    ck_assert_uint_eq(cz_ew_bf16_from_f32(1.0f + 3 * 0x1p-8f), 0x3f82);
    ck_assert_float_eq(cz_ew_f32_from_bf16(0x3f82), 1.0f + 0x1p-6f);
}
END_TEST

static const fx_param PARAMS[] = {
    {"w", 2, 8, 12, -1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"b", 1, 12, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
};

static int create(const char *backend, const char *comm, cz_exec_memory mem, cz_error *err)
{
    cz_plan *pl = fx_plan(PARAMS, 2, 1);
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.backend = backend;
    cfg.comm = comm;
    cfg.memory = mem;
    cz_executor *ex = NULL;
    int rc = cz_executor_create_from_plan(&ex, pl, &cfg, err);
    cz_executor_free(ex);
    cz_plan_free(pl);
    return rc;
}

START_TEST(backend_selection)
{
    cz_error err;
    /* cuda binds device memory: host memory is refused before any device or library is
     * touched. */
    ck_assert_int_eq(create("cuda", "self", CZ_EXEC_MEMORY_HOST, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "CZ_EXEC_MEMORY_DEVICE"));
    /* With device memory the GPU plugin answers: a build without it says so; with it, no device
     * (or a missing NVIDIA library) is refused naming the backend. */
    int rc = create("cuda", "self", CZ_EXEC_MEMORY_DEVICE, &err);
    if (!cz__gpu_built()) {
        ck_assert_int_eq(rc, CZ_EUNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(err.message, "this build has no GPU backends"));
    } else if (rc) {
        ck_assert_int_eq(rc, CZ_EUNSUPPORTED);
        ck_assert_msg(strstr(err.message, "compute backend 'cuda'") != NULL, "%s", err.message);
    }
    /* The cpu backend cannot take the nccl plane (device memory only). */
    rc = create("cpu", "nccl", CZ_EXEC_MEMORY_HOST, &err);
    ck_assert_int_ne(rc, 0);
    if (cz__comm_mpi_available())
        ck_assert_msg(strstr(err.message, "needs backend 'cuda'") ||
                          strstr(err.message, "'nccl' is not available"),
                      "%s", err.message);
    else
        ck_assert_ptr_nonnull(strstr(err.message, "bootstraps over MPI"));
    ck_assert_int_eq(create("tpu", "self", CZ_EXEC_MEMORY_HOST, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "known: cpu"));
}
END_TEST

/* Slots by task order on TP 2: a -> 0, b -> 1, c -> 0, d -> 1. */
static const fx_param WORK[] = {
    {"a", 2, 4, 8, -1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"b", 2, 4, 8, -1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"c", 2, 8, 4, -1, CZ_KIND_MATRIX, 0, 0, {0}},     /* tall: oriented 4 x 8 */
    {"d", 2, 6, 10, -1, CZ_KIND_MATRIX, 1, 2, {4, 6}}, /* blocks 6x4 -> 4x6, and 6x6 */
    {"e", 1, 8, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
};

START_TEST(ns_workload)
{
    cz_plan *pl = fx_plan(WORK, 5, 2);
    cz_ns_workload w;
    cz_error err;
    /* TP rank 0 hosts a and c: one batch of two 4 x 8 blocks; an iteration of 4 x 8 costs
     * 2*16*8 + 2*64 + 2*16*8 = 640 FLOPs (c != 0). */
    ck_assert_int_eq(cz__ns_workload_make(&w, pl, 0, 0, 5, 2.0, &err), 0);
    ck_assert_int_eq(w.nbatches, 1);
    ck_assert_int_eq(w.batches[0].rows * 100 + w.batches[0].cols, 408);
    ck_assert_int_eq(w.batches[0].count, 2);
    ck_assert_double_eq(w.flops, 5.0 * 2 * 640);
    ck_assert_int_eq(w.batch_n, 2 * 32);
    ck_assert_int_eq(w.work_n, 2 * (2 * 16 + 32));
    cz__ns_workload_free(&w);
    /* TP rank 1 hosts b and d's two blocks: 4x6 (512), 4x8 (640), 6x6 (1296), shape order. */
    ck_assert_int_eq(cz__ns_workload_make(&w, pl, 0, 1, 5, 2.0, &err), 0);
    ck_assert_int_eq(w.nbatches, 3);
    ck_assert_int_eq(w.batches[0].cols, 6);
    ck_assert_int_eq(w.batches[2].rows, 6);
    ck_assert_int_eq(w.nblocks, 3);
    ck_assert_double_eq(w.flops, 5.0 * (512 + 640 + 1296));
    cz__ns_workload_free(&w);
    /* Without the A A product (cubic): 4 x 8 costs 512. */
    ck_assert_int_eq(cz__ns_workload_make(&w, pl, 0, 0, 1, 0.0, &err), 0);
    ck_assert_double_eq(w.flops, 2 * 512);
    cz__ns_workload_free(&w);
    int d = -1, t = -1;
    ck_assert_int_eq(cz__ns_workload_busiest(pl, 5, 2.0, &d, &t, &err), 0);
    ck_assert_int_eq(d * 10 + t, 1);
    ck_assert_int_eq(cz__ns_workload_make(&w, pl, 0, 2, 5, 2.0, &err), CZ_EINVALID);
    cz_plan_free(pl);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu_host");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, launch_blocks);
    tcase_add_test(tc, launch_runs_grid);
    tcase_add_test(tc, per_element);
    tcase_add_test(tc, backend_selection);
    tcase_add_test(tc, ns_workload);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
