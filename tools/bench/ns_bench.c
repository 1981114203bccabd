/* `canzona-bench ns`: the single-GPU Newton-Schulz micro-benchmark. For one GPU of a plan (the
 * busiest by default) it lists the same-shape batches the pipeline would hand ns_batched, then
 * on a CUDA device times them batched (one strided-batched call per shape and micro-group),
 * one matrix at a time, and the GEMMs alone (the same cuBLAS calls without the elementwise
 * kernels), in TFLOP/s. --dry-run prints the workload only (no device needed). --backend cpu
 * times the same work on the CPU backend in its general form (cblas_sgemm) and its symmetric
 * form (cblas_ssyrk, ns_plan.h), interleaved, and prints the medians and their ratio. */
#include "bench.h"
#include "bench_gpu.h"
#include "ns_bench.h"
#include "cz_exec_testing.h"

#include <getopt.h>
#include <jansson.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ns_opts {
    const char *plan, *coeffs, *gpu, *json;
    int steps, reps, dry_run, cpu, per_shape;
    double max_gflop; /* --per-shape: FLOPs of one timed call at most (batch capped) */
    cz_dtype dtype;
    cz_ns_sym_mode sym;
} ns_opts;

static void ns_usage(FILE *f)
{
    fprintf(f,
            "usage: canzona-bench ns --plan PLAN [--gpu busiest|DP,TP] [--ns-steps N] [--reps N]\n"
            "                        [--dtype fp32|bf16] [--ns-coeffs NAME|TABLE] [--dry-run]\n"
            "                        [--backend cuda|cpu] [--sym auto|on|off]\n"
            "                        [--per-shape [--max-gflop G]] [--json FILE]\n"
            "Times the Newton-Schulz work of one GPU of the plan on this machine's CUDA device:\n"
            "batched as the executor runs it, one matrix at a time, and its GEMMs alone.\n"
            "  --gpu       which GPU's work (default: the one with the most FLOPs)\n"
            "  --ns-steps  iterations per orthogonalization (default 5)\n"
            "  --reps      timed repetitions after one warm-up (default 10)\n"
            "  --dtype     fp32 GEMMs, or bf16 inputs with fp32 accumulation (default fp32)\n"
            "  --sym       the symmetric form (SYRK for X X^T and A A): where it pays (auto,\n"
            "              default), always (on; fp32 only on CUDA) or never (off)\n"
            "  --backend   cuda (default), or cpu: the CPU backend's general form (cblas_sgemm)\n"
            "              against its symmetric form (cblas_ssyrk), interleaved, medians\n"
            "  --dry-run   print the workload only\n"
            "  --per-shape (cuda) each distinct shape on its own: batched and one matrix at a\n"
            "              time, TFLOP/s and the fraction of cuBLAS's GEMM rate at 8192^3 in the\n"
            "              same dtype, measured first; a shape's batch is cut to what fits\n"
            "              --max-gflop per call (default 2000)\n"
            "  --json      (cuda) write the timings as JSON (schema canzona.ns_bench/1)\n");
}

static int ns_parse(int argc, char **argv, ns_opts *o)
{
    static const struct option longs[] = {{"plan", required_argument, 0, 'p'},
                                          {"gpu", required_argument, 0, 'g'},
                                          {"ns-steps", required_argument, 0, 'k'},
                                          {"reps", required_argument, 0, 'r'},
                                          {"dtype", required_argument, 0, 'T'},
                                          {"ns-coeffs", required_argument, 0, 'c'},
                                          {"dry-run", no_argument, 0, 'n'},
                                          {"backend", required_argument, 0, 'B'},
                                          {"sym", required_argument, 0, 'S'},
                                          {"per-shape", no_argument, 0, 'P'},
                                          {"max-gflop", required_argument, 0, 'G'},
                                          {"json", required_argument, 0, 'j'},
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    *o = (ns_opts){.coeffs = "jordan",
                   .gpu = "busiest",
                   .steps = -1, /* unset: the table's row count, else 5 */
                   .reps = 10,
                   .dtype = CZ_DTYPE_FP32,
                   .sym = CZ_NS_SYM_AUTO,
                   .max_gflop = 2000};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'p':
            o->plan = optarg;
            break;
        case 'g':
            o->gpu = optarg;
            break;
        case 'k':
            o->steps = atoi(optarg);
            if (o->steps < 1)
                return 2;
            break;
        case 'r':
            o->reps = atoi(optarg);
            break;
        case 'T':
            if (strcmp(optarg, "fp32") != 0 && strcmp(optarg, "bf16") != 0)
                return 2;
            o->dtype = optarg[0] == 'b' ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32;
            break;
        case 'c':
            o->coeffs = optarg;
            break;
        case 'n':
            o->dry_run = 1;
            break;
        case 'B':
            if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0)
                return 2;
            o->cpu = strcmp(optarg, "cpu") == 0;
            break;
        case 'S':
            if (strcmp(optarg, "auto") == 0)
                o->sym = CZ_NS_SYM_AUTO;
            else if (strcmp(optarg, "on") == 0)
                o->sym = CZ_NS_SYM_ON;
            else if (strcmp(optarg, "off") == 0)
                o->sym = CZ_NS_SYM_OFF;
            else
                return 2;
            break;
        case 'P':
            o->per_shape = 1;
            break;
        case 'G':
            o->max_gflop = atof(optarg);
            break;
        case 'j':
            o->json = optarg;
            break;
        case 'h':
            return 1;
        default:
            return 2;
        }
    }
    return o->plan && (o->steps > 0 || o->steps == -1) && o->reps > 0 && o->max_gflop > 0 &&
                   optind == argc
               ? 0
               : 2;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The CPU backend's two forms over the workload, each repetition starting from the same input
 * (copied in untimed), the forms interleaved so that a busy machine slows both alike. */
static int time_cpu(const cz_ns_workload *w, const cz_ns_coeffs *k, const ns_opts *o, cz_error *err)
{
    size_t nx = (size_t)(w->batch_n > 0 ? w->batch_n : 1);
    float *x = malloc(nx * sizeof(float)), *x0 = malloc(nx * sizeof(float));
    float *work = malloc((size_t)(w->work_n > 0 ? w->work_n : 1) * sizeof(float));
    /* t[(r * 2 + form) * nbatches + b]: seconds of batch b in repetition r. */
    size_t nb_ = (size_t)(w->nbatches > 0 ? w->nbatches : 1);
    double *t = malloc(2 * (size_t)(o->reps + 1) * nb_ * sizeof(double));
    double *v = malloc((size_t)o->reps * sizeof(double));
    int rc = CZ_OK, nsym = 0;
    if (!x || !x0 || !work || !t || !v) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory for the Newton-Schulz buffers");
        goto out;
    }
    int64_t cmax = 1;
    for (int b = 0; b < w->nbatches; b++) {
        cmax = w->batches[b].cols > cmax ? w->batches[b].cols : cmax;
        nsym += cz__ns_use_syrk(CZ_NS_TARGET_CPU, w->batches[b].rows, w->batches[b].cols,
                                w->batches[b].count, CZ_NS_FP32);
    }
    float scale = (float)(0.5 / sqrt((double)cmax));
    for (size_t i = 0; i < nx; i++)
        x0[i] = cz_bench_value(1, 0, 0, 0, 0, (int64_t)i) * scale;
    /* Repetition 0 is the warm-up of both forms. */
    for (int r = 0; r <= o->reps && !rc; r++)
        for (int sym = 0; sym < 2 && !rc; sym++)
            for (int b = 0; b < w->nbatches && !rc; b++) {
                const cz_ns_batch *nb = &w->batches[b];
                memcpy(x, x0, (size_t)(nb->count * nb->rows * nb->cols) * sizeof(float));
                double t0 = cz__exec_now();
                rc = cz__cpu_ns(x, nb->count, nb->rows, nb->cols, k, o->steps, work, sym, err);
                t[((size_t)r * 2 + (size_t)sym) * nb_ + (size_t)b] = cz__exec_now() - t0;
            }
    if (!rc) {
        /* Per batch, then the whole workload (sum over batches per repetition). */
        double med[2] = {0.0, 0.0};
        for (int b = -1; b < w->nbatches; b++) {
            for (int sym = 0; sym < 2; sym++) {
                for (int r = 0; r < o->reps; r++) {
                    size_t base = ((size_t)(r + 1) * 2 + (size_t)sym) * nb_;
                    v[r] = 0.0;
                    for (int q = 0; q < w->nbatches; q++)
                        v[r] += b < 0 || q == b ? t[base + (size_t)q] : 0.0;
                }
                med[sym] = median(v, o->reps);
            }
            if (b < 0)
                continue;
            const cz_ns_batch *nb = &w->batches[b];
            printf("  %6lld x %-6lld x %d: general %9.3f ms, symmetric %9.3f ms: %.2fx (rule: "
                   "%s)\n",
                   (long long)nb->rows, (long long)nb->cols, nb->count, 1e3 * med[0], 1e3 * med[1],
                   med[0] / med[1],
                   cz__ns_use_syrk(CZ_NS_TARGET_CPU, nb->rows, nb->cols, nb->count, CZ_NS_FP32)
                       ? "symmetric"
                       : "general");
        }
        for (int sym = 0; sym < 2; sym++) {
            for (int r = 0; r < o->reps; r++) {
                size_t base = ((size_t)(r + 1) * 2 + (size_t)sym) * nb_;
                v[r] = 0.0;
                for (int q = 0; q < w->nbatches; q++)
                    v[r] += t[base + (size_t)q];
            }
            med[sym] = median(v, o->reps);
        }
        double g = med[0], sy = med[1];
        printf("%-40s %10.3f ms  %8.2f GFLOP/s\n", "cpu general (cblas_sgemm), median", 1e3 * g,
               w->flops / g * 1e-9);
        printf("%-40s %10.3f ms  %8.2f GFLOP/s (GEMM-equivalent)\n",
               "cpu symmetric (cblas_ssyrk), median", 1e3 * sy, w->flops / sy * 1e-9);
        printf("symmetric / general: %.2fx faster (median of %d repetitions); the executor's rule "
               "picks symmetric for %d of %d batches\n",
               g / sy, o->reps, nsym, w->nbatches);
    }
out:
    free(x);
    free(x0);
    free(work);
    free(t);
    free(v);
    return rc;
}

/* ---- on the device, through the GPU plugin ---- */
typedef enum { BATCHED, SINGLE, GEMMS } ns_mode;

typedef struct gpu_ctx {
    const cz_gpu_api *gpu;
    cz_compute c;
    float *x, *work;
    cz_event *ev;
} gpu_ctx;

/* count matrices of nb's shape at x, in one mode. */
static int run_shape(gpu_ctx *g, const cz_ns_batch *nb, int count, const cz_ns_coeffs *k, int steps,
                     ns_mode mode, cz_error *err)
{
    cz_compute *c = &g->c;
    if (mode == BATCHED)
        return c->ops->ns_batched(c, g->x, count, nb->rows, nb->cols, k, steps, g->work, err);
    if (mode == GEMMS)
        return g->gpu->ns_gemms(c, g->x, count, nb->rows, nb->cols, k, steps, g->work, err);
    int rc = CZ_OK;
    for (int i = 0; i < count && !rc; i++)
        rc = c->ops->ns_batched(c, g->x + (size_t)i * (size_t)(nb->rows * nb->cols), 1, nb->rows,
                                nb->cols, k, steps, g->work, err);
    return rc;
}

static int run_mode(gpu_ctx *g, const cz_ns_workload *w, const cz_ns_coeffs *k, int steps,
                    ns_mode mode, cz_error *err)
{
    int rc = CZ_OK;
    for (int b = 0; b < w->nbatches && !rc; b++)
        rc = run_shape(g, &w->batches[b], w->batches[b].count, k, steps, mode, err);
    return rc;
}

static int drain(gpu_ctx *g, cz_error *err)
{
    g->c.ops->event_record(&g->c, g->ev);
    return g->c.ops->event_sync(&g->c, g->ev, err);
}

/* Seconds per repetition of one mode over the whole workload, after a warm-up run. */
static int time_mode(gpu_ctx *g, const cz_ns_workload *w, const cz_ns_coeffs *k, const ns_opts *o,
                     ns_mode mode, double *sec, cz_error *err)
{
    int rc = run_mode(g, w, k, o->steps, mode, err);
    if (!rc)
        rc = drain(g, err);
    double t0 = cz__exec_now();
    for (int r = 0; r < o->reps && !rc; r++)
        rc = run_mode(g, w, k, o->steps, mode, err);
    if (!rc)
        rc = drain(g, err);
    *sec = (cz__exec_now() - t0) / o->reps;
    return rc;
}

/* Median seconds of one call of a shape's mode: each repetition runs enough calls to last a
 * millisecond (a host wait's own cost stays out of the figure), after a warm-up call. */
static int time_shape(gpu_ctx *g, const cz_ns_batch *nb, int count, const cz_ns_coeffs *k,
                      const ns_opts *o, ns_mode mode, double *sec, cz_error *err)
{
    double v[64], t0 = cz__exec_now();
    int reps = o->reps < 64 ? o->reps : 64, inner = 1;
    int rc = run_shape(g, nb, count, k, o->steps, mode, err);
    if (!rc)
        rc = drain(g, err);
    double first = cz__exec_now() - t0;
    if (first < 1e-3)
        inner = (int)(1e-3 / (first > 1e-6 ? first : 1e-6)) + 1;
    for (int r = 0; r < reps && !rc; r++) {
        t0 = cz__exec_now();
        for (int i = 0; i < inner && !rc; i++)
            rc = run_shape(g, nb, count, k, o->steps, mode, err);
        if (!rc)
            rc = drain(g, err);
        v[r] = (cz__exec_now() - t0) / inner;
    }
    if (!rc)
        *sec = median(v, reps);
    return rc;
}

/* Entries of std. 0.58 * 0.5 / sqrt(cols): singular values below ~0.6, where the iteration
 * converges and stays finite over the repetitions (it runs on its own output). */
static int fill_input(gpu_ctx *g, size_t nx, int64_t cmax, cz_error *err)
{
    float *host = malloc(nx * sizeof(float));
    if (!host)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the Newton-Schulz input");
    float scale = (float)(0.5 / sqrt((double)cmax));
    for (size_t i = 0; i < nx; i++)
        host[i] = cz_bench_value(1, 0, 0, 0, 0, (int64_t)i) * scale;
    int rc = g->gpu->copy(g->x, host, nx * sizeof(float), err);
    free(host);
    return rc;
}

static int gpu_buffers(gpu_ctx *g, size_t nx, size_t nwork, int64_t cmax, cz_error *err)
{
    g->x = g->c.ops->alloc(&g->c, nx * sizeof(float));
    g->work = g->c.ops->alloc(&g->c, (nwork ? nwork : 1) * sizeof(float));
    if (!g->x || !g->work)
        return cz__error_set(err, CZ_ENOMEM,
                             "out of device memory for the Newton-Schulz buffers (%zu + %zu "
                             "floats)",
                             nx, nwork);
    return fill_input(g, nx, cmax, err);
}

static void gpu_buffers_free(gpu_ctx *g)
{
    if (g->x)
        g->c.ops->release(&g->c, g->x);
    if (g->work)
        g->c.ops->release(&g->c, g->work);
    g->x = g->work = NULL;
}

static int time_workload(gpu_ctx *g, const cz_ns_workload *w, const cz_ns_coeffs *k,
                         const ns_opts *o, cz_error *err)
{
    int64_t cmax = 1;
    for (int b = 0; b < w->nbatches; b++)
        cmax = w->batches[b].cols > cmax ? w->batches[b].cols : cmax;
    int rc =
        gpu_buffers(g, (size_t)(w->batch_n > 0 ? w->batch_n : 1), (size_t)w->work_n, cmax, err);
    double t[3] = {0};
    for (int m = 0; m < 3 && !rc; m++)
        rc = time_mode(g, w, k, o, (ns_mode)m, &t[m], err);
    if (!rc) {
        const char *names[3] = {"batched (as the executor)", "one matrix at a time",
                                "GEMMs only (same cuBLAS calls)"};
        for (int m = 0; m < 3; m++)
            printf("%-31s %10.3f ms  %8.2f TFLOP/s\n", names[m], 1e3 * t[m],
                   w->flops / t[m] * 1e-12);
        printf("batched / one at a time: %.2fx faster; batched reaches %.0f%% of the GEMMs' "
               "rate\n",
               t[1] / t[0], 100.0 * t[2] / t[0]);
    }
    gpu_buffers_free(g);
    return rc;
}

/* The distinct shapes of the workload, with every batch's count summed. */
static int distinct_shapes(const cz_ns_workload *w, cz_ns_batch *out)
{
    int n = 0;
    for (int b = 0; b < w->nbatches; b++) {
        int i = 0;
        while (i < n && !(out[i].rows == w->batches[b].rows && out[i].cols == w->batches[b].cols))
            i++;
        if (i == n)
            out[n++] = (cz_ns_batch){.rows = w->batches[b].rows, .cols = w->batches[b].cols};
        out[i].count += w->batches[b].count;
    }
    return n;
}

/* The c the FLOP count needs (whether A A is computed): nonzero when any iteration's is. */
static double any_c(const cz_ns_coeffs *k)
{
    for (int i = 0; i < k->rows; i++)
        if (k->row[i].c != 0.0)
            return k->row[i].c;
    return 0.0;
}

/* One shape: its batch cut to --max-gflop per call, timed batched and one at a time. */
static int time_one_shape(gpu_ctx *g, const cz_ns_batch *s, const cz_ns_coeffs *k, const ns_opts *o,
                          double peak, json_t *arr, cz_error *err)
{
    double per = o->steps * cz__ns_iter_flops(s->rows, s->cols, any_c(k));
    int b = (int)(o->max_gflop * 1e9 / per);
    b = b < 1 ? 1 : b > s->count ? s->count : b;
    cz_ns_batch one = *s;
    one.count = b;
    int rc = gpu_buffers(g, (size_t)(b * s->rows * s->cols),
                         (size_t)cz__ns_work_floats(s->rows, s->cols, b), s->cols, err);
    double tb = 0, ts = 0;
    if (!rc)
        rc = time_shape(g, &one, b, k, o, BATCHED, &tb, err);
    if (!rc && b > 1)
        rc = time_shape(g, &one, b, k, o, SINGLE, &ts, err);
    gpu_buffers_free(g);
    if (rc)
        return rc;
    double tf = b * per / tb * 1e-12;
    printf("  %6lld x %-6lld x %3d (timed %3d): batched %9.3f ms  %7.2f TFLOP/s  %5.1f%% of "
           "GEMM",
           (long long)s->rows, (long long)s->cols, s->count, b, 1e3 * tb, tf, 100.0 * tf / peak);
    if (b > 1)
        printf("; one at a time %9.3f ms: batched %.2fx", 1e3 * ts, ts / tb);
    printf("\n");
    json_t *e = json_pack("{s:I, s:I, s:i, s:i, s:f, s:f, s:f}", "rows", (json_int_t)s->rows,
                          "cols", (json_int_t)s->cols, "count", s->count, "timed_batch", b,
                          "batched_s", tb, "tflops", tf, "fraction_of_gemm", tf / peak);
    if (e && b > 1)
        json_object_set_new(e, "one_at_a_time_s", json_real(ts));
    if (!e || json_array_append_new(arr, e))
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the JSON report");
    return CZ_OK;
}

static int time_per_shape(gpu_ctx *g, const cz_ns_workload *w, const cz_ns_coeffs *k,
                          const ns_opts *o, cz_error *err)
{
    double gemm = 0;
    int bf16 = o->dtype == CZ_DTYPE_BF16;
    int rc = g->gpu->time_gemm(8192, 8192, 8192, 1, bf16, o->reps, &gemm, err);
    if (rc)
        return rc;
    double peak = 2.0 * 8192.0 * 8192.0 * 8192.0 / gemm * 1e-12;
    printf("cuBLAS GEMM 8192 x 8192 x 8192 %s: %.2f TFLOP/s (the reference rate below)\n",
           cz_dtype_name(o->dtype), peak);
    cz_ns_batch *shapes = calloc((size_t)(w->nbatches > 0 ? w->nbatches : 1), sizeof *shapes);
    json_t *root = json_object(), *arr = json_array();
    if (!shapes || !root || !arr)
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory for the shapes");
    int n = rc ? 0 : distinct_shapes(w, shapes);
    for (int i = 0; i < n && !rc; i++)
        rc = time_one_shape(g, &shapes[i], k, o, peak, arr, err);
    if (!rc && o->json) {
        json_object_set_new(root, "schema", json_string("canzona.ns_bench/1"));
        json_object_set_new(root, "plan", json_string(o->plan));
        json_object_set_new(root, "dtype", json_string(cz_dtype_name(o->dtype)));
        json_object_set_new(root, "ns_steps", json_integer(o->steps));
        json_object_set_new(root, "gemm_8192_tflops", json_real(peak));
        json_object_set_new(root, "shapes", json_incref(arr));
        rc = cz_bench_write_json(o->json, root, err);
    }
    json_decref(arr);
    json_decref(root);
    free(shapes);
    return rc;
}

static int time_on_gpu(const cz_ns_workload *w, const cz_ns_coeffs *k, const ns_opts *o,
                       cz_error *err)
{
    gpu_ctx g = {0};
    cz_cuda_options co = {.ns_precision = o->dtype == CZ_DTYPE_BF16 ? CZ_NS_BF16 : CZ_NS_FP32,
                          .ns_sym = o->sym};
    int rc = cz__gpu_load(&g.gpu, err);
    if (!rc)
        rc = cz__compute_open_cuda(&g.c, &co, err);
    if (rc)
        return rc;
    if (!(g.ev = g.c.ops->event_create(&g.c)))
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory for an event");
    if (!rc)
        rc = o->per_shape ? time_per_shape(&g, w, k, o, err) : time_workload(&g, w, k, o, err);
    if (g.ev)
        g.c.ops->event_free(&g.c, g.ev);
    cz__compute_close(&g.c);
    return rc;
}

int cz_bench_ns_main(int argc, char **argv)
{
    ns_opts o;
    int prc = ns_parse(argc, argv, &o);
    if (prc) {
        ns_usage(prc == 1 ? stdout : stderr);
        return prc == 1 ? 0 : 2;
    }
    cz_error err;
    cz_plan *plan = NULL;
    cz_ns_workload w = {0};
    cz_ns_coeffs set;
    const cz_ns_coeffs *k = &set;
    int rc = cz__ns_coeffs_parse(o.coeffs, &set, &err);
    if (!rc && o.steps < 0)
        o.steps = set.rows > 1 ? set.rows : 5;
    if (!rc)
        rc = cz__ns_coeffs_check_steps(k, o.steps, o.coeffs, &err);
    if (!rc)
        rc = cz_plan_read(&plan, o.plan, &err);
    int dp = 0, tp = 0;
    if (!rc && strcmp(o.gpu, "busiest") == 0)
        rc = cz__ns_workload_busiest(plan, o.steps, any_c(k), &dp, &tp, &err);
    else if (!rc && sscanf(o.gpu, "%d,%d", &dp, &tp) != 2)
        rc = cz__error_set(&err, CZ_EINVALID, "--gpu '%s': expected busiest or DP,TP", o.gpu);
    if (!rc)
        rc = cz__ns_workload_make(&w, plan, dp, tp, o.steps, any_c(k), &err);
    if (!rc) {
        int groups = w.nbatches ? w.batches[w.nbatches - 1].group + 1 : 0;
        printf("canzona-bench ns: %s, GPU (dp %d, tp %d) of dp=%d tp=%d: %d blocks in %d "
               "batches over %d micro-groups, %.3f GFLOP per step (%d iterations, %s, %s)\n",
               plan->model_name ? plan->model_name : o.plan, dp, tp, plan->dp, plan->tp, w.nblocks,
               w.nbatches, groups, w.flops * 1e-9, o.steps, o.coeffs, cz_dtype_name(o.dtype));
        for (int b = 0; b < w.nbatches; b++)
            printf("  group %3d  %6lld x %-6lld x %d\n", w.batches[b].group,
                   (long long)w.batches[b].rows, (long long)w.batches[b].cols, w.batches[b].count);
    }
    if (!rc && !o.dry_run && o.cpu) {
        rc = time_cpu(&w, k, &o, &err);
    } else if (!rc && !o.dry_run) {
        rc = time_on_gpu(&w, k, &o, &err);
    }
    if (rc)
        fprintf(stderr, "canzona-bench ns: %s\n", err.message);
    cz__ns_workload_free(&w);
    cz_plan_free(plan);
    return rc ? 1 : 0;
}
