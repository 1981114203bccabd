/* canzona-bench's device buffers (see bench_gpu.h). */
#include "bench_gpu.h"

#ifdef CZ_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <mpi.h>

static int cuda_fail(cudaError_t rc, const char *what, cz_error *err)
{
    return cz_error_set(err, CZ_EIO, "%s failed: %s", what, cudaGetErrorString(rc));
}

int bench_gpu_select(cz_error *err)
{
    MPI_Comm node;
    int local = 0, count = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess)
        return cuda_fail(rc, "cudaGetDeviceCount", err);
    if (count < 1)
        return cz_error_set(err, CZ_EUNSUPPORTED, "--backend cuda: no CUDA device");
    rc = cudaSetDevice(local % count);
    return rc == cudaSuccess ? CZ_OK : cuda_fail(rc, "cudaSetDevice", err);
}

int bench_gpu_alloc(bench_gpu *g, size_t bytes, cz_error *err)
{
    g->bytes = bytes ? bytes : 1;
    cudaError_t rc = cudaMalloc(&g->params, g->bytes);
    if (rc == cudaSuccess)
        rc = cudaMalloc(&g->grads, g->bytes);
    return rc == cudaSuccess ? CZ_OK : cuda_fail(rc, "cudaMalloc of the bound buffers", err);
}

int bench_gpu_copy(void *dst, const void *src, size_t bytes, int to_device, cz_error *err)
{
    /* A step returns with its tail still in flight on the executor's own stream, which does
     * not order against cudaMemcpy's: wait for the whole device first. */
    cudaError_t rc = cudaDeviceSynchronize();
    if (rc != cudaSuccess)
        return cuda_fail(rc, "cudaDeviceSynchronize", err);
    rc = cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    return rc == cudaSuccess ? CZ_OK : cuda_fail(rc, "cudaMemcpy", err);
}

void bench_gpu_free(bench_gpu *g)
{
    /* Exit path: a failure to free changes nothing the bench reports. */
    if (g->params && cudaFree(g->params) != cudaSuccess)
        g->params = NULL;
    if (g->grads && cudaFree(g->grads) != cudaSuccess)
        g->grads = NULL;
}

#else

static int no_cuda(cz_error *err)
{
    return cz_error_set(err, CZ_EUNSUPPORTED,
                        "--backend cuda: this canzona-bench was built without CUDA");
}

int bench_gpu_select(cz_error *err)
{
    return no_cuda(err);
}

int bench_gpu_alloc(bench_gpu *g, size_t bytes, cz_error *err)
{
    (void)g;
    (void)bytes;
    return no_cuda(err);
}

int bench_gpu_copy(void *dst, const void *src, size_t bytes, int to_device, cz_error *err)
{
    (void)dst;
    (void)src;
    (void)bytes;
    (void)to_device;
    return no_cuda(err);
}

void bench_gpu_free(bench_gpu *g)
{
    (void)g;
}

#endif
