/*
 * comm_nccl.h — the "nccl" data plane (nccl/comm_nccl.c), built with CZ_HAVE_NCCL. It runs on
 * device memory and needs the cuda compute backend (its events and stream).
 */
#ifndef CZ_COMM_NCCL_H
#define CZ_COMM_NCCL_H

#include "comm.h"
#include "cz_format.h"

/* A data plane over a new NCCL communicator of the control plane's ranks: rank 0 makes the
 * ncclUniqueId and the control plane carries it to the others (collective over ctrl). The
 * communicator is created non-blocking and polled for at most timeout_s (also the plane's
 * limit on later waits, cz__nccl_timeout); the ranks agree on the outcome over ctrl, so that
 * every rank returns an error when any failed or timed out. The CUDA device must be selected
 * (cudaSetDevice) before. */
int cz__plane_nccl_open(cz_plane *p, cz_ctrl *ctrl, double timeout_s, cz_error *err);

/* A data plane (limit timeout_s on its waits) over the job's communicator at handle (a pointer to
 * an ncclComm_t), borrowed: never destroyed by the executor, but aborted (ncclCommAbort) when the
 * plane detects an asynchronous error or a timeout, as the plane's own would be. */
int cz__plane_nccl_wrap(cz_plane *p, const void *handle, double timeout_s, cz_error *err);

/* Allocates the scratch the padded forms of the plan's DP collectives need
 * (cz__nccl_plan_scratch with the plane's model constants), on the DP plane at create, so that
 * a step never allocates; a collective that would need more fails with CZ_EINTERNAL. */
struct cz_plan;
int cz__plane_nccl_reserve(cz_plane *p, const struct cz_plan *plan, cz_error *err);

#endif /* CZ_COMM_NCCL_H */
