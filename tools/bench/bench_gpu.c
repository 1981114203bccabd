/* canzona-bench's device buffers (see bench_gpu.h), through the GPU plugin (gpu_plugin.h): the
 * bench links no NVIDIA library, so it starts everywhere and --backend cuda says what is
 * missing on a machine without a device or without the libraries. */
#include "bench_gpu.h"

#include "cz_exec_testing.h"

#include <mpi.h>

static const cz_gpu_api *gpu;

int bench_gpu_select(cz_error *err)
{
    MPI_Comm node;
    int local = 0, count = 0;
    int rc = cz__gpu_load(&gpu, err);
    if (rc)
        return rc;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    rc = gpu->device_count(&count, err);
    if (!rc && count < 1)
        rc = cz__error_set(err, CZ_EUNSUPPORTED, "--backend cuda: no CUDA device");
    return rc ? rc : gpu->set_device(local % count, err);
}

int bench_gpu_alloc(bench_gpu *g, size_t bytes, cz_error *err)
{
    g->bytes = bytes ? bytes : 1;
    int rc = gpu->mem_alloc(&g->params, g->bytes, err);
    return rc ? rc : gpu->mem_alloc(&g->grads, g->bytes, err);
}

int bench_gpu_copy(void *dst, const void *src, size_t bytes, int to_device, cz_error *err)
{
    (void)to_device; /* the copy waits for the device, then goes by the pointers' kinds */
    return gpu->copy(dst, src, bytes, err);
}

int bench_gpu_sync(cz_error *err)
{
    return gpu->synchronize(err);
}

void bench_gpu_free(bench_gpu *g)
{
    if (gpu) {
        gpu->mem_free(g->params);
        gpu->mem_free(g->grads);
    }
    g->params = g->grads = NULL;
}

int bench_gpu_free_bytes(size_t *out, cz_error *err)
{
    return gpu ? gpu->mem_free_bytes(out, err)
               : cz__error_set(err, CZ_EINVALID, "the GPU plugin is not loaded");
}

uint64_t bench_gpu_alloc_count(void)
{
    return gpu ? gpu->alloc_count() : 0;
}
