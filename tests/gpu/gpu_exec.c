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
 */
#include "exec_fixture.h"
#include "exec_internal.h"

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
    if (strcmp(mode, "compare") != 0 || argc < 3) {
        fprintf(stderr, "usage: gpu_exec probe | compare self|nccl\n");
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
