/*
 * gpu_plugin.h — the seam between libcanzona-exec and its GPU plugin, libcanzona-cuda.so.
 *
 * The GPU backends (the "cuda" compute backend: CUDA kernels, cuBLAS and cuSOLVER; the "nccl"
 * data plane) are built into a plugin that the executor loads with dlopen() the first time a
 * job asks for one of them (gpu_loader.c). So libcanzona-exec, canzona-bench and every CPU-only
 * job start on a machine without the NVIDIA libraries, and a GPU job gets a message naming
 * the library that is missing and the folders searched, not a loader failure before main().
 *
 * The plugin carries the CUDA runtime statically (one runtime, whatever the job links), needs
 * cuBLAS and cuSOLVER (the loader finds and loads them first: the CUDA toolkit, the system, or
 * the nvidia-* Python wheels beside PyTorch) and loads NCCL itself when a plane needs it. It
 * exports one symbol, CZ_GPU_ENTRY, which returns the table below. Plugin and library must come
 * from the same build: the entry refuses another build's ABI string.
 */
#ifndef CZ_GPU_PLUGIN_H
#define CZ_GPU_PLUGIN_H

#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "ns_plan.h"

#include <stddef.h>
#include <stdint.h>

/* What the executor asks of the cuda compute backend when it opens it. */
typedef struct cz_cuda_options {
    /* The job's cudaStream_t to order the step on; NULL = a stream of the backend's own, which
     * every step orders after the job's default streams (step_begin, step_end). */
    void *stream;
    /* Allocate with cudaMallocManaged instead of cudaMalloc, so that a host-driven data plane
     * (MPI) can read and write the executor's buffers: the host-staged combination of CUDA
     * compute with the MPI data plane. */
    int managed;
    /* Precision of the Newton-Schulz GEMMs. */
    cz_ns_precision ns_precision;
    /* The symmetric form of the Newton-Schulz products (ns_plan.h): CZ_NS_SYM_AUTO (0, the
     * executor's) = where cz__ns_use_syrk says it pays; OFF/ON force it (canzona-bench ns). */
    cz_ns_sym_mode ns_sym;
} cz_cuda_options;

/* What the machine has, as the GPU check prints it. Versions are the libraries' own encodings:
 * CUDA 1000*major + 10*minor; cuBLAS and cuSOLVER 10000*major + 100*minor + patch; NCCL
 * NCCL_VERSION_CODE (10000*major + 100*minor + patch for 2.9 and later). 0 = unknown. */
typedef struct cz_gpu_versions {
    int driver, runtime, runtime_built;
    int cublas, cusolver;
    int nccl, nccl_built; /* nccl 0: not loaded (nccl_why says why) */
    int device_count;
    char device[256]; /* device 0 */
    int cc_major, cc_minor, sm_count;
    size_t memory_bytes;
    char cublas_path[512], cusolver_path[512], nccl_path[512]; /* the files loaded */
    char nccl_why[512];
} cz_gpu_versions;

/* What the executor lends the plugin. */
typedef struct cz_gpu_host {
    int version; /* CZ_GPU_API_VERSION */
    /* The executor's allocator (alloc.c), so that cz__exec_alloc_count covers the plugin. */
    void *(*malloc)(size_t bytes);
    void *(*calloc)(size_t n, size_t size);
    void (*free)(void *p);
    /* Folders to search for NVIDIA libraries the system's search does not find (NCCL), each
     * ending in '\0', the list ending in an empty string; the loader's list. */
    const char *search_dirs;
} cz_gpu_host;

/* 2: cz_ns_coeffs (ns_gemms) became a set of one triple per iteration. */
#define CZ_GPU_API_VERSION 2
typedef struct cz_gpu_api {
    int version; /* CZ_GPU_API_VERSION */

    /* ---- the device ---- */
    /* 1 when a CUDA device is usable; else 0 and why says the runtime's reason. */
    int (*device_present)(char *why, size_t len);
    int (*versions)(cz_gpu_versions *out, cz_error *err);
    int (*device_count)(int *count, cz_error *err);
    int (*set_device)(int device, cz_error *err);
    /* Device memory for the job's side (the bench, the tests): cudaMalloc / cudaFree. */
    int (*mem_alloc)(void **p, size_t bytes, cz_error *err);
    void (*mem_free)(void *p);
    /* Waits for the whole device, then copies bytes (cudaMemcpyDefault). */
    int (*copy)(void *dst, const void *src, size_t bytes, cz_error *err);
    int (*synchronize)(cz_error *err);
    /* Device allocations (cudaMalloc, cudaMallocManaged, cudaHostAlloc) the backends have made
     * since the plugin was loaded: the GPU check shows that a step makes none. */
    uint64_t (*alloc_count)(void);
    /* The device's free memory in bytes (cudaMemGetInfo). */
    int (*mem_free_bytes)(size_t *out, cz_error *err);
    /* What a job does before a step: copies bytes between two device buffers on the legacy
     * default stream and returns without waiting, the stream first held hold_s seconds by a
     * host callback (tests: a step that is not ordered after the job's stream reads what was
     * there before). Device to device, because a copy from pageable host memory would make
     * the host wait for the stream. */
    int (*job_write)(void *dst, const void *src, size_t bytes, double hold_s, cz_error *err);

    /* ---- measurements for the calibration file (cuda/calibrate.c): medians of reps timed
     * calls after a warm-up, on a stream of their own ---- */
    /* Seconds per (strided-batched when batch > 1) cuBLAS GEMM of m x n x k, column-major, on
     * random operands: bf16 inputs with fp32 accumulation and output, or fp32 (no TF32). */
    int (*time_gemm)(int64_t m, int64_t n, int64_t k, int batch, int bf16, int reps, double *sec,
                     cz_error *err);
    /* Seconds per launch of a one-element kernel, launched back to back. */
    int (*time_launch)(int reps, double *sec, cz_error *err);
    /* Seconds per copy of bytes between host and device (to_device, or back), from pinned or
     * pageable host memory. */
    int (*time_copy)(size_t bytes, int to_device, int pinned, int reps, double *sec, cz_error *err);

    /* ---- the cuda compute backend ---- */
    int (*compute_open)(cz_compute *c, const cz_cuda_options *o, cz_error *err);
    /* Only the cuBLAS calls of ns_batched (canzona-bench ns's reference for the GEMMs). */
    int (*ns_gemms)(cz_compute *c, float *x, int batch, int64_t rows, int64_t cols,
                    const cz_ns_coeffs *k, int steps, float *work, cz_error *err);

    /* ---- the nccl data plane (comm_nccl.h) ---- */
    /* 1 when NCCL is loaded (loading it on the first call); else 0 and why says what is
     * missing and where the plugin looked. */
    int (*nccl_available)(char *why, size_t len);
    int (*plane_nccl_open)(cz_plane *p, cz_ctrl *ctrl, double timeout_s, cz_error *err);
    int (*plane_nccl_wrap)(cz_plane *p, const void *handle, double timeout_s, cz_error *err);
    int (*plane_nccl_reserve)(cz_plane *p, const cz_plan *plan, cz_error *err);
} cz_gpu_api;

/* The plugin's one exported function: the table, or NULL when abi (the caller's CZ_GPU_ABI)
 * is not the plugin's own (then *why, when not NULL, says which build the plugin is). */
typedef const cz_gpu_api *(*cz_gpu_entry_fn)(const cz_gpu_host *host, const char *abi,
                                             const char **why);
#define CZ_GPU_ENTRY "cz_gpu_plugin_entry"

/* Identifies the build: the project version and the versions of every table that crosses the
 * seam (the plugin's structs must be laid out exactly as the library's). */
#define CZ_GPU_STR2(x) #x
#define CZ_GPU_STR(x) CZ_GPU_STR2(x)
#define CZ_GPU_ABI                                                                                 \
    CZ_VERSION "/gpu" CZ_GPU_STR(CZ_GPU_API_VERSION) "/ops" CZ_GPU_STR(                            \
        CZ_COMPUTE_OPS_VERSION) "/plane" CZ_GPU_STR(CZ_DATA_PLANE_VERSION)

/* The cuda compute backend with options (compute.c, the seam's dispatch, through the loader). */
int cz__compute_open_cuda(cz_compute *c, const cz_cuda_options *o, cz_error *err);

/* ---- the loader (gpu_loader.c) ---- */
/* 1 when this build has the GPU plugin (built with a CUDA toolkit); the executor then loads it
 * on demand. */
int cz__gpu_built(void);
/* Loads the plugin once per process (later calls return the same table, or the same error):
 * the NVIDIA libraries it needs are searched for and loaded first. CZ_EUNSUPPORTED, with what
 * is missing and every folder searched, when it cannot be loaded. */
int cz__gpu_load(const cz_gpu_api **out, cz_error *err);
/* The folders the loader searches for the NVIDIA libraries, in order, for messages and the GPU
 * check ('\0'-separated, ending in an empty string; never NULL). */
const char *cz__gpu_search_dirs(void);

/* dlopen(path, RTLD_NOW | RTLD_LOCAL) with each library it needs that the system's search
 * does not find looked for in dirs ('\0'-separated, ending in an empty string) and loaded
 * first (RTLD_GLOBAL); NULL and CZ_EUNSUPPORTED naming the missing library and the folders
 * searched. The loader's way in, exposed for its tests. */
void *cz__gpu_dlopen(const char *path, const char *dirs, cz_error *err);

#endif /* CZ_GPU_PLUGIN_H */
