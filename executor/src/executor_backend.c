/* Backend selection beyond the CPU defaults: the cuda compute backend with what it takes from
 * the configuration (the job's stream, the memory a host-driven plane needs, the Newton-Schulz
 * precision), and the nccl data plane, both from the GPU plugin (gpu_plugin.h). Kept apart from
 * executor.c so that it reads the same whatever the build has. */
#include "canzona_exec.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "gpu_plugin.h"
#include "nccl_plan.h"

#include <stdlib.h>
#include <string.h>

/* The NCCL planes' time limit. The world plane opens before the config's version is checked:
 * a config of another version is not read past its own fields (its message comes later). */
static double nccl_timeout(const cz_exec_config *cfg)
{
    double s = cfg->version == CZ_EXEC_CONFIG_VERSION ? cfg->nccl_timeout_s : 0.0;
    return cz__nccl_timeout(s, getenv("CZ_NCCL_TIMEOUT_S"));
}

int cz__exec_open_compute(cz_executor *ex, const cz_exec_config *cfg, const char *comm,
                          cz_error *err)
{
    const char *name = cfg->backend ? cfg->backend : "cpu";
    if (strcmp(comm, "nccl") == 0 && strcmp(name, "cuda") != 0)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "comm backend 'nccl' works on device memory: it needs backend "
                             "'cuda' (backend is '%s')",
                             name);
    if (strcmp(name, "cuda") != 0)
        return cz__compute_open(&ex->compute, name, err);
    if (cfg->memory != CZ_EXEC_MEMORY_DEVICE)
        return cz__error_set(err, CZ_EUNSUPPORTED,
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
    int rc = cz__compute_open_cuda(&ex->compute, &o, err);
    ex->host_staged = !rc && o.managed;
    return rc;
}

int cz__exec_open_nccl(cz_executor *ex, const cz_exec_config *cfg, cz_error *err)
{
    if (!cz__comm_mpi_available())
        return cz__error_set(err, CZ_EINVALID,
                             "comm backend 'nccl' bootstraps over MPI: initialize MPI before "
                             "creating the executor");
    cz__comm_phase("creating the executor", -1);
    int rc = cz__ctrl_mpi_open(&ex->ctrl, cfg->world_comm,
                               cz__exec_mpi_timeout(cfg, getenv("CZ_MPI_TIMEOUT_S")), err);
    if (rc)
        return rc;
    /* Every rank learns whether every other one has the plugin before any NCCL call. */
    const cz_gpu_api *gpu = NULL;
    cz_error e;
    rc = cz__gpu_load(&gpu, &e);
    if (rc)
        rc = cz__error_set(err, rc, "comm backend 'nccl' is not available: %s", e.message);
    rc = cz__nccl_agree(&ex->ctrl, rc, "load the GPU plugin", err);
    return rc ? rc : gpu->plane_nccl_open(&ex->world, &ex->ctrl, nccl_timeout(cfg), err);
}

int cz__exec_open_plane(cz_executor *ex, const void *handle, cz_plane *out, cz_error *err)
{
    const cz_gpu_api *gpu;
    if (ex->world.ops->kind == CZ_COMM_NCCL && !cz__gpu_load(&gpu, err))
        return gpu->plane_nccl_wrap(out, handle, nccl_timeout(&ex->cfg), err);
    if (ex->world.ops->kind == CZ_COMM_NCCL)
        return err ? err->code : CZ_EUNSUPPORTED;
    return cz__plane_mpi_open(out, handle, &ex->ctrl, err);
}

int cz__exec_reserve_planes(cz_executor *ex, cz_error *err)
{
    const cz_gpu_api *gpu;
    if (!ex->dp_comm.ops || ex->dp_comm.ops->kind != CZ_COMM_NCCL)
        return CZ_OK;
    int rc = cz__gpu_load(&gpu, err);
    return rc ? rc : gpu->plane_nccl_reserve(&ex->dp_comm, ex->plan, err);
}
