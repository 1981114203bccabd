/* Backend selection beyond the CPU defaults: the cuda compute backend with what it takes from
 * the configuration (the job's stream, the memory a host-driven plane needs, the Newton-Schulz
 * precision), and the nccl data plane. Kept apart from executor.c so that the CPU-only build
 * reads the same there. */
#include "exec_internal.h"

#ifdef CZ_HAVE_CUDA
#include "compute_cuda.h"
#endif
#ifdef CZ_HAVE_NCCL
#include "comm_nccl.h"
#include "nccl_plan.h"

#include <stdlib.h>
#endif

#include <string.h>

#ifdef CZ_HAVE_NCCL
/* The NCCL planes' time limit. The world plane opens before the config's version is checked:
 * a config of another version is not read past its own fields (its message comes later). */
static double nccl_timeout(const cz_exec_config *cfg)
{
    double s = cfg->version == CZ_EXEC_CONFIG_VERSION ? cfg->nccl_timeout_s : 0.0;
    return cz_nccl_timeout(s, getenv("CZ_NCCL_TIMEOUT_S"));
}
#endif

int cz_exec_open_compute(cz_executor *ex, const cz_exec_config *cfg, const char *comm,
                         cz_error *err)
{
    const char *name = cfg->backend ? cfg->backend : "cpu";
    if (strcmp(comm, "nccl") == 0 && strcmp(name, "cuda") != 0)
        return cz_error_set(err, CZ_EUNSUPPORTED,
                            "comm backend 'nccl' works on device memory: it needs backend "
                            "'cuda' (backend is '%s')",
                            name);
    if (strcmp(name, "cuda") != 0)
        return cz_compute_open(&ex->compute, name, err);
#ifdef CZ_HAVE_CUDA
    if (cfg->memory != CZ_EXEC_MEMORY_DEVICE)
        return cz_error_set(err, CZ_EUNSUPPORTED,
                            "compute backend 'cuda' binds device memory: set memory = "
                            "CZ_EXEC_MEMORY_DEVICE (1) and bind buffers from cudaMalloc");
    /* A host-driven plane (mpi, self) reads and writes the executor's buffers from the host:
     * they are then managed memory, and the step stages the job's device buffers through
     * them (the host-staged combination). NCCL works on device memory directly. Newton-Schulz
     * runs in bf16 (fp32 accumulation) when the parameters are bf16. */
    int dtype = cfg->dtype >= 0 ? cfg->dtype : ex->plan ? (int)ex->plan->dtype : CZ_DTYPE_FP32;
    cz_cuda_options o = {
        .stream = cfg->stream,
        .managed = strcmp(comm, "nccl") != 0,
        .ns_precision = dtype == CZ_DTYPE_BF16 ? CZ_NS_BF16 : CZ_NS_FP32,
    };
    int rc = cz_compute_cuda_open(&ex->compute, &o, err);
    ex->host_staged = !rc && o.managed;
    return rc;
#else
    (void)ex;
    (void)comm;
    return cz_compute_open(&ex->compute, name, err);
#endif
}

int cz_exec_open_nccl(cz_executor *ex, const cz_exec_config *cfg, cz_error *err)
{
#ifdef CZ_HAVE_NCCL
    if (!cz_comm_mpi_available())
        return cz_error_set(err, CZ_EINVALID,
                            "comm backend 'nccl' bootstraps over MPI: initialize MPI before "
                            "creating the executor");
    cz_comm_phase("creating the executor", -1);
    int rc = cz_ctrl_mpi_open(&ex->ctrl, cfg->world_comm,
                              cz_exec_mpi_timeout(cfg, getenv("CZ_MPI_TIMEOUT_S")), err);
    return rc ? rc : cz_plane_nccl_open(&ex->world, &ex->ctrl, nccl_timeout(cfg), err);
#else
    (void)ex;
    (void)cfg;
    return cz_error_set(err, CZ_EUNSUPPORTED,
                        "comm backend 'nccl' is not available: this build has no NCCL "
                        "(configure with a CUDA toolkit that includes NCCL)");
#endif
}

int cz_exec_open_plane(cz_executor *ex, const void *handle, cz_plane *out, cz_error *err)
{
#ifdef CZ_HAVE_NCCL
    if (ex->world.ops->kind == CZ_COMM_NCCL)
        return cz_plane_nccl_wrap(out, handle, nccl_timeout(&ex->cfg), err);
#endif
    return cz_plane_mpi_open(out, handle, &ex->ctrl, err);
}

int cz_exec_reserve_planes(cz_executor *ex, cz_error *err)
{
#ifdef CZ_HAVE_NCCL
    if (ex->dp_comm.ops && ex->dp_comm.ops->kind == CZ_COMM_NCCL)
        return cz_plane_nccl_reserve(&ex->dp_comm, ex->plan, err);
#endif
    (void)ex;
    (void)err;
    return CZ_OK;
}
