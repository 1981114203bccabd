/* The device model's cost terms (device_model.c, megatron_muon.c) derived by hand on small cases,
 * the calibration's fit and its effect on a plan's costs, and the planner's count of the
 * executor's Newton-Schulz kernels against the executor's own plan of them (ns_plan.c).
 *
 * The test device: bf16 GEMMs at 1 TFLOP/s, fp32 at 0.5, memory at 1000 GB/s (1e12 B/s), a cuBLAS
 * call 2 us (bf16) or 3 us (fp32), a launch 1 us, an NCCL call 4 us, a PyTorch op 5 us. */
#include "cz_test_util.h"
#include "cz_exec_testing.h"

#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <unistd.h>

#define TOL 1e-15

static cz_cluster *device(void)
{
    cz_cluster *c = czt_cluster_new(1, 4, 1);
    c->device.mem_gbps = 1000.0;
    c->device.costs = (cz_device_costs){.on = 1,
                                        .gemm_tflops = {1.0, 0.5},
                                        .gemm_call_s = {2e-6, 3e-6},
                                        .launch_s = 1e-6,
                                        .nccl_call_s = 4e-6,
                                        .torch_op_s = 5e-6};
    return c;
}

START_TEST(gemm_roofline)
{
    cz_cluster *c = device();
    /* 1000^3 bf16: 2e9 FLOPs = 2 ms at 1 TFLOP/s; (1e6 + 1e6) 2 + 1e6 4 = 8e6 bytes = 8 us:
     * compute bound, after the 2 us call. */
    ck_assert_double_eq_tol(cz__dm_gemm_seconds(c, 1000, 1000, 1000, 1, CZ_GEMM_BF16, 0),
                            2e-6 + 2e-3, TOL);
    /* 4000 x 4000 x 1 (skinny): 3.2e7 FLOPs = 32 us, but (4000 + 4000) 2 + 1.6e7 4 = 64016000
     * bytes = 64.016 us: memory bound. */
    ck_assert_double_eq_tol(cz__dm_gemm_seconds(c, 4000, 4000, 1, 1, CZ_GEMM_BF16, 0),
                            2e-6 + 64.016e-6, TOL);
    /* Accumulating reads C too: 4000 x 4000 x 1 moves 128016000 bytes. */
    ck_assert_double_eq_tol(cz__dm_gemm_seconds(c, 4000, 4000, 1, 1, CZ_GEMM_BF16, 1),
                            2e-6 + 128.016e-6, TOL);
    /* A batch of 3 in one call: the call once, 3x the work. fp32: 0.5 TFLOP/s, 3 us. */
    ck_assert_double_eq_tol(cz__dm_gemm_seconds(c, 1000, 1000, 1000, 3, CZ_GEMM_FP32, 0),
                            3e-6 + 3 * 4e-3, TOL);
    /* The flat model: FLOPs over matmul_tflops only, the expression of before. */
    c->device.costs.on = 0;
    ck_assert(cz__dm_gemm_seconds(c, 4000, 4000, 1, 1, CZ_GEMM_BF16, 0) ==
              2.0 * 4000 * 4000 * 1 * 1 / (1.0 * 1e12));
    cz_cluster_free(c);
}
END_TEST

START_TEST(syrk_kernel_host)
{
    cz_cluster *c = device();
    /* SYRK n = 1000, k = 2000: n^2 k = 2e9 FLOPs = 4 ms at 0.5 TFLOP/s (bytes 1000 * 2000 * 4 +
     * 1000^2 * 2 = 1e7, 10 us): per matrix, a call each, two matrices. */
    ck_assert_double_eq_tol(cz__dm_syrk_seconds(c, 1000, 2000, 2, 0), 2 * (3e-6 + 4e-3), TOL);
    /* An elementwise kernel of 5 MB: 1 us + 5 us. */
    ck_assert_double_eq_tol(cz__dm_kernel_seconds(c, 5e6), 1e-6 + 5e-6, TOL);
    /* The step's host work: 10 shards' sums of squares and the copy (11 launches), and a 16-byte
     * all-reduce over 256 ranks: 2 log2(256) = 16 messages of 5 us. */
    ck_assert_double_eq_tol(cz__dm_step_host_seconds(c, 10, 256, 5.0), 11e-6 + 16 * 5e-6, TOL);
    ck_assert_double_eq_tol(cz__dm_call_seconds(c), 4e-6, TOL);
    c->device.costs.on = 0;
    ck_assert(cz__dm_step_host_seconds(c, 10, 256, 5.0) == 0.0);
    ck_assert(cz__dm_call_seconds(c) == 0.0);
    ck_assert(cz__dm_kernel_seconds(c, 5e6) == 5e6 / (1000.0 * 1e9));
    cz_cluster_free(c);
}
END_TEST

START_TEST(ns_by_hand)
{
    cz_cluster *c = device();
    /* bf16, a = 100, b = 200, two matrices, three iterations. One iteration, op by op:
     *   X to bf16   2 * 2e4 * 6 = 2.4e5 B            1 us + 0.24 us
     *   A = X X^T   8e6 FLOP (2.4e5 B)               2 us + 8 us
     *   A to bf16   2 * 1e4 * 6 = 1.2e5 B            1 us + 0.12 us
     *   B = A       2 * 1e4 * 8 = 1.6e5 B            1 us + 0.16 us
     *   B += c A A  4e6 FLOP (2.4e5 B)               2 us + 4 us
     *   B to bf16   1.2e5 B                          1 us + 0.12 us
     *   X = aX + BX 8e6 FLOP (4.4e5 B)               2 us + 8 us
     * = 30.64 us. Around each matrix: three launches and a kernel moving 2e4 * 20 B (4.4 us). */
    ck_assert_double_eq_tol(cz__dm_ns_seconds(c, 100, 200, 2, 3, CZ_GEMM_BF16),
                            3 * 30.64e-6 + 2 * 4.4e-6, 1e-14);
    /* fp32 general form, one matrix, one iteration (200 x 100 given: oriented a <= b):
     *   A = X X^T   4e6 FLOP at 0.5 TFLOP/s          3 us + 8 us
     *   B = A       8e4 B                            1 us + 0.08 us
     *   B += c A A  2e6 FLOP                         3 us + 4 us
     *   Y = B X     4e6 FLOP                         3 us + 8 us
     *   X = aX + Y  2.4e5 B                          1 us + 0.24 us
     * = 31.32 us, and 4.4 us around. */
    ck_assert_double_eq_tol(cz__dm_ns_seconds(c, 200, 100, 1, 1, CZ_GEMM_FP32), 31.32e-6 + 4.4e-6,
                            1e-14);
    /* Megatron's (PyTorch, bf16 in and out), one matrix, one iteration: normalize (norm 8e4 B,
     * clamp, divide 1.6e5 B), to bf16 (1.2e5 B): 4 ops 20 us + 0.360008 us; X X^T 4 us, A A 2 us,
     * B X 4 us, each an op (5 us); to fp32 and the scale's two multiplies: 15 us + 0.44 us. */
    ck_assert_double_eq_tol(cz__dm_torch_ns_seconds(c, 100, 200, 1, 1),
                            20.360008e-6 + 25e-6 + 15.44e-6, 1e-14);
    /* Without the device model: 5 (4 a^2 b + 2 a^3) FLOPs at the matmul rate, per matrix. */
    c->device.costs.on = 0;
    ck_assert(cz__dm_ns_seconds(c, 100, 200, 2, 5, CZ_GEMM_BF16) ==
              2 * 5.0 * (4.0 * 100 * 100 * 200 + 2.0 * 100 * 100 * 100) / 1e12);
    cz_cluster_free(c);
}
END_TEST

/* The planner's count of one iteration's kernels (cz__dm_ns_kernels) is the executor's plan of
 * it (cz__ns_plan with cz__ns_use_syrk on CUDA): GEMMs, SYRKs (a call per matrix) and elementwise
 * passes, for both precisions, both forms and batches. */
START_TEST(ns_kernels_match_executor)
{
    static const int64_t rows[] = {64, 1024, 4095, 4096, 5120};
    static const int batches[] = {1, 3, 20};
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)
        for (size_t b = 0; b < sizeof batches / sizeof *batches; b++)
            for (int p = 0; p < 2; p++) {
                cz_ns_precision prec = p ? CZ_NS_FP32 : CZ_NS_BF16;
                int sym =
                    cz__ns_use_syrk(CZ_NS_TARGET_CUDA, rows[r], 3 * rows[r], batches[b], prec);
                cz_ns_op ops[CZ_NS_MAX_OPS];
                int n = cz__ns_plan(ops, rows[r], 3 * rows[r], batches[b], 3.4445, -4.775, 2.0315,
                                    prec, sym);
                ck_assert_int_gt(n, 0);
                int gemm = 0, syrk = 0, ew = 0;
                for (int i = 0; i < n; i++) {
                    if (ops[i].kind == CZ_NS_GEMM)
                        gemm++;
                    else if (ops[i].kind == CZ_NS_SYRK)
                        syrk += ops[i].batch; /* cuBLAS has no batched SYRK */
                    else
                        ew++;
                }
                cz_ns_kernels k = cz__dm_ns_kernels(rows[r], 3 * rows[r], batches[b],
                                                    p ? CZ_GEMM_FP32 : CZ_GEMM_BF16);
                ck_assert_int_eq(k.gemm_calls, gemm);
                ck_assert_int_eq(k.syrk_calls, syrk);
                ck_assert_int_eq(k.ew_kernels, ew);
                ck_assert_int_eq(k.sym, sym);
            }
    /* The planner's fixed-cost decomposition uses the general form's counts. */
    cz_ns_op ops[CZ_NS_MAX_OPS];
    ck_assert_int_eq(cz__ns_plan(ops, 64, 64, 1, 3.4445, -4.775, 2.0315, CZ_NS_BF16, 0),
                     CZ_NS_GEMMS_PER_ITERATION + CZ_NS_EW_KERNELS_BF16);
    ck_assert_int_eq(cz__ns_plan(ops, 64, 64, 1, 3.4445, -4.775, 2.0315, CZ_NS_FP32, 0),
                     CZ_NS_GEMMS_PER_ITERATION + CZ_NS_EW_KERNELS_FP32);
}
END_TEST

/* The test's alpha-beta curve: 1 us plus 1 ns per byte. */
static double ab(double bytes, const void *ctx)
{
    (void)ctx;
    return 1e-6 + bytes * 1e-9;
}

START_TEST(collectives_measured)
{
    cz_cluster *c = device();
    cz_calibration *cal = calloc(1, sizeof *cal);
    cal->coll = calloc(2, sizeof *cal->coll);
    cal->coll[0] = (cz_cal_coll){CZ_CAL_ALL_REDUCE, 8, 0, 1e3, 10e-6};
    cal->coll[1] = (cz_cal_coll){CZ_CAL_ALL_REDUCE, 8, 0, 1e6, 30e-6};
    cal->ncoll = 2;
    c->calibration = cal;
    /* Between the two sizes: linear, 10 us + (5e5 - 1e3) / (1e6 - 1e3) of 20 us. */
    ck_assert_double_eq_tol(cz__dm_collective_seconds(c, CZ_CAL_ALL_REDUCE, 8, 0, 5e5, ab, NULL),
                            10e-6 + (5e5 - 1e3) / (1e6 - 1e3) * 20e-6, TOL);
    /* Above: the curve moved through the largest, 30 us + (ab(2e6) - ab(1e6)) = 30 us + 1 ms. */
    ck_assert_double_eq_tol(cz__dm_collective_seconds(c, CZ_CAL_ALL_REDUCE, 8, 0, 2e6, ab, NULL),
                            30e-6 + 1e-3, TOL);
    /* Below: through the smallest, 10 us - 0.5 us. */
    ck_assert_double_eq_tol(cz__dm_collective_seconds(c, CZ_CAL_ALL_REDUCE, 8, 0, 500, ab, NULL),
                            9.5e-6, TOL);
    /* Another group size, scope or op: alpha-beta plus the NCCL call. */
    ck_assert_double_eq_tol(cz__dm_collective_seconds(c, CZ_CAL_ALL_REDUCE, 4, 0, 1e3, ab, NULL),
                            1e-6 + 1e-6 + 4e-6, TOL);
    ck_assert_double_eq_tol(cz__dm_collective_seconds(c, CZ_CAL_ALL_REDUCE, 8, 1, 1e3, ab, NULL),
                            6e-6, TOL);
    ck_assert_double_eq_tol(cz__dm_collective_seconds(c, CZ_CAL_ALL_GATHER, 8, 0, 1e3, ab, NULL),
                            6e-6, TOL);
    ck_assert(cz__dm_collective_seconds(c, CZ_CAL_ALL_REDUCE, 1, 0, 1e3, ab, NULL) == 0.0);
    c->device.costs.on = 0; /* the flat model: alpha-beta alone */
    ck_assert_double_eq_tol(cz__dm_collective_seconds(c, CZ_CAL_ALL_REDUCE, 8, 0, 5e5, ab, NULL),
                            ab(5e5, NULL), TOL);
    cz_cluster_free(c);
}
END_TEST

static cz_calibration *synthetic(const double *flops, const double *seconds, int n)
{
    cz_calibration *cal = calloc(1, sizeof *cal);
    cal->source = cz__strdup("synthetic.json");
    cal->gemm = calloc((size_t)n, sizeof *cal->gemm);
    for (int i = 0; i < n; i++) /* m n k with 2 m n k = flops: m = flops / 2, n = k = 1 */
        cal->gemm[i] = (cz_cal_gemm){(int64_t)(flops[i] / 2), 1, 1, 1, CZ_GEMM_BF16, seconds[i]};
    cal->ngemm = (size_t)n;
    return cal;
}

START_TEST(fit_by_hand)
{
    /* Exactly t = 5 us + F / 200 TFLOP/s: the fit finds both. */
    double F[] = {2e9, 2e10, 2e11, 2e12}, t[4], t2[4];
    for (int i = 0; i < 4; i++) {
        t[i] = 5e-6 + F[i] / 2e14;
        t2[i] = 2 * t[i];
    }
    cz_calibration *cal = synthetic(F, t, 4);
    double rate, c0;
    cz_error err;
    ck_assert_int_eq(cz__calibration_fit_gemm(cal, CZ_GEMM_BF16, &rate, &c0, &err), CZ_OK);
    ck_assert_double_eq_tol(rate, 200.0, 1e-9);
    ck_assert_double_eq_tol(c0, 5e-6, 1e-18);
    cz__calibration_free(cal);
    /* Every time doubled: half the rate, twice the intercept. */
    cal = synthetic(F, t2, 4);
    ck_assert_int_eq(cz__calibration_fit_gemm(cal, CZ_GEMM_BF16, &rate, &c0, &err), CZ_OK);
    ck_assert_double_eq_tol(rate, 100.0, 1e-9);
    ck_assert_double_eq_tol(c0, 10e-6, 1e-18);
    /* No fp32 GEMMs: refused, naming the file and the key. */
    ck_assert_int_eq(cz__calibration_fit_gemm(cal, CZ_GEMM_FP32, &rate, &c0, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "synthetic.json: $.gemm: 0 fp32 GEMMs"));
    cz__calibration_free(cal);
    /* A negative intercept means nothing: the line through the origin, least relative error:
     * (1e9, 1 us) and (2e9, 3 us) give s = sum(F / t) / sum(F^2 / t^2) = 1.6667e15 / 8.8889e29. */
    double F3[] = {1e9, 2e9}, t3[] = {1e-6, 3e-6};
    cal = synthetic(F3, t3, 2);
    ck_assert_int_eq(cz__calibration_fit_gemm(cal, CZ_GEMM_BF16, &rate, &c0, &err), CZ_OK);
    ck_assert(c0 == 0.0);
    double s = (1e9 / 1e-6 + 2e9 / 3e-6) / (1e18 / 1e-12 + 4e18 / 9e-12);
    ck_assert_double_eq_tol(rate, 1.0 / s * 1e-12, 1e-9);
    cz__calibration_free(cal);
    /* One size only: refused. */
    double F4[] = {1e9, 1e9}, t4[] = {1e-6, 1.1e-6};
    cal = synthetic(F4, t4, 2);
    ck_assert_int_eq(cz__calibration_fit_gemm(cal, CZ_GEMM_BF16, &rate, &c0, &err), CZ_EINVALID);
    cz__calibration_free(cal);
}
END_TEST

static const char *h200_path(char *buf, size_t n)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    snprintf(buf, n, "%s/plans/calibration/h200.json", src ? src : ".");
    return buf;
}

/* The bundled H200 calibration applied, and the H200 kind's defaults, which are its numbers. */
START_TEST(h200_calibration)
{
    char path[1024];
    cz_error err;
    cz_cluster *c = czt_cluster_new(1, 1, 1);
    ck_assert_int_eq(cz_cluster_calibrate(c, h200_path(path, sizeof path), &err), CZ_OK);
    const cz_device_costs *k = &c->device.costs;
    double launch = 4.152959883213043e-06, ns16 = 5.456858500011209e-05,
           ns32 = 3.756197000001294e-05;
    ck_assert(k->on);
    ck_assert(k->launch_s == launch);
    ck_assert_double_eq_tol(k->gemm_call_s[CZ_GEMM_BF16], (ns16 - 4 * launch) / 3, 1e-18);
    ck_assert_double_eq_tol(k->gemm_call_s[CZ_GEMM_FP32], (ns32 - 2 * launch) / 3, 1e-18);
    ck_assert_double_eq_tol(k->torch_op_s, ns16 / 7, 1e-18);
    ck_assert(k->nccl_call_s == launch);
    ck_assert_double_eq_tol(k->gemm_tflops[CZ_GEMM_BF16], 813.9, 0.05);
    ck_assert_double_eq_tol(k->gemm_tflops[CZ_GEMM_FP32], 51.2, 0.05);
    ck_assert(c->device.matmul_tflops == k->gemm_tflops[CZ_GEMM_BF16]);
    ck_assert_str_eq(c->calibration->device_name, "NVIDIA H200");
    /* The H200 kind's defaults are these numbers (its rates' ratio rounded to 4 digits). */
    cz_device_costs d;
    cz__device_kind_costs(CZ_DEVICE_KIND_H200, 813.9, &d);
    ck_assert(d.on);
    ck_assert(d.launch_s == k->launch_s && d.nccl_call_s == k->nccl_call_s);
    ck_assert(d.gemm_call_s[0] == k->gemm_call_s[0] && d.gemm_call_s[1] == k->gemm_call_s[1]);
    ck_assert(d.torch_op_s == k->torch_op_s);
    ck_assert_double_eq_tol(d.gemm_tflops[CZ_GEMM_FP32], k->gemm_tflops[CZ_GEMM_FP32], 0.05);
    cz__device_kind_costs(CZ_DEVICE_KIND_NONE, 813.9, &d);
    ck_assert(!d.on);
    cz_cluster_free(c);
}
END_TEST

/* The H200's Newton-Schulz timings by shape (docs/PERF.md section 7, canzona-bench ns
 * --per-shape: the executor's ns_batched, five iterations) against the device model of the
 * bundled calibration, which never saw them: the ratios docs/SIMULATOR.md prints ("Against our
 * own H200 measurements"), to two digits. */
START_TEST(h200_ns_by_shape)
{
    static const struct {
        int64_t rows, cols;
        int batch;
        double fp32_ms, fp32_ratio, bf16_ms, bf16_ratio;
    } t[] = {{4096, 12288, 1, 75.6, 0.91, 7.95, 0.88}, {1024, 4096, 20, 49.5, 0.80, 5.67, 0.69},
             {4096, 4096, 1, 31.4, 0.88, 3.86, 0.87},  {5120, 25600, 1, 235.2, 0.90, 21.90, 0.92},
             {1024, 5120, 16, 47.0, 0.82, 5.29, 0.70}, {5120, 8192, 1, 87.6, 0.88, 8.87, 0.92}};
    char path[1024];
    cz_error err;
    cz_cluster *c = czt_cluster_new(1, 1, 1);
    ck_assert_int_eq(cz_cluster_calibrate(c, h200_path(path, sizeof path), &err), CZ_OK);
    c->device.mem_gbps = 4010.0; /* the H200's 4.8 TB/s at the bundled files' 0.836 */
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        double f =
            cz__dm_ns_iterations_seconds(c, t[i].rows, t[i].cols, t[i].batch, 5, CZ_GEMM_FP32) *
            1e3 / t[i].fp32_ms;
        double b =
            cz__dm_ns_iterations_seconds(c, t[i].rows, t[i].cols, t[i].batch, 5, CZ_GEMM_BF16) *
            1e3 / t[i].bf16_ms;
        ck_assert_msg(fabs(f - t[i].fp32_ratio) < 0.0051, "fp32 %lld x %lld: %.3f",
                      (long long)t[i].rows, (long long)t[i].cols, f);
        ck_assert_msg(fabs(b - t[i].bf16_ratio) < 0.0051, "bf16 %lld x %lld: %.3f",
                      (long long)t[i].rows, (long long)t[i].cols, b);
    }
    cz_cluster_free(c);
}
END_TEST

/* ---- the plan's costs when one number of the calibration changes ---- */

static char tmpdir[256];

static void make_tmpdir(void)
{
    ck_assert_ptr_nonnull(czt_tmpdir_make(tmpdir, sizeof tmpdir, "cz_devmodel"));
}

static void remove_tmpdir(void)
{
    czt_tmpdir_remove(tmpdir);
}

/* The bundled calibration with launch_overhead_s and the bf16 iteration raised by the given
 * amounts, written as tmpdir/name; returns its path. */
static const char *variant(const char *name, double d_launch, double d_ns16, char *out, size_t n)
{
    char src[1024];
    json_error_t je;
    json_t *root = json_load_file(h200_path(src, sizeof src), 0, &je);
    ck_assert_ptr_nonnull(root);
    json_t *l = json_object_get(root, "launch_overhead_s");
    json_real_set(l, json_real_value(l) + d_launch);
    json_t *ns = json_object_get(json_object_get(root, "ns_iteration_overhead_s"), "bf16");
    json_real_set(ns, json_real_value(ns) + d_ns16);
    snprintf(out, n, "%s/%s", tmpdir, name);
    ck_assert_int_eq(json_dump_file(root, out, JSON_REAL_PRECISION(17)), 0);
    json_decref(root);
    return out;
}

static cz_plan *plan_with(const char *calibration)
{
    cz_model *m = czt_model_new("small", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "w", 64, 128, 0, CZ_KIND_MATRIX, -1);
    int q = czt_model_add(m, "qkv", 96, 64, 0, CZ_KIND_MATRIX, -1);
    czt_model_blocks(m, q, 0, 3, (const int64_t[]){32, 32, 32});
    czt_model_add(m, "norm", 64, 0, -1, CZ_KIND_ELEMENTWISE, -1);
    cz_cluster *c = czt_cluster_new(1, 2, 1);
    cz_error err;
    cz_settings s;
    cz_settings_init(&s);
    cz_plan *p = NULL;
    ck_assert_int_eq(cz_cluster_calibrate(c, calibration, &err), CZ_OK);
    ck_assert_msg(cz_plan_build(&p, m, c, &s, &err) == CZ_OK, "%s", err.message);
    cz_model_free(m);
    cz_cluster_free(c);
    return p;
}

START_TEST(one_rate_changes_costs_as_predicted)
{
    make_tmpdir();
    char a[512], b[512], d[512];
    double delta = 1e-6;
    cz_plan *base = plan_with(variant("base.json", 0, 0, a, sizeof a));
    cz_plan *launch = plan_with(variant("launch.json", delta, 0, b, sizeof b));
    cz_plan *iter = plan_with(variant("iteration.json", 0, delta, d, sizeof d));
    /* A launch 1 us dearer: the bf16 iteration stays what it measured (its GEMM calls are what
     * it leaves after its four launches, 4/3 us cheaper each), so a matrix of k Newton-Schulz
     * blocks pays its four launches around each block and its two per parameter: (4 k + 2) us;
     * the elementwise parameter one launch on each of the 2 TP ranks. */
    ck_assert_double_eq_tol(launch->params[0].cost - base->params[0].cost, (4 * 1 + 2) * delta,
                            1e-15);
    ck_assert_double_eq_tol(launch->params[1].cost - base->params[1].cost, (4 * 3 + 2) * delta,
                            1e-15);
    ck_assert_double_eq_tol(launch->params[2].cost - base->params[2].cost, 2 * delta, 1e-15);
    /* The bf16 iteration 1 us dearer: each of its three GEMM calls 1/3 us, 5 iterations per
     * block: 5 us per block. */
    ck_assert_double_eq_tol(iter->params[0].cost - base->params[0].cost, 5 * delta, 1e-15);
    ck_assert_double_eq_tol(iter->params[1].cost - base->params[1].cost, 3 * 5 * delta, 1e-15);
    ck_assert(iter->params[2].cost == base->params[2].cost);
    /* The plan records the calibration it was made with. */
    ck_assert_str_eq(base->calibration_device, "NVIDIA H200");
    ck_assert_str_eq(base->calibration_measured_at, "2026-11-27T12:16:46Z");
    ck_assert_int_eq((int)strlen(base->calibration_sha256), 64);
    ck_assert_str_ne(base->calibration_sha256, launch->calibration_sha256);
    cz_plan_free(base);
    cz_plan_free(launch);
    cz_plan_free(iter);
    remove_tmpdir();
}
END_TEST

/* ---- Megatron's modes (megatron_muon.c) ---- */

START_TEST(megatron_work_by_hand)
{
    cz_cluster *c = device(); /* TP 4: the domain, GTP 2 x TP 2 */
    cz_model *m = czt_model_new("m", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "w", 64, 128, 0, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "r", 64, 128, -1, CZ_KIND_MATRIX, -1);
    cz_settings s;
    cz_settings_init(&s);
    cz_megatron_work w;
    cz_error err;
    /* duplicated: all-gather over GTP (2 ranks) of the rank's piece, fp32: 4 * 64 * 128 / 4 =
     * 8192 B; then over TP (2 ranks) of the GTP-gathered half, 16384 B. */
    ck_assert_int_eq(
        cz__megatron_muon_work(&m->params[0], &s, c, CZ_MUON_TP_DUPLICATED, 2, &w, &err), CZ_OK);
    ck_assert_int_eq(w.ncoll, 2);
    ck_assert(w.coll[0].op == CZ_CAL_ALL_GATHER && w.coll[0].group == CZ_MG_GTP);
    ck_assert(w.coll[0].n == 2 && w.coll[0].bytes == 8192 && w.coll[0].count == 1);
    ck_assert(w.coll[1].group == CZ_MG_TP && w.coll[1].bytes == 16384);
    ck_assert(w.routed && w.shard_bytes == 8192 && w.local_elems == 2048);
    ck_assert(w.lpt_cost == 128.0 * 64 * 64);
    /* distributed: GTP (2) >= TP (2): TP all-gathered first (8192 B), then distributed over GTP
     * along dim 0, K = 128 (dim 1): one 4-byte norm all-reduce and 5 bf16 Grams of 2 * 128^2. */
    ck_assert_int_eq(
        cz__megatron_muon_work(&m->params[0], &s, c, CZ_MUON_TP_DISTRIBUTED, 2, &w, &err), CZ_OK);
    ck_assert_int_eq(w.ncoll, 3);
    ck_assert(w.coll[0].op == CZ_CAL_ALL_GATHER && w.coll[0].group == CZ_MG_TP &&
              w.coll[0].bytes == 8192);
    ck_assert(w.coll[1].op == CZ_CAL_ALL_REDUCE && w.coll[1].bytes == 4 && w.coll[1].count == 1);
    ck_assert(w.coll[2].group == CZ_MG_GTP && w.coll[2].bytes == 2.0 * 128 * 128 &&
              w.coll[2].count == 5);
    /* blockwise: no collective; a matrix sharded by nothing: none either, in every mode. */
    ck_assert_int_eq(
        cz__megatron_muon_work(&m->params[0], &s, c, CZ_MUON_TP_BLOCKWISE, 2, &w, &err), CZ_OK);
    ck_assert_int_eq(w.ncoll, 0);
    ck_assert_int_eq(
        cz__megatron_muon_work(&m->params[1], &s, c, CZ_MUON_TP_DUPLICATED, 2, &w, &err), CZ_OK);
    ck_assert_int_eq(w.ncoll, 0);
    ck_assert(!w.routed);
    /* A GTP that does not divide the domain is refused. */
    ck_assert_int_eq(
        cz__megatron_muon_work(&m->params[0], &s, c, CZ_MUON_TP_DUPLICATED, 3, &w, &err),
        CZ_EINVALID);
    /* Layer sharding's homes: LPT, largest first, ties in order, the first least-loaded home:
     * 5 -> 0, 4 -> 1, 3 -> 1, 3 -> 0, 1 -> 1; loads 8 and 8. */
    double cost[] = {5, 4, 3, 3, 1}, bins[2];
    int home[5];
    ck_assert_int_eq(cz__megatron_ns_homes(cost, 5, 2, home, bins), CZ_OK);
    int want[] = {0, 1, 1, 0, 1};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(home[i], want[i]);
    ck_assert(bins[0] == 8 && bins[1] == 8);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("device_model");
    TCase *t = tcase_create("terms");
    tcase_add_test(t, gemm_roofline);
    tcase_add_test(t, syrk_kernel_host);
    tcase_add_test(t, ns_by_hand);
    tcase_add_test(t, ns_kernels_match_executor);
    tcase_add_test(t, collectives_measured);
    tcase_add_test(t, fit_by_hand);
    tcase_add_test(t, h200_calibration);
    tcase_add_test(t, h200_ns_by_shape);
    tcase_add_test(t, one_rate_changes_costs_as_predicted);
    tcase_add_test(t, megatron_work_by_hand);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
