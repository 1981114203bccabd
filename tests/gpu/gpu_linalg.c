/* GPU test of SOAP and Shampoo (ctest label gpu): one rank, the cuda backend against the cpu
 * backend on the same plan, 12 steps with refreshes every 5 (SOAP: after updates 5 and 10;
 * Shampoo: at steps 5 and 10), fp32: the largest parameter difference relative to the largest
 * update must be <= 1e-4. Without a CUDA device it prints why and exits 77 (skipped).
 *
 *   gpu_linalg compare COMM   cuda over COMM (self: host-staged managed memory; nccl: device
 *                             memory, NCCL on one rank) against cpu, SOAP then Shampoo
 *   gpu_linalg harness        cpu against cpu (no device needed): proves on any machine that
 *                             the plans, settings and step loop of `compare` run and update
 *
 * SOAP rotates both sides of the 12 x 12 matrix and of each 12 x 12 block of "qkv", and only
 * the 16-row side of the 16 x 40 matrix (its 40 columns are above max_precond_dim 32: left
 * unrotated); Shampoo (max_dim 32) cuts the 16 x 40 matrix into 16 x 32 and 16 x 8 tiles. The
 * gradients keep every eigenbasis unique (see gradient()).
 *
 * SOAP's eps is 1e-2 rather than 1e-8: Adam's step in the eigenbasis is ~sign(G') for the
 * entries of the rotated gradient far above eps, so an entry within rounding of zero moves a
 * whole step between two correct fp32 runs. Measured on the cpu by perturbing every gradient
 * by 3e-7 relative: the SOAP result moves 1.3e-4 of the update at eps 1e-4, 4.4e-5 at 1e-3,
 * 6.3e-6 at 1e-2 (Shampoo 5.7e-6); so 1e-2 leaves the 1e-4 limit a margin of 16 for device
 * rounding. */
#include "exec_fixture.h"
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "cz_format.h"
#include "gpu_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define STEPS 12
#define FREQ 5

static const fx_param PARAMS[] = {
    {"square", 2, 12, 12, -1, CZ_KIND_MATRIX, 0, 0, {0}},   /* SOAP: both sides rotated */
    {"wide", 2, 16, 40, -1, CZ_KIND_MATRIX, 0, 0, {0}},     /* SOAP: columns unrotated */
    {"qkv", 2, 24, 12, -1, CZ_KIND_MATRIX, 0, 2, {12, 12}}, /* two 12 x 12 blocks */
    {"norm", 1, 24, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
};
#define NP ((int)(sizeof PARAMS / sizeof PARAMS[0]))

/* Step s's gradient: in every matrix (block) a diagonal 0.01 (1 + i), plus uniform noise of a
 * tenth of the smallest diagonal entry. Every Gram factor is then full rank from the first
 * gradient on, with eigenvalues ~(1 + i)^2 apart, so the eigenbases are unique and well
 * conditioned: fp32 runs on two devices agree to rounding, which is what is being tested
 * (plain noise would give close eigenvalue pairs, whose eigenvectors two correct fp32 solvers
 * resolve differently: measured 0.2 of the update on the cpu from a 3e-7 gradient change). */
static void gradient(const cz_plan *pl, int s, float *G, size_t n)
{
    for (size_t i = 0; i < n; i++)
        G[i] = 0.001f * fx_val(1000003u * (uint64_t)s + i);
    for (size_t k = 0; k < pl->nparams; k++) {
        const cz_plan_param *p = &pl->params[k];
        if (p->def.kind != CZ_KIND_MATRIX)
            continue;
        int64_t rows = p->def.shape[0], cols = p->def.shape[1];
        for (int64_t i = 0; i < rows; i++)
            G[p->offset + i * cols + i % cols] += 0.01f * (float)(1 + i % cols);
    }
}

static int fail(const char *what, const cz_error *err)
{
    fprintf(stderr, "gpu_linalg: %s: %s\n", what, err ? err->message : "");
    return 1;
}

/* STEPS steps of backend/comm on P (n floats, updated in place); gradients regenerated each
 * step, the same for every backend. The cuda backend gets device copies of the buffers. */
static const cz_gpu_api *gpu;

static int run(const cz_plan *pl, const char *backend, const char *comm, float *P, size_t n)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.backend = backend;
    cfg.comm = comm;
    cfg.soap.eps = 1e-2f;
    cfg.shampoo.max_dim = 32;
    bool cuda = strcmp(backend, "cuda") == 0;
    cfg.memory = cuda ? CZ_EXEC_MEMORY_DEVICE : CZ_EXEC_MEMORY_HOST;
    cz_executor *ex = NULL;
    cz_error err;
    float *G = malloc(n * sizeof(float));
    gpu_job j = {0};
    int rc = G ? 0 : fail("out of memory", NULL);
    if (!rc && cz_executor_create_from_plan(&ex, pl, &cfg, &err))
        rc = fail("create", &err);
    if (!rc && cuda && (gpu_job_alloc(&j, gpu, n * 4, &err) || gpu->copy(j.params, P, n * 4, &err)))
        rc = fail("device buffers", &err);
    if (!rc &&
        cz_executor_bind_typed(ex, cuda ? j.params : P, cuda ? j.grads : G, n, CZ_DTYPE_FP32, &err))
        rc = fail("bind", &err);
    for (int s = 0; !rc && s < STEPS; s++) {
        gradient(pl, s, G, n);
        if (cuda && gpu->copy(j.grads, G, n * 4, &err))
            rc = fail("upload", &err);
        if (!rc && cz_executor_step(ex, &err))
            rc = fail("step", &err);
    }
    /* copy waits for the device: the step's tail may still run on the executor's stream. */
    if (!rc && cuda && gpu->copy(P, j.params, n * 4, &err))
        rc = fail("download", &err);
    cz_executor_free(ex);
    gpu_job_free(&j);
    free(G);
    return rc;
}

/* One optimizer: `test` (backend over comm) against the cpu backend. */
static int compare_one(cz_optimizer opt, const char *test, const char *comm)
{
    cz_plan *pl = fx_plan(PARAMS, NP, 1);
    if (!pl)
        return fail("out of memory", NULL);
    pl->settings.optimizer = opt;
    pl->settings.precondition_frequency = FREQ;
    pl->settings.max_precond_dim = 32;
    size_t n = (size_t)pl->buckets[0].size;
    float *P0 = malloc(n * sizeof(float)), *Pc = malloc(n * sizeof(float));
    float *Pt = malloc(n * sizeof(float));
    int rc = (P0 && Pc && Pt) ? 0 : fail("out of memory", NULL);
    for (size_t i = 0; !rc && i < n; i++)
        P0[i] = Pc[i] = Pt[i] = 0.1f * fx_val(i);
    if (!rc)
        rc = run(pl, "cpu", "self", Pc, n);
    if (!rc)
        rc = run(pl, test, comm, Pt, n);
    double diff = 0, upd = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        double u = fabs((double)Pc[i] - P0[i]), e = fabs((double)Pt[i] - Pc[i]);
        upd = u > upd ? u : upd;
        diff = e > diff || isnan(e) ? e : diff;
    }
    if (!rc) {
        double rel = diff / upd;
        printf("gpu_linalg %s: %s over %s vs cpu, %d steps: max|diff| / max|update| = %.3g "
               "(limit 1e-4; max|update| %.3g)\n",
               cz_optimizer_name(opt), test, comm, STEPS, rel, upd);
        /* The update must be real, or the comparison proves nothing. */
        if (!(upd > 1e-4))
            rc = fail("the parameters barely moved", NULL);
        else if (!(rel <= 1e-4))
            rc = 1;
    }
    free(P0), free(Pc), free(Pt);
    cz_plan_free(pl);
    return rc;
}

static int compare(const char *test, const char *comm)
{
    int rc = compare_one(CZ_OPTIM_SOAP, test, comm);
    int rc2 = compare_one(CZ_OPTIM_SHAMPOO, test, comm);
    return rc ? rc : rc2;
}

static int compare_cuda(const char *comm)
{
    return compare("cuda", comm);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "harness";
    cz_compute probe;
    if (cz__compute_open(&probe, "cpu", NULL) == 0) {
        bool ok = cz__compute_has_linalg(&probe, NULL);
        cz__compute_close(&probe);
        if (!ok) {
            printf("SKIPPED: the cpu backend of this build has no LAPACKE (the reference side)\n");
            return SKIP;
        }
    }
    if (strcmp(mode, "harness") == 0)
        return compare("cpu", "self");
    if (strcmp(mode, "compare") != 0 || argc < 3) {
        fprintf(stderr, "usage: gpu_linalg harness | compare self|nccl\n");
        return 2;
    }
    if (!(gpu = gpu_or_skip()))
        return SKIP;
    return gpu_with_comm(argc, argv, gpu, compare_cuda);
}
