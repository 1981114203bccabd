/* `canzona-bench calibrate`: what the cost model needs to know about this GPU, measured, in a
 * canzona.calibration/1 file (docs/FORMATS.md): cuBLAS GEMM rates by shape, dtype and batch,
 * the cost of one kernel launch, the fixed cost of a Newton-Schulz iteration, and host-device
 * copy rates. One process, one GPU, no MPI. */
#include "bench.h"
#include "cz_exec_testing.h"
#include "ns_bench.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct cal_opts {
    const char *out;
    int reps, quick;
} cal_opts;

static void cal_usage(FILE *f)
{
    fprintf(f, "usage: canzona-bench calibrate [-o FILE] [--reps N] [--quick]\n"
               "Measures this machine's GPU for the cost model and writes a canzona.calibration/1\n"
               "file (docs/FORMATS.md): cuBLAS GEMM rates by shape, dtype and batch, one kernel\n"
               "launch, the fixed cost of a Newton-Schulz iteration, host-device copy rates.\n"
               "  -o, --out FILE  where to write it (default: print the table only)\n"
               "  --reps N        timed repetitions of each measurement, median kept (default 5)\n"
               "  --quick         fewer GEMM shapes (squares 1024 and 8192, two skinny shapes)\n");
}

static int cal_parse(int argc, char **argv, cal_opts *o)
{
    static const struct option longs[] = {{"out", required_argument, 0, 'o'},
                                          {"reps", required_argument, 0, 'r'},
                                          {"quick", no_argument, 0, 'q'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    *o = (cal_opts){.reps = 5};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:", longs, NULL)) != -1) {
        switch (c) {
        case 'o':
            o->out = optarg;
            break;
        case 'r':
            o->reps = atoi(optarg);
            break;
        case 'q':
            o->quick = 1;
            break;
        case 'h':
            return 1;
        default:
            return 2;
        }
    }
    return o->reps > 0 && o->reps <= 64 && optind == argc ? 0 : 2;
}

/* One GEMM measurement, printed and kept. */
static int gemm_entry(const cz_gpu_api *g, const cal_opts *o, int64_t m, int64_t n, int64_t k,
                      int batch, int bf16, json_t *arr, cz_error *err)
{
    double s = 0;
    int rc = g->time_gemm(m, n, k, batch, bf16, o->reps, &s, err);
    if (rc)
        return rc;
    double tf = 2.0 * (double)m * (double)n * (double)k * batch / s * 1e-12;
    printf("  gemm %-4s %6lld x %6lld x %6lld x %2d: %10.4f ms  %7.2f TFLOP/s\n",
           bf16 ? "bf16" : "fp32", (long long)m, (long long)n, (long long)k, batch, 1e3 * s, tf);
    json_t *e = json_pack("{s:I, s:I, s:I, s:i, s:s, s:f, s:f}", "m", (json_int_t)m, "n",
                          (json_int_t)n, "k", (json_int_t)k, "batch", batch, "dtype",
                          bf16 ? "bf16" : "fp32", "seconds", s, "tflops", tf);
    if (!e || json_array_append_new(arr, e))
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the calibration");
    return CZ_OK;
}

/* Squares, then the three products of a Newton-Schulz iteration of an a x 4a block (X X^T:
 * a x a x 4a; A A: a x a x a; B X: a x 4a x a), batched 1 and 8. */
static int gemm_grid(const cz_gpu_api *g, const cal_opts *o, json_t *arr, cz_error *err)
{
    static const int64_t sq_full[] = {512, 1024, 2048, 4096, 8192}, sq_quick[] = {1024, 8192};
    static const int64_t ns_full[] = {512, 1024, 2048, 4096}, ns_quick[] = {1024, 4096};
    const int64_t *sq = o->quick ? sq_quick : sq_full, *ns = o->quick ? ns_quick : ns_full;
    int nsq = o->quick ? 2 : 5, nns = o->quick ? 2 : 4, rc = CZ_OK;
    for (int bf16 = 0; bf16 < 2 && !rc; bf16++) {
        for (int i = 0; i < nsq && !rc; i++)
            rc = gemm_entry(g, o, sq[i], sq[i], sq[i], 1, bf16, arr, err);
        for (int i = 0; i < nns && !rc; i++) {
            int64_t a = ns[i], b = 4 * a;
            for (int batch = 1; batch <= 8 && !rc; batch *= 8) {
                rc = gemm_entry(g, o, a, a, b, batch, bf16, arr, err);
                if (!rc)
                    rc = gemm_entry(g, o, a, a, a, batch, bf16, arr, err);
                if (!rc)
                    rc = gemm_entry(g, o, a, b, a, batch, bf16, arr, err);
            }
        }
    }
    return rc;
}

/* Seconds of `steps` Newton-Schulz iterations of one rows x cols matrix (median of reps). */
static int ns_seconds(cz_compute *c, float *x, float *work, cz_event *ev, int64_t rows,
                      int64_t cols, int steps, int reps, double *sec, cz_error *err)
{
    const cz_ns_coeffs *k = cz__ns_coeffs_find("jordan");
    double v[64];
    int rc = c->ops->ns_batched(c, x, 1, rows, cols, k, steps, work, err);
    for (int r = 0; r < reps && !rc; r++) {
        c->ops->event_record(c, ev);
        rc = c->ops->event_sync(c, ev, err);
        double t0 = cz__exec_now();
        for (int i = 0; i < 20 && !rc; i++)
            rc = c->ops->ns_batched(c, x, 1, rows, cols, k, steps, work, err);
        c->ops->event_record(c, ev);
        if (!rc)
            rc = c->ops->event_sync(c, ev, err);
        v[r] = (cz__exec_now() - t0) / 20;
    }
    if (rc)
        return rc;
    for (int i = 1; i < reps; i++) /* insertion sort: reps <= 64 */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    *sec = reps % 2 ? v[reps / 2] : 0.5 * (v[reps / 2 - 1] + v[reps / 2]);
    return CZ_OK;
}

/* The fixed cost of one iteration: a 64 x 64 matrix, whose arithmetic is negligible, at 5 and
 * at 25 iterations; the difference over 20 iterations is what each costs beyond its FLOPs
 * (its kernel launches and cuBLAS calls). */
static int ns_overhead(const cal_opts *o, int bf16, double *per_iter, cz_error *err)
{
    cz_cuda_options co = {.ns_precision = bf16 ? CZ_NS_BF16 : CZ_NS_FP32};
    cz_compute c;
    int rc = cz__compute_open_cuda(&c, &co, err);
    if (rc)
        return rc;
    float *x = c.ops->alloc(&c, 64 * 64 * sizeof(float));
    float *work = c.ops->alloc(&c, (size_t)cz__ns_work_floats(64, 64, 1) * sizeof(float));
    cz_event *ev = c.ops->event_create(&c);
    double t5 = 0, t25 = 0;
    if (!x || !work || !ev)
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory for the Newton-Schulz calibration");
    if (!rc)
        rc = ns_seconds(&c, x, work, ev, 64, 64, 5, o->reps, &t5, err);
    if (!rc)
        rc = ns_seconds(&c, x, work, ev, 64, 64, 25, o->reps, &t25, err);
    if (!rc)
        *per_iter = (t25 - t5) / 20.0;
    if (ev)
        c.ops->event_free(&c, ev);
    if (x)
        c.ops->release(&c, x);
    if (work)
        c.ops->release(&c, work);
    cz__compute_close(&c);
    return rc;
}

static int copies(const cz_gpu_api *g, const cal_opts *o, json_t *arr, cz_error *err)
{
    const size_t bytes = (size_t)256 << 20;
    int rc = CZ_OK;
    for (int pinned = 1; pinned >= 0 && !rc; pinned--)
        for (int h2d = 1; h2d >= 0 && !rc; h2d--) {
            double s = 0;
            rc = g->time_copy(bytes, h2d, pinned, o->reps, &s, err);
            if (rc)
                break;
            double gbps = (double)bytes / s * 1e-9;
            printf("  copy %s, %s host memory, 256 MiB: %8.3f ms  %7.2f GB/s\n",
                   h2d ? "host to device" : "device to host", pinned ? "pinned" : "pageable",
                   1e3 * s, gbps);
            json_t *e =
                json_pack("{s:s, s:b, s:I, s:f, s:f}", "direction", h2d ? "h2d" : "d2h", "pinned",
                          pinned, "bytes", (json_int_t)bytes, "seconds", s, "gb_per_s", gbps);
            if (!e || json_array_append_new(arr, e))
                rc = cz__error_set(err, CZ_ENOMEM, "out of memory for the calibration");
        }
    return rc;
}

static json_t *device_of(const cz_gpu_versions *v)
{
    char cc[16], when[32];
    snprintf(cc, sizeof cc, "%d.%d", v->cc_major, v->cc_minor);
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    return json_pack("{s:s, s:s, s:i, s:f, s:i, s:i, s:i, s:i, s:i, s:s}", "name", v->device,
                     "compute_capability", cc, "sm_count", v->sm_count, "memory_gib",
                     (double)v->memory_bytes / (double)(1u << 30), "driver_cuda", v->driver,
                     "cuda_runtime", v->runtime, "cublas", v->cublas, "cusolver", v->cusolver,
                     "nccl", v->nccl, "measured_at", when);
}

static int calibrate(const cal_opts *o, cz_error *err)
{
    const cz_gpu_api *g;
    cz_gpu_versions v;
    char why[512];
    int rc = cz__gpu_load(&g, err);
    if (!rc && !g->device_present(why, sizeof why))
        rc = cz__error_set(err, CZ_EUNSUPPORTED, "no CUDA device (%s)", why);
    if (!rc)
        rc = g->versions(&v, err);
    if (rc)
        return rc;
    printf("canzona-bench calibrate: %s (compute capability %d.%d, %d SMs)\n", v.device, v.cc_major,
           v.cc_minor, v.sm_count);
    json_t *root = json_object(), *gemm = json_array(), *copy = json_array();
    double launch = 0, ns32 = 0, ns16 = 0;
    if (!root || !gemm || !copy)
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory for the calibration");
    if (!rc)
        rc = gemm_grid(g, o, gemm, err);
    if (!rc)
        rc = g->time_launch(o->reps, &launch, err);
    if (!rc)
        printf("  one kernel launch (back to back): %.2f us\n", 1e6 * launch);
    if (!rc)
        rc = ns_overhead(o, 0, &ns32, err);
    if (!rc)
        rc = ns_overhead(o, 1, &ns16, err);
    if (!rc)
        printf("  Newton-Schulz iteration, fixed cost: fp32 %.2f us, bf16 %.2f us\n", 1e6 * ns32,
               1e6 * ns16);
    if (!rc)
        rc = copies(g, o, copy, err);
    if (!rc && o->out) {
        json_object_set_new(root, "schema", json_string("canzona.calibration/1"));
        json_object_set_new(
            root, "generator",
            json_pack("{s:s, s:s}", "name", "canzona-bench calibrate", "version", CZ_VERSION));
        json_object_set_new(root, "device", device_of(&v));
        json_object_set_new(root, "gemm", json_incref(gemm));
        json_object_set_new(root, "launch_overhead_s", json_real(launch));
        json_object_set_new(root, "ns_iteration_overhead_s",
                            json_pack("{s:f, s:f}", "fp32", ns32, "bf16", ns16));
        json_object_set_new(root, "copy", json_incref(copy));
        rc = cz_bench_write_json(o->out, root, err);
        if (!rc)
            printf("calibration written to %s\n", o->out);
    }
    json_decref(gemm);
    json_decref(copy);
    json_decref(root);
    return rc;
}

int cz_bench_calibrate_main(int argc, char **argv)
{
    cal_opts o;
    int prc = cal_parse(argc, argv, &o);
    if (prc) {
        cal_usage(prc == 1 ? stdout : stderr);
        return prc == 1 ? 0 : 2;
    }
    cz_error err;
    int rc = calibrate(&o, &err);
    if (rc)
        fprintf(stderr, "canzona-bench calibrate: %s\n", err.message);
    return rc == CZ_EUNSUPPORTED ? 77 : rc ? 1 : 0;
}
