// Launch helpers shared by the CUDA backend's kernel files (kernels.cu, linalg_kernels.cu):
// grid-stride indexing, the launch size rule of launch.h, and the launch status check.
#ifndef CZ_CUDA_GRID_CUH
#define CZ_CUDA_GRID_CUH

#include "check.h"

#include "../launch.h"

#include <cuda_runtime.h>
#include <stdint.h>

static __device__ __forceinline__ int64_t first_index()
{
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

static __device__ __forceinline__ int64_t grid_stride()
{
    return (int64_t)gridDim.x * blockDim.x;
}

static inline int blocks(int64_t n)
{
    return cz_launch_blocks(n, CZ_CUDA_THREADS, CZ_CUDA_MAX_BLOCKS);
}

static inline cudaStream_t as_stream(void *s)
{
    return static_cast<cudaStream_t>(s);
}

// A kernel launch's status (launches return none of their own).
static inline int launched()
{
    return CZ_CU_RC(cudaGetLastError());
}

#endif
