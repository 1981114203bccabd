/* canzona-bench's device side for --backend cuda: the job's buffers in device memory, mirrored
 * from and to the host buffers the bench fills and verifies, through the GPU plugin
 * (bench_gpu.c). */
#ifndef CZ_BENCH_GPU_H
#define CZ_BENCH_GPU_H

#include "cz_format.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bench_gpu {
    void *params, *grads; /* device copies of the bound buffers */
    size_t bytes;
} bench_gpu;

/* Selects this rank's GPU: node-local rank modulo the device count. */
int bench_gpu_select(cz_error *err);
/* Device buffers of `bytes` each. */
int bench_gpu_alloc(bench_gpu *g, size_t bytes, cz_error *err);
/* Host -> device (to_device) or device -> host of one of g's buffers. */
int bench_gpu_copy(void *dst, const void *src, size_t bytes, int to_device, cz_error *err);
/* Waits until the device has done everything queued on it (a step's tail included). */
int bench_gpu_sync(cz_error *err);
void bench_gpu_free(bench_gpu *g);
/* Device allocations the GPU backends have made so far (0 before bench_gpu_select). */
uint64_t bench_gpu_alloc_count(void);
/* The device's free memory in bytes (cudaMemGetInfo, through the plugin), for the deltas
 * around create, the first bind and the first step. */
int bench_gpu_free_bytes(size_t *out, cz_error *err);

#endif
