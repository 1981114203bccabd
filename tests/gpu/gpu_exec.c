/* GPU tests of the executor (ctest label gpu; canzona-gpu-check runs them too). Without a CUDA
 * device, or when the GPU plugin cannot be loaded, each mode prints why and exits 77, which
 * ctest reports as skipped.
 *
 *   gpu_exec probe            exit 0 when a CUDA device is usable, else 77
 *   gpu_exec info             the device, the driver, and the CUDA runtime, cuBLAS, cuSOLVER and
 *                             NCCL versions and files the plugin found, one "key: value" a line
 *   gpu_exec compare COMM     one rank: the cuda backend over COMM (self: host-staged managed
 *                             memory; nccl: device memory, NCCL on one rank) against the cpu
 *                             backend on a plan with batched, transposed and blocked matrices
 *                             and elementwise parameters, 3 steps, fp32 and bf16 (bounds below)
 *   gpu_exec order COMM       the job writes each step's gradients on its default stream and
 *                             steps at once, without a synchronize: the result must be the
 *                             synchronized run's (the step is ordered after the job's stream)
 *   gpu_exec normuon COMM     NorMuon by rows and by columns (cz_exec_config.normuon): the cuda
 *                             backend against the cpu backend on the compare plan, fp32, 3
 *                             steps, max|cuda - cpu| / max|update| <= 1e-4
 *   gpu_exec ns-sym           the cuda backend's Newton-Schulz with the symmetric form forced
 *                             on (cublasSsyrk + the mirror kernel, fp32) against the cpu
 *                             backend's general form: relative error <= 1e-4.
 */
#include "exec_fixture.h"
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "cz_format.h"
#include "gpu_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const fx_param PARAMS[] = {
    {"attn.q", 2, 64, 96, -1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"attn.k", 2, 64, 96, -1, CZ_KIND_MATRIX, 0, 0, {0}},    /* same shape: one batched NS */
    {"mlp.down", 2, 128, 48, -1, CZ_KIND_MATRIX, 0, 0, {0}}, /* tall: transposed */
    {"qkv", 2, 96, 64, -1, CZ_KIND_MATRIX, 0, 2, {48, 48}},  /* two blocks */
    {"norm", 1, 64, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
    {"bias", 1, 96, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
};
#define NP ((int)(sizeof PARAMS / sizeof PARAMS[0]))
#define STEPS 3

static const cz_gpu_api *gpu;

static int fail(const char *what, const cz_error *err)
{
    fprintf(stderr, "gpu_exec: %s: %s\n", what, err ? err->message : "");
    return 1;
}

/* How a run is driven. */
typedef struct run_opts {
    const char *backend, *comm;
    cz_dtype dtype;
    float lr, adamw_lr; /* 0: the defaults */
    /* The job writes each step's gradients on its default stream, held this long, and steps
     * without waiting (0: written and synchronized before the step). */
    double job_hold_s;
    cz_normuon_mode normuon; /* CZ_NORMUON_NONE: plain Muon */
} run_opts;

static void grads_of_step(int s, float *G, void *hg, size_t n, cz_dtype dt)
{
    for (size_t i = 0; i < n; i++) {
        G[i] = 0.01f * fx_val(1000003u * (uint64_t)s + i);
        if (dt == CZ_DTYPE_BF16)
            ((uint16_t *)hg)[i] = cz__bf16_from_f32(G[i]);
        else
            ((float *)hg)[i] = G[i];
    }
}

/* Copies the step's gradients into the bound device buffer as the run says: synchronously, or
 * on the job's default stream behind a hold, through a device staging buffer. */
static int upload_grads(const run_opts *o, gpu_job *j, void *staging, const void *hg, cz_error *err)
{
    if (o->job_hold_s <= 0)
        return gpu->copy(j->grads, hg, j->bytes, err);
    int rc = gpu->copy(staging, hg, j->bytes, err);
    return rc ? rc : gpu->job_write(j->grads, staging, j->bytes, o->job_hold_s, err);
}

/* Runs STEPS steps on host buffers P (the gradients of step s are regenerated each step); the
 * cuda backend gets device copies. */
static int run(const cz_plan *pl, const run_opts *o, float *P, size_t n)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.backend = o->backend;
    cfg.comm = o->comm;
    cfg.dtype = o->dtype;
    if (o->lr > 0) /* else the default */
        cfg.lr = o->lr;
    if (o->adamw_lr > 0)
        cfg.adamw.lr = o->adamw_lr;
    cfg.normuon.mode = o->normuon;
    bool cuda = strcmp(o->backend, "cuda") == 0;
    cfg.memory = cuda ? CZ_EXEC_MEMORY_DEVICE : CZ_EXEC_MEMORY_HOST;
    cz_executor *ex = NULL;
    cz_error err;
    size_t es = o->dtype == CZ_DTYPE_BF16 ? 2 : 4;
    void *hp = malloc(n * es), *hg = malloc(n * es), *staging = NULL;
    float *G = malloc(n * sizeof(float));
    gpu_job j = {0};
    int rc = (hp && hg && G) ? 0 : fail("out of memory", NULL);
    if (!rc && cz_executor_create_from_plan(&ex, pl, &cfg, &err))
        rc = fail("create", &err);
    if (!rc && cuda &&
        (gpu_job_alloc(&j, gpu, n * es, &err) || gpu->mem_alloc(&staging, n * es, &err)))
        rc = fail("the job's device buffers", &err);
    for (size_t i = 0; !rc && i < n; i++) {
        if (o->dtype == CZ_DTYPE_BF16)
            ((uint16_t *)hp)[i] = cz__bf16_from_f32(P[i]);
        else
            ((float *)hp)[i] = P[i];
    }
    if (!rc && cuda && gpu->copy(j.params, hp, n * es, &err))
        rc = fail("upload", &err);
    if (!rc &&
        cz_executor_bind_typed(ex, cuda ? j.params : hp, cuda ? j.grads : hg, n, o->dtype, &err))
        rc = fail("bind", &err);
    for (int s = 0; !rc && s < STEPS; s++) {
        grads_of_step(s, G, hg, n, o->dtype);
        if (cuda && upload_grads(o, &j, staging, hg, &err))
            rc = fail("upload", &err);
        if (!rc && cz_executor_step(ex, &err))
            rc = fail("step", &err);
    }
    /* copy waits for the device: the step's tail may still run on the executor's stream. */
    if (!rc && cuda && gpu->copy(hp, j.params, n * es, &err))
        rc = fail("download", &err);
    for (size_t i = 0; !rc && i < n; i++)
        P[i] =
            o->dtype == CZ_DTYPE_BF16 ? cz__f32_from_bf16(((uint16_t *)hp)[i]) : ((float *)hp)[i];
    cz_executor_free(ex);
    if (cuda) {
        gpu_job_free(&j);
        gpu->mem_free(staging);
    }
    free(hp), free(hg), free(G);
    return rc;
}

/* How far two runs from the same start S are apart. */
typedef struct gap {
    double max_rel; /* max|a - b| / max|b - S| */
    double upd_l2;  /* ||(a - S) - (b - S)|| / ||b - S||, over every element */
    double par_rel; /* max|a - b| / max|b| */
} gap;

static gap gap_of(const float *a, const float *b, const float *S, size_t n)
{
    double d = 0, u = 0, num = 0, den = 0, pmax = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]), ub = (double)b[i] - S[i];
        d = e > d || isnan(e) ? e : d;
        u = fabs(ub) > u ? fabs(ub) : u;
        pmax = fabs((double)b[i]) > pmax ? fabs((double)b[i]) : pmax;
        num += e * e;
        den += ub * ub;
    }
    return (gap){d / u, sqrt(num / den), d / pmax};
}

/* The fp32 leg: the cuda backend against the cpu backend, max|cuda - cpu| / max|update| <= 1e-4
 * (the same arithmetic; GEMM summation order and FMA contraction differ).
 *
 * The bf16 leg cannot meet a bound of that kind. The cuda backend runs Newton-Schulz with bf16
 * inputs (fp32 accumulation), the cpu backend in fp32: an emulation of the two puts their
 * orthogonalized updates 2.2-3.3 % apart. And the bound parameters are bf16: after the last
 * step both sides round the fp32 master copy to bf16, so where the masters differ by a hair an
 * element differs by a whole bf16 unit, up to 2^-8 of the parameter (4e-4 at 0.1), while 3 steps
 * at the default rates move it by about 3e-4: measured 0.33 of the largest update. So the bf16
 * leg is bounded as the CPU bf16 tests are (mpi.verify.*.bf16, docs/EXECUTOR.md "Dtypes"), at
 * the rates where rounding does not swamp the update (lr 0.01, AdamW 3e-3): the update's L2
 * error <= 0.1 (there: 0.014 for bf16 rounding alone, here plus the 3 % of bf16 Newton-Schulz),
 * and the parameters' max|cuda - cpu| / max|cpu| <= 3e-2 (bf16's resolution with margin). */
static int compare(const char *comm)
{
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    if (!pl)
        return fail("out of memory", NULL);
    size_t n = (size_t)pl->buckets[0].size;
    float *P0 = malloc(n * sizeof(float)), *Pc = malloc(n * sizeof(float));
    float *Pg = malloc(n * sizeof(float)), *S = malloc(n * sizeof(float));
    int rc = (P0 && Pc && Pg && S) ? 0 : fail("out of memory", NULL);
    for (size_t i = 0; !rc && i < n; i++)
        P0[i] = 0.1f * fx_val(i);
    for (int d = 0; !rc && d < 2; d++) {
        cz_dtype dt = d ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32;
        run_opts oc = {"cpu", "self", dt, d ? 0.01f : 0.0f, d ? 3e-3f : 0.0f, 0, CZ_NORMUON_NONE};
        run_opts og = oc;
        og.backend = "cuda";
        og.comm = comm;
        for (size_t i = 0; i < n; i++)
            S[i] = Pc[i] = Pg[i] = d ? cz__f32_from_bf16(cz__bf16_from_f32(P0[i])) : P0[i];
        rc = run(pl, &oc, Pc, n);
        if (!rc)
            rc = run(pl, &og, Pg, n);
        if (rc)
            break;
        gap g = gap_of(Pg, Pc, S, n);
        if (!d) {
            printf(
                "gpu_exec compare %s fp32: max|cuda - cpu| / max|update| = %.3g (limit 0.0001)\n",
                comm, g.max_rel);
            rc = g.max_rel <= 1e-4 ? 0 : 1;
        } else {
            printf("gpu_exec compare %s bf16 (lr 0.01, adamw 3e-3): update ||cuda - cpu|| / "
                   "||cpu|| = %.3g (limit 0.1), parameters max|cuda - cpu| / max|cpu| = %.3g "
                   "(limit 0.03)\n",
                   comm, g.upd_l2, g.par_rel);
            rc = g.upd_l2 <= 0.1 && g.par_rel <= 3e-2 ? 0 : 1;
        }
    }
    free(P0), free(Pc), free(Pg), free(S);
    cz_plan_free(pl);
    return rc;
}

/* NorMuon on the cuda backend (its three kernels per unit: the lines' sums and EMA, the norm
 * factor, the scale) against the cpu backend's loops, fp32, by rows and by columns: the plan's
 * units include a tall one (stored transposed for Newton-Schulz, so its rows are the batch's
 * columns) and row blocks. The same bound as the fp32 compare. */
static int normuon(const char *comm)
{
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    if (!pl)
        return fail("out of memory", NULL);
    size_t n = (size_t)pl->buckets[0].size;
    float *P0 = malloc(n * sizeof(float)), *Pc = malloc(n * sizeof(float));
    float *Pg = malloc(n * sizeof(float));
    int rc = (P0 && Pc && Pg) ? 0 : fail("out of memory", NULL);
    for (size_t i = 0; !rc && i < n; i++)
        P0[i] = 0.1f * fx_val(i);
    for (int m = CZ_NORMUON_ROW; !rc && m <= CZ_NORMUON_COL; m++) {
        run_opts oc = {"cpu", "self", CZ_DTYPE_FP32, 0.0f, 0.0f, 0, (cz_normuon_mode)m};
        run_opts og = oc;
        og.backend = "cuda";
        og.comm = comm;
        memcpy(Pc, P0, n * sizeof(float));
        memcpy(Pg, P0, n * sizeof(float));
        rc = run(pl, &oc, Pc, n);
        if (!rc)
            rc = run(pl, &og, Pg, n);
        if (rc)
            break;
        gap g = gap_of(Pg, Pc, P0, n);
        printf("gpu_exec normuon %s %s: max|cuda - cpu| / max|update| = %.3g (limit 0.0001)\n",
               comm, m == CZ_NORMUON_ROW ? "row" : "col", g.max_rel);
        rc = g.max_rel <= 1e-4 ? 0 : 1;
    }
    free(P0), free(Pc), free(Pg);
    cz_plan_free(pl);
    return rc;
}

/* The job's default-stream writes are seen by the step that follows them at once: the same
 * result as when the job synchronizes first, up to the order of the atomic sums in the norms
 * (max|held - synchronized| / max|update| <= 1e-5). The hold (0.2 s) makes a step that does not
 * wait for the job's stream read the previous step's gradients (or, at the first step, none):
 * a difference of the order of the update itself. */
static int order(const char *comm)
{
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    if (!pl)
        return fail("out of memory", NULL);
    size_t n = (size_t)pl->buckets[0].size;
    float *A = malloc(n * sizeof(float)), *B = malloc(n * sizeof(float));
    float *S = malloc(n * sizeof(float));
    int rc = (A && B && S) ? 0 : fail("out of memory", NULL);
    for (size_t i = 0; !rc && i < n; i++)
        S[i] = A[i] = B[i] = 0.1f * fx_val(i);
    run_opts sync = {"cuda", comm, CZ_DTYPE_FP32, 0, 0, 0, CZ_NORMUON_NONE}, held = sync;
    held.job_hold_s = 0.2;
    if (!rc)
        rc = run(pl, &sync, A, n);
    if (!rc)
        rc = run(pl, &held, B, n);
    if (!rc) {
        gap g = gap_of(B, A, S, n);
        printf("gpu_exec order %s: gradients written on the job's default stream, stepped at "
               "once: max|held - synchronized| / max|update| = %.3g (limit 1e-5)\n",
               comm, g.max_rel);
        rc = g.max_rel <= 1e-5 ? 0 : 1;
    }
    free(A), free(B), free(S);
    cz_plan_free(pl);
    return rc;
}

/* One shape: batch matrices of r x c, 5 iterations, on the cuda backend (managed memory, so the
 * host fills and reads it after an event sync) with the symmetric form forced, against
 * cz__cpu_ns's general form. */
static int ns_sym_case(int64_t r, int64_t c, int batch, const char *coeffs)
{
    const cz_ns_coeffs *k = cz__ns_coeffs_find(coeffs);
    cz_cuda_options o = {.managed = 1, .ns_precision = CZ_NS_FP32, .ns_sym = CZ_NS_SYM_ON};
    cz_compute g;
    cz_error err;
    if (cz__compute_open_cuda(&g, &o, &err))
        return fail("opening the cuda backend", &err);
    size_t nx = (size_t)(batch * r * c), nw = (size_t)cz__ns_work_floats(r, c, batch);
    float *xg = g.ops->alloc(&g, nx * sizeof(float)), *wg = g.ops->alloc(&g, nw * sizeof(float));
    float *xc = malloc(nx * sizeof(float)), *wc = malloc(nw * sizeof(float));
    cz_event *ev = g.ops->event_create(&g);
    int rc = xg && wg && xc && wc && ev ? 0 : fail("allocating the Newton-Schulz buffers", NULL);
    for (size_t i = 0; !rc && i < nx; i++)
        xc[i] = xg[i] = (float)sin(0.37 * (double)i) * 0.5f / sqrtf((float)(r * c));
    if (!rc && g.ops->ns_batched(&g, xg, batch, r, c, k, 5, wg, &err))
        rc = fail("ns_batched on the cuda backend", &err);
    if (!rc) {
        g.ops->event_record(&g, ev);
        if (g.ops->event_sync(&g, ev, &err))
            rc = fail("waiting for the cuda backend", &err);
    }
    if (!rc && cz__cpu_ns(xc, batch, r, c, k, 5, wc, 0, &err))
        rc = fail("cz__cpu_ns", &err);
    if (!rc) {
        double num = 0, den = 0;
        for (size_t i = 0; i < nx; i++) {
            num += ((double)xg[i] - xc[i]) * ((double)xg[i] - xc[i]);
            den += (double)xc[i] * xc[i];
        }
        double rel = sqrt(num / den);
        printf("gpu_exec ns-sym %lld x %lld x %d %s: |cuda symmetric - cpu general| / |cpu| = "
               "%.3g (limit 0.0001)\n",
               (long long)r, (long long)c, batch, coeffs, rel);
        rc = rel <= 1e-4 ? 0 : 1;
    }
    if (ev)
        g.ops->event_free(&g, ev);
    if (xg)
        g.ops->release(&g, xg);
    if (wg)
        g.ops->release(&g, wg);
    free(xc);
    free(wc);
    cz__compute_close(&g);
    return rc;
}

static void print_version(const char *key, int v, int cuda_form)
{
    if (!v)
        printf("%s: unknown\n", key);
    else if (cuda_form)
        printf("%s: %d.%d\n", key, v / 1000, v % 1000 / 10);
    else
        printf("%s: %d.%d.%d\n", key, v / 10000, v / 100 % 100, v % 100);
}

static int info(void)
{
    cz_gpu_versions v;
    cz_error err;
    if (gpu->versions(&v, &err))
        return fail("reading the versions", &err);
    printf("device: %s (compute capability %d.%d, %d SMs, %.1f GiB)\n", v.device, v.cc_major,
           v.cc_minor, v.sm_count, (double)v.memory_bytes / (1u << 30));
    printf("devices: %d\n", v.device_count);
    print_version("driver (CUDA API)", v.driver, 1);
    print_version("CUDA runtime (static)", v.runtime, 1);
    print_version("cuBLAS", v.cublas, 0);
    printf("cuBLAS file: %s\n", v.cublas_path);
    print_version("cuSOLVER", v.cusolver, 0);
    printf("cuSOLVER file: %s\n", v.cusolver_path);
    if (v.nccl) {
        print_version("NCCL", v.nccl, 0);
        printf("NCCL file: %s\n", v.nccl_path);
    } else {
        printf("NCCL: not available (%s)\n", v.nccl_why);
    }
    if (v.nccl && v.nccl_why[0])
        printf("NCCL refused: %s\n", v.nccl_why);
    print_version("NCCL header built against", v.nccl_built, 0);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: gpu_exec probe | info | ns-sym | compare self|nccl | order self|nccl | "
                    "normuon self|nccl\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "probe";
    if (!(gpu = gpu_or_skip()))
        return SKIP;
    if (strcmp(mode, "probe") == 0)
        return 0;
    if (strcmp(mode, "info") == 0)
        return info();
    if (strcmp(mode, "ns-sym") == 0) {
        int rc = ns_sym_case(130, 260, 2, "jordan");
        if (!rc)
            rc = ns_sym_case(128, 128, 1, "cubic");
        if (!rc)
            rc = ns_sym_case(1024, 1536, 1, "jordan");
        return rc;
    }
    if (argc < 3)
        return usage();
    if (strcmp(mode, "compare") == 0)
        return gpu_with_comm(argc, argv, gpu, compare);
    if (strcmp(mode, "order") == 0)
        return gpu_with_comm(argc, argv, gpu, order);
    if (strcmp(mode, "normuon") == 0)
        return gpu_with_comm(argc, argv, gpu, normuon);
    return usage();
}
