/* What the GPU test programs share: the skip rule and the job's side of a step (device
 * buffers written and read through the GPU plugin, as a training job would). */
#ifndef CZ_GPU_UTIL_H
#define CZ_GPU_UTIL_H

#include "cz_exec_testing.h"

#include <stdio.h>
#include <string.h>

#ifdef CZ_HAVE_MPI
#include <mpi.h>
#endif

#define SKIP 77

/* The plugin's table when a CUDA device is usable; else NULL after printing why (ctest and
 * canzona-gpu-check report the exit code 77 as skipped). */
static inline const cz_gpu_api *gpu_or_skip(void)
{
    const cz_gpu_api *gpu = NULL;
    cz_error err;
    char why[512];
    if (cz__gpu_load(&gpu, &err)) {
        printf("SKIPPED: %s\n", err.message);
        return NULL;
    }
    if (!gpu->device_present(why, sizeof why)) {
        printf("SKIPPED: no CUDA device (%s); the gpu tests need one\n", why);
        return NULL;
    }
    return gpu;
}

/* The job's parameter and gradient buffers on the device. */
typedef struct gpu_job {
    const cz_gpu_api *gpu;
    void *params, *grads;
    size_t bytes;
} gpu_job;

static inline int gpu_job_alloc(gpu_job *j, const cz_gpu_api *gpu, size_t bytes, cz_error *err)
{
    *j = (gpu_job){.gpu = gpu, .bytes = bytes};
    int rc = gpu->mem_alloc(&j->params, bytes, err);
    return rc ? rc : gpu->mem_alloc(&j->grads, bytes, err);
}

static inline void gpu_job_free(gpu_job *j)
{
    if (j->gpu) {
        j->gpu->mem_free(j->params);
        j->gpu->mem_free(j->grads);
    }
    *j = (gpu_job){0};
}

/* Runs fn(comm) for argv[2] = the data plane ("self" or "nccl"), MPI initialized around it
 * (NCCL bootstraps over MPI); nccl without MPI or without NCCL is skipped, saying why. */
static inline int gpu_with_comm(int argc, char **argv, const cz_gpu_api *gpu,
                                int (*fn)(const char *comm))
{
    int rc;
#ifdef CZ_HAVE_MPI
    MPI_Init(&argc, &argv);
#else
    (void)argc;
#endif
    char why[512];
    if (strcmp(argv[2], "nccl") == 0 && !cz__comm_mpi_available()) {
        printf("SKIPPED: comm nccl needs MPI, and this build has none\n");
        rc = SKIP;
    } else if (strcmp(argv[2], "nccl") == 0 && !gpu->nccl_available(why, sizeof why)) {
        printf("SKIPPED: comm nccl: %s\n", why);
        rc = SKIP;
    } else {
        rc = fn(argv[2]);
    }
#ifdef CZ_HAVE_MPI
    MPI_Finalize();
#endif
    return rc;
}

#endif /* CZ_GPU_UTIL_H */
