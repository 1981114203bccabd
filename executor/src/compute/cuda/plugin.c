/* The GPU plugin's entry (gpu_plugin.h): the table libcanzona-exec calls, the device services
 * the bench and the tests use through it, and the executor's allocator, borrowed. */
/* dladdr: the file a symbol was loaded from. */
#define _GNU_SOURCE
#include "compute_cuda.h"

#include "check.h"
#ifdef CZ_HAVE_NCCL
#include "../nccl/nccl_api.h"
#include "comm_nccl.h"
#include "nccl_plan.h"
#endif

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const cz_gpu_host *host;

static int device_count(int *count, cz_error *err)
{
    *count = 0;
    return CZ_CU(err, cudaGetDeviceCount(count));
}

static int set_device(int device, cz_error *err)
{
    return CZ_CU(err, cudaSetDevice(device));
}

static int mem_alloc(void **p, size_t bytes, cz_error *err)
{
    *p = NULL;
    return CZ_CU(err, cz__cuda_malloc(p, bytes ? bytes : 1, CZ_CUDA_MEM_DEVICE));
}

static void mem_free(void *p)
{
    cz_error e;
    /* The caller's exit path: a failure to free changes nothing it could report. */
    if (p && CZ_CU(&e, cudaFree(p)))
        return;
}

static int synchronize(cz_error *err)
{
    return CZ_CU(err, cudaDeviceSynchronize());
}

static int copy(void *dst, const void *src, size_t bytes, cz_error *err)
{
    /* A step may end with its tail in flight on the executor's stream. */
    int rc;
    if ((rc = synchronize(err)) != CZ_OK)
        return rc;
    return CZ_CU(err, cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

static int mem_free_bytes(size_t *out, cz_error *err)
{
    size_t total = 0;
    *out = 0;
    return CZ_CU(err, cudaMemGetInfo(out, &total));
}

static void CUDART_CB hold(void *seconds)
{
    double s = *(const double *)seconds;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int job_write(void *dst, const void *src, size_t bytes, double hold_s, cz_error *err)
{
    /* The callback reads it after this returns: one pending write at a time is all a test
     * makes, and the next call waits for the device first. */
    static double held;
    int rc = synchronize(err);
    held = hold_s;
    if (rc != CZ_OK ||
        (rc = CZ_CU(err, cudaLaunchHostFunc(cudaStreamLegacy, hold, &held))) != CZ_OK)
        return rc;
    return CZ_CU(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cudaStreamLegacy));
}

/* The file a library function was loaded from. */
static void path_of(const void *fn, char *out, size_t len)
{
    Dl_info info;
    snprintf(out, len, "%s", dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?");
}

static int library_version(int major, int minor, int patch)
{
    return 10000 * major + 100 * minor + patch;
}

static int blas_versions(cz_gpu_versions *v, cz_error *err)
{
    int p[3] = {0};
    const libraryPropertyType k[3] = {MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL};
    int rc;
    /* The files first: they are known even when a library does not answer. */
    path_of((const void *)cublasGetProperty, v->cublas_path, sizeof v->cublas_path);
    path_of((const void *)cusolverGetProperty, v->cusolver_path, sizeof v->cusolver_path);
    for (int i = 0; i < 3; i++)
        if ((rc = CZ_BLAS(err, cublasGetProperty(k[i], &p[i]))) != CZ_OK)
            return rc;
    v->cublas = library_version(p[0], p[1], p[2]);
    for (int i = 0; i < 3; i++)
        if ((rc = CZ_SOLVER(err, cusolverGetProperty(k[i], &p[i]))) != CZ_OK)
            return rc;
    v->cusolver = library_version(p[0], p[1], p[2]);
    return CZ_OK;
}

static int nccl_available(char *why, size_t len)
{
#ifdef CZ_HAVE_NCCL
    return cz__nccl_load(host->search_dirs, why, len, NULL, NULL, 0);
#else
    snprintf(why, len, "the plugin was built without NCCL's header (nccl.h)");
    return 0;
#endif
}

/* The CUDA driver's and runtime's versions, cuBLAS's and cuSOLVER's. */
static int runtime_versions(cz_gpu_versions *v, cz_error *err)
{
    int rc;
    if ((rc = CZ_CU(err, cudaDriverGetVersion(&v->driver))) != CZ_OK ||
        (rc = CZ_CU(err, cudaRuntimeGetVersion(&v->runtime))) != CZ_OK)
        return rc;
    return blas_versions(v, err);
}

/* NCCL's version and file, or why there is none. */
static void nccl_versions(cz_gpu_versions *v)
{
#ifdef CZ_HAVE_NCCL
    v->nccl_built = NCCL_VERSION_CODE;
    cz__nccl_load(host->search_dirs, v->nccl_why, sizeof v->nccl_why, &v->nccl, v->nccl_path,
                  sizeof v->nccl_path);
#else
    nccl_available(v->nccl_why, sizeof v->nccl_why);
#endif
}

/* How many devices, and the first one's name and size. */
static int device_versions(cz_gpu_versions *v, cz_error *err)
{
    if (CZ_CU_RC(cudaGetDeviceCount(&v->device_count)) != (int)cudaSuccess)
        v->device_count = 0;
    if (v->device_count <= 0)
        return CZ_OK;
    struct cudaDeviceProp prop;
    int rc;
    if ((rc = CZ_CU(err, cudaGetDeviceProperties(&prop, 0))) != CZ_OK)
        return rc;
    snprintf(v->device, sizeof v->device, "%s", prop.name);
    v->cc_major = prop.major;
    v->cc_minor = prop.minor;
    v->sm_count = prop.multiProcessorCount;
    v->memory_bytes = prop.totalGlobalMem;
    return CZ_OK;
}

static int versions(cz_gpu_versions *v, cz_error *err)
{
    *v = (cz_gpu_versions){.runtime_built = CUDART_VERSION};
    int rc = runtime_versions(v, err);
    /* NCCL is looked up whether or not the CUDA runtime answered (its loading does not depend
     * on it), before the device is asked, as it always was. */
    nccl_versions(v);
    if (rc != CZ_OK)
        return rc;
    return device_versions(v, err);
}

#ifdef CZ_HAVE_NCCL
/* The planes, once NCCL is loaded: else the reason, as the executor's error. */
static int need_nccl(cz_error *err)
{
    char why[512];
    if (cz__nccl_load(host->search_dirs, why, sizeof why, NULL, NULL, 0))
        return CZ_OK;
    return cz__error_set(err, CZ_EUNSUPPORTED, "comm backend 'nccl': %s", why);
}

static int plane_open(cz_plane *p, cz_ctrl *ctrl, double timeout_s, cz_error *err)
{
    /* Every rank learns whether every other one has NCCL before any NCCL collective. */
    int rc;
    if ((rc = cz__nccl_agree(ctrl, need_nccl(err), "load NCCL", err)) != CZ_OK)
        return rc;
    return cz__plane_nccl_open(p, ctrl, timeout_s, err);
}

static int plane_wrap(cz_plane *p, const void *handle, double timeout_s, cz_error *err)
{
    int rc;
    if ((rc = need_nccl(err)) != CZ_OK)
        return rc;
    return cz__plane_nccl_wrap(p, handle, timeout_s, err);
}
#else
static int no_nccl(cz_error *err)
{
    return cz__error_set(err, CZ_EUNSUPPORTED,
                         "comm backend 'nccl' is not available: the GPU plugin was built without "
                         "NCCL's header (nccl.h)");
}

static int plane_open(cz_plane *p, cz_ctrl *ctrl, double timeout_s, cz_error *err)
{
    (void)p, (void)ctrl, (void)timeout_s;
    return no_nccl(err);
}

static int plane_wrap(cz_plane *p, const void *handle, double timeout_s, cz_error *err)
{
    (void)p, (void)handle, (void)timeout_s;
    return no_nccl(err);
}

static int cz__plane_nccl_reserve(cz_plane *p, const cz_plan *plan, cz_error *err)
{
    (void)p, (void)plan;
    return no_nccl(err);
}
#endif

static const cz_gpu_api api = {
    .version = CZ_GPU_API_VERSION,
    .device_present = cz__cuda_device_present,
    .versions = versions,
    .device_count = device_count,
    .set_device = set_device,
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    .copy = copy,
    .synchronize = synchronize,
    .alloc_count = cz__cuda_alloc_count,
    .mem_free_bytes = mem_free_bytes,
    .job_write = job_write,
    .time_gemm = cz__cuda_time_gemm,
    .time_launch = cz__cuda_time_launch,
    .time_copy = cz__cuda_time_copy,
    .compute_open = cz__compute_cuda_open,
    .ns_gemms = cz__cuda_ns_gemms,
    .nccl_available = nccl_available,
    .plane_nccl_open = plane_open,
    .plane_nccl_wrap = plane_wrap,
    .plane_nccl_reserve = cz__plane_nccl_reserve,
};

__attribute__((visibility("default"))) const cz_gpu_api *
cz_gpu_plugin_entry(const cz_gpu_host *h, const char *abi, const char **why)
{
    if (!h || h->version != CZ_GPU_API_VERSION || !abi || strcmp(abi, CZ_GPU_ABI) != 0) {
        if (why)
            *why = CZ_GPU_ABI;
        return NULL;
    }
    host = h;
    cz__cuda_memory_init(h);
    return &api;
}
