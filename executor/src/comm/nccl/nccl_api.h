/*
 * nccl_api.h — NCCL, loaded at run time (nccl_api.c).
 *
 * The plugin does not link libnccl: a machine with cuBLAS but no NCCL still runs the cuda
 * compute backend (with the mpi or self planes), and the nccl plane reports what is missing
 * and where the plugin looked instead of the whole plugin failing to load. The functions the
 * plane calls are resolved with dlsym into cz_nccl_fn when the first plane opens.
 *
 * Each NCCL name used below is a macro over that table, so the plane reads as NCCL's API and
 * tools/check_gpu_status.py sees every call by its name. The macros are defined after nccl.h,
 * whose prototypes they would otherwise rename: include nccl.h only through this header.
 */
#ifndef CZ_NCCL_API_H
#define CZ_NCCL_API_H

#include "nccl_plan.h"

#include <nccl.h>
#include <stddef.h>

/* The functions' result type under a name tools/check_gpu_status.py does not read as a call. */
typedef ncclResult_t cz_nccl_rc;

typedef struct cz_nccl_fns {
    cz_nccl_rc (*GetVersion)(int *version);
    const char *(*GetErrorString)(ncclResult_t result);
    cz_nccl_rc (*GetUniqueId)(ncclUniqueId *id);
    cz_nccl_rc (*CommInitRankConfig)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                     ncclConfig_t *config);
    cz_nccl_rc (*CommSplit)(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                            ncclConfig_t *config);
    cz_nccl_rc (*CommFinalize)(ncclComm_t comm);
    cz_nccl_rc (*CommDestroy)(ncclComm_t comm);
    cz_nccl_rc (*CommAbort)(ncclComm_t comm);
    cz_nccl_rc (*CommGetAsyncError)(ncclComm_t comm, ncclResult_t *state);
    cz_nccl_rc (*CommCount)(const ncclComm_t comm, int *count);
    cz_nccl_rc (*CommUserRank)(const ncclComm_t comm, int *rank);
    cz_nccl_rc (*AllReduce)(const void *send, void *recv, size_t count, ncclDataType_t t,
                            ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
    cz_nccl_rc (*Reduce)(const void *send, void *recv, size_t count, ncclDataType_t t,
                         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
    cz_nccl_rc (*ReduceScatter)(const void *send, void *recv, size_t count, ncclDataType_t t,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
    cz_nccl_rc (*AllGather)(const void *send, void *recv, size_t count, ncclDataType_t t,
                            ncclComm_t comm, cudaStream_t stream);
    cz_nccl_rc (*Broadcast)(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                            ncclComm_t comm, cudaStream_t stream);
    cz_nccl_rc (*Send)(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                       cudaStream_t stream);
    cz_nccl_rc (*Recv)(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                       cudaStream_t stream);
    cz_nccl_rc (*GroupStart)(void);
    cz_nccl_rc (*GroupEnd)(void);
} cz_nccl_fns;

extern cz_nccl_fns cz_nccl_fn;

/* Loads libnccl.so.2 once (the system's search, then each of dirs: '\0'-separated, ending in
 * an empty string) and resolves cz_nccl_fn. Returns 1 when NCCL is usable; else 0 with why
 * (what is missing, where the plugin looked, or a version it cannot use). *version is
 * ncclGetVersion's, path the file loaded (either may be NULL). Later calls return the first
 * call's answer. */
int cz__nccl_load(const char *dirs, char *why, size_t len, int *version, char *path, size_t plen);

#define ncclGetVersion cz_nccl_fn.GetVersion
#define ncclGetErrorString cz_nccl_fn.GetErrorString
#define ncclGetUniqueId cz_nccl_fn.GetUniqueId
#define ncclCommInitRankConfig cz_nccl_fn.CommInitRankConfig
#define ncclCommSplit cz_nccl_fn.CommSplit
#define ncclCommFinalize cz_nccl_fn.CommFinalize
#define ncclCommDestroy cz_nccl_fn.CommDestroy
#define ncclCommAbort cz_nccl_fn.CommAbort
#define ncclCommGetAsyncError cz_nccl_fn.CommGetAsyncError
#define ncclCommCount cz_nccl_fn.CommCount
#define ncclCommUserRank cz_nccl_fn.CommUserRank
#define ncclAllReduce cz_nccl_fn.AllReduce
#define ncclReduce cz_nccl_fn.Reduce
#define ncclReduceScatter cz_nccl_fn.ReduceScatter
#define ncclAllGather cz_nccl_fn.AllGather
#define ncclBroadcast cz_nccl_fn.Broadcast
#define ncclSend cz_nccl_fn.Send
#define ncclRecv cz_nccl_fn.Recv
#define ncclGroupStart cz_nccl_fn.GroupStart
#define ncclGroupEnd cz_nccl_fn.GroupEnd

#endif /* CZ_NCCL_API_H */
