/*
 * comm_callbacks.h — the "callbacks" planes (comm_callbacks.c): the caller's host collectives
 * (cz_comm_callbacks, canzona_exec.h) as a control plane and as data planes. Opened through
 * comm.c; the control plane also serves the nccl backend's bootstrap.
 */
#ifndef CZ_COMM_CALLBACKS_H
#define CZ_COMM_CALLBACKS_H

#include "comm.h"
#include "cz_format.h"

/* Checks the callbacks (version, the three functions, the world's size and rank). */
int cz__callbacks_check(const cz_comm_callbacks *cb, cz_error *err);
/* The control plane over the world group's all_reduce. */
int cz__ctrl_callbacks_open(cz_ctrl *c, const cz_comm_callbacks *cb, cz_error *err);
/* The data plane of a group of the callbacks (CZ_COMM_WORLD, or CZ_COMM_DP/CZ_COMM_TP of a job
 * that has them: size and rank are then the group's, which the callbacks cannot tell). */
int cz__plane_callbacks_open(cz_plane *p, const cz_comm_callbacks *cb, cz_comm_group group,
                             int size, int rank, cz_error *err);
/* Reserves the DP plane's reduce-scatter buffer for the plan's largest bucket, at create, and
 * on a subset's first member what its reductions gather: at most 64 MiB however many members
 * the subset has (comm_callbacks.c, CB_GATHER_BYTES). */
int cz__plane_callbacks_reserve(cz_plane *p, const cz_plan *plan, cz_error *err);
/* The scratch bytes plane p holds now (the reduce-scatter copy and the gathered chunks). */
size_t cz__plane_callbacks_scratch(const cz_plane *p);

#endif /* CZ_COMM_CALLBACKS_H */
