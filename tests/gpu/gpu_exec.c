/* GPU tests of the executor (ctest label gpu). Without a CUDA device each mode prints why and
 * exits 77, which ctest reports as skipped.
 *
 *   gpu_exec probe            exit 0 when a CUDA device is usable, else 77
 *   gpu_exec compare COMM     one rank: the cuda backend over COMM (self: host-staged managed
 *                             memory; nccl: device memory, NCCL on one rank) against the cpu
 *                             backend on a plan with batched, transposed and blocked matrices
 *                             and elementwise parameters, 3 steps, fp32 and bf16: the largest
 *                             update difference relative to the largest update must be
 *                             <= 1e-4 (fp32) and <= 2e-2 (bf16).
 *   gpu_exec ns-sym           the cuda backend's Newton-Schulz with the symmetric form forced
 *                             on (cublasSsyrk + the mirror kernel, fp32) against the cpu
 *                             backend's general form: relative error <= 1e-4.
 */
#include "exec_fixture.h"
#include "exec_internal.h"
#include "ns_plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifdef CZ_HAVE_CUDA
#include "compute_cuda.h"
#include <cuda_runtime_api.h>
#endif
#ifdef CZ_HAVE_MPI
#include <mpi.h>
#endif

#define SKIP 77

#ifdef CZ_HAVE_CUDA
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

static int fail(const char *what, const cz_error *err)
{
    fprintf(stderr, "gpu_exec: %s: %s\n", what, err ? err->message : "");
    return 1;
}

/* Runs STEPS steps with backend/comm on host buffers P, G (the gradients of step s are
 * regenerated each step); the cuda backend gets device copies. */
static int run(const cz_plan *pl, const char *backend, const char *comm, cz_dtype dt, float *P,
               size_t n)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.backend = backend;
    cfg.comm = comm;
    cfg.dtype = dt;
    bool cuda = strcmp(backend, "cuda") == 0;
    cfg.memory = cuda ? CZ_EXEC_MEMORY_DEVICE : CZ_EXEC_MEMORY_HOST;
    cz_executor *ex = NULL;
    cz_error err;
    size_t es = dt == CZ_DTYPE_BF16 ? 2 : 4;
    void *hp = malloc(n * es), *hg = malloc(n * es), *dp = NULL, *dg = NULL;
    float *G = malloc(n * sizeof(float));
    int rc = (hp && hg && G) ? 0 : 1;
    if (!rc && cz_executor_create_from_plan(&ex, pl, &cfg, &err))
        rc = fail("create", &err);
    if (!rc && cuda &&
        (cudaMalloc(&dp, n * es) != cudaSuccess || cudaMalloc(&dg, n * es) != cudaSuccess))
        rc = fail("cudaMalloc of the job's buffers", NULL);
    for (size_t i = 0; !rc && i < n; i++) {
        if (dt == CZ_DTYPE_BF16)
            ((uint16_t *)hp)[i] = cz_bf16_from_f32(P[i]);
        else
            ((float *)hp)[i] = P[i];
    }
    if (!rc && cuda && cudaMemcpy(dp, hp, n * es, cudaMemcpyHostToDevice) != cudaSuccess)
        rc = fail("upload", NULL);
    if (!rc && cz_executor_bind_typed(ex, cuda ? dp : hp, cuda ? dg : hg, n, dt, &err))
        rc = fail("bind", &err);
    for (int s = 0; !rc && s < STEPS; s++) {
        for (size_t i = 0; i < n; i++) {
            G[i] = 0.01f * fx_val(1000003u * (uint64_t)s + i);
            if (dt == CZ_DTYPE_BF16)
                ((uint16_t *)hg)[i] = cz_bf16_from_f32(G[i]);
            else
                ((float *)hg)[i] = G[i];
        }
        if (cuda && cudaMemcpy(dg, hg, n * es, cudaMemcpyHostToDevice) != cudaSuccess)
            rc = fail("upload", NULL);
        if (!rc && cz_executor_step(ex, &err))
            rc = fail("step", &err);
        /* The step's tail may still run on the executor's stream. */
        if (!rc && cuda && cudaDeviceSynchronize() != cudaSuccess)
            rc = fail("cudaDeviceSynchronize", NULL);
    }
    if (!rc && cuda && cudaMemcpy(hp, dp, n * es, cudaMemcpyDeviceToHost) != cudaSuccess)
        rc = fail("download", NULL);
    for (size_t i = 0; !rc && i < n; i++)
        P[i] = dt == CZ_DTYPE_BF16 ? cz_f32_from_bf16(((uint16_t *)hp)[i]) : ((float *)hp)[i];
    cz_executor_free(ex);
    if (dp && cudaFree(dp) != cudaSuccess)
        rc = fail("cudaFree", NULL);
    if (dg && cudaFree(dg) != cudaSuccess)
        rc = fail("cudaFree", NULL);
    free(hp), free(hg), free(G);
    return rc;
}

static int compare(const char *comm)
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
    cz_dtype dts[2] = {CZ_DTYPE_FP32, CZ_DTYPE_BF16};
    double tol[2] = {1e-4, 2e-2};
    for (int d = 0; !rc && d < 2; d++) {
        for (size_t i = 0; i < n; i++)
            Pc[i] = Pg[i] =
                dts[d] == CZ_DTYPE_BF16 ? cz_f32_from_bf16(cz_bf16_from_f32(P0[i])) : P0[i];
        float *S = malloc(n * sizeof(float));
        if (!S)
            return fail("out of memory", NULL);
        memcpy(S, Pc, n * sizeof(float));
        rc = run(pl, "cpu", "self", dts[d], Pc, n);
        if (!rc)
            rc = run(pl, "cuda", comm, dts[d], Pg, n);
        double diff = 0, upd = 0;
        for (size_t i = 0; !rc && i < n; i++) {
            double u = fabs((double)Pc[i] - S[i]), e = fabs((double)Pg[i] - Pc[i]);
            upd = u > upd ? u : upd;
            diff = e > diff || isnan(e) ? e : diff;
        }
        free(S);
        if (rc)
            break;
        double rel = diff / upd;
        printf("gpu_exec compare %s %s: max|cuda - cpu| / max|update| = %.3g (limit %g)\n", comm,
               cz_dtype_name(dts[d]), rel, tol[d]);
        if (!(rel <= tol[d]))
            rc = 1;
    }
    free(P0), free(Pc), free(Pg);
    cz_plan_free(pl);
    return rc;
}
#endif

#ifdef CZ_HAVE_CUDA
/* One shape: batch matrices of r x c, 5 iterations, on the cuda backend (managed memory, so the
 * host fills and reads it after an event sync) with the symmetric form forced, against
 * cz_cpu_ns's general form. */
static int ns_sym_case(int64_t r, int64_t c, int batch, const char *coeffs)
{
    const cz_ns_coeffs *k = cz_ns_coeffs_find(coeffs);
    cz_cuda_options o = {.managed = 1, .ns_precision = CZ_NS_FP32, .ns_sym = CZ_NS_SYM_ON};
    cz_compute g;
    cz_error err;
    if (cz_compute_cuda_open(&g, &o, &err))
        return fail("opening the cuda backend", &err);
    size_t nx = (size_t)(batch * r * c), nw = (size_t)cz_ns_work_floats(r, c, batch);
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
    if (!rc && cz_cpu_ns(xc, batch, r, c, k, 5, wc, 0, &err))
        rc = fail("cz_cpu_ns", &err);
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
    cz_compute_close(&g);
    return rc;
}
#endif

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "probe";
#ifndef CZ_HAVE_CUDA
    (void)mode;
    printf("SKIPPED: this build has no CUDA backend (no CUDA toolkit, or CZ_WITH_CUDA=OFF)\n");
    return SKIP;
#else
    char why[256];
    if (!cz_cuda_device_present(why, sizeof why)) {
        printf("SKIPPED: no CUDA device (%s); the gpu tests need one\n", why);
        return SKIP;
    }
    if (strcmp(mode, "probe") == 0)
        return 0;
    if (strcmp(mode, "ns-sym") == 0) {
        int rc = ns_sym_case(130, 260, 2, "jordan");
        if (!rc)
            rc = ns_sym_case(128, 128, 1, "cubic");
        if (!rc)
            rc = ns_sym_case(1024, 1536, 1, "jordan");
        return rc;
    }
    if (strcmp(mode, "compare") != 0 || argc < 3) {
        fprintf(stderr, "usage: gpu_exec probe | ns-sym | compare self|nccl\n");
        return 2;
    }
    int rc;
#ifdef CZ_HAVE_MPI
    MPI_Init(&argc, &argv);
#endif
    if (strcmp(argv[2], "nccl") == 0 && !cz_comm_mpi_available()) {
        printf("SKIPPED: comm nccl needs MPI, and this build has none\n");
        rc = SKIP;
    } else {
        rc = compare(argv[2]);
    }
#ifdef CZ_HAVE_MPI
    MPI_Finalize();
#endif
    return rc;
#endif
}
