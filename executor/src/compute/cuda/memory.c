/* The plugin's memory: the executor's allocator, borrowed (so that cz__exec_alloc_count covers
 * the plugin's host tables too), and every device allocation, counted (so that the GPU check
 * can show that a step makes none). Apart from plugin.c, the entry, so that the backends'
 * files, which allocate, do not depend on the file that opens them. */
#include "alloc.h"
#include "compute_cuda.h"

#include "check.h"

#include <cuda_runtime_api.h>
#include <stdatomic.h>

static const cz_gpu_host *host;
static _Atomic uint64_t device_allocs;

/* The executor's allocator: cz__exec_alloc_count then counts the plugin's host tables too. */
void *cz__exec_malloc(size_t bytes)
{
    return host->malloc(bytes);
}

void *cz__exec_calloc(size_t n, size_t size)
{
    return host->calloc(n, size);
}

void cz__exec_free(void *p)
{
    host->free(p);
}

int cz__cuda_malloc(void **p, size_t bytes, cz_cuda_memory kind)
{
    int rc;
    switch (kind) {
    case CZ_CUDA_MEM_MANAGED:
        rc = CZ_CU_RC(cudaMallocManaged(p, bytes, cudaMemAttachGlobal));
        break;
    case CZ_CUDA_MEM_MAPPED:
        rc = CZ_CU_RC(cudaHostAlloc(p, bytes, cudaHostAllocMapped));
        break;
    default:
        rc = CZ_CU_RC(cudaMalloc(p, bytes));
        break;
    }
    if (rc == (int)cudaSuccess)
        atomic_fetch_add_explicit(&device_allocs, 1, memory_order_relaxed);
    return rc;
}

uint64_t cz__cuda_alloc_count(void)
{
    return atomic_load_explicit(&device_allocs, memory_order_relaxed);
}

void cz__cuda_memory_init(const cz_gpu_host *h)
{
    host = h;
}
