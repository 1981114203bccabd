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
#include "ns_plan.h"
#include "ns_workload.h"
#ifdef CZ_HAVE_CUDA
#include "compute_cuda.h"
#endif

#include <getopt.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ns_opts {
    const char *plan, *coeffs, *gpu;
    int steps, reps, dry_run, cpu;
    cz_dtype dtype;
    cz_ns_sym_mode sym;
} ns_opts;

static void ns_usage(FILE *f)
{
    fprintf(f,
            "usage: canzona-bench ns --plan PLAN [--gpu busiest|DP,TP] [--ns-steps N] [--reps N]\n"
            "                        [--dtype fp32|bf16] [--ns-coeffs jordan|cubic] [--dry-run]\n"
            "                        [--backend cuda|cpu] [--sym auto|on|off]\n"
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
            "  --dry-run   print the workload only\n");
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
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    *o = (ns_opts){.coeffs = "jordan",
                   .gpu = "busiest",
                   .steps = 5,
                   .reps = 10,
                   .dtype = CZ_DTYPE_FP32,
                   .sym = CZ_NS_SYM_AUTO};
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
        case 'h':
            return 1;
        default:
            return 2;
        }
    }
    return o->plan && o->steps > 0 && o->reps > 0 && optind == argc ? 0 : 2;
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
        rc = cz_error_set(err, CZ_ENOMEM, "out of memory for the Newton-Schulz buffers");
        goto out;
    }
    int64_t cmax = 1;
    for (int b = 0; b < w->nbatches; b++) {
        cmax = w->batches[b].cols > cmax ? w->batches[b].cols : cmax;
        nsym += cz_ns_use_syrk(CZ_NS_TARGET_CPU, w->batches[b].rows, w->batches[b].cols,
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
                double t0 = cz_exec_now();
                rc = cz_cpu_ns(x, nb->count, nb->rows, nb->cols, k, o->steps, work, sym, err);
                t[((size_t)r * 2 + (size_t)sym) * nb_ + (size_t)b] = cz_exec_now() - t0;
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
                   cz_ns_use_syrk(CZ_NS_TARGET_CPU, nb->rows, nb->cols, nb->count, CZ_NS_FP32)
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

#ifdef CZ_HAVE_CUDA
typedef enum { BATCHED, SINGLE, GEMMS } ns_mode;

static int run_mode(cz_compute *c, const cz_ns_workload *w, const cz_ns_coeffs *k, int steps,
                    ns_mode mode, float *x, float *work, cz_error *err)
{
    int rc = CZ_OK;
    for (int b = 0; b < w->nbatches && !rc; b++) {
        const cz_ns_batch *nb = &w->batches[b];
        if (mode == BATCHED)
            rc = c->ops->ns_batched(c, x, nb->count, nb->rows, nb->cols, k, steps, work, err);
        else if (mode == GEMMS)
            rc = cz_cuda_ns_gemms(c, x, nb->count, nb->rows, nb->cols, k, steps, work, err);
        for (int i = 0; mode == SINGLE && i < nb->count && !rc; i++)
            rc = c->ops->ns_batched(c, x + (size_t)i * (size_t)(nb->rows * nb->cols), 1, nb->rows,
                                    nb->cols, k, steps, work, err);
    }
    return rc;
}

/* Seconds per repetition of one mode, after a warm-up run. */
static int time_mode(cz_compute *c, const cz_ns_workload *w, const cz_ns_coeffs *k,
                     const ns_opts *o, ns_mode mode, float *x, float *work, cz_event *ev,
                     double *sec, cz_error *err)
{
    int rc = run_mode(c, w, k, o->steps, mode, x, work, err);
    if (!rc) {
        c->ops->event_record(c, ev);
        rc = c->ops->event_sync(c, ev, err);
    }
    double t0 = cz_exec_now();
    for (int r = 0; r < o->reps && !rc; r++)
        rc = run_mode(c, w, k, o->steps, mode, x, work, err);
    if (!rc) {
        c->ops->event_record(c, ev);
        rc = c->ops->event_sync(c, ev, err);
    }
    *sec = (cz_exec_now() - t0) / o->reps;
    return rc;
}

static int time_workload(const cz_ns_workload *w, const cz_ns_coeffs *k, const ns_opts *o,
                         cz_error *err)
{
    cz_cuda_options co = {.ns_precision = o->dtype == CZ_DTYPE_BF16 ? CZ_NS_BF16 : CZ_NS_FP32,
                          .ns_sym = o->sym};
    cz_compute c;
    float *x = NULL, *work = NULL, *host = NULL;
    cz_event *ev = NULL;
    int rc = cz_compute_cuda_open(&c, &co, err);
    if (rc)
        return rc;
    size_t nx = (size_t)(w->batch_n > 0 ? w->batch_n : 1);
    x = c.ops->alloc(&c, nx * sizeof(float));
    work = c.ops->alloc(&c, (size_t)(w->work_n > 0 ? w->work_n : 1) * sizeof(float));
    host = malloc(nx * sizeof(float));
    ev = c.ops->event_create(&c);
    if (!x || !work || !host || !ev) {
        rc = cz_error_set(err, CZ_ENOMEM, "out of memory for the Newton-Schulz buffers");
        goto out;
    }
    /* Entries of std. 0.58 * 0.5 / sqrt(cols): singular values below ~0.6, where the iteration
     * converges and stays finite over the repetitions (it runs on its own output). */
    int64_t cmax = 1;
    for (int b = 0; b < w->nbatches; b++)
        cmax = w->batches[b].cols > cmax ? w->batches[b].cols : cmax;
    float scale = (float)(0.5 / sqrt((double)cmax));
    for (size_t i = 0; i < nx; i++)
        host[i] = cz_bench_value(1, 0, 0, 0, 0, (int64_t)i) * scale;
    rc = bench_gpu_copy(x, host, nx * sizeof(float), 1, err);
    double t[3] = {0};
    for (int m = 0; m < 3 && !rc; m++)
        rc = time_mode(&c, w, k, o, (ns_mode)m, x, work, ev, &t[m], err);
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
out:
    if (ev)
        c.ops->event_free(&c, ev);
    if (x)
        c.ops->release(&c, x);
    if (work)
        c.ops->release(&c, work);
    free(host);
    cz_compute_close(&c);
    return rc;
}
#endif

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
    const cz_ns_coeffs *k = cz_ns_coeffs_find(o.coeffs);
    int rc = k ? CZ_OK
               : cz_error_set(&err, CZ_EINVALID, "--ns-coeffs '%s': expected %s", o.coeffs,
                              cz_ns_coeffs_names());
    if (!rc)
        rc = cz_plan_read(&plan, o.plan, &err);
    int dp = 0, tp = 0;
    if (!rc && strcmp(o.gpu, "busiest") == 0)
        rc = cz_ns_workload_busiest(plan, o.steps, k->c, &dp, &tp, &err);
    else if (!rc && sscanf(o.gpu, "%d,%d", &dp, &tp) != 2)
        rc = cz_error_set(&err, CZ_EINVALID, "--gpu '%s': expected busiest or DP,TP", o.gpu);
    if (!rc)
        rc = cz_ns_workload_make(&w, plan, dp, tp, o.steps, k->c, &err);
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
#ifdef CZ_HAVE_CUDA
        rc = time_workload(&w, k, &o, &err);
#else
        rc = cz_error_set(&err, CZ_EUNSUPPORTED,
                          "timing needs the cuda backend: this build has no CUDA (--dry-run "
                          "prints the workload only)");
#endif
    }
    if (rc)
        fprintf(stderr, "canzona-bench ns: %s\n", err.message);
    cz_ns_workload_free(&w);
    cz_plan_free(plan);
    return rc ? 1 : 0;
}
