/*
 * The device model's cost terms: what a GPU takes for a GEMM by shape, dtype and batch, for the
 * executor's and for Megatron-LM's Newton-Schulz iteration, for an elementwise kernel, an NCCL
 * call and a step's host work, and the calibration that measures them. docs/SIMULATOR.md, "The
 * device model", has every formula and the source of every constant; keep the two in step.
 *
 * With the device model off (cluster->device.costs.on == 0) every term is the flat model's
 * expression, evaluated exactly as before, so that plans of clusters without "device.kind" stay
 * byte for byte what they were.
 */
#include "cz_algorithms.h"

#include <math.h>
#include <string.h>

static int dm_on(const cz_cluster *c)
{
    return c && c->device.costs.on;
}

static double flat_flops(double flops, const cz_cluster *c)
{
    return flops > 0.0 && c->device.matmul_tflops > 0.0 ? flops / (c->device.matmul_tflops * 1e12)
                                                        : 0.0;
}

static double flat_bytes(double bytes, const cz_cluster *c)
{
    return bytes > 0.0 && c->device.mem_gbps > 0.0 ? bytes / (c->device.mem_gbps * 1e9) : 0.0;
}

static double rate_of(const cz_cluster *c, cz_gemm_prec prec)
{
    double r = c->device.costs.gemm_tflops[prec];
    return r > 0.0 ? r : c->device.matmul_tflops;
}

/* The roofline part of a GEMM: FLOPs at the precision's rate or bytes at the memory
 * bandwidth, whichever takes longer (skinny and small shapes are memory bound). */
static double roofline(const cz_cluster *c, double flops, double bytes, cz_gemm_prec prec)
{
    double r = rate_of(c, prec), t = r > 0.0 ? flops / (r * 1e12) : 0.0;
    double m = flat_bytes(bytes, c);
    return t > m ? t : m;
}

/* A GEMM with inputs of in_b and outputs of out_b bytes per element, after a fixed cost. */
static double gemm_with(const cz_cluster *c, double fixed, double m, double n, double k, int batch,
                        cz_gemm_prec prec, double in_b, double out_b, int accumulate)
{
    double flops = 2.0 * m * n * k * batch;
    double bytes = batch * ((m * k + k * n) * in_b + m * n * out_b * (accumulate ? 2.0 : 1.0));
    return fixed + roofline(c, flops, bytes, prec);
}

double cz__dm_gemm_seconds(const cz_cluster *c, double m, double n, double k, int batch,
                           cz_gemm_prec prec, int accumulate)
{
    if (!dm_on(c))
        return flat_flops(2.0 * m * n * k * batch, c);
    return gemm_with(c, c->device.costs.gemm_call_s[prec], m, n, k, batch, prec,
                     prec == CZ_GEMM_BF16 ? 2.0 : 4.0, 4.0, accumulate);
}

double cz__dm_syrk_seconds(const cz_cluster *c, double n, double k, int batch, int accumulate)
{
    double flops = n * n * k;
    if (!dm_on(c))
        return flat_flops(flops * batch, c);
    /* Reads A once, writes (and with beta reads) the triangle: half of C. */
    double bytes = n * k * 4.0 + n * n * 2.0 * (accumulate ? 2.0 : 1.0);
    return batch *
           (c->device.costs.gemm_call_s[CZ_GEMM_FP32] + roofline(c, flops, bytes, CZ_GEMM_FP32));
}

double cz__dm_bytes_seconds(const cz_cluster *c, double bytes)
{
    return flat_bytes(bytes, c);
}

double cz__dm_kernel_seconds(const cz_cluster *c, double bytes)
{
    return (dm_on(c) ? c->device.costs.launch_s : 0.0) + flat_bytes(bytes, c);
}

cz_gemm_prec cz__dm_ns_prec(cz_dtype dtype)
{
    return dtype == CZ_DTYPE_FP32 ? CZ_GEMM_FP32 : CZ_GEMM_BF16;
}

/* The executor's threshold (CZ_NS_SYRK_MIN_ROWS_CUDA in executor/src/compute/ns_plan.h), measured on the
 * H200: SYRK pays from 4096 rows, where one matrix's SYRK fills the device by itself. */
#define SYRK_MIN_ROWS 4096

int cz__dm_use_syrk(int64_t rows, cz_gemm_prec prec)
{
    return prec == CZ_GEMM_FP32 && rows >= SYRK_MIN_ROWS;
}

cz_ns_kernels cz__dm_ns_kernels(int64_t rows, int64_t cols, int batch, cz_gemm_prec prec)
{
    (void)cols;
    cz_ns_kernels k = {CZ_NS_GEMMS_PER_ITERATION, 0,
                       prec == CZ_GEMM_BF16 ? CZ_NS_EW_KERNELS_BF16 : CZ_NS_EW_KERNELS_FP32, 0};
    if (cz__dm_use_syrk(rows, prec)) {
        /* SYRK + fill for A = X X^T and for A A, B = A before it, then B X and its update. */
        k.sym = 1;
        k.gemm_calls = 1;
        k.syrk_calls = 2 * batch;
        k.ew_kernels = 4;
    }
    return k;
}

/* One iteration of the executor's Newton-Schulz (cz__ns_plan) on `batch` a x b matrices, a <= b,
 * op by op: each GEMM a strided-batched call, each elementwise pass one launch over the batch. */
static double ns_iteration(const cz_cluster *c, double a, double b, int batch, cz_gemm_prec prec)
{
    double B = batch;
    if (prec == CZ_GEMM_BF16)
        /* X to bf16, A = X X^T, A to bf16, B = A, B = b A + c A A, B to bf16, X = a X + B X. */
        return cz__dm_kernel_seconds(c, B * a * b * 6.0) +
               cz__dm_gemm_seconds(c, a, a, b, batch, prec, 0) +
               cz__dm_kernel_seconds(c, B * a * a * 6.0) +
               cz__dm_kernel_seconds(c, B * a * a * 8.0) +
               cz__dm_gemm_seconds(c, a, a, a, batch, prec, 1) +
               cz__dm_kernel_seconds(c, B * a * a * 6.0) +
               cz__dm_gemm_seconds(c, a, b, a, batch, prec, 1);
    if (cz__dm_use_syrk((int64_t)a, prec))
        /* A = X X^T (SYRK, fill), B = A, B = b A + c A A^T (SYRK, fill), Y = B X, X = a X + Y. */
        return cz__dm_syrk_seconds(c, a, b, batch, 0) + cz__dm_kernel_seconds(c, B * a * a * 4.0) +
               cz__dm_kernel_seconds(c, B * a * a * 8.0) + cz__dm_syrk_seconds(c, a, a, batch, 1) +
               cz__dm_kernel_seconds(c, B * a * a * 4.0) +
               cz__dm_gemm_seconds(c, a, b, a, batch, prec, 0) +
               cz__dm_kernel_seconds(c, B * a * b * 12.0);
    /* A = X X^T, B = A, B = b A + c A A, Y = B X, X = a X + Y. */
    return cz__dm_gemm_seconds(c, a, a, b, batch, prec, 0) +
           cz__dm_kernel_seconds(c, B * a * a * 8.0) +
           cz__dm_gemm_seconds(c, a, a, a, batch, prec, 1) +
           cz__dm_gemm_seconds(c, a, b, a, batch, prec, 0) +
           cz__dm_kernel_seconds(c, B * a * b * 12.0);
}

double cz__dm_ns_iterations_seconds(const cz_cluster *c, int64_t m, int64_t n, int batch, int steps,
                                    cz_gemm_prec prec)
{
    double a = (double)(m < n ? m : n), b = (double)(m < n ? n : m);
    if (!dm_on(c))
        return flat_flops(batch * (double)steps * (4.0 * a * a * b + 2.0 * a * a * a), c);
    return steps * ns_iteration(c, a, b, batch, prec);
}

double cz__dm_ns_seconds(const cz_cluster *c, int64_t m, int64_t n, int batch, int steps,
                         cz_gemm_prec prec)
{
    double a = (double)(m < n ? m : n), b = (double)(m < n ? n : m);
    double t = cz__dm_ns_iterations_seconds(c, m, n, batch, steps, prec);
    if (!dm_on(c))
        return t;
    /* Around the iterations, per matrix (cz__muon_run): block_load's memset, sum of squares and
     * scaled load (reads the block twice, writes it once) and block_store (reads and writes). */
    double around = 3.0 * cz__dm_kernel_seconds(c, 0.0) + cz__dm_kernel_seconds(c, a * b * 20.0);
    return t + batch * around;
}

double cz__dm_torch_op_seconds(const cz_cluster *c, double bytes)
{
    return (dm_on(c) ? c->device.costs.torch_op_s : 0.0) + flat_bytes(bytes, c);
}

double cz__dm_torch_gemm_seconds(const cz_cluster *c, double m, double n, double k, int batch,
                                 int accumulate)
{
    if (!dm_on(c))
        return flat_flops(2.0 * m * n * k * batch, c);
    return gemm_with(c, c->device.costs.torch_op_s, m, n, k, batch, CZ_GEMM_BF16, 2.0, 2.0,
                     accumulate);
}

double cz__dm_torch_ns_seconds(const cz_cluster *c, int64_t m, int64_t n, int batch, int steps)
{
    double a = (double)(m < n ? m : n), b = (double)(m < n ? n : m), B = batch;
    if (!dm_on(c))
        return flat_flops(B * steps * (4.0 * a * a * b + 2.0 * a * a * a), c);
    double op = c->device.costs.torch_op_s;
    /* newton_schulz (emerging_optimizers, muon_utils.py) under "medium" precision: normalize
     * (norm, clamp, divide), X to bf16; per iteration A = X X^T, B = addmm(A, A, A),
     * X = addmm(X, B, X), every tensor bf16; X back to fp32. The caller's scaling is two more
     * ops (orth * scale * extra_scale_factor, TensorParallelMuon.scaled_orthogonalize_fn). */
    double t = cz__dm_torch_op_seconds(c, B * a * b * 4.0) + cz__dm_torch_op_seconds(c, 8.0 * B) +
               cz__dm_torch_op_seconds(c, B * a * b * 8.0) +
               cz__dm_torch_op_seconds(c, B * a * b * 6.0);
    double iter = gemm_with(c, op, a, a, b, batch, CZ_GEMM_BF16, 2.0, 2.0, 0) +
                  gemm_with(c, op, a, a, a, batch, CZ_GEMM_BF16, 2.0, 2.0, 1) +
                  gemm_with(c, op, a, b, a, batch, CZ_GEMM_BF16, 2.0, 2.0, 1);
    return t + steps * iter + cz__dm_torch_op_seconds(c, B * a * b * 6.0) +
           2.0 * cz__dm_torch_op_seconds(c, B * a * b * 8.0);
}

double cz__dm_call_seconds(const cz_cluster *c)
{
    return dm_on(c) ? c->device.costs.nccl_call_s : 0.0;
}

/* The calibration's measurements of one (op, scope, group size), a run of its sorted array. */
static const cz_cal_coll *measured_run(const cz_calibration *cal, cz_cal_op op, int n, int inter,
                                       size_t *len)
{
    *len = 0;
    if (!cal)
        return NULL;
    const cz_cal_coll *first = NULL;
    for (size_t i = 0; i < cal->ncoll; i++) {
        const cz_cal_coll *k = &cal->coll[i];
        if (k->op != op || k->ranks != n || k->inter_node != (inter != 0))
            continue;
        if (!first)
            first = k;
        (*len)++;
    }
    return first;
}

double cz__dm_collective_seconds(const cz_cluster *c, cz_cal_op op, int n, int inter_node,
                                 double bytes, cz_alpha_beta_fn alpha_beta, const void *ctx)
{
    if (n <= 1 || !(bytes > 0))
        return 0.0;
    size_t len = 0;
    const cz_cal_coll *k = dm_on(c) ? measured_run(c->calibration, op, n, inter_node, &len) : NULL;
    if (!k)
        return alpha_beta(bytes, ctx) + cz__dm_call_seconds(c);
    /* Inside the measured sizes: linear between the two neighbours (a collective of one
     * algorithm takes a fixed time plus one per byte). Outside: the alpha-beta curve through the
     * nearest measurement, so that its bandwidth term carries the size on. */
    if (bytes <= k[0].bytes) {
        double t = k[0].seconds + alpha_beta(bytes, ctx) - alpha_beta(k[0].bytes, ctx);
        return t > 0 ? t : k[0].seconds;
    }
    for (size_t i = 1; i < len; i++)
        if (bytes <= k[i].bytes) {
            double f = (bytes - k[i - 1].bytes) / (k[i].bytes - k[i - 1].bytes);
            return k[i - 1].seconds + f * (k[i].seconds - k[i - 1].seconds);
        }
    return k[len - 1].seconds + alpha_beta(bytes, ctx) - alpha_beta(k[len - 1].bytes, ctx);
}

double cz__dm_step_host_seconds(const cz_cluster *c, int owned_shards, int world, double latency_us)
{
    if (!dm_on(c))
        return 0.0;
    double t = (owned_shards + 1) * c->device.costs.launch_s;
    /* 16 bytes: a latency-bound all-reduce, which MPI and NCCL run as a tree or by recursive
     * doubling: 2 log2(world) messages, not a ring's 2 (world - 1). */
    if (world > 1)
        t += 2.0 * ceil(log2((double)world)) * latency_us * 1e-6;
    return t;
}

int cz__calibration_fit_gemm(const cz_calibration *cal, cz_gemm_prec prec, double *tflops,
                             double *intercept_s, cz_error *err)
{
    /* Least relative error: minimize sum ((c0 + F s - t) / t)^2, the normal equations of the
     * rows (1 / t, F / t) against 1. Scaling every time by x scales c0 and s by x. */
    double a11 = 0, a12 = 0, a22 = 0, b1 = 0, b2 = 0, fmin = INFINITY, fmax = 0;
    int n = 0;
    for (size_t i = 0; i < cal->ngemm; i++) {
        const cz_cal_gemm *g = &cal->gemm[i];
        if (g->prec != prec)
            continue;
        double F = 2.0 * (double)g->m * (double)g->n * (double)g->k * g->batch, t = g->seconds;
        a11 += 1.0 / (t * t), a12 += F / (t * t), a22 += F * F / (t * t);
        b1 += 1.0 / t, b2 += F / t;
        fmin = F < fmin ? F : fmin, fmax = F > fmax ? F : fmax;
        n++;
    }
    const char *name = prec == CZ_GEMM_BF16 ? "bf16" : "fp32";
    if (n < 2 || !(fmax > fmin * (1.0 + 1e-9)))
        return cz__error_set(err, CZ_EINVALID,
                             "%s: $.gemm: %d %s GEMM%s of %s size; fitting the %s rate needs at "
                             "least two of different sizes (canzona-bench calibrate measures 29)",
                             cal->source, n, name, n == 1 ? "" : "s", n < 2 ? "any" : "one", name);
    double det = a11 * a22 - a12 * a12;
    double c0 = (b1 * a22 - b2 * a12) / det, s = (a11 * b2 - a12 * b1) / det;
    if (!(c0 >= 0.0)) { /* a negative call cost means nothing: fit through the origin */
        c0 = 0.0;
        s = b2 / a22;
    }
    if (!(s > 0.0) || !isfinite(s))
        return cz__error_set(err, CZ_EINVALID,
                             "%s: $.gemm: the %s GEMM times do not grow with their FLOPs, so no "
                             "rate can be fitted; re-measure",
                             cal->source, name);
    *tflops = 1.0 / s * 1e-12;
    *intercept_s = c0;
    /* Within what a GPU can do, so that every cost made with it is a finite number. */
    if (!(*tflops >= 1e-6 && *tflops <= 1e6))
        return cz__error_set(err, CZ_EINVALID,
                             "%s: $.gemm: the %s GEMMs fit a rate of %g TFLOP/s, outside 1e-6 .. "
                             "1e6; re-measure",
                             cal->source, name, *tflops);
    return CZ_OK;
}

int cz__cluster_apply_calibration(cz_cluster *c, cz_calibration *cal, cz_error *err)
{
    double bf16 = 0, fp32 = 0, c0;
    int rc;
    if ((rc = cz__calibration_fit_gemm(cal, CZ_GEMM_BF16, &bf16, &c0, err)) != CZ_OK ||
        (rc = cz__calibration_fit_gemm(cal, CZ_GEMM_FP32, &fp32, &c0, err)) != CZ_OK) {
        cz__calibration_free(cal);
        return rc;
    }
    cz_device_costs *k = &c->device.costs;
    memset(k, 0, sizeof *k);
    k->on = 1;
    k->gemm_tflops[CZ_GEMM_BF16] = bf16;
    k->gemm_tflops[CZ_GEMM_FP32] = fp32;
    cz__device_costs_from_ns(cal->launch_s, cal->ns_iteration_s[CZ_GEMM_BF16],
                             cal->ns_iteration_s[CZ_GEMM_FP32], k);
    /* Every FLOP-based term of the flat formulas (SOAP, Shampoo) takes the measured rate too. */
    c->device.matmul_tflops = bf16;
    cz__calibration_free(c->calibration);
    c->calibration = cal;
    return CZ_OK;
}

int cz_cluster_calibrate(cz_cluster *cluster, const char *calibration_path, cz_error *err)
{
    cz_calibration *cal = NULL;
    int rc;
    if (!cluster || !calibration_path)
        return cz__error_set(err, CZ_EINVALID,
                             "cz_cluster_calibrate: a cluster and a path are "
                             "required");
    if ((rc = cz__calibration_load(&cal, calibration_path, err)) != CZ_OK)
        return rc;
    return cz__cluster_apply_calibration(cluster, cal, err);
}
