/*
 * check.h — every CUDA runtime, cuBLAS and NCCL call of the GPU backends goes through one of
 * these, so that no status is ignored: tools/check_gpu_status.py (a ctest) fails on a call
 * outside them, and the functions are warn_unused_result, so a wrapped status that is then
 * dropped is a compile error under -Werror.
 *
 *   CZ_CU(err, call)    CUDA runtime call; CZ_OK, or CZ_EIO with the call and CUDA's reason
 *   CZ_BLAS(err, call)  cuBLAS call; likewise with cuBLAS's status string
 *   CZ_NCCL(err, call)  NCCL call (comm_nccl.c); likewise with NCCL's reason
 *   CZ_SOLVER(err, call) cuSOLVER call (compute_cuda_linalg.c); likewise with the status name
 *   CZ_CU_RC(call)      the raw cudaError_t as an int, for callers that branch on it
 *                       (cudaEventQuery's cudaErrorNotReady, the kernel launchers)
 *   CZ_NCCL_RC(call)    the raw ncclResult_t as an int (ncclInProgress of a non-blocking
 *                       communicator, settled by comm_nccl.c)
 *   CZ_NCCL_ON(h, err, call)  (comm_nccl.c) an NCCL call on a plane's communicator, an
 *                       ncclInProgress status polled until it settles
 */
#ifndef CZ_CUDA_CHECK_H
#define CZ_CUDA_CHECK_H

#if defined(__GNUC__)
#define CZ_MUST_USE __attribute__((warn_unused_result))
#else
#define CZ_MUST_USE
#endif

static inline CZ_MUST_USE int cz_cu_rc(int rc)
{
    return rc;
}
#define CZ_CU_RC(call) cz_cu_rc((int)(call))
#define CZ_NCCL_RC(call) cz_cu_rc((int)(call))

#ifndef __CUDACC__
#include "canzona_format.h"

CZ_MUST_USE int cz__cuda_status(int rc, const char *call, const char *file, int line,
                                cz_error *err);
CZ_MUST_USE int cz__cublas_status(int rc, const char *call, const char *file, int line,
                                  cz_error *err);
CZ_MUST_USE int cz__nccl_status(int rc, const char *call, const char *file, int line,
                                cz_error *err);
CZ_MUST_USE int cz__cusolver_status(int rc, const char *call, const char *file, int line,
                                    cz_error *err);
#define CZ_CU(err, call) cz__cuda_status((int)(call), #call, __FILE__, __LINE__, (err))
#define CZ_BLAS(err, call) cz__cublas_status((int)(call), #call, __FILE__, __LINE__, (err))
#define CZ_NCCL(err, call) cz__nccl_status((int)(call), #call, __FILE__, __LINE__, (err))
#define CZ_SOLVER(err, call) cz__cusolver_status((int)(call), #call, __FILE__, __LINE__, (err))
#endif

#endif /* CZ_CUDA_CHECK_H */
